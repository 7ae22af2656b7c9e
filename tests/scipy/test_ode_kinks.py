"""ODE derivatives through right-hand sides with kinks (tapegrad.solvers._kinks).

``np.maximum``, ``np.minimum``, ``np.abs``, ``np.where`` on a comparison, ``np.clip``,
``np.sign``, ``np.heaviside`` and ``np.floor`` in a right-hand side switch between
smooth pieces along the solution; tapegrad splits its collocation there and crosses
each switch with the switch time's own derivative.  Checked against closed forms
(a kink, a jump and a sign change at a parameter-dependent time; switches in time;
backward integration; odeint; a vectorized right-hand side), first and second order,
for every ``solve_ivp`` method, and a small neural ODE against central differences of
a reference that integrates piece by piece (a terminal event at every switch, each
piece with its branch fixed, so that the reference is smooth in the parameters:
finite differences of SciPy's own solve across a kink are not, even at rtol 1e-10).
Sliding along a switching surface, and a second derivative that needs a float time,
are refused.
"""

import math

import numpy as np
import pytest
from scipy.integrate import odeint, solve_ivp

import tapegrad as tg
from tapegrad.errors import NonDifferentiableArgumentError

METHODS = ["RK45", "RK23", "DOP853", "Radau", "BDF", "LSODA"]
T = 3.0


def rel(a, b):
    return float(np.linalg.norm(np.ravel(a) - np.ravel(b)) / np.linalg.norm(np.ravel(b)))


# ---------------------------------------------------------------------- closed forms
# p' = w, s' = k g(p - 1), p(0) = p0, s(0) = 0: p crosses 1 at tau = (1 - p0) / w.
PIECES = {
    "kink": (lambda u: np.maximum(u, 0.0), lambda k, w, p0: k * (w * T + p0 - 1) ** 2 / (2 * w)),
    "jump": (lambda u: np.where(u > 0, 1.0, 0.0), lambda k, w, p0: k * (T - (1 - p0) / w)),
    "sign": (lambda u: np.sign(u), lambda k, w, p0: k * (T - 2 * (1 - p0) / w)),
}


def switched(theta, kind, method, rtol=1e-6):
    k, w, p0 = theta[0], theta[1], theta[2]
    g = PIECES[kind][0]
    sol = solve_ivp(lambda t, y: np.stack([w + 0.0 * y[0], k * g(y[0] - 1.0)]), (0.0, T), np.stack([p0, 0.0 * p0]),
                    method=method, rtol=rtol, atol=rtol * 1e-2)
    return sol.y[1, -1]


def exact(theta, kind):
    return PIECES[kind][1](theta[0], theta[1], theta[2])


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", ["kink", "jump", "sign"])
def test_switch_at_a_parameter_dependent_time_closed_form_first_and_second_order(kind, method):
    # The switch time moves with w and p0: for a jump (and a sign change) it moves the
    # solution at first order; for a kink only at second order.  Collocation across the
    # switch used to leave ~1e-3 whatever the tolerance.
    theta = np.array([0.7, 0.8, 0.2])
    g = tg.grad(lambda th: switched(th, kind, method))(theta)
    assert rel(g, tg.grad(lambda th: exact(th, kind))(theta)) < 1e-9
    h = tg.hessian(lambda th: switched(th, kind, method))(theta)
    assert rel(h, tg.hessian(lambda th: exact(th, kind))(theta)) < 1e-9


# Kinks at a time that moves with the parameter, in a right-hand side that depends on the time:
# y' = g(t, p), y(0) = 0, y(2) in closed form.  The Hessian's crossing stepped back along the
# right piece from b instead of b + delta (found by tests/test_wild_scipy_programs.py).
TIME_KINKS = {
    "max": (lambda t, p: np.maximum(t - p, 0.0), lambda p: (2.0 - p) ** 2 / 2),
    "abs": (lambda t, p: np.abs(t - p), lambda p: p**2 / 2 + (2.0 - p) ** 2 / 2),
    "scaled": (lambda t, p: np.maximum(p * t - 1.0, 0.0), lambda p: 2 * p + 1 / (2 * p) - 2.0),
    "relay": (lambda t, p: np.where(t > p, t, 0.0), lambda p: 2.0 - p**2 / 2),
}


