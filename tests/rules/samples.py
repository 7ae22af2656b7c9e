"""One or more sample calls of every differentiable NumPy function tapegrad registers.

``SAMPLES`` maps each NumPy function object (the key ``tapegrad.registry.RULES``
uses: ``np.sin``, ``np.linalg.inv``, ``np.fft.rfft``) to a list of
:class:`Sample`.  ``tests/rules/test_samples.py`` checks every sample against
central finite differences at first and second order and with a batch of
cotangents, and ``tapegrad.coverage`` marks the sampled functions "order 1 and
2 tested" in ``docs/coverage.md``.

Inputs are small (sizes 2-4), drawn from one fixed-seed generator, and chosen
inside each function's domain and away from its kinks: positive values for
logarithms, distinct values for selections (max, sort, median, unique),
well-conditioned matrices for solves, symmetric positive definite ones with
distinct eigenvalues for ``cholesky``/``eigh``.  Outputs whose sign is only
defined up to a flip (eigenvectors, singular vectors) are combined into
sign-invariant quantities first.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List

import numpy as np

__all__ = ["Sample", "SAMPLES", "FIRST_ORDER_SAMPLES"]


@dataclass(frozen=True)
class Sample:
    """A call of one NumPy function: ``fun(*args)`` is plain NumPy code."""

    fun: Callable[..., Any]
    args: List[Any] = field(default_factory=list)
    note: str = ""


def s(fun: Callable[..., Any], *args: Any, note: str = "") -> Sample:
    """Shorthand: ``s(lambda x: np.sin(x), x)``."""
    return Sample(fun, list(args), note)


# ------------------------------------------------------------------ inputs
_rng = np.random.default_rng(20240607)


def normal(*shape: int) -> np.ndarray:
    """Standard normal values (never exactly at a kink)."""
    return _rng.standard_normal(shape)


def uniform(low: float, high: float, *shape: int) -> np.ndarray:
    """Values in ``(low, high)``: a domain such as ``(-1, 1)`` for arcsin."""
    return _rng.uniform(low, high, shape)


def within(low: float, high: float) -> Callable[..., np.ndarray]:
    """A drawer of values in ``(low, high)``, called with a shape like the others."""
    return lambda *shape: uniform(low, high, *shape)


def positive(*shape: int) -> np.ndarray:
    """Values in ``(0.5, 2)``: logarithms, square roots, bases of powers."""
    return uniform(0.5, 2.0, *shape)


def spread(*shape: int) -> np.ndarray:
    """Distinct values at least ~0.2 apart and away from 0: sorts, extrema, ties, kinks."""
    n = int(np.prod(shape, dtype=int))
    grid = np.linspace(0.3, 0.3 + 0.3 * (n - 1), n) * _rng.choice([-1.0, 1.0], n)
    return _rng.permutation(grid + _rng.uniform(-0.03, 0.03, n)).reshape(shape)


def complex_normal(*shape: int) -> np.ndarray:
    """Complex128 values with random real and imaginary parts."""
    return normal(*shape) + 1j * normal(*shape)


def wellcond(n: int, *batch: int) -> np.ndarray:
    """A well-conditioned (diagonally dominant) ``n x n`` matrix, or a batch of them."""
    return normal(*batch, n, n) * 0.4 + n * np.eye(n)


def spd(n: int, *batch: int) -> np.ndarray:
    """Symmetric positive definite with well separated eigenvalues."""
    q, _ = np.linalg.qr(normal(*batch, n, n))
    eigenvalues = np.arange(1.0, n + 1.0) * 1.5
    return (q * eigenvalues[..., None, :]) @ np.swapaxes(q, -1, -2)


def with_nans(x: np.ndarray, *positions: Any) -> np.ndarray:
    """A copy of ``x`` with NaN at the given positions (for the nan-ignoring functions)."""
    x = np.array(x, dtype=np.float64)
    for p in positions:
        x[p] = np.nan
    return x


def scalar(value: float) -> np.ndarray:
    """A 0-d float64 array."""
    return np.array(value, dtype=np.float64)


SAMPLES: Dict[Any, List[Sample]] = {}

#: Calls whose rules are first order by design (their second derivative raises a
#: clear error): checked at order 1 only.  The coverage table reads only SAMPLES, so a
#: function found here alone is not marked "order 1 and 2 tested".
FIRST_ORDER_SAMPLES: Dict[Any, List[Sample]] = {}


def add(fun: Any, *samples: Sample, table: Dict[Any, List[Sample]] = SAMPLES) -> None:
    """Append samples of ``fun`` (keyed by the function object) to ``table``."""
    table.setdefault(fun, []).extend(samples)


# ------------------------------------------------------------------ ufuncs
_UNARY = [
    (np.sin, normal), (np.cos, normal), (np.tan, within(-1.2, 1.2)),
    (np.arcsin, within(-0.8, 0.8)), (np.arccos, within(-0.8, 0.8)),
    (np.arctan, normal), (np.sinh, normal), (np.cosh, normal), (np.tanh, normal),
    (np.arcsinh, normal), (np.arccosh, within(1.2, 3.0)),
    (np.arctanh, within(-0.8, 0.8)),
    (np.exp, normal), (np.exp2, normal), (np.expm1, normal),
    (np.log, positive), (np.log2, positive), (np.log10, positive), (np.log1p, within(-0.5, 2.0)),
    (np.sqrt, positive), (np.cbrt, spread), (np.square, normal), (np.reciprocal, spread),
    (np.negative, normal), (np.positive, normal), (np.absolute, spread), (np.fabs, spread),
    (np.deg2rad, normal), (np.radians, normal), (np.rad2deg, normal), (np.degrees, normal),
    (np.conjugate, normal), (np.real, normal), (np.imag, complex_normal),
    (np.i0, normal), (np.sinc, normal),
]
for _f, _draw in _UNARY:
    add(_f, s(lambda x, f=_f: f(x), _draw(2, 3)))
for _f in (np.absolute, np.conjugate, np.real, np.square, np.exp, np.sqrt):
    add(_f, s(lambda z, f=_f: f(z), complex_normal(3), note="complex input"))
add(np.sinc, s(lambda x: np.sinc(x), np.array([0.01, -0.02, 0.5]), note="near 0: Taylor branch"))

_BINARY = [
    (np.add, normal, normal), (np.subtract, normal, normal), (np.multiply, normal, normal),
    (np.divide, normal, spread), (np.arctan2, spread, spread), (np.hypot, normal, normal),
    (np.logaddexp, normal, normal), (np.logaddexp2, normal, normal),
    (np.maximum, normal, normal), (np.minimum, normal, normal), (np.fmax, normal, normal), (np.fmin, normal, normal),
    (np.power, positive, normal), (np.float_power, positive, normal),
    (np.copysign, spread, spread), (np.fmod, within(-4.0, 4.0), positive),
    (np.remainder, within(-4.0, 4.0), spread), (np.divmod, within(-4.0, 4.0), positive),
    (np.heaviside, spread, normal), (np.nextafter, spread, spread),
]
for _f, _draw_x, _draw_y in _BINARY:
    add(_f, s(lambda x, y, f=_f: f(x, y), _draw_x(2, 3), _draw_y(3), note="broadcasting"),
        s(lambda x, y, f=_f: f(x, y), _draw_x(), _draw_y(2), note="0-d with 1-d"))
add(np.power, s(lambda x: np.power(x, 3), normal(4), note="integer exponent, any base"))
add(np.divide, s(lambda z, w: z / w, complex_normal(3), complex_normal(3), note="complex"))
add(np.ldexp, s(lambda x: np.ldexp(x, np.array([1, -2, 3])), normal(2, 3)))
add(np.frexp, s(lambda x: np.frexp(x), spread(2, 3)))
add(np.modf, s(lambda x: np.modf(x), 3 * spread(2, 3)))

# ------------------------------------------------------------------ reductions and statistics
_X = normal(3, 4)
_MASK3 = np.array([[[True, False, True]], [[True, True, False]]])
add(np.sum, s(lambda x: np.sum(x), _X), s(lambda x: np.sum(x, axis=1, keepdims=True), _X),
    s(lambda x: np.sum(x, axis=(0, 2), where=_MASK3), normal(2, 4, 3), note="where= mask"))
add(np.mean, s(lambda x: np.mean(x, axis=0), _X), s(lambda x: np.mean(x, axis=(0, 1), keepdims=True), normal(2, 2, 3)))
add(np.prod, s(lambda x: np.prod(x, axis=1), normal(3, 4)))
add(np.max, s(lambda x: np.max(x, axis=0), spread(3, 4)),
    s(lambda x: np.max(x, axis=(-1, 0), keepdims=True), spread(2, 3, 2)))
add(np.min, s(lambda x: np.min(x, axis=-1, keepdims=True), spread(3, 4)))
add(np.amax, s(lambda x: np.amax(x), spread(3, 4)))
add(np.amin, s(lambda x: np.amin(x, axis=1), spread(3, 4)))
add(np.ptp, s(lambda x: np.ptp(x, axis=1), spread(3, 4)))
add(np.cumsum, s(lambda x: np.cumsum(x, axis=1), _X), s(lambda x: np.cumsum(x), _X))
add(np.cumprod, s(lambda x: np.cumprod(x, axis=0), normal(3, 4)))
add(np.cumulative_sum, s(lambda x: np.cumulative_sum(x, axis=1, include_initial=True), _X))
add(np.cumulative_prod, s(lambda x: np.cumulative_prod(x), normal(4)))
add(np.var, s(lambda x: np.var(x, axis=0), _X), s(lambda x: np.var(x, ddof=1), _X))
add(np.std, s(lambda x: np.std(x, axis=1, keepdims=True), _X))
add(np.average, s(lambda a, w: np.average(a, axis=0, weights=w), _X, positive(3)))
add(np.median, s(lambda x: np.median(x, axis=1), spread(3, 4)), s(lambda x: np.median(x), spread(3, 3)))
add(np.percentile, s(lambda x: np.percentile(x, 30.0, axis=0), spread(4, 3)))
add(np.quantile, s(lambda x: np.quantile(x, [0.2, 0.7]), spread(3, 4)))

_XN = with_nans(spread(3, 4), (0, 1), (2, 3))
add(np.nansum, s(lambda x: np.nansum(x, axis=0), _XN))
add(np.nanmean, s(lambda x: np.nanmean(x, axis=1), _XN))
add(np.nanprod, s(lambda x: np.nanprod(x), _XN))
add(np.nanmax, s(lambda x: np.nanmax(x, axis=1), _XN))
add(np.nanmin, s(lambda x: np.nanmin(x, axis=0), _XN))
add(np.nancumsum, s(lambda x: np.nancumsum(x, axis=1), _XN))
add(np.nancumprod, s(lambda x: np.nancumprod(x, axis=0), _XN))
add(np.nanvar, s(lambda x: np.nanvar(x, axis=1), _XN))
add(np.nanstd, s(lambda x: np.nanstd(x), _XN))
add(np.nanmedian, s(lambda x: np.nanmedian(x, axis=1), _XN))
add(np.nanpercentile, s(lambda x: np.nanpercentile(x, 60.0, axis=1), _XN))
add(np.nanquantile, s(lambda x: np.nanquantile(x, 0.4), _XN))
# (A complex input with a negligible imaginary part is not a sample: any finite-difference
# step in the imaginary direction leaves the tolerance and changes the function.)
add(np.real_if_close, s(lambda x: np.real_if_close(x), _X))
add(np.unwrap, s(lambda p: np.unwrap(p), np.array([0.1, 3.5, 0.2, -3.0, 1.0]) + uniform(-0.1, 0.1, 5)),
    s(lambda p: np.unwrap(p, axis=0, period=4.0), np.array([[0.1, 1.0], [2.9, -1.5], [-0.3, 1.2]])))
add(np.nan_to_num, s(lambda x: np.nan_to_num(x), with_nans(normal(2, 3), (1, 1))))

# ------------------------------------------------------------------ shape
_A = normal(2, 3)
_B = normal(2, 3)
_T = normal(2, 3, 4)
add(np.reshape, s(lambda x: np.reshape(x, (3, 2)), _A))
add(np.ravel, s(lambda x: np.ravel(x), _A))
add(np.transpose, s(lambda x: np.transpose(x, (1, 2, 0)), _T), s(lambda x: np.transpose(x), _A))
add(np.swapaxes, s(lambda x: np.swapaxes(x, 0, 2), _T))
add(np.moveaxis, s(lambda x: np.moveaxis(x, 0, -1), _T))
add(np.rollaxis, s(lambda x: np.rollaxis(x, 2), _T))
add(np.matrix_transpose, s(lambda x: np.matrix_transpose(x), _T))
add(np.expand_dims, s(lambda x: np.expand_dims(x, (0, 2)), _A))
add(np.squeeze, s(lambda x: np.squeeze(x, axis=1), normal(3, 1, 2)))
add(np.flip, s(lambda x: np.flip(x, axis=1), _A))
add(np.fliplr, s(lambda x: np.fliplr(x), _A))
add(np.flipud, s(lambda x: np.flipud(x), _A))
add(np.rot90, s(lambda x: np.rot90(x), _A), s(lambda x: np.rot90(x, k=-1, axes=(1, 2)), _T))
add(np.roll, s(lambda x: np.roll(x, 1, axis=1), _A), s(lambda x: np.roll(x, -2), _A))
add(np.broadcast_to, s(lambda x: np.broadcast_to(x, (2, 3)), normal(3)))
# full_like with a traced fill: the fill everywhere (the array itself only lends its shape)
add(np.full_like, s(lambda a, v: np.full_like(a, v) * a, normal(2, 3), normal(3)))
add(np.broadcast_arrays, s(lambda x, y: np.broadcast_arrays(x, y), normal(3), normal(2, 1)))
add(np.copy, s(lambda x: np.copy(x), _A))
add(np.asarray, s(lambda x: np.asarray(x, like=x), _A, note="dispatched only through like="))
add(np.atleast_1d, s(lambda x: np.atleast_1d(x), scalar(0.3)))
add(np.atleast_2d, s(lambda x: np.atleast_2d(x), normal(3)))
add(np.atleast_3d, s(lambda x: np.atleast_3d(x), _A))
add(np.concatenate, s(lambda x, y: np.concatenate([x, y], axis=1), _A, _B))
add(np.stack, s(lambda x, y: np.stack([x, y], axis=-1), _A, _B))
add(np.hstack, s(lambda x, y: np.hstack([x, y]), _A, _B))
add(np.vstack, s(lambda x, y: np.vstack([x, y]), _A, normal(3)))
add(np.dstack, s(lambda x, y: np.dstack([x, y]), _A, _B))
add(np.column_stack, s(lambda x, y: np.column_stack([x, y]), normal(3), normal(3, 2)))


def _row_stack(x, y):
    with warnings.catch_warnings():  # deprecated alias of vstack (NumPy 2.0), removed in 2.5
        warnings.simplefilter("ignore", DeprecationWarning)
        return np.row_stack([x, y])


_row_stack_sample = s(_row_stack, _A, normal(3))  # drawn on every NumPy: later samples get the same inputs
if hasattr(np, "row_stack"):
    add(np.row_stack, _row_stack_sample)
add(np.block, s(lambda a, b, c: np.block([[a, b], [c]]), normal(2, 2), normal(2, 1), normal(1, 3)))
add(np.split, s(lambda x: np.split(x, 3, axis=1), _A))
add(np.array_split, s(lambda x: np.array_split(x, 2, axis=1), _A))
add(np.hsplit, s(lambda x: np.hsplit(x, [1]), _A))
add(np.vsplit, s(lambda x: np.vsplit(x, 2), _A))
add(np.dsplit, s(lambda x: np.dsplit(x, [1, 3]), _T))
add(np.unstack, s(lambda x: np.unstack(x, axis=1), _A))
add(np.append, s(lambda x, y: np.append(x, y, axis=0), _A, normal(1, 3)))
add(np.insert, s(lambda x, v: np.insert(x, 1, v, axis=1), _A, normal(2)))
add(np.delete, s(lambda x: np.delete(x, [0, 2], axis=1), _A))
add(
    np.pad,
    s(lambda x: np.pad(x, ((1, 0), (0, 2))), _A),
    s(lambda x: np.pad(x, 2, mode="reflect"), normal(3)),
    s(lambda x: np.pad(x, ((1, 2), (2, 1)), mode="mean", stat_length=2), _A),
    s(lambda x: np.pad(x, 2, mode="linear_ramp", end_values=(1.0, -1.0)), normal(3)),
)
add(
    np.lib.stride_tricks.as_strided,
    s(lambda x: np.lib.stride_tricks.as_strided(x, shape=(3, 3), strides=(x.itemsize, x.itemsize)), normal(5)),
)
add(np.repeat, s(lambda x: np.repeat(x, 2, axis=1), _A), s(lambda x: np.repeat(x, [1, 3]), normal(2)))
add(np.tile, s(lambda x: np.tile(x, (2, 1)), _A))
add(
    np.lib.stride_tricks.sliding_window_view,
    s(lambda x: np.lib.stride_tricks.sliding_window_view(x, (2, 2)), normal(3, 4)),
    s(lambda x: np.lib.stride_tricks.sliding_window_view(x, 3, axis=0), normal(4, 2)),
)
add(np.diag, s(lambda v: np.diag(v, k=1), normal(3)), s(lambda m: np.diag(m), normal(3, 3)))
add(np.diagflat, s(lambda v: np.diagflat(v), normal(2, 2)))
add(np.diagonal, s(lambda x: np.diagonal(x, offset=1, axis1=0, axis2=2), _T))
add(np.trace, s(lambda x: np.trace(x, offset=-1), normal(3, 3)))
add(np.tril, s(lambda x: np.tril(x, k=-1), normal(3, 3)))
add(np.triu, s(lambda x: np.triu(x), normal(2, 3, 3)))
add(np.meshgrid, s(lambda x, y: np.meshgrid(x, y), normal(3), normal(2)),
    s(lambda x, y: np.meshgrid(x, y, indexing="ij", sparse=True), normal(3), normal(2)))
add(np.apply_along_axis, s(lambda x: np.apply_along_axis(lambda v: v * np.sum(v ** 2), 1, x), _A),
    s(lambda x: np.apply_along_axis(np.sort, 0, x), spread(3, 2)))
add(np.apply_over_axes, s(lambda x: np.apply_over_axes(np.sum, x, [0, 2]), _T))
add(np.diff, s(lambda x: np.diff(x, n=2, axis=1), normal(2, 4)))
add(np.ediff1d, s(lambda x: np.ediff1d(x, to_begin=[0.5]), normal(4)))

# ------------------------------------------------------------------ indexing and selection
add(np.take, s(lambda x: np.take(x, [2, 0, 2], axis=1), _A))
add(np.take_along_axis, s(lambda x: np.take_along_axis(x, np.array([[1, 0], [2, 2]]), axis=1), _A))
add(np.compress, s(lambda x: np.compress([True, False, True], x, axis=1), _A))
add(np.extract, s(lambda x: np.extract(np.array([[True, False, True], [False, True, True]]), x), _A))
add(np.choose, s(lambda a, b: np.choose(np.array([0, 1, 1]), [a, b]), normal(3), normal(3)))
add(np.select, s(lambda a, b: np.select([a > 0, b > 0], [a * 2, b], default=a + b), spread(4), spread(4)))
add(np.where, s(lambda a, b: np.where(a > 0, a, b), spread(2, 3), normal(3)))
add(np.sort, s(lambda x: np.sort(x, axis=0), spread(3, 2)), s(lambda x: np.sort(x, axis=None), spread(2, 3)))
add(np.partition, s(lambda x: np.partition(x, 1, axis=-1), spread(2, 4)))
add(np.clip, s(lambda x: np.clip(x, -0.5, 0.8), spread(2, 4)),
    s(lambda x, lo, hi: np.clip(x, lo, hi), spread(2, 3), uniform(-1.0, -0.6, 3), uniform(0.6, 1.0, 3),
      note="traced bounds"))
add(np.unique, s(lambda x: np.unique(x), spread(5)))
add(np.unique_values, s(lambda x: np.unique_values(x), spread(4)))
add(np.unique_counts, s(lambda x: np.unique_counts(x).values, spread(4)))
add(np.unique_inverse, s(lambda x: np.unique_inverse(x).values, spread(4)))
add(np.unique_all, s(lambda x: np.unique_all(x).values, spread(4)))
add(np.bincount, s(lambda w: np.bincount(np.array([0, 2, 2, 1]), weights=w, minlength=4), normal(4)))
add(np.histogram, s(lambda a, w: np.histogram(a, bins=3, weights=w, density=True)[0], spread(6), positive(6)),
    s(lambda a: np.histogram(a, bins=3)[1], spread(6), note="edges follow min and max"))
add(np.resize, s(lambda x: np.resize(x, (3, 3)), _A))
add(np.trim_zeros, s(lambda x: np.trim_zeros(np.concatenate([np.zeros(2), x, np.zeros(1)])), spread(3),
                     note="the zeros are constants: a traced zero is a kink"))
add(np.sort_complex, s(lambda x: np.sort_complex(x), spread(4)))
add(np.astype, s(lambda x: np.astype(x, np.complex128), _A), s(lambda x: np.astype(x, np.float64, copy=False), _A))


def _writer(write):
    """A sample that writes into a traced copy of ``x`` in place, as NumPy's writers do."""

    def fun(x, v):
        y = x * 1.0
        write(y, v)
        return y

    return fun


