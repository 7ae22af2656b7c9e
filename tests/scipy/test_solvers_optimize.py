"""Derivatives through scipy.optimize's solvers (tapegrad.solvers.optimize).

Roots, minima and fits are checked against closed forms (Kepler's equation, a
cubic, quadratic objectives, linear least squares) and against central finite
differences of the solver itself at tight tolerances, at first and second order,
with parameters reached through closures, ``args=`` and data, called as users
call them: module attributes, names bound at import, keyword arguments.
"""

import warnings

import numpy as np
import pytest
import scipy.optimize
import scipy.optimize as so
from scipy import optimize
from scipy.optimize import brentq, curve_fit, fsolve, least_squares, minimize, newton, root, root_scalar

import tapegrad as tg
from tapegrad.errors import GradientDroppedError, NonDifferentiableArgumentError
from tapegrad.testing import check_grads


def fd(fun, x, eps=1e-5):
    """Central difference of a scalar-input function (any output shape)."""
    return (np.asarray(fun(x + eps)) - np.asarray(fun(x - eps))) / (2 * eps)


def fd_grad(fun, x, eps=1e-3):
    """Five-point central-difference Jacobian (output axes first, then x's).

    Solvers stop at a tolerance, so a small step amplifies their noise; a wider
    step with a fourth-order stencil keeps both errors near 1e-7.
    """
    x = np.asarray(x, dtype=float)
    out = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = eps
        f = [np.asarray(fun(x + k * e)) for k in (-2, -1, 1, 2)]
        out.append((f[0] - 8 * f[1] + 8 * f[2] - f[3]) / (12 * eps))
    return np.moveaxis(np.array(out), 0, -1)


# ---------------------------------------------------------------------- scalar roots
def cubic_root(k):
    # x^3 + k x - 1 = 0 on [0, 2]; k reaches the callback through a closure
    return brentq(lambda x: x**3 + k * x - 1.0, 0.0, 2.0, xtol=1e-14)


def test_brentq_closure_matches_implicit_derivative_first_and_second_order():
    k = 1.5
    x = cubic_root(k)
    dx = -x / (3 * x**2 + k)
    assert np.isclose(tg.grad(cubic_root)(k), dx, rtol=1e-12)
    # second order: differentiate f(x(k), k) = 0 twice
    d2 = -(6 * x * dx**2 + 2 * dx) / (3 * x**2 + k)
    assert np.isclose(tg.hessian(cubic_root)(k), d2, rtol=1e-10)


def test_third_order_one_chord_step_per_tape():
    third = tg.jacobian(tg.jacobian(tg.grad(cubic_root)))(1.5)
    assert np.isclose(third, fd(tg.hessian(cubic_root), 1.5, eps=1e-3), rtol=1e-5)


@pytest.mark.parametrize("name", ["brentq", "brenth", "ridder", "bisect", "toms748"])
def test_bracketing_solvers_with_args(name):
    solver = getattr(scipy.optimize, name)

    def f(k, c):
        return solver(lambda x, k, c: np.cos(x) - k * x + c, 0.0, 2.0, args=(k, c), xtol=1e-14)

    k, c = 0.8, 0.1
    x = f(k, c)
    slope = -np.sin(x) - k
    gk, gc = tg.grad(f, argnums=(0, 1))(k, c)
    assert np.isclose(gk, x / slope, rtol=1e-10) and np.isclose(gc, -1.0 / slope, rtol=1e-10)
    hk = tg.hessian(f)(k, c)
    assert np.isclose(hk, fd(lambda kk: tg.grad(f)(kk, c), k), rtol=1e-6)


def kepler(M, e):
    return newton(lambda E: E - e * np.sin(E) - M, M, tol=1e-14, maxiter=100)


def test_newton_kepler_equation_closed_form_and_second_order():
    M, e = 1.0, 0.3
    E = kepler(M, e)
    dM, de = tg.grad(kepler, argnums=(0, 1))(M, e)
    denom = 1 - e * np.cos(E)
    assert np.isclose(dM, 1 / denom, rtol=1e-12) and np.isclose(de, np.sin(E) / denom, rtol=1e-12)
    check_grads(kepler, (M, e), eps=1e-5, rtol=1e-6, atol=1e-8)


