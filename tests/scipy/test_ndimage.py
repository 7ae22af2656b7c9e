"""Derivatives of scipy.ndimage's linear filters: every adjoint against SciPy's own dense matrix.

For an operator linear in its input, the matrix is built by applying SciPy
itself (no tracer) to the basis arrays; tapegrad's VJP of each basis cotangent
(one batched sweep, ``tg.jacobian``) and of a random cotangent must equal its
transpose, for every boundary mode and several origins.  Weights and ``cval``
enter bilinearly / affinely and are checked at first and second order against
finite differences.
"""

import numpy as np
import pytest
import scipy.ndimage
from scipy import ndimage
from scipy.ndimage import convolve, correlate1d, gaussian_filter

import tapegrad as tg
from tapegrad.errors import GradientDroppedError, NonDifferentiableArgumentError
from tapegrad.testing import check_grads

nd = scipy.ndimage
MODES = ["reflect", "constant", "nearest", "mirror", "wrap", "grid-wrap", "grid-constant", "grid-mirror"]
rng = np.random.default_rng(11)
X = rng.standard_normal((5, 6))
W1 = np.array([0.7, -1.2, 2.0, 0.4])
W2 = np.array([[0.5, -1.0], [2.0, 0.3], [-0.7, 1.1]])


def dense(fun, x):
    """The matrix of the linear part of ``fun`` at ``x``'s shape, from SciPy alone (no tracer)."""
    zero = fun(np.zeros_like(x))
    cols = [(fun(e.reshape(x.shape)) - zero).ravel() for e in np.eye(x.size, dtype=x.dtype)]
    return np.stack(cols, axis=1)


def assert_adjoint(fun, x):
    """tapegrad's VJPs of ``fun`` equal the transpose of SciPy's dense matrix; the forward equals SciPy's."""
    m = dense(fun, x)
    out, vjp_fun = tg.vjp(fun, x)
    assert np.array_equal(out, fun(x)) and out.dtype == fun(x).dtype
    # every basis cotangent at once (a batched sweep) ...
    basis = np.eye(m.shape[0]).reshape((m.shape[0],) + out.shape)
    np.testing.assert_allclose(vjp_fun(basis)[0].reshape(m.shape[0], -1), m, rtol=1e-12, atol=1e-13)
    # ... and one random cotangent alone
    c = rng.standard_normal(out.shape)
    np.testing.assert_allclose(vjp_fun(c)[0].ravel(), m.T @ c.ravel(), rtol=1e-12, atol=1e-12)


# Every filter that is linear in its input, as users call it (module attribute, early-bound
# names, keyword arguments), with origins that move the window both ways.
FILTERS = {
    "correlate1d": lambda m: lambda x: correlate1d(x, W1, axis=0, mode=m, cval=0.3, origin=-1),
    "correlate1d-origin": lambda m: lambda x: nd.correlate1d(x, weights=W1[:3], mode=m, origin=1),
    "correlate1d-long": lambda m: lambda x: nd.correlate1d(x, np.arange(1.0, 13.0), 1, None, m),
    "convolve1d": lambda m: lambda x: ndimage.convolve1d(x, W1, axis=1, mode=m, origin=1),
    "correlate": lambda m: lambda x: nd.correlate(x, W2, mode=m, cval=-0.5, origin=(1, 0)),
    "convolve": lambda m: lambda x: convolve(input=x, weights=W2, mode=m, origin=(0, -1)),
    "convolve-axes": lambda m: lambda x: nd.convolve(x, W1, mode=m, axes=(1,)),
    "gaussian_filter": lambda m: lambda x: gaussian_filter(x, (1.0, 0.7), mode=m),
    "gaussian_filter-order": lambda m: lambda x: nd.gaussian_filter(x, 0.8, order=(1, 2), mode=m, truncate=3.0),
    "gaussian_filter1d": lambda m: lambda x: nd.gaussian_filter1d(x, 1.3, axis=0, order=1, mode=m, radius=2),
    "uniform_filter": lambda m: lambda x: nd.uniform_filter(x, (3, 4), mode=m, origin=(0, 1)),
    "uniform_filter1d": lambda m: lambda x: nd.uniform_filter1d(x, 4, axis=0, mode=m, cval=1.5, origin=-1),
    "laplace": lambda m: lambda x: nd.laplace(x, mode=m),
    "gaussian_laplace": lambda m: lambda x: nd.gaussian_laplace(x, 0.8, mode=m),
    "sobel": lambda m: lambda x: nd.sobel(x, 0, mode=m),
    "prewitt": lambda m: lambda x: nd.prewitt(x, axis=-1, mode=m),
    "generic_laplace": lambda m: lambda x: nd.generic_laplace(
        x, lambda a, axis, out, mode, cval: nd.correlate1d(a, [1.0, -2.0, 1.0], axis, out, mode, cval), mode=m
    ),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(FILTERS))
