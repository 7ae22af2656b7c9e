"""A Cholesky factor the forward pass computed, reused by slogdet/det VJPs; triangular inverses.

``np.linalg.cholesky(a)`` is remembered (large outputs only, see ``dispatch.PRUNE_BYTES``),
so ``slogdet(a)`` / ``det(a)`` of the very same, exactly symmetric ``a`` invert it as
``inv(L)^T inv(L)``, and the Cholesky VJP of the same sweep reuses ``inv(L)``.  Every
answer here is compared with the route that does not reuse anything.
"""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.rules import linalg as linalg_rules
from tapegrad.testing import check_grads

RNG = np.random.default_rng(11)
N = 100  # 100 x 100 float64 is 80 kB: above the size from which outputs are remembered


def spd(n, dtype=np.float64):
    x = RNG.standard_normal((n, n))
    return (x @ x.T / n + np.eye(n)).astype(dtype)


@pytest.fixture
def inverses(monkeypatch):
    """Count the inverses of lower factors formed (each a whole recursive inverse)."""
    calls = []
    real = linalg_rules._lower_inverse

    def spy(t):
        calls.append(t.shape)
        return real(t)

    monkeypatch.setattr(linalg_rules, "_lower_inverse", spy)
    return calls


# ---------------------------------------------------------------- the triangular inverse
@pytest.mark.parametrize("n", [1, 2, 64, 65, 130, 203, 401, 600])  # by block rows up to 512, halving above
@pytest.mark.parametrize("lower", [True, False])
def test_tri_inverse_matches_the_lu_inverse(n, lower):
    a = RNG.standard_normal((n, n)) + 2 * np.sqrt(n) * np.eye(n)
    t = np.tril(a) if lower else np.triu(a)
    got = linalg_rules._tri_inverse(t, lower)
    np.testing.assert_allclose(got, np.linalg.inv(t), rtol=1e-10, atol=1e-13)
    other = np.triu(got, 1) if lower else np.tril(got, -1)
    assert not other.any()  # the other triangle is exactly zero
    # a Fortran-ordered matrix (as a transposed view is) gives the same numbers, up to BLAS's rounding
    np.testing.assert_allclose(linalg_rules._tri_inverse(np.asfortranarray(t), lower), got, rtol=1e-12, atol=1e-15)


def test_tri_inverse_stacked_and_float32():
    t = np.tril(RNG.standard_normal((3, 130, 130))) + 20 * np.eye(130)
    np.testing.assert_allclose(linalg_rules._tri_inverse(t, True), np.linalg.inv(t), rtol=1e-10, atol=1e-13)
    t32 = t.astype(np.float32)
    got = linalg_rules._tri_inverse(t32, True)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.linalg.inv(t), rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------- reuse in a sweep
def _nlml(theta, sqdist, y, fresh_slogdet=False):
    """The benchmark's Gaussian-process likelihood; ``fresh_slogdet`` hides the factor from slogdet."""
    n = y.shape[0]
    k = np.exp(theta[0]) * np.exp(-0.5 * sqdist * np.exp(-2.0 * theta[1])) + np.exp(theta[2]) * np.eye(n)
    z = np.linalg.solve(np.linalg.cholesky(k), y)
    logdet = np.linalg.slogdet(k + 0.0 if fresh_slogdet else k)[1]
    return 0.5 * (z @ z) + 0.5 * logdet


def _gp_data(n=N):
    x = np.linspace(0.0, 3.0, n)
    return (x[:, None] - x[None, :]) ** 2, np.sin(2 * x)


def test_gp_gradient_reuses_one_factor_inverse_and_matches_the_lu_route(inverses):
    sqdist, y = _gp_data()
    theta = np.array([0.2, -0.5, -1.0])
    reused = tg.grad(_nlml)(theta, sqdist, y)
    assert len(inverses) == 1  # formed once, used by slogdet's and cholesky's VJPs
    fresh = tg.grad(_nlml)(theta, sqdist, y, True)
    assert len(inverses) == 1  # slogdet of another object: the LU route, and nothing to share
    np.testing.assert_allclose(reused, fresh, rtol=1e-9, atol=1e-11)


def test_gp_first_and_second_order_against_finite_differences():
    sqdist, y = _gp_data()
    check_grads(lambda t: _nlml(t, sqdist, y), [np.array([0.1, -0.7, -1.5])], order=2)


