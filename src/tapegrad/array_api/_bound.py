"""The namespace as the tracers of one tape see it.

``Tracer.__array_namespace__()`` returns a :class:`TapeNamespace`: the functions of
:mod:`tapegrad.array_api` itself, except that its creation functions (``zeros``,
``asarray`` of plain values, ``arange``, ``fft.fftfreq``, and NumPy's own
``array``, ``identity``, ``logspace``, ... reached through the namespace's
fallback to NumPy) return constants of that tape instead of ndarrays.
Array-API-generic code builds arrays with them and mixes them with the tracers
(``xpx.at(xp.zeros(n))[i].set(x)``), and SciPy refuses to mix array types.  Used directly, ``tapegrad.array_api`` returns plain
ndarrays for plain inputs.

All these views compare equal to each other and to the module (they are one
namespace), so ``array_namespace(x, y)`` of tracers of two tapes (nested
derivatives) finds a single namespace.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, FrozenSet

from ..array_types import as_array_type
from ..tracer import Tracer

__all__ = ["TapeNamespace"]

CREATION = frozenset(
    "arange asarray empty empty_like eye from_dlpack full full_like linspace meshgrid ones ones_like zeros "
    "zeros_like".split()
    # NumPy's own creation functions, reached through the namespace's fallback to NumPy
    + "array asanyarray ascontiguousarray asfortranarray asarray_chkfinite require identity tri logspace "
    "geomspace indices fromfunction fromiter frombuffer fromstring".split()
)
FFT_CREATION = frozenset({"fftfreq", "rfftfreq"})


def _on_tape(fun: Callable[..., Any], tape_ref: "weakref.ref") -> Callable[..., Any]:
    def create(*args: Any, **kwargs: Any) -> Any:
        out = fun(*args, **kwargs)
        tape = tape_ref()
        return out if tape is None or type(out) is Tracer else as_array_type(tape, out)

    create.__name__ = create.__qualname__ = fun.__name__
    create.__doc__ = fun.__doc__
    create.__wrapped__ = fun
    return create


class _View:
    """Attribute access forwarded to ``module``; its ``creation`` functions make constants of the tape."""

    def __init__(self, module: Any, tape: Any, creation: FrozenSet[str]) -> None:
        self.__dict__.update(_module=module, _tape_ref=weakref.ref(tape), _creation=creation)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._module, name)
        if name in self._creation:
            value = _on_tape(value, self._tape_ref)
        self.__dict__[name] = value  # module attributes do not change: look each up once
        return value

    def __dir__(self) -> list:
        return dir(self._module)

    def __repr__(self) -> str:
        return f"<{self._module.__name__} for the tracers of {self._tape_ref()!r}>"


class TapeNamespace(_View):
    """``tapegrad.array_api`` for the tracers of one tape (see the module docstring)."""

    def __init__(self, module: Any, fft: Any, tape: Any) -> None:
        super().__init__(module, tape, CREATION)
        self.__dict__["fft"] = _View(fft, tape, FFT_CREATION)

    def __eq__(self, other: Any) -> bool:
        return other is self._module or isinstance(other, TapeNamespace)

    def __hash__(self) -> int:
        return hash(self._module)
