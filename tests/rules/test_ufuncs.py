"""Element-wise ufuncs: first and second derivatives, dtypes, complex inputs, constants."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import tapegrad as tg
from tapegrad.dispatch import dispatch_ufunc
from tapegrad.registry import CONSTANT, lookup
from tapegrad.rules.ufuncs import GUFUNC_IMPLS
from tapegrad.tape import Tape
from tapegrad.testing import check_grads
from tapegrad.tracer import Tracer

from .helpers import assert_float32_gradient

RNG = np.random.default_rng(1234)


def uniform(lo, hi):
    return lambda shape: RNG.uniform(lo, hi, shape)


def away_from_zero(shape):
    return RNG.uniform(0.5, 2.0, shape) * RNG.choice([-1.0, 1.0], shape)


ANY = uniform(-2.0, 2.0)
POS = uniform(0.3, 3.0)
UNIT = uniform(-0.8, 0.8)

# (ufunc, sampler of a point inside its domain, away from kinks)
UNARY = [
    (np.negative, ANY), (np.positive, ANY), (np.reciprocal, away_from_zero), (np.square, ANY),
    (np.sqrt, POS), (np.cbrt, away_from_zero), (np.absolute, away_from_zero), (np.fabs, away_from_zero),
    (np.exp, ANY), (np.exp2, ANY), (np.expm1, ANY), (np.log, POS), (np.log2, POS), (np.log10, POS),
    (np.log1p, uniform(-0.7, 3.0)), (np.sin, ANY), (np.cos, ANY), (np.tan, uniform(-1.2, 1.2)),
    (np.arcsin, UNIT), (np.arccos, UNIT), (np.arctan, ANY), (np.sinh, ANY), (np.cosh, ANY),
    (np.tanh, ANY), (np.arcsinh, ANY), (np.arccosh, uniform(1.2, 3.0)), (np.arctanh, UNIT),
    (np.deg2rad, ANY), (np.rad2deg, ANY), (np.degrees, ANY), (np.radians, ANY), (np.conjugate, ANY),
]
BINARY = [
    (np.add, ANY, ANY), (np.subtract, ANY, ANY), (np.multiply, ANY, ANY),
    (np.divide, ANY, away_from_zero), (np.power, POS, ANY), (np.float_power, POS, ANY),
    (np.logaddexp, ANY, ANY), (np.logaddexp2, ANY, ANY), (np.arctan2, ANY, away_from_zero),
    (np.hypot, away_from_zero, away_from_zero), (np.maximum, ANY, ANY), (np.minimum, ANY, ANY),
    (np.fmax, ANY, ANY), (np.fmin, ANY, ANY), (np.copysign, away_from_zero, away_from_zero),
    (np.remainder, uniform(0.1, 0.9), uniform(1.1, 2.0)), (np.fmod, uniform(-0.9, 0.9), uniform(1.1, 2.0)),
]
SHAPES = [(), (3,), (2, 3)]
BROADCAST = [((2, 3), (3,)), ((), (2, 1)), ((2, 1), (1, 3)), ((1,), ())]


def name(case):
    return case[0].__name__


@pytest.mark.parametrize("case", UNARY, ids=name)
def test_unary_second_order(case):
    fun, sample = case
    for shape in SHAPES:
        check_grads(fun, [sample(shape)], order=2)


@pytest.mark.parametrize("case", BINARY, ids=name)
def test_binary_second_order_with_broadcasting(case):
    fun, sample_x, sample_y = case
    for sx, sy in BROADCAST:
        check_grads(fun, [sample_x(sx), sample_y(sy)], order=2)


@pytest.mark.parametrize("fun", [np.add, np.multiply, np.divide, np.power, np.logaddexp, np.maximum, np.hypot])
@settings(max_examples=10, deadline=None)
@given(shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3))
def test_binary_broadcasting_shapes(fun, shapes):
    x = RNG.uniform(0.5, 2.0, shapes.input_shapes[0])
    y = RNG.uniform(0.5, 2.0, shapes.input_shapes[1])
    check_grads(fun, [x, y], order=1, batch=2)


ALIASES = [(np.abs, np.absolute), (np.pow, np.power), (np.mod, np.remainder), (np.conj, np.conjugate),
           (np.asin, np.arcsin), (np.acos, np.arccos), (np.atan, np.arctan), (np.atan2, np.arctan2),
           (np.true_divide, np.divide)]


@pytest.mark.parametrize("alias,target", ALIASES, ids=lambda f: getattr(f, "__name__", ""))
def test_aliases_are_covered(alias, target):
    x = np.array([0.3, 0.45])
    args = [x, x + 1.0] if alias.nin == 2 else [x]
    check_grads(alias, args, order=1)
    assert np.allclose(tg.grad(lambda *a: np.sum(alias(*a)))(*args), tg.grad(lambda *a: np.sum(target(*a)))(*args))


@pytest.mark.parametrize("case", UNARY, ids=name)
def test_float32_preserved_unary(case):
    fun, sample = case
    assert_float32_gradient(fun, sample((4,)).astype(np.float32), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", BINARY, ids=name)
def test_float32_preserved_binary(case):
    fun, sample_x, sample_y = case
    x, y = sample_x((3,)).astype(np.float32), sample_y((3,)).astype(np.float32)
    gx, gy = tg.grad(lambda x, y: np.sum(fun(x, y)), argnums=(0, 1))(x, y)
    assert gx.dtype == np.float32 and gy.dtype == np.float32


# ----------------------------------------------------------------- closed forms and numerics
def test_closed_forms():
    x = np.linspace(-1.5, 1.5, 7)
    assert np.allclose(tg.grad(lambda x: np.sum(np.tanh(x)))(x), 1 / np.cosh(x) ** 2)
    assert np.allclose(tg.grad(lambda x: np.sum(np.arctan(x)))(x), 1 / (1 + x * x))
    assert np.allclose(tg.hessian(lambda x: np.sum(np.sin(x)))(x), np.diag(-np.sin(x)))
    y = np.linspace(0.5, 2.0, 7)
    gx, gy = tg.grad(lambda x, y: np.sum(np.power(y, x)), argnums=(0, 1))(x, y)
    assert np.allclose(gx, y**x * np.log(y)) and np.allclose(gy, x * y ** (x - 1))


def test_logaddexp_is_stable_for_large_inputs():
    x = np.array([1000.0, -1000.0, 800.0])
    y = np.array([1000.0, -1000.0, 0.0])
    gx, gy = tg.grad(lambda x, y: np.sum(np.logaddexp(x, y)), argnums=(0, 1))(x, y)
    assert np.allclose(gx, [0.5, 0.5, 1.0]) and np.allclose(gy, [0.5, 0.5, 0.0])
    h = tg.hessian(lambda x: np.logaddexp(x[0], x[1]))(np.array([700.0, 700.0]))
    assert np.allclose(h, [[0.25, -0.25], [-0.25, 0.25]])
    g2 = tg.grad(lambda x: np.sum(np.logaddexp2(x, 0.0)))(np.array([2000.0, -2000.0]))
    assert np.allclose(g2, [1.0, 0.0])


def test_log1p_expm1_keep_precision_near_zero():
    x = np.array([1e-12, -1e-12])
    assert np.allclose(tg.grad(lambda x: np.sum(np.log1p(x)))(x), 1 / (1 + x), rtol=0, atol=1e-15)
    assert np.allclose(tg.grad(lambda x: np.sum(np.expm1(x)))(x), np.exp(x), rtol=0, atol=1e-15)


def test_sqrt_at_zero_is_infinite_with_numpy_warning():
    with pytest.warns(RuntimeWarning, match="divide by zero"):
        g = tg.grad(lambda x: np.sum(np.sqrt(x)))(np.array([0.0, 4.0]))
    assert g[0] == np.inf and g[1] == 0.25


def test_division_by_zero_follows_numpy():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = tg.grad(lambda x: np.sum(1.0 / x))(np.array([0.0, 2.0]))
        np.divide(1.0, np.array([0.0]))  # NumPy's own forward warns the same way
    assert all(issubclass(w.category, RuntimeWarning) for w in caught) and caught
    assert np.isneginf(g[0]) and g[1] == -0.25


def test_subgradients_at_kinks():
    z = np.array([0.0, 1.0, -2.0])
    assert np.array_equal(tg.grad(lambda x: np.sum(np.abs(x)))(z), [0.0, 1.0, -1.0])
    assert np.array_equal(tg.grad(lambda x: np.sum(np.fabs(x)))(z), [0.0, 1.0, -1.0])
    assert np.array_equal(tg.grad(lambda x: np.hypot(x[0], x[1]))(np.zeros(2)), [0.0, 0.0])
    gx, gy = tg.grad(lambda x, y: np.sum(np.maximum(x, y)), argnums=(0, 1))(z, np.array([0.0, 0.0, 0.0]))
    assert np.array_equal(gx, [0.5, 1.0, 0.0]) and np.array_equal(gy, [0.5, 0.0, 1.0])


def test_nan_handling_of_maximum_and_fmax():
    x = np.array([np.nan, 1.0, np.nan])
    y = np.array([1.0, np.nan, np.nan])
    fx, fy = tg.grad(lambda x, y: np.sum(np.fmax(x, y)[:2]), argnums=(0, 1))(x, y)
    assert np.array_equal(fx, [0.0, 1.0, 0.0]) and np.array_equal(fy, [1.0, 0.0, 0.0])
    mx, my = tg.vjp(np.maximum, x, y)[1](np.ones(3))
    assert np.array_equal(mx, [1.0, 0.0, 1.0]) and np.array_equal(my, [0.0, 1.0, 0.0])


def test_heaviside_and_copysign():
    x1 = np.array([0.0, 1.0, -1.0, 0.0])
    check_grads(np.heaviside, [x1, RNG.standard_normal(4)], argnums=[1], order=2)
    g1, g2 = tg.grad(lambda a, b: np.sum(np.heaviside(a, b)), argnums=(0, 1))(x1, np.ones(4))
    assert np.array_equal(g1, np.zeros(4)) and np.array_equal(g2, [1.0, 0.0, 0.0, 1.0])
    gx, gy = tg.grad(lambda x, y: np.sum(np.copysign(x, y)), argnums=(0, 1))(np.array([2.0, -3.0]), np.array([-1.0, -1.0]))
    assert np.array_equal(gx, [-1.0, 1.0]) and np.array_equal(gy, [0.0, 0.0])


def test_ldexp():
    e = np.array([1, -2, 3])
    check_grads(lambda x: np.ldexp(x, e), [RNG.standard_normal(3)], order=2)
    assert np.array_equal(tg.grad(lambda x: np.sum(np.ldexp(x, e)))(np.ones(3, np.float32)), np.ldexp(np.ones(3, np.float32), e))


# ----------------------------------------------------------------- multi-output ufuncs
def test_divmod_remainder_quotient_is_constant():
    x, y = RNG.uniform(-5, 5, (2, 3)), RNG.uniform(0.7, 2.0, (3,))
    check_grads(lambda x, y: np.divmod(x, y)[1], [x, y], order=2)
    check_grads(np.divmod, [x, y], order=2)
    gx, gy = tg.grad(lambda x, y: np.sum(np.divmod(x, y)[1]), argnums=(0, 1))(x, y)
    assert np.allclose(gx, 1.0) and np.allclose(gy, -np.floor_divide(x, y).sum(axis=0))
    # The quotient output is piecewise constant: zero gradient.
    assert np.array_equal(tg.grad(lambda x: np.sum(np.divmod(x, 2.0)[0]))(x), np.zeros_like(x))


def test_modf_and_frexp():
    x = RNG.uniform(-10, 10, (2, 3))
    check_grads(np.modf, [x], order=2)
    check_grads(np.frexp, [x], order=2)
    assert np.array_equal(tg.grad(lambda x: np.sum(np.modf(x)[0]))(x), np.ones_like(x))
    assert np.array_equal(tg.grad(lambda x: np.sum(np.frexp(x)[0]))(x), 2.0 ** -np.frexp(x)[1])
    mant, expo = tg.vjp(np.frexp, x)[0]
    assert expo.dtype.kind == "i"


# ----------------------------------------------------------------- vecdot / matvec / vecmat
@pytest.fixture(params=["registered", "ufuncs.py"])
def gufuncs(request):
    """The registered vecdot/matvec/vecmat, and this module's own implementations called directly."""
    if request.param == "registered":
        return {f: f for f in GUFUNC_IMPLS}
    return GUFUNC_IMPLS


