"""The tracer array: what enters the user's NumPy code in place of an ndarray.

A :class:`Tracer` holds a raw value (an ndarray, a NumPy scalar, or a tracer
of a lower tape level), the :class:`~tapegrad.tape.Node` that produced it, and
its tape.  NumPy hands every call on it to :meth:`Tracer.__array_ufunc__`
(NEP 13) or :meth:`Tracer.__array_function__` (NEP 18); the Python operators,
indexing and the ndarray-like methods route to the same registry.

Anything that would turn a tracer into a plain array (``np.asarray``,
``float()``, assignment into an ndarray) raises
:class:`~tapegrad.errors.GradientDroppedError` instead of silently dropping
the gradient.
"""

from __future__ import annotations

import weakref
from typing import Any, Optional

import numpy as np

from .errors import GradientDroppedError
from .lazy import is_dask

__all__ = ["Tracer", "as_source_value"]


def as_source_value(value: Any) -> Optional[tuple]:
    """Prepare a value to be watched: ``(raw, traceable)``; ``None`` stays ``None``."""
    if value is None:
        return None
    if type(value) is Tracer:
        return value, value.dtype.kind in "fc"
    if not hasattr(value, "dtype") or not hasattr(value, "shape"):
        value = np.asarray(value)
    if value.dtype.kind == "O":
        raise TypeError("tapegrad cannot differentiate object arrays: convert to a float dtype first")
    if value.dtype.kind in "US":
        raise TypeError("tapegrad cannot differentiate string arrays")
    return value, value.dtype.kind in "fc"


def _drop(what: str, instead: str) -> GradientDroppedError:
    return GradientDroppedError(
        f"{what} on a tapegrad tracer would turn it into a plain value and silently drop its "
        f"gradient. {instead} If you really want a constant, call tapegrad.stop_gradient(x) first."
    )


