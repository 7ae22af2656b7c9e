"""``reuse=True``: a recording evaluated at new inputs gives eager mode's numbers, bit for bit.

Every guard has a test that a stale recording would fail: the second input takes
the other branch, another mask, another index, and the result must still be eager
mode's (first and second order).
"""

from __future__ import annotations

import re
import threading
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.reuse import ReuseMismatchError, ReuseWarning


def same(a, b):
    """Bit for bit, through nested tuples/lists/dicts."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            same(a[k], b[k])
        return
    if isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
        return
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (a, b)
    assert a.tobytes() == b.tobytes(), (a, b)


def agree(fun, inputs, make=tg.grad, stats=None, **kw):
    """Call the reused and the eager transform at each input; return the reused function (never refused)."""
    reused = make(fun, reuse=True, **kw)
    eager = make(fun, **kw)
    for args in inputs:
        args = args if isinstance(args, tuple) else (args,)
        same(reused(*args), eager(*args))
    assert reused.reuse_stats.refused is None, reused.reuse_stats.refused
    if stats is not None:
        for name, value in stats.items():
            assert getattr(reused.reuse_stats, name) == value, (name, reused.reuse_stats)
    return reused


X = np.array([0.3, -1.2, 2.0, 0.7])


def smooth(x):
    y = np.sin(x) * x ** 2 + np.exp(-x) / (1.0 + x * x)
    return np.sum(y[1:] * y[:-1]) + np.prod(np.cos(x[:2]))


# ---------------------------------------------------------------------- the API
def test_grad_replays_without_running_python():
    calls = []

    def f(x):
        calls.append(1)
        return smooth(x)

    g = agree(f, [X, X + 1, X * 3, X - 0.5], stats={"recordings": 1, "replays": 3})
    assert len(calls) == 1 + 4  # one recording, four eager calls (agree's own), no Python in replays
    assert g.reuse_stats.refused is None


def test_value_and_grad_and_aux():
    def f(x, w):
        z = np.tanh(w * x)
        return np.sum(z ** 2), {"z": z, "n": 3, "label": "ok"}

    inputs = [(X, 0.5), (X * 2, 0.5), (X, 1.5)]
    for make in (tg.value_and_grad, tg.grad):
        agree(f, inputs, make=make, has_aux=True, argnums=(0, 1))


def test_jacobian_and_hessian_and_hvp():
    def vec(x):
        return np.stack([np.sum(np.sin(x) * x), np.prod(x[:3]) + x[3] ** 3])

    agree(vec, [X, X * 1.5, -X], make=tg.jacobian, stats={"recordings": 1, "replays": 2})
    agree(smooth, [X, X * 1.5, -X], make=tg.hessian, stats={"recordings": 1, "replays": 2})
    h = tg.hvp(smooth, reuse=True)
    for x, v in [(X, np.ones(4)), (X * 1.5, np.arange(4.0)), (-X, np.stack([np.ones(4), X]))]:
        same(h(x, v), tg.hvp(smooth)(x, v))
    assert h.reuse_stats.replays == 2


def test_structured_and_scalar_inputs():
    def f(p, scale):
        return np.sum(p["a"] * p["b"][0]) * scale + np.sum(np.sin(p["b"][1]))

    p = {"a": X, "b": [X[::-1].copy(), X * 2]}
    q = {"a": X + 1, "b": [X * 0.5, X]}
    agree(f, [(p, 2.0), (q, 2.0), (q, 3.0), (p, 2.0)], argnums=(0, 1), stats={"recordings": 1, "replays": 3})
    # Another structure (a key more) is another signature.
    r = {"a": X, "b": [X, X], "c": X}
    agree(lambda p: np.sum(p["a"] * p["b"][0]) + sum(np.sum(v) for v in p.values() if not isinstance(v, list)),
          [p, r, p, r], stats={"recordings": 2, "replays": 2})
    agree(lambda x: x ** 3 * np.sin(x), [1.5, 2.5, -0.25])  # Python floats


# ---------------------------------------------------------------------- signature guards
def test_shape_and_dtype_change_records_again():
    f = agree(smooth, [X, np.linspace(0, 1, 7), X.astype(np.float32), X, np.linspace(0, 1, 7)])
    assert f.reuse_stats.recordings == 3 and f.reuse_stats.replays == 2


def test_non_differentiated_arguments_by_value():
    def f(x, n, data, mode):
        y = x * data
        for _ in range(n):
            y = np.sin(y)
        return np.sum(y) if mode == "sum" else np.max(y)

    data = np.array([1.0, 2.0, 3.0, 4.0])
    inputs = [(X, 2, data, "sum"), (X, 3, data, "sum"), (X, 2, data * 2, "sum"), (X, 2, data, "max")]
    agree(f, inputs, stats={"recordings": 4, "replays": 0})
    g = tg.grad(f, reuse=True)
    same(g(X, 2, data, "sum"), tg.grad(f)(X, 2, data, "sum"))
    data[0] = 10.0  # written in place between calls: compared by value, not identity
    same(g(X, 2, data, "sum"), tg.grad(f)(X, 2, data, "sum"))
    assert g.reuse_stats.replays == 0 and g.reuse_stats.recordings == 2


# ---------------------------------------------------------------------- value guards
def test_branch_on_comparison():
    def f(x):
        if np.sum(x) > 0:
            return np.sum(np.sin(x))
        return np.sum(x ** 3)

    g = agree(f, [X, -X, X * 2, -X * 2])
    assert g.reuse_stats.recordings == 2 and g.reuse_stats.replays == 2  # both recordings kept (LRU)
    h = agree(f, [X, -X, X * 2], make=tg.hessian)
    assert h.reuse_stats.rerecordings == 1


def test_while_loop_on_traced_value():
    def f(x):
        while np.max(np.abs(x)) > 1.0:
            x = x * 0.5
        return np.sum(x ** 2)

    agree(f, [X, X * 4, X * 4.5, X / 10, X * 40])
    agree(f, [X, X * 4, X / 10], make=tg.hessian)


def test_bool_int_conversions():
    def f(x):
        total = x[0] * 0.0
        for _ in range(int(x[1] * 2.0) + 3):  # int() of a traced value
            total = total + np.sin(x)
        if x[2]:  # bool() of a traced value
            total = total * x[2]
        return np.sum(total)

    agree(f, [X, X + np.array([0, 1.0, 0, 0]), X * np.array([1, 1, 0, 1.0]), X])
    agree(f, [X, X + np.array([0, 1.0, 0, 0])], make=tg.hessian)


def test_argmax_as_index():
    def f(x):
        return x[np.argmax(x)] ** 2 + np.sum(np.sort(x)[:2])

    agree(f, [X, X[::-1].copy(), X + np.array([5.0, 0, 0, 0])])
    agree(f, [X, X[::-1].copy()], make=tg.hessian)


def test_mask_in_where_and_boolean_indexing():
    def f(x):
        y = np.where(x > 0, x ** 3, 0.5 * x ** 2)
        return np.sum(y) + np.sum(x[x < 1.0] ** 2)

    inputs = [X, -X, X * 0.1, np.abs(X), X]
    agree(f, inputs)
    agree(f, inputs, make=tg.hessian)
    agree(f, inputs, make=tg.jacobian)


def test_sign_floor_and_clip():
    def f(x):
        return np.sum(np.sign(x) * x ** 2 + np.floor(x) * x + np.clip(x, -1.0, 1.0) ** 2 + np.abs(x) ** 3)

    inputs = [X, -X, X * 2.5, X + 0.01]
    agree(f, inputs)
    agree(f, inputs, make=tg.hessian)


def test_stop_gradient_value_is_guarded():
    def f(x):
        c = tg.stop_gradient(x)
        return np.sum(x * c) + np.sum(x ** 2 * np.sum(c))

    agree(f, [X, X * 2, X * 2, -X])
    agree(f, [X, X * 2], make=tg.hessian)


# ---------------------------------------------------------------------- the function's world
SCALE = 2.0
WEIGHTS = np.array([1.0, 2.0, 3.0, 4.0])


def scaled(x):
    return np.sum(np.sin(x) * WEIGHTS) * SCALE


def test_globals_by_identity_and_arrays_by_value():
    global SCALE
    g = tg.grad(scaled, reuse=True)
    same(g(X), tg.grad(scaled)(X))
    SCALE = 3.0
    try:
        same(g(X), tg.grad(scaled)(X))
        WEIGHTS[1] = -2.0  # in place: the same object, another value
        same(g(X), tg.grad(scaled)(X))
    finally:
        SCALE = 2.0
        WEIGHTS[1] = 2.0
    same(g(X), tg.grad(scaled)(X))
    assert g.reuse_stats.recordings == 4 or g.reuse_stats.replays >= 1


def test_closure_cells_and_defaults():
    k = 1.0

    def f(x, p=2.0):
        return np.sum(x ** p) * k

    g = tg.grad(f, reuse=True)
    same(g(X), tg.grad(f)(X))
    k = 5.0  # a new object in the closure cell
    same(g(X), tg.grad(f)(X))
    f.__defaults__ = (3.0,)
    same(g(X), tg.grad(f)(X))
    same(g(X * 2), tg.grad(f)(X * 2))
    assert g.reuse_stats.recordings == 3 and g.reuse_stats.replays == 1


class _Config:
    scale = 1.0


CONFIG = _Config()


def test_check_mode_catches_a_frozen_value():
    def f(x):
        return np.sum(x ** 2) * CONFIG.scale  # an attribute of a global: frozen by a recording

    g = tg.grad(f, reuse="check")
    same(g(X), tg.grad(f)(X))
    same(g(X * 2), tg.grad(f)(X * 2))  # checked against eager: the same
    CONFIG.scale = 2.0
    try:
        with pytest.raises(ReuseMismatchError):
            g(X)
    finally:
        CONFIG.scale = 1.0


def test_random_draws_are_never_reused():
    def f(x):
        return np.sum(x * np.random.normal(size=x.shape))

    g = tg.grad(f, reuse=True)
    with pytest.warns(ReuseWarning, match="random"):
        np.random.seed(0)
        first = g(X)
    np.random.seed(0)
    same(first, tg.grad(f)(X))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning only
        np.random.seed(1)
        second = g(X)
    np.random.seed(1)
    same(second, tg.grad(f)(X))
    assert g.reuse_stats.refused is not None and g.reuse_stats.eager == 1

    rng = np.random.default_rng(0)

    def h(x):
        return np.sum(x * rng.normal(size=x.shape))

    gh = tg.grad(h, reuse=True)
    with pytest.warns(ReuseWarning):
        a = gh(X)
    assert not np.array_equal(a, gh(X))  # a new draw at every call, as eager mode


def test_exceptions_reach_the_user_and_leave_the_cache_working():
    def f(x):
        if x[0] > 5.0:
            raise ValueError("too large")
        return np.sum(np.log(x ** 2 + 1.0))

    g = tg.grad(f, reuse=True)
    with pytest.raises(ValueError, match="too large"):
        g(X + 10.0)  # the very first call
    same(g(X), tg.grad(f)(X))
    with pytest.raises(ValueError, match="too large"):
        g(X + 10.0)  # a guard fails, eager mode raises
    same(g(X * 2), tg.grad(f)(X * 2))
    assert g.reuse_stats.replays >= 1


def test_threads():
    g = tg.grad(smooth, reuse=True)
    inputs = [X * (1 + k / 10) for k in range(8)]
    expected = [tg.grad(smooth)(x) for x in inputs]
    errors = []

    def work(k):
        try:
            for _ in range(20):
                same(g(inputs[k]), expected[k])
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert g.reuse_stats.recordings <= 8


def test_traced_arguments_run_eagerly():
    inner = tg.grad(smooth, reuse=True)
    outer = tg.jacobian(inner)
    same(outer(X), tg.hessian(smooth)(X))
    assert inner.reuse_stats.eager == 1


# ---------------------------------------------------------------------- what the tape holds
def test_in_place_writes_views_and_out():
    def f(x):
        y = np.zeros_like(x)
        y[0] = x[0] ** 2
        y[1:] = x[1:] * 2.0
        v = y.reshape(2, 2)
        v[1] += np.sin(v[0])
        z = np.empty_like(x)
        np.multiply(x, y, out=z)
        z *= 0.5
        return np.sum(z * y)

    agree(f, [X, X * 2, -X])
    agree(f, [X, X * 2], make=tg.hessian)


def test_large_arrays_memo_and_pruning():
    x = np.linspace(0.1, 2.0, 20_000)
    c = np.linspace(1.0, 3.0, 20_000)

    def f(x):
        return np.sum(np.sin(x) * np.cos(x) + np.exp(x) * c + (x + c) ** 2)

    agree(f, [x, x * 1.1, x[::-1].copy()], stats={"recordings": 1, "replays": 2})
    agree(lambda x: np.sum(np.sin(x) ** 2), [x[:3000], x[:3000] * 2], make=tg.hessian)


def test_keywords_a_node_does_not_keep():
    def f(x):
        return np.sum(np.multiply(x, x, dtype=np.float32)) + np.sum(np.add(x, 1.0, dtype=np.float32) ** 2)

    agree(f, [X, X * 3])


def test_nan_results_use_strong_zeros():
    def f(x):
        return np.sum(np.where(x > 0, np.sqrt(np.abs(x)), 0.0)) + np.sum(x)

    agree(f, [np.array([1.0, 0.0, 4.0]), np.array([2.0, 0.0, 9.0]), np.array([2.0, 1.0, 9.0])])


def test_errors_of_the_api_are_eager_errors():
    g = tg.grad(lambda x: x, reuse=True)
    with pytest.raises(TypeError):
        g(X)
    with pytest.raises(ValueError):
        tg.grad(smooth, reuse="yes")
    with pytest.raises(ValueError):
        tg.jacobian(smooth, reuse=True, sparse=True)


def test_integer_cast_used_as_index():
    def f(x):
        i = (np.abs(x[0]) * 2.0).astype(int)
        return x[i] ** 2 + np.sum(x[: i + 1] * 3.0)

    agree(f, [X, X * 4, X * 0.1, X * 4.2])


def test_generator_argument_is_a_random_draw():
    def f(x, rng):
        return np.sum(x * rng.normal(size=x.shape))

    g = tg.grad(f, reuse=True)
    with pytest.warns(ReuseWarning, match="random"):
        a = g(X, np.random.default_rng(5))
    same(a, tg.grad(f)(X, np.random.default_rng(5)))
    same(g(X, np.random.default_rng(6)), tg.grad(f)(X, np.random.default_rng(6)))


def test_a_constant_written_after_its_use_is_kept_as_it_was():
    """The node of x * c keeps c as it was read (frozen.kept): eager and replays agree, and with the closed form."""

    def f(x):
        c = np.ones(4)
        y = x * c
        c[0] = 2.0  # written after the call: the gradient of sum(y * c) is c_new * c_old
        return np.sum(y * c)

    g = tg.grad(f, reuse=True)
    for x in (X, X * 2, X - 1):
        got = g(x)
        same(got, tg.grad(f)(x))
        same(got, np.array([2.0, 1.0, 1.0, 1.0]))
    assert g.reuse_stats.refused is None and g.reuse_stats.replays == 2


def test_hvp_guards_and_batches():
    def f(x):
        return np.sum(np.where(x > 0, np.sin(x) * x ** 3, np.cos(x) * x ** 2))

    h = tg.hvp(f, reuse=True)
    for x, v in [(X, np.ones(4)), (-X, np.ones(4)), (X * 2, np.eye(4)), (-X, np.eye(4)[:2])]:
        same(h(x, v), tg.hvp(f)(x, v))
    assert h.reuse_stats.replays >= 1 and h.reuse_stats.rerecordings >= 1


def test_jacobian_with_aux_and_several_arguments():
    def f(x, w):
        y = np.tanh(np.outer(w, x))
        return {"a": y.sum(axis=0), "b": y[0]}, {"mean": np.mean(y), "rows": int(y.shape[0])}

    agree(f, [(X, np.ones(3)), (X * 2, np.arange(3.0)), (X, np.ones(2))], make=tg.jacobian, argnums=(0, 1),
          has_aux=True, stats={"recordings": 2, "replays": 1})


def test_program_is_lean():
    """The compiled replay calls NumPy on plain arrays: no tracer is made while it runs."""
    from tapegrad import tracer

    g = tg.grad(smooth, reuse=True)
    g(X)
    made = []
    original = tracer.Tracer.__init__

    def counting(self, *args, **kwargs):
        made.append(1)
        original(self, *args, **kwargs)

    tracer.Tracer.__init__ = counting
    try:
        reused = g(X * 2)
    finally:
        tracer.Tracer.__init__ = original
    assert not made
    same(reused, tg.grad(smooth)(X * 2))


def test_paused_recording_is_refused():
    from scipy.integrate import solve_ivp

    def f(th):
        sol = solve_ivp(lambda t, y: -th * y, (0.0, 1.0), [1.0, 2.0], t_eval=[0.5, 1.0], rtol=1e-8)
        return np.sum(sol.y)

    th = np.array([0.5, 1.5])
    g = tg.grad(f, reuse=True)
    with pytest.warns(ReuseWarning, match="does not record"):
        same(g(th), tg.grad(f)(th))
    same(g(th * 2), tg.grad(f)(th * 2))


def test_constant_outputs_and_odd_leaves():
    agree(lambda x: 3.0, [X, X * 2])  # no dependence on x: zeros
    agree(lambda x, n: np.sum(x ** n), [(X, 2), (X * 2, 2), (X, 3)], argnums=(0, 1))  # an int among argnums
    agree(lambda p: np.sum(p["a"] ** 2) if p["b"] is None else 0.0, [{"a": X, "b": None}, {"a": X * 3, "b": None}])
    agree(lambda x: np.sum(x[0] * x[1]), [[X, X], [X * 2, X]], make=tg.value_and_grad)


def test_results_are_the_callers_own():
    c = np.array([1.0, 2.0, 3.0, 4.0])

    def f(x):
        return np.sum(x * c), c * 2.0  # aux: a constant array

    g = tg.value_and_grad(f, has_aux=True, reuse=True)
    g(X)
    (value, aux), grad = g(X * 2)
    aux[:] = 0.0
    grad[:] = 0.0
    (value2, aux2), grad2 = g(X * 2)
    same(aux2, c * 2.0)
    same(grad2, tg.grad(lambda x: np.sum(x * c))(X * 2))


def test_lazy_values_run_eagerly():
    da = pytest.importorskip("dask.array")
    x = da.from_array(np.linspace(0.1, 1.0, 8), chunks=4)
    g = tg.grad(lambda x: np.sum(np.sin(x) * x), reuse=True)
    np.testing.assert_array_equal(np.asarray(g(x)), np.asarray(tg.grad(lambda x: np.sum(np.sin(x) * x))(x)))
    assert g.reuse_stats.eager == 1 and g.reuse_stats.recordings == 0


def test_custom_vjp_and_checkpoint():
    @tg.custom_vjp
    def softclip(x):
        return np.tanh(x) * 2.0

    softclip.defvjp(lambda g, ans, x: g * 2.0 * (1 - np.tanh(x) ** 2))
    block = tg.checkpoint(lambda x: np.sin(x) * np.cos(x))

    def f(x):
        return np.sum(softclip(x) * x) + np.sum(block(x) ** 2)

    agree(f, [X, X * 2, -X], stats={"recordings": 1, "replays": 2})
    agree(f, [X, X * 2], make=tg.hessian, stats={"recordings": 1, "replays": 1})


def test_small_step_program_matches_eager():
    """A leapfrog of a few particles: broadcasting, axis sums, a 1.5 power, basic-index reads and writes."""
    mass = np.linspace(1.0, 2.0, 4)

    def leapfrog(state, steps=5, dt=0.05):
        q, p = state[:, :2], state[:, 2:]
        for _ in range(steps):
            d = q[:, None, :] - q[None, :, :]
            r2 = np.sum(d * d, axis=-1) + 0.1
            f = -np.sum(d / r2[..., None] ** 1.5 * mass[None, :, None], axis=1, keepdims=True)[:, 0]
            p = p + 0.5 * dt * f
            q = q + dt * p / mass[:, None]
            p = p + 0.5 * dt * f
        return np.sum(q * q) + 0.5 * np.sum(p ** 3.0) + np.sum((p * p + 1.0) ** -0.5)

    rng = np.random.default_rng(0)
    inputs = [np.abs(rng.normal(size=(4, 4))) + 1.0 for _ in range(3)]
    agree(leapfrog, inputs, stats={"recordings": 1, "replays": 2})
    agree(leapfrog, inputs[:2], make=tg.hessian, stats={"recordings": 1, "replays": 1})


# ---------------------------------------------------------------------- many programs, many inputs
def _p_branches(x):
    y = np.sin(x) if np.max(x) > 1.0 else np.cos(x)
    return np.sum(y * x) + (x[0] if x[1] > 0 else x[2]) ** 2


def _p_masks(x):
    m = x > np.mean(x)
    return np.sum(np.where(m, x ** 3, np.tanh(x))) + np.sum(x[m] ** 2) + np.sum(np.maximum(x, 0.1) ** 2)


def _p_indices(x):
    i, j = np.argmax(x), np.argmin(x)
    return x[i] * x[j] + np.sum(np.sort(x)[1:] ** 2) + np.sum(x[np.argsort(x)[:2]])


def _p_loops(x):
    total = x[0] * 0.0
    k = 0
    while total < 3.0 and k < 6:
        total = total + np.sum(x ** 2) * 0.3
        k += 1
    for _ in range(int(np.abs(x[1]) * 2.0) % 3):
        total = total * np.cos(x[2])
    return total


def _p_piecewise(x):
    return np.sum(np.abs(x) ** 1.5 + np.clip(x, -0.5, 0.5) * np.sign(x) + np.floor(x * 2.0) * x)


PROGRAMS = [_p_branches, _p_masks, _p_indices, _p_loops, _p_piecewise]
RANDOM_INPUTS = [np.random.default_rng(k).normal(size=5) * (0.5 + k % 3) for k in range(8)]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda f: f.__name__)
def test_random_inputs_first_and_second_order(program):
    agree(program, RANDOM_INPUTS)
    agree(program, RANDOM_INPUTS[:5], make=tg.hessian)
    h = tg.hvp(program, reuse=True)
    for x in RANDOM_INPUTS[:5]:
        same(h(x, x[::-1].copy()), tg.hvp(program)(x, x[::-1].copy()))


def test_eager_threads_beside_a_recording():
    """A recording's hooks see only its own tape: eager calls in other threads meanwhile are unchanged."""
    expected = {k: tg.grad(_p_masks)(x) for k, x in enumerate(RANDOM_INPUTS)}
    errors = []
    stop = threading.Event()

    def eager_loop():
        try:
            while not stop.is_set():
                for k, x in enumerate(RANDOM_INPUTS):
                    same(tg.grad(_p_masks)(x), expected[k])
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=eager_loop)
    t.start()
    try:
        for program in PROGRAMS:
            agree(program, RANDOM_INPUTS[:4])
    finally:
        stop.set()
        t.join()
    assert not errors


