"""The shared checker itself: it passes right rules and fails wrong ones, at each order."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.dispatch import primitive
from tapegrad.testing import check_grads

X = np.array([0.3, -1.2, 2.0])


def _cube_with(vjp):
    cube = primitive(lambda x: x**3)
    tg.defvjp(cube, vjp)
    return lambda x: np.sin(cube(x))


def test_a_correct_rule_passes_first_and_second_order():
    check_grads(_cube_with(lambda g, ans, x: g * (3 * x**2)), [X], order=2)


def test_a_wrong_first_derivative_fails():
    with pytest.raises(AssertionError, match="order 1"):
        check_grads(_cube_with(lambda g, ans, x: g * (3.01 * x**2)), [X], order=1)


def test_a_rule_right_at_first_order_but_wrong_at_second_fails():
    # Correct values, but written with a constant that hides the x-dependence of 3 x**2:
    # first order agrees, the derivative of the VJP does not.
    wrong = _cube_with(lambda g, ans, x: g * tg.stop_gradient(3 * x**2))
    check_grads(wrong, [X], order=1)
    with pytest.raises(AssertionError, match="order 1"):  # raised by the nested (second-order) check
        check_grads(wrong, [X], order=2)


def test_a_batch_that_disagrees_with_single_vjps_fails():
    def batch_blind(g, ans, x):
        # Only right when g has no batch axis: collapses the batch into its first row.
        return (g if np.ndim(g) == np.ndim(ans) else g[:1]) * (3 * x**2)

    with pytest.raises(AssertionError, match="batched"):
        check_grads(_cube_with(batch_blind), [X], order=1)
