"""tapegrad's array-API namespace: what ``Tracer.__array_namespace__()`` returns.

Array-API-generic code (SciPy with ``SCIPY_ARRAY_API=1``, scikit-learn with
``array_api_dispatch=True``, array-api-extra) asks an array for its namespace
and calls ``xp.<function>`` on it.  This module is a door into NumPy, not a
second engine: every function is NumPy's own function, or a thin adapter from
the standard's signature to NumPy's (``sort(descending=)``, ``clip(min=, max=)``,
``asarray`` of nested lists of tracers, ``finfo`` of a tracer), so tracers reach
the same derivative rules as ordinary NumPy code through NEP 13/18.

Used directly, plain (non-tracer) inputs go to NumPy unchanged and give plain
ndarrays; tracers in, tracers out.  ``Tracer.__array_namespace__()`` returns
this module as seen from the tracer's tape (:mod:`tapegrad.array_api._bound`):
there, creation functions give constants of that tape, and constant-valued
results on its tracers (masks, indices) stay tracers, because array-API code
refuses to mix array types.  Dtype objects are NumPy's, the only device is
``"cpu"``.  Extensions: ``linalg``, ``fft``, and ``special`` (SciPy's ufuncs,
which SciPy looks up before it falls back to ``np.asarray``).

Beyond the standard, every other NumPy attribute is reachable too, as NumPy
itself: ``xp.pad``, ``xp.einsum``, ``xp.gradient``, ``xp.transpose``,
``xp.linalg.norm``, ``xp.lib.stride_tricks`` (what xarray, which looks
functions up in an array's namespace, calls).  They keep NumPy's signatures and
reach the tracer through NEP 13/18 like any NumPy call; where a name is the
standard's, the standard's adapter above wins.  ``special`` has no such
fallback: SciPy asks ``hasattr(xp.special, name)`` to choose between a native
function and its own generic code.
"""

from __future__ import annotations

import builtins
from typing import Any, Optional

import numpy as np

from .. import array_types as _array_types
from ..dispatch import strip
from ..tracer import Tracer
from . import _fft as fft
from . import _linalg as linalg  # noqa: F401  (the namespace's linalg extension)
from . import _special as special  # noqa: F401  (xp.special, read by SciPy)
from ._fallback import numpy_fallback
from ._info import __array_namespace_info__  # noqa: F401

__array_api_version__ = "2024.12"
_VERSIONS = ("2021.12", "2022.12", "2023.12", "2024.12")

# ---------------------------------------------------------------------------- constants, dtypes
e, inf, nan, pi, newaxis = np.e, np.inf, np.nan, np.pi, np.newaxis
# NumPy's scalar types, exactly as NumPy's own namespace spells them: they compare
# equal to the dtypes of arrays and tracers (``x.dtype == xp.float64``).
bool = np.bool  # noqa: A001
int8, int16, int32, int64 = np.int8, np.int16, np.int32, np.int64
uint8, uint16, uint32, uint64 = np.uint8, np.uint16, np.uint32, np.uint64
float32, float64, complex64, complex128 = np.float32, np.float64, np.complex64, np.complex128

# ---------------------------------------------------------------------------- NumPy's own functions
# NumPy 2 implements these with the standard's signatures; each dispatches to a tracer.
_SAME = """
abs acos acosh add asin asinh atan atan2 atanh bitwise_and bitwise_invert bitwise_left_shift
bitwise_or bitwise_right_shift bitwise_xor ceil conj copysign cos cosh divide equal exp expm1
floor floor_divide greater greater_equal hypot imag isfinite isinf isnan less less_equal log
log1p log2 log10 logaddexp logical_and logical_not logical_or logical_xor maximum minimum
multiply negative nextafter not_equal positive pow real reciprocal remainder round sign signbit
sin sinh square sqrt subtract tan tanh trunc
arange empty empty_like eye from_dlpack full full_like linspace meshgrid ones ones_like tril triu
zeros zeros_like isdtype
matmul matrix_transpose tensordot vecdot
broadcast_arrays broadcast_shapes broadcast_to concat expand_dims flip moveaxis permute_dims repeat
reshape roll squeeze stack tile unstack
argmax argmin count_nonzero nonzero where
cumulative_prod cumulative_sum max mean min prod std sum var
all any diff isin
""".split()
globals().update({name: getattr(np, name) for name in _SAME})