def test_read_only_input_is_another_signature():
    def f(x):
        v = x.reshape(2, 2)
        v[0] = v[1] * 2.0  # through a view of the input: NumPy refuses it for a read-only input
        return np.sum(x ** 2)

    g = tg.grad(f, reuse=True)
    same(g(X.copy()), tg.grad(f)(X.copy()))
    frozen = X.copy()
    frozen.flags.writeable = False
    with pytest.raises(ValueError):
        tg.grad(f)(frozen)
    with pytest.raises(ValueError):
        g(frozen)


def test_reused_gradient_inside_a_sweep():
    big = np.linspace(0.1, 3.0, 20_000)  # large arrays: the outer sweep has a memo of remembered outputs
    inner = tg.grad(lambda z: np.sum(np.sin(z) ** 2), reuse=True)
    inner_eager = tg.grad(lambda z: np.sum(np.sin(z) ** 2))

    def make(grad_of):
        @tg.custom_vjp
        def energy(x):
            return np.sum(np.sin(x) ** 2)

        energy.defvjp(lambda g, ans, x: g * grad_of(np.asarray(x)))
        return lambda x: energy(np.cos(x)) + np.sum(np.sin(x) * np.cos(x))

    same(tg.grad(make(inner))(big), tg.grad(make(inner_eager))(big))
    same(tg.grad(make(inner))(big * 0.5), tg.grad(make(inner_eager))(big * 0.5))
    assert inner.reuse_stats.replays >= 1


