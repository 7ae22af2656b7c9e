"""Miscellaneous NumPy functions, all composites of calls that have rules.

* ``angle``: ``arctan2(imag, real)`` for complex input.  For real input the
  angle is 0 or pi, locally constant, so the output is a constant.
* ``cov``/``corrcoef``: NumPy's formulas on tracers (``rowvar``, ``bias``,
  ``ddof``, ``y``, integer ``fweights`` and differentiable ``aweights``).
* ``gradient``: the same second-order finite differences as NumPy, built by
  slicing and concatenation; scalar spacings and coordinate arrays may be
  traced too (traced coordinates always use the non-uniform formulas, which
  equal the uniform ones when the spacing is uniform).
* ``apply_along_axis``/``apply_over_axes``: the user's function runs on
  traced slices (any NumPy code tapegrad can trace) and the results are
  stacked.
* ``piecewise``: each function sees only the entries its condition selects
  (as in NumPy, so a function that is undefined elsewhere does not poison
  the gradient); the pieces are assembled with ``np.where``.
* ``histogram2d``/``histogramdd``: like ``np.histogram``: counts are
  constant, computed edges follow ``min``/``max`` of the sample (or a traced
  ``range``/``bins``), and traced ``weights`` and ``density=True`` carry
  gradients.
* ``save``/``savetxt``/``savez``/``savez_compressed`` write the raw values: no
  gradient flows through a file.
"""

from __future__ import annotations

import operator
import warnings

import numpy as np
from numpy.lib.array_utils import normalize_axis_index, normalize_axis_tuple

from ..dispatch import strip, strip_all
from ..registry import defcomposite, defconstant
from ..tracer import Tracer
from .indexing import astype, untake

__all__ = ["as_dtype", "as_array"]


# ------------------------------------------------------------------ helpers
def as_array(x):
    """A tracer as it is; anything else as an ndarray (what NumPy's ``asanyarray`` does)."""
    return x if type(x) is Tracer else np.asanyarray(x)


def as_dtype(x, dtype):
    """``x`` cast to ``dtype`` (the effect of NumPy's in-place ops and ``dtype=`` arguments)."""
    dtype = np.dtype(dtype)
    if type(x) is not Tracer:
        return np.asarray(x, dtype=dtype)
    return x if x.dtype == dtype else astype(x, dtype)


# ------------------------------------------------------------------ angle
def _angle(z, deg=False):
    if np.iscomplexobj(z):
        a = np.arctan2(np.imag(z), np.real(z))
    else:
        # 0 or pi: locally constant (the jump at 0 has no derivative).
        a = np.arctan2(0, strip(z))
    return a * (180 / np.pi) if deg else a


defcomposite(np.angle, _angle, note="arctan2(imag, real); constant for real input (0 or pi)")


# ------------------------------------------------------------------ cov / corrcoef
def _as_rows(v, rowvar, dtype):
    """``v`` as a 2-D array of variables (rows) by observations (columns)."""
    if np.ndim(v) > 2:
        raise ValueError("y has more than 2 dimensions")
    rows = np.atleast_2d(as_dtype(as_array(v), dtype))
    return rows.T if not rowvar and np.shape(rows)[0] != 1 else rows


def _frequency_weights(fweights, n):
    fweights = np.asarray(strip(fweights), dtype=float)
    if not np.all(fweights == np.around(fweights)):
        raise TypeError("fweights must be integer")
    if fweights.ndim > 1:
        raise RuntimeError("cannot handle multidimensional fweights")
    if fweights.shape[0] != n:
        raise RuntimeError("incompatible numbers of samples and fweights")
    if np.any(fweights < 0):
        raise ValueError("fweights cannot be negative")
    return fweights


def _analytic_weights(aweights, n):
    aweights = as_dtype(as_array(aweights), float)
    if np.ndim(aweights) > 1:
        raise RuntimeError("cannot handle multidimensional aweights")
    if np.shape(aweights)[0] != n:
        raise RuntimeError("incompatible numbers of samples and aweights")
    if np.any(strip(aweights) < 0):
        raise ValueError("aweights cannot be negative")
    return aweights


