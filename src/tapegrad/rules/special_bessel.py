"""Derivatives of SciPy's Bessel-type ufuncs (loaded by ``tapegrad.rules.special``).

Every rule is written with ``scipy.special`` ufuncs that have rules themselves,
so second and higher derivatives are traced like the first.  The derivative in
an *order* (``v`` of ``jv``, ``kv``, ...) has no closed form in SciPy: its VJP
entry is ``None``, so a traced order raises ``NonDifferentiableArgumentError``
while the argument stays differentiable.  Integer orders that SciPy truncates
(``yn``, ``kn``) are piecewise constant, hence ``CONSTANT_ARG``.

Recurrences used (DLMF 10.6, 10.29, 11.4, 10.65):

* ``C_v' = (C_{v-1} - C_{v+1}) / 2`` for ``C = J, Y, H1, H2``;
* ``I_v' = (I_{v-1} + I_{v+1}) / 2``, ``K_v' = -(K_{v-1} + K_{v+1}) / 2``;
* exponentially scaled forms add the derivative of their scale factor;
* Struve: ``H_v' = (H_{v-1} - H_{v+1}) / 2 + (x/2)**v / (2 sqrt(pi) Gamma(v + 3/2))``
  and ``L_v' = (L_{v-1} + L_{v+1}) / 2 + (x/2)**v / (2 sqrt(pi) Gamma(v + 3/2))``;
* Kelvin functions solve ``w'' = i w - w' / x`` for ``w = ber + i bei`` (and
  ``ker + i kei``); at ``x == 0`` the limits ``berp/x -> 0``, ``beip/x -> 1/2``.
* Airy: ``Ai'' = z Ai``, ``Bi'' = z Bi``.

Complex arguments: ``jv, yv, iv, kv, kve, hankel1(e), hankel2(e), airy`` are
holomorphic in ``z`` (cotangent ``g * f'(z)``).  ``jve, yve, ive`` and ``airye``
scale by ``exp(-|Im z|)``-type factors, which are not holomorphic: they refuse
complex arguments when differentiated.
"""

from __future__ import annotations

import math

import numpy as np

from ..registry import CONSTANT_ARG
from ._special_util import sc, nonzero, real_only, unless_unused
from .ufuncs import defufunc

__all__: list = []

_HALF_OVER_SQRT_PI = 0.5 / math.sqrt(math.pi)


# --------------------------------------------------------------- integer-order shortcuts
defufunc(sc.j0, lambda g, ans, x: g * -sc.j1(x))
defufunc(sc.j1, lambda g, ans, x: g * ((sc.j0(x) - sc.jv(2.0, x)) * 0.5))
defufunc(sc.y0, lambda g, ans, x: g * -sc.y1(x))
defufunc(sc.y1, lambda g, ans, x: g * ((sc.y0(x) - sc.yv(2.0, x)) * 0.5))
defufunc(sc.i0, lambda g, ans, x: g * sc.i1(x))
defufunc(sc.i1, lambda g, ans, x: g * ((sc.i0(x) + sc.iv(2.0, x)) * 0.5))
# i0e(x) = exp(-|x|) i0(x): the scale factor contributes -sign(x) i0e(x).
defufunc(sc.i0e, lambda g, ans, x: g * (sc.i1e(x) - np.sign(x) * ans), note="kink at 0 (subgradient of |x|: 0)")
defufunc(
    sc.i1e,
    lambda g, ans, x: g * ((sc.i0e(x) + sc.ive(2.0, x)) * 0.5 - np.sign(x) * ans),
)
defufunc(sc.k0, lambda g, ans, x: g * -sc.k1(x))
defufunc(sc.k1, lambda g, ans, x: g * ((sc.k0(x) + sc.kv(2.0, x)) * -0.5))
# k0e(x) = exp(x) k0(x).
defufunc(sc.k0e, lambda g, ans, x: g * (ans - sc.k1e(x)))
defufunc(sc.k1e, lambda g, ans, x: g * (ans - (sc.k0e(x) + sc.kve(2.0, x)) * 0.5))


