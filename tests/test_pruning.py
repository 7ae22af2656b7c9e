"""Values no VJP reads are not kept on the tape; derivatives are unchanged by that."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.dispatch import PRUNE_BYTES, primitive
from tapegrad.tape import ANS, ARGS
from tapegrad.testing import check_grads

N = 2 * PRUNE_BYTES // 8  # large enough to be pruned


def _big(seed=0, n=N):
    return np.random.default_rng(seed).uniform(0.2, 1.5, n)


@pytest.mark.parametrize(
    "fun",
    [
        lambda x: np.sum(np.log1p(np.exp(np.sin(x) * x)) * np.cos(x) + np.tanh(x) ** 2),
        lambda x: np.tanh(x * 2.0 + 1.0) / (x + 3.0) - np.sqrt(x) * np.exp(-x),
        lambda x: np.mean(np.transpose(np.reshape(x, (-1, 8)) ** 3), axis=0),
        lambda x: np.sum(np.expand_dims(np.log(x), 0) * np.square(x)),
    ],
)
def test_large_arrays_are_differentiated_correctly_at_orders_1_and_2(fun):
    check_grads(fun, [_big()], order=2)


def test_matmul_of_large_operands_first_and_second_order():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((200, 100))
    check_grads(lambda x, W: np.tanh(W @ np.tanh(A @ x)), [rng.standard_normal(100), rng.standard_normal((90, 200)) / 10])


def test_unread_intermediates_are_pruned_from_nodes():
    x = _big()
    with tg.GradientTape() as tape:
        xt = tape.watch(x)
        y = np.sum(np.exp(xt * 2.0) + 1.0)
    kinds = {type(v).__name__ for node in tape._tape.nodes for v in node[ARGS] + (node[ANS],)}
    assert "Pruned" in kinds
    np.testing.assert_allclose(tape.gradient(y, xt), 2 * np.exp(2 * x))


def test_a_wrong_needs_declaration_raises_instead_of_computing():
    square = primitive(lambda x: x * x)
    tg.defvjp(square, lambda g, ans, x: 2 * g * x, needs=((),))  # wrong: the VJP reads x
    with pytest.raises(RuntimeError, match="needs="):
        tg.grad(lambda x: np.sum(square(x)))(_big())