@pytest.mark.parametrize("method", ["RK45", "Radau", "LSODA"])
@pytest.mark.parametrize("kind", sorted(TIME_KINKS))
def test_time_kink_moving_with_the_parameter_first_and_second_order(kind, method):
    g, closed = TIME_KINKS[kind]

    def f(p):
        sol = solve_ivp(lambda t, y: [g(t, p) + 0.0 * y[0]], (0.0, 2.0), [0.0], method=method, rtol=1e-10, atol=1e-12)
        return sol.y[0, -1]

    p = 0.9
    np.testing.assert_allclose(tg.grad(f)(p), tg.grad(closed)(p), rtol=1e-7)
    np.testing.assert_allclose(tg.hessian(f)(p), tg.hessian(closed)(p), rtol=1e-6)


def test_odeint_kink_closed_form_first_and_second_order():
    def s_end(theta):
        k, w, p0 = theta[0], theta[1], theta[2]
        ys = odeint(lambda y, t: np.stack([w + 0.0 * y[0], k * np.maximum(y[0] - 1.0, 0.0)]),
                    np.stack([p0, 0.0 * p0]), np.array([0.0, 1.0, T]), rtol=1e-8, atol=1e-10)
        return ys[-1, 1]

    theta = np.array([0.7, 0.8, 0.2])
    assert rel(tg.grad(s_end)(theta), tg.grad(lambda th: exact(th, "kink"))(theta)) < 1e-9
    assert rel(tg.hessian(s_end)(theta), tg.hessian(lambda th: exact(th, "kink"))(theta)) < 1e-9


def test_switch_in_time_at_an_output_time_and_floor_forcing():
    # y' = -y + a [t > 1.3], with 1.3 among the output times.
    ts = np.array([0.5, 1.3, 2.0])

    def y(a):
        sol = solve_ivp(lambda t, y: -y + np.where(t > 1.3, a, 0.0), (0.0, 2.0), np.array([1.0]), t_eval=ts,
                        rtol=1e-6, atol=1e-9)
        return sol.y[0]

    expected = np.where(ts > 1.3, 1 - np.exp(-(ts - 1.3)), 0.0)
    assert np.allclose(tg.jacobian(y)(0.7), expected, rtol=2e-5, atol=1e-10)  # 20 x rtol: the pieces are smooth
    assert np.allclose(tg.jacobian(tg.jacobian(y))(0.7), 0.0, atol=1e-10)

    def stairs(k):  # y' = k floor(t) from 0 to 3.5: k (0 + 1 + 2 + 0.5 * 3)
        return solve_ivp(lambda t, y: k * np.floor(t) + 0.0 * y, (0.0, 3.5), np.array([0.0]), rtol=1e-8).y[0, -1]

    assert np.isclose(tg.grad(stairs)(0.7), 4.5, rtol=1e-10)


def test_backward_in_time_and_vectorized():
    def back(c):  # from t = 2 back to 0 along y' = -max(y - c, 0): y(0) = c + (0.5 - c) e^2
        return solve_ivp(lambda t, y: -np.maximum(y - c, 0.0), (2.0, 0.0), np.array([0.5]), rtol=1e-8,
                         atol=1e-10).y[0, -1]

    assert np.isclose(tg.grad(back)(0.3), 1 - np.exp(2.0), rtol=1e-9)
    assert abs(tg.hessian(back)(0.3)) < 1e-8

    def floored(k):  # y' = -k max(y, 0.2) from 1: y(3) = 0.2 - 0.6 k + 0.2 ln 5 once y reaches 0.2
        return solve_ivp(lambda t, y: -k * np.maximum(y, 0.2), (0.0, 3.0), np.array([1.0, 2.0]), vectorized=True,
                         rtol=1e-8, atol=1e-10).y[:, -1]

    assert np.allclose(tg.jacobian(floored)(0.9), [-0.6, -0.6], rtol=1e-9)


