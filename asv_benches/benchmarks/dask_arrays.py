"""Dask values: the gradient of an elementwise + reduction + stencil objective, chunk by chunk.

A small version (16 MiB of float64 in 1 MiB chunks) of
``examples/dask_out_of_core.py``: ``time_forward`` is a plain Dask
evaluation of the objective, ``time_value_and_grad`` traces it with tapegrad
and computes the value, the gradient's norm and a few slices in one
``dask.compute``; ``track_grad_over_forward`` is their ratio (one run),
``time_trace`` the graph building alone, and ``peakmem_value_and_grad`` asv's
peak RSS of the gradient.  The out-of-core figures (8 GiB) are in
docs/large-arrays.md.
"""

import time

import numpy as np

import tapegrad as tg
from tapegrad.examples import smooth_field_energy

N = 2**21  # 16 MiB of float64
CHUNK = 2**17  # 1 MiB chunks


def _field():
    try:
        import dask.array as da
    except ImportError:  # asv skips a benchmark whose setup raises NotImplementedError
        raise NotImplementedError("dask is not installed")
    return da.random.default_rng(0).standard_normal(N, chunks=CHUNK)


def _value_and_grad(u):
    import dask

    value, g = tg.value_and_grad(smooth_field_energy)(u)
    return dask.compute(value, np.sqrt(np.sum(g * g)), g[:3], g[-3:], scheduler="threads")


class DaskGradient:
    timeout = 300

    def setup(self):
        self.u = _field()

    def time_forward(self):
        smooth_field_energy(self.u).compute(scheduler="threads")

    def time_trace(self):
        tg.value_and_grad(smooth_field_energy)(self.u)

    def time_value_and_grad(self):
        _value_and_grad(self.u)

    def peakmem_value_and_grad(self):
        _value_and_grad(self.u)

    def track_grad_over_forward(self):
        t0 = time.perf_counter()
        smooth_field_energy(self.u).compute(scheduler="threads")
        forward = time.perf_counter() - t0
        t0 = time.perf_counter()
        _value_and_grad(self.u)
        return (time.perf_counter() - t0) / forward

    track_grad_over_forward.unit = "ratio"
