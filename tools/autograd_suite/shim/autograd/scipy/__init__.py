"""autograd.scipy is plain SciPy (tapegrad reaches SciPy through its SciPy door)."""

from typing import Any

import scipy as _scipy

from . import integrate, linalg, signal, special, stats  # noqa: F401


def __getattr__(name: str) -> Any:
    return getattr(_scipy, name)
