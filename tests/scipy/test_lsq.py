"""``scipy.optimize.nnls`` and ``lsq_linear`` by their active sets (rules/scipy_lsq.py)."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import check_grads

so = pytest.importorskip("scipy.optimize")

rng = np.random.default_rng(38)
A = rng.normal(size=(8, 4))
B = rng.normal(size=8)


def test_nnls_in_the_matrix_and_the_right_hand_side():
    x = so.nnls(A, B)[0]
    assert np.any(x == 0) and np.any(x > 0)  # both kinds of entries are checked
    check_grads(lambda b: so.nnls(A, b)[0], (B,), order=2)
    check_grads(lambda a: so.nnls(a, B)[0], (A,), order=2)
    check_grads(lambda b: so.nnls(A, b)[1], (B,), order=2)
    free = x > 0
    jac = tg.jacobian(lambda b: so.nnls(A, b)[0])(B)
    np.testing.assert_allclose(jac[free], np.linalg.pinv(A[:, free]), rtol=1e-10, atol=1e-12)
    assert np.all(jac[~free] == 0)


def test_lsq_linear_matrix_rhs_bounds_and_values():
    result = so.lsq_linear(A, B, bounds=(-0.3, 0.4))
    assert np.any(result.active_mask != 0) and np.any(result.active_mask == 0)
    check_grads(lambda b: so.lsq_linear(A, b, bounds=(-0.3, 0.4), tol=1e-14).x, (B,), order=2)
    check_grads(lambda a: so.lsq_linear(a, B, bounds=(-0.3, 0.4), tol=1e-14).x, (A,), order=2)
    check_grads(lambda lo: so.lsq_linear(A, B, bounds=(lo, 0.4), tol=1e-14).x, (np.full(4, -0.3),), order=2)
    check_grads(lambda b: so.lsq_linear(A, b).cost, (B,), order=2)
    seen = {}

    def f(b):
        seen["result"] = so.lsq_linear(A, b, bounds=(-0.3, 0.4))
        return seen["result"].x

    tg.jacobian(f)(B)
    assert np.array_equal(tg.stop_gradient(seen["result"].x), result.x)
