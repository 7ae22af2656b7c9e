"""User-defined rules: tg.custom_vjp, tg.defvjp on third-party ufuncs, tg.defconstant."""

import numpy as np
import pytest
import scipy.special as sp

import tapegrad as tg
from tapegrad.registry import RULES
from tapegrad.testing import check_grads

_bound_asarray = np.asarray  # bound at import, like `from numpy import asarray`

rng = np.random.default_rng(0)


@pytest.fixture
def restore_rules():
    """Rules registered on shared objects (SciPy ufuncs) are undone after the test."""
    saved = dict(RULES)
    yield
    RULES.clear()
    RULES.update(saved)


# --------------------------------------------------------------- custom_vjp on functions
@tg.custom_vjp
def opaque_sinh(x):
    # np.asarray on a tracer raises: this body cannot be traced, only the rule can be used.
    x = np.asarray(x)
    return np.sinh(x)


opaque_sinh.defvjp(lambda g, ans, x: g * np.cosh(x))


def test_rule_replaces_untraceable_body():
    x = rng.standard_normal(5)
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(opaque_sinh(x)))(x), np.cosh(x), rtol=1e-12)
    np.testing.assert_allclose(tg.hessian(lambda x: np.sum(opaque_sinh(x)))(x), np.diag(np.sinh(x)), rtol=1e-12)
    check_grads(lambda x: opaque_sinh(x) * x, [x], order=2)


def test_plain_call_and_metadata():
    x = rng.standard_normal(3)
    np.testing.assert_array_equal(opaque_sinh(x), np.sinh(x))
    assert opaque_sinh.__name__ == "opaque_sinh"
    assert tg.custom_vjp(opaque_sinh) is opaque_sinh


def test_without_rules_the_body_is_traced():
    @tg.custom_vjp
    def f(x):
        return np.sin(x) * x

    x = rng.standard_normal(4)
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(f(x)))(x), np.cos(x) * x + np.sin(x), rtol=1e-12)


def test_rule_is_used_instead_of_body():
    # A deliberately different "derivative" shows which one tapegrad calls.
    @tg.custom_vjp
    def f(x):
        return x * x

    f.defvjp(lambda g, ans, x: g * 7.0)
    assert tg.grad(f)(3.0) == 7.0


# A rule written for batched cotangents: address axes from the end, use `...`.
@tg.custom_vjp
def quad_form(A, x):
    """x^T A x for a stack-free square A and vector x."""
    return np.einsum("i,ij,j->", x, A, x)


quad_form.defvjp(
    lambda g, ans, A, x: g[..., None, None] * (x[:, None] * x[None, :]),
    lambda g, ans, A, x: g[..., None] * (A @ x + x @ A),
)


def test_two_arguments_first_and_second_order():
    A = rng.standard_normal((3, 3))
    x = rng.standard_normal(3)
    gA, gx = tg.grad(quad_form, argnums=(0, 1))(A, x)
    np.testing.assert_allclose(gA, np.outer(x, x), rtol=1e-12)
    np.testing.assert_allclose(gx, (A + A.T) @ x, rtol=1e-12)
    np.testing.assert_allclose(tg.hessian(quad_form, argnums=1)(A, x), A + A.T, rtol=1e-12)
    check_grads(quad_form, [A, x], order=2)


def test_batched_cotangents_reach_the_rule():
    @tg.custom_vjp
    def scale_rows(W, x):
        return W @ x

    seen = []

    def vjp_x(g, ans, W, x):
        seen.append(np.shape(g))
        return g @ W

    scale_rows.defvjp(lambda g, ans, W, x: g[..., :, None] * x, vjp_x)
    W = rng.standard_normal((4, 3))
    x = rng.standard_normal(3)
    J = tg.jacobian(scale_rows, argnums=1)(W, x)
    np.testing.assert_allclose(J, W, rtol=1e-12)
    assert seen == [(4, 4)]  # one sweep carrying all four basis cotangents
    rows = np.stack([tg.grad(lambda x, i=i: scale_rows(W, x)[i])(x) for i in range(4)])
    np.testing.assert_allclose(J, rows, rtol=1e-12)
    check_grads(lambda W, x: np.tanh(scale_rows(W, x)), [W, x], order=2)


def test_keyword_arguments_reach_the_rule_and_constant_arg():
    @tg.custom_vjp
    def shifted_power(x, p, shift=0.0):
        return (x + shift) ** p

    shifted_power.defvjp(lambda g, ans, x, p, shift=0.0: g * p * (x + shift) ** (p - 1), tg.CONSTANT_ARG)
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(shifted_power(x, 3, shift=1.0)))(x), 3 * (x + 1) ** 2)
    # CONSTANT_ARG: a traced exponent is used as a constant, not differentiated.
    gp = tg.grad(lambda p: np.sum(shifted_power(x, p)))(2.0)
    assert gp == 0.0