_MASK = np.array([[True, False, True], [False, False, True]])
add(np.put, s(_writer(lambda y, v: np.put(y, [0, 4], v)), _A, normal(2)))
add(np.place, s(_writer(lambda y, v: np.place(y, _MASK, v)), _A, normal(2), note="values repeated cyclically"))
add(np.putmask, s(_writer(lambda y, v: np.putmask(y, _MASK, v)), _A, normal(4)))
add(np.put_along_axis, s(_writer(lambda y, v: np.put_along_axis(y, np.array([[2], [0]]), v, axis=1)), _A, normal(2, 1)))
add(np.copyto, s(_writer(lambda y, v: np.copyto(y, v, where=_MASK)), _A, normal(3)))
add(np.fill_diagonal, s(_writer(lambda y, v: np.fill_diagonal(y, v)), normal(3, 3), normal(3)),
    s(_writer(lambda y, v: np.fill_diagonal(y, v, wrap=True)), normal(5, 2), normal(1)))
add(np.histogram_bin_edges, s(lambda a: np.histogram_bin_edges(a, bins=4), spread(5)))

# ------------------------------------------------------------------ signal, polynomials, grids
add(np.convolve, s(lambda a, v: np.convolve(a, v), normal(4), normal(2)),
    s(lambda a, v: np.convolve(a, v, mode="same"), normal(4), normal(3)))
