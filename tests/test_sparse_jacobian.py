"""Sparse Jacobians and Hessians (``sparse=True``): every value the dense result's, the structure complete.

Each program is differentiated twice, with ``sparse=True`` and densely, and
the two must agree entry by entry (``np.array_equal``, NaN included).  The
programs that keep the batch sparse are also run with the dense fallback
forbidden (``no_densify``), so the fast paths are what is being compared.
"""

import subprocess
import sys

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.sparse_batch as sb

sp = pytest.importorskip("scipy.sparse")

RNG = np.random.default_rng(24)


@pytest.fixture
def no_densify(monkeypatch):
    """Building a sparse batch's dense array fails: the sweep must stay sparse."""

    def refuse(self):
        raise AssertionError(f"densified {self!r}")

    monkeypatch.setattr(sb.SparseCotangent, "to_array", refuse)


def dense_jacobian(f, x, hessian=False, **kwargs):
    out = (tg.hessian if hessian else tg.jacobian)(f, **kwargs)(x)
    return out


def check(f, x, hessian=False, **kwargs):
    """The sparse result equals the dense one exactly and holds every nonzero; returns it."""
    x_before = np.array(x, copy=True)
    J = (tg.hessian if hessian else tg.jacobian)(f, sparse=True, **kwargs)(x)
    np.testing.assert_array_equal(x, x_before)  # the input is not written to
    D = np.asarray(dense_jacobian(f, x, hessian))
    assert isinstance(J, sp.csr_array)
    assert J.shape == (D.size // np.size(x), np.size(x))
    D = D.reshape(J.shape)
    A = J.toarray()
    assert A.dtype == D.dtype
    assert np.array_equal(A, D, equal_nan=True), np.argwhere(~((A == D) | (np.isnan(A) & np.isnan(D))))[:5]
    stored = np.zeros(J.shape, dtype=bool)
    stored[np.repeat(np.arange(J.shape[0]), np.diff(J.indptr)), J.indices] = True
    assert not ((D != 0) & ~stored).any()  # no missing nonzero (NaN != 0 counts as one)
    return J


def bratu(u, lam=6.0):
    U = np.pad(u, 1)
    lap = U[2:, 1:-1] + U[:-2, 1:-1] + U[1:-1, 2:] + U[1:-1, :-2] - 4 * U[1:-1, 1:-1]
    return lap * 900.0 + lam * np.exp(u)


def gl_energy(u):
    dx = u[1:, :] - u[:-1, :]
    dy = u[:, 1:] - u[:, :-1]
    return 0.5 * np.sum(dx * dx) + 0.5 * np.sum(dy * dy) + 0.075 * np.sum((1 - u * u) ** 2)


EDGES_I = np.array([0, 1, 2, 3, 4, 5, 6, 0, 2, 2, 7, 3])
EDGES_J = np.array([1, 2, 3, 4, 5, 6, 7, 7, 5, 5, 1, 0])


def graph_forces(x):
    d = x[EDGES_I] - x[EDGES_J]
    f = d + d**3
    out = np.zeros_like(x)
    np.add.at(out, EDGES_I, f)
    np.add.at(out, EDGES_J, -f)
    return out + 0.1 * np.sin(x)


def reaction_diffusion(y, a=1.0, b=3.0, c=4.0):
    m = y.size // 2
    u, v = y[:m], y[m:]
    lap_u = np.roll(u, 1) - 2 * u + np.roll(u, -1)
    lap_v = np.roll(v, 1) - 2 * v + np.roll(v, -1)
    uuv = u * u * v
    return np.concatenate([a + uuv - (b + 1) * u + c * lap_u, b * u - uuv + c * lap_v])


MESH_EDGES = np.array([[0, 1], [1, 2], [2, 3], [3, 0], [0, 2], [4, 5], [5, 6], [6, 7], [7, 4], [1, 5], [3, 7], [2, 6]])


def spring_lengths(x):
    """Edge lengths of a small 3-D mesh, written as mesh codes write them (``norm`` of gathered differences)."""
    p = x.reshape(-1, 3)
    return np.linalg.norm(p[MESH_EDGES[:, 0]] - p[MESH_EDGES[:, 1]], axis=1)


TRIANGLES = np.array([[0, 1, 2], [0, 2, 3], [4, 5, 6], [4, 6, 7], [0, 1, 5], [0, 5, 4], [2, 3, 7], [2, 7, 6]])
TETRAHEDRA = np.array([[0, 1, 2, 5], [0, 2, 3, 7], [4, 5, 6, 1], [2, 6, 7, 5]])


def surface_area(x):
    """Area of a triangulated surface: half the norm of a cross product per triangle."""
    p = x.reshape(-1, 3)
    a, b, c = p[TRIANGLES[:, 0]], p[TRIANGLES[:, 1]], p[TRIANGLES[:, 2]]
    return np.sum(0.5 * np.linalg.norm(np.cross(b - a, c - a), axis=1))


def tetrahedron_volumes(x):
    """Signed volumes of tetrahedra from 3 x 3 determinants (a mesh-quality term)."""
    p = x.reshape(-1, 3)
    t = TETRAHEDRA
    edges = np.stack([p[t[:, 1]] - p[t[:, 0]], p[t[:, 2]] - p[t[:, 0]], p[t[:, 3]] - p[t[:, 0]]], axis=1)
    return np.linalg.det(edges) / 6.0


ELEMENT_MATRICES = RNG.standard_normal((len(TRIANGLES), 3, 3))
ELEMENT_MATRICES = ELEMENT_MATRICES + ELEMENT_MATRICES.transpose(0, 2, 1)


def fem_energy(u):
    """A finite-element energy: element matrices applied with ``einsum``, as FEM codes assemble."""
    ue = u[TRIANGLES]
    return 0.5 * np.sum(ue * np.einsum("eij,ej->ei", ELEMENT_MATRICES, ue)) + 0.25 * np.sum(u**4)


def fem_energy_three_operands(u):
    ue = u[TRIANGLES]
    return 0.5 * np.sum(np.einsum("ei,eij,ej->e", ue, ELEMENT_MATRICES, ue)) + 0.25 * np.sum(u**4)


def fem_residual(u):
    """The matching residual, assembled with ``np.add.at``."""
    forces = np.einsum("eij,ej->ei", ELEMENT_MATRICES, u[TRIANGLES])
    out = np.zeros_like(u)
    np.add.at(out, TRIANGLES, forces)
    return out + u**3


def spring_energy_einsum(x):
    """The same mesh's spring energy with squared lengths from ``einsum`` (a row-wise dot product)."""
    p = x.reshape(-1, 3)
    d = p[MESH_EDGES[:, 0]] - p[MESH_EDGES[:, 1]]
    return np.sum((np.sqrt(np.einsum("ij,ij->i", d, d)) - 1.0) ** 2)


# ------------------------------------------------------------------ programs that stay sparse
SPARSE_PROGRAMS = {
    "bratu": (bratu, lambda: 0.1 * RNG.random((30, 30))),
    "elementwise": (lambda x: np.sin(x) * x + np.exp(x) / (1 + x * x) - np.sqrt(x) ** 3, lambda: RNG.random(9) + 0.1),
    "pad_edge": (lambda u: np.diff(np.pad(u, 2, mode="edge"), axis=0)[1:-2, 2:-2] * u, lambda: RNG.random((5, 4))),
    "pad_reflect": (lambda u: np.pad(u, (1, 3), mode="reflect") ** 2, lambda: RNG.random(6)),
    "pad_wrap": (lambda u: np.pad(u, ((1, 0), (2, 2)), mode="wrap") * 2.0, lambda: RNG.random((3, 4))),
    "pad_symmetric": (lambda u: np.pad(u, 2, mode="symmetric")[1:] - 1.0, lambda: RNG.random(5)),
    "pad_constant": (lambda u: np.pad(u, ((0, 2), (1, 1)), constant_values=3.0) * np.cos(np.pad(u, ((2, 0), (1, 1)))), lambda: RNG.random((4, 3))),
    "strided_slices": (lambda x: x[::2] * x[1::2] + x[::-1][:4] * x[2:6], lambda: RNG.random(8)),
    "fancy_repeats": (lambda x: x[np.array([3, 0, 3, 1, 1, 4])] ** 2 + x[[0, 1, 2, 3, 4, 0]], lambda: RNG.random(5)),
    "boolean_mask": (lambda x: np.exp(x[x > 0.5]), lambda: RNG.random(10)),
    "add_at": (graph_forces, lambda: RNG.standard_normal(8)),
    "roll": (lambda x: np.roll(x, 2, axis=1) * x + np.roll(x, -1, axis=0) ** 2, lambda: RNG.random((3, 4))),
    "roll_flat": (lambda x: np.roll(x, 3) * x, lambda: RNG.random((3, 4))),
    "reshape_transpose": (lambda x: x.reshape(3, 4).T.reshape(2, 6) * np.arange(12.0).reshape(2, 6), lambda: RNG.random(12)),
    "swap_move": (lambda x: np.swapaxes(x, 0, 2) * np.moveaxis(x, 0, -1).transpose(1, 0, 2), lambda: RNG.random((2, 3, 4))),
    "flip": (lambda x: np.flip(x, axis=1) * x + np.flipud(x), lambda: RNG.random((3, 4))),
    "sum_short_axis": (lambda x: np.sum(x * x, axis=1) + x[:, 0] * np.sum(x, axis=1), lambda: RNG.standard_normal((5, 6)) * 1e3),
    "sum_keepdims_broadcast": (lambda x: x / np.sum(x * x, axis=0, keepdims=True), lambda: RNG.random((4, 3))),
    "concatenate_stack": (lambda x: np.concatenate([x[1:] * 2, np.sin(x[:2]), np.stack([x[0], x[-1]])]), lambda: RNG.random(6)),
    "where_maximum": (lambda x: np.where(x > 0.5, x**2, 0.0) + np.maximum(x, 0.5) + np.minimum(x, x[::-1]), lambda: np.array([0.1, 0.5, 0.7, 0.9, 0.5, 0.2])),
    "reaction_diffusion": (reaction_diffusion, lambda: RNG.random(12)),
    "output_2d": (lambda x: np.outer(x, np.ones(3)) * x[:, None], lambda: RNG.random(4)),
    "float32": (lambda x: np.exp(x) * x[::-1] + np.float32(2) * x, lambda: RNG.random(6).astype(np.float32)),
    "empty_structure": (lambda x: graph_forces(np.where(x > 10, x, 0.0)) + np.sum(np.where(x > 10, x, 0.0)[:4]), lambda: RNG.random(8)),
    "split": (lambda y: np.concatenate([np.split(y, 2)[0] * np.split(y, 2)[1], np.split(y, 2)[0] ** 2]), lambda: RNG.random(8)),
    "split_unused_part": (lambda y: np.split(y.reshape(3, 4), [1, 3], axis=1)[2] * 2.0, lambda: RNG.random(12)),
    "division": (lambda x: 1.0 / x + x / (x[::-1] + 2.0), lambda: RNG.random(7) + 0.5),
    "norm_springs": (lambda x: spring_lengths(x) - 1.0, lambda: RNG.standard_normal(24)),
    "norm_keepdims_ord": (
        lambda x: np.linalg.norm(x.reshape(4, 3), axis=0, keepdims=True) * x.reshape(4, 3)
        + np.linalg.norm(x.reshape(4, 3), ord=3, axis=1)[:, None],
        lambda: RNG.standard_normal(12),
    ),
    "einsum_products": (
        lambda x: np.einsum("ij,ij->i", x.reshape(4, 3), x.reshape(4, 3)[::-1])
        + np.einsum("ij,j->i", x.reshape(4, 3), np.arange(1.0, 4.0))
        + np.einsum("ij,i->j", x.reshape(4, 3) ** 2, np.arange(4.0))[[0, 1, 2, 0]],
        lambda: RNG.standard_normal(12),
    ),
    "tetrahedron_volumes": (tetrahedron_volumes, lambda: RNG.standard_normal(24)),
    "fem_residual": (fem_residual, lambda: RNG.standard_normal(8)),
    "prod_rows": (
        lambda x: np.prod(x.reshape(4, 3), axis=1) + np.prod(x.reshape(4, 3), axis=0, keepdims=True).ravel()[[0, 1, 2, 0]],
        lambda: RNG.standard_normal(12),
    ),
    "prod_with_zeros_where_initial": (
        lambda x: np.prod(np.where(x > 0.3, x, 0.0).reshape(4, 3), axis=1, initial=2.0, where=np.array([True, False, True])),
        lambda: RNG.standard_normal(12),
    ),
    "vecdot_rows": (lambda x: np.vecdot(x.reshape(4, 3), x.reshape(4, 3)[::-1]) * x[:4], lambda: RNG.standard_normal(12)),
    "einsum_transposed_output": (
        lambda x: np.einsum("ijk,kj->kji", x.reshape(2, 3, 2), np.arange(6.0).reshape(2, 3)).ravel() * x,
        lambda: RNG.standard_normal(12),
    ),
}


@pytest.mark.parametrize("name", sorted(SPARSE_PROGRAMS))
def test_sparse_jacobian_equals_dense(name):
    f, make_x = SPARSE_PROGRAMS[name]
    check(f, make_x())


@pytest.mark.parametrize("name", sorted(set(SPARSE_PROGRAMS) - {"output_2d"}))
def test_structured_programs_never_densify(name, no_densify):
    f, make_x = SPARSE_PROGRAMS[name]
    x = make_x()
    J = tg.jacobian(f, sparse=True)(x)
    assert J.nnz <= J.shape[0] * J.shape[1]


def test_bratu_structure_is_the_five_point_stencil(no_densify):
    J = tg.jacobian(bratu, sparse=True)(0.1 * RNG.random((30, 30)))
    assert J.shape == (900, 900)
    # 5 per interior row, 4 on edges, 3 at corners.
    assert J.nnz == 900 * 5 - 4 * 30
    row = np.diff(J.indptr)
    assert row.max() == 5 and row.min() == 3


def test_columns_match_stacked_vjps():
    """The plainest computation: one VJP per output row."""
    x = 0.1 * RNG.random((6, 5))
    J = tg.jacobian(bratu, sparse=True)(x).toarray()
    y, pullback = tg.vjp(bratu, x)
    for r in range(y.size):
        e = np.zeros(y.size)
        e[r] = 1.0
        (row,) = pullback(e.reshape(y.shape))
        np.testing.assert_array_equal(J[r], row.ravel())


# ------------------------------------------------------------------ sums whose order matters
def test_long_sums_follow_numpys_pairwise_order():
    """Rows of 40 terms with cancellation: NumPy sums them pairwise, and so must the result."""
    x = RNG.standard_normal((3, 40)) * 10.0 ** RNG.integers(-8, 8, (3, 40))

    def f(x):
        s = np.sum(x * np.exp(x * 1e-9), axis=1, keepdims=True)
        # The cotangent of the broadcast s adds 40 entries of one batch row (un-broadcasting in the sweep).
        return np.sum(x * s, axis=1) + np.sum(x * s, axis=0)[:3]

    check(f, x)
    check(lambda x: np.sum(f(x) ** 2), x, hessian=True)


def test_scatter_add_of_many_terms_in_index_order():
    idx = np.array([0] * 12 + [1] * 3 + [2])
    vals = RNG.standard_normal(16) * 10.0 ** RNG.integers(-8, 8, 16)

    def f(x):
        out = np.zeros(3)
        out = out + 0 * x[:3]
        np.add.at(out, idx, x * vals)
        return out

    check(f, RNG.standard_normal(16))


# ------------------------------------------------------------------ NaN and inf
def test_nan_and_inf_entries_equal_dense():
    x = np.array([0.0, 1.0, 4.0, 0.0, 2.0])

    def f(x):
        return np.sqrt(x) * x[::-1] + np.log(x) * 2.0 + x[[1, 1, 2, 3, 4]]

    with np.errstate(all="ignore"):
        J = check(f, x)
    assert np.isnan(J.toarray()).any() or np.isinf(J.toarray()).any()


def test_zero_times_inf_inside_where():
    x = np.array([0.0, 0.3, 2.0, 0.0])

    def f(x):
        return np.where(x > 0.1, np.sqrt(x), 0.0) + x * x[::-1]

    with np.errstate(all="ignore"):
        check(f, x)


# ------------------------------------------------------------------ dense fallback
A = RNG.standard_normal((40, 40))


def test_dense_matmul_densifies_correctly():
    check(lambda x: A @ np.tanh(x), np.linspace(-1, 1, 40))


def test_densify_in_row_chunks(monkeypatch):
    """A bound on the dense batch smaller than the whole: the rows are swept in chunks, same numbers."""
    monkeypatch.setattr(sb, "MAX_DENSE_BYTES", 40 * 8 * 7)  # at most 7 dense rows of 40 entries
    calls = []
    import tapegrad.sparsity as sparsity

    real = sparsity.backward

    def counting(*args, **kwargs):
        calls.append(args[4])
        return real(*args, **kwargs)

    monkeypatch.setattr(sparsity, "backward", counting)
    check(lambda x: np.sin(A @ np.tanh(x)) + x, np.linspace(-1, 1, 40))
    assert len(calls) > 2 and max(b[0] for b in calls[1:]) <= 7


def test_chunk_size_gives_the_same_result():
    x = 0.1 * RNG.random((8, 8))
    whole = tg.jacobian(bratu, sparse=True)(x)
    chunked = tg.jacobian(bratu, sparse=True, chunk_size=7)(x)
    assert np.array_equal(whole.toarray(), chunked.toarray())


# ------------------------------------------------------------------ Hessians
HESSIAN_PROGRAMS = {
    "ginzburg_landau": (gl_energy, lambda: RNG.standard_normal((6, 7))),
    "graph_energy": (lambda x: np.sum((x[EDGES_I] - x[EDGES_J]) ** 4) + np.sum(np.cos(x)), lambda: RNG.standard_normal(8)),
    "chain": (lambda x: np.sum((x[1:] - x[:-1] ** 2) ** 2) + np.sum(np.exp(x) * x), lambda: RNG.random(9)),
    "rolled_products": (lambda x: np.sum(x * np.roll(x, 1) * np.roll(x, -2)), lambda: RNG.random(7)),
    "pad_stencil_energy": (lambda u: np.sum(bratu(u) ** 2), lambda: 0.1 * RNG.random((5, 5))),
    "mesh_springs_norm": (lambda x: np.sum((spring_lengths(x) - 1.0) ** 2), lambda: RNG.standard_normal(24)),
    "mesh_springs_einsum": (spring_energy_einsum, lambda: RNG.standard_normal(24)),
    "surface_area": (surface_area, lambda: RNG.standard_normal(24)),
    "fem_energy": (fem_energy, lambda: RNG.standard_normal(8)),
    "prod_rows": (lambda x: np.sum(np.prod(x.reshape(6, 4), axis=1) ** 2), lambda: RNG.standard_normal(24)),
    "fem_energy_three_operands": (fem_energy_three_operands, lambda: RNG.standard_normal(8)),
    "volume_penalty": (lambda x: np.sum(tetrahedron_volumes(x) ** 2), lambda: RNG.standard_normal(24)),
    "row_statistics": (
        lambda x: np.sum(np.var(x.reshape(6, 4), axis=1) + np.sort(x.reshape(6, 4), axis=1)[:, -1] ** 2)
        + np.sum(np.abs(np.clip(x, -0.5, 0.5)) ** 3),
        lambda: RNG.standard_normal(24),
    ),
    "log_sum_exp_rows": (
        lambda x: np.sum(np.log(np.sum(np.exp(x.reshape(6, 4) - np.max(x.reshape(6, 4), axis=1, keepdims=True)), axis=1))),
        lambda: RNG.standard_normal(24),
    ),
    "einsum_long_sum": (
        lambda x: np.sum(np.sqrt(np.einsum("ij,ij->i", x.reshape(3, 40), x.reshape(3, 40)) + 1.0)),
        lambda: RNG.standard_normal(120),
    ),
}


@pytest.mark.parametrize("name", ["mesh_springs_norm", "mesh_springs_einsum"])
def test_mesh_hessians_stay_sparse(name, no_densify):
    x = RNG.standard_normal(24)
    H = tg.hessian(HESSIAN_PROGRAMS[name][0], sparse=True)(x)
    assert H.nnz == 8 * 9 + 12 * 2 * 9  # a 3 x 3 block per vertex and two per edge


@pytest.mark.parametrize("name", ["surface_area", "row_statistics", "log_sum_exp_rows", "fem_energy",
                                  "fem_energy_three_operands", "prod_rows"])
def test_more_hessians_stay_sparse(name, no_densify):
    f, make_x = HESSIAN_PROGRAMS[name]
    H = tg.hessian(f, sparse=True)(make_x())
    assert H.nnz < H.shape[0] * H.shape[1]


@pytest.mark.parametrize("name", sorted(HESSIAN_PROGRAMS))
def test_sparse_hessian_equals_dense(name):
    f, make_x = HESSIAN_PROGRAMS[name]
    H = check(f, make_x(), hessian=True)
    assert H.shape[0] == H.shape[1]


def test_ginzburg_landau_hessian_stays_sparse(no_densify):
    H = tg.hessian(gl_energy, sparse=True)(RNG.standard_normal((10, 10)))
    assert H.nnz == 100 * 5 - 4 * 10


def test_hessian_matches_finite_differences_of_the_gradient():
    u = RNG.standard_normal((4, 5))
    H = tg.hessian(gl_energy, sparse=True)(u).toarray()
    g = tg.grad(gl_energy)
    eps = 1e-6
    for j in range(u.size):
        e = np.zeros(u.size)
        e[j] = eps
        col = (g(u + e.reshape(u.shape)) - g(u - e.reshape(u.shape))).ravel() / (2 * eps)
        np.testing.assert_allclose(H[:, j], col, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ API
def test_argnums_has_aux_and_tape():
    def f(x, y):
        return np.sin(x) * y[:3] + x[::-1], np.sum(x)

    x, y = RNG.random(3), RNG.random(4)
    (jx, jy), aux = tg.jacobian(f, argnums=(0, 1), has_aux=True, sparse=True)(x, y)
    dx, dy = tg.jacobian(lambda x, y: f(x, y)[0], argnums=(0, 1))(x, y)
    assert np.array_equal(jx.toarray(), dx) and np.array_equal(jy.toarray(), dy)
    assert aux == pytest.approx(np.sum(x))
    with tg.GradientTape() as tape:
        xt = tape.watch(x)
        out = np.exp(xt) * xt[::-1]
    J = tape.jacobian(out, xt, sparse=True)
    assert np.array_equal(J.toarray(), tg.jacobian(lambda x: np.exp(x) * x[::-1])(x))


def test_jacobian_sparsity():
    from tapegrad.sparsity import jacobian_sparsity

    P = jacobian_sparsity(bratu)(0.1 * RNG.random((5, 5)))
    assert P.dtype == bool and P.nnz == 25 * 5 - 4 * 5
    H = jacobian_sparsity(gl_energy, hessian=True)(RNG.standard_normal((4, 6)))
    assert H.shape == (24, 24) and H.nnz == 24 * 5 - 2 * (4 + 6)


def test_scalar_output_and_unconnected_input():
    J = tg.jacobian(lambda x, y: np.sum(x * x), argnums=(0, 1), sparse=True)(np.arange(3.0), np.ones(2))
    assert J[0].shape == (1, 3) and np.array_equal(J[0].toarray(), [[0.0, 2.0, 4.0]])
    assert J[1].shape == (1, 2) and J[1].nnz == 0


def test_errors():
    with pytest.raises(TypeError, match="one array"):
        tg.jacobian(lambda x: (x, x), sparse=True)(np.ones(2))
    with pytest.raises(ValueError, match="reverse"):
        tg.jacobian(np.sin, sparse=True, mode="forward")
    with pytest.raises(TypeError, match="argument number"):
        tg.hessian(np.sum, argnums=(0,), sparse=True)


def test_import_tapegrad_does_not_import_scipy():
    code = "import sys, tapegrad; assert not any(m == 'scipy' or m.startswith('scipy.') for m in sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", sorted(SPARSE_PROGRAMS) + ["hessian_" + n for n in sorted(HESSIAN_PROGRAMS)])
def test_lazy_sums_give_the_same_numbers(name, monkeypatch):
    """Large batches add the uses of a value all at once (sparse_batch._LAZY): force that path on small ones."""
    monkeypatch.setattr(sb, "_LAZY", 0)
    if name.startswith("hessian_"):
        f, make_x = HESSIAN_PROGRAMS[name[len("hessian_") :]]
        check(f, make_x(), hessian=True)
    else:
        f, make_x = SPARSE_PROGRAMS[name]
        check(f, make_x())


def test_scatter_with_a_few_shared_targets():
    """Most slots go to their own target, a few share one (np.pad's constant fill): both kinds in one scatter."""
    x = RNG.random((40, 40))

    def f(u):
        return np.pad(u, 1, constant_values=0.5)[:-2, 1:-1] * np.pad(u, 1)[2:, 2:]

    check(f, x)


def test_one_entry_per_row_product_and_widening_factors(no_densify):
    """``A @ tanh(x)`` from the seed (one entry per row) and ``g[..., None] * y`` stay off the dense batch."""
    B = RNG.standard_normal((6, 5))
    x = RNG.random(5)
    check(lambda x: B @ np.tanh(x), x)
    check(lambda x: np.dot(x, x[::-1]) * x + np.mean(x) + np.max(x), x)


def test_product_with_inf_is_the_dense_product():
    B = RNG.standard_normal((4, 4))
    B[1, 2] = np.inf
    with np.errstate(all="ignore"):
        check(lambda x: B @ np.tanh(x), RNG.random(4))


# ------------------------------------------------------------------ random programs
_B4 = RNG.standard_normal((4, 4))
_E455 = RNG.standard_normal((4, 5, 5))
_AT_ROWS, _AT_COLS = np.array([0, 1, 1, 3, 0]), np.array([2, 2, 4, 0, 2])


def _scatter_rows(a):
    out = np.zeros_like(a)
    np.add.at(out, (_AT_ROWS, _AT_COLS), a[[0, 1, 2, 3, 3], [1, 1, 0, 4, 2]] ** 2)
    return out + a


STEPS = [
    lambda a: np.sin(a) * a,
    lambda a: np.pad(a, 1)[1:-1, :-2] + a,
    lambda a: np.pad(a, ((1, 0), (0, 2)), mode="edge")[:-1, 2:] * a,
    lambda a: np.roll(a, 1, axis=0) * a,
    lambda a: a.T.T[::-1] + a,
    lambda a: a[:, [0, 2, 2, 1, 0]] - a,
    lambda a: a * np.sum(a * a, axis=1, keepdims=True),
    lambda a: np.where(a > 0.3, a, a**2),
    lambda a: np.maximum(a, a[::-1]),
    lambda a: np.exp(-a) + np.sqrt(a * a + 1),
    lambda a: np.concatenate([a[:, 1:], a[:, :1] * 2], axis=1),
    _scatter_rows,
    lambda a: a.reshape(5, 4).T.reshape(4, 5) * 1.5,
    lambda a: a / (1 + a * a),
    lambda a: np.mean(a, axis=0) * a,
    lambda a: _B4 @ a,
    lambda a: np.stack([a[0], a[2], a[1], a[3]]) * a,
    lambda a: np.sum(a, axis=0) + a,
    lambda a: np.linalg.norm(a, axis=1, keepdims=True) + a,
    lambda a: np.einsum("ij,ij->i", a, a[::-1])[:, None] * a,
    lambda a: np.einsum("ij,ijk->ik", a, _E455) * a,  # a per-row matrix, as finite elements apply
]


@pytest.mark.parametrize("seed", range(30))
def test_random_programs_first_and_second_order(seed, monkeypatch):
    if seed % 2:
        monkeypatch.setattr(sb, "_LAZY", 0)  # every sum of batches added lazily
    rng = np.random.default_rng(seed)
    chain = [STEPS[k] for k in rng.integers(0, len(STEPS), 4)]

    def f(x):
        for step in chain:
            x = step(x)
        return x

    x = rng.random((4, 5))
    check(f, x)
    check(lambda x: np.sum(f(x) ** 2), x, hessian=True)


def test_sum_of_lazy_sums_keeps_the_grouping(monkeypatch):
    """``(a + b) + (c + d)`` is not ``((a + b) + c) + d`` in floating point: the batches keep the grouping."""
    monkeypatch.setattr(sb, "_LAZY", 0)
    S = sb.SparseCotangent
    a = S((3, 4), np.array([0, 1, 2]), np.array([0, 1, 2]), np.array([1.0, 2.0, 3.0]))
    b = S((3, 4), np.array([0, 1]), np.array([1, 1]), np.array([1e16, 5.0]))
    c = S((3, 4), np.array([0, 2]), np.array([1, 3]), np.array([-1e16, 7.0]))
    d = S((3, 4), np.array([0]), np.array([1]), np.array([1.0]))
    for got, want in (
        ((a + b) + (c + d), (a.dense() + b.dense()) + (c.dense() + d.dense())),
        ((a + b) - (c + d), (a.dense() + b.dense()) - (c.dense() + d.dense())),
        (((a + b) + c) + d, ((a.dense() + b.dense()) + c.dense()) + d.dense()),
    ):
        assert np.array_equal(got.to_array(), want)


def test_hub_node_scatter_add_first_and_second_order():
    """A node with 20 edges: np.add.at sums 20 terms per result (NumPy's pairwise order in the Hessian)."""
    hub_i = np.concatenate([np.zeros(20, dtype=int), np.arange(1, 8)])
    hub_j = np.concatenate([np.arange(1, 21), np.arange(2, 9)])
    scale = 10.0 ** RNG.integers(-6, 6, hub_i.size)

    def forces(x):
        d = (x[hub_i] - x[hub_j]) * scale
        out = np.zeros_like(x)
        np.add.at(out, hub_i, d**3)
        np.add.at(out, hub_j, -d)
        return out

    x = RNG.standard_normal(21)
    check(forces, x)
    check(lambda x: np.sum(forces(x) ** 2), x, hessian=True)


def test_long_segment_sums_in_a_hessian_use_numpys_order(monkeypatch):
    """Segments of 12 terms summed in the Hessian's sweep: rows with such sums go through NumPy's own reduceat."""
    used = []
    real = sb.SparseCotangent.rows_dense
    monkeypatch.setattr(sb.SparseCotangent, "rows_dense", lambda self, which: used.append(which.size) or real(self, which))
    w = 10.0 ** RNG.integers(-6, 6, 20)

    def f(x):
        v = x * x * w + np.roll(x, 1) * 3.0 + np.roll(x, 2) * 1e-3  # a Hessian row meets 3 slots of a segment
        return np.sum(np.add.reduceat(v, [0, 12, 15]) ** 2)

    check(f, RNG.standard_normal(20), hessian=True)
    assert used  # the dense-row path ran


def test_fancy_index_keeps_the_dense_sweeps_layout():
    """``g[:, idx]`` puts the batch axis innermost in memory, and the numbers can depend on it.

    On such an array every NumPy sums over a value axis one term after the other
    (not pairwise), and NumPy < 2.3's ``matmul`` takes its own loop instead of
    BLAS.  The sparse batch's dense array has the dense sweep's layout, and its
    sums are the dense sweep's.
    """
    S = sb.SparseCotangent
    rows = np.repeat(np.arange(4), 12)
    cols = np.tile(np.arange(12), 4)
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((4, 12)) * 10.0 ** rng.integers(0, 17, (4, 12))).ravel()  # sums that depend on the order
    g = S((4, 12), rows, cols, data)
    idx = np.arange(12)[::-1].reshape(3, 4)
    dense = g.dense()[:, idx]
    gathered = g[:, idx]
    assert type(gathered) is S
    assert gathered.dense().strides == dense.strides  # batch axis innermost, as NumPy's
    summed = np.sum(gathered, axis=(1, 2))
    assert np.array_equal(np.asarray(summed), np.sum(dense, axis=(1, 2)))
    assert np.array_equal(np.asarray(np.sum(gathered, axis=2)), np.sum(dense, axis=2))
    B = RNG.standard_normal((3, 3))
    assert np.array_equal(B.T @ gathered, B.T @ dense)


