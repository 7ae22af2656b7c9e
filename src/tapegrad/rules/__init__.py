"""The derivative table, one module per family.

Importing this package registers every rule in :mod:`tapegrad.registry`.
Rules for SciPy's ufuncs live in :mod:`tapegrad.rules.special` and are
loaded lazily, the first time a SciPy ufunc reaches a tracer (tapegrad never
imports SciPy itself): :func:`_load_scipy_rules` is the registry's first
resolver for keys without a rule.
"""

import importlib
import sys

import numpy as np

from ..registry import RESOLVERS, RULES

from . import ufuncs, reductions, shape, indexing, linalg, fft, signal, nondiff  # noqa: F401
from . import statistics  # noqa: F401,E402
from . import selection  # noqa: F401,E402
from . import contractions  # noqa: F401,E402
from . import misc, polynomial, sets  # noqa: F401,E402
from . import squares  # noqa: F401,E402  (np.square of a modulus or a norm)
from . import vectorize  # noqa: F401,E402  (np.vectorize, through the door)
from . import ufunc_methods  # noqa: F401,E402  (last: derives ufunc methods from the rules above)


def _load_scipy_rules(key):
    """Import the SciPy rules the first time a non-NumPy ufunc without a rule is looked up."""
    ufunc = key[0] if isinstance(key, tuple) else key
    if not isinstance(ufunc, np.ufunc) or "scipy.special" not in sys.modules:
        return None
    RESOLVERS.remove(_load_scipy_rules)  # once
    importlib.import_module("tapegrad.rules.special")
    return RULES.get(key)


RESOLVERS.insert(0, _load_scipy_rules)
