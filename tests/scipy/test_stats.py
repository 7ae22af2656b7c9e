"""scipy.stats distributions through SciPy's door: numbers against finite differences and closed forms."""

import math
import os

import numpy as np
import pytest
import scipy.stats
import scipy.stats as st
from scipy.stats import norm, poisson  # bound early, as users do

import tapegrad as tg
from tapegrad.errors import NonDifferentiableArgumentError, TapegradError, UnsupportedFunctionError
from tapegrad.testing import check_grads

from . import stats_sweep


def fd_grad(f, t, h=1e-6):
    t = np.asarray(t, dtype=float)
    out = np.zeros_like(t)
    for i in range(t.size):
        e = np.zeros_like(t)
        e.flat[i] = h
        out.flat[i] = (f(t + e) - f(t - e)) / (2 * h)
    return out


# ------------------------------------------------------------------ a varied sample, first and second order
LOC, SCALE = 0.3, 1.3
X = np.array([0.45, 1.1, 2.3])
Q = np.array([0.1, 0.45, 0.8])

# (distribution, method, shape values, arguments differentiated: 'x', 'loc', 'scale', shape names)
SAMPLE = [
    ("norm", "logpdf", (), ("x", "loc", "scale")),
    ("norm", "cdf", (), ("x", "loc", "scale")),
    ("norm", "ppf", (), ("x", "loc", "scale")),
    ("t", "logpdf", (4.5,), ("x", "df", "loc", "scale")),
    ("t", "sf", (4.5,), ("x", "loc", "scale")),
    ("gamma", "logpdf", (2.3,), ("x", "a", "loc", "scale")),
    ("gamma", "pdf", (2.3,), ("x", "a", "scale")),
    ("gamma", "logcdf", (2.3,), ("x", "loc", "scale")),
    ("gamma", "isf", (2.3,), ("x", "scale")),
    ("beta", "logpdf", (2.3, 1.7), ("x", "a", "b", "loc", "scale")),
    ("beta", "cdf", (2.3, 1.7), ("x", "scale")),
    ("lognorm", "logpdf", (0.6,), ("x", "s", "loc", "scale")),
    ("lognorm", "cdf", (0.6,), ("x", "s", "scale")),
    ("lognorm", "ppf", (0.6,), ("x", "s", "loc")),
    ("expon", "logsf", (), ("x", "loc", "scale")),
    ("expon", "ppf", (), ("x", "scale")),
    ("weibull_min", "logpdf", (1.8,), ("x", "c", "loc", "scale")),
    ("weibull_min", "cdf", (1.8,), ("x", "c", "scale")),
    ("weibull_min", "isf", (1.8,), ("x", "c", "scale")),
    ("genextreme", "logpdf", (-0.2,), ("x", "c", "loc", "scale")),
    ("genpareto", "logsf", (0.3,), ("x", "c", "scale")),
    ("skewnorm", "logpdf", (2.0,), ("x", "a", "loc", "scale")),
    ("johnsonsu", "pdf", (1.1, 1.6), ("x", "a", "b", "loc")),
    ("gengamma", "logpdf", (2.0, 1.5), ("x", "a", "c", "scale")),
    ("vonmises", "logpdf", (1.5,), ("x", "kappa", "loc")),
    ("truncnorm", "logpdf", (-0.5, 2.5), ("x", "a", "loc", "scale")),
    ("levy", "logcdf", (), ("x", "loc", "scale")),
    ("burr12", "ppf", (2.0, 3.0), ("x", "c", "d", "scale")),
    ("kappa4", "pdf", (0.5, 0.2), ("x", "h", "k")),
]


def _call(name, method, shapes, values):
    dist = getattr(st, name)
    return getattr(dist, method)(values["x"], *[values[n] for n in _names(dist)], loc=values["loc"],
                                 scale=values["scale"])


def _names(dist):
    return [s.strip() for s in (dist.shapes or "").split(",") if s.strip()]