# --------------------------------------------------------------- real order v, argument z
def _order(fun, sign, scale=None, half=0.5):
    """VJP in ``z`` of ``fun(v, z)``: ``f' = half (f(v-1) + sign f(v+1)) [+ scale(z) f]``."""

    def vjp(g, ans, v, z):
        d = (fun(v - 1, z) + sign * fun(v + 1, z)) * half
        if scale is not None:
            d = d + scale(z) * ans
        return g * d

    return vjp


_ORDER_NOTE = "no derivative in the order v (SciPy has none)"
defufunc(sc.jv, None, _order(sc.jv, -1), note=_ORDER_NOTE)  # sc.jn is sc.jv
defufunc(sc.yv, None, _order(sc.yv, -1), note=_ORDER_NOTE)
defufunc(sc.iv, None, _order(sc.iv, 1), note=_ORDER_NOTE)
defufunc(sc.kv, None, _order(sc.kv, 1, half=-0.5), note=_ORDER_NOTE)
# kve(v, z) = exp(z) kv(v, z): holomorphic.
defufunc(sc.kve, None, _order(sc.kve, 1, lambda z: 1.0, half=-0.5), note=_ORDER_NOTE)
# jve = jv exp(-|Im z|), yve likewise, ive = iv exp(-|Re z|): real z only.
defufunc(sc.jve, None, real_only(_order(sc.jve, -1), "scipy.special.jve"), note=_ORDER_NOTE + "; real z only")
defufunc(sc.yve, None, real_only(_order(sc.yve, -1), "scipy.special.yve"), note=_ORDER_NOTE + "; real z only")
defufunc(
    sc.ive, None, real_only(_order(sc.ive, 1, lambda z: -np.sign(z)), "scipy.special.ive"),
    note=_ORDER_NOTE + "; real z only",
)
# Hankel functions (complex z); hankel1e = hankel1 exp(-iz), hankel2e = hankel2 exp(iz).
defufunc(sc.hankel1, None, _order(sc.hankel1, -1), note=_ORDER_NOTE)
defufunc(sc.hankel2, None, _order(sc.hankel2, -1), note=_ORDER_NOTE)
defufunc(sc.hankel1e, None, _order(sc.hankel1e, -1, lambda z: -1j), note=_ORDER_NOTE)
defufunc(sc.hankel2e, None, _order(sc.hankel2e, -1, lambda z: 1j), note=_ORDER_NOTE)
# Integer orders: SciPy truncates n, so the output is piecewise constant in n.
_INT_NOTE = "n is an integer order (constant)"
defufunc(sc.yn, CONSTANT_ARG, lambda g, ans, n, x: g * ((sc.yn(n - 1, x) - sc.yn(n + 1, x)) * 0.5), note=_INT_NOTE)
defufunc(sc.kn, CONSTANT_ARG, lambda g, ans, n, x: g * ((sc.kn(n - 1, x) + sc.kn(n + 1, x)) * -0.5), note=_INT_NOTE)


# --------------------------------------------------------------- Struve functions
def _struve_vjp(fun, sign):
    def vjp(g, ans, v, x):
        extra = np.power(x * 0.5, v) * sc.rgamma(v + 1.5) * _HALF_OVER_SQRT_PI
        return g * ((fun(v - 1, x) + sign * fun(v + 1, x)) * 0.5 + extra)

    return vjp


defufunc(sc.struve, None, _struve_vjp(sc.struve, -1), note=_ORDER_NOTE)
defufunc(sc.modstruve, None, _struve_vjp(sc.modstruve, 1), note=_ORDER_NOTE)
# Integrals of order-0 functions: the derivative is the integrand.
defufunc(sc.itstruve0, lambda g, ans, x: g * sc.struve(0.0, x))
defufunc(sc.it2struve0, lambda g, ans, x: g * (-sc.struve(0.0, x) / x))
defufunc(sc.itmodstruve0, lambda g, ans, x: g * sc.modstruve(0.0, x))
# The second outputs are singular at 0 (k0, y0, k0/x, y0/x): see unless_unused.
defufunc(sc.iti0k0, lambda g, ans, x: g[0] * sc.i0(x) + unless_unused(g[1], lambda: sc.k0(x), x == 0))
defufunc(sc.itj0y0, lambda g, ans, x: g[0] * sc.j0(x) + unless_unused(g[1], lambda: sc.y0(x), x == 0))


