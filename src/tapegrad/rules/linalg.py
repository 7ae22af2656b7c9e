"""Derivatives of matrix products (``matmul``, ``dot``) and linear algebra.

Cotangents carry leading batch axes; matrix rules use ``swapaxes(-1, -2)``
and broadcasting so that a batch of cotangents (a Jacobian) runs as one
stacked product.  Where one operand is a vector and the other a single
matrix, the batched cotangent is multiplied as one 2-D product instead of a
stack of matrix-vector products (one BLAS call).
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedFunctionError
from ..registry import defcomposite, defvjp
from ._util import swap_last


def _matmul_x(g, ans, x, y, **kwargs):
    xd, yd = np.ndim(x), np.ndim(y)
    if xd == 1 and yd == 1:  # ans = x . y, g is batch-shaped
        return g[..., None] * y
    if xd == 1:  # ans[..., m] = sum_k x[k] y[..., k, m]
        if yd == 2:
            return g @ swap_last(y)
        return (y @ g[..., None])[..., 0]
    if yd == 1:  # ans[..., n] = sum_k x[..., n, k] y[k]
        return g[..., None] * y
    return g @ swap_last(y)


def _matmul_y(g, ans, x, y, **kwargs):
    xd, yd = np.ndim(x), np.ndim(y)
    if xd == 1 and yd == 1:
        return g[..., None] * x
    if yd == 1:
        if xd == 2:
            return g @ x
        return (g[..., None, :] @ x)[..., 0, :]
    if xd == 1:
        return x[:, None] * g[..., None, :]
    return swap_last(x) @ g


defvjp(np.matmul, _matmul_x, _matmul_y)


def _dot(a, b, out=None):
    if out is not None:
        from ..dispatch import _reject_out

        _reject_out("numpy.dot", {"out": (out,)})
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        return np.multiply(a, b)
    if np.ndim(a) <= 2 and np.ndim(b) <= 2:
        return np.matmul(a, b)
    raise UnsupportedFunctionError("numpy.dot", "(N-D operands: use np.tensordot or np.einsum)")


defcomposite(np.dot, _dot)
