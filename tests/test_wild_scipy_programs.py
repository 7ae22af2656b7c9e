"""Third-party-style SciPy programs, differentiated unchanged.

Each program below is written the way scientists write SciPy code (``import numpy
as np``, ``from scipy import ...``, no tapegrad inside).  For each one, at a
smooth point, we check:

1. ``grad`` (scalar output) or ``jacobian`` (vector output) against central
   finite differences in float64 (adaptive solvers run at tight tolerances, so
   that the differences are meaningful);
2. ``hessian`` against central finite differences of tapegrad's own gradient
   (scalar programs);
3. ``jacobian`` against stacked single VJPs (vector programs);
4. that the value tapegrad returns (``value_and_grad`` / ``vjp``) is plain
   SciPy's value;
5. that the inputs are not mutated.

Two tables: ``PROGRAMS`` (everything above holds) and ``REFUSALS`` (clear tapegrad
errors naming the function, ``xfail(strict=True, raises=<the tapegrad error>)``).  The
twelve bugs the programs found when they were written (wrong numbers, unclear crashes)
are fixed; their programs are in one table or the other, with a comment.

Where SciPy's own stopping rule blurs finite differences (optimizers, kinked ODE
right-hand sides, whose SciPy values are less accurate than the tolerance) the
truth is an independent plain-NumPy reference (a closed form or a Newton-polished
solution), differenced instead of the program.
"""

import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

import tapegrad as tg

scipy = pytest.importorskip("scipy")

from scipy import integrate, interpolate, linalg, ndimage, optimize, signal, sparse, special, stats  # noqa: E402
from scipy.integrate import cumulative_trapezoid, odeint, quad, simpson, solve_ivp, trapezoid  # noqa: E402
from scipy.interpolate import CubicSpline, RegularGridInterpolator, interp1d, make_interp_spline  # noqa: E402
from scipy.linalg import cho_factor, cho_solve, expm, lu_factor, lu_solve, solve_triangular  # noqa: E402
from scipy.optimize import brentq, fsolve, minimize  # noqa: E402
from scipy.sparse.linalg import spsolve  # noqa: E402
from scipy.spatial.distance import cdist, pdist, squareform  # noqa: E402
from scipy.special import betaln, digamma, erf, erfc, erfinv, expit, gammaln, logsumexp, xlogy  # noqa: E402
from scipy.stats import multivariate_normal, norm  # noqa: E402

# ---------------------------------------------------------------------------
# fixed data
# ---------------------------------------------------------------------------

_rng = np.random.default_rng(7031)
COUNTS = _rng.poisson(3.0, 15).astype(float)
X_DESIGN = np.column_stack([np.ones(15), _rng.standard_normal((15, 2))])
Y_BINARY = (_rng.random(15) > 0.5).astype(float)
Y_CLASS = _rng.integers(0, 3, 15)
GAMMA_DATA = _rng.gamma(2.5, 1.5, 40)
NORMAL_DATA = _rng.normal(1.0, 2.0, 30)
BETA_DATA = _rng.beta(2.0, 3.0, 25)
MIX_DATA = np.concatenate([_rng.normal(-1.0, 0.5, 10), _rng.normal(2.0, 0.8, 10)])
MVN_DATA = _rng.standard_normal((12, 3))
ANGLES = _rng.vonmises(0.5, 2.0, 20)
POINTS_A = _rng.standard_normal((5, 2))
T_SIGNAL = np.linspace(0.0, 2.0, 21)
SIGNAL = np.sin(3 * T_SIGNAL) + 0.1 * _rng.standard_normal(21)
IMAGE = _rng.random((8, 8))
W_MAT = _rng.standard_normal((3, 3))
SPD3 = (lambda A: A @ A.T + 3 * np.eye(3))(_rng.standard_normal((3, 3)))
RHS3 = _rng.standard_normal(3)
GRID_X = np.linspace(0.0, 1.0, 6)
GRID_Y = np.linspace(0.0, 2.0, 5)
KNOTS = np.linspace(0.0, 2.0 * np.pi, 8)
T_FINE = np.linspace(0.1, 6.0, 17)
SPARSE_LAP = sparse.diags([-np.ones(5), 2.5 * np.ones(6), -np.ones(5)], [-1, 0, 1], format="csr")


def _point(seed, shape, scale=1.0, shift=0.0):
    return shift + scale * np.random.default_rng(seed).standard_normal(shape)


# ===========================================================================
# scipy.special
# ===========================================================================


def negbin_nll(theta):
    """Negative binomial regression-free NLL with gammaln, log r and logit p."""
    log_r, logit_p = theta
    r = np.exp(log_r)
    p = expit(logit_p)
    y = COUNTS
    ll = gammaln(y + r) - gammaln(r) - gammaln(y + 1) + r * np.log(1 - p) + xlogy(y, p)
    return -np.sum(ll)


def beta_binomial_loglik(theta):
    a, b = np.exp(theta)
    n = 10.0
    k = np.minimum(COUNTS, n)
    return np.sum(gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1) + betaln(k + a, n - k + b) - betaln(a, b))


def probit_erf_model(w):
    z = X_DESIGN @ w
    p = 0.5 * erfc(-z / np.sqrt(2.0))
    extra = np.sum(erfinv(np.tanh(z) * 0.9)) + np.sum(erf(z / 3.0))
    return -np.sum(xlogy(Y_BINARY, p) + xlogy(1 - Y_BINARY, 1 - p)) + 0.1 * extra


def gaussian_mixture_nll(theta):
    """Two-component 1-D mixture, logsumexp over components."""
    mu = theta[:2]
    log_sigma = theta[2:4]
    logit_w = theta[4]
    log_w = np.array([np.log(expit(logit_w)), np.log(expit(-logit_w))])
    sigma = np.exp(log_sigma)
    comp = log_w - 0.5 * np.log(2 * np.pi) - log_sigma - 0.5 * ((MIX_DATA[:, None] - mu) / sigma) ** 2
    return -np.sum(logsumexp(comp, axis=1))


def logsumexp_weighted(x):
    b = np.array([0.5, 1.0, 2.0, 0.25])
    val, sgn = logsumexp(x, b=b, return_sign=True)
    return val * sgn + special.log_softmax(x)[1]


def softmax_regression_nll(wflat):
    W = wflat.reshape(3, 3)
    logits = X_DESIGN @ W
    logp = special.log_softmax(logits, axis=1)
    probs = special.softmax(logits, axis=1)
    return -np.sum(logp[np.arange(15), Y_CLASS]) + 0.01 * np.sum(probs**2)


def logistic_logit_roundtrip(w):
    p = expit(X_DESIGN @ w)
    z = special.logit(0.05 + 0.9 * p)
    return np.sum(z**2) - np.sum(xlogy(Y_BINARY, p))


def von_mises_nll(theta):
    mu, log_kappa = theta
    kappa = np.exp(log_kappa)
    return -np.sum(kappa * np.cos(ANGLES - mu)) + ANGLES.size * (np.log(2 * np.pi) + np.log(special.iv(0, kappa)))


def matern_kernel_sum(r):
    nu = 1.5
    ell = 0.7
    s = np.sqrt(2 * nu) * r / ell
    k = 2 ** (1 - nu) / special.gamma(nu) * s**nu * special.kv(nu, s)
    return np.sum(k) + np.sum(special.jv(1.0, r) * special.ive(1.0, r))


def pendulum_period(theta0):
    m = np.sin(theta0 / 2.0) ** 2
    return np.sum(4.0 * np.sqrt(1.0 / 9.81) * special.ellipk(m))


def hurwitz_trigamma(q):
    return np.sum(special.zeta(3.0, q)) + np.sum(special.polygamma(1, q)) + np.sum(digamma(q) * q)


def gammainc_in_x(x):
    return np.sum(special.gammainc(2.5, x) * special.gammaincc(1.5, x))


def gammainc_in_a(a):
    return np.sum(special.gammainc(a, 2.0))


def dirichlet_expected_log(alpha):
    return np.sum(digamma(alpha) - digamma(np.sum(alpha))) + np.sum(gammaln(alpha)) - gammaln(np.sum(alpha))


# ===========================================================================
# scipy.stats
# ===========================================================================


def normal_nll_loc_scale(theta):
    mu, log_sigma = theta
    return -np.sum(norm.logpdf(NORMAL_DATA, loc=mu, scale=np.exp(log_sigma)))


def normal_logpdf_in_data(x):
    return np.sum(stats.norm.logpdf(x, 0.3, 1.7)) + np.sum(stats.norm.cdf(x, loc=0.1, scale=2.0))


def student_t_regression(theta):
    w = theta[:3]
    log_df = theta[3]
    resid = COUNTS / 3.0 - X_DESIGN @ w
    return -np.sum(stats.t.logpdf(resid, df=np.exp(log_df), scale=0.8))


def gamma_mle_nll(params):
    a, s = params
    return -np.sum(stats.gamma.logpdf(GAMMA_DATA, a, scale=s))


def beta_nll(theta):
    a, b = np.exp(theta)
    return -np.sum(stats.beta.logpdf(BETA_DATA, a, b))


def poisson_glm_nll(w):
    mu = np.exp(X_DESIGN @ w)
    return -np.sum(stats.poisson.logpmf(COUNTS, mu))


def normal_ppf_quantiles(theta):
    q, mu, sigma = theta
    qs = np.array([0.1, 0.5, 0.9]) * q
    return stats.norm.ppf(qs, loc=mu, scale=sigma) + stats.norm.logcdf(qs, mu, sigma)


def frozen_normal(theta):
    d = stats.norm(theta[0], np.exp(theta[1]))
    return np.sum(d.logpdf(NORMAL_DATA)) + d.sf(1.5) + d.ppf(0.3)


def mvn_logpdf_mean_cov(theta):
    mean = theta[:3]
    L = np.array([[1.0, 0.0, 0.0], [theta[3], 1.0, 0.0], [theta[4], theta[5], 1.0]])
    L = L * np.array([1.0, 1.2, 0.9])[:, None]
    cov = L @ L.T + 0.5 * np.eye(3)
    return np.sum(multivariate_normal.logpdf(MVN_DATA, mean=mean, cov=cov))


def kl_entropy(theta):
    p = special.softmax(theta[:4])
    q = special.softmax(theta[4:])
    return stats.entropy(p, q) + stats.entropy(p)


def gamma_cdf_shape(theta):
    return np.sum(stats.gamma.cdf(GAMMA_DATA[:5], theta[0], scale=theta[1]))


def hand_written_weibull_mle(theta):
    k, lam = np.exp(theta)
    x = GAMMA_DATA
    ll = np.log(k / lam) + (k - 1) * np.log(x / lam) - (x / lam) ** k
    return -np.sum(ll) + np.sum(stats.weibull_min.logpdf(x, k, scale=lam))


# ===========================================================================
# scipy.linalg
# ===========================================================================


def expm_weighted(a):
    A = a.reshape(3, 3)
    return np.sum(expm(0.5 * A) * W_MAT)


def logm_sqrtm_spd(a):
    A = a.reshape(3, 3)
    S = A @ A.T + 2 * np.eye(3)
    return np.trace(linalg.logm(S)) + np.sum(linalg.sqrtm(S) * W_MAT)


def gp_marginal_likelihood(theta):
    log_ell, log_sf, log_sn = theta
    x = np.linspace(0.0, 3.0, 8)
    y = np.sin(2 * x)
    d2 = (x[:, None] - x[None, :]) ** 2
    K = np.exp(2 * log_sf) * np.exp(-0.5 * d2 / np.exp(2 * log_ell)) + np.exp(2 * log_sn) * np.eye(8)
    c, low = cho_factor(K, lower=True)
    alpha = cho_solve((c, low), y)
    return 0.5 * y @ alpha + np.sum(np.log(np.diag(c))) + 4 * np.log(2 * np.pi)


def lu_solve_program(a):
    A = a.reshape(3, 3) + 4 * np.eye(3)
    lu, piv = lu_factor(A)
    x = lu_solve((lu, piv), RHS3)
    xt = lu_solve((lu, piv), RHS3, trans=1)
    return np.concatenate([x, xt])


def triangular_program(p):
    L = np.tril(p.reshape(3, 3)) + 3 * np.eye(3)
    y = solve_triangular(L, RHS3, lower=True)
    z = solve_triangular(L.T, y, lower=False)
    return np.sum(z**2) + np.sum(solve_triangular(L, np.eye(3), lower=True, trans="T") * W_MAT)