def test_dense_output_and_terminal_event_after_switches():
    # y0' = max(y1, 0), y1' = k sign(1 - t), y(0) = (0, -0.5); the run stops where y0 = 0.1.
    def landing(k, rtol=1e-11):
        def hit(t, y):
            return y[0] - 0.1

        hit.terminal = True
        sol = solve_ivp(lambda t, y: np.stack([np.maximum(y[1], 0.0), k * np.sign(1.0 - t) + 0.0 * y[1]]),
                        (0.0, 10.0), np.array([0.0, -0.5]), events=hit, dense_output=True, rtol=rtol, atol=rtol * 1e-2)
        return sol.t_events[0][0], sol.sol(0.8)[1]

    def closed(k):
        p = k - 0.5  # y1 at t = 1; the positive part before it has area p^2 / (2k)
        return 1 + (p - np.sqrt(p**2 - 2 * k * (0.1 - p**2 / (2 * k)))) / k, -0.5 + 0.8 * k

    (dt, dy), (et, ey) = [tg.jacobian(lambda k: np.stack(f(k)))(0.8) for f in (landing, closed)]
    assert np.isclose(dt, et, rtol=1e-7) and np.isclose(dy, ey, rtol=1e-9)


# ---------------------------------------------------------------------- a small neural ODE
N, M, T_NODE = 2, 5, 3.0
_rng = np.random.default_rng(7)
W1 = _rng.normal(size=(M, N))
B1 = _rng.normal(size=M) * 0.2
W2 = _rng.normal(size=(N, M)) * 0.4
B2 = _rng.normal(size=N) * 0.2
ROT = np.array([[-0.2, -2.0], [2.0, -0.2]])  # a damped rotation: the hidden units switch again and again
Y0 = np.array([1.2, -0.4])
THETA = np.concatenate([W1.ravel(), B1, W2.ravel(), B2, Y0])
T_EVAL = np.array([1.0, 2.0, T_NODE])
WEIGHTS = np.array([[0.7, -1.1], [0.3, 0.5], [-0.4, 0.9]])

# Each activation: its NumPy form, and per unit the thresholds where it switches with the
# value on each piece (the reference integrates piece by piece, its piece fixed).
ACTIVATIONS = {
    "maximum": (lambda o: np.maximum(0.0, o), [0.0], lambda o, p: np.where(p > 0, o, 0.0)),
    "abs": (lambda o: np.abs(o), [0.0], lambda o, p: np.where(p > 0, o, -o)),
    "where": (lambda o: np.where(o > 0, o, 0.1 * o), [0.0], lambda o, p: np.where(p > 0, o, 0.1 * o)),
    "minimum": (lambda o: np.minimum(o, 0.3), [0.3], lambda o, p: np.where(p > 0, 0.3, o)),
    "clip": (lambda o: np.clip(o, -0.3, 0.3), [-0.3, 0.3],
             lambda o, p: np.where(p == 2, 0.3, np.where(p == 0, -0.3, o))),
    "sign": (lambda o: o + 0.3 * np.sign(o), [0.0], lambda o, p: o + 0.3 * np.where(p > 0, 1.0, -1.0)),
    "heaviside": (lambda o: 0.5 * o + np.heaviside(o, 0.5), [0.0], lambda o, p: 0.5 * o + np.where(p > 0, 1.0, 0.0)),
}


def unpack(th):
    w1 = th[: M * N].reshape(M, N)
    b1 = th[M * N: M * N + M]
    w2 = th[M * N + M: M * N + M + N * M].reshape(N, M)
    b2 = th[M * N + M + N * M: M * N + M + N * M + N]
    return w1, b1, w2, b2, th[-N:]


