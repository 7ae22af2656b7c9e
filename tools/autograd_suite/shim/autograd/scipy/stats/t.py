"""autograd.scipy.stats.t: the methods of ``scipy.stats.t`` (looked up when used)."""

from typing import Any

import scipy.stats as _stats


def __getattr__(name: str) -> Any:
    return getattr(_stats.t, name)
