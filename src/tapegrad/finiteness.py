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
#: From this many entries on, :func:`sum_finite` takes BLAS's dot product instead of ``einsum``.
DOTTED = 1 << 14

#: The last array proved finite (a weak reference).  The sweep never writes into a rule's
#: output (only into sums it made itself), so a proved output stays proved.
_NAN_FREE: list = [None]


try:  # the C function itself: np.count_nonzero is a Python function in front of it
    from numpy._core.multiarray import count_nonzero as _count_nonzero
except ImportError:  # pragma: no cover - a NumPy that moved it
    _count_nonzero = np.count_nonzero


def all_true(values: np.ndarray) -> bool:
    """Whether no entry of the array ``values`` is zero (or ``False``); NaN counts as true, as in ``all()``.

    ``np.count_nonzero`` is one C call: ``ndarray.all()`` goes through a Python function
    of NumPy's (``_methods._all``) and ``np.logical_and.reduce`` costs a microsecond on
    512 entries, a hot path of the per-example sweep (0.3 us this way).
    """
    return _count_nonzero(values) == values.size


def finite(value: Any) -> bool:
    """Whether every entry of a scalar or array is finite (NaN and inf are not)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if type(value) is np.ndarray:
        if value.size >= SUMMED and sum_finite(value):
            return True  # one sum proves it; a "maybe not" is settled entry by entry
        return all_true(np.isfinite(value))
    return bool(np.isfinite(value).all())


def sum_finite(values: np.ndarray) -> bool:
    """``True`` only if every entry of a float or complex array is finite; ``False`` says "maybe not".

    Small arrays: ``einsum`` sums in one vectorised pass, faster than ``np.isfinite``
    (which writes an array of booleans) and than ``np.add.reduce``, and it sets no
    floating-point warning (``inf - inf``, an overflow) that the user would see.
    From :data:`DOTTED` entries, BLAS's ``v^H v`` (a sum of ``|v_i|^2``: inf or NaN as
    soon as one entry is) reads the memory twice as fast (10^5 float64: 6.8 us
    against 13.5 us); it warns on overflow, so the error state is silenced around it.
    """
    if values.dtype.kind not in "fc" or not values.flags.c_contiguous:
        return False
    flat = values.reshape(-1)
    if flat.size < DOTTED:
        return cmath.isfinite(np.einsum("i->", flat))
    with np.errstate(all="ignore"):
        return cmath.isfinite(np.vdot(flat, flat))


def mark_nan_free(value: np.ndarray) -> None:
    """Note ``value`` (just proved finite) for the next :func:`nan_free` look."""
    _NAN_FREE[0] = weakref.ref(value)


def nan_free(value: np.ndarray) -> bool:
    """Whether ``value`` is the last array proved finite; any look uses the proof up (one per sweep)."""
    ref, _NAN_FREE[0] = _NAN_FREE[0], None
    return ref is not None and ref() is value
