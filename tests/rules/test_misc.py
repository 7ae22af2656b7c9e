"""Derivatives of angle, cov/corrcoef, gradient, apply_along_axis/apply_over_axes,
piecewise, histogram2d/histogramdd, and the file writers (constants)."""

import io

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import check_grads

from .helpers import assert_same_as_numpy as _assert_same, traced_value as _value

rng = np.random.default_rng(11)




# ----------------------------------------------------------------- angle
def test_angle():
    z = rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3))
    for deg in (False, True):
        f = lambda t: np.angle(t, deg=deg)
        _assert_same(_value(f, z), f(z))
        check_grads(f, [z], order=2)
    # d angle / d(re, im) = (-im, re) / |z|^2, so the complex cotangent is (-im - 1j re) / |z|^2.
    g = tg.grad(lambda t: np.sum(np.angle(t)))(z)
    np.testing.assert_allclose(g, (-z.imag - 1j * z.real) / np.abs(z) ** 2)
    z32 = z.astype(np.complex64)
    assert _value(np.angle, z32).dtype == np.float32
    assert tg.grad(lambda t: np.sum(np.angle(t)))(z32).dtype == np.complex64


def test_angle_of_real_input_is_constant():
    x = np.array([-2.0, 3.0, -0.5], dtype=np.float32)
    _assert_same(_value(np.angle, x), np.angle(x))
    g = tg.grad(lambda t: np.sum(np.angle(t, deg=True) * t))(x)
    np.testing.assert_allclose(g, np.angle(x, deg=True))  # only the explicit factor t
    assert g.dtype == np.float32


# ----------------------------------------------------------------- cov, corrcoef
X = rng.standard_normal((3, 6))
Y6 = rng.standard_normal(6)


@pytest.mark.parametrize(
    "kwargs", [{}, {"rowvar": False}, {"bias": True}, {"ddof": 2}, {"fweights": np.array([1, 2, 1, 3, 1, 1])}]
)
def test_cov_options(kwargs):
    f = lambda t: np.cov(t, **kwargs)
    _assert_same(_value(f, X), f(X))
    check_grads(f, [X], order=2)


def test_cov_y_aweights_and_complex():
    fw = np.array([1, 2, 1, 3, 1, 1])
    aw = rng.random(6) + 0.5
    for ddof in (None, 0, 1):
        f = lambda t, a: np.cov(t, fweights=fw, aweights=a, ddof=ddof)
        _assert_same(_value(f, X, aw), f(X, aw))
        check_grads(f, [X, aw], order=2)
    f = lambda t, u: np.cov(t, u, rowvar=False)
    _assert_same(_value(f, X.T, Y6), f(X.T, Y6))
    check_grads(f, [X.T, Y6], order=2)
    z = X[:2] + 1j * rng.standard_normal((2, 6))
    _assert_same(_value(np.cov, z), np.cov(z))
    check_grads(np.cov, [z], order=2)


def test_cov_closed_form_and_dtype():
    # var(x) = sum (x - mean)^2 / (n - 1): gradient 2 (x - mean) / (n - 1).
    g = tg.grad(lambda t: np.cov(t))(Y6)
    np.testing.assert_allclose(g, 2 * (Y6 - Y6.mean()) / 5)
    x32 = X.astype(np.float32)
    assert _value(np.cov, x32).dtype == np.float64  # NumPy computes in float64 ...
    assert _value(lambda t: np.cov(t, dtype=np.float32), x32).dtype == np.float32  # ... unless asked
    assert tg.grad(lambda t: np.sum(np.cov(t)))(x32).dtype == np.float32
    with pytest.raises(ValueError):
        tg.grad(lambda t: np.sum(np.cov(t, ddof=1.5)))(X)
    with pytest.raises(TypeError):
        tg.grad(lambda t: np.sum(np.cov(t, fweights=np.full(6, 0.5))))(X)
    with pytest.warns(RuntimeWarning, match="Degrees of freedom"), np.errstate(all="ignore"):
        tg.grad(lambda t: np.sum(np.cov(t, ddof=6)))(X)


