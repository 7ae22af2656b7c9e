"""SciPy sparse matrices whose values are traced (tapegrad.rules.scipy_sparse, contract in rules/_sparse.py).

The structure is a constant, the values are traced: every construction and operation
is checked against central differences at first and second order with a batch of
cotangents (tapegrad.testing.check_grads) and against the same computation on the
dense equivalent through NumPy, across formats and the array/matrix classes.
"""

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.csgraph

import tapegrad as tg
from tapegrad.errors import GradientDroppedError, NonDifferentiableArgumentError
from tapegrad.testing import check_grads

rng = np.random.default_rng(5)

# A 4 x 4 pattern with a duplicate (0, 1) entry (SciPy sums duplicates).
I = np.array([0, 1, 2, 0, 3, 1, 2])
J = np.array([1, 2, 0, 1, 3, 3, 2])
d7 = rng.uniform(-1, 1, 7)
x4 = rng.uniform(-1, 1, 4)
W = rng.uniform(-1, 1, (4, 4))

KINDS = ["array", "matrix"]
FORMATS = ["csr", "csc", "coo", "bsr", "dia"]
CLASSES = [getattr(sp, f"{fmt}_{kind}") for fmt in FORMATS for kind in KINDS]
IDS = [c.__name__ for c in CLASSES]


_SCATTER = np.zeros((16, 7))
_SCATTER[I * 4 + J, np.arange(7)] = 1.0


def dense_of(d):
    """The dense matrix, duplicates summed (traced-capable)."""
    return (_SCATTER.astype(np.result_type(d)) @ d).reshape(4, 4)


def build(cls, d):
    if cls.__name__.startswith("dia"):  # DIA reads a pair as (data, offsets): convert from COO
        return cls(sp.coo_array((d, (I, J)), shape=(4, 4)))
    return cls((d, (I, J)), shape=(4, 4))


def _dense(M):
    return np.asarray(M.toarray())


