"""Moments and reparameterized draws of scipy.stats distributions (rules/scipy_stats_moments.py)."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import check_grads

st = pytest.importorskip("scipy.stats")

P = np.array([1.7, 0.4, 2.2])

MOMENTS = {
    "norm mean and std": lambda p: np.stack([st.norm.mean(loc=p[0], scale=p[1]), st.norm.std(loc=p[0], scale=p[1])]),
    "gamma mvsk": lambda p: np.stack(st.gamma.stats(p[0], loc=p[1], scale=p[2], moments="mvsk")),
    "frozen beta var": lambda p: st.beta(p[0], p[2]).var(),
    "t mean and var": lambda p: np.stack(st.t.stats(p[2] + 3, scale=p[1])),
    "poisson mean": lambda p: st.poisson.mean(p[0]),
    "binom var": lambda p: st.binom.var(10, p[1]),
    "lognorm std": lambda p: st.lognorm.std(p[1], scale=p[0]),
    "genextreme mean (_munp)": lambda p: st.genextreme.mean(p[1] - 0.2),
    "vectorized gamma mean": lambda p: st.gamma.mean(p, scale=p[::-1]),
}


@pytest.mark.parametrize("name", list(MOMENTS))
def test_moments_first_and_second_order(name):
    f = MOMENTS[name]
    check_grads(f, (P,), order=2)
    seen = {}

    def g(p):
        seen["value"] = f(p)
        return seen["value"]

    tg.jacobian(g)(P)
    assert np.array_equal(tg.stop_gradient(seen["value"]), f(P))  # SciPy's numbers


def test_closed_forms():
    a, loc, scale = P
    grad = tg.grad(lambda p: st.gamma.var(p[0], loc=p[1], scale=p[2]))(P)
    np.testing.assert_allclose(grad, [scale**2, 0.0, 2 * a * scale], rtol=1e-14)
    # Invalid parameters: SciPy's nan, no derivative.
    value, grad = tg.value_and_grad(lambda p: st.norm.mean(loc=p[0], scale=-p[1]))(P)
    assert np.isnan(value)


def test_reparameterized_draws_are_scipys_draws():
    def draw(p, seed=0):
        return st.norm.rvs(loc=p[0], scale=p[1], size=4, random_state=np.random.default_rng(seed))

    check_grads(draw, (P,), order=2)
    z = st.norm.rvs(size=4, random_state=np.random.default_rng(0))
    jac = tg.jacobian(draw)(P)
    np.testing.assert_array_equal(jac[:, 0], np.ones(4))
    np.testing.assert_array_equal(jac[:, 1], z)
    seen = {}

    def g(p):
        seen["value"] = draw(p)
        return seen["value"]

    tg.jacobian(g)(P)
    assert np.array_equal(tg.stop_gradient(seen["value"]), draw(P))
    check_grads(lambda p: st.gamma.rvs(2.0, loc=p, scale=p[::-1], random_state=np.random.default_rng(1)), (P,), order=2)
    check_grads(lambda p: st.expon(scale=p).rvs(random_state=np.random.default_rng(2)), (P,), order=2)
    # The global random state is consumed exactly once, as the eager call consumes it.
    np.random.seed(5)
    tg.grad(lambda p: np.sum(st.norm.rvs(loc=p[0], size=3)))(P)
    after = np.random.random()
    np.random.seed(5)
    st.norm.rvs(loc=P[0], size=3)
    assert np.random.random() == after


def test_discrete_draws_are_constants():
    k = tg.grad(lambda p: np.sum(st.poisson.rvs(p[0], size=3, random_state=0) * p[1]))(P)
    assert k[0] == 0.0 and k[1] == np.sum(st.poisson.rvs(P[0], size=3, random_state=0))
