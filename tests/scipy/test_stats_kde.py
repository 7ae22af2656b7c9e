"""``scipy.stats.gaussian_kde`` over tracers (rules/scipy_stats_kde.py): data, points, weights, bandwidth."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import check_grads

st = pytest.importorskip("scipy.stats")

rng = np.random.default_rng(34)
DATA = rng.normal(size=20)
POINTS = np.array([-0.5, 0.1, 1.2])
WEIGHTS = rng.uniform(0.5, 1.5, 20)
DATA2 = rng.normal(size=(2, 15))
POINTS2 = rng.normal(size=(2, 4))


@pytest.mark.parametrize("method", ["evaluate", "pdf", "__call__", "logpdf"])
def test_in_the_data_and_the_points(method):
    check_grads(lambda d: getattr(st.gaussian_kde(d), method)(POINTS), (DATA,), order=2)
    check_grads(lambda p: getattr(st.gaussian_kde(DATA), method)(p), (POINTS,), order=2)


def test_weights_bandwidth_and_two_dimensions():
    check_grads(lambda w: st.gaussian_kde(DATA, weights=w)(POINTS), (WEIGHTS,), order=2)
    check_grads(lambda b: st.gaussian_kde(DATA, bw_method=lambda kde: b[0])(POINTS), (np.array([0.4]),), order=2)
    check_grads(lambda d: st.gaussian_kde(d).logpdf(POINTS2), (DATA2,), order=2)
    check_grads(lambda p: st.gaussian_kde(DATA2)(p), (POINTS2,), order=2)


def test_values_are_scipys_and_the_closed_form_holds():
    seen = {}

    def f(p):
        seen["value"] = st.gaussian_kde(DATA)(p)
        return seen["value"]

    jac = tg.jacobian(f)(POINTS)
    assert np.array_equal(tg.stop_gradient(seen["value"]), st.gaussian_kde(DATA)(POINTS))
    kde = st.gaussian_kde(DATA)
    h2 = kde.covariance[0, 0]
    z = (POINTS[:, None] - DATA[None, :])
    expected = np.sum(-z / h2 * np.exp(-0.5 * z**2 / h2), axis=1) / (np.sqrt(2 * np.pi * h2) * DATA.size)
    np.testing.assert_allclose(np.diag(jac), expected, rtol=1e-12)


def test_a_tracer_compared_with_a_string_is_unequal_like_an_ndarray():
    def f(x):
        assert (x == "scott") is False and (x != "scott") is True
        return np.sum(x**2)

    assert tg.grad(f)(POINTS).tolist() == (2 * POINTS).tolist()
