"""Derivatives of SciPy's gamma/beta families and distribution functions.

Loaded by ``tapegrad.rules.special``.  Incomplete gamma and beta functions are
differentiable in their integration limit ``x`` (the derivative is a density)
but not in their shape parameters, which have no closed-form derivative in
SciPy: those VJP entries are ``None`` and a traced shape raises
``NonDifferentiableArgumentError``.  Inverses (``gammaincinv``, ``stdtrit``,
...) use ``1 / f'(ans)``.  Discrete distributions (``bdtr``, ``pdtr``,
``nbdtr``) truncate their counts, so those are ``CONSTANT_ARG``.
"""

from __future__ import annotations

import math

import numpy as np

from ..registry import CONSTANT_ARG
from ._special_util import sc, real_only
from .ufuncs import defufunc

__all__: list = []

_LOG_PI = math.log(math.pi)
_SQRT_2PI = math.sqrt(2.0 * math.pi)
_SHAPE = "no derivative in the shape parameters"


def gamma_density(a, x):
    """``x**(a-1) exp(-x) / Gamma(a)``: the derivative of ``gammainc(a, x)`` in ``x``."""
    return np.exp(sc.xlogy(a - 1, x) - x - sc.gammaln(a))


def beta_density(a, b, x):
    """``x**(a-1) (1-x)**(b-1) / B(a, b)``: the derivative of ``betainc(a, b, x)`` in ``x``."""
    return np.exp(sc.xlogy(a - 1, x) + sc.xlog1py(b - 1, -x) - sc.betaln(a, b))


def t_density(df, t):
    """Student's t density with ``df`` degrees of freedom."""
    half = (df + 1) * 0.5
    return np.exp(sc.gammaln(half) - sc.gammaln(df * 0.5) - 0.5 * (np.log(df) + _LOG_PI) - half * np.log1p(t * t / df))


def f_density(dfn, dfd, x):
    """Density of the F distribution: from ``fdtr = betainc(dfn/2, dfd/2, dfn x/(dfd + dfn x))``."""
    den = dfd + dfn * x
    return beta_density(dfn * 0.5, dfd * 0.5, dfn * x / den) * (dfn * dfd / (den * den))


# --------------------------------------------------------------- gamma, beta, rgamma
defufunc(sc.gamma, lambda g, ans, x: g * (ans * sc.digamma(x)))
defufunc(sc.gammaln, lambda g, ans, x: g * sc.digamma(x), note="log|Gamma|: derivative digamma")
defufunc(sc.loggamma, lambda g, ans, x: g * sc.digamma(x))
defufunc(sc.rgamma, lambda g, ans, x: g * (-ans * sc.digamma(x)), note="nan at the poles 0, -1, -2, ...")
defufunc(
    sc.beta,
    lambda g, ans, a, b: g * (ans * (sc.digamma(a) - sc.digamma(a + b))),
    lambda g, ans, a, b: g * (ans * (sc.digamma(b) - sc.digamma(a + b))),
)
defufunc(
    sc.betaln,
    lambda g, ans, a, b: g * (sc.digamma(a) - sc.digamma(a + b)),
    lambda g, ans, a, b: g * (sc.digamma(b) - sc.digamma(a + b)),
)
# poch(z, m) = Gamma(z + m) / Gamma(z).
defufunc(
    sc.poch,
    lambda g, ans, z, m: g * (ans * (sc.digamma(z + m) - sc.digamma(z))),
    lambda g, ans, z, m: g * (ans * sc.digamma(z + m)),
)
# binom(n, k) = Gamma(n+1) / (Gamma(k+1) Gamma(n-k+1)).
defufunc(
    sc.binom,
    lambda g, ans, n, k: g * (ans * (sc.digamma(n + 1) - sc.digamma(n - k + 1))),
    lambda g, ans, n, k: g * (ans * (sc.digamma(n - k + 1) - sc.digamma(k + 1))),
    note="through the Gamma form; nan where a Gamma has a pole",
)