@pytest.mark.parametrize("name, method, shapes, params", SAMPLE, ids=[f"{c[0]}.{c[1]}" for c in SAMPLE])
def test_continuous_sample(name, method, shapes, params):
    dist = getattr(st, name)
    values = {"loc": LOC, "scale": SCALE}
    values.update(zip(_names(dist), shapes))
    values["x"] = Q if method in ("ppf", "isf") else dist.ppf(Q, *shapes) * SCALE + LOC
    order = list(params)

    def fun(*args):
        v = dict(values)
        v.update(zip(order, args))
        return _call(name, method, shapes, v)

    args = [np.asarray(values[p], dtype=float) for p in order]
    assert np.all(np.isfinite(fun(*args)))
    check_grads(fun, args, rtol=1e-4, atol=1e-6, eps=1e-6)


@pytest.mark.parametrize("name, method, shapes, params", SAMPLE[::2], ids=[f"{c[0]}.{c[1]}" for c in SAMPLE[::2]])
def test_some_entries_invalid(name, method, shapes, params):
    """With a nan entry SciPy gathers the valid ones: the same derivatives, and zero at the nan."""
    dist = getattr(st, name)
    values = {"loc": LOC, "scale": SCALE}
    values.update(zip(_names(dist), shapes))
    values["x"] = Q if method in ("ppf", "isf") else dist.ppf(Q, *shapes) * SCALE + LOC
    with_nan = dict(values, x=np.append(values["x"], np.nan))
    for p in params:
        def full(t, p=p):
            return _call(name, method, shapes, dict(values, **{p: t}))

        def part(t, p=p):
            return _call(name, method, shapes, dict(with_nan, **{p: t}))

        t = np.append(values["x"], np.nan)[:3] if p == "x" else np.asarray(values[p], dtype=float)
        jac_full = tg.jacobian(full)(t)
        if p == "x":
            jac_part = tg.jacobian(lambda t: part(np.append(t, np.nan)))(t)
        else:
            jac_part = tg.jacobian(part)(t)
        np.testing.assert_allclose(jac_part[:3], jac_full, rtol=1e-12, atol=1e-300)
        assert np.all(jac_part[3] == 0)


DISCRETE_SAMPLE = [
    ("poisson", "pmf", {"mu": 2.3}, [0, 2, 5]),
    ("poisson", "logcdf", {"mu": 2.3}, [0, 2, 5]),
    ("binom", "logpmf", {"n": 7, "p": 0.35}, [0, 3, 7]),
    ("binom", "pmf", {"n": 7, "p": 0.35}, [0, 3, 6]),
    ("nbinom", "logpmf", {"n": 3.5, "p": 0.4}, [0, 2, 9]),
    ("nbinom", "pmf", {"n": 3.5, "p": 0.4}, [0, 2, 9]),
    ("geom", "logpmf", {"p": 0.3}, [1, 2, 6]),
    ("betabinom", "pmf", {"n": 6, "a": 2.3, "b": 0.7}, [0, 3, 6]),
    ("logser", "logpmf", {"p": 0.6}, [1, 2, 5]),
    ("dlaplace", "logpmf", {"a": 0.8}, [-2, 0, 3]),
    ("planck", "cdf", {"lambda_": 0.7}, [0, 1, 4]),
    ("bernoulli", "logpmf", {"p": 0.3}, [0, 1, 1]),
]


