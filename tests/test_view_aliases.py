"""Functions whose NumPy result is a view (or the array itself): writes through them, reads after writes.

Found by helper-23: np.flip (and fliplr, flipud, rot90), np.unstack, np.trim_zeros and
x.astype(same dtype, copy=False) returned unlinked copies, and np.nan_to_num(copy=False) did
not write into its argument: the value and the gradient were silently wrong.  Each is now
linked (a write through it reaches the array, or is refused while a view is alive).
"""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tests._wrapped_checks import central_jacobian

X = np.array([0.3, -1.2, 0.7, 2.1, -0.4, 1.5])
W = np.arange(6.0)


def write_through_flip(x):
    y = x * 1.0
    np.flip(y)[0] = x[0] ** 2
    return np.sum(y * W)


def write_through_flipud(x):
    m = (x * 1.0).reshape(3, 2)
    np.flipud(m)[0, 1] = x[2] ** 3
    return np.sum(m * W.reshape(3, 2))


def write_through_rot90(x):
    m = (x * 1.0).reshape(2, 3)
    np.rot90(m)[0, 0] = 3 * x[0]
    return np.sum(m * W.reshape(2, 3))


def write_through_rot90_zero_turns(x):
    m = (x * 1.0).reshape(2, 3)
    np.rot90(m, 4)[1, 1] = x[0] * x[5]
    return np.sum(m**2)


def write_through_unstack(x):
    m = (x * 1.0).reshape(2, 3)
    np.unstack(m)[0][1] = 7 * x[3]
    return np.sum(m * W.reshape(2, 3))


def write_through_trim_zeros(x):
    y = x * 1.0
    t = np.trim_zeros(y)
    t[2] = 9 * x[4]
    return np.sum(y * W)


def write_through_astype_no_copy(x):
    y = x * 1.0
    y.astype(np.float64, copy=False)[1] = 9 * x[4]
    return np.sum(y * W)


def nan_to_num_in_place(x):
    y = x * 1.0
    y[1] = np.nan
    np.nan_to_num(y, copy=False, nan=0.5)
    return np.sum(y * W * x)


PROGRAMS = [write_through_flip, write_through_flipud, write_through_rot90, write_through_rot90_zero_turns,
            write_through_unstack, write_through_trim_zeros, write_through_astype_no_copy, nan_to_num_in_place]


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_value_and_gradient(f):
    value, grad = tg.value_and_grad(f)(X.copy())
    assert value == f(X.copy())
    np.testing.assert_allclose(grad, central_jacobian(f, X.copy()), rtol=1e-7, atol=1e-7)
    h = tg.hessian(f)(X.copy())
    np.testing.assert_array_equal(h, tg.jacfwd(tg.grad(f))(X.copy()))
    np.testing.assert_allclose(h, central_jacobian(tg.grad(f), X.copy()), rtol=1e-5, atol=1e-5)


def read_a_flip_after_a_write(x):
    y = x * 1.0
    v = np.flip(y)
    y[0] = 10 * x[1]
    return np.sum(v * W)


def read_an_unstacked_row_after_a_write(x):
    m = (x * 1.0).reshape(2, 3)
    r = np.unstack(m)[1]
    m[1, 1] = 5 * x[0]
    return np.sum(r * W[:3])


@pytest.mark.parametrize("f", [read_a_flip_after_a_write, read_an_unstacked_row_after_a_write],
                         ids=lambda f: f.__name__)
def test_a_write_under_a_live_view_is_refused(f):
    with pytest.raises(tg.GradientDroppedError, match="overlaps a view"):
        tg.grad(f)(X.copy())


def test_setting_the_shape_says_what_to_do():
    def f(x):
        y = x * 1.0
        y.shape = (2, 3)
        return np.sum(y)

    with pytest.raises(AttributeError, match="reshape"):
        tg.grad(f)(X.copy())
