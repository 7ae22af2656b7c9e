"""Derivatives of selection: take, take_along_axis, choose, select, compress,
extract, sort, partition, trim_zeros, resize and the in-place writers (put,
place, putmask, put_along_axis, copyto, fill_diagonal).

All of them only pick elements, so they are composites over
:func:`~tapegrad.rules.indexing.gather`: NumPy's own function runs on
integer tags and the result picks elements out of the traced inputs.
Repeated picks accumulate their cotangents.

``sort`` and ``partition`` are permutations: each output element's
cotangent goes back to the position it came from.  Where values are tied
the permutation is not unique (the function has a kink there), so tied
elements share their cotangents equally, the convention tapegrad uses for
``max``/``min``: each of the tied sources receives the mean of the tied
outputs' cotangents.  This is the average of the derivatives of every
ordering of the ties.
"""

from __future__ import annotations

import numpy as np

from ..dispatch import primitive, strip
from ..errors import GradientDroppedError
from ..registry import CONSTANT_ARG, defcomposite, defconstant, defvjp
from ..tracer import Tracer, unwrap_above
from .indexing import astype, gather, getitem, take_index, untake


def _no_out(name, out):
    if out is not None:
        raise GradientDroppedError(
            f"{name} was called with out=...: writing a traced result into a preallocated array "
            "would drop its gradient. Use the return value instead."
        )


def _sequence(arrays):
    """``choices`` may be one array whose first axis enumerates the choices."""
    return list(arrays)


def _take(a, indices, axis=None, out=None, mode="raise"):
    _no_out("numpy.take", out)
    return gather(lambda t: np.take(t, indices, axis=axis, mode=mode), a)


def _probe(a):
    """A 0-d stand-in with ``a``'s dtype; Python scalars stay as they are (NumPy treats them weakly)."""
    if isinstance(a, (bool, int, float, complex)):
        return a
    return np.zeros((), dtype=a.dtype if hasattr(a, "dtype") else np.asarray(a).dtype)


def _choose(a, choices, out=None, mode="raise"):
    _no_out("numpy.choose", out)
    choices = _sequence(choices)
    dtype = np.choose(0, [_probe(c) for c in choices]).dtype
    return gather(lambda *tags: np.choose(a, tags, mode=mode), *choices, dtype=dtype)


def _select(condlist, choicelist, default=0):
    choices = _sequence(choicelist)
    probes = [_probe(c) for c in choices]
    dtype = np.select([np.ones((), bool)] * len(probes), probes, _probe(default)).dtype if probes else None
    return gather(lambda *tags: np.select(condlist, tags[:-1], tags[-1]), *choices, default, dtype=dtype)


def _compress(condition, a, axis=None, out=None):
    _no_out("numpy.compress", out)
    return gather(lambda t: np.compress(condition, t, axis=axis), a)


defcomposite(np.take, _take)
defcomposite(np.take_along_axis, lambda arr, indices, axis=-1: gather(lambda t: np.take_along_axis(t, indices, axis), arr))
defcomposite(np.choose, _choose)
defcomposite(np.select, _select)
defcomposite(np.compress, _compress)
defcomposite(np.extract, lambda condition, arr: gather(lambda t: np.extract(condition, t), arr))
defconstant(np.argpartition)


# ---------------------------------------------------------------- sort and partition
def _tie_groups(values, axis):
    """Group id of every element: equal values in the same lane along ``axis`` share one.

    Returns ``(group, n_groups)``; NaNs are never tied (each is its own group).
    """
    values = np.asarray(values)
    if axis is None:
        lanes = np.zeros(values.shape, dtype=np.intp)
    else:
        ax = axis % values.ndim
        lane_shape = tuple(1 if k == ax else s for k, s in enumerate(values.shape))
        lanes = np.broadcast_to(np.arange(int(np.prod(lane_shape))).reshape(lane_shape), values.shape)
    _, value_id = np.unique(values.ravel(), return_inverse=True, equal_nan=False)
    key = lanes.ravel() * (int(value_id.max(initial=0)) + 1) + value_id.ravel()
    _, group = np.unique(key, return_inverse=True)
    return group.reshape(values.shape), int(group.max(initial=-1)) + 1


def _share_ties_impl(y, group, weight, n):
    return y


def _share_ties_vjp(g, ans, y, group, weight, n):
    # Sum the cotangents of each tie group, then hand every member the group mean.
    index = (group,)
    return take_index(untake(g * weight, index, (n,)), index, (n,))


_share_ties = primitive(_share_ties_impl)
defvjp(_share_ties, _share_ties_vjp, CONSTANT_ARG, CONSTANT_ARG, CONSTANT_ARG)


def _permuted(a, order, axis):
    """``a`` rearranged by the index array ``order`` along ``axis`` (flattened for None)."""
    out = gather(lambda t: np.take_along_axis(t, order, axis), a)
    group, n = _tie_groups(strip(out), axis)
    if n == group.size:
        return out
    counts = np.bincount(group.ravel(), minlength=n)
    weight = (1.0 / counts[group]).astype(np.result_type(unwrap_above(out, 0).real.dtype, np.float32))
    return _share_ties(out, group, weight, n)


def _sort(a, axis=-1, kind=None, order=None, *, stable=None):
    raw = strip(a)
    if axis is None:
        raw = np.ravel(raw)
    return _permuted(a, np.argsort(raw, axis=axis, kind="stable"), axis)


