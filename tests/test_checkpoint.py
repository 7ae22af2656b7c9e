"""Gradient checkpointing: tg.checkpoint."""

import tracemalloc

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import check_grads

_bound_asarray = np.asarray  # bound at import, like `from numpy import asarray`

rng = np.random.default_rng(2)


def block(x, w):
    for _ in range(4):
        x = np.tanh(x * w) + 0.5 * x
    return x


saved_block = tg.checkpoint(block)


def chain(x, w, step):
    for _ in range(3):
        x = step(x, w)
    return np.sum(x**2)


def test_values_gradients_and_hessians_match_plain_code():
    x, w = rng.standard_normal(5), 0.8
    assert np.array_equal(saved_block(x, w), block(x, w))
    g_saved = tg.grad(chain, argnums=(0, 1))(x, w, saved_block)
    g_plain = tg.grad(chain, argnums=(0, 1))(x, w, block)
    for a, b in zip(g_saved, g_plain):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    np.testing.assert_allclose(tg.hessian(chain)(x, w, saved_block), tg.hessian(chain)(x, w, block), rtol=1e-10)
    np.testing.assert_allclose(
        tg.jacobian(saved_block)(x, w), tg.jacobian(block)(x, w), rtol=1e-12
    )


def test_finite_differences_second_order():
    check_grads(lambda x, w: chain(x, w, saved_block), [rng.standard_normal(4), np.array(0.7)], order=2)


def test_one_node_on_the_tape_and_one_recomputation():
    calls = []

    @tg.checkpoint
    def f(x):
        calls.append(1)
        for _ in range(10):
            x = np.sin(x) + x
        return x

    with tg.GradientTape() as tape:
        x = tape.watch(np.ones(3))
        y = np.sum(f(x))
    assert len(tape._tape.nodes) == 3  # source, the checkpoint, the sum
    g = tape.gradient(y, x)
    assert len(calls) == 2  # forward + one recomputation in the backward pass
    np.testing.assert_allclose(g, tg.grad(lambda x: np.sum(f.__wrapped__(x)))(np.ones(3)), rtol=1e-12)


def test_structures_keywords_and_constants():
    @tg.checkpoint
    def layer(params, x, *, activation, n_repeat=2, name=None):
        h = x
        for _ in range(n_repeat):
            h = activation(h @ params["W"] + params["b"])
        return {"out": h, "norm": np.sum(h**2)}, name

    params = {"W": rng.standard_normal((3, 3)), "b": rng.standard_normal(3)}
    x = rng.standard_normal((2, 3))

    def loss(params, x):
        out, name = layer(params, x, activation=np.tanh, n_repeat=3, name="hidden")
        assert name == "hidden"
        return np.sum(out["out"]) + out["norm"]

    def plain_loss(params, x):
        out, _ = layer.__wrapped__(params, x, activation=np.tanh, n_repeat=3)
        return np.sum(out["out"]) + out["norm"]

    g = tg.grad(loss, argnums=(0, 1))(params, x)
    r = tg.grad(plain_loss, argnums=(0, 1))(params, x)
    np.testing.assert_allclose(g[0]["W"], r[0]["W"], rtol=1e-12)
    np.testing.assert_allclose(g[0]["b"], r[0]["b"], rtol=1e-12)
    np.testing.assert_allclose(g[1], r[1], rtol=1e-12)


def test_traced_keyword_argument_and_unused_output():
    @tg.checkpoint
    def f(x, scale=1.0):
        return np.sin(x) * scale, np.cos(x) * scale

    x = rng.standard_normal(3)
    g = tg.grad(lambda s: np.sum(f(x, scale=s)[1]))(2.0)
    np.testing.assert_allclose(g, np.sum(np.cos(x)), rtol=1e-12)


def test_float32_and_integer_arguments():
    @tg.checkpoint
    def f(x, k):
        return x ** k

    x = np.array([1.0, 2.0], dtype=np.float32)
    g = tg.grad(lambda x: np.sum(f(x, 3)))(x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 3 * x**2)


def _peak_bytes(fun, *args):
    tracemalloc.start()
    try:
        fun(*args)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_peak_memory_is_much_lower():
    segments, steps = 6, 6

    def segment(x):
        for _ in range(steps):
            x = np.sin(x) * 0.5 + x
        return x

    saved = tg.checkpoint(segment)

    def loss(x, step):
        for _ in range(segments):
            x = step(x)
        return np.sum(x)

    x = np.linspace(0.0, 1.0, 50_000)  # 0.4 MB per array
    g_plain = tg.grad(loss)(x, segment)
    g_saved = tg.grad(loss)(x, saved)
    np.testing.assert_allclose(g_saved, g_plain, rtol=1e-12)
    plain = _peak_bytes(tg.grad(loss), x, segment)
    ckpt = _peak_bytes(tg.grad(loss), x, saved)
    # 36 steps x 3 stored arrays without; ~6 boundaries + one segment's 18 arrays with.
    assert ckpt < 0.45 * plain, (ckpt, plain)


def test_not_traced_calls_pass_through():
    assert saved_block(np.ones(2), 0.5).shape == (2,)
    # The forward pass runs on raw values, but the recomputation is traced:
    # untraceable code inside a checkpoint fails loudly in the backward pass.
    # (``from numpy import asarray`` binds the original: tapegrad does not intercept it.)
    opaque = tg.checkpoint(lambda y: np.sin(_bound_asarray(y)))
    with pytest.raises(tg.GradientDroppedError):
        tg.grad(lambda x: np.sum(opaque(x)))(np.ones(2))


def test_forward_mode_and_hvp_through_checkpoints():
    x, w = rng.standard_normal(4), 0.6
    v = rng.standard_normal(4)
    np.testing.assert_allclose(
        tg.hvp(chain)(x, v, w, saved_block), tg.hvp(chain)(x, v, w, block), rtol=1e-10
    )
    np.testing.assert_allclose(
        tg.jacfwd(saved_block)(x, w), tg.jacobian(block)(x, w), rtol=1e-10
    )
