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
``np.empty``, ``np.full``, their ``_like`` forms (of a plain prototype: a traced
one is already handled by its rule), ``np.eye`` and ``np.identity`` (a rotation
matrix filled entry by entry), called from the differentiated
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
compiled code, or to a NumPy function without a rule (:func:`call_on_constants`), it
is handed over as its plain values (it carries no gradient until a traced value is
written into it).  What stays out of reach: an
array made by other means (``x0.copy()``, ``np.array([0.0, 0.0])``, an argument)
is plain, and a traced store into it is refused as before.

The thread's stack of recording tapes lives here: the transforms push the tape
they record on (:func:`pushed`), and the innermost one holds the buffers.
"""

from __future__ import annotations

import dis
import sys
import threading
import types
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from .errors import UnsupportedFunctionError
from .names import function_name
from .tracer import ROUTES, Tracer

__all__ = ["ALLOCATORS", "LIBRARIES", "WRAPPERS", "allocating", "call_on_constants", "constant_values", "innermost", "pop", "push",
           "users_call"]

#: numpy's allocating functions whose results become traced constants (see the module docstring).
ALLOCATORS = ("zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like", "eye", "identity")

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


# (code, offset of a call) -> the name its callee is loaded under (None: unknown).
_SITES: Dict[Tuple[Any, int], Optional[str]] = {}
_MAX_SITES = 1 << 14


def users_call(frame: Any, names: Any) -> bool:
    """Whether ``frame`` is the differentiated code making a call written as one of ``names`` (``np.zeros(...)``).

    Not when ``frame`` belongs to a library (:data:`LIBRARIES`).  And the wrapper's
    Python caller is not always the code that called it: compiled code has no frame,
    so when a Cython module (NumPy's random ``Generator``) calls ``np.empty`` the
    nearest frame is the user's line ``rng.standard_normal(n)``.  Such code needs a
    real ndarray (a tracer would be read as one: a crash).  The call the frame is
    making is found by its source position: the callee is the last name loaded from
    the same start (``zeros`` in ``np.zeros(n)``, ``standard_normal`` in
    ``rng.standard_normal(n)``).  Without positions (``-X no_debug_ranges``) the
    answer is no: NumPy's plain array, as before.
    """
    if (frame.f_globals.get("__name__") or "").partition(".")[0] in LIBRARIES:
        return False
    return _callee_name_at(frame.f_code, frame.f_lasti) in names


def _callee_name_at(code: Any, offset: int) -> Optional[str]:
    key = (code, offset)
    try:
        return _SITES[key]
    except KeyError:
        if len(_SITES) >= _MAX_SITES:
            _SITES.clear()
        name = _SITES[key] = _callee_name(code, offset)
        return name


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


#: The wrappers by name, ``WRAPPERS.numpy_zeros``: where pickle finds them (see :func:`allocating`).
WRAPPERS = types.SimpleNamespace()


def allocating(allocate: Callable, name: str) -> Callable:
    """``allocate`` (``numpy.<name>``, or tapegrad's wrapper of it) returning traced constants as above.

    The wrapper is also ``WRAPPERS.numpy_<name>``, the name it pickles under: a Dask
    graph built while a tape records holds it, and pickle finds a function by its
    module and name (``numpy.zeros`` is NumPy's own again by then).
    """

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if name == "full_like" and len(args) > 1 and type(args[1]) is Tracer and type(args[0]) is not Tracer:
            # NumPy dispatches full_like on the prototype only: a traced fill would be copied
            # into a plain array.  The same array, as a constant of the fill's tape, filled by a write.
            filled = args[1]._tape.constant(np.zeros_like(args[0], *args[2:], **kwargs))
            filled[...] = args[1]
            return filled
        try:
            out = allocate(*args, **kwargs)
        except UnsupportedFunctionError:
            # ``like=tracer``: NumPy dispatches with the function it finds on the numpy
            # module now (this wrapper), which has no rule.  The array is made without it,
            # and the tracer's tape gets it as a constant, as ``np.zeros_like(x)`` would.
            like = kwargs.get("like")
            if type(like) is not Tracer:
                raise
            out = allocate(*args, **{k: v for k, v in kwargs.items() if k != "like"})
            if type(out) is np.ndarray and out.dtype.kind in "fc":
                return like._tape.constant(out)
            return out
        if type(out) is not np.ndarray or out.dtype.kind not in "fc":
            return out  # a tracer already (a traced prototype or fill value), or no gradient to carry
        tapes = getattr(_STATE, "tapes", None)
        if not tapes:
            return out
        tape = tapes[-1]
        if not tape.recording:
            return out
        if not users_call(sys._getframe(1), ALLOCATORS):
            return out  # a library's, or compiled code's in between (a Cython module's np.empty): real memory
        return tape.constant(out)

    wrapper.__name__ = f"numpy_{name}"
    wrapper.__qualname__ = f"WRAPPERS.numpy_{name}"
    # NumPy's own text: numpy.ma, imported for the first time inside a window, builds its
    # docstrings from numpy.empty's.  (Kept on WRAPPERS, not as module functions, so that
    # doctest does not collect NumPy's examples as tapegrad's.)
    wrapper.__doc__ = getattr(allocate, "__doc__", None)
    wrapper.__wrapped__ = allocate  # type: ignore[attr-defined]
    setattr(WRAPPERS, wrapper.__name__, wrapper)
    return wrapper


# ---------------------------------------------------------------------- functions without a rule
def call_on_constants(key: Any, args: tuple, kwargs: dict) -> Any:
    """A NumPy function (or ufunc method ``(ufunc, method)``) without a rule, called on tracers.

    When every tracer among the arguments is a tape constant (a work array that holds
    no traced value: ``np.frompyfunc(g, 1, 1)(np.ones(3))``), the call carries no
    gradient and gets their values, read-only: a function that writes into its
    arguments could otherwise change values that recorded nodes keep.  The result is
    plain.  Anything else raises :class:`~tapegrad.errors.UnsupportedFunctionError`.
    """
    name = function_name(key)
    found: list = []
    values = constant_values(args, found)
    options = constant_values(kwargs, found) if kwargs else kwargs
    if values is None or options is None or "out" in kwargs or not found:
        raise UnsupportedFunctionError(name)
    fun = getattr(key[0], key[1]) if type(key) is tuple else key
    try:
        return fun(*values, **options)
    except ValueError as exc:
        if "read-only" not in str(exc):
            raise
        raise UnsupportedFunctionError(name) from exc


def constant_values(obj: Any, found: list, copy: bool = False) -> Any:
    """``obj`` with each tracer (in lists, tuples and dicts) replaced by its constant value; ``None`` if one is not constant.

    The values are read-only views, or copies with ``copy``: recorded nodes may keep
    the same memory.  ``found`` collects the tracers replaced.
    """
    if type(obj) is Tracer:
        value = obj._constant()
        if value is None:
            return None
        found.append(obj)
        if type(value) is np.ndarray:
            if copy:
                return value.copy(order="K")
            value = value.view()
            value.flags.writeable = False
        return value
    if type(obj) is list or type(obj) is tuple:
        items = [constant_values(item, found, copy) for item in obj]
        if any(v is None and item is not None for v, item in zip(items, obj)):
            return None
        return type(obj)(items)
    if type(obj) is dict:
        items = {k: constant_values(v, found, copy) for k, v in obj.items()}
        if any(items[k] is None and v is not None for k, v in obj.items()):
            return None
        return items
    return obj


ROUTES.unsupported = call_on_constants
