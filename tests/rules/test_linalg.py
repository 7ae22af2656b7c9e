"""matmul and numpy.linalg: first and second order, stacked matrices, float32, closed forms."""

import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import NonDifferentiableArgumentError
from tapegrad.testing import check_grads

RNG = np.random.default_rng(7)


def rand(*shape):
    return RNG.standard_normal(shape)


def well(*shape):
    """Well-conditioned square matrices (a stack if shape has more than two entries)."""
    n = shape[-1]
    return rand(*shape) + n * np.eye(n)


def spd(*shape):
    x = rand(*shape)
    return x @ np.swapaxes(x, -1, -2) + shape[-1] * np.eye(shape[-1])


def crand(*shape):
    return rand(*shape) + 1j * rand(*shape)


def _leaves(v):
    return list(v) if isinstance(v, (tuple, list)) else [v]


def check(fun, *args, order=2):
    """Traced value equals NumPy's, and derivatives match finite differences."""
    traced, _ = tg.vjp(fun, *args)
    for t, p in zip(_leaves(traced), _leaves(fun(*args))):
        np.testing.assert_allclose(t, p, rtol=1e-10, atol=1e-12)
    check_grads(fun, args, order=order)


# ---------------------------------------------------------------- matmul
@pytest.mark.parametrize(
    "sa, sb",
    [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)),
     ((2, 3, 4), (4,)), ((4,), (2, 4, 3)), ((2, 1, 3, 4), (5, 4, 2)), ((2, 3, 4), (2, 4, 5))],
)
def test_matmul(sa, sb):
    check(np.matmul, rand(*sa), rand(*sb))
    check(lambda a, b: a @ b, rand(*sa), rand(*sb))


def test_matmul_jacobian_matches_explicit_form():
    w1, w2, x = rand(5, 4), rand(3, 5), rand(4)

    def f(x):
        return np.tanh(w2 @ np.tanh(w1 @ x))

    h1 = np.tanh(w1 @ x)
    expected = (1 - f(x) ** 2)[:, None] * (w2 @ ((1 - h1**2)[:, None] * w1))
    np.testing.assert_allclose(tg.jacobian(f)(x), expected, rtol=1e-12)
    # Jacobian with respect to a weight matrix times a matrix: the folded batched path.
    x6 = rand(4, 6)
    jw = tg.jacobian(lambda w: w @ x6)(w1)
    np.testing.assert_allclose(jw, np.einsum("ik,jl->ijkl", np.eye(5), x6.T))


def test_matmul_stacked_against_single_matrix_batched_cotangents():
    x, w = rand(2, 3, 4), rand(4, 5)
    jac = tg.jacobian(lambda w: x @ w)(w)
    np.testing.assert_allclose(jac, np.einsum("sik,jl->sijkl", x, np.eye(5)))
    jac = tg.jacobian(lambda x: x @ w)(x)
    np.testing.assert_allclose(jac, np.einsum("st,iu,lj->siltuj", np.eye(2), np.eye(3), w.T))


def test_hessian_of_quadratic_form():
    a, x = rand(4, 4), rand(4)
    np.testing.assert_allclose(tg.hessian(lambda x: x @ (a @ x))(x), a + a.T, rtol=1e-12)


# ---------------------------------------------------------------- inv, det, slogdet, solve
@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 3), (1, 1)])
def test_inv_det_slogdet(shape):
    a = well(*shape)
    check(np.linalg.inv, a)
    check(np.linalg.det, a)
    check(np.linalg.slogdet, a)


def test_complex_inv_det_slogdet_solve():
    a = crand(3, 3) + 3 * np.eye(3)
    check(np.linalg.inv, a)
    check(np.linalg.det, a)
    check(lambda x: np.linalg.slogdet(x), a)
    check(np.linalg.solve, a, crand(3))