@pytest.mark.parametrize("name, method, shapes, k", DISCRETE_SAMPLE, ids=[f"{c[0]}.{c[1]}" for c in DISCRETE_SAMPLE])
def test_discrete_sample(name, method, shapes, k):
    dist = getattr(st, name)
    traced = [n for n in shapes if not (n == "n" and name in ("binom", "betabinom"))]
    fixed = {n: v for n, v in shapes.items() if n not in traced}

    def fun(*args):
        kw = dict(fixed)
        kw.update(zip(traced, args))
        return getattr(dist, method)(np.array(k), *[kw[n] for n in _names(dist)])

    check_grads(fun, [np.asarray(float(shapes[n])) for n in traced], rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------ closed forms
def test_norm_logpdf_closed_form_all_import_styles():
    x = np.array([-0.7, 0.2, 1.9])
    mu, s = 0.4, 1.7
    expected_x = -(x - mu) / s**2
    expected_mu = np.sum((x - mu) / s**2)
    expected_s = np.sum(-1 / s + (x - mu) ** 2 / s**3)
    for logpdf in (scipy.stats.norm.logpdf, st.norm.logpdf, norm.logpdf):
        gx, gmu, gs = tg.grad(lambda x, mu, s: np.sum(logpdf(x, mu, s)), argnums=(0, 1, 2))(x, mu, s)
        np.testing.assert_allclose(gx, expected_x, rtol=1e-12)
        np.testing.assert_allclose(gmu, expected_mu, rtol=1e-12)
        np.testing.assert_allclose(gs, expected_s, rtol=1e-12)
    # keywords loc= and scale=
    gmu, gs = tg.grad(lambda mu, s: np.sum(norm.logpdf(x, loc=mu, scale=s)), argnums=(0, 1))(mu, s)
    np.testing.assert_allclose([gmu, gs], [expected_mu, expected_s], rtol=1e-12)


def test_tails_and_quantiles_closed_forms():
    a, x = 2.5, np.array([0.4, 1.7, 4.0])
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(st.gamma.cdf(x, a)))(x), st.gamma.pdf(x, a), rtol=1e-12)
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(st.gamma.sf(x, a)))(x), -st.gamma.pdf(x, a), rtol=1e-12)
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(st.gamma.logcdf(x, a)))(x),
                               st.gamma.pdf(x, a) / st.gamma.cdf(x, a), rtol=1e-10)
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(st.gamma.logsf(x, a)))(x),
                               -st.gamma.pdf(x, a) / st.gamma.sf(x, a), rtol=1e-10)
    q = np.array([0.05, 0.5, 0.97])
    np.testing.assert_allclose(tg.grad(lambda q: np.sum(st.gamma.ppf(q, a)))(q),
                               1 / st.gamma.pdf(st.gamma.ppf(q, a), a), rtol=1e-10)
    np.testing.assert_allclose(tg.grad(lambda q: np.sum(st.gamma.isf(q, a)))(q),
                               -1 / st.gamma.pdf(st.gamma.isf(q, a), a), rtol=1e-10)
    # exponential quantile in its scale: -log(1 - q)
    np.testing.assert_allclose(tg.grad(lambda s: np.sum(st.expon.ppf(q, scale=s)))(2.0), np.sum(-np.log1p(-q)),
                               rtol=1e-12)


def test_discrete_closed_forms():
    k = np.array([0, 1, 4, 9])
    mu = 3.2
    np.testing.assert_allclose(tg.grad(lambda m: np.sum(poisson.logpmf(k, m)))(np.full(4, mu)), k / mu - 1,
                               rtol=1e-12)
    n, p = 9, 0.3
    np.testing.assert_allclose(tg.grad(lambda p: np.sum(st.binom.logpmf(k, n, p)))(np.full(4, p)),
                               k / p - (n - k) / (1 - p), rtol=1e-12)
    # binom's cdf is compiled (bdtr): the finite sum of its traced masses gives
    # d/dp P(K <= k) = -n pmf(k; n - 1, p), at first and second order
    np.testing.assert_allclose(tg.grad(lambda p: np.sum(st.binom.cdf(k, n, p)))(np.full(4, p)),
                               -n * st.binom.pmf(k, n - 1, p), rtol=1e-12)
    for method in ("cdf", "sf", "logcdf", "logsf"):
        check_grads(lambda p, m=method: getattr(st.binom, m)(k[:3], n, p), [np.asarray(p)])
        check_grads(lambda n, p, m=method: getattr(st.nbinom, m)(k, n, p), [np.asarray(3.5), np.asarray(0.4)])
    # d/dmu P(K <= k) = -pmf(k; mu) for the Poisson distribution
    np.testing.assert_allclose(tg.grad(lambda m: np.sum(poisson.cdf(k, m)))(np.full(4, mu)), -poisson.pmf(k, mu),
                               rtol=1e-10)


