"""Complex decompositions, eigenvectors of eig, Schur forms and signm (numpy.linalg and scipy.linalg).

Conventions checked here against central finite differences (float64):

* the gradient of a real loss ``L`` of a complex array is ``dL/dRe - 1j dL/dIm``
  (tapegrad's convention, as for ``np.abs``), checked in the real and the
  imaginary directions separately, and its Hessian through a real
  parametrization ``a = x + 1j y``;
* complex singular/eigen/Schur vectors are fixed by LAPACK only up to a phase:
  phase-invariant functions of them (``abs(v)**2``, projectors ``v v^H``,
  reconstructions) are exact at first and second order, phase-dependent ones
  raise :class:`NonDifferentiableArgumentError` naming the function.
"""

import numpy as np
import pytest
import scipy.linalg as sl

import tapegrad as tg
from tapegrad.errors import NonDifferentiableArgumentError
from tapegrad.testing import check_grads

RNG = np.random.default_rng(20240530)


def crand(*shape):
    return RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)


def rand(*shape):
    return RNG.standard_normal(shape)


def hpd(*shape):
    """Hermitian positive definite (a stack if ``shape`` has more than two entries)."""
    x = crand(*shape)
    return x @ np.conj(np.swapaxes(x, -1, -2)) + shape[-1] * np.eye(shape[-1])


def unitary(n):
    return np.linalg.qr(crand(n, n))[0]


def ct(x):
    return np.conj(np.swapaxes(x, -1, -2))


def proj(v, cols):
    """The projector onto columns ``cols`` of ``v``: invariant under their phases (and rotations among them)."""
    w = v[..., :, cols]
    return w @ ct(w)


def modsq(v):
    return np.real(v * np.conj(v))


def fd_gradient(loss, a, eps=1e-6):
    """``dL/dRe - 1j dL/dIm`` entry by entry, by central differences in each direction separately."""
    out = np.zeros(a.shape, dtype=complex)
    for k in np.ndindex(*a.shape):
        e = np.zeros(a.shape)
        e[k] = eps
        d_re = (loss(a + e) - loss(a - e)) / (2 * eps)
        d_im = (loss(a + 1j * e) - loss(a - 1j * e)) / (2 * eps)
        out[k] = d_re - 1j * d_im
    return out


def check_hessian_real_parametrization(loss, a, eps=1e-6, rtol=1e-6):
    """Hessian of ``x -> loss(x[:N] + 1j x[N:])`` against central differences of its traced gradient."""
    n = a.size

    def h(x):
        return loss(np.reshape(x[:n] + 1j * x[n:], a.shape))

    x = np.concatenate([a.real.ravel(), a.imag.ravel()])
    grad = tg.grad(h)(x)
    hess = tg.hessian(h)(x)
    fd_grad = np.array([(h(x + eps * e) - h(x - eps * e)) / (2 * eps) for e in np.eye(2 * n)])
    np.testing.assert_allclose(grad, fd_grad, rtol=rtol, atol=1e-7)
    fd_hess = np.array([(tg.grad(h)(x + eps * e) - tg.grad(h)(x - eps * e)) / (2 * eps) for e in np.eye(2 * n)])
    scale = np.abs(hess).max()
    np.testing.assert_allclose(hess, fd_hess.T, rtol=rtol, atol=1e-6 * scale)
    np.testing.assert_allclose(hess, hess.T, atol=1e-9 * scale)


