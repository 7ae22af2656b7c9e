"""Adversarial checks of work arrays allocated by the differentiated code (tapegrad.buffers).

Programs written the way scientific NumPy code is written, with preallocated work
arrays filled in place, are differentiated and compared with the plainest answer:

* first order with central differences of the program on plain float64 arrays
  (``tests._wrapped_checks.central_jacobian``), and every way of asking agrees
  (``jacobian`` whole, ``jacobian(chunk_size=1)``, ``jacfwd``);
* second order: ``hessian`` against central differences of ``grad``, and against
  ``hvp`` along the basis vectors;
* ``reuse=True`` replays give the eager results bit for bit for several inputs;
* what must still be refused (a traced store into an array made another way) raises
  :class:`tapegrad.GradientDroppedError`, and nothing the caller passed in is mutated.

Checks that expose a tapegrad bug are kept as ``xfail(strict=True)`` with a minimal
reproduction in a comment.
"""

from __future__ import annotations

import functools
import threading
import warnings

import numpy as np
import pytest
import scipy.integrate
import scipy.interpolate
import scipy.linalg
import scipy.optimize
import scipy.signal
import scipy.sparse
import scipy.sparse.linalg
import scipy.spatial.distance
import scipy.stats

import tapegrad as tg
from tests._wrapped_checks import central_jacobian

X4 = np.array([0.3, -0.7, 1.1, 0.5])
X6 = np.array([0.3, -1.1, 0.8, 1.7, -0.4, 0.6])

# Central differences (step 1e-6, float64) of these smooth, well-scaled programs are
# good to ~1e-9: a wrong derivative is off by far more than these tolerances.
RTOL, ATOL = 1e-6, 1e-7


def _plain(y):
    return np.asarray(y, dtype=float)


def assert_first_order(f, x, rtol=RTOL, atol=ATOL):
    """Reverse (whole and chunked) and forward Jacobians of ``f`` at ``x`` vs central differences."""
    x0 = x.copy()
    fd = central_jacobian(f, x)
    assert np.any(fd != 0), "the program does not depend on x: the check would prove nothing"
    rev = np.asarray(tg.jacobian(f)(x))
    chunk = np.asarray(tg.jacobian(f, chunk_size=1)(x))
    fwd = np.asarray(tg.jacfwd(f)(x))
    np.testing.assert_array_equal(x, x0, err_msg="the input was mutated")
    np.testing.assert_allclose(rev, fd, rtol=rtol, atol=atol, err_msg="reverse Jacobian vs central differences")
    np.testing.assert_allclose(chunk, rev, rtol=1e-12, atol=1e-13, err_msg="chunk_size=1 vs whole")
    np.testing.assert_allclose(fwd, rev, rtol=1e-10, atol=1e-12, err_msg="jacfwd vs jacobian")
    return rev


def assert_second_order(f, x, rtol=1e-5, atol=1e-6):
    """Hessian of a scalar ``f`` vs central differences of its gradient and vs hvp columns."""
    x0 = x.copy()
    value, g = tg.value_and_grad(f)(x)
    np.testing.assert_allclose(_plain(value), _plain(f(x.copy())), rtol=1e-13, atol=0, err_msg="traced value")
    np.testing.assert_allclose(g, central_jacobian(f, x), rtol=RTOL, atol=ATOL, err_msg="gradient")
    h = np.asarray(tg.hessian(f)(x))
    fd = central_jacobian(tg.grad(f), x, eps=1e-5)
    assert np.any(fd != 0)
    np.testing.assert_allclose(h, fd, rtol=rtol, atol=atol, err_msg="Hessian vs differences of grad")
    cols = np.stack([np.asarray(tg.hvp(f)(x, e)) for e in np.eye(x.size)], axis=1)
    np.testing.assert_allclose(cols, h, rtol=1e-10, atol=1e-12, err_msg="hvp columns vs Hessian")
    np.testing.assert_array_equal(x, x0, err_msg="the input was mutated")
    return h


# ---------------------------------------------------------------------------- programs
# Each maps a float64 vector of length 4 to a float64 array; all buffers come from
# np.zeros & co. called in the program.


def loop_fill(x):
    out = np.zeros(len(x))
    for i in range(len(x)):
        out[i] = np.sin(x[i]) * x[(i + 1) % len(x)]
    return out


def loop_iadd(x):
    out = np.zeros(3)
    for i in range(len(x)):
        out[i % 3] += x[i] ** 2 * x[i - 1]
        out[(i + 1) % 3] -= 0.5 * np.cos(x[i])
    return out


def rows_then_columns(x):
    out = np.zeros((3, 4))
    for i in range(3):
        out[i] = x * (i + 1) + np.exp(x[i])
    for j in range(4):
        out[:, j] *= x[j]
    return out.ravel()


def view_of_row(x):
    out = np.zeros((2, 4))
    row = out[1]
    row[:] = np.exp(x)  # through the view: reaches out
    row *= x[0]
    del row
    out[:, 0] = x[1] * x[2]
    return out.ravel()


def reshape_view_write(x):
    out = np.zeros(8)
    m = out.reshape(2, 4)
    m[0] = x
    m[1, ::2] = x[::2] ** 2
    return out


def transpose_write(x):
    b = np.zeros((2, 4))
    b.T[:, 1] = x
    b.T[0] = x[:2] ** 2
    return b.ravel()


def fortran_rows(x):
    out = np.zeros((2, 4), order="F")
    out[0] = x
    out[1] = np.cos(x) * x[3]
    return out.ravel(order="F")


def ufunc_out(x):
    buf = np.empty(4)
    np.multiply(x, x, out=buf)
    np.sin(buf, out=buf)
    np.add(buf, x[0], out=buf)
    return buf


