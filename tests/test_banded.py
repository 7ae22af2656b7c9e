"""Banded batches of cotangents (tapegrad.banded): every operation equals its dense counterpart.

Two layers of checks.  The structure itself: each operation that keeps a
batch banded (scaling, sums, shifts, slices, products with a matrix) is
compared with the same NumPy call on the dense array, and every other call
must see the dense array.  The sweep: every sample call of every rule
(tests/rules/samples.py) gives the same Jacobian and Hessian whether the
sweep starts from banded or from dense basis cotangents.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad import backward
from tapegrad.banded import MAX_BANDS, BandedCotangent, plain

from .closed_forms import rosenbrock as _rosenbrock
from .closed_forms import rosenbrock_hessian as _rosenbrock_hessian
from .rules.samples import FIRST_ORDER_SAMPLES, SAMPLES
from .rules.test_samples import _params


# ------------------------------------------------------------------ the structure
@st.composite
def banded_batches(draw, dtype=np.float64):
    rows = draw(st.integers(1, 7))
    cols = draw(st.integers(1, 7))
    bands = {}
    for _ in range(draw(st.integers(0, 4))):
        offset = draw(st.integers(-rows + 1, cols - 1))
        first = max(0, -offset)  # rows whose column lo + i + offset lies inside [0, cols)
        last = min(rows, cols - offset)
        lo = draw(st.integers(first, last - 1))
        n = draw(st.integers(1, last - lo))
        seed = draw(st.integers(0, 2**31))
        vals = np.random.default_rng(seed).standard_normal(n).astype(dtype)
        if np.dtype(dtype).kind == "c":
            vals = vals + 1j * np.random.default_rng(seed + 1).standard_normal(n)
        bands[offset] = (lo, vals)
    return BandedCotangent((rows, cols), bands, dtype)


def _dense(b):
    out = np.zeros(b.shape, dtype=b.dtype)
    for offset, (lo, vals) in b.bands.items():
        for i, v in enumerate(vals):
            out[lo + i, lo + i + offset] += v
    return out


def _same(result, expected):
    assert np.shape(result) == np.shape(expected)
    np.testing.assert_allclose(np.asarray(result), expected, rtol=1e-13, atol=1e-13)
    assert np.asarray(result).dtype == np.asarray(expected).dtype


@given(banded_batches())
def test_dense_form_matches_the_definition(b):
    _same(b.dense(), _dense(b))
    _same(np.asarray(b), _dense(b))
    fortran = np.asfortranarray(np.ones(b.shape))
    _same(b.add_into(fortran), _dense(b) + 1)  # the non-contiguous path


@given(banded_batches(), st.integers(0, 2**31))
def test_scalings_stay_banded_and_match(b, seed):
    rng = np.random.default_rng(seed)
    d = _dense(b)
    rows, cols = b.shape
    for factor in (2.5, np.float64(-1.5), rng.standard_normal(cols), rng.standard_normal((1, cols)),
                   rng.standard_normal((rows, 1)), np.array(3.0), np.array([0.5])):
        for result, expected in ((b * factor, d * factor), (factor * b, factor * d), (b / factor, d / factor),
                                 (np.multiply(b, factor), d * factor)):
            assert type(result) is BandedCotangent
            _same(result, expected)
    for result, expected in ((-b, -d), (+b, d), (np.negative(b), -d), (np.conjugate(b), d)):
        _same(result, expected)


@given(banded_batches(), banded_batches(), st.integers(0, 2**31))
def test_sums_match(a, b, seed):
    rng = np.random.default_rng(seed)
    da = _dense(a)
    if a.shape == b.shape:
        db = _dense(b)
        _same(a + b, da + db)
        _same(a - b, da - db)
        _same(np.add(a, b), da + db)
    other = rng.standard_normal(a.shape)
    for result, expected in ((a + other, da + other), (other + a, other + da), (a - other, da - other),
                             (other - a, other - da)):
        assert type(result) is np.ndarray
        _same(result, expected)
    before = other.copy()
    _ = a + other
    np.testing.assert_array_equal(other, before)  # the dense operand is never written


def test_merging_many_diagonals_falls_back_to_dense():
    b = BandedCotangent((30, 30), {0: (0, np.ones(30))}, np.float64)
    total = b
    for k in range(1, MAX_BANDS + 2):
        total = total + b.embed(k, 30 + k)[..., :30]
    assert type(total) is np.ndarray
    expected = sum(np.eye(30, k=k) for k in range(0, MAX_BANDS + 2))
    _same(total, expected)


@given(banded_batches(), st.integers(-9, 9), st.integers(-9, 9), st.sampled_from([None, 1, 2, -1]))
def test_column_slices_match(b, start, stop, step):
    d = _dense(b)
    for key in ((Ellipsis, slice(start, stop, step)), (slice(None), slice(start, stop, step)), (slice(start, stop),),
                (0,), (Ellipsis, None)):
        _same(b[key], d[key])


@given(banded_batches(), st.integers(0, 4), st.integers(0, 4))
def test_embedding_shifts_columns(b, before, after):
    length = b.shape[1] + before + after
    expected = np.zeros((b.shape[0], length))
    expected[:, before : before + b.shape[1]] = _dense(b)
    _same(b.embed(before, length), expected)


@given(banded_batches(), st.integers(1, 5), st.integers(0, 2**31))
def test_products_and_reductions_match(b, k, seed):
    rng = np.random.default_rng(seed)
    d = _dense(b)
    m = rng.standard_normal((b.shape[1], k))
    _same(b @ m, d @ m)
    _same(np.matmul(b, m), d @ m)
    left = rng.standard_normal((k, b.shape[0]))
    _same(left @ b, left @ d)  # not structured: the dense path
    for axis in (0, 1, -1, -2, None):
        _same(np.sum(b, axis=axis), np.sum(d, axis=axis))
    _same(np.sum(b, axis=1, keepdims=True), np.sum(d, axis=1, keepdims=True))
    mask = rng.random(b.shape[1]) < 0.5
    _same(np.where(mask, b, 0), np.where(mask, d, 0))
    _same(np.where(mask, 0.0, b), np.where(mask, 0.0, d))
    _same(np.where(mask, b, 1.0), np.where(mask, d, 1.0))


@given(banded_batches())
def test_everything_else_sees_the_dense_array(b):
    d = _dense(b)
    _same(np.exp(b), np.exp(d))
    _same(b ** 2, d**2)
    _same(b * b, d * d)
    _same(b[..., None], d[..., None])
    _same(np.reshape(b, (-1,)), d.reshape(-1))
    _same(b.reshape(-1), d.reshape(-1))
    _same(b.T, d.T)
    _same(np.einsum("ij->j", b), d.sum(0))
    _same(np.concatenate([b, b], axis=1), np.concatenate([d, d], axis=1))
    _same(b.astype(np.float32), d.astype(np.float32))
    _same(b.astype(np.complex128), d.astype(np.complex128))
    _same(np.real(b), d)
    assert np.shape(b) == d.shape and np.ndim(b) == 2 and np.size(b) == d.size and len(b) == len(d)
    assert np.result_type(b, np.float32) == np.float64
    out = np.ones(d.shape)
    np.add(out, b, out=out)
    _same(out, 1 + d)
    target = np.zeros(d.shape)
    target[...] = b
    _same(target, d)


@given(banded_batches(np.complex128), st.integers(0, 2**31))
def test_complex_batches_match(b, seed):
    d = _dense(b)
    v = np.random.default_rng(seed).standard_normal(b.shape[1]) + 1j
    _same(b * v, d * v)
    _same(np.conjugate(b), np.conjugate(d))
    _same(np.conj(b), np.conj(d))
    _same(np.real(b), np.real(d))


@given(st.integers(1, 6), st.integers(1, 6), st.integers(-7, 7))
def test_eye_matches_numpy(rows, cols, k):
    _same(BandedCotangent.eye(rows, cols, k, np.float64), np.eye(rows, cols, k))


def test_float32_stays_float32():
    b = BandedCotangent.eye(4, 6, 1, np.float32)
    assert (b * np.arange(6, dtype=np.float32)).dtype == np.float32
    assert (b * 2.0).dtype == np.float32
    assert (b + b).dtype == np.float32
    assert b.dense().dtype == np.float32


def test_where_promotes_like_numpy():
    b = BandedCotangent.eye(3, 3, 0, np.float32)
    mask = np.array([True, False, True])
    for zero in (0, 0.0, np.float32(0), np.float64(0)):
        _same(np.where(mask, b, zero), np.where(mask, b.dense(), zero))
        _same(np.where(mask, zero, b), np.where(mask, zero, b.dense()))


def test_the_dense_cache_is_read_only_and_fresh_arrays_are_not():
    b = BandedCotangent.eye(3, 3, 0, np.float64)
    with pytest.raises(ValueError):
        np.asarray(b)[0, 0] = 5.0  # a rule writing into its cotangent fails loudly
    fresh = b.to_array()
    fresh[0, 0] = 5.0
    np.testing.assert_array_equal(b.dense(), np.eye(3))
    copied = np.array(b)
    copied[1, 1] = 7.0
    np.testing.assert_array_equal(b.dense(), np.eye(3))
    assert plain(b, fresh=True).flags.writeable


def test_plain_replaces_batches_inside_containers():
    b = BandedCotangent.eye(2, 2, 0, np.float64)
    out = plain({"a": [b, (b, 1.0)], "b": None})
    assert type(out["a"][0]) is np.ndarray and type(out["a"][1][0]) is np.ndarray
    np.testing.assert_array_equal(out["a"][1][0], np.eye(2))


# ------------------------------------------------------------------ the sweep
def dense_builds(monkeypatch):
    """A list that records the shape of every dense batch built from here on (patched ``dense``)."""
    built = []
    original = BandedCotangent.dense
    monkeypatch.setattr(BandedCotangent, "dense", lambda self: built.append(self.shape) or original(self))
    return built


def _dense_seeds(monkeypatch):
    monkeypatch.setattr(backward, "STRUCTURED", False)


def _as_vector_function(sample):
    """The sample as F(v): v concatenates its float arguments, the outputs are raveled into one vector."""
    positions = [i for i, a in enumerate(sample.args) if np.asarray(a).dtype.kind == "f"]
    shapes = [np.shape(sample.args[i]) for i in positions]
    sizes = [int(np.prod(s, dtype=int)) for s in shapes]
    v0 = np.concatenate([np.ravel(sample.args[i]) for i in positions]) if positions else None

    def F(v):
        args = list(sample.args)
        offset = 0
        for i, shape, n in zip(positions, shapes, sizes):
            args[i] = np.reshape(v[offset : offset + n], shape)
            offset += n
        out = sample.fun(*args)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        outs = [o for o in outs if np.result_type(o).kind in "fc"]
        # A reverse-mode Jacobian needs real outputs: a complex one counts as its two parts.
        outs = [p for o in outs for p in ((np.real(o), np.imag(o)) if np.result_type(o).kind == "c" else (o,))]
        if len(outs) == 1 and np.ndim(outs[0]) == 1:
            return outs[0]  # a 1-D output: the sample's last rule meets the banded seed itself
        return np.concatenate([np.ravel(o) for o in outs])

    def S(v):
        total = 0.0
        for o in (F(v),):
            total = total + np.sum((o * np.conj(o)).real)
        return total

    return F, S, v0


def _vector_params():
    return [p for p in _params(SAMPLES, {}) + _params(FIRST_ORDER_SAMPLES, {}, prefix="first-order-")
            if any(np.asarray(a).dtype.kind == "f" for a in p.values[1].args)]


@pytest.mark.parametrize("fun,sample", _vector_params())
def test_sweep_with_banded_seeds_equals_dense_seeds(fun, sample, monkeypatch):
    F, S, v0 = _as_vector_function(sample)
    first_only = any(sample is s for s in FIRST_ORDER_SAMPLES.get(fun, []))
    with np.errstate(all="ignore"):
        jac = tg.jacobian(F)(v0)
        jac_chunked = tg.jacobian(F, chunk_size=2)(v0)
        jac_forward = None if first_only else tg.jacfwd(F)(v0)  # banded tangents through the transposed sweep
        second = None if first_only else tg.hessian(S)(v0)
        _dense_seeds(monkeypatch)
        jac_ref = tg.jacobian(F)(v0)
        second_ref = None if second is None else tg.hessian(S)(v0)
        # jacfwd's reference: the same products from dense basis tangents (for complex outputs
        # forward and reverse Jacobians differ by convention, so compare like with like).
        forward_ref = None if first_only else np.moveaxis(tg.jvp(F, (v0,), (np.eye(v0.size),))[1], 0, -1)
    np.testing.assert_allclose(jac, jac_ref, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(jac_chunked, jac_ref, rtol=1e-11, atol=1e-12)
    if jac_forward is not None:
        np.testing.assert_allclose(jac_forward, forward_ref, rtol=1e-10, atol=1e-11)
    if second is not None:
        np.testing.assert_allclose(second, second_ref, rtol=1e-10, atol=1e-11)


def test_stencil_hessian_stays_banded_until_the_result(monkeypatch):
    """Rosenbrock's Hessian sweep never builds a dense batch except the answer itself."""
    x = np.random.default_rng(3).standard_normal(50)
    built = dense_builds(monkeypatch)
    h = tg.hessian(_rosenbrock)(x)
    np.testing.assert_allclose(h, _rosenbrock_hessian(x), rtol=1e-12, atol=1e-9)
    assert built == []  # no rule needed the dense batch; the result was written once
    assert h.flags.writeable and h.flags.owndata


