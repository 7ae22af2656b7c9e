"""Plain arrays written into after a traced call read them (tapegrad.frozen).

The node of ``x * c`` keeps ``c`` for the backward sweep.  NumPy code refills work
buffers, advances index arrays in place and writes with ``out=``: each of these used
to change the kept value, so the sweep used the new values (a silently wrong
gradient).  Small arrays are now copied into the node; large ones are read-only
while the tape records, and a write raises an error that says what to do.
"""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import GradientDroppedError
from tapegrad.frozen import COPY_BYTES
from tests._wrapped_checks import central_jacobian

# Plain arrays made before any tape records: np.zeros & co. called inside a differentiated
# function give traced constants (tapegrad.buffers), so the refusals below need these.

X = np.array([0.3, -1.2, 2.0, 0.7])


def refilled_buffer(x):
    """A time-stepping loop that refills one coefficient buffer at every step."""
    coef = np.empty(x.size)
    y = x
    for k in range(5):
        coef[:] = np.cos(0.3 * k + np.arange(x.size))
        y = y + 0.1 * coef * np.sin(y)
    return np.sum(y**2)


def out_argument_buffer(x):
    tmp = np.empty(x.size)
    total = 0.0
    for k in range(3):
        np.multiply(np.arange(x.size), k + 1.0, out=tmp)
        total = total + np.sum(tmp * x**2)
    return total


def advanced_index(x):
    idx = np.array([0, 1])
    y = x[idx]
    idx += 2  # the next block: the first read must still scatter into 0 and 1
    z = x[idx]
    return np.sum(y * np.array([1.0, 10.0])) + np.sum(z**2)


def index_tuple(x):
    m = x.reshape(2, 2)
    rows = np.array([0, 1])
    y = m[rows, np.array([1, 0])]
    rows[:] = 0
    return np.sum(y * np.array([3.0, 5.0])) + np.sum(m[rows, 0])


def where_condition(x):
    mask = np.array([True, False, True, False])
    y = np.where(mask, x**2, x)
    mask[:] = ~mask
    return np.sum(y) + np.sum(np.where(mask, x, 0.0))


def read_only_view_of_a_writable_array(x):
    v = np.array([1.0, 2.0, 3.0, 4.0])
    c = np.broadcast_to(v, (2, 4))  # read-only, but changes with v
    y = x * c
    v[:] = 0.0
    return np.sum(y)


PROGRAMS = [refilled_buffer, out_argument_buffer, advanced_index, index_tuple, where_condition,
            read_only_view_of_a_writable_array]


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_gradient_uses_the_values_read(f):
    g = tg.grad(f)(X)
    np.testing.assert_allclose(g, central_jacobian(f, X), rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_hessian_and_modes(f):
    h = tg.hessian(f)(X)
    np.testing.assert_allclose(h, tg.jacfwd(tg.grad(f))(X), rtol=1e-12, atol=1e-12)
    fd = central_jacobian(tg.grad(f), X)
    np.testing.assert_allclose(h, fd, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_reuse_agrees(f):
    g = tg.grad(f, reuse=True)
    for x in (X, X * 2, X - 0.5):
        np.testing.assert_array_equal(g(x), tg.grad(f)(x))


def test_a_large_array_written_after_its_use_is_a_clear_error():
    n = COPY_BYTES // 8 + 1

    def f(x, c):  # c: a plain work array passed in (np.ones(n) inside f would be traced)
        y = x * c
        c[0] = 5.0
        return np.sum(y)

    with pytest.raises(GradientDroppedError, match="written into afterwards"):
        tg.grad(f)(np.ones(n), np.ones(n))


def test_a_large_array_only_added_stays_writable():
    """add's VJP does not read its constant: writing into it afterwards changes no gradient."""
    n = COPY_BYTES // 8 + 1

    def f(x):
        c = np.ones(n)
        y = x + c
        c[0] = 5.0
        return np.sum(y**2)

    np.testing.assert_array_equal(tg.grad(f)(np.ones(n)), np.full(n, 4.0))


def test_flags_are_restored_after_the_call():
    n = COPY_BYTES // 8 + 1
    data = np.linspace(0.0, 1.0, n)
    view = data[::2]
    tg.grad(lambda x: np.sum(x * view[: x.size] * data[: x.size]))(np.ones(n // 2))
    assert data.flags.writeable and view.flags.writeable
    with pytest.raises(GradientDroppedError):
        tg.grad(lambda x: np.sum(x * data) + (data.__setitem__(0, 1.0) or 0.0))(np.ones(n))
    assert data.flags.writeable
    data[0] = 2.0  # the caller's array is theirs again


def test_read_only_inputs_stay_read_only():
    n = COPY_BYTES // 8 + 1
    data = np.linspace(0.0, 1.0, n)
    data.flags.writeable = False
    tg.grad(lambda x: np.sum(x * data))(np.ones(n))
    assert not data.flags.writeable