def test_newton_with_fprime_and_vector_x0():
    k = np.array([0.5, 1.0, 2.0])

    def roots(k):  # elementwise x^2 = k, from x0 = 1 (vectorized Newton)
        return so.newton(lambda x: x * x - k, np.ones(3), fprime=lambda x: 2 * x, tol=1e-14)

    J = tg.jacobian(roots)(k)
    assert np.allclose(J, np.diag(0.5 / np.sqrt(k)), rtol=1e-10, atol=1e-14)
    check_grads(roots, (k,), eps=1e-6, rtol=1e-6, atol=1e-8)

    def full(k):  # full_output keeps SciPy's namedtuple, its root traced
        res = newton(lambda x: x * x - k, np.ones(3), full_output=True, tol=1e-14)
        assert res.converged.all()
        return res.root

    assert np.allclose(tg.jacobian(full)(k), J, rtol=1e-12)


@pytest.mark.parametrize(
    "options",
    [
        dict(method="brentq", bracket=[0.0, 2.0]),
        dict(method="newton", x0=1.0, fprime=lambda x, k: 3 * x**2 + k),
        dict(method="secant", x0=1.0, x1=0.9),
        dict(method="halley", x0=1.0, fprime=lambda x, k: 3 * x**2 + k, fprime2=lambda x, k: 6 * x),
    ],
    ids=lambda o: o["method"],
)
def test_root_scalar_methods(options):
    def f(k):
        return optimize.root_scalar(lambda x, k: x**3 + k * x - 1.0, args=(k,), xtol=1e-14, **options).root

    k = 1.5
    x = f(k)
    assert np.isclose(tg.grad(f)(k), -x / (3 * x**2 + k), rtol=1e-9)
    assert np.isclose(tg.hessian(f)(k), fd(lambda kk: tg.grad(f)(kk), k), rtol=1e-6)


def test_root_scalar_fprime_true_returns_value_and_derivative():
    def f(k):
        res = root_scalar(lambda x: (x**3 + k * x - 1.0, 3 * x**2 + k), x0=1.0, fprime=True, xtol=1e-14)
        return res.root

    assert np.isclose(tg.grad(f)(1.5), tg.grad(cubic_root)(1.5), rtol=1e-10)


def test_brentq_full_output_root_results_is_traced():
    def f(k):
        x, info = brentq(lambda x: x**3 + k * x - 1.0, 0.0, 2.0, full_output=True, xtol=1e-14)
        assert info.root is x
        return x

    assert np.isclose(tg.grad(f)(1.5), tg.grad(cubic_root)(1.5), rtol=1e-12)


# ---------------------------------------------------------------------- vector roots
def circle_line(p, method="hybr"):
    # x^2 + y^2 = r^2 and x = s y, with p = (r, s): x = r s / sqrt(1 + s^2), y = r / sqrt(1 + s^2)
    r, s = p[0], p[1]
    return root(lambda z: np.array([z[0] ** 2 + z[1] ** 2 - r**2, z[0] - s * z[1]]), np.array([1.0, 1.0]),
                method=method, tol=1e-14).x


def circle_line_exact(p):
    r, s = p
    return np.array([r * s, r]) / np.sqrt(1 + s**2)


@pytest.mark.parametrize("method", ["hybr", "lm"])
def test_root_vector_system_closed_form(method):
    p = np.array([1.3, 0.7])
    J = tg.jacobian(lambda p: circle_line(p, method))(p)
    assert np.allclose(J, fd_grad(circle_line_exact, p), rtol=1e-7, atol=1e-9)
    check_grads(lambda p: circle_line(p, method), (p,), eps=1e-5, rtol=1e-6, atol=1e-8)


def test_root_with_jac_true_and_traced_x0_has_no_effect():
    def f(p, x0):
        def fun(z):
            r, s = p[0], p[1]
            value = np.array([z[0] ** 2 + z[1] ** 2 - r**2, z[0] - s * z[1]])
            jac = np.array([[2 * z[0], 2 * z[1]], [np.ones_like(z[0]), -s * np.ones_like(z[1])]])
            return value, jac

        return so.root(fun, x0, jac=True, tol=1e-14).x

    p, x0 = np.array([1.3, 0.7]), np.array([1.0, 1.0])
    jp, jx0 = tg.jacobian(f, argnums=(0, 1))(p, x0)
    assert np.allclose(jp, fd_grad(circle_line_exact, p), rtol=1e-7, atol=1e-9)
    assert np.array_equal(jx0, np.zeros((2, 2)))  # the root does not depend on the starting point


