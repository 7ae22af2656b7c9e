"""Reductions, cumulative ops, differences and their NaN-ignoring variants.

Every rule is checked at order 2 against finite differences over axis
variants (None, int, negative, tuple), keepdims, ``where`` masks, 0-d and
size-1 axes; plus closed forms (products with zeros, tie splitting), float32
dtype preservation and hypothesis over shapes and axes.
"""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad.errors import GradientDroppedError
from tapegrad.testing import check_grads

RNG = np.random.default_rng(0)
X3 = RNG.standard_normal((3, 4, 2))
X2 = RNG.standard_normal((3, 4))
X1 = RNG.standard_normal(5)
X0 = np.array(0.7)
MASK = RNG.random((3, 4, 2)) > 0.4
MASK[0] = MASK[:, 0] = MASK[..., 0] = True  # no empty slice along any axis


def _with_zeros(x, *positions):
    x = x.copy()
    for p in positions:
        x[p] = 0.0
    return x


X2_ONE_ZERO = _with_zeros(X2, (1, 2))
X2_ZEROS = _with_zeros(X2, (0, 1), (1, 1), (1, 3), (2, 2))  # a row with two zeros, a column with two
X2_NAN = _with_zeros(X2, (0, 1), (2, 3)).copy()
X2_NAN[0, 1] = X2_NAN[2, 3] = np.nan

AXES = [None, 0, -1, (0, 2), (-1, 0, 1)]

REDUCE_CASES = [
    (name, fun, axis, keepdims)
    for name, fun in [("sum", np.sum), ("prod", np.prod), ("mean", np.mean), ("max", np.max),
                      ("min", np.min), ("amax", np.amax), ("amin", np.amin), ("ptp", np.ptp)]
    for axis in AXES
    for keepdims in (False, True)
]


@pytest.mark.parametrize("name,fun,axis,keepdims", REDUCE_CASES)
def test_reduction_axes(name, fun, axis, keepdims):
    check_grads(lambda x: fun(x, axis=axis, keepdims=keepdims), [X3])


@pytest.mark.parametrize("fun", [np.sum, np.prod, np.mean, np.max, np.min, np.ptp, np.cumsum, np.cumprod])
def test_zero_dim_and_size_one(fun):
    check_grads(fun, [X0])
    check_grads(lambda x: fun(x, axis=1), [X2[:, :1]])


@pytest.mark.parametrize(
    "fun",
    [
        lambda x: np.sum(x, axis=1, where=MASK),
        lambda x: np.sum(x, axis=(0, 2), where=MASK, keepdims=True, initial=1.5),
        lambda x: np.mean(x, axis=-1, where=MASK),
        lambda x: np.mean(x, where=MASK),
        lambda x: np.prod(x, axis=1, where=MASK, initial=2.0),
        lambda x: np.prod(_with_zeros(x, (0, 0, 0)), axis=0, where=MASK),
        lambda x: np.max(x, axis=(0, 1), where=MASK, initial=-5.0),
        lambda x: np.min(x, axis=2, where=MASK, initial=5.0, keepdims=True),
        lambda x: np.nansum(x, axis=1, where=MASK),
        lambda x: np.nanmax(x, axis=0, where=MASK, initial=-9.0),
    ],
)
def test_where_masks(fun):
    check_grads(fun, [X3])


@pytest.mark.parametrize("x", [X2_ONE_ZERO, X2_ZEROS, _with_zeros(X2, (0, 0), (0, 1), (0, 2))])
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1)])
def test_prod_with_zeros(x, axis):
    check_grads(lambda x: np.prod(x, axis=axis), [x])


def test_prod_zero_closed_form():
    x = np.array([2.0, 0.0, 3.0, 5.0])
    assert np.array_equal(tg.grad(np.prod)(x), [0.0, 30.0, 0.0, 0.0])
    x2 = np.array([2.0, 0.0, 3.0, 0.0])
    assert np.array_equal(tg.grad(np.prod)(x2), np.zeros(4))
    h = tg.hessian(np.prod)(x2)
    expected = np.zeros((4, 4))
    expected[1, 3] = expected[3, 1] = 6.0  # d2/dx1 dx3 = product of the others
    assert np.array_equal(h, expected)


