"""Derivatives of signal-processing and miscellaneous numerical functions.

Covers ``convolve correlate polyval interp clip nan_to_num real_if_close
unwrap sinc i0 vander linspace logspace geomspace``.  Most are composites of differentiable NumPy
calls that mirror NumPy's own algorithm (so values match NumPy's); the rest
are small primitives:

* a broadcasting, batched full 1-D convolution along the last axis, whose two
  VJPs are full convolutions with the reversed other operand;
* ``np.i0`` and the modified Bessel functions ``I_n`` it needs for its
  derivatives (``I_n' = (I_{n-1} + I_{n+1}) / 2``), evaluated by the
  trapezoidal rule on ``I_n(x) = (1/pi) int_0^pi exp(x cos t) cos(n t) dt``,
  which converges exponentially for this periodic integrand.

Choices at non-differentiable points (documented in each rule's note):

* ``clip`` is ``minimum(maximum(a, a_min), a_max)``: gradient 1 strictly
  inside, 0 strictly outside, and at a tie with a bound the cotangent is split
  equally between ``a`` and that bound (tapegrad's tie convention);
* ``interp`` with respect to ``x`` uses the slope of the segment to the right
  of a knot (the segment NumPy evaluates there), the left one at the last
  knot, and 0 outside ``[xp[0], xp[-1]]``.  ``xp`` may be traced too.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from ..dispatch import _reject_out, primitive, strip
from ..errors import NonDifferentiableArgumentError
from ..registry import defcomposite, defvjp
from ..tracer import Tracer


def _as_array(v: Any) -> Any:
    """A tracer or a Python scalar as it is (scalars stay weakly typed); else an ndarray."""
    return v if type(v) is Tracer or isinstance(v, (int, float, complex)) else np.asarray(v)


# ----------------------------------------------------------- convolution
def _full_convolve(x, y):
    """Full linear convolution along the last axis, broadcasting leading axes."""
    if np.ndim(x) <= 1 and np.ndim(y) <= 1:
        return np.convolve(x, y)
    n, m = np.shape(x)[-1], np.shape(y)[-1]
    batch = np.broadcast_shapes(np.shape(x)[:-1], np.shape(y)[:-1])
    xs = np.broadcast_to(x, batch + (n,)).reshape(-1, n)
    ys = np.broadcast_to(y, batch + (m,)).reshape(-1, m)
    rows = [np.convolve(a, b) for a, b in zip(xs, ys)]
    out = np.stack(rows) if rows else np.zeros((0, n + m - 1), dtype=np.result_type(x, y))
    return out.reshape(batch + (n + m - 1,))


full_convolve = primitive(_full_convolve)


def _convolve_vjp(other):
    # d/dx of sum_k g[k] (x*y)[k] is sum_k g[k] y[k-i]: a full convolution of g with
    # the reversed y, read from offset len(y)-1.  Holomorphic: no conjugate.
    def vjp(g, ans, x, y):
        this, that = (x, y) if other == 1 else (y, x)
        n, m = np.shape(this)[-1], np.shape(that)[-1]
        return full_convolve(g, that[..., ::-1])[..., m - 1 : m - 1 + n]

    return vjp


defvjp(full_convolve, _convolve_vjp(1), _convolve_vjp(0))

_MODES = {0: "valid", 1: "same", 2: "full", "valid": "valid", "same": "same", "full": "full"}


def _check_1d(a, v):
    a, v = np.atleast_1d(a), np.atleast_1d(v)
    if np.ndim(a) != 1 or np.ndim(v) != 1:
        raise ValueError("object too deep for desired array")
    if np.size(a) == 0:
        raise ValueError("a cannot be empty")
    if np.size(v) == 0:
        raise ValueError("v cannot be empty")
    return a, v


def _mode_slice(full, mode, n, m, offset_same):
    mode = _MODES.get(mode, mode)
    if mode == "full":
        return full
    short, long_ = min(n, m), max(n, m)
    if mode == "same":
        return full[offset_same : offset_same + long_]
    if mode == "valid":
        return full[short - 1 : long_]
    raise ValueError(f"mode must be one of 'valid', 'same', or 'full' (got {mode!r})")


def _convolve(a, v, mode="full"):
    a, v = _check_1d(a, v)
    n, m = np.shape(a)[0], np.shape(v)[0]
    return _mode_slice(full_convolve(a, v), mode, n, m, (min(n, m) - 1) // 2)


def _correlate(a, v, mode="valid"):
    # correlate(a, v)[k] = sum_n a[n + k] conj(v[n]): a convolution with conj(v) reversed.
    a, v = _check_1d(a, v)
    n, m = np.shape(a)[0], np.shape(v)[0]
    if np.iscomplexobj(v):
        v = np.conjugate(v)
    # NumPy centres 'same' differently when v is the longer operand.
    offset = (min(n, m) - 1) // 2 if n >= m else n // 2
    return _mode_slice(full_convolve(a, v[::-1]), mode, n, m, offset)


defcomposite(np.convolve, _convolve)
defcomposite(np.correlate, _correlate, note="complex v is conjugated, as in NumPy")


# ----------------------------------------------------------- polynomials
def _polyval(p, x):
    # Horner's scheme, exactly as NumPy evaluates it (so values agree bit for bit).
    if isinstance(p, np.poly1d):
        p = p.coeffs  # what NumPy's np.asarray(p) makes of it
    if isinstance(x, np.poly1d):
        raise NonDifferentiableArgumentError(
            "numpy.polyval with a np.poly1d x (a composition of polynomials) is not traced; "
            "evaluate it with coefficient arrays instead"
        )
    y = np.zeros_like(x)
    for c in p:
        y = y * x + c
    return y


defcomposite(np.polyval, _polyval)


def _vander(x, N=None, increasing=False):
    if np.ndim(x) != 1:
        raise ValueError("x must be a one-dimensional array or sequence.")
    n_rows = np.shape(x)[0]
    N = n_rows if N is None else N
    dtype = np.promote_types(np.result_type(x), int)
    col = np.ones(n_rows, dtype=dtype)
    cols = []
    for _ in range(N):
        cols.append(col)
        col = col * x  # repeated products: no 0 ** -1 in the derivative at x == 0
    if not increasing:
        cols = cols[::-1]
    if not cols:
        return np.zeros((n_rows, 0), dtype=dtype)
    out = np.stack(cols, axis=1)
    return out if np.result_type(out) == dtype else out.astype(dtype)


defcomposite(np.vander, _vander)


# ----------------------------------------------------------- interpolation
def _exact_shift(v: Any, new_raw: Any) -> Any:
    """``new_raw`` as a value, with derivative 1 with respect to ``v``.

    ``v - strip(v)`` is exactly zero, so the value is ``new_raw`` bit for bit
    (used for ``x % period``, whose derivative is 1 almost everywhere).
    """
    return new_raw + (v - strip(v)) if type(v) is Tracer else new_raw


def _interp(x, xp, fp, left=None, right=None, period=None):
    xp, fp = _as_array(xp), _as_array(fp)
    if np.ndim(xp) != 1 or np.ndim(fp) != 1:
        raise ValueError("Data points must be 1-D sequences")
    if np.shape(xp)[0] != np.shape(fp)[0]:
        raise ValueError("fp and xp are not of the same length")
    if np.shape(xp)[0] == 0:
        raise ValueError("array of sample points is empty")
    out_dtype = np.complex128 if np.iscomplexobj(fp) else np.float64
    if period is not None:
        if period == 0:
            raise ValueError("period must be a non-zero value")
        period = abs(period)
        left = right = None
        x = _exact_shift(x, np.asarray(strip(x), dtype=np.float64) % period)
        xp = _exact_shift(xp, np.asarray(strip(xp), dtype=np.float64) % period)
        order = np.argsort(strip(xp))
        xp, fp = xp[order], fp[order]
        xp = np.concatenate([xp[-1:] - period, xp, xp[0:1] + period])
        fp = np.concatenate([fp[-1:], fp, fp[0:1]])
    xr, xpr = np.asarray(strip(x), dtype=np.float64), np.asarray(strip(xp), dtype=np.float64)
    last = np.shape(xpr)[0] - 1
    if last == 0:
        y = fp[0] + 0 * x
    else:
        j = np.clip(np.searchsorted(xpr, xr, side="right") - 1, 0, last - 1)
        x0, f0 = xp[j], fp[j]
        dx = xp[j + 1] - x0
        slope = (fp[j + 1] - f0) / np.where(strip(dx) == 0, 1, dx)
        y = slope * (x - x0) + f0
        # NumPy returns fp[-1] exactly at the last knot; keep the left slope there.
        y = np.where(xr == xpr[last], fp[last] + slope * (x - xp[last]), y)
    y = np.where(xr < xpr[0], fp[0] if left is None else left, y)
    y = np.where(xr > xpr[last], fp[last] if right is None else right, y)
    return y if np.result_type(y) == out_dtype else y.astype(out_dtype)


defcomposite(
    np.interp,
    _interp,
    note="d/dx uses the slope of the segment right of a knot (left one at xp[-1]); 0 outside the range",
)


# ----------------------------------------------------------- clip, nan_to_num
_NO = np._NoValue


def _clip(a, a_min=_NO, a_max=_NO, out=None, *, min=_NO, max=_NO, **kwargs):
    _reject_out("numpy.clip", {"out": out})
    if kwargs:
        raise TypeError(f"tapegrad's np.clip does not support the keyword arguments {sorted(kwargs)}")
    if a_min is not _NO and min is not _NO:
        raise ValueError("Passed more than one argument for the lower bound (a_min and min)")
    if a_max is not _NO and max is not _NO:
        raise ValueError("Passed more than one argument for the upper bound (a_max and max)")
    lo = a_min if a_min is not _NO else (None if min is _NO else min)
    hi = a_max if a_max is not _NO else (None if max is _NO else max)
    y = a
    if lo is not None:
        y = np.maximum(y, lo)
    if hi is not None:
        y = np.minimum(y, hi)
    return np.copy(y) if y is a else y


defcomposite(np.clip, _clip, note="minimum(maximum(a, lo), hi): a tie with a bound splits the cotangent equally")


def _nan_to_num_real(x, nan, posinf, neginf):
    xr = strip(x)
    info = np.finfo(np.result_type(xr))
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    y = np.where(np.isnan(xr), nan, x)
    y = np.where(np.isposinf(xr), posinf, y)
    y = np.where(np.isneginf(xr), neginf, y)
    dtype = np.result_type(xr)
    return y if np.result_type(y) == dtype else y.astype(dtype)


def _nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    xr = strip(x)
    if np.result_type(xr).kind not in "fc":
        return x if not copy and type(x) is Tracer else np.copy(x)
    if np.iscomplexobj(xr):
        re = _nan_to_num_real(np.real(x), nan, posinf, neginf)
        im = _nan_to_num_real(np.imag(x), nan, posinf, neginf)
        out = re + 1j * im
    else:
        out = _nan_to_num_real(x, nan, posinf, neginf)
    if not copy and type(x) is Tracer and np.ndim(x) > 0:
        x[...] = out  # copy=False: NumPy replaces the values in x itself (a recorded write)
        return x
    return out


defcomposite(np.nan_to_num, _nan_to_num, note="gradient 1 at finite entries, 0 at replaced ones")


def _real_if_close(a, tol=100):
    raw = strip(a)
    # NumPy decides from the raw values; the real part (when taken) is differentiable.
    return np.real(a) if np.isrealobj(np.real_if_close(raw, tol)) and np.iscomplexobj(raw) else a


def _unwrap(p, discont=None, axis=-1, *, period=2 * np.pi):
    # unwrap adds multiples of the period (piecewise constant in p): derivative 1.
    return _exact_shift(p, np.unwrap(strip(p), discont, axis, period=strip(period)))


defcomposite(np.real_if_close, _real_if_close)
defcomposite(np.unwrap, _unwrap, note="the added multiples of the period are constants")


# ----------------------------------------------------------- sinc
_SINC_SERIES = (1.0, -1.0 / 6, 1.0 / 120, -1.0 / 5040, 1.0 / 362880)


def _sinc(x):
    # Near 0, sin(u)/u is replaced by its Taylor polynomial so that every derivative
    # order is right at (and near) 0; |u| < 0.1 keeps the truncation below 1e-17.
    small = np.abs(strip(x)) < 0.1 / np.pi
    u = np.pi * np.where(small, 1.0, x)
    ratio = np.sin(u) / u
    u2 = (np.pi * np.pi) * (x * x)
    series = _SINC_SERIES[-1]
    for c in _SINC_SERIES[-2::-1]:
        series = series * u2 + c
    return np.where(small, series, ratio)


defcomposite(np.sinc, _sinc, note="Taylor polynomial for |pi x| < 0.1")


# ----------------------------------------------------------- Bessel I_n
def _trapezoid_nodes(n: int, xmax: float) -> int:
    # Aliasing error ~ I_{2K-n}(x)/I_0(x) ~ exp(-(2K-n)^2/(2x)): negligible for this K.
    return 32 + n + int(np.ceil(5.0 * np.sqrt(xmax)))


def _bessel_i_series(n: int, x: np.ndarray) -> np.ndarray:
    """Power series of ``I_n`` (accurate to rounding for ``|x| <= 2``, including tiny ``x``)."""
    term = (x / 2) ** n / math.factorial(n)
    total = term
    quarter = (x / 2) ** 2
    for k in range(1, 30):
        term = term * quarter / (k * (k + n))
        total = total + term
    return total


def _bessel_i_impl(n: int, x: Any) -> Any:
    """Modified Bessel function of the first kind ``I_n(x)`` for integer ``n >= 1``."""
    x = np.asarray(x, dtype=np.float64)
    ax = np.abs(x)
    k = _trapezoid_nodes(n, float(np.max(ax, initial=0.0)))
    total = np.zeros_like(ax)
    for j in range(k + 1):
        t = np.pi * j / k
        term = np.exp(ax * (np.cos(t) - 1.0)) * np.cos(n * t)
        total += term * (0.5 if j in (0, k) else 1.0)
    value = np.exp(ax) * total / k
    # I_n(-x) = (-1)^n I_n(x)
    value = np.where(x < 0, -value, value) if n % 2 else value
    # Near 0 the quadrature's absolute error would dominate I_n's small values.
    return np.where(ax <= 2.0, _bessel_i_series(n, np.minimum(ax, 2.0) * np.sign(x)), value)


bessel_i = primitive(_bessel_i_impl)


def _bessel_of_order(n: int, x: Any) -> Any:
    n = abs(n)
    return np.i0(x) if n == 0 else bessel_i(n, x)


defvjp(
    bessel_i,
    None,
    lambda g, ans, n, x: g * ((_bessel_of_order(n - 1, x) + _bessel_of_order(n + 1, x)) * 0.5),
)
defvjp(np.i0, lambda g, ans, x: g * bessel_i(1, x), note="I0' = I1 (trapezoidal rule, all orders)")


# ----------------------------------------------------------- linspace & co.
def _linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *, device=None):
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    div = (num - 1) if endpoint else num
    start, stop = _as_array(start), _as_array(stop)
    dt = np.result_type(start, stop)
    if dt.kind not in "fc":
        dt = np.result_type(dt, 1.0)
    integer_dtype = dtype is not None and np.issubdtype(dtype, np.integer)
    dtype = dt if dtype is None else dtype
    delta = stop - start
    if np.result_type(delta) != dt:
        delta = delta.astype(dt)
    y = np.arange(0, num, dtype=dt).reshape((-1,) + (1,) * np.ndim(delta))
    if div > 0:
        step = delta / div
        # NumPy's special case for denormal steps (gh-5437): same value path.
        y = (y / div) * delta if np.any(strip(step) == 0) else y * step
    else:
        step = np.nan
        y = y * delta
    y = y + start
    if endpoint and num > 1:
        last = (np.arange(num) == num - 1).reshape((-1,) + (1,) * np.ndim(delta))
        y = np.where(last, stop, y)
    if axis != 0:
        y = np.moveaxis(y, 0, axis)
    if integer_dtype:
        y = np.floor(y)
    if np.result_type(y) != np.dtype(dtype):
        y = y.astype(dtype)
    return (y, step) if retstep else y


def _logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    if not isinstance(base, (float, int)) and np.ndim(base):
        start, stop, base = _as_array(start), _as_array(stop), _as_array(base)
        ndmax = len(np.broadcast_shapes(np.shape(start), np.shape(stop), np.shape(base)))
        start, stop, base = (np.reshape(a, (1,) * (ndmax - np.ndim(a)) + np.shape(a)) for a in (start, stop, base))
        base = np.expand_dims(base, axis)
    y = np.power(base, np.linspace(start, stop, num=num, endpoint=endpoint, axis=axis))
    return y if dtype is None else y.astype(dtype)


def _geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    start = start if type(start) is Tracer else np.asarray(start)
    stop = stop if type(stop) is Tracer else np.asarray(stop)
    if np.any(strip(start) == 0) or np.any(strip(stop) == 0):
        raise ValueError("Geometric sequence cannot include zero")
    dt = np.result_type(start, stop, float(num), np.zeros((), dtype))
    dtype = dt if dtype is None else np.dtype(dtype)
    start, stop = start.astype(dt), stop.astype(dt)
    # Rotate start onto the positive reals (NumPy's trick for signs and complex values).
    # A real sign is locally constant; a complex one, start / |start|, is not.
    out_sign = start / np.abs(start) if dt.kind == "c" else np.sign(strip(start))
    start = start / out_sign
    stop = stop / out_sign
    result = np.logspace(np.log10(start), np.log10(stop), num=num, endpoint=endpoint, base=10.0, dtype=dt)
    if num > 0:
        # Exact endpoints, as NumPy makes them (exp(log(x)) need not equal x).
        nd = len(np.broadcast_shapes(np.shape(start), np.shape(stop)))
        index = np.arange(num).reshape((-1,) + (1,) * nd)
        result = np.where(index == 0, start, result)
        if num > 1 and endpoint:
            result = np.where(index == num - 1, stop, result)
    result = result * out_sign
    if axis != 0:
        result = np.moveaxis(result, 0, axis)
    return result if np.result_type(result) == dtype else result.astype(dtype)


defcomposite(np.linspace, _linspace)
defcomposite(np.logspace, _logspace)
defcomposite(np.geomspace, _geomspace)