def test_vector_matrix_ufuncs(gufuncs):
    vecdot, matvec, vecmat = gufuncs[np.vecdot], gufuncs[np.matvec], gufuncs[np.vecmat]
    a, v, w = RNG.standard_normal((2, 3, 4)), RNG.standard_normal(4), RNG.standard_normal((2, 3))
    check_grads(vecdot, [a, v], order=2)
    check_grads(matvec, [a, v], order=2)
    check_grads(vecmat, [w, a], order=2)
    check_grads(vecdot, [RNG.standard_normal(3), RNG.standard_normal(3)], order=2)
    check_grads(lambda a, b: vecdot(a, b, axis=0), [RNG.standard_normal((4, 3)), RNG.standard_normal((4, 1))])
    g = tg.grad(lambda m: np.sum(matvec(m, v)))(a)
    assert np.allclose(g, np.broadcast_to(v, a.shape))
    assert np.allclose(matvec(a, v), np.matvec(a, v)) and np.allclose(vecmat(w, a), np.vecmat(w, a))


def test_gufunc_axes_keyword():
    matvec, vecmat = GUFUNC_IMPLS[np.matvec], GUFUNC_IMPLS[np.vecmat]
    m, v = RNG.standard_normal((3, 2, 4)), RNG.standard_normal((4, 2))
    axes = [(0, 2), (0,), (0,)]
    assert np.allclose(tg.vjp(lambda m: matvec(m, v, axes=axes), m)[0], np.matvec(m, v, axes=axes))
    check_grads(lambda m, v: matvec(m, v, axes=axes), [m, v], order=2)
    w, axes = RNG.standard_normal((2, 3)), [(1,), (0, 2), (0,)]
    assert np.allclose(tg.vjp(lambda w: vecmat(w, m, axes=axes), w)[0], np.vecmat(w, m, axes=axes))
    check_grads(lambda w, m: vecmat(w, m, axes=axes), [w, m], order=2)


