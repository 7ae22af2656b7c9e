"""autograd.core on tapegrad: vector spaces, unary ``make_vjp``/``make_jvp`` and primitives.

* ``make_vjp(fun, x)`` is ``tapegrad.vjp``; ``make_jvp(fun, x)(v)`` is ``tapegrad.jvp``.
* ``vspace(value)`` describes a value as autograd does (arrays, real or complex;
  lists, tuples, named tuples and dicts of them).  Its operations are written
  with NumPy calls, so tapegrad differentiates them like any user code.
* ``primitive(f)`` with ``defvjp(f, ...)`` is ``tapegrad.custom_vjp(f)`` with
  its ``defvjp``: autograd's VJP makers ``maker(ans, *args)(g)`` become
  tapegrad's ``vjp(g, ans, *args)``.  tapegrad may hand a rule several
  cotangents at once (leading batch axes, for a one-sweep Jacobian); autograd's
  makers take one, so the shim calls them once per cotangent and stacks the
  results.  An argument whose maker is ``None`` carries no gradient
  (``tapegrad.CONSTANT_ARG``); one without a maker raises ``NotImplementedError``
  when differentiated, as in autograd.
* JVP makers (``defjvp``) are kept but not used: tapegrad builds forward mode
  from the VJPs (the transpose trick).
"""

from __future__ import annotations

import builtins
import functools
import inspect
import warnings
from itertools import count
from typing import Any, Callable

import numpy as np
import tapegrad as tg

from ._shim import ShimLimitation, dtype, get_name, is_tracer, ndim, raw, shape, subvals

__all__ = [
    "make_vjp",
    "make_jvp",
    "vspace",
    "VSpace",
    "primitive",
    "primitive_vjps",
    "primitive_jvps",
    "defvjp",
    "defvjp_argnum",
    "defvjp_argnums",
    "defjvp",
    "defjvp_argnum",
    "defjvp_argnums",
    "def_linear",
]


# ---------------------------------------------------------------- reverse and forward mode
def make_vjp(fun: Callable, x: Any) -> tuple:
    """``(vjp, ans)``: ``ans = fun(x)`` and ``vjp(g)`` its vector-Jacobian product (``tapegrad.vjp``)."""
    ans, pullback = tg.vjp(fun, x)

    def vjp(g: Any) -> Any:
        return pullback(g)[0]

    return vjp, ans


def make_jvp(fun: Callable, x: Any) -> Callable:
    """``jvp(v) -> (fun(x), J v)`` (``tapegrad.jvp``)."""

    def jvp(v: Any) -> tuple:
        return tg.jvp(fun, (x,), (v,))

    return jvp


# ---------------------------------------------------------------- vector spaces
class VSpace:
    """The vector space a value lives in, with the operations autograd's checks use."""

    iscomplex = False
    mappings: dict = {}

    def __init__(self, value: Any) -> None:
        pass

    def zeros(self) -> Any:
        raise NotImplementedError

    def ones(self) -> Any:
        raise NotImplementedError

    def standard_basis(self) -> Any:
        raise NotImplementedError

    def randn(self) -> Any:
        raise NotImplementedError

    def mut_add(self, x_prev: Any, x_new: Any) -> Any:
        return self._add(self.zeros() if x_prev is None else x_prev, x_new)

    def add(self, x: Any, y: Any) -> Any:
        return self._add(x, y)

    def scalar_mul(self, x: Any, a: Any) -> Any:
        return self._scalar_mul(x, a)

    def inner_prod(self, x: Any, y: Any) -> Any:
        return self._inner_prod(x, y)

    def covector(self, x: Any) -> Any:
        return self._covector(x)

    def _add(self, x: Any, y: Any) -> Any:
        return x + y

    def _scalar_mul(self, x: Any, a: Any) -> Any:
        return x * a

    def _inner_prod(self, x: Any, y: Any) -> Any:
        raise NotImplementedError

    def _covector(self, x: Any) -> Any:
        return x

    def __eq__(self, other: Any) -> bool:
        return type(self) is type(other) and self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}_{self.__dict__}"

    @classmethod
    def register(cls, value_type: Any, vspace_maker: Any = None) -> None:
        VSpace.mappings[value_type] = vspace_maker or cls


