"""Derivatives of the other ``scipy.special`` ufuncs (loaded by ``tapegrad.rules.special``).

Elementary helpers, error-function relatives, exponential/sine/Fresnel
integrals, elliptic integrals, orthogonal polynomials (in ``x``),
hypergeometric functions (in ``z``), Box-Cox transforms, Huber losses,
parabolic-cylinder and Mathieu functions (in ``x``), Lambert W.

Removable singularities (``exprel`` and ``boxcox`` at 0, ``ellipk``/``ellipe``
at ``m == 0``, ``spence`` at 1) switch to a short Taylor series close to the
point (``_special_util.near``), so first *and* higher derivatives stay finite
and accurate there; the formula branch is evaluated on a safe stand-in so no
NaN leaks through ``np.where``.  A few distribution functions have a first
derivative through SciPy's private density ufuncs (``_kolmogp``, ``_nct_pdf``,
...), which have no rule themselves: their second derivative raises.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import _ufuncs

from ..registry import CONSTANT_ARG, defconstant
from ._special_util import sc, near, nonzero, polyval, unless_unused
from .ufuncs import defufunc

__all__: list = []

_DEG = math.pi / 180.0
_LN2 = math.log(2.0)
_LN10 = math.log(10.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)
_PI_OVER_2 = math.pi / 2.0
_PARAM = "no derivative in the parameters"
_DEGREE = "no derivative in the degree n or the parameters"

# --------------------------------------------------------------- elementary
defconstant(sc.round, sc.gammasgn, note="piecewise constant")
defufunc(sc.cbrt, lambda g, ans, x: (g / 3) / (ans * ans), note="inf at 0")
defufunc(sc.exp2, lambda g, ans, x: (g * _LN2) * ans)
defufunc(sc.exp10, lambda g, ans, x: (g * _LN10) * ans)
defufunc(sc.expm1, lambda g, ans, x: g * (ans + 1))
defufunc(sc.log1p, lambda g, ans, x: g / (x + 1))
defufunc(sc.cosm1, lambda g, ans, x: g * -np.sin(x))
defufunc(sc.sindg, lambda g, ans, x: (g * _DEG) * sc.cosdg(x))
defufunc(sc.cosdg, lambda g, ans, x: (g * -_DEG) * sc.sindg(x))
defufunc(sc.tandg, lambda g, ans, x: (g * _DEG) * (ans * ans + 1))
defufunc(sc.cotdg, lambda g, ans, x: (g * -_DEG) * (ans * ans + 1))
defufunc(
    sc.radian,
    lambda g, ans, d, m, s: g * _DEG,
    lambda g, ans, d, m, s: g * (_DEG / 60),
    lambda g, ans, d, m, s: g * (_DEG / 3600),
)
defufunc(
    sc.powm1,
    lambda g, ans, x, y: g * (y * np.power(x, y - 1)),
    lambda g, ans, x, y: g * ((ans + 1) * np.log(np.where(x == 0, 1, x))),
    note="d/dy at x == 0 taken as 0",
)


# --------------------------------------------------------------- exprel and Box-Cox
# exprel(u) = (e**u - 1)/u; exprel'(u) = (e**u (u - 1) + 1)/u**2 = sum k u**(k-1)/(k+1)!.
_EXPREL_PRIME = [k / math.factorial(k + 1) for k in range(1, 9)]


def exprel_prime(u):
    """Derivative of ``exprel``, accurate (and differentiable) through ``u == 0``."""
    return near(u, 0.0, 0.05, lambda t: polyval(_EXPREL_PRIME, t), lambda t: (np.exp(t) * (t - 1) + 1) / (t * t))


defufunc(sc.exprel, lambda g, ans, x: g * exprel_prime(x))


# boxcox(x, l) = (x**l - 1)/l = L exprel(l L) with L = log(x): d/dl = L**2 exprel'(l L).
def _boxcox_lmbda(log):
    return lambda g, ans, x, lmbda: g * (log(x) ** 2 * exprel_prime(lmbda * log(x)))


defufunc(sc.boxcox, lambda g, ans, x, lmbda: g * np.power(x, lmbda - 1), _boxcox_lmbda(np.log))
defufunc(sc.boxcox1p, lambda g, ans, x, lmbda: g * np.power(x + 1, lmbda - 1), _boxcox_lmbda(np.log1p))


# inv_boxcox(y, l) = x with boxcox(x, l) = y: dx/dy = x**(1-l), dx/dl = -x**(1-l) d boxcox/dl.
def _inv_boxcox(log, shift):
    def dy(g, ans, y, lmbda):
        return g * np.power(ans + shift, 1 - lmbda)

    def dl(g, ans, y, lmbda):
        big_l = log(ans)
        return g * -(np.power(ans + shift, 1 - lmbda) * big_l**2 * exprel_prime(lmbda * big_l))

    return dy, dl


defufunc(sc.inv_boxcox, *_inv_boxcox(np.log, 0.0))
defufunc(sc.inv_boxcox1p, *_inv_boxcox(np.log1p, 1.0))


# --------------------------------------------------------------- Huber losses
# huber(d, r) = r**2/2 for |r| <= d, d (|r| - d/2) otherwise (inf for d < 0).
defufunc(
    sc.huber,
    lambda g, ans, d, r: g * np.where((np.abs(r) <= d) | (d < 0), 0.0, np.abs(r) - d),
    lambda g, ans, d, r: g * np.where(d < 0, 0.0, np.clip(r, -np.abs(d), np.abs(d))),
    note="derivative 0 where d < 0 (the value is inf)",
)


# pseudo_huber(d, r) = d**2 (sqrt(1 + (r/d)**2) - 1) = d s - d**2 with s = sqrt(d**2 + r**2).
def _pseudo_huber_s(d, r):
    return np.sqrt(d * d + r * r)


defufunc(
    sc.pseudo_huber,
    lambda g, ans, d, r: g * np.where(
        d < 0, 0.0, _pseudo_huber_s(d, r) + d * d / nonzero(_pseudo_huber_s(d, r)) - 2 * d
    ),
    lambda g, ans, d, r: g * np.where(d <= 0, 0.0, d * r / nonzero(_pseudo_huber_s(d, r))),
    note="derivative 0 where d < 0 (the value is inf); d/dd at d = r = 0 taken as 0",
)

# --------------------------------------------------------------- error-function relatives
defufunc(sc.erfi, lambda g, ans, x: g * (_TWO_OVER_SQRT_PI * np.exp(x * x)))
defufunc(sc.dawsn, lambda g, ans, x: g * (1 - 2 * x * ans))
defufunc(sc.wofz, lambda g, ans, z: g * (-2 * z * ans + 2j * _INV_SQRT_PI))


# voigt_profile(x, sigma, gamma) = Re w(z) / (sigma sqrt(2 pi)), z = (x + i gamma)/(sigma sqrt 2).
def _voigt_parts(x, sigma, gamma):
    z = (x + 1j * gamma) / (sigma * math.sqrt(2.0))
    dw = -2 * z * sc.wofz(z) + 2j * _INV_SQRT_PI  # w'(z)
    return z, dw, 1 / (2 * math.sqrt(math.pi) * sigma * sigma)


def _voigt_x(g, ans, x, sigma, gamma):
    _, dw, c = _voigt_parts(x, sigma, gamma)
    return g * (np.real(dw) * c)


def _voigt_sigma(g, ans, x, sigma, gamma):
    z, dw, _ = _voigt_parts(x, sigma, gamma)
    return g * ((-ans - np.real(dw * z) / (sigma * math.sqrt(2 * math.pi))) / sigma)


def _voigt_gamma(g, ans, x, sigma, gamma):
    _, dw, c = _voigt_parts(x, sigma, gamma)
    return g * (-np.imag(dw) * c)


defufunc(sc.voigt_profile, _voigt_x, _voigt_sigma, _voigt_gamma, note="sigma > 0")

# --------------------------------------------------------------- exponential, sine and Fresnel integrals
defufunc(sc.expi, lambda g, ans, x: g * (np.exp(x) / x))
defufunc(sc.exp1, lambda g, ans, x: g * (-np.exp(-x) / x))
# expn(n, x)' = -expn(n-1, x) for n >= 1; expn(0, x) = exp(-x)/x.
defufunc(
    sc.expn,
    CONSTANT_ARG,
    lambda g, ans, n, x: g * np.where(n == 0, -ans * (1 + 1 / x), -sc.expn(np.where(n == 0, 0, n - 1), x)),
    note="n is an integer order (constant)",
)


def _sinc(f, x):
    """``f(x) / x`` with the limit 1 at 0 (``f`` is sin or sinh)."""
    return np.where(x == 0, 1.0, f(nonzero(x)) / nonzero(x))


defufunc(sc.sici, lambda g, ans, x: g[0] * _sinc(np.sin, x) + unless_unused(g[1], lambda: np.cos(x) / x, x == 0))
defufunc(sc.shichi, lambda g, ans, x: g[0] * _sinc(np.sinh, x) + unless_unused(g[1], lambda: np.cosh(x) / x, x == 0))
defufunc(
    sc.fresnel,
    lambda g, ans, z: g[0] * np.sin(z * z * _PI_OVER_2) + g[1] * np.cos(z * z * _PI_OVER_2),
)
# modfresnelp(x) = (F+, K+): F+ = int_x^inf exp(i t**2) dt, K+ = exp(-i (x**2 + pi/4)) F+ / sqrt(pi).
_E_MINUS = complex(np.exp(-0.25j * math.pi)) * _INV_SQRT_PI
_E_PLUS = complex(np.exp(0.25j * math.pi)) * _INV_SQRT_PI
# SciPy's values for x < 0 do not follow these definitions: the derivative there is nan.
def _nonnegative(x, d):
    return np.where(x < 0, np.nan, d)


defufunc(
    sc.modfresnelp,
    lambda g, ans, x: _nonnegative(x, g[0] * -np.exp(1j * x * x) + g[1] * (-2j * x * ans[1] - _E_MINUS)),
    note="x >= 0 (nan below)",
)
defufunc(
    sc.modfresnelm,
    lambda g, ans, x: _nonnegative(x, g[0] * -np.exp(-1j * x * x) + g[1] * (2j * x * ans[1] - _E_PLUS)),
    note="x >= 0 (nan below)",
)
# spence(z) = int_1^z log(t)/(1 - t) dt; near z = 1: log(z)/(1-z) = -sum (-t)**k/(k+1), t = z-1.
_SPENCE = [-((-1) ** k) / (k + 1) for k in range(12)]
defufunc(
    sc.spence,
    lambda g, ans, z: g * near(z, 1.0, 0.05, lambda t: polyval(_SPENCE, t - 1), lambda t: np.log(t) / (1 - t)),
)
# Wright omega: w + log(w) = z, so w' = w / (1 + w); Lambert W: W' = exp(-W) / (1 + W).
defufunc(sc.wrightomega, lambda g, ans, z: g * (ans / (1 + ans)))
defufunc(
    _ufuncs._lambertw,
    lambda g, ans, z, k, tol: g * (np.exp(-ans) / (1 + ans)),
    CONSTANT_ARG,
    CONSTANT_ARG,
    note="the branch k and tol are constants",
)
# Wright's generalised Bessel function: d/dx Phi(a, b; x) = Phi(a, a + b; x).
defufunc(sc.wright_bessel, None, None, lambda g, ans, a, b, x: g * sc.wright_bessel(a, a + b, x), note=_PARAM)
defufunc(
    sc.log_wright_bessel, None, None,
    lambda g, ans, a, b, x: g * np.exp(sc.log_wright_bessel(a, a + b, x) - ans), note=_PARAM,
)

# --------------------------------------------------------------- elliptic integrals
# K'(m) = (E - (1-m) K) / (2 m (1-m)), E'(m) = (E - K) / (2 m): series near m = 0
# from K = pi/2 sum c_n m**n, E = pi/2 sum c_n m**n / (1 - 2n), c_n = ((2n-1)!!/(2n)!!)**2.
_C = [1.0]
for _n in range(1, 8):
    _C.append(_C[-1] * ((2 * _n - 1) / (2 * _n)) ** 2)
_K_PRIME = [_PI_OVER_2 * _C[n] * n for n in range(1, 8)]
_E_PRIME = [_PI_OVER_2 * _C[n] * n / (1 - 2 * n) for n in range(1, 8)]


def ellipk_prime(m):
    """``dK/dm``, smooth through ``m == 0``."""
    return near(
        m, 0.0, 1e-2, lambda t: polyval(_K_PRIME, t),
        lambda t: (sc.ellipe(t) - (1 - t) * sc.ellipk(t)) / (2 * t * (1 - t)),
    )


def ellipe_prime(m):
    """``dE/dm``, smooth through ``m == 0``."""
    return near(m, 0.0, 1e-2, lambda t: polyval(_E_PRIME, t), lambda t: (sc.ellipe(t) - sc.ellipk(t)) / (2 * t))


defufunc(sc.ellipk, lambda g, ans, m: g * ellipk_prime(m))
defufunc(sc.ellipe, lambda g, ans, m: g * ellipe_prime(m))
# ellipkm1(p) = K(1 - p).
defufunc(sc.ellipkm1, lambda g, ans, p: g * -ellipk_prime(1 - p))


def _delta(phi, m):
    s = np.sin(phi)
    return np.sqrt(1 - m * s * s)


def _ellipkinc_m(g, ans, phi, m):
    # dF/dm = (E(phi|m) - (1-m) F) / (2 m (1-m)) - sin(2 phi) / (4 (1-m) Delta): 0/0 at m = 0.
    def formula(t):
        return (sc.ellipeinc(phi, t) - (1 - t) * sc.ellipkinc(phi, t)) / (2 * t * (1 - t)) - np.sin(2 * phi) / (
            4 * (1 - t) * _delta(phi, t)
        )

    return g * near(m, 0.0, 1e-3, lambda t: _incomplete_series(phi, t, 1), formula)


def _ellipeinc_m(g, ans, phi, m):
    def formula(t):
        return (sc.ellipeinc(phi, t) - sc.ellipkinc(phi, t)) / (2 * t)

    return g * near(m, 0.0, 1e-3, lambda t: _incomplete_series(phi, t, -1), formula)


def _sin_power_integral(phi, k):
    """``int_0^phi sin(t)**(2k) dt`` by the reduction formula."""
    out = phi
    s, c = np.sin(phi), np.cos(phi)
    for j in range(1, k + 1):
        out = ((2 * j - 1) * out - s ** (2 * j - 1) * c) / (2 * j)
    return out


def _incomplete_series(phi, m, kind):
    """Taylor series in ``m`` of ``dF/dm`` (kind 1) or ``dE/dm`` (kind -1) at ``m == 0``.

    ``(1 - m s**2)**(-kind/2) = sum a_j m**j s**(2j)``; differentiating under the integral
    gives ``sum j a_j m**(j-1) int_0^phi sin**(2j)``.
    """
    coefficient, out = 1.0, 0.0
    for j in range(1, 5):
        # binomial series of (1 - u)**(-kind/2): a_j = a_{j-1} (kind/2 + j - 1) / j
        coefficient = coefficient * (kind * 0.5 + j - 1) / j
        out = out + (j * coefficient) * m ** (j - 1) * _sin_power_integral(phi, j)
    return out


defufunc(sc.ellipkinc, lambda g, ans, phi, m: g / _delta(phi, m), _ellipkinc_m)
defufunc(sc.ellipeinc, lambda g, ans, phi, m: g * _delta(phi, m), _ellipeinc_m)


def _ellipj_u(g, ans, u, m):
    sn, cn, dn, _ = ans
    return g[0] * (cn * dn) - g[1] * (sn * dn) - g[2] * (m * sn * cn) + g[3] * dn


defufunc(sc.ellipj, _ellipj_u, None, note="no derivative in the parameter m")


# agm(a, b) = a pi / (2 K(1 - (b/a)**2)) for a, b > 0; Euler: a d/da + b d/db = agm.
def _agm_b(g, ans, a, b):
    m = 1 - (b / a) ** 2
    k = sc.ellipk(m)
    return g * (math.pi * b * ellipk_prime(m) / (a * k * k))


defufunc(
    sc.agm,
    lambda g, ans, a, b: (ans * g - b * _agm_b(g, ans, a, b)) / a,
    _agm_b,
    note="a, b > 0",
)

# --------------------------------------------------------------- orthogonal polynomials (in x)
def _lower(n):
    """``n - 1``, but 0 where ``n == 0`` (the derivative there is 0 and the factor is 0 or masked)."""
    return np.where(n == 0, 0, n - 1)


def _poly(rule):
    return lambda g, ans, n, x: g * np.where(n == 0, 0.0, rule(n, _lower(n), x))


defufunc(sc.eval_legendre, None, _poly(lambda n, m, x: sc.eval_gegenbauer(m, 1.5, x)), note=_DEGREE)
defufunc(sc.eval_chebyt, None, _poly(lambda n, m, x: n * sc.eval_chebyu(m, x)), note=_DEGREE)
defufunc(sc.eval_chebyu, None, _poly(lambda n, m, x: 2 * sc.eval_gegenbauer(m, 2.0, x)), note=_DEGREE)
defufunc(sc.eval_chebyc, None, _poly(lambda n, m, x: n * sc.eval_chebyu(m, x * 0.5)), note=_DEGREE)
defufunc(sc.eval_chebys, None, _poly(lambda n, m, x: sc.eval_gegenbauer(m, 2.0, x * 0.5)), note=_DEGREE)
defufunc(sc.eval_sh_chebyt, None, _poly(lambda n, m, x: 2 * n * sc.eval_chebyu(m, 2 * x - 1)), note=_DEGREE)
defufunc(sc.eval_sh_chebyu, None, _poly(lambda n, m, x: 4 * sc.eval_gegenbauer(m, 2.0, 2 * x - 1)), note=_DEGREE)
defufunc(sc.eval_sh_legendre, None, _poly(lambda n, m, x: 2 * sc.eval_gegenbauer(m, 1.5, 2 * x - 1)), note=_DEGREE)
defufunc(sc.eval_laguerre, None, _poly(lambda n, m, x: -sc.eval_genlaguerre(m, 1.0, x)), note=_DEGREE)
defufunc(sc.eval_hermite, CONSTANT_ARG, _poly(lambda n, m, x: 2 * n * sc.eval_hermite(m, x)), note="n is an integer")
defufunc(sc.eval_hermitenorm, CONSTANT_ARG, _poly(lambda n, m, x: n * sc.eval_hermitenorm(m, x)), note="n is an integer")
defufunc(
    sc.eval_gegenbauer, None, None,
    lambda g, ans, n, alpha, x: g * np.where(n == 0, 0.0, 2 * alpha * sc.eval_gegenbauer(_lower(n), alpha + 1, x)),
    note=_DEGREE,
)
defufunc(
    sc.eval_genlaguerre, None, None,
    lambda g, ans, n, alpha, x: g * np.where(n == 0, 0.0, -sc.eval_genlaguerre(_lower(n), alpha + 1, x)),
    note=_DEGREE,
)
defufunc(
    sc.eval_jacobi, None, None, None,
    lambda g, ans, n, a, b, x: g * np.where(
        n == 0, 0.0, (n + a + b + 1) * 0.5 * sc.eval_jacobi(_lower(n), a + 1, b + 1, x)
    ),
    note=_DEGREE,
)


# G_n(p, q, x) = n! Gamma(n+p) / Gamma(2n+p) P_n^(p-q, q-1)(2x - 1).
def _sh_jacobi_x(g, ans, n, p, q, x):
    c = np.exp(sc.gammaln(n + 1) + sc.gammaln(n + p) - sc.gammaln(2 * n + p))
    return g * np.where(n == 0, 0.0, c * (n + p) * sc.eval_jacobi(_lower(n), p - q + 1, q, 2 * x - 1))


defufunc(sc.eval_sh_jacobi, None, None, None, _sh_jacobi_x, note=_DEGREE)
# (1 - x**2) dP/dx = (v + 1) x P_v^m - (v - m + 1) P_{v+1}^m.
defufunc(
    sc.lpmv, None, None,
    lambda g, ans, m, v, x: g * (((v + 1) * x * ans - (v - m + 1) * sc.lpmv(m, v + 1, x)) / (1 - x * x)),
    note="no derivative in m, v; nan at x = +-1",
)

# --------------------------------------------------------------- hypergeometric functions (in z)
defufunc(sc.hyp0f1, None, lambda g, ans, b, z: g * (sc.hyp0f1(b + 1, z) / b), note=_PARAM)
defufunc(
    sc.hyp1f1, None, None, lambda g, ans, a, b, x: g * (a / b * sc.hyp1f1(a + 1, b + 1, x)), note=_PARAM,
)
defufunc(
    sc.hyp2f1, None, None, None,
    lambda g, ans, a, b, c, z: g * (a * b / c * sc.hyp2f1(a + 1, b + 1, c + 1, z)), note=_PARAM,
)
defufunc(sc.hyperu, None, None, lambda g, ans, a, b, x: g * (-a * sc.hyperu(a + 1, b + 1, x)), note=_PARAM)

# --------------------------------------------------------------- parabolic cylinder and Mathieu (in x)
# These return (value, derivative); the second derivative comes from the ODE.
_PAIR = "in x only; the value/derivative pair follows the ODE"
defufunc(sc.pbdv, None, lambda g, ans, v, x: g[0] * ans[1] + g[1] * ((x * x * 0.25 - v - 0.5) * ans[0]), note=_PAIR)
defufunc(sc.pbvv, None, lambda g, ans, v, x: g[0] * ans[1] + g[1] * ((x * x * 0.25 - v - 0.5) * ans[0]), note=_PAIR)
defufunc(sc.pbwa, None, lambda g, ans, a, x: g[0] * ans[1] + g[1] * ((a - x * x * 0.25) * ans[0]), note=_PAIR)


def _mathieu(characteristic):
    # Angular functions take x in degrees and return the derivative in radians.
    def vjp(g, ans, m, q, x):
        a = characteristic(m, q)
        return (g[0] * ans[1] + g[1] * ((2 * q * np.cos(2 * _DEG * x) - a) * ans[0])) * _DEG

    return vjp


def _mathieu_modified(characteristic):
    def vjp(g, ans, m, q, x):
        a = characteristic(m, q)
        return g[0] * ans[1] + g[1] * ((a - 2 * q * np.cosh(2 * x)) * ans[0])

    return vjp


defufunc(sc.mathieu_cem, None, None, _mathieu(sc.mathieu_a), note="x in degrees; " + _PAIR)
defufunc(sc.mathieu_sem, None, None, _mathieu(sc.mathieu_b), note="x in degrees; " + _PAIR)
for _f, _c in ((sc.mathieu_modcem1, sc.mathieu_a), (sc.mathieu_modcem2, sc.mathieu_a),
               (sc.mathieu_modsem1, sc.mathieu_b), (sc.mathieu_modsem2, sc.mathieu_b)):
    defufunc(_f, None, None, _mathieu_modified(_c), note=_PAIR)

# --------------------------------------------------------------- first order only (private densities)
_FIRST = "first order only: SciPy's density has no derivative"
defufunc(sc.kolmogorov, lambda g, ans, y: g * _ufuncs._kolmogp(y), note=_FIRST)
defufunc(sc.kolmogi, lambda g, ans, p: g / _ufuncs._kolmogp(ans), note=_FIRST)
defufunc(sc.smirnov, CONSTANT_ARG, lambda g, ans, n, d: g * _ufuncs._smirnovp(n, d), note="n is an integer; " + _FIRST)
defufunc(sc.smirnovi, CONSTANT_ARG, lambda g, ans, n, p: g / _ufuncs._smirnovp(n, ans), note="n is an integer; " + _FIRST)
defufunc(sc.chndtr, lambda g, ans, x, df, nc: g * _ufuncs._ncx2_pdf(x, df, nc), None, None, note="in x; " + _FIRST)
defufunc(sc.chndtrix, lambda g, ans, p, df, nc: g / _ufuncs._ncx2_pdf(ans, df, nc), None, None, note="in p; " + _FIRST)
defufunc(sc.nctdtr, None, None, lambda g, ans, df, nc, t: g * _ufuncs._nct_pdf(t, df, nc), note="in t; " + _FIRST)
defufunc(sc.nctdtrit, None, None, lambda g, ans, df, nc, p: g / _ufuncs._nct_pdf(ans, df, nc), note="in p; " + _FIRST)
defufunc(
    sc.ncfdtr, None, None, None,
    lambda g, ans, dfn, dfd, nc, f: g * _ufuncs._ncf_pdf(f, dfn, dfd, nc), note="in f; " + _FIRST,
)
defufunc(
    sc.ncfdtri, None, None, None,
    lambda g, ans, dfn, dfd, nc, p: g / _ufuncs._ncf_pdf(ans, dfn, dfd, nc), note="in p; " + _FIRST,
)
