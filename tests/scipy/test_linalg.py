"""Derivatives of scipy.linalg through SciPy's door (tapegrad.rules.scipy_linalg).

Every rule is checked against central finite differences at first and second
order, with a batch of cotangents against single VJPs (tapegrad.testing.check_grads),
called as users call it: module attributes, names bound at import, keywords.
"""

import inspect
import warnings

import numpy as np
import pytest
import scipy.linalg
import scipy.linalg as sl
from scipy.linalg import expm, solve, cholesky

import tapegrad as tg
from tapegrad.testing import check_grads

rng = np.random.default_rng(7)


def _u(*shape):
    return rng.uniform(-1.0, 1.0, shape)


def _spd(n):
    x = _u(n, n)
    return x @ x.T + n * np.eye(n)


A = _u(3, 3) + 3 * np.eye(3)
B = _u(3, 2)
b = _u(3)
S = _spd(3)
TALL = _u(5, 3)
WIDE = _u(3, 5)


def _sym(x):
    return x + x.T


# ------------------------------------------------------------------ inverse, determinant, solves
@pytest.mark.parametrize("assume_a", [None, "gen", "sym", "pos", "diagonal", "upper triangular", "lower triangular"])
@pytest.mark.parametrize("lower", [False, True])
def test_inv(assume_a, lower):
    check_grads(lambda a: sl.inv(a, assume_a=assume_a, lower=lower), (S + 0.3 * np.triu(_u(3, 3), 1),))


def test_det_closed_form_and_batches():
    g = tg.grad(scipy.linalg.det)(A)
    np.testing.assert_allclose(g, np.linalg.det(A) * np.linalg.inv(A).T, rtol=1e-12)
    check_grads(sl.det, (A,))
    stack = np.stack([A, S, A.T])
    check_grads(sl.det, (stack,))
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(sl.det(x)))(stack),
                               np.stack([np.linalg.det(m) * np.linalg.inv(m).T for m in stack]), rtol=1e-12)


@pytest.mark.parametrize("assume_a", [None, "gen", "sym", "pos", "diagonal", "tridiagonal", "upper triangular",
                                      "lower triangular", "banded"])
@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("transposed", [False, True])
def test_solve(assume_a, lower, transposed):
    a = S + 0.3 * np.triu(_u(3, 3), 1)
    check_grads(lambda a, b: solve(a, b, lower=lower, assume_a=assume_a, transposed=transposed), (a, b))
    check_grads(lambda a, b: sl.solve(a, b, lower=lower, assume_a=assume_a, transposed=transposed), (a, B), order=1)


def test_solve_reads_one_triangle():
    # assume_a='pos', lower=True reads the lower triangle only: the upper one gets no gradient.
    g = tg.grad(lambda a: np.sum(sl.solve(a, b, assume_a="pos", lower=True)))(S + np.triu(np.ones((3, 3)), 1))
    assert np.all(np.triu(g, 1) == 0) and np.any(np.tril(g, -1) != 0)


def test_complex_triangular_and_sylvester():
    tc = A + 0.5j * _u(3, 3)
    check_grads(lambda a, b: sl.solve_triangular(a, b, lower=True, trans="T"), (tc, b + 0.2j))
    check_grads(sl.solve_sylvester, (tc, S + 0j, _u(3, 3) + 0.1j))


def test_solve_batched_and_complex():
    stack = np.stack([A, S])
    check_grads(lambda a, b: sl.solve(a, b), (stack, _u(2, 3, 2)))
    ac = A + 0.5j * _u(3, 3)
    check_grads(lambda a, b: sl.solve(a, b), (ac, b + 0.1j))


@pytest.mark.parametrize("trans", [0, 1, "T"])
@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("unit_diagonal", [False, True])
def test_solve_triangular(trans, lower, unit_diagonal):
    f = lambda a, b: sl.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit_diagonal)  # noqa: E731
    check_grads(f, (A, b))
    check_grads(f, (A, B), order=1)
    g = tg.grad(lambda a: np.sum(f(a, b)))(A)
    other = np.triu(g, 1) if lower else np.tril(g, -1)
    assert not other.any()
    if unit_diagonal:
        assert not np.diagonal(g).any()


# ------------------------------------------------------------------ Cholesky and LU
@pytest.mark.parametrize("lower", [False, True])
def test_cholesky(lower):
    check_grads(lambda a: cholesky(a, lower=lower), (S,))
    check_grads(lambda x: sl.cholesky(x @ x.T + 3 * np.eye(3), lower=lower), (A,))
    check_grads(lambda a: sl.cholesky(a, lower=lower), (np.stack([S, _spd(3)]),), order=1)