def test_fsolve_full_output_and_args():
    def f(p):
        x, info, ier, msg = fsolve(lambda z, r, s: [z[0] ** 2 + z[1] ** 2 - r**2, z[0] - s * z[1]],
                                   [1.0, 1.0], args=(p[0], p[1]), full_output=True, xtol=1e-14)
        assert ier == 1
        return x

    p = np.array([1.3, 0.7])
    assert np.allclose(tg.jacobian(f)(p), fd_grad(circle_line_exact, p), rtol=1e-7, atol=1e-9)


# ---------------------------------------------------------------------- minima
A = np.array([[3.0, 0.5, 0.0], [0.5, 2.0, 0.3], [0.0, 0.3, 1.5]])


@pytest.mark.parametrize("method", ["BFGS", "L-BFGS-B", "CG", "Newton-CG", "Nelder-Mead", "Powell", "trust-constr"])
def test_minimize_quadratic_argmin_is_inverse_matrix(method):
    # argmin 0.5 x'Ax - b'x = A^{-1} b: the implicit derivative is exact whatever the
    # solver's precision, since the Hessian is constant
    def argmin(b):
        jac = (lambda x: A @ x - b) if method == "Newton-CG" else None
        return minimize(lambda x: 0.5 * x @ A @ x - b @ x, np.zeros(3), method=method, jac=jac).x

    b = np.array([1.0, -0.5, 0.25])
    assert np.allclose(tg.jacobian(argmin)(b), np.linalg.inv(A), rtol=1e-10, atol=1e-12)


def test_minimize_optimal_value_envelope_and_matrix_parameter():
    def value(b, M):
        return minimize(lambda x: 0.5 * x @ M @ x - b @ x, np.zeros(3), method="BFGS",
                        options=dict(gtol=1e-12)).fun

    b = np.array([1.0, -0.5, 0.25])
    x = np.linalg.solve(A, b)
    gb, gM = tg.grad(value, argnums=(0, 1))(b, A)
    assert np.allclose(gb, -x, rtol=1e-7)  # envelope theorem: d f*/d b = -x*
    assert np.allclose(gM, 0.5 * np.outer(x, x), rtol=1e-7)
    # second order: f* = -0.5 b'A^{-1}b, so d2 f*/db2 = -A^{-1}
    assert np.allclose(tg.hessian(value)(b, A), -np.linalg.inv(A), rtol=1e-6, atol=1e-9)


def rosen_argmin(a):
    # (a - x0)^2 + 10 (x1 - x0^2)^2 has its minimum at (a, a^2)
    res = minimize(lambda x: (a - x[0]) ** 2 + 10.0 * (x[1] - x[0] ** 2) ** 2, np.array([0.0, 0.0]),
                   method="BFGS", options=dict(gtol=1e-12))
    return res.x


def test_minimize_nonconvex_first_and_second_order():
    a = 0.7
    assert np.allclose(tg.jacobian(rosen_argmin)(a), [1.0, 2 * a], rtol=1e-6)
    H = tg.jacobian(tg.jacobian(rosen_argmin))(a)
    assert np.allclose(H, [0.0, 2.0], atol=1e-5)


def test_minimize_args_jac_true_and_keywords():
    def argmin(c):
        def fg(x, c):
            return np.sum((x - c) ** 2) + np.sum(x**4), 2 * (x - c) + 4 * x**3

        return minimize(fun=fg, x0=np.zeros(2), args=(c,), jac=True, method="L-BFGS-B",
                        options=dict(gtol=1e-13, ftol=1e-15)).x

    c = np.array([0.3, -0.8])
    x = argmin(c)
    assert np.allclose(np.diag(tg.jacobian(argmin)(c)), 2 / (2 + 12 * x**2), rtol=1e-6)


def test_minimize_active_bounds_follow_the_bound():
    def argmin(a, lo):
        return minimize(lambda x: np.sum((x - a) ** 2), np.array([1.0, 1.0]), method="L-BFGS-B",
                        bounds=[(lo, None), (-5.0, 5.0)]).x

    a = np.array([-1.0, 0.5])  # the first component sits on its lower bound lo = 0
    ja, jlo = tg.jacobian(argmin, argnums=(0, 1))(a, 0.0)
    assert np.allclose(ja, [[0.0, 0.0], [0.0, 1.0]], atol=1e-10)
    assert np.allclose(jlo, [1.0, 0.0], atol=1e-10)