def test_frozen_forms():
    x = np.array([0.5, 1.2, 3.3])

    def nll(a, s):
        return -np.sum(st.gamma(a, scale=s).logpdf(x))

    g = tg.grad(nll, argnums=(0, 1))(2.0, 1.5)
    expected = fd_grad(lambda a: nll(a[0], 1.5), [2.0])[0], fd_grad(lambda s: nll(2.0, s[0]), [1.5])[0]
    np.testing.assert_allclose(g, expected, rtol=1e-6)
    # a frozen distribution with plain parameters, traced x; and a discrete frozen one
    frozen = st.norm(0.2, 1.4)
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(frozen.cdf(x)))(x), frozen.pdf(x), rtol=1e-12)
    np.testing.assert_allclose(tg.grad(lambda m: poisson(m).logpmf(3))(2.0), 3 / 2.0 - 1, rtol=1e-12)
    # a shape passed by keyword
    np.testing.assert_allclose(tg.grad(lambda a: st.gamma.logpdf(1.5, a=a))(2.0),
                               fd_grad(lambda a: st.gamma.logpdf(1.5, a=a[0]), [2.0])[0], rtol=1e-6)


class Triangular(st.rv_continuous):
    """A user's distribution with only a density: SciPy integrates it for cdf and inverts that for ppf."""

    def _pdf(self, x):
        return 2.0 * x


@pytest.mark.parametrize("method", ["pdf", "logpdf", "cdf", "logcdf", "sf", "ppf", "isf"])
def test_a_users_distribution_comes_for_free(method):
    dist = Triangular(a=0.0, b=1.0, name="triangular_density")
    point = np.array([0.2, 0.5, 0.8]) if method in ("ppf", "isf") else np.array([0.35, 0.7, 1.2])
    check_grads(lambda x, l, s: getattr(dist, method)(x, loc=l, scale=s), [point, 0.1, 1.5], rtol=1e-4)
    x = np.array([0.2, 0.5, 0.9])
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(dist.cdf(x)))(x), 2 * x, rtol=1e-12)


def test_histogram_distribution_and_scipy_errors():
    hist = st.rv_histogram(np.histogram(np.random.default_rng(0).normal(size=500), bins=12))
    x = np.array([-0.3, 0.4])
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(hist.cdf(x)))(x), hist.pdf(x), rtol=1e-12)
    np.testing.assert_array_equal(tg.grad(lambda x: np.sum(hist.logpdf(x)))(x), [0.0, 0.0])  # piecewise constant
    with pytest.raises(TypeError, match="foo"):  # SciPy's own argument check
        tg.grad(lambda x: st.norm.logpdf(x, foo=1))(0.3)
    with pytest.raises(NonDifferentiableArgumentError, match="pmf with respect to k"):
        tg.grad(lambda k: st.rv_discrete(values=([0, 1, 3], [0.2, 0.5, 0.3])).pmf(k))(1.0)


def test_limit_point_of_a_generalized_family():
    # genextreme at c = 0 is the Gumbel law, evaluated by SciPy with a separate formula
    x = np.array([-0.5, 0.4, 1.5])
    f = lambda c: np.sum(st.genextreme.logpdf(x, c))
    g, h = tg.grad(f)(0.0), tg.hessian(f)(0.0)
    np.testing.assert_allclose(g, fd_grad(lambda c: f(c[0]), [0.0], 1e-5)[0], rtol=1e-7)
    np.testing.assert_allclose(g, (f(1e-4) - f(-1e-4)) / 2e-4, rtol=1e-6)
    np.testing.assert_allclose(h, (tg.grad(f)(1e-4) - tg.grad(f)(-1e-4)) / 2e-4, rtol=1e-6)
    # logpdf = (1 - c) log t - t with log t = log1p(-c x) / c = -x - c x^2 / 2 + O(c^2):
    # d/dc at c = 0 is x - x^2 / 2 (1 - e^-x)
    np.testing.assert_allclose(g, np.sum(x - x**2 / 2 * (1 - np.exp(-x))), rtol=1e-9)
    assert tg.vjp(lambda c: st.genextreme.logpdf(x, c), 0.0)[0].tolist() == st.genextreme.logpdf(x, 0.0).tolist()


