"""Shape manipulation, array assembly, sorting and selection: values and derivatives."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tapegrad as tg
from tapegrad.errors import UnsupportedFunctionError
from tapegrad.testing import check_grads

from .helpers import assert_same_forward

RNG = np.random.default_rng(42)


def rand(*shape):
    return RNG.standard_normal(shape)


def check(fun, *args):
    assert_same_forward(fun, args)
    check_grads(fun, args, order=2)


# Each case: (id, function, args).  Functions are nonlinear where that helps the
# second-order check see something (a linear map has a zero second derivative).
X23, X234, X4, X33 = rand(2, 3), rand(2, 3, 4), rand(4), rand(3, 3)
CASES = [
    # reshaping
    ("reshape", lambda x: np.reshape(x, (3, -1)) ** 2, (X234,)),
    ("reshape-F", lambda x: np.reshape(x, (4, 6), order="F") ** 2, (X234,)),
    ("reshape-A-fortran", lambda x: np.reshape(x.T, (6, 4), order="A") ** 2, (X234,)),
    ("reshape-method", lambda x: x.reshape(4, 2, 3) * x.reshape(-1)[0], (X234,)),
    ("reshape-0d", lambda x: np.reshape(x, (1, 1)) ** 2, (np.float64(1.5),)),
    ("ravel", lambda x: np.ravel(x) ** 2, (X234,)),
    ("ravel-F", lambda x: np.ravel(x, order="F") * np.arange(24), (X234,)),
    ("ravel-K-transposed", lambda x: np.ravel(x.T, order="K") * np.arange(24), (X234,)),
    ("ravel-K-strided", lambda x: np.ravel(np.transpose(x[::-1, ::2], (2, 0, 1)), "K") * np.arange(16), (X234,)),
    ("ravel-A", lambda x: np.ravel(np.transpose(x), "A") * np.arange(24), (X234,)),
    ("flatten-F", lambda x: x.flatten("F") * np.arange(6), (X23,)),
    ("squeeze", lambda x: np.squeeze(x) ** 2, (rand(1, 3, 1),)),
    ("squeeze-axis", lambda x: np.squeeze(x, axis=(0, -1)) ** 2, (rand(1, 3, 1),)),
    ("expand_dims", lambda x: np.expand_dims(x, (0, -1)) ** 2, (X23,)),
    ("atleast_1d-0d", lambda x: np.atleast_1d(x) ** 2, (np.float64(2.0),)),
    ("atleast_2d", lambda x: np.atleast_2d(x) ** 2, (X4,)),
    ("atleast_3d-1d", lambda x: np.atleast_3d(x) ** 2, (X4,)),
    ("atleast_3d-2d", lambda x: np.atleast_3d(x) ** 2, (X23,)),
    ("atleast_2d-multi", lambda x, y: np.atleast_2d(x, y), (X4, np.float64(3.0))),
    ("atleast_3d-multi", lambda x, y: np.atleast_3d(x, y), (X23, X234)),
    # axes
    ("transpose", lambda x: np.transpose(x) ** 2, (X234,)),
    ("transpose-axes", lambda x: np.transpose(x, (1, -1, 0)) ** 2, (X234,)),
    ("permute_dims", lambda x: np.permute_dims(x, (2, 0, 1)) * x[0, 0, 0], (X234,)),
    ("T", lambda x: x.T ** 2, (X23,)),
    ("matrix_transpose", lambda x: np.matrix_transpose(x) ** 2, (X234,)),
    ("moveaxis", lambda x: np.moveaxis(x, [0, -1], [-1, 0]) ** 2, (X234,)),
    ("swapaxes", lambda x: np.swapaxes(x, 0, -1) ** 2, (X234,)),
    ("rollaxis", lambda x: np.rollaxis(x, 2, 1) ** 2, (X234,)),
    # broadcasting
    ("broadcast_to", lambda x: np.broadcast_to(x, (2, 2, 3)) ** 2, (X23,)),
    ("broadcast_arrays", lambda x, y: np.broadcast_arrays(x, y), (rand(3, 1), rand(4))),
    ("meshgrid-xy", lambda x, y: np.meshgrid(x, y), (rand(3), rand(2))),
    ("meshgrid-ij-3", lambda x, y, z: np.meshgrid(x, y, z, indexing="ij"), (rand(3), rand(2), rand(2))),
    ("meshgrid-sparse", lambda x, y: np.meshgrid(x, y, sparse=True), (rand(3), rand(2))),
    # joining
    ("concatenate", lambda x, y: np.concatenate([x, y]) ** 2, (X23, rand(1, 3))),
    ("concatenate-neg", lambda x, y: np.concatenate((x, y), axis=-1) ** 2, (X23, rand(2, 2))),
    ("concatenate-None", lambda x, y: np.concatenate((x, y), axis=None) ** 2, (X23, X4)),
    ("concat-const", lambda x: np.concat([x, np.ones((2, 1))], axis=1) ** 2, (X23,)),
    ("stack", lambda x, y: np.stack([x, y]) ** 2, (X23, X23)),
    ("stack-neg", lambda x, y: np.stack([x, y], axis=-1) ** 2, (X23, X23)),
    ("hstack-1d", lambda x, y: np.hstack([x, y]) ** 2, (X4, rand(2))),
    ("hstack-2d", lambda x, y: np.hstack((x, y)) ** 2, (X23, rand(2, 1))),
    ("vstack", lambda x, y: np.vstack([x, y]) ** 2, (rand(3), X23)),
    ("dstack", lambda x, y: np.dstack([x, y]) ** 2, (X23, X23)),
    ("column_stack", lambda x, y: np.column_stack([x, y]) ** 2, (rand(2), X23)),
    ("block", lambda a, b: np.block([[a, b], [np.ones((1, 3)), 2.0]]) ** 2, (X23, rand(2, 1))),
    ("block-1d", lambda a, b: np.block([a, b, 1.0]) ** 2, (X4, rand(2))),
    ("append", lambda x, y: np.append(x, y) ** 2, (X23, X4)),
    ("append-axis", lambda x, y: np.append(x, y, axis=0) ** 2, (X23, rand(1, 3))),
    # splitting
    ("split", lambda x: [p**2 for p in np.split(x, 2, axis=-1)], (X234,)),
    ("split-indices", lambda x: np.split(x, [1, 3], axis=2), (X234,)),
    ("split-partial-use", lambda x: np.split(x, [1], axis=1)[1] ** 2, (X234,)),
    ("array_split", lambda x: np.array_split(x, 3, axis=-1), (X234,)),
    ("hsplit", lambda x: np.hsplit(x, 3), (X23,)),
    ("hsplit-1d", lambda x: np.hsplit(x, 2), (X4,)),
    ("vsplit", lambda x: np.vsplit(x, [1]), (X23,)),
    ("dsplit", lambda x: np.dsplit(x, 2), (X234,)),
    ("unstack", lambda x: np.unstack(x, axis=-1), (X23,)),
    # repeating and reordering
    ("tile", lambda x: np.tile(x, 2) ** 2, (X23,)),
    ("tile-longer", lambda x: np.tile(x, (2, 1, 2)) ** 2, (X23,)),
    ("tile-0d", lambda x: np.tile(x, (3,)) ** 2, (np.float64(0.7),)),
    ("repeat", lambda x: np.repeat(x, 2) ** 2, (X23,)),
    ("repeat-array", lambda x: np.repeat(x, [0, 2, 3], axis=-1) ** 2, (X23,)),
    ("repeat-method", lambda x: x.repeat(3, axis=0) ** 2, (X23,)),
    ("flip", lambda x: np.flip(x) * np.arange(6).reshape(2, 3), (X23,)),
    ("flip-axes", lambda x: np.flip(x, (0, -1)) ** 2 * x, (X234,)),
    ("fliplr", lambda x: np.fliplr(x) * x, (X23,)),
    ("flipud", lambda x: np.flipud(x) * x, (X23,)),
    ("rot90", lambda x: np.rot90(x) * np.arange(6).reshape(3, 2), (X23,)),
    ("rot90-k2", lambda x: np.rot90(x, 2) * x, (X23,)),
    ("rot90-k3-axes", lambda x: np.rot90(x, -1, axes=(1, 2)) ** 2, (X234,)),
    ("roll", lambda x: np.roll(x, 2) * x, (X23,)),
    ("roll-axis", lambda x: np.roll(x, -1, axis=-1) * x, (X234,)),
    ("roll-multi", lambda x: np.roll(x, (1, 2), axis=(2, 0)) * x, (X234,)),
    # padding
    ("pad-constant", lambda x: np.pad(x, 1) ** 2, (X23,)),
    ("pad-constant-values", lambda x: np.pad(x, ((1, 0), (0, 2)), constant_values=((1, 2), (3, 4))) ** 2, (X23,)),
    ("pad-traced-constant", lambda x, c: np.pad(x, (1, 2), constant_values=c) ** 2, (X23, np.float64(0.5))),
    ("pad-edge", lambda x: np.pad(x, ((2, 1), (0, 3)), mode="edge") ** 2, (X23,)),
    ("pad-reflect", lambda x: np.pad(x, 2, mode="reflect") ** 2, (X23,)),
    ("pad-symmetric", lambda x: np.pad(x, (3, 1), mode="symmetric") ** 2, (X4,)),
    ("pad-wrap", lambda x: np.pad(x, ((1, 1), (4, 2)), mode="wrap") ** 2, (X23,)),
    # triangles and diagonals
    ("tril", lambda x: np.tril(x) ** 2, (X33,)),
    ("triu-k", lambda x: np.triu(x, 1) ** 2, (rand(3, 4),)),
    ("tril-batch", lambda x: np.tril(x, -1) ** 2, (X234,)),
    ("triu-1d", lambda x: np.triu(x) ** 2, (X4,)),
    ("diag-1d", lambda x: np.diag(x, 1) ** 2, (X4,)),
    ("diag-2d", lambda x: np.diag(x, -1) ** 2, (rand(3, 4),)),
    ("diagflat", lambda x: np.diagflat(x, -1) ** 2, (X23,)),
    ("diagonal", lambda x: np.diagonal(x) ** 2, (X33,)),
    ("diagonal-axes", lambda x: np.diagonal(x, 1, -1, 0) ** 2, (X234,)),
    ("diagonal-method", lambda x: x.diagonal(-1) ** 2, (X33,)),
    ("trace", lambda x: np.trace(x) ** 2, (X33,)),
    ("trace-axes", lambda x: np.trace(x, 1, 1, 2) ** 2, (X234,)),
    ("trace-method", lambda x: x.trace() ** 3, (rand(3, 2),)),
    # inserting, deleting, copying
    ("insert", lambda x, v: np.insert(x, 1, v) ** 2, (X23, np.float64(2.5))),
    ("insert-axis", lambda x, v: np.insert(x, [0, 2, 2], v, axis=1) ** 2, (X23, rand(2, 1))),
    ("insert-slice", lambda x, v: np.insert(x, slice(0, 3), v) ** 2, (X4, rand(3))),
    ("delete", lambda x: np.delete(x, [0, 2], axis=-1) ** 2, (X234,)),
    ("delete-flat", lambda x: np.delete(x, slice(1, None, 2)) ** 2, (X23,)),
    ("copy", lambda x: np.copy(x) ** 2, (X23,)),
    ("copy-method", lambda x: x.copy() * x, (X23,)),
    # applying Python functions
    ("apply_along_axis-outer", lambda x: np.apply_along_axis(lambda v: np.outer(v, v), 1, x), (X234,)),
    ("apply_along_axis-scalar", lambda x: np.apply_along_axis(lambda v: np.sum(v**3), -1, x), (X234,)),
    ("apply_along_axis-args", lambda x, w: np.apply_along_axis(np.dot, 0, x, w), (X23, rand(2))),
    ("apply_over_axes", lambda x: np.apply_over_axes(np.sum, x**2, [0, -1]), (X234,)),
    ("apply_over_axes-keepdims-fn", lambda x: np.apply_over_axes(lambda a, ax: np.max(a, ax, keepdims=True), x, 1), (X234,)),
]


@pytest.mark.parametrize("fun,args", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_values_and_grads(fun, args):
    check(fun, *args)


def test_case_ids_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize(
    "fun",
    [
        lambda x: np.reshape(x, (6,), order="F"),
        lambda x: np.transpose(x),
        lambda x: np.concatenate([x, x], axis=-1),
        lambda x: np.stack([x, x], axis=1),
        lambda x: np.split(x, 3, axis=1)[2],
        lambda x: np.tile(x, (2, 1)),
        lambda x: np.repeat(x, 2, axis=0),
        lambda x: np.flip(x, 0),
        lambda x: np.roll(x, 1),
        lambda x: np.rot90(x),
        lambda x: np.pad(x, 1, mode="reflect"),
        lambda x: np.pad(x, 1, constant_values=2.0),
        lambda x: np.tril(x),
        lambda x: np.diag(x[0]),
        lambda x: np.trace(x),
        lambda x: np.insert(x, 1, 3.0, axis=1),
        lambda x: np.sort(x, axis=0),
        lambda x: np.take(x, [0, 0], axis=1),
        lambda x: np.block([[x], [x]]),
        lambda x: np.meshgrid(x[0], x[1])[0],
    ],
)
def test_float32_preserved(fun):
    x = rand(2, 3).astype(np.float32)
    out, pullback = tg.vjp(fun, x)
    assert out.dtype == np.float32
    (g,) = pullback(np.ones(out.shape, dtype=np.float32))
    assert g.dtype == np.float32


# ---------------------------------------------------------------- closed forms
def test_tile_gradient_counts_copies():
    x = rand(2, 3)
    g = tg.grad(lambda x: np.sum(np.tile(x, (3, 2))))(x)
    np.testing.assert_allclose(g, np.full((2, 3), 6.0))


def test_repeat_gradient_counts_repeats():
    x = rand(3)
    reps = [2, 0, 5]
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(np.repeat(x, reps)))(x), reps)


def test_pad_edge_gradient_counts_copies():
    x = rand(4)
    g = tg.grad(lambda x: np.sum(np.pad(x, (2, 3), mode="edge")))(x)
    np.testing.assert_allclose(g, [3.0, 1.0, 1.0, 4.0])


def test_pad_constant_values_gradient():
    x = rand(2, 3)
    # Fill values per (axis, side); axis 1 is written last so it owns the corners.
    # (np.pad dispatches on its first argument only, so x must be traced for c to be seen.)
    fun = lambda x, c: np.sum(np.pad(x, ((1, 0), (0, 2)), constant_values=c))  # noqa: E731
    g = tg.grad(fun, argnums=(0, 1))(x, np.zeros((2, 2)))[1]
    np.testing.assert_allclose(g, [[3.0, 0.0], [0.0, 6.0]])


def test_trace_hessian_is_zero_and_gradient_is_identity():
    x = rand(3, 3)
    np.testing.assert_allclose(tg.grad(np.trace)(x), np.eye(3))
    np.testing.assert_allclose(tg.grad(lambda x: np.trace(x) ** 2)(x), 2 * np.trace(x) * np.eye(3))


def test_concatenate_split_roundtrip_jacobian_is_identity():
    x = rand(6)
    jac = tg.jacobian(lambda x: np.concatenate(np.array_split(x, 4)[::-1][::-1]))(x)
    np.testing.assert_allclose(jac, np.eye(6))


def test_roll_jacobian_is_permutation():
    x = rand(5)
    jac = tg.jacobian(lambda x: np.roll(x, 2))(x)
    np.testing.assert_allclose(jac, np.roll(np.eye(5), 2, axis=0))


def test_pad_unsupported_mode_raises():
    # mean and odd reflections are supported now (tests/test_pad_strided_flat.py); these are not
    with pytest.raises(UnsupportedFunctionError, match="mode='empty'"):
        tg.grad(lambda x: np.sum(np.pad(x, 1, mode="empty")))(rand(3))
    with pytest.raises(UnsupportedFunctionError, match="one reflection"):
        tg.grad(lambda x: np.sum(np.pad(x, 4, mode="reflect", reflect_type="odd")))(rand(3))
    with pytest.raises(UnsupportedFunctionError):
        tg.grad(lambda x: np.sum(np.pad(x, 1, mode=lambda vector, width, axis, kw: None)))(rand(3))


def test_hessian_through_reshape_and_transpose():
    x = rand(2, 3)
    hess = tg.hessian(lambda x: np.sum(np.reshape(x.T, (6,), order="F") ** 3))(x)
    np.testing.assert_allclose(hess.reshape(6, 6), np.diag(6 * x.ravel()))


# ---------------------------------------------------------------- hypothesis: axis handling
@st.composite
def shapes_and_axis(draw, min_dims=1):
    nd = draw(st.integers(min_dims, 3))
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=nd, max_size=nd)))
    axis = draw(st.integers(-nd, nd - 1)) if nd else 0
    return shape, axis


@settings(max_examples=25, deadline=None)
@given(shapes_and_axis(), st.lists(st.integers(0, 3), min_size=1, max_size=3))
def test_concatenate_random_axis(shape_axis, sizes):
    shape, axis = shape_axis
    parts = []
    for n in sizes:
        s = list(shape)
        s[axis] = n
        parts.append(RNG.standard_normal(s))
    check(lambda *p: np.concatenate(p, axis=axis) ** 2, *parts)


@settings(max_examples=25, deadline=None)
@given(shapes_and_axis(min_dims=0), st.integers(1, 3))
def test_stack_random_axis(shape_axis, count):
    shape, _ = shape_axis
    axis = int(RNG.integers(-len(shape) - 1, len(shape) + 1))
    parts = [RNG.standard_normal(shape) for _ in range(count)]
    check(lambda *p: np.stack(p, axis=axis) ** 2, *parts)


@settings(max_examples=25, deadline=None)
@given(shapes_and_axis(), st.data())
def test_split_random_axis(shape_axis, data):
    shape, axis = shape_axis
    n = shape[axis]
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=3)))
    x = RNG.standard_normal(shape)
    check(lambda x: [p**2 for p in np.split(x, cuts, axis=axis)], x)
    sections = data.draw(st.integers(1, 4))
    check(lambda x: np.array_split(x, sections, axis=axis), x)