add(np.correlate, s(lambda a, v: np.correlate(a, v, mode="full"), normal(4), normal(3)))
add(np.polyval, s(lambda p, x: np.polyval(p, x), normal(3), normal(4)))
add(np.vander, s(lambda x: np.vander(x, 3), normal(3)))
add(np.trapezoid, s(lambda y, x: np.trapezoid(y, x), normal(4), np.sort(spread(4))),
    s(lambda y: np.trapezoid(y, dx=0.5, axis=0), normal(3, 2)))
add(np.interp, s(lambda x, xp, fp: np.interp(x, xp, fp), np.array([-0.7, 0.2, 1.1]),
                 np.array([-1.0, 0.0, 0.5, 1.5]), normal(4)))
add(np.linspace, s(lambda a, b: np.linspace(a, b, 4), scalar(-0.5), scalar(1.3)))
add(np.logspace, s(lambda a, b: np.logspace(a, b, 3, base=2.0), scalar(0.2), scalar(1.1)))
add(np.geomspace, s(lambda a, b: np.geomspace(a, b, 3), scalar(0.5), scalar(3.0)))

add(np.gradient, s(lambda f: np.gradient(f), normal(5)),
    s(lambda f, dx: np.gradient(f, dx, axis=1, edge_order=2), normal(2, 4), scalar(0.7), note="traced spacing"),
    s(lambda f, x: np.gradient(f, x), normal(4), np.cumsum(positive(4)), note="traced coordinates"))