def test_prod_initial_scales_gradient():
    x = np.array([2.0, 0.0, 3.0])
    assert np.array_equal(tg.grad(lambda x: np.prod(x, initial=4.0))(x), [0.0, 24.0, 0.0])


@pytest.mark.parametrize("fun", [np.max, np.amax, lambda x: -np.min(-x), lambda x: np.nanmax(x)])
def test_max_tie_split(fun):
    x = np.array([1.0, 3.0, -2.0, 3.0])
    assert np.array_equal(tg.grad(fun)(x), [0.0, 0.5, 0.0, 0.5])


def test_max_tie_split_per_slice():
    x = np.array([[4.0, 4.0, 4.0], [1.0, 2.0, 0.0]])
    g = tg.grad(lambda x: np.sum(np.max(x, axis=1) * np.array([3.0, 1.0])))(x)
    assert np.allclose(g, [[1.0, 1.0, 1.0], [0.0, 1.0, 0.0]])


def test_max_won_by_initial_has_zero_gradient():
    x = np.array([[1.0, 2.0], [7.0, 3.0]])
    g = tg.grad(lambda x: np.sum(np.max(x, axis=1, initial=5.0)))(x)
    assert np.array_equal(g, [[0.0, 0.0], [1.0, 0.0]])


def test_ptp_closed_form():
    x = np.array([[1.0, 5.0, -2.0], [0.5, 0.25, 3.0]])
    g = tg.grad(lambda x: np.sum(np.ptp(x, axis=1)))(x)
    assert np.array_equal(g, [[0.0, 1.0, -1.0], [0.0, -1.0, 1.0]])


# --------------------------------------------------------------- cumulative ops
CUM_CASES = [(fun, x, axis) for fun in (np.cumsum, np.cumprod, np.nancumsum, np.nancumprod)
             for x, axis in [(X1, None), (X1, 0), (X2, None), (X3, 1), (X3, -1), (X3, -3)]]


@pytest.mark.parametrize("fun,x,axis", CUM_CASES)
def test_cumulative(fun, x, axis):
    check_grads(lambda x: fun(x, axis=axis), [x])


@pytest.mark.parametrize("x", [X2_ONE_ZERO, X2_ZEROS, _with_zeros(X2, (0, 0), (0, 1), (0, 2))])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_cumprod_with_zeros(x, axis):
    check_grads(lambda x: np.cumprod(x, axis=axis), [x])


def test_cumsum_closed_form():
    x = RNG.standard_normal(6)
    # d sum(cumsum(x)) / dx_i = number of prefixes that contain i.
    assert np.array_equal(tg.grad(lambda x: np.sum(np.cumsum(x)))(x), np.arange(6, 0, -1))


def test_cumprod_zero_closed_form():
    x = np.array([2.0, 0.0, 3.0, 4.0])
    # cumprod = [x0, x0 x1, x0 x1 x2, x0 x1 x2 x3]; derivatives at x1 = 0:
    expected = [1.0, 2.0 + 2 * 3 + 2 * 3 * 4, 0.0, 0.0]
    assert np.array_equal(tg.grad(lambda x: np.sum(np.cumprod(x)))(x), expected)


@pytest.mark.parametrize("fun", [np.cumulative_sum, np.cumulative_prod])
@pytest.mark.parametrize("include_initial", [False, True])
def test_cumulative_array_api(fun, include_initial):
    check_grads(lambda x: fun(x, include_initial=include_initial), [X1])
    check_grads(lambda x: fun(x, axis=-2, include_initial=include_initial), [X3])
    val, _ = tg.vjp(lambda x: fun(x, axis=1, include_initial=include_initial), X2)
    assert np.allclose(val, fun(X2, axis=1, include_initial=include_initial))


def test_cumulative_sum_needs_axis_for_nd():
    with pytest.raises(ValueError, match="axis"):
        tg.grad(lambda x: np.sum(np.cumulative_sum(x)))(X2)


# --------------------------------------------------------------- diff, ediff1d, trapezoid
@pytest.mark.parametrize(
    "fun",
    [
        lambda x: np.diff(x),
        lambda x: np.diff(x, n=2, axis=0),
        lambda x: np.diff(x, n=3, axis=-2, prepend=1.5, append=np.ones((3, 2, 2))),
        lambda x: np.diff(x, n=0),
        lambda x: np.diff(x[0], axis=0, append=x[1, :1]),
    ],
)
def test_diff(fun):
    check_grads(fun, [X3])
    val, _ = tg.vjp(fun, X3)
    assert np.allclose(val, fun(X3))