def test_det_logdet_closed_forms():
    a = well(4, 4)
    np.testing.assert_allclose(tg.grad(np.linalg.det)(a), np.linalg.det(a) * np.linalg.inv(a).T, rtol=1e-10)
    np.testing.assert_allclose(tg.grad(lambda x: np.linalg.slogdet(x)[1])(a), np.linalg.inv(a).T, rtol=1e-10)
    # Negative determinant: the sign is constant, log|det| keeps the same gradient.
    b = a.copy()
    b[[0, 1]] = b[[1, 0]]
    assert np.linalg.slogdet(b)[0] < 0
    np.testing.assert_allclose(tg.grad(lambda x: np.linalg.slogdet(x)[1])(b), np.linalg.inv(b).T, rtol=1e-10)
    inv = np.linalg.inv(a)
    np.testing.assert_allclose(tg.grad(lambda x: np.trace(np.linalg.inv(x)))(a), -(inv @ inv).T)


@pytest.mark.parametrize(
    "sa, sb",
    [((4, 4), (4,)), ((4, 4), (4, 2)), ((2, 3, 3), (3,)), ((2, 3, 3), (2, 3, 2)), ((2, 3, 3), (3, 1)),
     ((3, 3), (2, 3, 2))],
)
def test_solve(sa, sb):
    check(np.linalg.solve, well(*sa), rand(*sb))


def test_solve_matches_inverse_jacobian():
    a, b = well(3, 3), rand(3, 2)
    ja = tg.jacobian(lambda a: np.linalg.solve(a, b))(a)
    jb = tg.jacobian(lambda a: np.linalg.inv(a) @ b)(a)
    np.testing.assert_allclose(ja, jb, rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------- pinv, lstsq
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (2, 4, 3)])
def test_pinv(shape):
    check(np.linalg.pinv, rand(*shape))


def test_pinv_hermitian_reads_lower_triangle():
    a = spd(3, 3)
    check(lambda x: np.linalg.pinv(x, hermitian=True), a)
    g = tg.grad(lambda x: np.sum(np.linalg.pinv(x, hermitian=True) * a))(a)
    np.testing.assert_array_equal(np.triu(g, 1), 0)


def test_lstsq():
    a = rand(6, 3)
    check(lambda a, b: np.linalg.lstsq(a, b)[0], a, rand(6))
    check(lambda a, b: np.linalg.lstsq(a, b)[0], a, rand(6, 2))
    check(lambda a, b: tuple(np.linalg.lstsq(a, b)[k] for k in (0, 1, 3)), a, rand(6))
    check(lambda a, b: tuple(np.linalg.lstsq(a, b)[k] for k in (0, 1, 3)), a, rand(6, 2))
    check(lambda a, b: np.linalg.lstsq(a, b)[0], rand(3, 5), rand(3))  # under-determined: minimum norm
    # Normal equations: x = (A^T A)^-1 A^T b.
    b = rand(6)
    expected = tg.jacobian(lambda a: np.linalg.solve(a.T @ a, a.T @ b))(a)
    np.testing.assert_allclose(tg.jacobian(lambda a: np.linalg.lstsq(a, b)[0])(a), expected, rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------- decompositions
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(upper):
    check(lambda a: np.linalg.cholesky(a, upper=upper), spd(4, 4))
    check(lambda a: np.linalg.cholesky(a, upper=upper), spd(2, 3, 3))
    g = tg.grad(lambda a: np.sum(np.linalg.cholesky(a, upper=upper) ** 2))(spd(3, 3))
    unread = np.triu(g, 1) if not upper else np.tril(g, -1)
    np.testing.assert_array_equal(unread, 0)  # NumPy reads one triangle only


def test_cholesky_of_symmetric_construction_matches_logdet():
    x = rand(3, 3) + 3 * np.eye(3)

    def logdet_via_chol(x):
        return 2 * np.sum(np.log(np.diagonal(np.linalg.cholesky(x @ x.T))))

    np.testing.assert_allclose(tg.grad(logdet_via_chol)(x), 2 * np.linalg.inv(x).T, rtol=1e-10)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (2, 4, 3), (2, 3, 4)])