# np.vectorize's loop (rules/vectorize.py): a branch on each element, and a signature.
add(np.vectorize._vectorize_call,
    s(lambda x: np.vectorize(lambda a: a ** 2 if a > 0 else np.sin(a))(x), spread(2, 3)),
    s(lambda x: np.vectorize(lambda v: np.stack([v.sum(), (v * v).sum()]), signature="(n)->(2)")(x), normal(2, 3)))
add(np.piecewise, s(lambda x: np.piecewise(x, [x < 0, x >= 0], [lambda v: v ** 2, np.sin]), spread(2, 3)),
    s(lambda x: np.piecewise(x, [x < -0.5], [np.exp, lambda v: 2 * v]), spread(5), note="otherwise piece"))
add(np.cov, s(lambda x: np.cov(x), normal(2, 4)), s(lambda x, y: np.cov(x, y, rowvar=False, ddof=0), normal(4, 2), normal(4)),
    s(lambda x, w: np.cov(x, aweights=w), normal(2, 4), positive(4), note="traced aweights"))
add(np.corrcoef, s(lambda x: np.corrcoef(x), normal(3, 4)), s(lambda x, y: np.corrcoef(x, y), normal(4), normal(4)))
add(np.angle, s(lambda z: np.angle(z), complex_normal(2, 2)), s(lambda z: np.angle(z, deg=True), complex_normal(3)))
add(np.histogram2d, s(lambda x, y, w: np.histogram2d(x, y, bins=2, weights=w, density=True), spread(5), spread(5), positive(5)))
add(np.histogramdd, s(lambda a, w: np.histogramdd(a, bins=(2, 3), weights=w)[0], spread(6, 2), positive(6)),
    s(lambda a: np.histogramdd(a, bins=2)[1], spread(5, 2), note="edges follow min and max"))

