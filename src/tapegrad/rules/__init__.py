"""The derivative table, one module per family.

Importing this package registers every rule in :mod:`tapegrad.registry`.
"""

from . import ufuncs, reductions, shape, indexing, linalg, nondiff  # noqa: F401