def test_qr(shape):
    a = rand(*shape)
    check(np.linalg.qr, a)
    check(lambda x: np.linalg.qr(x, mode="r"), a)


def test_qr_modes():
    check(lambda x: np.linalg.qr(x, mode="complete"), rand(3, 5))
    for mode, shape in [("complete", (5, 3)), ("raw", (3, 3))]:
        with pytest.raises(NonDifferentiableArgumentError, match="mode"):
            tg.grad(lambda x: np.sum(np.linalg.qr(x, mode=mode)[0]))(rand(*shape))


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh(uplo):
    check(lambda a: np.linalg.eigh(a, UPLO=uplo), spd(4, 4))
    check(lambda a: np.linalg.eigh(a, UPLO=uplo), spd(2, 3, 3))
    check(lambda a: np.linalg.eigvalsh(a, UPLO=uplo), spd(2, 3, 3))
    g = tg.grad(lambda a: np.sum(np.linalg.eigh(a, UPLO=uplo)[1][0] ** 2))(spd(3, 3))
    np.testing.assert_array_equal(np.triu(g, 1) if uplo == "L" else np.tril(g, -1), 0)


def test_eigvalsh_closed_form_and_repeated_eigenvalues():
    a = spd(4, 4)
    w, v = np.linalg.eigh(a)
    top = np.outer(v[:, -1], v[:, -1])  # d w_max = v^T dA v, read from the lower triangle
    expected = np.tril(2 * top, -1) + np.diag(np.diag(top))
    np.testing.assert_allclose(tg.grad(lambda x: np.linalg.eigvalsh(x)[-1])(a), expected, atol=1e-12)
    # Repeated eigenvalues: eigenvalue functions stay finite, eigenvector derivatives are inf/nan.
    eye = np.eye(3)
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(np.linalg.eigvalsh(x)))(eye), eye)
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(np.linalg.eigh(x)[0] ** 2))(eye), 2 * eye)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert not np.all(np.isfinite(tg.grad(lambda x: np.sum(np.linalg.eigh(x)[1][0]))(eye)))


def test_eigvals_first_order():
    for a in [rand(4, 4), rand(2, 3, 3), spd(3, 3), crand(3, 3)]:
        traced, _ = tg.vjp(np.linalg.eigvals, a)
        np.testing.assert_allclose(traced, np.linalg.eigvals(a))
        check_grads(np.linalg.eigvals, [a], order=1)
    a = rand(3, 3)
    # The trace is the sum of the eigenvalues.
    np.testing.assert_allclose(tg.grad(lambda x: np.real(np.sum(np.linalg.eigvals(x))))(a), np.eye(3), atol=1e-12)
    # Complex eigenvectors carry an arbitrary phase: a function that depends on it has no derivative.
    with pytest.raises(NonDifferentiableArgumentError, match="phases"):
        tg.grad(lambda x: np.real(np.sum(np.linalg.eig(x)[1])))(crand(3, 3))
    check_grads(np.linalg.eigvals, [a], order=2)  # the eigenvector derivatives give second order


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (2, 4, 3), (2, 3, 4)])
def test_svd(shape):
    a = rand(*shape)
    check(lambda x: np.linalg.svd(x, full_matrices=False), a)
    check(lambda x: np.linalg.svd(x, compute_uv=False), a)
    check(np.linalg.svdvals, a)


