"""In-place writes through views made by calls (transpose, reshape, swapaxes, ...), as NumPy does.

scikit-learn's ``svd_flip`` writes through a transpose (``Vt = eigvecs.T; Vt *= signs``).
Such a write is replayed onto the array the view came from, as for a slice; each
program below runs on plain NumPy arrays too, and tapegrad's value, gradient and
Hessian must match NumPy's value and central finite differences.
"""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg

X = np.array([0.5, -1.0, 2.0, 0.3, -0.7, 1.1])


def _svd_flip_like(x):
    m = np.outer(x[:3], x[3:]) + np.eye(3)
    vt = m.T
    signs = np.array([1.0, -1.0, 1.0])
    vt *= signs  # changes m
    return np.sum(m**2 * np.arange(9.0).reshape(3, 3)) + np.sum(m[0] * x[:3])


def _transpose_item(x):
    y = x.reshape(2, 3) * 1.0
    y.T[2, 0] = x[0] ** 2  # y[0, 2]
    return np.sum(np.sin(y) * x.reshape(2, 3))


def _reshape_strided(x):
    y = np.cos(x)
    flat = y.reshape(3, 2)
    flat[:, 1] *= x[:3]  # y[1], y[3], y[5]
    return np.sum(y * x)


def _swapaxes_slice(x):
    y = np.tile(x, 2).reshape(2, 3, 2) * 1.0
    s = np.swapaxes(y, 0, 2)  # shape (2, 3, 2)
    s[1, :, 0] = np.tanh(x[3:])  # y[0, :, 1]
    return np.sum(y**2 * np.arange(12.0).reshape(2, 3, 2))


def _ravel_of_transpose(x):
    y = x.reshape(3, 2) * 1.0
    t = y.T  # a view; its ravel is a copy in NumPy (not contiguous)
    r = np.ravel(t)
    r[0] = 100.0  # a copy: y unchanged
    u = t[1:]  # a slice of the transposed view
    u *= x[::2]  # y[:, 1]
    return np.sum(y * x.reshape(3, 2)) + np.sum(r)


def _moveaxis_expand_squeeze(x):
    y = x.reshape(1, 2, 3) * 1.0
    m = np.moveaxis(y, -1, 0)  # (3, 1, 2)
    m[0] += x[:2]  # y[0, :, 0]
    del m  # else the next write would change m too, which tapegrad refuses (as for slices)
    e = np.expand_dims(np.squeeze(y, 0), 0)
    e[0, 1, 1] = x[4] * x[5]  # y[0, 1, 1]
    return np.sum(np.exp(y) * x.reshape(1, 2, 3))


def _written_after_the_view_is_gone(x):
    y = x * 2.0
    v = y.reshape(2, 3).T
    v[0] = np.sin(x[:2])
    del v
    y[1] += 1.0  # no live view any more
    return np.sum(y**3)


PROGRAMS = {
    "svd_flip_like": _svd_flip_like,
    "transpose_item": _transpose_item,
    "reshape_strided": _reshape_strided,
    "swapaxes_slice": _swapaxes_slice,
    "ravel_of_transpose": _ravel_of_transpose,
    "moveaxis_expand_squeeze": _moveaxis_expand_squeeze,
    "written_after_the_view_is_gone": _written_after_the_view_is_gone,
}


def _fd(f, x, h=1e-6):
    out = np.empty_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        out[i] = (f(x + e) - f(x - e)) / (2 * h)
    return out


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_writes_through_views_follow_numpy(name):
    f = PROGRAMS[name]
    x = X.copy()
    value, grad = tg.value_and_grad(f)(x)
    assert value == pytest.approx(f(X.copy()), rel=1e-14)
    np.testing.assert_allclose(grad, _fd(f, X), rtol=1e-6, atol=1e-7)
    hess = tg.hessian(f)(x)
    np.testing.assert_allclose(hess, np.stack([_fd(lambda v, i=i: tg.grad(f)(v)[i], X) for i in range(X.size)]),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(x, X)  # the caller's array is never written


def test_read_only_views_refuse_like_numpy():
    def broadcast(x):
        b = np.broadcast_to(x[:2] * 1.0, (3, 2))
        b[0, 0] = 1.0
        return np.sum(b)

    def broadcast_kept(x):
        base = x[:2] * 1.0
        b = np.broadcast_to(base, (3, 2))
        b[1, 1] += 1.0
        return np.sum(b * base)

    for f in (broadcast, broadcast_kept):
        with pytest.raises(ValueError, match="read-only"):
            f(X.copy())  # NumPy
        with pytest.raises(ValueError, match="read-only"):
            tg.grad(f)(X)


def test_a_write_into_the_base_under_a_live_view_is_refused_as_for_slices():
    def stale(x):
        y = x * 1.0
        t = y.reshape(2, 3).T
        y[0] = 5.0  # NumPy changes t[0, 0] too
        return np.sum(t)

    with pytest.raises(tg.GradientDroppedError, match="overlaps a view"):
        tg.grad(stale)(X)

    def disjoint(x):
        y = x * 1.0
        t = y[:3].reshape(3, 1)
        y[4] = 5.0  # not an element of t
        return np.sum(t * y[:3])

    np.testing.assert_allclose(tg.grad(disjoint)(X), _fd(disjoint, X), rtol=1e-6)


def test_complex_parts_stay_refused():
    def real_part(x):
        z = x * (1.0 + 1.0j)
        r = np.real(z)
        r *= 2.0
        return np.sum(np.abs(z))

    with pytest.raises(tg.GradientDroppedError, match="cannot map"):
        tg.grad(real_part)(X)


def test_a_view_of_a_zero_dimensional_array():
    def f(x):
        y = np.asarray(x[0:1].reshape(()) * 1.0)
        r = y.reshape(1)
        r[0] = x[1] * 5.0  # y becomes 5 x1
        return y * x[2]

    assert f(X.copy()) == pytest.approx(5 * X[1] * X[2])
    np.testing.assert_allclose(tg.grad(f)(X), [0.0, 5 * X[2], 5 * X[1], 0.0, 0.0, 0.0])