@pytest.mark.parametrize("lower", [False, True])
def test_cho_factor_and_cho_solve(lower):
    check_grads(lambda a: sl.cho_factor(a, lower=lower)[0], (S + 0.2 * _u(3, 3),))

    def f(a, b):
        return sl.cho_solve(sl.cho_factor(a, lower=lower), b)

    check_grads(f, (S, b))
    check_grads(f, (S, B))
    # The whole chain equals solve with the triangle cho_factor read.
    g = tg.grad(lambda a: np.sum(f(a, b) ** 2))(S)
    g_ref = tg.grad(lambda a: np.sum(sl.solve(a, b, assume_a="pos", lower=lower) ** 2))(S)
    np.testing.assert_allclose(g, g_ref, rtol=1e-10, atol=1e-12)
    # A batch: cho_factor returns one `lower` flag per matrix.
    stack = np.stack([S, _spd(3)])
    check_grads(lambda a: sl.cho_factor(a, lower=lower)[0], (stack + 0.2 * _u(2, 3, 3),), order=1)
    check_grads(f, (stack, np.stack([B, B[::-1]])))
    mixed = np.array([lower, not lower])
    with pytest.raises(tg.NonDifferentiableArgumentError, match="lower"):
        tg.grad(lambda c: np.sum(sl.cho_solve((c, mixed), np.stack([B, B]))))(sl.cho_factor(stack, lower=lower)[0])


def test_lu_factor_and_lu_solve():
    check_grads(lambda a: sl.lu_factor(a)[0], (A,))

    def f(a, b, trans):
        return sl.lu_solve(sl.lu_factor(a), b, trans=trans)

    for trans in (0, 1):
        check_grads(lambda a, b: f(a, b, trans), (A, b))
        check_grads(lambda a, b: f(a, b, trans), (A, B), order=1)
    g = tg.grad(lambda a: np.sum(f(a, b, 0) ** 2))(A)
    np.testing.assert_allclose(g, tg.grad(lambda a: np.sum(sl.solve(a, b) ** 2))(A), rtol=1e-10)


def _well_pivoted(m, n):
    """P L U with |L| <= 1/2 off the diagonal: partial pivoting picks P with a margin, so the
    finite differences never cross a change of pivots."""
    k = min(m, n)
    low = np.tril(0.5 * _u(m, k), -1) + np.eye(m, k)
    up = np.triu(_u(k, n)) + 2 * np.eye(k, n)
    return low[rng.permutation(m)] @ up


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5)])
def test_lu(shape):
    a = _well_pivoted(*shape)
    check_grads(lambda a: sl.lu(a)[1:], (a,))
    check_grads(lambda a: sl.lu(a, p_indices=True)[1:], (a,))
    check_grads(lambda a: sl.lu(a, permute_l=True), (a,))
    check_grads(lambda a: sl.lu_factor(a)[0], (a,))


# ------------------------------------------------------------------ symmetric eigenproblems, SVD, QR
# SciPy's eigenvector signs can flip under a perturbation of 1e-12 (LAPACK picks them), so the
# finite differences see sign-invariant functions of the vectors: each column times its first entry.
def _signless(v):
    return v * v[..., :1, :]


@pytest.mark.parametrize("lower", [True, False])
def test_eigh(lower):
    a = S + 0.5 * _u(3, 3)
    check_grads(lambda a: sl.eigh(a, lower=lower)[0], (a,))
    check_grads(lambda a: _signless(sl.eigh(a, lower=lower)[1]), (a,))
    check_grads(lambda a: sl.eigh(a, lower=lower, eigvals_only=True), (a,))
    check_grads(lambda a: sl.eigvalsh(a, lower=lower), (a,))
    g = tg.grad(lambda a: np.sum(sl.eigvalsh(a, lower=lower)))(a)
    np.testing.assert_allclose(g, np.eye(3), atol=1e-12)  # d trace = I, on the diagonal


def test_eigh_subsets_and_generalized():
    a = _sym(_u(5, 5))
    check_grads(lambda a: _signless(sl.eigh(a, subset_by_index=[1, 3])[1]), (a,))
    w = np.linalg.eigvalsh(a)
    check_grads(lambda a: _signless(sl.eigh(a, subset_by_value=[w[0] + 1e-3, w[2] + 1e-3])[1]), (a,))
    check_grads(lambda a, b: sl.eigh(a, b)[0], (S + 0.5 * _u(3, 3), _spd(3)))
    check_grads(lambda a, b: _signless(sl.eigh(a, b)[1]), (S + 0.5 * _u(3, 3), _spd(3)))
    check_grads(lambda a, b: sl.eigvalsh(a, b), (_sym(_u(3, 3)), _spd(3)))
    with pytest.raises(tg.NonDifferentiableArgumentError, match="eigh"):
        tg.grad(lambda a: np.sum(sl.eigh(a, S, type=2)[0]))(S)


