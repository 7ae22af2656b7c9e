"""Derivatives through scipy.integrate's solvers (tapegrad.solvers.integrate).

ODE solutions are checked against closed forms (linear decay, a stiff linear
system through the matrix exponential, logistic growth, a ball's flight time)
and central finite differences of the solver at tight tolerances, at first and
second order, for every solve_ivp method, with parameters reached through
closures and ``args=``, traced initial states and time points, dense output
and events.  Quadrature is checked against closed forms (Gaussian integrals,
Leibniz's rule) on finite, infinite and reversed ranges.
"""

import numpy as np
import pytest
import scipy.integrate
import scipy.integrate as si
import scipy.linalg
from scipy import integrate
from scipy.integrate import odeint, quad, solve_ivp

import tapegrad as tg
from tapegrad.errors import GradientDroppedError, NonDifferentiableArgumentError
from tapegrad.testing import check_grads

TIGHT = dict(rtol=1e-10, atol=1e-12)
METHODS = ["RK45", "RK23", "DOP853", "Radau", "BDF", "LSODA"]


def fd(fun, x, eps=1e-4):
    """Five-point central difference in a scalar (any output shape)."""
    f = [np.asarray(fun(x + k * eps)) for k in (-2, -1, 1, 2)]
    return (f[0] - 8 * f[1] + 8 * f[2] - f[3]) / (12 * eps)


# ---------------------------------------------------------------------- solve_ivp
def test_radau_iia_coefficients_match_the_textbook_three_stage_method():
    from tapegrad.solvers.integrate import radau_iia

    c, a, _ = radau_iia(3)
    r6 = np.sqrt(6.0)
    assert np.allclose(c, [(4 - r6) / 10, (4 + r6) / 10, 1.0], rtol=1e-14)
    assert np.allclose(a, [[(88 - 7 * r6) / 360, (296 - 169 * r6) / 1800, (-2 + 3 * r6) / 225],
                           [(296 + 169 * r6) / 1800, (88 + 7 * r6) / 360, (-2 - 3 * r6) / 225],
                           [(16 - r6) / 36, (16 + r6) / 36, 1 / 9]], rtol=1e-12)



@pytest.mark.parametrize("method", METHODS)
def test_linear_decay_every_method_closed_form_first_and_second_order(method):
    ts = np.array([0.5, 1.0, 2.0])

    def y(k, y0):  # y' = -k y: y0 exp(-k t); k through a closure
        tol = dict(rtol=1e-8, atol=1e-10) if method == "RK23" else TIGHT
        sol = solve_ivp(lambda t, y: -k * y, (0.0, 2.0), np.array([y0]), method=method, t_eval=ts, **tol)
        return sol.y[0]

    k, y0 = 0.7, 1.3
    jk, jy0 = tg.jacobian(y, argnums=(0, 1))(k, y0)
    rtol = 1e-6 if method == "RK23" else 1e-8
    assert np.allclose(jk, -ts * y0 * np.exp(-k * ts), rtol=rtol)
    assert np.allclose(jy0, np.exp(-k * ts), rtol=rtol)
    hk = tg.hessian(lambda k: y(k, y0)[2])(k)
    assert np.isclose(hk, 4.0 * y0 * np.exp(-2 * k), rtol=rtol)


def test_third_order_decay_closed_form():
    def y(k):
        return solve_ivp(lambda t, y: -k * y, (0.0, 2.0), [1.0], rtol=1e-11, atol=1e-13).y[0, -1]

    assert np.isclose(tg.jacobian(tg.jacobian(tg.grad(y)))(0.7), -8 * np.exp(-1.4), rtol=1e-8)


def oscillator(t, y, w, c):
    return np.array([y[1], -(w**2) * y[0] - c * y[1]])


