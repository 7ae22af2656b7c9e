"""Large element-wise calls split across threads (tapegrad.parallel), against one thread.

Two gradients on 10^6 values whose time is mostly transcendental loops: a real
chain of ``sin``, ``log1p`` and ``tanh``, and a complex one (complex ``exp``,
``log`` and ``sqrt`` take 20-70 ns per element).  ``threads = 1`` turns the
splitting off; ``0`` keeps tapegrad's default (one thread per CPU, at most 8).
"""

import numpy as np

import tapegrad as tg
from tapegrad import parallel

N = 1_000_000


def _real_chain(x):
    return np.sum(np.tanh(np.sin(x) * np.log1p(x * x)))


def _complex_wave(x):
    z = np.exp(1j * x) * np.log(x + 2j)
    return np.sum(np.real(z * np.conj(np.sqrt(z + 3.0))))


class SplitLoops:
    params = [[1, 0]]
    param_names = ["threads"]
    timeout = 120

    def setup(self, threads):
        self.before = parallel.num_threads()
        if threads:
            tg.set_num_threads(threads)
        self.x = np.linspace(-2.0, 2.0, N)
        self.real = tg.grad(_real_chain)
        self.complex = tg.grad(_complex_wave)
        self.real(self.x)  # each loop's cost is measured on its first large call
        self.complex(self.x)

    def teardown(self, threads):
        tg.set_num_threads(self.before)

    def time_grad_real_chain(self, threads):
        self.real(self.x)

    def time_grad_complex_wave(self, threads):
        self.complex(self.x)
