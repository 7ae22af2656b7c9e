"""Derivatives of statistics: average, var, std, median, percentile, quantile and NaN variants.

Everything here is a composite of rules that already exist (``var`` is the
mean of squared deviations, ``nanmean`` a mean with a ``where`` mask) except
one internal primitive, :func:`select_sorted`, which picks order statistics
(``np.sort`` then ``np.take_along_axis``) for the quantile family.

Ties in order statistics: the cotangent of a selected order statistic is
split equally among all entries equal to it, so ``median([1, 3, 3])`` sends
``1/2`` to each 3.  Quantile methods are NumPy's thirteen; each result is a
linear interpolation ``(1 - gamma) * s[lo] + gamma * s[hi]`` of two order
statistics ``s`` whose positions depend only on ``q`` and the sample size, so
the derivative in ``a`` is exact and the derivative in a traced ``q`` is
``(s[hi] - s[lo]) * d gamma / dq`` (zero for the discrete methods).
"""

from __future__ import annotations

import warnings

import numpy as np

from ..dispatch import primitive, strip
from ..errors import NonDifferentiableArgumentError
from ..registry import CONSTANT_ARG, defcomposite, defvjp
from ._util import negative_axes
from .reductions import given_kwargs, merge_axes, no_out

_NoValue = np._NoValue


def _real_dtype(a):
    dtype = np.result_type(a)
    if dtype.kind == "c":
        return np.finfo(dtype).dtype
    return dtype if dtype.kind == "f" else np.dtype(np.float64)