# ---------------------------------------------------------------------------- adapters
def _as_dtype_arg(x: Any) -> Any:
    """A tracer stands for its dtype in dtype queries (``finfo(x)``, ``result_type``)."""
    return x.dtype if type(x) is Tracer else x


def _check_device(device: Any) -> None:
    if device is not None and device != "cpu":
        raise ValueError(f"tapegrad arrays live on the CPU; unsupported device {device!r}")


def _has_tracer(obj: Any) -> builtins.bool:
    if type(obj) is Tracer:
        return True
    if isinstance(obj, (list, tuple)):
        return builtins.any(_has_tracer(o) for o in obj)
    return False


def _stack_nested(obj: Any, dtype: Any) -> Any:
    """Build one traced array from a nested sequence holding tracers (NumPy's np.array)."""
    if isinstance(obj, (list, tuple)):
        if not obj:
            return np.asarray(obj, dtype=dtype)
        return np.stack([_stack_nested(o, dtype) for o in obj])
    if type(obj) is Tracer:
        return obj if dtype is None else np.astype(obj, dtype)
    return np.asarray(obj, dtype=dtype)


def asarray(
    obj: Any, /, *, dtype: Optional[Any] = None, device: Optional[Any] = None, copy: Optional[builtins.bool] = None
) -> Any:
    """Convert ``obj`` to an array; tracers (alone or in nested lists) stay traced."""
    _check_device(device)
    if type(obj) is Tracer:
        if dtype is not None and np.dtype(dtype) != obj.dtype:
            if copy is False:
                raise ValueError("asarray(copy=False) cannot change the dtype without a copy")
            return np.astype(obj, dtype)
        return np.copy(obj) if copy else obj
    if _has_tracer(obj):
        if copy is False:
            raise ValueError("asarray(copy=False) cannot build an array from a sequence without a copy")
        if dtype is None:
            dtype = np.result_type(*_leaves(obj))
        return _stack_nested(obj, dtype)
    return np.asarray(obj, dtype=dtype, copy=copy)


def _leaves(obj: Any) -> list:
    if isinstance(obj, (list, tuple)):
        return [leaf for o in obj for leaf in _leaves(o)]
    return [_as_dtype_arg(obj)]


def astype(x: Any, dtype: Any, /, *, copy: builtins.bool = True, device: Optional[Any] = None) -> Any:
    """Cast ``x`` to ``dtype`` (casting a complex tracer to real keeps the real part, as NumPy)."""
    _check_device(device)
    return np.astype(x, dtype, copy=copy)


def finfo(type: Any, /) -> Any:  # noqa: A002  (the standard's parameter name)
    """Machine limits of a floating dtype, or of the dtype of an array or tracer."""
    return np.finfo(_as_dtype_arg(type))


def iinfo(type: Any, /) -> Any:  # noqa: A002
    """Machine limits of an integer dtype, or of the dtype of an array or tracer."""
    return np.iinfo(_as_dtype_arg(type))


def result_type(*arrays_and_dtypes: Any) -> np.dtype:
    """NumPy's promotion of the given arrays (tracers included), dtypes and Python scalars."""
    return np.result_type(*(_as_dtype_arg(a) for a in arrays_and_dtypes))


def can_cast(from_: Any, to: Any, /) -> builtins.bool:
    """Whether ``from_`` (a dtype, an array or a tracer) casts safely to ``to``."""
    return np.can_cast(_as_dtype_arg(from_), to)


def clip(x: Any, /, min: Any = None, max: Any = None) -> Any:  # noqa: A002
    """Clamp ``x`` to ``[min, max]`` (either bound may be ``None``)."""
    if min is None and max is None:
        return np.copy(x) if type(x) is Tracer else np.asarray(x).copy()
    return np.clip(x, min, max)


def sort(x: Any, /, *, axis: int = -1, descending: builtins.bool = False, stable: builtins.bool = True) -> Any:
    """Sorted copy of ``x`` along ``axis``; ``descending`` reverses the order."""
    out = np.sort(x, axis=axis, stable=stable or None)
    return np.flip(out, axis=axis) if descending else out