# ---------------------------------------------------------------------- the compiled program's optimisations
def _programs(reused):
    return [p for programs in reused._reusable.cache.values() for p in programs]


def _gradient_source(reused):
    (program,) = _programs(reused)
    return program, program.source[program.source.index("def replay_gradient"):]


PLANNED_SCALE = np.linspace(1.0, 2.0, 4)


def _planned_steps(x, w):
    """Each step of the planned sweep at least once (the sweep meets them from the last line up)."""
    u = x * x + x * 1e-16 + x  # several uses of x: sums in place (x's sum is the sweep's own by then)
    a = x[:, None, :]  # a whole-index read: its cotangent reshaped and added in place
    mid = x[1:2] * -1e16  # a scatter into the sweep's own sum, in place
    tail = x[1:] * 3.0  # a scatter into zeros, then the earlier cotangent added (buf += prev)
    b = x[None, :, :]  # the first cotangent of x: a binding of the reshaped cotangent
    d = a - b  # broadcast: both cotangents fitted by np.add.reduce(keepdims=True)
    r2 = np.sum(d * d, axis=-1) + 0.5  # np.sum's VJP written out (and np.add.reduce in the forward)
    # the power's VJP written out; np.sum's cotangent left a view (the product broadcasts anyway)
    f = np.sum(d / r2[..., None] ** 1.5 * PLANNED_SCALE[None, :, None], axis=1)
    s = np.sin(u * w)  # np.sin's VJP is called, its result checked
    head = w[:2] * 1e16  # the first cotangent of w: a scatter into zeros
    return np.sum(f * f) + np.sum(head) + np.sum(tail) + np.sum(mid) + np.sum(s)


