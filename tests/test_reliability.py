"""Misuse gives clear errors, inputs are never mutated, memory is released, threads are isolated."""

from __future__ import annotations

import gc
import hashlib
import threading
import tracemalloc
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import GradientDroppedError, TapeError, UnsupportedFunctionError
from tapegrad.tape import ARGS, RULE

# Plain arrays made before any tape records: np.zeros & co. called inside a differentiated
# function give traced constants (tapegrad.buffers), so the refusals below need these.
_PLAIN3 = np.zeros(3)


def _digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


# ----------------------------------------------------------------- misuse -> clear errors
def test_unsupported_function_names_itself_and_the_remedy(monkeypatch):
    from tapegrad.registry import RULES

    monkeypatch.delitem(RULES, np.trace, raising=False)  # as if np.trace had no rule
    with pytest.raises(UnsupportedFunctionError, match=r"numpy\.trace") as info:
        tg.grad(lambda x: np.trace(x))(np.eye(2))
    assert "tapegrad.defvjp" in str(info.value)


@pytest.mark.parametrize(
    "drop",
    [
        np.asarray,
        np.array,
        lambda x: float(x[0]),
        lambda x: np.float64(x[0]),
        lambda x: range(3)[x[0]],
        lambda x: x.item(0),
        lambda x: x.tolist(),
    ],
    ids=["asarray", "array", "float", "float64", "index", "item", "tolist"],
)
def test_conversions_that_would_drop_the_gradient_raise(drop):
    with pytest.raises(GradientDroppedError, match="drop its gradient"):
        tg.grad(lambda x: np.sum(drop(x)))(np.ones(3))


@pytest.mark.parametrize("dtype", [object, str, "S8"])
def test_casts_to_object_or_string_dtypes_raise(dtype):
    with pytest.raises(GradientDroppedError, match="dtype"):
        tg.grad(lambda x: np.sum(x.astype(dtype).astype(float)))(np.ones(3))


def test_arithmetic_with_object_arrays_raises():
    with pytest.raises(GradientDroppedError, match="object"):
        tg.grad(lambda x: np.sum(x + np.array([1, 2], dtype=object)))(np.ones(2))


def test_casts_to_integer_dtypes_are_constants():
    # Truncation is piecewise constant: a zero derivative is the right answer.
    np.testing.assert_array_equal(tg.grad(lambda x: np.sum(x.astype(int) * x))(np.array([1.5, 2.5])), [1.0, 2.0])


def test_writing_a_tracer_into_a_plain_array_raises():
    buffer = np.zeros(3)

    def f(x):
        buffer[:2] = x[:2]
        return np.sum(buffer)

    with pytest.raises(GradientDroppedError):
        tg.grad(f)(np.ones(3))
    np.testing.assert_array_equal(buffer, 0.0)  # and nothing was written


def test_out_argument_raises():
    with pytest.raises(GradientDroppedError, match="out="):
        tg.grad(lambda x: np.sum(np.sin(x, out=_PLAIN3.copy())))(np.ones(3))


def test_in_place_operator_on_plain_array_raises():
    def f(x):
        acc = _PLAIN3.copy()
        acc += x
        return np.sum(acc)

    with pytest.raises(GradientDroppedError, match="out="):
        tg.grad(f)(np.ones(3))


def test_in_place_operators_on_tracers_are_recorded():
    def f(x):
        y = x * 1.0
        alias = y
        y += x
        y *= 3.0
        return np.sum(alias**2)  # the alias sees the in-place updates, as with ndarrays

    x = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(tg.grad(f)(x), 2 * (6 * x) * 6)


@pytest.mark.parametrize("value", [np.array(["a", "b"]), np.array([object(), object()], dtype=object)])
def test_string_and_object_sources_raise(value):
    with pytest.raises(TypeError):
        with tg.GradientTape() as tape:
            tape.watch(value)


@pytest.mark.parametrize("value", [np.arange(3), np.array([True, False]), 3])
def test_integer_and_boolean_sources_give_none_or_zeros(value):
    with tg.GradientTape(persistent=True) as tape:
        x = tape.watch(value)
        y = np.sum(x * 2.5)
    assert tape.gradient(y, x) is None
    zeros = tape.gradient(y, x, unconnected_gradients="zero")
    np.testing.assert_array_equal(zeros, np.zeros(np.shape(value)))
    np.testing.assert_array_equal(tg.grad(lambda v: np.sum(v * 2.5))(np.asarray(value)), 0)


