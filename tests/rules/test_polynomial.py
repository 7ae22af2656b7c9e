"""Derivatives of the legacy polynomial functions: poly, roots, polyadd, polysub,
polymul, polyder, polyint, polydiv, polyfit."""

import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import check_grads

from .helpers import assert_same_as_numpy as _assert_same, traced_value as _value

rng = np.random.default_rng(5)
P4, P2 = rng.standard_normal(4), rng.standard_normal(2)




# ----------------------------------------------------------------- add, sub, mul
@pytest.mark.parametrize("fun", [np.polyadd, np.polysub, np.polymul], ids=lambda f: f.__name__)
def test_add_sub_mul(fun):
    for a, b in [(P4, P2), (P2, P4), (P4, P4[::-1]), (np.array(1.5), P2)]:
        _assert_same(_value(fun, a, b), fun(a, b))
        check_grads(fun, [a, b], order=2)
    c = P2 + 1j * P2[::-1]
    check_grads(fun, [P4, c], order=2)
    # poly1d in, poly1d out
    kinds = []

    def g(t):
        out = fun(np.poly1d(P2), t)
        kinds.append(type(out))
        return out.coeffs

    _assert_same(_value(g, P4), fun(np.poly1d(P2), P4).coeffs)
    assert kinds == [np.poly1d]
    check_grads(g, [P4], order=2)


def test_add_mul_closed_form_and_dtype():
    np.testing.assert_allclose(tg.jacobian(lambda t: np.polysub(P4, t))(P2), -np.eye(4)[:, 2:])
    # d/da (a * b)(x) = b(x) x^(deg a - k): at x = 1 the sum of the product's coefficients.
    g = tg.grad(lambda t: np.sum(np.polymul(t, P2)))(P4)
    np.testing.assert_allclose(g, np.full(4, P2.sum()))
    # poly1d trims leading zeros before multiplying; the trimmed entries get no gradient
    lead = np.r_[0.0, P4]
    _assert_same(_value(lambda t: np.polymul(t, P2), lead), np.polymul(lead, P2))
    assert tg.grad(lambda t: np.sum(np.polymul(t, P2)))(lead)[0] == 0
    p32 = P4.astype(np.float32)
    for fun in (np.polyadd, np.polysub, np.polymul):
        assert _value(lambda t: fun(t, t[:2]), p32).dtype == np.float32
        assert tg.grad(lambda t: np.sum(fun(t, t[:2]) ** 2))(p32).dtype == np.float32


# ----------------------------------------------------------------- der, int
@pytest.mark.parametrize("m", [0, 1, 2, 3])
def test_polyder_polyint(m):
    f = lambda t: np.polyder(t, m)
    _assert_same(_value(f, P4), f(P4))
    check_grads(f, [P4], order=2)
    k = rng.standard_normal(max(m, 1))
    g = lambda t, c: np.polyint(t, m, c)
    _assert_same(_value(g, P4, k), g(P4, k))
    check_grads(g, [P4, k], order=2)
    check_grads(lambda t, c: np.polyint(t, m, c), [P4, np.array(0.7)], order=2)


def test_polyder_polyint_closed_form():
    # polyder of the integral is the identity; d/dk of the integral is a monomial basis
    np.testing.assert_allclose(tg.jacobian(lambda t: np.polyder(np.polyint(t, 2), 2))(P4), np.eye(4), atol=1e-15)
    # (NumPy dispatches polyint on p only, so p is traced along)
    jac = tg.jacobian(lambda t, c: np.polyint(t, 2, c), argnums=(0, 1))(P4, np.zeros(2))[1]
    np.testing.assert_allclose(jac[-2:], np.eye(2))
    assert tg.grad(lambda t: np.sum(np.polyint(t)))(P4.astype(np.float32)).dtype == np.float32
    with pytest.raises(ValueError):
        tg.grad(lambda t: np.sum(np.polyder(t, -1)))(P4)


# ----------------------------------------------------------------- polydiv
@pytest.mark.parametrize("n,m", [(6, 3), (4, 4), (5, 1), (2, 4)])
def test_polydiv(n, m):
    u, v = rng.standard_normal(n), rng.standard_normal(m)
    traced, plain = _value(np.polydiv, u, v), np.polydiv(u, v)
    for t, p in zip(traced, plain):
        np.testing.assert_array_equal(t, p)  # the same long division, step for step
    check_grads(np.polydiv, [u, v], order=2)