class Tracer:
    """An array-like value being differentiated.

    Users do not construct tracers: :func:`tapegrad.grad`, :func:`tapegrad.jacobian`
    and :meth:`tapegrad.GradientTape.watch` create them.  A tracer behaves like an
    ndarray under NumPy functions, ufuncs, operators and indexing.
    """

    __slots__ = ("_value", "_node", "_tape", "_out", "_viewof", "_views", "__weakref__")
    # Make ndarray's binary operators defer to us even on older NumPy paths.
    __array_priority__ = 1000.0

    def __init__(self, value: Any, node: Any, tape: Any, out: int = -1) -> None:
        self._value = value
        self._node = node
        self._tape = tape
        self._out = out
        # _viewof / _views stay unset until slicing makes a view (read with getattr):
        # most tracers never need them and this constructor is on the hot path.

    # ------------------------------------------------------------------ protocols
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        return dispatch_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
        return dispatch_function(func, args, kwargs)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise _drop(
            "np.asarray / np.array (or storing it into a plain ndarray)",
            "Build arrays with np.stack / np.concatenate / np.where on the tracers, or copy "
            "the tracer (y = x.copy()) and assign into it with y[i] = v.",
        )

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        raise _drop("DLPack export (np.from_dlpack)", "Differentiate first, then export the plain result.")

    def __float__(self) -> float:
        raise _drop("float()", "Keep the value as an array: use x.reshape(()) or x[()] instead.")

    def __int__(self) -> int:
        raise _drop("int()", "Use np.floor(x) / np.round(x) (constants) if you need integers.")

    def __complex__(self) -> complex:
        raise _drop("complex()", "Keep the value as an array.")

    def __index__(self) -> int:
        raise _drop("using a traced float as an index", "Index with integer arrays, which carry no gradient.")

    def item(self, *args: Any) -> Any:
        raise _drop("x.item()", "Index the tracer instead (x[()] or x[i]).")

    def tolist(self) -> Any:
        raise _drop("x.tolist()", "Iterate over the tracer (for row in x) or index it.")

    def __bool__(self) -> bool:
        # Truth tests are control flow: they carry no gradient, so they are safe.
        return bool(strip(self))

    def __len__(self) -> int:
        shape = self.shape
        if not shape:
            raise TypeError("len() of unsized object")
        return shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        for i in range(self.shape[0]):
            yield self[i]

    __hash__ = None  # like ndarray: mutable, compared elementwise

    # ------------------------------------------------------------------ attributes
    @property
    def shape(self) -> tuple:
        return np.shape(self._value)

    @property
    def ndim(self) -> int:
        return len(np.shape(self._value))

    @property
    def size(self) -> int:
        return int(np.prod(np.shape(self._value), dtype=np.int64))

    @property
    def dtype(self) -> np.dtype:
        return self._value.dtype

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def T(self) -> "Tracer":
        return np.transpose(self)

    @property
    def mT(self) -> "Tracer":
        return np.swapaxes(self, -1, -2)

    @property
    def real(self) -> Any:
        return np.real(self)

    @property
    def imag(self) -> Any:
        return np.imag(self)

    @property
    def flat(self) -> Any:
        return iter(np.ravel(self))

    def __repr__(self) -> str:
        return f"Tracer(level={self._tape.level}, value={strip(self)!r})"

    def __str__(self) -> str:
        return str(strip(self))

    def __format__(self, spec: str) -> str:
        return format(strip(self), spec)

    def __copy__(self) -> "Tracer":
        return np.copy(self)

    def __deepcopy__(self, memo: Any) -> "Tracer":
        return np.copy(self)

    def __reduce__(self) -> Any:
        raise _drop("pickling", "Pickle the plain result after differentiation instead.")

    # ------------------------------------------------------------------ indexing
    def __getitem__(self, index: Any) -> Any:
        out = getitem(self, index)
        # NumPy returns a view for basic indexing unless every axis got an integer (a scalar
        # copy); ``y[1, ...]`` is a 0-d view, recognisable as a 0-d ndarray.
        if type(out) is Tracer and _is_basic_index(index) and (out.ndim or isinstance(strip(out), np.ndarray)):
            _link_view(self, out, index)
        return out

    def __setitem__(self, index: Any, value: Any) -> None:
        # ``x[i] += v`` ends with ``x[i] = view``: that view is the writer, not a stale alias.
        # Only a view of exactly the written region is that writer: any other live view
        # (``w = y[0:3]; y[1:4] = w``) changes under the write and must be checked.
        writer = None
        if type(value) is Tracer and getattr(value, "_viewof", None) is not None and _is_basic_index(index):
            base, view_index = value._viewof
            if base() is self and view_index == index:
                writer = value
        _write(self, setitem(self, index, value), writer=writer, index=index)

    # ------------------------------------------------------------------ methods
    def astype(self, dtype: Any, *args: Any, **kwargs: Any) -> Any:
        return astype(self, dtype, *args, **kwargs)

    def copy(self, order: str = "K") -> Any:
        return np.copy(self)

    def conj(self) -> Any:
        return np.conjugate(self)

    conjugate = conj

    def reshape(self, *shape: Any, order: str = "C", **kwargs: Any) -> Any:
        if len(shape) == 1:
            shape = shape[0]
        return np.reshape(self, shape, order=order, **kwargs)

    def transpose(self, *axes: Any) -> Any:
        if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
            axes = axes[0]
        return np.transpose(self, axes or None)

    def ravel(self, order: str = "C") -> Any:
        return np.ravel(self, order=order)

    def flatten(self, order: str = "C") -> Any:
        return np.ravel(self, order=order).copy()

    def squeeze(self, axis: Any = None) -> Any:
        return np.squeeze(self, axis=axis)

    def swapaxes(self, axis1: int, axis2: int) -> Any:
        return np.swapaxes(self, axis1, axis2)

    def dot(self, other: Any) -> Any:
        return np.dot(self, other)

    def fill(self, value: Any) -> None:
        self[...] = value

    def sort(self, axis: int = -1, kind: Any = None, order: Any = None) -> None:
        _write(self, np.sort(self, axis=axis, kind=kind, order=order), writer=None)

    def partition(self, kth: Any, axis: int = -1, kind: str = "introselect", order: Any = None) -> None:
        # In place, like ndarray.partition (the generic method fallback would return a copy).
        _write(self, np.partition(self, kth, axis=axis, kind=kind, order=order), writer=None)

    def __getattr__(self, name: str) -> Any:
        # Remaining ndarray methods (sum, mean, max, cumsum, clip, ...) call the
        # NumPy function of the same name, which dispatches back to the registry.
        if name.startswith("__"):
            raise AttributeError(name)
        fun = _METHOD_FUNCTIONS.get(name)
        if fun is None:
            raise AttributeError(f"'Tracer' object has no attribute {name!r}")

        def method(*args: Any, **kwargs: Any) -> Any:
            return fun(self, *args, **kwargs)

        return method

    # ------------------------------------------------------------------ operators
    def __add__(self, other: Any) -> Any:
        return record_binary(RULES[np.add], self, other)

    def __radd__(self, other: Any) -> Any:
        return record_binary(RULES[np.add], other, self)

    def __sub__(self, other: Any) -> Any:
        return record_binary(RULES[np.subtract], self, other)

    def __rsub__(self, other: Any) -> Any:
        return record_binary(RULES[np.subtract], other, self)

    def __mul__(self, other: Any) -> Any:
        return record_binary(RULES[np.multiply], self, other)

    def __rmul__(self, other: Any) -> Any:
        return record_binary(RULES[np.multiply], other, self)

    def __truediv__(self, other: Any) -> Any:
        return record_binary(RULES[np.true_divide], self, other)

    def __rtruediv__(self, other: Any) -> Any:
        return record_binary(RULES[np.true_divide], other, self)

    def __floordiv__(self, other: Any) -> Any:
        return np.floor_divide(self, other)

    def __rfloordiv__(self, other: Any) -> Any:
        return np.floor_divide(other, self)

    def __mod__(self, other: Any) -> Any:
        return np.remainder(self, other)

    def __rmod__(self, other: Any) -> Any:
        return np.remainder(other, self)

    def __divmod__(self, other: Any) -> Any:
        return np.divmod(self, other)

    def __rdivmod__(self, other: Any) -> Any:
        return np.divmod(other, self)

    def __pow__(self, other: Any) -> Any:
        return record_binary(RULES[np.power], self, other)

    def __rpow__(self, other: Any) -> Any:
        return record_binary(RULES[np.power], other, self)

    def __matmul__(self, other: Any) -> Any:
        return np.matmul(self, other)

    def __rmatmul__(self, other: Any) -> Any:
        return np.matmul(other, self)

    def __neg__(self) -> Any:
        return record_unary(RULES[np.negative], self)

    def __pos__(self) -> Any:
        return np.positive(self)

    def __abs__(self) -> Any:
        return np.absolute(self)

    def __invert__(self) -> Any:
        return np.invert(self)

    def __lt__(self, other: Any) -> Any:
        return np.less(self, other)

    def __le__(self, other: Any) -> Any:
        return np.less_equal(self, other)

    def __gt__(self, other: Any) -> Any:
        return np.greater(self, other)

    def __ge__(self, other: Any) -> Any:
        return np.greater_equal(self, other)

    def __eq__(self, other: Any) -> Any:  # type: ignore[override]
        return np.equal(self, other)

    def __ne__(self, other: Any) -> Any:  # type: ignore[override]
        return np.not_equal(self, other)

    # In-place operators update this tracer object, so other names bound to it
    # see the change exactly as they would with an ndarray.
    def __iadd__(self, other: Any) -> "Tracer":
        return _write(self, self + other, writer=None)

    def __isub__(self, other: Any) -> "Tracer":
        return _write(self, self - other, writer=None)

    def __imul__(self, other: Any) -> "Tracer":
        return _write(self, self * other, writer=None)

    def __itruediv__(self, other: Any) -> "Tracer":
        return _write(self, self / other, writer=None)

    def __ipow__(self, other: Any) -> "Tracer":
        return _write(self, self**other, writer=None)

    def __imatmul__(self, other: Any) -> "Tracer":
        return _write(self, self @ other, writer=None)

    def __ifloordiv__(self, other: Any) -> "Tracer":
        return _write(self, self // other, writer=None)

    def __imod__(self, other: Any) -> "Tracer":
        return _write(self, self % other, writer=None)


# ---------------------------------------------------------------------- views
# NumPy's basic indexing returns views: writing through a view changes the base
# and vice versa.  Tracers are values, so tapegrad reproduces that aliasing for
# views made by basic indexing (the write is replayed onto the base) and refuses
# in-place writes that it cannot replay, rather than computing something else.


def _is_basic_index(index: Any) -> bool:
    if type(index) is not tuple:
        index = (index,)
    for i in index:
        if not (i is None or i is Ellipsis or type(i) is slice or type(i) is int or isinstance(i, np.integer)):
            return False
    return True


def _link_view(base: Tracer, view: Tracer, index: Any) -> None:
    view._viewof = (weakref.ref(base), index)
    views = getattr(base, "_views", None)
    if views is None:
        base._views = [weakref.ref(view)]
    else:
        views[:] = [r for r in views if r() is not None]  # forget dead views
        views.append(weakref.ref(view))


#: The index of a view whose element mapping tapegrad does not track (made by
#: reshape, transpose, ravel, ...): it counts as overlapping everything.
WHOLE = object()


def link_opaque_views(base: Tracer, out: Any) -> None:
    """Mark the outputs of a view-returning call that really share ``base``'s memory."""
    raw_base = strip(base)
    if is_dask(raw_base):
        return  # Dask arrays are immutable (no views to replay), and may_share_memory would compute them
    for view in out if isinstance(out, (list, tuple)) else (out,):
        if type(view) is Tracer and view._tape is base._tape and np.may_share_memory(strip(view), raw_base):
            _link_view(base, view, WHOLE)


def _positions(shape: tuple, index: Any) -> np.ndarray:
    size = int(np.prod(shape, dtype=np.int64))
    if index is WHOLE:
        return np.arange(size)
    return np.arange(size).reshape(shape)[index].ravel()


def _write(target: Tracer, new: Any, writer: Optional[Tracer], index: Any = Ellipsis) -> Tracer:
    """Make ``target`` (a tracer object) hold ``new`` from now on, as an in-place write.

    ``index`` is the part of ``target`` that changes; ``writer`` a view through
    which the write was made (it is up to date by construction).
    """
    if type(new) is not Tracer:
        raise GradientDroppedError(
            "an in-place update of a traced array produced an untraced value (inside "
            "stop_recording?); write the update out of place instead."
        )
    views = getattr(target, "_views", None)
    if views:
        stale = [v for v in (r() for r in views) if v is not None and v is not writer]
        if stale:
            written = _positions(target.shape, index)
            for view in stale:
                if np.intersect1d(written, _positions(target.shape, view._viewof[1])).size:
                    raise GradientDroppedError(
                        "in-place write into a traced array that overlaps a view of it (made by slicing, "
                        "reshape or transpose) that is still alive: NumPy would change that view too, which "
                        "tapegrad does not replay. Write out of place (y = x + 1, or "
                        "y = x.copy(); y[i] = v), or drop the view first."
                    )
    viewof = getattr(target, "_viewof", None)
    if viewof is not None and viewof[1] is WHOLE and viewof[0]() is not None:
        raise GradientDroppedError(
            "in-place write into a view of a traced array made by reshape / transpose / ravel "
            "(or a similar call) while the original is alive: NumPy would change the original "
            "too, which tapegrad cannot replay. Copy first (y = x.reshape(...).copy()) or "
            "write out of place."
        )
    target._value, target._node, target._out, target._tape = new._value, new._node, new._out, new._tape
    if viewof is not None:
        base = viewof[0]()
        if base is not None:
            # Written through a view: replay the write onto the base, as NumPy would.
            view_index = viewof[1]
            _write(base, setitem(base, view_index, target), writer=target, index=view_index)
    return target


# Imported last: these modules import Tracer from here.
from .dispatch import (  # noqa: E402
    dispatch_function,
    dispatch_ufunc,
    record_binary,
    record_unary,
    strip,
)
from .registry import RULES  # noqa: E402
from .rules.indexing import astype, getitem, setitem  # noqa: E402
from .rules.methods import METHOD_FUNCTIONS as _METHOD_FUNCTIONS  # noqa: E402
