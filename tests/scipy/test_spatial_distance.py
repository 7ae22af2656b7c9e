"""``scipy.spatial.distance.cdist``/``pdist``/``squareform`` over tracers (rules/scipy_spatial_distance.py).

Each metric against central differences at first and second order, values SciPy's
own bit for bit, and the dense closed form for the Euclidean case.
"""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import NonDifferentiableArgumentError
from tapegrad.testing import check_grads

# Plain arrays made before any tape records: np.zeros & co. called inside a differentiated
# function give traced constants (tapegrad.buffers), so the refusals below need these.
_PLAIN_4x3 = np.zeros((4, 3))

distance = pytest.importorskip("scipy.spatial.distance")

rng = np.random.default_rng(33)
A = rng.normal(size=(4, 3))
B = rng.normal(size=(3, 3))
A6 = rng.normal(size=(6, 3))  # mahalanobis' default covariance needs more points than features
W = rng.uniform(0.5, 1.5, 3)

METRICS = [
    ("euclidean", {}), ("sqeuclidean", {}), ("cityblock", {}), ("minkowski", {"p": 3.0}), ("chebyshev", {}),
    ("cosine", {}), ("correlation", {}), ("seuclidean", {}), ("mahalanobis", {}), ("braycurtis", {}),
    ("canberra", {}), ("minkowski", {"p": 1.5, "w": W}), ("euclidean", {"w": W}), ("cosine", {"w": W}),
    ("seuclidean", {"V": W}), ("cityblock", {"w": W}),
]


def _id(case):
    name, kw = case
    return name + "".join(f"-{k}" for k in kw)


@pytest.mark.parametrize("case", METRICS, ids=_id)
def test_cdist_and_pdist_every_metric(case):
    name, kw = case
    points = A6 if name == "mahalanobis" else A
    for f, x in ((lambda X: distance.cdist(X, B, name, **kw), points), (lambda X: distance.pdist(X, name, **kw), points)):
        check_grads(f, (x,), order=2)
        seen = {}

        def g(X):
            seen["value"] = f(X)
            return seen["value"]

        tg.jacobian(g)(x)
        assert np.array_equal(tg.stop_gradient(seen["value"]), f(x))  # SciPy's numbers, bit for bit


def test_callable_metric_and_both_operands_traced():
    quartic = lambda u, v: np.sum((u - v) ** 4)  # noqa: E731
    check_grads(lambda X: distance.cdist(X, B, quartic), (A,), order=2)
    check_grads(lambda X: distance.cdist(X[:2], X[2:], "euclidean"), (A,), order=2)
    check_grads(lambda w: distance.pdist(A, "minkowski", p=2.5, w=w), (W,), order=2)


def test_euclidean_closed_form_and_coincident_points():
    diff = A[:, None, :] - B[None, :, :]
    dist = np.sqrt(np.sum(diff**2, -1))
    grad = tg.grad(lambda X: np.sum(distance.cdist(X, B)))(A)
    np.testing.assert_allclose(grad, np.sum(diff / dist[..., None], axis=1), rtol=1e-13)
    # The distance of a point to itself: subgradient 0, not NaN.
    jac = tg.jacobian(lambda X: distance.cdist(X, X))(A)
    assert np.all(np.isfinite(jac)) and np.all(jac[0, 0] == 0)


def test_squareform_both_ways():
    check_grads(lambda X: distance.squareform(distance.pdist(X)), (A,), order=2)
    check_grads(lambda X: distance.squareform(distance.cdist(X, X) ** 2, checks=False), (A,), order=2)


def test_boolean_metrics_are_constants_and_unknown_ones_refused():
    assert np.array_equal(tg.grad(lambda X: np.sum(distance.cdist(X, B, "hamming")) + np.sum(X))(A), np.ones_like(A))
    with pytest.raises(NonDifferentiableArgumentError, match="jensenshannon"):
        tg.grad(lambda X: np.sum(distance.cdist(np.abs(X), np.abs(B), "jensenshannon")))(A)
    # out= is handled where every array function's is (dispatch): a plain buffer is refused ...
    with pytest.raises(tg.GradientDroppedError, match="cdist was called with out="):
        tg.grad(lambda X: np.sum(distance.cdist(X, B, out=_PLAIN_4x3.copy())))(A)

    def into_traced(X):  # ... and a traced one gets the distances written in
        d = np.zeros_like(X, shape=(4, 3))
        distance.cdist(X, B, out=d)
        return np.sum(d**2)

    np.testing.assert_allclose(tg.grad(into_traced)(A), tg.grad(lambda X: np.sum(distance.cdist(X, B) ** 2))(A),
                               rtol=1e-14)