def test_polydiv_closed_form_and_dtype():
    # (x^2 - 3x + 2) / (x - c): quotient x + (c - 3), remainder c^2 - 3c + 2.
    u = np.array([1.0, -3.0, 2.0])
    jac_q, jac_r = tg.jacobian(lambda c: np.polydiv(u, np.stack([np.ones(()), -c])))(np.array(0.5))
    np.testing.assert_allclose(jac_q, [0.0, 1.0])
    np.testing.assert_allclose(jac_r, [2 * 0.5 - 3])
    # exact division: the remainder is trimmed to [0] and carries no gradient
    q, r = _value(np.polydiv, np.polymul(P2, P4), P4)
    np.testing.assert_allclose(q, P2)
    check_grads(lambda a, b: np.polydiv(a, b)[0], [np.polymul(P2, P4), P4], order=2)
    z = P4 + 1j * P4[::-1]
    check_grads(np.polydiv, [z, P2], order=2)
    p32 = P4.astype(np.float32)
    assert all(o.dtype == np.float32 for o in _value(lambda t: np.polydiv(t, t[:2] + 1), p32))
    assert tg.grad(lambda t: np.sum(np.polydiv(t, t[:2] + 1)[0]))(p32).dtype == np.float32


# ----------------------------------------------------------------- poly, roots
def test_poly():
    z = rng.standard_normal(4)
    _assert_same(_value(np.poly, z), np.poly(z))
    check_grads(np.poly, [z], order=2)
    zc = z + 1j * rng.standard_normal(4)
    _assert_same(_value(np.poly, zc), np.poly(zc))
    check_grads(np.poly, [zc], order=2)
    pair = np.array([1 + 2j, 1 - 2j, 3.0])  # conjugate-closed: real coefficients, as in NumPy
    _assert_same(_value(np.poly, pair), np.poly(pair))
    m = rng.standard_normal((3, 3))
    _assert_same(_value(np.poly, m), np.poly(m), rtol=1e-10)
    check_grads(np.poly, [m], order=1)  # eigvals: first order only
    # d/dz_i prod (x - z_j) evaluated at x: -prod_{j != i} (x - z_j)
    x = 0.3
    g = tg.grad(lambda t: np.polyval(np.poly(t), x))(z)
    np.testing.assert_allclose(g, [-np.prod(np.delete(x - z, i)) for i in range(4)])
    assert _value(np.poly, z.astype(np.float32)).dtype == np.float32
    assert tg.grad(lambda t: np.sum(np.poly(t)))(z.astype(np.float32)).dtype == np.float32


def test_roots():
    p = np.poly([1.0, 2.0, -3.0, 0.5])
    _assert_same(_value(np.roots, p), np.roots(p))
    check_grads(np.roots, [p], order=2)
    pc = rng.standard_normal(5)  # complex roots of a real polynomial
    assert np.iscomplexobj(np.roots(pc))
    check_grads(np.roots, [pc], order=2)
    check_grads(np.roots, [pc + 1j * rng.standard_normal(5)], order=2)
    check_grads(np.roots, [np.r_[pc, 0.0]], order=2)  # one trailing zero: a simple root at 0


def test_roots_closed_form_and_multiple_roots():
    # p = x^2 + b x + c with roots r: dr/dc = -1 / p'(r) = -1 / (2 r + b)
    b, c = -1.0, -6.0
    r = np.roots([1.0, b, c])
    jac = tg.jacobian(np.roots)(np.array([1.0, b, c]))
    np.testing.assert_allclose(jac[:, 2], -1 / (2 * r + b))
    np.testing.assert_allclose(jac[:, 1], -r / (2 * r + b))
    # a double root at 0: its own derivative is undefined (inf/nan), the simple roots' are not
    q = np.array([1.0, -3.0, 2.0, 0.0, 0.0])
    with np.errstate(all="ignore"):
        jq = tg.jacobian(np.roots)(q)
        assert np.all(np.isfinite(jq[:2])) and not np.all(np.isfinite(jq[2:]))
    # roots 2 and 1 of x^4 - 3x^3 + 2x^2: dr/dp_k = -r^(4-k) / p'(r), p'(r) = 4r^3 - 9r^2 + 4r
    for row, r in zip(jq[:2], (2.0, 1.0)):
        np.testing.assert_allclose(row, -(r ** np.arange(4, -1, -1)) / (4 * r**3 - 9 * r**2 + 4 * r))
    # a leading zero coefficient does not change the roots
    _assert_same(_value(np.roots, np.r_[0.0, q[:3]]), np.roots(q[:3]))
    p32 = np.array([1.0, -3.0, 2.0], dtype=np.float32)
    assert _value(np.roots, p32).dtype == np.roots(p32).dtype
    assert tg.grad(lambda t: np.sum(np.roots(t)))(p32).dtype == np.float32