# --------------------------------------------------------------- incomplete gamma and beta
defufunc(sc.gammainc, None, lambda g, ans, a, x: g * gamma_density(a, x), note=_SHAPE)
defufunc(sc.gammaincc, None, lambda g, ans, a, x: g * -gamma_density(a, x), note=_SHAPE)
defufunc(sc.gammaincinv, None, lambda g, ans, a, y: g / gamma_density(a, ans), note=_SHAPE)
defufunc(sc.gammainccinv, None, lambda g, ans, a, y: g / -gamma_density(a, ans), note=_SHAPE)
defufunc(sc.betainc, None, None, lambda g, ans, a, b, x: g * beta_density(a, b, x), note=_SHAPE)
defufunc(sc.betaincc, None, None, lambda g, ans, a, b, x: g * -beta_density(a, b, x), note=_SHAPE)
defufunc(sc.betaincinv, None, None, lambda g, ans, a, b, y: g / beta_density(a, b, ans), note=_SHAPE)
defufunc(sc.betainccinv, None, None, lambda g, ans, a, b, y: g / -beta_density(a, b, ans), note=_SHAPE)

# --------------------------------------------------------------- continuous distributions
_DF = "no derivative in the degrees of freedom"
# chdtr(v, x) = gammainc(v/2, x/2); chdtri inverts chdtrc in x.
defufunc(sc.chdtr, None, lambda g, ans, v, x: g * (0.5 * gamma_density(v * 0.5, x * 0.5)), note=_DF)
defufunc(sc.chdtrc, None, lambda g, ans, v, x: g * (-0.5 * gamma_density(v * 0.5, x * 0.5)), note=_DF)
defufunc(sc.chdtri, None, lambda g, ans, v, p: g / (-0.5 * gamma_density(v * 0.5, ans * 0.5)), note=_DF)
# gdtr(a, b, x) = gammainc(b, a x) with rate a and shape b.
defufunc(
    sc.gdtr,
    lambda g, ans, a, b, x: g * (x * gamma_density(b, a * x)),
    None,
    lambda g, ans, a, b, x: g * (a * gamma_density(b, a * x)),
    note="no derivative in the shape b",
)
defufunc(
    sc.gdtrc,
    lambda g, ans, a, b, x: g * (-x * gamma_density(b, a * x)),
    None,
    lambda g, ans, a, b, x: g * (-a * gamma_density(b, a * x)),
    note="no derivative in the shape b",
)
# gdtrix(a, b, p): the x with gdtr(a, b, x) = p; implicit derivatives.
defufunc(
    sc.gdtrix,
    lambda g, ans, a, b, p: g * (-ans / a),
    None,
    lambda g, ans, a, b, p: g / (a * gamma_density(b, a * ans)),
    note="no derivative in the shape b",
)
# gdtria(p, b, x): the rate a with gdtr(a, b, x) = p.
defufunc(
    sc.gdtria,
    lambda g, ans, p, b, x: g / (x * gamma_density(b, ans * x)),
    None,
    lambda g, ans, p, b, x: g * (-ans / x),
    note="no derivative in the shape b",
)
defufunc(sc.stdtr, None, lambda g, ans, df, t: g * t_density(df, t), note=_DF)
defufunc(sc.stdtrit, None, lambda g, ans, df, p: g / t_density(df, ans), note=_DF)
defufunc(sc.fdtr, None, None, lambda g, ans, dfn, dfd, x: g * f_density(dfn, dfd, x), note=_DF)
defufunc(sc.fdtrc, None, None, lambda g, ans, dfn, dfd, x: g * -f_density(dfn, dfd, x), note=_DF)
defufunc(sc.fdtri, None, None, lambda g, ans, dfn, dfd, p: g / f_density(dfn, dfd, ans), note=_DF)
# Normal distribution: mn = x - std ndtri(p), std = (x - mn) / ndtri(p).
defufunc(
    sc.nrdtrimn,
    lambda g, ans, p, std, x: g * (-std * _SQRT_2PI * np.exp(sc.ndtri(p) ** 2 * 0.5)),
    lambda g, ans, p, std, x: g * -sc.ndtri(p),
    lambda g, ans, p, std, x: g,
)
defufunc(
    sc.nrdtrisd,
    lambda g, ans, mn, p, x: g * (-1 / sc.ndtri(p)),
    lambda g, ans, mn, p, x: g * (-ans * _SQRT_2PI * np.exp(sc.ndtri(p) ** 2 * 0.5) / sc.ndtri(p)),
    lambda g, ans, mn, p, x: g / sc.ndtri(p),
)
# ndtri_exp(y) = ndtri(exp(y)).
defufunc(sc.ndtri_exp, lambda g, ans, y: g * (_SQRT_2PI * np.exp(y + ans * ans * 0.5)))