# ------------------------------------------------------------------ SciPy's semantics kept
def test_values_are_scipys_exactly():
    x = np.array([-1.0, 0.5, 2.0, 7.0])
    for fun, args in [
        (lambda a: st.gamma.logpdf(x, a, scale=1.3), (2.2,)),
        (lambda a: st.gamma.cdf(x, 2.2, scale=a), (1.3,)),
        (lambda q: st.t.ppf(q, 3.5), (np.array([0.0, 0.2, 0.9, 1.0]),)),
        (lambda m: poisson.logpmf([0, 3, -1], m), (2.5,)),
    ]:
        value = tg.vjp(fun, *args)[0]
        expected = fun(*args)
        assert np.shape(value) == np.shape(expected)
        np.testing.assert_array_equal(value, expected)


def test_untraced_calls_unchanged_and_code_restored():
    funcs = [st.rv_continuous.logpdf, st.rv_continuous.ppf, st.rv_discrete.pmf,
             st._multivariate.multivariate_normal_gen.logpdf]
    codes = [f.__code__ for f in funcs]
    x = np.array([-1.0, 0.5, 2.0])
    seen = {}

    def f(s):
        # plain calls made while a tape records run SciPy's own code
        seen["plain"] = st.gamma.logpdf(x, 2.0, scale=1.5)
        seen["errors"] = st.norm.pdf(x, scale=-1.0)
        return np.sum(st.norm.logpdf(x, scale=s))

    tg.grad(f)(1.5)
    assert np.array_equal(seen["plain"], st.gamma.logpdf(x, 2.0, scale=1.5))
    assert np.array_equal(seen["errors"], st.norm.pdf(x, scale=-1.0), equal_nan=True)
    assert [f.__code__ for f in funcs] == codes
    assert all(f.__code__ is c for f, c in zip(funcs, codes))


def test_inputs_not_mutated_and_broadcasting():
    x = np.array([[0.5], [1.0], [2.5]])
    s = np.array([0.5, 1.0, 2.0, 4.0])
    x0, s0 = x.copy(), s.copy()
    jac = tg.jacobian(lambda s: st.expon.logpdf(x, scale=s))(s)
    assert jac.shape == (3, 4, 4)
    expected = -1 / s + x / s**2  # d/ds of -log s - x/s, on the diagonal
    np.testing.assert_allclose(np.einsum("ijj->ij", jac), expected, rtol=1e-12)
    assert np.array_equal(x, x0) and np.array_equal(s, s0)
    gx = tg.grad(lambda x: np.sum(st.expon.logpdf(x, scale=s)))(x)
    assert gx.shape == x.shape
    np.testing.assert_allclose(gx[:, 0], np.full(3, -np.sum(1 / s)), rtol=1e-12)


def test_batched_cotangent_equals_stacked_vjps():
    a = np.array([1.5, 2.0, 3.5])
    fun = lambda a: st.gamma.logpdf(np.array([0.7, 1.3, 2.0]), a, scale=1.2)
    jac = tg.jacobian(fun)(a)
    rows = np.stack([tg.grad(lambda a, i=i: fun(a)[i])(a) for i in range(3)])
    np.testing.assert_allclose(jac, rows, rtol=1e-13)


def test_invalid_parameters_give_nan_with_zero_gradient():
    s = np.array([-1.0, 0.0, 2.0])
    x = 1.0
    value = tg.vjp(lambda s: st.norm.logpdf(x, scale=s), s)[0]
    np.testing.assert_array_equal(value, st.norm.logpdf(x, scale=s))
    assert np.isnan(value[0]) and np.isnan(value[1])
    jac = tg.jacobian(lambda s: st.norm.logpdf(x, scale=s))(s)
    assert np.all(np.isfinite(jac))
    np.testing.assert_allclose(np.diag(jac), [0.0, 0.0, -1 / 2.0 + x**2 / 2.0**3], rtol=1e-12)
    a = np.array([-2.0, 2.0])
    jac = tg.jacobian(lambda a: st.gamma.pdf(1.0, a))(a)
    assert np.all(np.isfinite(jac)) and jac[0, 0] == 0.0