PLANNED_INPUTS = [tuple(np.random.default_rng(k).normal(size=(2, 4, 3)) * 10.0 ** (k % 3 - 1)) for k in range(6)]


def test_planned_sweep_is_eager_bit_for_bit():
    """The gradient's sweep planned at compile time: local cotangents, in-place sums, scatters, fitting.

    Each planned step is in the program, the program's sweep is the planned one, and
    every gradient is eager mode's bit for bit at inputs whose sums depend on their
    order (terms of 1e16 and 1e-16 beside terms of 1): a step that reordered a sum, or
    wrote into an array it does not own, would give another number here (or would be
    refused at compile time, and the first assert would fail).
    """
    reused = agree(_planned_steps, PLANNED_INPUTS, stats={"recordings": 1, "replays": len(PLANNED_INPUTS) - 1},
                   argnums=(0, 1))
    program, source = _gradient_source(reused)
    assert program.sweep == "planned"
    for step in ("except Bail", "add_reduce(gi, axis=", "keepdims=True", ".reshape(", "buf = zeros(",
                 "buf += c", "] += c", "raise Bail"):
        assert step in source, step
    assert re.search(r"c\d+ \+= \(?c", source) and re.search(r"c(\d+) = c\1 \+ \(", source)
    views = re.findall(r"(c\d+) = c\d+\.reshape\(k\d+\)", source)
    assert any(f"[...] = {c}" not in source for c in views)  # a view read as it is, never filled in
    assert "Pending" not in source and "slots" not in source
    # value_and_grad takes the same sweep
    agree(_planned_steps, PLANNED_INPUTS[:3], make=tg.value_and_grad, argnums=(0, 1))


