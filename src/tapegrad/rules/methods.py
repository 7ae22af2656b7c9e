"""ndarray methods of :class:`~tapegrad.tracer.Tracer` that map to NumPy functions.

``x.sum(axis=0)`` calls ``np.sum(x, axis=0)``, which dispatches back to the
registry; so a method is supported exactly when its function is.
"""

from __future__ import annotations

import numpy as np

METHOD_FUNCTIONS = {
    name: getattr(np, name)
    for name in (
        "sum", "mean", "prod", "max", "min", "std", "var", "cumsum", "cumprod",
        "clip", "round", "trace", "diagonal", "nonzero", "repeat", "take", "argmax",
        "argmin", "argsort", "any", "all", "searchsorted", "compress", "choose",
        "partition", "argpartition", "put",
    )
}
METHOD_FUNCTIONS["ptp"] = np.ptp
