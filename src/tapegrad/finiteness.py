"""Cheap proofs that arrays hold no inf or NaN, for the sweep's fast paths.

A finite sum proves every addend finite (an inf or NaN addend makes the sum inf
or NaN); a non-finite sum only says "maybe not" (finite entries can overflow),
and the caller then looks entry by entry.  So a proof can cost speed, never
correctness.  The banded product of a per-example Jacobian marks its result as
proved (:func:`mark_nan_free`), and the sweep's NaN look at the end
(:func:`tapegrad.strong.has_nan`) then skips a second pass over it.
"""

from __future__ import annotations

import cmath
import math
import weakref
from typing import Any

import numpy as np

__all__ = ["finite", "sum_finite", "all_true", "SUMMED", "mark_nan_free", "nan_free"]

#: From this many entries on, a sum (:func:`sum_finite`) is tried before ``np.isfinite``.
SUMMED = 4096

#: The last array proved finite (a weak reference).  The sweep never writes into a rule's
#: output (only into sums it made itself), so a proved output stays proved.
_NAN_FREE: list = [None]


# ``np.logical_and.reduce`` called directly: ``ndarray.all()`` goes through a Python
# function of NumPy's (``_methods._all``), a microsecond per call on a hot path.
all_true = np.logical_and.reduce


def finite(value: Any) -> bool:
    """Whether every entry of a scalar or array is finite (NaN and inf are not)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if type(value) is np.ndarray:
        if value.size >= SUMMED and sum_finite(value):
            return True  # one sum proves it; a "maybe not" is settled entry by entry
        return bool(all_true(np.isfinite(value), axis=None))
    return bool(np.isfinite(value).all())


def sum_finite(values: np.ndarray) -> bool:
    """``True`` only if every entry of a float or complex array is finite; ``False`` says "maybe not".

    ``einsum`` sums in one vectorised pass, faster than ``np.isfinite`` (which writes
    an array of booleans) and than ``np.add.reduce``, and it sets no floating-point
    warning (``inf - inf``, an overflow) that the user would see.
    """
    if values.dtype.kind not in "fc" or not values.flags.c_contiguous:
        return False
    return cmath.isfinite(np.einsum("i->", values.reshape(-1)))


def mark_nan_free(value: np.ndarray) -> None:
    """Note ``value`` (just proved finite) for the next :func:`nan_free` look."""
    _NAN_FREE[0] = weakref.ref(value)


def nan_free(value: np.ndarray) -> bool:
    """Whether ``value`` is the last array proved finite; any look uses the proof up (one per sweep)."""
    ref, _NAN_FREE[0] = _NAN_FREE[0], None
    return ref is not None and ref() is value