@pytest.mark.parametrize("a", [A, TALL, WIDE], ids=["square", "tall", "wide"])
def test_svd(a):
    def signless(u, s, vh):  # u_j and vh_j flip together: u_j vh_j^T and scaled columns do not
        return u * u[..., :1, :], s, (vh * vh[..., :, :1]), u @ vh

    check_grads(lambda a: signless(*sl.svd(a, full_matrices=False)), (a,))
    check_grads(lambda a: sl.svd(a, compute_uv=False), (a,))
    check_grads(sl.svdvals, (a,))
    k = min(a.shape)
    # full_matrices=True: the unique parts of the factors are differentiable.
    check_grads(lambda a: signless(sl.svd(a)[0][:, :k], sl.svd(a)[1], sl.svd(a)[2][:k]), (a,))


def test_svd_full_extra_vectors_refused():
    with pytest.raises(tg.NonDifferentiableArgumentError, match="full_matrices"):
        tg.grad(lambda a: np.sum(sl.svd(a)[0]))(TALL)


@pytest.mark.parametrize("a", [A, TALL, WIDE], ids=["square", "tall", "wide"])
def test_qr(a):
    check_grads(lambda a: sl.qr(a, mode="economic"), (a,))
    check_grads(lambda a: sl.qr(a, mode="r")[0], (a,))
    check_grads(lambda a: sl.qr(a, mode="economic", pivoting=True)[:2], (a,))
    if a.shape[0] <= a.shape[1]:
        check_grads(lambda a: sl.qr(a), (a,))


def test_qr_full_extra_columns_refused():
    with pytest.raises(tg.NonDifferentiableArgumentError, match="mode='economic'"):
        tg.grad(lambda a: np.sum(sl.qr(a)[0]))(TALL)


def test_pinv_pinvh_lstsq():
    check_grads(sl.pinv, (TALL,))
    check_grads(lambda a: sl.pinv(a, return_rank=True)[0], (WIDE,))
    check_grads(sl.pinvh, (S + 0.3 * _u(3, 3),))
    check_grads(lambda a, b: sl.lstsq(a, b)[0], (TALL, _u(5)))
    check_grads(lambda a, b: sl.lstsq(a, b)[1], (TALL, _u(5, 2)))
    check_grads(lambda a, b: sl.lstsq(a, b)[3], (TALL, _u(5)))


@pytest.mark.parametrize("kwargs", [{}, {"ord": 1}, {"ord": "fro"}, {"ord": 2}, {"axis": 0}, {"ord": np.inf}])
def test_norm(kwargs):
    check_grads(lambda a: sl.norm(a, **kwargs), (A,))


def test_norm_check_finite():
    with pytest.raises(ValueError, match="infs or NaNs"):
        tg.grad(lambda a: sl.norm(a))(np.array([1.0, np.nan]))
    assert np.isnan(tg.grad(lambda a: sl.norm(a, check_finite=False))(np.array([1.0, np.nan]))).any()


def test_schur_of_a_symmetric_matrix():
    a = _sym(_u(4, 4))
    check_grads(lambda a: (sl.schur(a)[0], _signless(sl.schur(a)[1])), (a,), order=2)
    pair = np.array([[1.0, -2.0, 0.5], [2.0, 1.0, 0.0], [0.0, 0.3, 3.0]])  # eigenvalues 1 +- 2i (about), 3
    # A non-normal T depends on the signs of Z's columns (T -> D T D): T_ij z_0i z_0j does not.
    check_grads(lambda a: (lambda t, z: (t * (z[:1, :].T * z[:1, :]), _signless(z)))(*sl.schur(a)), (pair,))
    rotation = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 2.0]])  # normal: the block may rotate
    with pytest.raises(tg.NonDifferentiableArgumentError, match="normal 2 x 2 block"):
        tg.grad(lambda a: np.sum(sl.schur(a)[0]))(rotation)


# ------------------------------------------------------------------ builders
def test_builders():
    c, r = _u(4), _u(3)
    check_grads(sl.toeplitz, (c, r))
    check_grads(sl.toeplitz, (c,))
    check_grads(sl.hankel, (c, r))
    check_grads(sl.circulant, (c,))
    check_grads(lambda x, y, z: sl.block_diag(x, y, z), (_u(2, 2), _u(3), _u(1, 2)))
    check_grads(sl.leslie, (_u(4), _u(3)))
    check_grads(lambda a: sl.convolution_matrix(a, 5, mode="same"), (_u(3),))
    check_grads(sl.companion, (np.array([2.0, -1.0, 0.5, 0.3]),))
    check_grads(sl.fiedler, (_u(4),))
    check_grads(sl.khatri_rao, (_u(2, 3), _u(4, 3)))
    assert tg.grad(lambda c: np.sum(sl.toeplitz(c)))(c).tolist() == [4.0, 6.0, 4.0, 2.0]


def test_builder_forward_is_scipys_and_complex_conjugates():
    c = np.array([1.0 + 2j, 3 - 1j, 0.5j])
    out = tg.vjp(sl.toeplitz, c)[0]
    assert np.array_equal(out, sl.toeplitz(c)) and out.dtype == np.complex128
    check_grads(sl.toeplitz, (c,))
    x32 = _u(3).astype(np.float32)
    assert tg.grad(lambda c: np.sum(sl.circulant(c)))(x32).dtype == np.float32