def eigh_program(a):
    A = a.reshape(3, 3)
    S = A + A.T
    w, V = linalg.eigh(S)
    P = np.outer(V[:, 0], V[:, 0])
    return w[0] + 0.5 * w[-1] + np.sum(P * W_MAT)


def svd_program(a):
    A = a.reshape(3, 4)
    U, s, Vh = linalg.svd(A, full_matrices=False)
    return np.sum(s) + np.sum((U @ Vh) * np.ones((3, 4))) + np.sum(linalg.svdvals(A) ** 3)


def schur_program(a):
    A = a.reshape(3, 3) + np.diag([1.0, 2.5, 4.0])
    T, Z = linalg.schur(A)
    return np.sum(np.diag(T) ** 2) + np.sum((Z @ T @ Z.T) * W_MAT)


def sylvester_lyapunov(p):
    A = -2.0 * np.eye(3) + 0.3 * p[:9].reshape(3, 3)
    B = np.array([[-1.0, 0.2], [0.0, -1.5]]) + 0.1 * p[9:13].reshape(2, 2)
    C = np.ones((3, 2))
    X = linalg.solve_sylvester(A, B, C)
    Q = np.eye(3)
    P = linalg.solve_continuous_lyapunov(A, -Q)
    return np.sum(X**2) + np.trace(P)


def inv_det_program(a):
    A = a.reshape(3, 3) + 3 * np.eye(3)
    return np.log(np.abs(linalg.det(A))) + np.sum(linalg.inv(A) * W_MAT) + np.sum(linalg.solve(A, RHS3))


def expm_frechet_program(p):
    A = 0.4 * p[:4].reshape(2, 2)
    E = p[4:].reshape(2, 2)
    expA, L = linalg.expm_frechet(A, E)
    return np.sum(L * np.array([[1.0, 2.0], [-1.0, 0.5]])) + np.sum(expA)


def structured_matrices(p):
    T = linalg.toeplitz(p[:3], np.concatenate([p[:1], p[3:5]]))
    C = linalg.circulant(p[5:8])
    B = linalg.block_diag(T, C[:2, :2])
    return np.sum(B @ B.T * 0.1) + np.linalg.det(T + 4 * np.eye(3)) + np.sum(linalg.expm(0.1 * C))


def _hermitian(p):
    """3x3 Hermitian matrix from 9 real numbers."""
    diag = p[:3]
    re = p[3:6]
    im = p[6:9]
    H = np.diag(diag + 0j)
    upper = np.array([[0, 1], [0, 2], [1, 2]])
    E = np.zeros((3, 3))
    H = H + 0j
    for k, (i, j) in enumerate(upper):
        E = np.zeros((3, 3))
        E[i, j] = 1.0
        H = H + (re[k] + 1j * im[k]) * E + (re[k] - 1j * im[k]) * E.T
    return H


def quantum_trace_expm(p):
    H = _hermitian(p)
    U = linalg.expm(1j * H)
    return np.real(np.trace(U))


def abs_det_expm_complex(p):
    A = p[:4].reshape(2, 2)
    B = p[4:].reshape(2, 2)
    return np.abs(linalg.det(linalg.expm(A + 1j * B)))  # = exp(trace(A))


def quantum_fidelity(theta):
    p = theta[:9]
    t = theta[9]
    H = _hermitian(p)
    psi0 = np.array([1.0, 0.0, 0.0]) + 0j
    target = np.array([0.0, 1.0, 1.0]) / np.sqrt(2.0)
    psi = linalg.expm(-1j * t * H) @ psi0
    return np.abs(np.vdot(target, psi)) ** 2


def complex_sqrtm_logm(p):
    M = (p[:4] + 1j * p[4:]).reshape(2, 2) + 3 * np.eye(2)
    return np.real(np.trace(linalg.sqrtm(M))) + np.imag(np.sum(linalg.logm(M)))


def complex_solve_inv(p):
    M = (p[:4] + 1j * p[4:]).reshape(2, 2) + 2 * np.eye(2)
    x = linalg.solve(M, np.array([1.0, 1j]))
    return np.sum(np.abs(x) ** 2) + np.real(np.trace(linalg.inv(M)))


def complex_eigh_energy(p):
    H = _hermitian(p)
    w, V = linalg.eigh(H)
    rho = np.outer(V[:, 0], np.conj(V[:, 0]))
    return w[0] + np.real(rho[1, 2] + rho[2, 1]) + np.real(rho[0, 0])


# ===========================================================================
# scipy.integrate
# ===========================================================================

_ODE_TOL = dict(rtol=1e-10, atol=1e-12)


def lotka_volterra(t, z, a, b, c, d):
    x, y = z
    return [a * x - b * x * y, -c * y + d * x * y]


def lotka_volterra_fit(theta):
    a, b, c, d = theta
    t_obs = np.linspace(0.0, 3.0, 7)
    sol = solve_ivp(lotka_volterra, (0.0, 3.0), [1.0, 0.5], t_eval=t_obs, args=(a, b, c, d), method="RK45", **_ODE_TOL)
    return np.sum((sol.y[0] - 1.0) ** 2 + 0.5 * sol.y[1] ** 2)


def stiff_radau(theta):
    k1, k2 = theta

    def rhs(t, y):
        return [-k1 * y[0] + 0.5 * y[1], k1 * y[0] - k2 * y[1]]

    sol = solve_ivp(rhs, (0.0, 2.0), [1.0, 0.0], method="Radau", t_eval=[0.5, 1.0, 2.0], **_ODE_TOL)
    return sol.y[1]


def stiff_bdf_decay(theta):
    k, y0 = theta

    def rhs(t, y):
        return np.array([-50.0 * k * (y[0] - np.cos(t)), -y[1] + y[0]])

    sol = solve_ivp(rhs, (0.0, 1.0), [y0, 0.0], method="BDF", **_ODE_TOL)
    return sol.y[1, -1] + sol.y[0, -1] ** 2


def odeint_pendulum(theta):
    b, c = theta

    def pend(y, t, b, c):
        return [y[1], -b * y[1] - c * np.sin(y[0])]

    t = np.linspace(0.0, 4.0, 9)
    sol = odeint(pend, [np.pi - 0.1, 0.0], t, args=(b, c), rtol=1e-11, atol=1e-12)
    return sol[:, 0]


def relu_rhs_ode(theta):
    w, p0 = theta

    def f(t, y):
        return [w + 0 * y[0], 0.7 * np.maximum(y[0] - 1.0, 0.0) + 0.1 * np.abs(y[0] - 1.5)]

    sol = solve_ivp(f, (0.0, 3.0), [p0, 0.0], **_ODE_TOL)
    return sol.y[1, -1]


def quad_params_limits(theta):
    k, a, b = theta
    val, _ = quad(lambda x: np.exp(-k * x**2) * np.cos(x), a, b, epsabs=1e-13, epsrel=1e-13)
    tail, _ = quad(lambda x, s: np.exp(-s * x), b, np.inf, args=(k,), epsabs=1e-13, epsrel=1e-13)
    return val + tail


def trapezoid_simpson(y):
    t = np.linspace(0.0, 1.0, y.size)
    ct = cumulative_trapezoid(y**2, t, initial=0.0)
    return trapezoid(np.sin(y), t) + simpson(y**3, x=t) + np.sum(ct * t)


# ===========================================================================
# scipy.optimize
# ===========================================================================


def argmin_quadratic_plus_quartic(b):
    A = np.array([[3.0, 0.5], [0.5, 2.0]])
    res = minimize(
        lambda x: 0.5 * x @ A @ x - b @ x + 0.1 * np.sum(x**4), np.zeros(2), method="BFGS", options=dict(gtol=1e-12)
    )
    return res.x


def min_value_envelope(b):
    res = minimize(
        lambda x: np.sum((x - b) ** 2) + np.sum(np.exp(0.3 * x)) + x[0] * x[1] * 0.2,
        np.zeros(2),
        method="L-BFGS-B",
        options=dict(gtol=1e-12, ftol=1e-15),
    )
    return res.fun


def brentq_kepler(theta):
    M, e = theta
    return brentq(lambda E: E - e * np.sin(E) - M, 0.0, 2 * np.pi, xtol=1e-15, rtol=1e-15)


def fsolve_system(p):
    def eqs(z):
        x, y = z
        return [x**2 + y**2 - p[0], x - y * p[1] + 0.1 * np.sin(x)]

    return fsolve(eqs, [1.0, 1.0], xtol=1e-14)


def least_squares_fit(y):
    t = np.linspace(0.0, 2.0, y.size)
    res = optimize.least_squares(
        lambda th: th[0] * np.exp(-th[1] * t) - y, [1.0, 1.0], xtol=1e-15, ftol=1e-15, gtol=1e-15
    )
    return res.x


# ===========================================================================
# scipy.interpolate
# ===========================================================================


def cubic_spline_data_and_query(theta):
    values = theta[:8]
    shift = theta[8]
    cs = CubicSpline(KNOTS, values)
    return np.sum(cs(T_FINE + shift) ** 2) + np.sum(cs(T_FINE, 1)) + cs.integrate(0.5, 4.0)


def interp1d_program(theta):
    y = theta[:6]
    q = theta[6]
    f_lin = interp1d(GRID_X, y)
    f_cub = interp1d(GRID_X, y, kind="cubic")
    return np.sum(f_lin(np.array([0.13, 0.47, 0.91])) ** 2) + f_cub(q) ** 2


def make_interp_spline_program(theta):
    y = theta[:6]
    spl = make_interp_spline(GRID_X, y, k=3)
    q = 0.2 + 0.5 * np.tanh(theta[6])
    return np.sum(spl(np.linspace(0.05, 0.95, 7)) ** 2) + spl(q) + spl.derivative()(q) ** 2


def regular_grid_program(theta):
    values = theta[:30].reshape(6, 5)
    pts = np.array([[0.21, 0.33], [0.77, 1.41], [theta[30], theta[31]]])
    rgi = RegularGridInterpolator((GRID_X, GRID_Y), values)
    return np.sum(rgi(pts) ** 2)


def regular_grid_cubic_points(q):
    values = np.sin(GRID_X)[:, None] * np.cos(GRID_Y)[None, :]
    rgi = RegularGridInterpolator((GRID_X, GRID_Y), values, method="cubic", solver=spsolve)
    return rgi(q.reshape(-1, 2))


# ===========================================================================
# scipy.signal / spatial / ndimage / sparse
# ===========================================================================


def signal_pipeline(x):
    h = signal.windows.hann(5)
    y = signal.convolve(x, h / h.sum(), mode="same")
    z = signal.fftconvolve(y, np.array([1.0, -0.5, 0.25]), mode="full")
    b, a = signal.butter(2, 0.3)
    f = signal.lfilter(b, a, z)
    s = signal.savgol_filter(x, 7, 2)
    return np.sum(f**2) + np.sum(s * SIGNAL)


def lfilter_coefficients(theta):
    b = theta[:2]
    a = np.concatenate([[1.0], theta[2:]])
    return signal.lfilter(b, a, SIGNAL)[-5:]


def rbf_kernel_cdist(xy):
    X = xy.reshape(4, 2)
    D = cdist(X, POINTS_A, "sqeuclidean")
    K = np.exp(-0.5 * D)
    P = squareform(pdist(X, "euclidean"))
    return np.sum(K) + np.sum(P**2) + np.sum(cdist(X, POINTS_A, "cityblock") * 0.1)


def image_filters(u):
    img = u.reshape(8, 8)
    g = ndimage.gaussian_filter(img, 1.2, mode="reflect")
    c = ndimage.convolve(g, np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]]), mode="nearest")
    return np.sum(c**2) + np.sum(ndimage.uniform_filter(img, 3) * IMAGE)


def map_coordinates_program(theta):
    coords = np.array([[1.3, 2.7, 5.2 + theta[0]], [4.1, 0.6 + theta[1], 3.3]])
    img = IMAGE * (1 + theta[2])
    return np.sum(ndimage.map_coordinates(img, coords, order=3, mode="nearest") ** 2)


def sparse_products(x):
    A = sparse.csr_matrix(SPARSE_LAP)
    y = A @ x
    z = spsolve(sparse.csc_matrix(SPARSE_LAP), x**2)
    return np.concatenate([y[:3], z[2:5]])


# ===========================================================================
# xarray and pint
# ===========================================================================


