"""Banded batches of N-D values (tapegrad.banded layouts): every operation equals its dense counterpart.

An N-D value's batch keeps its diagonals over a flat layout of slots; slices
move the value's first slot or leave unused slots (zeros).  Each structured
operation is compared with the same NumPy call on the dense array, and the
sweep is checked end to end: every rule sample with an N-D output gives the
same Jacobian from banded N-D seeds as from dense ones.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad import backward
from tapegrad.banded import BandedCotangent

from .rules.samples import FIRST_ORDER_SAMPLES, SAMPLES
from .rules.test_samples import _params
from .test_banded import _same, dense_builds


@st.composite
def laid_out_batches(draw, dtype=np.float64):
    """A batch of (n0, n1) values placed at (a0, a1) inside a C-ordered (m0, m1) block of slots."""
    n0, n1 = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    m0, m1 = n0 + draw(st.integers(0, 2)), n1 + draw(st.integers(0, 2))
    a0, a1 = draw(st.integers(0, m0 - n0)), draw(st.integers(0, m1 - n1))
    rows, length = draw(st.integers(1, 6)), m0 * m1
    layout = (length, a0 * m1 + a1, (m1, 1))
    used = np.zeros(length, dtype=bool)
    used[BandedCotangent((rows, n0, n1), {}, dtype, layout)._slots()] = True
    bands = {}
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    for _ in range(draw(st.integers(0, 3))):
        offset = draw(st.integers(-rows + 1, length - 1))
        first, last = max(0, -offset), min(rows, length - offset)
        lo = draw(st.integers(first, last - 1))
        n = draw(st.integers(1, last - lo))
        vals = rng.standard_normal(n).astype(dtype)
        # unused slots hold zeros (the layout's invariant)
        bands[offset] = (lo, np.where(used[lo + offset : lo + offset + n], vals, 0).astype(dtype))
    return BandedCotangent((rows, n0, n1), bands, dtype, layout)


def _dense(b):
    flat = np.zeros((b.shape[0], b.length), dtype=b.dtype)
    for offset, (lo, vals) in b.bands.items():
        for i, v in enumerate(vals):
            flat[lo + i, lo + i + offset] += v
    return flat[:, b._slots()]


@given(laid_out_batches())
def test_dense_form_matches_the_definition(b):
    _same(b.dense(), _dense(b))
    _same(b.to_array(), _dense(b))
    out = np.ones(b.shape)
    _same(b.add_into(out), _dense(b) + 1)


@given(laid_out_batches(), st.integers(0, 2**31))
def test_scalings_and_selections_stay_banded_and_match(b, seed):
    rng = np.random.default_rng(seed)
    vshape = b.shape[1:]
    for factor in (2.5, rng.standard_normal(vshape), rng.standard_normal((vshape[0], 1)),
                   rng.standard_normal((1, vshape[1])), rng.standard_normal((1,) + vshape)):
        for got, want in ((b * factor, _dense(b) * factor), (factor * b, factor * _dense(b)),
                          (b / (np.abs(factor) + 1), _dense(b) / (np.abs(factor) + 1)), (-b, -_dense(b))):
            assert type(got) is BandedCotangent
            _same(got, want)
    mask = rng.standard_normal(vshape) > 0
    for got, want in ((np.where(mask, b, 0.0), np.where(mask, _dense(b), 0.0)),
                      (np.where(mask, 0.0, b), np.where(mask, 0.0, _dense(b)))):
        assert type(got) is BandedCotangent
        _same(got, want)


@given(laid_out_batches(), st.integers(0, 2**31))
def test_factors_varying_along_the_batch_take_the_dense_path(b, seed):
    factor = np.random.default_rng(seed).standard_normal((b.shape[0], 1, 1))
    _same(b * factor, _dense(b) * factor)
    with np.errstate(invalid="ignore"):  # 0 * inf is NaN in the dense array: the dense path says so
        _same(b * np.inf, _dense(b) * np.inf)


@given(st.data())
def test_sums_of_two_placements_match(data):
    a = data.draw(laid_out_batches())
    # another batch of the same value shape in the same block, placed elsewhere
    b = data.draw(laid_out_batches())
    if b.shape != a.shape or b.length != a.length or b.strides != a.strides:
        b = BandedCotangent(a.shape, {}, a.dtype, a.layout)
    _same(a + b, _dense(a) + _dense(b))
    _same(a - b, _dense(a) - _dense(b))
    dense = np.arange(np.prod(a.shape), dtype=float).reshape(a.shape)
    _same(a + dense, _dense(a) + dense)
    _same(dense - a, dense - _dense(a))


@given(laid_out_batches(), st.integers(0, 3), st.integers(0, 3), st.integers(0, 3), st.integers(0, 3))
def test_slices_match(b, s0, e0, s1, e1):
    key = (slice(None), slice(s0, b.shape[1] - e0), slice(s1, b.shape[2] - e1))
    _same(b[key], _dense(b)[key])
    _same(b[key[:2]], _dense(b)[key[:2]])


@given(laid_out_batches(), st.integers(0, 2), st.integers(0, 2), st.integers(0, 2), st.integers(0, 2))
def test_embedding_matches_a_scatter_into_zeros(b, before0, after0, before1, after1):
    shape = (b.shape[1] + before0 + after0, b.shape[2] + before1 + after1)
    index = (slice(before0, before0 + b.shape[1]), slice(before1, before1 + b.shape[2]))
    want = np.zeros((b.shape[0],) + shape)
    want[(slice(None),) + index] = _dense(b)
    got = b.scattered(index, shape)
    if got is not None:  # None: the slots cannot hold the bigger value; the caller scatters densely
        _same(got, want)


@given(laid_out_batches())
def test_sums_over_the_value_and_everything_else(b):
    _same(np.sum(b, axis=(1, 2)), _dense(b).sum(axis=(1, 2)))
    _same(np.sum(b, axis=(-1, -2)), _dense(b).sum(axis=(-1, -2)))
    _same(np.sum(b, axis=1), _dense(b).sum(axis=1))  # a partial sum: the dense array's
    _same(np.exp(b), np.exp(_dense(b)))
    _same(np.reshape(b, (b.shape[0], -1)), _dense(b).reshape(b.shape[0], -1))
    assert np.shape(b) == b.shape and np.ndim(b) == 3


def _nd_output(sample, first, x):
    """The sample's first real output of two or more dimensions, as a function of argument ``first``."""
    args = list(sample.args)
    args[first] = x
    out = sample.fun(*args)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return next((o for o in outs if np.result_type(o).kind == "f" and np.ndim(o) >= 2), None)