# ------------------------------------------------------------------ matrix functions
def test_expm_closed_forms():
    d = np.diag([0.1, -0.4, 0.7])
    g = tg.grad(lambda a: np.trace(expm(a)))(d)
    np.testing.assert_allclose(g, np.diag(np.exp(np.diag(d))), rtol=1e-12)  # d tr e^A = e^A^T
    # The Frechet derivative: <G, L(A, E)> = <vjp(G), E>.
    G, E = _u(3, 3), _u(3, 3)
    _, vjp = tg.vjp(expm, A * 0.3)
    np.testing.assert_allclose(np.sum(vjp(G)[0] * E), np.sum(G * sl.expm_frechet(A * 0.3, E)[1]), rtol=1e-10)
    # Strictly upper triangular N and E: expm(N + tE) = I + (N + tE) + (N + tE)^2 / 2 (cubes vanish).
    n = np.triu(_u(3, 3), 1)
    upper = np.triu(np.ones((3, 3), dtype=bool), 1)
    poly = tg.jacobian(lambda x: np.eye(3) + x + x @ x / 2)(n)
    np.testing.assert_allclose(tg.jacobian(expm)(n)[..., upper], poly[..., upper], atol=1e-12)


_SLOW = pytest.mark.slow  # the same block rule as expm, at several seconds each on a loaded machine


@pytest.mark.parametrize("f", [sl.expm, sl.logm, sl.sqrtm, sl.cosm, sl.sinm] + [
    pytest.param(f, marks=_SLOW) for f in (sl.tanm, sl.coshm, sl.sinhm, sl.tanhm)], ids=lambda f: f.__name__)
def test_matrix_functions(f):
    a = S / 3 if f in (sl.logm, sl.sqrtm) else 0.3 * A
    check_grads(f, (a,))


def test_matrix_functions_batched_and_power():
    check_grads(expm, (0.3 * np.stack([A, A.T]),))
    check_grads(lambda a: sl.fractional_matrix_power(a, 0.3), (S / 3,))


def test_expm_frechet():
    check_grads(sl.expm_frechet, (0.3 * A, _u(3, 3)))
    check_grads(lambda a, e: sl.expm_frechet(a, e, compute_expm=False), (0.3 * A, _u(3, 3)))


# ------------------------------------------------------------------ matrix equations
def test_sylvester_and_lyapunov():
    check_grads(sl.solve_sylvester, (A, S, _u(3, 3)))
    check_grads(sl.solve_continuous_lyapunov, (-S, _u(3, 3)))
    check_grads(sl.solve_discrete_lyapunov, (0.3 * A / 3, _u(3, 3)))
    check_grads(lambda a, q: sl.solve_discrete_lyapunov(a, q, method="bilinear"), (0.1 * A, _u(3, 3)))


def test_banded():
    n = 5
    ab = _u(4, n) + np.array([[0.0], [0.0], [4.0], [0.0]])  # (l, u) = (1, 2): the diagonal is row u = 2
    check_grads(lambda ab, b: sl.solve_banded((1, 2), ab, b), (ab, _u(n)))
    check_grads(lambda ab, b: sl.solve_banded((1, 2), ab, b), (ab, _u(n, 2)))
    dense = sum(np.diag(ab[2 - k, max(k, 0):n + min(k, 0)] if k >= 0 else ab[2 - k, :n + k], k) for k in range(-1, 3))
    g = tg.grad(lambda ab: np.sum(sl.solve_banded((1, 2), ab, b5) ** 2))(ab) if (b5 := _u(n)) is not None else None
    gd = tg.grad(lambda m: np.sum(np.linalg.solve(m, b5) ** 2))(dense)
    for k in range(-1, 3):  # the banded gradient is the dense one, read along the diagonals
        diag = np.diagonal(gd, k)
        np.testing.assert_allclose(g[2 - k, max(k, 0):max(k, 0) + len(diag)], diag, rtol=1e-10, atol=1e-12)
    hb = np.vstack([_u(n) * 0.3, 3 + _u(n)])  # upper storage, one superdiagonal
    hb[0, 0] = 0.0
    check_grads(lambda ab, b: sl.solveh_banded(ab, b), (hb, _u(n)))
    check_grads(lambda ab, b: sl.solveh_banded(ab[::-1], b, lower=True), (hb, _u(n, 2)))


def test_polar_and_procrustes():
    check_grads(sl.polar, (A,))
    check_grads(sl.polar, (TALL,))
    check_grads(lambda a: sl.polar(a, side="left"), (WIDE,))
    check_grads(sl.polar, (np.stack([A, TALL[:3]]),))
    with pytest.raises(tg.NonDifferentiableArgumentError, match="side='left'"):
        tg.grad(lambda a: np.sum(sl.polar(a)[0]))(WIDE)
    check_grads(lambda a, b: sl.orthogonal_procrustes(a, b), (_u(4, 3), _u(4, 3)))


