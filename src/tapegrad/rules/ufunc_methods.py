"""Derivatives of the ufunc methods: ``reduce``, ``accumulate``, ``reduceat``, ``outer``, ``at``.

Every method is built from the ufunc's own ``__call__`` rule, so any binary
ufunc with a rule (NumPy's, SciPy's, a user's) gets its methods for free:

``outer``
    ``ufunc(a[..., None, ..., None], b)``: plain broadcasting.
``reduce`` / ``accumulate``
    The reduced axes are moved last.  For associative ufuncs (add, multiply,
    maximum, logaddexp, hypot, ...) the reduction is a pairwise tree and the
    accumulation a Hillis-Steele scan: ``log2(n)`` vectorized calls of the
    ufunc.  ``subtract``/``divide`` are ``x0 - sum(rest)`` / ``x0 / prod(rest)``;
    any other ufunc is folded left to right, one call per element (exactly
    NumPy's order).  ``add.accumulate`` is one linear primitive whose VJP is
    a reversed cumulative sum.  ``add``/``maximum``/``minimum.reduce`` live in
    rules/reductions.py (they are ``np.sum``/``np.max``/``np.min``).
``reduceat``
    ``add.reduceat`` is a linear primitive (its transpose scatters each
    segment's cotangent back); other ufuncs reduce one segment at a time.
``at``
    ``np.add.at(x, idx, v)`` with a traced ``x`` computes the updated array
    functionally and rebinds ``x`` in place, as ``x += v`` does.  Repeated
    indices apply in order, like NumPy: occurrences are processed in rounds
    in which every position appears once (one round for ``add``/``subtract``,
    whose duplicates are summed first).

Subgradients: ties inside ``maximum``/``minimum`` trees and scans split the
cotangent equally at each pairwise comparison, so tied entries get a valid
subgradient, though not always an equal share.  The constant ufuncs
(comparisons, logical and bitwise) have constant methods.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..dispatch import primitive, strip, strip_all
from ..errors import GradientDroppedError, UnsupportedFunctionError
from ..registry import CONSTANT, RESOLVERS, RULES, Rule, defcomposite, defconstant, defvjp
from ..sparse_batch import SparseCotangent, reduceat_segments
from ..tracer import Tracer
from ..views import write as _write

__all__ = ["derive_method_rule", "register_methods"]

_NOVALUE = np._NoValue
#: Associative and commutative ufuncs: reduced by a pairwise tree, accumulated by a scan.
_REORDERABLE = {np.add, np.multiply, np.maximum, np.minimum, np.fmax, np.fmin, np.logaddexp, np.logaddexp2, np.hypot}
#: ``x0 op x1 op x2 ... == x0 op (x1 partner x2 partner ...)``.
_SPLIT = {np.subtract: np.add, np.true_divide: np.multiply}


# ---------------------------------------------------------------- add.accumulate / add.reduceat
# Linear primitives in transpose pairs: each one's VJP is the other, so every order works.
def _cumsum_last(x):
    return np.add.accumulate(x, axis=-1)


def _rcumsum_last(g):
    return np.add.accumulate(g[..., ::-1], axis=-1)[..., ::-1]


cumsum_last = primitive(_cumsum_last)
rcumsum_last = primitive(_rcumsum_last)
defvjp(cumsum_last, lambda g, ans, x: rcumsum_last(g))
defvjp(rcumsum_last, lambda g, ans, g0: cumsum_last(g))


def _add_reduceat_last(x, indices):
    if type(x) is SparseCotangent:  # a sparse Jacobian's batch: segment sums of its columns
        out = x.segment_sums(indices)
        if out is not None:
            return out
    return np.add.reduceat(x, indices, axis=-1)


def _add_reduceat_transpose(g, indices, n):
    # Runs on the raw values of this tape level; a third derivative of add.reduceat
    # would reach the np.add.at below with a tracer and raise a clear error.
    if type(g) is SparseCotangent:  # a sparse Jacobian's batch: columns sent back to the segments' members
        return g.segments_spread(indices, n)
    seg, pos = reduceat_segments(indices, n)
    out = np.zeros((n,) + np.shape(g)[:-1], dtype=np.result_type(g))
    np.add.at(out, pos, np.moveaxis(g[..., seg], -1, 0))
    return np.moveaxis(out, 0, -1)


add_reduceat_last = primitive(_add_reduceat_last)
add_reduceat_transpose = primitive(_add_reduceat_transpose)
defvjp(
    add_reduceat_last,
    lambda g, ans, x, indices: add_reduceat_transpose(g, indices, np.shape(x)[-1]),
    None,
    sparse=True,
)
defvjp(add_reduceat_transpose, lambda g, ans, g0, indices, n: add_reduceat_last(g, indices), None, None, sparse=True)


# ---------------------------------------------------------------- reductions along the last axis
def _tree(ufunc, x):
    """Pairwise reduction of the last axis (length >= 1): log2(n) calls."""
    while x.shape[-1] > 1:
        n = x.shape[-1]
        even = n - n % 2
        y = ufunc(x[..., 0:even:2], x[..., 1:even:2])
        x = np.concatenate([y, x[..., even:]], axis=-1) if n % 2 else y
    return x[..., 0]


def _fold(ufunc, x):
    acc = x[..., 0]
    for i in range(1, x.shape[-1]):
        acc = ufunc(acc, x[..., i])
    return acc


def _checked(result, expected, name):
    """Refuse a left-to-right fold whose value differs from NumPy's own result.

    NumPy 2's vectorized loops of some non-associative ufuncs (``arctan2``,
    ``power``) do not compute the documented fold in ``reduce``; tapegrad
    would then differentiate a different function, so it raises instead.
    """
    if not np.allclose(strip(result), expected, rtol=1e-6, atol=0, equal_nan=True):
        raise UnsupportedFunctionError(
            name, "(NumPy's result differs from the left-to-right fold that tapegrad differentiates; "
            "write the loop out explicitly)"
        )
    return result


def _reduce_last(ufunc, x):
    if ufunc in _REORDERABLE:
        return _tree(ufunc, x)
    partner = _SPLIT.get(ufunc)
    if partner is not None and x.shape[-1] > 1:
        return ufunc(x[..., 0], _tree(partner, x[..., 1:]))
    return _fold(ufunc, x)


def _scan(ufunc, x):
    """Inclusive Hillis-Steele scan of the last axis: log2(n) calls."""
    n = x.shape[-1]
    shift = 1
    while shift < n:
        x = np.concatenate([x[..., :shift], ufunc(x[..., :-shift], x[..., shift:])], axis=-1)
        shift *= 2
    return x


def _accumulate_last(ufunc, x):
    if ufunc is np.add:
        return cumsum_last(x)
    if ufunc in _REORDERABLE:
        return _scan(ufunc, x)
    partner = _SPLIT.get(ufunc)
    if partner is not None and x.shape[-1] > 1:
        first = x[..., :1]
        return np.concatenate([first, ufunc(first, _accumulate_last(partner, x[..., 1:]))], axis=-1)
    acc = [x[..., 0]]
    for i in range(1, x.shape[-1]):
        acc.append(ufunc(acc[-1], x[..., i]))
    return np.stack(acc, axis=-1)


def _axes_last(x, axis):
    """Move ``axis`` (None, int or tuple) to the end and merge it into one last axis."""
    ndim = np.ndim(x)
    if axis is None:
        axes = tuple(range(ndim))
    elif isinstance(axis, (tuple, list)):
        axes = tuple(int(a) % ndim for a in axis)
    else:
        axes = (int(axis) % ndim,)
    k = len(axes)
    x = np.moveaxis(x, axes, tuple(range(ndim - k, ndim)))
    return np.reshape(x, np.shape(x)[: ndim - k] + (-1,))


def _cast(x, dtype):
    return x if dtype is None else x.astype(dtype)


# ---------------------------------------------------------------- method builders
def _make_reduce(ufunc):
    def reduce(array, axis=0, dtype=None, out=None, keepdims=False, initial=_NOVALUE, where=True):
        extra = {} if initial is _NOVALUE else {"initial": strip(initial)}
        # NumPy validates the call (axes, identity, dtype) and gives the result's shape.
        expected = ufunc.reduce(strip(array), axis=axis, dtype=dtype, keepdims=keepdims, where=strip_all(where), **extra)
        x = _cast(array, dtype)
        if where is not True:
            # Masked entries contribute nothing: the identity (or, for an idempotent
            # ufunc without one such as maximum, the initial value).
            fill = ufunc.identity if ufunc.identity is not None else strip(initial)
            x = np.where(np.broadcast_to(where, np.shape(x)), x, np.asarray(fill, dtype=x.dtype))
        if np.ndim(x) == 0:
            x = np.reshape(x, (1,))
            axis = None
        x = _axes_last(x, axis)
        if initial is not _NOVALUE:
            start = np.full(np.shape(x)[:-1] + (1,), strip(initial), dtype=x.dtype)
            x = np.concatenate([start, x], axis=-1)
        if np.shape(x)[-1] == 0:
            return expected  # an empty reduction is a constant (the identity)
        result = np.reshape(_reduce_last(ufunc, x), np.shape(expected))
        if ufunc in _REORDERABLE or ufunc in _SPLIT:
            return result
        return _checked(result, expected, f"numpy.{ufunc.__name__}.reduce")

    return reduce


def _make_accumulate(ufunc):
    def accumulate(array, axis=0, dtype=None, out=None):
        expected = ufunc.accumulate(strip(array), axis=axis, dtype=dtype)
        if np.shape(expected)[axis] == 0:
            return expected
        x = np.moveaxis(_cast(array, dtype), axis, -1)
        result = np.moveaxis(_accumulate_last(ufunc, x), -1, axis)
        if ufunc in _REORDERABLE or ufunc in _SPLIT:
            return result
        return _checked(result, expected, f"numpy.{ufunc.__name__}.accumulate")

    return accumulate


def _make_reduceat(ufunc):
    def reduceat(array, indices, axis=0, dtype=None, out=None):
        ufunc.reduceat(strip(array), indices, axis=axis, dtype=dtype)  # NumPy's validation
        x = np.moveaxis(_cast(array, dtype), axis, -1)
        if ufunc is np.add:
            result = add_reduceat_last(x, indices)
        else:
            idx = np.asarray(indices)
            n = np.shape(x)[-1]
            ends = np.append(idx[1:], n)
            parts = [
                _reduce_last(ufunc, x[..., s:e]) if e > s else x[..., s] for s, e in zip(idx.tolist(), ends.tolist())
            ]
            result = np.stack(parts, axis=-1)
        return np.moveaxis(result, -1, axis)

    return reduceat


def _make_outer(ufunc):
    def outer(a, b, **kwargs):
        a_expanded = np.reshape(a, np.shape(a) + (1,) * np.ndim(b))
        return ufunc(a_expanded, b, **kwargs)

    return outer


def _make_at(ufunc):
    def at(a, indices, b=None):
        if type(a) is not Tracer:
            raise GradientDroppedError(
                f"numpy.{ufunc.__name__}.at(a, indices, b) with a plain array a and a traced b would "
                "write traced values into a and drop their gradient. Make the target traced first "
                "(a = a + 0 * b.sum(), or a = x.copy() for a traced x), or compute the result out "
                "of place."
            )
        updated = _at_functional(ufunc, a, indices, b)
        if updated.dtype != a.dtype:
            updated = updated.astype(a.dtype)  # NumPy casts into the target in place
        _write(a, updated, writer=None, index=indices)

    return at


def _occurrence_rounds(pos):
    """Split occurrences into rounds in which every position appears once, in order."""
    order = np.argsort(pos, kind="stable")
    sorted_pos = pos[order]
    first = np.ones(pos.size, dtype=bool)
    first[1:] = sorted_pos[1:] != sorted_pos[:-1]
    counter = np.arange(pos.size)
    rank_sorted = counter - np.maximum.accumulate(np.where(first, counter, 0))
    rank = np.empty_like(rank_sorted)
    rank[order] = rank_sorted
    return [np.flatnonzero(rank == r) for r in range(int(rank.max()) + 1)]


def _scatter_round(flat, pos, new_values):
    """``flat`` with ``flat[pos] = new_values`` (``pos`` unique), built from gathers and ``where``."""
    size = np.shape(flat)[0]
    mask = np.zeros(size, dtype=bool)
    mask[pos] = True
    source = np.zeros(size, dtype=np.intp)
    source[pos] = np.arange(pos.size)
    return np.where(mask, new_values[source], flat)


def _at_functional(ufunc, a, indices, b):
    shape = np.shape(a)
    pos = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)[indices]
    flat = np.reshape(a, (-1,))
    values = None if b is None else np.reshape(np.broadcast_to(b, pos.shape), (-1,))
    pos = pos.ravel()
    if pos.size == 0:
        return a + 0
    if ufunc is np.add or ufunc is np.subtract:
        # Sum the values of repeated positions first: one round.
        order = np.argsort(pos, kind="stable")
        sorted_pos = pos[order]
        starts = np.flatnonzero(np.append(True, sorted_pos[1:] != sorted_pos[:-1]))
        unique = sorted_pos[starts]
        totals = np.add.reduceat(values[order], starts)
        flat = _scatter_round(flat, unique, ufunc(flat[unique], totals))
    else:
        for occ in _occurrence_rounds(pos):
            p = pos[occ]
            new = ufunc(flat[p]) if values is None else ufunc(flat[p], values[occ])
            flat = _scatter_round(flat, p, new)
    return np.reshape(flat, shape)


_BUILDERS = {
    "reduce": _make_reduce,
    "accumulate": _make_accumulate,
    "reduceat": _make_reduceat,
    "outer": _make_outer,
}


def derive_method_rule(ufunc: np.ufunc, method: str) -> Optional[Rule]:
    """Register and return the rule of ``ufunc.method`` derived from ``ufunc``'s own rule.

    ``None`` when ``ufunc`` has no rule, is a generalized ufunc (matmul, vecdot:
    NumPy defines no methods for those), or the method needs two inputs.
    """
    key = (ufunc, method)
    if key in RULES:
        return RULES[key]
    call = RULES.get(ufunc)
    if call is None or ufunc.signature is not None or ufunc.nout != 1:
        return None
    if method == "at":
        defcomposite(key, _make_at(ufunc))
    elif method in _BUILDERS and ufunc.nin == 2:
        if call.kind is CONSTANT:
            defconstant(key)
        else:
            defcomposite(key, _BUILDERS[method](ufunc))
    return RULES.get(key)


def register_methods() -> None:
    """Derive the methods of every ufunc registered so far (called once at import)."""
    for key in list(RULES):
        if isinstance(key, np.ufunc):
            for method in ("reduce", "accumulate", "reduceat", "outer", "at"):
                derive_method_rule(key, method)


register_methods()


def _method_resolver(key: Any) -> Optional[Rule]:
    if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], np.ufunc):
        return derive_method_rule(*key)
    return None


RESOLVERS.append(_method_resolver)  # methods of ufuncs whose rules arrive later (SciPy's)