class ArrayVSpace(VSpace):
    def __init__(self, value: Any) -> None:
        self.shape = shape(value)
        self.dtype = np.dtype(dtype(value))

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def zeros(self) -> Any:
        return np.zeros(self.shape, dtype=self.dtype)

    def ones(self) -> Any:
        return np.ones(self.shape, dtype=self.dtype)

    def standard_basis(self) -> Any:
        for index in np.ndindex(*self.shape):
            e = np.zeros(self.shape, dtype=self.dtype)
            e[index] = 1
            yield e

    def randn(self) -> Any:
        return np.array(np.random.randn(*self.shape)).astype(self.dtype)

    def _inner_prod(self, x: Any, y: Any) -> Any:
        return np.dot(np.ravel(x), np.ravel(y))


class ComplexArrayVSpace(ArrayVSpace):
    iscomplex = True

    @property
    def size(self) -> int:
        return 2 * int(np.prod(self.shape))

    def ones(self) -> Any:
        return np.ones(self.shape, dtype=self.dtype) * (1 + 1j)

    def standard_basis(self) -> Any:
        for index in np.ndindex(*self.shape):
            for unit in (1.0, 1.0j):
                e = np.zeros(self.shape, dtype=self.dtype)
                e[index] = unit
                yield e

    def randn(self) -> Any:
        re = np.array(np.random.randn(*self.shape)).astype(self.dtype)
        im = np.array(np.random.randn(*self.shape)).astype(self.dtype)
        return re + 1j * im

    def _inner_prod(self, x: Any, y: Any) -> Any:
        return np.real(np.dot(np.conj(np.ravel(x)), np.ravel(y)))

    def _covector(self, x: Any) -> Any:
        return np.conj(x)


class SequenceVSpace(VSpace):
    """Lists, tuples and named tuples: the direct sum of their items' spaces."""

    def __init__(self, value: Any) -> None:
        self.seq_type = type(value)
        self.shape = [vspace(x) for x in value]

    def _make(self, items: Any) -> Any:
        items = builtins.list(items)
        if hasattr(self.seq_type, "_fields"):
            return self.seq_type(*items)
        return self.seq_type(items)

    @property
    def size(self) -> int:
        return sum(vs.size for vs in self.shape)

    @property
    def iscomplex(self) -> bool:  # type: ignore[override]
        return any(vs.iscomplex for vs in self.shape)

    def zeros(self) -> Any:
        return self._make(vs.zeros() for vs in self.shape)

    def ones(self) -> Any:
        return self._make(vs.ones() for vs in self.shape)

    def randn(self) -> Any:
        return self._make(vs.randn() for vs in self.shape)

    def standard_basis(self) -> Any:
        zeros = builtins.list(self.zeros())
        for i, vs in enumerate(self.shape):
            for e in vs.standard_basis():
                yield self._make(zeros[:i] + [e] + zeros[i + 1 :])

    def _add(self, x: Any, y: Any) -> Any:
        return self._make(vs._add(a, b) for vs, a, b in zip(self.shape, x, y))

    def _scalar_mul(self, x: Any, a: Any) -> Any:
        return self._make(vs._scalar_mul(e, a) for vs, e in zip(self.shape, x))

    def _inner_prod(self, x: Any, y: Any) -> Any:
        return sum(vs._inner_prod(a, b) for vs, a, b in zip(self.shape, x, y))

    def _covector(self, x: Any) -> Any:
        return self._make(vs._covector(e) for vs, e in zip(self.shape, x))


class ListVSpace(SequenceVSpace):
    pass


class TupleVSpace(SequenceVSpace):
    pass


class NamedTupleVSpace(SequenceVSpace):
    pass


class DictVSpace(VSpace):
    def __init__(self, value: Any) -> None:
        self.shape = {k: vspace(v) for k, v in value.items()}

    @property
    def size(self) -> int:
        return sum(vs.size for vs in self.shape.values())

    @property
    def iscomplex(self) -> bool:  # type: ignore[override]
        return any(vs.iscomplex for vs in self.shape.values())

    def zeros(self) -> Any:
        return {k: vs.zeros() for k, vs in self.shape.items()}

    def ones(self) -> Any:
        return {k: vs.ones() for k, vs in self.shape.items()}

    def randn(self) -> Any:
        return {k: vs.randn() for k, vs in self.shape.items()}

    def standard_basis(self) -> Any:
        zeros = self.zeros()
        for k, vs in self.shape.items():
            for e in vs.standard_basis():
                basis = builtins.dict(zeros)
                basis[k] = e
                yield basis

    def _add(self, x: Any, y: Any) -> Any:
        return {k: vs._add(x[k], y[k]) for k, vs in self.shape.items()}

    def _scalar_mul(self, x: Any, a: Any) -> Any:
        return {k: vs._scalar_mul(x[k], a) for k, vs in self.shape.items()}

    def _inner_prod(self, x: Any, y: Any) -> Any:
        return sum(vs._inner_prod(x[k], y[k]) for k, vs in self.shape.items())

    def _covector(self, x: Any) -> Any:
        return {k: vs._covector(x[k]) for k, vs in self.shape.items()}