def test_missing_rule_for_an_argument_raises():
    @tg.custom_vjp
    def f(x, y):
        return x * y

    f.defvjp(lambda g, ans, x, y: g * y, None)
    assert tg.grad(f)(2.0, 3.0) == 3.0
    with pytest.raises(tg.NonDifferentiableArgumentError):
        tg.grad(f, argnums=1)(2.0, 3.0)


def test_several_outputs():
    @tg.custom_vjp
    def polar(x, y):
        return np.hypot(x, y), np.arctan2(y, x)

    def vjp_x(g, ans, x, y):
        r, _ = ans
        g_r, g_t = g
        return g_r * x / r - g_t * y / r**2

    def vjp_y(g, ans, x, y):
        r, _ = ans
        g_r, g_t = g
        return g_r * y / r + g_t * x / r**2

    polar.defvjp(vjp_x, vjp_y)
    x, y = rng.uniform(0.5, 2.0, 4), rng.uniform(0.5, 2.0, 4)
    check_grads(polar, [x, y], order=2)
    # Only one output used: the other gets a zero cotangent.
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(polar(x, y)[1]))(x), -y / (x**2 + y**2), rtol=1e-12)


def test_float32_preserved():
    x = np.linspace(-1, 1, 4, dtype=np.float32)
    g = tg.grad(lambda x: np.sum(opaque_sinh(x)))(x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, np.cosh(x), rtol=1e-6)


def test_non_differentiable_rule_fails_loudly_at_second_order():
    @tg.custom_vjp
    def f(x):
        return np.exp(x)

    # A VJP that leaves NumPy (an asarray bound before tapegrad intercepts np.asarray)
    # works for gradients but cannot be traced.
    f.defvjp(lambda g, ans, x: g * np.exp(_bound_asarray(x)))
    assert np.isclose(tg.grad(f)(0.5), np.exp(0.5))
    with pytest.raises(tg.TapegradError):
        tg.hessian(f)(0.5)


def test_nested_custom_functions():
    @tg.custom_vjp
    def outer(x):
        return opaque_sinh(x) ** 2

    x = rng.standard_normal(3)
    # Body traced (no rule for outer), with opaque_sinh's rule inside.
    np.testing.assert_allclose(
        tg.grad(lambda x: np.sum(outer(x)))(x), 2 * np.sinh(x) * np.cosh(x), rtol=1e-12
    )
    check_grads(outer, [x], order=2)


# --------------------------------------------------------------- third-party ufuncs
def test_scipy_ufunc_rule_first_and_second_order(restore_rules):
    # Dawson's integral F: F'(x) = 1 - 2 x F(x); the rule reuses the ufunc itself.
    tg.defvjp(sp.dawsn, lambda g, ans, x: g * (1 - 2 * x * ans))
    x = np.linspace(-2.0, 3.0, 7)
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(sp.dawsn(x)))(x), 1 - 2 * x * sp.dawsn(x), rtol=1e-12)
    # F'' = -2 F - 2 x F' (closed form)
    F = sp.dawsn(x)
    np.testing.assert_allclose(
        np.diag(tg.hessian(lambda x: np.sum(sp.dawsn(x)))(x)), -2 * F - 2 * x * (1 - 2 * x * F), rtol=1e-10
    )
    check_grads(lambda x: sp.dawsn(x) * x, [x], order=2)


def test_scipy_binary_ufunc_rule(restore_rules):
    # Box-Cox: B = (x**l - 1) / l;  dB/dx = x**(l - 1);  dB/dl = (x**l log x - B) / l.
    tg.defvjp(
        sp.boxcox,
        lambda g, ans, x, lmbda: g * x ** (lmbda - 1),
        lambda g, ans, x, lmbda: g * (x**lmbda * np.log(x) - ans) / lmbda,
    )
    x = rng.uniform(0.5, 3.0, (2, 3))
    lmbda = np.array([0.3, 1.7, -0.6])  # broadcast along the rows
    check_grads(sp.boxcox, [x, lmbda], order=2)
    J = tg.jacobian(lambda l: sp.boxcox(x, l))(lmbda)
    assert J.shape == (2, 3, 3)


# --------------------------------------------------------------- defconstant on a user function
def test_defconstant_on_user_function():
    calls = []

    @tg.custom_vjp
    def quantize(x, step):
        calls.append(type(x))
        return np.round(x / step) * step

    tg.defconstant(quantize)
    x = np.array([0.12, 0.61, -0.4])

    def f(x):
        q = quantize(x, 0.25)
        assert type(q) is np.ndarray  # a constant: a plain array inside the trace
        return np.sum(q * x)

    np.testing.assert_allclose(tg.grad(f)(x), quantize(x, 0.25))
    assert tg.Tracer not in calls  # ran on raw values
    np.testing.assert_allclose(tg.hessian(f)(x), np.zeros((3, 3)))
