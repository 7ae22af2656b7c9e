"""tf.gradients / GradientTape semantics beyond the acceptance examples."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import TapeError


def test_stop_gradients_gives_partial_derivatives():
    # The tf.gradients documentation example: a = 0, b = 2 a, d(a + b)/d[a, b].
    with tg.GradientTape() as tape:
        a = tape.watch(np.array(0.0))
        b = 2 * a
        y = a + b
    assert tg.gradients(y, [a, b]) == [3.0, 1.0]  # total derivatives
    assert tg.gradients(y, [a, b], stop_gradients=[a, b]) == [1.0, 1.0]  # partial ones
    assert tg.gradients(y, a, stop_gradients=b) == [1.0]


def test_stop_gradients_on_an_intermediate_of_a_vector_function():
    x0 = np.array([0.5, -1.0])
    with tg.GradientTape() as tape:
        x = tape.watch(x0)
        h = np.sin(x)
        y = np.sum(h * x)
    (g,) = tg.gradients(y, [x], stop_gradients=[h])
    np.testing.assert_allclose(g, np.sin(x0))  # h held constant: d(h.x)/dx = h
    (g,) = tg.gradients(y, [x])
    np.testing.assert_allclose(g, np.sin(x0) + x0 * np.cos(x0))


def test_gradients_with_respect_to_an_intermediate_value():
    with tg.GradientTape() as tape:
        x = tape.watch(np.array([1.0, 2.0]))
        h = x * x
        y = np.sum(np.exp(h))
    gh, gx = tg.gradients(y, [h, x])
    np.testing.assert_allclose(gh, np.exp([1.0, 4.0]))
    np.testing.assert_allclose(gx, np.exp([1.0, 4.0]) * 2 * np.array([1.0, 2.0]))


def test_tape_jacobian_chunked_and_unconnected():
    W = np.arange(6.0).reshape(2, 3)
    with tg.GradientTape(persistent=True) as tape:
        x, z = tape.watch([np.ones(3), np.ones(2)])
        y = np.tanh(W @ x)
    full = tape.jacobian(y, x)
    np.testing.assert_allclose(tape.jacobian(y, x, chunk_size=1), full)
    np.testing.assert_allclose(full, (1 - np.tanh(W @ np.ones(3)) ** 2)[:, None] * W)
    assert tape.jacobian(y, z) is None
    np.testing.assert_array_equal(tape.jacobian(y, z, unconnected_gradients="zero"), np.zeros((2, 2)))


def test_tape_batch_jacobian_matches_per_row_jacobians():
    x0 = np.random.default_rng(0).standard_normal((4, 3))
    with tg.GradientTape() as tape:
        x = tape.watch(x0)
        y = np.tanh(x) * np.sum(x, axis=1, keepdims=True)
    J = tape.batch_jacobian(y, x)
    assert J.shape == (4, 3, 3)
    for b in range(4):
        np.testing.assert_allclose(
            J[b], tg.jacobian(lambda r: np.tanh(r) * np.sum(r))(x0[b]), rtol=1e-12, atol=1e-14
        )


def test_stop_recording_reset_and_watched_variables():
    tape = tg.GradientTape(persistent=True)
    with tape:
        x = tape.watch(np.array([1.0, 2.0]))
        with tape.stop_recording():
            untraced = x * 3.0
        y = x * x
    assert type(untraced) is np.ndarray
    assert tape.watched_variables() == (x,)
    np.testing.assert_allclose(tape.gradient(y, x), [2.0, 4.0])
    tape.reset()
    assert tape.watched_variables() == ()
    with pytest.raises(TapeError):
        tape.gradient(y, x)  # x belongs to the forgotten recording


def test_unconnected_gradients_accepts_an_enum_like_value():
    class Unconnected:
        value = "zero"

    with tg.GradientTape() as tape:
        x, z = tape.watch([np.ones(2), np.ones(3)])
        y = np.sum(x)
    _, gz = tape.gradient(y, [x, z], unconnected_gradients=Unconnected())
    np.testing.assert_array_equal(gz, np.zeros(3))
    with pytest.raises(ValueError):
        tg.gradients(y, [x], unconnected_gradients="maybe")
