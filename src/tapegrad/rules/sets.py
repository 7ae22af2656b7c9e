"""Set functions: ``union1d``, ``intersect1d``, ``setdiff1d``, ``setxor1d``.

Their outputs are entries of the inputs, so they carry gradients, exactly
like ``np.unique`` (see :mod:`tapegrad.rules.nondiff`): NumPy's own function
runs on the raw values, and each output value is then traced back to the
group of *all* entries of both inputs equal to it, whose cotangents share it
equally (tapegrad's tie convention).  ``intersect1d(a, b)`` therefore splits
a value's cotangent between its copies in ``a`` and in ``b``; ``setdiff1d``
only ever reaches entries of its first argument.  Index outputs
(``intersect1d(..., return_indices=True)``) are constant.
"""

from __future__ import annotations

import numpy as np

from ..dispatch import strip
from ..registry import defcomposite
from .misc import as_dtype
from .nondiff import _group_values


def _traced_values(values, ar1, ar2):
    """``values`` (entries of ``ar1``/``ar2``) re-expressed as differentiable functions of them."""
    both = np.concatenate((np.ravel(ar1), np.ravel(ar2)))
    uniq, index, inverse, counts = np.unique(strip(both), return_index=True, return_inverse=True, return_counts=True)
    where = np.searchsorted(uniq, values)
    if not np.array_equal(uniq[where], values, equal_nan=True):  # pragma: no cover (a NumPy change)
        raise NotImplementedError("set function output not found among its inputs")
    grouped = _group_values(both, None, index, inverse, counts)
    return as_dtype(grouped[where], values.dtype)


def _set_function(fun):
    def impl(ar1, ar2, *args, **kwargs):
        raw = fun(strip(ar1), strip(ar2), *args, **kwargs)
        values = raw[0] if isinstance(raw, tuple) else raw
        if values.dtype.kind not in "fc":
            return raw
        traced = _traced_values(values, ar1, ar2)
        return (traced,) + raw[1:] if isinstance(raw, tuple) else traced

    return impl


_NOTE = "each value's cotangent split equally among the equal entries of both inputs; indices constant"
for _fun in (np.union1d, np.intersect1d, np.setdiff1d, np.setxor1d):
    defcomposite(_fun, _set_function(_fun), note=_NOTE)