def xarray_program(x):
    xr = pytest.importorskip("xarray")
    field = xr.DataArray(
        x.reshape(3, 4), dims=("station", "time"), coords={"station": ["a", "b", "c"], "time": [0.0, 1.0, 2.0, 3.0]}
    )
    weights = xr.DataArray([1.0, 2.0, 0.5], dims="station")
    anomaly = field - field.mean(dim="time")
    energy = (anomaly**2 * weights).sum(dim="station")
    return energy.sel(time=[1.0, 3.0]).sum() + np.exp(field.sel(station="b")).mean()


def pint_program(x):
    pint = pytest.importorskip("pint")
    ureg = _UREG(pint)
    Q_ = ureg.Quantity
    L = Q_(x, "cm")
    area = (L**2).to("m**2")
    speed = L.to("m") / Q_(2.0, "s")
    ke = 0.5 * Q_(3.0, "kg") * speed**2
    return np.sum(ke.to("J").magnitude) + np.sum(np.sqrt(area).magnitude) * 10.0


_UREG_CACHE = {}


def _UREG(pint):
    if "u" not in _UREG_CACHE:
        _UREG_CACHE["u"] = pint.UnitRegistry()
    return _UREG_CACHE["u"]


# ===========================================================================
# more programs
# ===========================================================================


def voigt_and_faddeeva(theta):
    sigma, gamma = np.exp(theta[:2])
    x = np.linspace(-2.0, 2.0, 7)
    z = (x + 1j * gamma) / (sigma * np.sqrt(2.0))
    w = special.wofz(z)
    profile = np.real(w) / (sigma * np.sqrt(2 * np.pi))
    return np.sum(profile * x**2) + np.sum(special.voigt_profile(x, sigma, gamma))


def special_grab_bag(x):
    return (
        np.sum(special.log_ndtr(x - 1.0))
        + np.sum(special.ndtri(expit(x)))
        + np.sum(special.xlog1py(x**2, x**2))
        + np.sum(special.entr(expit(x)))
        + np.sum(special.rel_entr(expit(x), 0.3))
        + np.sum(special.erfcx(x))
        + np.sum(special.exp1(x**2 + 0.5))
        + np.sum(special.i0e(x) + special.k1(np.abs(x) + 0.5))
        + np.sum(special.boxcox1p(x**2, 0.3))
    )


def spherical_bessel(x):
    return np.sum(special.spherical_jn(2, x**2 + 0.1))


def lambertw_program(x):
    w = special.lambertw(x**2 + 0.5)
    return np.sum(np.real(w) ** 2)


def betainc_program(x):
    return np.sum(special.betainc(2.0, 3.5, expit(x))) + np.sum(special.betaincinv(2.0, 3.5, 0.3 * expit(x)))


def discrete_stats_nll(theta):
    log_n, logit_p, log_mu = theta
    n, p, mu = np.exp(log_n), expit(logit_p), np.exp(log_mu)
    k = COUNTS
    return -(
        np.sum(stats.nbinom.logpmf(k, n, p))
        + np.sum(stats.binom.logpmf(np.minimum(k, 8), 8, p))
        + np.sum(stats.poisson.logcdf(k, mu))
    )


def student_t_cdf_df(theta):
    return np.sum(stats.t.cdf(NORMAL_DATA[:5], theta[0]))


def expon_lognorm_truncnorm(theta):
    a, b = theta
    x = GAMMA_DATA[:10]
    return (
        np.sum(stats.expon.logpdf(x, scale=a))
        + np.sum(stats.lognorm.logpdf(x, b, scale=a))
        + np.sum(stats.truncnorm.logpdf(np.clip(x, 0.1, 2.9), (0.0 - a) / b, (3.0 - a) / b, loc=a, scale=b))
        + np.sum(stats.norm.isf(0.2, loc=a, scale=b))
    )


def mvn_frozen_and_t(theta):
    mean = theta[:2]
    c = np.exp(theta[2])
    cov = np.array([[1.0, 0.3], [0.3, 1.0]]) * c
    d = stats.multivariate_normal(mean, cov)
    x = MVN_DATA[:, :2]
    return np.sum(d.logpdf(x)) + np.sum(stats.multivariate_t.logpdf(x, loc=mean, shape=cov, df=5.0)) + d.entropy()


def dirichlet_logpdf(alpha_log):
    alpha = np.exp(alpha_log)
    x = np.array([[0.2, 0.3, 0.5], [0.1, 0.6, 0.3], [0.4, 0.4, 0.2]]).T
    return np.sum(stats.dirichlet.logpdf(x, alpha)) + stats.dirichlet.entropy(alpha)


def gamma_nnlf_method(theta):
    return stats.gamma.nnlf((theta[0], 0.0, theta[1]), GAMMA_DATA)


def continuous_are_lqr(p):
    A = np.array([[0.0, 1.0], [-1.0 - 0.2 * p[0], -0.3]])
    B = np.array([[0.0], [1.0 + 0.1 * p[1]]])
    Q = np.diag([1.0, 0.5]) * np.exp(p[2])
    R = np.array([[0.2]])
    P = linalg.solve_continuous_are(A, B, Q, R)
    K = np.linalg.solve(R, B.T @ P)
    return np.trace(P) + np.sum(K**2)


def discrete_lyapunov_are(p):
    A = np.array([[0.5, 0.2], [-0.1, 0.7]]) + 0.1 * p[:4].reshape(2, 2)
    Q = np.eye(2)
    X = linalg.solve_discrete_lyapunov(A, Q)
    P = linalg.solve_discrete_are(A, np.array([[0.0], [1.0]]), Q, np.array([[1.0]]))
    return np.trace(X) + np.trace(P)


def matrix_functions(a):
    A = 0.3 * a.reshape(3, 3)
    return (
        np.sum(linalg.cosm(A) * W_MAT)
        + np.sum(linalg.sinm(A))
        + np.trace(linalg.tanhm(A))
        + np.sum(linalg.fractional_matrix_power(A @ A.T + np.eye(3), 0.3) * W_MAT)
    )


def general_eig_program(a):
    A = a.reshape(3, 3)
    w = linalg.eigvals(A)
    w2, V = linalg.eig(A)
    recon = V @ np.diag(w2) @ np.linalg.inv(V)
    return np.sum(np.abs(w) ** 2) + np.sum(np.real(recon) * W_MAT) + np.max(np.real(w))


def polar_procrustes_qr(a):
    A = a.reshape(3, 3) + 2 * np.eye(3)
    U, P = linalg.polar(A)
    R, _ = linalg.orthogonal_procrustes(A, W_MAT)
    Q, Rq = linalg.qr(A, mode="economic")
    return np.sum(U * W_MAT) + np.trace(P) + np.sum(R) + np.sum(np.abs(np.diag(Rq)))


def lstsq_pinv_program(a):
    A = a.reshape(5, 2)
    y = np.arange(5.0)
    coef, res, rank, sv = linalg.lstsq(A, y)
    return np.sum(coef**2) + np.sum(linalg.pinv(A) ** 2) + np.sum(res)


def banded_solves(p):
    ab = np.vstack([np.concatenate([[0.0], p[:4]]), 4.0 + p[4:9], np.concatenate([p[:4] * 0.5, [0.0]])])
    x = linalg.solve_banded((1, 1), ab, np.arange(1.0, 6.0))
    sym = np.vstack([np.concatenate([[0.0], 0.3 * p[:4]]), 3.0 + p[4:9] ** 2])
    y = linalg.solveh_banded(sym, np.ones(5))
    return np.sum(x**2) + np.sum(y)


def companion_roots(c):
    C = linalg.companion(np.concatenate([[1.0], c]))
    roots = linalg.eigvals(C)
    return np.sum(np.abs(roots) ** 2)


def stacked_expm_hermitian(p):
    H1 = _hermitian(p[:9])
    H2 = _hermitian(p[9:])
    U = linalg.expm(-1j * np.stack([H1, H2]) * 0.7)
    rho0 = np.diag([0.6, 0.3, 0.1]) + 0j
    rho = U @ rho0 @ np.conj(np.swapaxes(U, -1, -2))
    return np.real(np.sum(rho[:, 0, 0]) + np.sum(rho[:, 1, 2] * 1j))


def complex_det_logdet(p):
    M = (p[:9] + 1j * p[9:]).reshape(3, 3) + 3 * np.eye(3)
    sign, logdet = np.linalg.slogdet(M)
    return np.abs(linalg.det(M)) + np.real(logdet) + np.angle(sign)


def hermitian_from_triu(p):
    A = (p[:9] + 1j * p[9:]).reshape(3, 3)
    H = np.triu(A) + np.conj(np.triu(A, 1)).T
    H = H - 1j * np.diag(np.imag(np.diag(H)))
    return np.real(np.trace(linalg.expm(1j * H) @ linalg.expm(-0.5j * H.conj().T)))


def dense_output_and_event(theta):
    k, v0 = theta

    def rhs(t, y):
        return [y[1], -9.8 - k * y[1]]

    def ground(t, y):
        return y[0]

    ground.terminal = True
    ground.direction = -1
    sol = solve_ivp(rhs, (0.0, 10.0), [0.0, v0], events=ground, dense_output=True, **_ODE_TOL)
    t_land = sol.t_events[0][0]
    return t_land + sol.sol(0.3 * t_land)[0]


def schrodinger_complex_ode(theta):
    """Two-level system with complex state; population of level 1 at t = 2."""
    omega, delta = theta

    def rhs(t, psi):
        H = np.array([[delta, omega], [omega, -delta]])
        return -1j * (H @ psi)

    sol = solve_ivp(rhs, (0.0, 2.0), np.array([1.0 + 0j, 0.0 + 0j]), **_ODE_TOL)
    return np.abs(sol.y[1, -1]) ** 2


def ivp_traced_end_time(theta):
    k, T = theta
    sol = solve_ivp(lambda t, y: -k * y * (1 - y), (0.0, T), [0.3], method="LSODA", **_ODE_TOL)
    return sol.y[0, -1]


def vectorized_rhs(theta):
    a, b = theta

    def rhs(t, y):
        return (
            np.vstack([y[1], -a * y[0] - b * y[1] ** 3])
            if np.ndim(y) == 2
            else np.array([y[1], -a * y[0] - b * y[1] ** 3])
        )

    sol = solve_ivp(rhs, (0.0, 3.0), [1.0, 0.0], vectorized=True, method="Radau", t_eval=[1.0, 3.0], **_ODE_TOL)
    return sol.y.ravel()


def odeint_with_dfun(theta):
    k1, k2 = theta

    def f(y, t):
        return [-k1 * y[0], k1 * y[0] - k2 * y[1]]

    def jac(y, t):
        return [[-k1, 0.0], [k1, -k2]]

    sol = odeint(f, [1.0, 0.0], [0.0, 0.5, 2.0], Dfun=jac, rtol=1e-12, atol=1e-13)
    return sol[-1, 1] + sol[1, 0]


def dblquad_fixed_quad(theta):
    a, b = theta
    v, _ = integrate.dblquad(
        lambda y, x: np.exp(-a * (x**2 + y**2)), 0.0, b, 0.0, lambda x: x, epsabs=1e-13, epsrel=1e-13
    )
    g, _ = integrate.fixed_quad(lambda x: np.sin(a * x) * x, 0.0, b, n=8)
    qv, _ = integrate.quad_vec(lambda x: np.array([np.cos(a * x), x**b]), 0.0, 1.0, epsabs=1e-13, epsrel=1e-13)
    return v + g + np.sum(qv)


def solve_bvp_program(theta):
    lam = theta[0]

    def fun(x, y):
        return np.vstack([y[1], -lam * np.exp(0.2 * y[0])])

    def bc(ya, yb):
        return np.array([ya[0], yb[0] - theta[1]])

    x = np.linspace(0.0, 1.0, 11)
    y0 = np.zeros((2, x.size))
    sol = integrate.solve_bvp(fun, bc, x, y0, tol=1e-10)
    return sol.sol(0.5)[0] + sol.y[1, 0]


def constrained_minimize(p):
    cons = [{"type": "eq", "fun": lambda x: x[0] + x[1] - p[0]}, {"type": "ineq", "fun": lambda x: x[1] - 0.1}]
    res = minimize(
        lambda x: (x[0] - p[1]) ** 2 + 2 * (x[1] + 0.5) ** 2 + 0.1 * x[0] ** 4,
        np.array([0.5, 0.5]),
        method="SLSQP",
        constraints=cons,
        options=dict(ftol=1e-14, maxiter=200),
    )
    return res.x


def bounded_minimize(p):
    res = minimize(
        lambda x: np.sum((x - p) ** 2) + 0.3 * x[0] * x[1],
        np.zeros(2),
        method="L-BFGS-B",
        bounds=[(0.0, 1.0), (-1.0, 2.0)],
        options=dict(gtol=1e-12, ftol=1e-15),
    )
    return res.x