def _cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *, dtype=None):
    if ddof is not None and ddof != int(ddof):
        raise ValueError("ddof must be integer")
    if dtype is None:
        dtype = np.result_type(*[np.asarray(strip(v)) for v in (m, y) if v is not None], np.float64)
    if np.ndim(m) > 2:
        raise ValueError("m has more than 2 dimensions")
    x = np.atleast_2d(as_dtype(as_array(m), dtype))
    if not rowvar and np.ndim(m) != 1:
        x = x.T
    if np.shape(x)[0] == 0:
        return np.array([]).reshape(0, 0)
    if y is not None:
        x = np.concatenate((x, _as_rows(y, rowvar, dtype)), axis=0)
    if ddof is None:
        ddof = 1 if bias == 0 else 0
    n = np.shape(x)[1]
    w = None if fweights is None else _frequency_weights(fweights, n)
    if aweights is not None:
        aweights = _analytic_weights(aweights, n)
        w = aweights if w is None else w * aweights
    if w is None:
        avg = np.mean(x, axis=1)
        fact = n - ddof
    else:
        w_sum = np.sum(w)
        avg = np.sum(x * w, axis=1) / w_sum
        if ddof == 0:
            fact = w_sum
        elif aweights is None:
            fact = w_sum - ddof
        else:
            fact = w_sum - ddof * np.sum(w * aweights) / w_sum
    if strip(fact) <= 0:
        warnings.warn("Degrees of freedom <= 0 for slice", RuntimeWarning, stacklevel=5)
        fact = 0.0
    x = as_dtype(x - avg[:, None], x.dtype)  # NumPy subtracts in place
    x_t = x.T if w is None else (x * w).T
    c = np.dot(x, np.conjugate(x_t))
    with np.errstate(divide="ignore"):
        scale = np.true_divide(1, fact)
    return np.squeeze(as_dtype(c * scale, c.dtype))


def _corrcoef(x, y=None, rowvar=True, *, dtype=None):
    c = np.cov(x, y, rowvar, dtype=dtype)
    if np.ndim(c) != 2:
        return c / c
    stddev = np.sqrt(np.real(np.diagonal(c)))
    c = c / stddev[:, None]
    c = c / stddev[None, :]
    # Rounding can push |c| past 1; NumPy clips (a tie with the bound splits the cotangent).
    if np.iscomplexobj(c):
        return np.clip(np.real(c), -1, 1) + 1j * np.clip(np.imag(c), -1, 1)
    return np.clip(c, -1, 1)


defcomposite(np.cov, _cov, note="fweights constant, aweights differentiable")
defcomposite(np.corrcoef, _corrcoef, note="clipped to [-1, 1] like NumPy (a tie with the bound splits the cotangent)")


# ------------------------------------------------------------------ gradient
def _spacing(d, length):
    """Scalar spacing (uniform) or the differences of 1-D coordinates (non-uniform)."""
    if np.ndim(d) == 0:
        return d  # Python scalars stay weakly typed, as in NumPy
    d = as_array(d)
    if np.ndim(d) != 1:
        raise ValueError("distances must be either scalars or 1d")
    if len(d) != length:
        raise ValueError("when 1d, distances must match the length of the corresponding dimension")
    if np.issubdtype(d.dtype, np.integer):
        d = d.astype(np.float64)
    diff = np.diff(d)
    if type(diff) is not Tracer and np.all(diff == diff[0]):
        return diff[0]  # uniform coordinates: NumPy uses the scalar formulas
    return diff


def _window(f, axis, start, length):
    """``f[start : start + length]`` along ``axis``."""
    index = [slice(None)] * np.ndim(f)
    index[axis] = slice(start, start + length)
    return f[tuple(index)]


def _combine(f, axis, coefs, starts, length):
    """``sum_j coefs[j] * f[starts[j] : starts[j] + length]`` along ``axis``."""
    terms = [c * _window(f, axis, s, length) for c, s in zip(coefs, starts)]
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total


