"""Derivatives of scipy.signal's linear filters: adjoints against SciPy's own dense matrices.

The matrix of an operator linear in ``x`` is built by applying SciPy itself (no
tracer) to the basis arrays; tapegrad's VJPs of every basis cotangent (one
batched sweep) and of a random cotangent must equal its transpose.  The filter
coefficients, initial states and the spectra (quadratic in ``x``) are checked at
first and second order against finite differences.
"""

import numpy as np
import pytest
import scipy.signal
from scipy import signal
from scipy.signal import filtfilt, lfilter, sosfiltfilt

import tapegrad as tg
from tapegrad.errors import GradientDroppedError, NonDifferentiableArgumentError
from tapegrad.testing import check_grads

ss = scipy.signal
rng = np.random.default_rng(5)
X = rng.standard_normal(24)
X2 = rng.standard_normal((3, 24))
B = np.array([0.5, 0.2, -0.1])
A = np.array([1.3, -0.4, 0.2])
SOS = ss.butter(4, 0.3, output="sos")


def dense(fun, x):
    """The matrix of the linear part of ``fun`` at ``x``'s shape, from SciPy alone (no tracer)."""
    zero = fun(np.zeros_like(x))
    return np.stack([(fun(e.reshape(x.shape)) - zero).ravel() for e in np.eye(x.size)], axis=1)


def assert_adjoint(fun, x, exact=True):
    """tapegrad's VJPs equal the transpose of SciPy's matrix; the forward is SciPy's (bit for bit if ``exact``)."""
    m = dense(fun, x)
    out, vjp_fun = tg.vjp(fun, x)
    expected = fun(x)
    assert out.shape == expected.shape and out.dtype == expected.dtype
    if exact:
        assert np.array_equal(out, expected)
    else:
        np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-14)
    basis = np.eye(m.shape[0]).reshape((m.shape[0],) + out.shape)
    np.testing.assert_allclose(vjp_fun(basis)[0].reshape(m.shape[0], -1), m, rtol=1e-10, atol=1e-13)
    c = rng.standard_normal(out.shape)
    np.testing.assert_allclose(vjp_fun(c)[0].ravel(), m.T @ c.ravel(), rtol=1e-10, atol=1e-12)


def with_ones(p):
    """An sos array built from its free coefficients (SciPy requires sos[:, 3] == 1)."""
    return np.concatenate([p[:, :3], np.ones((p.shape[0], 1)), p[:, 3:]], axis=1)


# ------------------------------------------------------------------ IIR filters
LINEAR_FILTERS = {
    "lfilter": (lambda x: lfilter(B, A, x), X, True),
    "lfilter-fir": (lambda x: ss.lfilter(B, [2.0], x), X, True),
    "lfilter-axis0": (lambda x: ss.lfilter(b=B, a=A, x=x, axis=0), X2.T, True),
    "lfilter-zi": (lambda x: ss.lfilter(B, A, x, zi=np.array([0.3, -0.2]))[0], X, True),
    "lfilter-zf": (lambda x: ss.lfilter(B, A, x, axis=-1, zi=np.array([[0.3, -0.2]]))[1], X2, False),
    "filtfilt": (lambda x: filtfilt(B, A, x), X, True),
    "filtfilt-even": (lambda x: signal.filtfilt(B, A, x, padtype="even", padlen=5), X, True),
    "filtfilt-constant": (lambda x: ss.filtfilt(B, A, x, axis=0, padtype="constant"), X2.T, True),
    "filtfilt-nopad": (lambda x: ss.filtfilt(B, A, x, padtype=None), X, True),
    "sosfilt": (lambda x: ss.sosfilt(SOS, x), X2, False),
    "sosfilt-zi": (lambda x: ss.sosfilt(SOS, x, zi=np.ones((2, 2)))[0], X, False),
    "sosfiltfilt": (lambda x: sosfiltfilt(SOS, x), X, False),
    "sosfiltfilt-axis0": (lambda x: signal.sosfiltfilt(SOS, x, axis=0, padlen=4), X2.T, False),
    "decimate": (lambda x: ss.decimate(x, 3), np.tile(X, 2), False),
    "decimate-causal": (lambda x: ss.decimate(x, 2, zero_phase=False), X, False),
}


