"""Banded batches of cotangents: Jacobian sweeps that stay cheap while they can.

A Jacobian sweep of a 1-D output starts from the identity: row ``r`` of the
batch is the basis cotangent ``e_r``.  Element-wise rules scale its columns,
slicing rules shift them, accumulation adds shifted copies; through all of
these the ``(B, L)`` batch stays a handful of diagonals.
:class:`BandedCotangent` stores only those diagonals, so a sweep over a
stencil-like program (Rosenbrock, finite-difference residuals, chains of
element-wise maps) costs O(B) per step instead of O(B L).

An N-D value (a 2-D field) is laid out flat: entry ``(r, p)`` of the batch
is position ``p`` of a flat *layout* of ``length`` slots, and the value's
element ``(i, j, ...)`` sits at slot ``start + i * strides[0] + j * strides[1] + ...``.
A fresh identity uses the C-order layout; slicing ``x[1:, :]`` moves ``start``,
slicing ``x[:, 1:]`` also leaves one unused slot per row.  Unused slots always
hold zeros, so diagonals stay diagonals under every slice of step 1.

Correctness never depends on the structure: every NumPy call that this module
does not handle explicitly receives the dense array the batch stands for (built
once and cached), so a rule sees the same numbers it would see without this
optimisation, only sooner or later.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin  # operators through __array_ufunc__

from .finiteness import SUMMED, all_true, finite, mark_nan_free, sum_finite

__all__ = ["BandedCotangent", "plain", "MAX_BANDS"]

#: A batch with more diagonals than this is cheaper to carry densely.
MAX_BANDS = 16

# offset -> (lo, vals): entry (lo + i, lo + i + offset) of the (B, L) batch holds vals[i].
Bands = Dict[int, Tuple[int, np.ndarray]]


def plain(value: Any, fresh: bool = False) -> Any:
    """``value`` with every banded batch replaced by its dense array (recursing into lists/tuples/dicts).

    By default the dense arrays are the batches' read-only caches; ``fresh=True``
    gives writable arrays of their own (results handed to users).
    """
    if type(value) is BandedCotangent:
        return value.to_array() if fresh else value.dense()
    if type(value) is list or type(value) is tuple:
        if any(type(v) is BandedCotangent or type(v) in (list, tuple, dict) for v in value):
            return type(value)(plain(v, fresh) for v in value)
        return value
    if type(value) is dict:
        return {k: plain(v, fresh) for k, v in value.items()}
    return value


class BandedCotangent(NDArrayOperatorsMixin):
    """A batch of cotangents that is zero outside a few diagonals.

    Parameters
    ----------
    shape : tuple of int
        ``(B, L)`` for a 1-D value of length ``L``, or ``(B, *value_shape)``.
    bands : dict
        ``{offset: (lo, vals)}``: entry ``(lo + i, lo + i + offset)`` of the
        ``(B, length)`` batch of slots holds ``vals[i]``; everything else is zero.
    dtype : numpy.dtype
        The dtype of the dense array this stands for.
    layout : tuple, optional
        ``(length, start, strides)``: the value's element ``(i, j, ...)`` sits in
        slot ``start + i * strides[0] + j * strides[1] + ...``.  Default: C order
        (slots are the flat indices).  Slots no element uses hold zeros in every
        diagonal.

    Notes
    -----
    Instances are immutable: every operation returns a new batch (or a new
    dense array), so the sweep may hand one batch to several rules.
    """

    __slots__ = ("shape", "dtype", "bands", "_dense", "length", "start", "strides")
    __array_priority__ = 20.0

    def __init__(
        self, shape: tuple, bands: Bands, dtype: Any, layout: Optional[Tuple[int, int, tuple]] = None
    ) -> None:
        self.shape = shape
        self.bands = bands
        self.dtype = np.dtype(dtype)
        self._dense: Optional[np.ndarray] = None
        if layout is None:  # C order: element (i, j, ...) at its flat index
            if len(shape) == 2:  # the commonest batch: rows of a 1-D value
                self.length, self.start, self.strides = shape[1], 0, _UNIT
            else:
                self.length, self.start, self.strides = math.prod(shape[1:]), 0, _c_strides(shape[1:])
        else:
            self.length, self.start, self.strides = layout

    @property
    def layout(self) -> Tuple[int, int, tuple]:
        """``(length, start, strides)``: where the value's elements sit among the flat slots."""
        return self.length, self.start, self.strides

    def _standard(self) -> bool:
        """Whether the layout is C order (slots are the flat indices, none unused)."""
        if len(self.shape) == 2:
            return self.start == 0 and self.length == self.shape[1] and self.strides == _UNIT
        return self.start == 0 and self.length == math.prod(self.shape[1:]) and self.strides == _c_strides(self.shape[1:])

    def _slots(self) -> np.ndarray:
        """The slot of each element of the value: an integer array shaped ``shape[1:]``."""
        pos = np.full((), self.start, dtype=np.intp)
        for n, stride in zip(self.shape[1:], self.strides):
            pos = pos[..., None] + np.arange(n, dtype=np.intp) * stride
        return pos

    def _like(self, bands: Bands, dtype: Any) -> "BandedCotangent":
        """A batch of the same shape and layout with other diagonals."""
        return BandedCotangent(self.shape, bands, dtype, self.layout)

    def _layout_vector(self, values: np.ndarray, fill: Any) -> np.ndarray:
        """``values`` (shaped like the value) spread over the flat slots, ``fill`` in unused ones."""
        flat = np.full(self.length, fill, dtype=values.dtype)
        flat[self._slots()] = values
        return flat

    @classmethod
    def eye(cls, rows: int, cols: int, k: int, dtype: Any) -> "BandedCotangent":
        """Like ``np.eye(rows, cols, k)``: ones on the ``k``-th diagonal.

        Rows ``start:stop`` of an identity are ``eye(stop - start, size, start)``
        (a Jacobian's seed); basis tangents for the ``n`` entries of an argument
        at ``offset`` in a batch of ``total`` are ``eye(total, n, -offset)``.
        """
        lo, hi = max(0, -k), min(rows, cols - k)
        ones = np.empty(max(0, hi - lo), dtype=dtype)
        ones.fill(1)  # np.ones, without its Python wrapper (a Jacobian's every call builds one)
        return cls((rows, cols), {k: (lo, ones)}, dtype)

    # -------------------------------------------------------------- array-like
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"BandedCotangent(shape={self.shape}, offsets={sorted(self.bands)}, dtype={self.dtype})"

    def add_into(self, out: np.ndarray) -> np.ndarray:
        """Add the diagonals into ``out`` (shaped like the batch) in place and return it."""
        if len(self.shape) != 2 or not self._standard():
            rows = BandedCotangent((self.shape[0], self.length), self.bands, self.dtype)
            if self._standard() and out.flags.c_contiguous:
                rows.add_into(out.reshape(rows.shape))  # a view: the slots are the flat indices
            else:
                out += rows.dense()[:, self._slots()]  # the value's slots, shaped (B, *value shape)
            return out
        cols = self.shape[1]
        if out.flags.c_contiguous:
            flat = out.reshape(-1)
            for offset, (lo, vals) in self.bands.items():
                n = vals.shape[0]
                if n:
                    # Entry (lo + i, lo + i + offset) sits at flat lo*(L+1) + offset + i*(L+1).
                    first = lo * (cols + 1) + offset
                    flat[first : first + (n - 1) * (cols + 1) + 1 : cols + 1] += vals
        else:
            for offset, (lo, vals) in self.bands.items():
                rows = np.arange(lo, lo + vals.shape[0])
                out[rows, rows + offset] += vals
        return out

    def dense(self) -> np.ndarray:
        """The dense ``(B, L)`` array, built once and read-only (several rules may read it)."""
        if self._dense is None:
            out = self.add_into(np.zeros(self.shape, dtype=self.dtype))
            out.flags.writeable = False  # a rule writing into its cotangent fails loudly
            self._dense = out
        return self._dense

    def to_array(self) -> np.ndarray:
        """A new, writable dense array (for results that leave the sweep)."""
        if self._dense is not None:
            return self._dense.copy()
        return self.add_into(np.zeros(self.shape, dtype=self.dtype))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.dense()
        if dtype is not None and np.dtype(dtype) != out.dtype:
            return out.astype(dtype)
        return self.to_array() if copy else out

    def __getattr__(self, name: str) -> Any:
        # Anything not implemented here (reshape, T, sum, flags, ...) is the dense array's.
        if (name.startswith("__") and name.endswith("__")) or name in BandedCotangent.__slots__:
            raise AttributeError(name)  # protocols probe for these; a half-built copy must not recurse
        return getattr(self.dense(), name)

    def astype(self, dtype: Any, copy: bool = True) -> Any:
        dtype = np.dtype(dtype)
        if dtype == self.dtype and not copy:
            return self
        if dtype.kind not in "fc" or (self.dtype.kind == "c" and dtype.kind != "c"):
            return self.dense().astype(dtype)
        return self._like({o: (lo, v.astype(dtype)) for o, (lo, v) in self.bands.items()}, dtype)

    def __getitem__(self, key: Any) -> Any:
        out = self._slice_columns(key) if len(self.shape) == 2 and self._standard() else self._sliced(key)
        return self.dense()[key] if out is None else out

    def _sliced(self, key: Any) -> Optional["BandedCotangent"]:
        """``self[:, a:b, c:d, ...]`` (step-1 slices of every value axis), else ``None``.

        The slots stay where they are: ``start`` moves to the first element kept,
        and slots of elements left out are zeroed (a selection, so an ``inf``
        there cannot turn into NaN).
        """
        key = _full_index(key, len(self.shape))
        if key is None or key[0] != _WHOLE:
            return None
        start, vshape = self.start, []
        for k, n, stride in zip(key[1:], self.shape[1:], self.strides):
            if type(k) is not slice:
                return None
            first, stop, step = k.indices(n)
            if step != 1:
                return None
            start += first * stride
            vshape.append(max(stop - first, 0))
        out = BandedCotangent((self.shape[0],) + tuple(vshape), {}, self.dtype, (self.length, start, self.strides))
        kept = out._layout_vector(np.ones(vshape, dtype=bool), False)
        for offset, (lo, vals) in self.bands.items():
            mask = kept[lo + offset : lo + offset + vals.shape[0]]
            if mask.all():
                out.bands[offset] = (lo, vals)
            elif mask.any():
                out.bands[offset] = (lo, np.where(mask, vals, 0).astype(self.dtype, copy=False))
        return out

    def _slice_columns(self, key: Any) -> Optional["BandedCotangent"]:
        """``self[..., a:b]`` (or ``self[:, a:b]``) with step 1, else ``None``."""
        if type(key) is not tuple or len(key) != 2 or type(key[1]) is not slice:
            return None
        if key[0] is not Ellipsis and key[0] != slice(None):
            return None
        start, stop, step = key[1].indices(self.shape[1])
        if step != 1:
            return None
        stop = max(stop, start)
        bands: Bands = {}
        for offset, (lo, vals) in self.bands.items():
            first = max(0, start - lo - offset)
            last = min(vals.shape[0], stop - lo - offset)
            if last > first:
                bands[offset - start] = (lo + first, vals[first:last])
        return BandedCotangent((self.shape[0], stop - start), bands, self.dtype)

    def embed(self, start: int, length: int) -> "BandedCotangent":
        """The cotangent of ``x`` (length ``length``) for ``x[start:start + L]``: columns shift right."""
        bands = {offset + start: band for offset, band in self.bands.items()}
        return BandedCotangent((self.shape[0], length), bands, self.dtype)

    def scattered(self, index: tuple, shape: tuple) -> Optional["BandedCotangent"]:
        """The cotangent of ``x`` (shaped ``shape``) for ``x[index]``, or ``None`` if it is not banded.

        Only a step-1 slice of a 1-D ``x`` keeps the structure (the diagonals shift).
        """
        if len(shape) == 1 and len(self.shape) == 2 and self._standard():
            if len(index) != 1 or type(index[0]) is not slice:
                return None
            start, _, step = index[0].indices(shape[0])
            return self.embed(start, shape[0]) if step == 1 else None
        index = _full_index(index, len(shape))
        return None if index is None else self._embedded(index, tuple(shape))

    def _embedded(self, index: tuple, shape: tuple) -> Optional["BandedCotangent"]:
        """The N-D case of :meth:`scattered`: step-1 slices of every axis, in the same slots.

        ``x``'s element ``(j, k, ...)`` takes the slot its piece had; the elements
        outside the piece fall on slots that hold zeros.  ``None`` when ``x`` does
        not fit the slots without overlapping (the rows of the layout are too short).
        """
        if len(index) != len(shape) or len(shape) != len(self.shape) - 1:
            return None
        start = self.start
        for k, n, width, stride in zip(index, shape, self.shape[1:], self.strides):
            if type(k) is not slice:
                return None
            first, stop, step = k.indices(n)
            if step != 1 or max(stop - first, 0) != width:
                return None
            start -= first * stride
        # Slots of x must be distinct and inside the layout: C-like strides of x's shape or wider.
        need = 1
        for n, stride in zip(shape[::-1], self.strides[::-1]):
            if stride < need:
                return None
            need = stride * n
        span = sum((n - 1) * stride for n, stride in zip(shape, self.strides))
        if span >= self.length:
            return None
        piece = self
        if start < 0 or start + span >= self.length:
            # x does not fit around the piece where it sits: move the piece so that x starts at slot 0.
            piece = self._moved(self.start - start)
            start = 0
        layout = (self.length, start, self.strides)
        return BandedCotangent((self.shape[0],) + shape, piece.bands, self.dtype, layout)

    # -------------------------------------------------------------- algebra
    def _per_band_laid_out(self, factor: Any, shape: tuple, fill: Any) -> Optional[list]:
        """:meth:`_per_band` for an N-D value or a non-C layout: a factor shaped like the value.

        The factor is spread over the slots (``fill`` in the unused ones, which
        hold zeros in every diagonal) and cut per diagonal like a 1-D column factor.
        """
        vshape = self.shape[1:]
        if len(shape) > len(vshape):
            if any(s != 1 for s in shape[: len(shape) - len(vshape)]):
                return None  # varies along the batch
            factor = factor.reshape(shape[len(shape) - len(vshape) :])
            shape = factor.shape
        try:
            if np.broadcast_shapes(shape, vshape) != vshape:
                return None
        except ValueError:
            return None
        flat = self._layout_vector(np.broadcast_to(factor, vshape), fill)
        return [flat[lo + offset : lo + offset + vals.shape[0]] for offset, (lo, vals) in self.bands.items()]

    def _per_band(self, factor: Any, fill: Any = 1) -> Optional[list]:
        """``factor`` cut into one piece per band, if it broadcasts without widening the batch.

        ``factor`` may be a scalar, one value per column (shape ``(L,)`` or
        ``(1, L)``) or one per row (``(B, 1)``); anything else (a tracer, another
        batch, a list, a wider array) gives ``None``: the caller takes the dense path.
        """
        if type(factor) is np.ndarray or isinstance(factor, np.generic):  # subclasses: the general path
            if factor.dtype.kind not in "biufc":
                return None
            shape = factor.shape
        elif isinstance(factor, numbers.Number):
            shape = ()
        else:
            return None
        if all(s == 1 for s in shape) and len(shape) <= len(self.shape):
            scalar = factor.reshape(()) if shape else factor
            return [scalar] * len(self.bands)
        if len(self.shape) != 2 or not self._standard():
            return self._per_band_laid_out(factor, shape, fill)
        rows, cols = self.shape
        if len(shape) > 2 or any(s != 1 for s in shape[:-2]):
            return None
        if shape[-1] == cols and (len(shape) == 1 or shape[0] == 1):
            column = factor.reshape(-1)
            return [column[lo + offset : lo + offset + vals.shape[0]] for offset, (lo, vals) in self.bands.items()]
        if len(shape) == 2 and shape == (rows, 1):
            row = factor.reshape(-1)
            return [row[lo : lo + vals.shape[0]] for lo, vals in self.bands.values()]
        return None

    def _scaled(self, factor: Any, reciprocal: bool = False) -> Optional["BandedCotangent"]:
        """Multiply (or divide) by something that broadcasts without widening the batch, else ``None``.

        The zeros outside the bands stay zeros only while every factor is finite
        (and non-zero, for a division): ``0 * inf`` and ``0 / 0`` are NaN in the
        dense array, so such a factor takes the dense path and gives its numbers.
        """
        if type(factor) is np.ndarray and self._takes_column(factor):
            return self._column_scaled(factor, reciprocal)
        pieces = self._per_band(factor)
        if pieces is None:
            return None
        if not finite(factor) or (reciprocal and not np.all(factor != 0)):
            return None
        bands: Bands = {}
        for (offset, (lo, vals)), f in zip(self.bands.items(), pieces):
            bands[offset] = (lo, vals / f if reciprocal else vals * f)
        if bands:
            dtype = next(iter(bands.values()))[1].dtype
        else:
            dtype = np.result_type(self.dtype, factor)
        return self._like(bands, dtype)

    def _takes_column(self, factor: np.ndarray) -> bool:
        """Whether ``factor`` is one float per column of a 2-D C-order batch (the commonest factor)."""
        shape = self.shape
        return (
            factor.ndim == 1
            and len(shape) == 2
            and factor.shape[0] == shape[1]
            and factor.dtype.kind in "fc"
            and self.start == 0
            and self.length == shape[1]
            and self.strides == _UNIT
        )

    def _column_scaled(self, column: np.ndarray, reciprocal: bool) -> Optional["BandedCotangent"]:
        """:meth:`_scaled` by one float per column (see :meth:`_takes_column`): the same numbers, fewer steps."""
        if not finite(column) or (reciprocal and not all_true(column)):  # floats: none is 0
            return None  # the dense array's 0 * inf and 0 / 0 are NaN: let it compute them
        bands: Bands = {}
        dtype = np.result_type(self.dtype, column) if not self.bands else None
        for offset, (lo, vals) in self.bands.items():
            n = vals.shape[0]
            piece = column if lo + offset == 0 and n == column.shape[0] else column[lo + offset : lo + offset + n]
            bands[offset] = (lo, vals / piece if reciprocal else vals * piece)
            if dtype is None:  # the first band's, as before (a dtype's truth is its field count)
                dtype = bands[offset][1].dtype
        return BandedCotangent(self.shape, bands, dtype, (self.length, 0, _UNIT))

    def _selected(self, condition: np.ndarray, keep: bool, zero: Any) -> Optional["BandedCotangent"]:
        """``np.where(condition, self, zero)`` (``keep``) or ``np.where(condition, zero, self)``.

        A selection, not a product with the mask: an ``inf`` or ``nan`` on a band
        where the other branch is chosen becomes 0, exactly as in the dense array.
        """
        pieces = self._per_band(condition, fill=keep is False)  # unused slots: select the zero
        if pieces is None:
            return None
        dtype = np.result_type(self.dtype, zero)  # as np.where would promote
        bands: Bands = {}
        for (offset, (lo, vals)), c in zip(self.bands.items(), pieces):
            bands[offset] = (lo, np.where(c if keep else ~c, vals, zero).astype(dtype, copy=False))
        return self._like(bands, dtype)

    def _moved(self, start: int) -> "BandedCotangent":
        """The same batch with its value's first element in slot ``start`` (diagonals shift).

        Entries shifted out of the slots were in unused slots, so they are zeros.
        """
        shift = start - self.start
        bands: Bands = {}
        for offset, (lo, vals) in self.bands.items():
            offset += shift
            first = max(0, -(lo + offset))
            last = min(vals.shape[0], self.length - (lo + offset))
            if last > first:
                bands[offset] = (lo + first, vals[first:last])
        return BandedCotangent(self.shape, bands, self.dtype, (self.length, start, self.strides))

    def _merged(self, other: "BandedCotangent", sign: float) -> Any:
        if other.layout != self.layout:
            if (other.length, other.strides) != (self.length, self.strides):
                return None  # slots of another shape: the caller adds the dense arrays
            other = other._moved(self.start)  # x[1:] + x[:-1]: one value, two placements
        bands = dict(self.bands)
        for offset, (lo, vals) in other.bands.items():
            if sign < 0:
                vals = -vals
            if offset not in bands:
                bands[offset] = (lo, vals)
                continue
            lo0, vals0 = bands[offset]
            if lo0 == lo and vals0.shape == vals.shape:
                bands[offset] = (lo, vals0 + vals)
                continue
            first = min(lo0, lo)
            last = max(lo0 + vals0.shape[0], lo + vals.shape[0])
            total = np.zeros(last - first, dtype=np.result_type(vals0, vals))
            total[lo0 - first : lo0 - first + vals0.shape[0]] += vals0
            total[lo - first : lo - first + vals.shape[0]] += vals
            bands[offset] = (first, total)
        dtype = np.result_type(self.dtype, other.dtype)
        merged = self._like(bands, dtype)
        return merged.to_array() if len(bands) > MAX_BANDS else merged

    def _plus_dense(self, other: Any, sign_self: float, sign_other: float) -> Optional[np.ndarray]:
        if type(other) is not np.ndarray or other.shape != self.shape or other.dtype.kind not in "biufc":
            return None
        out = other.astype(np.result_type(other, self.dtype), copy=True)  # the sum's own array
        if sign_other < 0:
            np.negative(out, out=out)
        return (self if sign_self > 0 else -self).add_into(out)

    def times_finite(self, m: Any) -> Optional[np.ndarray]:
        """``self @ m`` for a plain 2-D ``m`` that the caller proved finite (``None``: use the dense product).

        A matmul rule proves it from its forward values (see
        :func:`tapegrad.rules.linalg._finite_through`), which saves the look at ``m``.
        """
        return self._rows_times(m, m_finite=True)

    def _rows_times(self, m: Any, m_finite: bool = False) -> Optional[np.ndarray]:
        """``self @ m`` for a plain 2-D ``m``: a scaled gather of ``m``'s rows per diagonal."""
        if type(m) is not np.ndarray or m.ndim != 2 or len(self.shape) != 2 or m.shape[0] != self.shape[1]:
            return None
        if not self._standard():
            return None
        rows = self.shape[0]
        if len(self.bands) == 1 and rows == m.shape[0] and (m_finite or m.size >= SUMMED):
            out = self._diagonal_times(m, m_finite)
            if out is not None:
                return out
        if not m_finite and not finite(m):
            return None  # the dense product's 0 * inf terms are NaN: let it compute them
        if len(self.bands) == 1:
            ((offset, (lo, vals)),) = self.bands.items()
            if lo == 0 and vals.shape[0] == rows:
                return vals[:, None] * m[offset : offset + rows]
        dtype = np.result_type(self.dtype, m.dtype)
        out = np.zeros((rows, m.shape[1]), dtype=dtype)
        for offset, (lo, vals) in self.bands.items():
            n = vals.shape[0]
            out[lo : lo + n] += vals[:, None] * m[lo + offset : lo + offset + n]
        return out

    def _diagonal_times(self, m: np.ndarray, m_finite: bool = False) -> Optional[np.ndarray]:
        """``self @ m`` for a full main diagonal, proved finite by one sum (else ``None``: the general path).

        Each row of ``m`` meets a diagonal entry, so a finite product proves ``m`` finite,
        and it is known free of NaN (:func:`nan_free`): the sweep need not look again.
        With ``m`` known finite (``m_finite``) the dense product's extra terms are all
        ``0 * m[k, j] = 0``, so the product is exact whatever the diagonal holds, and
        NaN-free when the diagonal is finite: no pass over the product at all.
        """
        ((offset, (lo, vals)),) = self.bands.items()
        if offset != 0 or lo != 0 or vals.shape[0] != m.shape[0]:
            return None
        if m_finite:
            out = vals[:, None] * m
            if finite(vals):
                mark_nan_free(out)
            return out
        with np.errstate(over="ignore", invalid="ignore"):  # a rejected product warns on the general path
            out = vals[:, None] * m
            proved = sum_finite(out)
        if not proved:
            return None
        mark_nan_free(out)
        return out

    # The sweep's commonest operations (a rule's ``g * x``, ``g / x``, ``g @ m`` with a plain
    # array) go straight to their handlers: NumPy's dispatch to __array_ufunc__ costs more
    # than the handler.  Anything else takes the mixin's way, through __array_ufunc__.
    def __mul__(self, other: Any) -> Any:
        if type(other) is not np.ndarray:
            return NDArrayOperatorsMixin.__mul__(self, other)
        out = self._scaled(other)
        return out if out is not None else np.multiply(self.dense(), other)

    def __truediv__(self, other: Any) -> Any:
        if type(other) is not np.ndarray:
            return NDArrayOperatorsMixin.__truediv__(self, other)
        out = self._scaled(other, reciprocal=True)
        return out if out is not None else np.true_divide(self.dense(), other)

    def __matmul__(self, other: Any) -> Any:
        if type(other) is not np.ndarray:
            return NDArrayOperatorsMixin.__matmul__(self, other)
        out = self._rows_times(other)
        return out if out is not None else np.matmul(self.dense(), other)

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if method == "__call__" and not kwargs:
            handler = _UFUNCS.get(ufunc)
            if handler is not None:
                out = handler(*inputs)
                if out is not None:
                    return out
        if "out" in kwargs:
            kwargs = dict(kwargs, out=plain(kwargs["out"]))
        return getattr(ufunc, method)(*plain(inputs), **kwargs)

    def __array_function__(self, func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
        handler = _FUNCTIONS.get(func)
        if handler is not None:
            out = handler(*args, **kwargs)
            if out is not None:
                return out
        return func(*plain(args), **plain(kwargs))


_WHOLE = slice(None)
_UNIT = (1,)  # the element strides of a 1-D value in C order


def _full_index(index: Any, ndim: int) -> Optional[tuple]:
    """``index`` as one slice per axis (missing trailing axes taken whole), or ``None``.

    Only tuples of slices qualify: integers, ``None``, ``Ellipsis`` and arrays
    take the dense path.
    """
    if type(index) is not tuple:
        index = (index,)
    if len(index) > ndim or any(type(k) is not slice for k in index):
        return None
    return index + (_WHOLE,) * (ndim - len(index))


def _c_strides(vshape: tuple) -> tuple:
    """Element strides of a C-ordered array of shape ``vshape``."""
    strides = []
    step = 1
    for n in reversed(vshape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def _other(a: Any, b: Any) -> Tuple[BandedCotangent, Any, bool]:
    """The banded operand, the other one, and whether the banded one came first."""
    return (a, b, True) if type(a) is BandedCotangent else (b, a, False)


def _multiply(a: Any, b: Any) -> Any:
    banded, other, _ = _other(a, b)
    return banded._scaled(other)


def _divide(a: Any, b: Any) -> Any:
    if type(a) is not BandedCotangent:
        return None
    return a._scaled(b, reciprocal=True)


def _add(a: Any, b: Any, sign: float = 1.0) -> Any:
    if type(a) is BandedCotangent and type(b) is BandedCotangent:
        return a._merged(b, sign) if a.shape == b.shape else None
    banded, other, first = _other(a, b)
    return banded._plus_dense(other, 1.0 if first else sign, sign if first else 1.0)


def _subtract(a: Any, b: Any) -> Any:
    return _add(a, b, -1.0)


def _negative(a: Any) -> Any:
    return a._scaled(-1)


def _positive(a: Any) -> Any:
    return a


def _conjugate(a: Any) -> Any:
    if a.dtype.kind != "c":
        return a
    return a._like({o: (lo, np.conjugate(v)) for o, (lo, v) in a.bands.items()}, a.dtype)


def _matmul(a: Any, b: Any) -> Any:
    return a._rows_times(b) if type(a) is BandedCotangent else None


_UFUNCS: Dict[np.ufunc, Callable[..., Any]] = {
    np.multiply: _multiply,
    np.divide: _divide,
    np.add: _add,
    np.subtract: _subtract,
    np.negative: _negative,
    np.positive: _positive,
    np.conjugate: _conjugate,
    np.matmul: _matmul,
}


def _is_zero(value: Any) -> bool:
    return isinstance(value, (numbers.Number, np.generic, np.ndarray)) and np.ndim(value) == 0 and value == 0


def _where(condition: Any, x: Any = None, y: Any = None) -> Any:
    """``np.where(mask, g, 0)`` / ``np.where(mask, 0, g)``: a selection on the diagonals."""
    if type(condition) is not np.ndarray or condition.dtype != bool:
        return None
    if type(x) is BandedCotangent and _is_zero(y):
        return x._selected(condition, True, y)
    if type(y) is BandedCotangent and _is_zero(x):
        return y._selected(condition, False, x)
    return None


def _sum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False, **kwargs: Any) -> Any:
    if type(a) is not BandedCotangent or dtype is not None or out is not None or keepdims or kwargs:
        return None
    ndim = len(a.shape)
    if ndim > 2 or not a._standard():
        # Only the sum over the whole value: unused slots hold zeros, so it is the sum over slots.
        axes = axis if type(axis) is tuple else (axis,)
        if axis is None or sorted(x % ndim for x in axes) != list(range(1, ndim)):
            return None
        axis = -1
    if axis in (-1, 1):
        total = np.zeros(a.shape[0], dtype=a.dtype)
        for _, (lo, vals) in a.bands.items():
            total[lo : lo + vals.shape[0]] += vals
        return total
    if axis in (0, -2):
        total = np.zeros(a.shape[1], dtype=a.dtype)
        for offset, (lo, vals) in a.bands.items():
            total[lo + offset : lo + offset + vals.shape[0]] += vals
        return total
    return None


def _broadcast_to(array: Any, shape: Any, subok: bool = False) -> Any:
    if type(array) is BandedCotangent and tuple(np.atleast_1d(shape)) == array.shape:
        return array
    return None


def _zeros_like(a: Any, dtype: Any = None, order: str = "K", subok: bool = True, shape: Any = None, **kwargs: Any) -> Any:
    if type(a) is not BandedCotangent or kwargs:
        return None
    return np.zeros(a.shape if shape is None else shape, dtype=a.dtype if dtype is None else dtype)


def _result_type(*arrays_and_dtypes: Any) -> Any:
    return np.result_type(*(a.dtype if type(a) is BandedCotangent else a for a in arrays_and_dtypes))


_FUNCTIONS: Dict[Any, Callable[..., Any]] = {
    np.shape: lambda a: a.shape,
    np.ndim: lambda a: len(a.shape),
    np.size: lambda a, axis=None: a.size if axis is None else a.shape[axis],
    np.result_type: _result_type,
    np.where: _where,
    np.sum: _sum,
    np.broadcast_to: _broadcast_to,
    np.zeros_like: _zeros_like,
    np.real: lambda val: val if val.dtype.kind != "c" else None,
    np.conj: _conjugate,
    np.conjugate: _conjugate,
}
