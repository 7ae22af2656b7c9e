"""Indexing (``x[idx]``, ``y[idx] = v``), views, selection and sorting: values and derivatives."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import tapegrad as tg
from tapegrad.errors import GradientDroppedError
from tapegrad.testing import check_grads

from .helpers import assert_same_forward

# Plain arrays made before any tape records: np.zeros & co. called inside a differentiated
# function give traced constants (tapegrad.buffers), so the refusals below need these.
_PLAIN3 = np.zeros(3)

RNG = np.random.default_rng(7)


def rand(*shape):
    return RNG.standard_normal(shape)


def check(fun, *args, argnums=None):
    assert_same_forward(fun, args)
    check_grads(fun, args, argnums=argnums, order=2)


# ---------------------------------------------------------------- fixed index expressions
X = rand(3, 4, 5)
IDX = np.array([[0, 2], [2, 2]])
INDEX_CASES = [
    ("int", 1),
    ("negative-int", (-1, 2)),
    ("slice", (slice(1, None), slice(None, 3))),
    ("negative-step", (slice(None, None, -1), slice(3, 0, -2))),
    ("none-ellipsis", (None, Ellipsis, None, 1)),
    ("empty-tuple", ()),
    ("int-array-repeated", [0, 0, 2, 0]),
    ("int-array-2d", (IDX,)),
    ("adjacent-advanced", (slice(None), IDX, [1, 4])),
    ("non-adjacent-advanced", (IDX, slice(1, 3), [[4], [0]])),
    ("advanced-after-ellipsis", (Ellipsis, [4, 4, 1])),
    ("advanced-then-none", ([1, 0], None, slice(None), 2)),
    ("int-and-array", (2, slice(None), [0, 0, 1])),
    ("bool-mask-axis", (slice(None), np.array([True, False, True, True]))),
    ("bool-mask-2d", (X[..., 0] > 0,)),
    ("bool-mask-full", (X > 0.3,)),
    ("bool-mask-and-array", (np.array([True, False, True]), slice(None), [1, 3])),
    ("bool-scalar", (True,)),
    ("zero-d-int-array", (np.array(2), Ellipsis)),
    ("empty-selection", (slice(2, 2),)),
]


@pytest.mark.parametrize("index", [c[1] for c in INDEX_CASES], ids=[c[0] for c in INDEX_CASES])
def test_getitem(index):
    check(lambda x: x[index] ** 2, X)


@pytest.mark.parametrize("index", [c[1] for c in INDEX_CASES], ids=[c[0] for c in INDEX_CASES])
def test_setitem_traced_value(index):
    value = rand(*np.shape(X[index]))

    def fun(x, v):
        y = x.copy()
        y[index] = v * x[index]
        return y * x

    check(fun, X, value)


def test_setitem_broadcast_value():
    def fun(x, v):
        y = x.copy()
        y[:, [0, 2]] = v  # v of shape (5,) broadcast to (3, 2, 5)
        return y**2

    check(fun, X, rand(5))


def test_setitem_constant_value_and_repeated_last_wins():
    def fun(x):
        y = x.copy()
        y[[0, 0, 1]] = np.array([1.0, 2.0, 3.0])[:, None, None] * np.ones((3, 4, 5))
        return y * x

    check(fun, X)


def test_setitem_repeated_indices_gradient_goes_to_the_last_write():
    # NumPy keeps the last of the writes to position 0, so only v[2] reaches the output.
    def fun(x, v):
        y = x.copy()
        y[[0, 1, 0]] = v
        return y

    out, pullback = tg.vjp(fun, np.zeros(3), np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(out, [3.0, 2.0, 0.0])
    gx, gv = pullback(np.array([10.0, 20.0, 30.0]))
    np.testing.assert_array_equal(gv, [0.0, 20.0, 10.0])
    np.testing.assert_array_equal(gx, [0.0, 0.0, 30.0])
    check(lambda x, v: fun(x, v) ** 2, rand(3), rand(3))


def test_repeated_index_gradient_counts_occurrences():
    x = rand(5)
    idx = [0, 3, 3, 3, 1, 0]
    g = tg.grad(lambda x: np.sum(x[idx]))(x)
    np.testing.assert_array_equal(g, np.bincount(idx, minlength=5))
    g2 = tg.grad(lambda x: np.sum(x[idx] ** 2))(x)
    np.testing.assert_allclose(g2, 2 * x * np.bincount(idx, minlength=5))


def test_getitem_float32_preserved():
    x = rand(3, 4).astype(np.float32)
    for index in [(1, slice(None)), ([0, 0],), (x > 0,)]:
        g = tg.grad(lambda x: np.sum(x[index] ** 2))(x)
        assert g.dtype == np.float32
        hess = tg.hessian(lambda x: np.sum(x[index] ** 3))(x)
        assert hess.dtype == np.float32


def test_getitem_jacobian_and_hessian():
    x = rand(4)
    idx = [3, 1, 1]
    np.testing.assert_array_equal(tg.jacobian(lambda x: x[idx])(x), np.eye(4)[idx])
    hess = tg.hessian(lambda x: np.sum(x[idx] ** 3))(x)
    np.testing.assert_allclose(hess, np.diag(6 * x * np.bincount(idx, minlength=4)))


# ---------------------------------------------------------------- hypothesis: random index expressions
@st.composite
def index_expressions(draw, shape=None, basic_only=False):
    """A random shape and an index into it mixing every kind NumPy allows."""
    if shape is None:
        shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    adv_shape = draw(st.sampled_from([(), (2,), (1, 3), (2, 1)]))
    items = []
    dim = 0
    ellipsis_at = draw(st.integers(-1, len(shape)))
    used_ellipsis = False
    while dim < len(shape):
        if dim == ellipsis_at and not used_ellipsis:
            items.append(Ellipsis)
            used_ellipsis = True
            dim += draw(st.integers(0, len(shape) - dim))  # the Ellipsis covers some axes
            continue
        if draw(st.integers(0, 5)) == 0:
            items.append(None)
        n = shape[dim]
        kinds = ["slice", "int", "stop"] + ([] if basic_only else ["array", "bool"])
        kind = draw(st.sampled_from(kinds))
        if kind == "stop":
            break
        if kind == "slice":
            start = draw(st.none() | st.integers(-n - 1, n + 1))
            stop = draw(st.none() | st.integers(-n - 1, n + 1))
            step = draw(st.none() | st.sampled_from([1, 2, -1, -2, 3]))
            items.append(slice(start, stop, step))
        elif kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "array":
            size = int(np.prod(adv_shape, dtype=int))
            values = draw(st.lists(st.integers(-n, n - 1), min_size=size, max_size=size))
            items.append(np.array(values, dtype=np.intp).reshape(adv_shape))
        else:
            mask = draw(st.lists(st.booleans(), min_size=n, max_size=n))
            items.append(np.array(mask))
        dim += 1
    index = tuple(items)
    try:
        np.empty(shape)[index]
    except IndexError:
        assume(False)
    return shape, index


@settings(max_examples=60, deadline=None)
@given(index_expressions())
def test_getitem_random(shape_index):
    shape, index = shape_index
    x = RNG.standard_normal(shape)
    check(lambda x: np.sin(x)[index] * x[index], x)


@settings(max_examples=40, deadline=None)
@given(index_expressions(), st.booleans())
def test_setitem_random(shape_index, broadcast):
    shape, index = shape_index
    x = RNG.standard_normal(shape)
    target = np.shape(x[index])
    # Either a full value or one that broadcasts over the leading axes of the target.
    value = RNG.standard_normal(target[1:] if broadcast and target else target)

    def fun(x, v):
        y = x.copy()
        y[index] = v * 2.0 + x[index]
        return y * np.cos(x)

    check(fun, x, value)


# ---------------------------------------------------------------- views
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_write_with_live_view_matches_numpy_or_raises_on_overlap(data):
    shape, view_index = data.draw(index_expressions(basic_only=True))
    _, write_index = data.draw(index_expressions(shape=shape))
    positions = np.arange(int(np.prod(shape))).reshape(shape)
    view = positions[view_index]
    overlap = np.shares_memory(view, positions) and np.intersect1d(view, positions[write_index]).size > 0

    def fun(x):
        y = x.copy()
        v = y[view_index]
        y[write_index] = np.tanh(x[write_index]) + 1.0
        return y, v * 1.0

    x = RNG.standard_normal(shape)
    if overlap:
        with pytest.raises(GradientDroppedError):
            tg.vjp(fun, x)
    else:
        check(fun, x)


def test_zero_d_view_writes_through():
    def fun(x):
        y = x.copy()
        v = y[1, ...]  # a 0-d view in NumPy
        v += x[0] ** 2
        w = y[2]  # a scalar copy in NumPy
        w += 100.0
        return y, w

    check(fun, rand(3))


def test_write_through_view_updates_base():
    def fun(x):
        y = x.copy()
        v = y[1]
        v *= 2
        w = v[::2]
        w -= x[0, :2] ** 2
        return y, v

    check(fun, rand(2, 3))


def test_augmented_assignment_into_slices_and_rows():
    def fun(x):
        y = x.copy()
        y[1:3] += 1.0
        y[0] *= y[2]
        for row in y:
            row /= 2.0
        del row
        y[:, 1] += y[:, 0] ** 2
        y[[0, 0]] += 5.0  # repeated advanced index: NumPy adds once
        return y

    check(fun, rand(3, 2))


def test_overlapping_write_with_live_view_raises():
    def overlap(x):
        y = x.copy()
        v = y[:, 1]
        y[0] = 3.0  # changes v[0] in NumPy
        return v

    with pytest.raises(GradientDroppedError):
        tg.grad(lambda x: np.sum(overlap(x)))(rand(2, 3))

    def assigns_from_shifted_view(x):
        y = x.copy()
        w = y[0:3]
        y[1:4] = w  # NumPy changes w too
        return w

    with pytest.raises(GradientDroppedError):
        tg.grad(lambda x: np.sum(assigns_from_shifted_view(x)))(rand(5))


def test_disjoint_write_with_live_view_is_allowed():
    def fun(x):
        y = x.copy()
        v = y[::2]
        y[1] = x[0] * 3.0  # odd position: v does not see it
        w = y[:, 2]
        y[1, :2] = 0.0
        return y * v[0] + w[1]

    check(fun, rand(3, 3))


# ---------------------------------------------------------------- selection
S = rand(3, 4)
SELECT_CASES = [
    ("take-flat", lambda x: np.take(x, [[0, 11], [5, 5]]) ** 2),
    ("take-axis", lambda x: np.take(x, [3, 0, 3], axis=-1) ** 2),
    ("take-wrap", lambda x: np.take(x, [-5, 7], axis=1, mode="wrap") ** 2),
    ("take-clip", lambda x: np.take(x, [-1, 9], axis=0, mode="clip") ** 2),
    ("take-method", lambda x: x.take([1, 1], axis=0) ** 2),
    ("take_along_axis", lambda x: np.take_along_axis(x, np.argsort(x, axis=0), axis=0) * x),
    ("take_along_axis-last", lambda x: np.take_along_axis(x, np.array([[0, 0], [3, 1], [2, 2]]), -1) ** 2),
    ("take_along_axis-None", lambda x: np.take_along_axis(x, np.array([11, 0, 0]), None) ** 2),
    ("choose", lambda x: np.choose([[0, 1, 2, 1]], [x, x**2, np.ones(4)]) * x),
    ("choose-clip", lambda x: np.choose(np.array([5, -1, 0, 1]), x[:2], mode="clip") ** 2),
    ("select", lambda x: np.select([x > 0.5, x < -0.5], [x**2, np.sin(x)], default=x) * x),
    ("select-default-const", lambda x: np.select([x > 0], [x**3])),
    ("where", lambda x: np.where(x > 0, x**2, np.cos(x))),
    ("compress", lambda x: np.compress([True, False, True], x, axis=0) ** 2),
    ("compress-flat", lambda x: np.compress(np.arange(12) % 3 == 0, x) ** 2),
    ("compress-short-cond", lambda x: np.compress([False, True], x, axis=1) ** 2),
    ("extract", lambda x: np.extract(x > 0, x) ** 2),
    ("sort", lambda x: np.sort(x) * np.arange(4)),
    ("sort-axis0", lambda x: np.sort(x, axis=0) ** 3),
    ("sort-None", lambda x: np.sort(x, axis=None) * np.arange(12)),
    ("partition", lambda x: np.sort(np.partition(x, 1, axis=-1)[:, :2], axis=-1) * np.arange(2) ** 2),
    ("partition-kths", lambda x: np.partition(x, (0, 2), axis=0)[[0, 2]] ** 2),
]


@pytest.mark.parametrize("fun", [c[1] for c in SELECT_CASES], ids=[c[0] for c in SELECT_CASES])
def test_selection(fun):
    check(fun, S)


def test_where_one_argument_is_constant():
    def fun(x):
        rows, cols = np.where(x > 0)
        assert rows.dtype.kind == "i" and cols.dtype.kind == "i"
        return x[rows, cols] ** 2

    check(fun, S)


def test_sort_is_a_permutation():
    x = rand(6)
    jac = tg.jacobian(np.sort)(x)
    np.testing.assert_array_equal(jac, np.eye(6)[np.argsort(x)])


def test_sort_ties_share_cotangent():
    w = np.array([1.0, 2.0, 4.0, 8.0])
    x = np.array([3.0, 1.0, 3.0, 3.0])  # sorted: 1, 3, 3, 3
    g = tg.grad(lambda x: np.sum(np.sort(x) * w))(x)
    np.testing.assert_allclose(g, [14 / 3, 1.0, 14 / 3, 14 / 3])
    # Pairs of ties: the shared cotangent is what central differences see.  (Only first
    # order: the derivative jumps at a tie, so differencing the gradient there is meaningless.)
    x = np.array([[2.0, 1.0, 2.0, 0.5], [1.0, 1.0, 3.0, 4.0]])
    fun = lambda x: np.sort(x, axis=-1) * np.arange(4.0)  # noqa: E731
    assert_same_forward(fun, (x,))
    check_grads(fun, (x,), order=1)


def test_sort_method_in_place_and_partition():
    def fun(x):
        y = x.copy()
        y.sort(axis=0)
        return y * np.arange(12.0).reshape(3, 4)

    check(fun, S)
    x = rand(7)
    part = tg.vjp(lambda x: np.partition(x, 3), x)[0]
    assert np.all(part[:3] <= part[3]) and np.all(part[4:] >= part[3])
    assert part[3] == np.sort(x)[3]

    def partition_in_place(x):
        y = x.copy()
        assert y.partition(2) is None  # like ndarray.partition
        return np.sort(y[:3]) * np.arange(1.0, 4.0)

    check(partition_in_place, x)


@pytest.mark.parametrize(
    "fun",
    [
        lambda x: np.take(x, [0, 0]),
        lambda x: np.sort(x),
        lambda x: np.partition(x, 1),
        lambda x: np.choose([0, 1, 0, 1], x[:2]),
        lambda x: np.choose([0, 1, 0, 1], [x, 2.0]),  # a Python scalar does not upcast
        lambda x: np.select([x > 0], [x]),
        lambda x: np.select([x > 0, x < -1], [x, 2.0], default=x[0]),
        lambda x: np.compress([True, False, True], x, axis=0),
        lambda x: np.extract(x > 0, x),
        lambda x: np.take_along_axis(x, np.argsort(x, axis=0), axis=0),
    ],
)
def test_selection_float32_preserved(fun):
    x = S.astype(np.float32)
    assert_same_forward(fun, (x,))
    g = tg.grad(lambda x: np.sum(fun(x) ** 2))(x)
    assert g.dtype == np.float32


# ---------------------------------------------------------------- in-place writers and value-shaped functions
V = rand(5)
INPLACE_CASES = [
    ("put", lambda y, v: np.put(y, [0, 5, 5, -1], v[:3])),  # repeated: last wins; v cycles
    ("put-wrap", lambda y, v: np.put(y, [13, -20], v, mode="wrap")),
    ("put-method", lambda y, v: y.put([1, 2], v[:2])),
    ("place", lambda y, v: np.place(y, y > 0, v[:2])),
    ("putmask", lambda y, v: np.putmask(y, y > 0, v)),
    ("put_along_axis", lambda y, v: np.put_along_axis(y, np.array([[0], [2], [2]]), v[:1], axis=1)),
    ("put_along_axis-None", lambda y, v: np.put_along_axis(y, np.array([1, 1, 7]), v[:3], axis=None)),
    ("copyto", lambda y, v: np.copyto(y, v[:4])),
    ("copyto-where", lambda y, v: np.copyto(y, v[:4] ** 2, where=y > 0)),
    ("fill_diagonal", lambda y, v: np.fill_diagonal(y, v[:2])),
]


@pytest.mark.parametrize("write", [c[1] for c in INPLACE_CASES], ids=[c[0] for c in INPLACE_CASES])
def test_in_place_writers(write):
    def fun(x, v):
        y = x.copy()
        assert write(y, v) is None
        return y * x

    check(fun, S, V)


def test_fill_diagonal_wrap_tall():
    def fun(x, v):
        y = x.copy()
        np.fill_diagonal(y, v, wrap=True)
        return y * x

    check(fun, rand(7, 2), V[:3])


def test_in_place_writer_into_plain_array_refuses():
    def fun(v):
        y = _PLAIN3.copy()
        np.put(y, [0], v)
        return y

    with pytest.raises(GradientDroppedError):
        tg.grad(lambda v: np.sum(fun(v)))(np.ones(1))


@pytest.mark.parametrize(
    "x,kwargs",
    [
        (np.array([0.0, 0.0, 1.0, 2.0, 0.0, 3.0, 0.0]), {}),
        (np.array([0.0, 0.0, 1.0, 2.0, 0.0, 3.0, 0.0]), {"trim": "b"}),
        (np.array([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 2.0]]), {}),
        (np.array([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 2.0]]), {"axis": 0}),
        (np.zeros((2, 3)), {}),
    ],
)
def test_trim_zeros(x, kwargs):
    # Finite differences would move the zeros, so the check is the closed form.
    fun = lambda x: np.trim_zeros(x, **kwargs) ** 2  # noqa: E731
    assert_same_forward(fun, (x,))
    np.testing.assert_array_equal(tg.grad(lambda x: np.sum(fun(x)))(x), 2 * x)


@pytest.mark.parametrize(
    "fun",
    [
        lambda x: np.resize(x, (3, 5)) ** 2,
        lambda x: np.resize(x, 5) * x[0, 0],
        lambda x: np.sort_complex(x[0]) ** 2,
        lambda x: np.astype(x, np.complex128) ** 2,
        lambda x: x[np.ix_([0, 2], [1, 3, 3])] ** 2,
    ],
)
def test_value_shaped(fun):
    check(fun, S)