def root_and_root_scalar(p):
    sol = optimize.root(lambda z: [z[0] ** 3 + z[1] - p[0], z[1] ** 3 - z[0] + p[1]], [1.0, 0.0], tol=1e-14)
    r = optimize.root_scalar(
        lambda x: np.cos(x) - p[0] * x, bracket=[0.0, 2.0], method="brentq", xtol=1e-15, rtol=1e-15
    )
    return np.concatenate([sol.x, [r.root]])


def curve_fit_pcov(y):
    t = np.linspace(0.0, 2.0, y.size)
    popt, pcov = optimize.curve_fit(
        lambda t, a, k: a * np.exp(-k * t), t, y, p0=[1.0, 1.0], xtol=1e-15, ftol=1e-15, gtol=1e-15
    )
    return np.concatenate([popt, np.sqrt(np.diag(pcov))])


def minimize_scalar_value(p):
    res = optimize.minimize_scalar(lambda x: (x - p[0]) ** 2 + np.exp(p[1] * x), bracket=(-2.0, 2.0), tol=1e-12)
    return res.fun + res.x


def spline_zoo(theta):
    y = theta[:6]
    q = np.array([0.12, 0.5, 0.83]) + theta[6]
    pchip = interpolate.PchipInterpolator(GRID_X, y)
    akima = interpolate.Akima1DInterpolator(GRID_X, y)
    natural = CubicSpline(GRID_X, y, bc_type="natural")
    clamped = CubicSpline(GRID_X, y, bc_type=((1, theta[7]), (2, 0.0)))
    return np.sum(pchip(q) ** 2 + akima(q) + natural(q, 2) + clamped(q))


def periodic_spline(theta):
    x = np.linspace(0.0, 2 * np.pi, 7)
    y = np.concatenate([theta[:6], theta[:1]])
    cs = CubicSpline(x, y, bc_type="periodic")
    return np.sum(cs(np.linspace(0.1, 6.0, 9)) ** 2) + cs.integrate(0.0, 2 * np.pi)


def splrep_bspline(theta):
    tck = interpolate.splrep(GRID_X, GRID_X**2)
    t, c, k = tck
    c2 = c.copy() * 0 + c
    spl = interpolate.BSpline(t, c2 * (1 + theta[0]), k)
    return np.sum(interpolate.splev(np.array([0.2, 0.55]) + theta[1], tck) ** 2) + np.sum(spl(np.array([0.3, 0.7])))


def interp1d_traced_knots(x):
    xs = np.sort(np.concatenate([[0.0, 1.0], x]))
    f = interp1d(xs, np.sin(3 * np.array([0.0, 0.2, 0.5, 0.8, 1.0])))
    return np.sum(f(np.array([0.1, 0.4, 0.9])))


def cubic_spline_traced_knots(x):
    xs = np.concatenate([[0.0], x, [1.0]])
    cs = CubicSpline(xs, np.array([0.0, 1.0, 0.5, 2.0, 1.0]))
    return np.sum(cs(np.array([0.1, 0.4, 0.9])))


def interpn_rbf_griddata(theta):
    values = theta[:30].reshape(6, 5)
    v = interpolate.interpn((GRID_X, GRID_Y), values, np.array([[0.3, 0.4], [0.7, 1.2]]), method="linear")
    pts = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, 0.4]])
    g = interpolate.griddata(pts, theta[:5], np.array([[0.3, 0.3], [0.6, 0.8]]), method="linear")
    rbf = interpolate.RBFInterpolator(pts, theta[5:10], kernel="thin_plate_spline")
    return np.sum(v**2) + np.sum(g**2) + np.sum(rbf(np.array([[0.2, 0.7], [0.9, 0.1]])) ** 2)


def signal_filters_zoo(x):
    sos = signal.butter(4, 0.25, output="sos")
    b, a = signal.cheby1(3, 1.0, 0.3)
    y1 = signal.sosfiltfilt(sos, x)
    y2 = signal.filtfilt(b, a, x)
    zi = signal.lfilter_zi(b, a) * x[0]
    y3, _ = signal.lfilter(b, a, x, zi=zi)
    y4 = signal.detrend(x)
    y5 = signal.correlate(x, SIGNAL[:5], mode="valid")
    y6 = signal.upfirdn([1.0, 0.5, 0.25], x, up=2, down=3)
    return np.sum(y1**2) + np.sum(y2 * SIGNAL) + np.sum(y3**2) + np.sum(y4**3) + np.sum(y5) + np.sum(y6**2)


def welch_psd(x):
    f, P = signal.welch(x, fs=10.0, nperseg=8)
    f2, P2 = signal.periodogram(x, fs=10.0, window="hann")
    return np.sum(np.log(P + 1e-3)) + np.sum(P2 * f2)


def hilbert_envelope(x):
    analytic = signal.hilbert(x)
    return np.sum(np.abs(analytic) ** 2) + np.sum(np.unwrap(np.angle(analytic))[:3])


def freqz_response(b):
    w, h = signal.freqz(b, [1.0, -0.5], worN=16)
    return np.sum(np.abs(h) ** 2)


def mahalanobis_cdist(theta):
    X = theta[:8].reshape(4, 2)
    L = np.array([[np.exp(theta[8]), 0.0], [theta[9], 1.0]])
    VI = L @ L.T
    D = cdist(X, POINTS_A, "mahalanobis", VI=VI)
    return np.sum(D) + np.sum(pdist(X, "minkowski", p=3.0)) + np.sum(cdist(X, POINTS_A, "cosine"))


def rotation_program(rv):
    from scipy.spatial.transform import Rotation

    R = Rotation.from_rotvec(rv[:3])
    R2 = Rotation.from_euler("xyz", rv[3:])
    v = (R * R2).apply(POINTS_A[:, [0, 1, 1]])
    return np.sum(v * POINTS_A[:, [1, 0, 0]]) + np.sum((R2.inv()).as_quat() ** 2 * np.arange(4))


def ndimage_geometry(theta):
    shifted = ndimage.shift(IMAGE, (theta[0], theta[1]), order=3, mode="nearest")
    M = np.array([[np.cos(theta[2]), -np.sin(theta[2])], [np.sin(theta[2]), np.cos(theta[2])]])
    aff = ndimage.affine_transform(IMAGE, M, offset=(0.5, -0.3), order=1, mode="reflect")
    z = ndimage.zoom(IMAGE * (1 + theta[3]), 1.5, order=3)
    return np.sum(shifted * IMAGE) + np.sum(aff**2) + np.sum(z)


def ndimage_derivative_filters(u):
    img = u.reshape(8, 8)
    gx = ndimage.sobel(img, axis=0)
    lap = ndimage.laplace(img)
    g1 = ndimage.gaussian_filter1d(img, 1.0, axis=1, order=1)
    gm = ndimage.gaussian_gradient_magnitude(img, 1.0)
    return np.sum(gx**2) + np.sum(lap * IMAGE) + np.sum(g1**2) + np.sum(gm)


def sparse_traced_values(w):
    n = 5
    main = 3.0 + w
    off = -np.ones(n - 1)
    A = sparse.diags([off, main, off], [-1, 0, 1], format="csc")
    x = spsolve(A, np.arange(1.0, n + 1))
    return x


def sparse_iterative(b):
    A = sparse.csr_matrix(SPARSE_LAP)
    x, info = sparse.linalg.cg(A, b, rtol=1e-13, atol=0.0)
    y = sparse.linalg.expm_multiply(-0.3 * sparse.csc_matrix(SPARSE_LAP), b)
    return np.concatenate([x[:3], y[:3]])


# ARPACK's own random start vector (no v0) moves its last bits from call to call, which the
# bit-for-bit checks (reuse against eager) would see: a fixed start vector.
_EIGSH_V0 = np.linspace(1.0, 2.0, 6)


def sparse_eigsh(w):
    A = sparse.diags([-np.ones(5), 2.0 + w, -np.ones(5)], [-1, 0, 1], format="csr")
    vals = sparse.linalg.eigsh(A, k=2, which="SA", return_eigenvectors=False, tol=1e-14, v0=_EIGSH_V0)
    return np.sum(vals)


def xarray_scipy_mix(x):
    xr = pytest.importorskip("xarray")
    da = xr.DataArray(x.reshape(4, 3), dims=("time", "site"), coords={"time": [0.0, 1.0, 2.0, 3.0]})
    smooth = da.rolling(time=2).mean()
    interp = da.interp(time=[0.5, 2.25])
    logp = xr.apply_ufunc(special.gammaln, np.exp(da))
    return (smooth.sum() + (interp**2).sum() + logp.mean(dim="site").sum() + da.integrate("time").sum()).data


def xarray_into_scipy(x):
    xr = pytest.importorskip("xarray")
    da = xr.DataArray(x, dims="t")
    g = ndimage.gaussian_filter1d(da, 1.0)
    return np.sum(np.asarray(g) ** 2) if False else np.sum(g**2)


def pint_offset_units(x):
    pint = pytest.importorskip("pint")
    ureg = _UREG(pint)
    T = ureg.Quantity(x, ureg.degC)
    TK = T.to("K")
    sigma = ureg.Quantity(5.670374419e-8, "W/m**2/K**4")
    flux = (sigma * TK**4).to("kW/m**2")
    return np.sum(flux.magnitude) + np.mean(T).to("degF").magnitude


def pint_with_scipy(x):
    pint = pytest.importorskip("pint")
    ureg = _UREG(pint)
    t = ureg.Quantity(np.linspace(0.0, 2.0, x.size), "s")
    v = ureg.Quantity(x, "m/s")
    dist = trapezoid(v.magnitude, t.magnitude) * ureg.m
    ratio = (v / ureg.Quantity(1.0, "km/h")).to("dimensionless").magnitude
    return dist.to("cm").magnitude + np.sum(special.gammaln(ratio))


# ===========================================================================
# batch 3: common idioms (lists of traced scalars, args=, robust losses, ...)
# ===========================================================================


def von_neumann_entropy(p):
    """S(rho) for a thermal state of a traced Hermitian H, two ways."""
    H = _hermitian(p)
    R = linalg.expm(-0.8 * H)
    rho = R / np.real(np.trace(R))
    S1 = -np.real(np.trace(rho @ linalg.logm(rho)))
    w = linalg.eigvalsh(rho)
    S2 = -np.sum(w * np.log(w))
    return S1 + 2.0 * S2


def complex_time_evolution_scalar_t(t):
    H0 = np.array([[1.0, 0.5 - 0.3j, 0.0], [0.5 + 0.3j, -0.2, 0.4j], [0.0, -0.4j, 0.7]])
    U = linalg.expm(-1j * t[0] * H0)
    V = linalg.sqrtm(U @ np.diag([1.0, 2.0, 3.0]) @ U.conj().T)
    return np.real(U[0, 1] * np.conj(U[0, 1])) + np.real(np.trace(V @ V @ V))


def ivp_list_of_traced_scalars(theta):
    k, y0, T = theta
    sol = solve_ivp(lambda t, y: [y[1], -k * y[0]], (0.0, T), [y0, 0.0], method="DOP853", **_ODE_TOL)
    return sol.y[0, -1]


def odeint_list_y0(theta):
    sol = odeint(
        lambda y, t: [-theta[0] * y[0] * y[1], theta[0] * y[0] * y[1] - y[1]],
        [theta[1], 0.01],
        [0.0, 1.0, 3.0],
        rtol=1e-12,
        atol=1e-13,
    )
    return sol[-1]


def norm_logpdf_list_of_params(theta):
    mu1, mu2, s = theta
    x = MIX_DATA[:, None]
    return np.sum(stats.norm.logpdf(x, loc=[mu1, mu2], scale=s))


def minimize_with_args(p):
    def objective(x, a, b):
        return (a - x[0]) ** 2 + b * (x[1] - x[0] ** 2) ** 2

    res = minimize(
        objective,
        np.array([0.5, 0.5]),
        args=(p[0], p[1]),
        method="Newton-CG",
        jac=lambda x, a, b: np.array([-2 * (a - x[0]) - 4 * b * x[0] * (x[1] - x[0] ** 2), 2 * b * (x[1] - x[0] ** 2)]),
        options=dict(xtol=1e-14),
    )
    return res.x