def _partition(a, kth, axis=-1, kind="introselect", order=None):
    raw = strip(a)
    if axis is None:
        raw = np.ravel(raw)
    return _permuted(a, np.argpartition(raw, kth, axis=axis, kind=kind), axis)


defcomposite(np.sort, _sort, note="ties share their cotangent equally")
defcomposite(np.partition, _partition, note="ties share their cotangent equally")


def _sort_complex(a):
    dtype = np.sort_complex(np.zeros(1, dtype=_probe(a).dtype)).dtype
    out = np.sort(a)
    return out if out.dtype == dtype else out.astype(dtype)


defcomposite(np.sort_complex, _sort_complex, note="ties share their cotangent equally")


# ---------------------------------------------------------------- reshaping by value
def _trim_zeros(filt, trim="fb", axis=None):
    """Slice off the leading/trailing all-zero hyperplanes, found on the raw values."""
    nonzero = np.asarray(strip(filt)) != 0
    nd = nonzero.ndim
    axes = range(nd) if axis is None else [a % nd for a in np.atleast_1d(axis)]
    trim = trim.lower()
    index = [slice(None)] * nd
    for k in axes:
        hit = np.flatnonzero(np.any(nonzero, axis=tuple(j for j in range(nd) if j != k)))
        if hit.size == 0:
            index[k] = slice(0, 0)
            continue
        start = int(hit[0]) if "f" in trim else 0
        stop = int(hit[-1]) + 1 if "b" in trim else nonzero.shape[k]
        index[k] = slice(start, stop)
    # NumPy's result is a slice of filt: index the tracer itself, which links the view.
    return filt[tuple(index)] if type(filt) is Tracer else getitem(filt, tuple(index))


defcomposite(np.trim_zeros, _trim_zeros)
defcomposite(np.resize, lambda a, new_shape: gather(lambda t: np.resize(t, new_shape), a))
defcomposite(np.astype, lambda x, dtype, /, *, copy=True, device=None: astype(x, dtype, copy=copy))
defconstant(np.ix_)


# ---------------------------------------------------------------- in-place writes
# These NumPy functions write into their first argument.  On a tracer the write
# goes through Tracer.__setitem__ (a functional update plus view bookkeeping);
# values are repeated cyclically where NumPy repeats them, with np.resize.
def _write_flat(a, positions, values):
    """``a.flat[positions] = values`` on a tracer ``a``; ``values`` already shaped like ``positions``."""
    if type(a) is not Tracer:
        raise GradientDroppedError(
            "writing a traced value into a plain ndarray in place would drop its gradient: "
            "copy the array into a tracer first (y = x * 1.0 with x traced) or write out of place."
        )
    a[np.unravel_index(positions, np.shape(a))] = values


def _cyclic(values, count):
    return np.resize(values, (count,)) if count else np.zeros(0, dtype=_probe(values).dtype)


def _put(a, ind, v, mode="raise"):
    positions = np.ravel(np.take(np.arange(np.size(a)), ind, mode=mode))
    _write_flat(a, positions, _cyclic(np.ravel(v), positions.size))


def _place(arr, mask, vals):
    positions = np.flatnonzero(np.broadcast_to(mask, np.shape(arr)))
    _write_flat(arr, positions, _cyclic(np.ravel(vals), positions.size))


def _putmask(a, /, mask, values):
    positions = np.flatnonzero(np.broadcast_to(mask, np.shape(a)))
    # putmask takes values[i % len(values)] for flat position i, not the i-th masked slot.
    _write_flat(a, positions, getitem(_cyclic(np.ravel(values), np.size(a)), positions))


def _put_along_axis(arr, indices, values, axis):
    tags = np.arange(np.size(arr)).reshape(np.shape(arr))
    if axis is None:
        positions = np.take_along_axis(np.ravel(tags), indices, None)
    else:
        positions = np.take_along_axis(tags, indices, axis)
    _write_flat(arr, positions, np.broadcast_to(values, np.shape(positions)))


def _copyto(dst, src, casting="same_kind", where=True):
    if not isinstance(src, (bool, int, float, complex)):
        src_dtype, dst_dtype = _probe(src).dtype, _probe(dst).dtype
        if not np.can_cast(src_dtype, dst_dtype, casting=casting):
            raise TypeError(f"Cannot cast array data from {src_dtype} to {dst_dtype} according to the rule {casting!r}")
    mask = np.broadcast_to(where, np.shape(dst))
    positions = np.flatnonzero(mask)
    _write_flat(dst, positions, getitem(np.ravel(np.broadcast_to(src, np.shape(dst))), positions))


def _fill_diagonal(a, val, wrap=False):
    marks = np.zeros(np.shape(a), dtype=bool)
    np.fill_diagonal(marks, True, wrap=wrap)
    positions = np.flatnonzero(marks)
    _write_flat(a, positions, _cyclic(np.ravel(val), positions.size))


for _fun, _impl in [
    (np.put, _put), (np.place, _place), (np.putmask, _putmask),
    (np.put_along_axis, _put_along_axis), (np.copyto, _copyto), (np.fill_diagonal, _fill_diagonal),
]:
    defcomposite(_fun, _impl, note="in place, like NumPy: the write goes through Tracer.__setitem__")