def test_args_vector_state_and_end_time_against_finite_differences():
    def final(y0, w, c, T):
        return scipy.integrate.solve_ivp(oscillator, (0.0, T), y0, args=(w, c), **TIGHT).y[:, -1]

    y0, w, c, T = np.array([1.0, 0.2]), 1.3, 0.1, 2.0
    jy0, jw, jc, jT = tg.jacobian(final, argnums=(0, 1, 2, 3))(y0, w, c, T)
    assert np.allclose(jy0, np.stack([fd(lambda s: final(y0 + s * e, w, c, T), 0.0) for e in np.eye(2)], -1),
                       rtol=1e-7, atol=1e-9)
    assert np.allclose(jw, fd(lambda s: final(y0, s, c, T), w), rtol=1e-7, atol=1e-9)
    assert np.allclose(jc, fd(lambda s: final(y0, w, s, T), c), rtol=1e-7, atol=1e-9)
    assert np.allclose(jT, oscillator(T, final(y0, w, c, T), w, c), rtol=1e-9)  # dy/dT = f
    # second order in w, and a batch of cotangents equals stacked single VJPs
    hw = tg.jacobian(tg.jacobian(lambda w: final(y0, w, c, T)))(w)
    assert np.allclose(hw, fd(lambda s: tg.jacobian(lambda w: final(y0, w, c, T))(s), w), rtol=1e-6, atol=1e-8)
    _, vjp = tg.vjp(lambda w: final(y0, w, c, T), w)
    assert np.allclose(vjp(np.eye(2))[0], [vjp(e)[0] for e in np.eye(2)], rtol=1e-12)


@pytest.mark.parametrize("method", ["Radau", "BDF", "LSODA"])
def test_stiff_linear_system_matches_matrix_exponential(method):
    def mat(k):
        return np.array([[-1000.0, k], [0.0, -1.0]])

    def y(k):
        return solve_ivp(lambda t, y: mat(k) @ y, (0.0, 1.0), np.array([1.0, 1.0]), method=method,
                         t_eval=[0.1, 1.0], rtol=1e-8, atol=1e-11).y

    def exact(k):
        return np.stack([scipy.linalg.expm(mat(k) * t) @ np.ones(2) for t in (0.1, 1.0)], axis=1)

    k = 3.0
    assert np.allclose(tg.jacobian(y)(k), fd(exact, k), rtol=1e-5, atol=1e-10)
    assert np.allclose(tg.jacobian(tg.jacobian(y))(k), 0.0, atol=1e-9)  # linear in k: exp is, here


def test_traced_t_eval_and_start_time():
    def y(te, t0, k):
        return solve_ivp(lambda t, y: -k * y + np.sin(t), (t0, 3.0), [1.0], t_eval=te, **TIGHT).y[0]

    te, t0, k = np.array([0.5, 1.5, 2.5]), 0.2, 0.8
    jte, jt0, jk = tg.jacobian(y, argnums=(0, 1, 2))(te, t0, k)
    vals = y(te, t0, k)
    assert np.allclose(jte, np.diag(-k * vals + np.sin(te)), rtol=1e-9, atol=1e-12)
    assert np.allclose(jt0, fd(lambda s: y(te, s, k), t0), rtol=1e-7)
    assert np.allclose(jk, fd(lambda s: y(te, t0, s), k), rtol=1e-7)
    check_grads(lambda t: y(np.array([t]), t0, k), (1.5,), eps=1e-4, rtol=1e-6, atol=1e-8, batch=0)


def test_dense_output_sol_is_traced_at_plain_and_traced_times():
    def at(k, t):
        sol = integrate.solve_ivp(lambda t, y: -k * y, (0.0, 3.0), [1.0], dense_output=True, **TIGHT)
        return sol.sol(t)[0]

    k, t = 0.8, 1.7
    gk, gt = tg.grad(at, argnums=(0, 1))(k, t)
    assert np.isclose(gk, -t * np.exp(-k * t), rtol=1e-7)
    assert np.isclose(gt, -k * np.exp(-k * t), rtol=1e-7)
    assert np.isclose(tg.hessian(at)(k, t), t * t * np.exp(-k * t), rtol=1e-6)


