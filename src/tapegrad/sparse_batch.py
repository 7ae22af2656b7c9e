"""Sparse batches of cotangents: Jacobian sweeps at the cost of their nonzeros.

A Jacobian sweep carries a batch of basis cotangents: row ``r`` of the batch
is the cotangent that output ``r`` sends to a value, column ``c`` is the
value's flat (C-order) slot ``c``.  The seed is the identity; element-wise
rules scale columns, slices and fancy indexing move or gather them,
``np.add.at``-like scatters and reductions merge them, reshapes keep them,
transposes and rolls permute them.  Through all of these the batch keeps
only the entries that can be nonzero, so a sweep over a stencil, a graph or
any other local program costs O(nonzeros) per step instead of O(B L).

:class:`SparseCotangent` stores those entries (row, column, value), sorted by
row then column, each position at most once.  It is the general form of
:class:`tapegrad.banded.BandedCotangent` and follows the same contract:

* a rule sees it only if its registry entry opts in (``Rule.sparse``); every
  other rule receives the dense array it stands for;
* every NumPy call this module does not handle explicitly also receives that
  dense array, so correctness never depends on the structure.  A dense array
  larger than :data:`MAX_DENSE_BYTES` is not built: :class:`DenseBatchTooLarge`
  tells the caller to sweep fewer rows at a time.

Numbers: every handled operation computes each kept entry with the same
floating-point operations, in the same order, as the dense array would
(entry-wise products and quotients, sums of two entries, scatter-adds in
index order, reductions that add more than two entries per result go through
NumPy's own reduction on the dense rows).  Positions not stored are exact
zeros, also where a factor is ``inf`` or ``NaN``: the "strong zero" of the
sweep (a zero cotangent contributes zero whatever the partial derivative).
A batch also records the memory layout the dense sweep's array would have
(:attr:`SparseCotangent.batch_last`), on which some of NumPy's numbers depend.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any, Callable, Dict, Optional, Sequence

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

__all__ = ["SparseCotangent", "DenseBatchTooLarge", "MAX_DENSE_BYTES", "densify", "reduceat_segments"]

#: The largest dense array (in bytes) a sparse batch builds when a call needs one.
MAX_DENSE_BYTES = 1 << 28

_INT32_MAX = 2**31 - 1

#: A batch keeps its sort keys (int64 per entry) only up to this many entries.
_CACHED_KEYS = 1 << 20

#: Sums of sparse batches with more entries than this are added lazily, all uses at once.
_LAZY = 1 << 14

#: NumPy adds a reduction of at most this many elements one after the other, in
#: index order (longer ones pairwise, in blocks of 8): such sums are done here.
_SEQUENTIAL = 7


class DenseBatchTooLarge(MemoryError):
    """A call needs a sparse batch as a dense array larger than :data:`MAX_DENSE_BYTES`.

    The request that started the sweep catches it and sweeps fewer rows at a time.

    Attributes
    ----------
    width : int
        Entries per row of the dense array that was asked for.
    itemsize : int
        Bytes per entry.
    """

    def __init__(self, width: int, itemsize: int) -> None:
        super().__init__(f"a dense batch of rows of {width} entries would exceed {MAX_DENSE_BYTES} bytes")
        self.width = width
        self.itemsize = itemsize


def densify(value: Any) -> Any:
    """``value`` with every sparse batch replaced by its dense array (recursing into lists/tuples/dicts)."""
    t = type(value)
    if t is SparseCotangent:
        return value.dense()
    if t is list or t is tuple:
        if any(type(v) in (SparseCotangent, list, tuple, dict) for v in value):
            return t(densify(v) for v in value)
        return value
    if t is dict:
        return {k: densify(v) for k, v in value.items()}
    return value


def _small_keys(keys: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """``keys`` if a batch should keep them (see :data:`_CACHED_KEYS`), else ``None``."""
    return keys if keys is None or keys.shape[0] <= _CACHED_KEYS else None


def _key(rows: np.ndarray, width: int, cols: np.ndarray) -> np.ndarray:
    """``row * width + col`` in int64 (positions may be int32)."""
    return rows.astype(np.int64) * width + cols


def _is_sorted(keys: np.ndarray) -> bool:
    return keys.shape[0] < 2 or bool((keys[1:] > keys[:-1]).all())


class SparseCotangent(NDArrayOperatorsMixin):
    """A batch of cotangents of shape ``(B, *value_shape)`` that stores only its possible nonzeros.

    Parameters
    ----------
    shape : tuple of int
        ``(B, *value_shape)``.
    rows, cols : numpy.ndarray of intp
        Entry ``k`` sits at batch row ``rows[k]`` and flat value slot ``cols[k]``.
        Sorted by row, then column; no position twice.
    data : numpy.ndarray
        The entries' values (1-D); its dtype is the batch's.

    Notes
    -----
    Instances are immutable: every operation returns a new batch (or a dense
    array), so the sweep may hand one batch to several rules.  ``rows`` and
    ``cols`` arrays are shared between batches of the same structure.
    """

    __slots__ = ("shape", "_rows", "_cols", "_data", "_dense", "_keys", "_parts", "_batch_last")
    __array_priority__ = 20.0

    def __init__(self, shape: tuple, rows: np.ndarray, cols: np.ndarray, data: np.ndarray) -> None:
        self.shape = tuple(shape)
        # 32-bit positions where they fit: a third less memory per entry than intp.
        small = shape[0] < _INT32_MAX and math.prod(shape[1:]) < _INT32_MAX
        self._rows = rows.astype(np.int32, copy=False) if small else rows
        self._cols = cols.astype(np.int32, copy=False) if small else cols
        self._data = data
        self._dense: Optional[np.ndarray] = None
        self._keys: Optional[np.ndarray] = None
        self._parts: Optional[list] = None
        # The layout of the array this batch stands for in the ordinary sweep (see
        # :attr:`batch_last`): True batch axis innermost, False C order, None none yet.
        self._batch_last: Optional[bool] = False

    @classmethod
    def _sum_of(cls, shape: tuple, parts: list) -> "SparseCotangent":
        """``((parts[0] + parts[1]) + parts[2]) + ...`` (batches of one dtype), added when first looked at.

        The sweep accumulates the cotangent of a value used several times one use
        after the other; adding all of them in one pass (one sort of all entries)
        costs much less than a merge per use, and gives the same numbers: each
        position's terms are added in the order of ``parts``.
        """
        out = cls.__new__(cls)
        out.shape = tuple(shape)
        out._rows = out._cols = out._data = None
        out._dense = None
        out._keys = None
        out._parts = parts
        layout: Optional[bool] = None
        for p in parts:  # the dense sweep's ``(a + b) + c``
            layout = _sum_layout(layout, p._batch_last)
        out._batch_last = layout
        return out

    def _resolve(self) -> None:
        parts = []
        for p in self._parts:
            # Consecutive terms of one structure (x * a + x * b): added entry by entry, in order.
            if parts and p._rows is parts[-1]._rows and p._cols is parts[-1]._cols:
                parts[-1] = parts[-1]._with_data(parts[-1]._data + p._data)
            else:
                parts.append(p)
        if len(parts) == 1:
            (p,) = parts
            self._rows, self._cols, self._data, self._keys, self._parts = p._rows, p._cols, p._data, p._keys, None
            return
        keys = np.concatenate([p.keys() for p in parts])
        order = np.argsort(keys, kind="stable")  # sorted runs, merged; equal keys in part order
        keys = keys[order]
        data = np.concatenate([p.data for p in parts])[order]
        if keys.shape[0] > 1:
            new = np.empty(keys.shape[0], dtype=bool)
            new[0] = True
            np.not_equal(keys[1:], keys[:-1], out=new[1:])
            starts = np.flatnonzero(new)
        else:
            starts = np.arange(keys.shape[0])
        if starts.shape[0] < keys.shape[0]:
            counts = np.diff(np.append(starts, keys.shape[0]))
            sums = data[starts]
            for j in range(1, int(counts.max())):  # the j-th term of every position that has one, in order
                more = np.flatnonzero(counts > j)
                sums[more] += data[starts[more] + j]
            pick = order[starts]
            keys, data = keys[starts], sums
        else:
            pick = order
        self._rows = np.concatenate([p.rows for p in parts])[pick]
        self._cols = np.concatenate([p.cols for p in parts])[pick]
        self._data = data
        self._keys = _small_keys(keys)
        self._parts = None

    @property
    def rows(self) -> np.ndarray:
        """Batch row of each entry."""
        if self._parts is not None:
            self._resolve()
        return self._rows

    @property
    def cols(self) -> np.ndarray:
        """Flat value slot of each entry."""
        if self._parts is not None:
            self._resolve()
        return self._cols

    @property
    def data(self) -> np.ndarray:
        """Value of each entry."""
        if self._parts is not None:
            self._resolve()
        return self._data

    # -------------------------------------------------------------- construction
    @classmethod
    def eye(cls, rows: int, start: int, value_shape: tuple, dtype: Any) -> "SparseCotangent":
        """Rows ``start:start + rows`` of the identity over a value of ``value_shape`` (a Jacobian's seed)."""
        width = math.prod(value_shape)
        stop = min(start + rows, width)
        cols = np.arange(start, max(stop, start), dtype=np.intp)
        r = cols - start
        out = cls((rows,) + tuple(value_shape), r, cols, np.ones(cols.shape[0], dtype=dtype))
        out._batch_last = None  # no layout yet: the dense sweep's seed is a structured batch
        return out

    @classmethod
    def empty(cls, shape: tuple, dtype: Any) -> "SparseCotangent":
        """A batch of ``shape`` with no entries (all zeros)."""
        none = np.zeros(0, dtype=np.intp)
        return cls(tuple(shape), none, none, np.zeros(0, dtype=dtype))

    @classmethod
    def _from_entries(cls, shape: tuple, rows: np.ndarray, cols: np.ndarray, data: np.ndarray) -> "SparseCotangent":
        """A batch from unique entries in any order (sorted here when they are not)."""
        width = max(math.prod(shape[1:]), 1)
        keys = _key(rows, width, cols)
        if not _is_sorted(keys):
            order = np.argsort(keys, kind="stable")
            keys, rows, cols, data = keys[order], rows[order], cols[order], data[order]
        out = cls(shape, rows, cols, data)
        out._keys = _small_keys(keys)
        return out

    def _with_data(self, data: np.ndarray) -> "SparseCotangent":
        """The same structure with other values."""
        out = SparseCotangent(self.shape, self.rows, self.cols, data)
        out._keys = _small_keys(self._keys)
        out._batch_last = self._batch_last
        return out

    def _kept(self, keep: np.ndarray, shape: Optional[tuple] = None, cols: Optional[np.ndarray] = None) -> "SparseCotangent":
        """The entries where ``keep`` holds (their columns renamed to ``cols`` when given), sorted."""
        rows, data = self.rows[keep], self.data[keep]
        cols = self.cols[keep] if cols is None else cols[keep]
        return SparseCotangent._from_entries(self.shape if shape is None else shape, rows, cols, data)

    # -------------------------------------------------------------- array-like
    @property
    def dtype(self) -> np.dtype:
        return self._parts[0].dtype if self._parts is not None else self._data.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def width(self) -> int:
        """Slots per row: the size of one value."""
        return math.prod(self.shape[1:])

    @property
    def nnz(self) -> int:
        """Entries stored."""
        return int(self.data.shape[0])

    @property
    def batch_last(self) -> bool:
        """Whether the dense sweep's array for this batch has the batch axis innermost in memory.

        NumPy's fancy indexing ``g[:, idx]`` returns such an array, and element-wise
        operations, reshapes, sums and basic slices keep that layout.  Its numbers
        can differ from a C-ordered array's: a sum over a value axis adds one
        term after the other instead of pairwise, and NumPy 2.2's ``matmul``
        takes its own loop (not BLAS) for such operands.  So this batch's dense
        array (:meth:`to_array`, :meth:`rows_dense`) is built in that layout and
        its reductions add sequentially: the numbers stay the dense sweep's.
        """
        return self._batch_last is True and self.shape[0] > 1

    def _like(self, out: "SparseCotangent", layout: Any = "same") -> "SparseCotangent":
        """``out`` marked with this batch's layout (or ``layout``); returned."""
        out._batch_last = self._batch_last if layout == "same" else layout
        return out

    def keys(self) -> np.ndarray:
        """``row * width + col`` of each entry: increasing."""
        if self._parts is not None:
            self._resolve()
        if self._keys is None:
            keys = _key(self.rows, max(self.width, 1), self.cols)
            if keys.shape[0] > _CACHED_KEYS:
                return keys  # large: computed again when needed rather than kept
            self._keys = _small_keys(keys)
        return self._keys

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"SparseCotangent(shape={self.shape}, nnz={self.nnz}, dtype={self.dtype})"

    def _check_dense(self, rows: int) -> None:
        if rows * self.width * self.dtype.itemsize > MAX_DENSE_BYTES:
            raise DenseBatchTooLarge(self.width, self.dtype.itemsize)

    def to_array(self) -> np.ndarray:
        """A new, writable dense array ``(B, *value_shape)``."""
        self._check_dense(self.shape[0])
        if self.batch_last:
            out = np.zeros((self.width, self.shape[0]), dtype=self.dtype)
            out[self.cols, self.rows] = self.data
            return out.T.reshape(self.shape)  # a view: the batch axis stays innermost
        out = np.zeros((self.shape[0], self.width), dtype=self.dtype)
        out[self.rows, self.cols] = self.data
        return out.reshape(self.shape)

    def dense(self) -> np.ndarray:
        """The dense array, built once and read-only (several rules may read it)."""
        if self._dense is None:
            out = self.to_array()
            out.flags.writeable = False  # a rule writing into its cotangent fails loudly
            self._dense = out
        return self._dense

    def rows_dense(self, which: np.ndarray) -> np.ndarray:
        """Dense rows ``which`` (sorted, unique) as an array ``(len(which), *value_shape)``."""
        self._check_dense(which.shape[0])
        lo = np.searchsorted(self.rows, which, side="left")
        hi = np.searchsorted(self.rows, which, side="right")
        counts = hi - lo
        pick = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        at = np.repeat(np.arange(which.shape[0]), counts)
        shape = (which.shape[0],) + self.shape[1:]
        if self.batch_last:
            out = np.zeros((self.width, which.shape[0]), dtype=self.dtype)
            out[self.cols[pick], at] = self.data[pick]
            return out.T.reshape(shape)
        out = np.zeros((which.shape[0], self.width), dtype=self.dtype)
        out[at, self.cols[pick]] = self.data[pick]
        return out.reshape(shape)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.dense()
        if dtype is not None and np.dtype(dtype) != out.dtype:
            return out.astype(dtype)
        return self.to_array() if copy else out

    def __getattr__(self, name: str) -> Any:
        # Anything not implemented here (T, flags, ...) is the dense array's.
        if (name.startswith("__") and name.endswith("__")) or name in SparseCotangent.__slots__:
            raise AttributeError(name)
        return getattr(self.dense(), name)

    def astype(self, dtype: Any, copy: bool = True) -> Any:
        dtype = np.dtype(dtype)
        if dtype == self.dtype and not copy:
            return self
        if dtype.kind not in "fc" or (self.dtype.kind == "c" and dtype.kind != "c"):
            return self.dense().astype(dtype)
        return self._with_data(self.data.astype(dtype))

    def reshape(self, *shape: Any, order: str = "C") -> Any:
        if len(shape) == 1 and not isinstance(shape[0], numbers.Integral):
            shape = tuple(shape[0])
        out = _reshape(self, shape, order)
        return self.dense().reshape(shape, order=order) if out is None else out

    def __getitem__(self, key: Any) -> Any:
        value_key = _value_key(key)
        if value_key is not None:
            out = self._gathered(value_key)
            if out is not None:
                return out
        return self.dense()[key]

    # -------------------------------------------------------------- column maps
    def _slot_ids(self) -> np.ndarray:
        """The flat slot of each element of the value: ``arange(width)`` shaped like it."""
        return np.arange(self.width, dtype=np.intp).reshape(self.shape[1:])

    def _gathered(self, value_key: Any) -> Optional["SparseCotangent"]:
        """``self[(slice(None),) + value_key]``: each new slot reads one old slot (maybe several read one)."""
        try:
            source = self._slot_ids()[value_key]
        except (IndexError, TypeError, ValueError):
            return None
        layout = _fancy_batch_last(value_key, source.ndim)
        return self._like(self.gather(source), "same" if layout is None else layout)

    def gather(self, source: np.ndarray) -> "SparseCotangent":
        """The batch whose slot ``j`` (of a value shaped ``source.shape``) is this batch's slot ``source[j]``."""
        new_shape = (self.shape[0],) + source.shape
        source = source.ravel()
        width = self.width
        counts = np.bincount(source, minlength=width)
        if counts.shape[0] == width and counts.max(initial=0) <= 1:
            # Each old slot is read at most once: rename the kept columns.
            new_of_old = np.full(width, -1, dtype=np.intp)
            new_of_old[source] = np.arange(source.shape[0], dtype=np.intp)
            renamed = new_of_old[self.cols]
            keep = renamed >= 0
            if keep.all():
                return SparseCotangent._from_entries(new_shape, self.rows, renamed, self.data)
            return self._kept(keep, new_shape, renamed)
        # Some old slots are read several times (x[idx] with repeats, broadcasting).
        order = np.argsort(source, kind="stable")  # new slots grouped by the old slot they read
        starts = np.cumsum(counts) - counts
        reps = counts[self.cols]
        total = int(reps.sum())
        first = np.repeat(starts[self.cols], reps)
        within = np.arange(total, dtype=np.intp) - np.repeat(np.cumsum(reps) - reps, reps)
        new_cols = order[first + within]
        rows = np.repeat(self.rows, reps)
        data = np.repeat(self.data, reps)
        return SparseCotangent._from_entries(new_shape, rows, new_cols, data)

    def scatter(self, target: np.ndarray, value_shape: tuple, accumulate_float64: bool = False) -> "SparseCotangent":
        """The batch over a value of ``value_shape`` whose slot ``target[j]`` receives this batch's slot ``j``.

        Several slots sent to one target add up in the order of the batch's
        entries (row, then slot), each sum starting from zero; with
        ``accumulate_float64`` the sums are taken in float64 and cast back (as
        ``np.bincount`` does).
        """
        new_shape = (self.shape[0],) + tuple(value_shape)
        if self.nnz == 0:
            return SparseCotangent(new_shape, self.rows, self.cols, self.data)
        target = target.ravel()
        cols = target[self.cols]
        width = max(math.prod(value_shape), 1)
        hits = np.bincount(target, minlength=width)
        if hits.max(initial=0) <= 1:  # no target twice
            return SparseCotangent._from_entries(new_shape, self.rows, cols, self.data)
        shared = hits[cols] > 1  # entries whose target receives several slots
        if not shared.all():
            alone = ~shared
            once = SparseCotangent._from_entries(new_shape, self.rows[alone], cols[alone], self.data[alone])
            if not shared.any():
                return once
            part = SparseCotangent(self.shape, self.rows[shared], self.cols[shared], self.data[shared])
            return _disjoint_union(once, part.scatter(target, value_shape, accumulate_float64))
        keys = _key(self.rows, width, cols)
        order = np.argsort(keys, kind="stable")  # equal keys keep the entries' order
        keys = keys[order]
        new_group = np.r_[True, keys[1:] != keys[:-1]]
        starts = np.flatnonzero(new_group)
        group = np.cumsum(new_group) - 1
        data = self.data[order]
        dtype = self.dtype
        if accumulate_float64:
            sums: Any = np.bincount(group, weights=data.real, minlength=starts.shape[0])
            if dtype.kind == "c":
                sums = sums + 1j * np.bincount(group, weights=data.imag, minlength=starts.shape[0])
            sums = sums.astype(dtype, copy=False)
        else:
            sums = np.zeros(starts.shape[0], dtype=dtype)
            np.add.at(sums, group, data)
        first = order[starts]
        out = SparseCotangent(new_shape, self.rows[first], cols[first], sums)
        out._keys = _small_keys(keys[starts])
        return out

    def untaken(self, index: tuple, shape: tuple) -> Any:
        """The cotangent of ``x`` (shaped ``shape``) for ``x[index]``: this batch's slots scattered back.

        Repeated positions (an advanced index) add up as ``tapegrad.rules.indexing``'s
        dense scatter adds them (in float64, in index order); a batch that must be
        broadcast first, or anything unexpected, gives the dense result.
        """
        shape = tuple(shape)
        try:
            target = np.arange(math.prod(shape), dtype=np.intp).reshape(shape)[index]
        except (IndexError, TypeError, ValueError):
            target = None
        g: Any = self
        if target is not None and g.shape[1:] != target.shape:
            g = _broadcast_to(g, (g.shape[0],) + target.shape)
        if target is None or g is None:
            dense = self.dense()
            out = np.zeros((self.shape[0],) + shape, dtype=self.dtype)
            np.add.at(out, (slice(None),) + tuple(index), dense)
            return out
        return g.scatter(target, shape, accumulate_float64=True)

    # -------------------------------------------------------------- algebra
    def _column_factor(self, factor: Any) -> Any:
        """``factor`` as one value per entry (or a scalar), if it broadcasts without widening the batch.

        ``None`` for anything else (a factor that varies along the batch, a tracer,
        another batch): the caller takes the dense path.
        """
        if isinstance(factor, numbers.Number) and not isinstance(factor, np.generic):
            return factor
        if type(factor) is not np.ndarray and not isinstance(factor, np.generic):
            return None
        if factor.dtype.kind not in "biufc":
            return None
        shape = np.shape(factor)
        if len(shape) > len(self.shape):
            return None  # the product gains leading axes
        if all(s == 1 for s in shape):
            return factor.reshape(()) if shape else factor
        vshape = self.shape[1:]
        if len(shape) > len(vshape):
            if any(s != 1 for s in shape[: len(shape) - len(vshape)]):
                return None  # varies along the batch
            factor = factor.reshape(shape[len(shape) - len(vshape) :])
        try:
            full = np.broadcast_to(factor, vshape)
        except ValueError:
            return None  # the product is wider than the batch (see _scaled)
        return full.reshape(-1)[self.cols] if full.flags.c_contiguous else np.ascontiguousarray(full).reshape(-1)[self.cols]

    def _scaled(self, factor: Any, op: Callable, first: bool) -> Optional["SparseCotangent"]:
        """``op(self, factor)`` (``first``) or ``op(factor, self)`` entry by entry, else ``None``.

        A factor that widens the value (``g[..., None] * y``) first broadcasts the
        batch: each entry is repeated along the new or stretched axes.
        """
        per_entry = self._column_factor(factor)
        if per_entry is None:
            wide = self._widened(factor)
            if wide is None:
                return None
            return wide._scaled(factor, op, first)
        data = op(self.data, per_entry) if first else op(per_entry, self.data)
        return self._with_data(data)

    def _widened(self, factor: Any) -> Optional["SparseCotangent"]:
        """This batch broadcast against a plain ``factor`` that widens its value axes, else ``None``."""
        if type(factor) is not np.ndarray or factor.dtype.kind not in "biufc":
            return None
        vshape = self.shape[1:]
        fshape = factor.shape
        if len(fshape) > len(self.shape) or (len(fshape) == len(self.shape) and fshape[0] != 1):
            return None  # varies along the batch
        if len(fshape) == len(self.shape):
            fshape = fshape[1:]
        try:
            wide = np.broadcast_shapes(vshape, fshape)
        except ValueError:
            return None
        if wide == vshape:
            return None
        return _broadcast_to(self, (self.shape[0],) + wide)

    def _merged(self, other: "SparseCotangent", subtract: bool) -> "SparseCotangent":
        """``self + other`` (or ``-``): entries at one position are added, each once."""
        # NumPy lays out ``a + b`` as its operands agree, in C order where they do not.
        return self._like(self._merged_entries(other, subtract), _sum_layout(self._batch_last, other._batch_last))

    def _merged_entries(self, other: "SparseCotangent", subtract: bool) -> "SparseCotangent":
        if self._parts is not None or other._parts is not None or self.nnz + other.nnz > _LAZY:
            if other.dtype == self.dtype:
                if other._parts is not None:
                    other._resolve()  # a sum of its own, added before it joins this one
                term = other._with_data(-other.data) if subtract else other
                return SparseCotangent._sum_of(self.shape, (self._parts or [self]) + [term])
        b = -other.data if subtract else other.data
        if self.rows is other.rows and self.cols is other.cols:
            return self._with_data(self.data + b)
        ka, kb = self.keys(), other.keys()
        if ka.shape == kb.shape and np.array_equal(ka, kb):
            return self._with_data(self.data + b)
        keys = np.concatenate([ka, kb])
        order = np.argsort(keys, kind="stable")  # two sorted runs: one merge
        keys = keys[order]
        dtype = np.result_type(self.data, b)
        vals = np.concatenate([self.data.astype(dtype, copy=False), b.astype(dtype, copy=False)])[order]
        repeat = keys[1:] == keys[:-1]  # self's entry first, then other's
        if repeat.any():
            first = np.r_[True, ~repeat]
            second = np.flatnonzero(repeat) + 1
            vals[second - 1] = vals[second - 1] + vals[second]
            keys, vals, order = keys[first], vals[first], order[first]
        rows = np.concatenate([self.rows, other.rows])[order]
        cols = np.concatenate([self.cols, other.cols])[order]
        out = SparseCotangent(self.shape, rows, cols, vals)
        out._keys = _small_keys(keys)
        return out

    def _selected(self, keep_mask: np.ndarray) -> Optional["SparseCotangent"]:
        """The entries whose slot is True in ``keep_mask`` (a mask broadcasting to the value)."""
        per_entry = self._column_factor(keep_mask)
        if per_entry is None:
            return None
        if np.ndim(per_entry) == 0:
            return self if bool(per_entry) else self._like(self._kept(np.zeros(self.nnz, dtype=bool)))
        return self._like(self._kept(per_entry))

    def summed(self, axes: tuple, keepdims: bool) -> Any:
        """``np.sum(self, axis=axes)`` over value axes (positive, >= 1), with NumPy's numbers."""
        vshape = self.shape[1:]
        value_axes = tuple(a - 1 for a in axes)
        kept_shape = tuple(1 if i in value_axes else n for i, n in enumerate(vshape))
        out_v = tuple(n for i, n in enumerate(vshape) if i not in value_axes)
        target = np.arange(math.prod(kept_shape), dtype=np.intp).reshape(kept_shape)
        target = np.broadcast_to(target, vshape).reshape(-1)
        new_v = kept_shape if keepdims else out_v
        extent = math.prod(vshape) // max(math.prod(kept_shape), 1)
        reduce = lambda d: np.add.reduce(d, axis=axes, keepdims=keepdims)  # noqa: E731
        # Over the last axis alone, each result is NumPy's sum of one contiguous run of slots.
        run = extent if axes == (self.ndim - 1,) else 0
        # On a batch-last array NumPy's inner loop runs along the batch: each sum is sequential.
        if self.batch_last:
            return self._like(self._reduced(target, new_v, reduce, True))
        return self._like(self._reduced(target, new_v, reduce, extent <= _SEQUENTIAL, run))

    def _reduced(
        self, target: np.ndarray, new_v: tuple, dense_reduce: Callable, sequential: bool, run: int = 0
    ) -> "SparseCotangent":
        """Slot ``j`` added into result slot ``target[j]``, each result as ``dense_reduce`` computes it.

        Results that add at most two entries are computed here (the order of two
        terms does not change a sum), and so are longer sums when ``sequential``
        says that NumPy adds them one after the other in slot order (a reduction
        over at most :data:`_SEQUENTIAL` elements); rows with any other result go
        through ``dense_reduce`` on their dense rows, so that every number is the
        one NumPy's (pairwise) reduction gives.  With ``run`` (a sum over the last
        axis, of that length: result ``t`` adds slots ``t * run ...``), only the
        results that add more than two entries are laid out densely, each as the
        one run NumPy reduces.
        """
        width = max(math.prod(new_v), 1)
        new_cols = target[self.cols]
        keys = _key(self.rows, width, new_cols)
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if keys.shape[0] else np.zeros(0, dtype=np.intp)
        counts = np.diff(np.r_[starts, keys.shape[0]])
        data = self.data[order]
        sums = data[starts].copy()
        two = counts == 2
        if two.any():
            sums[two] = data[starts[two]] + data[starts[two] + 1]
        heavy = counts > 2
        result_keys = keys[starts]
        result_rows = self.rows[order[starts]]
        result_cols = new_cols[order[starts]]
        if heavy.any() and sequential:
            # Entries of one result are in slot order (a stable sort of slot-ordered entries).
            group = np.repeat(np.arange(starts.shape[0]), counts)
            long_sums = np.zeros(starts.shape[0], dtype=sums.dtype)
            np.add.at(long_sums, group, data)
            sums[heavy] = long_sums[heavy]
        elif heavy.any() and run:
            which = np.flatnonzero(heavy)
            members = counts[which]
            if which.shape[0] * run * sums.dtype.itemsize > MAX_DENSE_BYTES:
                raise DenseBatchTooLarge(run, sums.dtype.itemsize)
            block = np.zeros((which.shape[0], run), dtype=sums.dtype)
            within = np.arange(int(members.sum())) - np.repeat(np.cumsum(members) - members, members)
            entries = order[np.repeat(starts[which], members) + within]
            block[np.repeat(np.arange(which.shape[0]), members), self.cols[entries] % run] = self.data[entries]
            sums[which] = np.add.reduce(block, axis=1)
        elif heavy.any():
            heavy_rows = np.unique(result_rows[heavy])
            reduced = np.asarray(dense_reduce(self.rows_dense(heavy_rows))).reshape(heavy_rows.shape[0], -1)
            in_heavy = np.isin(result_rows, heavy_rows)
            where = np.searchsorted(heavy_rows, result_rows[in_heavy])
            sums[in_heavy] = reduced[where, result_cols[in_heavy]]
        out = SparseCotangent((self.shape[0],) + tuple(new_v), result_rows, result_cols, sums)
        out._keys = _small_keys(result_keys)
        return out

    def segment_sums(self, indices: Any) -> Optional["SparseCotangent"]:
        """``np.add.reduceat(self, indices, axis=-1)`` (``indices`` along the last value axis).

        ``None`` when segments overlap (the caller takes the dense path).
        """
        seg, pos = reduceat_segments(indices, self.shape[-1])
        n = self.shape[-1]
        if np.bincount(pos, minlength=n).max(initial=0) > 1:
            return None
        lead = self.shape[1:-1]
        n_seg = int(np.size(indices))
        segment_of = np.full(n, -1, dtype=np.intp)
        segment_of[pos] = seg
        rest = math.prod(lead)
        target = (np.arange(rest, dtype=np.intp)[:, None] * n_seg + segment_of[None, :]).reshape(-1)
        target[np.tile(segment_of < 0, rest)] = -1
        g = self
        inside = target[g.cols] >= 0
        if not inside.all():
            g = g._kept(inside)
        idx = np.asarray(indices, dtype=np.intp)
        longest = int(np.bincount(seg).max(initial=0)) if seg.size else 0
        reduce = lambda d: np.add.reduceat(d, idx, axis=-1)  # noqa: E731
        return g._reduced(target, lead + (n_seg,), reduce, longest <= _SEQUENTIAL)

    def segments_spread(self, indices: Any, n: int) -> "SparseCotangent":
        """The transpose of :meth:`segment_sums`: each segment's cotangent sent to its members.

        Members of several segments add up in segment order (as ``np.add.at`` does).
        """
        seg, pos = reduceat_segments(indices, n)
        lead = self.shape[1:-1]
        gathered = self.gather(self._slot_ids()[..., seg])
        target = np.arange(math.prod(lead) * n, dtype=np.intp).reshape(lead + (n,))[..., pos]
        return gathered.scatter(target, lead + (n,))

    # -------------------------------------------------------------- protocols
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if method == "__call__" and not kwargs:
            handler = _UFUNCS.get(ufunc)
            if handler is not None:
                out = handler(*inputs)
                if out is not None:
                    return out
        if "out" in kwargs:
            kwargs = dict(kwargs, out=densify(kwargs["out"]))
        return getattr(ufunc, method)(*densify(inputs), **kwargs)

    def __array_function__(self, func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
        handler = _FUNCTIONS.get(func)
        if handler is not None:
            out = handler(*args, **kwargs)
            if out is not None:
                return out
        return func(*densify(args), **densify(kwargs))


# ------------------------------------------------------------------ helpers
def _value_key(key: Any) -> Any:
    """The part of ``key`` that indexes the value axes, when the batch axis is taken whole; else ``None``."""
    if type(key) is not tuple:
        key = (key,)
    if not key:
        return None
    head = key[0]
    if head is Ellipsis:
        if any(k is Ellipsis for k in key[1:]):
            return None
        return key  # the Ellipsis now covers the leading value axes only
    if type(head) is slice and head == slice(None):
        return key[1:]
    return None


def _reshape(a: SparseCotangent, shape: Sequence[Any], order: str = "C") -> Optional[SparseCotangent]:
    if order not in ("C", None):
        return None
    shape = tuple(operator.index(s) for s in shape)
    if not shape or shape[0] != a.shape[0]:
        return None
    rest = list(shape[1:])
    if rest.count(-1) == 1:
        known = math.prod(s for s in rest if s != -1)
        if known == 0:
            return None
        rest[rest.index(-1)] = a.width // known
    if any(s < 0 for s in rest) or math.prod(rest) != a.width:
        return None
    out = SparseCotangent((a.shape[0],) + tuple(rest), a.rows, a.cols, a.data)
    out._keys = _small_keys(a._keys)
    return a._like(out)  # a reshape of a batch-last array is a view, batch-last


def _sum_layout(a: Optional[bool], b: Optional[bool]) -> Optional[bool]:
    """The layout (see :attr:`SparseCotangent.batch_last`) of the dense sweep's sum of two batches.

    Two arrays: NumPy keeps the layout they share, else C order.  A batch with no
    layout yet (``None``: the seed and what element-wise steps make of it) is a
    structured batch in the dense sweep (:class:`tapegrad.banded.BandedCotangent`),
    which adds itself into a copy of the other array: that one's layout.
    """
    if a is None:
        return b
    if b is None:
        return a
    return a and b


def _fancy_batch_last(value_key: tuple, ndim: int) -> Optional[bool]:
    """The layout of the dense ``g[(slice(None),) + value_key]`` (see :attr:`SparseCotangent.batch_last`).

    ``None`` (``g``'s own layout) for a basic index, a view of ``g``; ``True`` for an
    advanced index whose dimensions are all of the result's value axes (NumPy puts
    the batch axis innermost); ``False`` for any other advanced index.
    """
    shapes = []
    for k in value_key:
        if k is None or k is Ellipsis or type(k) is slice or isinstance(k, numbers.Integral):
            continue
        k = np.asarray(k)
        shapes.append((int(np.count_nonzero(k)),) if k.dtype == bool else k.shape)
    if not shapes:
        return None
    try:
        return len(np.broadcast_shapes(*shapes)) == ndim
    except ValueError:
        return False


def reduceat_segments(indices: Any, n: int) -> tuple:
    """``(segment, position)`` pairs of ``np.add.reduceat`` along an axis of length ``n``.

    Segment ``j`` covers ``[i_j, i_j+1)``, or just ``i_j`` where the indices do not increase
    (the rules of ``add.reduceat`` use it too).
    """
    idx = np.asarray(indices, dtype=np.intp)
    ends = np.append(idx[1:], n)
    ends = np.where(ends > idx, ends, idx + 1)
    lengths = ends - idx
    seg = np.repeat(np.arange(idx.size), lengths)
    pos = np.arange(seg.size) - np.repeat(np.cumsum(lengths) - lengths, lengths) + idx[seg]
    return seg, pos


def _disjoint_union(a: SparseCotangent, b: SparseCotangent) -> SparseCotangent:
    """The entries of ``a`` and of ``b`` (no position in both), sorted."""
    if b.nnz > a.nnz:
        a, b = b, a
    ka, kb = a.keys(), b.keys()
    if b.nnz * 64 < a.nnz:  # a few entries into many: insert them
        at = np.searchsorted(ka, kb)
        out = SparseCotangent(a.shape, np.insert(a.rows, at, b.rows), np.insert(a.cols, at, b.cols), np.insert(a.data, at, b.data))
        out._keys = _small_keys(np.insert(ka, at, kb))
        return out
    both = np.concatenate([ka, kb])
    order = np.argsort(both, kind="stable")
    out = SparseCotangent(
        a.shape,
        np.concatenate([a.rows, b.rows])[order],
        np.concatenate([a.cols, b.cols])[order],
        np.concatenate([a.data, b.data])[order],
    )
    out._keys = _small_keys(both[order])
    return out


def _is_zero(value: Any) -> bool:
    return isinstance(value, (numbers.Number, np.generic, np.ndarray)) and np.ndim(value) == 0 and value == 0


def _binary(op: Callable, commutes: bool) -> Callable:
    def handler(a: Any, b: Any) -> Any:
        if type(a) is SparseCotangent and type(b) is not SparseCotangent:
            return a._scaled(b, op, True)
        if type(b) is SparseCotangent and type(a) is not SparseCotangent and commutes:
            return b._scaled(a, op, False)
        return None

    return handler


def _add(a: Any, b: Any, subtract: bool = False) -> Any:
    if type(a) is SparseCotangent and type(b) is SparseCotangent and a.shape == b.shape:
        return a._merged(b, subtract)
    # A zero scalar changes nothing but the dtype, as in NumPy.
    if type(a) is SparseCotangent and _is_zero(b) and np.result_type(a.data, b) == a.dtype:
        return a
    if type(b) is SparseCotangent and _is_zero(a) and not subtract and np.result_type(a, b.data) == b.dtype:
        return b
    return None


def _subtract(a: Any, b: Any) -> Any:
    return _add(a, b, True)


def _negative(a: Any) -> Any:
    return a._with_data(-a.data)


def _conjugate(a: Any) -> Any:
    return a if a.dtype.kind != "c" else a._with_data(np.conjugate(a.data))


def _matmul(a: Any, b: Any) -> Any:
    """``g @ m`` for a plain finite 2-D ``m`` when every row of ``g`` holds at most one entry.

    Each result row is then one scaled row of ``m`` (what the dense product
    gives: the other terms are exact zeros); anything else is the dense product.
    """
    if type(a) is not SparseCotangent or type(b) is not np.ndarray or a.ndim != 2 or b.ndim != 2:
        return None
    if b.shape[0] != a.shape[1] or b.dtype.kind not in "fc" or a.nnz > a.shape[0]:
        return None
    rows = a.rows
    if rows.shape[0] > 1 and not (rows[1:] != rows[:-1]).all():
        return None
    if a.shape[0] * b.shape[1] * np.result_type(a.dtype, b.dtype).itemsize > MAX_DENSE_BYTES:
        raise DenseBatchTooLarge(b.shape[1], np.result_type(a.dtype, b.dtype).itemsize)
    picked = b[a.cols]
    if not np.isfinite(picked).all() or not np.isfinite(b).all():
        return None  # the dense product's 0 * inf terms are NaN
    dtype = np.result_type(a.dtype, b.dtype)
    # picked is a fresh copy (fancy indexing): scale it in place, and when every row of g
    # holds its entry in order (the seed of a Jacobian) it is the product itself, so a
    # dense Jacobian's rows exist once, not three times.
    if picked.dtype == dtype:
        np.multiply(picked, a.data[:, None], out=picked)
    else:
        picked = a.data[:, None] * picked
    if rows.shape[0] == a.shape[0] and (rows.shape[0] == 0 or (rows[0] == 0 and rows[-1] == a.shape[0] - 1)):
        return picked  # strictly increasing (checked above) from 0 to n - 1: every row, in order
    out = np.zeros((a.shape[0], b.shape[1]), dtype=dtype)
    out[rows] = picked
    return out


_UFUNCS: Dict[np.ufunc, Callable[..., Any]] = {
    np.matmul: _matmul,
    np.multiply: _binary(np.multiply, True),
    np.divide: _binary(np.divide, False),
    np.add: _add,
    np.subtract: _subtract,
    np.negative: _negative,
    np.positive: lambda a: a,
    np.conjugate: _conjugate,
}


def _where(condition: Any, x: Any = None, y: Any = None) -> Any:
    """``np.where(mask, g, 0)``, ``np.where(mask, 0, g)``, ``np.where(mask, g, h)``: entries selected by slot."""
    if type(condition) is not np.ndarray or condition.dtype != bool:
        return None
    xs, ys = type(x) is SparseCotangent, type(y) is SparseCotangent
    if not (xs or ys) or (xs and not ys and not _is_zero(y)) or (ys and not xs and not _is_zero(x)):
        return None
    dtype = np.result_type(x.data if xs else x, y.data if ys else y)
    picked = []
    if xs:
        picked.append(x._selected(condition))
    if ys:
        picked.append(y._selected(~condition))
    if any(p is None for p in picked):
        return None
    if len(picked) == 2:
        if picked[0].shape != picked[1].shape:
            return None
        out = picked[0]._merged(picked[1], False)  # disjoint: no sums
    else:
        out = picked[0]
    return out if out.dtype == dtype else out._with_data(out.data.astype(dtype))


def _axes_of(axis: Any, ndim: int) -> Optional[tuple]:
    """Positive axes, or ``None`` when ``axis`` is ``None`` or touches the batch axis."""
    if axis is None:
        return None
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    try:
        axes = tuple(sorted({operator.index(a) % ndim for a in axes}))
    except TypeError:
        return None
    return None if 0 in axes else axes


def _sum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False, **kwargs: Any) -> Any:
    if type(a) is not SparseCotangent or dtype is not None or out is not None or kwargs:
        return None
    axes = _axes_of(axis, a.ndim)
    if axes is None:
        return None
    if not axes:
        return a
    return a.summed(axes, keepdims)


def _moved_ids(func: Any, a: Any, *args: Any, **kwargs: Any) -> Optional[SparseCotangent]:
    """A permutation of the value axes done by ``func`` on the slot ids (batch axis of length 1)."""
    ids = a._slot_ids()[None]
    moved = func(ids, *args, **kwargs)
    if moved.shape[0] != 1 or moved.size != ids.size:
        return None
    return a.gather(moved[0])


def _transpose(a: Any, axes: Any = None) -> Any:
    if type(a) is not SparseCotangent or axes is None:
        return None
    axes = tuple(operator.index(x) % a.ndim for x in axes)
    if axes[0] != 0:
        return None
    return _moved_ids(np.transpose, a, axes)


def _swapaxes(a: Any, axis1: Any, axis2: Any) -> Any:
    if type(a) is not SparseCotangent or 0 in (operator.index(axis1) % a.ndim, operator.index(axis2) % a.ndim):
        return None
    return _moved_ids(np.swapaxes, a, axis1, axis2)


def _moveaxis(a: Any, source: Any, destination: Any) -> Any:
    if type(a) is not SparseCotangent:
        return None
    ends = [operator.index(x) % a.ndim for x in np.atleast_1d(source)] + [
        operator.index(x) % a.ndim for x in np.atleast_1d(destination)
    ]
    if 0 in ends:
        return None
    return _moved_ids(np.moveaxis, a, source, destination)


def _roll(a: Any, shift: Any, axis: Any = None) -> Any:
    if type(a) is not SparseCotangent or _axes_of(axis, a.ndim) is None:
        return None
    out = _moved_ids(np.roll, a, shift, axis=axis)
    return out if out is None else a._like(out)  # np.roll fills an empty_like: same layout


def _flip(m: Any, axis: Any = None) -> Any:
    if type(m) is not SparseCotangent or _axes_of(axis, m.ndim) is None:
        return None
    return _moved_ids(np.flip, m, axis=axis)


def _np_reshape(a: Any, shape: Any = None, order: str = "C", **kwargs: Any) -> Any:
    if type(a) is not SparseCotangent or kwargs or shape is None:
        return None
    if isinstance(shape, numbers.Integral):
        shape = (shape,)
    return _reshape(a, shape, order)


def _expand_dims(a: Any, axis: Any) -> Any:
    if type(a) is not SparseCotangent:
        return None
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    ndim = a.ndim + len(axes)
    positions = sorted(operator.index(x) % ndim for x in axes)
    if 0 in positions:
        return None
    shape = list(a.shape)
    for p in positions:
        shape.insert(p, 1)
    return _reshape(a, shape)


def _squeeze(a: Any, axis: Any = None) -> Any:
    if type(a) is not SparseCotangent:
        return None
    axes = _axes_of(axis, a.ndim) if axis is not None else tuple(i for i in range(1, a.ndim) if a.shape[i] == 1)
    if axes is None or any(a.shape[i] != 1 for i in axes):
        return None
    return _reshape(a, [n for i, n in enumerate(a.shape) if i not in axes])


def _broadcast_to(array: Any, shape: Any, subok: bool = False) -> Any:
    if type(array) is not SparseCotangent:
        return None
    shape = tuple(np.atleast_1d(shape))
    if shape == array.shape:
        return array
    if len(shape) < array.ndim or shape[0] != array.shape[0] or len(shape) > array.ndim:
        return None  # new leading axes would be batch axes
    try:
        source = np.broadcast_to(array._slot_ids(), shape[1:])
    except ValueError:
        return None
    return array.gather(np.ascontiguousarray(source))


def _concatenate(arrays: Any, axis: Any = 0, out: Any = None, dtype: Any = None, casting: Any = "same_kind") -> Any:
    """Sparse batches joined along a value axis: each one's slots renamed into the joined value's."""
    arrays = list(arrays) if isinstance(arrays, (list, tuple)) else None
    if not arrays or out is not None or dtype is not None or axis is None:
        return None
    if any(type(a) is not SparseCotangent for a in arrays):
        return None
    ndim = arrays[0].ndim
    axis = operator.index(axis) % ndim if ndim else 0
    if axis == 0 or any(a.ndim != ndim or a.shape[0] != arrays[0].shape[0] for a in arrays):
        return None
    if any(a.shape[:axis] + a.shape[axis + 1 :] != arrays[0].shape[:axis] + arrays[0].shape[axis + 1 :] for a in arrays):
        return None
    sizes = [a.shape[axis] for a in arrays]
    shape = arrays[0].shape[:axis] + (sum(sizes),) + arrays[0].shape[axis + 1 :]
    ids = np.arange(math.prod(shape[1:]), dtype=np.intp).reshape(shape[1:])
    pieces = np.split(ids, np.cumsum(sizes)[:-1], axis=axis - 1)
    rows = np.concatenate([a.rows for a in arrays])
    cols = np.concatenate([piece.reshape(-1)[a.cols] for a, piece in zip(arrays, pieces)])
    result = np.result_type(*(a.dtype for a in arrays))
    data = np.concatenate([a.data.astype(result, copy=False) for a in arrays])
    out = SparseCotangent._from_entries(shape, rows, cols, data)
    out._batch_last = all(a._batch_last is True for a in arrays)  # NumPy keeps a layout all inputs share
    return out


def _zeros_like(a: Any, dtype: Any = None, order: str = "K", subok: bool = True, shape: Any = None, **kwargs: Any) -> Any:
    if type(a) is not SparseCotangent or kwargs:
        return None
    return np.zeros(a.shape if shape is None else shape, dtype=a.dtype if dtype is None else dtype)


def _result_type(*arrays_and_dtypes: Any) -> Any:
    return np.result_type(*(a.dtype if type(a) is SparseCotangent else a for a in arrays_and_dtypes))


_FUNCTIONS: Dict[Any, Callable[..., Any]] = {
    np.shape: lambda a: a.shape,
    np.ndim: lambda a: len(a.shape),
    np.size: lambda a, axis=None: a.size if axis is None else a.shape[axis],
    np.result_type: _result_type,
    np.where: _where,
    np.sum: _sum,
    np.transpose: _transpose,
    np.swapaxes: _swapaxes,
    np.moveaxis: _moveaxis,
    np.roll: _roll,
    np.flip: _flip,
    np.reshape: _np_reshape,
    np.expand_dims: _expand_dims,
    np.squeeze: _squeeze,
    np.broadcast_to: _broadcast_to,
    np.zeros_like: _zeros_like,
    np.concatenate: _concatenate,
    np.real: lambda val: val if val.dtype.kind != "c" else None,
    np.iscomplexobj: lambda x: x.dtype.kind == "c",
    np.isrealobj: lambda x: x.dtype.kind != "c",
    np.conj: _conjugate,
    np.conjugate: _conjugate,
}
