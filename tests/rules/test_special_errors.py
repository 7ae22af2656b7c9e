"""scipy.special: refusals, constants, float32 and closed forms of the family rules."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special as sc

import tapegrad as tg
from tapegrad.errors import NonDifferentiableArgumentError, UnsupportedFunctionError
from tapegrad.rules import special

from .helpers import assert_float32_gradient

X = np.array([0.4, 0.9, 1.7])
XS = X / 2  # inside every domain used below (m < 1 for ellipj)


def _sum(fun):
    return lambda *a: np.sum(fun(*a))


@pytest.mark.parametrize(
    "fun, argnum",
    [
        (sc.jv, 0), (sc.yv, 0), (sc.iv, 0), (sc.kv, 0), (sc.ive, 0), (sc.kve, 0), (sc.struve, 0),
        (sc.gammainc, 0), (sc.gammaincc, 0), (sc.stdtr, 0), (sc.chdtr, 0), (sc.hyp0f1, 0),
        (sc.eval_legendre, 0), (sc.tklmbda, 1), (sc.ellipj, 1), (sc.wright_bessel, 0),
    ],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_traced_order_or_shape_raises_but_argument_stays_differentiable(fun, argnum):
    args = [np.array([1.5, 2.5, 3.5]), XS] if fun.nin == 2 else [np.array([1.5, 2.5, 3.5])] * 2 + [XS]
    if fun is sc.tklmbda:
        args = [XS, np.array([0.1, 0.2, 0.3])]
    first = (lambda *a: fun(*a)[0]) if fun.nout > 1 else fun
    with pytest.raises(NonDifferentiableArgumentError, match="carries no gradient"):
        tg.grad(_sum(first), argnums=argnum)(*args)
    other = fun.nin - 1 if argnum != fun.nin - 1 else 0
    g = tg.grad(_sum(first), argnums=other)(*args)
    assert g.shape == XS.shape and np.all(np.isfinite(g))


@pytest.mark.parametrize("name", sorted(special.UNSUPPORTED))
def test_unsupported_ufuncs_raise_naming_the_function(name):
    fun = getattr(sc, name)
    args = [np.array([0.5, 0.7])] * fun.nin
    with np.errstate(all="ignore"), pytest.raises(UnsupportedFunctionError, match=name):
        tg.grad(lambda *a: np.sum(np.real(fun(*a)[0] if fun.nout > 1 else fun(*a))))(*args)


def test_every_scipy_ufunc_is_classified():
    from tapegrad.registry import RULES

    names = {n for n in dir(sc) if isinstance(getattr(sc, n), np.ufunc)}
    assert {n for n in names if getattr(sc, n) not in RULES and n not in special.UNSUPPORTED} == set()
    assert all(getattr(sc, n) not in RULES for n in special.UNSUPPORTED)


@pytest.mark.parametrize(
    "fun, z",
    [(sc.jve, lambda z: sc.jve(1.5, z)), (sc.ive, lambda z: sc.ive(1.5, z)), (sc.airye, lambda z: sc.airye(z)[0]),
     (sc.digamma, sc.digamma)],
    ids=["jve", "ive", "airye", "digamma"],
)
def test_non_holomorphic_complex_forms_refuse(fun, z):
    with pytest.raises(NonDifferentiableArgumentError, match="real arguments only"):
        tg.vjp(z, np.array([0.5 + 0.3j, 1.0 - 0.2j]))[1](np.ones(2, complex))


def test_first_order_only_rules_refuse_second_order():
    assert np.allclose(tg.grad(_sum(sc.kolmogorov))(X), sc._ufuncs._kolmogp(X))
    with pytest.raises(UnsupportedFunctionError, match="_kolmogp"):
        tg.hessian(lambda x: np.sum(sc.kolmogorov(x)))(X)


def test_integer_orders_and_counts_are_constants():
    n = np.array([1.0, 2.0, 3.0])
    # yn truncates n: piecewise constant, so the derivative in n is 0 and x stays differentiable.
    gn, gx = tg.grad(lambda n, x: np.sum(sc.yn(n, x)), argnums=(0, 1))(n, X + 1)
    assert np.array_equal(gn, np.zeros(3))
    assert np.allclose(gx, (sc.yn(n - 1, X + 1) - sc.yn(n + 1, X + 1)) / 2)
    gk = tg.grad(lambda k, p: np.sum(sc.bdtr(k, 6.0, p)), argnums=0)(n, np.array([0.2, 0.5, 0.7]))
    assert np.array_equal(gk, np.zeros(3))


def test_constants():
    for fun in (sc.gammasgn, sc.round):
        g = tg.grad(lambda x: np.sum(fun(x) * x))(np.array([-1.5, 0.4, 2.6]))
        assert np.array_equal(g, fun(np.array([-1.5, 0.4, 2.6])))


@pytest.mark.parametrize(
    "fun",
    [sc.j1, lambda x: sc.jv(1.5, x), lambda x: sc.kve(0.5, x), lambda x: sc.struve(1.0, x),
     lambda x: sc.gammainc(2.0, x), lambda x: sc.betainc(2.0, 3.0, x / 2), sc.ellipk, sc.exprel,
     lambda x: sc.boxcox(x, 0.5), lambda x: sc.huber(1.0, x), sc.spence, sc.dawsn, lambda x: sc.sici(x)[0],
     lambda x: sc.eval_legendre(3, x - 1)],
    ids=["j1", "jv", "kve", "struve", "gammainc", "betainc", "ellipk", "exprel", "boxcox", "huber", "spence",
         "dawsn", "sici", "legendre"],
)
def test_float32_preserved(fun):
    assert_float32_gradient(fun, XS.astype(np.float32), rtol=1e-3, atol=1e-4)


def test_closed_forms():
    x = X
    assert np.allclose(tg.grad(_sum(lambda x: sc.jv(0.0, x)))(x), -sc.j1(x))
    assert np.allclose(tg.grad(_sum(lambda x: sc.gammainc(1.0, x)))(x), np.exp(-x))
    assert np.allclose(tg.grad(_sum(lambda x: sc.betainc(1.0, 1.0, x)))(x / 2), 1.0)
    assert np.allclose(tg.grad(_sum(sc.ellipk))(np.zeros(1)), math.pi / 8)
    assert np.allclose(tg.grad(_sum(sc.ellipe))(np.zeros(1)), -math.pi / 8)
    # K''(0) = pi/2 * 2 * 9/64 from K = pi/2 (1 + m/4 + 9 m**2/64 + ...).
    assert np.isclose(tg.hessian(lambda m: sc.ellipk(m[0]))(np.zeros(1))[0, 0], math.pi * 9 / 64)
    assert np.allclose(tg.grad(_sum(sc.exprel))(np.zeros(2)), 0.5)
    # boxcox(x, l) -> log(x) + l log(x)**2 / 2 + ...: d/dl at 0 is log(x)**2 / 2.
    assert np.allclose(tg.grad(_sum(lambda l: sc.boxcox(x, l)))(np.zeros(3)), np.log(x) ** 2 / 2)
    # agm(a, a) = a and symmetry: each partial is 1/2 on the diagonal.
    ga, gb = tg.grad(lambda a, b: np.sum(sc.agm(a, b)), argnums=(0, 1))(x, x)
    assert np.allclose(ga, 0.5) and np.allclose(gb, 0.5)
    # Huber: clip(r, -d, d) in r, |r| - d outside the quadratic zone in d.
    gd, gr = tg.grad(lambda d, r: np.sum(sc.huber(d, r)), argnums=(0, 1))(np.ones(3), np.array([0.5, -2.0, 3.0]))
    assert np.allclose(gr, [0.5, -1.0, 1.0]) and np.allclose(gd, [0.0, 1.0, 2.0])
    # spence'(1) = -1 and spence''(1) = 1/2 (log(z)/(1-z) = -1 + (z-1)/2 - ...).
    assert np.isclose(tg.grad(lambda z: sc.spence(z[0]))(np.ones(1))[0], -1.0)
    assert np.isclose(tg.hessian(lambda z: sc.spence(z[0]))(np.ones(1))[0, 0], 0.5)
    # Ai'' = x Ai: the second derivative of Ai.
    h = tg.hessian(lambda x: np.sum(sc.airy(x)[0]))(x)
    assert np.allclose(np.diag(h), x * sc.airy(x)[0])
    # Student t density at 0 with df = 1 is the Cauchy density 1/pi.
    assert np.isclose(tg.grad(lambda t: sc.stdtr(1.0, t[0]))(np.zeros(1))[0], 1 / math.pi)
    # d/dx I1 at 0 is 1/2; d/dx K0 = -K1.
    assert np.isclose(tg.grad(_sum(sc.i1))(np.zeros(1))[0], 0.5)
    assert np.allclose(tg.grad(_sum(sc.k0))(x), -sc.k1(x))


def test_multi_output_partial_use():
    # Only one output of a multi-output ufunc used: the others get zero cotangents.
    x = np.array([0.3, 1.2])
    assert np.allclose(tg.grad(lambda x: np.sum(sc.fresnel(x)[1]))(x), np.cos(np.pi * x * x / 2))
    assert np.allclose(tg.grad(lambda x: np.sum(sc.sici(x)[0]))(np.array([0.0, 1.0])), [1.0, np.sin(1.0)])
    assert np.allclose(tg.grad(lambda x: np.sum(sc.iti0k0(x)[0]))(np.array([0.0, 1.0])), sc.i0([0.0, 1.0]))
    assert np.allclose(tg.grad(lambda x: np.sum(sc.kelvin(x)[0].real))(np.array([0.0, 1.0])), sc.berp([0.0, 1.0]))
    sn, cn, dn, _ = sc.ellipj(x, 0.4)
    assert np.allclose(tg.grad(lambda u: np.sum(sc.ellipj(u, 0.4)[0]))(x), cn * dn)
