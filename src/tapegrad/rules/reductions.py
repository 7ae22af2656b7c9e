"""Derivatives of reductions, cumulative sums/products and differences.

Covers ``sum prod mean max min amax amin ptp cumsum cumprod cumulative_sum
cumulative_prod diff ediff1d trapezoid`` and the NaN-ignoring ``nansum nanprod
nanmax nanmin nancumsum nancumprod`` (the statistics live in
:mod:`tapegrad.rules.statistics`).

Conventions
-----------
* Ties in max/min: the cotangent is split equally between the tied entries
  (the same convention as ``np.maximum``), so the result is a valid
  subgradient and symmetric in the inputs.
* ``prod`` and ``cumprod`` never divide by an entry that is zero: where ``x``
  has zeros, the "product of the other entries" is built from exclusive
  cumulative products (``prod``) or, for ``cumprod``, from cumulative products
  of ``x`` with one entry replaced by 1 (O(n**2) work along the axis, only
  taken when the input has zeros).  Both are polynomial identities, so every
  order of derivative is exact, zeros included.
* ``cumsum``'s adjoint is a reversed cumsum; the two are a pair of primitives
  whose VJPs are each other.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..dispatch import _reject_out, primitive
from ..tracer import unwrap_above
from ..errors import UnsupportedFunctionError
from ..lazy import is_dask
from ..registry import CONSTANT_ARG, defcomposite, defvjp
from ._util import negative_axes, unreduce

_NoValue = np._NoValue


def _given(value, default):
    """NumPy's ``<no value>`` sentinel (or None) replaced by ``default``."""
    return default if value is _NoValue or value is None else value


def given_kwargs(**kwargs):
    """The keyword arguments that were given (NumPy's ``<no value>`` sentinel dropped).

    Rules read ``keepdims``/``where`` from the recorded call, so the sentinel
    must never be forwarded on a traced call.
    """
    return {k: v for k, v in kwargs.items() if v is not _NoValue}


def no_out(name, out):
    """Refuse ``out=`` in a composite: the traced result cannot be written into it."""
    if out is not None:
        _reject_out(name, {"out": out})


def keep_axes(value, axis, ndim, keepdims):
    """``value`` (a reduction's result) with the reduced axes kept as size 1."""
    return value if keepdims else np.expand_dims(value, negative_axes(axis, ndim))


def merge_axes(x, axis):
    """Move the reduced ``axis`` of ``x`` to the end and merge them into one.

    Returns ``(y, info)``: ``y`` has shape ``rest + (n,)`` and ``info`` undoes it
    with :func:`split_axes`.  ``x`` carries no batch axes (it is an argument).
    """
    nd = np.ndim(x)
    src = [a + nd for a in negative_axes(axis, nd)]
    dst = list(range(nd - len(src), nd))
    y = np.moveaxis(x, src, dst) if src != dst else x
    shape = np.shape(y)
    rest, red = shape[: nd - len(src)], shape[nd - len(src):]
    y = np.reshape(y, rest + (int(np.prod(red, dtype=np.int64)),))
    return y, (src, dst, rest, red)


def split_axes(y, info):
    """Inverse of :func:`merge_axes` (``y`` may carry leading batch axes)."""
    src, dst, rest, red = info
    nb = np.ndim(y) - len(rest) - 1
    y = np.reshape(y, np.shape(y)[:nb] + rest + red)
    if src == dst:
        return y
    nd = len(rest) + len(red)
    return np.moveaxis(y, [d - nd for d in dst], [s - nd for s in src])


# --------------------------------------------------------------- sum, mean, max, min
def _unmasked(where) -> bool:
    """No ``where=`` mask: the default, or NumPy's ``_NoValue`` (which ``np.nansum`` and friends pass on)."""
    return where is True or where is np._NoValue


def _where_mask(g, where):
    return g if _unmasked(where) else g * where


