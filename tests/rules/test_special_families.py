"""Every differentiable scipy.special ufunc against finite differences, first and second order.

One case per rule (and per differentiable argument): the function with its
non-differentiable arguments (orders, shapes, counts) bound to constants, and a
sample point inside the domain.  tests/rules/test_special.py holds the older
family tests; tests/rules/test_special_errors.py the refusals.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sc

from tapegrad.testing import check_grads

RNG = np.random.default_rng(7)


def u(lo, hi, shape=(3,)):
    return RNG.uniform(lo, hi, shape)


def cz(shape=(2,)):
    """Complex points with moderate modulus in the right half-plane."""
    return RNG.uniform(0.4, 1.2, shape) + 1j * RNG.uniform(-0.6, 0.6, shape)


V = np.array([0.3, 1.5, 2.7])  # real orders
N = np.array([0, 1, 3])  # integer orders / degrees

# (id, function of the differentiable arguments, sample arguments, order)
CASES = [
    # Bessel functions of integer order
    *[(f.__name__, f, [u(0.3, 3.0)], 2) for f in (sc.j0, sc.j1, sc.y0, sc.y1, sc.k0, sc.k1, sc.k0e, sc.k1e)],
    *[(f.__name__ + "-neg", f, [u(-3.0, 3.0)], 2) for f in (sc.i0, sc.i1, sc.i0e, sc.i1e, sc.j0, sc.j1)],
    # real order v, argument x
    *[(f.__name__, (lambda f: lambda x: f(V, x))(f), [u(0.4, 3.0)], 2)
      for f in (sc.jv, sc.yv, sc.iv, sc.kv, sc.jve, sc.yve, sc.ive, sc.kve)],
    ("jv-negative-order", lambda x: sc.jv(-V, x), [u(0.4, 3.0)], 2),
    ("ive-neg", lambda x: sc.ive(np.array([0.0, 1.0, 2.0]), x), [u(-3.0, 3.0)], 2),
    *[(f.__name__ + "-complex", (lambda f: lambda z: f(V[:2], z))(f), [cz()], 2)
      for f in (sc.jv, sc.yv, sc.iv, sc.kv, sc.kve, sc.hankel1, sc.hankel2, sc.hankel1e, sc.hankel2e)],
    ("yn", lambda x: sc.yn(N, x), [u(0.5, 3.0)], 2),
    ("kn", lambda x: sc.kn(N, x), [u(0.5, 3.0)], 2),
    # Struve and integrals of Bessel functions
    ("struve", lambda x: sc.struve(V, x), [u(0.3, 3.0)], 2),
    ("modstruve", lambda x: sc.modstruve(V, x), [u(0.3, 3.0)], 2),
    *[(f.__name__, f, [u(0.3, 3.0)], 2) for f in (sc.itstruve0, sc.it2struve0, sc.itmodstruve0)],
    *[(f.__name__, f, [u(0.3, 3.0)], 2) for f in (sc.iti0k0, sc.itj0y0, sc.it2i0k0, sc.it2j0y0)],
    ("besselpoly", lambda a: sc.besselpoly(a, 1.5, 2.0), [u(0.2, 2.0)], 2),
    # Kelvin and Airy functions
    *[(f.__name__, f, [u(0.3, 3.0)], 2) for f in (sc.ber, sc.bei, sc.ker, sc.kei, sc.berp, sc.beip, sc.kerp, sc.keip)],
    ("kelvin", sc.kelvin, [u(0.3, 3.0)], 2),
    ("airy", sc.airy, [u(-3.0, 3.0)], 2),
    ("airy-complex", sc.airy, [cz()], 2),
    ("airye", sc.airye, [u(0.2, 3.0)], 2),
    ("airye-bi-negative", lambda x: sc.airye(x)[2:], [u(-3.0, -0.2)], 2),
    ("itairy", sc.itairy, [u(0.2, 2.0)], 2),
    # gamma and beta families
    ("gamma-complex", sc.gamma, [cz()], 1),  # second order needs digamma's complex derivative
    ("rgamma", sc.rgamma, [u(-2.5, 3.0)], 2),
    ("rgamma-complex", sc.rgamma, [cz()], 1),
    ("loggamma-complex", sc.loggamma, [cz()], 1),  # digamma has no complex derivative in SciPy
    ("beta", sc.beta, [u(0.5, 3.0), u(0.5, 3.0)], 2),
    ("betaln", sc.betaln, [u(0.5, 3.0), u(0.5, 3.0)], 2),
    ("poch", sc.poch, [u(0.5, 3.0), u(0.2, 2.0)], 2),
    ("binom", sc.binom, [u(3.0, 6.0), u(0.5, 2.5)], 2),
    ("gammainc", lambda x: sc.gammainc(V + 0.5, x), [u(0.2, 3.0)], 2),
    ("gammaincc", lambda x: sc.gammaincc(V + 0.5, x), [u(0.2, 3.0)], 2),
    ("gammaincinv", lambda y: sc.gammaincinv(V + 0.5, y), [u(0.1, 0.9)], 2),
    ("gammainccinv", lambda y: sc.gammainccinv(V + 0.5, y), [u(0.1, 0.9)], 2),
    ("betainc", lambda x: sc.betainc(V + 0.5, 2.5 - V / 2, x), [u(0.1, 0.9)], 2),
    ("betaincc", lambda x: sc.betaincc(V + 0.5, 2.5 - V / 2, x), [u(0.1, 0.9)], 2),
    ("betaincinv", lambda y: sc.betaincinv(V + 0.5, 2.5 - V / 2, y), [u(0.1, 0.9)], 2),
    ("betainccinv", lambda y: sc.betainccinv(V + 0.5, 2.5 - V / 2, y), [u(0.1, 0.9)], 2),
    # distributions
    ("chdtr", lambda x: sc.chdtr(V + 1, x), [u(0.2, 3.0)], 2),
    ("chdtrc", lambda x: sc.chdtrc(V + 1, x), [u(0.2, 3.0)], 2),
    ("chdtri", lambda p: sc.chdtri(V + 1, p), [u(0.1, 0.9)], 2),
    ("gdtr", lambda a, x: sc.gdtr(a, V + 1, x), [u(0.5, 2.0), u(0.2, 3.0)], 2),
    ("gdtrc", lambda a, x: sc.gdtrc(a, V + 1, x), [u(0.5, 2.0), u(0.2, 3.0)], 2),
    ("gdtrix", lambda a, p: sc.gdtrix(a, V + 1, p), [u(0.5, 2.0), u(0.1, 0.9)], 2),
    ("gdtria", lambda p, x: sc.gdtria(p, V + 1, x), [u(0.1, 0.9), u(0.5, 3.0)], 2),
    ("stdtr", lambda t: sc.stdtr(V + 1, t), [u(-2.0, 2.0)], 2),
    ("stdtrit", lambda p: sc.stdtrit(V + 1, p), [u(0.1, 0.9)], 2),
    ("fdtr", lambda x: sc.fdtr(V + 1, 4.0, x), [u(0.2, 3.0)], 2),
    ("fdtrc", lambda x: sc.fdtrc(V + 1, 4.0, x), [u(0.2, 3.0)], 2),
    ("fdtri", lambda p: sc.fdtri(V + 1, 4.0, p), [u(0.1, 0.9)], 2),
    ("nrdtrimn", sc.nrdtrimn, [u(0.1, 0.9), u(0.5, 2.0), u(-1.0, 1.0)], 2),
    ("nrdtrisd", sc.nrdtrisd, [u(-1.0, 0.0), u(0.6, 0.9), u(0.5, 2.0)], 2),
    ("ndtri_exp", sc.ndtri_exp, [u(-3.0, -0.1)], 2),
    ("owens_t", sc.owens_t, [u(-2.0, 2.0), u(-2.0, 2.0)], 2),
    ("tklmbda", lambda x: sc.tklmbda(x, np.array([-0.5, 0.0, 0.5])), [u(-1.5, 1.5)], 2),
    ("bdtr", lambda p: sc.bdtr(N + 1, 7, p), [u(0.1, 0.9)], 2),
    ("bdtrc", lambda p: sc.bdtrc(N + 1, 7, p), [u(0.1, 0.9)], 2),
    ("bdtri", lambda y: sc.bdtri(N + 1, 7, y), [u(0.1, 0.9)], 2),
    ("nbdtr", lambda p: sc.nbdtr(N, 4, p), [u(0.1, 0.9)], 2),
    ("nbdtrc", lambda p: sc.nbdtrc(N, 4, p), [u(0.1, 0.9)], 2),
    ("nbdtri", lambda y: sc.nbdtri(N, 4, y), [u(0.1, 0.9)], 2),
    ("pdtr", lambda m: sc.pdtr(N, m), [u(0.2, 3.0)], 2),
    ("pdtrc", lambda m: sc.pdtrc(N, m), [u(0.2, 3.0)], 2),
    ("pdtri", lambda y: sc.pdtri(N, y), [u(0.1, 0.9)], 2),
    ("kolmogorov", sc.kolmogorov, [u(0.4, 2.0)], 1),
    ("kolmogi", sc.kolmogi, [u(0.1, 0.9)], 1),
    ("smirnov", lambda d: sc.smirnov(5, d), [u(0.1, 0.6)], 1),
    ("smirnovi", lambda p: sc.smirnovi(5, p), [u(0.1, 0.9)], 1),
    ("chndtr", lambda x: sc.chndtr(x, 3.0, 1.5), [u(0.2, 3.0)], 1),
    ("chndtrix", lambda p: sc.chndtrix(p, 3.0, 1.5), [u(0.1, 0.9)], 1),
    ("nctdtr", lambda t: sc.nctdtr(3.0, 1.5, t), [u(-1.0, 3.0)], 1),
    ("nctdtrit", lambda p: sc.nctdtrit(3.0, 1.5, p), [u(0.1, 0.9)], 1),
    ("ncfdtr", lambda f: sc.ncfdtr(3.0, 4.0, 1.5, f), [u(0.2, 3.0)], 1),
    ("ncfdtri", lambda p: sc.ncfdtri(3.0, 4.0, 1.5, p), [u(0.1, 0.9)], 1),
    # elementary
    *[(f.__name__, f, [u(0.2, 2.0)], 2) for f in (sc.cbrt, sc.exp2, sc.exp10, sc.expm1, sc.log1p, sc.cosm1)],
    *[(f.__name__, f, [u(10.0, 80.0)], 2) for f in (sc.sindg, sc.cosdg, sc.tandg, sc.cotdg)],
    ("radian", sc.radian, [u(0, 90), u(0, 60), u(0, 60)], 2),
    ("powm1", sc.powm1, [u(0.5, 2.0), u(-1.0, 2.0)], 2),
    ("exprel", sc.exprel, [np.array([-3.0, -0.04, 0.0, 1e-9, 0.03, 2.0])], 2),
    ("boxcox", sc.boxcox, [u(0.3, 3.0, (4,)), np.array([-0.5, 0.0, 1e-3, 0.7])], 2),
    ("boxcox1p", sc.boxcox1p, [u(-0.5, 3.0, (4,)), np.array([-0.5, 0.0, 1e-3, 0.7])], 2),
    ("inv_boxcox", sc.inv_boxcox, [u(-0.5, 1.5, (4,)), np.array([-0.5, 0.0, 1e-3, 0.7])], 2),
    ("inv_boxcox1p", sc.inv_boxcox1p, [u(-0.5, 1.5, (4,)), np.array([-0.5, 0.0, 1e-3, 0.7])], 2),
    ("huber", sc.huber, [np.array([1.0, 1.0, 0.5, 2.0]), np.array([0.3, -2.0, 1.5, -1.0])], 2),
    ("pseudo_huber", sc.pseudo_huber, [u(0.3, 2.0), u(-2.0, 2.0)], 2),
    # error-function relatives and integrals
    ("erfi", sc.erfi, [u(-2.0, 2.0)], 2),
    ("erfi-complex", sc.erfi, [cz()], 2),
    ("dawsn", sc.dawsn, [u(-2.0, 2.0)], 2),
    ("dawsn-complex", sc.dawsn, [cz()], 2),
    ("erfcx-complex", sc.erfcx, [cz()], 2),
    ("wofz", sc.wofz, [cz()], 2),
    ("voigt_profile", sc.voigt_profile, [u(-2.0, 2.0), u(0.5, 2.0), u(0.1, 2.0)], 2),
    ("expi", sc.expi, [u(0.2, 3.0)], 2),
    ("expi-negative", sc.expi, [u(-3.0, -0.2)], 2),
    ("exp1", sc.exp1, [u(0.2, 3.0)], 2),
    ("exp1-complex", sc.exp1, [cz()], 2),
    ("expn", lambda x: sc.expn(N, x), [u(0.2, 3.0)], 2),
    ("sici", sc.sici, [np.array([-2.0, -0.5, 0.7, 3.0])], 2),
    ("shichi", sc.shichi, [np.array([-2.0, -0.5, 0.7, 3.0])], 2),
    ("sici-complex", sc.sici, [cz()], 2),
    ("fresnel", sc.fresnel, [u(-2.0, 2.0)], 2),
    ("fresnel-complex", sc.fresnel, [cz()], 2),
    ("modfresnelp", sc.modfresnelp, [u(0.0, 2.0)], 2),
    ("modfresnelm", sc.modfresnelm, [u(0.0, 2.0)], 2),
    ("spence", sc.spence, [np.array([0.2, 0.98, 1.0, 1.03, 2.5])], 2),
    ("spence-complex", sc.spence, [cz()], 2),
    ("wrightomega", sc.wrightomega, [u(-2.0, 2.0)], 2),
    ("wrightomega-complex", sc.wrightomega, [cz()], 2),
    ("lambertw", lambda z: sc.lambertw(z), [u(-0.3, 3.0)], 2),
    ("lambertw-complex", lambda z: sc.lambertw(z, 1), [cz()], 2),
    ("wright_bessel", lambda x: sc.wright_bessel(0.5, 1.5, x), [u(0.1, 3.0)], 2),
    ("log_wright_bessel", lambda x: sc.log_wright_bessel(0.5, 1.5, x), [u(0.1, 3.0)], 2),
    # elliptic integrals
    ("ellipk", sc.ellipk, [np.array([-1.5, -1e-3, 0.0, 2e-3, 0.011, 0.5, 0.9])], 2),
    ("ellipe", sc.ellipe, [np.array([-1.5, -1e-3, 0.0, 2e-3, 0.011, 0.5, 0.9])], 2),
    ("ellipkm1", sc.ellipkm1, [np.array([0.1, 0.5, 0.995, 1.0, 1.5])], 2),
    ("ellipkinc", sc.ellipkinc, [u(-1.5, 1.5, (5,)), np.array([-0.7, -2e-4, 0.0, 5e-4, 0.6])], 2),
    ("ellipeinc", sc.ellipeinc, [u(-1.5, 1.5, (5,)), np.array([-0.7, -2e-4, 0.0, 5e-4, 0.6])], 2),
    ("ellipj", lambda x: sc.ellipj(x, np.array([0.0, 0.3, 0.8])), [u(-2.0, 2.0)], 2),
    ("agm", sc.agm, [u(0.5, 3.0, (4,)), np.array([0.2, 1.0, 2.0, 3.0])], 2),
    ("agm-equal", sc.agm, [np.array([1.3, 2.0]), np.array([1.3, 2.0])], 2),
    # orthogonal polynomials in x
    *[(f.__name__, (lambda f: lambda x: f(N, x))(f), [u(-0.9, 0.9)], 2)
      for f in (sc.eval_legendre, sc.eval_chebyt, sc.eval_chebyu, sc.eval_chebyc, sc.eval_chebys, sc.eval_laguerre,
                sc.eval_hermite, sc.eval_hermitenorm)],
    *[(f.__name__, (lambda f: lambda x: f(N, x))(f), [u(0.05, 0.95)], 2)
      for f in (sc.eval_sh_chebyt, sc.eval_sh_chebyu, sc.eval_sh_legendre)],
    ("legendre-noninteger", lambda x: sc.eval_legendre(np.array([0.5, 2.5]), x), [u(-0.9, 0.9, (2,))], 2),
    ("eval_gegenbauer", lambda x: sc.eval_gegenbauer(N, 0.75, x), [u(-0.9, 0.9)], 2),
    ("eval_genlaguerre", lambda x: sc.eval_genlaguerre(N, 0.5, x), [u(0.0, 3.0)], 2),
    ("eval_jacobi", lambda x: sc.eval_jacobi(N, 0.5, 1.5, x), [u(-0.9, 0.9)], 2),
    ("eval_sh_jacobi", lambda x: sc.eval_sh_jacobi(N, 2.5, 1.5, x), [u(0.05, 0.95)], 2),
    ("lpmv", lambda x: sc.lpmv(1.0, V + 1, x), [u(-0.9, 0.9)], 2),
    # hypergeometric in z
    ("hyp0f1", lambda z: sc.hyp0f1(V + 0.5, z), [u(-2.0, 2.0)], 2),
    ("hyp1f1", lambda x: sc.hyp1f1(V, V + 1, x), [u(-2.0, 2.0)], 2),
    ("hyp2f1", lambda z: sc.hyp2f1(V, 0.5, V + 1.5, z), [u(-0.9, 0.9)], 2),
    ("hyp2f1-complex", lambda z: sc.hyp2f1(0.5, 0.5, 1.5, z), [0.3 * cz()], 2),
    ("hyperu", lambda x: sc.hyperu(V, 1.5, x), [u(0.3, 3.0)], 2),
    # value/derivative pairs
    ("pbdv", lambda x: sc.pbdv(V, x), [u(-2.0, 2.0)], 2),
    ("pbvv", lambda x: sc.pbvv(V, x), [u(-2.0, 2.0)], 2),
    ("pbwa", lambda x: sc.pbwa(np.array([-1.0, 0.5, 2.0]), x), [u(-2.0, 2.0)], 2),
    *[(f.__name__, (lambda f: lambda x: f(2, np.array([0.5, 1.5, 3.0]), x))(f), [u(10.0, 80.0)], 2)
      for f in (sc.mathieu_cem, sc.mathieu_sem)],
    *[(f.__name__, (lambda f: lambda x: f(2, np.array([0.5, 1.5, 3.0]), x))(f), [u(0.3, 1.5)], 2)
      for f in (sc.mathieu_modcem1, sc.mathieu_modcem2, sc.mathieu_modsem1, sc.mathieu_modsem2)],
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_against_finite_differences(case):
    _, fun, args, order = case
    with np.errstate(all="ignore"):  # finite differences probe singular neighbours harmlessly
        check_grads(fun, args, order=order, rtol=1e-5, atol=1e-6)
