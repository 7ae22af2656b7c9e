"""``scipy.interpolate.RBFInterpolator`` over tracers (rules/scipy_rbf.py): data, centres, points, smoothing."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import NonDifferentiableArgumentError
from tapegrad.testing import check_grads

interpolate = pytest.importorskip("scipy.interpolate")

rng = np.random.default_rng(35)
Y = rng.uniform(0, 1, (8, 2))
D = np.sin(Y[:, 0]) + Y[:, 1] ** 2
X = rng.uniform(0, 1, (3, 2))
KERNELS = [("thin_plate_spline", {}), ("cubic", {}), ("gaussian", {"epsilon": 2.0}),
           ("multiquadric", {"epsilon": 1.5}), ("linear", {"degree": 0}), ("quintic", {})]


@pytest.mark.parametrize("kernel,options", KERNELS, ids=[k for k, _ in KERNELS])
def test_every_argument_first_and_second_order(kernel, options):
    rbf = lambda y, d, s=0.0: interpolate.RBFInterpolator(y, d, kernel=kernel, smoothing=s, **options)  # noqa: E731
    cases = [
        (lambda d: rbf(Y, d)(X), D),
        (lambda x: rbf(Y, D)(x), X),
        (lambda y: rbf(y, D)(X), Y),
        (lambda s: rbf(Y, D, s[0])(X), np.array([0.1])),
    ]
    for f, a in cases:
        check_grads(f, (a,), order=2)
        seen = {}

        def g(a):
            seen["value"] = f(a)
            return seen["value"]

        tg.jacobian(g)(a)
        assert np.array_equal(tg.stop_gradient(seen["value"]), f(a))  # SciPy's numbers


def test_vector_data_and_the_interpolation_property():
    d2 = np.stack([D, D**2], axis=1)
    check_grads(lambda d: interpolate.RBFInterpolator(Y, d)(X), (d2,), order=2)
    # With no smoothing the interpolant reproduces the data: d f(y_k) / d d = I.
    jac = tg.jacobian(lambda d: interpolate.RBFInterpolator(Y, d)(Y))(D)
    np.testing.assert_allclose(jac, np.eye(8), atol=1e-9)


def test_neighbors_is_refused_clearly():
    with pytest.raises(NonDifferentiableArgumentError, match="neighbors"):
        tg.grad(lambda d: np.sum(interpolate.RBFInterpolator(Y, d, neighbors=4)(X)))(D)
