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

from ..errors import NonDifferentiableArgumentError
from ..registry import defcomposite, intercepted
from ..tracer import strip

__all__: list = []


def _multigammaln(a: Any, d: Any) -> Any:
    """``log Gamma_d(a) = d (d - 1) / 4 log(pi) + sum_j gammaln(a - (j - 1) / 2)``, SciPy's checks included."""
    d = operator.index(d)
    if np.any(np.less_equal(a, 0.5 * (d - 1))):
        raise ValueError(f"condition a ({a}) > 0.5 * (d-1) ({0.5 * (d - 1)}) not met")
    terms = np.stack([sp.gammaln(a - (j - 1.0) / 2) for j in range(1, d + 1)])
    return (d * (d - 1) * 0.25) * np.log(np.pi) + np.sum(terms, axis=0)


defcomposite(intercepted(sp.multigammaln), _multigammaln, note="sum of gammaln(a - j/2)")


# ---------------------------------------------------------------- counting functions
# comb, perm and factorial branch on isinstance(values, np.ndarray) and write zeros into the
# result where the arguments are out of range: with a tracer they test its truth instead.
# The same numbers, with np.where (the unselected branch gets strong zeros).
def _integers_only(name: str) -> NonDifferentiableArgumentError:
    return NonDifferentiableArgumentError(
        f"scipy.special.{name}(..., exact=True) counts in integer arithmetic: it has no derivative. "
        "Use exact=False (the gamma-function form), which tapegrad differentiates."
    )


def _in_range(N: Any, k: Any) -> np.ndarray:
    """SciPy's mask of the counts it computes, ``0 <= k <= N`` (plain: a selection, not a derivative)."""
    n, m = np.asarray(strip(N)), np.asarray(strip(k))
    return (m <= n) & (n >= 0) & (m >= 0)


def _comb(N: Any, k: Any, *, exact: bool = False, repetition: bool = False) -> Any:
    if exact:
        raise _integers_only("comb")
    if repetition:
        return np.where((np.asarray(strip(k)) == 0) & (np.asarray(strip(N)) >= 0), 1.0, sp.binom(N + k - 1, k))
    return np.where(_in_range(N, k), sp.binom(N, k), 0.0)


def _perm(N: Any, k: Any, exact: bool = False) -> Any:
    if exact:
        raise _integers_only("perm")
    return np.where(_in_range(N, k), sp.poch(N - k + 1, k), 0.0)


def _factorial(n: Any, exact: bool = False, extend: str = "zero") -> Any:
    if exact:
        raise _integers_only("factorial")
    if extend != "zero" or np.iscomplexobj(strip(n)):
        raise NonDifferentiableArgumentError(
            "scipy.special.factorial(..., extend='complex') on a traced value: use scipy.special.gamma(n + 1), "
            "which tapegrad differentiates."
        )
    return np.where(np.asarray(strip(n)) < 0, 0.0, sp.gamma(n + 1.0))  # NaN stays NaN, as SciPy's


defcomposite(intercepted(sp.comb), _comb, note="binom(N, k), 0 outside 0 <= k <= N")
defcomposite(intercepted(sp.perm), _perm, note="poch(N - k + 1, k), 0 outside 0 <= k <= N")
defcomposite(intercepted(sp.factorial), _factorial, note="gamma(n + 1), 0 for n < 0")
