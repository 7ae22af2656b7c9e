"""Derivatives of reductions: sum, mean, max, min and the ufunc ``reduce`` method.

Ties in max/min: the cotangent is split equally between the tied entries
(the same convention as ``np.maximum``), so the result is a valid subgradient
and symmetric in the inputs.
"""

from __future__ import annotations

import numpy as np

from ..registry import defcomposite, defvjp
from ._util import negative_axes, unreduce


def _where_mask(g, where):
    return g if where is True else g * where


def _sum_vjp(g, ans, x, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    return _where_mask(unreduce(g, np.shape(x), axis, keepdims), where)


def _count(shape, axis, where):
    if where is not True:
        return np.sum(np.broadcast_to(where, shape), axis=axis, keepdims=True)
    return np.prod([shape[a] for a in negative_axes(axis, len(shape))], dtype=np.int64)


def _mean_vjp(g, ans, x, axis=None, dtype=None, out=None, keepdims=False, where=True):
    shape = np.shape(x)
    full = unreduce(g, shape, axis, keepdims)
    return _where_mask(full / _count(shape, axis, where), where)


def _extremum_vjp(g, ans, x, axis=None, out=None, keepdims=False, initial=None, where=True):
    shape = np.shape(x)
    ans_kept = ans if keepdims else np.expand_dims(ans, negative_axes(axis, len(shape)))
    hits = x == ans_kept
    if where is not True:
        hits = hits & where
    weights = hits / np.sum(hits, axis=axis, keepdims=True)
    return unreduce(g, shape, axis, keepdims) * weights


defvjp(np.sum, _sum_vjp)
defvjp(np.mean, _mean_vjp)
for _f in (np.max, np.min, np.amax, np.amin):
    defvjp(_f, _extremum_vjp, note="ties split equally")


def _add_reduce(x, axis=0, dtype=None, out=None, keepdims=False, initial=np._NoValue, where=True):
    kwargs = {} if initial is np._NoValue else {"initial": initial}
    return np.sum(x, axis=axis, dtype=dtype, keepdims=keepdims, where=where, **kwargs)


def _extremum_reduce(fun):
    def reduce(x, axis=0, dtype=None, out=None, keepdims=False, initial=np._NoValue, where=True):
        kwargs = {} if initial is np._NoValue else {"initial": initial}
        return fun(x, axis=axis, keepdims=keepdims, where=where, **kwargs)

    return reduce


defcomposite((np.add, "reduce"), _add_reduce)
defcomposite((np.maximum, "reduce"), _extremum_reduce(np.max))
defcomposite((np.minimum, "reduce"), _extremum_reduce(np.min))
