"""autograd.scipy.stats.chi2: the methods of ``scipy.stats.chi2`` (looked up when used)."""

from typing import Any

import scipy.stats as _stats


def __getattr__(name: str) -> Any:
    return getattr(_stats.chi2, name)