# ----------------------------------------------------------------- polyfit
XS = np.linspace(-1.0, 1.0, 8)
YS = rng.standard_normal(8)


@pytest.mark.parametrize("kwargs", [{}, {"cov": True}, {"cov": "unscaled"}, {"w": rng.random(8) + 0.5}])
def test_polyfit(kwargs):
    f = lambda x, y: np.polyfit(x, y, 2, **kwargs)
    _assert_same(_value(f, XS, YS), f(XS, YS), rtol=1e-10)
    check_grads(f, [XS, YS], order=2)
    y2 = np.stack([YS, YS[::-1] ** 2], axis=1)
    _assert_same(_value(f, XS, y2), f(XS, y2), rtol=1e-10)
    check_grads(f, [XS, y2], order=2)


def test_polyfit_full_weights_and_closed_form():
    f = lambda x, y, w: np.polyfit(x, y, 3, full=True, w=w)
    w = rng.random(8) + 0.5
    traced, plain = _value(f, XS, YS, w), f(XS, YS, w)
    for t, p in zip(traced, plain):
        np.testing.assert_allclose(t, p, rtol=1e-10)
    check_grads(lambda x, y, w: f(x, y, w)[:2] + f(x, y, w)[3:4], [XS, YS, w], order=2)
    # the fit is linear in y: its Jacobian is the pseudo-inverse of the Vandermonde matrix
    jac = tg.jacobian(lambda y: np.polyfit(XS, y, 2))(YS)
    np.testing.assert_allclose(jac, np.linalg.pinv(np.vander(XS, 3)), atol=1e-12)
    x32, y32 = XS.astype(np.float32), YS.astype(np.float32)
    assert _value(lambda y: np.polyfit(x32, y, 2), y32).dtype == np.polyfit(x32, y32, 2).dtype
    assert tg.grad(lambda y: np.sum(np.polyfit(x32, y, 2)))(y32).dtype == np.float32
    with pytest.raises(TypeError):
        tg.grad(lambda y: np.sum(np.polyfit(XS[:3], y, 1)))(YS)


def test_polyfit_rank_warning_points_at_caller():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tg.grad(lambda t: np.sum(np.polyfit(np.arange(3.0), t, 4)))(np.array([1.0, 2.0, 0.0]))
    ranks = [w for w in caught if issubclass(w.category, np.exceptions.RankWarning)]
    assert ranks and all(w.filename == __file__ for w in ranks)


def test_roots_second_order_where_a_cotangent_vanishes():
    # Regression: a root at 0 gets cotangent 2 r = 0 from sum(r**2); the VJP must stay
    # linear in that cotangent for the Hessian to be right.
    p = np.r_[np.poly([1.0, 2.0, -3.0]), 0.0]  # roots 1, 2, -3 and 0
    f = lambda p: np.sum(np.roots(p) ** 2)  # noqa: E731
    g = tg.grad(f)
    eps = 1e-6
    fd = np.stack([(g(p + eps * e) - g(p - eps * e)) / (2 * eps) for e in np.eye(p.size)])
    np.testing.assert_allclose(tg.hessian(f)(p), fd, rtol=1e-5, atol=1e-6)


def test_tracer_and_numpy_polynomial_objects_defer_as_nep13_asks():
    # Polynomial sets __array_ufunc__ = None: x + p must become p.__radd__(x), not a NumPy error.
    P = np.polynomial.Polynomial
    x0 = np.array([0.7, 1.3])

    def f(x):
        return (x[0] + P([1.0, 2.0]) * x[1]).coef

    np.testing.assert_array_equal(tg.jacobian(f)(x0), np.array([[1.0, 1.0], [0.0, 2.0]]))
    check_grads(lambda x: P.fit(np.arange(4.0), np.concatenate([x, x**2]), 2)(np.array([0.5, 2.5])), (x0,), order=2)