def add_at(x):
    buf = np.zeros(3)
    np.add.at(buf, [0, 1, 0, 2], x)
    np.add.at(buf, [2, 2], x[:2] ** 2)
    return buf


def copyto_where(x):
    buf = np.ones(4)
    np.copyto(buf, x**2, where=np.array([True, False, True, True]))
    return buf * x


def buffer_plus_buffer(x):
    buf = np.zeros(4)
    buf[:] = x
    buf += buf
    buf *= buf
    buf -= np.sin(buf)
    return buf


def complex_buffer(x):
    buf = np.zeros(4, dtype=complex)
    buf.real = x
    buf.imag = x**2
    buf[1] *= 1j
    return np.abs(buf * buf)


def complex_slice(x):
    b = np.zeros(4, dtype=complex)
    b[0] = x[0]
    b[1:] = 1j * x[1:] + x[:-1]
    return np.abs(b) ** 2 + b.real


def empty_overwritten(x):
    b = np.empty((2, 2))
    b[0, 0] = x[0] + 2
    b[0, 1] = x[1]
    b[1, 0] = x[2]
    b[1, 1] = x[3] + 2
    return np.linalg.inv(b).ravel()


def full_of_traced_scalar(x):
    return np.full(3, x[0] * x[1]) * x[:3] + np.full((3,), np.sin(x[3]))


def full_then_writes(x):
    b = np.full(4, 0.5)
    b[1] = x[0] * x[3]
    b[2:] += x[2:] ** 2
    return b * x


PROTOTYPE = np.arange(4.0)


def like_plain_prototype(x):
    a = np.zeros_like(PROTOTYPE)
    a[::2] = x[::2] ** 3
    b = np.ones_like(PROTOTYPE)
    b *= x
    c = np.full_like(PROTOTYPE, 3.0)
    c[1:] += x[1:]
    d = np.empty_like(PROTOTYPE)
    d[:] = np.tanh(x)
    e = np.ones_like(np.arange(4), dtype=float)  # integer prototype, float result
    e[0] = x[0]
    return a + b * c + d * e


def integer_index_buffer(x):
    idx = np.zeros(4, dtype=int)
    assert type(idx) is np.ndarray  # an index array stays NumPy's
    idx[:] = [3, 2, 1, 0]
    out = np.zeros(4)
    out[idx] = x * x[idx]
    return out


def boolean_mask_buffer(x):
    m = np.zeros(4, dtype=bool)
    assert type(m) is np.ndarray
    m[x > 0] = True
    out = np.zeros(4)
    out[m] = np.log(x[m])
    out[~m] = x[~m] ** 3
    return out


def nan_and_inf_initialised(x):
    b = np.full(4, np.nan)
    b[:3] = x[:3]
    c = np.full(4, np.inf)
    c[1:] = x[1:] ** 2
    return np.nansum(b) * x + np.minimum(c, 10.0) * x[0]


def where_guarded_sinc(x):
    out = np.zeros(4)
    safe = np.where(x != 0, x, 1.0)
    out[:] = np.where(x != 0, np.sin(safe) / safe, 1.0)
    return out


def writes_into_inputs(x):
    buf = np.zeros(4)
    buf[:] = x
    x[0] = buf[1] * 3  # the traced copy of the caller's array
    buf[1] = x[0] ** 2
    x += buf
    return buf * x


def stencil(x):
    n = len(x)
    lap = np.zeros(n)
    lap[1:-1] = x[:-2] - 2 * x[1:-1] + x[2:]
    lap[0] = x[1] - 2 * x[0]
    lap[-1] = x[-2] - 2 * x[-1]
    flux = np.zeros(n + 1)
    flux[1:-1] = np.diff(x**2)
    return lap + np.diff(flux)


def explicit_timesteps(x):
    u = np.zeros(len(x))
    u[:] = x
    un = np.empty(len(x))
    for _ in range(5):
        un[:] = u
        u[1:-1] = un[1:-1] + 0.1 * (un[2:] - 2 * un[1:-1] + un[:-2]) + 0.05 * un[1:-1] ** 2
    return u


def ping_pong(x):
    a = np.zeros(4)
    b = np.zeros(4)
    a[:] = x
    for _ in range(3):
        b[:] = np.sin(a) + a[::-1]
        a, b = b, a
    return a


def duplicate_fancy_indices(x):
    b = np.zeros(3)
    b[[0, 0, 1]] = x[:3]  # the last write wins
    c = np.zeros(3)
    c[[0, 0, 1]] += x[1:]  # NumPy adds once: buffered
    return b + c


def out_of_other_functions(x):
    a = np.empty((4,))
    np.matmul(np.outer(x, x), x, out=a)
    b = np.zeros(2)
    np.sum(np.outer(x[:2], x), axis=1, out=b)
    c = np.zeros(4)
    np.cumsum(x, out=c)
    d = np.empty(8)
    np.concatenate([x, x**2], out=d)
    e = np.empty(2)
    np.mean(x.reshape(2, 2), axis=1, out=e)
    f = np.zeros(4)
    np.einsum("ij,j->i", np.outer(x, x), x, out=f)
    return np.concatenate([a, b, c, d, e, f])


def divide_where_out(x):
    b = np.zeros(4)
    np.divide(1.0, x, out=b, where=x > 0)
    return b


def put_place_putmask(x):
    a = np.zeros(4)
    np.put(a, [3, 1], x[:2])
    b = np.zeros(4)
    np.place(b, [True, False, True, False], x[2:])
    c = np.zeros(4)
    np.putmask(c, x > 0, x)
    d = np.empty(4)
    d.fill(x[0])
    e = np.zeros((2, 2))
    e.flat[[0, 3]] = x[1:3]
    return a + b + c + d + e.ravel()


