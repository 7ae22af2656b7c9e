"""autograd.scipy.stats.gamma: the methods of ``scipy.stats.gamma`` (looked up when used)."""

from typing import Any

import scipy.stats as _stats


def __getattr__(name: str) -> Any:
    return getattr(_stats.gamma, name)
