"""Products with constant SciPy sparse matrices (tapegrad.rules.scipy_sparse).

Every format, both the ``*_array`` and ``*_matrix`` classes: ``A @ x``, ``x @ A``,
``A.T @ x``, ``A.dot(X)``, ``A @ X``, ``A * x`` (a matrix product for ``*_matrix``),
``x * A``, ``A.multiply(D)``, checked against central differences at first and
second order with a batch of cotangents (tapegrad.testing.check_grads) and against
the dense equivalent through NumPy; the constant operator is never densified.
"""

import numpy as np
import pytest
import scipy.sparse as sp

import tapegrad as tg
from tapegrad.errors import NonDifferentiableArgumentError
from tapegrad.testing import check_grads

rng = np.random.default_rng(3)

FORMATS = ["csr", "csc", "coo", "bsr", "dia", "lil", "dok"]
CLASSES = [getattr(sp, f"{fmt}_{kind}") for fmt in FORMATS for kind in ("array", "matrix")]
IDS = [c.__name__ for c in CLASSES]

DENSE = rng.uniform(-1, 1, (5, 4)) * (rng.uniform(size=(5, 4)) < 0.6)
DENSE[0, 0] = 0.7  # at least one entry in every case
x4 = rng.uniform(-1, 1, 4)
y5 = rng.uniform(-1, 1, 5)
X42 = rng.uniform(-1, 1, (4, 2))
D54 = rng.uniform(-1, 1, (5, 4))
Y35 = rng.uniform(-1, 1, (3, 5))


def _make(cls):
    return cls(DENSE)


def _is_matrix(A):
    return not isinstance(A, sp.sparray)


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_products_against_finite_differences(cls):
    A = _make(cls)
    check_grads(lambda x: np.sin(A @ x), [x4])
    check_grads(lambda y: np.sin(y @ A), [y5])
    check_grads(lambda Y: np.sin(Y @ A), [Y35])
    check_grads(lambda y: A.T @ np.sin(y), [y5])
    check_grads(lambda X: np.sin(A.dot(X)), [X42])
    check_grads(lambda X: np.cos(A @ X), [X42])


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_products_against_the_dense_equivalent(cls):
    A = _make(cls)
    J = tg.jacobian(lambda x: A @ x)(x4)
    np.testing.assert_allclose(J, DENSE, atol=1e-15)
    np.testing.assert_allclose(tg.jacobian(lambda y: y @ A)(y5), DENSE.T, atol=1e-15)
    np.testing.assert_allclose(tg.jacobian(lambda y: A.T @ y)(y5), DENSE.T, atol=1e-15)
    # A 2-D operand: the Jacobian batch rides along as extra columns of one sparse product.
    JX = tg.jacobian(lambda X: A @ X)(X42)
    np.testing.assert_allclose(JX, np.einsum("ij,kl->ikjl", DENSE, np.eye(2)), atol=1e-15)
    # Second order: the Hessian of a cubic through A.
    H = tg.hessian(lambda x: np.sum((A @ x) ** 3))(x4)
    np.testing.assert_allclose(H, DENSE.T @ np.diag(6 * (DENSE @ x4)) @ DENSE, atol=1e-12)
    v = rng.uniform(-1, 1, 4)
    hv = tg.hvp(lambda x: np.sum(np.sin(x @ A.T)))(x4, v)
    np.testing.assert_allclose(hv, DENSE.T @ (-np.sin(DENSE @ x4) * (DENSE @ v)), atol=1e-12)


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_star_and_multiply(cls):
    A = _make(cls)
    if _is_matrix(A):
        # For *_matrix, * is the matrix product on either side.
        np.testing.assert_allclose(tg.jacobian(lambda x: A * x)(x4), DENSE, atol=1e-15)
        np.testing.assert_allclose(tg.jacobian(lambda y: y * A)(y5), DENSE.T, atol=1e-15)
        check_grads(lambda x: np.sin(A * x), [x4])
    else:
        # For *_array, * is elementwise (x broadcast along the rows): a sparse result.
        out = tg.jacobian(lambda x: (x * A).toarray())(x4)
        expected = np.einsum("ij,jk->ijk", DENSE, np.eye(4))
        np.testing.assert_allclose(out, expected, atol=1e-15)
        check_grads(lambda x: np.sin((A * x).toarray()), [x4])
    G = tg.grad(lambda D: np.sum(np.sin(A.multiply(D).toarray())))(D54)
    np.testing.assert_allclose(G, np.cos(DENSE * D54) * DENSE, atol=1e-14)
    check_grads(lambda D: A.multiply(D).toarray(), [D54])
    check_grads(lambda D: A.multiply(D) @ x4, [D54])


def test_sums_of_products_and_dense_sums():
    A = sp.csr_array(DENSE)
    check_grads(lambda x: (A + np.outer(y5, x)) @ x, [x4])
    check_grads(lambda x: np.sin(np.outer(y5, x) - A), [x4])
    check_grads(lambda x: (A @ x) @ (A @ x) + x @ (A.T @ (A @ x)), [x4])


