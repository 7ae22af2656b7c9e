"""The legacy polynomial functions (``np.poly*`` and ``np.roots``).

* ``polyadd``/``polysub`` pad the shorter coefficient array with zeros;
  ``polymul`` convolves, after trimming leading zeros as NumPy's ``poly1d``
  does (trimmed zeros get no gradient: moving one off zero would change the
  output's length); ``polyder``/``polyint`` scale coefficients (the
  integration constants ``k`` are differentiable too).
* ``polydiv``: long division on tracers, step for step NumPy's, so the
  quotient and the remainder are differentiable in both polynomials.  Leading
  remainder entries that NumPy trims as zero get no gradient.
* ``poly``: the product of ``(x - z_i)`` built by repeated multiplication; a
  square matrix goes through ``np.linalg.eigvals`` (first order only).
* ``polyfit``: NumPy's scaled least squares through ``np.linalg.lstsq``,
  differentiable in ``x``, ``y`` and ``w`` (and ``full``/``cov`` outputs),
  assuming the rank does not change.
* ``roots``: a primitive whose derivative comes from implicit
  differentiation of ``p(r) = 0``: ``dr/dp_k = -r**(n-k) / p'(r)``.  It is
  defined at simple roots only; at a multiple root ``p'(r) = 0`` and the
  derivative is ``inf``/``nan`` (a root whose cotangent is exactly zero adds
  nothing, so unused multiple roots do not poison the others).
"""

from __future__ import annotations

import warnings

import numpy as np

from ..dispatch import strip
from ..tracer import unwrap_above
from ..registry import defcomposite, defvjp
from .misc import as_array, as_dtype


def _poly1d_result(fun):
    """Wrap the result in ``np.poly1d`` when an input was one, as NumPy does."""

    def impl(*args, **kwargs):
        out = fun(*[a.coeffs if isinstance(a, np.poly1d) else a for a in args], **kwargs)
        if any(isinstance(a, np.poly1d) for a in args):
            return tuple(np.poly1d(o) for o in out) if isinstance(out, tuple) else np.poly1d(out)
        return out

    return impl


# ------------------------------------------------------------------ add, sub, mul
def _padded(a, length):
    short = length - len(a)
    return np.concatenate((np.zeros(short, dtype=a.dtype), a)) if short > 0 else a


def _combine(op):
    def impl(a1, a2):
        a1, a2 = np.atleast_1d(as_array(a1)), np.atleast_1d(as_array(a2))
        length = max(len(a1), len(a2))
        return op(_padded(a1, length), _padded(a2, length))

    return impl


def _trim_leading(a):
    """NumPy's ``poly1d`` coefficients: leading zeros dropped, ``[0]`` if nothing is left."""
    a = np.atleast_1d(as_array(a))
    if np.ndim(a) > 1:
        raise ValueError("Polynomial must be 1d only.")
    nonzero = np.flatnonzero(strip(a))
    if nonzero.size == 0:
        return np.zeros(1, dtype=a.dtype)
    return a[int(nonzero[0]) :]


def _polymul(a1, a2):
    return np.convolve(_trim_leading(a1), _trim_leading(a2))


defcomposite(np.polyadd, _poly1d_result(_combine(np.add)))
defcomposite(np.polysub, _poly1d_result(_combine(np.subtract)))
defcomposite(np.polymul, _poly1d_result(_polymul), note="leading zeros trimmed (poly1d), they get no gradient")


# ------------------------------------------------------------------ der, int
def _polyder(p, m=1):
    m = int(m)
    if m < 0:
        raise ValueError("Order of derivative must be positive (see polyint)")
    p = as_array(p)
    for _ in range(m):
        n = len(p) - 1
        p = p[:-1] * np.arange(n, 0, -1)
    return p


def _polyint(p, m=1, k=None):
    m = int(m)
    if m < 0:
        raise ValueError("Order of integral must be positive (see polyder)")
    k = np.atleast_1d(np.zeros(m, float) if k is None else as_array(k))
    if len(k) == 1 and m > 1:
        k = k[0] * np.ones(m, float)
    if len(k) < m:
        raise ValueError("k must be a scalar or a rank-1 array of length 1 or >m.")
    p = as_array(p)
    for i in range(m):
        p = np.concatenate((p / np.arange(len(p), 0, -1), np.reshape(k[i], (1,))))
    return p


defcomposite(np.polyder, _poly1d_result(_polyder))
defcomposite(np.polyint, _poly1d_result(_polyint), note="integration constants k differentiable")


# ------------------------------------------------------------------ division
def _polydiv(u, v):
    u = np.atleast_1d(as_array(u)) + 0.0
    v = np.atleast_1d(as_array(v)) + 0.0
    dtype = np.result_type(unwrap_above(u, 0)[0] + strip(v)[0])
    m, n = len(u) - 1, len(v) - 1
    scale = 1.0 / v[0]
    r = as_dtype(u, dtype)
    q = []
    for k in range(m - n + 1):
        d = scale * r[k]
        q.append(d)
        # r[k : k + n + 1] -= d * v, out of place.
        r = np.concatenate((r[:k], r[k : k + n + 1] - d * v, r[k + n + 1 :]))
    q = as_dtype(np.stack(q), dtype) if q else np.zeros(1, dtype=dtype)
    while np.allclose(strip(r)[0], 0, rtol=1e-14) and np.shape(r)[-1] > 1:
        r = r[1:]
    return q, r