def brentq_fsolve_args(p):
    r = brentq(lambda x, c: x**3 + c * x - 1.0, 0.0, 2.0, args=(p[0],), xtol=1e-15, rtol=1e-15)
    z = fsolve(
        lambda z, a, b: [z[0] + a * np.tanh(z[1]) - 1, z[1] - b * z[0]], [0.0, 0.0], args=(p[0], p[1]), xtol=1e-14
    )
    return np.concatenate([[r], z])


def robust_least_squares(y):
    t = np.linspace(0.0, 2.0, y.size)
    res = optimize.least_squares(
        lambda th: th[0] + th[1] * t - y, [0.0, 0.0], loss="soft_l1", f_scale=0.3, xtol=1e-15, ftol=1e-15, gtol=1e-15
    )
    return res.x


def robust_least_squares_polished(y):
    t = np.linspace(0.0, 2.0, y.size)
    A = np.stack([np.ones_like(t), t], axis=1)
    th = np.linalg.lstsq(A, y, rcond=None)[0]
    c = 0.3
    for _ in range(100):
        r = A @ th - y
        z = (r / c) ** 2
        w = 1.0 / np.sqrt(1.0 + z)  # rho'(z)
        w2 = -0.5 * (1.0 + z) ** -1.5  # rho''(z)
        g = A.T @ (w * r)
        H = A.T @ ((w + 2 * w2 * z)[:, None] * A)
        th = th - np.linalg.solve(H, g)
    return th


def rosenbrock_argmin_closed_form(p):
    return np.array([p[0], p[0] ** 2 + 0 * p[1]])


def nelder_mead_value_and_arg(p):
    res = minimize(
        lambda x: np.sum((x - p) ** 2 * np.array([1.0, 3.0])) + np.cos(x[0]),
        np.zeros(2),
        method="Nelder-Mead",
        options=dict(xatol=1e-13, fatol=1e-15, maxiter=5000),
    )
    return np.concatenate([res.x, [res.fun]])


def nelder_mead_polished(p):
    x = p.copy()
    for _ in range(100):
        g = 2 * (x - p) * np.array([1.0, 3.0]) - np.array([np.sin(x[0]), 0.0])
        H = np.diag([2.0 - np.cos(x[0]), 6.0])
        x = x - np.linalg.solve(H, g)
    return np.concatenate([x, [np.sum((x - p) ** 2 * np.array([1.0, 3.0])) + np.cos(x[0])]])


def minimize_jac_true(p):
    def fg(x):
        f = np.sum(np.exp(x) - p * x) + 0.5 * x[0] * x[1]
        g = np.exp(x) - p + 0.5 * x[::-1]
        return f, g

    return minimize(fg, np.zeros(2), jac=True, method="BFGS", options=dict(gtol=1e-13)).x


def minimize_jac_true_polished(p):
    x = np.log(p)
    for _ in range(100):
        g = np.exp(x) - p + 0.5 * x[::-1]
        H = np.diag(np.exp(x)) + 0.5 * np.array([[0.0, 1.0], [1.0, 0.0]])
        x = x - np.linalg.solve(H, g)
    return x


def newton_vectorized(c):
    return optimize.newton(lambda x: x**3 - c, np.ones(3), fprime=lambda x: 3 * x**2, tol=1e-14)


def simpson_traced_abscissae(x):
    t = np.cumsum(np.concatenate([[0.0], np.exp(x)]))
    y = np.sin(t)
    return simpson(y, x=t) + trapezoid(y**2, t) + cumulative_trapezoid(y, x=t)[-1]


def cumulative_simpson_program(x):
    t = np.linspace(0.0, 1.0, x.size)
    return integrate.cumulative_simpson(x**2, x=t)[-1]


def nonterminal_events(theta):
    w, phase = theta

    def rhs(t, y):
        return [w * np.cos(w * t + phase)]

    def crossing(t, y):
        return y[0] - 0.3

    sol = solve_ivp(rhs, (0.0, 6.0), [np.sin(phase)], events=crossing, **_ODE_TOL)
    return np.sum(sol.t_events[0]) + np.sum(sol.y_events[0][:, 0])


def signal_2d_and_resample(x):
    img = x.reshape(4, 5)
    c = signal.convolve2d(img, np.array([[1.0, 2.0], [0.5, -1.0]]), mode="full", boundary="symm")
    r = signal.correlate2d(img, IMAGE[:3, :3], mode="same")
    rs = signal.resample(x, 30)
    rp = signal.resample_poly(x, 3, 2)
    dec = signal.decimate(np.concatenate([x, x]), 2, ftype="fir")
    return np.sum(c**2) + np.sum(r) + np.sum(rs**2) + np.sum(rp * np.arange(rp.size)) + np.sum(dec**2)


def stft_spectrogram(x):
    f, t, Z = signal.stft(x, nperseg=8)
    f2, t2, S = signal.spectrogram(x, nperseg=8, noverlap=4)
    f3, Cxy = signal.coherence(x, SIGNAL, nperseg=8)
    return np.sum(np.abs(Z) ** 2) + np.sum(np.sqrt(S + 1e-3)) + np.sum(Cxy)


def butter_traced_cutoff(wn):
    b, a = signal.butter(2, wn[0])
    return np.sum(signal.lfilter(b, a, SIGNAL) ** 2)


def find_peaks_program(x):
    peaks, props = signal.find_peaks(x, height=0.0)
    widths = signal.peak_widths(x, peaks, rel_height=0.5)[0]
    prom = signal.peak_prominences(x, peaks)[0]
    return np.sum(x[peaks] ** 2) + np.sum(props["peak_heights"]) + np.sum(widths) + np.sum(prom)


def fft_program(x):
    from scipy import fft

    X = fft.rfft(x)
    y = fft.irfft(X * np.exp(-0.1 * np.arange(X.size)), n=x.size)
    d = fft.dct(x, norm="ortho")
    c = fft.fftshift(fft.fft(x * (1 + 0.5j)))
    return np.sum(y**2) + np.sum(d[:4] ** 2) + np.sum(np.abs(c) ** 2 * fft.fftshift(fft.fftfreq(x.size)))


def ndimage_measurements(u):
    img = np.exp(u.reshape(8, 8))
    labels = (IMAGE > 0.5).astype(int) + (IMAGE > 0.8).astype(int)
    com = ndimage.center_of_mass(img)
    means = ndimage.mean(img, labels=labels, index=[1, 2])
    sums = ndimage.sum_labels(img, labels=labels, index=[0, 1, 2])
    return np.sum(np.array(com) ** 2) + np.sum(np.asarray(means) ** 2) + np.sum(np.log(sums))


def ndimage_map_coordinates_traced_coords(c):
    coords = c.reshape(2, 3)
    return ndimage.map_coordinates(IMAGE, coords, order=3, mode="mirror")


def spatial_misc(x):
    from scipy.spatial import distance, distance_matrix

    X = x.reshape(3, 2)
    D = distance_matrix(X, POINTS_A)
    return (
        np.sum(D) + distance.euclidean(X[0], X[1]) + distance.sqeuclidean(X[0], X[2]) + distance.cityblock(x[:3], x[3:])
    )


def distance_cosine_1d(x):
    from scipy.spatial import distance

    return distance.cosine(x[:3], x[3:])


def sparse_traced_matrix_solvers(w):
    rows = np.array([0, 1, 2, 3, 0, 1, 2, 1, 2, 3])
    cols = np.array([0, 1, 2, 3, 1, 2, 3, 0, 1, 2])
    vals = np.concatenate([4.0 + w[:4], -1.0 + 0.1 * w[4:7], -1.0 + 0.1 * w[4:7]])
    A = sparse.coo_matrix((vals, (rows, cols)), shape=(4, 4)).tocsc()
    b = np.arange(1.0, 5.0)
    lu = sparse.linalg.splu(A)
    x1 = lu.solve(b)
    solve = sparse.linalg.factorized(A)
    x2 = solve(b[::-1])
    x3, info = sparse.linalg.gmres(A, b, rtol=1e-14, atol=0.0)
    return np.concatenate([x1, x2, x3])


def sparse_lsqr_eigs(b):
    A = sparse.csr_matrix(SPARSE_LAP)
    x = sparse.linalg.lsqr(A, b, atol=1e-15, btol=1e-15)[0]
    y = sparse.linalg.minres(A, b, rtol=1e-14)[0]
    return np.concatenate([x[:3], y[3:]])


def custom_rv_continuous(theta):
    class gumbel_like(stats.rv_continuous):
        def _pdf(self, x, c):
            return c * np.exp(-c * x - np.exp(-c * x))

        def _cdf(self, x, c):
            return np.exp(-np.exp(-c * x))

    dist = gumbel_like(name="gumbel_like")
    return np.sum(dist.logpdf(NORMAL_DATA[:8], theta[0], loc=theta[1])) + dist.cdf(0.5, theta[0])


def gaussian_kde_logpdf(x):
    kde = stats.gaussian_kde(x)
    return np.sum(kde.logpdf(np.array([-0.5, 0.0, 1.0])))


def stats_summary_functions(x):
    return (
        stats.skew(x)
        + stats.kurtosis(x)
        + stats.zscore(x)[0]
        + stats.pearsonr(x, SIGNAL[: x.size])[0]
        + stats.gmean(np.exp(x))
        + stats.hmean(np.exp(x))
        + stats.variation(np.exp(x))
        + stats.trim_mean(x, 0.1)
        + stats.sem(x)
    )


def stats_ppf_family(theta):
    q = expit(theta[0])
    a = np.exp(theta[1])
    return (
        stats.gamma.ppf(q, 2.5, scale=a)
        + stats.beta.ppf(q, 2.0, 3.0)
        + stats.t.ppf(q, 4.0, loc=a)
        + stats.lognorm.isf(q, 0.5, scale=a)
        + stats.chi2.sf(3.0 * a, 4.0)
    )


def xarray_groupby_weighted(x):
    xr = pytest.importorskip("xarray")
    da = xr.DataArray(
        x.reshape(6, 2),
        dims=("time", "lat"),
        coords={"time": np.arange(6), "lat": [-30.0, 45.0], "season": ("time", ["a", "b", "a", "b", "a", "c"])},
    )
    anom = da.groupby("season") - da.groupby("season").mean()
    w = np.cos(np.deg2rad(da.lat))
    ds = xr.Dataset({"t": da, "t2": da**2})
    return ((anom**2).weighted(w).mean(("time", "lat")) + ds["t2"].max() + (ds.mean()["t"])).data


def pint_linalg(x):
    pint = pytest.importorskip("pint")
    ureg = _UREG(pint)
    r = ureg.Quantity(x.reshape(2, 3), "nm")
    d = np.linalg.norm(r[0] - r[1])
    k = ureg.Quantity(3.0, "eV/nm**2")
    return (0.5 * k * (d - ureg.Quantity(0.5, "angstrom")) ** 2).to("meV").magnitude


# ===========================================================================
# programs that expose tapegrad bugs (marked xfail below)
# ===========================================================================


def relay_switched_on_at_traced_time(p):
    """A relay switches a unit input on at time p: y' = H(t - p) - y.  y(3) = 1 - exp(p - 3)."""
    sol = solve_ivp(lambda t, y: [np.where(t > p[0], 1.0, 0.0) - y[0]], (0.0, 3.0), [0.0], **_ODE_TOL)
    return sol.y[0, -1]


def relay_closed_form(p):
    return 1.0 - np.exp(p[0] - 3.0)


def state_threshold_switch(p):
    """A second pump starts when the level y passes p: y' = 0.5 + H(y - p).  y(3) = 4.5 - 2 p."""
    sol = solve_ivp(lambda t, y: [0.5 + np.where(y[0] > p[0], 1.0, 0.0)], (0.0, 3.0), [0.0], **_ODE_TOL)
    return sol.y[0, -1]


def state_threshold_closed_form(p):
    return 4.5 - 2.0 * p[0]


def quad_jump_at_traced_point(p):
    """Integral of exp(-x) over x > p within [0, 2] = exp(-p) - exp(-2)."""
    return quad(lambda x: np.where(x > p[0], 1.0, 0.0) * np.exp(-x), 0.0, 2.0, epsabs=1e-13, limit=200)[0]


def quad_jump_closed_form(p):
    return np.exp(-p[0]) - np.exp(-2.0)


def ramp_forcing_from_traced_time(p):
    """A ramp starting at time p: y' = max(t - p, 0).  y(2) = (2 - p)^2 / 2, second derivative 1."""
    sol = solve_ivp(lambda t, y: [np.maximum(t - p[0], 0.0) + 0.0 * y[0]], (0.0, 2.0), [0.0], **_ODE_TOL)
    return sol.y[0, -1]