def test_corrcoef():
    f = lambda t: np.corrcoef(t)
    _assert_same(_value(f, X), f(X))
    check_grads(f, [X], order=2)
    check_grads(lambda a, b: np.corrcoef(a, b), [X[0], Y6], order=2)
    z = X[:2] + 1j * rng.standard_normal((2, 6))
    _assert_same(_value(np.corrcoef, z), np.corrcoef(z))
    check_grads(np.corrcoef, [z], order=1)
    # The correlation of two variables is scale invariant: d/da corr(a, b) is orthogonal to a.
    g = tg.grad(lambda a: np.corrcoef(a, Y6)[0, 1])(X[0])
    np.testing.assert_allclose(np.dot(g, X[0]), 0, atol=1e-12)
    np.testing.assert_allclose(np.sum(g), 0, atol=1e-12)  # and shift invariant
    # a single variable: c / c
    _assert_same(_value(np.corrcoef, Y6), np.corrcoef(Y6))


# ----------------------------------------------------------------- gradient
F = rng.standard_normal((5, 4))


@pytest.mark.parametrize("edge_order", [1, 2])
@pytest.mark.parametrize("spacing", [(), (0.5,), (0.5, 2.0)], ids=["unit", "scalar", "per-axis"])
def test_gradient_uniform(edge_order, spacing):
    f = lambda t: np.gradient(t, *spacing, edge_order=edge_order)
    _assert_same(_value(f, F), f(F))
    check_grads(f, [F], order=2)


@pytest.mark.parametrize("edge_order", [1, 2])
def test_gradient_coordinates_and_axis(edge_order):
    xs = np.cumsum(rng.random(5) + 0.2)
    for axis in (0, -2):
        f = lambda t, c: np.gradient(t, c, axis=axis, edge_order=edge_order)
        _assert_same(_value(f, F, xs), f(F, xs))
        check_grads(f, [F, xs], order=2)
    # a traced scalar spacing on a 1-D array; uniform coordinates given as an array
    check_grads(lambda t, h: np.gradient(t, h, edge_order=edge_order), [F[:, 0], np.array(0.3)], order=2)
    even = np.arange(5.0) * 0.25
    _assert_same(_value(lambda t: np.gradient(t, even, axis=0), F), np.gradient(F, even, axis=0))


def test_gradient_closed_form_and_dtype():
    # central differences of a quadratic are exact: d/dt sum(gradient(t)) telescopes.
    x = np.linspace(0.0, 1.0, 6)
    np.testing.assert_allclose(_value(lambda t: np.gradient(t**2, x, edge_order=2), x), 2 * x, atol=1e-12)
    jac = tg.jacobian(lambda t: np.gradient(t))(np.zeros(4))
    np.testing.assert_allclose(jac, [[-1, 1, 0, 0], [-0.5, 0, 0.5, 0], [0, -0.5, 0, 0.5], [0, 0, -1, 1]])
    f32 = F.astype(np.float32)
    out = _value(lambda t: np.gradient(t, 0.5, axis=1), f32)
    assert out.dtype == np.float32
    assert tg.grad(lambda t: np.sum(np.gradient(t, np.linspace(0, 1, 5), axis=0) ** 2))(f32).dtype == np.float32
    with pytest.raises(ValueError):
        tg.grad(lambda t: np.sum(np.gradient(t, edge_order=2)))(np.ones(2))
    with pytest.raises(TypeError):
        tg.grad(lambda t: np.sum(np.gradient(t, 1.0, 2.0, 3.0)[0]))(F)


# ----------------------------------------------------------------- apply_along_axis / apply_over_axes
A = rng.standard_normal((3, 4, 2))


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize(
    "fun",
    [lambda v: np.sum(v**2), np.sort, lambda v: np.outer(v, v[::-1]), lambda v: v @ np.arange(v.shape[0])],
    ids=["scalar", "sort", "outer", "matvec"],
)
def test_apply_along_axis(axis, fun):
    f = lambda t: np.apply_along_axis(fun, axis, t)
    _assert_same(_value(f, A), f(A))
    check_grads(f, [A], order=2)


