"""``scipy.interpolate.griddata`` over traced values (rules/scipy_griddata.py)."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import NonDifferentiableArgumentError
from tapegrad.testing import check_grads

interpolate = pytest.importorskip("scipy.interpolate")
griddata = interpolate.griddata

rng = np.random.default_rng(36)
P = rng.uniform(0, 1, (12, 2))
V = np.sin(3 * P[:, 0]) + P[:, 1]
Q = np.array([[0.5, 0.5], [0.3, 0.6], [2.0, 2.0]])  # the last one is outside the hull


@pytest.mark.parametrize("method,fill", [("linear", np.nan), ("linear", 0.5), ("nearest", np.nan)])
def test_linear_in_the_values(method, fill):
    check_grads(lambda v: griddata(P, v, Q[:2], method=method, fill_value=fill), (V,), order=2)
    jac = tg.jacobian(lambda v: griddata(P, v, Q, method=method, fill_value=fill))(V)
    # The map is linear: the Jacobian applied to the values is the interpolant (the fill aside).
    inside = griddata(P, V, Q, method=method, fill_value=fill)
    np.testing.assert_allclose(jac[:2] @ V, inside[:2], rtol=1e-12)
    if method == "linear":
        assert np.all(jac[2] == 0) and np.all(jac[:2] >= -1e-15) and np.allclose(jac[:2].sum(axis=1), 1.0)
    seen = {}

    def f(v):
        seen["value"] = griddata(P, v, Q, method=method, fill_value=fill)
        return seen["value"]

    tg.jacobian(f)(V)
    assert np.array_equal(tg.stop_gradient(seen["value"]), inside, equal_nan=True)


def test_vector_values_tuple_points_and_one_dimension():
    check_grads(lambda v: griddata(P, v, Q[:2]), (np.stack([V, V**2], axis=1),), order=2)
    xi = (np.array([0.5, 0.3]), np.array([0.5, 0.6]))
    check_grads(lambda v: griddata((P[:, 0], P[:, 1]), v, xi), (V,), order=2)
    x1 = np.linspace(0.0, 1.0, 6)
    check_grads(lambda v: griddata(x1, v, np.array([0.25, 0.7]), method="cubic"), (np.sin(x1),), order=2)


def test_traced_points_and_cubic_are_refused_clearly():
    with pytest.raises(NonDifferentiableArgumentError, match="sample or query points"):
        tg.grad(lambda q: np.sum(griddata(P, V, q)))(Q[:2])
    with pytest.raises(NonDifferentiableArgumentError, match="cubic"):
        tg.grad(lambda v: np.sum(griddata(P, v, Q[:2], method="cubic")))(V)
