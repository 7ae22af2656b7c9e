"""autograd.numpy.fft is ``numpy.fft``."""

from typing import Any

import numpy.fft as _fft


def __getattr__(name: str) -> Any:
    return getattr(_fft, name)
