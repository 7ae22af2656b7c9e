"""Contractions: einsum, tensordot, dot, vdot, inner, outer, kron, cross, trace, diagonal, vecdot, ..."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad.errors import GradientDroppedError
from tapegrad.testing import check_grads

# Plain arrays made before any tape records: np.zeros & co. called inside a differentiated
# function give traced constants (tapegrad.buffers), so the refusals below need these.
_PLAIN_4x3 = np.zeros((4, 3))
_PLAIN_3x2 = np.zeros((3, 2))

RNG = np.random.default_rng(20240611)


def rand(*shape):
    return RNG.standard_normal(shape)


def check(fun, *args, order=2):
    """Traced value equals NumPy's, and derivatives match finite differences."""
    traced, _ = tg.vjp(fun, *args)
    plain = fun(*args)
    for t, p in zip(traced if isinstance(plain, tuple) else [traced], plain if isinstance(plain, tuple) else [plain]):
        np.testing.assert_allclose(t, p, rtol=1e-12, atol=1e-12)
        assert np.shape(t) == np.shape(p)
    check_grads(fun, args, order=order)


# ---------------------------------------------------------------- einsum
EINSUM_CASES = [
    ("ij,jk->ik", (3, 4), (4, 5)),
    ("ij,jk", (3, 4), (4, 5)),  # implicit output
    ("ba", (3, 4)),  # implicit output sorts labels: a transpose
    ("ij,jk,kl->il", (2, 3), (3, 4), (4, 2)),
    ("ij,jk,ki->", (2, 3), (3, 4), (4, 2)),
    ("ii->i", (4, 4)),
    ("ii", (4, 4)),  # trace
    ("iji->j", (3, 2, 3)),
    ("iii->i", (3, 3, 3)),
    ("iij->ij", (3, 3, 2)),
    ("ij->", (3, 4)),
    ("ij->j", (3, 4)),
    ("i,i", (5,), (5,)),
    ("i,j->ij", (3,), (4,)),
    (",ij->ij", (), (2, 3)),
    ("...j,jk->...k", (2, 3, 4), (4, 5)),
    ("...ij,...jk->...ik", (2, 3, 4), (4, 2)),  # ellipsis broadcast against nothing
    ("i...,...->...i", (2, 3), (1,)),  # size-1 ellipsis broadcast
    ("...", (2, 3)),
    ("bij,bjk->bik", (2, 3, 4), (2, 4, 5)),
    ("ijk,kji->", (2, 3, 4), (4, 3, 2)),
    ("ij,ij->i", (3, 4), (3, 4)),
    ("ij,i->ij", (1, 4), (3,)),  # size-1 label broadcast
    ("ii,ij->j", (3, 3), (3, 2)),
    ("i,ii,i->", (3,), (3, 3), (3,)),
    ("aBc,cB->aB", (2, 3, 4), (4, 3)),  # upper-case labels
]


@pytest.mark.parametrize("optimize", [False, True, "greedy", "optimal"])
@pytest.mark.parametrize("case", EINSUM_CASES, ids=[c[0] or "scalar" for c in EINSUM_CASES])
def test_einsum(case, optimize):
    spec, shapes = case[0], case[1:]
    args = [rand(*s) for s in shapes]
    check(lambda *ops: np.einsum(spec, *ops, optimize=optimize), *args, order=2 if optimize in (False, True) else 1)


def test_einsum_explicit_path():
    a, b, c = rand(2, 3), rand(3, 4), rand(4, 2)
    path = np.einsum_path("ij,jk,kl->il", a, b, c, optimize="optimal")[0]
    check(lambda *ops: np.einsum("ij,jk,kl->il", *ops, optimize=path), a, b, c)