# ----------------------------------------------------------------- complex inputs
def cplx(shape, lo=-1.0, hi=1.0):
    return RNG.uniform(lo, hi, shape) + 1j * RNG.uniform(lo, hi, shape)


HOLOMORPHIC = [np.exp, np.sin, np.cos, np.tan, np.sinh, np.cosh, np.tanh, np.log, np.log2, np.log10, np.sqrt,
               np.square, np.reciprocal, np.expm1, np.log1p, np.exp2, np.arctan, np.arcsinh, np.arccosh,
               np.arctanh, np.arcsin, np.arccos, np.negative]


@pytest.mark.parametrize("fun", HOLOMORPHIC, ids=lambda f: f.__name__)
def test_complex_holomorphic_unary(fun):
    z = cplx((3,), 0.2, 0.7)
    check_grads(fun, [z], order=2)
    # Holomorphic: the cotangent of z is g * f'(z) (no conjugate), f' by a complex finite difference.
    h = 1e-7
    expected = (fun(z + h) - fun(z - h)) / (2 * h)
    assert np.allclose(tg.vjp(fun, z)[1](np.ones(3, complex))[0], expected, rtol=1e-5)


@pytest.mark.parametrize("fun", [np.add, np.subtract, np.multiply, np.divide, np.power])
def test_complex_holomorphic_binary(fun):
    check_grads(fun, [cplx((2, 3), 0.3, 1.0), cplx((3,), 0.3, 1.0)], order=2)