def argsort(x: Any, /, *, axis: int = -1, descending: builtins.bool = False, stable: builtins.bool = True) -> Any:
    """Indices that sort ``x``; a stable descending sort keeps equal elements in input order."""
    if not descending:
        return np.argsort(x, axis=axis, stable=stable or None)
    # Sorting the reversed input ascending and mapping back keeps ties in their original
    # order once the result is reversed again.
    n = np.shape(x)[axis] if np.ndim(x) else 1
    idx = np.argsort(np.flip(x, axis=axis), axis=axis, stable=True)
    return np.flip(n - 1 - idx, axis=axis)


# The standard leaves the order of unique values open; NumPy 2.3+ returns them in hash
# order, while array-api-compat's NumPy namespace (what scikit-learn and SciPy see for
# NumPy arrays) returns them sorted, and those libraries rely on it (searchsorted on
# ``classes_``). tapegrad's namespace stands in for NumPy there: sorted, like compat.
_UNIQUE_TYPES = {name: type(getattr(np, name)(np.zeros(1))) for name in ("unique_all", "unique_counts", "unique_inverse")}


def _unique_parts(x: Any) -> tuple:
    values, index, inverse, counts = np.unique(
        x, return_index=True, return_inverse=True, return_counts=True, equal_nan=False
    )
    return values, index, np.reshape(inverse, np.shape(x)), counts


def unique_values(x: Any, /) -> Any:
    """The sorted unique values of ``x`` (NaNs each kept, as the standard asks)."""
    return np.unique(x, equal_nan=False)


def unique_counts(x: Any, /) -> Any:
    values, _, _, counts = _unique_parts(x)
    return _UNIQUE_TYPES["unique_counts"](values, counts)


def unique_inverse(x: Any, /) -> Any:
    values, _, inverse, _ = _unique_parts(x)
    return _UNIQUE_TYPES["unique_inverse"](values, inverse)


def unique_all(x: Any, /) -> Any:
    values, index, inverse, counts = _unique_parts(x)
    return _UNIQUE_TYPES["unique_all"](values, index, inverse, counts)


def _index(indices: Any) -> Any:
    """Integer indices as a plain array: they carry no gradient, and NumPy's gather rules
    expect plain indices (a traced integer array would route the gather back to them)."""
    return strip(indices) if type(indices) is Tracer and indices.dtype.kind in "iub" else indices


def take(x: Any, indices: Any, /, *, axis: Optional[int] = None) -> Any:
    """Values of ``x`` at ``indices`` along ``axis`` (NumPy's take)."""
    return np.take(x, _index(indices), axis=axis)


def take_along_axis(x: Any, indices: Any, /, *, axis: int = -1) -> Any:
    """Pick values of ``x`` at ``indices`` along ``axis`` (NumPy's take_along_axis)."""
    return np.take_along_axis(x, _index(indices), axis)


def searchsorted(x1: Any, x2: Any, /, *, side: str = "left", sorter: Any = None) -> Any:
    """Insertion indices of ``x2`` into the sorted ``x1`` (a constant)."""
    return np.searchsorted(x1, x2, side=side, sorter=_index(sorter))


# ---------------------------------------------------------------------------- the rest of NumPy
# Names the standard lacks (``pad``, ``einsum``, ``gradient``, ``transpose``, ``lib``) are NumPy's.
__getattr__, __dir__ = numpy_fallback(np, globals())


# ---------------------------------------------------------------------------- the hook
import sys as _sys  # noqa: E402
import weakref as _weakref  # noqa: E402

from ._bound import TapeNamespace as _TapeNamespace  # noqa: E402

_MODULE = _sys.modules[__name__]
_VIEWS: "_weakref.WeakKeyDictionary" = _weakref.WeakKeyDictionary()


def namespace(tape: Any, api_version: Optional[str] = None) -> Any:
    """The namespace for the tracers of ``tape`` (what ``Tracer.__array_namespace__`` returns)."""
    if api_version is not None and api_version not in _VERSIONS:
        raise ValueError(f"tapegrad's array-API namespace supports versions {_VERSIONS}; got {api_version!r}")
    view = _VIEWS.get(tape)
    if view is None:
        view = _VIEWS[tape] = _TapeNamespace(_MODULE, fft, tape)
    return view


_array_types.set_array_namespace(namespace)

__all__ = sorted(  # noqa: PLE0605
    _SAME
    + """asarray astype finfo iinfo result_type can_cast clip sort argsort take take_along_axis searchsorted
    e inf nan pi newaxis bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float32 float64
    complex64 complex128 fft linalg special __array_namespace_info__""".split()
)
