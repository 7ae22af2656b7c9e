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


def strong_bilinear(vjp: Any, other: int) -> Any:
    """``vjp`` with strong zeros, for a VJP bilinear in the cotangent and argument ``other`` (a contraction).

    A contraction's VJP sums products ``g[k] * m[k, j]`` of the cotangent and the
    other operand; with strong zeros a zero ``g[k]`` contributes zero even where
    ``m[k, j]`` is inf or NaN (plain arithmetic makes the whole sum NaN).  The sum is
    computed again, by ``vjp`` itself, as its finite part (``m``'s non-finite entries
    replaced by zeros) and three counts made with 0/1 arrays: of the nonzero
    cotangent entries that meet ``+inf`` with their sign, ``-inf``, and NaN.  A
    count above zero sets the entry to ``+inf``, ``-inf`` or NaN (both infinities:
    NaN), as the sum of the nonzero terms alone would be.  The finite part and the
    selections are NumPy calls, so traced operands (a Hessian) keep their derivatives.

    Only real floating-point values are redone, and only when the plain result is
    not finite, ``m`` is not finite and ``g`` is (an infinite cotangent is not a
    zero's doing); anything else keeps the plain result.
    """

    def strong(g: Any, ans: Any, *args: Any, **kwargs: Any) -> Any:
        gi = vjp(g, ans, *args, **kwargs)
        m = args[other]
        g_value, m_value, gi_value = strip(g), strip(m), strip(gi)
        if not (
            type(gi_value) is type(g_value) is type(m_value) is np.ndarray
            and gi_value.dtype.kind == g_value.dtype.kind == m_value.dtype.kind == "f"
        ):
            return gi
        if np.isfinite(gi_value).all() or np.isfinite(m_value).all() or not np.isfinite(g_value).all():
            return gi
        plain_args = [strip(a) for a in args]
        plain_ans = strip(ans)

        def count(cotangent: np.ndarray, operand: np.ndarray) -> np.ndarray:
            plain_args[other] = operand
            return vjp(cotangent, plain_ans, *plain_args, **kwargs)

        finite_part = vjp(g, ans, *args[:other], np.where(np.isfinite(m_value), m, 0.0), *args[other + 1 :], **kwargs)
        up, down = (g_value > 0).astype(g_value.dtype), (g_value < 0).astype(g_value.dtype)
        plus, minus = (m_value == np.inf).astype(m_value.dtype), (m_value == -np.inf).astype(m_value.dtype)
        to_plus = count(up, plus) + count(down, minus) > 0
        to_minus = count(up, minus) + count(down, plus) > 0
        to_nan = (count(up + down, np.isnan(m_value).astype(m_value.dtype)) > 0) | (to_plus & to_minus)
        return np.where(to_nan, np.nan, np.where(to_plus, np.inf, np.where(to_minus, -np.inf, finite_part)))

    return strong