def test_complex_non_holomorphic(gufuncs):
    z = cplx((4,), 0.2, 1.0)
    check_grads(np.absolute, [z], order=2)
    check_grads(np.conjugate, [z], order=2)
    check_grads(lambda z: np.real(z * np.conjugate(z)), [z], order=2)
    a, v = cplx((2, 3)), cplx((3,))
    check_grads(gufuncs[np.vecdot], [a, v], order=2)
    check_grads(gufuncs[np.matvec], [a, v], order=2)
    check_grads(gufuncs[np.vecmat], [cplx((2,)), a], order=2)
    # d|z|/dz in the convention c = dL/dRe - 1j dL/dIm: conj(z)/|z|.
    assert np.allclose(tg.grad(lambda z: np.sum(np.abs(z)))(z), np.conjugate(z) / np.abs(z))


# ----------------------------------------------------------------- constant ufuncs
CONSTANT_FLOAT = [np.sign, np.floor, np.ceil, np.trunc, np.rint, np.signbit, np.isnan, np.isinf, np.isfinite,
                  np.logical_not, np.spacing]
CONSTANT_FLOAT_BINARY = [np.floor_divide, np.equal, np.not_equal, np.less, np.less_equal, np.greater,
                         np.greater_equal, np.logical_and, np.logical_or, np.logical_xor]