def test_outside_the_support_is_constant_with_zero_gradient():
    x = np.array([-1.0, 0.0, 0.5, 2.0])
    value, g = tg.value_and_grad(lambda x: np.sum(st.expon.pdf(x)))(x)
    assert g[0] == 0.0 and np.isfinite(g).all()
    np.testing.assert_allclose(g[2:], -np.exp(-x[2:]), rtol=1e-12)
    x = np.array([-1.0, 0.5, 2.0])
    jac = tg.jacobian(lambda x: st.gamma.logpdf(x, 2.0))(x)
    assert np.all(np.isfinite(jac)) and jac[0, 0] == 0.0
    np.testing.assert_allclose(np.diag(jac)[1:], 1 / x[1:] - 1, rtol=1e-12)  # (a - 1) / x - 1
    np.testing.assert_array_equal(tg.vjp(lambda x: st.gamma.logpdf(x, 2.0), x)[0], st.gamma.logpdf(x, 2.0))
    # cdf above the support is 1, below 0: derivative zero
    g = tg.grad(lambda x: np.sum(st.uniform.cdf(x)))(np.array([-0.5, 0.3, 1.5]))
    np.testing.assert_array_equal(g, [0.0, 1.0, 0.0])
    # ppf at the support's ends moves with loc and scale
    g = tg.grad(lambda l, s: st.expon.ppf(0.0, loc=l, scale=s), argnums=(0, 1))(0.5, 2.0)
    assert g == (1.0, 0.0)


def test_zero_d_output_and_float32():
    v, g = tg.value_and_grad(lambda x: st.norm.logpdf(x))(np.float64(0.3))
    assert np.shape(v) == () and v == st.norm.logpdf(0.3)
    np.testing.assert_allclose(g, -0.3, rtol=1e-14)
    x32 = np.array([0.25, 1.5], dtype=np.float32)
    g32 = tg.grad(lambda x: np.sum(st.norm.logpdf(x)))(x32)
    assert g32.dtype == np.float32
    np.testing.assert_allclose(g32, -x32, rtol=1e-6)
    assert tg.vjp(lambda x: st.norm.logpdf(x), x32)[0].dtype == st.norm.logpdf(x32).dtype


def test_maximum_likelihood_gradient_and_hessian():
    rng = np.random.default_rng(3)
    data = st.gamma.rvs(2.5, loc=0.1, scale=1.7, size=40, random_state=rng)

    def nll(theta):
        a, loc, log_scale = theta[0], theta[1], theta[2]
        return -np.sum(st.gamma.logpdf(data, a, loc=loc, scale=np.exp(log_scale)))

    theta = np.array([2.3, 0.05, math.log(1.6)])
    g = tg.grad(nll)(theta)
    np.testing.assert_allclose(g, fd_grad(nll, theta), rtol=1e-6, atol=1e-6)
    hess = tg.hessian(nll)(theta)
    np.testing.assert_allclose(hess, hess.T, rtol=1e-10)
    for i in range(3):
        np.testing.assert_allclose(hess[i], fd_grad(lambda t, i=i: tg.grad(nll)(t)[i], theta, 1e-5),
                                   rtol=1e-5, atol=1e-5)


def test_median_and_interval_run_scipys_own_code():
    check_grads(lambda l, s: st.gamma.median(2.0, loc=l, scale=s), [0.3, 1.2])
    check_grads(lambda l, s: np.stack(st.norm(l, s).interval(0.9)), [0.3, 1.2])
    # norm.interval(c) = loc -+ scale * z with z = ppf((1 + c) / 2)
    lo, hi = tg.jacobian(lambda s: np.stack(st.norm.interval(0.9, scale=s)))(2.0)
    np.testing.assert_allclose([lo, hi], [-st.norm.ppf(0.95), st.norm.ppf(0.95)], rtol=1e-12)


def test_nnlf():
    data = st.gamma.rvs(2.5, loc=0.1, scale=1.7, size=30, random_state=np.random.default_rng(1))
    theta = np.array([2.3, 0.05, 1.6])
    check_grads(lambda th: st.gamma.nnlf(th, data), [theta])
    check_grads(lambda a, s: st.gamma.nnlf((a, 0.05, s), data), [2.3, 1.6])
    np.testing.assert_array_equal(tg.vjp(lambda th: st.gamma.nnlf(th, data), theta)[0], st.gamma.nnlf(theta, data))
    outside = np.array([2.3, 5.0, 1.6])  # loc above some data: SciPy's inf, a constant
    value, g = tg.value_and_grad(lambda th: st.gamma.nnlf(th, data))(outside)
    assert value == np.inf and np.array_equal(g, np.zeros(3))