def test_diff_traced_prepend():
    check_grads(lambda x, p: np.diff(x, axis=1, prepend=p), [X2, RNG.standard_normal((3, 1))])


@pytest.mark.parametrize("kwargs", [{}, {"to_begin": 2.0}, {"to_end": [1.0, 2.0], "to_begin": np.ones(2)}])
def test_ediff1d(kwargs):
    check_grads(lambda x: np.ediff1d(x, **kwargs), [X2])
    val, _ = tg.vjp(lambda x: np.ediff1d(x, **kwargs), X2)
    assert np.allclose(val, np.ediff1d(X2, **kwargs))


def test_ediff1d_traced_ends():
    check_grads(lambda x, b: np.ediff1d(x, to_begin=b, to_end=b * 2), [X1, RNG.standard_normal(2)])


@pytest.mark.parametrize(
    "fun,args",
    [
        (lambda y: np.trapezoid(y), [X3]),
        (lambda y: np.trapezoid(y, dx=0.3, axis=0), [X3]),
        (lambda y, x: np.trapezoid(y, x, axis=1), [X3, np.sort(RNG.standard_normal(4))]),
        (lambda y, x: np.trapezoid(y, x=x, axis=-1), [X3, RNG.standard_normal((3, 4, 2))]),
        (lambda y, dx: np.trapezoid(y, dx=dx), [X2, np.array(0.4)]),
    ],
)
def test_trapezoid(fun, args):
    check_grads(fun, args)
    val, _ = tg.vjp(fun, *args)
    assert np.allclose(val, fun(*args))


def test_trapezoid_closed_form():
    y = RNG.standard_normal(5)
    assert np.allclose(tg.grad(lambda y: np.trapezoid(y, dx=2.0))(y), [1.0, 2.0, 2.0, 2.0, 1.0])


