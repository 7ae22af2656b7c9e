"""Derivatives of convolve, correlate, polyval, interp, clip, nan_to_num, sinc, i0, vander,
linspace/logspace/geomspace, and logsumexp-style patterns."""

import math

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import check_grads

rng = np.random.default_rng(7)


def _value(fun, *args):
    """The forward value computed on tracers."""
    return tg.vjp(fun, *args)[0]


# ----------------------------------------------------------------- convolution
@pytest.mark.parametrize("fun", [np.convolve, np.correlate], ids=lambda f: f.__name__)
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("n,m", [(1, 1), (4, 2), (5, 3), (2, 5), (3, 4), (6, 6)])
def test_convolve_correlate(fun, mode, n, m):
    a, v = rng.standard_normal(n), rng.standard_normal(m)
    ac, vc = a + 1j * rng.standard_normal(n), v + 1j * rng.standard_normal(m)
    for x, y in [(a, v), (ac, vc), (a, vc)]:
        f = lambda p, q: fun(p, q, mode)
        np.testing.assert_allclose(_value(f, x, y), fun(x, y, mode), rtol=1e-13, atol=1e-13)
        check_grads(f, [x, y], order=2)


def test_convolve_closed_form_and_dtype():
    a, v = rng.standard_normal(5), rng.standard_normal(3)
    # d/da_i sum(a * v) = sum(v) for every i.
    np.testing.assert_allclose(tg.grad(lambda p: np.sum(np.convolve(p, v)))(a), np.full(5, v.sum()))
    # correlate(a, v)[k] = sum_n a[n+k] conj(v[n]): d/dv of Re sum = conj of sums of a windows.
    vc = v + 1j
    g = tg.grad(lambda q: np.sum(np.real(np.correlate(a, q, "valid"))))(vc)
    windows = np.array([a[j : j + 3] for j in range(3)])
    np.testing.assert_allclose(g, windows.sum(axis=0))
    a32 = a.astype(np.float32)
    assert tg.grad(lambda p: np.sum(np.convolve(p, v.astype(np.float32))))(a32).dtype == np.float32
    assert _value(lambda p: np.convolve(p, a32), a32).dtype == np.float32


def test_convolve_errors():
    with pytest.raises(ValueError):
        tg.grad(lambda p: np.sum(np.convolve(p, np.ones(2))))(np.ones((2, 2)))
    with pytest.raises(ValueError):
        tg.grad(lambda p: np.sum(np.convolve(p, np.ones(2), mode="bad")))(np.ones(3))


# ----------------------------------------------------------------- polynomials
def test_polyval():
    p, x = rng.standard_normal(4), rng.standard_normal((2, 3))
    check_grads(np.polyval, [p, x], order=2)
    check_grads(np.polyval, [p, np.array(0.3)], order=2)
    # d/dx = polyval(polyder(p)), d/dp_k = x^(deg - k)
    np.testing.assert_allclose(tg.grad(lambda t: np.sum(np.polyval(p, t)))(x), np.polyval(np.polyder(p), x))
    t = 0.7
    np.testing.assert_allclose(tg.grad(lambda c: np.polyval(c, t))(p), t ** np.arange(3, -1, -1))
    np.testing.assert_array_equal(_value(np.polyval, p, x), np.polyval(p, x))
    assert tg.grad(lambda c: np.polyval(c, np.float32(2)))(p.astype(np.float32)).dtype == np.float32


@pytest.mark.parametrize("N,increasing", [(None, False), (4, True), (1, False), (0, True)])
def test_vander(N, increasing):
    x = np.array([0.0, 1.5, -2.0])
    f = lambda t: np.vander(t, N, increasing)
    np.testing.assert_array_equal(_value(f, x), np.vander(x, N, increasing))
    assert _value(f, x.astype(np.float32)).dtype == np.vander(x.astype(np.float32), N).dtype
    if N != 0:
        check_grads(f, [x], order=2)
    # d/dx x^k = k x^(k-1) column-wise, including x = 0 (no 0 ** -1 in the derivative).
    cols = x.size if N is None else N
    powers = np.arange(cols) if increasing else np.arange(cols)[::-1]
    expected = np.sum(powers * np.where(powers > 0, x[:, None] ** np.maximum(powers - 1, 0), 0), axis=1)
    np.testing.assert_allclose(tg.grad(lambda t: np.sum(f(t)))(x), expected)


