"""Derivatives of numpy.fft: every transform, norm mode, n=/s=/axes variant, first and second order."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import check_grads

# Plain arrays made before any tape records: np.zeros & co. called inside a differentiated
# function give traced constants (tapegrad.buffers), so the refusals below need these.
_PLAIN_C4 = np.zeros(4, complex)

NORMS = [None, "backward", "ortho", "forward"]
rng = np.random.default_rng(42)


def _real(*shape):
    return rng.standard_normal(shape)


def _complex(*shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


# ----------------------------------------------------------------- 1-D transforms
COMPLEX_IN = [np.fft.fft, np.fft.ifft, np.fft.irfft, np.fft.hfft]
REAL_IN = [np.fft.rfft, np.fft.ihfft]


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("n", [None, 3, 4, 7, 8])
@pytest.mark.parametrize("size", [4, 5])
@pytest.mark.parametrize("fun", COMPLEX_IN + REAL_IN, ids=lambda f: f.__name__)
def test_one_d_transforms(fun, size, n, norm):
    inputs = [_real(size)] + ([_complex(size)] if fun in COMPLEX_IN else [])
    for x in inputs:
        check_grads(lambda a: fun(a, n=n, norm=norm), [x], order=2)


@pytest.mark.parametrize("fun", COMPLEX_IN + REAL_IN, ids=lambda f: f.__name__)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_one_d_axis_on_matrix(fun, axis):
    x = _real(3, 4)
    check_grads(lambda a: fun(a, axis=axis, norm="ortho"), [x], order=2)
    check_grads(lambda a: fun(a, 5, axis), [x], order=1)


# ----------------------------------------------------------------- n-D transforms
ND = [np.fft.fftn, np.fft.ifftn, np.fft.rfftn, np.fft.irfftn]
TWO_D = [np.fft.fft2, np.fft.ifft2, np.fft.rfft2, np.fft.irfft2]
S_AXES = [
    (None, None),
    ((4, 5), (0, 1)),  # padding on both axes (odd last size for the real transforms)
    ((2, 3), (1, 0)),  # truncation, axes out of order
    (None, (0,)),
    ((5,), (-2,)),
    ((3, 2, 4), (2, 0, 1)),
]


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
@pytest.mark.parametrize("s,axes", S_AXES)
@pytest.mark.parametrize("fun", ND, ids=lambda f: f.__name__)
def test_nd_transforms(fun, s, axes, norm):
    x = _real(3, 4, 2) if axes is not None and len(axes) == 3 else _real(3, 4)
    inputs = [x] if fun is np.fft.rfftn else [x, x + 1j * _real(*x.shape)]
    for a in inputs:
        check_grads(lambda v: fun(v, s=s, axes=axes, norm=norm), [a], order=2)


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
@pytest.mark.parametrize("s", [None, (3, 5), (4, 4), (2, 2)])
@pytest.mark.parametrize("fun", TWO_D, ids=lambda f: f.__name__)
def test_two_d_transforms(fun, s, norm):
    x = _real(2, 3, 4)
    check_grads(lambda v: fun(v, s=s, norm=norm), [x], order=2)
    if fun is not np.fft.rfft2:
        check_grads(lambda v: fun(v, s, (0, 2), norm), [_complex(3, 2, 4)], order=1)


@pytest.mark.parametrize("fun", [np.fft.fftshift, np.fft.ifftshift], ids=lambda f: f.__name__)
@pytest.mark.parametrize("axes", [None, 0, -1, (1,), (0, 1)])
def test_shifts(fun, axes):
    x = _real(3, 5)  # odd sizes: fftshift and ifftshift differ
    check_grads(lambda a: fun(a, axes=axes), [x], order=2)
    check_grads(lambda a: fun(a, axes) * 1j, [x], order=1)


# ----------------------------------------------------------------- values and dtypes
@pytest.mark.parametrize(
    "fun,x",
    [
        (np.fft.fft, np.ones(6)),
        (np.fft.rfft, np.arange(5.0)),
        (np.fft.irfft, np.arange(4.0) + 1j),
        (np.fft.hfft, np.arange(4.0) + 1j),
        (np.fft.ihfft, np.arange(5.0)),
        (np.fft.rfftn, np.arange(12.0).reshape(3, 4)),
        (np.fft.irfft2, np.arange(12.0).reshape(3, 4) * 1j),
    ],
)
def test_values_match_numpy(fun, x):
    value, _ = tg.vjp(lambda a: fun(a, norm="ortho"), x)
    np.testing.assert_allclose(value, fun(x, norm="ortho"), rtol=1e-14, atol=1e-14)
    assert value.dtype == fun(x, norm="ortho").dtype


@pytest.mark.parametrize("fun", [np.fft.fft, np.fft.rfft, np.fft.ihfft, np.fft.fft2, np.fft.rfftn])
def test_float32_gradient_and_complex64_output(fun):
    x = _real(4, 6).astype(np.float32)
    value, back = tg.vjp(fun, x)
    assert value.dtype == fun(x).dtype == np.complex64
    g = back(np.ones(value.shape, np.complex64))[0]
    assert g.dtype == np.float32
    assert tg.grad(lambda a: np.sum(np.abs(fun(a)) ** 2))(x).dtype == np.float32


@pytest.mark.parametrize("fun", [np.fft.fft, np.fft.ifft, np.fft.irfft, np.fft.fftn])
def test_complex64_gradient(fun):
    z = _complex(6).astype(np.complex64)
    value, back = tg.vjp(fun, z)
    assert value.dtype == fun(z).dtype
    g = back(np.ones(value.shape, value.dtype))[0]
    assert g.dtype == np.complex64


# ----------------------------------------------------------------- closed forms
@pytest.mark.parametrize("n", [5, 6])
def test_parseval_real_input(n):
    x = _real(n)
    # sum |fft x|^2 = N sum x^2, so the gradient is 2 N x; with "ortho" it is 2 x.
    np.testing.assert_allclose(tg.grad(lambda a: np.sum(np.abs(np.fft.fft(a)) ** 2))(x), 2 * n * x)
    np.testing.assert_allclose(tg.grad(lambda a: np.sum(np.abs(np.fft.fft(a, norm="ortho")) ** 2))(x), 2 * x)
    np.testing.assert_allclose(tg.grad(lambda a: np.sum(np.abs(np.fft.ifft(a, norm="forward")) ** 2))(x), 2 * n * x)


def test_parseval_complex_input_gives_conjugate():
    # Convention: the gradient of a real loss at complex z is dL/dRe - 1j dL/dIm.
    # L = N sum |z|^2 gives 2 N (Re z - 1j Im z) = 2 N conj(z).
    z = _complex(5)
    g = tg.grad(lambda a: np.sum(np.abs(np.fft.fft(a)) ** 2))(z)
    np.testing.assert_allclose(g, 2 * 5 * np.conj(z))


@pytest.mark.parametrize("n", [5, 6])
def test_rfft_parseval_needs_doubled_bins(n):
    # sum over the half spectrum, with the bins irfft reads twice doubled, is N sum x^2.
    x = _real(n)
    w = np.full(n // 2 + 1, 2.0)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    np.testing.assert_allclose(tg.grad(lambda a: np.sum(w * np.abs(np.fft.rfft(a)) ** 2))(x), 2 * n * x)


@pytest.mark.parametrize("n", [5, 6, 7, 8])
def test_irfft_of_rfft_is_identity(n):
    x = _real(n)
    c = _real(n)
    for norm in NORMS:
        g = tg.grad(lambda a: np.sum(c * np.fft.irfft(np.fft.rfft(a, norm=norm), n=n, norm=norm)))(x)
        np.testing.assert_allclose(g, c, atol=1e-12)


def test_padding_and_truncation_closed_form():
    x = _real(5)
    # fft(x, n=3) only sees x[:3]: the rest gets a zero gradient.
    g = tg.grad(lambda a: np.sum(np.abs(np.fft.fft(a, n=3)) ** 2))(x)
    np.testing.assert_allclose(g, np.concatenate([2 * 3 * x[:3], np.zeros(2)]))
    # padding with zeros does not change the energy: gradient 2 N x with N = 8.
    g = tg.grad(lambda a: np.sum(np.abs(np.fft.fft(a, n=8)) ** 2))(x)
    np.testing.assert_allclose(g, 2 * 8 * x)


def test_jacobian_of_irfft_matches_matrix():
    n = 6
    z = _complex(n // 2 + 1)
    basis_re = np.stack([np.fft.irfft(e, n) for e in np.eye(n // 2 + 1)], axis=1)
    jac = tg.jacobian(lambda a: np.fft.irfft(a, n))(z)
    # d y / d Re(z) is the Jacobian's real part under the Re(c dz) convention.
    np.testing.assert_allclose(np.real(jac), basis_re, atol=1e-12)


def test_hessian_through_fft():
    x = _real(4)
    f = lambda a: np.sum(np.real(np.fft.fft(a)) ** 3)
    h = tg.hessian(f)(x)
    F = np.real(np.fft.fft(np.eye(4), axis=0))  # Re(fft(x)) = F x
    expected = F.T @ np.diag(6 * (F @ x)) @ F
    np.testing.assert_allclose(h, expected, atol=1e-10)


# ----------------------------------------------------------------- errors
def test_out_argument_is_rejected():
    with pytest.raises(tg.GradientDroppedError):
        tg.grad(lambda a: np.sum(np.real(np.fft.fft(a, out=_PLAIN_C4.copy()))))(np.ones(4))


def test_invalid_norm_and_repeated_axes():
    with pytest.raises(ValueError):
        tg.grad(lambda a: np.sum(np.real(np.fft.fft(a, norm="bogus"))))(np.ones(4))
    with pytest.raises(ValueError):
        tg.grad(lambda a: np.sum(np.real(np.fft.fftn(a, axes=(0, 0)))))(np.ones((2, 2)))


def test_hessian_through_irfft_of_a_filtered_spectrum():
    # Regression: the second derivative through irfft needs its VJP's rfft to zero-pad to n.
    x = np.random.default_rng(5).standard_normal(8)
    w = np.exp(-np.arange(5))
    f = lambda x: np.sum(np.fft.irfft(np.fft.rfft(x) * w) ** 2)  # noqa: E731
    # f = |A x|^2 with A the (real, linear) filter: H = 2 A^T A.
    A = np.stack([np.fft.irfft(np.fft.rfft(e) * w) for e in np.eye(8)], axis=1)
    np.testing.assert_allclose(tg.hessian(f)(x), 2 * A.T @ A, rtol=1e-10, atol=1e-12)