# ---------------------------------------------------------------- real losses of complex matrices
W3 = rand(3, 3)
LOSSES = {
    "svdvals": lambda a: np.sum(np.linalg.svd(a, compute_uv=False) ** 3),
    "svd vectors": lambda a: (lambda u, s, vh: np.sum(W3 * modsq(u)) + np.sum(W3 * np.real(u @ vh)))(
        *np.linalg.svd(a)),
    "norm 2": lambda a: np.linalg.norm(a, 2),
    "nuc": lambda a: np.linalg.norm(a, "nuc"),
    "eigh": lambda a: np.sum(np.linalg.eigvalsh(a) ** 2 * [1.0, 2.0, 3.0]) + np.sum(
        W3 * modsq(np.linalg.eigh(a)[1])),
    "eigh upper": lambda a: np.sum(W3 * np.real(proj(np.linalg.eigh(a, UPLO="U")[1], [0]))),
    "cholesky": lambda a: np.sum(W3 * np.abs(np.linalg.cholesky(a @ ct(a) + 3 * np.eye(3))) ** 2),
    "qr": lambda a: np.sum(W3 * np.real(np.linalg.qr(a)[0])) + np.sum(W3 * np.imag(np.linalg.qr(a)[1])),
    "eig": lambda a: np.sum(W3 * modsq(np.linalg.eig(a)[1])) + np.sum(np.abs(np.linalg.eigvals(a)) ** 2),
    "scipy eigh": lambda a: np.sum(W3 * np.imag(proj(sl.eigh(a, lower=False)[1], [1, 2]))),
    "scipy schur": lambda a: np.sum(W3 * modsq(sl.schur(a, output="complex")[0])) + np.sum(
        W3 * np.real(proj(sl.schur(a, output="complex")[1], [0]))),
    "scipy signm": lambda a: np.sum(W3 * np.real(sl.signm(a))) + np.sum(W3 * np.imag(sl.signm(a))),
}


@pytest.mark.parametrize("name", list(LOSSES))
def test_gradient_convention_in_real_and_imaginary_directions(name):
    a = crand(3, 3) + np.diag([0.0, 1.5, -1.5])  # eigenvalues on both sides of the imaginary axis
    loss = LOSSES[name]
    np.testing.assert_allclose(tg.grad(loss)(a), fd_gradient(loss, a), rtol=1e-6, atol=1e-7)


def test_gradient_convention_matches_abs():
    z = crand(3)
    np.testing.assert_allclose(tg.grad(lambda z: np.sum(np.abs(z) ** 2))(z), fd_gradient(
        lambda z: np.sum(np.abs(z) ** 2), z), rtol=1e-7)


@pytest.mark.parametrize("name", ["svd vectors", "eigh", "cholesky", "qr", "eig", "scipy schur", "scipy signm"])
def test_hessian_through_real_parametrization(name):
    a = crand(3, 3) + np.diag([0.0, 1.5, -1.5])
    check_hessian_real_parametrization(LOSSES[name], a)


# ---------------------------------------------------------------- numpy.linalg, complex input
@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5), (2, 3, 3)])
def test_numpy_svd_qr_complex(shape):
    a = crand(*shape)
    check_grads(lambda a: (lambda u, s, vh: (s, modsq(u), u @ vh, (u * s[..., None, :] ** 2) @ vh, modsq(vh)))(
        *np.linalg.svd(a, full_matrices=False)), (a,))
    check_grads(lambda a: np.linalg.svd(a, compute_uv=False), (a,))
    check_grads(np.linalg.svdvals, (a,))
    check_grads(lambda a: (np.linalg.norm(a, 2, axis=(-2, -1)), np.linalg.norm(a, "nuc", axis=(-2, -1))), (a,))
    check_grads(lambda a: np.linalg.qr(a), (a,))
    check_grads(lambda a: np.linalg.qr(a, mode="r"), (a,))
    if shape[-2] <= shape[-1]:
        check_grads(lambda a: np.linalg.qr(a, mode="complete"), (a,))


@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 3)])
def test_numpy_square_decompositions_complex(shape):
    a = crand(*shape)
    check_grads(lambda a: (lambda u, s, vh: (s, u @ vh))(*np.linalg.svd(a)), (a,))  # square: full = thin
    check_grads(lambda a: (lambda w, v: (w, modsq(v), (v * np.exp(w)[..., None, :]) @ ct(v)))(
        *np.linalg.eigh(a)), (a,))
    check_grads(lambda a: proj(np.linalg.eigh(a, UPLO="U")[1], [0, 1]), (a,))
    check_grads(np.linalg.eigvalsh, (a,))
    check_grads(lambda a: np.linalg.cholesky(a), (hpd(*shape),))
    check_grads(lambda a: np.linalg.cholesky(a, upper=True), (hpd(*shape),))
    check_grads(lambda a: (lambda w, v: (w, modsq(v), (v * w[..., None, :]) @ np.linalg.inv(v)))(
        *np.linalg.eig(a)), (a,))
    check_grads(np.linalg.eigvals, (a,))