def test_einsum_interleaved_form():
    a, b = rand(3, 4), rand(4, 5)
    check(lambda x, y: np.einsum(x, [0, 1], y, [1, 2]), a, b)
    check(lambda x, y: np.einsum(x, [0, 1], y, [1, 2], [2, 0]), a, b)
    check(lambda x: np.einsum(x, [Ellipsis, 30, 30]), rand(2, 3, 3))
    check(lambda x: np.einsum(x, [40, 0]), a)  # implicit order follows the sublist numbers


def test_einsum_same_operand_twice_and_constant_operand():
    a = rand(3, 4)
    check(lambda x: np.einsum("ij,ij->", x, x), a)
    w = rand(4, 2)
    check(lambda x: np.einsum("ij,jk->ik", x, w), a)
    check(lambda x: np.einsum("ij,jk->ik", w.T, x), rand(4, 3))


def test_einsum_closed_forms():
    a, b = rand(4, 4), rand(4, 4)
    np.testing.assert_allclose(tg.grad(lambda x: np.einsum("ii", x))(a), np.eye(4))
    np.testing.assert_allclose(tg.grad(lambda x: np.einsum("ij,ji", x, b))(a), b.T)
    # Diagonal extraction: cotangent lands only on the diagonal.
    g = tg.grad(lambda x: np.sum(np.einsum("ii->i", x) * np.arange(4.0)))(a)
    np.testing.assert_allclose(g, np.diag(np.arange(4.0)))


def test_einsum_float32_and_dtype():
    a, b = rand(3, 4).astype(np.float32), rand(4, 2).astype(np.float32)
    g = tg.grad(lambda x: np.sum(np.einsum("ij,jk->ik", x, b)))(a)
    assert g.dtype == np.float32
    h = tg.hessian(lambda x: np.sum(np.einsum("ii->i", x) ** 3))(rand(3, 3).astype(np.float32))
    assert h.dtype == np.float32
    check_grads(lambda x: np.einsum("ij->i", x, dtype=np.float64), [a.astype(np.float64)])


def test_einsum_errors_and_path():
    a = rand(2, 3, 4)
    with pytest.raises(ValueError):
        tg.grad(lambda x: np.sum(np.einsum("...ij->ij", x)))(a)
    with pytest.raises(ValueError):
        np.einsum("...ij->ij", a)  # the same rule as NumPy
    with pytest.raises(GradientDroppedError):
        tg.grad(lambda x: np.sum(np.einsum("ij->ji", x, out=_PLAIN_4x3.copy())))(a[0])
    # einsum_path is a constant: it only looks at shapes.
    steps = len(np.einsum_path("ij,jk->ik", a[0], a[0].T)[0])
    path = tg.grad(lambda x: np.sum(x) * len(np.einsum_path("ij,jk->ik", x, x.T)[0]))(a[0])
    np.testing.assert_allclose(path, np.full((3, 4), float(steps)))


@st.composite
def einsum_problems(draw):
    letters = "abcd"
    sizes = dict(zip(letters, draw(st.lists(st.integers(1, 3), min_size=4, max_size=4))))
    n_ops = draw(st.integers(1, 3))
    terms = [draw(st.text(alphabet=letters, min_size=0, max_size=3)) for _ in range(n_ops)]
    present = sorted(set("".join(terms)))
    if draw(st.booleans()):
        out = "".join(draw(st.permutations(draw(st.lists(st.sampled_from(present), unique=True))))) if present else ""
        spec = ",".join(terms) + "->" + out
    else:
        spec = ",".join(terms)
    shapes = [tuple(sizes[c] for c in t) for t in terms]
    optimize = draw(st.sampled_from([False, True]))
    return spec, shapes, optimize


@settings(max_examples=40, deadline=None)
@given(einsum_problems())
def test_einsum_random_subscripts(problem):
    spec, shapes, optimize = problem
    rng = np.random.default_rng(len(spec))
    args = [rng.standard_normal(s) for s in shapes]
    check(lambda *ops: np.einsum(spec, *ops, optimize=optimize), *args)