@pytest.mark.parametrize("name", sorted(LINEAR_FILTERS))
def test_iir_adjoints_equal_dense_transpose(name):
    fun, x, exact = LINEAR_FILTERS[name]
    assert_adjoint(fun, x, exact)


def test_lfilter_zf_equals_scipys():
    zi = rng.standard_normal((3, 2))
    y, zf = tg.vjp(lambda x: ss.lfilter(B, A, x, zi=zi), X2)[0]
    y0, zf0 = ss.lfilter(B, A, X2, zi=zi)
    assert np.array_equal(y, y0)
    np.testing.assert_allclose(zf, zf0, rtol=1e-13, atol=1e-15)
    # a signal shorter than the state
    short = X[:1]
    out = tg.vjp(lambda x: ss.lfilter(B, A, x, zi=zi[0]), short)[0]
    for o, e in zip(out, ss.lfilter(B, A, short, zi=zi[0])):
        np.testing.assert_allclose(o, e, rtol=1e-13, atol=1e-15)


def test_lfilter_coefficients_and_state_first_and_second_order():
    zi = rng.standard_normal(2)
    check_grads(lambda b, a, x: lfilter(b, a, x), (B, A, X))
    check_grads(lambda b, a, x, zi: ss.lfilter(b, a, x, zi=zi), (B, A, X, zi))
    check_grads(lambda b, a, x, zi: ss.lfilter(b, a, x, axis=1, zi=zi), (B, A, X2, rng.standard_normal((3, 2))))
    check_grads(lambda b, x: ss.lfilter(b, np.array([2.0]), x, axis=0), (B, X2.T))
    check_grads(lambda b, a, x: ss.lfilter(b, a, x), (B[:2], A, X[:2]))  # shorter than the state
    check_grads(lambda b, a: ss.lfilter_zi(b, a), (B, A))
    check_grads(lambda b, a, y, x: ss.lfiltic(b, a, y, x), (B, A, X[:2], X[2:3]))
    check_grads(lambda b, a, y: ss.lfiltic(b, a, y), (B[:2], np.array([2.0, 0.3, -0.1, 0.2]), X[:2]))
    check_grads(lambda b, a, x: filtfilt(b, a, x), (B, A, X))


def test_second_order_sections_first_and_second_order():
    p = np.delete(SOS, 3, axis=1)
    zi = rng.standard_normal((2, 2))
    check_grads(lambda p, x: ss.sosfilt(with_ones(p), x), (p, X))
    check_grads(lambda p, x, zi: ss.sosfilt(with_ones(p), x, zi=zi), (p, X, zi))
    check_grads(lambda p, x: sosfiltfilt(with_ones(p), x), (p, X))
    check_grads(lambda p: ss.sosfilt_zi(with_ones(p)), (p,))


def _scipy_error(fun, *args):
    try:
        fun(*args)
    except Exception as exc:  # noqa: BLE001 - whatever the running SciPy raises
        return type(exc)
    return None