def _array_vspace(value: Any) -> VSpace:
    return ComplexArrayVSpace(value) if np.dtype(dtype(value)).kind == "c" else ArrayVSpace(value)


VSpace.register(np.ndarray, _array_vspace)
VSpace.register(tg.Tracer, _array_vspace)
for _t in (float, np.longdouble, np.float64, np.float32, np.float16):
    ArrayVSpace.register(_t)
for _t in (complex, np.clongdouble, np.complex64, np.complex128):
    ComplexArrayVSpace.register(_t)
ListVSpace.register(list)
TupleVSpace.register(tuple)
DictVSpace.register(dict)


def vspace(value: Any) -> VSpace:
    """The vector space of ``value`` (a tracer's is its value's)."""
    maker = VSpace.mappings.get(type(value))
    if maker is not None:
        return maker(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # EigResult, SVDResult, ...
        return NamedTupleVSpace(value)
    raise TypeError(
        f"Can't find vector space for value {value!r} of type {type(value)}. "
        f"Valid types are {builtins.list(VSpace.mappings)}"
    )


# ---------------------------------------------------------------- primitives
_DEPRECATED = (
    "\nThe {} method is deprecated. See the update guide and tutorial:\n"
    "https://github.com/HIPS/autograd/blob/master/docs/updateguide.md"
)

#: primitive -> its VJP makers by argument number (autograd's table of the same name)
primitive_vjps: dict = {}
#: primitive -> its JVP makers (kept for inspection; tapegrad builds JVPs from VJPs)
primitive_jvps: dict = {}

_MISSING = object()


def _positional_count(f: Any) -> int:
    try:
        params = inspect.signature(f).parameters.values()
    except (TypeError, ValueError):
        return 32
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 32
    return max(1, sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params))


def _leaves(x: Any) -> list:
    return builtins.list(x) if isinstance(x, (tuple, list)) else [x]


def _one_cotangent_at_a_time(vjp1: Callable, g: Any, ans: Any) -> Any:
    """Apply an autograd VJP (one cotangent) to tapegrad's possibly batched ``g``."""
    g_leaves, ans_leaves = _leaves(g), _leaves(ans)
    nb = ndim(g_leaves[0]) - ndim(ans_leaves[0])
    if nb <= 0:
        return vjp1(g)
    batch = shape(g_leaves[0])[:nb]
    flat = [np.reshape(gl, (-1,) + shape(gl)[nb:]) for gl in g_leaves]
    rows = []
    for k in range(shape(flat[0])[0]):
        row = [fl[k] for fl in flat]
        rows.append(vjp1(type(g)(row) if isinstance(g, (tuple, list)) else row[0]))
    stacked = np.stack(rows)
    return np.reshape(stacked, batch + shape(stacked)[1:])


