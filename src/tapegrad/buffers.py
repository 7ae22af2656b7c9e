"""Work arrays that the differentiated code allocates: traced constants, so that writes into them record.

Scientific NumPy code preallocates and fills::

    def rhs(t, y):
        dydt = np.zeros(3)
        dydt[0] = -k1 * y[0]
        dydt[1] = k1 * y[0] - k2 * y[1]
        ...

A plain ``np.zeros(3)`` cannot hold a traced value: NumPy copies the value's
memory into it and the gradient is lost (tapegrad refuses that store with an
error).  So while a tape records in this thread, ``np.zeros``, ``np.ones``,
``np.empty``, ``np.full`` and their ``_like`` forms (of a plain prototype: a
traced one is already handled by its rule), called from the differentiated
code, return the array they made as a *traced constant* of that tape
(:meth:`tapegrad.tape.Tape.constant`): its derivative is zero, the same values
flow, and every write into it (``dydt[0] = ...``, ``out[i] += ...``,
``np.add(a, b, out=buf)``) is recorded like a write into ``np.zeros_like(x)``.

Only floating-point and complex results become traced (an integer or boolean
array carries no gradient: it stays NumPy's, for indices and masks), and only
for calls from outside NumPy, SciPy, tapegrad and the array libraries of
:data:`LIBRARIES` (their own work arrays are not the user's, and they may test
``type(a) is np.ndarray``).  Calls in a thread that records nothing, or made
while no tape records in this thread, get NumPy's plain arrays.

A traced constant behaves as the array it holds wherever a tracer goes; passed to
compiled code without a rule it is handed over as its plain values (it carries no
gradient until a traced value is written into it).  What stays out of reach: an
array made by other means (``x0.copy()``, ``np.array([0.0, 0.0])``, an argument)
is plain, and a traced store into it is refused as before.

The thread's stack of recording tapes lives here: the transforms push the tape
they record on (:func:`pushed`), and the innermost one holds the buffers.
"""

from __future__ import annotations

import dis
import sys
import threading
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

__all__ = ["ALLOCATORS", "LIBRARIES", "allocating", "innermost", "pop", "push"]

#: numpy's allocating functions whose results become traced constants (see the module docstring).
ALLOCATORS = ("zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like")

#: Top-level packages whose own calls keep NumPy's plain arrays.
LIBRARIES = frozenset({
    "numpy", "scipy", "tapegrad", "dask", "distributed", "xarray", "pint", "pandas", "sklearn",
    "autoray", "array_api_strict", "array_api_compat", "cupy", "jax", "torch", "matplotlib", "numba",
})

_STATE = threading.local()


def push(tape: Any) -> None:
    """Make ``tape`` this thread's innermost recording tape (until :func:`pop`)."""
    try:
        _STATE.tapes.append(tape)
    except AttributeError:
        _STATE.tapes = [tape]


def pop() -> None:
    """Undo the last :func:`push` of this thread."""
    _STATE.tapes.pop()


def innermost() -> Optional[Any]:
    """This thread's innermost recording tape, or ``None``."""
    tapes = getattr(_STATE, "tapes", None)
    return tapes[-1] if tapes else None


# (code, offset of a call) -> whether that call's callee is loaded under an allocator's name.
_SITES: Dict[Tuple[Any, int], bool] = {}
_MAX_SITES = 1 << 14


def _calls_allocator(code: Any, offset: int) -> bool:
    """Whether the call that ``code`` makes at ``offset`` is ``np.zeros(...)`` or the like, as written.

    The wrapper's Python caller is not always the code that called it: compiled code
    has no frame, so when a Cython module (NumPy's random ``Generator``) calls
    ``np.empty`` the nearest frame is the user's line ``rng.standard_normal(n)``.  Such
    code needs a real ndarray (a tracer would be read as one: a crash).  The call the
    frame is making is found by its source position: the callee is the last name loaded
    from the same start (``np.zeros`` in ``np.zeros(n)``, ``standard_normal`` in
    ``rng.standard_normal(n)``).  Without positions (``-X no_debug_ranges``) the answer
    is no: NumPy's plain array, as before.
    """
    key = (code, offset)
    known = _SITES.get(key)
    if known is None:
        if len(_SITES) >= _MAX_SITES:
            _SITES.clear()
        known = _SITES[key] = _callee_name(code, offset) in ALLOCATORS
    return known


def _callee_name(code: Any, offset: int) -> Optional[str]:
    instructions = list(dis.get_instructions(code))
    # The frame's offset may point into the call's inline cache (Python 3.11): the call is
    # the last instruction at or before it.
    call = None
    for instruction in instructions:
        if instruction.offset > offset:
            break
        call = instruction
    if call is None or "CALL" not in call.opname or call.positions is None or call.positions.col_offset is None:
        return None
    start = (call.positions.lineno, call.positions.col_offset)
    name = None
    for instruction in instructions:
        if instruction.offset >= call.offset:
            break
        where = instruction.positions
        if (
            instruction.opname.startswith("LOAD_")
            and instruction.opname != "LOAD_CONST"
            and where is not None
            and (where.lineno, where.col_offset) == start
        ):
            name = instruction.argval if isinstance(instruction.argval, str) else None
    return name


def allocating(allocate: Callable) -> Callable:
    """``allocate`` (a numpy allocator, or tapegrad's wrapper of one) returning traced constants as above."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        out = allocate(*args, **kwargs)
        if type(out) is not np.ndarray or out.dtype.kind not in "fc":
            return out  # a tracer already (a traced prototype or fill value), or no gradient to carry
        tapes = getattr(_STATE, "tapes", None)
        if not tapes:
            return out
        tape = tapes[-1]
        if not tape.recording:
            return out
        caller = sys._getframe(1)
        if (caller.f_globals.get("__name__") or "").partition(".")[0] in LIBRARIES:
            return out
        if not _calls_allocator(caller.f_code, caller.f_lasti):
            return out  # compiled code in between (a Cython module's np.empty): it needs real memory
        return tape.constant(out)

    wrapper.__name__ = getattr(allocate, "__name__", "allocate")
    wrapper.__qualname__ = getattr(allocate, "__qualname__", wrapper.__name__)
    wrapper.__doc__ = getattr(allocate, "__doc__", None)
    wrapper.__module__ = getattr(allocate, "__module__", None) or "numpy"
    wrapper.__wrapped__ = allocate  # type: ignore[attr-defined]
    return wrapper