def node_loss(th, act, method, rtol):
    """A linear functional of the states at the output times: its gradient is the sensitivities' alone."""
    w1, b1, w2, b2, y0 = unpack(th)
    f = ACTIVATIONS[act][0]

    def rhs(t, y):
        return w2 @ f(w1 @ y + b1) + b2 + ROT @ y

    if method == "odeint":
        ys = odeint(lambda y, t: rhs(t, y), y0, np.concatenate([[0.0], T_EVAL]), rtol=rtol, atol=rtol * 1e-2)[1:]
    else:
        ys = solve_ivp(rhs, (0.0, T_NODE), y0, method=method, t_eval=T_EVAL, rtol=rtol, atol=rtol * 1e-2).y.T
    return np.sum(WEIGHTS * ys)


def reference_loss(th, act, tol=1e-12):
    """``node_loss`` integrated piece by piece: a terminal event at every switch, each piece's branch fixed."""
    w1, b1, w2, b2, y0 = unpack(th)
    _, thresholds, piece = ACTIVATIONS[act]

    def code(o):  # the piece of each unit: how many thresholds it is above
        return sum((o > c).astype(int) for c in thresholds)

    t, y, p = 0.0, y0, code(w1 @ y0 + b1)
    total, direction = 0.0, {}
    while True:
        events = []
        for k in range(M):
            for c in thresholds:
                event = (lambda k, c: lambda t, y, p: w1[k] @ y + b1[k] - c)(k, c)
                event.terminal, event.direction = True, direction.get((k, c), 0.0)
                events.append((event, k, c))
        ahead = [s for s in T_EVAL if s > t]
        sol = solve_ivp(lambda t, y, p: w2 @ piece(w1 @ y + b1, p) + b2 + ROT @ y, (t, T_NODE), y,
                        method="DOP853", t_eval=ahead, args=(p,), events=[e for e, _, _ in events], rtol=tol, atol=tol)
        if np.size(sol.t):
            total += np.sum(WEIGHTS[T_EVAL.size - len(ahead):][: np.size(sol.t)] * np.asarray(sol.y).T)
        if sol.status != 1:
            return total
        i = next(i for i, e in enumerate(sol.t_events) if e.size)
        _, k, c = events[i]
        t, y = sol.t_events[i][0], sol.y_events[i][0]
        rate = w1[k] @ (w2 @ piece(w1 @ y + b1, p) + b2 + ROT @ y)
        p = p.copy()
        p[k] += 1 if rate > 0 else -1
        direction = {(k, c): -np.sign(rate)}


def directional(fun, x, v, eps=2e-3):
    """Five-point central difference of ``fun`` along ``v``."""
    f = [fun(x + s * eps * v) for s in (-2, -1, 1, 2)]
    return (f[0] - 8 * f[1] + 8 * f[2] - f[3]) / (12 * eps)


CASES = [  # every activation, every method
    ("maximum", "RK45"), ("maximum", "odeint"), ("abs", "DOP853"), ("where", "Radau"), ("minimum", "BDF"),
    ("clip", "LSODA"), ("clip", "RK45"), ("sign", "RK23"), ("sign", "LSODA"), ("heaviside", "DOP853"),
]


@pytest.mark.parametrize("act, method", CASES)
def test_neural_ode_gradient_against_a_reference_split_at_the_switches(act, method):
    rtol = 1e-6
    g = tg.grad(lambda th: node_loss(th, act, method, rtol))(THETA)
    rng = np.random.default_rng(1)
    for _ in range(2):
        v = rng.normal(size=THETA.size)
        v /= np.linalg.norm(v)
        expected = directional(lambda th: reference_loss(th, act), THETA, v)
        assert abs(g @ v - expected) <= 20 * rtol * np.linalg.norm(g)


def test_neural_ode_switches_many_times():
    # The test problem is the point: each hidden unit's sign changes along the solution.
    w1, b1, _, _, _ = unpack(THETA)
    sol = solve_ivp(lambda t, y: W2 @ np.maximum(0.0, W1 @ y + B1) + B2 + ROT @ y, (0.0, T_NODE), Y0,
                    dense_output=True, rtol=1e-10, atol=1e-12)
    o = w1 @ sol.sol(np.linspace(0.0, T_NODE, 3001)) + b1[:, None]
    assert np.count_nonzero(np.diff(np.sign(o), axis=1)) >= 8