def test_slogdet_and_det_gradients_are_the_inverse():
    a = spd(N)

    def f(m):
        lower = np.linalg.cholesky(m)
        return np.linalg.slogdet(m)[1] + np.sum(lower[:, 0])

    def f_fresh(m):
        return np.linalg.slogdet(m + 0.0)[1] + np.sum(np.linalg.cholesky(m)[:, 0])

    got = tg.grad(f)(a)
    np.testing.assert_allclose(got, tg.grad(f_fresh)(a), rtol=1e-9, atol=1e-11)
    # closed form of the slogdet part: d log det(a) / da = inv(a).T
    only_logdet = tg.grad(lambda m: np.linalg.slogdet(m)[1] + 0.0 * np.sum(np.linalg.cholesky(m)))(a)
    np.testing.assert_allclose(only_logdet, np.linalg.inv(a).T, rtol=1e-9, atol=1e-11)
    small = 0.1 * a  # keeps det(a) finite
    only_det = tg.grad(lambda m: np.linalg.det(m) + 0.0 * np.sum(np.linalg.cholesky(m)))(small)
    np.testing.assert_allclose(only_det, np.linalg.det(small) * np.linalg.inv(small).T, rtol=1e-8)


def test_a_matrix_that_is_not_symmetric_keeps_the_lu_route(inverses):
    # cholesky reads the lower triangle only, so L L^T is not a: the factor must not be used.
    a = spd(N)
    a[0, 7] += 0.25

    def f(m):
        return np.linalg.slogdet(m)[1] + np.sum(np.linalg.cholesky(m) ** 2)

    got = tg.grad(f)(a)
    assert not inverses
    cholesky_part = tg.grad(lambda m: np.sum(np.linalg.cholesky(m) ** 2))(a)
    np.testing.assert_allclose(got, np.linalg.inv(a).T + cholesky_part, rtol=1e-9, atol=1e-11)


def test_an_upper_factor_is_not_mistaken_for_a_lower_one(inverses):
    a = spd(N)

    def f(m):
        upper = np.linalg.cholesky(m, upper=True)
        return np.linalg.slogdet(m)[1] + np.sum(upper[0] ** 2)

    got = tg.grad(f)(a)
    assert not inverses  # a call with keywords is not remembered
    fresh = tg.grad(lambda m: np.linalg.slogdet(m + 0.0)[1] + np.sum(np.linalg.cholesky(m, upper=True)[0] ** 2))(a)
    np.testing.assert_allclose(got, fresh, rtol=1e-9, atol=1e-11)


def test_jacobian_rows_equal_single_vjps():
    a = spd(N)

    def f(m):
        lower = np.linalg.cholesky(m)
        return np.stack([np.linalg.slogdet(m)[1], np.sum(lower[:, 0] ** 2), np.sum(lower[-1])])

    jac = tg.jacobian(f)(a)
    rows = np.stack([tg.vjp(f, a)[1](e)[0] for e in np.eye(3)])
    np.testing.assert_allclose(jac, rows, rtol=1e-12, atol=1e-15)
    fresh = tg.jacobian(lambda m: f(m) + 0.0 * np.linalg.slogdet(m + 0.0)[1])(a)
    np.testing.assert_allclose(jac, fresh, rtol=1e-9, atol=1e-11)


def test_float32_stays_float32():
    a = spd(130, np.float32)  # 130 x 130 float32: large enough to be remembered

    def f(m):
        return np.linalg.slogdet(m)[1] + np.sum(np.linalg.cholesky(m)[:, 0])

    got = tg.grad(f)(a)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, tg.grad(f)(a.astype(np.float64)), rtol=2e-3, atol=2e-4)


def test_a_ufunc_call_with_keywords_is_not_remembered():
    # cos(x, dtype=float32) is not cos(x): sin's VJP must not reuse it.
    x = np.linspace(0.1, 1.0, 20_000)
    got = tg.grad(lambda v: np.sum(np.sin(v)) + 0.0 * np.sum(np.cos(v, dtype=np.float32)))(x)
    np.testing.assert_array_equal(got, np.cos(x))