def test_planned_sweep_first_and_second_order():
    """The forward's written-out calls (np.add.reduce for np.sum, x[index]) in gradients, Hessians and HVPs."""
    def f(x):
        return np.sum(np.sum(x[:, None, :] * x[None, :, :], axis=-1) ** 2) + np.sum(x[1:] * x[:-1], axis=0)[0]

    inputs = [x for x, _ in PLANNED_INPUTS]
    reused = agree(f, inputs)
    program, _ = _gradient_source(reused)
    forward = program.source[: program.source.index("def replay_gradient")]
    assert "add_reduce(v" in forward and re.search(r"= v\d+\[k\d+\]", forward)
    agree(f, inputs[:4], make=tg.hessian)
    h = tg.hvp(f, reuse=True)
    for x in inputs[:4]:
        same(h(x, x[::-1].copy()), tg.hvp(f)(x, x[::-1].copy()))
    agree(_planned_steps, PLANNED_INPUTS[:3], make=tg.hessian, argnums=(0, 1))


def test_planned_sweep_hands_over_to_the_general_sweep():
    """A value that is not what the plan was made for: the replay sweeps the general way (eager's bits)."""
    from tapegrad.registry import RULES

    reused = agree(_planned_steps, PLANNED_INPUTS[:2], argnums=(0, 1))
    program, _ = _gradient_source(reused)
    namespace = program.run_gradient.__globals__
    vjp = RULES[np.sin].vjps[0]
    names = [k for k, v in namespace.items() if v is vjp]
    assert names  # np.sin's VJP is called by the planned sweep, and its result checked
    for name in names:
        namespace[name] = lambda *args, _vjp=vjp: _vjp(*args).astype(np.float32)
    try:
        same(reused(*PLANNED_INPUTS[3]), tg.grad(_planned_steps, argnums=(0, 1))(*PLANNED_INPUTS[3]))
        ran = program.run_gradient(*PLANNED_INPUTS[3])
        assert ran[0] is None  # the planned sweep gave up; the caller swept the general way
    finally:
        for name in names:
            namespace[name] = vjp
    assert reused.reuse_stats.recordings == 1