def ramp_closed_form(p):
    return (2.0 - p[0]) ** 2 / 2.0


def rectified_sine_drive(p):
    """y' = |sin(p t)| - y / 2, a rectified drive; its kinks at t = k pi / p move with p."""
    sol = solve_ivp(lambda t, y: [np.abs(np.sin(p[0] * t)) - 0.5 * y[0]], (0.0, 4.0), [0.0], **_ODE_TOL)
    return sol.y[0, -1]


def rectified_sine_by_quadrature(p):
    w = p[0]
    kinks = [k * np.pi / w for k in range(1, 4) if k * np.pi / w < 4.0]
    return quad(
        lambda s: np.exp(-0.5 * (4.0 - s)) * np.abs(np.sin(w * s)),
        0.0,
        4.0,
        points=kinks,
        epsabs=1e-15,
        epsrel=1e-14,
        limit=200,
    )[0]


def affine_registration_loss(m):
    """Image registration: similarity of an affinely warped image to a reference."""
    warped = ndimage.affine_transform(IMAGE, m.reshape(2, 2), order=3, mode="nearest")
    return np.sum(warped * IMAGE)


def rotation_registration_loss(angle):
    rotated = ndimage.rotate(IMAGE[:7, :7], angle[0], reshape=False, order=3, mode="nearest")
    return np.sum(rotated**2)


def funm_matrix_function(a):
    return np.sum(linalg.funm(0.3 * a.reshape(2, 2), lambda x: np.exp(x) * np.cos(x)))


def bivariate_normal_cdf(m):
    return stats.multivariate_normal.cdf(np.array([0.3, 0.5]), mean=m, cov=np.array([[1.0, 0.3], [0.3, 1.0]]))


def binomial_coefficients_real(n):
    return np.sum(special.comb(n, 3.0)) + np.sum(special.factorial(n / 2))


def factorial_scalar(n):
    return special.factorial(n[0])


def graph_shortest_paths(w):
    A = np.array([[0.0, w[0], w[1]], [w[0], 0.0, w[2]], [w[1], w[2], 0.0]])
    return np.sum(sparse.csgraph.shortest_path(A))


# ===========================================================================
# programs that tapegrad refuses with a clear error (marked xfail below)
# ===========================================================================


def gamma_entropy_shape(a):
    return np.sum(stats.gamma.entropy(a))


def frozen_mvn_cdf(m):
    return stats.multivariate_normal(m, np.eye(2)).cdf(np.array([0.3, 0.5]))


def vonmises_cdf_kappa(k):
    return np.sum(stats.vonmises.cdf(np.array([0.1, 0.5, -1.0]), k[0]))


def gamma_rvs_shape(a):
    return np.sum(stats.gamma.rvs(a[0], size=5, random_state=0))


def bessel_order(v):
    return np.sum(special.jv(v, 1.5))


def loggamma_complex(z):
    return np.real(special.loggamma(z[0] + 1j * z[1]))


def lyapunov_complex(p):
    A = (p[:4] + 1j * p[4:]).reshape(2, 2) - 3 * np.eye(2)
    return np.real(np.trace(linalg.solve_continuous_lyapunov(A, -np.eye(2))))


def interp1d_traced_fill(y):
    return np.sum(interp1d(GRID_X, y[:6], bounds_error=False, fill_value=y[6])(np.array([-0.2, 0.5])) ** 2)


def smoothing_spline_fitpack(y):
    return np.sum(interpolate.UnivariateSpline(GRID_X, y, s=0.01)(np.array([0.3])) ** 2)


def linear_nd_interpolator(v):
    pts = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    return np.sum(interpolate.LinearNDInterpolator(pts, v)(np.array([[0.3, 0.4]])) ** 2)


def bpoly_from_derivatives(y):
    bp = interpolate.BPoly.from_derivatives([0.0, 1.0, 2.0], [[y[0], y[1]], [y[2]], [y[3], 0.0]])
    return np.sum(bp(np.array([0.3, 1.6])) ** 2)


def interpn_splinef2d(v):
    return np.sum(
        interpolate.interpn((GRID_X, GRID_X), v.reshape(6, 6), np.array([[0.3, 0.45]]), method="splinef2d") ** 2
    )


def linprog_cost(c):
    return optimize.linprog(c, A_ub=np.array([[1.0, 1.0]]), b_ub=[1.0], bounds=[(0, None), (0, None)]).fun


def lsim_first_order(p):
    return np.sum(signal.lsim(([1.0], [1.0, p[0]]), np.ones(20), np.linspace(0.0, 2.0, 20))[1] ** 2)


def istft_roundtrip(x):
    return np.sum(signal.istft(signal.stft(x, nperseg=8)[2], nperseg=8)[1] ** 2)


def generic_filter_mean(u):
    return np.sum(ndimage.generic_filter(u.reshape(8, 8), np.mean, size=3) ** 2)


def spilu_solve(w):
    A = sparse.csc_matrix(sparse.diags([3.0 + w, -np.ones(4)], [0, 1]))
    return sparse.linalg.spilu(A).solve(np.ones(5))


def xarray_float(x):
    xr = pytest.importorskip("xarray")
    return float(xr.DataArray(x, dims="t").sum())


# ===========================================================================
# independent references where SciPy's own stopping rule blurs finite differences
# ===========================================================================


def relu_rhs_closed_form(theta):
    """relu_rhs_ode solved by hand: p = p0 + w t crosses 1 and 1.5 inside (0, 3)."""
    w, p0 = theta
    a = 3 * w + p0 - 1.0
    b = 3 * w + p0 - 1.5
    return 0.7 * a**2 / (2 * w) + 0.1 * ((1.5 - p0) ** 2 + b**2) / (2 * w)


def argmin_polished(b):
    A = np.array([[3.0, 0.5], [0.5, 2.0]])
    x = np.linalg.solve(A, b)
    for _ in range(50):
        x = x - np.linalg.solve(A + np.diag(1.2 * x**2), A @ x - b + 0.4 * x**3)
    return x


def _exp_fit_polished(y):
    t = np.linspace(0.0, 2.0, y.size)
    th = np.array([1.0, 1.0])
    for _ in range(200):
        e = np.exp(-th[1] * t)
        r = th[0] * e - y
        J = np.stack([e, -th[0] * t * e], axis=1)
        H = J.T @ J + np.array([[0.0, np.sum(r * -t * e)], [np.sum(r * -t * e), np.sum(r * th[0] * t**2 * e)]])
        step = np.linalg.solve(H if _ > 5 else J.T @ J, J.T @ r)
        th = th - step
    e = np.exp(-th[1] * t)
    r = th[0] * e - y
    J = np.stack([e, -th[0] * t * e], axis=1)
    return th, r, J


def least_squares_polished(y):
    return _exp_fit_polished(y)[0]


def curve_fit_polished(y):
    th, r, J = _exp_fit_polished(y)
    pcov = np.linalg.inv(J.T @ J) * np.sum(r**2) / (y.size - 2)
    return np.concatenate([th, np.sqrt(np.diag(pcov))])


def bounded_minimize_closed_form(p):
    x = np.linalg.solve(np.array([[2.0, 0.3], [0.3, 2.0]]), 2 * p)
    assert x[0] > 1.0 and -1.0 < x[1] < 2.0
    return np.array([1.0 + 0 * p[0], (2 * p[1] - 0.3) / 2])


def minimize_scalar_polished(p):
    x = p[0]
    for _ in range(100):
        g = 2 * (x - p[0]) + p[1] * np.exp(p[1] * x)
        x = x - g / (2 + p[1] ** 2 * np.exp(p[1] * x))
    return (x - p[0]) ** 2 + np.exp(p[1] * x) + x


# ===========================================================================
# the table
# ===========================================================================


@dataclass
class Program:
    fn: Callable
    x: np.ndarray
    eps: float = 1e-6
    rtol: float = 1e-6
    atol: float = 1e-8
    hess: bool = True
    hess_rtol: float = 1e-6
    hess_atol: float = 1e-7
    value_rtol: float = 1e-12
    reference: Callable = None  # plain-NumPy function whose differences are the truth
    ref_eps: float = 1e-6