def test_non_persistent_tape_answers_once():
    with tg.GradientTape() as tape:
        x = tape.watch(np.array(2.0))
        y = x**3
    assert tape.gradient(y, x) == 12.0
    with pytest.raises(TapeError, match="persistent"):
        tape.gradient(y, x)


def test_gradient_inside_the_tape_block_works():
    with tg.GradientTape() as tape:
        x = tape.watch(np.array(2.0))
        y = x**3
        g = tape.gradient(y, x)
    assert g == 12.0


def test_unwatched_source_raises():
    x = np.array(1.0)
    with tg.GradientTape() as tape:
        w = tape.watch(np.array(2.0))
        y = w * x
    with pytest.raises(TapeError, match="never watched"):
        tape.gradient(y, x)


def test_target_not_computed_from_source_gives_none():
    with tg.GradientTape() as tape:
        x = tape.watch(np.array([1.0, 2.0]))
        y = np.array(3.0)  # a constant
    assert tape.gradient(y, x) is None


def test_mismatched_grad_ys_shape_raises():
    with tg.GradientTape() as tape:
        x = tape.watch(np.ones(3))
        y = x * 2
    with pytest.raises(ValueError, match="shape"):
        tape.gradient(y, x, output_gradients=np.ones(4))


def test_mismatched_nested_structure_raises():
    with tg.GradientTape(persistent=True) as tape:
        x = tape.watch(np.ones(3))
        ys = [x * 2, x * 3]
    with pytest.raises(ValueError, match="structure"):
        tape.gradient(ys, x, output_gradients=[np.ones(3)])


def test_nested_structures_are_kept():
    params = {"w": np.array([1.0, 2.0]), "b": (np.array(0.5), [np.array([3.0])])}

    def loss(p):
        return np.sum(p["w"] ** 2) + p["b"][0] * np.sum(p["b"][1][0])

    g = tg.grad(loss)(params)
    np.testing.assert_allclose(g["w"], [2.0, 4.0])
    np.testing.assert_allclose(g["b"][0], 3.0)
    np.testing.assert_allclose(g["b"][1][0], [0.5])


def test_nan_and_inf_propagate_like_numpy():
    x = np.array([np.nan, np.inf, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        g = tg.grad(lambda x: np.sum(x * x))(x)
        expected = 2 * x
    np.testing.assert_array_equal(np.isnan(g), np.isnan(expected))
    assert g[1] == np.inf and g[2] == 2.0


def test_grad_of_non_scalar_points_to_jacobian_and_gradients():
    with pytest.raises(TypeError, match=r"jacobian.*gradients"):
        tg.grad(lambda x: x * 2)(np.ones(3))


def test_error_inside_a_tape_block_leaves_no_state():
    with pytest.raises(ZeroDivisionError):
        with tg.GradientTape() as tape:
            x = tape.watch(np.ones(2))
            _ = x * 2
            raise ZeroDivisionError
    plain = np.sin(np.ones(2))  # nothing is traced afterwards
    assert type(plain) is np.ndarray
    assert tg.grad(lambda x: np.sum(x**2))(np.ones(2)).tolist() == [2.0, 2.0]


# ----------------------------------------------------------------- never mutate caller's data
def test_inputs_grad_ys_and_closures_are_unchanged():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4))
    W = rng.standard_normal((4, 4))
    gy = rng.standard_normal((3, 4))
    before = _digest(x, W, gy)

    def f(x):
        y = x @ W
        y[0] = y[0] * 2  # an in-place write on a traced value
        y += 1.0
        return y

    tg.grad(lambda x: np.sum(f(x)))(x)
    tg.jacobian(f)(x)
    tg.hessian(lambda x: np.sum(np.tanh(f(x))))(x)
    with tg.GradientTape() as tape:
        xt = tape.watch(x)
        y = f(xt)
    tape.gradient(y, xt, output_gradients=gy)
    assert _digest(x, W, gy) == before


def test_results_do_not_alias_inputs_or_each_other():
    x = np.array([1.0, 2.0])
    gy = np.array([3.0, 4.0])
    with tg.GradientTape(persistent=True) as tape:
        a, b = tape.watch([x, x.copy()])
        y = a + b  # identity VJPs: both gradients are the seed itself
    ga, gb = tape.gradient(y, [a, b], output_gradients=gy)
    np.testing.assert_array_equal(ga, gy)
    assert not np.shares_memory(ga, gb)
    assert not np.shares_memory(ga, gy) and not np.shares_memory(gb, gy)
    ga[0] = 99.0
    assert gy[0] == 3.0 and gb[0] == 3.0
    g = tg.grad(lambda v: np.sum(v))(x)
    assert not np.shares_memory(g, x) and g.flags.writeable