def test_svd_square_full_matrices_and_errors():
    check(np.linalg.svd, rand(3, 3))
    with pytest.raises(NonDifferentiableArgumentError, match="full_matrices"):
        tg.grad(lambda x: np.sum(np.linalg.svd(x)[0]))(rand(4, 3))
    # hermitian=True: NumPy's eigh of the lower triangle, its signs and order, traced.
    a = rand(4, 4) + rand(4, 4).T
    lower = lambda x: np.tril(x) + np.swapaxes(np.tril(x, -1), -1, -2)  # noqa: E731  (what it reads)
    check(lambda x: np.linalg.svd(x, hermitian=True)[1], a)
    check(lambda x: np.linalg.svd(x, hermitian=True, compute_uv=False), a)
    rebuilt = lambda x: (lambda r: r[0] @ (r[1][:, None] * r[2]))(np.linalg.svd(x, hermitian=True))  # noqa: E731
    np.testing.assert_allclose(tg.jacobian(rebuilt)(a), tg.jacobian(lower)(a), atol=1e-12)
    with pytest.raises(NonDifferentiableArgumentError, match="complex"):
        tg.grad(lambda x: np.real(np.sum(np.linalg.svd(x * (1 + 1j), full_matrices=False)[0])))(rand(3, 3))


def test_svd_closed_form():
    a = rand(4, 3)
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    top = tg.grad(lambda x: np.linalg.svd(x, compute_uv=False)[0])(a)
    np.testing.assert_allclose(top, np.outer(u[:, 0], vh[0]), atol=1e-12)
    np.testing.assert_allclose(tg.grad(lambda x: np.linalg.norm(x, "nuc"))(a), u @ vh, atol=1e-12)


# ---------------------------------------------------------------- norms
VECTOR_ORDS = [None, 2, 1, 3, 0.5, -1, np.inf, -np.inf, 0]
MATRIX_ORDS = [None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf]


@pytest.mark.parametrize("ord", VECTOR_ORDS)
def test_vector_norms(ord):
    check(lambda x: np.linalg.norm(x, ord), rand(5))
    check(lambda x: np.linalg.norm(x, ord, axis=1, keepdims=True), rand(2, 3, 4))
    check(lambda x: np.linalg.norm(x, ord, axis=-1), rand(2, 3))
    check(lambda x: np.linalg.vector_norm(x, ord=ord, axis=(0, 2)), rand(2, 3, 4))
    check(lambda x: np.linalg.vector_norm(x, ord=ord, keepdims=True), rand(2, 3))


@pytest.mark.parametrize("ord", MATRIX_ORDS)
def test_matrix_norms(ord):
    check(lambda x: np.linalg.norm(x, ord), rand(3, 4))
    check(lambda x: np.linalg.norm(x, ord, axis=(2, 0), keepdims=True), rand(3, 2, 4))
    check(lambda x: np.linalg.matrix_norm(x, ord=ord if ord is not None else "fro"), rand(2, 4, 3))


def test_norm_defaults_and_complex():
    check(np.linalg.norm, rand(2, 3, 4))
    check(lambda x: np.linalg.norm(x, keepdims=True), rand(2, 3))
    check(np.linalg.norm, np.array(-2.5))
    check(np.linalg.norm, crand(3, 2))
    check(lambda x: np.linalg.norm(x, 3), crand(4))
    check(lambda x: np.linalg.norm(x, "nuc"), rand(3, 3))
    with pytest.raises(ValueError):
        tg.grad(lambda x: np.linalg.norm(x, "fro"))(rand(3))
    with pytest.raises(ValueError):
        tg.grad(lambda x: np.linalg.norm(x, 2))(rand(2, 2, 2))


def test_norm_closed_forms_and_subgradient_at_zero():
    x = rand(5)
    np.testing.assert_allclose(tg.grad(np.linalg.norm)(x), x / np.linalg.norm(x))
    np.testing.assert_allclose(
        tg.hessian(np.linalg.norm)(x), (np.eye(5) - np.outer(x, x) / (x @ x)) / np.linalg.norm(x), rtol=1e-10
    )
    zero = np.zeros(4)
    for ord in [None, 1, 3, 0.5, np.inf, -np.inf]:
        np.testing.assert_array_equal(tg.grad(lambda x: np.linalg.norm(x, ord))(zero), zero)
    np.testing.assert_array_equal(tg.grad(lambda x: np.linalg.norm(x, "fro"))(np.zeros((2, 3))), np.zeros((2, 3)))
    # Some zero entries, nonzero vector: p > 1 is differentiable there.
    y = np.array([0.0, 1.0, -2.0])
    expected = np.sign(y) * y**2 / np.linalg.norm(y, 3) ** 2
    np.testing.assert_allclose(tg.grad(lambda x: np.linalg.norm(x, 3))(y), expected)


