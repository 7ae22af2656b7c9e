"""A traced parameter that reaches a solver's callback only through a switch.

``np.where(t > p, 1.0, 0.0)`` returns plain numbers, yet the solution moves with ``p``
(the jump moves).  SciPy's run used to see no traced output, so the solve was taken as
constant: a silently zero gradient.  The callbacks' wrappers now watch what the callback
computes with during SciPy's run, and the switch's crossing carries ``p``.
"""

import numpy as np
import pytest
from scipy.integrate import odeint, quad, solve_ivp

import tapegrad as tg

TIGHT = dict(rtol=1e-10, atol=1e-12)


def _relay(p):  # y' = H(t - p) - y, y(0) = 0: y(3) = 1 - exp(p - 3)
    return solve_ivp(lambda t, y: [np.where(t > p, 1.0, 0.0) - y[0]], (0.0, 3.0), [0.0], **TIGHT).y[0, -1]


@pytest.mark.parametrize(
    "switch",
    [
        lambda t, p: np.where(t > p, 1.0, 0.0),
        lambda t, p: np.heaviside(t - p, 0.5),
        lambda t, p: 0.5 * (np.sign(t - p) + 1.0),
        lambda t, p: np.greater(t, p).astype(float),
    ],
    ids=["where", "heaviside", "sign", "astype"],
)
def test_a_time_switch_moves_with_the_parameter(switch):
    def f(p):
        return solve_ivp(lambda t, y: [switch(t, p) - y[0]], (0.0, 3.0), [0.0], **TIGHT).y[0, -1]

    p = 1.3
    np.testing.assert_allclose(f(p), 1.0 - np.exp(p - 3.0), rtol=1e-8)
    np.testing.assert_allclose(tg.grad(f)(p), -np.exp(p - 3.0), rtol=1e-7)
    np.testing.assert_allclose(tg.hessian(f)(p), -np.exp(p - 3.0), rtol=1e-6)


def test_parameters_passed_in_args_and_odeint():
    def through_args(p):
        return solve_ivp(lambda t, y, p: [np.sign(t - p) - y[0]], (0.0, 3.0), [0.0], args=(p,), **TIGHT).y[0, -1]

    def with_odeint(p):
        return odeint(lambda y, t: [np.where(t > p, 1.0, 0.0) - y[0]], [0.0], [0.0, 3.0], **TIGHT)[-1, 0]

    np.testing.assert_allclose(tg.grad(through_args)(1.3), -2.0 * np.exp(1.3 - 3.0), rtol=1e-7)
    np.testing.assert_allclose(tg.grad(with_odeint)(1.3), -np.exp(1.3 - 3.0), rtol=1e-6)


def test_a_state_threshold():
    # y' = 0.5 + H(y - p) from y = 0: y reaches p at t = 2p, then rises at 1.5: y(3) = 4.5 - p
    def f(p):
        return solve_ivp(lambda t, y: [np.where(y[0] > p, 1.0, 0.0) + 0.5], (0.0, 3.0), [0.0], **TIGHT).y[0, -1]

    np.testing.assert_allclose(f(0.6), 4.5 - 2.0 * 0.6, rtol=1e-8)
    np.testing.assert_allclose(tg.grad(f)(0.6), -2.0, rtol=1e-7)


def test_a_jump_at_a_traced_point_in_quad_is_refused_or_split():
    def integrand(x, p):
        return np.where(x > p, 1.0, 0.0) * np.exp(-x)

    with pytest.raises(tg.NonDifferentiableArgumentError, match="points="):
        tg.grad(lambda p: quad(integrand, 0.0, 2.0, args=(p,))[0])(0.7)
    split = tg.grad(lambda p: quad(integrand, 0.0, 2.0, args=(p,), points=[p])[0])(0.7)
    np.testing.assert_allclose(split, -np.exp(-0.7), rtol=1e-8)


def test_a_callback_without_traced_values_stays_plain():
    calls = []

    def f(p):
        out = solve_ivp(lambda t, y: [np.where(t > 1.0, 1.0, 0.0) - y[0]], (0.0, 3.0), [0.0], **TIGHT)
        calls.append(type(out.y))
        return p * 2.0

    assert tg.grad(f)(1.3) == 2.0
    assert calls == [np.ndarray]