def _sum_vjp(g, ans, x, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    return _where_mask(unreduce(g, np.shape(x), axis, keepdims, like=x), where)


def _count(shape, axis, where):
    if not _unmasked(where):
        return np.sum(np.broadcast_to(where, shape), axis=axis, keepdims=True)
    return np.prod([shape[a] for a in negative_axes(axis, len(shape))], dtype=np.int64)


def _mean_vjp(g, ans, x, axis=None, dtype=None, out=None, keepdims=False, where=True):
    shape = np.shape(x)
    # An empty slice (all masked) has a NaN mean; keep 0/0 out of the other slices' cotangents.
    count = np.maximum(_count(shape, axis, where), 1)
    if _unmasked(where):  # a scalar count: divide before broadcasting (and a Dask g stays a lazy view)
        return unreduce(g / count, shape, axis, keepdims, like=x)
    return _where_mask(unreduce(g, shape, axis, keepdims, like=x) / count, where)


def _extremum_vjp(g, ans, x, axis=None, out=None, keepdims=False, initial=None, where=True):
    shape = np.shape(x)
    hits = np.equal(x, keep_axes(ans, axis, len(shape), keepdims))
    if not _unmasked(where):
        hits = hits & where
    # A slice won by ``initial`` has no hit and gets no cotangent.
    weights = hits / np.maximum(np.sum(hits, axis=axis, keepdims=True), 1)
    return unreduce(g, shape, axis, keepdims) * weights


# Only x's shape is read: a summed array need not stay alive until the sweep.
defvjp(np.sum, _sum_vjp, needs=((),), banded=True, sparse=True)
defvjp(np.mean, _mean_vjp, needs=((),), sparse=True)
for _f in (np.max, np.min, np.amax, np.amin):
    defvjp(_f, _extremum_vjp, note="ties split equally", sparse=True)


def _ptp(a, axis=None, out=None, keepdims=False):
    no_out("numpy.ptp", out)
    keepdims = _given(keepdims, False)
    return np.max(a, axis=axis, keepdims=keepdims) - np.min(a, axis=axis, keepdims=keepdims)


defcomposite(np.ptp, _ptp, note="max - min; ties split equally")


def _add_reduce(x, axis=0, dtype=None, out=None, keepdims=False, initial=_NoValue, where=True):
    kwargs = {} if initial is _NoValue else {"initial": initial}
    return np.sum(x, axis=axis, dtype=dtype, keepdims=keepdims, where=where, **kwargs)


def _extremum_reduce(fun):
    def reduce(x, axis=0, dtype=None, out=None, keepdims=False, initial=_NoValue, where=True):
        kwargs = {} if initial is _NoValue else {"initial": initial}
        return fun(x, axis=axis, keepdims=keepdims, where=where, **kwargs)

    return reduce


defcomposite((np.add, "reduce"), _add_reduce)
defcomposite((np.maximum, "reduce"), _extremum_reduce(np.max))
defcomposite((np.minimum, "reduce"), _extremum_reduce(np.min))


# --------------------------------------------------------------- cumsum
def _rev_cumsum_impl(x, axis):
    """Sum from each position to the end along ``axis`` (the adjoint of cumsum)."""
    return np.flip(np.cumsum(np.flip(x, axis), axis=axis), axis)


rev_cumsum = primitive(_rev_cumsum_impl)
defvjp(rev_cumsum, lambda g, ans, x, axis: np.cumsum(g, axis=axis), CONSTANT_ARG)


def _cum_axis(x, axis):
    """The axis of a cumulative op as a negative axis; ``None`` means the flattened input."""
    return -1 if axis is None else negative_axes(axis, max(np.ndim(x), 1))[0]


def _unflatten(dx, x, axis):
    """A flattened cumulative op (``axis=None``) maps its cotangent back to ``x``'s shape."""
    if axis is None or np.ndim(x) == 0:
        nb = np.ndim(dx) - 1
        return np.reshape(dx, np.shape(dx)[:nb] + np.shape(x))
    return dx


def _cumsum_vjp(g, ans, x, axis=None, dtype=None, out=None):
    return _unflatten(rev_cumsum(g, _cum_axis(x, axis)), x, axis)


defvjp(np.cumsum, _cumsum_vjp)


# --------------------------------------------------------------- cumprod
def _cumprod_dense_vjp(g, x, ax):
    """``dx_k = sum_{i>=k} g_i prod_{j<=i, j!=k} x_j`` without division (O(n**2)).

    Row ``k`` of ``ones_k`` is ``x`` with entry ``k`` replaced by 1, so its
    cumulative product is the derivative of ``cumprod(x)`` w.r.t. ``x_k``.
    """
    xm = np.moveaxis(x, ax, -1)
    gm = np.moveaxis(g, ax, -1)
    n = np.shape(xm)[-1]
    ones_k = np.where(np.eye(n, dtype=bool), 1, np.expand_dims(xm, -2))
    upper = np.triu(np.ones((n, n), dtype=np.result_type(x)))
    dx = np.sum(np.cumprod(ones_k, axis=-1) * upper * np.expand_dims(gm, -2), axis=-1)
    return np.moveaxis(dx, -1, ax)


#: Longest axis for which cumprod's VJP of a Dask value takes the exact O(n**2) form.
_LAZY_DENSE_MAX = 256


def _cumprod_vjp(g, ans, x0, axis=None, dtype=None, out=None):
    x = np.ravel(x0) if axis is None or np.ndim(x0) == 0 else x0
    ax = _cum_axis(x, axis)
    zero = np.equal(x, 0)
    dx = rev_cumsum(g * ans, ax)
    # A Dask x cannot be asked whether it has zeros without computing it: always take the
    # exact form below (the dense product is O(n**2) along the axis, so only for short axes).
    lazy = is_dask(unwrap_above(x, 0))
    if lazy and np.shape(x)[ax] > _LAZY_DENSE_MAX:
        raise UnsupportedFunctionError(
            "numpy.cumprod",
            f"On a Dask value its exact VJP needs O(n**2) work along an axis of length {np.shape(x)[ax]} "
            f"(> {_LAZY_DENSE_MAX}); rechunk and use np.exp(np.cumsum(np.log(x))) for positive x.",
        )
    if lazy or zero.any():
        # Away from zeros, dx_k = (sum_{i>=k} g_i y_i) / x_k is exact; at zeros use the dense form.
        dx = np.where(zero, _cumprod_dense_vjp(g, x, ax), dx / np.where(zero, 1, x))
    else:
        dx = dx / x
    return _unflatten(dx, x0, axis)


defvjp(np.cumprod, _cumprod_vjp, note="exact with zeros (O(n**2) along the axis at zero entries)")


def _cumulative(cum, fill):
    def impl(x, /, *, axis=None, dtype=None, out=None, include_initial=False):
        name = f"numpy.cumulative_{'sum' if fill == 0 else 'prod'}"
        no_out(name, out)
        if axis is None:
            if np.ndim(x) > 1:
                raise ValueError("For arrays which have more than one dimension ``axis`` argument is required.")
            x = np.reshape(x, (-1,))
            axis = 0
        res = cum(x, axis=axis, dtype=dtype)
        if not include_initial:
            return res
        nd = np.ndim(res)
        first = list(np.shape(res))
        first[axis % nd] = 1
        return np.concatenate([np.full(first, fill, dtype=np.result_type(res)), res], axis=axis)

    return impl


defcomposite(np.cumulative_sum, _cumulative(np.cumsum, 0))
defcomposite(np.cumulative_prod, _cumulative(np.cumprod, 1))


# --------------------------------------------------------------- prod
def _prod_others(x, axis):
    """Product of the other entries of each reduced slice, by exclusive cumulative products."""
    y, info = merge_axes(x, axis)
    ones = np.ones(np.shape(y)[:-1] + (1,), dtype=np.result_type(x))
    left = np.cumprod(np.concatenate([ones, y[..., :-1]], axis=-1), axis=-1)
    right = np.cumprod(np.concatenate([ones, y[..., :0:-1]], axis=-1), axis=-1)[..., ::-1]
    return split_axes(left * right, info)


def _prod_vjp(g, ans, x, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    shape = np.shape(x)
    masked = not _unmasked(where)
    xw = np.where(where, x, 1) if masked else x
    # A Dask x cannot be asked whether it has zeros without computing it: the exact form.
    if is_dask(unwrap_above(xw, 0)) or np.equal(xw, 0).any():
        others = _prod_others(xw, axis)
        if initial is not None:
            others = others * initial
    else:
        others = keep_axes(ans, axis, len(shape), keepdims) / xw
    return _where_mask(unreduce(g, shape, axis, keepdims) * others, where)


defvjp(np.prod, _prod_vjp, note="exact with zeros (exclusive cumulative products, no division)", sparse=True)


# --------------------------------------------------------------- differences, trapezoid
def _along(axis, ndim, index):
    """An index tuple applying ``index`` to ``axis`` of an ``ndim``-d array."""
    return (slice(None),) * (axis % ndim) + (index,)


def _diff(a, n=1, axis=-1, prepend=_NoValue, append=_NoValue):
    if n == 0:
        return a
    if n < 0:
        raise ValueError("order must be non-negative but got " + repr(n))
    nd = np.ndim(a)
    if nd == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    axis = negative_axes(axis, nd)[0] + nd
    parts = []
    for extra in (prepend, None, append):
        if extra is None:
            parts.append(a)
        elif extra is not _NoValue:
            if np.ndim(extra) == 0:
                shape = list(np.shape(a))
                shape[axis] = 1
                extra = np.broadcast_to(extra, tuple(shape))
            parts.append(extra)
    if len(parts) > 1:
        a = np.concatenate(parts, axis=axis)
    for _ in range(n):
        a = a[_along(axis, nd, slice(1, None))] - a[_along(axis, nd, slice(None, -1))]
    return a


def _ediff1d(ary, to_end=None, to_begin=None):
    flat = np.ravel(ary)
    parts = [flat[1:] - flat[:-1]]
    if to_begin is not None:
        parts.insert(0, np.ravel(to_begin))
    if to_end is not None:
        parts.append(np.ravel(to_end))
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _trapezoid(y, x=None, dx=1.0, axis=-1):
    nd = np.ndim(y)
    if x is None:
        d = dx
    elif np.ndim(x) == 1:
        d = _diff(x)
        shape = [1] * nd
        shape[axis % nd] = np.shape(d)[0]
        d = np.reshape(d, tuple(shape))
    else:
        d = _diff(x, axis=axis)
    upper = y[_along(axis, nd, slice(1, None))]
    lower = y[_along(axis, nd, slice(None, -1))]
    return np.sum(d * (upper + lower) / 2.0, axis=axis)


defcomposite(np.diff, _diff)
defcomposite(np.ediff1d, _ediff1d)
defcomposite(np.trapezoid, _trapezoid)


# --------------------------------------------------------------- NaN-ignoring reductions
def _nan_to(a, fill):
    """``a`` with NaNs replaced by ``fill`` (no gradient reaches the NaN entries)."""
    return np.where(np.isnan(a), fill, a)


def _nansum(a, axis=None, dtype=None, out=None, keepdims=_NoValue, initial=_NoValue, where=_NoValue):
    no_out("numpy.nansum", out)
    kwargs = given_kwargs(keepdims=keepdims, initial=initial, where=where)
    return np.sum(_nan_to(a, 0), axis=axis, dtype=dtype, **kwargs)


def _nanprod(a, axis=None, dtype=None, out=None, keepdims=_NoValue, initial=_NoValue, where=_NoValue):
    no_out("numpy.nanprod", out)
    kwargs = given_kwargs(keepdims=keepdims, initial=initial, where=where)
    return np.prod(_nan_to(a, 1), axis=axis, dtype=dtype, **kwargs)


def _nan_extremum(fun, fill):
    name = f"numpy.nan{fun.__name__}"

    def impl(a, axis=None, out=None, keepdims=_NoValue, initial=_NoValue, where=_NoValue):
        no_out(name, out)
        nan = np.isnan(a)
        kwargs = given_kwargs(keepdims=keepdims, initial=initial, where=where)
        res = fun(np.where(nan, fill, a), axis=axis, **kwargs)
        if initial is _NoValue:
            kept = _given(keepdims, False)
            valid = ~nan if where is _NoValue else ~nan & where
            empty = ~np.any(valid, axis=axis, keepdims=kept)
            if np.any(empty):
                warnings.warn("All-NaN slice encountered", RuntimeWarning, stacklevel=3)
                res = np.where(empty, np.nan, res)
        return res

    return impl


def _nancum(cum, fill):
    def impl(a, axis=None, dtype=None, out=None):
        no_out(f"numpy.nan{cum.__name__}", out)
        return cum(_nan_to(a, fill), axis=axis, dtype=dtype)

    return impl


defcomposite(np.nansum, _nansum)
defcomposite(np.nanprod, _nanprod)
defcomposite(np.nanmax, _nan_extremum(np.max, -np.inf), note="ties split equally; NaNs get no gradient")
defcomposite(np.nanmin, _nan_extremum(np.min, np.inf), note="ties split equally; NaNs get no gradient")
defcomposite(np.nancumsum, _nancum(np.cumsum, 0))
defcomposite(np.nancumprod, _nancum(np.cumprod, 1))

__all__ = ["merge_axes", "split_axes", "keep_axes", "no_out", "given_kwargs", "rev_cumsum"]
