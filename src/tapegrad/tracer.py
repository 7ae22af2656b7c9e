"""The tracer array: what enters the user's NumPy code in place of an ndarray.

A :class:`Tracer` holds a raw value (an ndarray, a NumPy scalar, or a tracer
of a lower tape level), the node (see :data:`tapegrad.tape.Node`) that produced it, and
its tape.  NumPy hands every call on it to :meth:`Tracer.__array_ufunc__`
(NEP 13) or :meth:`Tracer.__array_function__` (NEP 18); the Python operators,
indexing and the ndarray-like methods route to the same registry.

Anything that would turn a tracer into a plain array (``np.asarray``,
``float()``, assignment into an ndarray) raises
:class:`~tapegrad.errors.GradientDroppedError` instead of silently dropping
the gradient.
"""

from __future__ import annotations

import math
import operator
import sys
from typing import Any, Optional

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin  # the less common operators, via ufuncs

from .dropped import MEMORY_ATTRIBUTES, QUIET_CALLERS, conversion_error, memory_attribute, scalar_conversion_error
from .errors import GradientDroppedError
from . import array_types
from .array_types import as_array_type
from .registry import RULES
from .tree import tree_map
from .flat_index import FlatIndexer

__all__ = [
    "Tracer",
    "as_source_value",
    "strip",
    "convert",
    "stop_gradient",
    "unwrap_above",
    "is_basic_index",
    "ROUTES",
    "METHOD_FUNCTIONS",
    "SMALL_BYTES",
    "small_shape",
]


#: Values up to this size are "small": a node keeps them whole (no pruning, no memo),
#: and a tracer of a small float64 value knows its shape (``Tracer._small``).
SMALL_BYTES = 1 << 16

_FLOAT64 = np.dtype(np.float64)


def small_shape(value: Any) -> Optional[tuple]:
    """``value``'s shape if it is a plain float64 array of at most :data:`SMALL_BYTES`, else ``None``."""
    if type(value) is np.ndarray and value.dtype is _FLOAT64 and value.nbytes <= SMALL_BYTES:
        return value.shape
    return None


class _Routes:
    """Where a tracer sends the calls made on it.

    The tracer is the lowest layer that knows about tracing: it does not import
    the dispatcher or the rules above it.  :mod:`tapegrad.dispatch` fills in the
    protocol entry points, :mod:`tapegrad.rules.indexing` the item access and
    :mod:`tapegrad.views` the in-place writes, once, when ``import tapegrad`` loads them.
    """

    __slots__ = (
        "ufunc", "ufunc_call1", "function", "unary", "binary", "getitem", "getitem_basic", "setitem", "astype", "write",
        "write_inplace", "link_view", "guard", "unsupported",
    )


ROUTES = _Routes()
ROUTES.guard = None  # set while tapegrad.reuse records: values leaving a tape become guards (see convert)

#: ndarray methods that are the NumPy function of the same name (``x.sum(axis=0)``
#: is ``np.sum(x, axis=0)``, which dispatches back to the registry): a method is
#: supported exactly when its function is.
METHOD_FUNCTIONS = {
    name: getattr(np, name)
    for name in (
        "sum", "mean", "prod", "max", "min", "std", "var", "cumsum", "cumprod",
        "clip", "round", "trace", "diagonal", "nonzero", "repeat", "take", "argmax",
        "argmin", "argsort", "any", "all", "searchsorted", "compress", "choose",
        "partition", "argpartition", "put", "ptp",
    )
}


def unwrap_above(value: Any, level: int) -> Any:
    """``value`` with the tracer levels above ``level`` removed (``level=0``: every level)."""
    while type(value) is Tracer and value._tape.level > level:
        value = value._value
    return value


def strip(value: Any) -> Any:
    """Unwrap every tracer level of ``value`` (a constant from then on)."""
    if ROUTES.guard is not None and type(value) is Tracer:
        return ROUTES.guard("convert", value, None)
    while type(value) is Tracer:
        value = value._value
    return value


def convert(value: Any, to: Any) -> Any:
    """``to(strip(value))``, a traced value turned into a Python one: a reuse recording keeps the answer as a guard."""
    if ROUTES.guard is not None and type(value) is Tracer:
        return ROUTES.guard("convert", value, to)
    return to(strip(value))