# ----------------------------------------------------------------- memory
def test_memory_is_released_after_10000_gradient_calls():
    f = tg.grad(lambda x: np.sum(np.sin(x) * x))
    x = np.ones(16)
    for _ in range(200):  # warm caches
        f(x)
    gc.collect()
    tracemalloc.start()
    try:
        for _ in range(2000):
            f(x)
        gc.collect()
        first, _ = tracemalloc.get_traced_memory()
        for _ in range(8000):
            f(x)
        gc.collect()
        second, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert second - first < 64 * 1024, f"memory grew by {second - first} bytes over 8000 calls"


def _peak(fn):
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_chunked_jacobian_peak_scales_with_chunk():
    rng = np.random.default_rng(0)
    W = rng.standard_normal((400, 400)) / 20
    x = rng.standard_normal(400)
    f = lambda x: np.tanh(W @ np.tanh(W @ x))  # noqa: E731
    full = _peak(lambda: tg.jacobian(f)(x))
    chunked = _peak(lambda: tg.jacobian(f, chunk_size=40)(x))
    # The result itself (400 x 400 float64 = 1.28 MB) must exist in both; the sweep's
    # working set shrinks by about chunk/m.
    result = 400 * 400 * 8
    assert (chunked - 2 * result) < 0.35 * (full - result), (full, chunked)
    np.testing.assert_allclose(tg.jacobian(f, chunk_size=40)(x), tg.jacobian(f)(x))


def _bratu(u):
    U = np.pad(u, 1)
    return (U[2:, 1:-1] + U[:-2, 1:-1] + U[1:-1, 2:] + U[1:-1, :-2] - 4 * U[1:-1, 1:-1]) * 900.0 + 6.0 * np.exp(u)


def test_jacobian_without_chunk_size_bounds_its_peak(monkeypatch):
    """Without chunk_size, sweeps carry at most AUTO_CHUNK_BYTES of cotangents per value, and the rows are
    written into the result as they come: the peak is about the Jacobian itself, not several times it."""
    from tapegrad import requests

    u = 0.1 * np.random.default_rng(1).random((30, 30))
    result = 900 * 900 * 8
    whole = _peak(lambda: tg.jacobian(_bratu, chunk_size=900)(u))  # one sweep for every row
    monkeypatch.setattr(requests, "AUTO_CHUNK_BYTES", 1 << 18)  # 36 rows a sweep
    auto = _peak(lambda: tg.jacobian(_bratu)(u))
    assert whole > 3 * result, whole / result
    assert auto < 1.6 * result, auto / result
    np.testing.assert_array_equal(tg.jacobian(_bratu)(u), tg.jacobian(_bratu, chunk_size=900)(u))


def test_automatic_chunks_give_one_sweeps_numbers(monkeypatch):
    from tapegrad import requests

    monkeypatch.setattr(requests, "AUTO_CHUNK_BYTES", 2048)
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal(40), rng.standard_normal((40, 40))

    def f(x, w):  # rows 0-9 do not depend on x: chunks of unconnected rows for x
        head = np.tanh(w[:10] @ np.ones(40))
        tail = np.sqrt(np.maximum(w[10:] @ np.sin(x), 0)) + x[10:] ** 3
        return np.concatenate([head, tail])

    for argnums in (0, (0, 1)):
        auto = tg.jacobian(f, argnums=argnums)(x, w)
        one = tg.jacobian(f, argnums=argnums, chunk_size=40)(x, w)
        for a, b in zip((auto,) if argnums == 0 else auto, (one,) if argnums == 0 else one):
            np.testing.assert_array_equal(a, b)
            assert a.flags.owndata and a.flags.writeable
    np.testing.assert_array_equal(tg.hessian(lambda x: np.sum(f(x, w) ** 2))(x),
                                  tg.hessian(lambda x: np.sum(f(x, w) ** 2), chunk_size=40)(x))