def _nd_params():
    """Rule samples whose first float argument is an array and which give a real N-D output."""
    out = []
    for p in _params(SAMPLES, {}) + _params(FIRST_ORDER_SAMPLES, {}, prefix="first-order-"):
        sample = p.values[1]
        first = next((i for i, a in enumerate(sample.args) if np.asarray(a).dtype.kind == "f"), None)
        if first is None or np.ndim(sample.args[first]) == 0:
            continue
        with np.errstate(all="ignore"):
            if _nd_output(sample, first, np.asarray(sample.args[first], dtype=float)) is not None:
                out.append(p)
    return out


@pytest.mark.parametrize("fun,sample", _nd_params())
def test_nd_banded_seeds_equal_dense_seeds(fun, sample, monkeypatch):
    first = next(i for i, a in enumerate(sample.args) if np.asarray(a).dtype.kind == "f")
    x = np.asarray(sample.args[first], dtype=float)
    with np.errstate(all="ignore"):
        jac = tg.jacobian(lambda v: _nd_output(sample, first, v))(x)
        monkeypatch.setattr(backward, "STRUCTURED", False)
        ref = tg.jacobian(lambda v: _nd_output(sample, first, v))(x)
    np.testing.assert_allclose(jac, ref, rtol=1e-11, atol=1e-12)


def test_grid_hessian_stays_banded_until_the_result(monkeypatch):
    """A 2-D stencil energy's Hessian sweep builds no dense batch except the answer."""
    def energy(x):
        dx, dy = x[1:, :] - x[:-1, :], x[:, 1:] - x[:, :-1]
        return np.sum(np.log1p(dx * dx)) + np.sum(np.log1p(dy * dy)) + 0.25 * np.sum(x**4)

    x = np.random.default_rng(4).standard_normal((7, 6))
    built = dense_builds(monkeypatch)
    h = tg.hessian(energy)(x)
    assert built == []
    monkeypatch.setattr(backward, "STRUCTURED", False)
    np.testing.assert_allclose(h, tg.hessian(energy)(x), rtol=1e-12, atol=1e-12)