# ---------------------------------------------------------------- tensordot
@pytest.mark.parametrize(
    "sa, sb, axes",
    [
        ((2, 3, 4), (3, 4, 5), 2),
        ((2, 3, 4), (4, 2, 5), 1),
        ((3, 4), (2, 5), 0),
        ((2, 3, 4), (3, 2, 5), ([0, 1], [1, 0])),
        ((2, 3, 4), (4, 5, 2), ([2, 0], [0, 2])),
        ((2, 3, 4), (5, 4), (-1, -1)),
        ((3,), (3,), 1),
    ],
)
def test_tensordot(sa, sb, axes):
    check(lambda a, b: np.tensordot(a, b, axes=axes), rand(*sa), rand(*sb))
    check(lambda a, b: np.linalg.tensordot(a, b, axes=axes), rand(*sa), rand(*sb))


def test_tensordot_float32():
    a = rand(3, 4).astype(np.float32)
    assert tg.grad(lambda x: np.sum(np.tensordot(x, x, axes=([0], [0]))))(a).dtype == np.float32


# ---------------------------------------------------------------- dot family
@pytest.mark.parametrize(
    "sa, sb",
    [((3, 4), (4, 5)), ((3, 4), (4,)), ((4,), (4, 2)), ((4,), (4,)), ((2, 3, 4), (4, 5)),
     ((3, 4), (2, 4, 5)), ((2, 3, 4), (5, 4, 2)), ((), (3, 2)), ((3,), ())],
)
def test_dot(sa, sb):
    check(np.dot, rand(*sa), rand(*sb))


def test_dot_method_and_out():
    a, b = rand(3, 4), rand(4, 2)
    check(lambda x, y: x.dot(y), a, b)
    with pytest.raises(GradientDroppedError):
        tg.grad(lambda x: np.sum(np.dot(x, b, out=_PLAIN_3x2.copy())))(a)


@pytest.mark.parametrize(
    "sa, sb", [((4,), (4,)), ((3, 4), (4,)), ((3, 4), (2, 4)), ((2, 3, 4), (5, 4)), ((3, 4), (2, 5, 4)), ((), (3,))]
)
def test_inner(sa, sb):
    check(np.inner, rand(*sa), rand(*sb))


def test_vdot_outer_kron():
    check(np.vdot, rand(3, 4), rand(12))
    check(np.vdot, rand(3) + 1j * rand(3), rand(3) + 1j * rand(3))
    check(np.outer, rand(3, 2), rand(4))
    check(np.linalg.outer, rand(3), rand(4))
    with pytest.raises(ValueError):
        tg.grad(lambda x: np.sum(np.linalg.outer(x, x)))(rand(2, 2))
    for sa, sb in [((2, 3), (3, 2)), ((3,), (2, 2)), ((2, 2, 2), (2,)), ((), (3,)), ((2,), ())]:
        check(np.kron, rand(*sa), rand(*sb))


def test_vdot_closed_form_complex():
    a, b = rand(3) + 1j * rand(3), rand(3) + 1j * rand(3)
    # d Re(vdot(a, b)) / d b is the cotangent conj(a) in tapegrad's convention.
    _, vjp_fun = tg.vjp(np.vdot, a, b)
    np.testing.assert_allclose(vjp_fun(np.array(1.0))[1], np.conj(a))


@pytest.mark.parametrize(
    "sa, sb, kwargs",
    [((4, 3), (3,), {}), ((3, 2), (2, 3), {"axisa": 0, "axisb": 1, "axisc": 0}), ((3, 2), (3, 2), {"axis": 0}),
     ((4, 2), (4, 3), {}), ((4, 3), (4, 2), {}), ((4, 2), (2,), {})],
)
def test_cross(sa, sb, kwargs):
    a, b = rand(*sa), rand(*sb)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:  # 2-element vectors: deprecated in NumPy 2.0, an error from 2.5
            np.cross(a, b, **kwargs)
        except ValueError as exc:
            # tapegrad refuses exactly what the running NumPy refuses, with its message.
            with pytest.raises(ValueError) as refused:
                tg.grad(lambda a, b: np.sum(np.cross(a, b, **kwargs)), argnums=(0, 1))(a, b)
            assert str(refused.value) == str(exc)
            return
        check(lambda a, b: np.cross(a, b, **kwargs), a, b)


