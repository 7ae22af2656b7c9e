"""autograd.scipy.stats.norm: the methods of ``scipy.stats.norm`` (looked up when used)."""

from typing import Any

import scipy.stats as _stats


def __getattr__(name: str) -> Any:
    return getattr(_stats.norm, name)
