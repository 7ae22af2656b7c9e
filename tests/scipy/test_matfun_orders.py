"""Primary matrix functions with a branch cut (sqrtm, logm, fractional_matrix_power) at orders 1 to 3.

A real matrix with a negative eigenvalue has a complex square root and
logarithm; the block matrices of the derivatives repeat that eigenvalue, and
SciPy's Schur form of such a block matrix can split it across the branch
cut.  These tests pin every order to central differences of the order below
(each of which is checked in turn), in reverse and forward modes, for real,
complex and stacked matrices, and every way of asking for a Jacobian to the
stacked single VJPs.
"""

import warnings

import numpy as np
import pytest
import scipy.linalg as sl

import tapegrad as tg


def _negative_eigenvalue(n=3, seed=0):
    """A real non-symmetric matrix with one negative and two positive real eigenvalues."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, n))
    x = x + x.T
    w, v = np.linalg.eigh(x)
    w = np.abs(w) + 0.4
    w[0] = -w[0]
    return (v * w) @ v.T + 0.1 * rng.standard_normal((n, n))


def _complex_pair(n=3, seed=1):
    """A real matrix whose eigenvalues include a complex-conjugate pair in the left half plane."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    block = np.zeros((n, n))
    block[:2, :2] = [[-1.0, 2.0], [-2.0, -1.0]]
    block[2:, 2:] = np.diag(1.0 + np.arange(n - 2))
    return q @ block @ q.T


def _complex_matrix(n=3, seed=2):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n)) + 2 * np.eye(n)


def _central(fun, x, h=1e-5):
    """Central differences of ``fun`` at real or complex ``x``; for complex ``x``, tapegrad's gradient
    convention for a real loss is ``dL/dRe - 1j dL/dIm``, so the imaginary direction is subtracted."""
    rows = []
    for i in range(x.size):
        e = np.zeros(x.size, dtype=x.dtype)
        e[i] = h
        e = e.reshape(x.shape)
        d = (np.asarray(fun(x + e)) - np.asarray(fun(x - e))) / (2 * h)
        if np.iscomplexobj(x):
            d = d - 1j * (np.asarray(fun(x + 1j * e)) - np.asarray(fun(x - 1j * e))) / (2 * h)
        rows.append(d)
    return np.stack(rows, -1).reshape(np.shape(rows[0]) + x.shape)


def _weights(shape, seed=5):
    return np.random.default_rng(seed).standard_normal(shape)


FUNCTIONS = {
    "sqrtm-real": lambda x, v: np.sum(np.real(sl.sqrtm(x)) * v),
    "sqrtm-imag": lambda x, v: np.sum(np.imag(sl.sqrtm(x)) * v),
    "logm-real": lambda x, v: np.sum(np.real(sl.logm(x)) * v),
    "logm-imag": lambda x, v: np.sum(np.imag(sl.logm(x)) * v),
    "fmp-0.3": lambda x, v: np.sum(np.real(sl.fractional_matrix_power(x, 0.3)) * v),
    "fmp-imag": lambda x, v: np.sum(np.imag(sl.fractional_matrix_power(x, -0.7)) * v),
    "sqrtm-abs2": lambda x, v: np.sum(np.abs(sl.sqrtm(x)) ** 2 * v),
}
MATRICES = {"negative": _negative_eigenvalue, "conjugate-pair": _complex_pair, "complex": _complex_matrix}


@pytest.mark.parametrize("matrix", list(MATRICES))
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_first_and_second_order_in_both_modes(name, matrix):
    x = MATRICES[matrix]()
    v = _weights(x.shape)

    def f(a):
        return FUNCTIONS[name](a, v)

    if np.iscomplexobj(x):  # second order of a complex input: as a function of its real and imaginary parts
        x, complex_f = np.stack([x.real, x.imag]), f

        def f(parts):
            return complex_f(parts[0] + 1j * parts[1])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SciPy's own warnings on the perturbed forward values
        g = tg.grad(f)
        np.testing.assert_allclose(g(x), _central(f, x), rtol=1e-6, atol=1e-7)
        reference = _central(g, x)
        scale = max(np.abs(reference).max(), 1.0)
        reverse_reverse = tg.hessian(f)(x)
        forward_reverse = tg.jacfwd(g)(x)
    # The failure this guards against gave entries of 1e13 to 1e18 here.
    np.testing.assert_allclose(reverse_reverse, reference, rtol=1e-5, atol=1e-6 * scale)
    np.testing.assert_allclose(forward_reverse, reverse_reverse, rtol=1e-9, atol=1e-10 * scale)


