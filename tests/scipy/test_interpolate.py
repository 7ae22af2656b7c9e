"""Derivatives of scipy.interpolate, in the data and in the query points.

Every interpolant is linear in its data (Pchip and Akima aside): its Jacobian in
the data is checked against the dense matrix SciPy itself gives (the interpolant
of each basis vector, evaluated at the query points); first and second order
against central finite differences (tapegrad.testing.check_grads, which also
checks a batch of cotangents against single VJPs); closed forms for the Hessian
in the query points.
"""

import sys
import warnings

import numpy as np
import pytest
import scipy.interpolate
from scipy.interpolate import (
    Akima1DInterpolator,
    BSpline,
    CubicSpline,
    PchipInterpolator,
    PPoly,
    RegularGridInterpolator,
    interp1d,
    interpn,
    make_interp_spline,
)
from scipy.sparse.linalg import spsolve

import tapegrad as tg
from tapegrad import interception
from tapegrad.errors import NonDifferentiableArgumentError, UnsupportedFunctionError
from tapegrad.testing import check_grads

rng = np.random.default_rng(3)
X = np.array([0.0, 0.4, 1.1, 1.5, 2.2, 2.6, 3.0])
Y = np.sin(X) + 0.2 * rng.standard_normal(X.size)
# Query points inside, on a breakpoint, at both ends and outside the data.
Q = np.array([-0.45, 0.05, 0.73, 1.5, 2.41, 3.0, 3.37])
Q_INSIDE = np.array([0.05, 0.73, 1.31, 2.41, 2.93])
# For finite differences of derivatives: no query point on a breakpoint, where the
# highest derivative of a piecewise polynomial jumps.
Q_FD = np.array([-0.45, 0.05, 0.73, 1.57, 2.41, 2.93, 3.37])


def data_matrix(build, shape, query):
    """The dense matrix of ``y -> build(y)(query)``: SciPy's interpolant of each basis vector.

    Boundary derivative values make the map affine: the interpolant of zero data is subtracted.
    """
    shape = (shape,) if isinstance(shape, int) else shape
    offset = np.asarray(build(np.zeros(shape))(query))
    columns = [np.asarray(build(e.reshape(shape))(query)) - offset for e in np.eye(int(np.prod(shape)))]
    return np.stack(columns, axis=-1)


def assert_linear_in_data(build, y, query, atol=1e-12):
    """tapegrad's Jacobian in the data equals the dense matrix of the map, and values match SciPy."""
    fun = lambda v: build(v)(query)
    value = tg.vjp(fun, y)[0]
    np.testing.assert_allclose(value, fun(y), rtol=1e-13, atol=1e-13, equal_nan=True)
    matrix = data_matrix(build, y.shape, query).reshape(np.shape(value) + y.shape)
    jac = tg.jacobian(fun)(y)
    finite = np.isfinite(matrix)
    np.testing.assert_allclose(jac[finite], matrix[finite], rtol=1e-11, atol=atol)
    # Where SciPy gives NaN (outside, no extrapolation) the value is a constant NaN.
    assert np.all(jac[~finite] == 0)


# ----------------------------------------------------------------- CubicSpline
BC_TYPES = ["not-a-knot", "natural", "clamped", ((1, 0.5), (2, -1.0)), ((2, 0.0), "not-a-knot")]


@pytest.mark.parametrize("bc_type", BC_TYPES, ids=str)
def test_cubic_spline_linear_map_in_y(bc_type):
    assert_linear_in_data(lambda v: CubicSpline(X, v, bc_type=bc_type), Y, Q)


@pytest.mark.parametrize("bc_type", BC_TYPES, ids=str)
def test_cubic_spline_first_and_second_order(bc_type):
    check_grads(lambda v, q: CubicSpline(X, v, bc_type=bc_type)(q), [Y, Q_FD])
    check_grads(lambda v, q: CubicSpline(X, v ** 2, bc_type=bc_type)(q, nu=1), [Y, Q_FD])


def test_cubic_spline_periodic():
    x = np.linspace(0, 2 * np.pi, 9)
    y = np.sin(x) + 0.1 * np.cos(3 * x)
    y[-1] = y[0]
    q = np.array([-1.0, 0.5, 3.0, 7.0])
    spline = lambda v: CubicSpline(x, v, bc_type="periodic")
    value, back = tg.vjp(lambda v: spline(v)(q), y)
    np.testing.assert_allclose(value, spline(y)(q), rtol=1e-13)
    # Periodic data: a direction that keeps y[0] == y[-1] is differentiated exactly.
    u = rng.standard_normal(y.size)
    u[-1] = u[0]
    c = rng.standard_normal(q.size)
    fd = (spline(y + 1e-6 * u)(q) - spline(y - 1e-6 * u)(q)) / 2e-6
    np.testing.assert_allclose(np.dot(back(c)[0], u), np.dot(c, fd), rtol=1e-7)
    # ... and the two ends share the derivative equally.
    g = back(c)[0]
    np.testing.assert_allclose(g[0], g[-1], rtol=1e-12)
    check_grads(lambda p: spline(y)(p), [q])
    ints = tg.vjp(lambda v: spline(v).integrate(-1.0, 9.0), y)[0]
    np.testing.assert_allclose(ints, spline(y).integrate(-1.0, 9.0), rtol=1e-12)


