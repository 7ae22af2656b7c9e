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
    # One row at a time, x's inf meets zero cotangents in a matmul: strong zeros (the matmul's
    # own strong VJPs) keep them out of the sum, as the Jacobian's banded rows do.
    if mode != "off" or bad is None or np.isfinite(bad):
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


# ---------------------------------------------------------------- the matmul rule's proof
from tapegrad.rules import linalg as linalg_rules  # noqa: E402


def _counting_times_finite(monkeypatch):
    calls = []
    original = BandedCotangent.times_finite

    def counted(self, m):
        out = original(self, m)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(BandedCotangent, "times_finite", counted)
    return calls


def test_forward_values_prove_the_constant_finite():
    rng = np.random.default_rng(3)
    m, v = rng.standard_normal((6, 4)), rng.standard_normal(4)
    assert linalg_rules._finite_through(v, m @ v)
    v0 = v.copy()
    v0[2] = 0.0  # a zero weight hides a row's inf from the sum: no proof
    assert not linalg_rules._finite_through(v0, m @ v0)
    for bad in (np.inf, -np.inf, np.nan):
        mb = m.copy()
        mb[1, 2] = bad
        with np.errstate(invalid="ignore"):
            assert not linalg_rules._finite_through(v, mb @ v)  # the forward shows it
        vb = v.copy()
        vb[0] = bad
        assert not linalg_rules._finite_through(vb, m @ v)
    assert not linalg_rules._finite_through(v.astype(complex), (m @ v).astype(complex))  # real values only
    assert not linalg_rules._finite_through(np.arange(1, 5), m @ np.arange(1, 5))


@pytest.mark.parametrize("bad", [None, np.inf, np.nan, 1e308])
def test_proved_product_matches_dense_and_stacked_vjps(monkeypatch, bad):
    calls = _counting_times_finite(monkeypatch)
    w, x, y = _data()
    if bad is not None:
        x[5, 7] = bad
    with np.errstate(over="ignore", invalid="ignore"):
        eager = tg.jacobian(losses)(w, x, y)
        dense = _dense_jacobian(losses, w, x, y)
        _, pull = tg.vjp(losses, w, x, y)
        stacked = np.stack([pull(e)[0] for e in np.eye(len(y))])
        proved = np.isfinite(x @ w).all()
    assert calls == ([True] if proved else [])
    assert np.array_equal(eager, dense, equal_nan=True)
    assert np.array_equal(eager, stacked, equal_nan=True)
    if bad is None:
        expected = (-y / (1.0 + np.exp(y * (x @ w))))[:, None] * x
        np.testing.assert_allclose(eager, expected, rtol=1e-13, atol=1e-15)


def test_a_zero_weight_takes_the_summed_proof(monkeypatch):
    calls = _counting_times_finite(monkeypatch)
    w, x, y = _data()
    w[3] = 0.0
    eager = tg.jacobian(losses)(w, x, y)
    assert calls == []
    _same(eager, tg.jacobian(losses, chunk_size=len(y))(w, x, y))
    _, pull = tg.vjp(losses, w, x, y)
    assert np.array_equal(eager, np.stack([pull(e)[0] for e in np.eye(len(y))]))


@pytest.mark.parametrize("bad", [None, np.inf, np.nan])
def test_vector_times_matrix_constant(monkeypatch, bad):
    """``w @ M`` (the cotangent of ``w`` is ``g @ M.T``): the proof comes from ``w`` and the forward."""
    calls = _counting_times_finite(monkeypatch)
    rng = np.random.default_rng(4)
    w, big = rng.standard_normal(70), rng.standard_normal((70, 90))
    if bad is not None:
        big[10, 20] = bad

    def f(w, big):
        return np.tanh(w @ big)

    with np.errstate(invalid="ignore"):
        eager = tg.jacobian(f)(w, big)
        _, pull = tg.vjp(f, w, big)
        stacked = np.stack([pull(e)[0] for e in np.eye(90)])
    assert calls == ([True] if bad is None else [])
    assert np.array_equal(eager, stacked, equal_nan=True)
    if bad is None:
        np.testing.assert_allclose(eager, (1.0 - np.tanh(w @ big) ** 2)[:, None] * big.T, rtol=1e-13, atol=1e-15)


def test_proved_matrix_with_a_non_finite_diagonal_is_still_exact():
    m = np.random.default_rng(5).standard_normal((30, 20))
    m[4, 2] = 0.0
    vals = np.ones(30)
    vals[4] = np.inf  # row 4: inf * 0 is NaN in both products; every other row is untouched
    g = BandedCotangent((30, 30), {0: (0, vals)}, np.float64)
    with np.errstate(invalid="ignore"):
        out = g.times_finite(m)
        dense = g.to_array() @ m
    assert np.array_equal(out, dense, equal_nan=True)
    assert not finiteness.nan_free(out)  # a NaN: never marked free of them
