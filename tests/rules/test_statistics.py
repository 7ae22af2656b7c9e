"""Statistics: average, var, std, median, percentile, quantile and their NaN variants.

Order-2 checks against finite differences over axes/keepdims/where, closed
forms (d var/dx, d average/dw, tie splitting of order statistics), forward
values against NumPy for every quantile method, float32 preservation and
hypothesis over shapes and axes for var.
"""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad.errors import NonDifferentiableArgumentError
from tapegrad.rules.statistics import METHODS
from tapegrad.testing import check_grads

RNG = np.random.default_rng(1)
X3 = RNG.standard_normal((3, 4, 2))
X2 = RNG.standard_normal((3, 5))
X1 = RNG.standard_normal(6)
MASK = RNG.random((3, 4, 2)) > 0.4
MASK[0] = MASK[:, :2] = MASK[..., 0] = True  # at least two entries in every slice
X2_NAN = X2.copy()
X2_NAN[0, 1] = X2_NAN[2, 3] = X2_NAN[2, 0] = np.nan

AXES = [None, 0, -1, (0, 2)]


def _value(fun, *args):
    """The forward value computed on tracers (must equal NumPy's)."""
    return tg.vjp(fun, *args)[0]


# --------------------------------------------------------------- var, std
VAR_CASES = [
    (fun, axis, keepdims, ddof)
    for fun in (np.var, np.std)
    for axis in AXES
    for keepdims in (False, True)
    for ddof in (0, 1)
]


@pytest.mark.parametrize("fun,axis,keepdims,ddof", VAR_CASES)
def test_var_std(fun, axis, keepdims, ddof):
    f = lambda x: fun(x, axis=axis, keepdims=keepdims, ddof=ddof)  # noqa: E731
    check_grads(f, [X3])
    assert np.allclose(_value(f, X3), f(X3))


@pytest.mark.parametrize(
    "fun",
    [
        lambda x: np.var(x, axis=1, where=MASK),
        lambda x: np.std(x, axis=(0, 2), where=MASK, keepdims=True, correction=1),
        lambda x: np.var(x, correction=1.5),
        lambda x: np.var(x, axis=0, mean=np.mean(x, axis=0, keepdims=True)),
        lambda x: np.std(x, axis=-1, mean=np.zeros((3, 4, 1))),
        lambda x: np.var(x[..., 0] + 1j * x[..., 1], axis=0),
        lambda x: np.var(x[0, :1], axis=0),  # size-1 slice: var is identically 0
    ],
)
def test_var_variants(fun):
    check_grads(fun, [X3])
    assert np.allclose(_value(fun, X3), fun(X3))


def test_var_complex_input():
    z = X2 + 1j * RNG.standard_normal(X2.shape)
    check_grads(lambda z: np.std(z, axis=1), [z])


@pytest.mark.parametrize("ddof", [0, 1, 2])
def test_var_closed_form(ddof):
    x = RNG.standard_normal(7)
    expected = 2 * (x - x.mean()) / (x.size - ddof)
    assert np.allclose(tg.grad(lambda x: np.var(x, ddof=ddof))(x), expected)
    assert np.allclose(tg.grad(lambda x: np.std(x, ddof=ddof))(x), expected / (2 * np.std(x, ddof=ddof)))
    # The Hessian of var is (2 / (n - ddof)) (I - 11^T / n).
    n = x.size
    assert np.allclose(tg.hessian(lambda x: np.var(x, ddof=ddof))(x), 2 / (n - ddof) * (np.eye(n) - 1 / n))


def test_var_ddof_and_correction_conflict():
    with pytest.raises(ValueError, match="correction"):
        tg.grad(lambda x: np.var(x, ddof=1, correction=1))(X1)


def test_var_too_few_degrees_of_freedom_warns():
    with pytest.warns(RuntimeWarning, match="Degrees of freedom"):
        val = _value(lambda x: np.var(x, ddof=6), X1)
    assert np.isinf(val)