def tridiagonal_solve(x):
    a = np.zeros((4, 4))
    np.fill_diagonal(a, 3 + x**2)
    for i in range(1, 4):
        a[i, i - 1] = a[i - 1, i] = -x[i]
    return np.linalg.solve(a, np.ones(4))


def zero_d_accumulator(x):
    acc = np.zeros(())
    for v in x:
        acc += v**2
    one = np.zeros(1)
    for v in x:
        one[0] += v**3
    return np.stack([acc, one[0]])


def allocated_in_odd_places(x):
    make = lambda n: np.zeros(n)  # noqa: E731
    a = make(4)
    a[:] = x * 3
    bs = [np.zeros(2) for _ in range(2)]
    bs[0][:] = x[:2]
    bs[1][:] = x[2:] ** 2
    c = np.zeros(
        4,
    )
    c[:] = np.sqrt(np.abs(x) + 1)
    from numpy import zeros  # bound while the tape records: the replaced allocator

    d = zeros(4)
    d[1] = x[1] * x[2]
    e = np.zeros(8).reshape(2, 4)
    e[1] = x
    return a + np.concatenate(bs) + c + d + e[1]


def sliding_windows(x):
    b = np.zeros(4)
    b[:] = x**2
    w = np.lib.stride_tricks.sliding_window_view(b, 2)
    return np.concatenate([w.sum(axis=1), np.roll(np.pad(b, 1), 1)[:4]])


FIRST_ORDER = [
    loop_fill, loop_iadd, rows_then_columns, view_of_row, reshape_view_write, transpose_write, fortran_rows,
    ufunc_out, add_at, copyto_where, buffer_plus_buffer, complex_buffer, complex_slice, empty_overwritten,
    full_of_traced_scalar, full_then_writes, like_plain_prototype, integer_index_buffer, boolean_mask_buffer,
    nan_and_inf_initialised, where_guarded_sinc, writes_into_inputs, stencil, explicit_timesteps, ping_pong,
    duplicate_fancy_indices, out_of_other_functions, divide_where_out, put_place_putmask, tridiagonal_solve,
    zero_d_accumulator, allocated_in_odd_places, sliding_windows,
]


@pytest.mark.parametrize("program", FIRST_ORDER, ids=lambda f: f.__name__)
def test_first_order_matches_differences_and_modes_agree(program):
    x = X4.copy()
    if program is divide_where_out or program is boolean_mask_buffer:
        x = np.array([0.3, -0.7, 1.1, -0.5])
    # the traced run computes the same values as the plain one
    y_plain = _plain(program(x.copy()))
    value = tg.value_and_grad(lambda z: np.sum(program(z) * np.arange(1.0, y_plain.size + 1)))(x)[0]
    np.testing.assert_allclose(_plain(value), np.sum(y_plain * np.arange(1.0, y_plain.size + 1)), rtol=1e-13)
    assert_first_order(program, x)


def _scalar(program, weights_seed=1):
    def f(x):
        y = program(x)
        w = np.random.default_rng(weights_seed).standard_normal(np.shape(y))
        return np.sum(w * y) + 0.25 * np.sum(y**2)

    f.__name__ = program.__name__
    return f


SECOND_ORDER = [
    loop_fill, loop_iadd, rows_then_columns, view_of_row, ufunc_out, add_at, buffer_plus_buffer, complex_buffer,
    empty_overwritten, full_then_writes, like_plain_prototype, integer_index_buffer, writes_into_inputs,
    explicit_timesteps, out_of_other_functions, tridiagonal_solve, put_place_putmask, zero_d_accumulator,
]


@pytest.mark.parametrize("program", SECOND_ORDER, ids=lambda f: f.__name__)
def test_second_order_matches_differences_of_gradient(program):
    assert_second_order(_scalar(program), X4.copy())


