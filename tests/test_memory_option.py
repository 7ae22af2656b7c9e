"""The opt-in allocator setting: applies where glibc is present and changes no result."""

import sys

import numpy as np

import tapegrad as tg


def test_retain_freed_memory_toggles_and_keeps_results():
    x = np.linspace(-1, 1, 50_000)
    f = lambda x: np.sum(np.tanh(x) ** 2 * np.exp(x))  # noqa: E731
    before = tg.grad(f)(x)
    applied = tg.retain_freed_memory(True)
    try:
        assert isinstance(applied, bool)
        if sys.platform.startswith("linux"):
            assert applied  # glibc's mallopt exists on the Linux machines we test on
        np.testing.assert_array_equal(tg.grad(f)(x), before)
    finally:
        assert tg.retain_freed_memory(False) == applied