# ------------------------------------------------------------------ clear errors
def test_clear_errors_name_distribution_method_and_parameter():
    with pytest.raises(NonDifferentiableArgumentError, match=r"gamma\.cdf with respect to a"):
        tg.grad(lambda a: st.gamma.cdf(1.0, a))(2.0)
    with pytest.raises(NonDifferentiableArgumentError, match=r"binom\.pmf with respect to n"):
        tg.grad(lambda n: st.binom.pmf(2, n, 0.3))(5.0)
    with pytest.raises(NonDifferentiableArgumentError, match=r"poisson\.pmf with respect to k"):
        tg.grad(lambda k: poisson.pmf(k, 2.0))(2.0)
    with pytest.raises(NonDifferentiableArgumentError, match=r"poisson\.ppf with respect to mu"):
        tg.grad(lambda m: poisson.ppf(0.5, m))(2.0)
    # Moments and loc/scale draws are differentiated (tests/scipy/test_stats_moments.py); a
    # moment SciPy integrates numerically and a traced shape in a draw are refused.
    with pytest.raises(UnsupportedFunctionError, match=r"numerical integration"):
        tg.grad(lambda h: st.kappa4.stats(h, 0.2, moments="m"))(0.3)
    with pytest.raises(TapegradError, match=r"gamma\.rvs: a traced shape"):
        tg.grad(lambda a: st.gamma.rvs(a, random_state=0))(2.0)


# ------------------------------------------------------------------ multivariate
XS = np.array([[0.2, 0.3, 0.5], [1.0, -0.4, 0.2]])
MEAN = np.array([0.1, -0.2, 0.3])
COV = np.array([[2.0, 0.3, 0.1], [0.3, 1.0, 0.2], [0.1, 0.2, 1.5]])


def mvn_logpdf_closed(x, m, c):
    d = x - m
    return -0.5 * (3 * math.log(2 * math.pi) + np.linalg.slogdet(c)[1] + np.einsum("ni,ij,nj->n", d, np.linalg.inv(c), d))


@pytest.mark.parametrize("form", ["module", "keywords", "frozen", "frozen_pdf"])
def test_multivariate_normal(form):
    funs = {
        "module": lambda x, m, c: st.multivariate_normal.logpdf(x, m, c),
        "keywords": lambda x, m, c: st.multivariate_normal.logpdf(x, mean=m, cov=c),
        "frozen": lambda x, m, c: st.multivariate_normal(m, c).logpdf(x),
        "frozen_pdf": lambda x, m, c: st.multivariate_normal(mean=m, cov=c).pdf(x),
    }
    fun = funs[form]
    check_grads(fun, [XS, MEAN, COV], rtol=1e-5)
    np.testing.assert_array_equal(tg.vjp(fun, XS, MEAN, COV)[0], fun(XS, MEAN, COV))
    if form == "module":
        # closed form: d/dx = -S^-1 (x - m); d/dcov on the lower triangle (SciPy reads only that)
        gx = tg.grad(lambda x: np.sum(fun(x, MEAN, COV)))(XS)
        np.testing.assert_allclose(gx, -(XS - MEAN) @ np.linalg.inv(COV), rtol=1e-12)
        gc = tg.grad(lambda c: np.sum(fun(XS, MEAN, c)))(COV)
        sym = tg.grad(lambda c: np.sum(mvn_logpdf_closed(XS, MEAN, c)))(COV)
        expected = np.tril(sym + sym.T - np.diag(np.diag(sym)))
        np.testing.assert_allclose(gc, expected, rtol=1e-10, atol=1e-14)