# ------------------------------------------------------------------ the door itself
def test_batched_cotangent_jacobian_equals_stacked_vjps():
    f = lambda a: sl.solve(a, b) + sl.expm(0.2 * a) @ b  # noqa: E731
    jac = tg.jacobian(f)(A)
    _, vjp = tg.vjp(f, A)
    np.testing.assert_allclose(jac, np.stack([vjp(e)[0] for e in np.eye(3)]), rtol=1e-12, atol=1e-14)


def test_hessian_matches_finite_differences_of_the_gradient():
    f = lambda x: sl.det(sl.expm(0.3 * x)) + np.sum(sl.inv(x + 3 * np.eye(3)))  # noqa: E731
    x = 0.5 * _u(3, 3)
    h = tg.hessian(f)(x)
    grad = tg.grad(f)
    eps = 1e-6
    fd = np.stack([(grad(x + eps * e.reshape(3, 3)) - grad(x - eps * e.reshape(3, 3))) / (2 * eps)
                   for e in np.eye(9)]).reshape(3, 3, 3, 3)
    np.testing.assert_allclose(h, np.moveaxis(fd, (0, 1), (2, 3)), rtol=1e-6, atol=1e-7)


def test_no_tracer_gives_scipys_exact_results_and_nothing_stays_changed():
    code = sl.expm.__code__, sl.solve.__code__, sl.eigh.__code__
    seen = {}

    def f(x):
        seen["expm"] = sl.expm(A)  # plain arguments inside a recording: SciPy's own code
        seen["eigh"] = sl.eigh(S)
        seen["solve"] = sl.solve(A, b, assume_a="pos")
        return np.sum(sl.expm(x))

    tg.grad(f)(0.1 * A)
    assert np.array_equal(seen["expm"], sl.expm(A))
    assert all(np.array_equal(p, q) for p, q in zip(seen["eigh"], sl.eigh(S)))
    assert np.array_equal(seen["solve"], sl.solve(A, b, assume_a="pos"))
    assert (sl.expm.__code__, sl.solve.__code__, sl.eigh.__code__) == code


def test_traced_forward_is_scipys_own():
    for f, args in [(sl.expm, (0.3 * A,)), (sl.eigh, (S,)), (sl.svd, (TALL,)), (sl.qr, (A,)), (sl.lu, (A,)),
                    (sl.solve, (A, b)), (sl.det, (A,))]:
        out = tg.vjp(f, *args)[0]
        ref = f(*args)
        for o, r in zip(out if isinstance(out, tuple) else (out,), ref if isinstance(ref, tuple) else (ref,)):
            assert np.array_equal(o, r)


@pytest.mark.parametrize("call", [
    lambda a: sl.cholesky(a, overwrite_a=True),
    lambda a: sl.inv(a, True),  # overwrite_a passed positionally
    lambda a: sl.solve(a, a[0], overwrite_a=True, overwrite_b=True),
    lambda a: sl.eigh(a, overwrite_a=True)[0],
    lambda a: sl.lu_factor(a, overwrite_a=True)[0],
    lambda a: sl.svd(a, overwrite_a=True)[1],
    lambda a: sl.qr(a, overwrite_a=True)[1],
    lambda a: sl.solve_triangular(a, a[0], overwrite_b=True),
])
def test_overwrite_flags_never_touch_traced_arrays(call):
    # LAPACK writes over a Fortran-ordered array when allowed: a traced one must stay intact.
    a = np.asfortranarray(S.copy())
    g = tg.grad(lambda a: np.sum(call(a) ** 2))(a)
    assert np.array_equal(a, S)
    np.testing.assert_allclose(g, tg.grad(lambda a: np.sum(call(a) ** 2))(S.copy()), rtol=1e-12, atol=1e-14)


def test_inputs_not_mutated_and_float32_kept():
    a = S.copy()
    tg.grad(lambda a: np.sum(sl.cholesky(a, overwrite_a=True)))(a)
    tg.grad(lambda a: np.sum(sl.solve(a, b, overwrite_a=True, overwrite_b=True)))(a)
    assert np.array_equal(a, S)
    a32 = S.astype(np.float32)
    for f in (sl.inv, lambda x: sl.cholesky(x), lambda x: sl.eigh(x)[0], sl.expm):
        g = tg.grad(lambda x: np.sum(f(x)))(a32)
        assert g.dtype == np.float32


def test_check_finite_is_scipys():
    bad = A.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="infs or NaNs"):
        tg.grad(lambda a: np.sum(sl.inv(a)))(bad)
    with pytest.raises(ValueError, match="infs or NaNs"):
        tg.grad(lambda a: np.sum(sl.eigh(a)[0]))(bad)


