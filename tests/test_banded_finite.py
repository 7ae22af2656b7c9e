"""Banded batches next to inf and NaN: the finiteness tests and the operators' short ways.

A banded batch is exact only while the factors it meets are finite (the dense
array's ``0 * inf`` is NaN); a large factor is first summed (a finite sum proves
it finite) and looked at entry by entry only when the sum is not.  The
operators ``*``, ``/`` and ``@`` with a plain array go to the banded handlers
without NumPy's dispatch.  Either way the numbers must be those of the dense
batch and of stacked single VJPs, NaN and inf included.
"""

import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import backward
from tapegrad.banded import BandedCotangent
from tapegrad.finiteness import SUMMED as _SUMMED
from tapegrad.finiteness import finite as _finite
from tapegrad.strong import strong_zeros

from .test_banded import dense_builds
from .test_modes_agree import assert_same_numbers

ROWS, COLS = 128, 40  # a matrix of ROWS * COLS >= _SUMMED entries takes the summed test


def _per_example(w, x, y):
    return np.log1p(np.exp(-y * (x @ w)))


def _linear(w, x, y):
    return (x @ w) * y


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(COLS), rng.standard_normal((ROWS, COLS)), rng.standard_normal(ROWS)


def _stacked_vjps(f, w, x, y):
    """One VJP per output entry, each with a plain basis cotangent, stacked."""
    out, pullback = tg.vjp(lambda v: f(v, x, y), w.copy())
    rows = []
    for i in range(out.size):
        e = np.zeros(out.size)
        e[i] = 1.0
        rows.append(pullback(e)[0])
    return np.stack(rows)


