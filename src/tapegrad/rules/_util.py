"""Small helpers shared by the rule modules.

Rules receive a cotangent ``g`` that may carry extra *leading* batch axes; these
helpers address array axes from the end so that every rule works for a
gradient (no batch), a Jacobian (one batch axis) and nested batches alike.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from ..lazy import broadcast_to
from ..tape import PLACEHOLDER_COTANGENTS
from ..tracer import Tracer, strip

__all__ = ["batch_ndim", "negative_axes", "unreduce", "swap_last", "may_be_nonzero"]


def may_be_nonzero(part: Any) -> bool:
    """Whether a part of a cotangent may carry a derivative (for rules that refuse a used part).

    A plain array says so by its values; so does a traced one in a reverse sweep (a
    Hessian's cotangent is a value of the first sweep).  In forward mode the traced
    cotangents are placeholders whose zeros say nothing: the part may be used.
    """
    if np.size(part) == 0:  # no such part (a square matrix has no extra columns)
        return False
    if type(part) is Tracer and PLACEHOLDER_COTANGENTS.get():
        return True
    return bool(np.any(strip(part)))


def batch_ndim(g: Any, ans: Any) -> int:
    """Number of leading batch axes ``g`` carries in front of ``ans``'s shape."""
    return np.ndim(g) - np.ndim(ans)


def negative_axes(axis: Optional[Any], ndim: int) -> tuple:
    """Normalise ``axis`` (None, int or tuple, possibly negative) to sorted negative axes."""
    if axis is None:
        return tuple(range(-ndim, 0))
    if type(axis) is int:  # the common case, without the loop
        if not -ndim <= axis < ndim:
            raise np.exceptions.AxisError(axis, ndim)
        return (axis - ndim if axis >= 0 else axis,)
    if not isinstance(axis, (tuple, list)):
        axis = (axis,)
    out = []
    for a in axis:
        a = int(a)
        if not -ndim <= a < ndim:
            raise np.exceptions.AxisError(a, ndim)
        out.append(a - ndim if a >= 0 else a)
    return tuple(sorted(out))


def unreduce(g: Any, shape: Sequence[int], axis: Optional[Any], keepdims: bool, like: Any = None) -> Any:
    """Broadcast the cotangent of a reduction back to the input's ``shape``.

    ``g`` has shape ``batch + reduced_shape``; the result has shape ``batch + shape``.
    ``like`` (the reduced input) lends its chunks to a Dask cotangent.
    """
    shape = tuple(shape)
    axes = negative_axes(axis, len(shape))
    if not keepdims and axes:
        if type(g) is np.ndarray:
            # The reduced axes come back as length 1 (np.expand_dims, without its Python layer).
            kept = list(g.shape)
            ndim = len(kept) + len(axes)
            for a in axes:
                kept.insert(ndim + a, 1)
            g = g.reshape(kept)
        else:
            g = np.expand_dims(g, axes)
    nb = np.ndim(g) - len(shape)
    return broadcast_to(g, np.shape(g)[:nb] + shape, like)  # Dask: chunked like the input


def swap_last(a: Any) -> Any:
    """Transpose the last two axes (matrix transpose of a stack)."""
    return np.swapaxes(a, -1, -2)