# ----------------------------------------------------------------- interp
XP = np.array([0.0, 1.0, 2.5, 3.0])
XS = np.array([-0.5, 0.3, 1.2, 2.7, 3.5, 2.9])


def test_interp_all_arguments():
    fp = rng.standard_normal(4)
    check_grads(lambda x, fp, xp: np.interp(x, xp, fp), [XS, fp, XP], order=2)
    check_grads(lambda x, fp: np.interp(x, XP, fp, left=-1.0, right=fp[0]), [XS, fp], order=2)
    check_grads(lambda x, fp: np.interp(x, XP, fp, period=2.0), [XS + 0.01, fp], order=2)
    check_grads(lambda x, fp: np.interp(x, XP, fp), [XS, fp + 1j * rng.standard_normal(4)], order=1)
    for kw in [{}, {"left": -1.0, "right": 4.0}, {"period": 2.0}]:
        np.testing.assert_allclose(_value(lambda x: np.interp(x, XP, fp, **kw), XS), np.interp(XS, XP, fp, **kw))


def test_interp_closed_form_and_knots():
    fp = np.array([1.0, 3.0, 0.0, 2.0])
    x = np.array([0.25, 0.0, 1.0, 3.0, -1.0, 4.0])
    # Hat weights: at 0.25 the value is 0.75 fp[0] + 0.25 fp[1]
    g = tg.jacobian(lambda f: np.interp(x, XP, f))(fp)
    np.testing.assert_allclose(g[0], [0.75, 0.25, 0, 0])
    np.testing.assert_allclose(g[4], [1, 0, 0, 0])
    np.testing.assert_allclose(g[5], [0, 0, 0, 1])
    # d/dx: slope right of a knot, left slope at the last knot, 0 outside the range.
    dx = tg.grad(lambda t: np.sum(np.interp(t, XP, fp)))(x)
    np.testing.assert_allclose(dx, [2.0, 2.0, -2.0, 4.0, 0.0, 0.0])
    assert _value(lambda t: np.interp(t, XP, fp), x.astype(np.float32)).dtype == np.float64
    assert tg.grad(lambda t: np.sum(np.interp(t, XP, fp)))(x.astype(np.float32)).dtype == np.float32


# ----------------------------------------------------------------- clip, nan_to_num
def test_clip_traced_and_constant_bounds():
    x = np.array([-2.0, -0.5, 0.3, 1.5, 2.0])
    check_grads(lambda x, lo, hi: np.clip(x, lo, hi), [x, np.array(-1.0), np.array([0.0, 0.0, 0.0, 1.0, 1.0])], order=2)
    check_grads(lambda x: np.clip(x, None, 0.5), [x], order=2)
    check_grads(lambda x: x.clip(min=-1), [x], order=2)
    check_grads(lambda x, hi: np.clip(x, a_min=-1.0, a_max=hi), [x, np.array(1.0)], order=2)
    np.testing.assert_allclose(tg.grad(lambda t: np.sum(np.clip(t, -1, 1)))(x), [0, 1, 1, 0, 0])
    np.testing.assert_allclose(tg.grad(lambda hi: np.sum(np.clip(x, -1, hi)))(1.0), 2.0)
    x32 = x.astype(np.float32)
    assert _value(lambda t: np.clip(t, 0.0, 1.0), x32).dtype == np.float32
    assert tg.grad(lambda t: np.sum(np.clip(t, 0.0, 1.0)))(x32).dtype == np.float32


def test_clip_ties_split_equally():
    # Documented choice: a tie with a bound splits the cotangent between x and the bound.
    g_x, g_lo = tg.grad(lambda t, lo: np.clip(t, lo, 5.0), argnums=(0, 1))(1.0, 1.0)
    assert g_x == 0.5 and g_lo == 0.5