# Set functions: entries shared between the two inputs are ties by design, so the samples
# take both inputs from one traced array (a perturbation keeps the shared entries equal).
add(np.union1d, s(lambda x: np.union1d(x[:3], x[2:]), spread(5)))
add(np.intersect1d, s(lambda x: np.intersect1d(x[:4], x[2:]), spread(6)),
    s(lambda x: np.intersect1d(x[:3], x[1:], return_indices=True)[0], spread(5)))
add(np.setdiff1d, s(lambda x: np.setdiff1d(x, x[1:3]), spread(5)))
add(np.setxor1d, s(lambda x: np.setxor1d(x[:4], x[2:]), spread(6)))

# ------------------------------------------------------------------ polynomials
_ROOTS = np.array([-1.3, 0.4, 2.1])
add(np.polyadd, s(lambda a, b: np.polyadd(a, b), normal(3), normal(2)))
add(np.polysub, s(lambda a, b: np.polysub(a, b), normal(2), normal(4)))
add(np.polymul, s(lambda a, b: np.polymul(a, b), normal(3), normal(2)))
add(np.polyder, s(lambda p: np.polyder(p), normal(4)), s(lambda p: np.polyder(p, m=2), normal(4)))
add(np.polyint, s(lambda p: np.polyint(p), normal(3)), s(lambda p, k: np.polyint(p, m=2, k=k), normal(3), normal(2)))
add(np.polydiv, s(lambda u, v: np.polydiv(u, v), normal(4), np.array([1.5, -0.3]) + uniform(-0.1, 0.1, 2)))
add(np.poly, s(lambda r: np.poly(r), _ROOTS + uniform(-0.1, 0.1, 3)))
add(np.poly, s(lambda a: np.poly(a), wellcond(3), note="a matrix goes through eigvals"))
add(np.roots, s(lambda p: np.roots(p), np.poly(_ROOTS) * 1.7), s(lambda p: np.roots(p), np.array([1.0, 0.3, 2.0]),
                                                                  note="complex conjugate roots"))
