"""The public examples of the core issue, number for number."""

import numpy as np
import pytest

import tapegrad as tg

T = np.array(
    [[0.8363, 0.4719, 0.9783], [0.3379, 0.6548, 0.3835], [0.7846, 0.9173, 0.2393],
     [0.5418, 0.3875, 0.4276], [0.0948, 0.2637, 0.8039]]
)
B = np.array(
    [[0.43842274, -0.53439844, -0.07710262], [1.5658046, -0.1012345, -0.2744976],
     [1.4204658, 1.2609464, -0.43640924]]
)


def test_square_gradient_is_six():
    assert tg.grad(lambda x: x * x)(3.0) == 6.0
    with tg.GradientTape() as tape:
        x = tape.watch(3.0)
        y = x * x
    np.testing.assert_equal(tape.gradient(y, x), 6.0)


def test_matmul_gradient_rows_are_row_sums_of_b():
    with tg.GradientTape(persistent=True) as tape:
        t = tape.watch(T)
        y = t @ B
        y00 = y[0, 0]
    g = tape.gradient(y, t)
    expected_row = np.array([-0.17307831, 1.1900724, 2.245003])
    np.testing.assert_allclose(g, np.tile(expected_row, (5, 1)), atol=1e-6)
    np.testing.assert_allclose(g[0], B.sum(axis=1))

    g00 = tape.gradient(y00, t)
    expected = np.zeros_like(T)
    expected[0] = B[:, 0]
    np.testing.assert_array_equal(g00, expected)

    J = tape.jacobian(y, t)
    assert J.shape == (5, 3, 5, 3)
    for i in range(5):
        for j in range(3):
            for i2 in range(5):
                for k in range(3):
                    want = B[k, j] if i == i2 else 0.0
                    assert J[i, j, i2, k] == pytest.approx(want, abs=1e-15)


def _res_tape():
    w1 = np.array([[1.0, 2.0]])
    w2 = np.array([[3.0, 4.0]])
    with tg.GradientTape() as tape:
        w1, w2 = tape.watch([w1, w2])
        res2a = w1 @ [[2], [1]] + w2 @ [[3], [5]]
        res2b = w1 @ [[2], [4]] + w2 @ [[8], [6]]
        res = w1 @ [[2], [1]]
    return w1, w2, res2a, res2b, res


def test_gradients_sum_over_ys():
    w1, w2, res2a, res2b, _ = _res_tape()
    g1, g2 = tg.gradients([res2a, res2b], [w1, w2])
    np.testing.assert_array_equal(g1, [[4, 5]])
    np.testing.assert_array_equal(g2, [[11, 11]])


def test_gradients_weighted_by_grad_ys():
    w1, w2, res2a, res2b, _ = _res_tape()
    g1, g2 = tg.gradients([res2a, res2b], [w1, w2], grad_ys=[[[1]], [[2]]])
    np.testing.assert_array_equal(g1, [[6, 9]])
    np.testing.assert_array_equal(g2, [[19, 17]])


def test_gradients_unconnected_none_and_zero():
    w1, w2, _, _, res = _res_tape()
    g1, g2 = tg.gradients(res, [w1, w2])
    np.testing.assert_array_equal(g1, [[2, 1]])
    assert g2 is None
    g1, g2 = tg.gradients(res, [w1, w2], unconnected_gradients="zero")
    np.testing.assert_array_equal(g2, [[0, 0]])
    assert g2.shape == (1, 2)


@pytest.mark.parametrize("x", [-2.0, 0.0, 0.7, 3.0])
def test_nested_perturbations_not_confused(x):
    def outer(x):
        return x * tg.grad(lambda y: x + y)(1.5)

    assert tg.grad(outer)(x) == 1.0


def test_hessian_of_sum_cubes_is_diag_6x():
    x = np.array([0.5, -1.0, 2.0, 3.0])
    H = tg.hessian(lambda x: np.sum(x**3))(x)
    np.testing.assert_allclose(H, np.diag(6 * x))


def test_rank4_jacobian_equals_loop_of_single_vjps():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((3, 4))

    def f(X):  # rank-2 input (4, 2) -> rank-2 output (3, 2)
        return np.sin(A @ X) + (A @ X) ** 2

    X = rng.standard_normal((4, 2))
    J = tg.jacobian(f)(X)
    assert J.shape == (3, 2, 4, 2)
    _, f_vjp = tg.vjp(f, X)
    for i in range(3):
        for j in range(2):
            e = np.zeros((3, 2))
            e[i, j] = 1.0
            np.testing.assert_allclose(J[i, j], f_vjp(e)[0], rtol=1e-13, atol=1e-14)