def test_cross_follows_the_running_numpy_on_2_vectors():
    from tapegrad.rules.contractions import CROSSES_2_VECTORS

    numpy_minor = tuple(int(p) for p in np.__version__.split(".")[:2])
    assert CROSSES_2_VECTORS == (numpy_minor < (2, 5))
    a, b = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        if CROSSES_2_VECTORS:  # z = a0 b1 - a1 b0, so dz/da = (b1, -b0)
            np.testing.assert_allclose(tg.grad(lambda a: np.cross(a, b))(a), [4.0, -3.0])
        else:
            with pytest.raises(ValueError, match="3-dimensional vectors"):
                tg.grad(lambda a: np.cross(a, b))(a)


def test_linalg_cross():
    check(lambda a, b: np.linalg.cross(a, b, axis=0), rand(3, 2), rand(3, 2))
    with pytest.raises(ValueError):
        tg.grad(lambda a: np.sum(np.linalg.cross(a, a)))(rand(2, 2))


# ---------------------------------------------------------------- diagonal and trace
@pytest.mark.parametrize(
    "shape, offset, a1, a2",
    [((4, 4), 0, 0, 1), ((3, 5), 1, 0, 1), ((3, 5), -1, 0, 1), ((5, 3), 2, 1, 0), ((2, 3, 4), 1, 2, 0),
     ((2, 3, 4), -1, -1, -2), ((3, 3), 5, 0, 1)],
)
def test_diagonal_and_trace(shape, offset, a1, a2):
    a = rand(*shape)
    check(lambda x: np.diagonal(x, offset, a1, a2), a)
    check(lambda x: np.trace(x, offset, a1, a2), a)
    check(lambda x: x.diagonal(offset, a1, a2), a)
    check(lambda x: x.trace(offset, a1, a2), a)


def test_linalg_diagonal_trace_and_closed_form():
    a = rand(2, 3, 4)
    check(lambda x: np.linalg.diagonal(x, offset=1), a)
    check(lambda x: np.linalg.trace(x, offset=-1), a)
    b = rand(4, 4)
    np.testing.assert_allclose(tg.grad(np.trace)(b), np.eye(4))
    np.testing.assert_allclose(tg.grad(lambda x: np.trace(x @ b))(b), b.T)
    assert tg.grad(np.trace)(b.astype(np.float32)).dtype == np.float32


# ---------------------------------------------------------------- linalg spellings
def test_linalg_vecdot():
    check(lambda a, b: np.linalg.vecdot(a, b, axis=0), rand(4, 3), rand(4, 3))
    check(np.linalg.vecdot, rand(2, 3, 4), rand(4))


def test_matrix_transpose_and_linalg_matmul():
    check(np.linalg.matrix_transpose, rand(2, 3, 4))
    check(np.matrix_transpose, rand(3, 4))
    with pytest.raises(ValueError):
        tg.grad(lambda x: np.sum(np.linalg.matrix_transpose(x)))(rand(3))
    check(np.linalg.matmul, rand(2, 3, 4), rand(4, 2))


@pytest.mark.parametrize(
    "shapes",
    [[(3, 4), (4, 5)], [(3, 4), (4, 5), (5, 2)], [(4,), (4, 5), (5, 3), (3,)], [(2, 6), (6, 1), (1, 5), (5, 3), (3,)]],
)
def test_multi_dot(shapes):
    arrays = [rand(*s) for s in shapes]
    check(lambda *a: np.linalg.multi_dot(list(a)), *arrays)
