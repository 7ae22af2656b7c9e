"""Spline interpolation at coordinates that sit exactly on grid points, second order.

The B-spline's centre piece once wrote ``t**2`` as ``|t| * |t|``; at ``t = 0`` (an integer
coordinate) ``|t|`` has the derivative 0, so the Hessian lost ``I''(c)`` there (found by
tests/test_wild_scipy_programs.py through affine_transform and rotate).
"""

import numpy as np
import pytest
from scipy import ndimage

import tapegrad as tg

IMG = np.random.default_rng(3).random((6, 7))


def _fd_hessian(f, x, h=1e-6):
    g = tg.grad(f)
    return np.array([(g(x + h * e) - g(x - h * e)) / (2 * h) for e in np.eye(x.size)])


@pytest.mark.parametrize("order", [2, 3, 4, 5])
def test_second_derivative_on_a_grid_point_is_the_spline_s(order):
    # the coordinate a moves along axis 0 through grid point 2; the spline is C^(order-1) there
    def f(a):
        return ndimage.map_coordinates(IMG, np.stack([a, np.array([3.0])]), order=order, mode="nearest")[0]

    on_knot = np.array([2.0])
    off = 1e-3  # the second derivative is continuous: on the knot it is the limit from either side
    left, right = tg.hessian(f)(on_knot - off), tg.hessian(f)(on_knot + off)
    exact = tg.hessian(f)(on_knot)
    np.testing.assert_allclose(exact, (left + right) / 2, rtol=0, atol=5e-3 * max(1.0, np.abs(exact).max()))
    assert abs(exact[0, 0]) > 1e-3  # not the lost (zero) term


@pytest.mark.parametrize("order", [3, 5])
def test_affine_matrix_hessian_with_coordinates_on_grid_points(order):
    def f(m):
        return np.sum(ndimage.affine_transform(IMG, m.reshape(2, 2), order=order, mode="nearest") * IMG)

    m = np.array([1.0, 0.0, 0.0, 1.0])  # the identity: every coordinate on a grid point
    hess = tg.hessian(f)(m)
    np.testing.assert_allclose(hess, _fd_hessian(f, m, 1e-6), rtol=1e-4, atol=1e-4 * np.abs(hess).max())