def test_hermitian_gradient_lives_on_the_triangle_read():
    a = crand(3, 3)
    for uplo, unread in (("L", np.triu(np.ones((3, 3)), 1)), ("U", np.tril(np.ones((3, 3)), -1))):
        g = tg.grad(lambda a: np.sum(W3 * modsq(np.linalg.eigh(a, UPLO=uplo)[1])))(a)
        np.testing.assert_array_equal(g * unread, 0)
        assert np.all(np.imag(np.diagonal(g)) == 0)  # LAPACK ignores the diagonal's imaginary part
    g = tg.grad(lambda a: np.sum(np.real(np.linalg.cholesky(a))))(hpd(3, 3))
    np.testing.assert_array_equal(np.triu(g, 1), 0)
    # d w = Re(v^H dA v): the gradient of the largest eigenvalue is conj(v v^H), read from the lower triangle.
    w, v = np.linalg.eigh(a)
    top = np.conj(np.outer(v[:, -1], np.conj(v[:, -1])))
    expected = np.tril(top + np.conj(top.T), -1) + np.diag(np.real(np.diag(top)))
    np.testing.assert_allclose(tg.grad(lambda x: np.linalg.eigvalsh(x)[-1])(a), expected, atol=1e-12)


def test_eig_of_real_matrices():
    # Complex conjugate pairs: complex unit eigenvectors, phase-invariant functions; the gradient is real.
    a = np.array([[1.0, -2.0, 0.5], [2.0, 1.0, 0.3], [0.1, 0.3, 3.0]]) + 0.1 * rand(3, 3)
    assert np.iscomplexobj(np.linalg.eigvals(a))
    check_grads(lambda a: (lambda w, v: (w, modsq(v), np.real((v * w) @ np.linalg.inv(v))))(*np.linalg.eig(a)),
                (a,))
    assert tg.grad(lambda a: np.sum(modsq(np.linalg.eig(a)[1][:, 0])))(a).dtype == np.float64
    # Real eigenvalues: real eigenvectors (a sign only, locally constant), any function of them.
    b = np.triu(rand(4, 4), 1) + np.diag([0.0, 3.0, 6.0, 9.0]) + 0.2 * rand(4, 4)
    if np.lib.NumpyVersion(np.__version__) < "2.5.0":
        assert not np.iscomplexobj(np.linalg.eigvals(b))
        check_grads(lambda b: (lambda w, v: (w, v * v[:1]))(*np.linalg.eig(b)), (b,))
    else:  # NumPy 2.5 returns complex eigenpairs for every real matrix: phase-invariant functions only
        assert np.iscomplexobj(np.linalg.eigvals(b))
        check_grads(lambda b: (lambda w, v: (np.real(w), modsq(v)))(*np.linalg.eig(b)), (b,))


def test_eig_closed_form():
    # Right eigenvector derivative with unit norm: dv = (I - v v^H) V (F o V^-1 dA V) restricted to its column.
    a = crand(4, 4)
    w, v = np.linalg.eig(a)
    e = crand(4, 4)
    c = np.linalg.solve(v, e @ v)
    f = 1 / (w[None, :] - w[:, None] + np.eye(4)) - np.eye(4)
    dv = v @ (f * c)
    dv = dv - v * np.sum(np.conj(v) * dv, axis=0)
    loss = lambda a: np.abs(np.linalg.eig(a)[1][2, 1]) ** 2  # noqa: E731
    expected = 2 * np.real(np.conj(v[2, 1]) * dv[2, 1])
    assert np.isclose(np.real(np.sum(tg.grad(loss)(a) * e)), expected, rtol=1e-9)