def test_adjoint_equals_dense_transpose(name, mode):
    assert_adjoint(FILTERS[name](mode), X)


@pytest.mark.parametrize("mode", MODES)
def test_short_lines_and_per_axis_modes(mode):
    # lines shorter than the kernel (repeated reflections), a 1-D and a 3-D input
    assert_adjoint(lambda x: nd.correlate1d(x, np.linspace(-1, 2, 9), mode=mode, origin=2), rng.standard_normal(3))
    assert_adjoint(lambda x: nd.uniform_filter1d(x, 7, mode=mode), rng.standard_normal(2))
    assert_adjoint(lambda x: nd.gaussian_filter(x, 1.0, mode=(mode, "wrap", "nearest")), rng.standard_normal((2, 3, 4)))
    assert_adjoint(lambda x: nd.correlate(x, W2[:2], mode=mode), rng.standard_normal((1, 3)))


@pytest.mark.parametrize("mode", ["reflect", "constant", "mirror", "wrap", "grid-constant"])
def test_weights_and_cval_first_and_second_order(mode):
    c = np.array(0.4)
    check_grads(lambda x, w, c: nd.correlate1d(x, w, axis=0, mode=mode, cval=c, origin=1), (X, W1, c))
    check_grads(lambda x, w, c: nd.convolve1d(x, w, mode=mode, cval=c), (X, W1, c))
    check_grads(lambda x, w, c: nd.correlate(x, w, mode=mode, cval=c, origin=(-1, 0)), (X, W2, c))
    check_grads(lambda x, w, c: nd.convolve(x, w, mode=mode, cval=c), (X, W2, c))
    check_grads(lambda x, c: nd.uniform_filter1d(x, 3, mode=mode, cval=c, origin=1), (X, c))


def test_cval_derivative_is_the_filter_of_the_border():
    # d/dcval of a constant-mode filter: the weights that fall outside the line.
    x = rng.standard_normal(6)
    d = tg.jacobian(lambda c: nd.correlate1d(x, W1, mode="constant", cval=c))(np.array(0.0))
    np.testing.assert_allclose(d, nd.correlate1d(np.zeros(6), W1, mode="constant", cval=1.0), rtol=1e-14)
    assert np.all(tg.jacobian(lambda c: nd.correlate1d(x, W1, mode="wrap", cval=c))(np.array(0.0)) == 0)


