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
    """Entries ``(row, col, value)`` of one Jacobian block, collected chunk by chunk."""

    def __init__(self, n_rows: int, n_cols: int, dtype: Any) -> None:
        self.shape = (n_rows, n_cols)
        self.dtype = np.dtype(dtype)
        self.rows: List[np.ndarray] = []
        self.cols: List[np.ndarray] = []
        self.data: List[np.ndarray] = []

    def add(self, rows: np.ndarray, cols: np.ndarray, data: np.ndarray) -> None:
        self.rows.append(rows)
        self.cols.append(cols)
        self.data.append(data)

    def add_dense(self, first_row: int, block: np.ndarray) -> None:
        """The nonzeros (NaN included) of dense rows ``first_row...``."""
        r, c = np.nonzero(block)
        self.add(r + first_row, c, block[r, c])

    def drop_rows(self, rows: np.ndarray) -> None:
        for k in range(len(self.rows)):
            keep = ~np.isin(self.rows[k], rows)
            if not keep.all():
                self.rows[k], self.cols[k], self.data[k] = self.rows[k][keep], self.cols[k][keep], self.data[k][keep]

    def nan_rows(self) -> np.ndarray:
        found = [r[np.isnan(d)] for r, d in zip(self.rows, self.data) if d.dtype.kind in "fc"]
        return np.unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.intp)

    def to_csr(self) -> Any:
        sp = _scipy_sparse()
        if not self.data:
            return sp.csr_array(self.shape, dtype=self.dtype)
        rows = np.concatenate(self.rows)
        cols = np.concatenate(self.cols)
        data = np.concatenate(self.data).astype(self.dtype, copy=False)
        # Entries are unique, so the conversion adds nothing up; explicit zeros stay (the structure).
        out = sp.csr_array((data, (rows, cols)), shape=self.shape)
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
        entries.add(g.rows + first_row, g.cols, g.data)
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
    for block, s in zip(blocks, sources):
        if s is not None:
            _redo_nan_rows(tape, root, t, yshape, s, block)
    return [b.to_csr() for b in blocks]


def _redo_nan_rows(tape: Tape, root: list, t: Any, yshape: tuple, source: Any, block: _Entries) -> None:
    """Rows holding NaN are computed again by the dense sweep: they are then the dense result's rows."""
    bad = block.nan_rows()
    if bad.size == 0:
        return
    block.drop_rows(bad)
    m, n = block.shape
    per_chunk = max(1, sparse_batch.MAX_DENSE_BYTES // max(1, 8 * max(m, n)))
    for lo in range(0, bad.size, per_chunk):
        rows = bad[lo : lo + per_chunk]
        seed = np.zeros((rows.size, m), dtype=t.dtype)
        seed[np.arange(rows.size), rows] = 1
        found = backward(tape, root, [seed.reshape((rows.size,) + yshape)], [source._index], (rows.size,))
        g = found.get(source._index)
        if g is None:
            continue
        if source._out >= 0:
            g = g[source._out]
        dense = np.reshape(np.asarray(g), (rows.size, -1))
        r, c = np.nonzero(dense)
        block.add(rows[r], c, dense[r, c])


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