# --------------------------------------------------------------- NaN-ignoring
@pytest.mark.parametrize("fun", [np.nansum, np.nanprod, np.nanmax, np.nanmin])
@pytest.mark.parametrize("axis", [None, 0, -1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_nan_reductions(fun, axis, keepdims):
    check_grads(lambda x: fun(x, axis=axis, keepdims=keepdims), [X2_NAN])
    g = tg.grad(lambda x: np.sum(fun(x, axis=axis, keepdims=keepdims)))(X2_NAN)
    assert np.all(np.isfinite(g)) and g[0, 1] == 0.0 and g[2, 3] == 0.0


def test_nansum_matches_sum_of_finite_entries():
    g = tg.grad(np.nansum)(X2_NAN)
    assert np.array_equal(g, np.where(np.isnan(X2_NAN), 0.0, 1.0))


def test_nanmax_all_nan_slice():
    x = np.array([[np.nan, np.nan], [1.0, 2.0]])
    with pytest.warns(RuntimeWarning, match="All-NaN"):
        g = tg.grad(lambda x: np.nansum(np.nanmax(x, axis=1)))(x)
    assert np.array_equal(g, [[0.0, 0.0], [0.0, 1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        val, _ = tg.vjp(lambda x: np.nanmin(x, axis=1), x)
        assert np.array_equal(val, np.nanmin(x, axis=1), equal_nan=True)


# --------------------------------------------------------------- methods, dtype, errors
@pytest.mark.parametrize(
    "fun",
    [
        lambda x: x.sum(axis=0),
        lambda x: x.prod(axis=1, keepdims=True),
        lambda x: x.mean(),
        lambda x: x.max(axis=-1),
        lambda x: x.min(axis=(0, 1)),
        lambda x: x.cumsum(axis=1),
        lambda x: x.cumprod(),
        lambda x: x.var(ddof=1),
        lambda x: x.std(axis=0),
    ],
)
def test_ndarray_methods(fun):
    check_grads(fun, [X3])


def test_ptp_method_on_tracer():
    # ndarray.ptp is gone in NumPy 2, but tapegrad's tracer keeps the method.
    g = tg.grad(lambda x: np.sum(x.ptp(axis=0) * np.arange(1.0, 5.0)))(X2)
    assert np.array_equal(g, tg.grad(lambda x: np.sum(np.ptp(x, axis=0) * np.arange(1.0, 5.0)))(X2))
    assert np.array_equal(np.abs(g).sum(axis=0), 2 * np.arange(1.0, 5.0))


FLOAT32_FUNS = [
    np.sum, np.prod, np.mean, np.max, np.min, np.ptp, np.cumsum, np.cumprod,
    lambda x: np.cumulative_sum(x, axis=0, include_initial=True),
    lambda x: np.cumulative_prod(x, axis=1),
    lambda x: np.prod(_with_zeros(x, (0, 1)), axis=1),
    lambda x: np.cumprod(_with_zeros(x, (0, 1)), axis=1),
    lambda x: np.diff(x, n=2, prepend=x[:, :1]), np.ediff1d, np.trapezoid,
    np.nansum, np.nanprod, np.nanmax, np.nanmin, np.nancumsum, np.nancumprod,
]


@pytest.mark.parametrize("fun", FLOAT32_FUNS)
def test_float32_preserved(fun):
    x = X2.astype(np.float32)
    val, _ = tg.vjp(fun, x)
    assert val.dtype == np.asarray(fun(x)).dtype
    g = tg.grad(lambda x: np.sum(np.sin(fun(x))))(x)
    assert g.dtype == np.float32
    g64 = tg.grad(lambda x: np.sum(np.sin(fun(x))))(x.astype(np.float64))
    assert np.allclose(g, g64, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("fun", [np.ptp, np.nansum, np.nanmax, np.nancumsum, np.nancumprod])
def test_out_is_refused(fun):
    out = np.empty(())
    if fun in (np.nancumsum, np.nancumprod):
        out = np.empty(X2.size)
    with pytest.raises(GradientDroppedError):
        tg.grad(lambda x: np.sum(fun(x, out=out)))(X2)


def test_diff_rejects_0d_and_negative_order():
    with pytest.raises(ValueError):
        tg.grad(lambda x: np.sum(np.diff(x)))(X0)
    with pytest.raises(ValueError):
        tg.grad(lambda x: np.sum(np.diff(x, n=-1)))(X1)


# --------------------------------------------------------------- hypothesis
@st.composite
def _array_and_axis(draw, allow_tuple=True):
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=3)))
    nd = len(shape)
    choices = [None] + list(range(-nd, nd))
    if allow_tuple and nd >= 2:
        choices.append(tuple(sorted(draw(st.sets(st.integers(0, nd - 1), min_size=1, max_size=nd)))))
    axis = draw(st.sampled_from(choices))
    seed = draw(st.integers(0, 2**16))
    return np.random.default_rng(seed).standard_normal(shape), axis


@settings(max_examples=15, deadline=None)
@given(_array_and_axis(), st.booleans(), st.sampled_from([np.sum, np.mean, np.max, np.prod]))
def test_hypothesis_reductions(data, keepdims, fun):
    x, axis = data
    check_grads(lambda x: fun(x, axis=axis, keepdims=keepdims), [x])
    val, _ = tg.vjp(lambda x: fun(x, axis=axis, keepdims=keepdims), x)
    assert np.allclose(val, fun(x, axis=axis, keepdims=keepdims))


@settings(max_examples=15, deadline=None)
@given(_array_and_axis(allow_tuple=False), st.sampled_from([np.cumsum, np.cumprod]))
def test_hypothesis_cumulative(data, fun):
    x, axis = data
    if axis is not None and np.ndim(x) == 0:
        axis = None
    check_grads(lambda x: fun(x, axis=axis), [x])


@settings(max_examples=15, deadline=None)
@given(_array_and_axis())
def test_hypothesis_sum_mean_closed_forms(data):
    x, axis = data
    count = x.size // max(np.sum(x, axis=axis).size, 1)
    assert np.array_equal(tg.grad(lambda x: np.sum(np.sum(x, axis=axis)))(x), np.ones_like(x))
    assert np.allclose(tg.grad(lambda x: np.sum(np.mean(x, axis=axis)))(x), np.full(x.shape, 1.0 / count))
