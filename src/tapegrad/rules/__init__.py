"""The derivative table, one module per family.

Importing this package registers every rule in :mod:`tapegrad.registry`.
Rules for SciPy's ufuncs live in :mod:`tapegrad.rules.special` and are
loaded lazily, the first time a SciPy ufunc reaches a tracer.
"""

from . import ufuncs, reductions, shape, indexing, linalg, fft, signal, nondiff  # noqa: F401