def test_nan_to_num():
    bad = np.array([np.nan, 0.0, np.inf, -np.inf, 0.0])
    x = rng.standard_normal(5)
    # The default replacements are +-the largest float: squaring them (as the second-order
    # check does) overflows, so the defaults are checked at first order.
    check_grads(lambda t: np.nan_to_num(t + bad), [x], order=1)
    check_grads(lambda t: np.nan_to_num(t + bad, nan=1.0, posinf=2.0, neginf=-3.0), [x], order=2)
    check_grads(lambda t: np.nan_to_num(t * (1 + 1j) + bad), [x], order=1)
    check_grads(lambda t: np.nan_to_num(t * (1 + 1j) + bad, posinf=2.0, neginf=-3.0), [x], order=2)
    np.testing.assert_allclose(tg.grad(lambda t: np.sum(np.nan_to_num(t + bad)))(x), [0, 1, 0, 0, 1])
    np.testing.assert_array_equal(_value(lambda t: np.nan_to_num(t + bad), x), np.nan_to_num(x + bad))
    x32 = x.astype(np.float32)
    assert _value(lambda t: np.nan_to_num(t + bad.astype(np.float32)), x32).dtype == np.float32


# ----------------------------------------------------------------- sinc, i0
def test_sinc():
    x = np.array([0.0, 1e-3, -0.02, 0.5, 1.0, -2.3])
    check_grads(np.sinc, [x], order=2)
    np.testing.assert_allclose(_value(np.sinc, x), np.sinc(x), rtol=1e-15)
    # sinc'(1) = (cos(pi) - sinc(1)) / 1 = -1; sinc''(0) = -pi^2 / 3 exactly at 0.
    np.testing.assert_allclose(tg.grad(np.sinc)(1.0), -1.0)
    np.testing.assert_allclose(tg.hessian(np.sinc)(np.array(0.0)), -np.pi**2 / 3)
    assert tg.grad(lambda t: np.sum(np.sinc(t)))(x.astype(np.float32)).dtype == np.float32


def _i1_series(x):
    return sum((x / 2) ** (2 * k + 1) / (math.factorial(k) * math.factorial(k + 1)) for k in range(40))


def test_i0():
    x = np.array([0.0, 0.5, -1.3, 4.0, 20.0])
    check_grads(np.i0, [x], order=2)
    small = np.array([0.0, 0.5, -1.3, 4.0, 7.5])
    np.testing.assert_allclose(tg.grad(lambda t: np.sum(np.i0(t)))(small), _i1_series(small), rtol=1e-13)
    big = np.array([50.0, 300.0])
    h = 1e-6 * big
    fd = (np.i0(big + h) - np.i0(big - h)) / (2 * h)
    np.testing.assert_allclose(tg.grad(lambda t: np.sum(np.i0(t)))(big), fd, rtol=1e-7)
    assert tg.grad(lambda t: np.sum(np.i0(t)))(small.astype(np.float32)).dtype == np.float32


# ----------------------------------------------------------------- linspace & co.
@pytest.mark.parametrize("endpoint", [True, False])
@pytest.mark.parametrize("num", [1, 2, 5])
def test_linspace(num, endpoint):
    f = lambda a, b: np.linspace(a, b, num, endpoint=endpoint)
    check_grads(f, [np.array(1.0), np.array(3.0)], order=2)
    np.testing.assert_array_equal(_value(f, np.array(1.0), np.array(3.0)), np.linspace(1.0, 3.0, num, endpoint=endpoint))
    div = (num - 1) if endpoint else num
    if div > 0:
        k = np.arange(num)
        np.testing.assert_allclose(tg.jacobian(lambda a: f(a, 3.0))(1.0), 1 - k / div)


def test_linspace_arrays_axis_retstep_dtype():
    a, b = np.array([1.0, 2.0]), np.array([[3.0], [4.0]])
    check_grads(lambda a, b: np.linspace(a, b, 4, endpoint=False, axis=1), [a, b], order=2)
    check_grads(lambda a, b: np.linspace(a, b, 4, axis=-1), [a, b], order=2)
    check_grads(lambda a, b: np.linspace(a, b, 4, retstep=True), [a, b], order=2)
    value, step = _value(lambda a, b: np.linspace(a, b, 4, retstep=True, axis=-1), a, b)
    ref, ref_step = np.linspace(a, b, 4, retstep=True, axis=-1)
    np.testing.assert_array_equal(value, ref)
    np.testing.assert_array_equal(step, ref_step)
    f32 = np.float32
    assert _value(lambda t: np.linspace(t, 2.0, 3), f32(1)).dtype == np.float32
    assert tg.grad(lambda t: np.sum(np.linspace(t, 2.0, 3)))(f32(1)).dtype == np.float32
    # An integer dtype floors: the result is a constant.
    assert not isinstance(_value(lambda t: np.linspace(t, 9.0, 3, dtype=int), np.array(1.0)), tg.Tracer)