def stop_gradient(x: Any) -> Any:
    """Return ``x`` as a constant: no derivative flows through it, at any order.

    Works on arrays and nested lists/tuples/dicts of them.
    """
    return tree_map(strip, x)

def _typed(self: "Tracer", out: Any) -> Any:
    """A result that is not a tracer; on an array-API tape it becomes a constant tracer (array type out)."""
    if self._tape in array_types.TAPES:
        return as_array_type(self._tape, out)
    return out


def as_source_value(value: Any) -> Optional[tuple]:
    """Prepare a value to be watched: ``(raw, traceable)``; ``None`` stays ``None``."""
    if value is None:
        return None
    if type(value) is Tracer:
        return value, value.dtype.kind in "fc"
    if isinstance(value, (float, complex)):
        value = np.asarray(value)[()]  # a NumPy scalar: immutable, like the Python number
    elif not hasattr(value, "dtype") or not hasattr(value, "shape"):
        value = np.asarray(value)
    if value.dtype.kind == "O":
        raise TypeError("tapegrad cannot differentiate object arrays: convert to a float dtype first")
    if value.dtype.kind in "US":
        raise TypeError("tapegrad cannot differentiate string arrays")
    return value, value.dtype.kind in "fc"


_DEFERS = array_types.DEFERS
_defers_to = array_types.defers_to


def _defers(items: Any, are_types: bool = False) -> bool:
    """Whether one of ``items`` (or of their types) is a wrapper array a tracer defers to."""
    for item in items:
        cls = item if are_types else type(item)
        known = _DEFERS.get(cls)
        if known or (known is None and _defers_to(cls)):
            return True
    return False


def _drop(what: str, instead: str) -> GradientDroppedError:
    return GradientDroppedError(
        f"{what} on a tapegrad tracer would turn it into a plain value and silently drop its "
        f"gradient. {instead} If you really want a constant, call tapegrad.stop_gradient(x) first."
    )


#: Scalar exponents that ``ndarray.__pow__`` computes with another ufunc (NumPy's
#: fast_scalar_power): ``x ** -1`` is ``np.reciprocal(x)``, ``x ** 0.5`` ``np.sqrt(x)``, ``x ** 2`` ``np.square(x)``.
_FAST_POWERS = {-1: np.reciprocal, 0.5: np.sqrt, 2: np.square}
_SCALAR_EXPONENTS = (int, float)


def _arithmetic(ufunc: np.ufunc) -> tuple:
    """``x op y`` and ``y op x`` for a tracer ``x``: straight to the dispatcher's binary fast path."""

    def method(self: "Tracer", other: Any) -> Any:
        if _DEFERS.get(type(other)) or (type(other) not in _DEFERS and _defers_to(type(other))):
            return NotImplemented  # x * quantity: the wrapper's own reflected operator
        out = ROUTES.binary(RULES[ufunc], self, other)
        return out if type(out) is Tracer else _typed(self, out)

    def reflected(self: "Tracer", other: Any) -> Any:
        if _DEFERS.get(type(other)) or (type(other) not in _DEFERS and _defers_to(type(other))):
            return NotImplemented
        out = ROUTES.binary(RULES[ufunc], other, self)
        return out if type(out) is Tracer else _typed(self, out)

    return method, reflected


def _inplace(op: Any) -> Any:
    """``x op= y`` on a tracer: ``x op y`` written into ``x`` (a rebinding for a scalar)."""

    def method(self: "Tracer", other: Any) -> Any:
        return ROUTES.write_inplace(self, op(self, other))

    method.__name__ = f"__i{op.__name__.strip('_')}__"
    return method


