"""First-order ODE sensitivities made in plain NumPy (tapegrad.solvers._sensitivity).

At first order, with traced ``args`` and/or a traced ``y0``, ``solve_ivp`` and ``odeint``
put the solution on the tape as one linear map of the traced inputs, built from the
right-hand side's ``(f_y, f_args)`` at the collocation nodes.  Every case here checks
that this path was taken (or refused, where it must be), that it agrees with the traced
chord step it replaces to rounding, and with central finite differences.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import odeint, solve_ivp

import tapegrad as tg
from tapegrad.solvers import integrate


@pytest.fixture
def spy(monkeypatch):
    """Records whether each smooth collocation took the first-order path."""
    made = []
    original = integrate.Collocation._first_order

    def spying(self):
        made.append(original(self) is not None)
        return None if not made[-1] else original(self)

    monkeypatch.setattr(integrate.Collocation, "_first_order", spying)
    return made


def _chord(monkeypatch, f, *args, argnums=0):
    with monkeypatch.context() as m:
        m.setattr(integrate.Collocation, "_first_order", lambda self: None)
        return tg.grad(f, argnums=argnums)(*args)


def _fd(f, x, h=1e-6):
    x = np.asarray(x, dtype=float)
    out = np.zeros(x.shape)
    for k in np.ndindex(x.shape):
        e = np.zeros(x.shape)
        e[k] = h
        out[k] = (f(x + e) - f(x - e)) / (2 * h)
    return out


def lotka(t, y, th):
    return np.stack([th[0] * y[0] - th[1] * y[0] * y[1], th[2] * y[0] * y[1] - th[3] * y[1]])


TH = np.array([1.1, 0.4, 0.1, 0.4])
TIMES = np.linspace(0.3, 4.0, 9)


def _lotka_loss(method="RK45"):
    def loss(p):
        sol = solve_ivp(lotka, (0.0, 4.0), p[:2], t_eval=TIMES, args=(p[2:],), method=method, rtol=1e-9, atol=1e-11)
        return np.sum(sol.y ** 2) / 100.0

    return loss


P0 = np.concatenate([[10.0, 5.0], TH])


@pytest.mark.parametrize("method", ["RK45", "DOP853", "Radau", "BDF", "LSODA"])
def test_traced_y0_and_args(monkeypatch, spy, method):
    loss = _lotka_loss(method)
    g = tg.grad(loss)(P0)
    assert spy and all(spy)
    np.testing.assert_allclose(g, _chord(monkeypatch, loss, P0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g, _fd(loss, P0), rtol=2e-5, atol=1e-7)


def test_traced_y0_only(monkeypatch, spy):
    def loss(y0):
        sol = solve_ivp(lotka, (0.0, 3.0), y0, t_eval=[1.0, 3.0], args=(TH,), rtol=1e-9, atol=1e-11)
        return np.sum(np.sin(sol.y))

    y0 = np.array([10.0, 5.0])
    g = tg.grad(loss)(y0)
    assert spy and all(spy)
    np.testing.assert_allclose(g, _chord(monkeypatch, loss, y0), rtol=1e-10)
    np.testing.assert_allclose(g, _fd(loss, y0), rtol=1e-5)


def linear(t, y, params, scale):
    # nested args: a traced matrix and vector in a dict, a plain number beside them
    return scale * (params["a"] @ y + params["b"][0] * np.cos(t)) + params["b"][1]


def test_nested_args_with_a_matrix(monkeypatch, spy):
    def loss(x):
        params = {"a": np.reshape(x[:4], (2, 2)), "b": [x[4:6], x[6]]}
        sol = solve_ivp(linear, (0.0, 2.0), [1.0, -0.5], t_eval=[0.5, 2.0], args=(params, 0.7), rtol=1e-10,
                        atol=1e-12)
        return np.sum(sol.y * np.array([[1.0], [2.0]]))

    x = np.array([-0.5, 0.3, -0.2, -0.8, 0.4, -0.1, 0.05])
    g = tg.grad(loss)(x)
    assert spy and all(spy)
    np.testing.assert_allclose(g, _chord(monkeypatch, loss, x), rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(g, _fd(loss, x), rtol=1e-6, atol=1e-9)


def test_odeint_and_vectorized(monkeypatch, spy):
    def loss_odeint(th):
        ys = odeint(lambda y, t, th: lotka(t, y, th), [10.0, 5.0], np.linspace(0.0, 3.0, 7), args=(th,),
                    rtol=1e-10, atol=1e-11)
        return np.sum(ys[1:] ** 2) / 100.0

    def column(t, y, th):  # a vectorized right-hand side: y is (2, k)
        return np.stack([th[0] * y[0] - th[1] * y[0] * y[1], th[2] * y[0] * y[1] - th[3] * y[1]])

    def loss_vectorized(th):
        sol = solve_ivp(column, (0.0, 3.0), [10.0, 5.0], t_eval=[1.0, 2.0, 3.0], args=(th,), vectorized=True,
                        rtol=1e-9, atol=1e-11)
        return np.sum(sol.y ** 2) / 100.0

    for loss in (loss_odeint, loss_vectorized):
        spy.clear()
        g = tg.grad(loss)(TH)
        assert spy and all(spy)
        np.testing.assert_allclose(g, _chord(monkeypatch, loss, TH), rtol=1e-10)
        np.testing.assert_allclose(g, _fd(loss, TH), rtol=1e-5)


def test_dense_output_events_and_traced_times(monkeypatch, spy):
    def event(t, y, th):
        return y[0] - 2.0

    event.terminal = True

    def loss(th, t_out):
        sol = solve_ivp(lotka, (0.0, 5.0), [10.0, 5.0], args=(th,), events=event, dense_output=True,
                        rtol=1e-10, atol=1e-12)
        between = sol.sol(t_out)
        return np.sum(between ** 2) / 100.0 + sol.t_events[0][0] + np.sum(sol.y[:, -1])

    t_out = np.array([0.35, 0.7])
    g = tg.grad(loss, argnums=(0, 1))(TH, t_out)
    assert spy and all(spy)
    chord = _chord(monkeypatch, loss, TH, t_out, argnums=(0, 1))
    for a, b in zip(g, chord):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(g[0], _fd(lambda th: loss(th, t_out), TH), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(g[1], _fd(lambda t: loss(TH, t), t_out), rtol=1e-5, atol=1e-7)


def test_every_request_gives_the_stacked_vjps(spy):
    def states(th):
        sol = solve_ivp(lotka, (0.0, 3.0), [10.0, 5.0], t_eval=[1.0, 2.0, 3.0], args=(th,), rtol=1e-9, atol=1e-11)
        return sol.y

    jac = tg.jacobian(states)(TH)
    chunked = tg.jacobian(states, chunk_size=2)(TH)
    y, pull = tg.vjp(states, TH)
    rows = np.stack([pull(e.reshape(y.shape))[0] for e in np.eye(y.size)]).reshape(y.shape + TH.shape)
    assert spy and all(spy)
    np.testing.assert_array_equal(jac, rows)
    np.testing.assert_array_equal(chunked, rows)
    np.testing.assert_allclose(tg.jacfwd(states)(TH), rows, rtol=1e-10, atol=1e-12)


def test_second_order_takes_the_chord_steps(monkeypatch, spy):
    loss = _lotka_loss()
    hess = tg.hessian(loss)(P0)
    assert not any(spy)  # two tapes reach the solve: the chord step, twice
    np.testing.assert_allclose(hess, hess.T, rtol=1e-7, atol=1e-9)
    grad, h = tg.grad(loss), 1e-5
    fd = np.stack([(grad(P0 + h * e) - grad(P0 - h * e)) / (2 * h) for e in np.eye(P0.size)])
    np.testing.assert_allclose(hess, fd, rtol=1e-4, atol=1e-6)


def test_a_closure_over_tracers_is_propagated(monkeypatch, spy):
    def loss(p):
        th = p[2:]
        # args traced too, but the rate p[0] reaches the right-hand side through the closure
        sol = solve_ivp(lambda t, y, th: lotka(t, y, th) * p[0] / 10.0, (0.0, 3.0), [10.0, 5.0], t_eval=[1.0, 3.0],
                        args=(th,), rtol=1e-9, atol=1e-11)
        return np.sum(sol.y ** 2) / 100.0

    g = tg.grad(loss)(P0)
    assert spy and all(spy)
    np.testing.assert_allclose(g, _chord(monkeypatch, loss, P0), rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(g, _fd(loss, P0), rtol=1e-5, atol=1e-8)


def test_closures_every_request_and_order(monkeypatch, spy):
    def states(p):
        k, y0 = p[0], p[1:]
        sol = solve_ivp(lambda t, y: -k * y + np.sin(t) * y[::-1], (0.0, 2.0), y0, t_eval=[0.5, 1.0, 2.0],
                        rtol=1e-10, atol=1e-12)
        return sol.y

    p = np.array([0.8, 1.0, -0.5])
    jac = tg.jacobian(states)(p)
    assert spy and all(spy)
    y, pull = tg.vjp(states, p)
    rows = np.stack([pull(e.reshape(y.shape))[0] for e in np.eye(y.size)]).reshape(y.shape + p.shape)
    np.testing.assert_array_equal(jac, rows)
    np.testing.assert_array_equal(tg.jacobian(states, chunk_size=4)(p), rows)
    np.testing.assert_allclose(tg.jacfwd(states)(p), rows, rtol=1e-10, atol=1e-12)
    with monkeypatch.context() as m:
        m.setattr(integrate.Collocation, "_first_order", lambda self: None)
        chord = tg.jacobian(states)(p)
    np.testing.assert_allclose(jac, chord, rtol=1e-10, atol=1e-12)
    fd = np.stack([(states(p + 1e-6 * e) - states(p - 1e-6 * e)) / 2e-6 for e in np.eye(3)], axis=-1)
    np.testing.assert_allclose(jac, fd, rtol=1e-6, atol=1e-8)
    # second order: two tapes reach the solve, the chord steps
    spy.clear()
    hess = tg.hessian(lambda p: np.sum(states(p) ** 2))(p)
    assert not any(spy)
    np.testing.assert_allclose(hess, hess.T, rtol=1e-7, atol=1e-9)


def test_a_closure_the_columns_cannot_take_runs_the_chord_step(monkeypatch, spy):
    def loss(k):
        # np.array([.., cos(t)]) is ragged for an array of times: neither column-wise form applies
        sol = solve_ivp(lambda t, y: -k * y + np.array([0.0, 0.1 * np.cos(t)]), (0.0, 2.0), [1.0, 0.5],
                        t_eval=[1.0, 2.0], rtol=1e-10, atol=1e-12)
        return np.sum(sol.y ** 2)

    g = tg.grad(loss)(0.7)
    assert spy and not any(spy)
    np.testing.assert_allclose(g, _fd(loss, 0.7), rtol=1e-6)


def test_input_arrays_are_not_mutated_and_float32_args(spy):
    th = TH.astype(np.float32)
    keep = th.copy()

    def loss(th):
        sol = solve_ivp(lotka, (0.0, 2.0), [10.0, 5.0], t_eval=[2.0], args=(th,), rtol=1e-8, atol=1e-10)
        return np.sum(sol.y)

    g = tg.grad(loss)(th)
    assert spy and all(spy)
    assert g.dtype == np.float32
    np.testing.assert_array_equal(th, keep)
    np.testing.assert_allclose(g, _fd(loss, TH.astype(float)), rtol=1e-4)


def test_infinite_derivatives_leave_the_values_alone(monkeypatch, spy):
    # d f / d th[1] is infinite at th[1] = 0 (sqrt): the first-order path would multiply an infinite
    # sensitivity by an exact zero, so it hands the solve to the chord step, which keeps SciPy's values
    def loss(th):
        sol = solve_ivp(lambda t, y, th: -th[0] * y + np.sqrt(th[1]), (0.0, 1.0), [1.0], t_eval=[1.0], args=(th,))
        return sol.y[0, 0]

    th = np.array([0.5, 0.0])
    with np.errstate(all="ignore"):
        value, g = tg.value_and_grad(loss)(th)
        chord = _chord(monkeypatch, loss, th)
    assert spy and not any(spy)
    assert value == loss(th)
    np.testing.assert_array_equal(g, chord)
    assert np.isfinite(g[0]) and np.isinf(g[1])


# ---------------------------------------------------------------------- the column-wise evaluation
@pytest.fixture
def columns(monkeypatch):
    """Records whether each column-wise Jacobian was kept (True) or handed to the recording per point."""
    from tapegrad.solvers import _sensitivity

    kept = []
    original = _sensitivity.columns_jacobian

    def spying(*args):
        found = original(*args)
        kept.append(found is not None)
        return found

    monkeypatch.setattr(integrate, "columns_jacobian", spying)
    return kept


def coupled_sum(t, y, th):  # np.sum over the whole state: over every column too, when called column-wise
    return np.stack([th[0] * y[0] - th[1] * y[0] * y[1], th[2] * y[0] * y[1] - th[3] * y[1]]) * (
        1.0 + 1e-3 * np.sum(y) / 15.0)


def forced_by_t(t, y, th):  # np.array([0.0, cos(t)]) is ragged for an array of times: column-wise refused
    forcing = np.array([0.0, 0.01 * np.cos(t)])
    return np.stack([th[0] * y[0] - th[1] * y[0] * y[1], th[2] * y[0] * y[1] - th[3] * y[1]]) + forcing


def flattens(t, y, th):  # np.outer(y, y): another shape column-wise
    m = np.outer(y, y)
    return np.stack([th[0] * y[0] - th[1] * m[0, 1], th[2] * m[0, 1] - th[3] * y[1]])


@pytest.mark.parametrize("rhs, kept", [(lotka, True), (coupled_sum, False), (forced_by_t, False), (flattens, False)],
                         ids=["pointwise", "sum_over_state", "array_of_t", "outer"])
def test_column_wise_only_where_it_is_the_callback(monkeypatch, spy, columns, rhs, kept):
    def loss(th):
        sol = solve_ivp(rhs, (0.0, 4.0), [10.0, 5.0], t_eval=TIMES, args=(th,), rtol=1e-9, atol=1e-11)
        return np.sum(sol.y ** 2) / 100.0

    g = tg.grad(loss)(TH)
    assert spy and all(spy)  # the first-order path either way
    assert columns and all(c == kept for c in columns)
    np.testing.assert_allclose(g, _chord(monkeypatch, loss, TH), rtol=1e-10)
    np.testing.assert_allclose(g, _fd(loss, TH), rtol=1e-5)


def test_the_jacobian_check_catches_coupled_columns(monkeypatch, columns):
    # Values that agree column by column cannot hide a coupling from the Jacobian check: with the
    # value check switched off, y - mean over the last axis (the columns, when called column-wise)
    # must still be refused.
    from tapegrad.solvers import _sensitivity

    monkeypatch.setattr(_sensitivity, "_agrees", lambda *args: True)

    def centred(t, y, th):
        return -th[0] * (y - np.mean(y, axis=-1, keepdims=True)) - th[1] * y

    def loss(th):
        sol = solve_ivp(centred, (0.0, 2.0), [1.0, -0.5, 0.25], t_eval=[0.5, 1.0, 2.0], args=(th,), rtol=1e-9,
                        atol=1e-11)
        return np.sum(sol.y ** 2)

    th = np.array([0.7, 0.2])
    g = tg.grad(loss)(th)
    assert columns and not any(columns)
    np.testing.assert_allclose(g, _fd(loss, th), rtol=1e-5)


def test_blocks_of_columns_give_the_one_call(monkeypatch, columns):
    from tapegrad.solvers import _sensitivity

    n = 6

    def decay(t, y, a):
        return -a[:n] * y + a[n:] * np.cos(t)

    def loss(a):
        sol = solve_ivp(decay, (0.0, 3.0), np.linspace(1.0, 2.0, n), args=(a,), t_eval=[1.0, 2.0, 3.0], rtol=1e-9,
                        atol=1e-11)
        return np.sum(sol.y ** 2)

    a = np.concatenate([np.linspace(0.5, 1.5, n), np.linspace(-0.2, 0.3, n)])
    whole = tg.grad(loss)(a)
    monkeypatch.setattr(_sensitivity, "COLUMN_VALUES", 8 * n * 3 * n)  # blocks of 48 columns
    blocks = tg.grad(loss)(a)
    assert columns and all(columns)
    np.testing.assert_allclose(blocks, whole, rtol=1e-13)
    np.testing.assert_allclose(whole, _fd(loss, a), rtol=1e-6, atol=1e-9)


def test_many_parameters_take_the_adjoint_of_the_recursion(monkeypatch, spy):
    # A weight matrix of a small neural right-hand side: n x m forward sensitivities per node
    # would be large, so the stages come from the recursion's adjoint (the same numbers).
    rng = np.random.default_rng(3)
    w1, w2 = 0.3 * rng.standard_normal((16, 2)), 0.3 * rng.standard_normal((2, 16))

    def net(t, y, a, b):
        return b @ np.tanh(a @ y) - 0.1 * y

    def loss(weights):
        a, b = weights[:32].reshape(16, 2), weights[32:].reshape(2, 16)
        sol = solve_ivp(net, (0.0, 2.0), [1.0, -0.5], t_eval=[1.0, 2.0], args=(a, b), rtol=1e-9, atol=1e-11)
        return np.sum(sol.y ** 2)

    weights = np.concatenate([w1.ravel(), w2.ravel()])
    small = tg.grad(loss)(weights)
    monkeypatch.setattr(integrate, "SENSITIVITY_VALUES", 10)
    adjoint = tg.grad(loss)(weights)
    assert spy and all(spy)
    np.testing.assert_allclose(adjoint, small, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(adjoint, _chord(monkeypatch, loss, weights), rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(adjoint, _fd(loss, weights), rtol=1e-5, atol=1e-8)


# ---------------------------------------------------------------------- second order: the chord step on columns
def _per_node_hessian(monkeypatch, f, x):
    with monkeypatch.context() as m:
        m.setattr(integrate, "columns_jacobian", lambda *args: None)
        return tg.hessian(f)(x)


@pytest.mark.parametrize("method", ["RK45", "Radau"])
def test_hessians_call_the_right_hand_side_once_per_chord_step(monkeypatch, method):
    calls = []

    def counted(t, y, th):
        calls.append(np.ndim(t))
        return lotka(t, y, th)

    def loss(p):
        sol = solve_ivp(counted, (0.0, 3.0), p[:2], t_eval=[1.0, 2.0, 3.0], args=(p[2:],), method=method,
                        rtol=1e-9, atol=1e-11)
        return np.sum(sol.y ** 2) / 100.0

    hess = tg.hessian(loss)(P0)
    on_columns = len(calls)
    calls.clear()
    per_node = _per_node_hessian(monkeypatch, loss, P0)
    # node by node, each of the two chord steps calls it once per collocation node (over 100 nodes here);
    # on columns, once per chord step
    assert len(calls) - on_columns > 200
    np.testing.assert_allclose(hess, per_node, rtol=1e-9, atol=1e-12)
    grad, h = tg.grad(loss), 1e-5
    fd = np.stack([(grad(P0 + h * e) - grad(P0 - h * e)) / (2 * h) for e in np.eye(P0.size)])
    np.testing.assert_allclose(hess, fd, rtol=1e-4, atol=1e-6)


def test_closure_hessian_and_hvp(monkeypatch):
    def loss(p):
        k, y0 = p[0], p[1:]
        sol = solve_ivp(lambda t, y: -k * y + 0.3 * np.sin(t) * y[::-1], (0.0, 2.0), y0, t_eval=[0.5, 2.0],
                        rtol=1e-10, atol=1e-12)
        return np.sum(sol.y ** 3)

    p = np.array([0.8, 1.0, -0.5])
    hess = tg.hessian(loss)(p)
    np.testing.assert_allclose(hess, _per_node_hessian(monkeypatch, loss, p), rtol=1e-9, atol=1e-12)
    v = np.array([0.3, -1.0, 2.0])
    np.testing.assert_allclose(tg.hvp(loss)(p, v), hess @ v, rtol=1e-9, atol=1e-12)


def test_kinked_right_hand_side_pieces_at_second_order(monkeypatch):
    def loss(p):
        # a switch where y[0] crosses 0.5: the pieces' chord steps run column-wise too
        sol = solve_ivp(lambda t, y, a: np.array([-a[0] * np.maximum(y[0] - 0.5, 0.0) - a[1] * y[0]]),
                        (0.0, 3.0), [2.0], t_eval=[1.0, 3.0], args=(p,), rtol=1e-10, atol=1e-12)
        return np.sum(sol.y ** 2)

    p = np.array([1.5, 0.2])
    hess = tg.hessian(loss)(p)
    np.testing.assert_allclose(hess, _per_node_hessian(monkeypatch, loss, p), rtol=1e-8, atol=1e-11)
    grad, h = tg.grad(loss), 1e-5
    fd = np.stack([(grad(p + h * e) - grad(p - h * e)) / (2 * h) for e in np.eye(2)])
    np.testing.assert_allclose(hess, fd, rtol=1e-4, atol=1e-7)


def test_a_right_hand_side_that_writes_into_its_state(monkeypatch):
    # y[y < 0] = 0 inside the callback: the solver's own arrays must not change under it
    def clipped(t, y, k):
        y = y.copy() if not isinstance(y, np.ndarray) else y
        y[1] = y[1] * 1.0  # an in-place write into the state it was given
        return np.stack([-k[0] * y[0] + 0.1 * y[1], -k[1] * y[1]])

    def loss(k):
        sol = solve_ivp(clipped, (0.0, 2.0), [1.0, 2.0], t_eval=[0.5, 1.0, 2.0], args=(k,), rtol=1e-10, atol=1e-12)
        return np.sum(sol.y ** 2)

    k = np.array([0.7, 0.4])
    g = tg.grad(loss)(k)
    np.testing.assert_allclose(g, _fd(loss, k), rtol=1e-6)
    hess = tg.hessian(loss)(k)
    np.testing.assert_allclose(hess, _per_node_hessian(monkeypatch, loss, k), rtol=1e-8, atol=1e-12)