# ---------------------------------------------------------------- scipy.linalg, complex input
@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5), (2, 4, 3)])
def test_scipy_svd_qr_complex(shape):
    a = crand(*shape)
    k = min(shape[-2:])
    check_grads(lambda a: (lambda u, s, vh: (s, modsq(u), u @ vh))(*sl.svd(a, full_matrices=False)), (a,))
    check_grads(lambda a: (lambda u, s, vh: u[..., :, :k] @ vh[..., :k, :])(*sl.svd(a)), (a,))
    check_grads(lambda a: sl.svd(a, compute_uv=False), (a,))
    check_grads(sl.svdvals, (a,))
    check_grads(lambda a: sl.qr(a, mode="economic"), (a,))
    check_grads(lambda a: sl.qr(a, mode="r")[0] if np.ndim(a) == 2 else sl.qr(a, mode="r"), (a,))
    if np.ndim(a) == 2:
        check_grads(lambda a: sl.qr(a, mode="economic", pivoting=True)[:2], (a,))
    if shape[-2] <= shape[-1]:
        check_grads(lambda a: sl.qr(a), (a,))


@pytest.mark.parametrize("lower", [True, False])
def test_scipy_hermitian_complex(lower):
    a, b = crand(4, 4), hpd(4, 4)
    check_grads(lambda a: (lambda w, v: (w, modsq(v)))(*sl.eigh(a, lower=lower)), (a,))
    check_grads(lambda a: sl.eigh(a, lower=lower, eigvals_only=True), (a,))
    check_grads(lambda a: sl.eigvalsh(a, lower=lower), (a,))
    check_grads(lambda a: proj(sl.eigh(a, lower=lower, subset_by_index=[1, 2])[1], [0]), (a,))
    check_grads(lambda a, b: (lambda w, v: (w, modsq(v)))(*sl.eigh(a, b, lower=lower)), (a, b))
    check_grads(lambda a, b: sl.eigvalsh(a, b, lower=lower), (a, b))
    check_grads(lambda a: sl.cholesky(a, lower=lower), (b,))
    check_grads(lambda a: (lambda w, v: modsq(v))(*sl.eigh(a, lower=lower)), (crand(2, 3, 3),))


def test_scipy_eig_eigenvectors():
    a = crand(4, 4)
    check_grads(lambda a: (lambda w, v: (w, modsq(v), (v * w) @ np.linalg.inv(v)))(*sl.eig(a)), (a,))
    check_grads(lambda a: (lambda w, vl, vr: (w, modsq(vr)))(*sl.eig(a, left=True)), (a,))
    check_grads(sl.eigvals, (a,))
    check_grads(lambda a: np.abs(sl.eigvals(a)), (rand(4, 4),))
    check_grads(lambda a: (lambda w, v: modsq(v))(*sl.eig(a)), (crand(2, 3, 3),))
    with pytest.raises(NonDifferentiableArgumentError, match="left eigenvectors"):
        tg.grad(lambda a: np.sum(modsq(sl.eig(a, left=True)[1])))(a)


def test_scipy_schur_complex_and_real():
    a = crand(4, 4)
    for m in (a, rand(4, 4)):  # complex Schur of complex and of real input (the gradient is then real)
        check_grads(lambda m: (lambda t, z: (modsq(t), np.diagonal(t), proj(z, [0, 1]), proj(z, [2])))(
            *sl.schur(m, output="complex")), (m,))
    check_grads(lambda a: (lambda t, z, sdim: (modsq(t), proj(z, [0, 1])))(
        *sl.schur(a, output="complex", sort="lhp")), (a,))
    # Real Schur form of a non-normal matrix: real eigenvalues (triangular T) and a 2 x 2 block.
    triangular = np.triu(rand(4, 4), 1) + np.diag([0.0, 3.0, 6.0, 9.0]) + 0.2 * rand(4, 4)
    assert not np.any(np.diagonal(sl.schur(triangular)[0], -1))
    pair = np.array([[1.0, -2.0, 0.5, 0.2], [1.0, 1.0, 0.3, 0.0], [0.1, 0.3, 3.0, 1.0], [0.2, 0.0, 0.4, -2.0]])
    assert np.any(np.diagonal(sl.schur(pair)[0], -1))

    def signed(t, z):  # real Schur vectors have signs only: T_ij z_0i z_0j and z_ij z_0j do not depend on them
        first = z[..., :1, :]
        return t * (np.swapaxes(first, -1, -2) * first), z * first

    for m in (triangular, pair):
        check_grads(lambda m: signed(*sl.schur(m)), (m,))
    check_grads(lambda m: signed(*sl.schur(m)), (np.stack([triangular, pair]),))  # different block structures
    check_grads(lambda m: (lambda t, z, sdim: signed(t, z))(*sl.schur(m, sort="lhp")), (pair,))
    # A = Z T Z^H: the reconstruction is the identity map.
    e = crand(4, 4)
    np.testing.assert_allclose(tg.grad(lambda a: np.real(np.sum(e * (lambda t, z: z @ t @ ct(z))(
        *sl.schur(a, output="complex")))))(a), e, atol=1e-10)


