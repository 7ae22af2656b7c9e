"""Work arrays allocated by the differentiated code are traced constants (tapegrad.buffers).

``out = np.zeros(n); out[i] = f(x[i])`` is recorded; arrays made another way stay plain
and a traced store into them is still refused.  Numbers are checked against central
differences, first and second order.
"""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import buffers
from tests._wrapped_checks import central_jacobian

X = np.array([0.3, -1.1, 0.8, 1.7, -0.4, 0.6])


def _loop_fill(x):
    out = np.zeros(len(x))
    for i in range(len(x)):
        out[i] = np.sin(x[i]) * x[i - 1]
    return np.sum(out**2)


def _slice_add(x):
    out = np.zeros(len(x) + 2)
    out[1:-1] += x
    out[:-2] += 0.5 * x**2
    return np.sum(out**2)


def _add_at(x):
    acc = np.zeros(3)
    np.add.at(acc, [0, 1, 1, 2, 0, 2], x)
    return np.sum(acc**3)


def _rows_and_columns(x):
    m = np.empty((3, 2))
    m[:, 0] = x[:3]
    m[:, 1] = np.exp(x[3:])
    row = m[1]
    row *= x[0]  # through a view: reaches m
    return np.sum(m @ m.T)


def _ones_full_like(x):
    a = np.ones(len(x)) * 2.0
    b = np.full(len(x), 0.5)
    b[::2] = x[::2] ** 3
    c = np.full_like(X, 1.0)  # a plain prototype
    c[1] = np.tanh(x[1])
    return np.sum(a * b * c * x)


def _out_argument(x):
    buf = np.empty((2, len(x)))
    np.exp(x, out=buf[0])
    np.multiply(x, buf[0], out=buf[1])
    return np.sum(buf[1] * buf[0])


def _float32(x):
    out = np.zeros(len(x), dtype=np.float32)
    out[:] = x * 2.0
    return np.sum(out.astype(np.float64) ** 2)


def _complex(x):
    z = np.zeros(len(x), dtype=complex)
    z[:] = x + 1j * x[::-1]
    return np.real(np.sum(z * np.conj(z) * np.exp(1j * x)))


def _guarded(x):
    out = np.zeros(len(x))
    safe = np.where(x > 0, x, 1.0)
    out[:] = np.where(x > 0, np.log(safe), 0.0)
    return np.sum(out * x)


