"""Functions whose outputs carry no gradient.

They run on the raw values and return plain arrays: comparisons, rounding,
sign tests, arg-reductions, shape queries and constructors shaped like a
tracer.  Their derivative is zero wherever it exists, so treating the output
as a constant is exact, not an approximation.
"""

from __future__ import annotations

import numpy as np

from ..registry import defconstant

CONSTANT_UFUNCS = [
    np.sign, np.floor, np.ceil, np.trunc, np.rint, np.floor_divide, np.signbit,
    np.isnan, np.isinf, np.isfinite, np.equal, np.not_equal, np.less, np.less_equal,
    np.greater, np.greater_equal, np.logical_and, np.logical_or, np.logical_xor,
    np.logical_not, np.spacing, np.nextafter,
]

CONSTANT_FUNCTIONS = [
    np.shape, np.ndim, np.size, np.result_type, np.iscomplexobj, np.isrealobj,
    np.zeros_like, np.ones_like, np.empty_like, np.full_like,
    np.argmax, np.argmin, np.argsort, np.nonzero, np.flatnonzero, np.argwhere,
    np.count_nonzero, np.isclose, np.allclose, np.array_equal, np.any, np.all,
    np.round, np.around, np.fix, np.isnan, np.isfinite,
]

defconstant(*CONSTANT_UFUNCS)
defconstant(*CONSTANT_FUNCTIONS)