def ball(v, g):
    def ground(t, y):
        return y[0]

    ground.terminal, ground.direction = True, -1
    sol = solve_ivp(lambda t, y: [y[1], -g], (0.0, 10.0), [0.0, v], events=ground, **TIGHT)
    return sol.t_events[0][0], sol.t[-1], sol.y[1, -1], sol.y_events[0][0][1]


def test_terminal_event_time_and_final_state_closed_form():
    v, g = 3.0, 9.8
    (tv, tg_), (endv, endg), (vv, vg), (yev, yeg) = tg.jacobian(ball, argnums=(0, 1))(v, g)
    assert np.allclose([tv, tg_], [2 / g, -2 * v / g**2], rtol=1e-9)
    assert np.allclose([endv, endg], [2 / g, -2 * v / g**2], rtol=1e-9)
    assert np.allclose([vv, vg], [-1.0, 0.0], atol=1e-9)  # final velocity -v
    assert np.allclose([yev, yeg], [-1.0, 0.0], atol=1e-9)
    # second order: t_hit = 2 v / g
    assert np.allclose(tg.hessian(lambda g: ball(v, g)[0])(g), 4 * v / g**3, rtol=1e-8)


def test_non_terminal_event_times():
    def crossings(w):  # zeros of cos(w t) for y = (cos w t, -w sin w t)
        def zero(t, y):
            return y[0]

        sol = solve_ivp(lambda t, y: [y[1], -(w**2) * y[0]], (0.0, 5.0), [1.0, 0.0], events=zero, **TIGHT)
        return sol.t_events[0]

    w = 1.3
    n = crossings(w).size
    expected = -(np.pi / 2 + np.pi * np.arange(n)) / w**2
    assert np.allclose(tg.jacobian(crossings)(w), expected, rtol=1e-8)


def test_lotka_volterra_vector_parameters_in_a_closure():
    def prey_predator(theta):
        a, b, c, d = theta[0], theta[1], theta[2], theta[3]

        def rhs(t, z):
            return np.array([a * z[0] - b * z[0] * z[1], -c * z[1] + d * z[0] * z[1]])

        return solve_ivp(rhs, (0.0, 4.0), np.array([1.0, 0.5]), method="DOP853", t_eval=[2.0, 4.0],
                         **TIGHT).y.ravel()

    theta = np.array([1.0, 0.6, 0.8, 0.4])
    J = tg.jacobian(prey_predator)(theta)
    F = np.stack([fd(lambda s: prey_predator(theta + s * e), 0.0) for e in np.eye(4)], axis=-1)
    assert np.allclose(J, F, rtol=1e-6, atol=1e-8)


def test_backward_in_time_and_forward_mode():
    def y(k):  # from y(2) = 1 back to t = 1, 0: exp(k (2 - t))
        return solve_ivp(lambda t, y: -k * y, (2.0, 0.0), [1.0], t_eval=[1.0, 0.0], **TIGHT).y[0]

    expected = [np.exp(0.7), 2 * np.exp(1.4)]
    assert np.allclose(tg.jacobian(y)(0.7), expected, rtol=1e-8)
    assert np.allclose(tg.jacfwd(y)(0.7), expected, rtol=1e-8)


def test_gradient_tape_and_t_eval_cut_by_a_terminal_event():
    v = np.array(3.0)
    with tg.GradientTape() as tape:
        vv = tape.watch(v)

        def ground(t, y):
            return y[0]

        ground.terminal, ground.direction = True, -1
        sol = solve_ivp(lambda t, y: [y[1], -9.8], (0.0, 10.0), [0.0, vv], events=ground,
                        t_eval=[0.1, 0.2, 0.3, 5.0], **TIGHT)
        height = sol.y[0]
    assert height.shape == (3,)  # t = 5 is after the landing
    assert np.allclose(tape.jacobian(height, vv), [0.1, 0.2, 0.3], rtol=1e-9)


