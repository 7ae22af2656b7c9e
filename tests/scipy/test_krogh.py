"""``KroghInterpolator`` / ``krogh_interpolate`` with traced data or points (rules/scipy_krogh.py)."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import NonDifferentiableArgumentError
from tapegrad.testing import check_grads

interpolate = pytest.importorskip("scipy.interpolate")
Krogh = interpolate.KroghInterpolator

XI = np.linspace(0.0, 1.0, 5)
Y = np.cos(3 * XI)
XS = np.array([0.1, 0.55, 0.9])


def test_data_points_columns_and_repeated_nodes():
    check_grads(lambda y: Krogh(XI, y)(XS), (Y,), order=2)
    check_grads(lambda x: Krogh(XI, Y)(x), (XS,), order=2)
    check_grads(lambda x: interpolate.krogh_interpolate(XI, Y, x), (XS,), order=2)
    check_grads(lambda y: Krogh(XI, y)(XS), (np.stack([Y, Y**2], axis=1),), order=2)
    hermite_nodes = np.array([0.0, 0.0, 1.0, 1.0])  # values and slopes at both ends
    check_grads(lambda y: Krogh(hermite_nodes, y)(XS), (np.array([1.0, 0.5, 2.0, -1.0]),), order=2)


def test_linear_in_the_data_and_scipys_values():
    jac = tg.jacobian(lambda y: Krogh(XI, y)(XS))(Y)
    np.testing.assert_allclose(jac @ Y, Krogh(XI, Y)(XS), rtol=1e-12)
    np.testing.assert_allclose(tg.jacobian(lambda y: Krogh(XI, y)(XI))(Y), np.eye(5), atol=1e-10)
    seen = {}

    def f(y):
        seen["value"] = Krogh(XI, y)(XS)
        return seen["value"]

    tg.jacobian(f)(Y)
    assert np.array_equal(tg.stop_gradient(seen["value"]), Krogh(XI, Y)(XS))


def test_refusals():
    with pytest.raises(NonDifferentiableArgumentError, match="derivative"):
        tg.grad(lambda y: Krogh(XI, y).derivative(0.3))(Y)
    with pytest.raises(NonDifferentiableArgumentError, match="nodes"):
        tg.grad(lambda xi: np.sum(Krogh(xi, Y)(XS)))(XI)
