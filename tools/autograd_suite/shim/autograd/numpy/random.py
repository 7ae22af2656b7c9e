"""autograd.numpy.random is ``numpy.random``."""

from typing import Any

import numpy.random as _random


def __getattr__(name: str) -> Any:
    return getattr(_random, name)
