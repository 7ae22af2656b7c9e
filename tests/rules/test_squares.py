"""np.square of a modulus or a 2-norm (tapegrad.rules.squares): exact at every order, at zero too."""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tests._wrapped_checks import central_jacobian

PROGRAMS = {
    "abs real": (lambda x: np.sum(np.abs(x) ** 2 * np.array([1.0, 2.0, 3.0])), np.diag([2.0, 4.0, 6.0])),
    "abs complex": (lambda x: np.abs(x[0] + 1j * x[1]) ** 2 + 3 * np.abs(x[2] - 2j * x[1]) ** 2,
                    np.array([[2.0, 0, 0], [0, 2 + 24, 0], [0, 0, 6]])),
    "abs times itself": (lambda x: (lambda a: np.sum(a * a))(np.abs(x)), 2 * np.eye(3)),
    "norm": (lambda x: np.linalg.norm(x) ** 2, 2 * np.eye(3)),
    "norm complex": (lambda x: np.linalg.norm(x[:2] + 1j * x[1:]) ** 2, np.array([[2.0, 0, 0], [0, 4, 0], [0, 0, 2]])),
    "norm axis": (lambda x: np.sum(np.linalg.norm(np.stack([x, 2 * x]), axis=1) ** 2), 10 * np.eye(3)),
    "norm keepdims": (lambda x: np.sum(np.linalg.norm(x, keepdims=True) ** 2), 2 * np.eye(3)),
    "vector_norm": (lambda x: np.linalg.vector_norm(x) ** 2, 2 * np.eye(3)),
    "hypot": (lambda x: np.hypot(x[0], x[1]) ** 2 + np.hypot(x[2], 2.0) ** 2, 2 * np.eye(3)),
    "square": (lambda x: np.sum(np.square(np.abs(x))), 2 * np.eye(3)),
}
# Not fused (the chain rule's subgradient at 0 stays): np.power(np.abs(x), 2) and two separate
# moduli multiplied, np.abs(x) * np.abs(x); ** 2, np.square and a * a of one modulus are.


@pytest.mark.parametrize("name", list(PROGRAMS))
@pytest.mark.parametrize("where", ["zero", "away"])
def test_hessian_is_the_closed_form(name, where):
    f, hessian = PROGRAMS[name]
    x = np.zeros(3) if where == "zero" else np.array([0.3, -1.2, 2.0])
    np.testing.assert_allclose(tg.hessian(f)(x), hessian, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(tg.jacfwd(tg.grad(f))(x), hessian, rtol=1e-13, atol=1e-13)
    for v in np.eye(3):
        np.testing.assert_allclose(tg.hvp(f)(x, v), hessian @ v, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_value_and_gradient(name):
    f, hessian = PROGRAMS[name]
    x = np.array([0.3, -1.2, 2.0])
    value, grad = tg.value_and_grad(f)(x)
    assert value == f(x)  # NumPy's own value, bit for bit
    np.testing.assert_allclose(grad, central_jacobian(f, x), rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(tg.grad(f)(np.zeros(3)), np.zeros(3), atol=0)


def test_complex_gradient_convention():
    z = np.array([1.0 + 2.0j, -0.5 + 0.25j])
    np.testing.assert_array_equal(tg.grad(lambda z: np.sum(np.abs(z) ** 2))(z), 2 * np.conj(z))
    np.testing.assert_array_equal(tg.grad(lambda z: np.linalg.norm(z) ** 2)(z), 2 * np.conj(z))


def test_nan_and_inf_like_the_plain_chain():
    """Where |z| or the norm is not finite, the value is NumPy's and the gradient not finite either."""
    for x in (np.array([np.nan, 1.0, 2.0]), np.array([np.inf, 1.0, 2.0])):
        value, grad = tg.value_and_grad(lambda x: np.linalg.norm(x) ** 2)(x)
        assert np.isnan(value) if np.isnan(x[0]) else value == np.inf
        assert not np.isfinite(grad[0]) and np.all(np.isfinite(grad[1:]))


def test_reuse_replays_the_fused_node():
    f = PROGRAMS["abs complex"][0]
    g = tg.hessian(f, reuse=True)
    for x in (np.zeros(3), np.array([0.3, -1.2, 2.0]), np.zeros(3)):
        np.testing.assert_array_equal(g(x), tg.hessian(f)(x))
    assert g.reuse_stats.replays >= 1


def test_the_modulus_keeps_its_other_uses():
    """|z| used twice: squared (fused) and on its own (subgradient 0 at 0)."""
    f = lambda x: np.sum(np.abs(x) ** 2) + np.sum(np.abs(x))  # noqa: E731
    np.testing.assert_allclose(tg.grad(f)(np.array([0.5, -2.0])), [2.0, -5.0])
    np.testing.assert_allclose(tg.hessian(f)(np.zeros(2)), 2 * np.eye(2))