@pytest.mark.parametrize("b, a", [
    (B, np.array([0.0, 1.3, -0.4, 0.2])),  # a leading zero: SciPy < 1.18 drops it, 1.18 refuses it
    (B, np.array([1.0, -1.5, 0.5])),  # sum(a) == 0: a pole at z = 1, no steady state
    (np.array([0.3, 0.1, 0.2, -0.1]), np.array([2.0, 0.5])),  # b longer than a
    (B[:1], A),  # a longer than b
])
def test_lfilter_zi_follows_the_running_scipy(b, a):
    """SciPy 1.18 rewrote lfilter_zi (and its checks): tapegrad raises what SciPy raises, else has SciPy's value."""
    error = _scipy_error(ss.lfilter_zi, b, a)
    if error is not None:
        with pytest.raises(error):
            tg.grad(lambda b, a: np.sum(ss.lfilter_zi(b, a)), argnums=(0, 1))(b, a)
        return
    np.testing.assert_array_equal(tg.vjp(lambda b, a: ss.lfilter_zi(b, a), b, a)[0], ss.lfilter_zi(b, a))
    if a[0] == 0:  # dropped: zi's length changes with a[0], so differentiate in b and the rest of a
        check_grads(lambda b, rest: ss.lfilter_zi(b, np.concatenate([np.zeros(1), rest])), (b, a[1:]))
    else:
        check_grads(lambda b, a: ss.lfilter_zi(b, a), (b, a))