def test_apply_along_axis_extra_args_and_dtype():
    w = rng.standard_normal(4)
    f = lambda t, u: np.apply_along_axis(lambda v, s: np.sum(v * s), 1, t, u)
    _assert_same(_value(f, A, w), f(A, w))
    check_grads(f, [A, w], order=2)
    np.testing.assert_allclose(tg.jacobian(f, argnums=(0, 1))(A, w)[1], np.swapaxes(A, 1, 2))
    # NumPy dispatches on the array only: a plain array with a traced extra argument runs
    # NumPy's own loop, whose results are stacked by NumPy's own (early-bound) conversion,
    # which keeps the tracers while a tape records (tapegrad.constructors).
    plain = A[:, :, 0]
    g = tg.grad(lambda u: np.sum(np.apply_along_axis(lambda v, s: np.dot(v, s), 1, plain, u)))(w)
    np.testing.assert_allclose(g, np.sum(plain, axis=0), rtol=1e-12)
    a32 = A.astype(np.float32)
    assert _value(lambda t: np.apply_along_axis(np.cumsum, 0, t), a32).dtype == np.float32
    assert tg.grad(lambda t: np.sum(np.apply_along_axis(np.prod, 2, t)))(a32).dtype == np.float32
    with pytest.raises(ValueError):
        tg.grad(lambda t: np.sum(np.apply_along_axis(np.sum, 0, t)))(np.ones((3, 0)))


def test_apply_over_axes():
    for axes in ([0, 2], 1, [-1]):
        for fun in (np.sum, np.mean):
            f = lambda t: np.apply_over_axes(fun, t, axes)
            _assert_same(_value(f, A), f(A))
            check_grads(f, [A], order=2)
    with pytest.raises(ValueError):
        tg.grad(lambda t: np.sum(np.apply_over_axes(lambda v, ax: np.sum(v), t, [0])))(A)


# ----------------------------------------------------------------- piecewise
XP = np.linspace(-2, 2, 9) + 0.01


def test_piecewise():
    funcs = [lambda v: v**2, np.sqrt, 3.0]
    f = lambda t: np.piecewise(t, [t < 0, t > 1], funcs)
    _assert_same(_value(f, XP), f(XP))
    check_grads(f, [XP], order=2)
    # sqrt only sees positive entries: no nan leaks into the gradient of the other pieces.
    g = tg.grad(lambda t: np.sum(np.piecewise(t, [t < 0], [lambda v: -v, np.sqrt])))(XP)
    np.testing.assert_allclose(g, np.where(XP < 0, -1.0, 0.5 / np.sqrt(np.abs(XP))))
    # a traced constant piece, extra arguments, a 2-D input and a 0-d input
    check_grads(lambda t, c: np.piecewise(t, [t < 0], [lambda v: -v, c]), [XP, np.array(2.0)], order=2)
    check_grads(lambda t: np.piecewise(t, [t > 0], [lambda v, k: v**k, 0.0], 3), [X], order=2)
    for x0 in (np.array(-0.5), np.array(0.7)):
        h = lambda t: np.piecewise(t, [t < 0, t >= 0], [lambda v: v**3, lambda v: 2 * v])
        _assert_same(_value(h, x0), h(x0))
        check_grads(h, [x0], order=2)


def test_piecewise_dtype_and_errors():
    x32 = XP.astype(np.float32)
    f = lambda t: np.piecewise(t, [t < 0], [lambda v: v * np.float64(2), lambda v: v**2])
    assert _value(f, x32).dtype == np.float32
    assert tg.grad(lambda t: np.sum(f(t)))(x32).dtype == np.float32
    with pytest.raises(ValueError):
        tg.grad(lambda t: np.sum(np.piecewise(t, [t < 0], [np.sin, np.cos, np.tan])))(XP)


# ----------------------------------------------------------------- histogramdd / histogram2d
S = rng.standard_normal((30, 2))
W = rng.random(30)


