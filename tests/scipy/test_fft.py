"""Derivatives of scipy.fft: every adjoint against the dense matrix of its operator.

A transform is a real-linear map; its VJP (tapegrad's complex convention: a
cotangent ``c`` of ``z`` stands for ``Re(c dz)``) must equal the transpose of the
map's dense matrix, built here by applying SciPy itself to basis vectors (and to
``1j`` times them for complex inputs).
"""

import numpy as np
import pytest
import scipy.fft
from scipy.fft import _basic_backend, _realtransforms_backend
from scipy.fft import dct, fht, idstn, rfft

import tapegrad as tg
from tapegrad import interception
from tapegrad.errors import NonDifferentiableArgumentError
from tapegrad.testing import check_grads

NORMS = [None, "backward", "ortho", "forward"]
rng = np.random.default_rng(7)


def _real(*shape):
    return rng.standard_normal(shape)


def _complex(*shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def dense_vjp(fun, x, c):
    """The transpose of ``fun``'s real-linear map at ``x``'s shape, applied to a batch ``c``.

    Column ``j`` of the map is ``fun(e_j)`` (and ``fun(1j e_j)`` for a complex
    input); the cotangent of entry ``j`` is ``Re<c, fun(e_j)> - 1j Re<c, fun(1j e_j)>``.
    """
    size = x.size
    batch = c.reshape((c.shape[0], -1))
    out = np.zeros((c.shape[0], size), dtype=complex if np.iscomplexobj(x) else float)
    for j in range(size):
        e = np.zeros(size)
        e[j] = 1.0
        col = np.asarray(fun(e.reshape(x.shape).astype(x.dtype))).reshape(-1)
        out[:, j] = np.real(batch @ col)
        if np.iscomplexobj(x):
            col_i = np.asarray(fun((1j * e).reshape(x.shape).astype(x.dtype))).reshape(-1)
            out[:, j] -= 1j * np.real(batch @ col_i)
    return out.reshape((c.shape[0],) + x.shape)


def assert_adjoint(fun, x, batch=3):
    """tapegrad's batched VJP of ``fun`` at ``x`` equals the dense transpose, row by row."""
    value, back = tg.vjp(fun, x)
    expected_value = fun(x)
    np.testing.assert_allclose(value, expected_value, rtol=1e-13, atol=1e-13)
    c = rng.standard_normal((batch,) + value.shape)
    if np.iscomplexobj(value):
        c = c + 1j * rng.standard_normal(c.shape)
    got = back(c)[0]
    np.testing.assert_allclose(got, dense_vjp(fun, x, c), rtol=1e-10, atol=1e-10)
    for b in range(batch):  # a batch of cotangents gives the single VJPs
        np.testing.assert_allclose(got[b], back(c[b])[0], rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------- DCT / DST
R2R = [scipy.fft.dct, scipy.fft.idct, scipy.fft.dst, scipy.fft.idst]
R2RN = [scipy.fft.dctn, scipy.fft.idctn, scipy.fft.dstn, scipy.fft.idstn]


@pytest.mark.parametrize("orthogonalize", [None, True, False])
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("type", [1, 2, 3, 4])
@pytest.mark.parametrize("fun", R2R, ids=lambda f: f.__name__)
def test_r2r_adjoint_every_type_norm_and_orthogonalize(fun, type, norm, orthogonalize):
    for size in (2, 5, 6):
        assert_adjoint(lambda v: fun(v, type, norm=norm, orthogonalize=orthogonalize), _real(size))


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("type", [1, 2, 3, 4])
@pytest.mark.parametrize("fun", R2R, ids=lambda f: f.__name__)
def test_r2r_adjoint_complex_input_padding_and_axis(fun, type, norm):
    # SciPy transforms real and imaginary parts separately (orthogonalize=False is
    # not passed on there: pocketfft orthogonalizes when norm="ortho").
    assert_adjoint(lambda v: fun(v, type, norm=norm, orthogonalize=False), _complex(5))
    assert_adjoint(lambda v: fun(v, type, n=7, axis=0, norm=norm), _real(4, 3))
    assert_adjoint(lambda v: fun(v, type, n=3, norm=norm), _real(2, 5))


@pytest.mark.parametrize("orthogonalize", [None, False])
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("type", [1, 2, 3, 4])
@pytest.mark.parametrize("fun", R2RN, ids=lambda f: f.__name__)
def test_r2rn_adjoint(fun, type, norm, orthogonalize):
    x = _real(3, 4)
    assert_adjoint(lambda v: fun(v, type, norm=norm, orthogonalize=orthogonalize), x)
    assert_adjoint(lambda v: fun(v, type, s=(5, 2), norm=norm, orthogonalize=orthogonalize), x)
    assert_adjoint(lambda v: fun(v, type, axes=[0], norm=norm), _real(3, 2, 2))


def test_dct_ii_adjoint_is_a_scaled_dct_iii():
    # Closed form: DCT-II's matrix C2[k, n] = 2 cos(pi k (2n + 1) / 2N), so
    # C2^T g = DCT-III(g * (2, 1, 1, ...)).
    n = 6
    g = _real(n)
    back = tg.vjp(lambda v: dct(v), _real(n))[1]
    k = np.arange(n)
    C2 = 2 * np.cos(np.pi * k[:, None] * (2 * k[None, :] + 1) / (2 * n))
    np.testing.assert_allclose(back(g)[0], C2.T @ g, rtol=1e-12)
    np.testing.assert_allclose(back(g)[0], dct(g * np.r_[2.0, np.ones(n - 1)], 3), rtol=1e-12)


@pytest.mark.parametrize(
    "fun",
    [
        lambda v: dct(np.sin(v), 2, norm="ortho") ** 2,
        lambda v: scipy.fft.idct(v * v, 1, norm="forward"),
        lambda v: scipy.fft.dst(v ** 3, type=3, orthogonalize=True),
        lambda v: scipy.fft.idst(np.exp(v), type=4, n=7),
        lambda v: scipy.fft.dctn(v * v, type=1, axes=(0, 1)),
        lambda v: idstn(np.tanh(v), type=2, s=(4, 3), norm="ortho"),
    ],
)
def test_r2r_second_order(fun):
    check_grads(fun, [_real(3, 5)], order=2)


def test_r2r_hessian_closed_form():
    # f(x) = sum(dct(x, norm="ortho") ** 3): Hessian C^T diag(6 C x) C.
    x = _real(5)
    C = dct(np.eye(5), norm="ortho", axis=0)
    h = tg.hessian(lambda v: np.sum(dct(v, norm="ortho") ** 3))(x)
    np.testing.assert_allclose(h, C.T @ np.diag(6 * (C @ x)) @ C, rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------- DFTs
ONE_D = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]
REAL_ONLY = ("rfft", "ihfft")


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("name", ONE_D)
def test_one_d_dft_adjoints(name, norm):
    fun = getattr(scipy.fft, name)
    inputs = [_real(6), _real(5)] + ([] if name in REAL_ONLY else [_complex(6), _complex(5)])
    for x in inputs:
        for n in (None, 4, 9):
            assert_adjoint(lambda v: fun(v, n, norm=norm), x)
    assert_adjoint(lambda v: fun(v, axis=0, norm=norm), _real(4, 3))


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
@pytest.mark.parametrize("name", ONE_D)
def test_nd_dft_adjoints(name, norm):
    fun_n = getattr(scipy.fft, name + "n")
    fun_2 = getattr(scipy.fft, name + "2")
    x = _real(3, 4) if name in REAL_ONLY else _complex(3, 4)
    assert_adjoint(lambda v: fun_n(v, norm=norm), x)
    assert_adjoint(lambda v: fun_2(v, norm=norm), x)
    assert_adjoint(lambda v: fun_n(v, s=(4, 5), norm=norm), x)
    assert_adjoint(lambda v: fun_2(v, s=(2, 3), axes=(1, 0), norm=norm), x)
    assert_adjoint(lambda v: fun_n(v, axes=(0,), norm=norm), x)


@pytest.mark.parametrize(
    "fun",
    [
        lambda v: np.abs(scipy.fft.fft(v)) ** 2,
        lambda v: scipy.fft.irfft(scipy.fft.rfft(v) * scipy.fft.rfft(v), n=6),
        lambda v: np.real(scipy.fft.hfft(np.sin(v) + 0j, norm="ortho")),
        lambda v: np.imag(scipy.fft.ihfftn(v ** 2, axes=(0, 1))),
        lambda v: np.real(scipy.fft.ifft2(v * v, s=(4, 4))),
        lambda v: scipy.fft.irfftn(scipy.fft.rfftn(v ** 3, norm="forward"), s=(3, 6), norm="forward"),
    ],
)
def test_dft_second_order(fun):
    check_grads(fun, [_real(3, 6)], order=2)


def test_dft_second_order_complex_input():
    z = _complex(5)
    check_grads(lambda v: scipy.fft.fft(v * v, norm="ortho"), [z], order=2)
    check_grads(lambda v: scipy.fft.hfft(v ** 2, 8), [z], order=2)


def test_parseval_closed_form():
    x = _real(7)
    g = tg.grad(lambda a: np.sum(np.abs(scipy.fft.fft(a)) ** 2))(x)
    np.testing.assert_allclose(g, 2 * 7 * x, rtol=1e-12)
    z = _complex(7)
    # Complex convention: gradient of a real loss at z is dL/dRe - 1j dL/dIm = 2 N conj(z).
    g = tg.grad(lambda a: np.sum(np.abs(scipy.fft.ifft(a, norm="forward")) ** 2))(z)
    np.testing.assert_allclose(g, 2 * 7 * np.conj(z), rtol=1e-12)


# ----------------------------------------------------------------- fast Hankel transform
@pytest.mark.parametrize("bias", [0.0, 0.3])
@pytest.mark.parametrize("inverse", [False, True])
def test_fht_adjoint_and_second_order(inverse, bias):
    fun = scipy.fft.ifht if inverse else fht
    dln, mu, offset = 0.1, 0.5, scipy.fft.fhtoffset(0.1, 0.5, bias=bias)
    for n in (8, 9):
        assert_adjoint(lambda v: fun(v, dln, mu, offset=offset, bias=bias), _real(n))
    check_grads(lambda v: fun(v ** 2, dln, mu, offset, bias), [_real(2, 8)], order=2)


def test_fht_traced_order_is_refused():
    with pytest.raises(NonDifferentiableArgumentError, match=r"scipy\.fft\.fht with respect to mu"):
        tg.grad(lambda m: np.sum(fht(np.ones(8), 0.1, m)))(0.5)


# ----------------------------------------------------------------- dtypes, call styles, exactness
@pytest.mark.parametrize(
    "fun",
    [
        lambda v: scipy.fft.dct(v, 3, norm="ortho"),
        lambda v: scipy.fft.idstn(v, 1),
        lambda v: np.abs(scipy.fft.rfft2(v)) ** 2,
        lambda v: np.abs(scipy.fft.fft(v, n=9)) ** 2,
        lambda v: scipy.fft.irfft(v, 7),
    ],
)
def test_float32_stays_float32(fun):
    x = _real(4, 6).astype(np.float32)
    value, back = tg.vjp(fun, x)
    assert value.dtype == fun(x).dtype
    g = back(np.ones(value.shape, value.dtype))[0]
    assert g.dtype == np.float32
    g64 = tg.vjp(fun, x.astype(np.float64))[1](np.ones(value.shape))[0]
    np.testing.assert_allclose(g, g64, rtol=1e-4, atol=1e-4)


def test_complex64_stays_complex64():
    z = _complex(6).astype(np.complex64)
    for fun in (scipy.fft.fft, scipy.fft.dct, scipy.fft.idst):
        value, back = tg.vjp(fun, z)
        assert value.dtype == np.complex64
        assert back(np.ones(value.shape, np.complex64))[0].dtype == np.complex64


def test_call_styles_and_keywords():
    x = _real(5)
    c = _real(5)
    for fun in (
        lambda v: dct(v),  # bound at import time
        lambda v: scipy.fft.dct(v, type=2, axis=-1, norm=None),
        lambda v: scipy.fft.dct(x=v),
    ):
        np.testing.assert_allclose(tg.grad(lambda v: np.sum(c * fun(v)))(x), dense_vjp(fun, x, c[None])[0], rtol=1e-12)
    with scipy.fft.set_backend("scipy"):
        g = tg.grad(lambda v: np.sum(np.real(rfft(v)) * c[:3]))(x)
    np.testing.assert_allclose(g, dense_vjp(lambda v: np.real(rfft(v)), x, c[None, :3])[0], rtol=1e-12)


def test_overwrite_x_never_writes_the_input():
    x = _real(6)
    keep = x.copy()
    tg.grad(lambda v: np.sum(scipy.fft.dct(v, overwrite_x=True) ** 2))(x)
    tg.grad(lambda v: np.sum(np.abs(scipy.fft.fft(v, overwrite_x=True, workers=2)) ** 2))(x)
    np.testing.assert_array_equal(x, keep)


def test_plain_calls_while_recording_are_scipys_own_and_nothing_stays_changed():
    interception.uninstall(now=True)  # an earlier test's trampolines may linger (restored by a plain call)
    codes = {f: f.__code__ for f in (_realtransforms_backend.dct, _basic_backend.fft, _basic_backend.rfftn)}
    plain = _real(4, 5)
    seen = {}

    def f(v):
        # Calls on plain arrays inside a recording run SciPy's own code.
        seen["dct"] = scipy.fft.dct(plain, 3, norm="ortho")
        seen["fft"] = scipy.fft.fft(plain)
        seen["rfftn"] = scipy.fft.rfftn(plain, s=(4, 6))
        assert _realtransforms_backend.dct.__code__ is not codes[_realtransforms_backend.dct]  # the door is open
        return np.sum(scipy.fft.dct(v) ** 2)

    tg.grad(f)(_real(5))
    assert np.array_equal(seen["dct"], scipy.fft.dct(plain, 3, norm="ortho"))
    assert np.array_equal(seen["fft"], scipy.fft.fft(plain))
    assert np.array_equal(seen["rfftn"], scipy.fft.rfftn(plain, s=(4, 6)))
    for fun, code in codes.items():
        assert fun.__code__ is code


def test_scipy_errors_are_kept():
    with pytest.raises(ValueError, match="norm"):
        tg.grad(lambda v: np.sum(scipy.fft.dct(v, norm="bogus")))(_real(4))
    with pytest.raises(ValueError):
        tg.grad(lambda v: np.sum(scipy.fft.dct(v, type=5)))(_real(4))
    with pytest.raises(NotImplementedError, match="plan"):
        tg.grad(lambda v: np.sum(np.abs(scipy.fft.fft(v, plan=object()))))(_real(4))
    with pytest.raises(ValueError):
        tg.grad(lambda v: np.sum(scipy.fft.dct(v, n=0)))(_real(4))
    with pytest.raises(TypeError):  # SciPy: rfft of complex input
        tg.grad(lambda v: np.sum(np.abs(scipy.fft.rfft(v * (1 + 1j)))))(_real(4))


def test_jacobian_equals_stacked_vjps():
    x = _real(6)
    fun = lambda v: scipy.fft.dst(v ** 2, 2, norm="ortho")
    jac = tg.jacobian(fun)(x)
    back = tg.vjp(fun, x)[1]
    np.testing.assert_allclose(jac, np.stack([back(e)[0] for e in np.eye(6)]), rtol=1e-12)


def test_shifts():
    x = _real(3, 6)
    for fun in (scipy.fft.fftshift, scipy.fft.ifftshift):
        assert_adjoint(lambda v: fun(v), x)
        assert_adjoint(lambda v: fun(v, axes=1), x)
