"""SciPy end to end: tapegrad derivatives feed scipy.optimize unchanged."""

import numpy as np
import pytest
from scipy.optimize import least_squares, minimize, rosen, rosen_der, rosen_hess, rosen_hess_prod

import tapegrad as tg
from tapegrad.examples import logistic_log_likelihood

rng = np.random.default_rng(3)


def rosenbrock(x):
    """The n-dimensional Rosenbrock function in plain NumPy."""
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


@pytest.fixture(scope="module")
def x1000():
    return rng.uniform(-1.5, 1.5, 1000)


def test_rosenbrock_gradient_hessian_hvp_closed_forms(x1000):
    x = x1000
    assert np.isclose(rosenbrock(x), rosen(x), rtol=1e-13)
    np.testing.assert_allclose(tg.grad(rosenbrock)(x), rosen_der(x), rtol=1e-12, atol=1e-9)
    H = tg.hessian(rosenbrock)(x)
    assert H.shape == (1000, 1000)
    np.testing.assert_allclose(H, rosen_hess(x), rtol=1e-12, atol=1e-9)
    p = rng.standard_normal(1000)
    np.testing.assert_allclose(tg.hvp(rosenbrock)(x, p), rosen_hess_prod(x, p), rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize(
    "method,derivs",
    [
        ("BFGS", {}),
        ("Newton-CG", {"hessp": True}),
        ("trust-ncg", {"hessp": True}),
        ("trust-exact", {"hess": True}),
    ],
)
def test_minimize_rosenbrock_converges(method, derivs):
    # Start in the basin of the global minimum (n >= 4 also has a local one near x0 = -1).
    x0 = np.tile([1.3, 0.7, 0.8, 1.9, 1.2], 2)
    kwargs = {"jac": tg.grad(rosenbrock)}
    if derivs.get("hessp"):
        kwargs["hessp"] = tg.hvp(rosenbrock)
    if derivs.get("hess"):
        kwargs["hess"] = tg.hessian(rosenbrock)
    res = minimize(rosenbrock, x0, method=method, tol=1e-10, options={"maxiter": 2000}, **kwargs)
    assert res.success, res.message
    np.testing.assert_allclose(res.x, np.ones(10), atol=1e-6)
    np.testing.assert_allclose(rosen_der(res.x), np.zeros(10), atol=1e-4)


def _logistic_data(n=200, d=4):
    X = np.column_stack([np.ones(n), rng.standard_normal((n, d - 1))])
    beta_true = np.array([0.5, -1.0, 2.0, 0.3])[:d]
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-X @ beta_true))).astype(float)
    return X, y


def test_logistic_regression_closed_forms_and_fit():
    X, y = _logistic_data()
    beta = rng.standard_normal(4) * 0.3
    p = 1 / (1 + np.exp(-X @ beta))
    np.testing.assert_allclose(tg.grad(logistic_log_likelihood)(beta, X, y), X.T @ (y - p), rtol=1e-12)
    H = tg.hessian(logistic_log_likelihood)(beta, X, y)
    np.testing.assert_allclose(H, -(X.T * (p * (1 - p))) @ X, rtol=1e-12)

    def nll(b, X, y):
        return -logistic_log_likelihood(b, X, y)

    res = minimize(nll, np.zeros(4), args=(X, y), method="Newton-CG", jac=tg.grad(nll), hessp=tg.hvp(nll))
    assert res.success, res.message
    # The maximum likelihood estimate solves the score equations X^T (y - p) = 0.
    p_hat = 1 / (1 + np.exp(-X @ res.x))
    np.testing.assert_allclose(X.T @ (y - p_hat), np.zeros(4), atol=1e-6)
    def closed_form_grad(b, X, y):
        return -X.T @ (y - 1 / (1 + np.exp(-X @ b)))

    ref = minimize(nll, np.zeros(4), args=(X, y), method="BFGS", jac=closed_form_grad)
    np.testing.assert_allclose(res.x, ref.x, atol=1e-4)


def test_least_squares_with_jacobian():
    t = np.linspace(0.0, 4.0, 40)
    true = np.array([2.5, 1.3, 0.4])
    data = true[0] * np.exp(-true[1] * t) + true[2]

    def residuals(theta):
        return theta[0] * np.exp(-theta[1] * t) + theta[2] - data

    theta = np.array([1.0, 0.5, 0.0])
    e = np.exp(-theta[1] * t)
    expected = np.column_stack([e, -theta[0] * t * e, np.ones_like(t)])
    np.testing.assert_allclose(tg.jacobian(residuals)(theta), expected, rtol=1e-12)
    np.testing.assert_allclose(tg.jacfwd(residuals)(theta), expected, rtol=1e-12)
    res = least_squares(residuals, theta, jac=tg.jacobian(residuals))
    assert res.success
    np.testing.assert_allclose(res.x, true, rtol=1e-7)
    res_fwd = least_squares(residuals, theta, jac=tg.jacfwd(residuals))
    np.testing.assert_allclose(res_fwd.x, true, rtol=1e-7)
