"""``z.real = v`` and ``z.imag = v`` on traced arrays: recorded writes (they raised AttributeError)."""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg

X = np.array([0.3, -1.2, 2.0, 0.7])


def parts(x):
    z = np.zeros(4, dtype=complex) + 0j * x  # a traced complex array
    z.real = x
    z.imag = x**2
    return np.sum(np.abs(z) ** 2)


def real_of_real(x):
    y = x.copy()
    y.real = np.sin(x)
    return np.sum(y * x)


def keep_the_other_part(x):
    z = x * (1.0 + 2.0j)
    z.real = 3.0 * x  # the imaginary part 2x stays
    return np.sum(np.real(z) ** 2 + np.imag(z) ** 3)


@pytest.mark.parametrize("f, grad, hess_diag", [
    (parts, lambda x: 2 * x + 4 * x**3, lambda x: 2 + 12 * x**2),
    (real_of_real, lambda x: np.sin(x) + x * np.cos(x), lambda x: 2 * np.cos(x) - x * np.sin(x)),
    (keep_the_other_part, lambda x: 18 * x + 24 * x**2, lambda x: 18 + 48 * x),
])
def test_closed_forms(f, grad, hess_diag):
    np.testing.assert_allclose(tg.grad(f)(X), grad(X), rtol=1e-13)
    h = tg.hessian(f)(X)
    np.testing.assert_allclose(h, np.diag(hess_diag(X)), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(tg.jacfwd(tg.grad(f))(X), h)


def test_values_are_numpys():
    for f in (parts, real_of_real, keep_the_other_part):
        assert tg.value_and_grad(f)(X)[0] == f(X)


def test_imag_of_a_real_array_raises_like_numpy():
    with pytest.raises(TypeError, match="imaginary part"):
        tg.grad(lambda x: (setattr(x, "imag", x) or np.sum(x)))(X.copy())
    with pytest.raises(TypeError, match="imaginary part"):
        X.copy().imag = 1.0