def test_planned_sweep_nan_takes_strong_zeros():
    """A NaN the recording did not have: the planned sweep's result is dropped for the strong-zero sweep."""
    weights = np.array([0.0, 1.0, 2.0])
    reused = agree(lambda x: np.sum(np.sqrt(x) * weights), [np.array([1.0, 2.0, 3.0]), np.array([0.0, 1.0, 2.0])])
    assert _programs(reused)[0].sweep == "planned"


def test_planned_sweep_skips_dead_cotangents():
    """The cotangent of a constant (np.zeros_like filled in place) is never computed; the gradient is eager's."""
    def filled(x):
        out = np.zeros_like(x)
        out[1:] = x[1:] ** 2
        return np.sum(out * x)

    from tapegrad.registry import RULE_TABLE

    reused = agree(filled, RANDOM_INPUTS)
    program = _programs(reused)[0]
    assert program.sweep == "planned"
    (rule,) = [r for r in RULE_TABLE if r.name.endswith("._setitem")]
    called = [v for k, v in program.run_gradient.__globals__.items() if k.startswith("k") and callable(v)]
    assert any(v is rule.vjps[2] for v in called)  # the cotangent of the value written: computed
    assert not any(v is rule.vjps[0] for v in called)  # that of the constant written into: never
    agree(filled, RANDOM_INPUTS[:4], make=tg.hessian)