# --------------------------------------------------------------- average
def _average(a, axis=None, weights=None, returned=False, *, keepdims=_NoValue):
    keepdims = False if keepdims is _NoValue else keepdims
    if weights is None:
        avg = np.mean(a, axis=axis, keepdims=keepdims)
        scl = np.asarray(np.size(a) // max(np.size(avg), 1), dtype=np.result_type(avg))
    else:
        nd = np.ndim(a)
        if np.shape(weights) != np.shape(a):
            if axis is None:
                raise TypeError("Axis must be specified when shapes of a and weights differ.")
            axes = tuple(int(x) % nd for x in (axis if isinstance(axis, (tuple, list)) else (axis,)))
            if np.shape(weights) != tuple(np.shape(a)[x] for x in axes):
                raise ValueError("Shape of weights must be consistent with shape of a along specified axis.")
            order = tuple(int(i) for i in np.argsort(axes))
            if order != tuple(range(len(axes))):  # weights' axes follow the order given in `axis`
                weights = np.transpose(weights, order)
            weights = np.reshape(weights, tuple(n if x in axes else 1 for x, n in enumerate(np.shape(a))))
        scl = np.sum(weights, axis=axis, keepdims=keepdims)
        if np.any(strip(scl) == 0.0):
            raise ZeroDivisionError("Weights sum to zero, can't be normalized")
        avg = np.sum(a * weights, axis=axis, keepdims=keepdims) / scl
    if not returned:
        return avg
    if np.shape(scl) != np.shape(avg):
        scl = np.broadcast_to(scl, np.shape(avg))
    return avg, scl


defcomposite(np.average, _average)


# --------------------------------------------------------------- var, std
def _ddof(ddof, correction):
    if correction is _NoValue:
        return ddof
    if ddof != 0:
        raise ValueError("ddof and correction can't be provided simultaneously.")
    return correction


def _abs2(d):
    """``|d|**2`` as a polynomial (``abs`` would lose the second derivative at 0)."""
    return np.real(d * np.conjugate(d)) if np.iscomplexobj(d) else d * d


def _variance(a, axis, dtype, ddof, keepdims, where, mean, nan_policy):
    """Shared body of var/std/nanvar/nanstd: sum of squared deviations / (count - ddof).

    Returns the variance and a mask of the slices where it is identically zero
    (see :func:`_std_from_var`).
    """
    if nan_policy:
        nan = np.isnan(a)
        where = ~nan if where is _NoValue else ~nan & where
        a = np.where(nan, 0, a)
    masked = where is not _NoValue and where is not True
    kw = {"where": where} if masked else {}
    own_mean = mean is _NoValue
    if own_mean:
        mean = np.mean(a, axis=axis, dtype=dtype, keepdims=True, **kw)
    deviations = a - mean
    if masked:  # entries outside the mask (NaN means of empty slices) reach neither value nor derivative
        deviations = np.where(where, deviations, 0)
    squares = np.sum(_abs2(deviations), axis=axis, dtype=dtype, keepdims=keepdims, **kw)
    shape = np.shape(a)
    if masked:
        count = np.sum(np.broadcast_to(where, shape), axis=axis, keepdims=keepdims)
    else:
        count = np.prod([shape[x] for x in negative_axes(axis, len(shape))], dtype=np.int64)
    dof = np.maximum(count - ddof, 0)
    empty = dof <= 0
    # A slice of at most one entry has no spread about its own mean: its squared deviations
    # are identically zero (as functions of the data), so var and std are constants there.
    flat = (count <= 1) & ~empty & own_mean
    if np.any(empty):
        warnings.warn("Degrees of freedom <= 0 for slice.", RuntimeWarning, stacklevel=4)
        # NumPy's answer there (nanvar: NaN; var divides by zero: inf, or NaN for 0/0) stays
        # inf or NaN under any change of the data: a constant, with derivative 0.  Dividing
        # the traced sum by 0 instead would send 0 * inf = NaN to every slice's entries.
        real = _real_dtype(squares)
        if nan_policy:
            numpy_value = np.nan
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                numpy_value = strip(squares) / np.asarray(dof, dtype=real)
        return np.where(empty, numpy_value, squares / np.where(empty, 1, dof).astype(real)), flat
    with np.errstate(divide="ignore", invalid="ignore"):
        return squares / np.asarray(dof, dtype=_real_dtype(squares)), flat


def _std_from_var(res, flat):
    """``sqrt(res)``, except on slices where ``res`` is identically zero (``flat``).

    There std is identically zero too, so every derivative is 0; ``sqrt``'s
    derivative ``1 / (2 sqrt(0))`` times var's zero derivative would be NaN.
    The value stays ``res`` (0, or NaN from NaN data).
    """
    if not np.any(flat):
        return np.sqrt(res)
    return np.where(flat, res, np.sqrt(np.where(flat, 1, res)))


def _var_like(root, nan_policy):
    name = ("numpy.nan" if nan_policy else "numpy.") + ("std" if root else "var")

    def impl(a, axis=None, dtype=None, out=None, ddof=0, keepdims=_NoValue, *, where=_NoValue,
             mean=_NoValue, correction=_NoValue):
        no_out(name, out)
        keepdims = False if keepdims is _NoValue else keepdims
        res, flat = _variance(a, axis, dtype, _ddof(ddof, correction), keepdims, where, mean, nan_policy)
        return _std_from_var(res, flat) if root else res

    return impl


defcomposite(np.var, _var_like(False, False))
defcomposite(np.std, _var_like(True, False))
defcomposite(np.nanvar, _var_like(False, True), note="NaNs get no gradient")
defcomposite(np.nanstd, _var_like(True, True), note="NaNs get no gradient")


def _nanmean(a, axis=None, dtype=None, out=None, keepdims=_NoValue, *, where=_NoValue):
    no_out("numpy.nanmean", out)
    nan = np.isnan(a)
    valid = ~nan if where is _NoValue else ~nan & where
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = np.mean(np.where(nan, 0, a), axis=axis, dtype=dtype, where=valid, **given_kwargs(keepdims=keepdims))
    if not np.all(np.any(valid, axis=axis)):
        warnings.warn("Mean of empty slice", RuntimeWarning, stacklevel=3)
    return res


defcomposite(np.nanmean, _nanmean, note="NaNs get no gradient")


# --------------------------------------------------------------- order statistics
def _select_sorted(y, idx):
    """``np.take_along_axis(np.sort(y, -1), idx, -1)``: order statistics of the last axis."""
    return np.take_along_axis(np.sort(y, axis=-1), idx, axis=-1)


def _select_sorted_vjp(g, ans, y, idx):
    # Each selected order statistic sends its cotangent to the entries equal to it, split equally.
    hits = np.expand_dims(strip(y), -1) == np.expand_dims(strip(ans), -2)
    weights = hits / np.maximum(np.sum(hits, axis=-2, keepdims=True), 1)
    return np.sum(weights * np.expand_dims(g, -2), axis=-1)


select_sorted = primitive(_select_sorted)
defvjp(select_sorted, _select_sorted_vjp, CONSTANT_ARG, note="ties split equally")

# (alpha, beta) of Hyndman & Fan's continuous sample quantiles.
_CONTINUOUS = {
    "interpolated_inverted_cdf": (0.0, 1.0),
    "hazen": (0.5, 0.5),
    "weibull": (0.0, 0.0),
    "median_unbiased": (1 / 3.0, 1 / 3.0),
    "normal_unbiased": (3 / 8.0, 3 / 8.0),
}
_DISCRETE = ("inverted_cdf", "closest_observation", "lower", "higher", "nearest")
METHODS = ("linear", "midpoint", "averaged_inverted_cdf") + tuple(_CONTINUOUS) + _DISCRETE


def _boundary_index(index, take_lower):
    """Discrete methods: ``floor(index)`` where ``take_lower`` holds, else the next one."""
    lower = np.floor(index)
    return np.where(take_lower(index - lower, lower), lower, lower + 1)


def _positions(method, n, q):
    """``(lo, hi, gamma)`` for sample sizes ``n`` and quantiles ``q`` (possibly traced).

    ``lo``/``hi`` are float positions in the sorted sample (clipped later),
    ``gamma`` the interpolation weight or ``None`` when ``lo == hi``.
    """
    qr = strip(q)
    if method in _DISCRETE:
        if method == "lower":
            pos = np.floor((n - 1) * qr)
        elif method == "higher":
            pos = np.ceil((n - 1) * qr)
        elif method == "nearest":
            pos = np.around((n - 1) * qr)
        elif method == "inverted_cdf":
            pos = _boundary_index(n * qr - 1, lambda frac, low: frac == 0)
        else:  # closest_observation: the nearest even order statistic (1-based) at a tie
            pos = _boundary_index(n * qr - 1.5, lambda frac, low: (frac == 0) & (low % 2 == 1))
        return pos, pos, None
    if method == "linear":
        virtual = (n - 1) * q
    elif method == "midpoint":
        virtual = 0.5 * (np.floor((n - 1) * qr) + np.ceil((n - 1) * qr))
    elif method == "averaged_inverted_cdf":
        virtual = n * qr - 1
    else:
        alpha, beta = _CONTINUOUS[method]
        virtual = n * q + (alpha + q * (1 - alpha - beta)) - 1
    raw = strip(virtual)
    lo = np.floor(raw)
    gamma = virtual - lo
    if method == "midpoint":
        gamma = np.where(raw % 1 == 0, 0.0, 0.5)
    elif method == "averaged_inverted_cdf":
        gamma = np.where(strip(gamma) == 0, 0.5, 1.0)
    # Outside the sample the result is the extreme order statistic.
    lo = np.where(raw >= n - 1, n - 1, np.where(raw < 0, 0, lo))
    hi = np.where((raw >= n - 1) | (raw < 0), lo, lo + 1)
    return lo, hi, gamma


def _lerp(a, b, t):
    """NumPy's two-sided linear interpolation (exact at both ends)."""
    diff = b - a
    return np.where(np.greater_equal(t, 0.5), b - diff * (1 - t), a + diff * t)


def _quantile(a, q, axis, method, keepdims, weights, ignore_nan, name):
    """Quantiles of ``a`` at ``q`` in [0, 1] along ``axis``; NaNs ignored or propagated."""
    if weights is not None:
        raise NonDifferentiableArgumentError(f"{name}: weights= is not supported by tapegrad")
    if method not in METHODS:
        raise ValueError(f"{method!r} is not a valid method. Use one of: {METHODS}")
    qr = np.asarray(strip(q), dtype=np.float64)
    if np.any(qr < 0) or np.any(qr > 1) or np.any(np.isnan(qr)):
        raise ValueError("Quantiles must be in the range [0, 1]")
    y, (src, dst, rest, red) = merge_axes(a, axis)
    size = np.shape(y)[-1]
    if size == 0:
        raise ValueError(f"{name} of an empty slice is undefined")
    nan = np.isnan(strip(y))
    if ignore_nan:
        n = np.sum(~nan, axis=-1)
        bad = n == 0
        if np.any(bad):
            warnings.warn("All-NaN slice encountered", RuntimeWarning, stacklevel=4)
    else:
        n = np.full(rest, size)
        bad = np.any(nan, axis=-1)
    qshape = np.shape(qr)
    qcol = np.reshape(q, qshape + (1,) * len(rest)) if qshape else q
    lo, hi, gamma = _positions(method, n, qcol)
    # Selection positions shaped rest + (2 * q.size,): low ends first, then high ends.
    m = int(np.prod(qshape, dtype=np.int64))
    top = np.maximum(n - 1, 0)

    def as_index(pos):
        pos = np.clip(np.broadcast_to(pos, qshape + rest), 0, top).astype(np.intp)
        return np.moveaxis(np.reshape(pos, (m,) + rest), 0, -1)

    values = select_sorted(y, np.concatenate([as_index(lo), as_index(hi)], axis=-1))

    def back(v):
        return np.reshape(np.moveaxis(v, -1, 0), qshape + rest)

    res = back(values[..., :m])
    if gamma is not None:
        if type(q) in (int, float):  # a Python scalar q keeps a's precision, as in NumPy
            gamma = gamma.astype(_real_dtype(a))
        res = _lerp(res, back(values[..., m:]), gamma)
    if np.any(bad):
        res = np.where(bad, np.nan, res)
    if keepdims:
        kept = list(np.shape(a))
        for s in src:
            kept[s] = 1
        res = np.reshape(res, qshape + tuple(kept))
    return res


def _quantile_like(scale, ignore_nan, name):
    def impl(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=_NoValue, *,
             weights=None):
        no_out(name, out)
        keepdims = False if keepdims is _NoValue else keepdims
        if scale != 1:
            q = q / scale if type(q) in (int, float) else np.true_divide(q, scale)
        return _quantile(a, q, axis, method, keepdims, weights, ignore_nan, name)

    return impl


def _median_like(ignore_nan, name):
    def impl(a, axis=None, out=None, overwrite_input=False, keepdims=_NoValue):
        no_out(name, out)
        keepdims = False if keepdims is _NoValue else keepdims
        return _quantile(a, 0.5, axis, "linear", keepdims, None, ignore_nan, name)

    return impl


_TIES = "ties split equally among entries equal to a selected order statistic"
defcomposite(np.quantile, _quantile_like(1, False, "numpy.quantile"), note=_TIES)
defcomposite(np.percentile, _quantile_like(100, False, "numpy.percentile"), note=_TIES)
defcomposite(np.median, _median_like(False, "numpy.median"), note=_TIES)
defcomposite(np.nanquantile, _quantile_like(1, True, "numpy.nanquantile"), note=_TIES + "; NaNs get no gradient")
defcomposite(np.nanpercentile, _quantile_like(100, True, "numpy.nanpercentile"), note=_TIES + "; NaNs get no gradient")
defcomposite(np.nanmedian, _median_like(True, "numpy.nanmedian"), note=_TIES + "; NaNs get no gradient")