def test_histogramdd_edges_follow_min_max():
    f = lambda t: tuple(np.histogramdd(t, bins=(3, 4))[1])
    for traced, plain in zip(_value(f, S), f(S)):
        np.testing.assert_array_equal(traced, plain)
    check_grads(f, [S], order=2)
    # edges_k = min + k (max - min) / n along each coordinate
    jac = tg.jacobian(lambda t: np.histogramdd(t, bins=(3, 4))[1][0])(S)
    k = np.arange(4) / 3
    np.testing.assert_allclose(jac[:, np.argmin(S[:, 0]), 0], 1 - k)
    np.testing.assert_allclose(jac[:, np.argmax(S[:, 0]), 0], k)
    np.testing.assert_array_equal(jac[:, :, 1], 0)
    # fixed range and explicit bins: constant edges and counts
    fixed = lambda t: np.histogramdd(t, bins=[np.array([-3.0, 0.0, 3.0]), 2], range=[None, (-1, 1)])[0]
    counts = _value(fixed, S)
    np.testing.assert_array_equal(counts, fixed(S))
    assert not isinstance(counts, tg.Tracer)


def test_histogramdd_weights_density():
    f = lambda t, w: np.histogramdd(t, bins=3, weights=w, density=True)[0]
    _assert_same(_value(f, S, W), f(S, W))
    check_grads(f, [S, W], order=2)
    g = lambda t: np.histogramdd([t[:, 0], t[:, 1], t[:, 0] * 0.5], bins=2, density=True)[0]
    _assert_same(_value(g, S), g(S))
    check_grads(g, [S], order=2)
    # traced weights: the histogram is a scatter-add, so its Jacobian is a 0/1 bin membership matrix.
    jac = tg.jacobian(lambda w: np.histogramdd(S, bins=(2, 2), weights=w)[0])(W)
    np.testing.assert_array_equal(jac.sum(axis=(0, 1)), np.ones(30))


def test_histogram2d():
    f = lambda x, y, w: np.histogram2d(x, y, bins=(3, 2), weights=w, density=True)
    _assert_same(_value(f, S[:, 0], S[:, 1], W), f(S[:, 0], S[:, 1], W))
    check_grads(f, [S[:, 0], S[:, 1], W], order=2)
    edges = np.array([-2.0, 0.0, 0.5, 2.0])
    g = lambda w: np.histogram2d(S[:, 0], S[:, 1], bins=edges, weights=w)
    _assert_same(_value(g, W), g(W))
    check_grads(g, [W], order=2)
    s32 = S.astype(np.float32)
    e32 = _value(lambda t: np.histogram2d(t[:, 0], t[:, 1], 3)[1], s32)
    assert e32.dtype == np.histogram2d(s32[:, 0], s32[:, 1], 3)[1].dtype
    assert tg.grad(lambda t: np.sum(np.histogram2d(t[:, 0], t[:, 1], 3, density=True)[0] ** 2))(s32).dtype == np.float32
    with pytest.raises(ValueError):
        tg.grad(lambda t: np.sum(np.histogram2d(t[:, 0], t[:5, 1])[0]))(S)


# ----------------------------------------------------------------- files
def _load_npy(buf):
    out = np.load(buf)
    return out if isinstance(out, np.ndarray) else out["arr_0" if "arr_0" in out.files else "a"]


@pytest.mark.parametrize(
    "write,load",
    [
        (lambda buf, t: np.save(buf, t), _load_npy),
        (lambda buf, t: np.savez(buf, t, b=t * 2), _load_npy),
        (lambda buf, t: np.savez_compressed(buf, a=t), _load_npy),
        (lambda buf, t: np.savetxt(buf, t), np.loadtxt),
    ],
    ids=["save", "savez", "savez_compressed", "savetxt"],
)
def test_file_writers_write_raw_values(write, load):
    buf = io.BytesIO()

    def f(t):
        write(buf, t)
        return np.sum(t**2)

    np.testing.assert_allclose(tg.grad(f)(X), 2 * X)
    buf.seek(0)
    np.testing.assert_allclose(load(buf), X)
