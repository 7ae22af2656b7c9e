"""Ordinary NumPy programs of the kinds users bring, differentiated unchanged.

Each is checked at first and second order (with batched cotangents) against
central finite differences.  None of them was written with tapegrad in mind:
loops, in-place filling of ``np.zeros_like`` buffers, fancy indexing, linear
algebra, FFTs and statistics, as they appear in scientific code.
"""

import numpy as np
import pytest

from tapegrad.testing import check_grads

rng = np.random.default_rng(7)
Z = rng.standard_normal(50)
X = rng.standard_normal((20, 3))
LABELS = (rng.random(20) > 0.5) * 2.0 - 1


def logistic_loss(w):
    z = X @ w
    return np.mean(np.log1p(np.exp(-LABELS * z))) + 0.5 * 1e-2 * w @ w


def nbody_potential(q):
    q = q.reshape(-1, 3)
    d = q[:, None, :] - q[None, :, :]
    r = np.sqrt((d**2).sum(-1) + np.eye(len(q)))
    iu = np.triu_indices(len(q), 1)
    return -np.sum(1.0 / r[iu])


def gaussian_nll_cholesky(theta):
    L = np.tril(theta.reshape(3, 3)) + 3 * np.eye(3)
    C = np.linalg.cholesky(L @ L.T)
    alpha = np.linalg.solve(C.T, np.linalg.solve(C, X.T))
    return 0.5 * np.sum(X.T * alpha) + X.shape[0] * np.sum(np.log(np.diag(C)))


def gaussian_nll_slogdet(mu, A):
    S = A @ A.T + np.eye(3)
    d = X - mu
    _, logdet = np.linalg.slogdet(S)
    q = np.einsum("ij,ij->i", d, np.linalg.solve(S, d.T).T)
    return 0.5 * (np.sum(q) + len(X) * logdet)


def option_price(params):
    s0, sigma = params
    paths = s0 * np.cumprod(np.exp(-0.5 * sigma**2 * 0.01 + sigma * 0.1 * Z))
    return np.mean(np.maximum(paths - 1.0, 0.0) * np.exp(-0.01))


def laplacian_energy(img):
    img = img.reshape(6, 6)
    p = np.pad(img, 1, mode="edge")
    k = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], float)
    out = np.zeros_like(img)
    for i in range(6):
        for j in range(6):
            out[i, j] = np.sum(p[i : i + 3, j : j + 3] * k)
    return np.sum(out**2)


def rk4_decay(y0):
    def rhs(y):
        return np.array([1.0, -1.0]) * y[::-1] - 0.1 * y

    y, h = y0.copy(), 0.1
    for _ in range(10):
        k1 = rhs(y)
        k2 = rhs(y + h / 2 * k1)
        k3 = rhs(y + h / 2 * k2)
        k4 = rhs(y + h * k3)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return np.sum(y**2)


def smoothness(f):
    x = np.linspace(0, 1, len(f))
    return np.trapezoid(np.gradient(f, x) ** 2, x) + np.interp(0.33, x, f)


def correlations(v):
    m = v.reshape(4, 5)
    return np.sum(np.corrcoef(m) ** 2) + np.sum(np.cov(m, rowvar=False))


def softplus_network(w):
    W1, W2 = w[:12].reshape(3, 4), w[12:16]
    h = np.logaddexp(0, X @ W1)
    return np.sum((h @ W2 - LABELS) ** 2)


def spectral_filter(x):
    return np.sum(np.fft.irfft(np.fft.rfft(x) * np.exp(-np.arange(x.size // 2 + 1)), n=x.size) ** 2)


def tight_binding_ground_state(onsite):
    n = onsite.size
    H = np.diag(onsite) + 0.3 * np.eye(n, k=1) + 0.3 * np.eye(n, k=-1)
    w, v = np.linalg.eigh(H)
    return w[0] + np.sum(np.abs(v[:, 0]) ** 4)


def robust_statistics(x):
    return np.std(x) + np.median(x) + np.percentile(x, 30) + np.var(x, ddof=1) + np.ptp(x)


def polynomial_fit(y):
    A = np.vander(np.linspace(0, 1, y.size), 3)
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    return np.sum(coef**2) + np.polyval(coef, 0.5)


PROGRAMS = [
    (logistic_loss, [rng.standard_normal(3)]),
    (nbody_potential, [rng.standard_normal(12) * 2]),
    (gaussian_nll_cholesky, [rng.standard_normal(9) * 0.3]),
    (gaussian_nll_slogdet, [np.zeros(3), np.eye(3) * 0.5 + 0.1]),
    (option_price, [np.array([1.1, 0.3])]),
    (laplacian_energy, [rng.standard_normal(36)]),
    (rk4_decay, [np.array([1.0, 0.5])]),
    (smoothness, [rng.standard_normal(9)]),
    (correlations, [rng.standard_normal(20)]),
    (softplus_network, [rng.standard_normal(16) * 0.5]),
    (spectral_filter, [rng.standard_normal(8)]),
    (tight_binding_ground_state, [rng.uniform(0.0, 2.0, 5)]),
    (robust_statistics, [rng.uniform(0.1, 0.9, 8)]),
    (polynomial_fit, [rng.standard_normal(6)]),
]


@pytest.mark.parametrize("program, args", PROGRAMS, ids=[p.__name__ for p, _ in PROGRAMS])
def test_program_first_and_second_order(program, args):
    check_grads(program, args, order=2)