add(np.polyfit, s(lambda x, y: np.polyfit(x, y, 2), np.sort(spread(5)), normal(5)),
    s(lambda x, y, w: np.polyfit(x, y, 1, w=w), np.sort(spread(4)), normal(4, 2), positive(4), note="2-D y, weights"),
    s(lambda x, y: np.polyfit(x, y, 1, cov=True), np.sort(spread(5)), normal(5)))

# ------------------------------------------------------------------ contractions
_M = normal(3, 3)
add(np.dot, s(lambda a, b: np.dot(a, b), normal(2, 3), normal(3, 2)), s(lambda a, b: np.dot(a, b), normal(3), normal(3)))
add(np.matmul, s(lambda a, b: np.matmul(a, b), normal(2, 2, 3), normal(3, 2)), s(lambda a, b: a @ b, normal(3), normal(3, 2)))
add(np.linalg.matmul, s(lambda a, b: np.linalg.matmul(a, b), normal(2, 3), normal(3, 2)))
add(np.inner, s(lambda a, b: np.inner(a, b), normal(2, 3), normal(4, 3)))
add(np.outer, s(lambda a, b: np.outer(a, b), normal(3), normal(2)))
add(np.linalg.outer, s(lambda a, b: np.linalg.outer(a, b), normal(3), normal(2)))
add(np.vdot, s(lambda a, b: np.vdot(a, b), normal(2, 2), normal(2, 2)),
    s(lambda a, b: np.vdot(a, b), complex_normal(3), complex_normal(3), note="conjugates the first"))
add(np.kron, s(lambda a, b: np.kron(a, b), normal(2, 2), normal(2, 1)))
add(np.cross, s(lambda a, b: np.cross(a, b), normal(2, 3), normal(3)))
add(np.linalg.cross, s(lambda a, b: np.linalg.cross(a, b), normal(2, 3), normal(2, 3)))
add(np.tensordot, s(lambda a, b: np.tensordot(a, b, axes=([1, 0], [0, 2])), _T, normal(3, 2, 2)))
add(np.linalg.tensordot, s(lambda a, b: np.linalg.tensordot(a, b, axes=1), _A, normal(3, 2)))
add(np.einsum, s(lambda a, b: np.einsum("bij,jk->bik", a, b), _T, normal(4, 2)),
    s(lambda a: np.einsum("ii->", a), _M), s(lambda a, b, c: np.einsum("i,ij,j", a, b, c), normal(2), _A, normal(3)))