@pytest.fixture
def count_densify(monkeypatch):
    """Counts every ``toarray``/``todense`` call on SciPy's sparse classes."""
    calls = []
    from tapegrad.rules.scipy_sparse import _classes

    for klass in _classes():
        for name in ("toarray", "todense"):
            fun = klass.__dict__.get(name)
            if fun is None:
                continue

            def counting(self, *args, _fun=fun, _name=name, **kwargs):
                calls.append((type(self).__name__, _name))
                return _fun(self, *args, **kwargs)

            monkeypatch.setattr(klass, name, counting)
    return calls


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_constant_operators_are_never_densified(cls, count_densify):
    A = _make(cls)
    f = lambda x: np.sum(np.sin(A @ x)) + np.sum(np.cos(A.T @ (A @ x))) + np.sum((x @ A.T) ** 2)
    tg.grad(f)(x4)
    tg.jacobian(lambda x: A @ x)(x4)
    tg.jacobian(lambda X: A.dot(X))(X42)
    tg.hessian(f)(x4)
    tg.hvp(f)(x4, x4)
    assert count_densify == []
    # ... while the counter does see a densification (the test can fail).
    A.toarray()
    assert count_densify


def test_inputs_not_mutated_and_dtypes_kept():
    A = sp.csr_array(DENSE.astype(np.float32))
    before = (A.data.copy(), A.indices.copy(), A.indptr.copy())
    x = x4.astype(np.float32)
    x_before = x.copy()
    g = tg.grad(lambda x: np.sum((A @ x) ** 2))(x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 2 * DENSE.T @ (DENSE @ x4), rtol=1e-5)
    assert tg.jacobian(lambda x: A.T @ x)(y5.astype(np.float32)).dtype == np.float32
    np.testing.assert_array_equal(x, x_before)
    for a, b in zip(before, (A.data, A.indices, A.indptr)):
        np.testing.assert_array_equal(a, b)


def test_complex_operator():
    A = sp.csr_array(DENSE * (1 + 0.5j))
    z = x4 * (1 - 0.25j)
    check_grads(lambda z: A @ z, [z])
    g = tg.grad(lambda x: np.sum(np.abs(A @ x) ** 2))(x4)
    np.testing.assert_allclose(g, 2 * np.real(DENSE.T * (1 + 0.5j) @ np.conj(A @ x4)), atol=1e-12)


def test_numpy_functions_given_a_sparse_matrix_refuse_clearly():
    A = sp.csr_array(DENSE)
    with pytest.raises(TypeError, match="csr_array"):
        tg.grad(lambda x: np.sum(np.dot(A, x)))(x4)
    with pytest.raises(TypeError, match="csr_array"):
        tg.grad(lambda y: np.sum(np.matmul(y, A)))(y5)


def test_rule_module_is_registered():
    from tapegrad import interception

    assert interception.RULE_MODULES["scipy.sparse"] == "tapegrad.rules.scipy_sparse"


def test_without_tracers_scipy_runs_unchanged():
    A = sp.csr_array(DENSE)
    seen = []

    def f(x):
        plain = A @ x4  # no tracer while the tape records: SciPy's own result
        seen.append(plain)
        return np.sum(A @ x)

    tg.grad(f)(x4)
    assert type(seen[0]) is np.ndarray
    np.testing.assert_array_equal(seen[0], sp.csr_array(DENSE) @ x4)


def test_sparse_jacobians_stay_sparse(monkeypatch):
    from tapegrad import sparse_batch

    densified = []
    dense = sparse_batch.SparseCotangent.dense
    monkeypatch.setattr(sparse_batch.SparseCotangent, "dense", lambda self: densified.append(1) or dense(self))
    n = 40
    L = sp.diags_array([np.ones(n - 1), -2 * np.ones(n), np.ones(n - 1)], offsets=[-1, 0, 1], format="csr")
    u = np.linspace(0.0, 1.0, n)

    def residual(u):  # a constant operator and one whose values depend on u
        K = sp.csr_array((np.exp(u), (np.arange(n), np.arange(n))), shape=(n, n))
        return L @ u + K @ u - u ** 3

    J = tg.jacobian(residual, sparse=True)(u)
    assert sp.issparse(J) and J.nnz == L.nnz
    np.testing.assert_array_equal(J.toarray(), tg.jacobian(residual)(u))
    assert densified == []


def test_numpy_functions_given_a_sparse_matrix_beside_a_tracer_say_what_to_write():
    A = sp.csr_array(np.eye(3) * 2.0)
    for f in (lambda x: np.sum(np.dot(A, x)), lambda x: np.sum(np.matmul(x, A))):
        with pytest.raises(NonDifferentiableArgumentError, match=r"numpy\.matmul .* A @ x"):
            tg.grad(f)(np.ones(3))
    np.testing.assert_array_equal(tg.grad(lambda x: np.sum(A @ x) + np.sum(x @ A))(np.ones(3)), np.full(3, 4.0))
