"""Indexing, index assignment, selection (``np.where``) and dtype casts.

Reading ``x[index]`` and its adjoint, scattering a cotangent back into
``x``'s shape, are a pair of primitives (:func:`take_index`, :func:`untake`)
whose VJPs are each other, so every order of derivative works.  Basic
indices (slices, integers, ``None``, ``Ellipsis``) are applied to the trailing
axes behind the batch axes directly; advanced indices (integer arrays,
boolean masks, mixed) go through the flat positions they select, which
sidesteps NumPy's rule that moves non-adjacent advanced axes to the front.
Repeated integer indices accumulate their cotangents.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ..banded import BandedCotangent
from ..sparse_batch import SparseCotangent
from ..dispatch import primitive, record_traced_first
from ..errors import GradientDroppedError
from ..lazy import is_dask, zeros_like_shaped
from ..registry import CONSTANT_ARG, RULES, defvjp
from ..tracer import ROUTES, Tracer, is_basic_index, strip, unwrap_above

__all__ = ["getitem", "setitem", "take_index", "untake", "astype", "gather"]


def _as_tuple(index: Any) -> tuple:
    return index if type(index) is tuple else (index,)


def _positions(shape: tuple, index: tuple) -> np.ndarray:
    """Flat positions in an array of ``shape`` that ``index`` selects, shaped like the result."""
    return np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)[index]


def _indexed_ndim(shape: tuple, index: tuple) -> int:
    return np.broadcast_to(np.zeros((), dtype=bool), shape)[index].ndim


def _take_index(a: Any, index: tuple, shape: tuple) -> Any:
    """``a[..., index]`` where ``index`` addresses the trailing ``len(shape)`` axes of ``a``."""
    nb = np.ndim(a) - len(shape)
    if is_basic_index(index):
        return a[(slice(None),) * nb + index]
    pos = _positions(shape, index)
    flat = np.reshape(a, np.shape(a)[:nb] + (-1,))
    return flat[(slice(None),) * nb + (pos,)]


def _untake(g: Any, index: tuple, shape: tuple) -> Any:
    """Adjoint of :func:`_take_index`: scatter-add ``g`` into zeros of ``batch + shape``."""
    if type(g) is SparseCotangent:
        return g.untaken(index, shape)
    nb = np.ndim(g) - _indexed_ndim(shape, index)
    batch = np.shape(g)[:nb]
    dtype = np.result_type(g)
    if is_basic_index(index):
        if type(g) is BandedCotangent:
            shifted = g.scattered(index, shape)
            if shifted is not None:
                return shifted
        if is_dask(unwrap_above(g, 0)):
            padded = _pad_scatter(g, index, shape, nb)
            if padded is not None:
                return padded
        out = zeros_like_shaped(g, batch + shape, dtype)  # lazy zeros for a Dask cotangent
        out[(slice(None),) * nb + index] = g
        return out
    pos = _positions(shape, index).ravel()
    size = int(np.prod(shape, dtype=np.int64))
    g = np.broadcast_to(g, batch + _positions(shape, index).shape).reshape(batch + (pos.size,))
    if is_dask(unwrap_above(g, 0)):
        return _gather_scatter(g, pos, size, batch, dtype).reshape(batch + shape)
    if np.unique(pos).size == pos.size:
        out = zeros_like_shaped(g, batch + (size,), dtype)
        out[..., pos] = g
        return out.reshape(batch + shape)
    # Repeated indices accumulate: one bincount over (batch row, position).
    rows = int(np.prod(batch, dtype=np.int64))
    flat_pos = (np.arange(rows)[:, None] * size + pos[None, :]).ravel()
    g2 = g.reshape(rows * pos.size)
    total = np.bincount(flat_pos, weights=g2.real, minlength=rows * size)
    if dtype.kind == "c":
        total = total + 1j * np.bincount(flat_pos, weights=g2.imag, minlength=rows * size)
    return total.astype(dtype, copy=False).reshape(batch + shape)


def _pad_scatter(g: Any, index: tuple, shape: tuple, nb: int) -> Any:
    """Adjoint of a basic index of unit steps (``x[2:]``, ``x[::-1]``, ``x[0]``) by zero padding.

    For Dask, padding keeps the cotangent's chunks (item assignment into lazy
    zeros would rechunk everything); ``None`` when the index has other steps
    or ``np.newaxis``.
    """
    if sum(i is Ellipsis for i in index) > 1 or any(i is None for i in index):
        return None
    if Ellipsis in index:
        k = index.index(Ellipsis)
        index = index[:k] + (slice(None),) * (len(shape) - len(index) + 1) + index[k + 1 :]
    index = index + (slice(None),) * (len(shape) - len(index))
    widths = [(0, 0)] * nb
    axis = nb
    for i, n in zip(index, shape):
        if type(i) is slice:
            picked = range(*i.indices(n))
            if not picked or abs(picked.step) != 1:
                return None
            if picked.step < 0:
                g = np.flip(g, axis=axis)
            low, high = sorted((picked[0], picked[-1]))  # O(1) on a range
            widths.append((low, n - 1 - high))
        else:
            i = operator.index(i) % n
            g = np.expand_dims(g, axis)
            widths.append((i, n - 1 - i))
        axis += 1
    return np.pad(g, widths) if any(w != (0, 0) for w in widths) else g


def _gather_scatter(g: Any, pos: np.ndarray, size: int, batch: tuple, dtype: Any) -> Any:
    """Scatter-add ``g[..., k]`` into slot ``pos[k]`` of zeros(batch + (size,)) by gathers only.

    Dask has no item assignment with integer arrays, ``np.add.at`` or a weighted
    bincount of a lazy array; a gather (integer indexing along one axis) it
    has.  Occurrence ``m`` of each position forms one layer of unique
    positions, gathered from ``g`` padded with a zero column; the layers add up.
    """
    zero = zeros_like_shaped(strip(g), batch + (1,), dtype)
    padded = np.concatenate([g, zero], axis=-1)
    order = np.argsort(pos, kind="stable")
    sorted_pos = pos[order]
    starts = np.searchsorted(sorted_pos, sorted_pos, side="left")
    occurrence = np.empty_like(pos)
    occurrence[order] = np.arange(pos.size) - starts
    total = None
    for m in range(int(occurrence.max()) + 1 if pos.size else 0):
        source = np.full(size, pos.size)  # pos.size is the zero column
        chosen = np.flatnonzero(occurrence == m)
        source[pos[chosen]] = chosen
        layer = padded[..., source]
        total = layer if total is None else total + layer
    return zeros_like_shaped(strip(g), batch + (size,), dtype) if total is None else total


take_index = primitive(_take_index)
untake = primitive(_untake)
# Slices of a banded batch shift its diagonals: these rules keep it banded (Rule.banded).
defvjp(take_index, lambda g, ans, a, index, shape: untake(g, index, shape), CONSTANT_ARG, CONSTANT_ARG, banded=True, sparse=True)
defvjp(untake, lambda g, ans, x, index, shape: take_index(g, index, shape), CONSTANT_ARG, CONSTANT_ARG, banded=True, sparse=True)


def _getitem(x: Any, index: Any) -> Any:
    return operator.getitem(x, index)


def _basic_scatter_index(args: tuple) -> Any:
    index = _as_tuple(args[1])
    return index if is_basic_index(index) else None


getitem = primitive(_getitem)
defvjp(
    getitem,
    lambda g, ans, x, index: untake(g, _as_tuple(index), np.shape(x)),
    CONSTANT_ARG,
    needs=((1,), ()),  # the index, and only the shape of x
    banded=True,
    sparse=True,
    scatter_index=_basic_scatter_index,
)


def _setitem(x: Any, index: Any, value: Any) -> Any:
    """Functional ``x[index] = value``: a new array, ``x`` is untouched."""
    if type(x) is np.ndarray:
        out = x.copy(order="K")  # the layout stays (an F-ordered array written into stays F-ordered)
    else:
        out = x.copy() if hasattr(x, "copy") else np.array(x)
    if np.ndim(out) == 0 and not isinstance(out, np.ndarray):
        out = np.array(out)
    out[index] = value
    return out


def _setitem_x_vjp(g, ans, x, index, value):
    written = np.zeros(np.shape(x), dtype=bool)
    written[index] = True
    return np.where(written, 0, g)


def _winning_writes(shape: tuple, index: tuple) -> Any:
    """Mask over the slots of ``x[index]``: True where that write is the one that sticks.

    With repeated advanced indices NumPy keeps the last write to a position; the
    earlier writes are overwritten and so carry no gradient.  ``None`` when every
    position is written once (always the case for basic indices).
    """
    if is_basic_index(index):
        return None
    pos = _positions(shape, index)
    if np.unique(pos).size == pos.size:
        return None
    slots = np.arange(pos.size).reshape(pos.shape)
    last = np.full(shape, -1, dtype=np.intp)
    last[index] = slots
    return last[index] == slots


def _setitem_value_vjp(g, ans, x, index, value):
    index = _as_tuple(index)
    shape = np.shape(x)
    picked = take_index(g, index, shape)
    winners = _winning_writes(shape, index)
    return picked if winners is None else np.where(winners, picked, 0)


setitem = primitive(_setitem)
defvjp(
    setitem,
    _setitem_x_vjp,
    CONSTANT_ARG,
    _setitem_value_vjp,
    note="with repeated indices the last write wins (as in NumPy); overwritten writes get no gradient",
)


def gather(build: Any, *sources: Any, dtype: Any = None) -> Any:
    """Differentiably apply a pure rearrangement ``build`` to the elements of ``sources``.

    ``build`` is any NumPy function that only moves, repeats or drops elements
    (``np.diagonal``, ``np.pad(mode="edge")``, ``np.insert``, ...).  It is run
    on integer *tags* (one array per source, shaped like it, numbering every
    element of every source) and the resulting tag array picks the output
    elements out of the concatenated sources.  The forward therefore follows
    NumPy's own semantics exactly, and the derivative is the gather/scatter
    pair :func:`take_index`/:func:`untake` (repeated tags accumulate).

    Returns an array of the sources' common dtype, or of ``dtype`` when given
    (for functions whose result type NumPy works out differently, e.g. with
    Python scalars among the sources).
    """
    tags = []
    offset = 0
    for s in sources:
        shape = np.shape(s)
        n = int(np.prod(shape, dtype=np.int64))
        tags.append(np.arange(offset, offset + n, dtype=np.intp).reshape(shape))
        offset += n
    picked = np.asarray(build(*tags))
    if len(sources) == 1:
        flat = np.ravel(sources[0])
    else:
        flat = np.concatenate([np.ravel(s) for s in sources])
    out = getitem(flat, picked)
    if dtype is not None and out.dtype != dtype:
        out = out.astype(dtype)
    return out


def _astype(x: Any, dtype: Any, *args: Any, **kwargs: Any) -> Any:
    return x.astype(dtype, *args, **kwargs)


_astype_primitive = primitive(_astype)
defvjp(_astype_primitive, lambda g, ans, x, dtype, *args, **kwargs: g, sparse=True)


def astype(x: Any, dtype: Any, *args: Any, **kwargs: Any) -> Any:
    """``x.astype(dtype)``; a cast to an integer or boolean dtype is a constant.

    Casts to object or string dtypes raise: their elements could be turned back
    into numbers later (``x.astype(object).sum()``), silently without a gradient.
    """
    kind = np.dtype(dtype).kind
    if kind in "OUSV":
        raise GradientDroppedError(
            f"casting a tapegrad tracer to dtype {np.dtype(dtype)} would drop its gradient "
            "(object and string arrays cannot carry one). Keep a floating-point dtype, or "
            "call tapegrad.stop_gradient(x) first if the value is meant as a constant."
        )
    if kind not in "fc":
        return strip(x).astype(dtype, *args, **kwargs)
    copy = args[3] if len(args) > 3 else kwargs.get("copy", True)
    if not copy and type(x) is Tracer and np.dtype(dtype) == x.dtype:
        return x  # NumPy returns the array itself: writes into the result are writes into x
    return _astype_primitive(x, dtype, *args, **kwargs)


defvjp(
    np.where,
    CONSTANT_ARG,
    lambda g, ans, cond, x, y: np.where(cond, g, 0),
    lambda g, ans, cond, x, y: np.where(cond, 0, g),
    banded=True,
    sparse=True,
)


def _getitem_basic(x: Any, index: Any) -> Any:
    """``x[index]`` for a basic index (no tracer inside it): straight to the recorder."""
    return record_traced_first(_GETITEM_RULE, x, (index,))


_GETITEM_RULE = RULES[getitem]

# Item access and casts of a tracer come here (see tapegrad.tracer.ROUTES).
ROUTES.getitem = getitem
ROUTES.getitem_basic = _getitem_basic
ROUTES.setitem = setitem
ROUTES.astype = astype