# ------------------------------------------------------------------ construction and reading back
@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_construct_and_read_back(cls):
    f = lambda d: _dense(build(cls, d))
    np.testing.assert_allclose(f(d7), dense_of(d7))
    # Duplicates: each one gets the full cotangent of its (i, j).
    G = tg.grad(lambda d: np.sum(W * f(d)))(d7)
    np.testing.assert_allclose(G, W[I, J])
    assert G.shape == d7.shape
    check_grads(f, [d7])
    check_grads(lambda d: build(cls, d) @ np.sin(d[:4]), [d7])


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_products_and_sums_against_dense(cls):
    def sparse_f(d, x):
        A = build(cls, d)
        y = A @ x + A.T @ x - x @ A
        B = A @ A.T + 2.0 * A - A.T / d[0]
        return np.sin(y) + _dense(B) @ x + np.ravel(A.sum(axis=0)) * np.ravel(A.sum(axis=1))

    def dense_f(d, x):
        A = dense_of(d)
        y = A @ x + A.T @ x - x @ A
        B = A @ A.T + 2.0 * A - A.T / d[0]
        return np.sin(y) + B @ x + A.sum(axis=0) * A.sum(axis=1)

    np.testing.assert_allclose(sparse_f(d7, x4), dense_f(d7, x4), atol=1e-13)
    Js = tg.jacobian(sparse_f, argnums=(0, 1))(d7, x4)
    Jd = tg.jacobian(dense_f, argnums=(0, 1))(d7, x4)
    for a, b in zip(Js, Jd):
        np.testing.assert_allclose(a, b, atol=1e-12)
    check_grads(sparse_f, [d7, x4])


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_hessian_of_a_quadratic_form(cls):
    def energy(d):
        A = build(cls, d)
        return x4 @ (A @ (A.T @ x4)) + np.sum(A.multiply(A).toarray())

    def dense_energy(d):
        A = dense_of(d)
        return x4 @ (A @ (A.T @ x4)) + np.sum(A * A)

    np.testing.assert_allclose(tg.hessian(energy)(d7), tg.hessian(dense_energy)(d7), atol=1e-12)
    v = rng.uniform(-1, 1, 7)
    np.testing.assert_allclose(tg.hvp(energy)(d7, v), tg.hvp(dense_energy)(d7, v), atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_compressed_triples_and_dense_input(kind):
    csr, csc = getattr(sp, f"csr_{kind}"), getattr(sp, f"csc_{kind}")
    indptr, indices = np.array([0, 2, 3, 5]), np.array([0, 2, 1, 0, 2])
    d5 = rng.uniform(-1, 1, 5)
    for cls in (csr, csc):
        ref = lambda d, cls=cls: cls((d, indices, indptr), shape=(3, 3)).toarray()
        plain = np.asarray(ref(d5))
        np.testing.assert_allclose(tg.jacobian(lambda d: _dense(cls((d, indices, indptr), shape=(3, 3))))(d5),
                                   np.stack([np.asarray(ref(e)) for e in np.eye(5)], -1))
        np.testing.assert_allclose(_dense(cls((d5, indices, indptr), shape=(3, 3))), plain)
        check_grads(lambda d: cls((d, indices, indptr), shape=(3, 3)) @ d[:3], [d5])
    # A traced dense array keeps every entry (a zero now may have a derivative).
    D = np.array([[1.0, 0.0], [0.0, 2.0]])
    G = tg.grad(lambda D: np.sum(csr(D) @ np.array([3.0, 5.0])))(D)
    np.testing.assert_allclose(G, [[3.0, 5.0], [3.0, 5.0]])


def test_conversions_and_transposes():
    for kind in KINDS:
        coo = getattr(sp, f"coo_{kind}")
        for path in ("tocsr", "tocsc", "tocoo", "todia", "tobsr"):
            f = lambda d, path=path: _dense(getattr(build(coo, d), path)())
            np.testing.assert_allclose(f(d7), dense_of(d7))
            check_grads(f, [d7])
            g = lambda d, path=path: _dense(build(coo, d).asformat(path[2:]).T)
            np.testing.assert_allclose(g(d7), dense_of(d7).T)
            check_grads(g, [d7], order=1)
        check_grads(lambda d: _dense(build(coo, d).transpose().tocsr().sorted_indices()), [d7])


def test_construction_functions():
    d3 = rng.uniform(-1, 1, 3)
    C = sp.csr_array(rng.uniform(-1, 1, (3, 3)) * (rng.uniform(size=(3, 3)) < 0.5))
    Cd = C.toarray()
    cases = [
        (lambda d: sp.diags([d, d[:2] ** 2, 1.5], [0, 1, -1]),
         lambda d: np.diag(d) + np.diag(d[:2] ** 2, 1) + np.diag([1.5, 1.5], -1)),
        (lambda d: sp.diags_array(d, offsets=1, shape=(4, 4)), lambda d: np.diag(d, 1)),
        (lambda d: sp.spdiags(np.stack([d, 2 * d]), [0, -1], 3, 3),
         lambda d: np.diag(d) + np.diag(2 * d[:2], -1)),
        (lambda d: sp.eye(3) * d[0] + sp.eye_array(3, k=1) * d[1], lambda d: np.eye(3) * d[0] + np.eye(3, k=1) * d[1]),
        (lambda d: sp.identity(3, format="csr") / d[2], lambda d: np.eye(3) / d[2]),
        (lambda d: sp.kron(sp.diags(d), C), lambda d: np.kron(np.diag(d), Cd)),
        (lambda d: sp.kron(C, sp.diags(d[:2]), format="csr"), lambda d: np.kron(Cd, np.diag(d[:2]))),
        (lambda d: sp.kron(sp.diags(d), sp.diags(d ** 2)), lambda d: np.kron(np.diag(d), np.diag(d ** 2))),
        (lambda d: sp.hstack([sp.diags(d), C]), lambda d: np.hstack([np.diag(d), Cd])),
        (lambda d: sp.vstack([C, sp.diags(d)], format="csr"), lambda d: np.vstack([Cd, np.diag(d)])),
        (lambda d: sp.bmat([[sp.diags(d), None], [C, sp.diags(d * d)]]),
         lambda d: np.block([[np.diag(d), np.zeros((3, 3))], [Cd, np.diag(d * d)]])),
        (lambda d: sp.block_array([[sp.diags(d), C]], format="csc"), lambda d: np.hstack([np.diag(d), Cd])),
        (lambda d: sp.block_diag([sp.diags(d[:2]), np.outer(d, d)[:2, :2], C]),
         lambda d: scipy.linalg.block_diag(np.diag(d[:2]), np.outer(d, d)[:2, :2], Cd)),
        (lambda d: sp.kronsum(sp.diags(d[:2]), C), lambda d: np.kron(np.eye(3), np.diag(d[:2])) + np.kron(Cd, np.eye(2))),
        (lambda d: sp.tril(sp.diags(d) + C, format="csr"), lambda d: np.tril(np.diag(d) + Cd)),
        (lambda d: sp.triu(sp.diags(d) @ C), lambda d: np.triu(np.diag(d) @ Cd)),
    ]
    for make, dense in cases:
        f = lambda d, make=make: _dense(make(d))
        np.testing.assert_allclose(f(d3), dense(d3), atol=1e-14)
        np.testing.assert_allclose(tg.jacobian(f)(d3), tg.jacobian(dense)(d3), atol=1e-13)
        check_grads(f, [d3], order=2, batch=2)


@pytest.mark.filterwarnings("ignore::scipy.sparse.SparseEfficiencyWarning")  # maximum(0.25) is dense
@pytest.mark.parametrize("kind", KINDS)
def test_elementwise_and_reductions(kind):
    csr = getattr(sp, f"csr_{kind}")
    dp = np.abs(d7) + 0.5
    cases = [
        (lambda A: -A, lambda D: -D),
        (lambda A: abs(A), np.abs),
        (lambda A: A.power(3), lambda D: D ** 3),
        (lambda A: A.sqrt(), np.sqrt),
        (lambda A: A.expm1(), np.expm1),
        (lambda A: A.sin(), np.sin),
        (lambda A: A.astype(np.float64).copy().conj(), lambda D: D),
        (lambda A: A.multiply(A.T), lambda D: D * D.T),
        (lambda A: A.multiply(W), lambda D: D * W),
        (lambda A: A / W, lambda D: D / W),
        (lambda A: A.multiply(x4), lambda D: D * x4),
        (lambda A: A - A, lambda D: D - D),
        (lambda A: A + W, lambda D: D + W),
        (lambda A: W - A, lambda D: W - D),
        (lambda A: A.maximum(A.T), lambda D: np.maximum(D, D.T)),
        (lambda A: A.minimum(sp.csr_array(W * (W > 0))), lambda D: np.minimum(D, W * (W > 0))),
        (lambda A: A.maximum(0.25), lambda D: np.maximum(D, 0.25)),
        (lambda A: A.minimum(0.25), lambda D: np.minimum(D, 0.25)),
        (lambda A: A.maximum(W), lambda D: np.maximum(D, W)),
    ]
    for op, dense in cases:
        f = lambda d, op=op: _dense_any(op(build(csr, d)))
        np.testing.assert_allclose(f(dp), dense(dense_of(dp)), atol=1e-14)
        with np.errstate(all="ignore"):  # the dense sqrt's derivative where no entry is stored: 0 * inf
            expected = tg.jacobian(lambda d: dense(dense_of(d)))(dp)
        got = tg.jacobian(f)(dp)
        # Where no entry is stored the dense derivative of sqrt is 0 * inf: the sparse one has none.
        np.testing.assert_allclose(got[np.isfinite(expected)], expected[np.isfinite(expected)], atol=1e-12)
        check_grads(f, [dp], batch=2)
    reductions = [
        (lambda A: A.sum(), np.sum),
        (lambda A: np.ravel(A.sum(axis=0)), lambda D: D.sum(0)),
        (lambda A: np.ravel(A.sum(axis=-1)), lambda D: D.sum(1)),
        (lambda A: A.mean(), np.mean),
        (lambda A: np.ravel(A.mean(axis=1)), lambda D: D.mean(1)),
        (lambda A: A.diagonal(), np.diagonal),
        (lambda A: A.diagonal(k=1), lambda D: np.diagonal(D, 1)),
        (lambda A: A.trace(), np.trace),
        (lambda A: np.asarray(A.todense()), lambda D: D),
        (lambda A: A[1, 3] + A[0, 1], lambda D: D[1, 3] + D[0, 1]),
        (lambda A: _dense(A[1:3, :]), lambda D: D[1:3]),
        (lambda A: _dense(A[[2, 0], :]), lambda D: D[[2, 0]]),
        (lambda A: _dense(A.reshape((2, 8))), lambda D: D.reshape(2, 8)),
        (lambda A: _dense(sp.csr_matrix(A).getrow(1)), lambda D: D[1:2]),
        (lambda A: _dense(sp.csc_matrix(A).getcol(3)), lambda D: D[:, 3:]),
    ]
    for op, dense in reductions:
        f = lambda d, op=op: op(build(csr, d))
        np.testing.assert_allclose(f(dp), dense(dense_of(dp)), atol=1e-14)
        check_grads(f, [dp], batch=2)


def _dense_any(M):
    return _dense(M) if sp.issparse(M) else np.asarray(M)


def test_in_place_structure_methods():
    def summed(d):
        A = sp.coo_array((d, (I, J)), shape=(4, 4))
        A.sum_duplicates()
        assert A.nnz == 6
        return A.data

    G = tg.jacobian(summed)(d7)
    expected = np.zeros((6, 7))
    keys = I * 4 + J
    order = np.unique(keys)
    for k, key in enumerate(keys):
        expected[np.searchsorted(order, key), k] = 1
    np.testing.assert_allclose(G, expected)
    check_grads(summed, [d7])

    def sorted_then_eliminated(d):
        A = sp.csr_array((d[[3, 1, 2]], np.array([2, 0, 1]), np.array([0, 2, 3])), shape=(2, 3))
        A.sort_indices()
        A.eliminate_zeros()  # a traced zero is kept: its derivative need not be zero
        return A.toarray()

    x = np.array([0.0, 0.0, 2.0, 3.0])
    np.testing.assert_allclose(sorted_then_eliminated(x), [[0.0, 0.0, 3.0], [0.0, 2.0, 0.0]])
    G = tg.grad(lambda d: np.sum(np.arange(6.0).reshape(2, 3) * sorted_then_eliminated(d)))(x)
    np.testing.assert_allclose(G, [0.0, 0.0, 4.0, 2.0])


def test_values_shaped_like_the_data_passed_and_dtype():
    d = d7.astype(np.float32)
    A = sp.csr_array((d, (I, J)), shape=(4, 4))
    G = tg.grad(lambda d: np.sum(sp.csr_array((d, (I, J)), shape=(4, 4)) @ x4.astype(np.float32)))(d)
    assert G.dtype == np.float32 and G.shape == (7,)
    np.testing.assert_allclose(G, x4[J], rtol=1e-6)

    def data_dtype(d):
        M = sp.csr_array((d, (I, J)), shape=(4, 4))
        assert M.dtype == np.float32 and M.data.dtype == np.float32
        return M.sum()

    tg.grad(data_dtype)(d)
    np.testing.assert_array_equal(A.toarray(), dense_of(d))


def test_inputs_not_mutated():
    d, i, j = d7.copy(), I.copy(), J.copy()
    C = sp.csr_array(dense_of(d7))
    before = (C.data.copy(), C.indices.copy(), C.indptr.copy())
    tg.hessian(lambda d: np.sum((sp.csr_array((d, (i, j)), shape=(4, 4)) + C).power(2) @ x4))(d)
    np.testing.assert_array_equal(d, d7)
    np.testing.assert_array_equal(i, I)
    np.testing.assert_array_equal(j, J)
    for a, b in zip(before, (C.data, C.indices, C.indptr)):
        np.testing.assert_array_equal(a, b)


def test_refusals_are_clear():
    A = lambda d: sp.csr_array((d, (I, J)), shape=(4, 4))
    with pytest.raises(NonDifferentiableArgumentError, match="lil"):
        tg.grad(lambda d: sp.lil_array(A(d)).sum())(d7)
    with pytest.raises(NonDifferentiableArgumentError, match="todok"):
        tg.grad(lambda d: A(d).todok().sum())(d7)
    with pytest.raises(NonDifferentiableArgumentError, match="LIL result .* format='csr'"):
        tg.grad(lambda d: sp.diags_array(d, format="lil").sum())(d7)
    with pytest.raises(NonDifferentiableArgumentError, match="traced scalar"):
        tg.grad(lambda d: (A(d) + d[0]).sum())(d7)
    with pytest.raises(NonDifferentiableArgumentError, match="division by a sparse"):
        tg.grad(lambda d: (A(d) / sp.eye_array(4, format="csr")).sum())(d7)
    # A method without a rule that hands the values to compiled code names itself.
    with pytest.raises(GradientDroppedError, match="minimum_spanning_tree"):
        tg.grad(lambda d: scipy.sparse.csgraph.minimum_spanning_tree(A(np.abs(d))).sum())(d7)


@pytest.mark.filterwarnings("ignore::scipy.sparse.SparseEfficiencyWarning")  # SciPy's, for A[3, 0] = t
def test_item_assignment_runs_as_written():
    # SciPy writes a stored entry into .data and inserts a new one with NumPy calls: traced writes.
    def f(d):
        M = sp.csr_array((d, (I, J)), shape=(4, 4))
        M[0, 1] = 3 * d[2]
        M[3, 0] = d[4]
        return M.toarray()

    def dense(d):
        D = dense_of(d)
        return D + np.where(np.arange(16).reshape(4, 4) == 1, 3 * d[2] - D[0, 1], 0.0) + np.where(
            np.arange(16).reshape(4, 4) == 12, d[4], 0.0)

    np.testing.assert_allclose(f(d7), dense(d7))
    np.testing.assert_allclose(tg.jacobian(f)(d7), tg.jacobian(dense)(d7), atol=1e-14)
    check_grads(f, [d7], batch=2)


def test_in_place_writes_do_not_leak_between_matrices():
    def f(d):
        A = sp.csr_array((d, (I[:2], J[:2])), shape=(4, 4))
        B = A.tocoo().tocsr()  # SciPy's result is a new matrix: writes into it leave A alone
        C = A.copy()
        B.data[0] = 7.0 * B.data[0]
        C.data *= 3.0
        return np.sum(A.toarray() * W) + np.sum(B.toarray()) + np.sum(C.toarray())

    d = d7[:2]
    np.testing.assert_allclose(f(d), W[I[0], J[0]] * d[0] + W[I[1], J[1]] * d[1] + 7 * d[0] + d[1] + 3 * d.sum())
    np.testing.assert_allclose(tg.grad(f)(d), [W[I[0], J[0]] + 10.0, W[I[1], J[1]] + 4.0])


@pytest.mark.parametrize("kind", KINDS)
def test_setdiag_prune_and_comparisons(kind):
    csr = getattr(sp, f"csr_{kind}")
    C = rng.uniform(-1, 1, (4, 4)) * (rng.uniform(size=(4, 4)) < 0.5)

    def laplacian(d):  # a graph Laplacian assembled in place, as users write it
        A = csr((d, (I, J)), shape=(4, 4)) + csr(C)
        A.setdiag(-np.ravel(A.sum(axis=1)))
        A.setdiag(d[:2] ** 2, k=1)  # shorter than the diagonal: the rest stays
        A.prune()
        return A.toarray()

    def dense_laplacian(d):
        A = dense_of(d) + C
        D = -A.sum(axis=1)
        A = A - np.diag(np.diagonal(A)) + np.diag(D)
        E = np.zeros((4, 4))
        E[[0, 1], [1, 2]] = 1.0
        return A * (1 - E) + np.pad(np.diag(d[:2] ** 2), ((0, 2), (1, 1)))[:, :4]

    np.testing.assert_allclose(_dense_any(laplacian(d7)), dense_laplacian(d7), atol=1e-14)
    np.testing.assert_allclose(tg.jacobian(laplacian)(d7), tg.jacobian(dense_laplacian)(d7), atol=1e-13)
    check_grads(laplacian, [d7], batch=2)
    mask = tg.grad(lambda d: np.sum(d * np.ravel((csr((d, (I, J)), shape=(4, 4)) > 0.0).sum(axis=0))[:1]))(d7)
    assert mask.shape == d7.shape
