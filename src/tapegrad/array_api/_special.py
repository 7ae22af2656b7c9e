"""``xp.special``: SciPy's special-function ufuncs, routed to tapegrad's rules.

SciPy in array-API mode looks up ``xp.special.<name>`` before it falls back
to ``np.asarray`` (``scipy.special._support_alternative_backends``).  This
module answers with SciPy's own *ufunc* (``scipy.special._ufuncs.<name>``, not
SciPy's array-API wrapper, which would come straight back here): applied to a
tracer, the ufunc reaches tapegrad's rule through ``__array_ufunc__``, or
raises :class:`~tapegrad.UnsupportedFunctionError` naming itself when there is
no rule.  Three of SciPy's Python-level functions are spelled here with
ufuncs that have rules (``zeta(x, q)``, ``polygamma``, ``multigammaln``); other
names that are not ufuncs are absent, so SciPy uses its generic array-API code
for them (or its NumPy fallback, which raises GradientDroppedError on a
tracer).  SciPy is imported on first use only.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def zeta(x: Any, q: Any = None) -> Any:
    """Hurwitz zeta ``zeta(x, q)`` (Riemann's when ``q`` is None), SciPy's ufuncs."""
    from scipy.special import _ufuncs

    return _ufuncs._riemann_zeta(x) if q is None else _ufuncs._zeta(x, q)


def polygamma(n: Any, x: Any) -> Any:
    """``polygamma(n, x)`` for integer orders ``n >= 0``: ``psi`` at 0, ``(-1)**(n+1) n! zeta(n+1, x)`` above."""
    from scipy.special import _ufuncs

    orders = np.asarray(n)  # orders carry no gradient
    out = None
    for k in np.unique(orders):
        if k < 0 or k != int(k):
            raise ValueError(f"polygamma: orders must be non-negative integers, got {k}")
        k = int(k)
        val = _ufuncs.psi(x) if k == 0 else ((-1) ** (k + 1) * math.factorial(k)) * _ufuncs._zeta(k + 1.0, x)
        out = val + np.zeros(orders.shape) if out is None else np.where(orders == k, val, out)
    return out


def multigammaln(a: Any, d: int) -> Any:
    """Log of the multivariate gamma function: ``d(d-1)/4 log(pi) + sum_j gammaln(a - j/2)``."""
    from scipy.special import _ufuncs

    d = int(d)
    if d < 1:
        raise ValueError("multigammaln: d must be a positive integer")
    out = (d * (d - 1) / 4.0) * math.log(math.pi)
    for j in range(d):
        out = out + _ufuncs.gammaln(a - j / 2.0)
    return out


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        from scipy.special import _ufuncs
    except ImportError:  # SciPy is optional: no special functions without it
        raise AttributeError(f"tapegrad.array_api.special.{name}: SciPy is not installed") from None
    fun = getattr(_ufuncs, name, None)
    if not isinstance(fun, np.ufunc):
        raise AttributeError(f"tapegrad.array_api.special has no ufunc {name!r}")
    return fun


def __dir__() -> list:
    try:
        from scipy.special import _ufuncs
    except ImportError:
        return []
    return sorted(n for n in dir(_ufuncs) if not n.startswith("_") and isinstance(getattr(_ufuncs, n), np.ufunc))