@pytest.mark.parametrize("p", [None, 2, -2, 1, -1, "fro", "nuc", np.inf, -np.inf])
def test_cond(p):
    check(lambda x: np.linalg.cond(x, p), well(3, 3))
    check(lambda x: np.linalg.cond(x, p), well(2, 3, 3))


# ---------------------------------------------------------------- composites
@pytest.mark.parametrize("n", [1, 2, 3, 5, -1, -2])
def test_matrix_power(n):
    check(lambda x: np.linalg.matrix_power(x, n), well(3, 3))
    check(lambda x: np.linalg.matrix_power(x, n), well(2, 3, 3))


def test_matrix_power_zero_and_errors():
    a = well(3, 3)
    np.testing.assert_array_equal(tg.grad(lambda x: np.sum(np.linalg.matrix_power(x, 0) * x))(a), np.eye(3))
    with pytest.raises(TypeError):
        tg.grad(lambda x: np.sum(np.linalg.matrix_power(x, 1.5)))(a)


def test_tensorinv_tensorsolve():
    a = np.reshape(well(6, 6), (2, 3, 6))
    check(lambda x: np.linalg.tensorinv(x, ind=2), a)
    check(lambda x: np.linalg.tensorinv(x, ind=1), np.reshape(well(6, 6), (6, 2, 3)))
    check(np.linalg.tensorsolve, np.reshape(well(6, 6), (6, 2, 3)), rand(6))
    check(lambda a, b: np.linalg.tensorsolve(a, b, axes=(0,)), np.reshape(well(6, 6), (2, 3, 2, 3)), rand(3, 2))


def test_matrix_rank_is_constant():
    a = rand(4, 3)
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(x) * np.linalg.matrix_rank(x))(a), np.full((4, 3), 3.0))


# ---------------------------------------------------------------- triangular solves in the VJPs
from tapegrad.rules import linalg as linalg_rules  # noqa: E402


def lower_tri(*shape):
    """Well-conditioned lower-triangular matrices (exact zeros above the diagonal)."""
    return np.tril(rand(*shape)) + shape[-1] * np.eye(shape[-1])


@pytest.fixture(params=["one block", "split"])
def tri_backend(request, monkeypatch):
    """Run a test with each triangular factor solved as one block and split down to 1 x 1 blocks."""
    if request.param == "split":
        monkeypatch.setattr(linalg_rules, "_TRI_BLOCK", 1)
    return request.param


def test_tri_solve_matches_dense_solve(tri_backend):
    for t, rhs in [(lower_tri(4, 4), rand(4, 3)), (lower_tri(4, 4), rand(2, 5, 4, 3)),
                   (lower_tri(2, 4, 4), rand(3, 2, 4, 2))]:
        for lower, tt in [(True, t), (False, np.swapaxes(t, -1, -2))]:
            for trans in (False, True):
                eff = np.swapaxes(tt, -1, -2) if trans else tt
                got = linalg_rules.tri_solve(tt, rhs, lower=lower, trans=trans)
                np.testing.assert_allclose(eff @ got, np.broadcast_to(rhs, got.shape), rtol=1e-10, atol=1e-12)


def test_triangle_detection():
    assert linalg_rules._triangle(lower_tri(3, 3)) == "lower"
    assert linalg_rules._triangle(lower_tri(2, 3, 3).swapaxes(-1, -2)) == "upper"
    assert linalg_rules._triangle(well(3, 3)) is None
    assert linalg_rules._triangle(np.complex128(1j) * lower_tri(3, 3)) is None  # complex: LU path


