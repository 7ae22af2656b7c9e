"""``xp.special``: SciPy's special-function ufuncs, routed to tapegrad's rules.

SciPy in array-API mode looks up ``xp.special.<name>`` before it falls back
to ``np.asarray`` (``scipy.special._support_alternative_backends``).  This
module answers with SciPy's own *ufunc* (``scipy.special._ufuncs.<name>``, not
SciPy's array-API wrapper, which would come straight back here): applied to a
tracer, the ufunc reaches tapegrad's rule through ``__array_ufunc__``, or
raises :class:`~tapegrad.UnsupportedFunctionError` naming itself when there is
no rule.  Names that are not ufuncs are absent, so SciPy uses its generic
array-API code for them.  SciPy is imported on first use only.
"""

from __future__ import annotations

from typing import Any

import numpy as np


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
