"""Derivatives of scipy.sparse.linalg through SciPy's door (tapegrad.rules.scipy_sparse_linalg).

Every solver is checked against central finite differences at first and second order
(tapegrad.testing.check_grads; iterative solvers at tight tolerances), and against the
same computation on the dense matrix through numpy.linalg / scipy.linalg.  Traced
sparse matrices are built by hand inside the differentiated function
(``with_data(A, data)``, the contract of tapegrad.rules._sparse), and through
scipy.sparse's own constructors where those rules exist.
"""

import warnings

import numpy as np
import pytest
import scipy.linalg as sl
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.sparse.linalg import spsolve

import tapegrad as tg
from tapegrad.errors import NonDifferentiableArgumentError
from tapegrad.rules._sparse import with_data
from tapegrad.testing import check_grads

rng = np.random.default_rng(3)
N = 6
A0 = (sp.random_array((N, N), density=0.4, rng=rng) + 4 * sp.eye_array(N)).tocsr()
B0 = rng.normal(size=N)
BB = rng.normal(size=(N, 2))
SPD = (A0 @ A0.T + sp.eye_array(N)).tocsr()
SPD.sort_indices()  # SciPy's own solvers sort a matrix in place: the plain calls must not permute the values


def test_non_canonical_structure_keeps_the_traced_values():
    product = (A0 @ A0.T).tocsr()  # a product's indices come unsorted
    assert not product.has_canonical_format
    data = product.data.copy()
    before = data.copy()
    g = tg.grad(lambda d: np.sum(spsolve(with_data(product, d), B0) ** 2))(data)
    np.testing.assert_array_equal(data, before)
    np.testing.assert_allclose(g, tg.grad(lambda d: np.sum(np.linalg.solve(_dense(product, d), B0) ** 2))(data),
                               rtol=1e-10)


def _dense(matrix, data):
    """The dense matrix of ``matrix``'s structure with values ``data`` (traced-capable, duplicates summed)."""
    rows, cols = matrix.tocoo().coords if matrix.format == "coo" else matrix.nonzero()
    if matrix.format != "coo":
        coo = matrix.tocoo()
        rows, cols = coo.coords
        assert np.array_equal(coo.data, matrix.data)  # canonical CSR/CSC: the same order
    n, m = matrix.shape
    scatter = np.zeros((n * m, len(rows)))
    scatter[rows * m + cols, np.arange(len(rows))] = 1
    return np.reshape(scatter @ data, (n, m))


def _symmetric(matrix):
    """``(theta0, build)``: ``build(theta)`` is ``matrix`` with one parameter per symmetric pair of entries."""
    rows, cols = matrix.nonzero()
    n = matrix.shape[0]
    _, inverse = np.unique(np.minimum(rows, cols) * n + np.maximum(rows, cols), return_inverse=True)
    spread = np.zeros((len(rows), inverse.max() + 1))
    spread[np.arange(len(rows)), inverse] = 1
    theta0 = np.linalg.lstsq(spread, matrix.data, rcond=None)[0]
    return theta0, lambda theta: with_data(matrix, spread @ theta)


# ------------------------------------------------------------------ spsolve
@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_spsolve_against_dense_and_finite_differences(fmt):
    A = A0.asformat(fmt)

    def f(data, b):
        return spsolve(with_data(A, data), b)

    def dense(data, b):
        return np.linalg.solve(_dense(A, data), b)

    np.testing.assert_allclose(f(A.data, B0), dense(A.data, B0), rtol=1e-12)
    for argnum in (0, 1):
        np.testing.assert_allclose(tg.jacobian(f, argnum)(A.data, B0), tg.jacobian(dense, argnum)(A.data, B0),
                                   rtol=1e-10, atol=1e-13)
    loss = lambda d, b: np.sum(f(d, b) ** 3)  # noqa: E731
    dense_loss = lambda d, b: np.sum(dense(d, b) ** 3)  # noqa: E731
    np.testing.assert_allclose(tg.hessian(loss)(A.data, B0), tg.hessian(dense_loss)(A.data, B0), rtol=1e-9,
                               atol=1e-12)
    check_grads(f, (A.data, B0))


