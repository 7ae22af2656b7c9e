"""The derivative table, one module per family.

Importing this package registers every rule in :mod:`tapegrad.registry`.
Rules for SciPy's ufuncs live in :mod:`tapegrad.rules.special` and are
loaded lazily, the first time a SciPy ufunc reaches a tracer.
"""

from . import ufuncs, reductions, shape, indexing, linalg, fft, signal, nondiff  # noqa: F401
from . import statistics  # noqa: F401,E402
from . import selection  # noqa: F401,E402
from . import contractions  # noqa: F401,E402
from . import misc, polynomial, sets  # noqa: F401,E402
from . import ufunc_methods  # noqa: F401,E402  (last: derives ufunc methods from the rules above)