def test_minimize_linear_constraint_object():
    # min |x - a|^2 s.t. x0 - x1 >= 0 (active when a0 < a1): x = mean(a) (1, 1)
    def argmin(a):
        cons = optimize.LinearConstraint(np.array([[1.0, -1.0]]), 0.0, np.inf)
        return minimize(lambda x: np.sum((x - a) ** 2), np.zeros(2), method="SLSQP", constraints=[cons],
                        options=dict(ftol=1e-14)).x

    assert np.allclose(tg.jacobian(argmin)(np.array([0.2, 1.0])), 0.5, atol=1e-9)


def test_least_squares_active_bound():
    def fit(y):  # a line through the data with the slope bounded below by 0.5 (active)
        return least_squares(lambda p: p[0] + p[1] * X - y, np.array([0.0, 1.0]),
                             bounds=([-np.inf, 0.5], [np.inf, np.inf]), xtol=1e-15, ftol=1e-15, gtol=1e-15).x

    y = 1.0 - 0.2 * X
    J = tg.jacobian(fit)(y)
    assert np.allclose(J[1], 0.0, atol=1e-10)  # the slope sits on its bound
    assert np.allclose(J[0], np.full(X.size, 1.0 / X.size), atol=1e-9)  # intercept: mean(y - 0.5 x)


def test_minimize_singular_hessian_is_a_clear_error():
    def argmin(a):
        return minimize(lambda x: (x[0] + x[1] - a) ** 2, np.zeros(2), method="BFGS").x

    with pytest.raises(NonDifferentiableArgumentError, match="minimize.*Hessian.*singular"):
        tg.jacobian(argmin)(1.0)


def test_minimize_interior_point_with_one_sided_bounds_is_unconstrained():
    def argmin(a):
        return minimize(lambda x: np.sum((x - a) ** 2), np.array([1.0, 1.0]), method="L-BFGS-B",
                        bounds=[(0.0, None), (None, 10.0)]).x

    assert np.allclose(tg.jacobian(argmin)(np.array([0.5, 2.0])), np.eye(2), atol=1e-10)


def test_minimize_equality_constraint_kkt_projection_with_traced_args():
    # min |x - a|^2 s.t. x0 + x1 = s: x = a - (a0 + a1 - s) / 2 (1, 1)
    def argmin(a, s):
        cons = [{"type": "eq", "fun": lambda x, s: x[0] + x[1] - s, "args": (s,)}]
        return minimize(lambda x: np.sum((x - a) ** 2), np.zeros(2), method="SLSQP", constraints=cons,
                        options=dict(ftol=1e-14)).x

    ja, js = tg.jacobian(argmin, argnums=(0, 1))(np.array([1.0, 2.0]), 1.0)
    assert np.allclose(ja, [[0.5, -0.5], [-0.5, 0.5]], atol=1e-9) and np.allclose(js, [0.5, 0.5], atol=1e-9)


@pytest.mark.parametrize("s, active", [(1.0, True), (5.0, False)])
def test_minimize_inequality_constraint_active_and_inactive(s, active):
    def argmin(a, s):
        return minimize(lambda x: np.sum((x - a) ** 2), np.zeros(2), method="trust-constr",
                        constraints=optimize.NonlinearConstraint(lambda x: x[0] + x[1], -np.inf, s),
                        options=dict(gtol=1e-12, xtol=1e-14)).x

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # trust-constr's quasi-Newton on a quadratic
        ja, js = tg.jacobian(argmin, argnums=(0, 1))(np.array([1.0, 2.0]), s)
    if active:
        assert np.allclose(ja, [[0.5, -0.5], [-0.5, 0.5]], atol=1e-8) and np.allclose(js, [0.5, 0.5], atol=1e-8)
    else:
        assert np.allclose(ja, np.eye(2), atol=1e-8) and np.allclose(js, 0.0, atol=1e-12)


