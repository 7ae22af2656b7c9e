"""The ODE rules record the right-hand side's Jacobian once per solve and replay it (tapegrad.reuse).

Where the traced chord step runs (higher orders, a callback closing over traced
parameters), the replayed Jacobians must be the eager ones bit for bit, whatever the
callback does with the time (a branch, a conversion that refuses traced values).
At first order with traced ``args`` the sensitivities are made in plain NumPy from
the replayed ``(f_y, f_args)`` (tests/scipy/test_ode_first_order.py); here they must
agree with the traced chord step.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import odeint, solve_ivp

import tapegrad as tg
from tapegrad.solvers import integrate


def _per_node(monkeypatch):
    """The traced chord step node by node, with f_y from the replayed recording (no column-wise forms)."""
    monkeypatch.setattr(integrate.Collocation, "_first_order", lambda self: None)
    monkeypatch.setattr(integrate, "columns_jacobian", lambda *args: None)


def _without_reuse(monkeypatch):
    """f_y node by node, eagerly: no replayed recording (integrate._replayed_jacobian, an ArgsJacobian)."""
    monkeypatch.setattr(integrate, "_replayed_jacobian", lambda rhs: None)


def lotka(t, y, th):
    a, b, d, g = th[0], th[1], th[2], th[3]
    return np.stack([a * y[0] - b * y[0] * y[1], d * y[0] * y[1] - g * y[1]])


def forced(t, y, th):
    push = th[0] if t > 2.0 else th[1]  # a branch on the time: a guard of the recording
    return np.stack([y[1], -np.sin(y[0]) * th[2] + push * np.cos(t)])


def converts(t, y, th):
    scale = 1.0 + 0.1 * float(t)  # refuses a traced time: that chunk and the rest are eager
    return np.stack([y[1] * scale, -th[0] * y[0]])


TH = np.array([1.0, 0.1, 0.075, 1.5])


def fit(rhs, y0, span, times):
    def loss(th):
        sol = solve_ivp(rhs, span, y0, t_eval=times, args=(th,), rtol=1e-8, atol=1e-10)
        return np.sum(sol.y ** 2)

    return loss


CASES = [
    (lotka, [10.0, 5.0], (0.0, 6.0), np.linspace(0.3, 6.0, 12)),
    (forced, [0.5, 0.0], (0.0, 5.0), np.linspace(0.5, 5.0, 10)),
    (converts, [1.0, 0.0], (0.0, 3.0), np.linspace(0.5, 3.0, 6)),
]


@pytest.mark.parametrize("rhs, y0, span, times", CASES, ids=["lotka", "branch_on_t", "float_of_t"])
def test_gradient_is_the_chord_steps(monkeypatch, rhs, y0, span, times):
    loss = fit(rhs, y0, span, times)
    th = TH[: 3] if rhs is forced else TH
    made = []
    original = integrate.Collocation._first_order

    def spying(self):
        made.append(original(self))
        return made[-1]

    with monkeypatch.context() as m:
        m.setattr(integrate.Collocation, "_first_order", spying)
        fast = tg.grad(loss)(th)
    # float(t) refuses the traced times of the recording: that solve takes the chord step; the branch on
    # t is a switch of the right-hand side, whose pieces take it too (solvers._kinks)
    assert bool(made and made[0] is not None) == (rhs is lotka)
    with monkeypatch.context() as m:
        _per_node(m)
        chord = tg.grad(loss)(th)
        _without_reuse(m)
        eager = tg.grad(loss)(th)
    assert chord.tobytes() == eager.tobytes()  # the replayed f_y are the eager ones
    np.testing.assert_allclose(fast, chord, rtol=1e-11, atol=1e-13)


def test_hessian_is_the_eager_one(monkeypatch):
    loss = fit(lotka, [10.0, 5.0], (0.0, 2.0), np.linspace(0.3, 2.0, 5))
    _per_node(monkeypatch)
    reused = tg.hessian(loss)(TH)
    with monkeypatch.context() as m:
        _without_reuse(m)
        eager = tg.hessian(loss)(TH)
    np.testing.assert_array_equal(reused, eager)


def test_closure_over_traced_parameters_stays_eager(monkeypatch):
    def loss(th):
        sol = solve_ivp(lambda t, y: lotka(t, y, th), (0.0, 3.0), [10.0, 5.0], t_eval=[1.0, 3.0], rtol=1e-8)
        return np.sum(sol.y)

    _per_node(monkeypatch)  # the chord step's f_y
    reused = tg.grad(loss)(TH)
    with monkeypatch.context() as m:
        _without_reuse(m)
        eager = tg.grad(loss)(TH)
    assert reused.tobytes() == eager.tobytes()


def test_odeint_and_the_jacobians_are_replayed(monkeypatch):
    calls = []
    original = integrate._replayed_jacobian

    def counting(rhs):
        replayed = original(rhs)
        calls.append(replayed)
        return replayed

    monkeypatch.setattr(integrate, "_replayed_jacobian", counting)

    def loss(th):
        ys = odeint(lambda y, t, th: lotka(t, y, th), [10.0, 5.0], np.linspace(0.0, 4.0, 9), args=(th,),
                    rtol=1e-9, atol=1e-10)
        return np.sum(ys[-1] ** 2)

    _per_node(monkeypatch)  # the chord step's f_y
    g = tg.grad(loss)(TH)
    h = 1e-6
    fd = np.array([(loss(TH + h * e) - loss(TH - h * e)) / (2 * h) for e in np.eye(4)])
    np.testing.assert_allclose(g, fd, rtol=1e-4)
    assert calls and any(c is not None for c in calls)
    stats = [c.pull.reuse_stats for c in calls if c is not None]
    assert all(s.refused is None for s in stats)
    assert sum(s.replays for s in stats) > 0 and sum(s.recordings for s in stats) <= len(set(map(id, stats)))