def test_planned_sweep_fills_a_view_before_adding():
    """np.sum's cotangent kept as a view, then filled in when another cotangent is added to it."""
    def chain(x):
        return (x[0] * x[1] + x[2]) ** 2 / (1.0 + x[3] ** 2) + np.sum(x) + np.sum(x[:, None] * x[None, :2] / 3.0)

    reused = agree(chain, RANDOM_INPUTS)
    program, source = _gradient_source(reused)
    assert program.sweep == "planned"
    assert "filled = empty(" in source and re.search(r"c(\d+) = c\d+\.reshape\(k\d+\)", source)
    agree(chain, RANDOM_INPUTS[:4], make=tg.hessian)


def test_planned_vjp_sweep_of_an_hvp():
    """tg.hvp(f, reuse=True) sweeps from the vector inside the replay; eager's bits, other vectors the general way."""
    def one(x):
        return _planned_steps(x, np.cos(x))

    reused = tg.hvp(one, reuse=True)
    eager = tg.hvp(one)
    for x, w in PLANNED_INPUTS:
        same(reused(x, w), eager(x, w))
    (program,) = _programs(reused)
    assert program.run_vjp is not None and "def replay_vjp" in program.source
    x, w = PLANNED_INPUTS[1]
    found, nodes = program.run_vjp(w, x)
    assert nodes is None and found  # it swept by itself
    # a vector of another dtype, or not an array: the general sweep, eager's result
    same(reused(x, w.astype(np.float32)), eager(x, w.astype(np.float32)))
    same(reused(x, w.tolist()), eager(x, w.tolist()))
    assert program.run_vjp(w.astype(np.float32), x)[0] is None
    assert reused.reuse_stats.recordings == 1
    # second order of a function with a sum's view and scatters
    agree(lambda x: np.sum(np.sin(x[:, None] * x[None, :2]) / 3.0) + np.sum(x[1:] * x[:-1]) ** 2,
          [(x, x[::-1].copy()) for x in RANDOM_INPUTS], make=tg.hvp)


