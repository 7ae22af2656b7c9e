"""Constant-valued functions (plain ndarray results equal to NumPy's on the raw values),
and the set/histogram functions whose value outputs do carry gradients."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import check_grads

X = np.array([[0.5, -1.0, 2.0], [2.0, 0.0, -3.5]])
Z = np.array([1 + 1j, 2.0, 0.0 + 0j, 3j])


def _inside(fun, x):
    """``fun`` applied to a tracer of ``x`` while a gradient is being taken."""
    seen = []

    def loss(t):
        seen.append(fun(t))
        return np.real(np.sum(t * t))  # real: grad refuses a complex output

    tg.grad(loss)(x)
    return seen[0]


def _value(fun, *args):
    """The forward value of a traced call (tracers unwrapped by tapegrad.vjp)."""
    return tg.vjp(fun, *args)[0]


def _assert_plain_equal(got, expected):
    if isinstance(expected, tuple):
        assert isinstance(got, tuple) and len(got) == len(expected)
        for g, e in zip(got, expected):
            _assert_plain_equal(g, e)
        return
    assert not isinstance(got, tg.Tracer)
    np.testing.assert_array_equal(got, expected)
    if hasattr(expected, "dtype"):
        assert np.asarray(got).dtype == np.asarray(expected).dtype


CONSTANT_CASES = {
    "argmax": lambda t: np.argmax(t, axis=1),
    "argmin": lambda t: np.argmin(t),
    "argsort": lambda t: np.argsort(t, axis=0),
    "argpartition": lambda t: np.argpartition(t, 1, axis=1),
    "nonzero": np.nonzero,
    "flatnonzero": np.flatnonzero,
    "argwhere": lambda t: np.argwhere(t > 0),
    "searchsorted": lambda t: np.searchsorted(np.array([-1.0, 0.0, 1.0]), t),
    "searchsorted_sorter": lambda t: np.searchsorted(np.ravel(t), 0.1, sorter=np.argsort(np.ravel(t))),
    "count_nonzero": lambda t: np.count_nonzero(t, axis=0),
    "isclose": lambda t: np.isclose(t, 2.0),
    "allclose": lambda t: np.allclose(t, t + 1e-12),
    "array_equal": lambda t: np.array_equal(t, t),
    "array_equiv": lambda t: np.array_equiv(t, t[0:1]),
    "shape": np.shape,
    "ndim": np.ndim,
    "size": np.size,
    "result_type": lambda t: np.result_type(t, np.float32),
    "can_cast": lambda t: np.can_cast(t.dtype, np.float32),
    "min_scalar_type": np.min_scalar_type,
    "empty_like_shape": lambda t: np.empty_like(t).shape,
    "histogram_counts": lambda t: np.histogram(t, bins=np.array([-4.0, 0.0, 4.0]))[0],
    "bincount": lambda t: np.bincount(np.argsort(np.ravel(t))),
    "digitize": lambda t: np.digitize(t, np.array([-1.0, 0.0, 1.0])),
    "lexsort": lambda t: np.lexsort(t),
    "isin": lambda t: np.isin(t, np.array([2.0, 0.0])),
    "nanargmax": lambda t: np.nanargmax(t, axis=0),
    "nanargmin": np.nanargmin,
    "iscomplexobj": np.iscomplexobj,
    "isrealobj": np.isrealobj,
    "isreal": np.isreal,
    "iscomplex": np.iscomplex,
    "isposinf": lambda t: np.isposinf(t / np.array([0.5, 1.0, 1.0])),
    "isneginf": lambda t: np.isneginf(t),
    "sign": np.sign,
    "signbit": np.signbit,
    "floor": np.floor,
    "round": lambda t: np.round(t, 1),
    "shares_memory": lambda t: np.shares_memory(t, t),
}


@pytest.mark.parametrize("name", sorted(CONSTANT_CASES))
def test_constant_functions_return_numpy_results(name):
    fun = CONSTANT_CASES[name]
    _assert_plain_equal(_inside(fun, X), fun(X))


@pytest.mark.parametrize("fun", [np.iscomplex, np.isreal, np.argsort, lambda t: np.unique(t, return_index=True)[1]])
def test_constant_functions_on_complex(fun):
    _assert_plain_equal(_inside(fun, Z), fun(Z))


def test_constants_carry_no_gradient():
    # Indices used for selection: the gradient flows through the selection only.
    g = tg.grad(lambda t: np.sum(t[np.argmax(t, axis=1), np.arange(2)] * np.sign(t)[0, 0]))(X[:, :2])
    expected = np.zeros((2, 2))
    expected[0, 0] = expected[0, 1] = np.sign(X[0, 0])  # argmax of each row is column 0
    np.testing.assert_array_equal(g, expected)


@pytest.mark.parametrize(
    "like", [np.zeros_like, np.ones_like, lambda t: np.full_like(t, 7.0)], ids=["zeros", "ones", "full"]
)
def test_like_constructors_give_traced_constants_that_record_writes(like):
    # Equal to NumPy's values, zero derivative on their own ...
    with tg.GradientTape() as tape:
        t = tape.watch(X)
        c = like(t)
    assert isinstance(c, tg.Tracer)
    np.testing.assert_array_equal(tg.stop_gradient(c), like(X))
    assert tg.gradients(np.sum(c * 1.0), t) == [None]

    # ... and code that fills them in place, as written for ndarrays, is differentiated.
    def fill(x):
        out = like(x)
        for i in range(x.shape[0]):
            out[i] = x[i] ** 2
        return out

    check_grads(fill, [X], order=2)
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(fill(x)))(X), 2 * X)


def test_isscalar_is_not_dispatched_and_false():
    # np.isscalar has no __array_function__ hook; like an ndarray, a tracer is not a scalar.
    assert _inside(np.isscalar, X) is False


# ----------------------------------------------------------------- unique
def test_unique_values_and_tie_split():
    x = np.array([3.0, 1.0, 3.0, 2.0, 1.0, 3.0])
    out = _value(lambda t: np.unique(t, return_index=True, return_inverse=True, return_counts=True), x)
    ref = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    for got, want in zip(out, ref):
        np.testing.assert_array_equal(got, want)
    traced = _inside(lambda t: np.unique(t, return_index=True, return_inverse=True, return_counts=True), x)
    assert isinstance(traced[0], tg.Tracer) and all(not isinstance(o, tg.Tracer) for o in traced[1:])
    # Each unique value is shared equally among its equal entries.
    w = np.array([1.0, 10.0, 100.0])
    g = tg.grad(lambda t: np.sum(np.unique(t) * w))(x)
    np.testing.assert_allclose(g, [100 / 3, 0.5, 100 / 3, 10.0, 0.5, 100 / 3])


def test_unique_gradients():
    check_grads(np.unique, [np.array([0.3, -1.0, 2.0])], order=2)
    check_grads(lambda t: np.unique(np.reshape(t, (2, 2)), axis=0), [np.array([2.0, 1.0, 0.0, 3.0])], order=2)
    check_grads(lambda t: np.unique_values(t), [np.array([1 + 1j, 2.0, 3j])], order=2)
    rows = np.array([[1.0, 2.0], [0.0, 5.0], [1.0, 2.0]])
    np.testing.assert_array_equal(_value(lambda t: np.unique(t, axis=0), rows), np.unique(rows, axis=0))
    g = tg.grad(lambda t: np.sum(np.unique(t, axis=0) * np.array([[1.0, 2.0], [3.0, 4.0]])))(rows)
    np.testing.assert_allclose(g, [[1.5, 2.0], [1.0, 2.0], [1.5, 2.0]])
    assert tg.grad(lambda t: np.sum(np.unique(t)))(np.array([1.0, 1.0], np.float32)).dtype == np.float32


@pytest.mark.parametrize("fun", [np.unique_values, np.unique_counts, np.unique_inverse, np.unique_all])
@pytest.mark.parametrize("x", [np.array([3.0, 1.0, 3.0, np.nan, np.nan]), Z[[0, 1, 0, 3]]])
def test_array_api_unique(fun, x):
    got, ref = _value(fun, x), fun(x)
    if isinstance(ref, tuple):
        assert type(got) is type(ref)
        for g, r in zip(got, ref):
            np.testing.assert_array_equal(g, r)
    else:
        np.testing.assert_array_equal(got, ref)


def test_unique_inf_duplicates():
    x = np.array([np.inf, 1.0, np.inf])
    np.testing.assert_array_equal(_value(np.unique, x), np.unique(x))
    # Documented: repeated non-finite values give their cotangent to the first occurrence.
    np.testing.assert_allclose(tg.grad(lambda t: np.sum(np.unique(t)))(x), [1.0, 1.0, 0.0])


# ----------------------------------------------------------------- bincount, histogram
def test_bincount_weights():
    idx = np.array([0, 2, 2, 5])
    check_grads(lambda w: np.bincount(idx, w), [np.arange(4.0)], order=2)
    check_grads(lambda w: np.bincount(idx, weights=w, minlength=8), [np.arange(4.0)], order=2)
    value = _value(lambda w: np.bincount(idx, w), np.arange(4.0))
    np.testing.assert_array_equal(value, np.bincount(idx, np.arange(4.0)))
    np.testing.assert_array_equal(tg.jacobian(lambda w: np.bincount(idx, w))(np.ones(4))[2], [0, 1, 1, 0])
    with pytest.raises(ValueError):
        tg.grad(lambda w: np.sum(np.bincount(idx, w)))(np.ones(3))


A = np.random.default_rng(3).standard_normal(20)


def test_histogram_edges_follow_min_max():
    check_grads(lambda a: np.histogram_bin_edges(a, 5), [A], order=2)
    check_grads(lambda a: np.histogram(a, "auto")[1], [A], order=1)
    for bins in (5, "auto", np.array([-3.0, 0.0, 3.0])):
        np.testing.assert_allclose(_value(lambda a: np.histogram_bin_edges(a, bins), A), np.histogram_bin_edges(A, bins), rtol=1e-15)
    # edges_k = min + k (max - min) / n
    k = np.arange(6) / 5
    jac = tg.jacobian(lambda a: np.histogram_bin_edges(a, 5))(A)
    np.testing.assert_allclose(jac[:, np.argmin(A)], 1 - k)
    np.testing.assert_allclose(jac[:, np.argmax(A)], k)
    # a fixed range: the edges are constants
    assert not isinstance(_inside(lambda a: np.histogram_bin_edges(a, 4, range=(-1, 1)), A), tg.Tracer)


def test_histogram_weights_and_density():
    check_grads(lambda a: np.histogram(a, 5, density=True)[0], [A], order=2)
    check_grads(lambda a, w: np.histogram(a, 4, weights=w), [A, A**2], order=2)
    check_grads(lambda w: np.histogram(A, np.array([-1.0, 0.0, 0.5, 1.0]), weights=w, density=True), [np.ones(20)], order=2)
    for kw in ({"weights": A**2}, {"weights": A**2, "density": True}, {"density": True}):
        got = _value(lambda a: np.histogram(a, 4, **kw), A)
        ref = np.histogram(A, 4, **kw)
        for g, r in zip(got, ref):
            np.testing.assert_allclose(g, r, rtol=1e-14)
    counts, _ = _inside(lambda a: np.histogram(a, 4), A)
    assert not isinstance(counts, tg.Tracer)
    # Weighted counts: d hist_b / d w_i = 1 if a_i is in bin b (right edge of the last bin included)
    edges = np.array([-1.0, 0.0, A.max()])
    jac = tg.jacobian(lambda w: np.histogram(A, edges, weights=w)[0])(np.ones(20))
    np.testing.assert_array_equal(jac[1], (A >= 0) & (A <= A.max()))


MORE_CONSTANTS = {
    "common_type": np.common_type,
    "diag_indices_from": lambda t: np.diag_indices_from(t[:, :2]),
    "triu_indices_from": lambda t: np.triu_indices_from(t, 1),
    "tril_indices_from": np.tril_indices_from,
    "array2string": np.array2string,
    "array_repr": np.array_repr,
    "array_str": np.array_str,
}


@pytest.mark.parametrize("name", sorted(MORE_CONSTANTS))
def test_more_constant_functions(name):
    fun = MORE_CONSTANTS[name]
    got, ref = _inside(fun, X), fun(X)
    assert not isinstance(got, tg.Tracer)
    if isinstance(ref, tuple):
        for g, r in zip(got, ref):
            np.testing.assert_array_equal(g, r)
    else:
        assert got == ref
