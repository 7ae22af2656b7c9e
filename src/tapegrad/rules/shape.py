"""Derivatives of shape manipulation and array assembly.

Cotangents carry leading batch axes, so every rule maps array axes from the
end (a transpose permutation is applied to the trailing axes only).
"""

from __future__ import annotations

import numpy as np

from ..registry import defvjp
from ._util import batch_ndim


def _reshape_vjp(g, ans, x, *args, **kwargs):
    nb = batch_ndim(g, ans)
    return np.reshape(g, np.shape(g)[:nb] + np.shape(x))


def _transpose_vjp(g, ans, x, axes=None):
    nd = np.ndim(x)
    nb = np.ndim(g) - nd
    if axes is None:
        perm = list(range(nd))[::-1]
    else:
        perm = [a % nd for a in axes]
    inverse = np.argsort(perm)
    return np.transpose(g, tuple(range(nb)) + tuple(nb + int(i) for i in inverse))


def _swapaxes_vjp(g, ans, x, axis1, axis2):
    nd = np.ndim(x)
    return np.swapaxes(g, (axis1 % nd) - nd, (axis2 % nd) - nd)


def _moveaxis_vjp(g, ans, x, source, destination):
    nd = np.ndim(x)
    src = [s % nd - nd for s in np.atleast_1d(source)]
    dst = [d % nd - nd for d in np.atleast_1d(destination)]
    return np.moveaxis(g, dst, src)


defvjp(np.reshape, _reshape_vjp)
defvjp(np.ravel, _reshape_vjp)
defvjp(np.squeeze, _reshape_vjp)
defvjp(np.expand_dims, _reshape_vjp)
defvjp(np.atleast_1d, _reshape_vjp)
defvjp(np.transpose, _transpose_vjp)
defvjp(np.swapaxes, _swapaxes_vjp)
defvjp(np.moveaxis, _moveaxis_vjp)
# Broadcasting is undone by the backward driver, which sums the broadcast axes.
defvjp(np.broadcast_to, lambda g, ans, x, shape, subok=False: g)
defvjp(np.copy, lambda g, ans, x, *args, **kwargs: g)
defvjp(np.asarray, lambda g, ans, x, *args, **kwargs: g)


def _concatenate_vjp(g, ans, arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    if axis is None:
        g = np.reshape(g, np.shape(g)[: batch_ndim(g, ans)] + (-1,))
        axis = -1
        sizes = [int(np.size(a)) for a in arrays]
        shapes = [np.shape(a) for a in arrays]
    else:
        nd = np.ndim(ans)
        axis = axis % nd - nd
        sizes = [np.shape(a)[axis] for a in arrays]
        shapes = None
    bounds = np.cumsum(sizes)[:-1]
    pieces = np.split(g, bounds, axis=axis)
    if shapes is not None:
        nb = np.ndim(g) - 1
        pieces = [np.reshape(p, np.shape(p)[:nb] + s) for p, s in zip(pieces, shapes)]
    return pieces


def _stack_vjp(g, ans, arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    nd = np.ndim(ans)
    axis = axis % nd - nd
    trailing = (slice(None),) * (-axis - 1)
    return [g[(Ellipsis, i) + trailing] for i in range(len(arrays))]


defvjp(np.concatenate, _concatenate_vjp)
defvjp(np.stack, _stack_vjp)


def _split_vjp(g, ans, x, indices_or_sections, axis=0):
    return np.concatenate(g, axis=axis % np.ndim(x) - np.ndim(x))


defvjp(np.split, _split_vjp)
defvjp(np.array_split, _split_vjp)