def test_minimize_nonlinear_constraint_on_a_circle_second_order():
    # min x0 + x1 on the circle of radius r: x = -r / sqrt(2) (1, 1)
    def argmin(r):
        cons = {"type": "eq", "fun": lambda x: x[0] ** 2 + x[1] ** 2 - r**2}
        return minimize(lambda x: x[0] + x[1], np.array([-0.5, -0.5]), method="SLSQP", constraints=cons,
                        options=dict(ftol=1e-14)).x

    assert np.allclose(tg.jacobian(argmin)(2.0), -np.sqrt(0.5), rtol=1e-7)
    assert np.allclose(tg.jacobian(tg.jacobian(argmin))(2.0), 0.0, atol=1e-8)
    # and one that curves: min (x0 - 2)^2 + x1^2 on x1 = r x0^2
    def curved(r):
        cons = {"type": "eq", "fun": lambda x: x[1] - r * x[0] ** 2}
        return minimize(lambda x: (x[0] - 2.0) ** 2 + x[1] ** 2, np.array([1.0, 0.5]), method="SLSQP",
                        constraints=cons, options=dict(ftol=1e-15, maxiter=500)).x

    # eliminating x1: 2 (x0 - 2) + 4 r^2 x0^3 = 0, so dx0/dr = -8 r x0^3 / (2 + 12 r^2 x0^2)
    r = 0.5
    x0 = curved(r)[0]
    d0 = -8 * r * x0**3 / (2 + 12 * r * r * x0 * x0)
    assert np.allclose(tg.jacobian(curved)(r), [d0, x0 * x0 + 2 * r * x0 * d0], rtol=1e-6)
    assert np.allclose(tg.jacobian(tg.jacobian(curved))(r), fd(tg.jacobian(curved), r, eps=1e-3),
                       rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------- other minimizers
def quartic_argmin_derivatives(a):
    """argmin (x - a)^2 + x^4 / 4 solves 2 (x - a) + x^3 = 0: the first two derivatives in a."""
    x = np.roots([1.0, 0.0, 2.0, -2.0 * a])
    x = float(np.real(x[np.abs(np.imag(x)) < 1e-12][0]))
    d1 = 2.0 / (2.0 + 3 * x * x)
    return x, d1, -6 * x * d1**2 / (2.0 + 3 * x * x)


def quartic(x, a):
    return (x - a) ** 2 + x**4 / 4


SCALAR_MINIMIZERS = {
    "minimize_scalar-brent": lambda a: so.minimize_scalar(quartic, args=(a,), tol=1e-12).x,
    "minimize_scalar-golden": lambda a: so.minimize_scalar(quartic, args=(a,), method="golden", tol=1e-12).x,
    "minimize_scalar-bounded": lambda a: so.minimize_scalar(lambda x: quartic(x, a), bounds=(-3.0, 3.0),
                                                            options=dict(xatol=1e-12)).x,
    "brent": lambda a: so.brent(lambda x: quartic(x, a), tol=1e-12),
    "golden": lambda a: so.golden(quartic, args=(a,), tol=1e-12),
    "fminbound": lambda a: so.fminbound(lambda x: quartic(x, a), -3.0, 3.0, xtol=1e-12),
}


@pytest.mark.parametrize("name", list(SCALAR_MINIMIZERS))
def test_scalar_minimizers_closed_form_first_and_second_order(name):
    # before these rules, a traced closure gave a silent zero gradient here
    f = SCALAR_MINIMIZERS[name]
    x, d1, d2 = quartic_argmin_derivatives(0.7)
    assert np.isclose(f(0.7), x, rtol=1e-7)
    assert np.isclose(tg.grad(f)(0.7), d1, rtol=1e-6)
    assert np.isclose(tg.hessian(f)(0.7), d2, rtol=1e-5)


def test_bounded_scalar_minimum_on_the_bound_follows_it():
    def argmin(a, hi):  # the unconstrained minimum a lies beyond hi
        return so.minimize_scalar(lambda x: (x - a) ** 2, bounds=(0.0, hi), method="bounded").x

    ga, ghi = tg.grad(argmin, argnums=(0, 1))(2.0, 1.0)
    assert ga == 0.0 and ghi == 1.0


def vector_quartic(x, a):
    return np.sum((x - a) ** 2) + np.sum(x**4) / 4


LEGACY = {
    "fmin": lambda a: so.fmin(vector_quartic, np.zeros(2), args=(a,), xtol=1e-12, ftol=1e-14, disp=0),
    "fmin_powell": lambda a: so.fmin_powell(vector_quartic, np.zeros(2), args=(a,), xtol=1e-12, ftol=1e-14,
                                            disp=0),
    "fmin_bfgs": lambda a: so.fmin_bfgs(lambda x: vector_quartic(x, a), np.zeros(2), gtol=1e-12, disp=0),
    "fmin_cg": lambda a: so.fmin_cg(vector_quartic, np.zeros(2), args=(a,), gtol=1e-12, disp=0),
    "fmin_ncg": lambda a: so.fmin_ncg(vector_quartic, np.zeros(2), lambda x, a: 2 * (x - a) + x**3, args=(a,),
                                      avextol=1e-14, disp=0),
    "fmin_l_bfgs_b": lambda a: so.fmin_l_bfgs_b(vector_quartic, np.zeros(2), args=(a,), approx_grad=True,
                                                pgtol=1e-12, factr=10)[0],
    "fmin_tnc": lambda a: so.fmin_tnc(vector_quartic, np.zeros(2), args=(a,), approx_grad=True,
                                      messages=0, pgtol=1e-12)[0],
    "fmin_slsqp": lambda a: so.fmin_slsqp(vector_quartic, np.zeros(2), args=(a,), acc=1e-14, iprint=0),
    "leastsq": lambda a: so.leastsq(lambda x: np.concatenate([x - a, x**2 / 2]), np.zeros(2),
                                    xtol=1e-15, ftol=1e-15)[0],
    "differential_evolution": lambda a: so.differential_evolution(vector_quartic, [(-2, 2), (-2, 2)], args=(a,),
                                                                  rng=0, tol=1e-10).x,
    "shgo": lambda a: so.shgo(vector_quartic, [(-2, 2), (-2, 2)], args=(a,),
                              minimizer_kwargs=dict(options=dict(ftol=1e-14))).x,
    "dual_annealing": lambda a: so.dual_annealing(vector_quartic, [(-2, 2), (-2, 2)], args=(a,), rng=0,
                                                  maxiter=30).x,
    "dual_annealing-no-local-search": lambda a: so.dual_annealing(lambda x: vector_quartic(x, a), [(-2, 2), (-2, 2)],
                                                                  rng=0, maxiter=300, no_local_search=True).x,
    "basinhopping": lambda a: so.basinhopping(vector_quartic, np.zeros(2), niter=3, rng=0,
                                              minimizer_kwargs=dict(args=(a,))).x,
    "direct": lambda a: so.direct(vector_quartic, [(-2, 2), (-2, 2)], args=(a,), eps=1e-8, vol_tol=1e-30,
                                  len_tol=1e-12, maxfun=20000).x,
}


@pytest.mark.parametrize("name", list(LEGACY))
def test_legacy_and_global_minimizers_closed_form(name):
    f = LEGACY[name]
    a = np.array([0.7, -0.4])
    xs, d1s = zip(*[quartic_argmin_derivatives(v)[:2] for v in a])
    # DIRECT only brackets the minimum; TNC and DE's L-BFGS-B polish stop near 1e-6
    rtol = {"direct": 1e-3, "dual_annealing-no-local-search": 5e-2, "fmin_tnc": 1e-5, "differential_evolution": 1e-5}.get(name, 1e-6)
    x = f(a)
    assert np.allclose(x, xs, rtol=rtol)
    if name == "dual_annealing-no-local-search":
        # a rough minimum: the derivative is that of the point found, 2 / (2 + 3 x^2) there
        d1s, rtol = 2.0 / (2.0 + 3 * x * x), 1e-10
    assert np.allclose(tg.jacobian(f)(a), np.diag(d1s), rtol=rtol, atol=rtol * 1e-2)


def test_fixed_point_implicit():
    def fp(a):  # x = a cos x
        return so.fixed_point(lambda x, a: a * np.cos(x), 0.5, args=(a,), xtol=1e-14)

    x = fp(1.0)
    assert np.isclose(tg.grad(fp)(1.0), np.cos(x) / (1 + np.sin(x)), rtol=1e-10)
    assert np.isclose(tg.hessian(fp)(1.0), fd(lambda s: tg.grad(fp)(s), 1.0), rtol=1e-6)


# ---------------------------------------------------------------------- fits
X = np.linspace(0.0, 2.0, 9)
Y = 2.0 * np.exp(-0.8 * X) + 0.05 * np.sin(7 * X)  # a model error: residuals do not vanish


def test_least_squares_linear_regression_is_the_hat_matrix():
    design = np.stack([np.ones_like(X), X, X**2], axis=1)

    def fit(y):
        return least_squares(lambda p: design @ p - y, np.zeros(3), xtol=1e-15, ftol=1e-15, gtol=1e-15).x

    expected = np.linalg.solve(design.T @ design, design.T)
    assert np.allclose(tg.jacobian(fit)(Y), expected, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("loss, method", [("linear", "lm"), ("linear", "dogbox"), ("soft_l1", "trf"), ("cauchy", "trf")])
def test_least_squares_nonlinear_fit_exact_optimality_not_gauss_newton(loss, method):
    def fit(y):
        res = least_squares(lambda p, x: p[0] * np.exp(-p[1] * x) - y, np.array([1.0, 1.0]), args=(X,),
                            loss=loss, f_scale=0.5, method=method, xtol=1e-15, ftol=1e-15, gtol=1e-15)
        return res.x

    J = tg.jacobian(fit)(Y)
    assert np.allclose(J, fd_grad(fit, Y), rtol=1e-5, atol=3e-6)
    if loss == "linear":
        # Gauss-Newton's (J'J)^{-1} J' drops the residuals' curvature: visibly different here
        p = fit(Y)
        jr = np.stack([np.exp(-p[1] * X), -p[0] * X * np.exp(-p[1] * X)], axis=1)
        gauss_newton = np.linalg.solve(jr.T @ jr, jr.T)
        assert np.max(np.abs(gauss_newton - J)) > 1e-3


def test_least_squares_cost_and_residuals_carry_derivatives():
    def cost(y):
        return least_squares(lambda p: p[0] * np.exp(-p[1] * X) - y, np.array([1.0, 1.0]),
                             xtol=1e-15, ftol=1e-15, gtol=1e-15).cost

    g = tg.grad(cost)(Y)
    assert np.allclose(g, fd_grad(cost, Y), rtol=1e-5, atol=1e-8)


def model(x, amplitude, rate):
    return amplitude * np.exp(-rate * x)


def test_curve_fit_popt_and_pcov_wrt_data():
    def popt(y):
        return curve_fit(model, X, y, p0=[1.0, 1.0], ftol=1e-15, xtol=1e-15, gtol=1e-15)[0]

    def pcov(y):
        return curve_fit(model, X, y, p0=[1.0, 1.0], ftol=1e-15, xtol=1e-15, gtol=1e-15)[1]

    assert np.allclose(tg.jacobian(popt)(Y), fd_grad(popt, Y), rtol=1e-5, atol=3e-6)
    assert np.allclose(tg.jacobian(pcov)(Y), fd_grad(pcov, Y), rtol=1e-5, atol=1e-8)


def test_curve_fit_sigma_bounds_and_second_order():
    sigma = np.linspace(0.5, 1.5, X.size)

    def amplitude(y):
        p, _ = scipy.optimize.curve_fit(model, X, y, p0=[1.0, 1.0], sigma=sigma, bounds=([0.0, 0.0], [10.0, 10.0]),
                                        ftol=1e-15, xtol=1e-15, gtol=1e-15)
        return p[0]

    g = tg.grad(amplitude)(Y)
    assert np.allclose(g, fd_grad(amplitude, Y), rtol=1e-5, atol=3e-6)
    H = tg.hessian(amplitude)(Y)
    assert np.allclose(H, fd_grad(lambda y: tg.grad(amplitude)(y), Y), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------- the door's guarantees
def _plain_calls():
    return (
        brentq(lambda x: x**3 + x - 1.0, 0.0, 2.0),
        newton(lambda x: x * x - 2.0, 1.0),
        root(lambda z: [z[0] ** 2 - 2.0, z[1] - 1.0], [1.0, 1.0]).x,
        fsolve(lambda z: [z[0] ** 2 - 2.0, z[1] - 1.0], [1.0, 1.0]),
        minimize(lambda x: np.sum((x - 1.0) ** 2), np.zeros(2)).x,
        minimize(lambda x: np.sum((x - 1.0) ** 2), np.zeros(2), method="SLSQP",
                 constraints={"type": "eq", "fun": lambda x: x[0] - 2 * x[1]}).x,
        so.minimize_scalar(lambda x: (x - 1.0) ** 2).x,
        so.fmin_bfgs(lambda x: np.sum((x - 1.0) ** 2), np.zeros(2), disp=0),
        least_squares(lambda p: p[0] * np.exp(-p[1] * X) - Y, np.array([1.0, 1.0])).x,
        so.leastsq(lambda p: p[0] * np.exp(-p[1] * X) - Y, np.array([1.0, 1.0]))[0],
        curve_fit(model, X, Y, p0=[1.0, 1.0])[0],
        curve_fit(model, X, Y, p0=[1.0, 1.0])[1],
        so.fixed_point(lambda x: np.cos(x), 0.5),
    )


def test_no_tracer_gives_scipy_exact_results_and_restores_code():
    codes = {f: f.__code__ for f in (brentq, newton, root, fsolve, minimize, least_squares, curve_fit,
                                     so.minimize_scalar, so.fmin_bfgs, so.leastsq, so.fixed_point)}
    expected = _plain_calls()
    seen = []

    def f(w):
        seen.append(_plain_calls())
        return w * w

    tg.grad(f)(2.0)
    for got, want in zip(seen[0], expected):
        assert np.array_equal(got, want) and type(got) is type(want)
    _plain_calls()  # the first plain call after the window restores SciPy's code (the trampolines linger till then)
    for fun, code in codes.items():
        assert fun.__code__ is code


def test_callback_error_reaches_the_user_first_time_every_time():
    def f(k):
        return brentq(lambda x: x**3 + float(k) * x - 1.0, 0.0, 2.0)  # float() of a tracer

    for _ in range(3):
        with pytest.raises(GradientDroppedError):
            tg.grad(f)(1.5)

    class Mine(Exception):
        pass

    def g(k):
        def fun(x):
            raise Mine("from the callback")

        return fsolve(fun, [1.0, 1.0])

    for _ in range(2):
        with pytest.raises(Mine, match="from the callback"):
            tg.grad(lambda k: np.sum(g(k)) * k)(1.0)

    def h(k):
        return minimize(lambda x: np.sum(x**2) * k + np.exp(float(k)), np.zeros(2)).x

    with pytest.raises(GradientDroppedError):
        tg.jacobian(h)(1.0)


def test_inputs_not_mutated():
    x0 = np.array([1.0, 1.0])
    y = Y.copy()

    def f(y):
        return least_squares(lambda p: p[0] * np.exp(-p[1] * X) - y, x0).x

    tg.jacobian(f)(y)
    assert np.array_equal(y, Y) and np.array_equal(x0, [1.0, 1.0])


def test_minimize_that_reports_no_success_warns_that_the_derivative_assumes_stationarity():
    # maxiter=2 stops BFGS far from the minimum of a shifted quartic: the derivative the
    # implicit function theorem gives there is not the argmin's, and the user is told.
    def argmin(p):
        return scipy.optimize.minimize(
            lambda x: np.sum((x - p) ** 4) + np.sum(x**2), np.zeros(2), method="BFGS", options={"maxiter": 2}
        ).x

    with pytest.warns(RuntimeWarning, match="did not report success") as record:
        tg.jacobian(argmin)(np.array([1.0, -2.0]))
    assert record[0].filename == __file__  # the warning points at the user's line


def test_curve_fit_without_p0_reads_the_model_signature():
    # SciPy counts the fit parameters from the model's signature when p0 is None: the
    # wrapped callback must keep it (it raised "Unable to determine number of fit parameters").
    import scipy.optimize as so

    t = np.arange(5.0)
    y = np.array([0.7, 1.3, 0.4, 0.9, 1.6])

    def fit(y, s):
        return so.curve_fit(lambda t, a, b: a * t + b * t**2, t, y, sigma=s)[0]

    def closed_form(y, s):
        design = np.stack([t, t**2], axis=1) / s[:, None]
        return np.linalg.lstsq(design, y / s, rcond=None)[0]

    s0 = np.linspace(0.5, 1.5, 5)
    for argnum in (0, 1):
        got = tg.jacobian(fit, argnums=argnum)(y, s0)
        np.testing.assert_allclose(got, tg.jacobian(closed_form, argnums=argnum)(y, s0), rtol=1e-6, atol=1e-8)