def _along(c, axis, ndim):
    """A 1-D coefficient array shaped to broadcast along ``axis``."""
    shape = [1] * ndim
    shape[axis] = -1
    return np.reshape(c, shape)


def _gradient_interior(f, axis, h):
    n = np.shape(f)[axis] - 2
    if np.ndim(h) == 0:
        return (_window(f, axis, 2, n) - _window(f, axis, 0, n)) / (2.0 * h)
    dx1, dx2 = h[:-1], h[1:]
    a = -dx2 / (dx1 * (dx1 + dx2))
    b = (dx2 - dx1) / (dx1 * dx2)
    c = dx1 / (dx2 * (dx1 + dx2))
    nd = np.ndim(f)
    return _combine(f, axis, [_along(v, axis, nd) for v in (a, b, c)], (0, 1, 2), n)


def _edge(f, axis, first, coefs):
    """``sum_j coefs[j] * f[k_j]`` at the first (or last) ``len(coefs)`` points along ``axis``, axis kept."""
    start = 0 if first else np.shape(f)[axis] - len(coefs)
    return _combine(f, axis, coefs, [start + k for k in range(len(coefs))], 1)


def _gradient_edges(f, axis, h, edge_order):
    uniform = np.ndim(h) == 0
    if edge_order == 1:
        h0, hn = (h, h) if uniform else (h[0], h[-1])
        return _edge(f, axis, True, (-1.0, 1.0)) / h0, _edge(f, axis, False, (-1.0, 1.0)) / hn
    if uniform:
        return (
            _edge(f, axis, True, (-1.5 / h, 2.0 / h, -0.5 / h)),
            _edge(f, axis, False, (0.5 / h, -2.0 / h, 1.5 / h)),
        )
    dx1, dx2 = h[0], h[1]
    head = (-(2.0 * dx1 + dx2) / (dx1 * (dx1 + dx2)), (dx1 + dx2) / (dx1 * dx2), -dx1 / (dx2 * (dx1 + dx2)))
    dx1, dx2 = h[-2], h[-1]
    tail = (dx2 / (dx1 * (dx1 + dx2)), -(dx2 + dx1) / (dx1 * dx2), (2.0 * dx2 + dx1) / (dx2 * (dx1 + dx2)))
    return _edge(f, axis, True, head), _edge(f, axis, False, tail)


def _gradient(f, *varargs, axis=None, edge_order=1):
    f = as_array(f)
    nd = np.ndim(f)
    axes = tuple(range(nd)) if axis is None else normalize_axis_tuple(axis, nd)
    if not varargs:
        spacings = [1.0] * len(axes)
    elif len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        spacings = list(varargs) * len(axes)
    elif len(varargs) == len(axes):
        spacings = [_spacing(d, np.shape(f)[ax]) for d, ax in zip(varargs, axes)]
    else:
        raise TypeError("invalid number of arguments")
    if edge_order > 2:
        raise ValueError("'edge_order' greater than 2 not supported")
    otype = f.dtype
    if not np.issubdtype(otype, np.inexact):
        f, otype = as_dtype(f, np.float64), np.dtype(np.float64)
    out = []
    for ax, h in zip(axes, spacings):
        if np.shape(f)[ax] < edge_order + 1:
            raise ValueError(
                "Shape of array too small to calculate a numerical gradient, "
                "at least (edge_order + 1) elements are required."
            )
        head, tail = _gradient_edges(f, ax, h, edge_order)
        full = np.concatenate([head, _gradient_interior(f, ax, h), tail], axis=ax)
        out.append(as_dtype(full, otype))  # NumPy writes into an array of f's dtype
    return out[0] if len(out) == 1 else tuple(out)


defcomposite(np.gradient, _gradient, note="spacings and coordinates differentiable too")