# --------------------------------------------------------------- average
@pytest.mark.parametrize(
    "fun,args",
    [
        (lambda x: np.average(x), [X3]),
        (lambda x: np.average(x, axis=(0, 2), keepdims=True), [X3]),
        (lambda x, w: np.average(x, axis=1, weights=w), [X3, RNG.random(4) + 0.5]),
        (lambda x, w: np.average(x, axis=(0, 2), weights=w), [X3, RNG.random((3, 2)) + 0.5]),
        (lambda x, w: np.average(x, axis=(2, 0), weights=w, keepdims=True), [X3, RNG.random((2, 3)) + 0.5]),
        (lambda x, w: np.average(x, weights=w), [X3, RNG.random((3, 4, 2)) + 0.5]),
        (lambda x, w: np.average(x, axis=-1, weights=w, returned=True), [X2, RNG.random(5) + 0.5]),
        (lambda x, w: np.average(x, axis=0, weights=w, returned=True, keepdims=True), [X2, RNG.random(3) + 0.5]),
        (lambda x: np.average(x, axis=1, returned=True), [X2]),
    ],
)
def test_average(fun, args):
    check_grads(fun, args)
    val = _value(fun, *args)
    ref = fun(*args)
    for v, r in zip(val if isinstance(ref, tuple) else [val], ref if isinstance(ref, tuple) else [ref]):
        assert np.shape(v) == np.shape(r) and np.allclose(v, r)


def test_average_closed_form():
    x, w = RNG.standard_normal(5), RNG.random(5) + 0.1
    avg = np.average(x, weights=w)
    gx, gw = tg.grad(lambda x, w: np.average(x, weights=w), argnums=(0, 1))(x, w)
    assert np.allclose(gx, w / w.sum())
    assert np.allclose(gw, (x - avg) / w.sum())


def test_average_errors():
    with pytest.raises(ZeroDivisionError):
        tg.grad(lambda x: np.average(x, weights=np.array([1.0, -1.0, 0, 0, 0, 0])))(X1)
    with pytest.raises(TypeError, match="Axis must be specified"):
        tg.grad(lambda x: np.average(x, weights=np.ones(5)))(X2)


# --------------------------------------------------------------- nanmean, nanvar, nanstd
@pytest.mark.parametrize("fun", [np.nanmean, np.nanvar, np.nanstd])
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_nan_moments(fun, axis, keepdims):
    f = lambda x: fun(x, axis=axis, keepdims=keepdims)  # noqa: E731
    check_grads(f, [X2_NAN])
    assert np.allclose(_value(f, X2_NAN), f(X2_NAN))
    g = tg.grad(lambda x: np.sum(f(x)))(X2_NAN)
    assert np.all(np.isfinite(g)) and np.all(g[np.isnan(X2_NAN)] == 0)


@pytest.mark.parametrize(
    "fun",
    [
        lambda x: np.nanmean(x, axis=0, where=MASK[..., 0].T[:, :3].T),
        lambda x: np.nanvar(x, axis=1, ddof=1),
        lambda x: np.nanstd(x, axis=0, correction=1),
    ],
)
def test_nan_moment_variants(fun):
    check_grads(fun, [X2_NAN[:, :4]])
    assert np.allclose(_value(fun, X2_NAN[:, :4]), fun(X2_NAN[:, :4]))


def test_nanvar_closed_form():
    x = np.array([1.0, np.nan, 4.0, 2.0])
    kept = x[~np.isnan(x)]
    expected = np.zeros(4)
    expected[~np.isnan(x)] = 2 * (kept - kept.mean()) / (kept.size - 1)
    assert np.allclose(tg.grad(lambda x: np.nanvar(x, ddof=1))(x), expected)


