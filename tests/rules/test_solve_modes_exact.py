"""A Jacobian's batched sweep through ``np.linalg.solve`` gives the numbers of stacked single VJPs, bit for bit.

LAPACK solves one right-hand side by another kernel than several (an ulp apart);
the solve VJP solves one column as two (``rules.linalg._columns_solved``).
"""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg

RNG = np.random.default_rng(7)
N = 6
A = RNG.standard_normal((N, N)) + 4.0 * np.eye(N)
B = RNG.standard_normal((N, 3))


def _vector_rhs(x):
    return np.linalg.solve(A + np.diag(x), np.sin(x))


def _matrix_rhs(x):
    return np.linalg.solve(A * x[0] + np.diag(x), B * x[:, None]).ravel()


def _one_column(x):
    return np.linalg.solve(A + np.outer(x, x), np.cos(x)[:, None]).ravel()


def _stacked(fun, x):
    return np.stack([tg.grad(lambda v, i=i: fun(v)[i])(x) for i in range(fun(x).size)])


@pytest.mark.parametrize("fun", [_vector_rhs, _matrix_rhs, _one_column], ids=lambda f: f.__name__)
def test_whole_chunked_and_stacked_jacobians_are_equal(fun):
    x = RNG.standard_normal(N)
    plain = _stacked(fun, x)
    np.testing.assert_array_equal(tg.jacobian(fun)(x), plain)
    np.testing.assert_array_equal(tg.jacobian(fun, chunk_size=1)(x), plain)
    np.testing.assert_array_equal(tg.jacobian(fun, chunk_size=4)(x), plain)
    np.testing.assert_allclose(plain, tg.jacfwd(fun)(x), rtol=1e-12, atol=1e-13)


def test_hessian_through_solve_equals_stacked_gradients():
    def f(x):
        return np.sum(_vector_rhs(x) ** 2)

    x = RNG.standard_normal(N)
    plain = _stacked(tg.grad(f), x)
    np.testing.assert_array_equal(tg.hessian(f)(x), plain)
    np.testing.assert_array_equal(tg.jacobian(tg.grad(f), chunk_size=1)(x), plain)
