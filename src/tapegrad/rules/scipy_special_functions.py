"""Rules for the Python functions of ``scipy.special`` that NumPy's protocols cannot follow.

Most of ``scipy.special`` is ufuncs (:mod:`tapegrad.rules.special`), and its
Python functions (``logsumexp``, ``softmax``, ``polygamma``) run their NumPy
code on tracers.  Those here hand a list of traced values to a ufunc, which
NumPy converts in compiled code; they are composites written with the same
ufuncs, reached through SciPy's door (:mod:`tapegrad.interception`).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import scipy.special as sp

from ..registry import defcomposite, intercepted

__all__: list = []


def _multigammaln(a: Any, d: Any) -> Any:
    """``log Gamma_d(a) = d (d - 1) / 4 log(pi) + sum_j gammaln(a - (j - 1) / 2)``, SciPy's checks included."""
    d = operator.index(d)
    if np.any(np.less_equal(a, 0.5 * (d - 1))):
        raise ValueError(f"condition a ({a}) > 0.5 * (d-1) ({0.5 * (d - 1)}) not met")
    terms = np.stack([sp.gammaln(a - (j - 1.0) / 2) for j in range(1, d + 1)])
    return (d * (d - 1) * 0.25) * np.log(np.pi) + np.sum(terms, axis=0)


defcomposite(intercepted(sp.multigammaln), _multigammaln, note="sum of gammaln(a - j/2)")