@pytest.mark.parametrize("rhs_shape", [(N,), (N, 3)])
def test_solve_with_the_factored_matrix_uses_the_factor(monkeypatch, rhs_shape):
    # solve(a, b) after cholesky(a): the VJPs solve with L twice instead of a new LU.
    a, b = spd(N), RNG.standard_normal(rhs_shape)
    solves = []
    real = linalg_rules._blocked_tri_solve

    def spy(t, rhs, lower):
        solves.append(t.shape)
        return real(t, rhs, lower)

    monkeypatch.setattr(linalg_rules, "_blocked_tri_solve", spy)

    def f(m, v):
        return np.sum(np.linalg.solve(m, v) ** 2) + np.sum(np.linalg.cholesky(m)[:, 0])

    def f_fresh(m, v):
        return np.sum(np.linalg.solve(m + 0.0, v) ** 2) + np.sum(np.linalg.cholesky(m)[:, 0])

    got = tg.grad(f, argnums=(0, 1))(a, b)
    assert solves  # the factor was used
    want = tg.grad(f_fresh, argnums=(0, 1))(a, b)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-11)


def test_solve_jacobian_rows_equal_single_vjps_with_the_factor():
    a, b = spd(N), RNG.standard_normal(N)

    def f(m):
        return np.linalg.solve(m, b) + 0.0 * np.sum(np.linalg.cholesky(m))

    jac = tg.jacobian(f)(a)
    _, pullback = tg.vjp(f, a)
    for i in (0, 37, N - 1):  # equal to rounding: a batch of columns is one blocked solve
        np.testing.assert_allclose(jac[i], pullback(np.eye(N)[i])[0], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(jac[5], tg.jacobian(lambda m: np.linalg.solve(m, b))(a)[5], rtol=1e-9, atol=1e-12)


def test_stacked_matrices_reuse_their_factors_and_match_the_lu_route(inverses):
    a = np.stack([spd(N) for _ in range(3)])
    b = RNG.standard_normal((3, N, 2))

    def f(m, fresh=False):
        lower = np.linalg.cholesky(m)
        other = m + 0.0 if fresh else m
        return (np.sum(np.linalg.slogdet(other)[1]) + np.sum(np.linalg.solve(other, b) ** 2)
                + np.sum(lower[..., 0] ** 2))

    got = tg.grad(f)(a)
    assert inverses and inverses[0] == (3, N, N)
    np.testing.assert_allclose(got, tg.grad(lambda m: f(m, True))(a), rtol=1e-9, atol=1e-11)


def test_nan_in_the_matrix_keeps_the_lu_route(inverses):
    # NaN != NaN: the symmetry check fails, so the factor is never trusted.
    a = spd(N)
    a[3, 3] = np.nan
    with np.errstate(invalid="ignore"):  # NumPy's cholesky returns NaNs here, it does not raise
        got = tg.grad(lambda m: np.linalg.slogdet(m)[1] + np.sum(np.linalg.cholesky(m)))(a)
    assert not inverses
    assert np.isnan(got).any()


# ---------------------------------------------------------------- log det from the factor, solve(K, y)
def _nlml_cholesky(theta, sqdist, y, fresh=False):
    """log det K from cholesky(K), the data term from solve(K, y) on the same K (issue 24's GP class)."""
    n = y.shape[0]
    k = np.exp(theta[0]) * np.exp(-0.5 * sqdist * np.exp(-2.0 * theta[1])) + np.exp(theta[2]) * np.eye(n)
    logdet = 2.0 * np.sum(np.log(np.diagonal(np.linalg.cholesky(k))))
    return 0.5 * (y @ np.linalg.solve(k + 0.0 if fresh else k, y)) + 0.5 * logdet


def test_log_det_from_the_factor_and_solve_share_one_inverse(inverses):
    sqdist, y = _gp_data()
    theta = np.array([0.2, -0.5, -1.0])
    got = tg.grad(_nlml_cholesky)(theta, sqdist, y)
    assert len(inverses) == 1  # solve's VJP forms inv(L), the Cholesky VJP reuses it
    np.testing.assert_allclose(got, tg.grad(_nlml_cholesky)(theta, sqdist, y, True), rtol=1e-9, atol=1e-11)
    # the closed form: 0.5 tr((K^-1 - a a^T) dK)
    n = y.size
    s, ell2, noise = np.exp(theta[0]), np.exp(2 * theta[1]), np.exp(theta[2])
    kse = s * np.exp(-0.5 * sqdist / ell2)
    kinv = np.linalg.inv(kse + noise * np.eye(n))
    inner = kinv - np.outer(kinv @ y, kinv @ y)
    want = [0.5 * np.sum(inner * dk) for dk in (kse, kse * sqdist / ell2, noise * np.eye(n))]
    np.testing.assert_allclose(got, want, rtol=1e-9)
    check_grads(lambda t: _nlml_cholesky(t, sqdist, y), [theta], order=2)


@pytest.mark.parametrize("sign", ["positive", "mixed", "zero"])
def test_a_diagonal_cotangent_of_the_factor_matches_the_general_route(sign):
    a = spd(N)
    c = {"positive": np.abs(RNG.standard_normal(N)), "mixed": RNG.standard_normal(N), "zero": np.zeros(N)}[sign]
    c[::7] = 0.0 if sign != "positive" else c[::7]
    got = tg.grad(lambda m: np.sum(c * np.log(np.diagonal(np.linalg.cholesky(m)))))(a)
    # the same cotangent with one off-diagonal entry times zero: not diagonal, so the general route
    general = tg.grad(lambda m: np.sum(c * np.log(np.diagonal(np.linalg.cholesky(m))))
                      + 0.0 * np.linalg.cholesky(m)[5, 2])(a)
    np.testing.assert_allclose(got, general, rtol=1e-10, atol=1e-13)
    lo = np.linalg.cholesky(a)
    li = np.linalg.inv(lo)
    m = li.T @ np.diag(0.5 * c) @ li  # L^-T phi(L^T diag(c / diag(L))) L^-1
    np.testing.assert_allclose(got, np.tril(m + m.T) - np.diag(np.diag(m)), rtol=1e-10, atol=1e-13)


def test_cholesky_vjp_first_then_solve_forms_no_inverse(inverses):
    a, b = spd(N), RNG.standard_normal(N)

    def f(m):  # solve recorded first: the sweep meets cholesky's (general) VJP first
        return np.sum(np.linalg.solve(m, b) ** 2) + np.sum(np.linalg.cholesky(m)[:, 0])

    got = tg.grad(f)(a)
    assert not inverses
    want = tg.grad(lambda m: np.sum(np.linalg.solve(m + 0.0, b) ** 2) + np.sum(np.linalg.cholesky(m)[:, 0]))(a)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("kind", ["spd", "indefinite", "not symmetric"])
def test_slogdet_and_solve_of_one_matrix_share_its_inverse(monkeypatch, kind):
    a = spd(N)
    if kind == "indefinite":
        a = a - 2.0 * np.eye(N)  # symmetric, cholesky refuses: the LU inverse
    elif kind == "not symmetric":
        a[0, 7] += 0.25
    b = RNG.standard_normal((N, 2))
    made = []
    real = linalg_rules._general_inverse
    monkeypatch.setattr(linalg_rules, "_general_inverse", lambda m: made.append(1) or real(m))

    def f(m, fresh=False):
        return np.linalg.slogdet(m)[1] + np.sum(np.linalg.solve(m + 0.0 if fresh else m, b) ** 2)

    got = tg.grad(f)(a)
    assert len(made) == 1
    np.testing.assert_allclose(got, tg.grad(f)(a, True), rtol=1e-9, atol=1e-11)
    inv = np.linalg.inv(a)
    x = inv @ b
    np.testing.assert_allclose(got, inv.T - 2 * (inv.T @ x) @ x.T, rtol=1e-8, atol=1e-10)  # d/dm sum(x^2), x = m^-1 b
    jac = tg.jacobian(lambda m: np.stack([np.linalg.slogdet(m)[1], np.sum(np.linalg.solve(m, b))]))(a)
    _, pullback = tg.vjp(lambda m: np.stack([np.linalg.slogdet(m)[1], np.sum(np.linalg.solve(m, b))]), a)
    np.testing.assert_allclose(jac[1], pullback(np.array([0.0, 1.0]))[0], rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("n", [1, 5, 128, 129, 203, 400, 600])  # one syrk up to 512, halving above
def test_lower_gram_is_exactly_symmetric_and_matches_the_full_product(n):
    r = np.tril(RNG.standard_normal((n, n)))
    got = linalg_rules._lower_gram(r)
    assert np.array_equal(got, got.T)
    np.testing.assert_allclose(got, r.T @ r, rtol=1e-12, atol=1e-12 * n)
    # the triangle of a symmetric m: one product with fixed weights, the same bits as _tri_cotangent
    np.testing.assert_array_equal(got * linalg_rules._twice_below(n, np.dtype(np.float64)),
                                  linalg_rules._tri_cotangent(got, True))