# ------------------------------------------------------------------ apply_*
def _apply_along_axis(func1d, axis, arr, *args, **kwargs):
    arr = as_array(arr)
    nd = np.ndim(arr)
    axis = normalize_axis_index(axis, nd)
    moved = np.moveaxis(arr, axis, -1)
    outer = np.shape(moved)[:-1]
    results = [as_array(func1d(moved[ind + (Ellipsis,)], *args, **kwargs)) for ind in np.ndindex(outer)]
    if not results:
        raise ValueError("Cannot apply_along_axis when any iteration dimensions are 0")
    first = results[0]
    # NumPy writes every result into a buffer shaped (and typed) like the first one.
    stacked = np.stack([np.broadcast_to(r, np.shape(first)) for r in results])
    stacked = as_dtype(np.reshape(stacked, outer + np.shape(first)), first.dtype)
    k = np.ndim(first)
    dims = list(range(len(outer) + k))
    return np.transpose(stacked, dims[:axis] + dims[len(outer):] + dims[axis : len(outer)])


def _apply_over_axes(func, a, axes):
    val = as_array(a)
    n = np.ndim(a)
    if np.ndim(axes) == 0:
        axes = (axes,)
    for axis in axes:
        if axis < 0:
            axis = n + axis
        res = func(val, axis)
        if np.ndim(res) != np.ndim(val):
            res = np.expand_dims(res, axis)
            if np.ndim(res) != np.ndim(val):
                raise ValueError("function is not returning an array of the correct shape")
        val = res
    return val


defcomposite(np.apply_along_axis, _apply_along_axis, note="the function runs on traced slices")
defcomposite(np.apply_over_axes, _apply_over_axes, note="the function runs on the traced array")


# ------------------------------------------------------------------ piecewise
def _conditions(x, condlist, count):
    condlist = strip_all(condlist)
    if np.isscalar(condlist) or (not isinstance(condlist[0], (list, np.ndarray)) and np.ndim(x) != 0):
        condlist = [condlist]
    condlist = np.asarray(condlist, dtype=bool)
    n = len(condlist)
    if n == count - 1:  # the "otherwise" piece
        condlist = np.concatenate([condlist, ~np.any(condlist, axis=0, keepdims=True)], axis=0)
    elif n != count:
        raise ValueError(f"with {n} condition(s), either {n} or {n + 1} functions are expected")
    return condlist


def _piecewise(x, condlist, funclist, *args, **kw):
    x = as_array(x)
    shape, size = np.shape(x), np.size(x)
    y = np.zeros(shape, dtype=x.dtype)
    flat = np.ravel(x)
    for cond, func in zip(_conditions(x, condlist, len(funclist)), funclist):
        if np.shape(cond) != shape:
            raise IndexError(f"boolean index of shape {np.shape(cond)} does not match an array of shape {shape}")
        positions = np.flatnonzero(cond)
        if callable(func):
            if positions.size == 0:
                continue
            vals = func(flat[positions], *args, **kw)
        else:
            vals = func
        vals = np.broadcast_to(as_dtype(as_array(vals), x.dtype), (positions.size,))
        piece = np.reshape(untake(vals, (positions,), (size,)), shape)
        y = np.where(cond, piece, y)
    return y


defcomposite(np.piecewise, _piecewise, note="each function sees only the entries its condition selects")


# ------------------------------------------------------------------ histogramdd
def _sample_columns(sample):
    """The D coordinate columns of an (N, D) sample or of a sequence of D arrays."""
    if hasattr(sample, "shape") and np.ndim(sample) == 2:
        return [sample[:, i] for i in range(np.shape(sample)[1])]
    if isinstance(sample, (list, tuple)) and any(np.ndim(s) for s in sample):
        rows = np.stack([as_array(s) for s in sample])
    else:
        rows = np.atleast_2d(as_array(sample))
    if np.ndim(rows) != 2:
        raise ValueError("sample must be an (N, D) array or a sequence of D 1-d arrays")
    return [rows[i] for i in range(np.shape(rows)[0])]