def test_hessian_through_filters_matches_finite_differences():
    def energy(x):
        y = gaussian_filter(np.tanh(x), 0.9, mode="mirror")
        return np.sum(nd.sobel(y, 0, mode="nearest") ** 2) + np.sum(np.sin(nd.uniform_filter(x, 3, mode="wrap")))

    x = rng.standard_normal((4, 5))
    h = tg.hessian(energy)(x).reshape(x.size, x.size)
    eps = 1e-6
    fd = np.stack(
        [
            ((tg.grad(energy)(x + eps * e.reshape(x.shape)) - tg.grad(energy)(x - eps * e.reshape(x.shape))) / (2 * eps)).ravel()
            for e in np.eye(x.size)
        ],
        axis=1,
    )
    np.testing.assert_allclose(h, fd, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(h, h.T, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("mode", ["reflect", "constant", "nearest", "wrap"])
def test_gradient_magnitude_first_and_second_order(mode):
    check_grads(lambda x: nd.gaussian_gradient_magnitude(x, 1.0, mode=mode), (X,))
    check_grads(
        lambda x: nd.generic_gradient_magnitude(x, lambda a, axis, out, mode, cval: nd.sobel(a, axis, out, mode, cval)),
        (X,),
    )


def test_gradient_magnitude_at_a_structural_zero_takes_the_subgradient_zero():
    # In 'mirror' mode a first-derivative filter is exactly 0 at the corners for every input.
    j = tg.jacobian(lambda x: nd.gaussian_gradient_magnitude(x, 1.0, mode="mirror"))(X)
    assert np.all(np.isfinite(j)) and np.all(j[0, 0] == 0)
    assert nd.gaussian_gradient_magnitude(X, 1.0, mode="mirror")[0, 0] == 0


def test_complex_input_and_weights():
    xc = X + 1j * rng.standard_normal(X.shape)
    for f in (
        lambda x: nd.correlate1d(x, W1 + 0.5j, mode="wrap"),
        lambda x: nd.convolve(x, W2 - 0.2j, mode="nearest"),
        lambda x: nd.uniform_filter(x, 3),
        lambda x: nd.gaussian_filter1d(x, 1.0),
    ):
        out = tg.vjp(f, xc)[0]
        assert np.array_equal(out, f(xc)) and out.dtype == f(xc).dtype
        check_grads(f, (xc,))
    check_grads(lambda w: nd.correlate1d(xc, w, mode="reflect"), (W1 + 0.3j,))
    check_grads(lambda w: nd.correlate(X, w, mode="reflect"), (W2 + 0.3j,))
    check_grads(lambda w: nd.convolve(xc, w, mode="constant"), (W2 - 0.1j,))


def test_float32_stays_float32():
    x32 = X.astype(np.float32)
    for f in (
        lambda x: gaussian_filter(x, 1.0),
        lambda x: nd.uniform_filter(x, 3),
        lambda x: nd.correlate(x, W2),
        lambda x: nd.laplace(x),
    ):
        out = tg.vjp(f, x32)[0]
        assert out.dtype == np.float32 and np.array_equal(out, f(x32))
        g = tg.grad(lambda x: np.sum(f(x) ** 2))(x32)
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, tg.grad(lambda x: np.sum(f(x) ** 2))(X), rtol=1e-3, atol=1e-3)


def test_output_dtype_is_kept():
    f = lambda x: nd.gaussian_filter(x, 1.0, output=np.float32)  # noqa: E731
    out = tg.vjp(f, X)[0]
    assert out.dtype == np.float32 and np.array_equal(out, f(X))
    assert tg.grad(lambda x: np.sum(f(x)))(X).dtype == np.float64


def test_no_tracer_gives_scipys_exact_results_and_nothing_stays_changed():
    codes = {f: f.__code__ for f in (nd.correlate1d, nd.gaussian_filter, nd.uniform_filter1d, nd.correlate)}
    plain = []

    def f(x):
        plain.append(gaussian_filter(X, 1.3, mode="wrap"))  # plain arrays, inside a recording window
        plain.append(nd.correlate1d(X, W1, mode="mirror"))
        return np.sum(gaussian_filter(x, 1.3) * X)

    x = X.copy()
    tg.grad(f)(x)
    assert np.array_equal(plain[0], gaussian_filter(X, 1.3, mode="wrap"))
    assert np.array_equal(plain[1], nd.correlate1d(X, W1, mode="mirror"))
    assert np.array_equal(x, X)  # input not mutated
    for fun, code in codes.items():
        assert fun.__code__ is code


def test_scipy_errors_come_through():
    with pytest.raises(ValueError, match="Invalid origin"):
        tg.grad(lambda x: np.sum(nd.correlate1d(x, W1, origin=3)))(X)
    with pytest.raises(RuntimeError, match="boundary mode not supported"):
        tg.grad(lambda x: np.sum(nd.correlate1d(x, W1, mode="bogus")))(X)


def test_clear_errors():
    with pytest.raises(GradientDroppedError, match=r"scipy.ndimage.correlate1d\(..., output=<array>\)"):
        tg.grad(lambda x: np.sum(nd.correlate1d(x, W1, output=np.zeros_like(X))))(X)
    with pytest.raises(NonDifferentiableArgumentError, match="'truncate'"):
        tg.grad(lambda t: np.sum(nd.gaussian_filter(X, 1.0, truncate=t)))(np.array(3.0))
    # a traced sigma used as a constant is fine
    g = tg.grad(lambda x: np.sum(nd.gaussian_filter(x, tg.stop_gradient(x[0, 0]) * 0 + 1.0)))(X)
    np.testing.assert_allclose(g, tg.grad(lambda x: np.sum(nd.gaussian_filter(x, 1.0)))(X), rtol=1e-12)
    # generic_filter calls back into Python from compiled code: refused clearly
    with pytest.raises(GradientDroppedError, match="scipy.ndimage.generic_filter"):
        tg.grad(lambda x: np.sum(nd.generic_filter(x, np.mean, 3)))(X)


# ------------------------------------------------------------------ interpolation
from scipy.ndimage import map_coordinates  # noqa: E402  (early-bound, as users write it)

COORDS = np.stack([rng.uniform(-2.0, 6.0, 7), rng.uniform(-2.0, 7.0, 7)])
MATRIX = np.array([[0.9317, 0.1731], [-0.2873, 1.1269]])
OFFSET = np.array([0.3711, -0.2293])


def interpolations(order, mode):
    return {
        "map_coordinates": lambda x: map_coordinates(x, COORDS, order=order, mode=mode, cval=0.3),
        "map_coordinates-no-prefilter": lambda x: nd.map_coordinates(x, COORDS, None, order, mode, 0.3, False),
        "zoom": lambda x: nd.zoom(x, (1.5, 0.7), order=order, mode=mode, cval=0.2),
        "zoom-grid": lambda x: nd.zoom(x, 1.3, order=order, mode=mode, grid_mode=True),
        "shift": lambda x: nd.shift(x, (0.3, -1.6), order=order, mode=mode),
        "affine-diagonal": lambda x: nd.affine_transform(x, [0.8, 1.2], offset=(0.5, -0.3), order=order, mode=mode),
        "affine": lambda x: ndimage.affine_transform(
            x, MATRIX, offset=OFFSET, output_shape=(4, 7), order=order, mode=mode, cval=-0.4
        ),
    }


@pytest.mark.filterwarnings("ignore:It is recommended to use mode")
@pytest.mark.parametrize("order", range(6))
@pytest.mark.parametrize("mode", MODES)
def test_interpolation_adjoints_equal_dense_transpose(mode, order):
    for fun in interpolations(order, mode).values():
        assert_adjoint(fun, X)


@pytest.mark.parametrize("order", range(6))
@pytest.mark.parametrize("mode", MODES)
def test_map_coordinates_in_coordinates_and_cval_first_and_second_order(mode, order):
    # coordinates away from the knots and half-knots (order 0: derivative 0 there)
    check_grads(lambda x, c, v: nd.map_coordinates(x, c, order=order, mode=mode, cval=v), (X, COORDS, np.array(0.3)))


@pytest.mark.parametrize("order", [0, 1, 3, 5])
@pytest.mark.parametrize("mode", ["reflect", "constant", "nearest", "mirror", "grid-wrap"])
def test_shift_and_affine_parameters_first_and_second_order(mode, order):
    check_grads(lambda x, s: nd.shift(x, s, order=order, mode=mode), (X, np.array([0.3, -1.6])))
    check_grads(lambda x, m, o: nd.affine_transform(x, m, offset=o, order=order, mode=mode), (X, MATRIX, OFFSET))


def test_order_zero_coordinates_have_zero_derivative():
    g = tg.grad(lambda c: np.sum(nd.map_coordinates(X, c, order=0, mode="nearest")))(COORDS)
    assert np.array_equal(g, np.zeros_like(COORDS))


def test_coordinate_derivative_closed_form():
    # order 1 in 1-D: d/dc of linear interpolation is the slope of the segment holding c
    x = rng.standard_normal(8)
    c = np.array([[0.25, 3.6, 6.9]])
    g = tg.jacobian(lambda c: nd.map_coordinates(x, c, order=1))(c)
    slopes = np.diff(x)[np.floor(c[0]).astype(int)]
    np.testing.assert_allclose(np.diagonal(g[:, 0, :]), slopes, rtol=1e-14)


def test_spline_filters_equal_dense_transpose():
    for mode in MODES:
        assert_adjoint(lambda x: nd.spline_filter1d(x, 3, axis=0, mode=mode), X)
        assert_adjoint(lambda x: nd.spline_filter(x, order=5, mode=mode), X)
    assert_adjoint(lambda x: nd.spline_filter1d(x, 1), X)  # orders 0 and 1: a copy


def test_interpolation_float32_complex_and_hessian():
    x32 = X.astype(np.float32)
    f = lambda x: nd.zoom(x, 1.5, order=3)  # noqa: E731
    out = tg.vjp(f, x32)[0]
    assert out.dtype == np.float32 and np.array_equal(out, f(x32))
    assert tg.grad(lambda x: np.sum(f(x)))(x32).dtype == np.float32
    xc = X + 1j * rng.standard_normal(X.shape)
    g = lambda x: nd.map_coordinates(x, COORDS, order=3, mode="mirror")  # noqa: E731
    assert np.array_equal(tg.vjp(g, xc)[0], g(xc))
    check_grads(g, (xc,))

    # a registration-style loss: the Hessian in the shift, against finite differences of the gradient
    def loss(s):
        return np.sum((nd.shift(X, s, order=3, mode="mirror") - X[::-1]) ** 2)

    s = np.array([0.37, -0.41])
    h = tg.hessian(loss)(s)
    eps = 1e-6
    fd = np.stack([(tg.grad(loss)(s + eps * e) - tg.grad(loss)(s - eps * e)) / (2 * eps) for e in np.eye(2)], 1)
    np.testing.assert_allclose(h, fd, rtol=1e-6, atol=1e-8)


def test_interpolation_errors():
    with pytest.raises(RuntimeError, match="spline order not supported"):
        tg.grad(lambda x: np.sum(nd.map_coordinates(x, COORDS, order=6)))(X)
    with pytest.raises(RuntimeError, match="invalid shape for coordinate array"):
        tg.grad(lambda x: np.sum(nd.map_coordinates(x, COORDS[:1])))(X)
    with pytest.raises(NonDifferentiableArgumentError, match="'order'"):
        tg.grad(lambda o: np.sum(nd.zoom(X, 2, order=o)))(np.array(1.0))
    # geometric_transform calls back into Python from compiled code: refused clearly
    with pytest.raises(GradientDroppedError, match="scipy.ndimage.geometric_transform"):
        tg.grad(lambda x: np.sum(nd.geometric_transform(x, lambda p: (p[0] * 0.5, p[1]))))(X)


# ------------------------------------------------------------------ selection filters
import scipy.signal  # noqa: E402

FOOTPRINT = np.array([[1, 0, 1], [0, 1, 1]], bool)


def selections(mode):
    return {
        "minimum_filter": lambda x: nd.minimum_filter(x, 3, mode=mode, cval=0.1),
        "maximum_filter-footprint": lambda x: nd.maximum_filter(x, footprint=FOOTPRINT, mode=mode, origin=(0, 1)),
        "maximum_filter1d": lambda x: nd.maximum_filter1d(x, 4, axis=0, mode=mode, origin=1),
        "minimum_filter1d": lambda x: nd.minimum_filter1d(x, 2, mode=mode),
        "median_filter": lambda x: nd.median_filter(x, 3, mode=mode),
        "median_filter-1d": lambda x: nd.median_filter(x[0], 3, mode=mode),
        "rank_filter": lambda x: nd.rank_filter(x, 2, footprint=FOOTPRINT, mode=mode),
        "percentile_filter": lambda x: nd.percentile_filter(x, 70, size=(2, 3), mode=mode),
        "grey_erosion": lambda x: nd.grey_erosion(x, structure=W2.T, mode=mode),
        "grey_dilation": lambda x: nd.grey_dilation(x, size=(2, 2), mode=mode),
        "medfilt": lambda x: scipy.signal.medfilt(x, 3),
    }


@pytest.mark.parametrize("mode", ["reflect", "constant", "nearest", "mirror", "wrap"])
def test_selection_filters_pick_the_selected_sample(mode):
    for name, fun in selections(mode).items():
        out, vjp_fun = tg.vjp(fun, X)
        assert np.array_equal(out, fun(X)) and out.dtype == fun(X).dtype
        # without ties each output's derivative is one input sample (or none: cval) with weight 1
        rows = vjp_fun(np.eye(out.size).reshape((out.size,) + out.shape))[0].reshape(out.size, -1)
        assert set(np.unique(rows)) <= {0.0, 1.0} and np.all(rows.sum(axis=1) <= 1)
        picked = rows.argmax(axis=1)
        has = rows.sum(axis=1) == 1
        if name != "grey_erosion":  # (its structure is subtracted from the picked sample)
            np.testing.assert_array_equal(X.ravel()[picked[has]], out.ravel()[has])
        check_grads(fun, (X,))


def test_selection_ties_are_split_equally_and_cval_is_selectable():
    flat = np.ones(5)
    j = tg.jacobian(lambda x: nd.maximum_filter1d(x, 3, mode="nearest"))(flat)
    np.testing.assert_allclose(j.sum(axis=1), 1.0)
    np.testing.assert_allclose(j[2], [0, 1 / 3, 1 / 3, 1 / 3, 0])
    # constant mode: the border minimum is cval itself
    g = tg.grad(lambda c: np.sum(nd.minimum_filter1d(np.arange(4.0), 3, mode="constant", cval=c)))(np.array(-1.0))
    assert g == 2.0  # the first and last outputs read cval


# ------------------------------------------------------------------ Fourier-domain filters
FOURIER = {
    "fourier_gaussian": lambda x: nd.fourier_gaussian(x, 1.2),
    "fourier_uniform": lambda x: nd.fourier_uniform(x, (2, 3)),
    "fourier_ellipsoid": lambda x: nd.fourier_ellipsoid(x, 2.0),
    "fourier_shift": lambda x: nd.fourier_shift(x, (0.3, -1.2)),
    "fourier_gaussian-rfft": lambda x: nd.fourier_gaussian(x, 1.2, n=5, axis=0),
}


@pytest.mark.parametrize("name", sorted(FOURIER))
def test_fourier_filters(name):
    f = FOURIER[name]
    spectrum = np.fft.rfft(X, axis=0) if name.endswith("rfft") else np.fft.fft2(X)
    out = tg.vjp(f, spectrum)[0]
    assert np.array_equal(out, f(spectrum)) and out.dtype == f(spectrum).dtype
    check_grads(f, (spectrum,))
    if name != "fourier_shift":  # real factors: on a real input, a real linear map
        assert_adjoint(f, X)
    # the derivative of a spectral filter is the filter itself: d out / d x[k] = factor[k]
    factors = f(np.ones_like(spectrum))
    jac = tg.jacobian(lambda x: np.real(f(x)))(spectrum.real)
    np.testing.assert_allclose(np.einsum("ijij->ij", jac), np.real(factors), rtol=1e-14)


@pytest.mark.parametrize("order", range(4))
def test_gaussian_filters_in_sigma_first_and_second_order(order):
    f = lambda x, s: nd.gaussian_filter1d(x, s, order=order, mode="wrap")  # noqa: E731
    assert np.array_equal(tg.vjp(f, X, np.array(1.3))[0], f(X, 1.3))
    check_grads(f, (X, np.array(1.3)))
    check_grads(lambda x, s: gaussian_filter(x, s, order=(order, 0)), (X, np.array([1.1, 0.7])))
    check_grads(lambda s: nd.gaussian_laplace(X, s), (np.array(0.9),))
    check_grads(lambda s: nd.gaussian_gradient_magnitude(X, s, mode="nearest"), (np.array(1.4),))


def test_gaussian_sigma_closed_form():
    # d/dsigma of the normalised kernel's weight at the centre, for a unit impulse (wide line, no border)
    x = np.zeros(41)
    x[20] = 1.0
    s = 2.0
    k = np.arange(-8, 9)
    g = np.exp(-0.5 * k**2 / s**2)
    z = g.sum()
    dz = np.sum(g * k**2 / s**3)
    expected = (1.0 * 0 - g[8] * dz / z) / z  # k = 0: d g_0 / ds = 0
    got = tg.grad(lambda s: nd.gaussian_filter1d(x, s, truncate=4.0)[20])(np.array(s))
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_a_prefilter_line_longer_than_the_limit_is_refused(monkeypatch):
    from tapegrad.rules import scipy_ndimage

    monkeypatch.setattr(scipy_ndimage, "MAX_SPLINE_LINE", 5)
    with pytest.raises(NonDifferentiableArgumentError, match="at most 5 samples"):
        tg.grad(lambda x: np.sum(nd.zoom(x, 2.0, order=3)))(X)
    # order 1 needs no prefilter
    assert tg.grad(lambda x: np.sum(nd.zoom(x, 2.0, order=1)))(X).shape == X.shape


def test_center_of_mass_and_measurements():
    x = X + 3.0
    labels = (np.arange(X.size).reshape(X.shape) % 3).astype(int)
    for f in (
        lambda x: np.stack(nd.center_of_mass(x)),
        lambda x: np.array(nd.center_of_mass(x, labels, [1, 2])),
        lambda x: np.stack(nd.center_of_mass(x, labels, 2)),
        lambda x: nd.variance(x, labels, [0, 2]),
        lambda x: nd.sum_labels(x, labels, [1, 2]),
    ):
        assert np.array_equal(tg.vjp(f, x)[0], f(x))
        check_grads(f, (x,))
    # closed form: d/dx[i, j] of the row centre = (i - centre) / total
    row = tg.grad(lambda x: nd.center_of_mass(x)[0])(x)
    rows = np.arange(X.shape[0])[:, None] * np.ones(X.shape)
    np.testing.assert_allclose(row, (rows - nd.center_of_mass(x)[0]) / x.sum(), rtol=1e-12)