def test_vjps_call_the_triangular_solve_on_plain_arrays(monkeypatch):
    blocked = linalg_rules._blocked_tri_solve
    calls = []

    def spy(t, rhs, lower):
        calls.append(np.shape(t))
        return blocked(t, rhs, lower)

    monkeypatch.setattr(linalg_rules, "_blocked_tri_solve", spy)
    a, low, b = spd(5, 5), lower_tri(5, 5), rand(5)
    tg.grad(lambda x: np.sum(np.linalg.cholesky(x) ** 3))(a)
    assert len(calls) == 2  # L^-T P L^-1: two solves, no inverse
    tg.grad(lambda x: np.sum(np.linalg.qr(x)[1] ** 2))(rand(6, 5))
    assert len(calls) == 3
    tg.grad(lambda x: np.sum(np.linalg.solve(x, b) ** 2))(low)
    assert len(calls) == 4
    tg.grad(lambda x: np.sum(np.linalg.solve(x, b) ** 2))(well(5, 5))
    assert len(calls) == 4  # a general matrix keeps the LU solve


@pytest.mark.parametrize("n", [65, 130, 203])
@pytest.mark.parametrize("k", [1, 7])
def test_blocked_tri_solve_large_orders(n, k):
    # Orders above _TRI_BLOCK split (odd halves included); the answer is the LU solve's.
    t = lower_tri(n, n)
    rhs = rand(n, k)
    for lower, tt in [(True, t), (False, np.ascontiguousarray(t.T)), (False, t.T)]:
        got = linalg_rules._blocked_tri_solve(tt, rhs, lower)
        np.testing.assert_allclose(got, np.linalg.solve(tt, rhs), rtol=1e-11, atol=1e-13)
    stacked = linalg_rules._blocked_tri_solve(np.stack([t, 2 * t]), rhs, True)
    np.testing.assert_allclose(stacked[1], np.linalg.solve(2 * t, rhs), rtol=1e-11, atol=1e-13)


def test_blocked_tri_solve_keeps_float32():
    t, rhs = lower_tri(90, 90).astype(np.float32), rand(90, 3).astype(np.float32)
    got = linalg_rules._blocked_tri_solve(t, rhs, True)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.linalg.solve(t, rhs), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_triangular_vjp_both_backends(tri_backend, upper):
    check(lambda a: np.linalg.cholesky(a, upper=upper), spd(4, 4))
    check(lambda a: np.linalg.cholesky(a, upper=upper), spd(2, 3, 3))


def test_cholesky_jacobian_batched_cotangents(tri_backend):
    a = spd(4, 4)
    jac = tg.jacobian(np.linalg.cholesky)(a)  # 16 cotangents in one sweep (folded into columns)
    eps, fd = 1e-6, np.zeros((4, 4, 4, 4))
    for i in range(4):
        for j in range(i + 1):  # NumPy reads the lower triangle
            d = np.zeros((4, 4))
            d[i, j] = eps
            fd[..., i, j] = (np.linalg.cholesky(a + d) - np.linalg.cholesky(a - d)) / (2 * eps)
    np.testing.assert_allclose(jac, fd, rtol=1e-6, atol=1e-8)
    stacked = spd(2, 3, 3)
    jac = tg.jacobian(np.linalg.cholesky)(stacked)
    for k in range(2):
        np.testing.assert_allclose(jac[k, :, :, k], tg.jacobian(np.linalg.cholesky)(stacked[k]), rtol=1e-12)


