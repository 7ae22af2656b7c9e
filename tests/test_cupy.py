"""CuPy values on a GPU: every way of asking for a derivative stays on the device and matches NumPy.

Runs where CuPy and a GPU are present (the lent GPU machine; CI has none, so it skips
there).  Each program is differentiated once with NumPy inputs and once with the
same values as CuPy arrays; results must be CuPy arrays equal to NumPy's to
rounding (cuBLAS, cuFFT and cuSOLVER sum in other orders than OpenBLAS and pocketfft).
"""

import numpy as np
import pytest

import tapegrad as tg

cp = pytest.importorskip("cupy")
try:
    _GPUS = cp.cuda.runtime.getDeviceCount()
except cp.cuda.runtime.CUDARuntimeError:  # CuPy installed, no driver or device
    _GPUS = 0
pytestmark = pytest.mark.skipif(_GPUS < 1, reason="no GPU")

RNG = np.random.default_rng(7)


def _elementwise(x):
    return np.sum(np.tanh(x) * np.exp(-x**2) + np.log1p(x**2) / (1.0 + np.abs(x)))


def _reductions(x):
    m = np.reshape(x, (4, 6))
    return np.sum(np.max(m, axis=1)) + np.mean(np.var(m, axis=0)) + np.sum(np.cumsum(m, axis=1)[:, -1] ** 2)


def _indexing(x):
    y = x[::2] * x[1::2]
    z = np.concatenate([y, x[:3]])
    return np.sum(z[[0, 2, 4, 1]] ** 2) + np.sum(np.where(x > 0, x, 0.1 * x))


def _matmul(x):
    W = np.reshape(np.arange(24.0) / 24.0, (4, 6))
    return np.sum(np.tanh(np.reshape(x, (6, 4)) @ W) ** 2)


def _linalg(x):
    A = np.reshape(x[:16], (4, 4))
    S = A @ A.T + 4.0 * np.eye(4)
    L = np.linalg.cholesky(S)
    b = x[16:20]
    return np.sum(np.linalg.solve(S, b) ** 2) + 2.0 * np.sum(np.log(np.diagonal(L))) + np.sum(np.linalg.inv(S))


def _fft(x):
    spectrum = np.fft.rfft(x)
    return np.sum(np.abs(spectrum) ** 2) + np.sum(np.real(np.fft.ifft(np.fft.fft(x) * 2.0)))


PROGRAMS = [_elementwise, _reductions, _indexing, _matmul, _linalg, _fft]


def _close(got, expected, rtol=1e-10):
    assert isinstance(got, cp.ndarray), type(got)
    np.testing.assert_allclose(cp.asnumpy(got), expected, rtol=rtol, atol=1e-10)


@pytest.mark.parametrize("fun", PROGRAMS, ids=lambda f: f.__name__)
def test_gradient_value_and_hessian_stay_on_the_gpu(fun):
    x = RNG.uniform(-1.0, 1.0, 24)
    xg = cp.asarray(x)
    value, grad = tg.value_and_grad(fun)(xg)
    v_np, g_np = tg.value_and_grad(fun)(x)
    np.testing.assert_allclose(float(value), v_np, rtol=1e-10)
    _close(grad, g_np)
    _close(tg.hessian(fun)(xg), tg.hessian(fun)(x), rtol=1e-8)


@pytest.mark.parametrize("fun", PROGRAMS, ids=lambda f: f.__name__)
def test_hvp_and_jvp_on_the_gpu(fun):
    x = RNG.uniform(-1.0, 1.0, 24)
    v = RNG.standard_normal(24)
    _close(tg.hvp(fun)(cp.asarray(x), cp.asarray(v)), tg.hvp(fun)(x, v), rtol=1e-8)
    _, jvp_np = tg.jvp(fun, (x,), (v,))
    _, jvp_gpu = tg.jvp(fun, (cp.asarray(x),), (cp.asarray(v),))
    np.testing.assert_allclose(float(jvp_gpu), jvp_np, rtol=1e-9)


def test_jacobian_whole_chunked_and_jacfwd_on_the_gpu():
    W = RNG.standard_normal((5, 8))

    def f(x):
        return np.tanh(W @ x) * x[:5]

    x = RNG.standard_normal(8)
    expected = tg.jacobian(f)(x)
    Wg = cp.asarray(W)

    def fg(x):
        return np.tanh(Wg @ x) * x[:5]

    xg = cp.asarray(x)
    _close(tg.jacobian(fg)(xg), expected)
    _close(tg.jacobian(fg, chunk_size=2)(xg), expected)
    _close(tg.jacfwd(fg)(xg), expected)


def test_float32_stays_float32_on_the_gpu():
    x = cp.asarray(RNG.uniform(-1.0, 1.0, 24).astype(np.float32))
    grad = tg.grad(_elementwise)(x)
    assert isinstance(grad, cp.ndarray) and grad.dtype == cp.float32
    np.testing.assert_allclose(cp.asnumpy(grad), tg.grad(_elementwise)(cp.asnumpy(x)), rtol=1e-5, atol=1e-6)
