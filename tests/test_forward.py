"""Forward mode and products: tg.jvp, tg.jacfwd, tg.hvp."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import check_grads, numerical_jvp

rng = np.random.default_rng(1)

W = rng.standard_normal((4, 3))


def mlp(x):
    return np.tanh(W @ x) * np.exp(-np.sum(x**2) / 4)


def mixed(x):
    return np.concatenate([np.cumsum(x), np.sin(x[::-1]) * x[0], np.max(x, keepdims=True)])


FUNCTIONS = [
    (mlp, (3,)),
    (mixed, (4,)),
    (lambda x: np.sum(x * x.T, axis=0) / (1 + x**2).mean(), (3, 3)),
    (lambda x: np.sqrt(np.sum(x**2)) * x[:2], (5,)),
]


@pytest.mark.parametrize("fun,shape", FUNCTIONS)
def test_jvp_matches_reverse_jacobian_and_finite_differences(fun, shape):
    x = rng.standard_normal(shape)
    u = rng.standard_normal(shape)
    out, t = tg.jvp(fun, (x,), (u,))
    np.testing.assert_allclose(out, fun(x), rtol=1e-13)
    J = tg.jacobian(fun)(x)
    expected = np.tensordot(J, u, axes=u.ndim)
    np.testing.assert_allclose(t, expected, rtol=1e-10, atol=1e-12)
    (fd,) = numerical_jvp(fun, [x], 0, u)
    np.testing.assert_allclose(t, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("fun,shape", FUNCTIONS)
def test_jacfwd_equals_jacobian(fun, shape):
    x = rng.standard_normal(shape)
    np.testing.assert_allclose(tg.jacfwd(fun)(x), tg.jacobian(fun)(x), rtol=1e-10, atol=1e-12)


def test_batched_tangents_one_call_equals_loop():
    x = rng.standard_normal(3)
    U = rng.standard_normal((5, 3))
    _, T = tg.jvp(mlp, (x,), (U,))
    assert T.shape == (5, 4)
    for k in range(5):
        np.testing.assert_allclose(T[k], tg.jvp(mlp, (x,), (U[k],))[1], rtol=1e-12)


def test_several_primals_structures_and_outputs():
    def f(params, x):
        a, b = params["a"], params["b"]
        return {"y": np.sin(a * x) + b, "s": np.sum(a * b * x)}

    params = {"a": rng.standard_normal(3), "b": 0.7}
    x = rng.standard_normal(3)
    tangents = ({"a": rng.standard_normal(3), "b": 1.5}, rng.standard_normal(3))
    out, t = tg.jvp(f, (params, x), tangents)
    eps = 1e-6

    def shifted(sign):
        p = {"a": params["a"] + sign * eps * tangents[0]["a"], "b": params["b"] + sign * eps * tangents[0]["b"]}
        return f(p, x + sign * eps * tangents[1])

    plus, minus = shifted(1), shifted(-1)
    for key in ("y", "s"):
        np.testing.assert_allclose(t[key], (plus[key] - minus[key]) / (2 * eps), rtol=1e-6, atol=1e-8)


def test_integer_primal_and_constant_output():
    def f(x, n):
        return x**n, np.ones(2)

    out, (t, t_const) = tg.jvp(f, (np.array([1.0, 2.0]), 3), (np.array([1.0, 1.0]), None))
    np.testing.assert_allclose(t, 3 * np.array([1.0, 4.0]))
    np.testing.assert_array_equal(t_const, np.zeros(2))


def test_complex_holomorphic_and_real_to_complex():
    z = rng.standard_normal(3) + 1j * rng.standard_normal(3)
    u = rng.standard_normal(3) + 1j * rng.standard_normal(3)
    np.testing.assert_allclose(tg.jvp(np.exp, (z,), (u,))[1], np.exp(z) * u, rtol=1e-12)
    x = rng.standard_normal(3)
    v = rng.standard_normal(3)
    np.testing.assert_allclose(tg.jvp(lambda x: np.exp(1j * x), (x,), (v,))[1], 1j * np.exp(1j * x) * v, rtol=1e-12)


def test_has_aux():
    out, t, aux = tg.jvp(lambda x: (x**2, "label"), (3.0,), (1.0,), has_aux=True)
    assert (out, t, aux) == (9.0, 6.0, "label")
    jac, aux = tg.jacfwd(lambda x: (np.sin(x), x.shape), has_aux=True)(np.zeros(2))
    np.testing.assert_allclose(jac, np.eye(2))
    assert aux == (2,)


def test_jacfwd_several_argnums_float32_and_structures():
    def f(a, b):
        return np.tanh(a @ b)

    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    fa, fb = tg.jacfwd(f, argnums=(0, 1))(a, b)
    ra, rb = tg.jacobian(f, argnums=(0, 1))(a, b)
    assert fa.shape == (2, 2, 3) and fb.shape == (2, 3)
    assert fa.dtype == np.float32 and fb.dtype == np.float32
    np.testing.assert_allclose(fa, ra, rtol=1e-5)
    np.testing.assert_allclose(fb, rb, rtol=1e-5)
    jac = tg.jacfwd(lambda p: [p[0] * 2, np.sum(p[1])])([np.ones(2), np.ones(3)])
    np.testing.assert_allclose(jac[0][0], 2 * np.eye(2))
    np.testing.assert_allclose(jac[1][1], np.ones(3))
    np.testing.assert_allclose(jac[1][0], np.zeros(2))


def test_jvp_is_differentiable():
    u = rng.standard_normal(3)

    def directional(x):
        return np.sum(tg.jvp(mlp, (x,), (u,))[1] ** 2)

    check_grads(directional, [rng.standard_normal(3)], order=2)


def test_forward_over_reverse_hessian():
    f = lambda x: np.sum(np.sin(x) * np.roll(x, 1)) + np.prod(x)
    x = rng.standard_normal(4)
    np.testing.assert_allclose(tg.jacfwd(tg.grad(f))(x), tg.hessian(f)(x), rtol=1e-10, atol=1e-12)
    # forward over forward (three tape levels deep)
    g = lambda x: np.sum(x**3) * x[0]
    np.testing.assert_allclose(tg.jacfwd(tg.jacfwd(g))(x[:3]), tg.hessian(g)(x[:3]), rtol=1e-10, atol=1e-12)


def test_hvp_matches_hessian_batched_and_with_args():
    def f(x, A, scale=1.0):
        return scale * (np.sum(np.cos(A @ x)) + np.sum(x**4))

    A = rng.standard_normal((3, 4))
    x = rng.standard_normal(4)
    H = tg.hessian(f)(x, A, scale=2.0)
    v = rng.standard_normal(4)
    np.testing.assert_allclose(tg.hvp(f)(x, v, A, scale=2.0), H @ v, rtol=1e-10)
    V = rng.standard_normal((6, 4))
    np.testing.assert_allclose(tg.hvp(f)(x, V, A, scale=2.0), V @ H, rtol=1e-10)
    # finite differences of the gradient along v
    gradf = tg.grad(f)
    eps = 1e-6
    fd = (gradf(x + eps * v, A, 2.0) - gradf(x - eps * v, A, 2.0)) / (2 * eps)
    np.testing.assert_allclose(tg.hvp(f)(x, v, A, 2.0), fd, rtol=1e-6)


def test_hvp_closed_form():
    # f = 0.5 x^T Q x + sum(exp(x)):  H = Q + diag(exp(x)).
    Q = rng.standard_normal((5, 5))
    Q = Q + Q.T
    f = lambda x: 0.5 * x @ Q @ x + np.sum(np.exp(x))
    x, v = rng.standard_normal(5), rng.standard_normal(5)
    np.testing.assert_allclose(tg.hvp(f)(x, v), Q @ v + np.exp(x) * v, rtol=1e-12)


def test_errors():
    with pytest.raises(ValueError):
        tg.jvp(np.sin, (np.ones(2),), ())
    with pytest.raises(ValueError):
        tg.jvp(np.sin, (np.ones(2),), (np.ones(3),))
    with pytest.raises(ValueError):
        tg.jvp(lambda x, y: x * y, (np.ones(2), np.ones(2)), (np.ones((3, 2)), np.ones((4, 2))))


def test_jacobian_mode_forward():
    x = rng.standard_normal(3)
    np.testing.assert_allclose(tg.jacobian(mlp, mode="forward")(x), tg.jacobian(mlp)(x), rtol=1e-10)
    with pytest.raises(ValueError):
        tg.jacobian(mlp, mode="sideways")
    with pytest.raises(ValueError):
        tg.jacobian(mlp, mode="forward", chunk_size=2)


def test_batch_of_tangents_is_one_pass_through_the_rules():
    # A custom rule sees the (unbatched) placeholder cotangent once, however many tangents.
    calls = []

    @tg.custom_vjp
    def cube(x):
        return x**3

    def cube_vjp(g, ans, x):
        calls.append(np.shape(g))
        return g * 3 * x**2

    cube.defvjp(cube_vjp)
    x = rng.standard_normal(3)
    _, T = tg.jvp(cube, (x,), (np.eye(3),))
    np.testing.assert_allclose(T, np.diag(3 * x**2), rtol=1e-12)
    assert calls == [(3,)]