add(np.matvec, s(lambda a, v: np.matvec(a, v), normal(2, 3, 3), normal(3)))
add(np.vecmat, s(lambda v, a: np.vecmat(v, a), normal(3), normal(2, 3, 2)))
add(np.vecdot, s(lambda a, b: np.vecdot(a, b), normal(2, 3), normal(3)))
add(np.linalg.vecdot, s(lambda a, b: np.linalg.vecdot(a, b, axis=0), normal(3, 2), normal(3, 2)))
add(np.linalg.multi_dot, s(lambda a, b, c: np.linalg.multi_dot([a, b, c]), normal(2, 3), normal(3, 3), normal(3, 2)))

# ------------------------------------------------------------------ linear algebra
_W = wellcond(3)


def _eigh_invariant(a):
    w, v = np.linalg.eigh(a)
    return w, v * v[..., :1, :]  # each eigenvector times its first entry: independent of its sign


def _svd_invariant(a):
    u, sv, vh = np.linalg.svd(a, full_matrices=False)
    return sv, u @ vh  # u_k and v_k flip sign together, so the polar factor is well defined


add(np.linalg.inv, s(lambda a: np.linalg.inv(a), _W), s(lambda a: np.linalg.inv(a), wellcond(2, 2)))
add(np.linalg.det, s(lambda a: np.linalg.det(a), _W), s(lambda a: np.linalg.det(a), wellcond(2, 2)))
add(np.linalg.slogdet, s(lambda a: np.linalg.slogdet(a), wellcond(3) - 6 * np.eye(3), note="negative determinant"))
add(np.linalg.solve, s(lambda a, b: np.linalg.solve(a, b), _W, normal(3, 2)),
    s(lambda a, b: np.linalg.solve(a, b), wellcond(2, 2), normal(2, 2, 1)))
add(np.linalg.cholesky, s(lambda a: np.linalg.cholesky(a), spd(3)), s(lambda a: np.linalg.cholesky(a, upper=True), spd(2)))
add(np.linalg.eigh, s(_eigh_invariant, spd(3)), s(lambda a: np.linalg.eigh(a, UPLO="U")[0], spd(3)))
add(np.linalg.eigvalsh, s(lambda a: np.linalg.eigvalsh(a), spd(3, 2)))
add(np.linalg.svd, s(_svd_invariant, normal(3, 2)), s(lambda a: np.linalg.svd(a, compute_uv=False), normal(2, 3)))
add(np.linalg.svdvals, s(lambda a: np.linalg.svdvals(a), normal(3, 2)))
add(np.linalg.qr, s(lambda a: tuple(np.linalg.qr(a)), normal(3, 2)), s(lambda a: np.linalg.qr(a, mode="r"), normal(3, 3)))
add(np.linalg.pinv, s(lambda a: np.linalg.pinv(a), normal(3, 2)))
add(np.linalg.lstsq, s(lambda a, b: np.linalg.lstsq(a, b)[:2], normal(4, 2), normal(4)))
add(np.linalg.cond, s(lambda a: np.linalg.cond(a), _W), s(lambda a: np.linalg.cond(a, "fro"), _W))
add(np.linalg.matrix_power, s(lambda a: np.linalg.matrix_power(a, 3), _M),
    s(lambda a: np.linalg.matrix_power(a, -2), _W))
add(np.linalg.matrix_transpose, s(lambda a: np.linalg.matrix_transpose(a), _T))
add(np.linalg.diagonal, s(lambda a: np.linalg.diagonal(a, offset=1), _T))
add(np.linalg.trace, s(lambda a: np.linalg.trace(a), _T))
add(np.linalg.norm, s(lambda x: np.linalg.norm(x), _A), s(lambda x: np.linalg.norm(x, ord=1, axis=1), spread(2, 3)),
    s(lambda x: np.linalg.norm(x, ord=2), normal(3, 2)), s(lambda x: np.linalg.norm(x, ord="nuc"), normal(2, 3)))
add(np.linalg.vector_norm, s(lambda x: np.linalg.vector_norm(x, ord=3, axis=0), normal(3, 2)),
    s(lambda x: np.linalg.vector_norm(x, ord=np.inf), spread(4)))
add(np.linalg.matrix_norm, s(lambda x: np.linalg.matrix_norm(x), normal(2, 3)),
    s(lambda x: np.linalg.matrix_norm(x, ord=1), spread(3, 3)))
add(np.linalg.tensorinv, s(lambda a: np.linalg.tensorinv(a, ind=1), wellcond(4).reshape(4, 2, 2)))
add(np.linalg.tensorsolve, s(lambda a, b: np.linalg.tensorsolve(a, b), wellcond(4).reshape(4, 2, 2), normal(4)))

add(np.linalg.eig, s(lambda a: np.linalg.eig(a).eigenvalues, normal(3, 3)),
    s(lambda a: np.abs(np.linalg.eig(a).eigenvectors) ** 2, normal(3, 3), note="phase-invariant eigenvectors"))