PROGRAMS = [_loop_fill, _slice_add, _add_at, _rows_and_columns, _ones_full_like, _out_argument, _complex, _guarded]


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_first_and_second_order_match_finite_differences(f):
    x = X.copy()
    g = tg.grad(f)(x)
    np.testing.assert_array_equal(x, X)  # the input is not written
    np.testing.assert_allclose(g, central_jacobian(f, x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(tg.hessian(f)(x), central_jacobian(tg.grad(f), x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_every_way_of_asking_agrees(f):
    plain = np.stack([tg.grad(lambda v: tg.grad(f)(v)[k])(X) for k in range(X.size)])
    np.testing.assert_array_equal(tg.hessian(f)(X), plain)
    np.testing.assert_array_equal(tg.jacobian(tg.grad(f), chunk_size=1)(X), plain)
    np.testing.assert_allclose(tg.jacfwd(tg.grad(f))(X), plain, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.stack([tg.hvp(f)(X, e) for e in np.eye(X.size)]), plain, rtol=1e-12, atol=1e-12)
    reused = tg.grad(f, reuse=True)
    for x in (X, X * 0.7, X[::-1].copy()):
        np.testing.assert_array_equal(reused(x), tg.grad(f)(x))


def test_a_float32_buffer_stays_float32():
    def f(x):
        out = np.zeros(3, dtype=np.float32)
        out[:] = x * 2.0
        assert out.dtype == np.float32
        return out

    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    j = tg.jacobian(f)(x)
    assert j.dtype == np.float32
    np.testing.assert_array_equal(j, 2 * np.eye(3, dtype=np.float32))
    np.testing.assert_allclose(tg.grad(_float32)(X), 8.0 * X, rtol=1e-6)


def test_returned_buffer_jacobian():
    def f(x):
        out = np.empty((2, 3))
        out[0] = x**2
        out[1] = np.cumsum(x)
        return out

    x = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(tg.jacobian(f)(x), central_jacobian(f, x).reshape(2, 3, 3), rtol=1e-6, atol=1e-8)


def test_integer_and_boolean_arrays_stay_plain():
    seen = []

    def f(x):
        idx = np.zeros(3, dtype=int)
        mask = np.ones(3, dtype=bool)
        seen.extend([type(idx), type(mask)])
        idx[1] = 2
        return np.sum(x[idx] * mask)

    np.testing.assert_array_equal(tg.grad(f)(np.array([1.0, 2.0, 3.0])), [2.0, 0.0, 1.0])
    assert seen == [np.ndarray, np.ndarray]


def test_constant_buffers_reach_compiled_code_as_values():
    def f(x):
        w = np.ones(3)
        w[0] = 2.0
        # math.fsum and np.frompyfunc take the plain values of a constant buffer
        total = np.frompyfunc(lambda a: a + 1.0, 1, 1)(w).astype(float)
        return np.sum(x * total) + sum(float(v) for v in w)

    np.testing.assert_array_equal(tg.grad(f)(np.array([1.0, 2.0, 3.0])), [3.0, 2.0, 2.0])


def test_a_generators_own_arrays_stay_plain():
    """NumPy's Generator (Cython) calls np.empty with no Python frame of its own: it needs memory."""

    def f(x):
        rng = np.random.default_rng(0)
        noise = rng.standard_normal(x.shape)
        u = rng.uniform(size=3)
        assert type(noise) is np.ndarray and type(u) is np.ndarray
        return np.sum(x**2 * noise) + np.sum(u)

    noise = np.random.default_rng(0).standard_normal(X.shape)
    np.testing.assert_allclose(tg.grad(f)(X), 2 * X * noise)


def test_library_calls_stay_plain():
    from scipy import signal

    def f(x):
        window = signal.get_window("hann", 6)  # SciPy allocates with np.zeros inside: plain
        assert type(window) is np.ndarray
        return np.sum(window * x**2)

    np.testing.assert_allclose(tg.grad(f)(X), 2 * X * signal.get_window("hann", 6))


def test_another_thread_gets_plain_arrays():
    made = []
    ready, done = threading.Event(), threading.Event()

    def other():
        ready.wait()
        made.append(type(np.zeros(3)))
        done.set()

    def f(x):
        ready.set()
        done.wait(10)
        out = np.zeros(3)
        out[:] = x
        return np.sum(out**2)

    thread = threading.Thread(target=other)
    thread.start()
    np.testing.assert_array_equal(tg.grad(f)(np.array([1.0, 2.0, 3.0])), [2.0, 4.0, 6.0])
    thread.join()
    assert made == [np.ndarray]
    assert type(np.zeros(3)) is np.ndarray  # outside a recording


def test_gradient_tape_and_nested_transforms():
    with tg.GradientTape() as tape:
        x = tape.watch(np.array([1.0, 2.0]))
        out = np.zeros(2)
        out[1] = x[0] * x[1]
        y = np.sum(out)
    np.testing.assert_array_equal(tape.gradient(y, x), [2.0, 1.0])

    def inner(y, x):
        buf = np.zeros(2)
        buf[0] = y[0] * x[1]
        buf[1] = np.sin(y[1]) * x[0]
        return np.sum(buf**2)

    def outer(x):
        return np.sum(tg.grad(inner)(x * 2.0, x) * x)

    x0 = np.array([0.4, -0.9])
    np.testing.assert_allclose(tg.grad(outer)(x0), central_jacobian(outer, x0), rtol=1e-6, atol=1e-8)


def test_like_argument():
    def f(x):
        o = np.zeros(3, like=x)
        o[0] = x[1]
        q = np.full(3, x[0], like=x)
        return np.sum(o) + np.sum(q * x)

    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(tg.grad(f)(x), central_jacobian(f, x), rtol=1e-7)


def test_ode_right_hand_side_with_a_work_array():
    from scipy.integrate import odeint, solve_ivp

    def rhs(t, y, k):
        dydt = np.zeros(2)
        dydt[0] = -k[0] * y[0]
        dydt[1] = k[0] * y[0] - k[1] * y[1] ** 2
        return dydt

    def final(k):
        return solve_ivp(rhs, (0.0, 2.0), [1.0, 0.0], args=(k,), rtol=1e-11, atol=1e-12).y[1, -1]

    def final_odeint(k):
        return odeint(lambda y, t: rhs(t, y, k), [1.0, 0.0], [0.0, 2.0], rtol=1e-11, atol=1e-12)[-1, 1]

    k0 = np.array([1.3, 0.7])
    for loss in (final, final_odeint):
        np.testing.assert_allclose(tg.grad(loss)(k0), central_jacobian(loss, k0), rtol=1e-5, atol=1e-8)
        np.testing.assert_allclose(tg.hessian(loss)(k0), central_jacobian(tg.grad(loss), k0, eps=1e-5), rtol=1e-4, atol=1e-6)


_TEMPLATE = np.zeros(3)


@pytest.mark.parametrize("make", [
    lambda: _TEMPLATE.copy(),
    lambda: np.array([0.0, 0.0, 0.0]),
    lambda: np.asarray(_TEMPLATE) + 0.0,
], ids=["copy", "array", "arithmetic"])
def test_arrays_made_otherwise_are_still_refused(make):
    def f(x):
        out = make()
        out[1] = x[0] ** 2
        return np.sum(out)

    with pytest.raises(tg.GradientDroppedError):
        tg.grad(f)(np.array([1.0, 2.0, 3.0]))


def test_an_early_bound_zeros_is_refused_clearly():
    zeros = np.zeros  # bound before any tape records: NumPy's own function

    def f(x):
        out = zeros(3)
        out[1] = x[0] ** 2
        return np.sum(out)

    with pytest.raises(tg.GradientDroppedError):
        tg.grad(f)(np.array([1.0, 2.0, 3.0]))


def test_wrappers_pickle_and_leave_no_trace():
    def f(x):
        zeros = np.zeros
        assert pickle.loads(pickle.dumps(zeros)) is zeros  # a Dask graph built in a window holds it
        return np.sum(x)

    tg.grad(f)(X)
    assert np.zeros is buffers.WRAPPERS.numpy_zeros.__wrapped__
    assert buffers.innermost() is None


def test_a_failing_function_leaves_the_stack_clean():
    def f(x):
        np.zeros(2)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        tg.grad(f)(X)
    assert buffers.innermost() is None
    assert type(np.zeros(3)) is np.ndarray