# owens_t(h, a) = 1/(2 pi) int_0^a exp(-h**2 (1 + t**2) / 2) / (1 + t**2) dt.
def _owens_h(g, ans, h, a):
    return g * (np.exp(h * h * -0.5) * sc.erf(a * h * (1 / math.sqrt(2.0))) * (-0.5 / _SQRT_2PI))


def _owens_a(g, ans, h, a):
    s = a * a + 1
    return g * (np.exp(h * h * s * -0.5) / (s * (2 * math.pi)))


defufunc(sc.owens_t, _owens_h, _owens_a)


# tklmbda(x, lmbda): the CDF F of Tukey's lambda distribution, the inverse of its
# quantile Q(p) = (p**lmbda - (1-p)**lmbda) / lmbda, so dF/dx = 1 / Q'(F).
def _tklmbda_x(g, ans, x, lmbda):
    inside = (ans > 0) & (ans < 1)
    p = np.where(inside, ans, 0.5)
    return g * np.where(inside, 1 / (np.power(p, lmbda - 1) + np.power(1 - p, lmbda - 1)), 0.0)


defufunc(sc.tklmbda, _tklmbda_x, None, note="no derivative in lmbda; 0 outside the support")

# --------------------------------------------------------------- discrete distributions
_COUNTS = "counts k, n are integers (constant)"
# bdtr(k, n, p) = betainc(n - k, k + 1, 1 - p) for integer k < n.
defufunc(
    sc.bdtr, CONSTANT_ARG, CONSTANT_ARG,
    lambda g, ans, k, n, p: g * -beta_density(np.floor(n) - np.floor(k), np.floor(k) + 1, 1 - p), note=_COUNTS,
)
defufunc(
    sc.bdtrc, CONSTANT_ARG, CONSTANT_ARG,
    lambda g, ans, k, n, p: g * beta_density(np.floor(n) - np.floor(k), np.floor(k) + 1, 1 - p), note=_COUNTS,
)
defufunc(
    sc.bdtri, CONSTANT_ARG, CONSTANT_ARG,
    lambda g, ans, k, n, y: g / -beta_density(np.floor(n) - np.floor(k), np.floor(k) + 1, 1 - ans), note=_COUNTS,
)
# nbdtr(k, n, p) = betainc(n, k + 1, p).
defufunc(
    sc.nbdtr, CONSTANT_ARG, CONSTANT_ARG,
    lambda g, ans, k, n, p: g * beta_density(np.floor(n), np.floor(k) + 1, p), note=_COUNTS,
)
defufunc(
    sc.nbdtrc, CONSTANT_ARG, CONSTANT_ARG,
    lambda g, ans, k, n, p: g * -beta_density(np.floor(n), np.floor(k) + 1, p), note=_COUNTS,
)
defufunc(
    sc.nbdtri, CONSTANT_ARG, CONSTANT_ARG,
    lambda g, ans, k, n, y: g / beta_density(np.floor(n), np.floor(k) + 1, ans), note=_COUNTS,
)
# pdtr(k, m) = gammaincc(k + 1, m).
defufunc(sc.pdtr, CONSTANT_ARG, lambda g, ans, k, m: g * -gamma_density(np.floor(k) + 1, m), note="k is an integer count (constant)")
defufunc(sc.pdtrc, CONSTANT_ARG, lambda g, ans, k, m: g * gamma_density(np.floor(k) + 1, m), note="k is an integer count (constant)")
defufunc(sc.pdtri, CONSTANT_ARG, lambda g, ans, k, y: g / -gamma_density(np.floor(k) + 1, ans), note="k is an integer count (constant)")

# digamma's complex derivative (trigamma) has no complex SciPy implementation.
defufunc(
    sc.digamma,
    real_only(lambda g, ans, x: g * (sc._ufuncs._zeta(2.0, x)), "scipy.special.digamma"),
    note="real x only (trigamma = zeta(2, x))",
)
