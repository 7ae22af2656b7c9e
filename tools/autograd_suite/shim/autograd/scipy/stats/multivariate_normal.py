"""autograd.scipy.stats.multivariate_normal: the methods of ``scipy.stats.multivariate_normal``."""

from typing import Any

import scipy.stats as _stats


def __getattr__(name: str) -> Any:
    return getattr(_stats.multivariate_normal, name)
