"""Ufunc methods: reduce, accumulate, reduceat, outer and at."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad.errors import GradientDroppedError, UnsupportedFunctionError
from tapegrad.testing import check_grads

# Plain arrays made before any tape records: np.zeros & co. called inside a differentiated
# function give traced constants (tapegrad.buffers), so the refusals below need these.
_PLAIN3 = np.zeros(3)

RNG = np.random.default_rng(7)


def value(fun, *args):
    """The forward value computed on tracers (what the user's code sees)."""
    return tg.vjp(fun, *args)[0]


def point(shape, lo=0.5, hi=2.0):
    return RNG.uniform(lo, hi, shape) * RNG.choice([-1.0, 1.0], shape)


POSITIVE = {np.true_divide, np.fmod, np.hypot}
REORDERABLE = [np.multiply, np.logaddexp, np.logaddexp2, np.hypot, np.fmax, np.fmin, np.add, np.maximum, np.minimum]
ORDERED = [np.subtract, np.true_divide, np.fmod]


def sample(ufunc, shape):
    return RNG.uniform(0.5, 2.0, shape) if ufunc in POSITIVE else point(shape)


# ----------------------------------------------------------------- reduce
@pytest.mark.parametrize("ufunc", REORDERABLE + ORDERED, ids=lambda u: u.__name__)
def test_reduce(ufunc):
    x = sample(ufunc, (3, 4))
    axes = [0, 1, -1] + ([None, (0, 1)] if ufunc in REORDERABLE else [])
    for axis in axes:
        for keepdims in (False, True):
            fun = lambda x: ufunc.reduce(x, axis=axis, keepdims=keepdims)  # noqa: E731
            assert np.allclose(value(fun, x), fun(x))
            check_grads(fun, [x], order=2)


def test_reduce_initial_where_dtype_and_zero_d():
    x = point((2, 5))
    mask = np.array([True, False, True, True, False])
    cases = [
        lambda x: np.multiply.reduce(x, axis=1, initial=2.0),
        lambda x: np.subtract.reduce(x, axis=0, initial=1.5),
        lambda x: np.logaddexp.reduce(x, axis=1, where=mask),
        lambda x: np.multiply.reduce(x, axis=1, where=mask, keepdims=True),
        lambda x: np.fmax.reduce(x, axis=1, where=mask, initial=-5.0),
        lambda x: np.multiply.reduce(x[0, 0], axis=None),
    ]
    for fun in cases:
        assert np.allclose(value(fun, x), fun(x))
        check_grads(fun, [x], order=2)
    g = tg.grad(lambda x: np.sum(np.multiply.reduce(x, axis=1, dtype=np.float32)))(x)
    assert g.dtype == np.float64 and np.allclose(g, np.prod(x, axis=1, keepdims=True) / x, rtol=1e-5)
    x32 = x.astype(np.float32)
    assert tg.grad(lambda x: np.sum(np.logaddexp.reduce(x, axis=1)))(x32).dtype == np.float32


def test_reduce_empty_is_constant():
    out = value(lambda x: np.multiply.reduce(x, axis=1), np.ones((2, 0)))
    assert type(out) is np.ndarray and np.array_equal(out, [1.0, 1.0])


def test_multiply_reduce_with_zeros_closed_form():
    x = np.array([2.0, 0.0, 3.0, 0.5])
    assert np.allclose(tg.grad(lambda x: np.multiply.reduce(x))(x), [0.0, 3.0, 0.0, 0.0])
    x2 = np.array([2.0, 0.0, 3.0, 0.0])
    assert np.allclose(tg.grad(lambda x: np.multiply.reduce(x))(x2), np.zeros(4))
    check_grads(np.multiply.reduce, [x], order=2)


def test_logaddexp_reduce_is_softmax_and_stable():
    x = np.array([1000.0, 1001.0, 999.0])
    g = tg.grad(lambda x: np.logaddexp.reduce(x))(x)
    e = np.exp(x - x.max())
    assert np.allclose(g, e / e.sum())


@settings(max_examples=15, deadline=None)
@given(
    shape=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    data=st.data(),
    ufunc=st.sampled_from([np.multiply, np.logaddexp, np.hypot]),
)
def test_reduce_axes_hypothesis(shape, data, ufunc):
    ndim = len(shape)
    axis = data.draw(st.one_of(st.none(), st.integers(-ndim, ndim - 1), st.sets(st.integers(0, ndim - 1)).map(tuple)))
    keepdims = data.draw(st.booleans())
    x = sample(ufunc, tuple(shape))
    fun = lambda x: ufunc.reduce(x, axis=axis, keepdims=keepdims)  # noqa: E731
    assert np.allclose(value(fun, x), fun(x))
    check_grads(fun, [x], order=1, batch=2)


def test_fold_that_numpy_does_not_compute_is_refused():
    # NumPy 2's arctan2.reduce does not return the documented left fold on contiguous data;
    # tapegrad must then raise rather than differentiate a different function.
    x = np.array([[1.5, 2.0, 3.0, 5.0], [0.5, 1.0, 2.0, 4.0]])
    fun = lambda x: np.arctan2.reduce(x, axis=1)  # noqa: E731
    try:
        out = value(fun, x)
    except UnsupportedFunctionError:
        return
    assert np.allclose(out, fun(x))
    check_grads(fun, [x], order=2)


def test_constant_ufunc_methods_return_plain_arrays():
    seen = []

    def f(x):
        seen.append(np.logical_or.reduce(x, axis=0))
        seen.append(np.greater.outer(x, x))
        seen.append(np.logical_and.accumulate(x))
        seen.append(np.logical_xor.reduceat(x, [0, 1]))
        return np.sum(x)

    tg.grad(f)(np.array([0.5, -1.0, 2.0]))
    assert all(isinstance(s, (np.ndarray, np.bool_)) for s in seen)  # NumPy's own types, no tracer
    assert np.array_equal(seen[1], np.greater.outer([0.5, -1.0, 2.0], [0.5, -1.0, 2.0]))


# ----------------------------------------------------------------- accumulate
@pytest.mark.parametrize(
    "ufunc", [np.add, np.multiply, np.maximum, np.minimum, np.logaddexp, np.hypot, np.fmax, np.subtract, np.true_divide, np.fmod, np.arctan2],
    ids=lambda u: u.__name__,
)
def test_accumulate(ufunc):
    x = sample(ufunc, (3, 5))
    for axis in (0, 1, -1):
        fun = lambda x: ufunc.accumulate(x, axis=axis)  # noqa: E731
        try:
            out = value(fun, x)
        except UnsupportedFunctionError:  # only for a fold NumPy itself does not compute
            assert ufunc not in (np.add, np.multiply, np.maximum, np.minimum, np.subtract, np.true_divide)
            continue
        assert np.allclose(out, fun(x))
        check_grads(fun, [x], order=2)


def test_accumulate_closed_forms_and_dtype():
    x = np.array([1.0, 2.0, 0.0, 4.0])
    assert np.allclose(tg.grad(lambda x: np.sum(np.add.accumulate(x)))(x), [4.0, 3.0, 2.0, 1.0])
    # d/dx_k sum_i prod_{j<=i} x_j = sum_{i>=k} prod_{j<=i, j!=k} x_j (exact with a zero).
    assert np.allclose(tg.grad(lambda x: np.sum(np.multiply.accumulate(x)))(x), [3.0, 1.0, 10.0, 0.0])
    assert np.allclose(tg.grad(lambda x: np.sum(np.maximum.accumulate(x)))(np.array([1.0, 3.0, 2.0, 5.0])), [1.0, 2.0, 0.0, 1.0])
    x32 = x.astype(np.float32)
    assert tg.grad(lambda x: np.sum(np.multiply.accumulate(x)))(x32).dtype == np.float32
    assert type(value(lambda x: np.add.accumulate(x, axis=1), np.ones((2, 0)))) is np.ndarray
    h = tg.hessian(lambda x: np.sum(np.add.accumulate(x) ** 2))(x)
    n = len(x)  # d2/dx_j dx_k of sum_i c_i**2 = 2 * #{i >= max(j, k)}
    assert np.allclose(h, 2 * (n - np.maximum.outer(np.arange(n), np.arange(n))))


# ----------------------------------------------------------------- reduceat
@pytest.mark.parametrize("indices", [[0, 2, 3], [0, 2, 2, 1, 4], [1], [3, 0], [0, 4]])
def test_add_reduceat(indices):
    x = point((3, 5))
    for axis in (1, -1):
        fun = lambda x: np.add.reduceat(x, indices, axis=axis)  # noqa: E731
        assert np.allclose(value(fun, x), fun(x))
        check_grads(fun, [x], order=2)
    fun0 = lambda x: np.add.reduceat(x.T, indices, axis=0)  # noqa: E731
    check_grads(fun0, [x], order=2)


def test_add_reduceat_closed_form():
    x = np.arange(6.0)
    # segments [0, 3), [3] (3 >= 1), [1, 6): entries 1, 2 appear twice, 3 to 5 twice.
    g = tg.grad(lambda x: np.sum(np.add.reduceat(x, [0, 3, 1])))(x)
    assert np.array_equal(g, [1.0, 2.0, 2.0, 2.0, 1.0, 1.0])


@pytest.mark.parametrize("ufunc", [np.multiply, np.maximum, np.logaddexp])
def test_other_reduceat(ufunc):
    x = point((2, 6))
    fun = lambda x: ufunc.reduceat(x, [0, 3, 3, 1, 5], axis=1)  # noqa: E731
    assert np.allclose(value(fun, x), fun(x))
    check_grads(fun, [x], order=2)


# ----------------------------------------------------------------- outer
@pytest.mark.parametrize("ufunc", [np.add, np.subtract, np.multiply, np.true_divide, np.power, np.logaddexp, np.maximum, np.hypot, np.arctan2])
def test_outer(ufunc):
    for sa, sb in [((3,), (2,)), ((2, 2), (3,)), ((), (2,)), ((2,), ())]:
        a, b = RNG.uniform(0.5, 2.0, sa), RNG.uniform(0.5, 2.0, sb)
        assert np.allclose(value(ufunc.outer, a, b), ufunc.outer(a, b))
        check_grads(ufunc.outer, [a, b], order=2)


def test_multiply_outer_closed_form():
    a, b = np.array([1.0, 2.0]), np.array([3.0, 4.0, 5.0])
    ga, gb = tg.grad(lambda a, b: np.sum(np.multiply.outer(a, b)), argnums=(0, 1))(a, b)
    assert np.allclose(ga, b.sum()) and np.allclose(gb, a.sum())


# ----------------------------------------------------------------- at
def _at(ufunc, idx):
    def f(x, *v):
        acc = x * 1.0
        alias = acc
        ufunc.at(acc, idx, *v)
        assert alias is acc
        return alias

    return f


@pytest.mark.parametrize("ufunc", [np.add, np.subtract, np.multiply, np.true_divide, np.maximum, np.minimum, np.logaddexp, np.power])
def test_binary_at_matches_numpy_and_differentiates(ufunc):
    x = RNG.uniform(0.5, 2.0, 6)
    v = RNG.uniform(0.5, 2.0, 5)
    idx = np.array([0, 2, 2, 5, 2])
    expected = x.copy()
    ufunc.at(expected, idx, v)
    f = _at(ufunc, idx)
    assert np.allclose(value(f, x, v), expected)
    check_grads(f, [x, v], order=2)


def test_unary_at_and_multi_index():
    x = RNG.uniform(0.5, 2.0, 5)
    for ufunc, idx in [(np.negative, [1, 1, 3]), (np.sin, [0, 0, 4]), (np.exp, np.array([2]))]:
        expected = x.copy()
        ufunc.at(expected, idx)
        assert np.allclose(value(_at(ufunc, idx), x), expected)
        check_grads(_at(ufunc, idx), [x], order=2)
    m, v = RNG.standard_normal((3, 4)), RNG.standard_normal(2)
    idx = (np.array([0, 0, 2]), slice(1, 3))
    expected = m.copy()
    np.add.at(expected, idx, v)
    assert np.allclose(value(_at(np.add, idx), m, v), expected)
    check_grads(_at(np.add, idx), [m, v], order=2)


def test_add_at_closed_form_and_dtype():
    idx = np.array([0, 0, 1, 3, 0])
    x, v = np.zeros(4), np.arange(1.0, 6.0)
    gx, gv = tg.grad(lambda x, v: np.sum(_at(np.add, idx)(x, v) * np.array([1.0, 2.0, 3.0, 4.0])), argnums=(0, 1))(x, v)
    assert np.array_equal(gx, [1.0, 2.0, 3.0, 4.0]) and np.array_equal(gv, [1.0, 1.0, 2.0, 4.0, 1.0])
    out = value(_at(np.add, idx), x.astype(np.float32), v)
    assert out.dtype == np.float32
    assert tg.grad(lambda x: np.sum(_at(np.multiply, idx)(x, v)))(np.ones(4, np.float32)).dtype == np.float32


def test_at_with_plain_target_and_traced_values_raises():
    with pytest.raises(GradientDroppedError, match="plain array"):
        tg.grad(lambda v: np.sum(v) + np.add.at(_PLAIN3.copy(), [0, 1], v))(np.ones(2))


def test_at_through_a_view_updates_the_base():
    def f(x, v):
        acc = x * 1.0
        view = acc[1:4]
        np.add.at(view, [0, 0, 2], v)
        return acc

    x, v = np.arange(5.0), np.array([1.0, 2.0, 3.0])
    expected = x.copy()
    np.add.at(expected[1:4], [0, 0, 2], v)
    assert np.array_equal(value(f, x, v), expected)
    check_grads(f, [x, v], order=2)