class Primitive:
    """An autograd primitive: ``tapegrad.custom_vjp(f)`` whose rules are autograd VJP makers."""

    def __init__(self, f_raw: Callable) -> None:
        functools.update_wrapper(self, f_raw)
        self._raw = f_raw
        self._custom = tg.custom_vjp(f_raw)
        self._makers: dict = {}  # argnum -> maker(ans, *args, **kwargs) -> (g -> grad), or None
        self._any_argnum: Any = None  # defvjp_argnum's maker(argnum, ans, args, kwargs)
        self._nargs = _positional_count(f_raw)
        self._install()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._custom(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<autograd-shim primitive {get_name(self)}>"

    def __get__(self, obj: Any, objtype: Any = None) -> Any:  # as a method
        return self if obj is None else functools.partial(self, obj)

    # -- the rule handed to tapegrad
    def _maker(self, argnum: int) -> Any:
        maker = self._makers.get(argnum, _MISSING)
        if maker is _MISSING and self._any_argnum is not None:
            general = self._any_argnum
            return lambda ans, *args, **kwargs: general(argnum, ans, args, kwargs)
        return maker

    def _tapegrad_vjp(self, argnum: int) -> Any:
        maker = self._maker(argnum)
        if maker is None:
            return tg.CONSTANT_ARG
        name = get_name(self)

        def vjp(g: Any, ans: Any, *args: Any, **kwargs: Any) -> Any:
            made = self._maker(argnum)
            if made is _MISSING:
                raise NotImplementedError(f"VJP of {name} wrt argnum {argnum} not defined")
            return _one_cotangent_at_a_time(lambda g1: made(ans, *args, **kwargs)(g1), g, ans)

        return vjp

    def _install(self) -> None:
        self._custom.defvjp(*[self._tapegrad_vjp(i) for i in range(self._nargs)])
        primitive_vjps[self] = builtins.dict(self._makers)

    # -- autograd's pre-1.2 ways of giving gradients (deprecated there, kept working)
    def defgrad(self, gradfun: Callable, argnum: int = 0) -> None:
        warnings.warn(_DEPRECATED.format("defgrad"))
        self._makers[argnum] = gradfun
        self._install()

    def defvjp(self, vjpmaker: Callable, argnum: int = 0) -> None:
        warnings.warn(_DEPRECATED.format("defvjp"))

        def staged(ans: Any, *args: Any, **kwargs: Any) -> Callable:
            return lambda g: vjpmaker(g, ans, vspace(args[argnum]), vspace(g), *args, **kwargs)

        self._makers[argnum] = staged
        self._install()

    def defvjp_is_zero(self, argnums: Any = (0,)) -> None:
        warnings.warn(_DEPRECATED.format("defvjp_is_zero"))
        for i in argnums:
            self._makers[i] = None
        self._install()


def primitive(f_raw: Callable) -> Primitive:
    """Wrap ``f_raw`` so that its derivatives come from the VJPs given with :func:`defvjp`."""
    return f_raw if isinstance(f_raw, Primitive) else Primitive(f_raw)


def _require_primitive(fun: Any) -> Primitive:
    if not isinstance(fun, Primitive):
        raise ShimLimitation(
            f"defvjp on {get_name(fun)!r}, which is not an autograd primitive of this shim: redefining "
            "the derivative of a NumPy function would change tapegrad's own rule table"
        )
    return fun


def defvjp(fun: Any, *vjpmakers: Any, **kwargs: Any) -> None:
    """``defvjp(f, maker0, maker1, ..., argnums=...)``: ``maker_i(ans, *args, **kw)(g)`` is argument i's VJP."""
    prim = _require_primitive(fun)
    for argnum, maker in zip(kwargs.get("argnums", count()), vjpmakers):
        if maker is not None and not callable(maker):
            raise Exception(f"Bad VJP '{maker}' for '{get_name(fun)}'")
        prim._makers[argnum] = maker
    prim._install()


def defvjp_argnum(fun: Any, vjpmaker: Callable) -> None:
    """``vjpmaker(argnum, ans, args, kwargs)(g)`` is the VJP of argument ``argnum``."""
    prim = _require_primitive(fun)
    prim._any_argnum = vjpmaker
    prim._install()


def defvjp_argnums(fun: Any, vjpmaker: Callable) -> None:
    """``vjpmaker(argnums, ans, args, kwargs)(g)`` gives the VJPs of ``argnums``; asked one at a time."""

    def one(argnum: int, ans: Any, args: tuple, kwargs: dict) -> Callable:
        return lambda g: builtins.list(vjpmaker((argnum,), ans, args, kwargs)(g))[0]

    defvjp_argnum(fun, one)


def defjvp(fun: Any, *jvpfuns: Any, **kwargs: Any) -> None:
    primitive_jvps.setdefault(fun, {}).update(zip(kwargs.get("argnums", count()), jvpfuns))


def defjvp_argnum(fun: Any, jvpmaker: Callable) -> None:
    primitive_jvps[fun] = jvpmaker


def defjvp_argnums(fun: Any, jvpmaker: Callable) -> None:
    primitive_jvps[fun] = jvpmaker


def def_linear(fun: Any) -> None:
    primitive_jvps[fun] = "linear"


class SparseObject:
    def __init__(self, vs: Any, mut_add: Any) -> None:
        raise ShimLimitation("SparseObject is autograd's internal representation of sparse cotangents")


def _node(*args: Any, **kwargs: Any) -> Any:
    raise ShimLimitation("autograd's graph nodes (VJPNode, JVPNode) have no tapegrad counterpart")


VJPNode = JVPNode = _node

__all__ += ["ArrayVSpace", "ComplexArrayVSpace", "SequenceVSpace", "ListVSpace", "TupleVSpace",
            "NamedTupleVSpace", "DictVSpace", "Primitive", "subvals", "raw", "is_tracer"]