def test_qr_triangular_vjp_both_backends(tri_backend):
    for shape in [(5, 3), (3, 5), (2, 4, 3)]:
        check(np.linalg.qr, rand(*shape))
    a = rand(4, 3)
    jac = tg.jacobian(lambda x: np.linalg.qr(x)[1])(a)
    eps, fd = 1e-6, np.zeros((3, 3, 4, 3))
    for i in range(4):
        for j in range(3):
            d = np.zeros((4, 3))
            d[i, j] = eps
            fd[..., i, j] = (np.linalg.qr(a + d)[1] - np.linalg.qr(a - d)[1]) / (2 * eps)
    np.testing.assert_allclose(jac, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("sb", [(4,), (4, 2)])
def test_solve_with_triangular_matrix(tri_backend, sb):
    low, b = lower_tri(4, 4), rand(*sb)
    check(np.linalg.solve, low, b)  # FD perturbs the zero triangle too: the full cotangent is checked
    check(np.linalg.solve, low.T, b)
    check(np.linalg.solve, lower_tri(2, 4, 4), rand(2, 4, 2))  # NumPy 2: a stacked b is a matrix
    ja = tg.jacobian(lambda a: np.linalg.solve(a, b))(low)
    np.testing.assert_allclose(ja, tg.jacobian(lambda a: np.linalg.inv(a) @ b)(low), rtol=1e-10, atol=1e-12)
    jb = tg.jacobian(lambda y: np.linalg.solve(low.T, y))(b)
    np.testing.assert_allclose(jb, tg.jacobian(lambda y: np.linalg.inv(low.T) @ y)(b), rtol=1e-10, atol=1e-12)


def test_gp_marginal_likelihood_hessian(tri_backend):
    """cholesky, a triangular solve and slogdet together, to second order (the benchmark's GP)."""
    x = np.linspace(0.0, 1.0, 6)
    d2, y = (x[:, None] - x[None, :]) ** 2, np.sin(3 * x)

    def nlml(theta):
        k = np.exp(theta[0]) * np.exp(-0.5 * d2 / np.exp(2 * theta[1])) + np.exp(theta[2]) * np.eye(6)
        z = np.linalg.solve(np.linalg.cholesky(k), y)
        return 0.5 * z @ z + 0.5 * np.linalg.slogdet(k)[1]

    check_grads(nlml, [np.array([0.1, -1.0, -2.0])], order=2)


@pytest.mark.parametrize("fun", [lambda a: np.linalg.cholesky(a @ a.T), lambda a: np.linalg.qr(a)[1],
                                 lambda a: np.linalg.solve(np.tril(a), a[0])])
def test_triangular_paths_keep_float32(tri_backend, fun):
    a = well(3, 3).astype(np.float32)
    assert tg.grad(lambda x: np.sum(fun(x) ** 2))(a).dtype == np.float32
    assert tg.hessian(lambda x: np.sum(fun(x) ** 2))(a).dtype == np.float32


# ---------------------------------------------------------------- dtype
FLOAT32_FUNS = {
    "matmul": lambda a: a @ a,
    "inv": np.linalg.inv,
    "det": np.linalg.det,
    "slogdet": lambda a: np.linalg.slogdet(a)[1],
    "solve": lambda a: np.linalg.solve(a, a[0]),
    "pinv": np.linalg.pinv,
    "lstsq": lambda a: np.linalg.lstsq(a, a[:, 0] + 1)[0],
    "cholesky": lambda a: np.linalg.cholesky(a @ a.T),
    "qr": lambda a: np.linalg.qr(a)[0] ** 2,
    "eigh": lambda a: np.linalg.eigh(a @ a.T)[1] ** 2,
    "eigvalsh": lambda a: np.linalg.eigvalsh(a @ a.T),
    "svd": lambda a: np.linalg.svd(a)[0] ** 2,
    "norm": np.linalg.norm,
    "norm3": lambda a: np.linalg.norm(a, 3, axis=0),
    "nuc": lambda a: np.linalg.norm(a, "nuc"),
    "cond": np.linalg.cond,
    "matrix_power": lambda a: np.linalg.matrix_power(a, -2),
}


@pytest.mark.parametrize("name", list(FLOAT32_FUNS))
def test_float32_preserved(name):
    f = FLOAT32_FUNS[name]
    a = well(3, 3).astype(np.float32)

    def loss(x):
        return np.sum(f(x))

    assert tg.grad(loss)(a).dtype == np.float32
    assert tg.hessian(loss)(a).dtype == np.float32


# ---------------------------------------------------------------- one-hot cotangent fast path
@pytest.mark.parametrize("pattern", ["diagonal", "permutation", "some-empty-rows", "two-per-row"])
def test_one_hot_cotangent_product_matches_dense(pattern):
    from tapegrad.rules.linalg import _rows_times

    rng = np.random.default_rng(3)
    n, k = 80, 7
    m = rng.standard_normal((n, k))
    g = np.zeros((n, n))
    if pattern == "diagonal":
        g[np.arange(n), np.arange(n)] = rng.standard_normal(n)
    elif pattern == "permutation":
        g[np.arange(n), rng.permutation(n)] = rng.standard_normal(n)
    elif pattern == "some-empty-rows":
        rows = np.arange(0, n, 3)
        g[rows, rng.integers(0, n, rows.size)] = 2.0
    else:
        g[np.arange(n), np.arange(n)] = 1.0
        g[0, 1] = 3.0
    np.testing.assert_allclose(_rows_times(g, m), g @ m, rtol=1e-14, atol=1e-14)
    batched = np.stack([g, g[::-1]])
    np.testing.assert_allclose(_rows_times(batched, m), batched @ m, rtol=1e-14, atol=1e-14)


def test_jacobian_of_a_wide_layer_uses_the_identity_seed_and_is_exact():
    rng = np.random.default_rng(4)
    W1, W2 = rng.standard_normal((100, 100)) / 10, rng.standard_normal((100, 100)) / 10
    x = rng.standard_normal(100)
    J = tg.jacobian(lambda x: np.tanh(W2 @ np.tanh(W1 @ x)))(x)
    h = np.tanh(W1 @ x)
    expected = (1 - np.tanh(W2 @ h) ** 2)[:, None] * W2 @ ((1 - h**2)[:, None] * W1)
    np.testing.assert_allclose(J, expected, rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------- det at singular matrices
def _fd_columns(f, x, h=1e-6):
    return np.stack([(np.asarray(f(x + h * e)) - np.asarray(f(x - h * e))) / (2 * h) for e in np.eye(x.size)], -1)


@pytest.mark.parametrize(
    "a",
    [
        np.array([[1.0, 2.0], [2.0, 4.0]]),  # rank 1
        np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]]),  # rank 2
        np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [3.0, 6.0, 9.0]]),  # rank 1: every 2x2 minor singular too
        np.zeros((3, 3)),
        np.stack([np.eye(3), np.ones((3, 3))]),  # a batch: one invertible, one singular
    ],
    ids=["rank1_2x2", "rank2_3x3", "rank1_3x3", "zero_3x3", "batch"],
)
def test_det_gradient_and_hessian_at_singular_matrices(a):
    """d det / dA is the cofactor matrix everywhere: no LinAlgError where inv(A) does not exist."""
    shape = a.shape

    def f(flat):
        return np.sum(np.linalg.det(flat.reshape(shape)) * np.arange(1.0, 1.0 + np.prod(shape[:-2])))

    x = a.ravel()
    np.testing.assert_allclose(tg.grad(f)(x), _fd_columns(f, x), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(tg.hessian(f)(x), _fd_columns(tg.grad(f), x), rtol=1e-5, atol=1e-6)


def test_degenerate_triangle_area_has_its_gradient():
    def area(p):
        p = p.reshape(3, 2)
        return 0.5 * np.linalg.det(np.stack([p[1] - p[0], p[2] - p[0]]))

    collinear = np.array([0.0, 0.0, 1.0, 1.0, 2.0, 2.0])
    np.testing.assert_allclose(tg.grad(area)(collinear), [-0.5, 0.5, 1.0, -1.0, -0.5, 0.5], rtol=1e-14)