def test_logspace_geomspace():
    check_grads(lambda a, b: np.logspace(a, b, 4), [np.array(1.0), np.array(3.0)], order=2)
    check_grads(lambda a, b, base: np.logspace(a, b, 4, base=base), [np.array(1.0), np.array(3.0), np.array([2.0, 3.0])], order=2)
    check_grads(lambda a, b: np.geomspace(a, b, 4), [np.array([1.0, -2.0]), np.array([3.0, -5.0])], order=2)
    check_grads(lambda a, b: np.geomspace(a, b, 4, endpoint=False), [np.array(2.0), np.array(3.0)], order=2)
    check_grads(lambda a, b: np.geomspace(a, b, 4), [np.array(1.0 + 1j), np.array(3.0 - 2j)], order=2)
    for f in (np.linspace, np.logspace, np.geomspace):
        args = (np.array(1.0), np.array([3.0, 4.0]))
        np.testing.assert_allclose(_value(lambda a, b: f(a, b, 5, axis=-1), *args), f(*args, 5, axis=-1), rtol=1e-14)
    # geomspace: y_k = a (b/a)^(k/(n-1)) -> d y_k / d a = (1 - k/(n-1)) y_k / a
    a, b, k = 2.0, 8.0, np.arange(3)
    y = np.geomspace(a, b, 3)
    np.testing.assert_allclose(tg.jacobian(lambda t: np.geomspace(t, b, 3))(a), (1 - k / 2) * y / a)
    assert _value(lambda t: np.geomspace(t, 2.0, 3), np.float32(1)).dtype == np.geomspace(np.float32(1), 2.0, 3).dtype


# ----------------------------------------------------------------- logsumexp patterns
def _logsumexp_max(x):
    m = np.max(x, axis=-1, keepdims=True)
    return np.squeeze(m, -1) + np.log(np.sum(np.exp(x - m), axis=-1))


def _logsumexp_maximum(x):
    m = np.maximum(x[..., 0], x[..., 1])
    for j in range(2, x.shape[-1]):
        m = np.maximum(m, x[..., j])
    shifted = np.where(np.isfinite(m), m, 0)[..., None]
    return shifted[..., 0] + np.log(np.sum(np.exp(x - shifted), axis=-1))


@pytest.mark.parametrize("lse", [_logsumexp_max, _logsumexp_maximum])
def test_logsumexp_patterns(lse):
    x = rng.standard_normal((2, 4))
    check_grads(lse, [x], order=2)
    tied = np.array([[1.0, 3.0, 3.0, -1.0]])  # a tied max: the shift cancels, gradient is softmax
    softmax = np.exp(tied - np.log(np.sum(np.exp(tied))))
    np.testing.assert_allclose(tg.grad(lambda t: np.sum(lse(t)))(tied), softmax)
    p = softmax[0]
    np.testing.assert_allclose(tg.hessian(lambda t: lse(t[None])[0])(tied[0]), np.diag(p) - np.outer(p, p), atol=1e-12)


# ----------------------------------------------------------------- real_if_close, unwrap
def test_real_if_close_and_unwrap():
    z = np.array([1.0 + 1e-20j, -2.0 + 0j])
    value = _value(np.real_if_close, z)
    assert value.dtype == np.float64
    np.testing.assert_array_equal(value, np.real_if_close(z))
    # The real part is taken: the cotangent of Re(z) comes back unchanged (c = dL/dRe z).
    np.testing.assert_array_equal(tg.grad(lambda t: np.sum(np.real_if_close(t) * np.array([2.0, 3.0])))(z), [2.0, 3.0])
    far = np.array([1.0 + 1j, 2.0])
    assert _value(np.real_if_close, far).dtype == np.complex128
    check_grads(np.real_if_close, [far], order=2)
    phase = np.array([0.0, 3.0, 6.5, 2.0, -3.3])  # no difference at a wrap boundary
    np.testing.assert_array_equal(_value(np.unwrap, phase), np.unwrap(phase))
    check_grads(lambda p: np.unwrap(p, period=4.0), [phase + 0.1], order=2)
    np.testing.assert_array_equal(tg.grad(lambda p: np.sum(np.unwrap(p)))(phase), np.ones(5))
