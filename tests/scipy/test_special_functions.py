"""scipy.special's Python functions that hand lists of traced values to ufuncs: multigammaln."""

import numpy as np
import pytest
import scipy.special as sp

import tapegrad as tg


def _central(f, x, h=1e-6):
    return np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(x.size)]).T


@pytest.mark.parametrize("d", [1, 2, 4])
def test_multigammaln_first_and_second_order(d):
    a = np.array([3.2, 4.5, 2.75])

    def f(a):
        return np.sum(sp.multigammaln(a, d) * np.array([1.0, -0.5, 2.0]))

    value, grad = tg.value_and_grad(f)(a)
    assert value == pytest.approx(f(a), rel=1e-14)
    np.testing.assert_allclose(grad, _central(f, a), rtol=1e-7)
    closed = np.array([1.0, -0.5, 2.0]) * sum(sp.digamma(a - (j - 1) / 2) for j in range(1, d + 1))
    np.testing.assert_allclose(grad, closed, rtol=1e-12)
    np.testing.assert_allclose(tg.hessian(f)(a), _central(tg.grad(f), a), rtol=1e-6, atol=1e-9)


def test_multigammaln_of_a_scalar_and_scipys_own_error():
    assert tg.grad(lambda a: sp.multigammaln(a, 2))(4.5) == pytest.approx(sp.digamma(4.5) + sp.digamma(4.0))
    with pytest.raises(ValueError, match="not met"):
        tg.grad(lambda a: sp.multigammaln(a, 3))(0.9)
    with pytest.raises(ValueError, match="not met"):
        sp.multigammaln(0.9, 3)