def test_undifferentiable_arguments_raise_clearly():
    with pytest.raises(tg.NonDifferentiableArgumentError, match="fractional_matrix_power"):
        tg.grad(lambda t: np.sum(sl.fractional_matrix_power(S, t)))(0.5)
    with pytest.raises(tg.NonDifferentiableArgumentError, match="complex"):
        tg.grad(lambda a: np.real(np.sum(sl.lu_factor(a)[0])))(S + 0j)
    if "disp" in inspect.signature(sl.logm).parameters:  # SciPy 1.18 removed disp (and the error estimate)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(tg.NonDifferentiableArgumentError, match="error estimate"):
                tg.grad(lambda a: sl.logm(a, disp=False)[1])(S)


# ------------------------------------------------------------------ more call forms
def test_general_eigenvalues_first_order():
    r = _u(3, 3)  # complex eigenvalues in general
    check_grads(lambda a: np.real(sl.eigvals(a)), (A,), order=1)
    check_grads(lambda a: np.abs(sl.eigvals(a)), (r,), order=1)
    check_grads(lambda a: np.abs(sl.eig(a)[0]), (r,), order=1)
    check_grads(sl.eigvals, (r + 1j * r.T,), order=1)
    # d tr = sum of eigenvalues: the identity.
    np.testing.assert_allclose(tg.grad(lambda a: np.real(np.sum(sl.eigvals(a))))(r), np.eye(3), atol=1e-12)
    with pytest.raises(tg.NonDifferentiableArgumentError, match="eigenvectors"):
        tg.grad(lambda a: np.abs(np.sum(sl.eig(a)[1])))(A)
    check_grads(lambda a: np.abs(sl.eigvals(a)), (r,), order=2)  # second order needs the eigenvectors


def test_keywords_and_more_builders():
    check_grads(lambda a, b: sl.solve(a=a, b=b, assume_a="sym"), (S, b))  # traced keywords
    check_grads(lambda a: expm(A=0.3 * a), (A,))
    check_grads(lambda a, q: sl.solve_sylvester(a=a, b=S, q=q), (A, _u(3, 3)))
    check_grads(lambda c, r: sl.toeplitz(c, r=r), (_u(3), _u(4)))
    check_grads(lambda c, b: sl.solve_toeplitz(c + [3, 0, 0], b), (_u(3), _u(3)))
    check_grads(lambda c, r, b: sl.solve_toeplitz((c + [3, 0, 0], r), b), (_u(3), _u(3), _u(3)))
    check_grads(lambda a, b: sl.solve(a, b), (np.array([[2.0]]), _u(4)))  # SciPy divides by a 1 x 1 a
    assert tg.grad(lambda a: np.sum(a) * sl.bandwidth(a)[1])(np.triu(A)).tolist() == (2 * np.ones((3, 3))).tolist()


def test_batched_decompositions():
    stack = np.stack([_well_pivoted(3, 3), _well_pivoted(3, 3)])
    check_grads(lambda a: sl.lu(a)[1:], (stack,))
    check_grads(lambda a: sl.lu_factor(a)[0], (stack,))
    sym = np.stack([_sym(_u(4, 4)), _sym(_u(4, 4))])
    check_grads(lambda a: _signless(sl.eigh(a, subset_by_index=[0, 1])[1]), (sym,))
    check_grads(lambda a: sl.qr(a, mode="r")[0], (np.stack([TALL, TALL[::-1]]),))
    check_grads(lambda a, q: sl.solve_sylvester(a, a, q), (np.stack([S, 2 * S]), _u(2, 3, 3)))


def test_complex_matrix_functions():
    ac = 0.3 * (A + 1j * _u(3, 3))
    check_grads(expm, (ac,))
    check_grads(sl.sqrtm, (S / 3 + 0.2j * _u(3, 3),), order=1)
    # A real matrix with a negative eigenvalue has a complex logarithm: the gradient is real.
    neg = np.diag([-1.0, 2.0, 3.0]) + 0.1 * np.triu(_u(3, 3), 1)
    g = tg.grad(lambda a: np.real(np.sum(sl.logm(a))))(neg)
    assert g.dtype == np.float64
    check_grads(lambda a: np.imag(sl.logm(a)), (neg,), order=1)