PROGRAMS = {
    # coordinates on grid points: the B-spline's centre piece lost its second derivative through |t| * |t|
    # (the cubic spline's third derivative jumps there: central differences of the gradient err by O(eps))
    "affine_transform_matrix_hessian": Program(affine_registration_loss, np.array([0.9, 0.1, -0.1, 1.1]), eps=1e-5, hess_rtol=1e-5, hess_atol=2e-3),
    "rotate_angle_hessian": Program(rotation_registration_loss, np.array([30.0]), eps=1e-4, hess_rtol=1e-5, hess_atol=1e-8),
    # a kink whose time moves with the parameter: the Hessian's crossing stepped back from b instead of b + delta
    "ivp_kink_at_traced_time_hessian": Program(
            ramp_forcing_from_traced_time,
            np.array([0.7]),
            reference=ramp_closed_form,
            ref_eps=1e-5,
            rtol=1e-7,
            atol=1e-9,
            hess_rtol=1e-5,
            hess_atol=1e-7,
        ),
    "ivp_rectified_sine_hessian": Program(
            rectified_sine_drive,
            np.array([1.3]),
            reference=rectified_sine_by_quadrature,
            ref_eps=1e-5,
            rtol=1e-7,
            atol=1e-9,
            hess_rtol=1e-4,
            hess_atol=1e-6,
        ),
    # comb, perm and factorial (exact=False) crashed inside SciPy's isinstance branch; now composite rules
    "special_comb_factorial": Program(binomial_coefficients_real, np.array([7.3, 5.5])),
    "special_factorial_scalar": Program(factorial_scalar, np.array([3.3])),
    # a traced parameter that enters only through a switch (np.where(t > p, 1, 0)): the jump
    # moves with it; the solve was taken as constant (gradient 0) before
    "ivp_relay_switch_at_traced_time": Program(
            relay_switched_on_at_traced_time,
            np.array([1.3]),
            reference=relay_closed_form,
            ref_eps=1e-5,
            rtol=1e-6,
            atol=1e-8,
            hess_rtol=1e-4,
            hess_atol=1e-6,
        ),
    "ivp_state_threshold_switch": Program(
            state_threshold_switch,
            np.array([0.6]),
            reference=state_threshold_closed_form,
            ref_eps=1e-5,
            rtol=1e-6,
            atol=1e-8,
            hess_rtol=1e-4,
            hess_atol=1e-6,
        ),
    # special
    "negbin_nll": Program(negbin_nll, np.array([0.4, -0.3])),
    "beta_binomial": Program(beta_binomial_loglik, np.array([0.3, 0.6])),
    "probit_erf": Program(probit_erf_model, np.array([0.2, -0.4, 0.3])),
    "gaussian_mixture": Program(gaussian_mixture_nll, np.array([-0.8, 1.7, -0.5, -0.2, 0.1])),
    "logsumexp_weighted": Program(logsumexp_weighted, np.array([0.3, -1.2, 0.8, 0.1])),
    "softmax_regression": Program(softmax_regression_nll, _point(1, 9, 0.3)),
    "logistic_logit": Program(logistic_logit_roundtrip, np.array([0.1, 0.5, -0.3])),
    "von_mises": Program(von_mises_nll, np.array([0.4, 0.6])),
    "matern_bessel": Program(matern_kernel_sum, np.array([0.3, 0.9, 1.7])),
    "pendulum_ellipk": Program(pendulum_period, np.array([0.4, 1.1, 2.0])),
    "hurwitz_trigamma": Program(hurwitz_trigamma, np.array([0.7, 1.5, 3.2])),
    "gammainc_x": Program(gammainc_in_x, np.array([0.5, 1.7, 3.1])),
    "dirichlet_digamma": Program(dirichlet_expected_log, np.array([0.8, 2.0, 3.5])),
    # stats
    "normal_nll": Program(normal_nll_loc_scale, np.array([0.9, 0.6])),
    "normal_in_data": Program(normal_logpdf_in_data, np.array([-0.5, 0.3, 1.2])),
    "student_t_regression": Program(student_t_regression, np.array([0.5, 0.2, -0.1, 1.0])),
    "gamma_mle": Program(gamma_mle_nll, np.array([2.3, 1.4])),
    "beta_nll": Program(beta_nll, np.array([0.6, 1.0])),
    "poisson_glm": Program(poisson_glm_nll, np.array([1.0, 0.1, -0.2])),
    "normal_ppf": Program(normal_ppf_quantiles, np.array([0.9, 0.2, 1.3])),
    "frozen_normal": Program(frozen_normal, np.array([0.8, 0.5])),
    "mvn_mean_cov": Program(mvn_logpdf_mean_cov, np.array([0.1, -0.2, 0.3, 0.4, -0.3, 0.2])),
    "kl_entropy": Program(kl_entropy, np.array([0.1, 0.5, -0.3, 0.2, -0.1, 0.3, 0.2, 0.0])),
    "weibull_mle": Program(hand_written_weibull_mle, np.array([0.5, 1.0])),
    # linalg
    "expm": Program(expm_weighted, _point(2, 9, 0.5)),
    "logm_sqrtm_spd": Program(logm_sqrtm_spd, _point(3, 9, 0.5)),
    "gp_cho": Program(gp_marginal_likelihood, np.array([-0.3, 0.2, -1.0])),
    "lu_solve": Program(lu_solve_program, _point(4, 9, 0.5)),
    "solve_triangular": Program(triangular_program, _point(5, 9, 0.5)),
    "eigh": Program(eigh_program, _point(6, 9, 1.0)),
    "svd": Program(svd_program, _point(7, 12, 1.0)),
    "schur": Program(schur_program, _point(8, 9, 0.3)),
    "sylvester_lyapunov": Program(sylvester_lyapunov, _point(9, 13, 0.5)),
    "inv_det": Program(inv_det_program, _point(10, 9, 0.5)),
    "expm_frechet": Program(expm_frechet_program, _point(11, 8, 1.0)),
    "toeplitz_circulant": Program(structured_matrices, _point(12, 8, 0.5)),
    "complex_trace_expm": Program(quantum_trace_expm, _point(13, 9, 0.6)),
    "complex_abs_det_expm": Program(abs_det_expm_complex, _point(14, 8, 0.4)),
    "complex_fidelity": Program(quantum_fidelity, np.concatenate([_point(15, 9, 0.6), [0.8]])),
    "complex_sqrtm_logm": Program(complex_sqrtm_logm, _point(16, 8, 0.5)),
    "complex_solve_inv": Program(complex_solve_inv, _point(17, 8, 0.5)),
    "complex_eigh": Program(complex_eigh_energy, _point(18, 9, 1.0)),
    # integrate
    "lotka_volterra_rk45": Program(
        lotka_volterra_fit,
        np.array([1.1, 0.4, 0.9, 0.3]),
        eps=1e-5,
        rtol=1e-5,
        atol=1e-7,
        hess_rtol=1e-4,
        hess_atol=1e-6,
    ),
    "stiff_radau": Program(stiff_radau, np.array([3.0, 1.5]), eps=1e-5, rtol=1e-5, atol=1e-7),
    "stiff_bdf": Program(
        stiff_bdf_decay, np.array([1.2, 0.3]), eps=1e-5, rtol=1e-5, atol=1e-7, hess_rtol=1e-4, hess_atol=1e-6
    ),
    "odeint_pendulum": Program(odeint_pendulum, np.array([0.25, 2.0]), eps=1e-5, rtol=1e-5, atol=1e-7),
    "relu_rhs": Program(
        relu_rhs_ode,
        np.array([0.8, 0.2]),
        eps=1e-5,
        rtol=1e-7,
        atol=1e-9,
        hess_rtol=1e-5,
        hess_atol=1e-6,
        reference=relu_rhs_closed_form,
        ref_eps=1e-4,
    ),
    "quad": Program(quad_params_limits, np.array([0.7, -0.4, 1.3]), eps=1e-5, rtol=1e-6, atol=1e-8),
    "trapezoid_simpson": Program(trapezoid_simpson, _point(19, 9, 0.5)),
    # optimize
    "argmin_bfgs": Program(
        argmin_quadratic_plus_quartic,
        np.array([1.0, -0.5]),
        rtol=1e-6,
        atol=1e-8,
        reference=argmin_polished,
        value_rtol=1e-7,
    ),
    "min_value_envelope": Program(
        min_value_envelope, np.array([0.4, -0.2]), eps=1e-5, rtol=1e-5, atol=1e-7, hess_rtol=1e-4, hess_atol=1e-5
    ),
    "brentq_kepler": Program(brentq_kepler, np.array([1.0, 0.3]), eps=1e-5, rtol=1e-7),
    "fsolve": Program(fsolve_system, np.array([2.0, 0.7]), eps=1e-5, rtol=1e-6),
    "least_squares": Program(
        least_squares_fit,
        2.0 * np.exp(-0.8 * np.linspace(0, 2, 6)) + 0.01 * _point(20, 6),
        rtol=1e-6,
        atol=1e-8,
        reference=least_squares_polished,
    ),
    # interpolate
    "cubic_spline": Program(cubic_spline_data_and_query, np.concatenate([np.sin(KNOTS), [0.05]])),
    "interp1d": Program(interp1d_program, np.concatenate([np.cos(GRID_X), [0.37]])),
    "make_interp_spline": Program(make_interp_spline_program, np.concatenate([np.cos(3 * GRID_X), [0.3]])),
    "regular_grid_linear": Program(regular_grid_program, np.concatenate([_point(21, 30), [0.43, 0.87]]), hess=True),
    "regular_grid_cubic_q": Program(regular_grid_cubic_points, np.array([0.31, 0.52, 0.64, 1.37])),
    # signal, spatial, ndimage, sparse
    "signal_pipeline": Program(signal_pipeline, SIGNAL.copy()),
    "lfilter_coeffs": Program(lfilter_coefficients, np.array([0.3, 0.2, -0.4, 0.1])),
    "cdist_pdist": Program(rbf_kernel_cdist, _point(22, 8)),
    "ndimage_filters": Program(image_filters, IMAGE.ravel() + 0.1),
    "map_coordinates": Program(map_coordinates_program, np.array([0.13, 0.21, 0.1])),
    "sparse": Program(sparse_products, _point(23, 6)),
    # wrappers
    "xarray": Program(xarray_program, _point(24, 12, 0.5)),
    "pint": Program(pint_program, np.array([10.0, 25.0, 3.0])),
    # batch 2: special / stats
    "voigt_faddeeva": Program(voigt_and_faddeeva, np.array([-0.3, -0.6])),
    "special_grab_bag": Program(special_grab_bag, np.array([0.3, -0.7, 1.2])),
    "lambertw": Program(lambertw_program, np.array([0.3, 1.1])),
    "betainc_x": Program(betainc_program, np.array([0.3, -0.5])),
    "discrete_stats": Program(discrete_stats_nll, np.array([0.7, 0.1, 1.0])),
    "expon_lognorm_truncnorm": Program(expon_lognorm_truncnorm, np.array([1.3, 0.8])),
    "mvn_frozen_t": Program(mvn_frozen_and_t, np.array([0.2, -0.1, 0.3])),
    "dirichlet": Program(dirichlet_logpdf, np.array([0.2, 0.5, -0.1])),
    "gamma_nnlf": Program(gamma_nnlf_method, np.array([2.3, 1.4])),
    # linalg
    "continuous_are": Program(continuous_are_lqr, np.array([0.3, 0.2, -0.1])),
    "discrete_lyap_are": Program(discrete_lyapunov_are, _point(30, 4, 0.5)),
    "matrix_functions": Program(matrix_functions, _point(31, 9)),
    "general_eig": Program(general_eig_program, _point(32, 9)),
    "polar_procrustes_qr": Program(polar_procrustes_qr, _point(33, 9, 0.5)),
    "lstsq_pinv": Program(lstsq_pinv_program, _point(34, 10)),
    "banded": Program(banded_solves, _point(35, 9, 0.5)),
    "companion_roots": Program(companion_roots, np.array([0.5, -1.2, 0.7])),
    "complex_stacked_expm": Program(stacked_expm_hermitian, _point(36, 18, 0.5)),
    "complex_det_logdet": Program(complex_det_logdet, _point(37, 18, 0.5)),
    "complex_hermitian_triu": Program(hermitian_from_triu, _point(38, 18, 0.5)),
    # integrate
    "event_dense_output": Program(
        dense_output_and_event, np.array([0.3, 4.0]), eps=1e-5, rtol=1e-6, atol=1e-8, hess_rtol=1e-5, hess_atol=1e-6
    ),
    "ivp_traced_end_lsoda": Program(
        ivp_traced_end_time, np.array([1.3, 1.7]), eps=1e-5, rtol=1e-6, atol=1e-8, hess_rtol=1e-5, hess_atol=1e-6
    ),
    "vectorized_radau": Program(vectorized_rhs, np.array([2.0, 0.3]), eps=1e-5, rtol=1e-6, atol=1e-8),
    "odeint_dfun": Program(
        odeint_with_dfun, np.array([1.5, 0.7]), eps=1e-5, rtol=1e-6, atol=1e-8, hess_rtol=1e-5, hess_atol=1e-6
    ),
    "dblquad_fixed_quad_vec": Program(
        dblquad_fixed_quad, np.array([0.7, 1.3]), eps=1e-5, rtol=1e-6, atol=1e-8, hess_rtol=1e-5, hess_atol=1e-6
    ),
    "solve_bvp": Program(
        solve_bvp_program, np.array([1.0, 0.4]), eps=1e-5, rtol=1e-5, atol=1e-7, hess_rtol=1e-4, hess_atol=1e-5
    ),
    # optimize
    "slsqp_constrained": Program(constrained_minimize, np.array([1.0, 0.8]), eps=1e-5, rtol=1e-5, atol=1e-7),
    "lbfgsb_bounds": Program(
        bounded_minimize,
        np.array([1.4, 0.3]),
        rtol=1e-8,
        atol=1e-10,
        reference=bounded_minimize_closed_form,
        value_rtol=1e-6,
    ),
    "root_root_scalar": Program(root_and_root_scalar, np.array([0.9, 0.4]), eps=1e-5, rtol=1e-6, atol=1e-8),
    "curve_fit_pcov": Program(
        curve_fit_pcov,
        2.0 * np.exp(-0.8 * np.linspace(0, 2, 6)) + 0.02 * _point(39, 6),
        rtol=1e-6,
        atol=1e-8,
        reference=curve_fit_polished,
        value_rtol=1e-6,
    ),
    "minimize_scalar": Program(
        minimize_scalar_value,
        np.array([0.3, 0.5]),
        rtol=1e-6,
        atol=1e-8,
        hess_rtol=1e-5,
        hess_atol=1e-6,
        reference=minimize_scalar_polished,
        value_rtol=1e-7,
    ),
    # interpolate
    "spline_zoo": Program(spline_zoo, np.concatenate([np.cos(3 * GRID_X), [0.01, 0.4]])),
    "periodic_spline": Program(periodic_spline, _point(40, 6)),
    "splrep_bspline": Program(splrep_bspline, np.array([0.2, 0.03])),
    "interpn_rbf_griddata": Program(interpn_rbf_griddata, _point(41, 30)),
    # signal / spatial / ndimage / sparse
    "signal_filters_zoo": Program(signal_filters_zoo, SIGNAL.copy()),
    "welch_periodogram": Program(welch_psd, SIGNAL.copy()),
    "hilbert_envelope": Program(hilbert_envelope, SIGNAL.copy()),
    "mahalanobis_cdist": Program(mahalanobis_cdist, _point(42, 10, 0.7)),
    "rotation": Program(rotation_program, np.array([0.3, -0.2, 0.5, 0.1, 0.4, -0.3])),
    "ndimage_geometry": Program(ndimage_geometry, np.array([0.3, -0.4, 0.2, 0.1])),
    "ndimage_derivatives": Program(ndimage_derivative_filters, IMAGE.ravel() + 0.2),
    "sparse_traced_values": Program(sparse_traced_values, np.array([0.1, -0.2, 0.3, 0.0, 0.5])),
    "sparse_iterative": Program(sparse_iterative, _point(43, 6)),
    "sparse_eigsh": Program(sparse_eigsh, _point(44, 6, 0.5)),
    # xarray / pint
    "xarray_scipy_mix": Program(xarray_scipy_mix, _point(45, 12, 0.5)),
    "xarray_into_scipy": Program(xarray_into_scipy, _point(46, 8)),
    "pint_offset_units": Program(pint_offset_units, np.array([20.0, 35.0, -5.0])),
    "pint_with_scipy": Program(pint_with_scipy, np.array([3.0, 5.0, 4.0, 6.0])),
    "freqz": Program(freqz_response, np.array([0.5, 0.3, 0.2])),
    "interp1d_traced_knots": Program(interp1d_traced_knots, np.array([0.2, 0.5, 0.8])),
    "cubic_spline_traced_knots": Program(
        cubic_spline_traced_knots, np.array([0.3, 0.5, 0.7]), hess_rtol=1e-5, hess_atol=1e-6
    ),
    # batch 3
    "von_neumann_entropy": Program(von_neumann_entropy, _point(50, 9, 0.5)),
    "complex_expm_scalar_t": Program(complex_time_evolution_scalar_t, np.array([0.7])),
    "ivp_list_of_tracers": Program(
        ivp_list_of_traced_scalars,
        np.array([2.0, 0.8, 1.9]),
        eps=1e-5,
        rtol=1e-6,
        atol=1e-8,
        hess_rtol=1e-5,
        hess_atol=1e-6,
    ),
    "odeint_list_y0": Program(odeint_list_y0, np.array([1.7, 0.9]), eps=1e-5, rtol=1e-6, atol=1e-8),
    "norm_list_of_params": Program(norm_logpdf_list_of_params, np.array([-0.9, 1.8, 0.9])),
    "minimize_args": Program(
        minimize_with_args,
        np.array([0.8, 3.0]),
        rtol=1e-6,
        atol=1e-7,
        reference=rosenbrock_argmin_closed_form,
        value_rtol=1e-6,
    ),
    "brentq_fsolve_args": Program(brentq_fsolve_args, np.array([1.5, 0.4]), eps=1e-5, rtol=1e-6, atol=1e-8),
    "robust_least_squares": Program(
        robust_least_squares,
        np.array([0.1, 0.5, 2.0, 1.4, 2.2, 2.4]),
        rtol=1e-6,
        atol=1e-8,
        reference=robust_least_squares_polished,
        value_rtol=1e-6,
    ),
    "nelder_mead": Program(
        nelder_mead_value_and_arg,
        np.array([0.7, -0.4]),
        rtol=1e-6,
        atol=1e-8,
        reference=nelder_mead_polished,
        value_rtol=1e-6,
    ),
    "minimize_jac_true": Program(
        minimize_jac_true,
        np.array([1.5, 2.5]),
        rtol=1e-6,
        atol=1e-8,
        reference=minimize_jac_true_polished,
        value_rtol=1e-6,
    ),
    "newton_vectorized": Program(newton_vectorized, np.array([2.0, 3.0, 0.5])),
    "simpson_traced_x": Program(simpson_traced_abscissae, _point(51, 8, 0.2, -1.5)),
    "nonterminal_events": Program(
        nonterminal_events, np.array([1.3, 0.2]), eps=1e-5, rtol=1e-6, atol=1e-8, hess_rtol=1e-5, hess_atol=1e-6
    ),
    "signal_2d_resample": Program(signal_2d_and_resample, _point(52, 20)),
    "stft_spectrogram": Program(stft_spectrogram, SIGNAL.copy()),
    "find_peaks": Program(find_peaks_program, SIGNAL.copy(), hess=False),
    "fft": Program(fft_program, _point(53, 12)),
    "ndimage_measurements": Program(ndimage_measurements, _point(54, 64, 0.3)),
    "map_coordinates_coords": Program(ndimage_map_coordinates_traced_coords, np.array([1.3, 2.7, 5.2, 4.1, 0.6, 3.3])),
    "spatial_misc": Program(spatial_misc, _point(55, 6)),
    "sparse_traced_solvers": Program(sparse_traced_matrix_solvers, _point(56, 7, 0.5)),
    "sparse_lsqr_minres": Program(sparse_lsqr_eigs, _point(57, 6)),
    "custom_rv_continuous": Program(custom_rv_continuous, np.array([1.3, 0.2])),
    "gaussian_kde": Program(gaussian_kde_logpdf, _point(58, 10)),
    "stats_summaries": Program(stats_summary_functions, _point(59, 10)),
    "stats_ppf_family": Program(stats_ppf_family, np.array([0.3, 0.2])),
    "xarray_groupby_weighted": Program(xarray_groupby_weighted, _point(60, 12)),
    "pint_linalg": Program(pint_linalg, _point(61, 6)),
}