def test_filter_values_match_scipy():
    zi = rng.standard_normal(2)
    np.testing.assert_array_equal(tg.vjp(lambda b, a: ss.lfilter_zi(b, a), B, A)[0], ss.lfilter_zi(B, A))
    np.testing.assert_allclose(tg.vjp(lambda y: ss.lfiltic(B, A, y, X[:2]), X[:2])[0], ss.lfiltic(B, A, X[:2], X[:2]), rtol=1e-14)
    np.testing.assert_allclose(tg.vjp(lambda p: ss.sosfilt_zi(p), SOS)[0], ss.sosfilt_zi(SOS), rtol=1e-14)
    y, zf = tg.vjp(lambda s, x, z: ss.sosfilt(s, x, zi=z), SOS, X, np.stack([zi, zi]))[0]
    y0, zf0 = ss.sosfilt(SOS, X, zi=np.stack([zi, zi]))
    np.testing.assert_allclose(y, y0, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(zf, zf0, rtol=1e-13, atol=1e-15)


def test_a_hessian_through_a_filter_matches_finite_differences():
    def loss(theta):
        b = theta[:3]
        a = np.concatenate([np.ones(1), theta[3:]])
        return np.sum(np.tanh(filtfilt(b, a, X)) ** 2)

    theta = np.array([0.5, 0.2, -0.1, -0.4, 0.2])
    h = tg.hessian(loss)(theta)
    eps = 1e-6
    fd = np.stack([(tg.grad(loss)(theta + eps * e) - tg.grad(loss)(theta - eps * e)) / (2 * eps) for e in np.eye(5)], 1)
    np.testing.assert_allclose(h, fd, rtol=1e-6, atol=1e-8)


def test_complex_and_float32_filters():
    xc = X + 1j * rng.standard_normal(X.shape)
    check_grads(lambda b, x: ss.lfilter(b, A, x), (B + 0.3j, xc))
    f = lambda x: ss.lfilter(B.astype(np.float32), A.astype(np.float32), x)  # noqa: E731
    out = tg.vjp(f, X.astype(np.float32))[0]
    assert out.dtype == np.float32 and np.array_equal(out, f(X.astype(np.float32)))


# ------------------------------------------------------------------ linear operators SciPy's own code runs on tracers
OTHER_LINEAR = {
    "savgol-interp": lambda x: ss.savgol_filter(x, 7, 2),
    "savgol-deriv": lambda x: ss.savgol_filter(x, 5, 3, deriv=1, delta=0.5, axis=0),
    "savgol-mirror": lambda x: ss.savgol_filter(x, 7, 2, mode="mirror"),
    "savgol-constant": lambda x: ss.savgol_filter(x, 7, 2, mode="constant", cval=0.0),
    "savgol-nearest": lambda x: ss.savgol_filter(x, 6, 2, mode="nearest"),
    "savgol-wrap": lambda x: ss.savgol_filter(x, 5, 1, mode="wrap"),
    "detrend-linear": lambda x: ss.detrend(x, bp=[7, 15]),
    "detrend-constant": lambda x: ss.detrend(x, type="constant"),
    "detrend-short-segment": lambda x: ss.detrend(x, bp=[1, 22]),
    "detrend-complex": lambda x: ss.detrend(x + 1j * x[::-1]).imag,
    "hilbert-real": lambda x: ss.hilbert(x).real,
    "hilbert-imag": lambda x: ss.hilbert(x, N=31).imag,
    "resample-down": lambda x: ss.resample(x, 15),
    "resample-up": lambda x: ss.resample(x, 40, window="hann"),
    "resample-even": lambda x: ss.resample(x, 10),
    "resample_poly": lambda x: ss.resample_poly(x, 3, 2),
    "resample_poly-mean": lambda x: ss.resample_poly(x, 2, 5, padtype="mean", window=("kaiser", 5.0)),
    "decimate-fir": lambda x: ss.decimate(x, 2, ftype="fir"),
    "fftconvolve": lambda x: ss.fftconvolve(x, B, mode="same"),
    "oaconvolve": lambda x: ss.oaconvolve(x, np.arange(5.0), mode="valid"),
}


@pytest.mark.parametrize("name", sorted(OTHER_LINEAR))
def test_linear_operators_equal_dense_transpose(name):
    x = X2.T.copy() if name == "savgol-deriv" else X
    assert_adjoint(OTHER_LINEAR[name], x, exact=False)


@pytest.mark.parametrize("mode", ["interp", "mirror", "constant", "nearest", "wrap"])
def test_savgol_filter_in_x_delta_and_cval(mode):
    for args in ((7, 2), (5, 3, 1), (6, 2, 2), (7, 4, 3), (9, 0)):
        f = lambda x, d, c: ss.savgol_filter(x, *args, mode=mode, delta=d, cval=c)  # noqa: E731
        assert np.array_equal(tg.vjp(f, X, np.array(0.7), np.array(0.3))[0], f(X, 0.7, 0.3))
        assert_adjoint(lambda x: ss.savgol_filter(x, *args, mode=mode, delta=0.7), X)
        check_grads(f, (X, np.array(0.7), np.array(0.3)))


# ------------------------------------------------------------------ convolution
K2 = rng.standard_normal((2, 3))
M2 = rng.standard_normal((5, 6))


@pytest.mark.parametrize("method", ["auto", "direct", "fft"])
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("fun", [ss.convolve, ss.correlate], ids=["convolve", "correlate"])
def test_convolve_and_correlate_every_mode_and_method(fun, mode, method):
    for a, b in ((M2, K2), (K2, M2), (X, B), (B, X)):
        f = lambda a, b: fun(a, b, mode=mode, method=method)  # noqa: E731
        out = tg.vjp(f, a, b)[0]
        expected = f(a, b)
        assert out.shape == expected.shape and out.dtype == expected.dtype
        np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
        # linear in each operand: the adjoints against the dense matrices
        assert_adjoint(lambda a, b=b: fun(a, b, mode=mode, method=method), a, exact=False)
        assert_adjoint(lambda b, a=a: fun(a, b, mode=mode, method=method), b, exact=False)
        check_grads(f, (a, b))
    zc = M2 + 1j * M2[::-1]
    check_grads(lambda a, b: fun(a, b, mode=mode, method=method), (zc, K2 - 0.5j))


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("fun", [ss.fftconvolve, ss.oaconvolve], ids=["fftconvolve", "oaconvolve"])
def test_fft_convolutions_every_mode_with_axes(fun, mode):
    # long and short operands (oaconvolve splits the long one into blocks), axes, broadcasting
    cases = [
        (rng.standard_normal(40), rng.standard_normal(5), None),
        (rng.standard_normal(5), rng.standard_normal(40), None),
        (rng.standard_normal((3, 30)), rng.standard_normal((1, 4)), [1]),
        (rng.standard_normal((3, 30)), rng.standard_normal((3, 4)), -1),
        (rng.standard_normal((6, 7)), rng.standard_normal((2, 3)), None),
    ]
    for a, b, axes in cases:
        f = lambda a, b: fun(a, b, mode=mode, axes=axes)  # noqa: E731
        out = tg.vjp(f, a, b)[0]
        assert out.shape == f(a, b).shape
        np.testing.assert_allclose(out, f(a, b), rtol=1e-12, atol=1e-12)
        assert_adjoint(lambda a, b=b: fun(a, b, mode=mode, axes=axes), a, exact=False)
        check_grads(f, (a, b))


@pytest.mark.parametrize("boundary", ["fill", "wrap", "symm"])
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("fun", [ss.convolve2d, ss.correlate2d], ids=["convolve2d", "correlate2d"])
def test_convolve2d_and_correlate2d_every_mode_and_boundary(fun, mode, boundary):
    for a, k in ((M2, K2), (M2, rng.standard_normal((3, 4))), (K2, M2)):
        if mode == "valid" and a.shape[0] < k.shape[0]:
            continue
        f = lambda a, k, v: fun(a, k, mode, boundary, v)  # noqa: E731
        assert np.array_equal(tg.vjp(f, a, k, np.array(0.7))[0], f(a, k, 0.7))
        assert_adjoint(lambda a, k=k: fun(a, k, mode=mode, boundary=boundary, fillvalue=0.7), a)
        assert_adjoint(lambda k, a=a: fun(a, k, mode=mode, boundary=boundary, fillvalue=0.7), k)
        check_grads(f, (a, k, np.array(0.7)))
    check_grads(lambda a, k: fun(a, k, mode, boundary), (M2 + 1j * M2[::-1], K2 - 0.5j))


@pytest.mark.parametrize("up, down", [(1, 1), (2, 1), (3, 2), (1, 5), (2, 5)])
def test_upfirdn(up, down):
    for h in (np.array([0.5]), B, rng.standard_normal(8)):
        f = lambda h, x: ss.upfirdn(h, x, up, down)  # noqa: E731
        assert np.array_equal(tg.vjp(f, h, X)[0], f(h, X))
        assert_adjoint(lambda x, h=h: ss.upfirdn(h, x, up=up, down=down), X)
        check_grads(f, (h, X))
        check_grads(lambda h, x: ss.upfirdn(h, x, up, down, axis=0), (h, X2.T))


# ------------------------------------------------------------------ spectra
SPECTRA = {
    "welch": lambda x: ss.welch(x, nperseg=8)[1],
    "welch-median": lambda x: ss.welch(x, fs=2.0, nperseg=8, noverlap=2, average="median", scaling="spectrum")[1],
    "periodogram": lambda x: signal.periodogram(x, detrend="linear")[1],
    "periodogram-2d": lambda x: ss.periodogram(x, window="hann", axis=-1, nfft=30)[1],
    "csd": lambda x: ss.csd(x, x[::-1], nperseg=8, return_onesided=False)[1].imag,
    "ShortTimeFFT.spectrogram": lambda x: ss.ShortTimeFFT(ss.windows.hann(8), 3, 1.0).spectrogram(x),
    "welch-odd-hop": lambda x: ss.welch(x, nperseg=7, noverlap=2, nfft=12, detrend="linear")[1],
    "welch-callable-detrend-2d": lambda x: ss.welch(x, nperseg=8, detrend=lambda s: s - s[..., :1], axis=-1)[1],
    "welch-2d-axis0": lambda x: ss.welch(x, window=("tukey", 0.3), nperseg=6, axis=0)[1],
    "csd-complex": lambda x: np.abs(ss.csd(x + 1j * x[::-1], x, nperseg=8)[1]),
    "stft": lambda x: np.abs(ss.ShortTimeFFT.from_window("hann", 1.0, 8, 4).stft(x, p0=0, p1=7)) ** 2,
    "spectrogram-legacy": lambda x: ss.spectrogram(x, nperseg=7, noverlap=3, detrend="linear", mode="magnitude")[2],
    "spectrogram-legacy-axis0": lambda x: ss.spectrogram(x, nperseg=8, axis=0)[2],
    "stft-legacy-twosided": lambda x: np.abs(ss.stft(x + 1j * x[::-1], nperseg=8, return_onesided=False)[2]),
    "coherence": lambda x: ss.coherence(x, x[::-1] ** 2, nperseg=8)[1],
}


@pytest.mark.parametrize("name", sorted(SPECTRA))
def test_spectra_first_and_second_order(name):
    f = SPECTRA[name]
    x = X2 if name.endswith("2d") else X2.T.copy() if "axis0" in name else X
    out = tg.vjp(f, x)[0]
    np.testing.assert_allclose(out, f(x), rtol=1e-12, atol=1e-15)
    check_grads(f, (x,))


def test_periodogram_closed_form():
    # boxcar, no detrending, density: P[k] = 2 |X_k|^2 / (fs n) off DC/Nyquist, so dP/dx = 4 Re(conj(X_k) F_k) / n
    x = X
    n = x.size
    g = tg.jacobian(lambda x: ss.periodogram(x, detrend=False)[1])(x)
    f = np.fft.rfft(np.eye(n), axis=0)
    xk = np.fft.rfft(x)
    expected = 2 * np.real(np.conj(xk)[:, None] * f) / n
    expected[1:-1] *= 2
    np.testing.assert_allclose(g, expected, rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------ call styles, no tracer, errors
def test_no_tracer_gives_scipys_exact_results_and_nothing_stays_changed():
    codes = {f: f.__code__ for f in (ss.lfilter, ss.filtfilt, ss.sosfilt, ss.convolve, ss.ShortTimeFFT.stft_detrend)}
    plain = []

    def f(x):
        plain.append(lfilter(B, A, X))
        plain.append(ss.sosfiltfilt(SOS, X))
        plain.append(ss.welch(X, nperseg=8)[1])
        return np.sum(lfilter(B, A, x) * X)

    x = X.copy()
    g = tg.grad(f)(x)
    assert np.array_equal(plain[0], lfilter(B, A, X))
    assert np.array_equal(plain[1], ss.sosfiltfilt(SOS, X))
    assert np.array_equal(plain[2], ss.welch(X, nperseg=8)[1])
    assert np.array_equal(x, X)
    np.testing.assert_allclose(g, dense(lambda v: lfilter(B, A, v), X).T @ X, rtol=1e-12)
    for fun, code in codes.items():
        assert fun.__code__ is code


def test_clear_errors():
    with pytest.raises(NonDifferentiableArgumentError, match="method='gust'"):
        tg.grad(lambda x: np.sum(ss.filtfilt(B, A, x, method="gust")))(X)
    with pytest.raises(NonDifferentiableArgumentError, match="mode='symmetric'"):
        tg.grad(lambda x: np.sum(ss.upfirdn(B, x, 2, 3, mode="symmetric")))(X)
    with pytest.raises(GradientDroppedError, match="scipy.signal.lsim"):
        tg.grad(lambda u: np.sum(ss.lsim(([1.0], [1.0, 2.0]), u, np.arange(5.0))[1]))(X[:5])
    # istft overlap-adds into a preallocated array: refused, never a wrong number
    with pytest.raises(GradientDroppedError, match="out="):
        tg.grad(lambda x: np.sum(ss.istft(ss.stft(x, nperseg=8)[2])[1]))(X)
    with pytest.raises(ValueError, match="sos\\[:, 3\\] should be all ones"):
        tg.grad(lambda s: np.sum(ss.sosfilt(s, X)))(SOS * 2)
    with pytest.raises(ValueError, match="non-empty 1d array"):
        tg.grad(lambda x: np.sum(ss.lfilter(np.ones((2, 2)), A, x)))(X)