def test_multivariate_normal_entropy_and_shapes():
    np.testing.assert_allclose(tg.grad(lambda c: st.multivariate_normal.entropy(cov=c))(COV),
                               np.tril(2 * np.linalg.inv(COV) - np.diag(np.diag(np.linalg.inv(COV)))) * 0.5,
                               rtol=1e-12)
    check_grads(lambda c: st.multivariate_normal(MEAN, c).entropy(), [COV])
    check_grads(lambda x, m, c: st.multivariate_normal.logpdf(x, m, c), [XS, MEAN, np.array([1.0, 2.0, 3.0])])
    check_grads(lambda x, m, c: st.multivariate_normal.logpdf(x, m, c), [np.array([0.1, 0.5, 2.0]), 0.3, 2.0])
    with pytest.raises(NonDifferentiableArgumentError, match="singular"):
        tg.grad(lambda m: np.sum(st.multivariate_normal.logpdf(XS, m, np.diag([1.0, 0.0, 1.0]),
                                                               allow_singular=True)))(MEAN)


def test_frozen_multivariate_methods_without_rules_refuse():
    # SciPy would compute them from the plain copies its constructor keeps: a silent zero
    with pytest.raises(UnsupportedFunctionError, match=r"multivariate_normal\(\.\.\.\)\.cdf"):
        tg.grad(lambda m: st.multivariate_normal(m, COV).cdf(XS[0]))(MEAN)
    with pytest.raises(UnsupportedFunctionError, match=r"multivariate_t\(\.\.\.\)\.rvs"):
        tg.grad(lambda m: np.sum(st.multivariate_t(m, COV, 4.0).rvs(random_state=0)))(MEAN)
    frozen = st.multivariate_normal(MEAN, COV)  # plain parameters: SciPy's own results while recording
    seen = {}

    def f(x):
        seen["pdf"] = frozen.pdf(XS[0])
        return np.sum(frozen.logpdf(x))

    tg.grad(f)(XS)
    assert seen["pdf"] == frozen.pdf(XS[0])


def test_multivariate_t_and_dirichlet():
    check_grads(lambda x, m, c, df: st.multivariate_t.logpdf(x, m, c, df), [XS, MEAN, COV, 3.5], rtol=1e-5)
    check_grads(lambda x, m, c, df: st.multivariate_t(m, c, df).pdf(x), [XS, MEAN, COV, 3.5], rtol=1e-5)
    fun = lambda x, a: st.dirichlet.logpdf(x, a)
    x, a = np.array([0.2, 0.3]), np.array([1.5, 2.0, 3.0])  # the last component is 1 - sum
    check_grads(fun, [x, a])
    check_grads(lambda x, a: st.dirichlet(a).pdf(x), [np.array([[0.2, 0.1], [0.3, 0.6]]), a])
    full = np.array([0.2, 0.3, 0.5])
    np.testing.assert_allclose(tg.grad(lambda x: st.dirichlet.logpdf(x, a))(full), (a - 1) / full, rtol=1e-12)
    from scipy.special import digamma

    np.testing.assert_allclose(tg.grad(lambda a: st.dirichlet.logpdf(full, a))(a),
                               np.log(full) - digamma(a) + digamma(a.sum()), rtol=1e-12)


# ------------------------------------------------------------------ the coverage table
def test_coverage_table_is_current():
    table = stats_sweep.read_docs()
    assert len(table) > 900
    for name, method, param in [("norm", "logpdf", "scale"), ("gamma", "cdf", "a"), ("poisson", "pmf", "mu"),
                                ("binom", "pmf", "n")]:
        shapes = next(s for n, s, _ in stats_sweep.distributions() if n == name)
        discrete = name in ("poisson", "binom")
        status, _ = stats_sweep.run_case(name, shapes, discrete, method, param)
        assert table[(name, method)][param] == status


def test_coverage_table_has_no_wrong_derivative():
    with open(stats_sweep.DOC) as fh:
        text = fh.read()
    assert "| wrong | 0 |" in text


@pytest.mark.slow
def test_every_distribution_method_and_parameter():
    results = stats_sweep.sweep(jobs=os.cpu_count() or 1)
    wrong = [(case[0], case[3], case[4], detail) for case, status, detail, _ in results if status == "wrong"]
    assert not wrong, wrong