_NONDIFF = tg.NonDifferentiableArgumentError
_DROPPED = tg.GradientDroppedError
_UNSUPPORTED = tg.UnsupportedFunctionError


# The twelve tapegrad bugs these programs found (wrong numbers or unclear crashes) are fixed:
# each program now sits in PROGRAMS or, refused with a clear error, in REFUSALS.

# Clear refusals: tapegrad raises one of its own errors naming the function.
REFUSALS = {
    # compiled code (Pythran, numpy.ma's ndarray.view) named clearly; raw TypeErrors before
    "funm_pythran": (Program(funm_matrix_function, _point(47, 4)), _DROPPED),
    # (SciPy releases differ: a Pythran kernel, or a private function tapegrad has no rule for)
    "mvn_cdf_2d_pythran": (Program(bivariate_normal_cdf, np.array([0.1, -0.2]), hess=False), (_DROPPED, _UNSUPPORTED)),
    "csgraph_shortest_path_dense": (Program(graph_shortest_paths, np.array([0.3, 1.2, 0.5]), hess=False), _DROPPED),
    # a jump at a traced point without points=: refused (its gradient was 0 before)
    "quad_jump_at_traced_point": (Program(
            quad_jump_at_traced_point,
            np.array([0.7]),
            reference=quad_jump_closed_form,
            ref_eps=1e-5,
            rtol=1e-7,
            atol=1e-9,
            hess_rtol=1e-5,
            hess_atol=1e-7,
        ), _NONDIFF),
    "gammainc_shape_a": (Program(gammainc_in_a, np.array([1.5, 2.5])), _NONDIFF),
    "gamma_cdf_shape": (Program(gamma_cdf_shape, np.array([2.0, 1.3])), _NONDIFF),
    "student_t_cdf_df": (Program(student_t_cdf_df, np.array([3.5])), _NONDIFF),
    "spherical_jn": (Program(spherical_bessel, np.array([0.4, 1.3])), _UNSUPPORTED),
    "complex_state_solve_ivp": (Program(schrodinger_complex_ode, np.array([0.8, 0.3])), _NONDIFF),
    "cumulative_simpson": (Program(cumulative_simpson_program, _point(62, 7)), _DROPPED),
    "butter_traced_cutoff": (Program(butter_traced_cutoff, np.array([0.3])), _DROPPED),
    "distance_cosine_1d": (Program(distance_cosine_1d, _point(63, 6)), _DROPPED),
    "gamma_entropy": (Program(gamma_entropy_shape, np.array([2.0, 3.0])), _UNSUPPORTED),
    "frozen_mvn_cdf": (Program(frozen_mvn_cdf, np.array([0.1, -0.2])), _UNSUPPORTED),
    "vonmises_cdf_kappa": (Program(vonmises_cdf_kappa, np.array([2.0])), _DROPPED),
    "gamma_rvs_shape": (Program(gamma_rvs_shape, np.array([2.0])), _NONDIFF),
    "bessel_jv_order": (Program(bessel_order, np.array([0.3, 1.4])), _NONDIFF),
    "loggamma_complex": (Program(loggamma_complex, np.array([0.7, 1.4])), _NONDIFF),
    "lyapunov_complex": (Program(lyapunov_complex, _point(64, 8)), _NONDIFF),
    "interp1d_traced_fill_value": (Program(interp1d_traced_fill, np.append(np.cos(GRID_X), 0.3)), _NONDIFF),
    "univariate_spline_traced_y": (Program(smoothing_spline_fitpack, np.cos(GRID_X)), _NONDIFF),
    "linear_nd_interpolator": (Program(linear_nd_interpolator, np.array([0.1, 0.5, 0.3, 0.9])), _DROPPED),
    "bpoly_from_derivatives": (Program(bpoly_from_derivatives, np.array([0.3, 1.0, -0.5, 0.2])), _DROPPED),
    "interpn_splinef2d": (Program(interpn_splinef2d, _point(65, 36)), _UNSUPPORTED),
    "linprog": (Program(linprog_cost, np.array([-1.0, -2.0])), _DROPPED),
    "lsim": (Program(lsim_first_order, np.array([1.5])), _DROPPED),
    "istft": (Program(istft_roundtrip, SIGNAL.copy()), _DROPPED),
    "generic_filter": (Program(generic_filter_mean, IMAGE.ravel()), _DROPPED),
    "spilu": (Program(spilu_solve, np.arange(5.0) * 0.1), _NONDIFF),
    "xarray_float": (Program(xarray_float, np.array([1.0, 2.0])), _DROPPED),
}


# ---------------------------------------------------------------------------
# checks
# ---------------------------------------------------------------------------


def _fd_jacobian(f, x, eps):
    x = np.asarray(x, dtype=float)
    cols = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = eps
        cols.append((np.asarray(f(x + e), dtype=float) - np.asarray(f(x - e), dtype=float)) / (2 * eps))
    return np.stack(cols, axis=-1)


def _reference_hessian(ref, x, eps):
    return _fd_jacobian(lambda z: _fd_jacobian(ref, z, eps), x, eps)


_TRACER_NAMES = ("Tracer",)


def _assert_no_tracer(value):
    """The value tapegrad hands back holds no tracer (plain numbers, or the wrapper of plain numbers)."""
    for v in (value, getattr(value, "data", None), getattr(value, "magnitude", None)):
        assert type(v).__name__ not in _TRACER_NAMES, f"a tracer escaped into the returned value: {type(v)}"


def _check(prog):
    f, x = prog.fn, prog.x
    x_before = x.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        plain = np.asarray(f(x.copy()), dtype=float)
    truth = prog.reference if prog.reference is not None else f
    truth_eps = prog.ref_eps if prog.reference is not None else prog.eps
    if plain.ndim == 0:
        value, g = tg.value_and_grad(f)(x)
        _assert_no_tracer(value)
        np.testing.assert_allclose(np.asarray(value, dtype=float), plain, rtol=prog.value_rtol, atol=0)
        g_fd = _fd_jacobian(truth, x, truth_eps)
        np.testing.assert_allclose(g, g_fd, rtol=prog.rtol, atol=prog.atol)
        if prog.hess:
            H = tg.hessian(f)(x)
            if prog.reference is not None:
                H_fd = _reference_hessian(prog.reference, x, 1e-4)
                np.testing.assert_allclose(H, H_fd, rtol=prog.hess_rtol, atol=prog.hess_atol)
            elif x.size <= 6:
                H_fd = _fd_jacobian(tg.grad(f), x, prog.eps)
                np.testing.assert_allclose(H, H_fd, rtol=prog.hess_rtol, atol=prog.hess_atol)
            else:  # large programs: H @ d along two fixed directions
                D = np.random.default_rng(0).standard_normal((x.size, 2))
                HD_fd = _fd_jacobian(lambda t: tg.grad(f)(x + D @ t), np.zeros(2), prog.eps)
                np.testing.assert_allclose(H @ D, HD_fd, rtol=prog.hess_rtol, atol=prog.hess_atol * np.sqrt(x.size))
            np.testing.assert_allclose(H, H.T, rtol=1e-7, atol=prog.hess_atol)
            v = np.linspace(-1.0, 1.0, x.size)
            np.testing.assert_allclose(tg.hvp(f)(x, v), H @ v, rtol=1e-7, atol=1e-9 * max(1.0, np.abs(H).max()))
    else:
        J = tg.jacobian(f)(x)
        J_fd = _fd_jacobian(truth, x, truth_eps)
        np.testing.assert_allclose(J, J_fd, rtol=prog.rtol, atol=prog.atol)
        value, pullback = tg.vjp(f, x)
        _assert_no_tracer(value)
        np.testing.assert_allclose(np.asarray(value, dtype=float), plain, rtol=prog.value_rtol, atol=0)
        rows = []
        for i in range(plain.size):
            e = np.zeros(plain.shape)
            e.flat[i] = 1.0
            r = pullback(e)
            rows.append(np.asarray(r[0] if isinstance(r, tuple) else r))
        np.testing.assert_allclose(np.stack(rows).reshape(J.shape), J, rtol=1e-12, atol=1e-14)
        J_fwd = tg.jacfwd(f)(x)
        np.testing.assert_allclose(J_fwd, J, rtol=1e-8, atol=1e-10 * max(1.0, np.abs(J).max()))
    np.testing.assert_array_equal(x, x_before)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_program(name):
    _check(PROGRAMS[name])


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, raises=error, reason="clear tapegrad refusal"))
        for name, (_, error) in REFUSALS.items()
    ],
)
def test_refusal(name):
    prog, _ = REFUSALS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _check(prog)