def _constant_check(fun, nargs):
    x = np.array([0.3, -1.7, 2.5])
    seen = {}

    def f(x):
        out = fun(*([x] * nargs))
        seen["out"] = out
        return np.sum(x * 2.0) + np.sum(np.where(out, 1.0, 0.0) if out.dtype == bool else out)

    g = tg.grad(f)(x)
    assert type(seen["out"]) is np.ndarray
    assert np.array_equal(seen["out"], fun(*([x] * nargs)))
    assert np.array_equal(g, np.full(3, 2.0))  # nothing flows through the constant


@pytest.mark.parametrize("fun", CONSTANT_FLOAT, ids=lambda f: f.__name__)
def test_constant_unary(fun):
    _constant_check(fun, 1)


@pytest.mark.parametrize("fun", CONSTANT_FLOAT_BINARY, ids=lambda f: f.__name__)
def test_constant_binary(fun):
    _constant_check(fun, 2)


@pytest.mark.parametrize("fun", [np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.left_shift, np.right_shift, np.gcd, np.lcm])
def test_integer_ufuncs_are_constant(fun):
    assert lookup(fun).kind is CONSTANT
    ints = np.array([3, 6, 12])
    tracer = Tracer(ints, None, Tape())  # an integer-valued tracer, as a watched int array would be
    out = dispatch_ufunc(fun, "__call__", (tracer, 1 if fun in (np.left_shift, np.right_shift) else ints[::-1]), {})
    assert type(out) is np.ndarray
    assert np.array_equal(out, fun(ints, 1 if fun in (np.left_shift, np.right_shift) else ints[::-1]))
    assert np.array_equal(dispatch_ufunc(np.invert, "__call__", (tracer,), {}), np.invert(ints))
    assert np.array_equal(dispatch_ufunc(np.bitwise_count, "__call__", (tracer,), {}), np.bitwise_count(ints))


def test_constant_function_output_gives_zero_gradient():
    assert np.array_equal(tg.grad(lambda x: np.sum(np.floor(x)))(np.array([1.5, -0.5])), [0.0, 0.0])


def test_ufunc_keyword_arguments():
    x = RNG.uniform(0.5, 1.5, 3)
    check_grads(lambda x: np.exp(x, dtype=np.float64), [x], order=2)
    check_grads(lambda x: np.multiply(x, x, casting="same_kind"), [x], order=2)
    g = tg.grad(lambda x: np.sum(np.sin(x, dtype=np.float32)))(x)
    assert np.allclose(g, np.cos(x), rtol=1e-6)


def test_nextafter_is_x_plus_a_constant_step():
    # nextafter(x, y) = x moved one ulp towards y: derivative 1 in x, 0 in y (it was a
    # constant once, a silent zero gradient).
    x = np.array([0.3, -1.7, 2.5])
    y = np.array([1.0, -3.0, 2.5])
    check_grads(lambda x: np.nextafter(x**2, y) * x, [x], order=2)
    assert np.array_equal(tg.grad(lambda x: np.sum(np.nextafter(x, y)))(x), np.ones(3))
    assert np.array_equal(tg.grad(lambda y: np.sum(np.nextafter(x, y)))(y), np.zeros(3))