# ---------------------------------------------------------------- signm
def test_signm():
    a = crand(4, 4) + np.diag([2.0, 2.0, -2.0, -2.0])
    real = rand(4, 4) + np.diag([2.0, 2.0, -2.0, -2.0])
    for m in (a, real, np.stack([a, a.T])):
        check_grads(sl.signm, (m,))
    # Closed form: in an eigenbasis, L_ij = E_ij (s_i - s_j) / (l_i - l_j) (0 between equal signs).
    w, v = np.linalg.eig(a)
    s = np.sign(w.real)
    same = s[:, None] == s[None, :]
    d = np.where(same, 0.0, (s[:, None] - s[None, :]) / np.where(same, 1.0, w[:, None] - w[None, :]))
    e = crand(4, 4)
    expected = v @ (d * np.linalg.solve(v, e @ v)) @ np.linalg.inv(v)
    got = tg.jvp(sl.signm, (a,), (e,))[1]
    np.testing.assert_allclose(got, expected, atol=1e-10)
    # Every eigenvalue in the right half-plane: sign is the identity nearby, the derivative 0.
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(np.real(sl.signm(x))))(hpd(3, 3)), 0, atol=1e-10)


# ---------------------------------------------------------------- Jacobian sweeps, forward mode
@pytest.mark.parametrize("name", ["svd", "eigh", "eig", "qr", "schur"])
def test_jacobian_sweeps_and_forward_mode(name):
    a = crand(3, 3)
    fun = {
        "svd": lambda a: np.concatenate([np.linalg.svd(a)[1], np.real(np.ravel(proj(np.linalg.svd(a)[0], [0])))]),
        "eigh": lambda a: np.ravel(modsq(np.linalg.eigh(a)[1])),
        "eig": lambda a: np.ravel(modsq(np.linalg.eig(a)[1])),
        "qr": lambda a: np.ravel(np.imag(np.linalg.qr(a)[0])),
        "schur": lambda a: np.ravel(modsq(sl.schur(a, output="complex")[0])),
    }[name]
    jac = tg.jacobian(fun)(a)  # one sweep with a batch of cotangents
    for u in (crand(3, 3), crand(3, 3)):
        fd = (fun(a + 1e-6 * u) - fun(a - 1e-6 * u)) / 2e-6
        np.testing.assert_allclose(np.real(np.sum(jac * u, axis=(-2, -1))), fd, rtol=1e-6, atol=1e-8)
    # jacfwd pushes real tangents: for a real output it would give the real part of this Jacobian
    # only (other numbers than every other way of asking), so it refuses; a jvp's direction is the caller's.
    with pytest.raises(tg.NonDifferentiableArgumentError, match="real axis"):
        tg.jacfwd(fun)(a)
    u = crand(3, 3)
    np.testing.assert_allclose(tg.jvp(fun, (a,), (u,))[1], np.real(np.sum(jac * u, axis=(-2, -1))), atol=1e-10)


# ---------------------------------------------------------------- near-repeated values, invariant losses
@pytest.mark.parametrize("gap, order", [(1e-4, 2), (1e-9, 1)])
def test_near_repeated_values_with_invariant_losses(gap, order):
    q, p = unitary(5), unitary(5)
    w = np.array([1.0, 2.0, 2.0 + gap, 3.0, 4.0])
    h = (q * w) @ ct(q)
    # The projector onto a cluster, and a matrix function through the eigenvectors: both smooth.
    check_grads(lambda h: (lambda w, v: (proj(v, [1, 2]), (v * np.exp(w)) @ ct(v)))(*np.linalg.eigh(h)), (h,),
                order=order)
    m = (q * w) @ p
    check_grads(lambda m: (lambda u, s, vh: (u @ vh, proj(u, [2, 3]), (u * s**3) @ vh))(*np.linalg.svd(m)), (m,),
                order=order)
    v = unitary(5) + 0.2 * crand(5, 5)  # non-normal, with well-conditioned eigenvectors
    g = (v * w) @ np.linalg.inv(v)
    check_grads(lambda g: (lambda w, v: (v * np.exp(w)) @ np.linalg.inv(v))(*np.linalg.eig(g)), (g,), order=order)