class Tracer(NDArrayOperatorsMixin):
    """An array-like value being differentiated.

    Users do not construct tracers: :func:`tapegrad.grad`, :func:`tapegrad.jacobian`
    and :meth:`tapegrad.GradientTape.watch` create them.  A tracer behaves like an
    ndarray under NumPy functions, ufuncs, operators and indexing.
    """

    __slots__ = ("_value", "_index", "_tape", "_out", "_small", "_viewof", "_views", "_array", "__weakref__")
    # Make ndarray's binary operators defer to us even on older NumPy paths.
    __array_priority__ = 1000.0

    def __init__(self, value: Any, index: int, tape: Any, out: int = -1, small: Optional[tuple] = None) -> None:
        self._value = value
        self._index = index  # of the node on the tape (an index: a released node is replaced there)
        self._tape = tape
        self._out = out
        # The shape of the value when it is known to be a plain float64 array (or NumPy
        # scalar) of at most SMALL_BYTES, else None: the recorder's fast paths pass it
        # along element-wise calls instead of reading the arrays' attributes (a quarter
        # of recording x + y on small arrays).
        self._small = small
        # _viewof / _views stay unset until slicing makes a view (read with getattr):
        # most tracers never need them and this constructor is on the hot path.

    # ------------------------------------------------------------------ protocols
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if kwargs or len(inputs) != 1 or method != "__call__":
            if _defers(inputs):
                array_types.refuse_sparse_operands(ufunc, inputs)  # np.dot(A_sparse, x): a clear error
                return NotImplemented
            out = ROUTES.ufunc(ufunc, method, inputs, kwargs)
        else:  # np.sin(x), the commonest call: a route without the general one's checks
            out = ROUTES.ufunc_call1(ufunc, self)
        return out if type(out) is Tracer else _typed(self, out)

    def __array_function__(self, func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
        if len(types) > 1 and _defers(types, True):
            # A wrapper among the arguments (pint's Quantity, xarray's DataArray) calls
            # NumPy again on what it holds (NEP 18: see array_types.defers_to).
            return NotImplemented
        out = ROUTES.function(func, args, kwargs)
        return out if type(out) is Tracer else _typed(self, out)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if self.dtype.kind not in "fc":  # integers and booleans carry no gradient
            return np.array(strip(self), dtype=dtype, copy=copy)
        if dtype is not None and np.dtype(dtype).kind in "iub":
            # An integer or boolean cast (np.int64(x), np.asarray(x, dtype=int)) carries no
            # gradient: it is x.astype(dtype), a constant.
            return np.asarray(ROUTES.astype(self, dtype))
        if sys._getframe(1).f_code not in QUIET_CALLERS:
            # Storing a tape constant into a plain array (out[:2] = c), or compiled code that
            # reads one: no gradient to drop.  (np.asarray while a tape records, through
            # tapegrad.constructors, keeps returning the tracer itself: writes into it record.)
            constant = self._constant()
            if constant is not None:
                return np.array(constant, dtype=dtype, copy=copy is not False)  # (recorded nodes share its memory)
        # A marked error (tapegrad.dropped.is_conversion): tapegrad.constructors catches exactly it.
        raise conversion_error()

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        raise _drop("DLPack export (np.from_dlpack)", "Differentiate first, then export the plain result.")

    def _constant(self) -> Any:
        """The plain value when it depends on no watched value at any level (a tape constant), else ``None``."""
        value = self
        while type(value) is Tracer:
            if value._tape.reaches_source(value._index):
                return None
            value = value._value
        return value

    def __float__(self) -> float:
        if self.dtype.kind not in "fc":
            return float(strip(self))
        constant = self._constant()
        if constant is not None:  # no gradient to drop
            return float(constant)
        raise scalar_conversion_error("float()")

    def __int__(self) -> int:
        # Truncation carries no gradient (as x.astype(int)): the value, a constant.
        return convert(self, int)

    def __round__(self, ndigits: Any = None) -> Any:
        # round(x) of a scalar is an int (a constant, like int(x)); with ndigits, or of an
        # array, it is np.round, whose derivative is zero almost everywhere.
        if ndigits is None and self.ndim == 0:
            return convert(self, round)
        return np.round(self, 0 if ndigits is None else ndigits)

    def __trunc__(self) -> int:
        return convert(self, math.trunc)

    def __floor__(self) -> int:
        return convert(self, math.floor)

    def __ceil__(self) -> int:
        return convert(self, math.ceil)

    def __complex__(self) -> complex:
        constant = self._constant()
        if constant is not None:
            return complex(constant)
        raise scalar_conversion_error("complex()")

    def __index__(self) -> int:
        if self.dtype.kind in "iub":
            return convert(self, operator.index)
        raise _drop("using a traced float as an index", "Index with integer arrays, which carry no gradient.")

    def item(self, *args: Any) -> Any:
        constant = self._constant() if self.dtype.kind in "fc" else strip(self)
        if constant is not None:
            return constant.item(*args)
        raise _drop("x.item()", "Index the tracer instead (x[()] or x[i]).")

    def tolist(self) -> Any:
        constant = self._constant() if self.dtype.kind in "fc" else strip(self)
        if constant is not None:
            return constant.tolist()
        raise _drop("x.tolist()", "Iterate over the tracer (for row in x) or index it.")

    def __bool__(self) -> bool:
        # Truth tests are control flow: they carry no gradient, so they are safe.
        return convert(self, bool)

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

    @shape.setter
    def shape(self, value: Any) -> None:
        raise AttributeError("tapegrad: a traced array cannot be reshaped in place; write x = x.reshape(shape)")

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

    @real.setter
    def real(self, value: Any) -> None:
        # z.real = v writes every element: v plus the imaginary part z keeps (a recorded write).
        self[...] = value + 1j * np.imag(self) if self.dtype.kind == "c" else value

    @property
    def imag(self) -> Any:
        return np.imag(self)

    @imag.setter
    def imag(self, value: Any) -> None:
        if self.dtype.kind != "c":
            raise TypeError("array does not have imaginary part to set")
        self[...] = np.real(self) + 1j * np.real(value)

    @property
    def flat(self) -> Any:
        return FlatIndexer(self)

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

    # ------------------------------------------------------------------ array API
    # What array-API-generic libraries (SciPy's array-API mode, scikit-learn) read.
    def __array_namespace__(self, *, api_version: Optional[str] = None) -> Any:
        return array_types.namespace_of(self._tape, api_version)

    @property
    def device(self) -> str:
        return "cpu"  # what NumPy's arrays report

    def to_device(self, device: Any, /, *, stream: Any = None) -> "Tracer":
        if device != "cpu":
            raise ValueError(f"tapegrad tracers live on the CPU; cannot move to {device!r}")
        return self

    # ------------------------------------------------------------------ indexing
    def __getitem__(self, index: Any) -> Any:
        if not is_basic_index(index):
            return ROUTES.getitem(self, index)
        out = ROUTES.getitem_basic(self, index)
        # NumPy returns a view for basic indexing unless every axis got an integer (a scalar
        # copy); ``y[1, ...]`` is a 0-d view, recognisable as a 0-d ndarray.
        if type(out) is Tracer and (isinstance(unwrap_above(out, 0), np.ndarray) or out.ndim):
            ROUTES.link_view(self, out, index)
        return out

    def __setitem__(self, index: Any, value: Any) -> None:
        # ``x[i] += v`` ends with ``x[i] = view``: that view is the writer, not a stale alias.
        # Only a view of exactly the written region is that writer: any other live view
        # (``w = y[0:3]; y[1:4] = w``) changes under the write and must be checked.
        writer = None
        if type(value) is Tracer and getattr(value, "_viewof", None) is not None and is_basic_index(index):
            base, view_index = value._viewof
            if base() is self and view_index == index:
                writer = value
        ROUTES.write(self, ROUTES.setitem(self, index, value), writer, index)

    # ------------------------------------------------------------------ methods
    def astype(self, dtype: Any, *args: Any, **kwargs: Any) -> Any:
        return ROUTES.astype(self, dtype, *args, **kwargs)

    def copy(self, order: str = "K") -> Any:
        return np.copy(self, order=order)  # the layout shows later, in ravel(order="K") and the like

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

    def sort(self, axis: int = -1, kind: Any = None, order: Any = None, *, stable: Any = None) -> None:
        ROUTES.write(self, np.sort(self, axis=axis, kind=kind, order=order, stable=stable), None)

    def partition(self, kth: Any, axis: int = -1, kind: str = "introselect", order: Any = None) -> None:
        # In place, like ndarray.partition (the generic method fallback would return a copy).
        ROUTES.write(self, np.partition(self, kth, axis=axis, kind=kind, order=order), None)

    # ------------------------------------------------------------------ operators
    # Arithmetic and @ take a fast path to the dispatcher (deferring to array_types.defers_to);
    # every other operator is NumPy's mixin, which calls the ufunc and reaches __array_ufunc__.
    # As ndarray's: a comparison with a string is NotImplemented (then False / True), not an error.
    __eq__ = lambda self, other: NotImplemented if isinstance(other, (str, bytes)) else np.equal(self, other)  # noqa: E731
    __ne__ = lambda self, other: NotImplemented if isinstance(other, (str, bytes)) else np.not_equal(self, other)  # noqa: E731
    __add__, __radd__ = _arithmetic(np.add)
    __matmul__, __rmatmul__ = _arithmetic(np.matmul)
    __sub__, __rsub__ = _arithmetic(np.subtract)
    __mul__, __rmul__ = _arithmetic(np.multiply)
    __truediv__, __rtruediv__ = _arithmetic(np.true_divide)
    _power, __rpow__ = _arithmetic(np.power)

    def __pow__(self, other: Any) -> Any:
        # ndarray ** -1, ** 0.5 and ** 2 (a scalar exponent) compute reciprocal / sqrt / square, whose last
        # digit can differ from np.power's on NumPy < 2.4: record what NumPy computes.
        if type(other) in _SCALAR_EXPONENTS or isinstance(other, (np.integer, np.floating)):
            fast = _FAST_POWERS.get(other)
            if fast is not None and self.dtype.kind in "fc":
                return fast(self)
        return self._power(other)

    def __neg__(self) -> Any:
        out = ROUTES.unary(RULES[np.negative], self)
        return out if type(out) is Tracer else _typed(self, out)

    # In-place operators update this tracer object, so other names bound to it
    # see the change exactly as they would with an ndarray.
    __iadd__ = _inplace(operator.add)
    __isub__ = _inplace(operator.sub)
    __imul__ = _inplace(operator.mul)
    __itruediv__ = _inplace(operator.truediv)
    __ipow__ = _inplace(operator.pow)
    __imatmul__ = _inplace(operator.matmul)
    __ifloordiv__ = _inplace(operator.floordiv)
    __imod__ = _inplace(operator.mod)
    __iand__ = _inplace(operator.and_)
    __ior__ = _inplace(operator.or_)
    __ixor__ = _inplace(operator.xor)
    __ilshift__ = _inplace(operator.lshift)
    __irshift__ = _inplace(operator.rshift)


def _method_of(name: str, fun: Any) -> Any:
    """``x.name(...)``: the NumPy function of that name applied to ``x``."""

    def method(self: Tracer, *args: Any, **kwargs: Any) -> Any:
        return fun(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``numpy.{name}(x, ...)``."
    return method


def _memory_attribute(name: str) -> property:
    """``x.flags``, ``x.strides``, ...: an error (an AttributeError, so ``hasattr`` is False)."""

    def refuse(self: Tracer) -> Any:
        return memory_attribute(self, name)  # (a tape constant's when it only reads, else an error)

    return property(refuse)


# Methods and refusals are class attributes rather than a ``__getattr__`` hook: with
# the hook, CPython looks ``__getattr__`` up on every attribute read of every tracer
# (``x._value`` on the hot path included) and cannot specialise those reads.
for _name, _fun in METHOD_FUNCTIONS.items():
    if _name not in Tracer.__dict__:
        setattr(Tracer, _name, _method_of(_name, _fun))
for _name in MEMORY_ATTRIBUTES:
    setattr(Tracer, _name, _memory_attribute(_name))
del _name, _fun


# ---------------------------------------------------------------------- views
# NumPy's basic indexing returns views: writing through a view changes the base
# and vice versa.  Tracers are values, so tapegrad reproduces that aliasing for
# views made by basic indexing (the write is replayed onto the base) and refuses
# in-place writes that it cannot replay, rather than computing something else.


def is_basic_index(index: Any) -> bool:
    """Whether ``index`` is basic indexing (ints, slices, None, Ellipsis), which NumPy answers with a view."""
    if type(index) is not tuple:
        index = (index,)
    for i in index:
        if not (i is None or i is Ellipsis or type(i) is slice or type(i) is int or isinstance(i, np.integer)):
            return False
    return True