def _dense_jacobian(f, w, x, y, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(backward, "STRUCTURED", False)
        return tg.jacobian(f)(w, x, y)


def _spoiled(x, what, seed):
    """``x`` with a few entries replaced by ``what`` (a list of specials) at random places."""
    rng = np.random.default_rng(seed)
    x = x.copy()
    for value in what:
        x[rng.integers(0, ROWS), rng.integers(0, COLS)] = value
    return x


SPECIALS = [[np.inf], [-np.inf], [np.nan], [np.inf, -np.inf], [np.inf, np.nan, -np.inf, 1e308]]


def test_the_matrix_is_large_enough_for_the_summed_test():
    assert ROWS * COLS >= _SUMMED


@pytest.mark.parametrize("f", [_per_example, _linear])
@pytest.mark.parametrize("what", SPECIALS)
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("mode", ["auto", "off"])
def test_non_finite_matrices_give_the_numbers_of_the_dense_batch(f, what, seed, mode, monkeypatch):
    """With strong zeros off, the NaN and inf of stacked single VJPs (the dense product's ``0 * inf``).

    By default a NaN in the result starts a second sweep with strong zeros, which
    a Jacobian and a stack of single VJPs need at other places: there the
    Jacobian is compared with the one swept from dense seeds.  (With strong zeros
    off, dense seeds meet the one-hot shortcut of the matmul rule instead.)
    """
    w, x, y = _data(seed)
    x = _spoiled(x, what, seed)
    with np.errstate(all="ignore"), strong_zeros(mode):
        eager = tg.jacobian(f)(w, x, y)
        reused = tg.jacobian(f, reuse=True)
        first, second = reused(w, x, y), reused(w, x, y)
        dense = _dense_jacobian(f, w, x, y, monkeypatch)
        stacked = _stacked_vjps(f, w, x, y)
    assert reused.reuse_stats.replays == 1
    for r in (first, second):
        assert np.array_equal(r, eager, equal_nan=True)
    if mode == "off":
        assert np.isnan(eager).any()  # the dense product's 0 * inf
        assert_same_numbers(eager, stacked)
    else:
        np.testing.assert_array_equal(eager, dense)  # NaN where NaN, bit for bit elsewhere (up to the sign of 0)


@pytest.mark.parametrize("f", [_per_example, _linear])
def test_finite_matrices_whose_sum_overflows_stay_banded_and_right(f, monkeypatch):
    w, x, y = _data(7)
    x[::3] = 1e308  # the sum overflows: the entries are looked at one by one, and all are finite
    with np.errstate(over="ignore", invalid="ignore"):
        assert not np.isfinite(np.sum(x))
        built = dense_builds(monkeypatch)
        got = tg.jacobian(f)(w, x, y)
        if f is _linear:
            assert built == []  # the product stayed a scaling of x's rows
        monkeypatch.undo()
        dense = _dense_jacobian(f, w, x, y, monkeypatch)
        stacked = _stacked_vjps(f, w, x, y)
    np.testing.assert_array_equal(got, dense)
    assert_same_numbers(got, stacked)


def test_banded_times_a_finite_matrix_is_the_row_scaled_matrix():
    rng = np.random.default_rng(3)
    vals, m = rng.standard_normal(ROWS), rng.standard_normal((ROWS, COLS))
    g = BandedCotangent((ROWS, ROWS), {0: (0, vals)}, np.float64)
    out = g @ m
    assert type(out) is np.ndarray
    assert np.array_equal(out, vals[:, None] * m)  # the same products, bit for bit
    np.testing.assert_array_equal(out, g.dense() @ m)


@pytest.mark.parametrize("what", SPECIALS)
def test_banded_times_a_non_finite_matrix_is_the_dense_product(what):
    rng = np.random.default_rng(4)
    vals = rng.standard_normal(ROWS)
    m = _spoiled(rng.standard_normal((ROWS, COLS)), what, 4)
    g = BandedCotangent((ROWS, ROWS), {0: (0, vals)}, np.float64)
    with np.errstate(all="ignore"):
        for out in (g @ m, np.matmul(g, m)):
            assert np.array_equal(out, g.dense() @ m, equal_nan=True)


@pytest.mark.parametrize("special", [None, np.inf, -np.inf, np.nan, 0.0])
@pytest.mark.parametrize("offsets", [(0,), (-2, 1)])
def test_operators_agree_with_the_ufuncs_and_the_dense_batch(special, offsets):
    rng = np.random.default_rng(5)
    n = 9
    g = BandedCotangent((n, n), {o: (max(0, -o), rng.standard_normal(n - abs(o))) for o in offsets}, np.float64)
    column = rng.standard_normal(n)
    if special is not None:
        column[4] = special
    d = g.dense()
    with np.errstate(all="ignore"):
        product, quotient = g * column, g / column
        pairs = [(product, np.multiply(g, column), d * column), (quotient, np.divide(g, column), d / column)]
        for short, through_numpy, dense in pairs:
            assert type(short) is type(through_numpy)
            np.testing.assert_array_equal(np.asarray(short), np.asarray(through_numpy))
            np.testing.assert_array_equal(np.asarray(short), dense)
    assert (type(product) is BandedCotangent) == (special is None or special == 0.0)
    assert (type(quotient) is BandedCotangent) == (special is None)


def test_operators_with_other_operands_keep_numpys_way():
    g = BandedCotangent.eye(4, 4, 0, np.float64)
    d = g.dense()
    others = (2.0, 3, np.float64(0.5), [1.0, 2.0, 3.0, 4.0], np.array(2.0), np.arange(1.0, 5.0)[:, None],
              np.ones((2, 4, 4)), np.arange(4), np.ones(4, dtype=np.float32))
    for other in others:
        with np.errstate(divide="ignore", invalid="ignore"):  # (0 in np.arange)
            pairs = ((g * other, np.multiply(g, other), d * other), (g / other, np.divide(g, other), d / other))
        for short, ufunc, dense in pairs:
            assert type(short) is type(ufunc)
            np.testing.assert_array_equal(np.asarray(short), dense)
            assert np.asarray(short).dtype == dense.dtype
    np.testing.assert_array_equal(np.asarray(g @ [[1.0], [2.0], [3.0], [4.0]]), d @ [[1.0], [2.0], [3.0], [4.0]])


@pytest.mark.parametrize("size", [10, _SUMMED, 3 * _SUMMED + 1])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, np.complex128, np.int64])
def test_finite_is_isfinite_all_and_warns_of_nothing(size, dtype):
    rng = np.random.default_rng(6)
    base = (rng.standard_normal(size) * 100).astype(dtype)
    cases = [base, base.reshape(-1, 1)[::2], np.asfortranarray(base.reshape(-1, 2)) if size % 2 == 0 else base]
    if np.dtype(dtype).kind in "fc":
        big = np.full(size, np.finfo(dtype).max / 2, dtype=dtype)  # a sum that overflows
        cases.append(big)
        for special in (np.inf, -np.inf, np.nan):
            spoiled = base.copy()
            spoiled[size // 2] = special
            cases.append(spoiled)
            both = base.copy()
            both[0], both[-1] = np.inf, -np.inf  # inf - inf in the sum
            cases.append(both)
        if np.dtype(dtype).kind == "c":
            imaginary = base.copy()
            imaginary[size - 1] = complex(1.0, np.inf)
            cases.append(imaginary)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for value in cases:
            assert _finite(value) == bool(np.isfinite(value).all())


def test_finite_of_python_numbers_and_objects():
    assert _finite(1.0) and not _finite(float("inf")) and not _finite(float("nan"))
    assert _finite(np.float64(2.0)) and not _finite(np.float64(np.nan))
    with pytest.raises(TypeError):
        _finite(np.full(2 * _SUMMED, 1.0, dtype=object))  # as np.isfinite says
