"""autograd.scipy.stats is ``scipy.stats``.

autograd makes each distribution a module (``import
autograd.scipy.stats.multivariate_normal as mvn``); the shim's modules hand out
the methods of SciPy's distribution objects.
"""

from typing import Any

import scipy.stats as _stats


def __getattr__(name: str) -> Any:
    return getattr(_stats, name)
