"""Gradient checkpointing: peak memory and time of a deep elementwise chain.

A chain of ``SEGMENTS * STEPS`` elementwise steps on a 200 000-element array
(1.6 MB per intermediate), differentiated plainly and with each segment
wrapped in ``tapegrad.checkpoint``.  Without checkpointing every
intermediate stays on the tape until the backward sweep; with it only the
segment boundaries do, plus one segment's intermediates while it is
recomputed.  ``peakmem_grad`` is asv's process peak RSS (interpreter
included); ``track_traced_peak`` is tracemalloc's peak of the call alone.
"""

import tracemalloc

import numpy as np

import tapegrad as tg

SEGMENTS, STEPS, SIZE = 8, 8, 200_000


def _segment(x):
    for _ in range(STEPS):
        x = np.sin(x) * 0.5 + x
    return x


def _loss(x, segment):
    for _ in range(SEGMENTS):
        x = segment(x)
    return np.sum(x)


class Checkpoint:
    params = [["plain", "checkpoint"]]
    param_names = ["mode"]
    timeout = 120

    def setup(self, mode):
        self.x = np.linspace(0.0, 1.0, SIZE)
        self.segment = tg.checkpoint(_segment) if mode == "checkpoint" else _segment
        self.grad = tg.grad(_loss)

    def time_grad(self, mode):
        self.grad(self.x, self.segment)

    def peakmem_grad(self, mode):
        self.grad(self.x, self.segment)

    def track_traced_peak(self, mode):
        tracemalloc.start()
        try:
            self.grad(self.x, self.segment)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    track_traced_peak.unit = "bytes"
