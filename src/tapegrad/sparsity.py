"""Sparse Jacobians and Hessians: ``scipy.sparse`` results at the cost of their nonzeros.

``tapegrad.jacobian(f, sparse=True)`` records ``f`` once and sweeps the tape
with a sparse batch of basis cotangents (:class:`tapegrad.sparse_batch.SparseCotangent`):
rules that scale, move, gather, scatter or sum columns keep it sparse, every
other rule sees the dense array (in row chunks that bound memory).  No
sparsity pattern is asked for: the structure comes from the computation.

Every value equals the dense Jacobian's.  Positions the sweep never reaches
are exact zeros; a row in which the sparse sweep met a NaN (where the dense
sweep may give a different NaN pattern or a strong zero) is computed again by
the ordinary dense sweep, so that it is the dense result's row, bit for bit.

SciPy is imported only here, and only when a sparse result is asked for.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, List, Optional, Sequence

import numpy as np

from .backward import backward
from .lazy import guard_values
from .requests import _require_real, _require_values, _source_nodes, resolve
from .reverse import ArgNums, _flat_sources, _lower, _trace_call, grad
from . import sparse_batch
from .sparse_batch import DenseBatchTooLarge, SparseCotangent
from .tape import Tape
from .tree import flatten

__all__ = ["sparse_jacobian", "sparse_hessian", "jacobian_sparsity", "sparse_jacobian_request"]


def _scipy_sparse() -> Any:
    try:
        import scipy.sparse as sp
    except ImportError as exc:  # pragma: no cover - scipy is in the test environment
        raise ImportError(
            "sparse=True returns a scipy.sparse array: install SciPy (pip install scipy)"
        ) from exc
    return sp


class _Entries:
    """One Jacobian block, collected chunk of rows by chunk of rows in CSR form."""

    def __init__(self, n_rows: int, n_cols: int, dtype: Any) -> None:
        self.shape = (n_rows, n_cols)
        self.dtype = np.dtype(dtype)
        self.index_dtype = np.int32 if max(n_rows, n_cols) < 2**31 - 1 else np.int64
        # (first row, entries per row, column indices, values) per chunk, in row order.
        self.pieces: List[tuple] = []

    def add_sorted(self, first_row: int, n_rows: int, rows: np.ndarray, cols: np.ndarray, data: np.ndarray) -> None:
        """Entries of rows ``first_row...`` given by local row (sorted by row, then column)."""
        counts = np.bincount(rows, minlength=n_rows) if rows.size else np.zeros(n_rows, dtype=np.intp)
        self.pieces.append((first_row, counts, cols.astype(self.index_dtype), data))

    def add_dense(self, first_row: int, block: np.ndarray) -> None:
        """The nonzeros (NaN included) of dense rows ``first_row...``."""
        counts = np.count_nonzero(block, axis=1)
        n_rows, n_cols = block.shape
        if counts.sum() == block.size:
            # No zero (a Jacobian that is not sparse): the block itself, in order, is the
            # data, and no int64 position array of its size is ever made.
            data = block.reshape(-1)
            cols = np.tile(np.arange(n_cols, dtype=self.index_dtype), n_rows)
        else:
            # A band of rows at a time bounds the int64 positions flatnonzero makes.
            step = max(1, (1 << 20) // max(n_cols, 1))
            datas, colss = [], []
            for start in range(0, n_rows, step):
                band = block[start : start + step]
                flat = np.flatnonzero(band)
                datas.append(band.reshape(-1)[flat])
                colss.append((flat % max(n_cols, 1)).astype(self.index_dtype))
            data, cols = _joined(datas), _joined(colss)
        self.pieces.append((first_row, counts, cols, data))

    def to_csr(self) -> Any:
        sp = _scipy_sparse()
        n_rows, n_cols = self.shape
        counts = np.zeros(n_rows, dtype=np.int64)
        for first, c, _, _ in self.pieces:
            counts[first : first + c.shape[0]] += c
        indptr = np.zeros(n_rows + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        index_dtype = self.index_dtype if indptr[-1] < 2**31 - 1 else np.int64
        pieces = sorted(self.pieces, key=lambda p: p[0])
        if pieces:
            indices = _joined([p[2] for p in pieces]).astype(index_dtype, copy=False)
            data = _joined([p[3] for p in pieces]).astype(self.dtype, copy=False)
        else:
            indices, data = np.zeros(0, dtype=index_dtype), np.zeros(0, dtype=self.dtype)
        self.pieces = []
        # Rows are whole and in order, columns sorted in each row; explicit zeros stay (the structure).
        return sp.csr_array((data, indices, indptr.astype(index_dtype, copy=False)), shape=self.shape)


def _joined(parts: List[np.ndarray]) -> np.ndarray:
    """The parts end to end: one part as it is (no copy of a dense Jacobian's values)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _replace_rows(csr: Any, rows: np.ndarray, dense_rows: np.ndarray) -> Any:
    """``csr`` with its rows ``rows`` (sorted) replaced by the nonzeros of ``dense_rows``."""
    sp = _scipy_sparse()
    coo = csr.tocoo()
    keep = ~np.isin(coo.row, rows)
    r, c = np.nonzero(dense_rows)
    all_rows = np.concatenate([coo.row[keep], rows[r]])
    all_cols = np.concatenate([coo.col[keep], c])
    data = np.concatenate([coo.data[keep], dense_rows[r, c]])
    out = sp.csr_array((data, (all_rows, all_cols)), shape=csr.shape)
    out.sort_indices()
    return out


def _seed(rows: int, start: int, yshape: tuple, dtype: Any, structured: bool) -> Any:
    """Rows ``start:start + rows`` of the identity over the output, sparse when the sweep may carry it."""
    if structured:
        return SparseCotangent.eye(rows, start, yshape, dtype)
    size = math.prod(yshape)
    seed = np.zeros((rows, size), dtype=dtype)
    seed[np.arange(rows), np.arange(start, start + rows)] = 1
    return seed.reshape((rows,) + yshape)


def _collect(entries: _Entries, g: Any, first_row: int, rows: int) -> None:
    if g is None:
        return
    if type(g) is SparseCotangent:
        entries.add_sorted(first_row, rows, g.rows, g.cols, g.data)
        return
    entries.add_dense(first_row, np.reshape(np.asarray(g), (rows, -1)))


def sparse_jacobian_request(
    tape: Tape, y: Any, xs: Sequence[Any], chunk_size: Optional[int] = None
) -> list:
    """The Jacobian of ``y`` w.r.t. each x as a ``scipy.sparse.csr_array`` of shape ``(y.size, x.size)``.

    Parameters
    ----------
    tape : Tape
        The tape ``y`` and ``xs`` were recorded on (it is not released).
    y : array_like
        The target, a real array (any shape; its entries are the rows, in C order).
    xs : sequence
        The watched sources (their entries are the columns, in C order).
    chunk_size : int, optional
        Sweep at most this many rows at a time.  Without it all rows go in one
        sweep, split only when a rule needs a dense batch larger than
        :data:`tapegrad.sparse_batch.MAX_DENSE_BYTES`.
    """
    _require_values(tape)
    _require_real(y)
    t = resolve(y, tape)
    yshape = tuple(np.shape(y))
    m = math.prod(yshape)
    sources = _source_nodes(tape, xs)
    blocks = [_Entries(m, math.prod(np.shape(x)), _dtype_of(x, y)) for x in xs]
    if t is None or m == 0:
        return [b.to_csr() for b in blocks]
    if chunk_size is not None and chunk_size < 1:
        raise ValueError("chunk_size must be a positive integer")
    structured = type(t._value) is np.ndarray and len(yshape) >= 1 and np.dtype(t.dtype).kind == "f"
    indices = [s._index for s in sources if s is not None]
    root = [(t._index, t._out)]
    step = m if chunk_size is None else int(chunk_size)
    start = 0
    while start < m:
        stop = min(m, start + step)
        seed = _seed(stop - start, start, yshape, t.dtype, structured)
        try:
            with guard_values((sources, t), refuse_compute=True):
                found = backward(tape, root, [seed], indices, (stop - start,))
        except DenseBatchTooLarge as exc:
            # A rule needs the dense batch: sweep as many rows as fit in the bound.
            fit = max(1, sparse_batch.MAX_DENSE_BYTES // max(1, exc.width * exc.itemsize))
            if stop - start == 1:
                raise
            step = min(fit, (stop - start) // 2) if fit >= stop - start else fit
            continue
        for block, s in zip(blocks, sources):
            g = None if s is None else found.get(s._index)
            if g is not None and s._out >= 0:
                g = g[s._out]
            _collect(block, g, start, stop - start)
        start = stop
        del found, seed
    results = []
    for block, s in zip(blocks, sources):
        csr = block.to_csr()
        if s is not None:
            csr = _redo_nan_rows(tape, root, t, yshape, s, csr)
        results.append(csr)
    return results


def _redo_nan_rows(tape: Tape, root: list, t: Any, yshape: tuple, source: Any, csr: Any) -> Any:
    """Rows holding NaN are computed again by the dense sweep: they are then the dense result's rows."""
    if csr.dtype.kind not in "fc":
        return csr
    nan_at = np.flatnonzero(np.isnan(csr.data))
    if nan_at.size == 0:
        return csr
    bad = np.unique(np.searchsorted(csr.indptr, nan_at, side="right") - 1)
    m, n = csr.shape
    per_chunk = max(1, sparse_batch.MAX_DENSE_BYTES // max(1, 8 * max(m, n)))
    for lo in range(0, bad.size, per_chunk):
        rows = bad[lo : lo + per_chunk]
        seed = np.zeros((rows.size, m), dtype=t.dtype)
        seed[np.arange(rows.size), rows] = 1
        found = backward(tape, root, [seed.reshape((rows.size,) + yshape)], [source._index], (rows.size,))
        g = found.get(source._index)
        if g is not None and source._out >= 0:
            g = g[source._out]
        dense = np.zeros((rows.size, n), dtype=csr.dtype) if g is None else np.reshape(np.asarray(g), (rows.size, -1))
        csr = _replace_rows(csr, rows, dense)
    return csr


def _dtype_of(x: Any, y: Any) -> np.dtype:
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        dtype = np.asarray(x).dtype
    return dtype if np.dtype(dtype).kind in "fc" else np.result_type(y, 1.0)


def _single_array(out: Any) -> Any:
    leaves, _ = flatten(out)
    if len(leaves) != 1 or isinstance(out, (list, tuple, dict)):
        raise TypeError(
            "jacobian(..., sparse=True) needs a function that returns one array; "
            "concatenate the outputs (np.concatenate([a.ravel(), b.ravel()])) first"
        )
    return leaves[0]


def sparse_jacobian(
    fun: Callable, argnums: ArgNums = 0, has_aux: bool = False, chunk_size: Optional[int] = None
) -> Callable:
    """The Jacobian of ``fun`` as a ``scipy.sparse.csr_array`` (see :func:`tapegrad.jacobian`).

    Returns a function giving, per differentiated argument ``x``, the
    ``(out.size, x.size)`` matrix ``J[i, j] = d out.flat[i] / d x.flat[j]``
    (a tuple of them when ``argnums`` is a sequence).
    """

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        tape, out, aux, sources, single = _trace_call(fun, args, kwargs, argnums, has_aux)
        y = _single_array(out)
        flat = _flat_sources(sources)
        if any(len(leaves) != 1 for _, leaves in sources):
            raise TypeError("jacobian(..., sparse=True) differentiates with respect to array arguments, not structures")
        results = sparse_jacobian_request(tape, y, flat, chunk_size)
        jac = results[0] if single else tuple(results)
        if has_aux:
            return jac, _lower(aux, tape)
        return jac

    return wrapper


def sparse_hessian(fun: Callable, argnums: int = 0, chunk_size: Optional[int] = None) -> Callable:
    """The Hessian of scalar ``fun`` as a ``scipy.sparse.csr_array`` of shape ``(x.size, x.size)``.

    The sparse Jacobian of the traced gradient: the gradient's own sweep is
    recorded, and that record is swept with a sparse batch.
    """
    if not isinstance(argnums, int):
        raise TypeError("hessian(..., sparse=True) takes one argument number")
    return sparse_jacobian(grad(fun, argnums), argnums, chunk_size=chunk_size)


def jacobian_sparsity(fun: Callable, argnums: int = 0, hessian: bool = False) -> Callable:
    """The structure that :func:`sparse_jacobian` (or :func:`sparse_hessian`) finds, as a boolean ``csr_array``.

    True at every position the sweep reached (a superset of the nonzeros at the
    given point); it depends on the point only through the program's branches.
    """
    make = sparse_hessian if hessian else sparse_jacobian

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        jac = make(fun, argnums)(*args, **kwargs)
        sp = _scipy_sparse()
        pattern = sp.csr_array((np.ones(jac.nnz, dtype=bool), jac.indices.copy(), jac.indptr.copy()), shape=jac.shape)
        return pattern

    return wrapper