def _it2_first(g, ans, x, fun, sign):
    """``sign * (fun(x) - 1) / x`` (the integrand of it2i0k0/it2j0y0), 0 at ``x == 0``."""
    xs = nonzero(x)
    return np.where(x == 0, 0.0, sign * (fun(xs) - 1) / xs)


defufunc(
    sc.it2i0k0,
    lambda g, ans, x: g[0] * _it2_first(g, ans, x, sc.i0, 1) + unless_unused(g[1], lambda: -sc.k0(x) / x, x == 0),
)
defufunc(
    sc.it2j0y0,
    lambda g, ans, x: g[0] * _it2_first(g, ans, x, sc.j0, -1) + unless_unused(g[1], lambda: -sc.y0(x) / x, x == 0),
)
# besselpoly(a, lmb, nu) = int_0^1 x**lmb J_nu(2 a x) dx.
defufunc(
    sc.besselpoly,
    lambda g, ans, a, lmb, nu: g * (sc.besselpoly(a, lmb + 1, nu - 1) - sc.besselpoly(a, lmb + 1, nu + 1)),
    None,
    None,
    note="differentiable in a only",
)


# --------------------------------------------------------------- Kelvin functions
def _over_x(f, x, at_zero):
    """``f / x`` with its limit ``at_zero`` at ``x == 0`` (``f`` vanishes there)."""
    return np.where(x == 0, at_zero, f / nonzero(x))


defufunc(sc.ber, lambda g, ans, x: g * sc.berp(x))
defufunc(sc.bei, lambda g, ans, x: g * sc.beip(x))
defufunc(sc.ker, lambda g, ans, x: g * sc.kerp(x))
defufunc(sc.kei, lambda g, ans, x: g * sc.keip(x))
defufunc(sc.berp, lambda g, ans, x: g * (-sc.bei(x) - _over_x(ans, x, 0.0)))
defufunc(sc.beip, lambda g, ans, x: g * (sc.ber(x) - _over_x(ans, x, 0.5)))
defufunc(sc.kerp, lambda g, ans, x: g * (-sc.kei(x) - ans / x))
defufunc(sc.keip, lambda g, ans, x: g * (sc.ker(x) - ans / x))


def _kelvin_vjp(g, ans, x):
    be, ke, bep, kep = ans
    bepp = 1j * be - (_over_x(sc.berp(x), x, 0.0) + 1j * _over_x(sc.beip(x), x, 0.5))
    zero = x == 0  # Ke and Kep are infinite there
    return g[0] * bep + unless_unused(g[1], lambda: kep, zero) + g[2] * bepp + unless_unused(g[3], lambda: 1j * ke - kep / x, zero)


defufunc(sc.kelvin, _kelvin_vjp)


# --------------------------------------------------------------- Airy functions
def _airy_vjp(g, ans, z):
    ai, aip, bi, bip = ans
    return g[0] * aip + g[1] * (z * ai) + g[2] * bip + g[3] * (z * bi)


defufunc(sc.airy, _airy_vjp)


def _airye_vjp(g, ans, x):
    # eAi = Ai exp(2/3 x**1.5) and eBi = Bi exp(-2/3 x**1.5) for x > 0; for x < 0
    # eBi = Bi (and eAi is nan): the scale factor's derivative is +-sqrt(max(x, 0)).
    eai, eaip, ebi, ebip = ans
    pos = x > 0
    s = np.where(pos, np.sqrt(np.where(pos, x, 1.0)), 0.0)
    # SciPy's eAi is nan for x < 0 (so is any loss using it): keep that nan out of the
    # Bi part of the cotangent, at every order, by masking it before any arithmetic.
    eai, eaip = np.where(pos, eai, 0.0), np.where(pos, eaip, 0.0)
    ai_part = g[0] * (eaip + s * eai) + g[1] * (x * eai + s * eaip)
    return ai_part + g[2] * (ebip - s * ebi) + g[3] * (x * ebi - s * ebip)


defufunc(sc.airye, real_only(_airye_vjp, "scipy.special.airye"), note="real x only")


def _itairy_vjp(g, ans, x):
    ai, _, bi, _ = sc.airy(x)
    ain, _, bin_, _ = sc.airy(-x)
    return g[0] * ai + g[1] * bi + g[2] * ain + g[3] * bin_


defufunc(sc.itairy, _itairy_vjp)