def test_planned_sweep_seed_is_never_handed_out():
    """The planned sweep's seed of ones is one read-only constant: a result that is the seed is a fresh copy."""
    for fun, x in [(lambda x: x * 1.0, np.array(2.0)), (lambda x: np.sum(x), np.ones(3)), (lambda x: x[1], np.ones(3))]:
        g = tg.grad(fun, reuse=True)
        g(x)
        first = g(x)
        assert first.flags.writeable and first.flags.owndata
        first[...] = 7.0
        same(g(x), tg.grad(fun)(x))
        assert _programs(g)[0].sweep == "planned"


def test_planned_sweep_sequence_arguments():
    """np.stack (of traced scalars too) and np.concatenate: the per-element cotangents, checked, in order."""
    def rhs_like(x):
        a, b = x[0], x[1]
        y = np.stack([a * b - x[2], a ** 2 + b, np.sin(x[3])])
        z = np.concatenate([x, y * 2.0, x[1:3]])
        return np.sum(np.stack([z[:6], z[3:9]], axis=0) ** 2) + np.sum(y * y)

    reused = agree(rhs_like, RANDOM_INPUTS, stats={"recordings": 1, "replays": len(RANDOM_INPUTS) - 1})
    program, source = _gradient_source(reused)
    assert program.sweep == "planned"
    assert re.search(r"pe\d+ = k\d+\(c\d+", source) and re.search(r"= pe\d+\[\d+\]", source)
    agree(rhs_like, RANDOM_INPUTS[:4], make=tg.hessian)
    agree(rhs_like, [(x, x[::-1].copy()) for x in RANDOM_INPUTS[:4]], make=tg.hvp)


def test_writing_into_a_recorded_argument_then_passing_its_old_values():
    # The recording's constants are views of the array it was recorded with (x[:, 0] here): after the
    # caller writes into that array, another array holding the recorded values must not replay them.
    def f(w, x):
        return np.sum(np.tanh(x @ w) * x[:, 0])

    w = np.array([0.3, -0.2])
    big = np.array([[1.0, 2.0, 5.0], [3.0, -1.0, 4.0]])
    x = big[:, :2]
    original = x.copy()
    reused = tg.grad(f, reuse=True)
    for k in range(3):
        np.testing.assert_array_equal(reused(w, x), tg.grad(f)(w, x))
    big[:] = 7.0  # through the base array: x sees it
    for args in ((w, original.copy()), (w, x), (w, original.copy())):
        np.testing.assert_array_equal(reused(w, *args[1:]), tg.grad(f)(w, *args[1:]))
    # jacobian and hvp share the guard
    jac = tg.jacobian(lambda w, x: np.tanh(x @ w) * x[:, 0], reuse=True)
    y = original.copy()
    first = jac(w, y)
    y[:] = -3.0
    np.testing.assert_array_equal(jac(w, original.copy()), first)