# ------------------------------------------------------------------ adjoints of the linear maps
_HB = np.vstack([0.3 * _u(5), 3 + _u(5)])
_HB[0, 0] = 0.0
_AB = _u(4, 5) + np.array([[0.0], [0.0], [4.0], [0.0]])
LINEAR = {
    "toeplitz": (lambda c: sl.toeplitz(c[:3], c[3:]), 7),
    "hankel": (lambda c: sl.hankel(c[:3], c[3:]), 7),
    "circulant": (sl.circulant, 4),
    "block_diag": (lambda x: sl.block_diag(x[:4].reshape(2, 2), x[4:]), 7),
    "leslie": (lambda x: sl.leslie(x[:4], x[4:]), 7),
    "convolution_matrix": (lambda x: sl.convolution_matrix(x, 5, mode="valid"), 3),
    "solve in b": (lambda x: sl.solve(A, x, assume_a="sym"), 3),
    "solve_triangular in b": (lambda x: sl.solve_triangular(A, x.reshape(3, 2), trans="T", lower=True), 6),
    "solve_banded in b": (lambda x: sl.solve_banded((1, 2), _AB, x), 5),
    "solveh_banded in b": (lambda x: sl.solveh_banded(_HB, x), 5),
    "cho_solve_banded in b": (lambda x: sl.cho_solve_banded((sl.cholesky_banded(_HB), False), x), 5),
    "cho_solve in b": (lambda x: sl.cho_solve(sl.cho_factor(S), x), 3),
    "lu_solve in b": (lambda x: sl.lu_solve(sl.lu_factor(A), x, trans=1), 3),
    "solve_sylvester in q": (lambda x: sl.solve_sylvester(A, S, x.reshape(3, 3)), 9),
    "solve_continuous_lyapunov in q": (lambda x: sl.solve_continuous_lyapunov(-S, x.reshape(3, 3)), 9),
    "solve_discrete_lyapunov in q": (lambda x: sl.solve_discrete_lyapunov(0.1 * A, x.reshape(3, 3)), 9),
    "expm_frechet in E": (lambda x: sl.expm_frechet(0.3 * A, x.reshape(3, 3), compute_expm=False), 9),
}


@pytest.mark.parametrize("name", list(LINEAR), ids=str)
def test_adjoint_is_the_transpose_of_the_dense_operator(name):
    f, n = LINEAR[name]
    dense = np.stack([np.ravel(f(e)) for e in np.eye(n)], axis=-1)  # the forward map on identity columns
    x = _u(n)
    out, vjp = tg.vjp(f, x)
    cotangents = _u(4, dense.shape[0])
    got = vjp(cotangents.reshape((4,) + np.shape(out)))[0]
    np.testing.assert_allclose(got, cotangents @ dense, rtol=1e-10, atol=1e-12)


def test_log_determinant_through_cholesky():
    # log det S = 2 sum log diag(L): the gradient is inv(S) on the triangle cholesky read (lower=True).
    g = tg.grad(lambda a: 2 * np.sum(np.log(np.diagonal(sl.cholesky(a, lower=True)))))(S)
    inv = np.linalg.inv(S)
    np.testing.assert_allclose(g, np.tril(2 * inv) - np.diag(np.diag(inv)), rtol=1e-10, atol=1e-12)
    check_grads(lambda a: np.sum(np.log(np.diagonal(sl.cho_factor(a)[0]))), (S,))


def test_tridiagonal_eigenproblems():
    d, e = np.array([1.0, 2.0, 3.0, 4.0]) + 0.1 * _u(4), 0.5 * _u(3)
    check_grads(lambda d, e: sl.eigh_tridiagonal(d, e)[0], (d, e))
    check_grads(lambda d, e: _signless(sl.eigh_tridiagonal(d, e)[1]), (d, e))
    check_grads(lambda d, e: sl.eigh_tridiagonal(d, e, eigvals_only=True, select="v", select_range=(1.5, 3.5)), (d, e))
    check_grads(lambda d, e: _signless(sl.eigh_tridiagonal(d, e, select="i", select_range=(1, 2))[1]), (d, e))
    check_grads(lambda d, e: sl.eigvalsh_tridiagonal(d, e, select="i", select_range=(0, 1)), (d, e))
    # The same numbers as eigvalsh of the dense matrix.
    dense = lambda d, e: np.diag(d) + np.diag(e, 1) + np.diag(e, -1)  # noqa: E731
    for k in (0, 1):
        np.testing.assert_allclose(tg.grad(lambda d, e: np.sum(sl.eigvalsh_tridiagonal(d, e) ** 2), argnums=(0, 1))(d, e)[k],
                                   tg.grad(lambda d, e: np.sum(np.linalg.eigvalsh(dense(d, e)) ** 2), argnums=(0, 1))(d, e)[k],
                                   rtol=1e-10, atol=1e-12)


def test_banded_cholesky():
    n = 5
    up = np.vstack([0.3 * _u(n), 0.2 * _u(n), 3 + _u(n)])  # upper form, two superdiagonals
    lo = np.vstack([3 + _u(n), 0.3 * _u(n)])  # lower form, one subdiagonal
    check_grads(sl.cholesky_banded, (up,))  # the unused corner of the storage is copied through
    check_grads(lambda ab: sl.cholesky_banded(ab, lower=True), (lo,))
    check_grads(lambda ab, b: sl.cho_solve_banded((sl.cholesky_banded(ab), False), b), (up, _u(n)))
    check_grads(lambda ab, b: sl.cho_solve_banded((sl.cholesky_banded(ab, lower=True), True), b), (lo, _u(n, 2)))
    b5 = _u(n)
    g = tg.grad(lambda ab: np.sum(sl.cho_solve_banded((sl.cholesky_banded(ab), False), b5) ** 2))(up)
    np.testing.assert_allclose(g, tg.grad(lambda ab: np.sum(sl.solveh_banded(ab, b5) ** 2))(up), atol=1e-12)