def test_hessian_chunked_and_jacfwd_of_grad_agree():
    f = _scalar(rows_then_columns)
    h = np.asarray(tg.hessian(f)(X4))
    np.testing.assert_allclose(np.asarray(tg.hessian(f, chunk_size=1)(X4)), h, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(np.asarray(tg.jacfwd(tg.grad(f))(X4)), h, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(tg.jacobian(tg.grad(f))(X4)), h, rtol=1e-12, atol=1e-13)


# ---------------------------------------------------------------------------- guarded singularities, NaN
def test_log_of_zero_written_into_a_slot_that_is_not_used_leaves_finite_gradient():
    def f(x):
        out = np.zeros(4)
        out[0] = np.log(x[0])  # -inf at x[0] = 0, never read
        out[1:] = x[1:] ** 2
        return np.sum(out[1:])

    def g(x):
        out = np.zeros(4)
        out[:] = np.log(x)
        out[0] = 0.0  # overwritten
        return np.sum(out)

    x = np.array([0.0, 1.0, 2.0, 3.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        np.testing.assert_array_equal(tg.grad(f)(x), np.array([0.0, 2.0, 4.0, 6.0]))
        np.testing.assert_array_equal(tg.hessian(f)(x), np.diag([0.0, 2.0, 2.0, 2.0]))
        np.testing.assert_allclose(tg.grad(g)(x), np.array([0.0, 1.0, 0.5, 1 / 3]), rtol=1e-15)


def test_where_guarded_sqrt_at_zero_into_buffer():
    def f(x):
        out = np.zeros(4)
        safe = np.where(x > 0, x, 1.0)
        out[:] = np.where(x > 0, np.sqrt(safe), 0.0)
        m = x > 0
        out2 = np.zeros(4)
        out2[m] = np.sqrt(x[m])
        return np.sum(out) + np.sum(out2)

    x = np.array([0.0, 1.0, 2.0, 3.0])
    expected = np.r_[0.0, 1.0 / np.sqrt(x[1:])]
    np.testing.assert_allclose(tg.grad(f)(x), expected, rtol=1e-15)
    np.testing.assert_allclose(tg.hessian(f)(x), np.diag(np.r_[0.0, -0.5 * x[1:] ** -1.5]), rtol=1e-14)


# ---------------------------------------------------------------------------- float32
def test_float32_buffer_keeps_its_dtype():
    seen = {}

    def f(x):
        b = np.zeros(4, dtype=np.float32)
        for i in range(4):
            b[i] = x[i] * x[i - 1]
        seen["dtype"] = b.dtype
        seen["product"] = (b * 2).dtype
        return b

    x = X4.astype(np.float32)
    y = f(x)
    assert y.dtype == np.float32
    jac = np.asarray(tg.jacobian(f)(x))
    assert seen == {"dtype": np.float32, "product": np.float32}
    assert jac.dtype == np.float32
    expected = np.zeros((4, 4), dtype=np.float32)
    for i in range(4):
        expected[i, i] += x[i - 1]
        expected[i, i - 1] += x[i]
    np.testing.assert_allclose(jac, expected, rtol=1e-6)

    # a float64 input written into a float32 buffer: values rounded as NumPy does
    def g(x):
        b = np.zeros(4, dtype=np.float32)
        b[:] = x * 1.1
        seen["g"] = b.dtype
        return np.sum(b * b)

    x64 = X4.copy()
    value, grad = tg.value_and_grad(g)(x64)
    assert seen["g"] == np.float32
    assert _plain(value) == _plain(g(x64.copy()))
    np.testing.assert_allclose(grad, 2 * 1.1**2 * x64, rtol=1e-6)

    # float16 too (AD passes the rounding through as the identity: d(b * x)/dx = b + x)
    def h(x):
        b = np.zeros(4, dtype=np.float16)
        b[:] = x
        seen["h"] = b.dtype
        return b.astype(np.float64) * x

    jac = np.asarray(tg.jacobian(h)(x64))
    assert seen["h"] == np.float16
    np.testing.assert_allclose(jac, np.diag(x64.astype(np.float16).astype(np.float64) + x64), rtol=2e-3)


# ---------------------------------------------------------------------------- reuse
def _reuse_program(x):
    n = x.size
    out = np.zeros(n)
    tmp = np.empty(n)
    for i in range(n):
        out[i] = np.sin(x[i]) * x[(i + 1) % n]
        out[i] += x[i - 1] ** 2
    np.multiply(out, x, out=tmp)
    w = np.full(n, 0.5)
    w[0] = x[0] * x[-1]
    m = np.zeros((2, n))
    m[0] = tmp
    m[1, ::2] = out[::2]
    return np.sum(m**2) + np.sum(w * out)


def _reuse_program_add_at(x):
    acc = np.zeros(2)
    np.add.at(acc, np.arange(x.size) % 2, x**2)
    return np.sum(acc**2) + _reuse_program(x)


@pytest.mark.parametrize("program", [_reuse_program, _reuse_program_add_at], ids=["fills", "add_at"])
@pytest.mark.parametrize("kind", ["grad", "hessian", "jacobian", "hvp"])
def test_reuse_replays_equal_eager_bit_for_bit(kind, program):
    rng = np.random.default_rng(7)
    if kind == "jacobian":

        def fun(x):
            return program(x) * x

        reused, eager = tg.jacobian(fun, reuse=True), tg.jacobian(fun)
    else:
        make = {"grad": tg.grad, "hessian": tg.hessian, "hvp": tg.hvp}[kind]
        reused, eager = make(program, reuse=True), make(program)
    for _ in range(4):
        x = rng.standard_normal(5)
        args = (x, rng.standard_normal(5)) if kind == "hvp" else (x,)
        np.testing.assert_array_equal(np.asarray(reused(*args)), np.asarray(eager(*args)))
    if program is _reuse_program:
        assert reused.reuse_stats.replays >= 3, reused.reuse_stats


# ---------------------------------------------------------------------------- has_aux, returned buffers
def test_buffers_in_aux_come_back_plain_with_their_values():
    def f(x):
        out = np.zeros(4)
        out[:] = x**2
        w = np.ones(3)
        return np.sum(out * x), (out, {"w": w, "n": 3})

    g, (out, extra) = tg.grad(f, has_aux=True)(X4)
    np.testing.assert_allclose(g, 3 * X4**2, rtol=1e-15)
    assert type(out) is np.ndarray and type(extra["w"]) is np.ndarray
    np.testing.assert_array_equal(out, X4**2)
    np.testing.assert_array_equal(extra["w"], np.ones(3))

    def h(x):
        out = np.zeros(4)
        out[:] = np.sin(x)
        return out, (out, np.zeros(2))

    jac, (a, b) = tg.jacobian(h, has_aux=True)(X4)
    np.testing.assert_allclose(jac, np.diag(np.cos(X4)), rtol=1e-15)
    assert type(a) is np.ndarray and type(b) is np.ndarray
    np.testing.assert_array_equal(a, np.sin(X4))


def test_constant_buffer_returned_directly_has_zero_jacobian():
    def f(x):
        b = np.ones(3)
        b[1] = 4.0
        return b

    jac = tg.jacobian(f)(X4)
    np.testing.assert_array_equal(np.asarray(jac), np.zeros((3, 4)))


# ---------------------------------------------------------------------------- buffers as constants in compiled code
def constants_through_compiled_code(x):
    w = np.ones(4)
    w[1] = 2.0
    a = np.zeros((4, 4))
    a[:] = np.diag(w) + 0.1
    c = scipy.linalg.lu_solve(scipy.linalg.lu_factor(a), w)
    k = scipy.signal.lfilter([1.0, 0.5], [1.0], w)
    d = scipy.spatial.distance.cdist(a, a)
    s = scipy.sparse.diags(w) @ np.ones(4)
    t = scipy.sparse.linalg.spsolve(scipy.sparse.diags([w], [0], format="csc"), w)
    conv = np.convolve(w, w)
    grid = np.zeros(6)
    for i in range(6):
        grid[i] = -2 + 0.8 * i
    spline = scipy.interpolate.CubicSpline(grid, np.sin(grid))
    h, _ = np.histogram(np.array([0.5, -0.5, 0.2]), bins=np.zeros(3) + [-1, 0, 1])
    scale = np.sum(c) + np.sum(k) + np.sum(d) + np.sum(s) + np.sum(t) + np.sum(conv) + h.sum()
    return x * scale + spline(x) + np.interp(x, grid, grid**2) + np.searchsorted(grid, x)


def test_constant_buffers_through_compiled_code():
    assert_first_order(constants_through_compiled_code, X4.copy())


def test_buffers_inside_nested_solvers():
    # fsolve / least_squares (MINPACK) and L-BFGS-B call back into functions that fill buffers
    def f(p):
        def residual(z):
            r = np.zeros(2)
            r[0] = z[0] ** 3 + z[1] - p[0]
            r[1] = z[1] ** 3 - z[0] - p[1]
            return r

        z = scipy.optimize.fsolve(residual, np.array([1.0, 1.0]), xtol=1e-13)

        def obj(c):
            return (c[0] - 1) ** 2 + 10 * (c[1] - c[0] ** 2) ** 2

        def jac(c):
            g = np.zeros(2)
            g[0] = 2 * (c[0] - 1) - 40 * c[0] * (c[1] - c[0] ** 2)
            g[1] = 20 * (c[1] - c[0] ** 2)
            return g

        c = scipy.optimize.minimize(obj, np.zeros(2), jac=jac, method="L-BFGS-B", tol=1e-13).x
        return z * np.round(c, 4)

    assert_first_order(f, np.array([0.7, 1.3]))


# ---------------------------------------------------------------------------- random numbers inside
def test_generator_inside_the_function_gets_plain_memory():
    kinds = {}

    def f(x):
        rng = np.random.default_rng(0)
        r = rng.standard_normal(4)
        kinds["r"] = type(r)
        u = rng.uniform(size=4) + rng.exponential(size=4) + rng.random(4)
        p = rng.permutation(4)
        np.random.seed(1)
        legacy = np.random.randn(4) + np.random.rand(4)
        return x * r + x**2 * u + x[p] + legacy * x

    def plain(x):
        rng = np.random.default_rng(0)
        r = rng.standard_normal(4)
        u = rng.uniform(size=4) + rng.exponential(size=4) + rng.random(4)
        p = rng.permutation(4)
        np.random.seed(1)
        return np.diag(r + 2 * x * u + np.random.randn(4) + np.random.rand(4)) + np.eye(4)[p]

    jac = assert_first_order(f, X4.copy())
    assert kinds["r"] is np.ndarray
    np.testing.assert_allclose(jac, plain(X4), rtol=1e-14, atol=1e-15)


# ---------------------------------------------------------------------------- ODE right-hand sides
def _ivp_end(p):
    def rhs(t, y):
        dydt = np.zeros(2)
        dydt[0] = -p[0] * y[0] + p[1] * y[1]
        dydt[1] = p[0] * y[0] - p[1] * y[1] ** 2
        return dydt

    sol = scipy.integrate.solve_ivp(rhs, (0.0, 2.0), np.array([1.0, 0.5]), rtol=1e-11, atol=1e-12)
    return sol.y[:, -1]


def _odeint_end(p):
    def rhs(y, t):
        dydt = np.empty(2)
        dydt[0] = -p[0] * y[0] + p[1] * y[1] * np.sin(t)
        dydt[1] = p[0] * y[0] - p[1] * y[1] ** 2
        return dydt

    return scipy.integrate.odeint(rhs, np.array([1.0, 0.5]), np.array([0.0, 1.0, 2.0]), rtol=1e-11, atol=1e-12)[-1]


@pytest.mark.parametrize("solve", [_ivp_end, _odeint_end], ids=["solve_ivp", "odeint"])
def test_ode_rhs_with_preallocated_derivative(solve):
    p = np.array([0.7, 0.4])
    p0 = p.copy()
    jac = np.asarray(tg.jacobian(solve)(p))
    np.testing.assert_allclose(jac, central_jacobian(solve, p), rtol=1e-6, atol=1e-8)

    def loss(q):
        y = solve(q)
        return np.sum(y**2) + y[0] * y[1]

    h = np.asarray(tg.hessian(loss)(p))
    np.testing.assert_allclose(h, central_jacobian(tg.grad(loss), p, eps=1e-5), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(h, h.T, rtol=1e-8, atol=1e-10)
    np.testing.assert_array_equal(p, p0)


# ---------------------------------------------------------------------------- threads
def test_other_thread_allocating_during_a_recording_gets_plain_arrays():
    inside, done = threading.Event(), threading.Event()
    seen = []

    def plain_worker():
        inside.wait(10)
        for _ in range(20):
            for a in (np.zeros(3), np.ones(3), np.empty(3), np.full(3, 2.0), np.zeros_like(PROTOTYPE)):
                seen.append(type(a))
                a[0] = 1.0
        done.set()

    def f(x):
        out = np.zeros(3)
        inside.set()
        assert done.wait(10)
        out[:] = x
        return np.sum(out**2)

    worker = threading.Thread(target=plain_worker)
    worker.start()
    try:
        g = tg.grad(f)(np.array([1.0, 2.0, 3.0]))
    finally:
        inside.set()
        worker.join()
    np.testing.assert_array_equal(g, [2.0, 4.0, 6.0])
    assert seen and set(seen) == {np.ndarray}


def test_concurrent_recordings_with_buffers_agree_with_serial():
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(6) for _ in range(25)]
    f = _scalar(loop_fill)
    reference = [tg.grad(f)(x) for x in xs]
    results = [[None] * len(xs) for _ in range(4)]
    errors = []

    def worker(k):
        try:
            for i, x in enumerate(xs):
                results[k][i] = tg.grad(f)(x)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for k in range(4):
        for i in range(len(xs)):
            np.testing.assert_array_equal(results[k][i], reference[i])


def test_no_traced_arrays_outside_a_recording():
    tg.grad(lambda x: np.sum(loop_fill(x)))(X4)
    for a in (np.zeros(3), np.ones(2), np.empty(2), np.full(2, 1.0), np.zeros_like(PROTOTYPE)):
        assert type(a) is np.ndarray


# ---------------------------------------------------------------------------- nested transforms
def test_grad_inside_grad_with_buffers_on_both_levels():
    def outer(x):
        def inner(y):
            b = np.zeros(2)
            b[0] = y[0] * x[1]
            b[1] = np.sin(y[1]) * x[0]
            return np.sum(b**2)

        gi = tg.grad(inner)(x * 2)
        out = np.zeros(2)
        out[:] = gi
        return np.sum(out * x)

    x = np.array([0.3, 0.8])
    np.testing.assert_allclose(tg.grad(outer)(x), central_jacobian(outer, x), rtol=RTOL, atol=ATOL)


def test_outer_buffer_written_by_outer_values_inside_inner_grad():
    def outer(x):
        buf = np.zeros(2)

        def inner(y):
            buf[0] = y[0] * x[0]
            return np.sum(buf**2) + np.sum(y**2 * x[1])

        gi = tg.grad(inner)(x * 2)
        return np.sum(gi * x)

    x = np.array([0.3, -0.7])
    x0, x1 = x
    expected = [16 * x0**3 + 8 * x0 * x1, 4 * x0**2 + 12 * x1**2]
    np.testing.assert_allclose(tg.grad(outer)(x), expected, rtol=1e-14)


def test_gradient_tape_blocks():
    x = np.array([0.3, -0.7, 1.1])
    with tg.GradientTape() as tape:
        xw = tape.watch(x)
        out = np.zeros(3)
        out[0] = xw[0] * xw[1]
        out[1:] = np.sin(xw[1:])
        y = np.sum(out**2)
    g = tape.gradient(y, xw)
    expected = central_jacobian(lambda z: np.sum(np.r_[z[0] * z[1], np.sin(z[1:])] ** 2), x)
    np.testing.assert_allclose(g, expected, rtol=RTOL, atol=ATOL)
    assert type(np.zeros(2)) is np.ndarray  # after the block

    with tg.GradientTape(persistent=True) as tape:
        xw = tape.watch(x)
        b = np.ones(3)
        b *= xw
        b[1] = b[0] * b[2]
        y1, y2 = np.sum(b), np.sum(b**2)
    np.testing.assert_allclose(tape.gradient(y1, xw), [1 + x[2], 0.0, 1 + x[0]], rtol=1e-15)
    np.testing.assert_allclose(
        tape.gradient(y2, xw), [2 * x[0] + 2 * x[0] * x[2] ** 2, 0.0, 2 * x[2] + 2 * x[2] * x[0] ** 2], rtol=1e-14
    )

    # nested tapes: the buffer belongs to the inner one, the outer differentiates its gradient
    with tg.GradientTape() as t1:
        x1 = t1.watch(x)
        with tg.GradientTape() as t2:
            x2 = t2.watch(x1)
            out = np.zeros(3)
            out[:] = x2**3
            out[0] += x2[1] * x2[2]
            y = np.sum(out)
        g = t2.gradient(y, x2)
    h = t1.jacobian(g, x1)
    expected_h = np.diag(6 * x)
    expected_h[1, 2] = expected_h[2, 1] = 1.0
    np.testing.assert_allclose(h, expected_h, rtol=1e-14)


def test_checkpointed_segment_with_buffers():
    segment = tg.checkpoint(loop_fill)

    def f(x):
        return np.sum(segment(x) ** 2) + np.sum(segment(x * 2) * x)

    x = X4.copy()
    np.testing.assert_allclose(tg.grad(f)(x), central_jacobian(f, x), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(tg.hessian(f)(x), central_jacobian(tg.grad(f), x, eps=1e-5), rtol=1e-5, atol=1e-6)


def test_batch_jacobian_and_vjp_of_column_filled_buffer():
    def per_example(x):  # (batch, 4) -> (batch, 4), rows independent
        out = np.zeros(x.shape)
        for i in range(x.shape[1]):
            out[:, i] = np.sin(x[:, i]) * x[:, i - 1]
        return out

    xb = np.random.default_rng(0).standard_normal((3, 4))
    full = central_jacobian(per_example, xb)  # (3, 4, 3, 4)
    bj = np.asarray(tg.batch_jacobian(per_example)(xb))
    np.testing.assert_allclose(bj, np.stack([full[b, :, b, :] for b in range(3)]), rtol=RTOL, atol=ATOL)
    y, pullback = tg.vjp(per_example, xb)
    assert type(y) is np.ndarray
    np.testing.assert_array_equal(y, per_example(xb.copy()))
    ct = np.random.default_rng(1).standard_normal((3, 4))
    (cotangent,) = pullback(ct)  # one cotangent per primal
    np.testing.assert_allclose(cotangent, np.einsum("ij,ijkl->kl", ct, full), rtol=RTOL, atol=ATOL)


# ---------------------------------------------------------------------------- refusals
TEMPLATE = np.zeros(4)
TEMPLATE_SNAPSHOT = TEMPLATE.copy()


def store_into_copy(x):
    out = TEMPLATE.copy()
    out[1] = x[1] ** 2
    return out


def store_into_np_array(x):
    out = np.array([0.0, 0.0, 0.0, 0.0])
    out[:] = x**2
    return out


def store_into_asarray_of_list(x):
    out = np.asarray([0.0] * 4)
    out[0] = x[0]
    return out


def store_into_arange(x):
    out = np.arange(4.0)
    out[2] += x[2]
    return out


def store_into_eye(x):
    out = np.eye(4)
    out[0] = x
    return out.ravel()


def test_a_store_into_an_eye_matrix_is_recorded():
    """np.eye and np.identity are allocators too (a rotation matrix filled entry by entry)."""
    x = X4.copy()
    np.testing.assert_allclose(tg.jacobian(store_into_eye)(x), central_jacobian(store_into_eye, x), rtol=1e-7, atol=1e-9)

    def rotation(t):
        r = np.identity(3)
        r[0, 0] = r[1, 1] = np.cos(t[0])
        r[0, 1], r[1, 0] = -np.sin(t[0]), np.sin(t[0])
        return np.sum(r @ np.array([1.0, 2.0, 3.0]) * t[1])

    t0 = np.array([0.4, 1.5])
    np.testing.assert_allclose(tg.grad(rotation)(t0), central_jacobian(rotation, t0), rtol=1e-7)
    np.testing.assert_allclose(tg.hessian(rotation)(t0), central_jacobian(tg.grad(rotation), t0), rtol=1e-6, atol=1e-8)


def add_at_into_copy(x):
    out = TEMPLATE.copy()
    np.add.at(out, [0, 1], x[:2])
    return out


def copyto_into_copy(x):
    out = TEMPLATE.copy()
    np.copyto(out, x)
    return out


def ufunc_out_into_copy(x):
    out = TEMPLATE.copy()
    np.sin(x, out=out)
    return out


def store_into_aliased_allocator(x):
    z = np.zeros  # called under another name: not recognised, so plain
    out = z(4)
    out[0] = x[0]
    return out


def store_into_generator_output(x):
    out = np.random.default_rng(0).standard_normal(4)
    out[0] = x[0]
    return out


REFUSED = [
    store_into_copy, store_into_np_array, store_into_asarray_of_list, store_into_arange,
    add_at_into_copy, copyto_into_copy, ufunc_out_into_copy, store_into_aliased_allocator,
    store_into_generator_output,
]


@pytest.mark.parametrize("program", REFUSED, ids=lambda f: f.__name__)
@pytest.mark.parametrize("transform", ["jacobian", "jacfwd", "grad", "hessian"])
def test_traced_store_into_plain_array_is_refused(program, transform):
    x = X4.copy()
    if transform == "jacobian":
        call = lambda: tg.jacobian(program)(x)  # noqa: E731
    elif transform == "jacfwd":
        call = lambda: tg.jacfwd(program)(x)  # noqa: E731
    else:
        make = tg.grad if transform == "grad" else tg.hessian
        call = lambda: make(lambda z: np.sum(program(z) ** 2))(x)  # noqa: E731
    with pytest.raises(tg.GradientDroppedError):
        call()
    np.testing.assert_array_equal(x, X4)
    np.testing.assert_array_equal(TEMPLATE, TEMPLATE_SNAPSHOT)


def _into_argument(x, out):
    out[2] = x[2]
    return np.sum(out)


def _iadd_argument(x, out):
    out += x
    return np.sum(out)


def _ufunc_into_argument(x, out):
    np.exp(x, out=out)
    return np.sum(out)


@pytest.mark.parametrize("program", [_into_argument, _iadd_argument, _ufunc_into_argument], ids=lambda f: f.__name__)
def test_traced_store_into_an_argument_is_refused_and_nothing_is_mutated(program):
    x = X4.copy()
    for transform in (tg.grad, tg.jacfwd, tg.hessian):
        out = np.zeros(4)
        with pytest.raises(tg.GradientDroppedError):
            transform(program)(x, out)
        np.testing.assert_array_equal(out, np.zeros(4))
        np.testing.assert_array_equal(x, X4)
    out = np.zeros(4)
    with pytest.raises((tg.GradientDroppedError, ValueError)) as info:
        with tg.GradientTape() as tape:
            xw = tape.watch(x)
            program(xw, out)
    # inside a GradientTape block NumPy's ValueError may front it (docs/limits.md): the cause is tapegrad's
    chain, exc = [], info.value
    while exc is not None:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    assert any(isinstance(e, tg.GradientDroppedError) for e in chain), chain
    np.testing.assert_array_equal(out, np.zeros(4))


# ---------------------------------------------------------------------------- bugs found (xfail strict)
@functools.lru_cache(maxsize=None)
def _trapezoid_weights(n):
    w = np.ones(n)
    w[0] = w[-1] = 0.5
    return w


def _trapezoid(x):
    return np.sum(_trapezoid_weights(x.size) * x**2)


def test_cached_work_array_does_not_leak_a_tracer():
    # Minimal reproduction:
    #   @functools.lru_cache()
    #   def weights(n): w = np.ones(n); w[0] = w[-1] = 0.5; return w
    #   f = lambda x: np.sum(weights(x.size) * x**2)
    #   tg.grad(f)(x)          # first call caches np.ones(n) made while the tape recorded
    #   type(f(x))             # -> tapegrad.Tracer, expected a NumPy float
    #   type(tg.grad(f)(x))    # -> tapegrad.Tracer, expected np.ndarray
    # Fixed: the finished transform's tape stops recording, so the cached array (still a
    # tracer object, docs/limits.md) computes plain values in later calls.
    _trapezoid_weights.cache_clear()
    x = np.array([0.3, 0.8, -0.2, 1.0])
    expected = 2 * x * np.array([0.5, 1.0, 1.0, 0.5])
    np.testing.assert_allclose(tg.grad(_trapezoid)(x), expected, rtol=1e-15)
    try:
        value = _trapezoid(x)
        assert isinstance(value, (float, np.floating)), type(value)
        again = tg.grad(_trapezoid)(x)
        assert type(again) is np.ndarray, type(again)
        np.testing.assert_allclose(again, expected, rtol=1e-15)
    finally:
        _trapezoid_weights.cache_clear()


_WORKSPACE: dict = {}


def _with_module_workspace(x):
    if "w" not in _WORKSPACE:
        _WORKSPACE["w"] = np.zeros(x.size)
    w = _WORKSPACE["w"]
    w[:] = x**2
    return np.sum(w * x)


def test_lazily_allocated_workspace_reused_across_calls():
    # A workspace allocated in the first differentiated call and written again in later
    # ones: recorded calls of the first may still read it, so the write is refused, clearly.
    #   WS = {}
    #   def f(x):
    #       if "w" not in WS: WS["w"] = np.zeros(x.size)
    #       w = WS["w"]; w[:] = x**2; return np.sum(w * x)
    #   tg.grad(f)(x); tg.grad(f)(2 * x)   # GradientDroppedError: "... kept in a cache ..."
    _WORKSPACE.clear()
    try:
        x = np.array([0.3, 0.8, -0.2])
        np.testing.assert_allclose(tg.grad(_with_module_workspace)(x), 3 * x**2, rtol=1e-15)
        with pytest.raises(tg.GradientDroppedError, match="kept in a cache"):
            tg.grad(_with_module_workspace)(2 * x)
    finally:
        _WORKSPACE.clear()


def test_zero_mean_multivariate_normal_sample_inside_function():
    # Minimal reproduction (worked before buffers.py):
    #   tg.grad(lambda x: np.sum(x * np.random.default_rng(0).multivariate_normal(np.zeros(2), np.eye(2))))(x)
    #   -> AttributeError: tapegrad: a traced array cannot be reshaped in place (from _generator.pyx);
    #   expected the sample itself (a constant) as the gradient.
    def f(x):
        rng = np.random.default_rng(0)
        return np.sum(x * rng.multivariate_normal(np.zeros(2), np.eye(2)))

    sample = np.random.default_rng(0).multivariate_normal(np.zeros(2), np.eye(2))
    np.testing.assert_array_equal(tg.grad(f)(np.array([0.3, -0.7])), sample)


def test_scipy_stats_sample_with_allocated_mean():
    # Minimal reproduction (worked before buffers.py):
    #   def f(x):
    #       m = np.zeros(2)
    #       r = scipy.stats.multivariate_normal.rvs(mean=m, cov=np.eye(2), random_state=0)
    #       return np.sum(x * r)
    #   tg.grad(f)(x) -> GradientDroppedError "an in-place update of a plain array with a traced value"
    #   although no value in the sample depends on x; expected the sample as the gradient.
    def f(x):
        m = np.zeros(2)
        r = scipy.stats.multivariate_normal.rvs(mean=m, cov=np.eye(2), random_state=0)
        return np.sum(x * r)

    sample = scipy.stats.multivariate_normal.rvs(mean=np.zeros(2), cov=np.eye(2), random_state=0)
    np.testing.assert_array_equal(tg.grad(f)(np.array([0.3, -0.7])), sample)


@pytest.mark.xfail(strict=True, reason="Generator.standard_normal(out=np.empty(n)): raw ValueError from NumPy")
def test_generator_fills_an_allocated_out_array():
    # Minimal reproduction (worked before buffers.py):
    #   def f(x):
    #       w = np.empty(4); np.random.default_rng(0).standard_normal(out=w); return np.sum(x * w)
    #   tg.grad(f)(x) -> ValueError: Supplied output array must be contiguous, writable, aligned, ...
    #   expected the sample as the gradient.
    def f(x):
        w = np.empty(4)
        np.random.default_rng(0).standard_normal(out=w)
        return np.sum(x * w)

    np.testing.assert_array_equal(tg.grad(f)(X4), np.random.default_rng(0).standard_normal(4))


def test_bytes_of_a_constant_work_array():
    # Minimal reproduction (worked before buffers.py):
    #   def f(x):
    #       w = np.zeros(4); w[1] = 2.0
    #       return x * np.frombuffer(w.tobytes())
    #   tg.jacobian(f)(x) -> MemoryAttributeError "x.tobytes ... would drop its gradient"
    #   buffers.py: "passed to compiled code without a rule it is handed over as its plain
    #   values (it carries no gradient until a traced value is written into it)"; expected diag(w).
    def f(x):
        w = np.zeros(4)
        w[1] = 2.0
        return x * np.frombuffer(w.tobytes())

    np.testing.assert_array_equal(tg.jacobian(f)(X4), np.diag([0.0, 2.0, 0.0, 0.0]))


def test_full_like_of_plain_prototype_with_traced_fill():
    # Minimal reproduction (also before buffers.py):
    #   tg.jacobian(lambda x: np.full_like(np.arange(4.0), x[0]) * x)(x)
    #   -> GradientDroppedError "writing a traced value into a plain ndarray in place"
    #   (numpy's full_like copies the fill into its own empty_like); np.full(4, x[0]) works.
    #   Expected: d/dx of x0 * x, i.e. diag(x0) + x in the first column.
    def f(x):
        b = np.full_like(PROTOTYPE, x[0])
        b[1] = x[1]
        return b * x

    assert_first_order(f, X4.copy())