def _of_y0(y0, act, method, rtol):
    return node_loss(np.concatenate([THETA[:-N], y0]), act, method, rtol)


def _of_scale(s, act, method, rtol):  # a scale of the first layer
    return node_loss(np.concatenate([THETA[: M * N] * s, THETA[M * N:]]), act, method, rtol)


@pytest.mark.parametrize("act, method, fun, x", [("maximum", "Radau", _of_y0, Y0),
                                                 ("sign", "RK45", _of_scale, np.array(1.0))])
def test_neural_ode_hessian_against_central_differences_of_the_gradient(act, method, fun, x):
    # Second order against differences of gradients at a tight tolerance (accurate, as checked above).
    h = tg.hessian(lambda z: fun(z, act, method, 1e-8))(x)
    grad = tg.grad(lambda z: fun(z, act, "DOP853", 1e-10))
    cols = [directional(grad, x, e, eps=1e-3) for e in np.eye(np.size(x)).reshape(-1, *np.shape(x))]
    assert rel(h, np.stack(cols, axis=-1).reshape(np.shape(h))) < 1e-6


# ---------------------------------------------------------------------- time as a float; refusals
def test_right_hand_side_that_needs_a_float_time():
    def y_end(k, rtol=1e-10):
        return solve_ivp(lambda t, y: -k * np.maximum(y - 0.3, 0.0) - 0.3 + 0.1 * math.sin(t), (0.0, 3.0),
                         np.array([1.0]), rtol=rtol, atol=rtol * 1e-2).y[0, -1]

    def reference(k):  # the same, split at the switch by an event
        def down(t, y):
            return y[0] - 0.3

        down.terminal = True
        first = solve_ivp(lambda t, y: -k * (y - 0.3) - 0.3 + 0.1 * np.sin(t), (0.0, 3.0), [1.0], events=down,
                          rtol=1e-13, atol=1e-14)
        t1, y1 = first.t_events[0][0], first.y_events[0][0]
        return solve_ivp(lambda t, y: -0.3 + 0.1 * np.sin(t) + 0.0 * y, (t1, 3.0), y1, rtol=1e-13, atol=1e-14).y[0, -1]

    assert np.isclose(tg.grad(y_end)(0.9), (reference(0.9 + 1e-5) - reference(0.9 - 1e-5)) / 2e-5, rtol=1e-7)
    with pytest.raises(NonDifferentiableArgumentError, match="float"):
        tg.hessian(y_end)(0.9)


def test_sliding_mode_is_refused():
    # y' = -sign(y) + p reaches 0 at t = 0.2 / 0.9 and chatters there: no smooth piece carries the solution.
    def y_end(p):
        return solve_ivp(lambda t, y: -np.sign(y) + p, (0.0, 0.3), np.array([0.2]), rtol=1e-6).y[0, -1]

    with pytest.raises(NonDifferentiableArgumentError, match="switching surface"):
        tg.grad(y_end)(0.1)


def test_probe_reads_the_switches_of_kinked_calls_in_program_order():
    from tapegrad.solvers._kinks import Probe

    def rhs(t, y):
        o = np.where(y > 0.5, y, 0.1 * y)  # the comparison y > 0.5: y - 0.5
        return np.clip(o, -1.0, 1.0) + np.abs(t - 1.0) * np.tanh(y)  # clip: o + 1, then o - 1; |t - 1|: t - 1

    values = Probe(rhs)(2.0, np.array([0.7, -2.0]))
    expected = [[0.2, -2.5], [1.7, 0.8], [-0.3, -1.2], [1.0]]
    assert [list(np.round(v, 12)) for v in values] == expected
    assert Probe(lambda t, y: np.tanh(y) * t).finds(0.0, np.array([1.0])) is False
