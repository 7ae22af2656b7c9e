"""tapegrad's array-API namespace against array-api-strict, differentially.

The same call goes to ``array_api_strict`` (the reference implementation of the
standard) and to ``tapegrad.array_api`` with plain arrays and with tracers
(whose namespace comes from ``x.__array_namespace__()``, as array-API-generic
libraries get it): values, dtypes and shapes must agree, invalid calls must fail
in both, tracers in give tracers out, and derivatives through the namespace's
functions match central finite differences at first and second order.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tapegrad as tg
from tapegrad.dispatch import strip
from tapegrad.testing import check_grads

xs = pytest.importorskip("array_api_strict")
XP = tg.array_api

FLOATS = (np.float32, np.float64)


def _leaves(out):
    if isinstance(out, (tuple, list)):
        return [leaf for o in out for leaf in _leaves(o)]
    return [out]


def _np(a):
    """A result as an ndarray (array-api-strict arrays, tracers and plain values alike)."""
    if isinstance(a, tg.Tracer):
        return np.asarray(strip(a))
    if isinstance(a, xs._array_object.Array):
        return np.from_dlpack(a)
    return np.asarray(a)


def _strict(args):
    return [xs.asarray(a) if isinstance(a, np.ndarray) else a for a in args]


def _traced(tape, args):
    return [tape.watch(a) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a for a in args]


def _same(ref, got):
    ref, got = _leaves(ref), _leaves(got)
    assert len(ref) == len(got)
    for r, g in zip(ref, got):
        r, g = _np(r), _np(g)
        assert g.dtype == r.dtype, (g.dtype, r.dtype)
        assert g.shape == r.shape, (g.shape, r.shape)
        tol = 1e-5 if r.dtype in (np.float32, np.complex64) else 1e-12
        np.testing.assert_allclose(g, r, rtol=tol, atol=tol)


def compare(fun, args):
    """``fun(xp, *args)`` in array-api-strict, tapegrad with plain arrays, tapegrad with tracers."""
    ref = fun(xs, *_strict(args))
    _same(ref, fun(XP, *args))
    with tg.GradientTape() as tape:
        traced = _traced(tape, args)
        tracers = [t for t in traced if isinstance(t, tg.Tracer)]
        xp = tracers[0].__array_namespace__() if tracers else XP
        assert xp == XP
        got = fun(xp, *traced)
    _same(ref, got)
    if tracers:  # array type in, array type out (masks and indices are constant tracers)
        assert all(isinstance(o, tg.Tracer) for o in _leaves(got) if not isinstance(o, (int, float, bool)))


# ------------------------------------------------------------------ strategies
def elements(dt, lo=0.1, hi=0.9):
    """Floats of dtype ``dt`` in ``[lo, hi]`` (bounds rounded to ``dt``)."""
    return st.floats(float(dt(lo)), float(dt(hi)), width=np.dtype(dt).itemsize * 8)


def arrays(min_dims=0, max_dims=3, min_side=1):
    shapes = hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=4)
    return st.sampled_from(FLOATS).flatmap(lambda dt: hnp.arrays(dt, shapes, elements=elements(dt)))


UNARY = {
    "abs": lambda xp, x: xp.abs(x - 0.5),
    "acos": lambda xp, x: xp.acos(x), "acosh": lambda xp, x: xp.acosh(x + 1.0), "asin": lambda xp, x: xp.asin(x),
    "asinh": lambda xp, x: xp.asinh(x), "atan": lambda xp, x: xp.atan(x), "atanh": lambda xp, x: xp.atanh(x),
    "ceil": lambda xp, x: xp.ceil(x * 4), "cos": lambda xp, x: xp.cos(x), "cosh": lambda xp, x: xp.cosh(x),
    "exp": lambda xp, x: xp.exp(x), "expm1": lambda xp, x: xp.expm1(x), "floor": lambda xp, x: xp.floor(x * 4),
    "isfinite": lambda xp, x: xp.isfinite(x), "isinf": lambda xp, x: xp.isinf(x), "isnan": lambda xp, x: xp.isnan(x),
    "log": lambda xp, x: xp.log(x), "log1p": lambda xp, x: xp.log1p(x), "log2": lambda xp, x: xp.log2(x),
    "log10": lambda xp, x: xp.log10(x), "negative": lambda xp, x: xp.negative(x), "positive": lambda xp, x: xp.positive(x),
    "round": lambda xp, x: xp.round(x * 4), "sign": lambda xp, x: xp.sign(x - 0.5), "signbit": lambda xp, x: xp.signbit(x - 0.5),
    "sin": lambda xp, x: xp.sin(x), "sinh": lambda xp, x: xp.sinh(x), "square": lambda xp, x: xp.square(x),
    "sqrt": lambda xp, x: xp.sqrt(x), "tan": lambda xp, x: xp.tan(x), "tanh": lambda xp, x: xp.tanh(x),
    "trunc": lambda xp, x: xp.trunc(x * 4), "reciprocal": lambda xp, x: xp.reciprocal(x),
    "operators": lambda xp, x: (-x + 2.0 * x) / (x + 1.0) - x**2 + abs(x) * 3.0 - 1.0 / x,
    "matmul(operator)": lambda xp, x: x @ xp.matrix_transpose(x) if x.ndim >= 2 else x,
    "astype": lambda xp, x: xp.astype(x, xp.float32 if x.dtype == xp.float64 else xp.float64),
    "astype(int)": lambda xp, x: xp.astype(x * 10, xp.int32),
    "where": lambda xp, x: xp.where(x > 0.5, x, -x),
    "clip": lambda xp, x: xp.clip(x, min=0.3, max=0.7),
    "logical": lambda xp, x: xp.logical_and(x > 0.3, ~(x > 0.7)) | (x < 0.2),
}

BINARY = {
    name: (lambda name: lambda xp, a, b: getattr(xp, name)(a, b))(name)
    for name in (
        "add atan2 copysign divide equal greater greater_equal hypot less less_equal logaddexp maximum minimum "
        "multiply not_equal pow remainder subtract floor_divide nextafter"
    ).split()
}

REDUCTIONS = {
    "sum": lambda xp, x, ax, kd: xp.sum(x, axis=ax, keepdims=kd),
    "prod": lambda xp, x, ax, kd: xp.prod(x, axis=ax, keepdims=kd),
    "mean": lambda xp, x, ax, kd: xp.mean(x, axis=ax, keepdims=kd),
    "std": lambda xp, x, ax, kd: xp.std(x, axis=ax, keepdims=kd, correction=0),
    "var": lambda xp, x, ax, kd: xp.var(x, axis=ax, keepdims=kd),
    "max": lambda xp, x, ax, kd: xp.max(x, axis=ax, keepdims=kd),
    "min": lambda xp, x, ax, kd: xp.min(x, axis=ax, keepdims=kd),
    "count_nonzero": lambda xp, x, ax, kd: xp.count_nonzero(x > 0.5, axis=ax, keepdims=kd),
    "all": lambda xp, x, ax, kd: xp.all(x > 0.2, axis=ax, keepdims=kd),
    "any": lambda xp, x, ax, kd: xp.any(x > 0.8, axis=ax, keepdims=kd),
}

AXIS_FUNS = {  # functions of one array along one axis (ndim >= 1)
    "argmax": lambda xp, x, ax: xp.argmax(x, axis=ax),
    "argmin": lambda xp, x, ax: xp.argmin(x, axis=ax, keepdims=True),
    "cumulative_sum": lambda xp, x, ax: xp.cumulative_sum(x, axis=ax, include_initial=True),
    "cumulative_prod": lambda xp, x, ax: xp.cumulative_prod(x, axis=ax),
    "diff": lambda xp, x, ax: xp.diff(x, axis=ax),
    "flip": lambda xp, x, ax: xp.flip(x, axis=ax),
    "roll": lambda xp, x, ax: xp.roll(x, 1, axis=ax),
    "sort": lambda xp, x, ax: xp.sort(x, axis=ax),
    "sort(descending)": lambda xp, x, ax: xp.sort(x, axis=ax, descending=True),
    "argsort(descending)": lambda xp, x, ax: xp.argsort(xp.round(x * 3), axis=ax, descending=True),
    "argsort": lambda xp, x, ax: xp.argsort(xp.round(x * 3), axis=ax),
    "repeat": lambda xp, x, ax: xp.repeat(x, 2, axis=ax),
    "take": lambda xp, x, ax: xp.take(x, xp.asarray([0, 0]), axis=ax),
    "take_along_axis": lambda xp, x, ax: xp.take_along_axis(x, xp.argsort(x, axis=ax), axis=ax),
    "expand_dims": lambda xp, x, ax: xp.expand_dims(x, axis=ax),
    "moveaxis": lambda xp, x, ax: xp.moveaxis(x, ax, 0),
    "unstack": lambda xp, x, ax: xp.unstack(x, axis=ax),
    "concat": lambda xp, x, ax: xp.concat([x, 2 * x], axis=ax),
    "stack": lambda xp, x, ax: xp.stack([x, x * x], axis=ax),
    "vecdot": lambda xp, x, ax: xp.vecdot(x, x + 1.0, axis=ax - x.ndim if ax >= 0 else ax),
    "vector_norm": lambda xp, x, ax: xp.linalg.vector_norm(x, axis=ax, ord=3),
}

SHAPE_FUNS = {
    "reshape": lambda xp, x: xp.reshape(x, (-1,)),
    "permute_dims": lambda xp, x: xp.permute_dims(x, tuple(range(x.ndim))[::-1]),
    "broadcast_to": lambda xp, x: xp.broadcast_to(x, (2,) + x.shape),
    "broadcast_arrays": lambda xp, x: xp.broadcast_arrays(x, x[(slice(0, 1),) * x.ndim] * 2.0)[1],
    "tile": lambda xp, x: xp.tile(x, (2,) * max(x.ndim, 1)),
    "squeeze": lambda xp, x: xp.squeeze(xp.expand_dims(x, axis=0), axis=0),
    "nonzero": lambda xp, x: xp.nonzero(x > 0.5) if x.ndim else xp.asarray(0),
    "unique_values": lambda xp, x: xp.unique_values(xp.round(x * 3)),
    "unique_counts": lambda xp, x: xp.unique_counts(xp.round(x * 3)),
    "unique_inverse": lambda xp, x: xp.unique_inverse(xp.round(x * 3)),
    "unique_all": lambda xp, x: xp.unique_all(xp.round(x * 3)),
    "zeros_like": lambda xp, x: xp.zeros_like(x) + x,
    "ones_like": lambda xp, x: xp.ones_like(x, dtype=xp.int16),
    "full_like": lambda xp, x: xp.full_like(x, 2.5) * x,
    "empty_like": lambda xp, x: xp.empty_like(x).shape,
    "result_type": lambda xp, x: xp.zeros(2, dtype=xp.result_type(x, xp.float32)),
    "finfo": lambda xp, x: xp.asarray(xp.finfo(x.dtype).eps, dtype=x.dtype) * x,
    "isdtype": lambda xp, x: xp.asarray([xp.isdtype(x.dtype, "real floating"), xp.isdtype(x.dtype, "integral")]),
}

MATRIX_FUNS = {  # x: (..., n, n) built well-conditioned
    "matmul": lambda xp, a: a @ a,
    "matrix_transpose": lambda xp, a: xp.matrix_transpose(a),
    "tril": lambda xp, a: xp.tril(a, k=-1), "triu": lambda xp, a: xp.triu(a),
    "det": lambda xp, a: xp.linalg.det(a), "inv": lambda xp, a: xp.linalg.inv(a),
    "solve": lambda xp, a: xp.linalg.solve(a, a[..., :1] + 1.0),
    "slogdet": lambda xp, a: xp.linalg.slogdet(a),
    "cholesky": lambda xp, a: xp.linalg.cholesky(a @ xp.matrix_transpose(a)),
    "cholesky(upper)": lambda xp, a: xp.linalg.cholesky(a @ xp.matrix_transpose(a), upper=True),
    "eigvalsh": lambda xp, a: xp.linalg.eigvalsh(a + xp.matrix_transpose(a)),
    "svdvals": lambda xp, a: xp.linalg.svdvals(a),
    "matrix_norm": lambda xp, a: xp.linalg.matrix_norm(a),
    "matrix_norm(nuc)": lambda xp, a: xp.linalg.matrix_norm(a, ord="nuc", keepdims=True),
    "matrix_power": lambda xp, a: xp.linalg.matrix_power(a, 3),
    "matrix_rank": lambda xp, a: xp.linalg.matrix_rank(a),
    "pinv": lambda xp, a: xp.linalg.pinv(a),
    "trace": lambda xp, a: xp.linalg.trace(a, offset=0),
    "diagonal": lambda xp, a: xp.linalg.diagonal(a, offset=1),
    "outer": lambda xp, a: xp.linalg.outer(xp.reshape(a, (-1,))[:3], xp.reshape(a, (-1,))[1:]),
    "tensordot": lambda xp, a: xp.tensordot(a, a, axes=([a.ndim - 1], [a.ndim - 2])),
    "qr(R)": lambda xp, a: xp.abs(xp.linalg.qr(a).R),
}

def _complex(xp, x):
    """``x`` as complex (the standard's complex transforms take complex input only)."""
    return xp.astype(x, xp.complex64 if x.dtype == xp.float32 else xp.complex128)


FFT_FUNS = {
    "fft": lambda xp, x: xp.fft.fft(_complex(xp, x)), "ifft": lambda xp, x: xp.fft.ifft(_complex(xp, x), norm="ortho"),
    "rfft": lambda xp, x: xp.fft.rfft(x, n=6), "irfft": lambda xp, x: xp.fft.irfft(xp.fft.rfft(x)),
    "fftn": lambda xp, x: xp.fft.fftn(_complex(xp, x)), "ifftn": lambda xp, x: xp.fft.ifftn(_complex(xp, x), norm="forward"),
    "rfftn": lambda xp, x: xp.fft.rfftn(x), "hfft": lambda xp, x: xp.fft.hfft(_complex(xp, x)),
    "ihfft": lambda xp, x: xp.fft.ihfft(x), "fftshift": lambda xp, x: xp.fft.fftshift(x),
    "ifftshift": lambda xp, x: xp.fft.ifftshift(x, axes=-1),
    "fftfreq": lambda xp, x: xp.fft.fftfreq(x.shape[-1], d=0.5, dtype=x.dtype) * x,
    "rfftfreq": lambda xp, x: xp.fft.rfftfreq(x.shape[-1]),
}

CREATION = {
    "zeros": lambda xp: xp.zeros((2, 3)), "ones": lambda xp: xp.ones(3, dtype=xp.int8),
    "full": lambda xp: xp.full((2,), 1.5, dtype=xp.float32), "eye": lambda xp: xp.eye(3, 4, k=1),
    "arange": lambda xp: xp.arange(1, 7, 2), "arange(float)": lambda xp: xp.arange(0.0, 1.0, 0.25),
    "linspace": lambda xp: xp.linspace(0, 1, 5, endpoint=False), "empty": lambda xp: xp.empty((2, 2)).shape,
    "asarray": lambda xp: xp.asarray([[1.0, 2.0], [3.0, 4.0]], dtype=xp.float32),
    "asarray(int)": lambda xp: xp.asarray([1, 2, 3]), "meshgrid": lambda xp: xp.meshgrid(xp.arange(3), xp.arange(2), indexing="ij"),
    "tril(eye)": lambda xp: xp.tril(xp.ones((3, 3))),
}


# ------------------------------------------------------------------ value, dtype and shape conformance
@pytest.mark.parametrize("name", sorted(UNARY))
@settings(max_examples=8)
@given(x=arrays())
def test_unary(name, x):
    compare(UNARY[name], [x])


@pytest.mark.parametrize("name", sorted(BINARY))
@settings(max_examples=8)
@given(data=st.data())
def test_binary(name, data):
    a = data.draw(arrays())
    shape = data.draw(hnp.broadcastable_shapes(a.shape, max_side=4))
    b = data.draw(hnp.arrays(a.dtype, shape, elements=elements(a.dtype.type)))
    compare(BINARY[name], [a, b])


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@settings(max_examples=8)
@given(data=st.data())
def test_reductions(name, data):
    x = data.draw(arrays(min_dims=1))
    axis = data.draw(st.sampled_from([None, -1, 0] + ([(0, -1)] if x.ndim > 1 else [])))
    keepdims = data.draw(st.booleans())
    compare(lambda xp, x: REDUCTIONS[name](xp, x, axis, keepdims), [x])


@pytest.mark.parametrize("name", sorted(AXIS_FUNS))
@settings(max_examples=8)
@given(data=st.data())
def test_axis_functions(name, data):
    x = data.draw(arrays(min_dims=1, min_side=2))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    compare(lambda xp, x: AXIS_FUNS[name](xp, x, axis), [x])


@pytest.mark.parametrize("name", sorted(SHAPE_FUNS))
@settings(max_examples=8)
@given(x=arrays())
def test_shape_and_set_functions(name, x):
    compare(SHAPE_FUNS[name], [x])


@pytest.mark.parametrize("name", sorted(MATRIX_FUNS))
@settings(max_examples=8)
@given(data=st.data())
def test_linalg(name, data):
    dt = data.draw(st.sampled_from(FLOATS))
    batch = data.draw(st.sampled_from([(), (2,)]))
    n = data.draw(st.integers(2, 4))
    noise = data.draw(hnp.arrays(dt, batch + (n, n), elements=elements(dt, -0.3, 0.3)))
    a = (noise + 2 * np.eye(n, dtype=dt)).astype(dt)
    compare(MATRIX_FUNS[name], [a])


@pytest.mark.parametrize("name", sorted(FFT_FUNS))
@settings(max_examples=8)
@given(x=arrays(min_dims=1, min_side=2))
def test_fft(name, x):
    compare(FFT_FUNS[name], [x])


@pytest.mark.parametrize("name", sorted(CREATION))
def test_creation(name):
    compare(lambda xp: CREATION[name](xp), [])


def test_searchsorted_and_cross():
    x = np.sort(np.random.default_rng(0).uniform(size=7))
    v = np.array([0.1, 0.5, 0.99])
    compare(lambda xp, x, v: xp.searchsorted(x, v, side="right"), [x, v])
    a, b = np.random.default_rng(1).standard_normal((2, 4, 3))
    compare(lambda xp, a, b: xp.linalg.cross(a, b), [a, b])


def test_inspection_info_matches():
    ours, ref = XP.__array_namespace_info__(), xs.__array_namespace_info__()
    assert set(ours.capabilities()) >= {"boolean indexing", "data-dependent shapes"}
    assert ours.devices() == [ours.default_device()] == ["cpu"]
    for kind in (None, "bool", "integral", "real floating", "complex floating", "numeric"):
        assert sorted(ours.dtypes(kind=kind)) == sorted(ref.dtypes(kind=kind, device=ref.default_device()))
    assert {k: np.dtype(v) for k, v in ours.default_dtypes().items()} == {
        k: np.dtype(str(v).split(".")[-1]) for k, v in ref.default_dtypes(device=ref.default_device()).items()
    }


def test_tracer_array_attributes():
    x = np.arange(6.0).reshape(2, 3)
    with tg.GradientTape() as tape:
        t = tape.watch(x)
        xp = t.__array_namespace__()
        assert xp == XP and t.__array_namespace__(api_version="2023.12") is xp
        assert t.device == "cpu" and t.to_device("cpu") is t
        with pytest.raises(ValueError):
            t.to_device("cuda:0")
        np.testing.assert_array_equal(strip(t.mT), x.T)
        # Created arrays are constants of the tape inside array-API code ...
        z = xp.zeros(3)
        assert isinstance(z, tg.Tracer) and isinstance(xp.fft.fftfreq(4), tg.Tracer)
        # ... and integer results turn back into plain values freely (they carry no gradient).
        n = xp.sum(t > 2.0)
        assert isinstance(n, tg.Tracer) and int(n) == 3 and np.asarray(xp.argmax(t, axis=1)).tolist() == [2, 2]
    assert type(XP.zeros(3)) is np.ndarray  # used directly, plain in, plain out (even with that tape alive)
    assert type(XP.asarray([1.0, 2.0])) is np.ndarray


def _vendored_array_namespace():
    """SciPy's own copy of array_api_compat's ``array_namespace`` (moved in SciPy 1.18)."""
    try:
        from scipy._external.array_api_compat import array_namespace
    except ImportError:  # SciPy < 1.18
        from scipy._lib.array_api_compat import array_namespace
    return array_namespace


def test_namespaces_of_nested_tapes_are_one_namespace():
    array_namespace = _vendored_array_namespace()

    x = np.array([0.3, 0.7])
    with tg.GradientTape() as outer:
        a = outer.watch(x)
        with tg.GradientTape() as inner:
            b = inner.watch(a * 2.0)
            assert array_namespace(a, b) == XP


# ------------------------------------------------------------------ errors
ERRORS = {
    "add(shapes)": (lambda xp, a: xp.add(a, xp.ones((4,))), (2, 3)),
    "sum(axis)": (lambda xp, a: xp.sum(a, axis=5), (2, 3)),
    "concat(shapes)": (lambda xp, a: xp.concat([a, xp.ones((2, 4))], axis=0), (2, 3)),
    "matmul(shapes)": (lambda xp, a: xp.matmul(a, a), (2, 3)),
    "reshape(size)": (lambda xp, a: xp.reshape(a, (4,)), (2, 3)),
    "inv(non-square)": (lambda xp, a: xp.linalg.inv(a), (2, 3)),
    "asarray(copy=False, dtype)": (lambda xp, a: xp.asarray(a, dtype=xp.float32, copy=False), (2, 3)),
    "api_version": (lambda xp, a: a.__array_namespace__(api_version="1999.12"), (2,)),
    "squeeze(non-1 axis)": (lambda xp, a: xp.squeeze(a, axis=0), (2, 3)),
    "stack(shapes)": (lambda xp, a: xp.stack([a, xp.ones((3, 2))]), (2, 3)),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_invalid_calls_fail_in_both(name):
    fun, shape = ERRORS[name]
    a = np.random.default_rng(0).uniform(size=shape)
    with pytest.raises(Exception) as ref:
        fun(xs, xs.asarray(a))
    with pytest.raises((ValueError, TypeError, IndexError)) as plain:
        fun(XP, a)
    with tg.GradientTape() as tape:
        with pytest.raises((ValueError, TypeError, IndexError)) as traced:
            fun(XP, tape.watch(a))
    # The same kind of failure as the reference (NumPy's AxisError is both a ValueError and an IndexError).
    for got in (plain.value, traced.value):
        assert isinstance(got, type(ref.value)) or isinstance(ref.value, type(got)) or (
            isinstance(got, (ValueError, IndexError)) and isinstance(ref.value, (ValueError, IndexError))
        ), (got, ref.value)


# ------------------------------------------------------------------ gradients through the namespace
_rng = np.random.default_rng(7)
_x = _rng.uniform(0.2, 0.8, (3, 4))
_a = _rng.uniform(-0.3, 0.3, (3, 3)) + 2 * np.eye(3)
GRADIENTS = [(f"unary:{n}", f, [_x]) for n, f in UNARY.items() if n not in ("astype", "astype(int)", "logical", "ceil", "floor", "round", "trunc", "sign", "signbit", "isfinite", "isinf", "isnan")]
GRADIENTS += [(f"binary:{n}", f, [_x, _x[::-1] * 0.7 + 0.2]) for n, f in BINARY.items()
              if n not in ("equal", "greater", "greater_equal", "less", "less_equal", "not_equal", "floor_divide", "remainder")]
GRADIENTS += [(f"reduce:{n}", (lambda f: lambda xp, x: f(xp, x, -1, False))(f), [_x]) for n, f in REDUCTIONS.items()
              if n not in ("count_nonzero", "all", "any")]
GRADIENTS += [(f"axis:{n}", (lambda f: lambda xp, x: f(xp, x, 0))(f), [_x]) for n, f in AXIS_FUNS.items()
              if n not in ("argmax", "argmin", "argsort", "argsort(descending)")]
GRADIENTS += [(f"linalg:{n}", f, [_a]) for n, f in MATRIX_FUNS.items() if n not in ("matrix_rank", "tril", "triu")]
GRADIENTS += [(f"fft:{n}", (lambda f: lambda xp, x: xp.real(f(xp, x)) if xp.isdtype(f(xp, x).dtype, "complex floating") else f(xp, x))(f), [_x])
              for n, f in FFT_FUNS.items() if n not in ("rfftfreq",)]


@pytest.mark.parametrize("name,fun,args", GRADIENTS, ids=[g[0] for g in GRADIENTS])
def test_gradients_through_the_namespace(name, fun, args):
    def f(*a):
        xp = a[0].__array_namespace__() if isinstance(a[0], tg.Tracer) else XP
        return [o for o in _leaves(fun(xp, *a)) if np.asarray(strip(o)).dtype.kind in "fc"]

    check_grads(f, args, rtol=1e-5, atol=1e-6)


def test_asarray_of_tracers_builds_a_traced_array():
    def f(x):
        xp = x.__array_namespace__() if isinstance(x, tg.Tracer) else XP
        m = xp.asarray([[x[0], 2.0 * x[1]], [x[1] ** 2, 1.5]])  # nested lists of tracers and numbers
        same = xp.asarray(x, copy=True)
        return xp.linalg.det(m) * xp.sum(same) + xp.sum(xp.asarray(x, dtype=xp.float64))

    x = np.array([0.7, -0.4])
    check_grads(f, [x])
    with tg.GradientTape() as tape:
        t = tape.watch(x)
        with pytest.raises(ValueError):
            XP.asarray(t, dtype=np.float32, copy=False)
        assert XP.asarray(t) is t and XP.asarray(t, dtype=np.float32).dtype == np.float32


def test_special_routes_to_scipy_ufuncs_and_their_rules():
    sc = pytest.importorskip("scipy.special")
    from scipy.special import _ufuncs

    for name in ("erf", "gammaln", "expit", "xlogy"):
        assert getattr(XP.special, name) is getattr(_ufuncs, name)
    assert not hasattr(XP.special, "logsumexp")  # not a ufunc: SciPy uses its generic code
    x, y = np.array([0.3, 1.2, 2.5]), np.array([0.5, 1.5, 3.0])

    def f(x, y):
        s = XP.special
        return s.erf(x) + s.gammaln(y) + s.expit(x * y) + s.xlogy(x, y) + s.polygamma(1, y) + s.multigammaln(y + 1, 2)

    check_grads(f, [x, y])
    np.testing.assert_allclose(
        f(x, y), sc.erf(x) + sc.gammaln(y) + sc.expit(x * y) + sc.xlogy(x, y) + sc.polygamma(1, y) + sc.multigammaln(y + 1, 2)
    )


def test_unique_values_are_sorted_and_integers_stay_integers():
    # scikit-learn relies on array-api-compat's sorted unique values (searchsorted on
    # classes_, the positive label of brier_score_loss); NumPy 2.3+ returns hash order.
    import tapegrad as tg

    labels = np.array([2, 0, 1, 0, 2, 2])
    seen = {}

    def f(x):
        xp = x.__array_namespace__()
        y = xp.asarray(labels)
        seen["values"] = np.asarray(tg.stop_gradient(xp.unique_values(y)))
        counts = xp.unique_counts(y)
        seen["counts"] = (np.asarray(tg.stop_gradient(counts.values)), np.asarray(tg.stop_gradient(counts.counts)))
        inverse = xp.unique_inverse(y).inverse_indices
        seen["inverse"] = np.asarray(tg.stop_gradient(inverse))
        u = xp.unique_values(x)
        return xp.sum(u * xp.arange(u.shape[0], dtype=u.dtype))

    x0 = np.array([3.0, 1.0, 2.0, 1.0])
    g = tg.grad(f)(x0)
    assert seen["values"].dtype == labels.dtype and seen["values"].tolist() == [0, 1, 2]
    assert seen["counts"][0].tolist() == [0, 1, 2] and seen["counts"][1].tolist() == [2, 1, 3]
    assert seen["inverse"].tolist() == [2, 0, 1, 0, 2, 2]
    # sorted unique values [1, 2, 3] weighted 0, 1, 2; the two 1.0 entries share weight 0
    assert g.tolist() == [2.0, 0.0, 1.0, 0.0]