def _outer_edges(column, bounds):
    """First and last edge (traced where the column or the range is)."""
    if bounds is not None:
        first, last = bounds
        if strip(first) > strip(last):
            raise ValueError("max must be larger than min in range parameter.")
        if not (np.isfinite(strip(first)) and np.isfinite(strip(last))):
            raise ValueError(f"supplied range of [{strip(first)}, {strip(last)}] is not finite")
    elif np.size(column) == 0:
        first, last = 0, 1
    else:
        first, last = np.min(column), np.max(column)
        if not (np.isfinite(strip(first)) and np.isfinite(strip(last))):
            raise ValueError(f"autodetected range of [{strip(first)}, {strip(last)}] is not finite")
    if strip(first) == strip(last):
        first, last = first - 0.5, last + 0.5
    return first, last


def _dim_edges(i, column, bins, bounds):
    if np.ndim(bins) == 0:
        if strip(bins) < 1:
            raise ValueError(f"`bins[{i}]` must be positive, when an integer")
        first, last = _outer_edges(column, bounds)
        try:
            n = operator.index(bins)
        except TypeError as e:
            raise TypeError(f"`bins[{i}]` must be an integer, when a scalar") from e
        return np.linspace(first, last, n + 1)
    if np.ndim(bins) == 1:
        edges = as_array(bins)
        raw = strip(edges)
        if np.any(raw[:-1] > raw[1:]):
            raise ValueError(f"`bins[{i}]` must be monotonically increasing, when an array")
        return edges
    raise ValueError(f"`bins[{i}]` must be a scalar or 1d array")


def _weighted_counts(columns, raw_edges, weights):
    """The histogram of a traced ``weights``: a scatter-add into the bins (NumPy's binning)."""
    counts = []
    for col, edges in zip(columns, raw_edges):
        col = np.asarray(strip(col))
        k = np.searchsorted(edges, col, side="right")
        k[col == edges[-1]] -= 1  # the last bin holds its right edge
        counts.append(k)
    nbin = tuple(len(e) + 1 for e in raw_edges)  # with an outlier bin at each end
    flat = np.ravel_multi_index(tuple(counts), nbin)
    total = untake(as_dtype(np.ravel(weights), np.float64), (flat,), (int(np.prod(nbin)),))
    return np.reshape(total, nbin)[(slice(1, -1),) * len(nbin)]


def _histogramdd(sample, bins=10, range=None, density=None, weights=None):
    columns = _sample_columns(sample)
    d = len(columns)
    try:
        if len(bins) != d:
            raise ValueError("The dimension of bins must be equal to the dimension of the sample x.")
    except TypeError:
        bins = d * [bins]
    if range is None:
        range = (None,) * d
    elif len(range) != d:
        raise ValueError("range argument must have one entry per dimension")
    edges = [_dim_edges(i, *spec) for i, spec in enumerate(zip(columns, bins, range))]
    raw_edges = [np.asarray(strip(e)) for e in edges]
    raw_sample = np.stack([np.asarray(strip(c)) for c in columns], axis=1)
    hist = np.histogramdd(raw_sample, raw_edges, None, False, strip(weights))[0]
    if type(weights) is Tracer:
        hist = _weighted_counts(columns, raw_edges, weights)
    if density:
        s = np.sum(hist)
        for i, e in enumerate(edges):
            hist = hist / _along(np.diff(e), i, d)
        hist = hist / s
    return hist, edges


def _histogram2d(x, y, bins=10, range=None, density=None, weights=None):
    if len(x) != len(y):
        raise ValueError("x and y must have the same length.")
    try:
        n = len(bins)
    except TypeError:
        n = 1
    if n not in {1, 2}:
        bins = [as_array(bins)] * 2
    hist, edges = _histogramdd([x, y], bins, range, density, weights)
    return hist, edges[0], edges[1]


_HIST_NOTE = "counts constant; edges, weights and density differentiable"
defcomposite(np.histogramdd, _histogramdd, note=_HIST_NOTE)
defcomposite(np.histogram2d, _histogram2d, note=_HIST_NOTE)


# ------------------------------------------------------------------ files
defconstant(
    np.save, np.savez, np.savez_compressed, np.savetxt,
    note="writes the raw values: no gradient flows through a file",
)