add(np.linalg.eigvals, s(lambda a: np.linalg.eigvals(a), _W), s(lambda a: np.linalg.eigvals(a), normal(2, 2, 2)))

# ------------------------------------------------------------------ fft
_S = normal(2, 4)
for _name in ("fft", "ifft", "rfft", "ihfft"):
    _f = getattr(np.fft, _name)
    add(_f, s(lambda x, f=_f: f(x), _S), s(lambda x, f=_f: f(x, n=5, axis=0, norm="ortho"), _S))
for _name in ("fft2", "ifft2", "fftn", "ifftn", "rfft2", "rfftn"):
    _f = getattr(np.fft, _name)
    add(_f, s(lambda x, f=_f: f(x), normal(2, 3, 4)))
add(np.fft.fft, s(lambda z: np.fft.fft(z), complex_normal(4), note="complex input"))
add(np.fft.fftn, s(lambda z: np.fft.fftn(z, s=(3, 2), axes=(0, 1), norm="forward"), complex_normal(2, 3)))
for _name in ("irfft", "hfft"):
    _f = getattr(np.fft, _name)
    add(_f, s(lambda x, f=_f: f(x), _S), s(lambda z, f=_f: f(z, n=5), complex_normal(3), note="complex half spectrum"),
        s(lambda z, f=_f: f(z), complex_normal(3), note="even length: Nyquist bin"))
for _name in ("irfft2", "irfftn"):
    _f = getattr(np.fft, _name)
    add(_f, s(lambda z, f=_f: f(z), complex_normal(3, 3)), s(lambda z, f=_f: f(z, s=(3, 5), axes=(0, 1)), complex_normal(3, 3)))
add(np.fft.fftshift, s(lambda x: np.fft.fftshift(x), normal(3, 4)))
add(np.fft.ifftshift, s(lambda x: np.fft.ifftshift(x, axes=1), normal(3, 5)))

# ------------------------------------------------------------------ more keyword variants
add(np.var, s(lambda x: np.var(x, axis=-1, ddof=1, keepdims=True), normal(2, 3)))
add(np.nanvar, s(lambda x: np.nanvar(x, axis=0, ddof=1, keepdims=True), _XN))
add(np.cumsum, s(lambda x: np.cumsum(x, axis=-2), normal(3, 2)), s(lambda x: np.cumsum(x), scalar(0.4), note="0-d"))
add(np.take, s(lambda x: np.take(x, [-1, 4, 1, 1], mode="wrap"), _A, note="wrapped and repeated indices"))
add(np.matmul, s(lambda a, b: a @ b, normal(2, 1, 2, 3), normal(3, 3, 2), note="batch broadcasting"))
add(np.einsum, s(lambda a: np.einsum("ii->i", a), normal(3, 3)),
    s(lambda a, b: np.einsum("...ij,...jk", a, b, optimize=True), normal(2, 2, 3), normal(3, 2)))
add(np.linalg.solve, s(lambda a, b: np.linalg.solve(a, b), wellcond(3), normal(3), note="vector right-hand side"))
add(np.linalg.pinv, s(lambda a: np.linalg.pinv(a, hermitian=True), spd(3)))
add(np.linalg.norm, s(lambda x: np.linalg.norm(x, axis=(1, 2), keepdims=True), normal(2, 2, 3)),
    s(lambda x: np.linalg.norm(x, ord=-np.inf, axis=0), spread(3, 2)))
add(np.fft.fft, s(lambda x: np.fft.fft(x, axis=-2, norm="forward"), normal(3, 2)))
add(np.pad, *(s(lambda x, m=mode: np.pad(x, ((1, 2), (2, 1)), mode=m), spread(3, 3), note=f"mode={mode}")
              for mode in ("edge", "wrap", "symmetric")))
add(np.quantile, s(lambda x: np.quantile(x, 0.4, axis=1, method="nearest"), spread(2, 4)),
    s(lambda x: np.quantile(x, [0.3, 0.8], method="inverted_cdf", keepdims=True), spread(2, 3)))
add(np.average, s(lambda a, w: np.average(a, axis=1, weights=w, returned=True), normal(2, 3), positive(2, 3)))
add(np.clip, s(lambda x: np.clip(x, None, 0.2), spread(2, 3), note="upper bound only"))
add(np.where, s(lambda a: np.where(a > 0, a, 0.0), spread(4), note="scalar branch"))
add(np.diff, s(lambda x, p: np.diff(x, prepend=p, append=1.5), normal(3), normal(1), note="traced prepend"))
add(np.trapezoid, s(lambda y, x: np.trapezoid(y, x, axis=0), normal(3, 2), np.cumsum(positive(3, 2), axis=0)))
add(np.interp, s(lambda x, fp: np.interp(x, np.array([0.0, 1.0, 2.5]), fp, period=3.0), np.array([-0.7, 0.4, 3.6]),
                 normal(3), note="periodic"))
add(np.sort, s(lambda x: np.sort(x, kind="stable", axis=-1), spread(2, 3)))
add(np.tensordot, s(lambda a, b: np.tensordot(a, b, axes=0), normal(2), normal(3), note="outer product"))
