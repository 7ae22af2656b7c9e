"""autograd.scipy.stats.beta: the methods of ``scipy.stats.beta`` (looked up when used)."""

from typing import Any

import scipy.stats as _stats


def __getattr__(name: str) -> Any:
    return getattr(_stats.beta, name)
