"""Calls recorded on one tape from several threads (Dask's threaded scheduler, a thread pool).

Recording takes a node's index and then appends the node; two threads could take
one index, and the sweep would then give a silently wrong gradient (8 of 20 Dask
gradients were wrong before ``Tape.reindex``).  A tiny switch interval makes the
interpreter change threads as often as it can, so a lost race would show here.
"""

import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import tapegrad as tg


@pytest.fixture
def eager_thread_switches():
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


X = np.random.default_rng(41).uniform(0.5, 1.5, 2000)


def _piece(x):
    return np.sum(np.sin(x) * x + np.exp(-x) * x**2)


def test_a_thread_pool_recording_on_one_tape(eager_thread_switches):
    def pooled(x):
        chunks = [x[i : i + 50] for i in range(0, x.shape[0], 50)]
        with ThreadPoolExecutor(4) as pool:
            return np.sum(np.stack(list(pool.map(_piece, chunks))))

    expected = tg.grad(_piece)(X)
    for _ in range(5):
        np.testing.assert_allclose(tg.grad(pooled)(X), expected, rtol=1e-13, atol=1e-13)


def test_dask_threaded_scheduler_over_traced_chunks(eager_thread_switches):
    dask = pytest.importorskip("dask")
    da = pytest.importorskip("dask.array")

    def f(x, scheduler):
        lazy = da.from_array(x, chunks=50)
        total = (np.sin(lazy) * lazy + np.exp(-lazy) * lazy**2).sum()
        with dask.config.set(scheduler=scheduler):
            return total.compute()

    expected = tg.grad(lambda x: f(x, "sync"))(X)
    for _ in range(5):
        np.testing.assert_allclose(tg.grad(lambda x: f(x, "threads"))(X), expected, rtol=1e-13, atol=1e-13)