def test_right_hand_side_returning_a_list():
    def y(k):
        return solve_ivp(lambda t, y: [-k * y[0]], (0.0, 1.0), np.array([1.0]), **TIGHT).y[0, -1]

    assert np.isclose(tg.grad(y)(0.5), -np.exp(-0.5), rtol=1e-8)


# ---------------------------------------------------------------------- solve_bvp
def test_solve_bvp_closed_form_parameter_query_point_and_second_order():
    # y'' = -k y, y(0) = 0, y(1) = 1: y = sin(sqrt(k) x) / sin(sqrt(k))
    def y(k, xq):
        res = integrate.solve_bvp(lambda x, y: np.vstack([y[1], -k * y[0]]),
                                  lambda ya, yb: np.array([ya[0], yb[0] - 1.0]),
                                  np.linspace(0, 1, 11), np.zeros((2, 11)), tol=1e-8)
        return res.sol(xq)[0]

    def exact(k, x):
        return np.sin(np.sqrt(k) * x) / np.sin(np.sqrt(k))

    k, xq = 2.0, 0.3
    gk, gx = tg.grad(y, argnums=(0, 1))(k, xq)
    assert np.isclose(gk, fd(lambda s: exact(s, xq), k), rtol=1e-6)
    assert np.isclose(gx, fd(lambda s: exact(k, s), xq), rtol=1e-6)
    assert np.isclose(tg.hessian(y)(k, xq), fd(lambda s: fd(lambda r: exact(r, xq), s, eps=1e-3), k, eps=1e-3),
                      rtol=1e-4)


def test_solve_bvp_unknown_parameter_and_traced_interval():
    # y'' + p^2 y = 0, y(0) = y(L) = 0, y'(0) = 1: the eigenvalue p = pi / L
    def eigenvalue(length):
        x = np.linspace(0.0, 1.0, 11) * length
        guess = np.vstack([np.sin(3 * x), 3 * np.cos(3 * x)])
        res = si.solve_bvp(lambda x, y, p: np.vstack([y[1], -p[0] ** 2 * y[0]]),
                           lambda ya, yb, p: np.array([ya[0], yb[0], ya[1] - 1.0]), x, guess, p=[3.0],
                           tol=1e-6, max_nodes=100000)
        return res.p[0]

    assert np.isclose(tg.grad(eigenvalue)(1.0), -np.pi, rtol=1e-7)


# ---------------------------------------------------------------------- odeint
def logistic(r, K, y0, t):
    return K / (1 + (K / y0 - 1) * np.exp(-r * t))


def test_odeint_logistic_closed_form_parameters_state_and_times():
    t = np.linspace(0.0, 3.0, 5)

    def y(r, K, y0, t):
        return odeint(lambda y, t, r, K: r * y * (1 - y / K), y0, t, args=(r, K), rtol=1e-11, atol=1e-12)[:, 0]

    args = (1.2, 2.0, 0.3, t)
    jr, jK, jy0, jt = tg.jacobian(y, argnums=(0, 1, 2, 3))(*args)
    for j, i in ((jr, 0), (jK, 1), (jy0, 2)):
        ref = fd(lambda s: logistic(*[a + s if n == i else a for n, a in enumerate(args)]), 0.0)
        assert np.allclose(j, ref, rtol=1e-7, atol=1e-9)
    # d y(t_k) / d t_k = f, d y(t_k) / d t_0 = -Phi(t_k, t_0) f(t_0)
    f = 1.2 * logistic(*args) * (1 - logistic(*args) / 2.0)
    assert np.allclose(np.diag(jt)[1:], f[1:], rtol=1e-8)
    assert np.allclose(jt[1:, 0], fd(lambda s: y(1.2, 2.0, 0.3, np.concatenate([[s], t[1:]])), 0.0)[1:],
                       rtol=1e-6)
    assert np.isclose(tg.hessian(lambda r: y(r, 2.0, 0.3, t)[-1])(1.2),
                      fd(lambda s: tg.grad(lambda r: y(r, 2.0, 0.3, t)[-1])(s), 1.2), rtol=1e-6)