def test_hessian_through_a_fancy_index_and_a_matmul():
    """The dense sweep's cotangent reaches ``B @ a``'s rule batch-last (from ``np.pad``'s edge gather)."""
    f = lambda a: _B4 @ (np.pad(a, ((1, 0), (0, 2)), mode="edge")[:-1, 2:] * a)  # noqa: E731
    for seed in (25, 3, 11):
        check(lambda x: np.sum(f(x) ** 2), np.random.default_rng(seed).random((4, 5)), hessian=True)


def test_a_dense_jacobian_asked_sparse_peaks_under_three_jacobians():
    # Issue 31: sparse=True on a problem that is not sparse (A @ tanh(x)) must not hold
    # the Jacobian's rows several times over (it peaked at 4.6x the Jacobian's bytes).
    import tracemalloc

    n = 600
    rng = np.random.default_rng(31)
    A = rng.normal(size=(n, n))
    x = rng.normal(size=n)

    def f(x):
        return A @ np.tanh(x)

    tracemalloc.start()
    try:
        J = tg.jacobian(f, sparse=True)(x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    dense = A * (1 - np.tanh(x) ** 2)
    np.testing.assert_array_equal(J.toarray(), tg.jacobian(f)(x))
    np.testing.assert_allclose(J.toarray(), dense, rtol=1e-13, atol=1e-15)
    assert peak <= 3 * dense.nbytes, peak / dense.nbytes