def test_hvp_and_hessian_of_a_solve_objective():
    loss = lambda d: np.sum(np.sin(spsolve(with_data(A0, d), B0)))  # noqa: E731
    dense = lambda d: np.sum(np.sin(np.linalg.solve(_dense(A0, d), B0)))  # noqa: E731
    v = np.random.default_rng(9).normal(size=A0.nnz)
    np.testing.assert_allclose(tg.hvp(loss)(A0.data, v), tg.hvp(dense)(A0.data, v), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(tg.jacobian(tg.grad(loss))(A0.data), tg.hessian(dense)(A0.data), rtol=1e-9,
                               atol=1e-12)


def test_forward_mode():
    cases = [(lambda d: spsolve(with_data(A0, d), B0), A0.data),
             (lambda d: spla.cg(with_data(SPD, d), B0, rtol=1e-13, atol=0.0)[0], SPD.data),
             (lambda d: spla.expm_multiply(with_data(EXP, d), B0), EXP.data)]
    for f, data in cases:
        tangent = np.random.default_rng(11).normal(size=data.shape)
        np.testing.assert_allclose(tg.jvp(f, (data,), (tangent,))[1], tg.jacobian(f)(data) @ tangent,
                                   rtol=1e-9, atol=1e-12)


def test_spsolve_right_hand_side_shapes():
    check_grads(lambda d, b: spsolve(with_data(A0, d), b), (A0.data, BB))
    out = spsolve(A0, B0[:, None])
    assert out.shape == (N,)
    column = lambda d, b: spsolve(with_data(A0, d), b)  # noqa: E731
    assert tg.jacobian(column, 1)(A0.data, B0[:, None]).shape == (N, N, 1)
    check_grads(column, (A0.data, B0[:, None]))


def test_spsolve_coo_with_duplicates_and_constant_matrix():
    coo = sp.coo_array((np.array([4.0, 1.0, 5.0, 2.0, 6.0, 0.5]),
                        (np.array([0, 0, 1, 2, 0, 2]), np.array([0, 0, 1, 2, 1, 0]))), shape=(3, 3))
    b = np.array([1.0, -2.0, 0.5])
    f = lambda d, b: spsolve(with_data(coo, d), b)  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sp.SparseEfficiencyWarning)
        np.testing.assert_allclose(f(coo.data, b), np.linalg.solve(coo.toarray(), b), rtol=1e-13)
        g = tg.grad(lambda d: np.sum(f(d, b)))(coo.data)
        x = np.linalg.solve(coo.toarray(), b)
        gb = np.linalg.solve(coo.toarray().T, np.ones(3))
        rows, cols = coo.coords
        np.testing.assert_allclose(g, -gb[rows] * x[cols], rtol=1e-12)  # each duplicate gets the full derivative
        check_grads(f, (coo.data, b))
    # a constant matrix: derivatives of b only, by the transposed solve
    check_grads(lambda b: spsolve(A0, b) ** 2, (B0,))


def test_sparse_right_hand_side_and_inverse():
    pytest.importorskip("tapegrad.rules.scipy_sparse")  # a sparse result with traced values is read through it
    A = A0.tocsc()
    inverse = lambda d: spla.inv(with_data(A, d)).toarray()  # noqa: E731
    np.testing.assert_allclose(inverse(A.data), np.linalg.inv(A.toarray()), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(tg.jacobian(inverse)(A.data), tg.jacobian(lambda d: np.linalg.inv(_dense(A, d)))(A.data),
                               rtol=1e-10, atol=1e-13)
    column = sp.csc_array(B0[:, None])
    check_grads(lambda d: spsolve(with_data(A, d), column), (A.data,))


def test_precision_follows_spsolve():
    single = A0.astype(np.float32)
    f = lambda d: spsolve(with_data(single, d), B0)  # noqa: E731  float64 b: SciPy solves in float64
    np.testing.assert_array_equal(f(single.data), spsolve(single, B0))
    g = tg.grad(lambda d: np.sum(f(d)))(single.data)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, tg.grad(lambda d: np.sum(spsolve(with_data(single.astype(float), d), B0)))(
        single.data.astype(float)), rtol=1e-6)


def test_complex_values_and_right_hand_sides():
    complex_a = A0.astype(complex)
    complex_a.data += 0.3j * np.random.default_rng(12).normal(size=A0.nnz)
    b = B0 + 0.5j * BB[:, 0]
    check_grads(lambda d, b: spsolve(with_data(complex_a, d), b), (complex_a.data, b))
    check_grads(lambda d, b: spsolve(with_data(A0, d), b), (A0.data, b))  # real matrix, complex b
    check_grads(lambda d, b: spla.gmres(with_data(complex_a, d), b, rtol=1e-13, atol=0.0)[0],
                (complex_a.data, b), rtol=1e-4)