defcomposite(np.polydiv, _poly1d_result(_polydiv), note="remainder entries NumPy trims as zero get no gradient")


# ------------------------------------------------------------------ poly, roots
def _poly(seq_of_zeros):
    zeros = np.atleast_1d(as_array(seq_of_zeros))
    shape = np.shape(zeros)
    if len(shape) == 2 and shape[0] == shape[1] and shape[0] != 0:
        zeros = np.linalg.eigvals(zeros)
    elif len(shape) == 1:
        zeros = as_dtype(zeros, np.mintypecode(zeros.dtype.char))
    else:
        raise ValueError("input must be 1d or non-empty square 2d array.")
    if len(zeros) == 0:
        return 1.0
    dtype = zeros.dtype
    pad = np.zeros(1, dtype=dtype)
    a = np.ones(1, dtype=dtype)
    for zero in zeros:
        # a * (x - zero): the convolution with [1, -zero].
        a = np.concatenate((a, pad)) - zero * np.concatenate((pad, a))
    if dtype.kind == "c":
        raw = np.asarray(strip(zeros), complex)
        if np.all(np.sort(raw) == np.sort(raw.conjugate())):
            a = np.real(a)
    return a


defcomposite(np.poly, _poly, note="a matrix goes through eigvals (first order only)")


def _roots_vjp(g, ans, p):
    p = np.atleast_1d(p)
    slope = np.polyval(np.polyder(p), ans)  # p'(r) at each root
    # dr_j/dp_k = -r_j**(n-k) / p'(r_j).  A multiple root (p'(r) == 0) whose cotangent is
    # zero is skipped (0 instead of 0/0); everywhere else the VJP stays linear in g, so
    # that its own derivative (second order) is right even where g happens to be 0.
    skipped = (g == 0) & (slope == 0)
    weight = g / np.where(skipped, 1, slope)
    return -np.matmul(weight, np.vander(ans, len(p)))


defvjp(np.roots, _roots_vjp, note="implicit differentiation; defined at simple roots (inf/nan at multiple ones)")


# ------------------------------------------------------------------ polyfit
def _checked_fit_inputs(x, y, deg, w):
    if deg < 0:
        raise ValueError("expected deg >= 0")
    if np.ndim(x) != 1:
        raise TypeError("expected 1D vector for x")
    if np.size(x) == 0:
        raise TypeError("expected non-empty vector for x")
    if np.ndim(y) < 1 or np.ndim(y) > 2:
        raise TypeError("expected 1D or 2D array for y")
    if np.shape(x)[0] != np.shape(y)[0]:
        raise TypeError("expected x and y to have same length")
    if w is not None:
        if np.ndim(w) != 1:
            raise TypeError("expected a 1-d array for weights")
        if np.shape(w)[0] != np.shape(y)[0]:
            raise TypeError("expected w and y to have the same length")


def _fit_covariance(lhs, scale, resids, n, order, y_ndim, cov):
    base = np.linalg.inv(np.dot(lhs.T, lhs))
    base = base / np.outer(scale, scale)
    if cov == "unscaled":
        fac = 1
    else:
        if n <= order:
            raise ValueError("the number of data points must exceed order to scale the covariance matrix")
        fac = resids / (n - order)
    return base * fac if y_ndim == 1 else base[:, :, None] * fac


def _polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    order = int(deg) + 1
    x, y = as_array(x) + 0.0, as_array(y) + 0.0
    w = None if w is None else as_array(w) + 0.0
    _checked_fit_inputs(x, y, deg, w)
    if rcond is None:
        rcond = len(x) * np.finfo(x.dtype).eps
    lhs, rhs = np.vander(x, order), y
    if w is not None:
        # NumPy scales in place: the dtypes of lhs and rhs stay.
        lhs = as_dtype(lhs * w[:, None], lhs.dtype)
        rhs = as_dtype(rhs * (w[:, None] if np.ndim(rhs) == 2 else w), rhs.dtype)
    scale = np.sqrt(np.sum(lhs * lhs, axis=0))
    lhs = as_dtype(lhs / scale, lhs.dtype)
    c, resids, rank, s = np.linalg.lstsq(lhs, rhs, rcond)
    c = (c.T / scale).T
    if rank != order and not full:
        warnings.warn("Polyfit may be poorly conditioned", np.exceptions.RankWarning, stacklevel=5)
    if full:
        return c, resids, rank, s, rcond
    if cov:
        return c, _fit_covariance(lhs, scale, resids, len(x), order, np.ndim(y), cov)
    return c


defcomposite(np.polyfit, _polyfit, note="least squares via lstsq: x, y, w differentiable (rank assumed constant)")