def test_custom_rules_receive_plain_arrays():
    seen = []

    @tg.custom_vjp
    def double(x):
        return 2 * x

    def vjp(g, ans, x):
        seen.append(type(g))
        return 2 * g

    double.defvjp(vjp)
    jac = tg.jacobian(lambda x: double(x) * x)(np.arange(3.0))
    np.testing.assert_allclose(jac, np.diag(4 * np.arange(3.0)))
    assert seen == [np.ndarray]


def test_nested_jacobians_use_dense_seeds_and_stay_right():
    # The inner Jacobian runs on tracers of the outer tape: its seeds must stay dense.
    def f(x):
        return np.sin(x) * x[::-1]

    def inner_trace(x):
        return np.trace(tg.jacobian(f)(x))

    x = np.array([0.3, -1.2, 0.7, 2.0])
    g = tg.grad(inner_trace)(x)
    eps = 1e-6
    fd = np.array([(inner_trace(x + eps * e) - inner_trace(x - eps * e)) / (2 * eps) for e in np.eye(4)])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_forward_jacobian_of_several_vectors_takes_one_diagonal_each():
    def f(x, y):
        return np.concatenate([np.sin(x[1:]) * y[:-1], x * y, np.sum(x * x) * y[::-1]])

    rng = np.random.default_rng(5)
    x, y = rng.standard_normal(4), rng.standard_normal(4)
    forward = tg.jacfwd(f, argnums=(0, 1))(x, y)
    reverse = tg.jacobian(f, argnums=(0, 1))(x, y)
    eps = 1e-6
    for k, (jf, jr) in enumerate(zip(forward, reverse)):
        fd = np.stack(
            [(f(*[a + eps * e * (i == k) for i, a in enumerate((x, y))]) - f(*[a - eps * e * (i == k) for i, a in enumerate((x, y))])) / (2 * eps) for e in np.eye(4)],
            axis=-1,
        )
        np.testing.assert_allclose(jf, fd, rtol=1e-7, atol=1e-8)
        np.testing.assert_allclose(jf, jr, rtol=1e-12, atol=1e-13)


def test_forward_over_reverse_stencil_hessian_stays_banded(monkeypatch):
    x = np.random.default_rng(4).standard_normal(40)
    built = dense_builds(monkeypatch)
    h = tg.jacfwd(tg.grad(_rosenbrock))(x)
    np.testing.assert_allclose(h, _rosenbrock_hessian(x), rtol=1e-12, atol=1e-9)
    assert built == []
    assert h.flags.writeable