def test_exactly_repeated_values():
    eye = np.eye(3, dtype=complex)
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(np.linalg.eigvalsh(x)))(eye), np.eye(3))
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(np.linalg.svd(x, compute_uv=False)))(eye), np.eye(3))
    with np.errstate(all="ignore"):
        g = tg.grad(lambda x: np.sum(W3 * modsq(np.linalg.eigh(x)[1])))(eye + 0.1 * np.diag([0, 1, 1]))
    assert not np.all(np.isfinite(g))  # an eigenvector derivative at a repeated eigenvalue: inf/nan, as in JAX
    with pytest.raises(NonDifferentiableArgumentError, match="schur.*repeated eigenvalues"):
        tg.grad(lambda x: np.sum(modsq(sl.schur(x, output="complex")[1])))(eye)


# ---------------------------------------------------------------- what is refused
PHASE_DEPENDENT = {
    "numpy.linalg.svd": lambda a: np.sum(np.real(np.linalg.svd(a)[0])),
    "numpy.linalg.eigh": lambda a: np.sum(np.imag(np.linalg.eigh(a)[1])),
    "numpy.linalg.eig": lambda a: np.sum(np.real(np.linalg.eig(a)[1])),
    "scipy.linalg.svd": lambda a: np.sum(np.real(sl.svd(a)[2])),
    "scipy.linalg.eigh": lambda a: np.sum(np.real(sl.eigh(a, subset_by_index=[0, 1])[1])),
    "scipy.linalg.eig": lambda a: np.sum(np.real(sl.eig(a)[1])),
    "scipy.linalg.schur": lambda a: np.sum(np.real(sl.schur(a, output="complex")[1])),
}


@pytest.mark.parametrize("name", list(PHASE_DEPENDENT))
def test_phase_dependent_losses_are_refused(name):
    a = crand(3, 3)
    with pytest.raises(NonDifferentiableArgumentError, match=f"{name} here: .*phases"):
        tg.grad(PHASE_DEPENDENT[name])(a)
    with pytest.raises(NonDifferentiableArgumentError, match="phases"):
        tg.hessian(lambda x: PHASE_DEPENDENT[name](x[0] + 1j * x[1]))(np.stack([a.real, a.imag]))


def test_hermitian_svd_of_a_complex_matrix():
    # NumPy's eigh of the lower triangle: the singular values are the eigenvalues' magnitudes.
    a = hpd(3, 3)
    got = tg.grad(lambda x: np.sum(np.linalg.svd(x, hermitian=True)[1] ** 2))(a)
    full = lambda x: np.tril(x) + np.conjugate(np.swapaxes(np.tril(x, -1), -1, -2))  # noqa: E731
    expected = tg.grad(lambda x: np.sum(np.abs(np.linalg.eigvalsh(full(x))) ** 2))(a)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


def test_still_refused():
    with pytest.raises(NonDifferentiableArgumentError, match="normal 2 x 2 block"):
        rotation = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 2.0]])
        tg.grad(lambda a: np.sum(sl.schur(a)[0]))(rotation)
    with pytest.raises(NonDifferentiableArgumentError, match="full_matrices"):
        tg.grad(lambda a: np.sum(modsq(np.linalg.svd(a)[0])))(crand(4, 3))


def test_complex64_stays_single_precision():
    a = crand(3, 3).astype(np.complex64)
    g = tg.grad(lambda a: np.sum(np.linalg.svd(a, compute_uv=False)))(a)
    assert g.dtype == np.complex64
    np.testing.assert_allclose(g, tg.grad(lambda a: np.sum(np.linalg.svd(a, compute_uv=False)))(
        a.astype(np.complex128)), rtol=1e-4, atol=1e-5)
    g = tg.grad(lambda a: np.sum(W3 * modsq(np.linalg.eigh(a)[1])))(a)
    assert g.dtype == np.complex64