def test_spsolve_of_dense_traced_matrix_and_singular():
    dense = A0.toarray()
    with pytest.warns(sp.SparseEfficiencyWarning):
        check_grads(lambda a, b: spsolve(a, b), (dense, B0), order=1)
    singular = sp.csr_array(np.array([[1.0, 2.0], [2.0, 4.0]]))
    with pytest.warns(spla.MatrixRankWarning):
        out = tg.grad(lambda d: np.sum(spsolve(with_data(singular, d), np.ones(2))))(singular.data)
    assert np.all(np.isnan(out))


def test_constant_operator_is_never_densified(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a constant sparse operator was densified")

    for cls in (sp.csr_array, sp.csc_array, sp.coo_array):
        monkeypatch.setattr(cls, "toarray", refuse)
        monkeypatch.setattr(cls, "todense", refuse)
    g = tg.grad(lambda b: np.sum(spsolve(A0, b) ** 2))(B0)
    assert g.shape == (N,)
    tg.grad(lambda b: np.sum(spla.cg(SPD, b, rtol=1e-12)[0]))(B0)
    tg.grad(lambda b: np.sum(spla.splu(A0.tocsc()).solve(b)))(B0)


def test_factorisation_is_reused_by_the_adjoint(monkeypatch):
    import tapegrad.rules.scipy_sparse_linalg as rules

    calls = []
    splu = spla.splu

    real = rules._original

    def counting(fun):
        found = real(fun)
        if fun is splu:
            def counted(*args, **kwargs):
                calls.append(1)
                return found(*args, **kwargs)
            return counted
        return found

    monkeypatch.setattr(rules, "_original", counting)
    tg.grad(lambda d, b: np.sum(spsolve(with_data(A0, d), b) ** 2), argnums=(0, 1))(A0.data, B0)
    assert len(calls) == 1
    calls.clear()
    tg.hessian(lambda d: np.sum(spsolve(with_data(A0, d), B0) ** 2))(A0.data)
    assert len(calls) == 1  # the nodes of every level share it


# ------------------------------------------------------------------ splu, spilu, factorized
@pytest.mark.parametrize("trans", ["N", "T"])
def test_splu_solve(trans):
    A = A0.tocsc()

    def f(d, b):
        return spla.splu(with_data(A, d)).solve(b, trans=trans)

    def dense(d, b):
        m = _dense(A, d)
        return np.linalg.solve(m if trans == "N" else m.T, b)

    np.testing.assert_allclose(tg.jacobian(f)(A.data, B0), tg.jacobian(dense)(A.data, B0), rtol=1e-10, atol=1e-13)
    check_grads(f, (A.data, B0))
    check_grads(f, (A.data, BB))
    check_grads(lambda b: spla.splu(A).solve(b, trans=trans) ** 2, (B0,))


def test_superlu_made_before_recording_refuses_tracers():
    lu = spla.splu(A0.tocsc())  # SciPy's own object: its compiled solve cannot see a tracer
    with pytest.raises(tg.errors.GradientDroppedError):
        tg.grad(lambda b: np.sum(lu.solve(b)))(B0)

    def inside(b):
        lu = spla.splu(A0.tocsc())
        assert lu.shape == A0.shape and lu.nnz > 0 and len(lu.perm_r) == N  # SciPy's attributes
        return np.sum(lu.solve(b))

    np.testing.assert_allclose(tg.grad(inside)(B0), lu.solve(np.ones(N), trans="T"), rtol=1e-13)


def test_factorized_and_spilu():
    A = A0.tocsc()
    check_grads(lambda d, b: spla.factorized(with_data(A, d))(b), (A.data, B0))
    check_grads(lambda b: spla.factorized(A)(b) ** 2, (B0,))
    ilu = spla.spilu(A, drop_tol=0.1)
    check_grads(lambda b: spla.spilu(A, drop_tol=0.1).solve(b) ** 2, (B0,))
    np.testing.assert_allclose(tg.grad(lambda b: spla.spilu(A, drop_tol=0.1).solve(b) @ B0)(B0),
                               ilu.solve(B0, trans="T"), rtol=1e-13)


def test_spilu_of_traced_values_is_a_preconditioner_only():
    A = A0.tocsc()

    def preconditioned(d, b):
        matrix = with_data(A, d)
        ilu = spla.spilu(matrix, drop_tol=0.2)
        M = spla.LinearOperator(A.shape, ilu.solve)
        x, info = spla.gmres(matrix, b, M=M, rtol=1e-13, atol=0.0)
        assert info == 0
        return x

    check_grads(preconditioned, (A.data, B0), rtol=1e-4)
    with pytest.raises(NonDifferentiableArgumentError, match=r"spilu\(\.\.\.\)\.solve.*preconditioner"):
        tg.grad(lambda d: np.sum(spla.spilu(with_data(A, d)).solve(B0)))(A.data)
    with pytest.raises(NonDifferentiableArgumentError, match="factor U"):
        tg.grad(lambda d: np.sum(spla.splu(with_data(A, d)).U.diagonal()))(A.data)


# ------------------------------------------------------------------ triangular
@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_spsolve_triangular(fmt, lower, unit):
    T = (sp.tril(A0) if lower else sp.triu(A0)).asformat(fmt)

    def f(d, b):
        return spla.spsolve_triangular(with_data(T, d), b, lower=lower, unit_diagonal=unit)

    def dense(d, b):
        m = _dense(T, d)
        if unit:
            m = m - np.diag(np.diag(m)) + np.eye(N)
        return sl.solve_triangular(m, b, lower=lower)

    np.testing.assert_allclose(tg.jacobian(f)(T.data, B0), tg.jacobian(dense)(T.data, B0), rtol=1e-10, atol=1e-13)
    check_grads(f, (T.data, BB))


def test_spsolve_triangular_refuses_the_other_triangle():
    with pytest.raises(NonDifferentiableArgumentError, match="spsolve_triangular.*sp.tril"):
        tg.grad(lambda d: np.sum(spla.spsolve_triangular(with_data(A0, d), B0)))(A0.data)


# ------------------------------------------------------------------ iterative solvers
ITERATIVE = ["cg", "gmres", "bicgstab", "bicg", "cgs", "qmr", "minres", "lgmres", "gcrotmk", "tfqmr"]


def _tight(name):
    return {"rtol": 1e-13} if name == "minres" else {"rtol": 1e-13, "atol": 0.0}


@pytest.mark.parametrize("name", ITERATIVE)
def test_iterative_solvers(name):
    A = SPD if name in ("cg", "minres") else A0
    solver = getattr(spla, name)

    def f(d, b):
        x, info = solver(with_data(A, d), b, **_tight(name))
        assert info == 0
        return x

    dense = lambda d, b: np.linalg.solve(_dense(A, d), b)  # noqa: E731
    np.testing.assert_allclose(tg.jacobian(f, (0, 1))(A.data, B0)[0], tg.jacobian(dense, 0)(A.data, B0),
                               rtol=1e-6, atol=1e-9)
    check_grads(lambda d, b: f(d, b) ** 2, (A.data, B0), rtol=1e-4)


def test_iterative_solver_extras():
    # info is a constant; x0, a preconditioner and a callback carry no derivative
    seen = []

    def f(k, b):
        x, info = spla.gmres(k, b, x0=0.1 * b, M=np.diag(1 / np.diag(k)), callback=seen.append,
                             callback_type="pr_norm", rtol=1e-13, atol=0.0)
        return x

    dense = A0.toarray()
    check_grads(f, (dense, B0), rtol=1e-4)
    assert seen and all(type(v) is not tg.Tracer for v in seen)
    # qmr with two preconditioners: the adjoint swaps them
    check_grads(lambda d, b: spla.qmr(with_data(A0, d), b, M1=spla.aslinearoperator(sp.diags_array(1 / A0.diagonal())),
                                      M2=spla.aslinearoperator(sp.eye_array(N)), rtol=1e-13, atol=0.0)[0], (A0.data, B0), rtol=1e-4)


def test_unconverged_adjoint_warns():
    from tapegrad.rules.scipy_sparse_linalg import AdjointConvergenceWarning

    hard = (sp.random_array((40, 40), density=0.2, rng=np.random.default_rng(10)) + sp.eye_array(40)).tocsr()
    with pytest.warns(AdjointConvergenceWarning, match="gmres.*info="):
        tg.grad(lambda b: np.sum(spla.gmres(hard, b, maxiter=1, restart=2)[0]))(np.ones(40))


def test_linear_operator_closing_over_tracers():
    K = A0.toarray()

    def gmres_loss(k, b):
        op = spla.LinearOperator((N, N), matvec=lambda v: k @ v, rmatvec=lambda v: k.T @ v)
        return spla.gmres(op, b, rtol=1e-13, atol=0.0)[0] ** 2

    check_grads(gmres_loss, (K, B0), rtol=1e-4)
    np.testing.assert_allclose(tg.grad(lambda k: np.sum(gmres_loss(k, B0)))(K),
                               tg.grad(lambda k: np.sum(np.linalg.solve(k, B0) ** 2))(K), rtol=1e-7)
    S = SPD.toarray()
    cg_loss = lambda s, b: spla.cg(spla.LinearOperator((N, N), matvec=lambda v: s @ v), b,  # noqa: E731
                                   rtol=1e-13, atol=0.0)[0] ** 2
    check_grads(cg_loss, (S, B0), rtol=1e-4)
    # products of such operators are traced
    product = lambda k: spla.LinearOperator((N, N), matvec=lambda v: k @ v) @ B0  # noqa: E731
    np.testing.assert_allclose(tg.jacobian(product)(K), tg.jacobian(lambda k: k @ B0)(K))
    with pytest.raises(NonDifferentiableArgumentError, match="gmres.*rmatvec"):
        tg.grad(lambda k: np.sum(spla.gmres(spla.LinearOperator((N, N), matvec=lambda v: k @ v), B0)[0]))(K)


def test_preconditioner_closing_over_tracers_carries_no_derivative():
    def f(k, b):
        M = spla.LinearOperator((N, N), matvec=lambda v: v / k)  # Jacobi with traced diagonal
        x, info = spla.cg(SPD, b, M=M, rtol=1e-13, atol=0.0)
        return np.sum(x) + np.sum(k ** 2)  # recorded after the solve: the tapes were not left paused

    k = SPD.diagonal()
    gk, gb = tg.grad(f, argnums=(0, 1))(k, B0)
    np.testing.assert_allclose(gk, 2 * k, rtol=1e-13)
    np.testing.assert_allclose(gb, np.linalg.solve(SPD.toarray(), np.ones(N)), rtol=1e-9)
    gk = tg.grad(lambda k: f(k, B0))(k)
    np.testing.assert_allclose(gk, 2 * k, rtol=1e-13)


def test_aslinearoperator_of_traced_matrix():
    check_grads(lambda d, b: spla.bicgstab(spla.aslinearoperator(with_data(A0, d)), b, rtol=1e-13, atol=0.0)[0],
                (A0.data, B0), rtol=1e-4)
    check_grads(lambda k, b: spla.gmres(spla.aslinearoperator(k), b, rtol=1e-13, atol=0.0)[0],
                (A0.toarray(), B0), rtol=1e-4)


def test_traced_shift_is_refused():
    with pytest.raises(NonDifferentiableArgumentError, match="minres.*shift"):
        tg.grad(lambda s: np.sum(spla.minres(SPD, B0, shift=s)[0]))(0.1)


# ------------------------------------------------------------------ least squares
@pytest.mark.parametrize("name", ["lsqr", "lsmr"])
@pytest.mark.parametrize("damp", [0.0, 0.3])
def test_least_squares(name, damp):
    tall = (sp.random_array((8, 5), density=0.5, rng=np.random.default_rng(1)) + sp.eye_array(8, 5)).tocsr()
    b = np.random.default_rng(2).normal(size=8)
    solver = getattr(spla, name)

    def f(d, b):
        return solver(with_data(tall, d), b, damp=damp, atol=1e-14, btol=1e-14)[0]

    def dense(d, b):
        m = _dense(tall, d)
        return np.linalg.solve(m.T @ m + damp ** 2 * np.eye(5), m.T @ b)

    np.testing.assert_allclose(f(tall.data, b), dense(tall.data, b), rtol=1e-8)
    np.testing.assert_allclose(tg.jacobian(f)(tall.data, b), tg.jacobian(dense)(tall.data, b), rtol=1e-6, atol=1e-9)
    check_grads(lambda d, b: f(d, b) ** 2, (tall.data, b), rtol=1e-4)
    # the residual norm is traced too
    check_grads(lambda d: solver(with_data(tall, d), b, damp=damp, atol=1e-14, btol=1e-14)[3], (tall.data,),
                rtol=1e-4, order=1)


def test_least_squares_with_a_linear_operator():
    tall = np.random.default_rng(13).normal(size=(8, 5))
    b = np.random.default_rng(14).normal(size=8)

    def f(k, b):
        op = spla.LinearOperator(k.shape, matvec=lambda v: k @ v, rmatvec=lambda v: k.T @ v)
        return spla.lsqr(op, b, damp=0.1, atol=1e-14, btol=1e-14)[0]

    dense = lambda k, b: np.linalg.solve(k.T @ k + 0.01 * np.eye(5), k.T @ b)  # noqa: E731
    np.testing.assert_allclose(tg.jacobian(f)(tall, b), tg.jacobian(dense)(tall, b), rtol=1e-6, atol=1e-9)
    check_grads(f, (tall, b), rtol=1e-4)


# ------------------------------------------------------------------ spectra
def _symmetric_test_matrix():
    n = 12
    r = sp.random_array((n, n), density=0.3, rng=np.random.default_rng(4))
    return (r + r.T + sp.diags_array(np.arange(n, dtype=float))).tocsr()


def test_eigsh_values_and_vectors():
    S = _symmetric_test_matrix()
    theta0, build = _symmetric(S)
    v0 = np.ones(S.shape[0])
    top = lambda t: spla.eigsh(build(t), k=3, v0=v0, return_eigenvectors=False)  # noqa: E731
    np.testing.assert_allclose(np.sort(top(theta0)), np.linalg.eigvalsh(S.toarray())[-3:], rtol=1e-12)
    dense = lambda t: np.linalg.eigvalsh(_dense(S, build(t).data))[-3:]  # noqa: E731
    np.testing.assert_allclose(tg.jacobian(top)(theta0)[np.argsort(top(theta0))], tg.jacobian(dense)(theta0),
                               rtol=1e-8, atol=1e-12)
    check_grads(top, (theta0,), order=1)
    check_grads(lambda t: spla.eigsh(build(t), k=2, v0=v0, which="SA")[0], (theta0,), order=1)
    check_grads(lambda t: spla.eigsh(build(t), k=3, v0=v0, tol=1e-14)[1] ** 2, (theta0,), order=1, rtol=1e-4)
    # second order: the Hessian of eigenvalues, through the traced eigenvectors' own rule
    dense_top = lambda t: np.sum(np.sin(np.linalg.eigvalsh(_dense(S, build(t).data))[-3:]))  # noqa: E731
    np.testing.assert_allclose(tg.hessian(lambda t: np.sum(np.sin(top(t))))(theta0), tg.hessian(dense_top)(theta0),
                               rtol=1e-8, atol=1e-12)
    with pytest.raises(NonDifferentiableArgumentError, match="eigsh.*second derivative"):
        tg.hessian(lambda t: np.sum(spla.eigsh(build(t), k=3, v0=v0)[1][0] ** 2))(theta0)


def test_eigs_and_svds():
    n = 12
    general = (sp.random_array((n, n), density=0.3, rng=np.random.default_rng(5))
               + sp.diags_array(np.arange(n, dtype=float))).tocsr()
    v0 = np.ones(n)
    check_grads(lambda d: np.abs(spla.eigs(with_data(general, d), k=3, v0=v0, return_eigenvectors=False)),
                (general.data,), order=1)
    rect = sp.random_array((n, 8), density=0.4, rng=np.random.default_rng(6)).tocsr()
    values = lambda d: spla.svds(with_data(rect, d), k=3, v0=np.ones(8), return_singular_vectors=False)  # noqa: E731
    check_grads(values, (rect.data,), order=1)
    dense = lambda d: sl.svdvals(_dense(rect, d))[:3][::-1]  # noqa: E731
    np.testing.assert_allclose(tg.jacobian(values)(rect.data), tg.jacobian(dense)(rect.data), rtol=1e-8, atol=1e-12)
    # singular vectors (signs are ARPACK's: sign-invariant functions), as eigenvectors of [[0, A], [A^T, 0]]
    triple = lambda d: spla.svds(with_data(rect, d), k=3, v0=np.ones(8), tol=1e-14)  # noqa: E731
    check_grads(lambda d: triple(d)[0] ** 2, (rect.data,), order=1, rtol=1e-4)
    check_grads(lambda d: (triple(d)[0] * triple(d)[1]) @ triple(d)[2], (rect.data,), order=1, rtol=1e-4)
    # eigs' unit eigenvectors, complex ones included: phase-invariant functions only
    rough = sp.random_array((n, n), density=0.5, rng=np.random.default_rng(7)).tocsr()  # complex eigenvalues
    pair = lambda d: spla.eigs(with_data(rough, d), k=3, v0=v0, tol=1e-14)  # noqa: E731
    assert np.iscomplexobj(pair(rough.data)[0]) and np.abs(pair(rough.data)[0].imag).max() > 0.1
    check_grads(lambda d: np.abs(pair(d)[1]) ** 2, (rough.data,), order=1, rtol=1e-4)
    check_grads(lambda d: np.real(pair(d)[0]), (rough.data,), order=1, rtol=1e-4)
    with pytest.raises(NonDifferentiableArgumentError, match="eigs.*phases"):
        tg.grad(lambda d: np.sum(np.real(pair(d)[1])))(rough.data)
    np.testing.assert_allclose(tg.hessian(lambda d: np.sum(np.sin(values(d))))(rect.data),
                               tg.hessian(lambda d: np.sum(np.sin(dense(d))))(rect.data), rtol=1e-8, atol=1e-12)
    with pytest.raises(NonDifferentiableArgumentError, match="eigs.*second derivative"):
        tg.hessian(lambda d: np.sum(np.abs(spla.eigs(with_data(general, d), k=2, v0=v0)[0])))(general.data)
    norm2 = lambda d: spla.norm(with_data(rect, d), 2)  # noqa: E731
    np.testing.assert_allclose(tg.grad(norm2)(rect.data), tg.grad(lambda d: sl.svdvals(_dense(rect, d))[0])(rect.data),
                               rtol=1e-8, atol=1e-12)


# ------------------------------------------------------------------ exponential
EXP = (sp.random_array((N, N), density=0.4, rng=np.random.default_rng(7)) - sp.eye_array(N)).tocsr()


def test_expm_multiply_against_dense_expm():
    f = lambda d, b: spla.expm_multiply(with_data(EXP, d), b)  # noqa: E731
    dense = lambda d, b: sl.expm(_dense(EXP, d)) @ b  # noqa: E731
    np.testing.assert_allclose(f(EXP.data, B0), dense(EXP.data, B0), rtol=1e-12)
    for argnum in (0, 1):
        np.testing.assert_allclose(tg.jacobian(f, argnum)(EXP.data, B0), tg.jacobian(dense, argnum)(EXP.data, B0),
                                   rtol=1e-11, atol=1e-13)
    check_grads(f, (EXP.data, B0))
    check_grads(f, (EXP.data, BB), order=1)
    check_grads(lambda d, b: spla.expm_multiply(with_data(EXP, d), b, start=0, stop=2, num=3, endpoint=True),
                (EXP.data, B0), order=1)
    check_grads(lambda a, b: spla.expm_multiply(a, b), (EXP.toarray(), B0), order=1)


@pytest.mark.slow
def test_expm_multiply_second_order_with_columns_and_times():
    check_grads(lambda d, b: spla.expm_multiply(with_data(EXP, d), b), (EXP.data, BB))
    check_grads(lambda d, b: spla.expm_multiply(with_data(EXP, d), b, start=0, stop=2, num=3, endpoint=True),
                (EXP.data, B0))


def test_expm_multiply_of_a_linear_operator_closing_over_tracers():
    K = 0.5 * np.random.default_rng(15).normal(size=(N, N))

    def f(k, b):
        op = spla.LinearOperator((N, N), matvec=lambda v: k @ v, rmatvec=lambda v: k.T @ v)
        return spla.expm_multiply(op, b, traceA=float(np.trace(tg.stop_gradient(k))))

    dense = lambda k, b: sl.expm(k) @ b  # noqa: E731
    for argnum in (0, 1):
        np.testing.assert_allclose(tg.jacobian(f, argnum)(K, B0), tg.jacobian(dense, argnum)(K, B0), rtol=1e-10,
                                   atol=1e-12)
    check_grads(f, (K, BB), order=1)
    with pytest.raises(NonDifferentiableArgumentError, match="expm_multiply.*second derivative"):
        tg.hessian(lambda k: np.sum(f(k, B0)))(K)


def test_expm_multiply_stiff_matrix_is_exact():
    stiff = 8.0 * EXP
    f = lambda d: np.sum(spla.expm_multiply(with_data(stiff, d), B0) ** 2)  # noqa: E731
    np.testing.assert_allclose(tg.grad(f)(stiff.data),
                               tg.grad(lambda d: np.sum((sl.expm(_dense(stiff, d)) @ B0) ** 2))(stiff.data),
                               rtol=1e-10, atol=1e-13)


def test_expm_of_sparse_matrix():
    A = EXP.tocsc()
    check_grads(lambda d: spla.expm(with_data(A, d)).toarray(), (A.data,))
    np.testing.assert_allclose(tg.jacobian(lambda d: spla.expm(with_data(A, d)).toarray())(A.data),
                               tg.jacobian(lambda d: sl.expm(_dense(A, d)))(A.data), rtol=1e-10, atol=1e-13)


# ------------------------------------------------------------------ norms
@pytest.mark.parametrize("ord", [None, "fro", 1, -1, np.inf, -np.inf])
def test_norm(ord):
    f = lambda d: spla.norm(with_data(A0, d), ord=ord)  # noqa: E731
    assert np.isclose(f(A0.data), np.linalg.norm(A0.toarray(), ord=ord or "fro"))
    check_grads(f, (A0.data,))


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("ord", [None, 1, 3])
def test_norm_along_an_axis(axis, ord):
    f = lambda d: spla.norm(with_data(A0, d), ord=ord, axis=axis)  # noqa: E731
    np.testing.assert_allclose(f(A0.data), np.linalg.norm(A0.toarray(), ord=ord, axis=axis), rtol=1e-13)
    check_grads(f, (A0.data,))


def test_norm_sums_duplicates():
    coo = sp.coo_array((np.array([1.0, 2.0, 3.0, -4.0]), (np.array([0, 0, 1, 1]), np.array([0, 0, 1, 1]))))
    assert np.isclose(spla.norm(coo), np.sqrt(10.0))  # (1 + 2, 3 - 4)
    check_grads(lambda d: spla.norm(with_data(coo, d)), (coo.data,))


def test_onenormest():
    assert tg.grad(lambda d: spla.onenormest(with_data(A0, d)))(A0.data).any() == False  # noqa: E712  an estimate
    check_grads(lambda d: spla.onenormest(with_data(A0, d), t=N), (A0.data,))  # exact when t >= n
    check_grads(lambda d: spla.onenormest(with_data(A0, d), t=N, compute_v=True, compute_w=True)[2], (A0.data,))


# ------------------------------------------------------------------ Jacobians with sparse=True, untraced calls
def test_sparse_jacobian_through_these_rules():
    f = lambda d: spla.norm(with_data(A0, d), axis=1)  # noqa: E731
    jac = tg.jacobian(f, sparse=True)(A0.data)
    assert sp.issparse(jac) and jac.nnz == A0.nnz
    np.testing.assert_allclose(jac.toarray(), tg.jacobian(f)(A0.data), rtol=1e-13)
    g = lambda b: spsolve(A0, b)  # noqa: E731
    np.testing.assert_allclose(tg.jacobian(g, sparse=True)(B0).toarray(), np.linalg.inv(A0.toarray()), rtol=1e-10)


def test_untraced_calls_are_scipys_own():
    expected = (spla.cg(SPD, B0)[0], spsolve(A0, B0), spla.expm_multiply(EXP, B0), spla.norm(A0, 1))
    seen = []

    def f(x):
        seen.append((spla.cg(SPD, B0)[0], spsolve(A0, B0), spla.expm_multiply(EXP, B0), spla.norm(A0, 1)))
        assert isinstance(spla.splu(A0.tocsc()).solve(B0), np.ndarray)
        return np.sum(x)

    tg.grad(f)(np.ones(2))  # inside a recording window, nothing traced reaches these calls
    for got, want in zip(seen[0], expected):
        np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------ through scipy.sparse's constructors
def _poisson(k, n):
    """The 1-D Poisson matrix with conductivities ``k`` on the n + 1 edges (Dirichlet ends)."""
    main = k[:-1] + k[1:]
    return sp.diags_array([main, -k[1:-1], -k[1:-1]], offsets=[0, 1, -1], format="csr")


def test_poisson_assembled_by_scipy_sparse():
    pytest.importorskip("tapegrad.rules.scipy_sparse")
    n = 7
    k0 = 1 + np.random.default_rng(8).uniform(size=n + 1)
    f = np.ones(n)
    obs = np.linspace(0, 1, n)
    loss = lambda k: np.sum((spsolve(_poisson(k, n), f) - obs) ** 2)  # noqa: E731

    def dense_loss(k):
        m = np.diag(k[:-1] + k[1:]) - np.diag(k[1:-1], 1) - np.diag(k[1:-1], -1)
        return np.sum((np.linalg.solve(m, f) - obs) ** 2)

    np.testing.assert_allclose(tg.grad(loss)(k0), tg.grad(dense_loss)(k0), rtol=1e-10)
    np.testing.assert_allclose(tg.hessian(loss)(k0), tg.hessian(dense_loss)(k0), rtol=1e-9)
    coo = lambda k: spla.spsolve(sp.coo_array((k, (np.arange(n), np.arange(n)))).tocsr(), f)  # noqa: E731
    np.testing.assert_allclose(tg.jacobian(coo)(k0[:n]), np.diag(-f / k0[:n] ** 2), rtol=1e-12)
