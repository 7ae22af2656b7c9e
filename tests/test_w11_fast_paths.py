"""Fast paths of per-example gradients (workload W11): the banded product's finiteness proof,
the sweep's NaN look it spares, and the one-chunk Jacobian request."""

import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import backward as bw
from tapegrad import finiteness
from tapegrad.banded import BandedCotangent
from tapegrad.requests import fresh_results
from tapegrad.strong import has_nan, lazy_seeds, strong_zeros


def losses(w, x, y):
    return np.log1p(np.exp(-y * np.matmul(x, w)))


def _data(n=128, d=40, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(d), rng.standard_normal((n, d)), rng.choice([-1.0, 1.0], n)


def _same(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    assert a.tobytes() == b.tobytes()


def _dense_jacobian(fun, *args):
    """The Jacobian without banded batches (every structured path off)."""
    old = bw.STRUCTURED
    bw.STRUCTURED = False
    try:
        return tg.jacobian(fun)(*args)
    finally:
        bw.STRUCTURED = old


def test_diagonal_product_is_proved_once():
    m = np.random.default_rng(1).standard_normal((80, 60))
    vals = np.linspace(0.5, 2.0, 80)
    g = BandedCotangent((80, 80), {0: (0, vals)}, np.float64)
    out = g @ m
    _same(out, vals[:, None] * m)
    assert finiteness.nan_free(out)
    assert not finiteness.nan_free(out)  # the proof is used once
    assert not finiteness.nan_free(vals[:, None] * m)  # equal numbers, another array


def test_has_nan_trusts_the_proof_once():
    m = np.ones((80, 60))
    g = BandedCotangent((80, 80), {0: (0, np.ones(80))}, np.float64)
    out = g @ m
    assert not has_nan(np.ones((80, 60)))  # another array: a look, which uses the proof up
    assert not finiteness.nan_free(out)
    out = g @ m
    assert not has_nan(out)  # the proof
    out[3, 4] = np.nan
    assert has_nan(out)  # a second look reads the numbers


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_non_finite_matrix_takes_the_dense_path(bad):
    m = np.ones((80, 60))
    m[7, 3] = bad
    vals = np.ones(80)
    vals[7] = 0.0  # 0 * inf in the product: no warning may escape
    g = BandedCotangent((80, 80), {0: (0, vals)}, np.float64)
    with np.errstate(all="raise"):
        assert g._rows_times(m) is None
    assert not finiteness.nan_free(np.ones(1))


def test_overflowing_product_keeps_its_numbers_and_warning():
    m = np.full((80, 60), 1e300)
    vals = np.full(80, 1e10)
    g = BandedCotangent((80, 80), {0: (0, vals)}, np.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = g @ m
    _same(out, np.full((80, 60), np.inf))
    assert any("overflow" in str(w.message) for w in caught)  # as before: the general path warns


@pytest.mark.parametrize("mode", ["auto", "on", "off"])
@pytest.mark.parametrize("bad", [None, np.inf, -np.inf, np.nan, 1e308])
def test_per_example_jacobian_matches_dense_and_stacked_vjps(mode, bad):
    w, x, y = _data()
    if bad is not None:
        x[5, 7] = bad
        y[:3] = 0.0
    with strong_zeros(mode):
        eager = tg.jacobian(losses)(w, x, y)
        reused = tg.jacobian(losses, reuse=True)
        reused(w, x, y)
        again = reused(w, x, y)
        dense = _dense_jacobian(losses, w, x, y)
        _, pull = tg.vjp(losses, w, x, y)
        stacked = np.stack([pull(e)[0] for e in np.eye(len(y))])
    _same(eager, again)
    # The same numbers as without structure (a zero's sign may differ: +0 + -0 in the dense sums).
    if mode != "off" or bad is None or np.isfinite(bad):  # "off": the dense batch's 0 * inf stay NaN
        assert np.array_equal(eager, dense, equal_nan=True)
    if bad is None or np.isfinite(bad):  # one row at a time, x's inf meets zero cotangents (NaN columns)
        assert np.array_equal(eager, stacked, equal_nan=True)


def test_one_chunk_request_matches_chunks():
    w, x, y = _data(n=50, d=12)
    whole = tg.jacobian(losses)(w, x, y)
    _same(whole, tg.jacobian(losses, chunk_size=7)(w, x, y))
    assert whole.flags.owndata and whole.flags.writeable


def test_one_chunk_request_unconnected_and_shaped():
    x = np.arange(6.0).reshape(2, 3)
    jac = tg.jacobian(lambda a, b: np.sin(a) * 2.0, argnums=(0, 1))(x, np.ones(4))
    assert jac[0].shape == (2, 3, 2, 3)
    _same(jac[1], np.zeros((2, 3, 4)))


def test_fresh_results_copies_shared_plain_arrays():
    a = np.ones(4)
    view = np.ones(8)[:4]
    out = fresh_results([a, a, view], foreign=())
    assert out[0] is a and out[1] is not a and out[2] is not view
    _same(out[1], a)
    assert fresh_results([a], foreign=[a])[0] is not a


def test_banded_seeds_are_not_lazy():
    assert not lazy_seeds([BandedCotangent.eye(3, 3, 0, np.float64)])


def test_whole_column_scaling_matches_slices():
    col = np.linspace(1.0, 3.0, 5)
    g = BandedCotangent((5, 5), {0: (0, np.arange(1.0, 6.0)), 1: (0, np.arange(1.0, 5.0))}, np.float64)
    for out, dense in ((g * col, g.to_array() * col), (g / col, g.to_array() / col)):
        assert type(out) is BandedCotangent
        _same(out.to_array(), dense)