def test_nan_all_nan_slices():
    x = np.array([[np.nan, np.nan], [1.0, 3.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for fun in (np.nanmean, np.nanvar, np.nanmedian):
            val = _value(lambda x: fun(x, axis=1), x)
            assert np.array_equal(val, fun(x, axis=1), equal_nan=True)
            g = tg.grad(lambda x: np.nansum(fun(x, axis=1)))(x)
            assert np.all(np.isfinite(g)) and np.all(g[0] == 0)


# --------------------------------------------------------------- median, percentile, quantile
@pytest.mark.parametrize("fun", [np.median, np.nanmedian])
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2), (-1, 0, 1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_median(fun, axis, keepdims):
    f = lambda x: fun(x, axis=axis, keepdims=keepdims)  # noqa: E731
    check_grads(f, [X3])
    val = _value(f, X3)
    assert np.shape(val) == np.shape(f(X3)) and np.allclose(val, f(X3))


QUANTILE_SHAPE_CASES = [
    (fun, scale, q, axis, keepdims)
    for fun, scale in [(np.quantile, 1.0), (np.percentile, 100.0), (np.nanquantile, 1.0), (np.nanpercentile, 100.0)]
    for q in (0.37, [0.0, 0.25, 1.0], [[0.1, 0.9], [0.5, 0.55]])
    for axis, keepdims in [(None, False), (1, False), (-1, True), ((0, 2), True), ((0, 2), False)]
    # NumPy 2.4's nanquantile orders the axes of a 2-D q with a tuple axis differently from
    # quantile (a NumPy quirk); tapegrad follows quantile there, tested below.
    if not (fun in (np.nanquantile, np.nanpercentile) and np.ndim(q) == 2 and isinstance(axis, tuple))
]


@pytest.mark.parametrize("fun,scale,q,axis,keepdims", QUANTILE_SHAPE_CASES)
def test_quantile_shapes(fun, scale, q, axis, keepdims):
    qs = np.multiply(q, scale) if isinstance(q, list) else q * scale
    f = lambda x: fun(x, qs, axis=axis, keepdims=keepdims)  # noqa: E731
    check_grads(f, [X3])
    val = _value(f, X3)
    assert np.shape(val) == np.shape(f(X3)) and np.allclose(val, f(X3))


def test_nanquantile_2d_q_tuple_axis_follows_quantile():
    q = np.array([[0.1, 0.9], [0.5, 0.55]])
    val = _value(lambda x: np.nanquantile(x, q, axis=(0, 2), keepdims=True), X3)
    ref = np.quantile(X3, q, axis=(0, 2), keepdims=True)
    assert val.shape == ref.shape and np.allclose(val, ref)


@pytest.mark.parametrize("method", METHODS)
def test_quantile_methods(method):
    q = np.array([0.0, 0.05, 0.3, 0.5, 0.71, 1.0])
    check_grads(lambda x: np.quantile(x, q, axis=1, method=method), [X2])
    check_grads(lambda x: np.nanquantile(x, q, axis=0, method=method), [X2_NAN])


@pytest.mark.parametrize("method", METHODS)
def test_quantile_methods_match_numpy(method):
    q = np.linspace(0.0, 1.0, 23)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for n in range(1, 8):
            x = RNG.standard_normal((2, n))
            xn = x.copy()
            xn[0, 0] = np.nan
            for fun, a in ((np.quantile, x), (np.nanquantile, xn)):
                f = lambda a: fun(a, q, axis=1, method=method)  # noqa: E731
                assert np.allclose(_value(f, a), f(a), rtol=1e-12, atol=1e-14, equal_nan=True)


@pytest.mark.parametrize("method", ["linear", "hazen", "weibull", "median_unbiased", "normal_unbiased",
                                    "interpolated_inverted_cdf", "lower", "nearest", "midpoint"])
def test_quantile_traced_q(method):
    check_grads(lambda x, q: np.quantile(x, q, axis=1, method=method), [X2, np.array([0.13, 0.62, 0.97])])
    check_grads(lambda x, q: np.nanpercentile(x, q, axis=0, method=method), [X2_NAN, np.array(37.0)])


def test_quantile_q_closed_form():
    x = np.array([4.0, 1.0, 3.0, 0.0])  # sorted: 0 1 3 4; q = 0.5 sits between 1 and 3
    gq = tg.grad(lambda q: np.quantile(x, q))(np.array(0.5))
    assert np.isclose(gq, (3.0 - 1.0) * (x.size - 1))


def test_median_tie_split():
    x = np.array([3.0, 1.0, 3.0])
    assert np.array_equal(tg.grad(np.median)(x), [0.5, 0.0, 0.5])
    x4 = np.array([2.0, 5.0, 2.0, 2.0, 9.0])
    assert np.allclose(tg.grad(np.median)(x4), [1 / 3, 0.0, 1 / 3, 1 / 3, 0.0])


def test_percentile_interpolation_weights():
    x = np.array([10.0, 0.0, 20.0, 30.0])  # sorted 0 10 20 30; q = 40% -> index 1.2
    g = tg.grad(lambda x: np.percentile(x, 40.0))(x)
    assert np.allclose(g, [0.8, 0.0, 0.2, 0.0])
    # Ties between the two interpolated order statistics share their weights.
    x_tie = np.array([10.0, 0.0, 10.0, 30.0])
    assert np.allclose(tg.grad(lambda x: np.percentile(x, 40.0))(x_tie), [0.5, 0.0, 0.5, 0.0])


def test_median_nan_propagates_with_zero_gradient():
    val = _value(np.median, X2_NAN)
    assert np.isnan(val)
    assert np.all(tg.grad(lambda x: np.nanmedian(x))(X2_NAN)[np.isnan(X2_NAN)] == 0)


def test_quantile_errors():
    with pytest.raises(ValueError, match="range"):
        tg.grad(lambda x: np.quantile(x, 1.5))(X1)
    with pytest.raises(ValueError, match="not a valid method"):
        tg.grad(lambda x: np.quantile(x, 0.5, method="bogus"))(X1)
    with pytest.raises(NonDifferentiableArgumentError, match="weights"):
        tg.grad(lambda x: np.quantile(x, 0.5, method="inverted_cdf", weights=np.ones(6)))(X1)


# --------------------------------------------------------------- dtype, methods
FLOAT32_FUNS = [
    np.var, np.std, np.median, np.nanmedian, np.nanmean, np.nanvar, np.nanstd,
    lambda x: np.average(x, axis=0),
    lambda x: np.percentile(x, 30.0, axis=1),
    lambda x: np.quantile(x, 0.3, method="hazen"),
    lambda x: np.nanquantile(x, 0.8, axis=0, keepdims=True),
]


@pytest.mark.parametrize("fun", FLOAT32_FUNS)
def test_float32_preserved(fun):
    x = X2.astype(np.float32)
    val = _value(fun, x)
    assert val.dtype == np.asarray(fun(x)).dtype == np.float32
    g = tg.grad(lambda x: np.sum(np.sin(fun(x))))(x)
    assert g.dtype == np.float32
    assert np.allclose(g, tg.grad(lambda x: np.sum(np.sin(fun(x))))(X2), rtol=1e-3, atol=1e-3)


def test_var_methods_on_tracer():
    check_grads(lambda x: x.var(axis=1, ddof=1) + x.std(axis=1), [X2])


# --------------------------------------------------------------- hypothesis
@st.composite
def _array_and_axis(draw):
    shape = tuple(draw(st.lists(st.integers(2, 3), min_size=1, max_size=3)))
    nd = len(shape)
    choices = [None] + list(range(-nd, nd))
    if nd >= 2:
        choices.append(tuple(sorted(draw(st.sets(st.integers(0, nd - 1), min_size=1, max_size=nd)))))
    seed = draw(st.integers(0, 2**16))
    return np.random.default_rng(seed).standard_normal(shape), draw(st.sampled_from(choices))


@settings(max_examples=15, deadline=None)
@given(_array_and_axis(), st.booleans(), st.integers(0, 1))
def test_hypothesis_var(data, keepdims, ddof):
    x, axis = data
    f = lambda x: np.var(x, axis=axis, keepdims=keepdims, ddof=ddof)  # noqa: E731
    check_grads(f, [x])
    n = x.size // np.var(x, axis=axis).size
    mean = np.mean(x, axis=axis, keepdims=True)
    assert np.allclose(tg.grad(lambda x: np.sum(f(x)))(x), 2 * (x - mean) / (n - ddof))


@settings(max_examples=15, deadline=None)
@given(_array_and_axis(), st.floats(0.0, 1.0))
def test_hypothesis_quantile(data, q):
    x, axis = data
    f = lambda x: np.quantile(x, q, axis=axis)  # noqa: E731
    check_grads(f, [x])
    assert np.allclose(_value(f, x), f(x))