@pytest.mark.parametrize("a", [A, TALL, WIDE], ids=["square", "tall", "wide"])
def test_rq(a):
    check_grads(lambda a: sl.rq(a, mode="economic"), (a,))
    check_grads(lambda a: sl.rq(a, mode="r"), (a,))
    m, n = a.shape
    check_grads(lambda a: (sl.rq(a)[0], sl.rq(a)[1][max(n - m, 0):]), (a,))  # full: the unique rows of Q
    if m < n:
        with pytest.raises(tg.NonDifferentiableArgumentError, match="mode='economic'"):
            tg.grad(lambda a: np.sum(sl.rq(a)[1]))(a)


@pytest.mark.parametrize("f", [sl.solve_continuous_are, pytest.param(sl.solve_discrete_are, marks=pytest.mark.slow)],
                         ids=lambda f: f.__name__)
def test_riccati_equations(f):
    n, m = 3, 2
    # SciPy accepts symmetric q and r only: they are built symmetric from free matrices.
    a, b2, y, w = 0.5 * _u(n, n), _u(n, m), _u(n, n), _u(m, m)
    check_grads(lambda a, b, y, w: f(a, b, y @ y.T + np.eye(n), w @ w.T + 2 * np.eye(m)), (a, b2, y, w), order=1)
    # Second order in two of them (SciPy's own solver takes ~50 ms a call here).
    check_grads(lambda b, y: f(a, b, y @ y.T + np.eye(n), w @ w.T + 2 * np.eye(m)), (b2, y), batch=0)
    g = tg.grad(lambda q: np.sum(f(0.5 * A, B, q, np.eye(2))))(S)
    np.testing.assert_allclose(g, g.T, atol=1e-14)  # the gradient in q is symmetric
    with pytest.raises(tg.NonDifferentiableArgumentError, match="generalized"):
        tg.grad(lambda a: np.sum(f(a, B, S, np.eye(2), e=np.eye(3))))(0.5 * A)


def test_null_space():
    def signless(q):
        return q * q[:1]

    check_grads(lambda a: signless(sl.null_space(a)), (WIDE[:, :4],))  # 3 x 4: one null vector
    rows = _u(2, 3)  # a rank-deficient square matrix, built from free rows
    check_grads(lambda y: signless(sl.null_space(np.concatenate([y, (y[0] + y[1])[None]], 0))), (rows,))
    # A v = 0 stays true along the derivative: d(A v) = dA v + A dv = 0.
    a = WIDE[:, :4]
    v = sl.null_space(a)[:, 0]
    e = _u(3, 4)
    jac = tg.jacobian(lambda a: sl.null_space(a)[:, 0])(a)
    np.testing.assert_allclose(e @ v + a @ np.tensordot(jac, e, axes=2), 0, atol=1e-12)
    with pytest.raises(tg.NonDifferentiableArgumentError, match="dimension 2"):
        tg.grad(lambda a: np.sum(sl.null_space(a)))(_u(1, 3))


def test_subspace_angles():
    a, b = _u(5, 2), _u(5, 3)
    near = a @ _u(2, 2) + 0.1 * _u(5, 2)  # small angles: SciPy takes them from the sines
    for x, y in ((a, b), (b, a), (a, near)):
        check_grads(sl.subspace_angles, (x, y))
        assert np.array_equal(tg.vjp(sl.subspace_angles, x, y)[0], sl.subspace_angles(x, y))
    # One vector against a fixed line: the angle is arccos(|x . e| / |x|).
    e = np.array([[1.0], [0.0], [0.0]])
    x = np.array([[0.3], [0.4], [-0.2]])
    closed = tg.grad(lambda x: np.arccos(np.abs(x[0, 0]) / np.linalg.norm(x)))(x)
    np.testing.assert_allclose(tg.grad(lambda x: sl.subspace_angles(x, e)[0])(x), closed, rtol=1e-10)


@pytest.mark.parametrize("fun", [
    lambda a: sl.qr(a)[0] ** 3,
    lambda a: sl.svd(a)[0] ** 3,
    lambda a: sl.rq(a.T)[1] ** 3,
], ids=["qr-full", "svd-full", "rq-full"])
def test_forward_mode_never_drops_the_extra_columns_of_a_full_factor(fun):
    # The extra columns are not unique, so their derivative is refused.  Forward mode
    # sweeps placeholder cotangents whose zeros say nothing: it must refuse too, never
    # give them a zero tangent (as it did before PLACEHOLDER_COTANGENTS).
    a = np.random.default_rng(3).standard_normal((4, 2))
    for ask in (tg.jacfwd, tg.jacobian, lambda f: lambda a: tg.jvp(f, (a,), (np.ones_like(a),))[1]):
        with pytest.raises(tg.NonDifferentiableArgumentError, match="extra"):
            ask(fun)(a)