def test_gradient_peak_of_long_elementwise_chain():
    x = np.random.default_rng(0).standard_normal(200_000)

    def chain(x):
        for _ in range(20):
            x = np.sin(x) * 0.9 + 0.1
        return np.sum(x)

    def forward_on_tape():
        with tg.GradientTape() as tape:
            chain(tape.watch(x))

    forward_peak = _peak(forward_on_tape)
    gradient_peak = _peak(lambda: tg.grad(chain)(x))
    assert gradient_peak <= 3 * forward_peak, (gradient_peak, forward_peak)
    # Values no VJP reads are pruned from the tape: only the 20 inputs of sin stay
    # (1.6 MB each), not all 60 intermediates.
    assert gradient_peak < 26 * x.nbytes, gradient_peak / x.nbytes


# ----------------------------------------------------------------- concurrency
def test_threads_differentiating_at_once_match_sequential_results():
    rng = np.random.default_rng(0)
    functions = [
        lambda x, k=k: np.sum(np.sin(x * (k + 1)) ** 2) + np.sum(x ** (k % 3 + 1)) for k in range(8)
    ]
    inputs = [rng.standard_normal(50) for _ in range(8)]
    expected = [tg.grad(f)(x) for f, x in zip(functions, inputs)]
    expected_h = [tg.hessian(f)(x[:5]) for f, x in zip(functions, inputs)]
    results = [None] * 8
    errors = []
    barrier = threading.Barrier(8)

    def work(k):
        try:
            barrier.wait()
            for _ in range(20):
                g = tg.grad(functions[k])(inputs[k])
                h = tg.hessian(functions[k])(inputs[k][:5])
            results[k] = (g, h)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for k in range(8):
        np.testing.assert_array_equal(results[k][0], expected[k])
        np.testing.assert_array_equal(results[k][1], expected_h[k])


# ----------------------------------------------------------------- numerical care
def test_logaddexp_is_stable_for_large_inputs():
    g = tg.grad(lambda x: np.sum(np.logaddexp(x, 0.0)))(np.array([1000.0, -1000.0, 0.0]))
    np.testing.assert_allclose(g, [1.0, 0.0, 0.5])


def test_log1p_and_expm1_are_accurate_near_zero():
    x = np.array([1e-12, -1e-12])
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(np.log1p(x)))(x), 1 / (1 + x), rtol=1e-15)
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(np.expm1(x)))(x), np.exp(x), rtol=1e-15)


def test_sqrt_at_zero_follows_numpy():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        g = tg.grad(lambda x: np.sum(np.sqrt(x)))(np.array([0.0, 4.0]))
    assert g[0] == np.inf and g[1] == 0.25


def test_division_by_zero_warns_like_numpy():
    with pytest.warns(RuntimeWarning):
        tg.grad(lambda x: np.sum(1.0 / x))(np.array([0.0, 1.0]))


def test_abs_at_zero_has_subgradient_zero():
    assert tg.grad(lambda x: np.sum(np.abs(x)))(np.array([0.0]))[0] == 0.0


@pytest.mark.parametrize("fun", [np.sin, np.exp, np.tanh, lambda x: x @ x, lambda x: np.mean(x**2)])
def test_float32_gradients_stay_float32(fun):
    x = np.linspace(-1, 1, 4, dtype=np.float32)
    assert tg.grad(lambda x: np.sum(fun(x)))(x).dtype == np.float32
    assert tg.jacobian(lambda x: fun(x) * 2.0)(x).dtype == np.float32
    assert tg.hessian(lambda x: np.sum(fun(x)))(x).dtype == np.float32


def test_private_tapes_release_their_values_and_refuse_a_second_request():
    from tapegrad.reverse import _trace_call
    from tapegrad.requests import gradient_request

    tape, out, _, sources, _ = _trace_call(lambda x: np.sum(np.sin(x) * x), (np.ones(3),), {}, 0, False)
    x = sources[0][1]
    first = gradient_request(tape, [out], x, release=True)
    np.testing.assert_allclose(first[0], np.cos(1.0) + np.sin(1.0))
    assert all(node[ARGS] is None for node in tape.nodes if node[RULE] is not None)
    with pytest.raises(TapeError, match="released"):
        gradient_request(tape, [out], x)


def test_rules_made_on_several_threads_keep_distinct_numbers():
    # A node holds its rule's number (tape.Node): two rules sharing one would swap VJPs.
    from tapegrad.registry import PRIMITIVE, RULE_TABLE, Rule

    made = []

    def make():
        for _ in range(300):
            made.append(Rule(object(), PRIMITIVE, abs))

    threads = [threading.Thread(target=make) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({r.number for r in made}) == len(made) == 1800
    assert all(RULE_TABLE[r.number] is r for r in made)
    assert all(RULE_TABLE[rule.number] is rule for rule in tg.registry.RULES.values())
