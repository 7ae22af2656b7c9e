"""autograd.scipy.stats.poisson: the methods of ``scipy.stats.poisson`` (looked up when used)."""

from typing import Any

import scipy.stats as _stats


def __getattr__(name: str) -> Any:
    return getattr(_stats.poisson, name)
