"""autograd.scipy.stats.dirichlet: the methods of ``scipy.stats.dirichlet`` (looked up when used)."""

from typing import Any

import scipy.stats as _stats


def __getattr__(name: str) -> Any:
    return getattr(_stats.dirichlet, name)