def test_third_order_sqrtm_at_a_negative_eigenvalue():
    x = _negative_eigenvalue(2, seed=3)
    v = _weights(x.shape)

    def f(a):
        return np.sum(np.real(sl.sqrtm(a)) * v)

    hess = tg.hessian(f)
    third = tg.jacobian(hess)(x)
    np.testing.assert_allclose(third, _central(hess, x, h=1e-4), rtol=1e-5, atol=1e-6 * np.abs(third).max())


def test_logm_of_a_real_matrix_with_a_complex_logarithm_is_differentiated():
    # SciPy returns a complex logarithm here; the old rule met NaNs in its block matrix.
    x = _negative_eigenvalue(4, seed=7)
    v = _weights(x.shape)

    def f(a):
        return np.sum(np.real(sl.logm(a)) * v) + np.sum(np.imag(sl.logm(a)) * v.T)

    assert np.iscomplexobj(sl.logm(x))
    np.testing.assert_allclose(tg.grad(f)(x), _central(f, x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(tg.hessian(f)(x), _central(tg.grad(f), x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fun", [sl.sqrtm, sl.logm, lambda a: sl.fractional_matrix_power(a, 0.3)],
                         ids=["sqrtm", "logm", "fmp"])
def test_jacobians_equal_stacked_single_vjps(fun):
    x = _negative_eigenvalue(3, seed=11)

    def f(a):
        return np.real(fun(a))

    jac = tg.jacobian(f)(x)
    chunked = tg.jacobian(f, chunk_size=2)(x)
    forward = tg.jacfwd(f)(x)
    _, pullback = tg.vjp(f, x)
    rows = []
    for i in range(x.size):
        seed = np.zeros(x.size)
        seed[i] = 1.0
        rows.append(pullback(seed.reshape(x.shape))[0])
    stacked = np.stack(rows).reshape(x.shape + x.shape)
    np.testing.assert_array_equal(jac, stacked)
    np.testing.assert_array_equal(chunked, stacked)
    np.testing.assert_allclose(forward, stacked, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(stacked, _central(f, x), rtol=1e-6, atol=1e-7)


def test_stacked_matrices():
    x = np.stack([_negative_eigenvalue(3, seed=0), _complex_pair(3, seed=1)])
    v = _weights(x.shape)

    def f(a):
        return np.sum(np.real(sl.sqrtm(a)) * v)

    g = tg.grad(f)
    np.testing.assert_allclose(g(x), _central(f, x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(tg.hessian(f)(x), _central(g, x), rtol=1e-5, atol=1e-6)


def test_float32_stays_float32():
    x = _negative_eigenvalue(3).astype(np.float32) + 0 * 1.0  # keep float32
    assert x.dtype == np.float32
    v = _weights(x.shape).astype(np.float32)
    out = tg.grad(lambda a: np.sum(np.real(sl.sqrtm(a)) * v))(x)
    assert out.dtype == np.float32
    reference = tg.grad(lambda a: np.sum(np.real(sl.sqrtm(a)) * v))(x.astype(np.float64))
    np.testing.assert_allclose(out, reference, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("fun", [
    lambda a: sl.sqrtm(a), lambda a: sl.fractional_matrix_power(a, 0.5), lambda a: sl.fractional_matrix_power(a, 2.5)
], ids=["sqrtm", "power 0.5", "power 2.5"])
def test_a_zero_eigenvalue_gives_no_finite_garbage(fun):
    """At the zero matrix sqrt's derivative is infinite: NaN in every mode (it was 1e291); power 2.5 is finite."""
    f = lambda x: np.sum(np.real(fun(x.reshape(2, 2))))  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = tg.grad(f)(np.zeros(4))
        j = tg.jacfwd(f)(np.zeros(4))
    if fun(np.eye(2) * 4.0)[0, 0] == 32.0:  # power 2.5
        np.testing.assert_array_equal(g, np.zeros(4))
    else:
        assert np.all(np.isnan(g)) and np.all(np.isnan(j))
