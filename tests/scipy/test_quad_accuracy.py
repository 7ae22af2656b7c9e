"""``quad``'s derivative across kinks of the integrand: as accurate as the tolerance asked, or refused.

The value's integrand ``(t - p)_+^2`` is smooth enough for QUADPACK to resolve with few
subintervals, but its derivatives in ``p`` (``-2 (t - p)_+``, then ``2 H(t - p)``) have a
kink and a jump at ``t = p``, which a Gauss rule across ``t = p`` does not integrate to
the tolerance (the gradient was off by 2.8e-9 and the Hessian by 9.5e-5 where 1e-13 was
asked).  tapegrad follows the switches of the integrand's kinked calls and splits the
range there, at a breakpoint that moves with ``p``: the derivatives are then exact at
every order, on finite and infinite ranges, with traced limits, ``args=`` and
``points=``.  A jump that moves (the integrand itself discontinuous) is refused unless
``points=`` names it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.integrate as si
from scipy.integrate import quad

import tapegrad as tg
from tapegrad.errors import NonDifferentiableArgumentError
from tapegrad.solvers import integrate

TIGHT = dict(epsabs=1e-13, epsrel=1e-13)


def relu2(p):
    return quad(lambda t: np.maximum(t - p, 0.0) ** 2, 0.0, 2.0, **TIGHT)[0]


@pytest.mark.parametrize("tolerances", [TIGHT, {}], ids=["tight", "default"])
def test_the_reported_case_gradient_and_hessian_are_exact(tolerances):
    def f(p):
        return quad(lambda t: np.maximum(t - p, 0.0) ** 2, 0.0, 2.0, **tolerances)[0]

    p = 0.7  # int_0^2 (t - p)_+^2 dt = (2 - p)^3 / 3
    assert abs(tg.grad(f)(p) - (-(2 - p) ** 2)) < 1e-13  # was off by 2.8e-9
    assert abs(tg.hessian(f)(p) - 2 * (2 - p)) < 1e-12  # was 2.599905
    assert abs(tg.jacfwd(f)(p) - (-(2 - p) ** 2)) < 1e-13
    assert abs(tg.hvp(lambda q: f(q[0]))(np.array([p]), np.array([1.0]))[0] - 2 * (2 - p)) < 1e-12


def _relu2_limits(v):  # int_a^b (t - p)_+^2 dt = (b - p)^3 / 3 for a < p < b
    p, a, b = v
    return quad(lambda t: np.maximum(t - p, 0.0) ** 2, a, b, **TIGHT)[0]


def test_traced_limits_first_and_second_order():
    p, a, b = v = np.array([0.7, 0.1, 1.9])
    d = b - p
    np.testing.assert_allclose(tg.grad(_relu2_limits)(v), [-d * d, 0.0, d * d], rtol=1e-12, atol=1e-13)
    want = np.array([[2 * d, 0.0, -2 * d], [0.0, 0.0, 0.0], [-2 * d, 0.0, 2 * d]])
    np.testing.assert_allclose(tg.hessian(_relu2_limits)(v), want, rtol=1e-11, atol=1e-12)
    reversed_range = tg.hessian(lambda w: -quad(lambda t: np.maximum(t - w[0], 0.0) ** 2, w[2], w[1], **TIGHT)[0])
    np.testing.assert_allclose(reversed_range(v), want, rtol=1e-11, atol=1e-12)


def test_abs_kink_is_now_differentiated_instead_of_refused():
    def f(v):  # q (p^2 / 2 + (2 - p)^2 / 2) + 2
        return quad(lambda t: np.abs(t - v[0]) * v[1] + t, 0.0, 2.0, **TIGHT)[0]

    p, q = v = np.array([0.7, 1.4])
    np.testing.assert_allclose(tg.grad(f)(v), [q * (2 * p - 2), p * p / 2 + (2 - p) ** 2 / 2], rtol=1e-12)
    np.testing.assert_allclose(tg.hessian(f)(v), [[2 * q, 2 * p - 2], [2 * p - 2, 0.0]], rtol=1e-11, atol=1e-12)


def test_two_kinks_of_a_clip_and_a_third_derivative():
    def f(v):  # int_0^2 clip(t, l, u)^2 dt = l^3 + (u^3 - l^3) / 3 + u^2 (2 - u)
        return quad(lambda t: np.clip(t, v[0], v[1]) ** 2, 0.0, 2.0, **TIGHT)[0]

    lo, hi = v = np.array([0.7, 1.5])
    np.testing.assert_allclose(tg.grad(f)(v), [2 * lo * lo, 4 * hi - 2 * hi * hi], rtol=1e-12)
    np.testing.assert_allclose(tg.hessian(f)(v), [[4 * lo, 0.0], [0.0, 4 - 4 * hi]], rtol=1e-11, atol=1e-12)

    def cube(p):  # int_0^2 |t - p|^3 dt = (p^4 + (2 - p)^4) / 4: third derivative 6 p - 6 (2 - p)
        return quad(lambda t: np.abs(t - p) ** 3, 0.0, 2.0, **TIGHT)[0]

    assert abs(tg.jacobian(tg.hessian(cube))(0.7) - (6 * 0.7 - 6 * 1.3)) < 1e-11


def test_infinite_ranges():
    p = 0.7

    def upper(v):  # int_a^inf (t - p)_+^2 e^-t dt = 2 e^-p for a < p
        return quad(lambda t: np.maximum(t - v[0], 0.0) ** 2 * np.exp(-t), v[1], np.inf, **TIGHT)[0]

    np.testing.assert_allclose(tg.grad(upper)(np.array([p, 0.1])), [-2 * np.exp(-p), 0.0], rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(tg.hessian(upper)(np.array([p, 0.1])), [[2 * np.exp(-p), 0], [0, 0]],
                               rtol=1e-11, atol=1e-13)

    def lower(p):  # int_-inf^2 (p - t)_+^2 e^t dt = 2 e^p
        return quad(lambda t: np.maximum(p - t, 0.0) ** 2 * np.exp(t), -np.inf, 2.0, **TIGHT)[0]

    assert abs(tg.hessian(lower)(p) - 2 * np.exp(p)) < 1e-11 * np.exp(p)

    def line(p):  # int |t - p| e^-t^2 dt = e^-p^2 + sqrt(pi) p erf(p)
        return quad(lambda t: np.abs(t - p) * np.exp(-t * t), -np.inf, np.inf, **TIGHT)[0]

    assert abs(tg.grad(line)(p) - math.sqrt(math.pi) * math.erf(p)) < 1e-12
    assert abs(tg.hessian(line)(p) - 2 * math.exp(-p * p)) < 1e-11


def test_args_vector_outputs_and_several_kinks():
    def f(v):
        first = quad(lambda t, p, q: q * np.maximum(t - p, 0.0) ** 2, 0.0, 2.0, args=(v[0], v[1]), **TIGHT)[0]
        return np.stack([first, quad(lambda t: np.abs(t - v[1]) * v[0], 0.0, 2.0, **TIGHT)[0]])

    p, q = v = np.array([0.7, 1.2])
    want = [[-q * (2 - p) ** 2, (2 - p) ** 3 / 3], [q * q / 2 + (2 - q) ** 2 / 2, p * (2 * q - 2)]]
    np.testing.assert_allclose(tg.jacobian(f)(v), want, rtol=1e-12)

    def rectified(w):  # |sin(w s)| kinks at k pi / w: against the same integral with them as points=
        return quad(lambda s: np.exp(-0.5 * (4.0 - s)) * np.abs(np.sin(w * s)), 0.0, 4.0, limit=200, **TIGHT)[0]

    def rectified_points(w):
        kinks = [k * np.pi / w for k in range(1, 4)]
        return quad(lambda s: np.exp(-0.5 * (4.0 - s)) * np.abs(np.sin(w * s)), 0.0, 4.0, points=kinks, limit=200,
                    **TIGHT)[0]

    assert abs(tg.grad(rectified)(1.3) - tg.grad(rectified_points)(1.3)) < 1e-11
    assert abs(tg.hessian(rectified)(1.3) - tg.hessian(rectified_points)(1.3)) < 1e-9


def test_kinks_in_python_branches_and_builtins():
    def branch(p):
        return quad(lambda t: (t - p) ** 2 if t > p else 0.0 * t, 0.0, 2.0, **TIGHT)[0]

    def builtin(p):
        return quad(lambda t: max(t - p, 0.0) ** 2, 0.0, 2.0, **TIGHT)[0]

    for f in (branch, builtin):
        assert abs(tg.grad(f)(0.7) + 1.3 ** 2) < 1e-12 and abs(tg.hessian(f)(0.7) - 2.6) < 1e-11


def test_a_plain_breakpoint_at_a_moving_kink_moves_with_it():
    def f(p):  # points=[0.7] is where the kink is, but it does not move with p
        return quad(lambda t: np.abs(t - p) * t, 0.0, 2.0, points=[0.7], **TIGHT)[0]

    # int_0^2 |t - p| t dt = p^3 / 3 + 4 / 3 - 2 p: second derivative 2 p
    assert abs(tg.grad(f)(0.7) - (0.49 - 2.0)) < 1e-12
    assert abs(tg.hessian(f)(0.7) - 1.4) < 1e-11


def test_fixed_kinks_and_jumps_need_no_points():
    def kink(c):  # int_0^2 |t - 1| c t dt = c
        return quad(lambda t: np.abs(t - 1.0) * c * t, 0.0, 2.0, **TIGHT)[0]

    def jump(h):  # int_0^2 (h if t > 1 else 2) t dt = 1 + 1.5 h
        return quad(lambda t: np.where(t > 1.0, h, 2.0) * t, 0.0, 2.0, **TIGHT)[0]

    assert abs(tg.grad(kink)(0.7) - 1.0) < 1e-13 and tg.hessian(kink)(0.7) == 0.0
    assert abs(tg.grad(jump)(0.7) - 1.5) < 1e-13


def test_a_moving_jump_is_refused_unless_points_names_it():
    def f(p):
        return quad(lambda t: np.where(t > p, 1.0, 0.0) * np.exp(-t), 0.0, 2.0, **TIGHT)[0]

    for derivative in (tg.grad, tg.hessian):
        with pytest.raises(NonDifferentiableArgumentError, match=r"quad.*jumps at x = 0\.7.*points="):
            derivative(f)(0.7)
    with pytest.raises(NonDifferentiableArgumentError, match=r"quad.*points="):
        tg.grad(lambda p: quad(lambda t: np.sign(t - p) * t, 0.0, 2.0)[0])(0.7)

    def named(p):  # int_p^2 e^-t dt
        return quad(lambda t: np.where(t > p, 1.0, 0.0) * np.exp(-t), 0.0, 2.0, points=[p], **TIGHT)[0]

    assert abs(tg.grad(named)(0.7) + np.exp(-0.7)) < 1e-13
    assert abs(tg.hessian(named)(0.7) - np.exp(-0.7)) < 1e-13


def test_a_switch_with_a_multiple_root_is_refused_clearly():
    with pytest.raises(NonDifferentiableArgumentError, match=r"quad.*zero slope.*points="):
        tg.grad(lambda p: quad(lambda t: np.maximum((t - p) ** 3, 0.0), 0.0, 2.0, **TIGHT)[0])(0.7)


def test_dblquad_with_an_inner_kink_that_moves_with_the_outer_variable():
    def f(v):  # int_0^1 int_0^2 (y - v x)_+^2 dy dx = (16 - (2 - v)^4) / (12 v)
        return si.dblquad(lambda y, x: np.maximum(y - v * x, 0.0) ** 2, 0.0, 1.0, 0.0, 2.0)[0]

    v = 0.7
    grad = (4 * (2 - v) ** 3 * v - (16 - (2 - v) ** 4)) / (12 * v * v)
    assert abs(tg.grad(f)(v) - grad) < 1e-8  # 1.5e-7 before


def test_smooth_integrands_do_not_look_for_kinks(monkeypatch):
    looked = []
    original = integrate._kink_roots

    def spying(*args):
        looked.append(True)
        return original(*args)

    monkeypatch.setattr(integrate, "_kink_roots", spying)

    def f(k):  # int_0^3 exp(-k t^2) dt, against the quadrature of -t^2 exp(-k t^2)
        return quad(lambda t: np.exp(-k * t * t), 0.0, 3.0, **TIGHT)[0]

    want = -quad(lambda t: t * t * np.exp(-0.7 * t * t), 0.0, 3.0, **TIGHT)[0]
    assert abs(tg.grad(f)(0.7) - want) < 1e-13
    assert not looked
    tg.grad(relu2)(0.7)  # the spy sees a kinked one
    assert looked


def test_kinked_calls_on_the_parameters_alone_are_not_kinks():
    def f(p):  # np.maximum of p alone does not switch along t
        return quad(lambda t: np.maximum(p, 0.5) * np.exp(-t), 0.0, 2.0, **TIGHT)[0]

    assert abs(tg.grad(f)(0.7) - (1 - np.exp(-2.0))) < 1e-13