def test_odeint_tfirst_and_full_output():
    def y(k):
        out, info = si.odeint(lambda t, y: -k * y, [1.0, 2.0], [0.0, 1.0], tfirst=True, full_output=True,
                              rtol=1e-11, atol=1e-12)
        assert "nst" in info
        return out[-1]

    assert np.allclose(tg.jacobian(y)(0.4), -np.array([1.0, 2.0]) * np.exp(-0.4), rtol=1e-8)


# ---------------------------------------------------------------------- quad
def gauss(k, a, b):
    return quad(lambda x: np.exp(-k * x * x), a, b, epsabs=1e-13, epsrel=1e-13)[0]


def test_quad_parameter_and_limits_leibniz_closed_form_and_second_order():
    k, a, b = 1.3, 0.2, 1.5
    gk, ga, gb = tg.grad(gauss, argnums=(0, 1, 2))(k, a, b)
    assert np.isclose(gk, -quad(lambda x: x * x * np.exp(-k * x * x), a, b, epsabs=1e-13)[0], rtol=1e-10)
    assert np.isclose(ga, -np.exp(-k * a * a), rtol=1e-12) and np.isclose(gb, np.exp(-k * b * b), rtol=1e-12)
    check_grads(gauss, (k, a, b), eps=1e-5, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("a, b", [(0.2, np.inf), (-np.inf, 0.4), (-np.inf, np.inf), (np.inf, 0.2), (1.5, 0.2)])
def test_quad_infinite_and_reversed_ranges(a, b):
    check_grads(lambda k, a, b: gauss(k, a, b), (1.3, a, b), argnums=[0] + [i for i, v in ((1, a), (2, b))
                                                                           if np.isfinite(v)],
                eps=1e-5, rtol=1e-6, atol=1e-8)


def test_quad_whole_line_closed_form():
    # int exp(-k x^2) = sqrt(pi / k): d/dk = -sqrt(pi) / (2 k^1.5)
    assert np.isclose(tg.grad(lambda k: gauss(k, -np.inf, np.inf))(1.3), -0.5 * np.sqrt(np.pi) * 1.3**-1.5,
                      rtol=1e-10)
    assert np.isclose(tg.hessian(lambda k: gauss(k, -np.inf, np.inf))(1.3), 0.75 * np.sqrt(np.pi) * 1.3**-2.5,
                      rtol=1e-9)


def test_quad_args_points_and_kink():
    def kink(c):  # int_0^2 |x - 1| c x dx with the kink at 1 given as points=
        return scipy.integrate.quad(lambda x, c: np.abs(x - 1.0) * c * x, 0.0, 2.0, args=(c,), points=[1.0])[0]

    assert np.isclose(tg.grad(kink)(0.7), 1.0, rtol=1e-10)  # int_0^2 |x-1| x dx = 1


def test_quad_traced_breakpoint_of_a_discontinuous_integrand():
    # int_0^2 (1 if x < c else 3x) dx = c + 1.5 (4 - c^2): the jump at c enters through points=
    def jump(c):
        return quad(lambda x: np.where(x < c, 1.0, 3.0 * x), 0.0, 2.0, points=[c])[0]

    assert np.isclose(tg.grad(jump)(0.7), 1 - 3 * 0.7, rtol=1e-12)
    assert np.isclose(tg.hessian(jump)(0.7), -3.0, rtol=1e-12)
    reversed_range = tg.grad(lambda c: quad(lambda x: np.where(x < c[0], 1.0, 3.0 * x), 2.0, 0.0, points=c)[0])
    assert np.allclose(reversed_range(np.array([0.7])), [3 * 0.7 - 1], rtol=1e-12)


def test_quad_vec_traced_breakpoint():
    def jump(c):
        return si.quad_vec(lambda x: np.stack([np.where(x < c, 1.0, 3.0 * x), x]), 0.0, 2.0, points=[c])[0]

    assert np.allclose(tg.jacobian(jump)(0.7), [1 - 3 * 0.7, 0.0], atol=1e-12)


def test_dblquad_falls_out_of_quad():
    def d(k):
        return si.dblquad(lambda y, x: np.exp(-k * (x * x + y * y)), 0.0, 1.0, 0.0, lambda x: x)[0]

    g = tg.grad(d)(0.7)
    ref = -si.dblquad(lambda y, x: (x * x + y * y) * np.exp(-0.7 * (x * x + y * y)), 0.0, 1.0, 0.0, lambda x: x)[0]
    assert np.isclose(g, ref, rtol=1e-8)


@pytest.mark.parametrize("a, b", [(0.1, 1.2), (1.2, 0.1), (0.1, np.inf), (-np.inf, 0.4), (-np.inf, np.inf)])
def test_quad_vec_vector_integrand_first_and_second_order(a, b):
    def moments(k, a, b):
        return si.quad_vec(lambda x: np.stack([np.exp(-k * x * x), x * x * np.exp(-k * x * x)]), a, b,
                           epsrel=1e-12)[0]

    argnums = [0] + [i for i, v in ((1, a), (2, b)) if np.isfinite(v)]
    check_grads(moments, (1.3, a, b), argnums=argnums, eps=1e-5, rtol=1e-6, atol=1e-8)
    if np.isinf(a) and np.isinf(b):  # d/dk sqrt(pi / k) = -sqrt(pi) / (2 k^1.5)
        assert np.isclose(tg.grad(lambda k: moments(k, a, b)[0])(1.3), -0.5 * np.sqrt(np.pi) * 1.3**-1.5)


def test_cubature_parameter_and_limit_closed_form_second_order():
    def cub(k, top):  # int_0^1 int_0^top exp(-k x^2 - y) dy dx
        return si.cubature(lambda x, k: np.exp(-k * x[:, 0] ** 2 - x[:, 1]), np.array([0.0, 0.0]),
                           np.stack([np.asarray(1.0), top]), args=(k,), rtol=1e-12).estimate

    k = 0.7
    inner = quad(lambda x: np.exp(-k * x * x), 0.0, 1.0, epsabs=1e-14)[0]
    dinner = -quad(lambda x: x * x * np.exp(-k * x * x), 0.0, 1.0, epsabs=1e-14)[0]
    gk, gtop = tg.grad(cub, argnums=(0, 1))(k, 2.0)
    assert np.isclose(gk, dinner * (1 - np.exp(-2.0)), rtol=1e-10)
    assert np.isclose(gtop, inner * np.exp(-2.0), rtol=1e-10)
    check_grads(cub, (k, 2.0), eps=1e-5, rtol=1e-6, atol=1e-8)


def test_ode_class_with_a_traced_right_hand_side_is_a_clear_error():
    def f(k):
        r = integrate.ode(lambda t, y: -k * y).set_integrator("dopri5")
        r.set_initial_value([1.0], 0.0)
        return r.integrate(1.0)[0]

    with pytest.raises(NonDifferentiableArgumentError, match="ode.*solve_ivp"):
        tg.grad(f)(0.7)

    def g(w):  # nothing traced reaches the ode: SciPy's own numbers
        r = integrate.ode(lambda t, y: -y).set_integrator("dopri5")
        r.set_initial_value([1.0], 0.0)
        return r.integrate(1.0)[0] * w

    plain = integrate.ode(lambda t, y: -y).set_integrator("dopri5")
    plain.set_initial_value([1.0], 0.0)
    assert tg.grad(g)(2.0) == plain.integrate(1.0)[0]


def test_nquad_falls_out_of_quad_closed_form():
    def d(a):  # the square of int_0^1 exp(-a x^2) dx
        return scipy.integrate.nquad(lambda x, y: np.exp(-a * (x * x + y * y)), [[0, 1], [0, 1]])[0]

    inner = quad(lambda x: np.exp(-0.7 * x * x), 0, 1, epsabs=1e-14)[0]
    dinner = -quad(lambda x: x * x * np.exp(-0.7 * x * x), 0, 1, epsabs=1e-14)[0]
    assert np.isclose(tg.grad(d)(0.7), 2 * inner * dinner, rtol=1e-9)


def test_quad_weight_is_a_clear_error():
    with pytest.raises(NonDifferentiableArgumentError, match="quad.*weight"):
        tg.grad(lambda k: quad(lambda x: k * x, 0.0, 1.0, weight="cos", wvar=2.0)[0])(1.0)


# ---------------------------------------------------------------------- the door's guarantees
def test_no_tracer_gives_scipy_exact_results_and_restores_code():
    codes = {f: f.__code__ for f in (solve_ivp, odeint, quad, si.quad_vec, si.solve_bvp)}

    def run():
        a = solve_ivp(oscillator, (0.0, 2.0), [1.0, 0.0], args=(1.3, 0.1), t_eval=[0.5, 1.0])
        b = solve_ivp(oscillator, (0.0, 2.0), [1.0, 0.0], args=(1.3, 0.1), method="BDF", dense_output=True)
        c = odeint(lambda y, t: -y, [1.0], [0.0, 1.0])
        d = quad(np.exp, 0.0, 1.0)
        e = si.quad_vec(lambda x: np.array([x, x * x]), 0.0, 2.0)
        f = si.solve_bvp(lambda x, y: np.vstack([y[1], -y[0]]), lambda ya, yb: np.array([ya[0], yb[0] - 1.0]),
                         np.linspace(0, 1, 5), np.zeros((2, 5)))
        return a.y, a.t, b.y, b.sol(0.3), c, d, e[0], e[1], f.y, f.x, f.sol(0.3)

    expected = run()
    seen = []

    def f(w):
        seen.append(run())
        return w * w

    tg.grad(f)(2.0)
    for got, want in zip(seen[0], expected):
        assert np.array_equal(got, want)
    run()  # the first plain call after the window restores SciPy's code (the trampolines linger till then)
    for fun, code in codes.items():
        assert fun.__code__ is code


def test_traced_run_keeps_scipy_values_exactly():
    sol_plain = solve_ivp(oscillator, (0.0, 2.0), [1.0, 0.2], args=(1.3, 0.1), **TIGHT)
    seen = []

    def f(w):
        sol = solve_ivp(oscillator, (0.0, 2.0), [1.0, 0.2], args=(w, 0.1), **TIGHT)
        seen.append((tg.stop_gradient(sol.y), sol.t, sol.sol))
        return sol.y[0, -1]

    tg.grad(f)(1.3)
    assert np.array_equal(seen[0][0], sol_plain.y) and np.array_equal(seen[0][1], sol_plain.t)
    assert seen[0][2] is None


def test_callback_errors_reach_the_user():
    def f(k):
        return solve_ivp(lambda t, y: -float(k) * y, (0.0, 1.0), [1.0]).y[0, -1]

    for _ in range(2):
        with pytest.raises(GradientDroppedError):
            tg.grad(f)(1.0)

    def g(k):
        return quad(lambda x: np.exp(float(k) * x), 0.0, 1.0)[0]

    with pytest.raises(GradientDroppedError):
        tg.grad(g)(1.0)


def test_inputs_not_mutated():
    y0 = np.array([1.0, 0.2])
    t_eval = np.array([0.5, 1.0])
    tg.jacobian(lambda y: solve_ivp(oscillator, (0.0, 1.0), y, args=(1.3, 0.1), t_eval=t_eval).y)(y0)
    assert np.array_equal(y0, [1.0, 0.2]) and np.array_equal(t_eval, [0.5, 1.0])