def test_cubic_spline_derivative_antiderivative_integrate():
    check_grads(lambda v, q: CubicSpline(X, v).derivative(2)(q), [Y, Q_FD])
    check_grads(lambda v, q: CubicSpline(X, v).antiderivative(2)(q), [Y, Q_FD])
    check_grads(lambda v, q: CubicSpline(X, v).derivative(-1)(q), [Y, Q_FD])
    with pytest.raises(ValueError, match="negative"):  # as SciPy
        tg.grad(lambda v: np.sum(CubicSpline(X, v)(Q, nu=-1)))(Y)
    check_grads(lambda v, ab: CubicSpline(X, v).integrate(ab[0], ab[1]), [Y, np.array([2.4, 0.3])])
    check_grads(lambda v, ab: CubicSpline(X, v, extrapolate=False).integrate(ab[0], ab[1]), [Y, np.array([0.1, 2.9])])
    for make in (
        lambda v: CubicSpline(X, v).antiderivative(2)(Q),
        lambda v: CubicSpline(X, v).derivative(3)(Q),
        lambda v: CubicSpline(X, v).integrate(-0.3, 3.4),
    ):
        np.testing.assert_allclose(tg.vjp(make, Y)[0], make(Y), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("bc_type", BC_TYPES + ["periodic"], ids=str)
def test_cubic_spline_in_the_breakpoints(bc_type):
    # SciPy's linear system assembled from the traced breakpoints and solved densely.
    y = np.r_[Y[:-1], Y[0]] if bc_type == "periodic" else Y
    f = lambda x, q: CubicSpline(x, y, bc_type=bc_type)(q)
    np.testing.assert_allclose(tg.vjp(f, X, Q_FD)[0], f(X, Q_FD), rtol=1e-13, atol=1e-15)
    check_grads(f, [X, Q_FD], rtol=1e-4, atol=1e-5)
    # Periodic data must keep y[0] == y[-1]: only the breakpoints are moved there.
    check_grads(lambda x, v: CubicSpline(x, v, bc_type=bc_type).derivative()(Q_FD), [X, y],
                argnums=[0] if bc_type == "periodic" else None, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_cubic_spline_in_the_breakpoints_few_points(n):
    x = np.linspace(0.0, 2.0, n) + 0.1 * np.arange(n) ** 2
    for bc_type in ("not-a-knot", "natural", ((1, 0.5), (2, -1.0))):
        f = lambda xx: CubicSpline(xx, Y[:n], bc_type=bc_type)(Q_FD)
        np.testing.assert_allclose(tg.vjp(f, x)[0], f(x), rtol=1e-13, atol=1e-15)
        check_grads(f, [x], rtol=1e-4, atol=1e-5)


def test_cubic_spline_in_the_boundary_values():
    f = lambda v: CubicSpline(X, Y, bc_type=((1, v[0]), (2, v[1])))(Q)
    matrix = np.stack([f(e) - f(np.zeros(2)) for e in np.eye(2)], axis=-1)
    np.testing.assert_allclose(tg.jacobian(f)(np.array([0.5, -1.0])), matrix, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("make", [
    lambda x, v: PchipInterpolator(x, v),
    lambda x, v: Akima1DInterpolator(x, v, method="makima", extrapolate=True),
    lambda x, v: scipy.interpolate.CubicHermiteSpline(x, v, np.cos(X)),
    lambda x, v: CubicSpline(x, v).antiderivative(),
], ids=["pchip", "makima", "hermite", "antiderivative"])
def test_breakpoints_of_hermite_splines(make):
    y = np.array([0.0, 0.3, 1.2, 1.0, 1.6, 2.9, 2.7])
    f = lambda x, v, q: make(x, v)(q)
    np.testing.assert_allclose(tg.vjp(f, X, y, Q_FD)[0], f(X, y, Q_FD), rtol=1e-13, atol=1e-15)
    check_grads(f, [X, y, Q_FD], rtol=1e-4, atol=1e-5)
    check_grads(lambda x: make(x, y).integrate(0.2, 2.7), [X], rtol=1e-4, atol=1e-5)


def test_ppoly_in_the_breakpoints():
    c = rng.standard_normal((4, 2))
    f = lambda x, q: scipy.interpolate.PPoly(c, x)(q)
    check_grads(f, [np.array([0.0, 1.2, 3.0]), Q_FD])
    # p(q) = sum_j c[j] (q - x_i)^(3-j) on piece i: d/dx_i = -p'(q) there.
    p = scipy.interpolate.PPoly(c, [0.0, 1.2, 3.0])
    g = tg.grad(lambda x: np.sum(scipy.interpolate.PPoly(c, x)(np.array([0.5, 2.0]))))(np.array([0.0, 1.2, 3.0]))
    np.testing.assert_allclose(g, [-p(0.5, 1), -p(2.0, 1), 0.0], rtol=1e-12, atol=1e-15)


def test_integral_closed_form():
    # The integral of the interpolant of y over [x0, xn] is linear in y: d/dy = integral of each cardinal spline.
    weights = np.array([CubicSpline(X, e).integrate(X[0], X[-1]) for e in np.eye(X.size)])
    np.testing.assert_allclose(tg.grad(lambda v: CubicSpline(X, v).integrate(X[0], X[-1]))(Y), weights, rtol=1e-12)
    # In the limits: d/db int_a^b s = s(b), d/da = -s(a).
    s = CubicSpline(X, Y)
    g = tg.grad(lambda ab: s.integrate(ab[0], ab[1]))(np.array([0.3, 2.5]))
    np.testing.assert_allclose(g, [-s(0.3), s(2.5)], rtol=1e-12)


def test_hessian_in_the_query_points_closed_form():
    s = CubicSpline(X, Y)
    h = tg.hessian(lambda q: np.sum(s(q)))(Q_INSIDE)
    np.testing.assert_allclose(h, np.diag(s(Q_INSIDE, 2)), rtol=1e-10, atol=1e-12)
    g = tg.grad(lambda q: np.sum(s(q) ** 2))(Q_INSIDE)
    np.testing.assert_allclose(g, 2 * s(Q_INSIDE) * s(Q_INSIDE, 1), rtol=1e-12)


def test_cubic_spline_axis_and_trailing_dimensions():
    y = rng.standard_normal((3, X.size, 2))
    assert_linear_in_data(lambda v: CubicSpline(X, v, axis=1), y, Q)
    check_grads(lambda v, q: CubicSpline(X, v, axis=1, bc_type="natural")(q.reshape(1, 7)), [y, Q_FD])


def test_cubic_spline_complex_data():
    y = Y + 1j * np.cos(X)
    fun = lambda v: CubicSpline(X, v)(Q)
    matrix = data_matrix(lambda v: CubicSpline(X, v), X.shape, Q)
    c = rng.standard_normal(Q.size) + 1j * rng.standard_normal(Q.size)
    # A complex-linear map with a real matrix: the VJP is its transpose (no conjugate).
    np.testing.assert_allclose(tg.vjp(fun, y)[1](c)[0], matrix.T @ c, rtol=1e-12)
    check_grads(lambda v: np.abs(CubicSpline(X, v)(Q)) ** 2, [y])


# ----------------------------------------------------------------- Hermite, Pchip, Akima, PPoly
def test_cubic_hermite_spline_in_values_and_slopes():
    dydx = np.cos(X)
    check_grads(lambda v, d, q: scipy.interpolate.CubicHermiteSpline(X, v, d)(q), [Y, dydx, Q_FD])
    offset = scipy.interpolate.CubicHermiteSpline(X, Y, np.zeros(X.size))(Q)
    matrix = np.stack([scipy.interpolate.CubicHermiteSpline(X, Y, e)(Q) - offset for e in np.eye(X.size)], axis=-1)
    np.testing.assert_allclose(tg.jacobian(lambda d: scipy.interpolate.CubicHermiteSpline(X, Y, d)(Q))(dydx), matrix,
                               rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("make", [
    lambda v: PchipInterpolator(X, v),
    lambda v: Akima1DInterpolator(X, v, extrapolate=True),
    lambda v: Akima1DInterpolator(X, v, method="makima", extrapolate=True),
], ids=["pchip", "akima", "makima"])
def test_pchip_and_akima(make):
    # Nonlinear in y: finite differences, first and second order, away from the branch switches.
    y = np.array([0.0, 0.3, 1.2, 1.0, 1.6, 2.9, 2.7])
    check_grads(lambda v, q: make(v)(q), [y, Q_FD])
    check_grads(lambda v, q: make(v).derivative()(q), [y, Q_FD])
    np.testing.assert_allclose(tg.vjp(lambda v: make(v)(Q), y)[0], make(y)(Q), rtol=1e-13)
    y3 = np.stack([y, y[::-1] ** 2], axis=-1)
    check_grads(lambda v: make(v)(Q), [y3], order=1)


def test_pchip_flat_pieces_have_finite_gradients():
    # Zero secant slopes: SciPy sets the derivatives there to 0 (its 1 / harmonic mean would be 1/0).
    y = np.array([0.0, 1.0, 1.0, 2.0, 1.5, 1.5, 3.0])
    g = tg.grad(lambda v: np.sum(PchipInterpolator(X, v)(Q_INSIDE)))(y)
    assert np.all(np.isfinite(g))
    # Perturbing only the data away from the flat pieces keeps the branches: a finite difference applies.
    u = np.array([0.3, 0.0, 0.0, -0.2, 0.0, 0.0, 0.5])
    f = lambda v: np.sum(PchipInterpolator(X, v)(Q_INSIDE))
    np.testing.assert_allclose(np.dot(g, u), (f(y + 1e-6 * u) - f(y - 1e-6 * u)) / 2e-6, rtol=1e-6)


def test_akima_default_is_nan_outside():
    value = tg.vjp(lambda v: Akima1DInterpolator(X, v)(Q), Y)[0]
    np.testing.assert_array_equal(np.isnan(value), np.isnan(Akima1DInterpolator(X, Y)(Q)))
    assert np.isnan(value[0]) and np.isnan(value[-1])


def test_ppoly_in_coefficients_and_points():
    c = rng.standard_normal((4, 3))
    x = [0.0, 1.0, 1.5, 3.0]
    check_grads(lambda cc, q: scipy.interpolate.PPoly(cc, x)(q), [c, Q_FD])
    check_grads(lambda cc, q: scipy.interpolate.PPoly(cc, x, extrapolate=False)(q), [c, Q_INSIDE])
    descending = [3.0, 1.5, 1.0, 0.0]
    check_grads(lambda cc, q: scipy.interpolate.PPoly(cc, descending)(q), [c, Q_FD])
    np.testing.assert_allclose(tg.vjp(lambda cc: scipy.interpolate.PPoly(cc, descending)(Q), c)[0],
                               scipy.interpolate.PPoly(c, descending)(Q), rtol=1e-13)
    c3 = rng.standard_normal((4, 2, 3))
    check_grads(lambda cc, q: scipy.interpolate.PPoly(cc, x, axis=1)(q), [c3, Q_FD])
    np.testing.assert_allclose(tg.vjp(lambda cc: scipy.interpolate.PPoly(cc, x, axis=1)(Q), c3)[0],
                               scipy.interpolate.PPoly(c3, x, axis=1)(Q), rtol=1e-13)


# ----------------------------------------------------------------- B-splines
T = np.r_[[0.0] * 4, 0.8, 1.5, 2.1, [3.0] * 4]
C = rng.standard_normal(T.size - 4)


@pytest.mark.parametrize("extrapolate", [True, False, "periodic"])
def test_bspline_in_coefficients_and_points(extrapolate):
    make = lambda cc: BSpline(T, cc, 3, extrapolate=extrapolate)
    assert_linear_in_data(make, C, Q)
    q = Q_INSIDE if extrapolate is False else Q_FD
    check_grads(lambda cc, p: make(cc)(p), [C, q])
    check_grads(lambda cc, p: make(cc)(p, nu=2), [C, q])


def test_bspline_derivative_antiderivative_integrate():
    for make in (
        lambda cc: BSpline(T, cc, 3).derivative(2),
        lambda cc: BSpline(T, cc, 3).antiderivative(2),
        lambda cc: BSpline(T, cc, 3).derivative(-1),
    ):
        assert_linear_in_data(make, C, Q)
        check_grads(lambda cc, q: make(cc)(q), [C, Q_FD])
    for extrapolate in (True, False):
        f = lambda cc, ab: BSpline(T, cc, 3, extrapolate=extrapolate).integrate(ab[0], ab[1])
        ab = np.array([2.7, -0.4])
        np.testing.assert_allclose(tg.vjp(f, C, ab)[0], f(C, ab), rtol=1e-12)
        check_grads(f, [C, ab])
    f = lambda cc: BSpline(T, cc, 3, extrapolate="periodic").integrate(-1.0, 7.5)
    np.testing.assert_allclose(tg.vjp(f, C)[0], f(C), rtol=1e-12)
    check_grads(f, [C])


def with_inner_knots(inner):
    """``T`` with its interior knots replaced (the repeated end knots stay: moving one
    of them alone would unsort the knot vector, which SciPy refuses)."""
    return np.concatenate([T[:4], inner, T[-4:]])


@pytest.mark.parametrize("nu", [0, 1, 2])
def test_bspline_in_the_knots(nu):
    f = lambda inner, q: BSpline(with_inner_knots(inner), C, 3)(q, nu=nu)
    np.testing.assert_allclose(tg.vjp(f, T[4:7], Q_FD)[0], f(T[4:7], Q_FD), rtol=1e-13, atol=1e-14)
    check_grads(f, [T[4:7], Q_FD], rtol=1e-4, atol=1e-5)
    # Every knot at once (a scaled knot vector keeps the repeated ends together).
    check_grads(lambda scale: BSpline(T * scale[0], C, 3)(Q_INSIDE, nu=nu), [np.array([1.1])], rtol=1e-4, atol=1e-5)


def test_bspline_derivative_antiderivative_integrate_in_the_knots():
    for make in (
        lambda inner: BSpline(with_inner_knots(inner), C, 3).derivative()(Q_FD),
        lambda inner: BSpline(with_inner_knots(inner), C, 3).antiderivative()(Q_FD),
        lambda inner: BSpline(with_inner_knots(inner), C, 3).integrate(0.2, 2.7),
        lambda inner: BSpline(with_inner_knots(inner), C, 3, extrapolate=False).integrate(-0.2, 2.7),
    ):
        np.testing.assert_allclose(tg.vjp(make, T[4:7])[0], make(T[4:7]), rtol=1e-13, atol=1e-14)
        check_grads(make, [T[4:7]], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("ext", [0, 1, 3])
def test_splev_in_the_knots(ext):
    t, c, k = scipy.interpolate.splrep(X, Y)
    f = lambda inner, q: scipy.interpolate.splev(q, (np.concatenate([t[:4], inner, t[-4:]]), c, k), ext=ext)
    np.testing.assert_allclose(tg.vjp(f, t[4:-4], Q_FD)[0], f(t[4:-4], Q_FD), rtol=1e-13, atol=1e-14)
    check_grads(f, [t[4:-4], Q_FD], rtol=1e-4, atol=1e-5)
    check_grads(lambda scale: scipy.interpolate.splev(Q_FD, (t * scale[0], c, k), ext=ext), [np.array([1.05])],
                rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("k", [0, 1, 2, 3, 5])
def test_make_interp_spline(k):
    make = lambda v: make_interp_spline(X, v, k=k)
    assert_linear_in_data(make, Y, Q)
    check_grads(lambda v, q: make(v)(q), [Y, Q + 0.01], order=1 if k == 0 else 2)


@pytest.mark.parametrize("bc_type", ["natural", "clamped", ([(1, 0.3)], [(2, 1.0)]), "periodic"], ids=str)
def test_make_interp_spline_boundary_conditions(bc_type):
    y = Y.copy()
    if bc_type == "periodic":
        y[-1] = y[0]
    make = lambda v: make_interp_spline(X, v, k=3, bc_type=bc_type)
    value = tg.vjp(lambda v: make(v)(Q), y)[0]
    np.testing.assert_allclose(value, make(y)(Q), rtol=1e-13)
    if bc_type != "periodic":
        assert_linear_in_data(make, y, Q)
    check_grads(lambda q: make(y)(q), [Q_FD])


def test_make_interp_spline_complex_data_and_large_n():
    y = Y + 1j * np.cos(X)
    matrix = data_matrix(lambda v: make_interp_spline(X, v), X.shape, Q)
    c = rng.standard_normal(Q.size) + 1j * rng.standard_normal(Q.size)
    np.testing.assert_allclose(tg.vjp(lambda v: make_interp_spline(X, v)(Q), y)[1](c)[0], matrix.T @ c, rtol=1e-11)
    # The VJP is a sparse solve with the collocation matrix's transpose: 20000 points stay cheap.
    x = np.linspace(0.0, 10.0, 20000)
    g = tg.grad(lambda v: np.sum(interp1d(x, v, kind="cubic")(np.linspace(0.0, 10.0, 501))))(np.sin(x))
    assert g.shape == x.shape and np.all(np.isfinite(g))
    np.testing.assert_allclose(np.sum(g), 501, rtol=1e-9)  # the spline of constant data is that constant


@pytest.mark.parametrize("k", [0, 1, 2, 3, 4, 5])
def test_make_interp_spline_in_the_abscissae(k):
    x = np.r_[X, 3.3, 3.9]
    y = np.sin(x)
    q = np.r_[Q_FD, 4.1] + 0.011
    f = lambda xx, v, p: make_interp_spline(xx, v, k=k)(p)
    np.testing.assert_allclose(tg.vjp(f, x, y, q)[0], f(x, y, q), rtol=1e-12, atol=1e-14)
    check_grads(f, [x, y, q], rtol=1e-4, atol=1e-5, order=1 if k == 0 else 2)
    # With given knots t: the interior abscissae move, the knots stay.
    t = np.r_[[0.0] * 4, 1.0, 1.8, 2.4, 3.0, 3.6, [3.9] * 4]
    g = lambda inner, v: make_interp_spline(np.concatenate([x[:1], inner, x[-1:]]), v, k=3, t=t, axis=0)(q)
    y2 = np.stack([y, y ** 2], axis=1)
    check_grads(g, [x[1:-1], y2], rtol=1e-4, atol=1e-5)


def test_make_interp_spline_axis():
    y = rng.standard_normal((2, X.size, 3))
    assert_linear_in_data(lambda v: make_interp_spline(X, v, axis=1), y, Q)


def test_lsq_and_smoothing_splines():
    x = np.linspace(0, 3, 15)
    y = np.sin(2 * x)
    t = np.r_[[0.0] * 4, 1.0, 2.0, [3.0] * 4]
    assert_linear_in_data(lambda v: scipy.interpolate.make_lsq_spline(x, v, t), y, Q)
    assert_linear_in_data(lambda v: scipy.interpolate.make_smoothing_spline(x, v, lam=0.05), y, Q)
    t2 = np.r_[[0.0] * 3, 1.0, 2.0, [3.0] * 3]
    check_grads(lambda v: scipy.interpolate.make_lsq_spline(x, v ** 2, t2, k=2)(Q_INSIDE), [y])


# ----------------------------------------------------------------- interp1d
KINDS = ["linear", "nearest", "nearest-up", "previous", "next", "zero", "slinear", "quadratic", "cubic", 5]


@pytest.mark.parametrize("fill_value", [np.nan, (-1.0, 2.0), "extrapolate"], ids=str)
@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_interp1d_in_y(kind, fill_value):
    make = lambda v: interp1d(X, v, kind=kind, bounds_error=False, fill_value=fill_value)
    assert_linear_in_data(make, Y, Q + 0.01)


@pytest.mark.parametrize("kind", ["linear", "quadratic", "cubic"])
def test_interp1d_first_and_second_order(kind):
    # Away from the breakpoints (piecewise functions of the query points).
    q = Q + 0.01
    check_grads(lambda v, p: scipy.interpolate.interp1d(X, v, kind=kind, fill_value="extrapolate")(p), [Y, q])
    check_grads(lambda v, p: interp1d(X, v ** 2, kind=kind, bounds_error=False)(p), [Y, Q_INSIDE])


def test_interp1d_unsorted_axis_and_step_kinds():
    order = rng.permutation(X.size)
    y = rng.standard_normal((2, X.size))
    for kind in ("linear", "cubic", "previous"):
        make = lambda v: interp1d(X[order], v, kind=kind, axis=1, fill_value="extrapolate")
        assert_linear_in_data(make, y[:, order], Q + 0.01)
    # Piecewise constant kinds: zero derivative in the query points.
    g = tg.grad(lambda p: np.sum(interp1d(X, Y, kind="nearest")(p)))(Q_INSIDE)
    np.testing.assert_array_equal(g, np.zeros_like(Q_INSIDE))


@pytest.mark.parametrize("kind", ["linear", "nearest", "previous", "next", "zero", "slinear", "quadratic", "cubic"])
def test_interp1d_in_the_abscissae(kind):
    order = rng.permutation(X.size)  # unsorted: SciPy sorts x and y together
    q = Q_INSIDE if kind in ("previous", "next") else Q_FD  # previous/next extrapolate with NaN on one side
    f = lambda x, v, p: interp1d(x, v, kind=kind, fill_value="extrapolate")(p)
    np.testing.assert_allclose(tg.vjp(f, X[order], Y[order], q)[0], f(X[order], Y[order], q), rtol=1e-13)
    check_grads(f, [X[order], Y[order], q], rtol=1e-5, atol=1e-6)
    f = lambda x, v, p: interp1d(x, v, kind=kind, bounds_error=False, fill_value=(-1.0, 2.0))(p)
    check_grads(f, [X, Y, Q_INSIDE])


def test_interp1d_bounds_error_is_scipys():
    with pytest.raises(ValueError, match="above the interpolation range"):
        tg.grad(lambda p: np.sum(interp1d(X, Y)(p)))(np.array([1.0, 5.0]))
    with pytest.raises(ValueError, match="above the interpolation range"):
        tg.grad(lambda v: np.sum(interp1d(X, v)(np.array([1.0, 5.0]))))(Y)


# ----------------------------------------------------------------- regular grids
GX = np.linspace(0.0, 1.0, 7)
GY = np.array([0.0, 0.3, 0.7, 1.2, 1.6, 2.0])
V = rng.standard_normal((7, 6))
PTS = np.array([[0.13, 0.21], [0.52, 1.9], [0.97, 1.31], [0.31, 0.66]])


@pytest.mark.parametrize("method", ["linear", "nearest", "slinear", "cubic", "quintic", "slinear_legacy",
                                    "cubic_legacy"])
def test_regular_grid_in_values(method):
    kwargs = {"solver": spsolve} if method in ("slinear", "cubic", "quintic") else {}
    make = lambda v: RegularGridInterpolator((GX, GY), v, method=method, **kwargs)
    assert_linear_in_data(lambda v: make(v.reshape(V.shape)), V.ravel(), PTS, atol=1e-10)


def test_regular_grid_nearest_ties_follow_scipy():
    ties = np.array([[(GX[1] + GX[2]) / 2, 0.2], [0.52, (GY[2] + GY[3]) / 2], [GX[3], GY[4]]])
    f = lambda v: RegularGridInterpolator((GX, GY), v, method="nearest")(ties)
    assert np.array_equal(tg.vjp(f, V)[0], f(V))


@pytest.mark.parametrize("method", ["linear", "cubic_legacy", "quintic"])
def test_regular_grid_first_and_second_order(method):
    kwargs = {"solver": spsolve} if method == "quintic" else {}
    f = lambda v, p: RegularGridInterpolator((GX, GY), v, method=method, **kwargs)(p)
    check_grads(f, [V, PTS])
    check_grads(lambda v, p: RegularGridInterpolator((GX, GY), v * v, method=method, **kwargs)(p), [V, PTS])


def test_regular_grid_nu_fill_value_trailing_dims_and_descending():
    v3 = rng.standard_normal((7, 6, 2))
    outside = PTS * [1.0, 1.3]
    f = lambda v, p: RegularGridInterpolator((GX, GY), v, bounds_error=False, fill_value=None)(p)
    check_grads(f, [v3, outside])
    f = lambda v, p: RegularGridInterpolator((GX, GY), v, bounds_error=False)(p)
    value = tg.vjp(f, v3, outside)[0]
    np.testing.assert_allclose(value, f(v3, outside), rtol=1e-13, equal_nan=True)
    f = lambda v, p: RegularGridInterpolator((GX, GY), v, method="cubic", solver=spsolve)(p, nu=(1, 0))
    check_grads(f, [V, PTS])
    f = lambda v, p: RegularGridInterpolator((GX[::-1], GY), v, method="linear")(p)
    np.testing.assert_allclose(tg.vjp(f, V, PTS)[0], f(V, PTS), rtol=1e-13, atol=1e-15)
    check_grads(f, [V, PTS])


def test_regular_grid_coordinate_tuples_and_one_dimension():
    r = RegularGridInterpolator((GX, GY), V)
    a, b = np.meshgrid(PTS[:, 0], PTS[:, 1], indexing="ij")
    f = lambda u, v: r((u, v))  # a tuple of coordinate arrays, as from np.meshgrid
    np.testing.assert_allclose(tg.vjp(f, a, b)[0], f(a, b), rtol=1e-13)
    check_grads(f, [a, b])
    line = RegularGridInterpolator((GX,), V[:, 0], method="cubic", solver=spsolve)
    check_grads(lambda p: line(p), [PTS[:, 0]])
    np.testing.assert_allclose(tg.vjp(lambda p: line((p,)), PTS[:, 0])[0], line((PTS[:, 0],)), rtol=1e-13)


def test_regular_grid_pchip():
    # Nonlinear in the values: finite differences; SciPy's own values.
    gz = np.array([0.0, 1.0, 2.0, 3.5])
    v3 = rng.standard_normal((7, 6, 4))
    pts3 = np.c_[PTS, [0.5, 1.7, 3.2, 2.9]]
    f = lambda v, p: RegularGridInterpolator((GX, GY, gz), v, method="pchip")(p)
    np.testing.assert_allclose(tg.vjp(f, v3, pts3)[0], f(v3, pts3), rtol=1e-13, atol=1e-15)
    check_grads(f, [v3, pts3])
    f = lambda v, p: interpn((GX, GY), v, p, method="pchip")
    v = rng.standard_normal((7, 6, 2))
    np.testing.assert_allclose(tg.vjp(f, v, PTS)[0], f(v, PTS), rtol=1e-13, atol=1e-15)
    check_grads(f, [v, PTS])


@pytest.mark.parametrize("method", ["linear", "nearest", "pchip"])
def test_regular_grid_in_the_grid(method):
    v = rng.standard_normal((7, 6, 2))
    f = lambda gx, gy, vv, p: RegularGridInterpolator((gx, gy), vv, method=method)(p)
    np.testing.assert_allclose(tg.vjp(f, GX, GY, v, PTS)[0], f(GX, GY, v, PTS), rtol=1e-13, atol=1e-15)
    check_grads(f, [GX, GY, v, PTS], rtol=1e-5, atol=1e-6)
    # A descending grid (SciPy flips it), outside points extrapolated; interpn builds the same.
    f = lambda gx, vv, p: interpn((gx[::-1], GY), vv, p, method=method, bounds_error=False, fill_value=None)
    check_grads(f, [GX, v, PTS * 1.2], rtol=1e-5, atol=1e-6)


def test_regular_grid_spline_methods_refuse_a_traced_grid():
    with pytest.raises(NonDifferentiableArgumentError, match="method='cubic'"):
        tg.grad(lambda gx: np.sum(RegularGridInterpolator((gx, GY), V, method="cubic")(PTS)))(GX)
    with pytest.raises(NonDifferentiableArgumentError, match="method='cubic'"):
        tg.grad(lambda gx: np.sum(RegularGridInterpolator((gx, GY), V)(PTS, method="cubic")))(GX)


def test_interpn():
    f = lambda v, p: interpn((GX, GY), v, p, method="cubic")
    check_grads(f, [V, PTS])
    g = lambda v, p: scipy.interpolate.interpn((GX, GY), v, p)
    np.testing.assert_allclose(tg.vjp(g, V, PTS)[0], g(V, PTS), rtol=1e-13)
    check_grads(g, [V, PTS])
    # SciPy's 'cubic' solves its spline system iteratively (gcrotmk, tolerance 1e-5); tapegrad's is exact.
    np.testing.assert_allclose(tg.vjp(f, V, PTS)[0], f(V, PTS), rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------- dtypes, call styles, exactness, errors
def test_float32_inputs_get_float32_gradients():
    y32, q32 = Y.astype(np.float32), Q_INSIDE.astype(np.float32)
    gy, gq = tg.grad(lambda v, q: np.sum(CubicSpline(X, v)(q)), argnums=(0, 1))(y32, q32)
    assert gy.dtype == np.float32 and gq.dtype == np.float32
    ref = tg.grad(lambda v, q: np.sum(CubicSpline(X, v)(q)), argnums=(0, 1))(Y.astype(np.float32).astype(float),
                                                                              q32.astype(float))
    np.testing.assert_allclose(gy, ref[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gq, ref[1], rtol=1e-5, atol=1e-6)


def test_interpolant_built_outside_called_at_traced_points_and_keywords():
    s = CubicSpline(X, Y, bc_type="natural")
    b = make_interp_spline(X, Y, k=4)
    f = interp1d(X, Y, kind="quadratic")
    for fun, d in ((s, s.derivative()), (b, b.derivative()), (f, None)):
        g = tg.grad(lambda q: np.sum(fun(q)))(Q_INSIDE)
        expected = d(Q_INSIDE) if d is not None else (f(Q_INSIDE + 1e-6) - f(Q_INSIDE - 1e-6)) / 2e-6
        np.testing.assert_allclose(g, expected, rtol=1e-6 if d is None else 1e-12)
    g = tg.grad(lambda v: np.sum(CubicSpline(x=X, y=v, bc_type="clamped")(x=Q, nu=1)))(Y)
    np.testing.assert_allclose(g, data_matrix(lambda v: CubicSpline(X, v, bc_type="clamped").derivative(), X.shape,
                                              Q).sum(0), rtol=1e-11)
    g = tg.grad(lambda v: np.sum(scipy.interpolate.pchip_interpolate(X, v, Q_INSIDE, der=1)))(Y)
    check_grads(lambda v: scipy.interpolate.pchip_interpolate(X, v, Q_INSIDE, der=1), [Y], order=1)


@pytest.mark.filterwarnings("ignore:`lagrange` is deprecated:DeprecationWarning")  # SciPy >= 1.18
def test_lagrange_keeps_the_derivative_of_zero_values():
    # sin(0) == 0: np.poly1d(w[0]) trims that traced zero by value, so SciPy's own code
    # run on tracers silently dropped the derivative in w[0].
    y = np.sin(X)
    matrix = np.stack([scipy.interpolate.lagrange(X, e).coeffs for e in np.eye(X.size)], axis=-1)
    np.testing.assert_allclose(tg.jacobian(lambda w: scipy.interpolate.lagrange(X, w).coeffs)(y), matrix,
                               rtol=1e-12, atol=1e-12)
    check_grads(lambda w: scipy.interpolate.lagrange(X, w * w)(Q), [y])
    value = tg.vjp(lambda w: scipy.interpolate.lagrange(X, w).deriv()(Q), y)[0]
    np.testing.assert_allclose(value, scipy.interpolate.lagrange(X, y).deriv()(Q), rtol=1e-12)


def test_lagrange_warns_once_as_scipy_does():
    # The rule runs SciPy's lagrange once per column of its map: the caller sees SciPy's own
    # warnings of the one call (SciPy 1.18's deprecation; none on 1.17), once, at its own line.
    def messages(records):
        return [(w.category, str(w.message)) for w in records]

    with warnings.catch_warnings(record=True) as plain:
        warnings.simplefilter("always")
        scipy.interpolate.lagrange(X, Y)
    with warnings.catch_warnings(record=True) as traced:
        warnings.simplefilter("always")
        tg.grad(lambda w: np.sum(scipy.interpolate.lagrange(X, w)(Q)))(Y)
    assert messages(traced) == messages(plain)
    if sys.version_info >= (3, 12):
        assert all(w.filename == __file__ for w in traced)


def test_interp1d_linear_values_are_scipys_to_the_last_bit():
    # SciPy's own arithmetic (np.interp for 1-D data, its _call_linear otherwise, whose formula
    # SciPy 1.18 changed), also with traced abscissae.
    q = np.random.default_rng(5).uniform(0.0, 3.0, 50)
    for y in (Y, np.stack([Y, np.cos(X), Y**2])):
        f = lambda v: interp1d(X, v)(q)
        assert np.array_equal(tg.vjp(f, y)[0], f(y))
        g = lambda x: interp1d(x, y)(q)
        assert np.array_equal(tg.vjp(g, X)[0], g(X))


def test_barycentric_interpolation_still_traces_through_numpy():
    # BarycentricInterpolator's evaluation is NumPy code that tapegrad follows by itself;
    # interp1d's rule must not take over the __call__ it shares with it.
    b = scipy.interpolate.BarycentricInterpolator(X, Y)
    np.testing.assert_allclose(tg.grad(lambda q: np.sum(b(q)))(Q_INSIDE), b.derivative(Q_INSIDE), rtol=1e-10)


def test_plain_calls_while_recording_are_scipys_own_and_nothing_stays_changed():
    interception.uninstall(now=True)  # an earlier test's trampolines may linger (restored by a plain call)
    functions = [CubicSpline.__init__, PPoly.__call__, BSpline.__call__, make_interp_spline,
                 interp1d.__init__, interp1d._evaluate, RegularGridInterpolator.__call__]
    codes = [f.__code__ for f in functions]
    seen = {}

    def fun(v):
        seen["cs"] = CubicSpline(X, Y)(Q)
        seen["bs"] = make_interp_spline(X, Y, k=2)(Q, nu=1)
        seen["i1"] = interp1d(X, Y, kind="cubic", bounds_error=False)(Q)
        seen["rgi"] = RegularGridInterpolator((GX, GY), V)(PTS)
        assert CubicSpline.__init__.__code__ is not codes[0]  # the door is open
        return np.sum(CubicSpline(X, v)(Q))

    tg.grad(fun)(Y)
    assert np.array_equal(seen["cs"], CubicSpline(X, Y)(Q))
    assert np.array_equal(seen["bs"], make_interp_spline(X, Y, k=2)(Q, nu=1))
    assert np.array_equal(seen["i1"], interp1d(X, Y, kind="cubic", bounds_error=False)(Q), equal_nan=True)
    assert np.array_equal(seen["rgi"], RegularGridInterpolator((GX, GY), V)(PTS))
    assert all(f.__code__ is code for f, code in zip(functions, codes))


def test_inputs_are_not_mutated():
    y, q = Y.copy(), Q.copy()
    tg.grad(lambda v, p: np.sum(interp1d(X, v, kind="cubic", fill_value="extrapolate")(p)), argnums=(0, 1))(y, q)
    tg.grad(lambda v: np.sum(CubicSpline(X, v).integrate(0, 2)))(y)
    np.testing.assert_array_equal(y, Y)
    np.testing.assert_array_equal(q, Q)


def test_constant_tracers_are_plain_knots():
    # Array-API code makes its constants tracers (xp.asarray); np.zeros_like(v) is one too.
    g = tg.grad(lambda v: np.sum(CubicSpline(np.zeros_like(v) + X, v)(Q)))(Y)  # knots: a constant tracer
    np.testing.assert_allclose(g, tg.grad(lambda v: np.sum(CubicSpline(X, v)(Q)))(Y), rtol=1e-14)
    knots = []

    def f(v):
        knots.append(np.zeros_like(v) + X)
        return np.sum(make_interp_spline(knots[-1], v, k=2)(Q))

    np.testing.assert_allclose(tg.grad(f)(Y), tg.grad(lambda v: np.sum(make_interp_spline(X, v, k=2)(Q)))(Y),
                               rtol=1e-14)
    assert type(knots[0]).__name__ == "Tracer"  # the case this test is about


def test_clear_errors():
    with pytest.raises(NonDifferentiableArgumentError, match=r"make_interp_spline with respect to x"):
        tg.grad(lambda x: np.sum(make_interp_spline(x, Y, bc_type="natural")(Q)))(X)
    with pytest.raises(NonDifferentiableArgumentError, match=r"make_lsq_spline with respect to x"):
        tg.grad(lambda x: np.sum(scipy.interpolate.make_lsq_spline(x, Y, T)(Q_INSIDE)))(X)
    with pytest.raises(NonDifferentiableArgumentError, match=r"the breakpoints"):
        tg.grad(lambda x: CubicSpline(x, np.r_[Y[:-1], Y[0]], bc_type="periodic").integrate(-1.0, 5.0))(X)
    with pytest.raises(NonDifferentiableArgumentError, match=r"the knots"):
        tg.grad(lambda t: BSpline(t, C, 3, extrapolate="periodic").integrate(-1.0, 5.0))(T)
    with pytest.raises(NonDifferentiableArgumentError, match="UnivariateSpline"):
        tg.grad(lambda v: np.sum(scipy.interpolate.UnivariateSpline(X, v)(Q)))(Y)
    with pytest.raises(NonDifferentiableArgumentError, match="lam=None"):
        tg.grad(lambda v: np.sum(scipy.interpolate.make_smoothing_spline(X, v)(Q)))(Y)
    with pytest.raises(UnsupportedFunctionError, match="roots"):
        tg.grad(lambda v: np.sum(CubicSpline(X, v).roots()))(Y)
    with pytest.raises(UnsupportedFunctionError, match="BPoly"):
        tg.grad(lambda c: np.sum(scipy.interpolate.BPoly(c, [0.0, 1.0, 2.0])(Q)))(np.ones((3, 2)))
    with pytest.raises(UnsupportedFunctionError, match="splinef2d"):
        tg.grad(lambda v: np.sum(interpn((GX, GY), v, PTS, method="splinef2d")))(V)


# ----------------------------------------------------------------- FITPACK evaluation, BPoly, large maps
@pytest.mark.parametrize("ext", [0, 1, 3])
@pytest.mark.parametrize("der", [0, 1, 2])
def test_splev_in_points_and_coefficients(der, ext):
    t, c, k = scipy.interpolate.splrep(X, Y)
    f = lambda q, cc: scipy.interpolate.splev(q, (t, cc, k), der=der, ext=ext)
    np.testing.assert_allclose(tg.vjp(f, Q_FD, c)[0], f(Q_FD, c), rtol=1e-12, atol=1e-14)
    check_grads(f, [Q_FD, c])


def test_univariate_spline_at_traced_points_and_splev_errors():
    spline = scipy.interpolate.UnivariateSpline(X, Y, s=0.05)
    for nu in (0, 1):
        g = tg.grad(lambda q: np.sum(spline(q, nu=nu)))(Q_FD)
        np.testing.assert_allclose(g, spline.derivative(nu + 1)(Q_FD), rtol=1e-10)
    tck = scipy.interpolate.splrep(X, Y)
    with pytest.raises(ValueError, match="not in the domain"):
        tg.grad(lambda q: np.sum(scipy.interpolate.splev(q, tck, ext=2)))(Q)
    parametric = tg.vjp(lambda q: scipy.interpolate.splev(q, [tck[0], [tck[1], 2 * tck[1]], 3])[1], Q)[0]
    np.testing.assert_allclose(parametric, 2 * scipy.interpolate.splev(Q, tck), rtol=1e-12)


def test_bernstein_polynomial_with_plain_coefficients_at_traced_points():
    bp = scipy.interpolate.BPoly(rng.standard_normal((4, 2)), [0.0, 1.2, 3.0])
    f = lambda q: bp(q, nu=1)
    np.testing.assert_allclose(tg.vjp(f, Q_FD)[0], f(Q_FD), rtol=1e-12)
    check_grads(f, [Q_FD])
    np.testing.assert_allclose(tg.grad(lambda q: np.sum(bp(q)))(Q_FD), bp(Q_FD, 1), rtol=1e-12)


def test_large_maps_are_contracted_in_blocks(monkeypatch):
    from tapegrad.rules import scipy_interpolate

    x = np.linspace(0.0, 2 * np.pi, 13)
    y = np.sin(x)
    y[-1] = y[0]
    q = np.linspace(-0.5, 7.0, 9)
    cases = [
        lambda v: CubicSpline(x, v, bc_type="natural")(q),
        lambda v: CubicSpline(x, v, bc_type="periodic")(q),
        lambda v: make_interp_spline(x, v, k=3, bc_type="periodic")(q),
    ]
    whole = [tg.jacobian(f)(y) for f in cases]
    monkeypatch.setattr(scipy_interpolate, "DENSE_LIMIT", 40)  # blocks of a few columns
    for f, expected in zip(cases, whole):
        np.testing.assert_allclose(tg.jacobian(f)(y), expected, rtol=1e-12, atol=1e-14)


def test_tridiagonal_solve_primitive_against_the_dense_solve():
    from tapegrad.rules.scipy_interpolate import tridiagonal_solve_p

    n = 6
    lower, upper = rng.uniform(0.1, 1.0, n - 1), rng.uniform(0.1, 1.0, n - 1)
    main, b = rng.uniform(3.0, 4.0, n), rng.standard_normal((n, 2))
    dense = np.diag(main) + np.diag(upper, 1) + np.diag(lower, -1)
    np.testing.assert_allclose(tridiagonal_solve_p(lower, main, upper, b), np.linalg.solve(dense, b), rtol=1e-13)
    # The VJP in b is the transposed solve: the Jacobian is the inverse matrix.
    jac = tg.jacobian(lambda v: tridiagonal_solve_p(lower, main, upper, v))(b[:, 0])
    np.testing.assert_allclose(jac, np.linalg.inv(dense), rtol=1e-12, atol=1e-14)
    check_grads(lambda lo, m, up, v: tridiagonal_solve_p(lo, m, up, v), [lower, main, upper, b])


def test_large_cubic_spline_gradient_is_linear_time():
    # 20000 knots: a dense map would hold 4 * 20000^2 floats (12.8 GB); the tridiagonal VJP does not.
    x = np.linspace(0.0, 10.0, 20000)
    q = np.linspace(-1.0, 11.0, 301)
    g = tg.grad(lambda v: np.sum(CubicSpline(x, v)(q)))(np.sin(x))
    near = np.abs(x - 5.0) < 0.5
    assert g.shape == x.shape and np.all(np.isfinite(g))
    # The interpolant of y is linear in y: spot-check one column against SciPy's own spline of e_j.
    j = int(np.argmax(near))
    e = np.zeros_like(x)
    e[j] = 1.0
    np.testing.assert_allclose(g[j], np.sum(CubicSpline(x, e)(q)), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("lower, upper", [(1, 1), (2, 1), (0, 2), (3, 3)])
def test_banded_solve_primitive_against_the_dense_solve(lower, upper):
    from tapegrad.rules.scipy_interpolate import banded_solve_p

    n = 7
    dense = np.zeros((n, n))
    for i in range(n):
        for j in range(max(0, i - lower), min(n, i + upper + 1)):
            dense[i, j] = rng.uniform(0.1, 1.0) + (4.0 if i == j else 0.0)
    ab = np.zeros((lower + upper + 1, n))
    for i in range(n):
        for j in range(max(0, i - lower), min(n, i + upper + 1)):
            ab[upper + i - j, j] = dense[i, j]
    b = rng.standard_normal((n, 2))
    np.testing.assert_allclose(banded_solve_p(ab, b, lower, upper), np.linalg.solve(dense, b), rtol=1e-13)
    jac = tg.jacobian(lambda v: banded_solve_p(ab, v, lower, upper))(b[:, 0])
    np.testing.assert_allclose(jac, np.linalg.inv(dense), rtol=1e-12, atol=1e-14)
    # In the band: -lam s^T on the band's entries (lam = A^-T g), nothing on the storage's unused corners.
    g = rng.standard_normal(n)
    grad = tg.grad(lambda a: np.sum(g * banded_solve_p(a, b[:, 0], lower, upper)))(ab)
    outer = -np.outer(np.linalg.solve(dense.T, g), np.linalg.solve(dense, b[:, 0]))
    expected = np.zeros_like(ab)
    for i in range(n):
        for j in range(max(0, i - lower), min(n, i + upper + 1)):
            expected[upper + i - j, j] = outer[i, j]
    np.testing.assert_allclose(grad, expected, rtol=1e-12, atol=1e-14)
    check_grads(lambda a, v: banded_solve_p(a, v, lower, upper), [ab, b])


def test_attributes_of_traced_interpolants_are_traced():
    # spline.x / .t / .c read after construction keep their derivatives (no silent plain copy).
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(CubicSpline(x, Y).x ** 2))(X), 2 * X)
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(PchipInterpolator(x, Y).derivative().x ** 2))(X), 2 * X)
    np.testing.assert_allclose(tg.grad(lambda t: np.sum(BSpline(t, C, 3).t ** 2))(T), 2 * T)
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(interp1d(x[::-1], Y[::-1]).x ** 2))(X), 2 * X)
    grid_sum = lambda gx: np.sum(RegularGridInterpolator((gx[::-1], GY), V).grid[0] ** 2)
    np.testing.assert_allclose(tg.grad(grid_sum)(GX), 2 * GX)
    # make_interp_spline's not-a-knot knots: x[0] and x[-1] four times, x[2:-2] once.
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(make_interp_spline(x, Y).t))(X), [4, 0, 1, 1, 1, 0, 4])
    matrix = np.stack([CubicSpline(X, e).c.sum() for e in np.eye(X.size)])
    np.testing.assert_allclose(tg.grad(lambda v: np.sum(CubicSpline(X, v).c))(Y), matrix, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("limits", [(-1.0, 4.0), (0.5, 2.0), (2.0, 0.5), (-1.0, -0.5), (3.5, 4.0)])
def test_splint_and_bspline_integral_without_extrapolation(limits):
    # FITPACK takes the spline as zero outside its base interval (limits outside: 0, not NaN).
    t, c, k = scipy.interpolate.splrep(X, Y + 1.0)
    ab = np.array(limits)
    f = lambda cc, lim: scipy.interpolate.splint(lim[0], lim[1], (t, cc, k))
    assert tg.vjp(f, c, ab)[0] == pytest.approx(scipy.interpolate.splint(limits[0], limits[1], (t, c, k)), rel=1e-12,
                                                 abs=1e-15)
    check_grads(f, [c, ab + 0.013])
    g = lambda cc: BSpline(t, cc, k, extrapolate=False).integrate(*limits)
    assert tg.vjp(g, c)[0] == pytest.approx(g(c), rel=1e-12, abs=1e-15)


def test_univariate_spline_integral_and_splint_in_the_knots():
    spline = scipy.interpolate.UnivariateSpline(X, Y, s=0.01)
    g = tg.grad(lambda ab: spline.integral(ab[0], ab[1]))(np.array([0.3, 2.1]))
    np.testing.assert_allclose(g, [-spline(0.3), spline(2.1)], rtol=1e-12)
    t, c, k = scipy.interpolate.splrep(X, Y)
    f = lambda inner: scipy.interpolate.splint(0.3, 2.2, (np.concatenate([t[:4], inner, t[-4:]]), c, k))
    check_grads(f, [t[4:-4]], rtol=1e-5, atol=1e-6)
    value = tg.vjp(lambda cc: scipy.interpolate.splint(0.5, 2.0, (t, cc, k), full_output=1)[0], c)[0]
    assert value == pytest.approx(scipy.interpolate.splint(0.5, 2.0, (t, c, k)), rel=1e-12)


@pytest.mark.parametrize("extrapolate", [True, False, "periodic"])
def test_values_match_scipy_everywhere_including_nan_and_high_derivatives(extrapolate):
    # Repeated interior knot, points inside/outside/on knots, a NaN, derivatives up to past the degree.
    t = np.r_[[0.0] * 4, 0.8, 1.5, 1.5, 2.1, [3.0] * 4]
    c = rng.standard_normal(t.size - 4)
    q = np.r_[np.linspace(-2.0, 5.0, 57), t, np.nan]
    pp = scipy.interpolate.PPoly.from_spline((t, c, 3), extrapolate=extrapolate)
    for nu in range(5):
        got = tg.vjp(lambda cc: BSpline(t, cc, 3, extrapolate=extrapolate)(q, nu=nu), c)[0]
        np.testing.assert_allclose(got, BSpline(t, c, 3, extrapolate=extrapolate)(q, nu=nu), rtol=1e-9, atol=1e-9)
        got = tg.vjp(lambda cc: scipy.interpolate.PPoly(cc, pp.x, extrapolate=extrapolate)(q, nu=nu), pp.c)[0]
        np.testing.assert_allclose(got, pp(q, nu=nu), rtol=1e-9, atol=1e-9)


def test_nan_query_points_do_not_poison_gradients():
    q = np.array([0.3, np.nan, 1.7])
    g = tg.grad(lambda v: np.nansum(CubicSpline(X, v)(q)))(Y)
    np.testing.assert_allclose(g, tg.grad(lambda v: np.sum(CubicSpline(X, v)(q[[0, 2]])))(Y), rtol=1e-12)
    g = tg.grad(lambda p: np.nansum(make_interp_spline(X, Y)(p)))(q)
    assert g[1] == 0 and np.all(np.isfinite(g))


def test_traced_arrays_assigned_to_a_built_interpolant():
    # spline.c = traced (and .x, .t): stored where the running SciPy keeps the arrays (SciPy 1.17:
    # the instance's _c/_x/_t; SciPy 1.18: its back end), so evaluation sees them.
    def scaled_ppoly(s):
        spline = CubicSpline(X, Y)
        spline.c = spline.c * s[0]
        return spline(Q_FD)

    np.testing.assert_allclose(tg.jacobian(scaled_ppoly)(np.array([1.3]))[:, 0], CubicSpline(X, Y)(Q_FD), rtol=1e-12)
    check_grads(scaled_ppoly, [np.array([1.3])])

    def shifted_breakpoints(d):
        spline = PPoly(CubicSpline(X, Y).c, X)
        spline.x = X + d[0]
        return spline(Q_FD)

    # p(q - d): its derivative in d is -p'(q - d)
    np.testing.assert_allclose(tg.jacobian(shifted_breakpoints)(np.array([0.1]))[:, 0],
                               -PPoly(CubicSpline(X, Y).c, X + 0.1)(Q_FD, nu=1), rtol=1e-10)

    def scaled_bspline(s):
        spline = make_interp_spline(X, Y)
        spline.c = spline.c * s[0]
        return spline(Q_FD)

    np.testing.assert_allclose(tg.jacobian(scaled_bspline)(np.array([0.7]))[:, 0], make_interp_spline(X, Y)(Q_FD),
                               rtol=1e-12)

    def knots(t):
        spline = make_interp_spline(X, Y)
        spline.t = t
        return spline(Q_INSIDE)

    check_grads(knots, [make_interp_spline(X, Y).t], order=1)


def test_bernstein_polynomial_integral_at_traced_limits():
    bp = scipy.interpolate.BPoly(rng.standard_normal((4, 2)), [0.0, 1.2, 3.0])
    f = lambda ab: bp.integrate(ab[0], ab[1])
    ab = np.array([0.2, 2.5])
    assert tg.vjp(f, ab)[0] == pytest.approx(f(ab), rel=1e-12)
    np.testing.assert_allclose(tg.grad(f)(ab), [-bp(0.2), bp(2.5)], rtol=1e-12)
    check_grads(f, [ab])
    with pytest.raises(NonDifferentiableArgumentError, match="periodic"):
        tg.grad(lambda ab: bp.integrate(ab[0], ab[1], extrapolate="periodic"))(ab)


def test_the_arrays_are_found_where_the_running_scipy_keeps_them():
    from tapegrad.rules.scipy_interpolate import _get

    for obj, names in ((CubicSpline(X, Y), "cx"), (make_interp_spline(X, Y), "ct")):
        delegate = obj.__dict__.get("_delegate_to")  # SciPy 1.18's back end; SciPy 1.17 has none
        for name in names:
            expected = getattr(delegate, name) if delegate is not None else getattr(obj, "_" + name)
            assert _get(obj, name) is expected

    class Unknown:  # a layout neither SciPy 1.17's nor 1.18's: a clear error, not plain values
        c = np.ones((4, 1))

    with pytest.raises(UnsupportedFunctionError, match="layout tapegrad does not know"):
        _get(Unknown(), "c")
