"""Derivatives through ``scipy.sparse``: constant sparse operators, and sparse matrices with traced values.

Reached through SciPy's door (:mod:`tapegrad.interception`): the methods of SciPy's
sparse classes are intercepted with ``inspect_self`` (a matrix whose ``.data`` is a
tracer routes its calls here) and the construction functions with ``route_all``
(their sparse arguments sit inside lists).  A traced sparse matrix is the one of
:mod:`tapegrad.rules._sparse`: a genuine SciPy instance whose structure is plain and
whose ``.data`` is a tracer.

One primitive
-------------
Everything here is linear in the values, or a product of two linear things, so one
primitive carries the derivatives: :func:`apply`, ``M @ v`` for a *plain* sparse
``M`` and a dense (traced) ``v``.  Its VJP is ``M.T @ g``, applied sparse (never
densified), with the cotangent's leading batch axes moved to trailing columns
(a Jacobian sweep is one sparse product with many columns).  That VJP is itself a
sparse product on the cotangent, so at second order it comes back through the door
to :func:`apply`: every order comes from the same line.

* ``A @ x``, ``x @ A``, ``A.T @ x``, ``A.dot(X)``, ``A * x`` for ``*_matrix``, ``A @ X``
  for a constant ``A``: :func:`apply` itself, on SciPy's own product.
* A traced ``A`` times ``x``: ``R @ (d * (C @ x))``, with ``C`` picking ``x[cols]``
  and ``R`` summing by rows (both constant selection matrices).
* ``A @ B`` sparse-sparse: the pairs ``(p, q)`` with ``col(p) == row(q)`` are joined
  on the plain structure; the values are ``S @ (a[P] * b[Q])``, ``S`` summing pairs
  into SciPy's output entries (found on the plain pattern, so no cancellation drops one).
* Operations that move or copy entries (conversions between formats, ``transpose``,
  ``toarray``, ``diagonal``, indexing, ``hstack``/``vstack``/``bmat``/``block_array``/
  ``block_diag``, ``diags``/``diags_array``/``spdiags``, the constructors) run SciPy
  *once* on the plain structure with numbered placeholders as values (1, 2, 3, ...):
  where each number lands is where that entry goes.  The traced result gathers the
  traced values there (a constant selection matrix through :func:`apply`).
  ``kron`` and ``multiply`` (products of one entry of each operand) are probed once per
  operand, the others holding ones; ``A + B`` and ``A - B`` once, with ``B``'s numbers
  scaled past ``A``'s so each sum decodes into its two entries.
* Duplicate ``(i, j)`` entries, which SciPy sums, are summed first by a constant
  segment-sum matrix (each duplicate gets the full cotangent), so the placeholders
  never add up.
* Methods that compute with ``.data`` in NumPy and rebuild the matrix through
  ``_with_data`` (``-A``, ``abs``, ``power``, ``sqrt`` and SciPy's other elementwise
  methods, ``astype``, ``copy``, ``max``/``min``) run as written: ``_with_data`` has a
  rule.  ``setdiag`` is ``A - old + new`` on that diagonal; ``maximum``/``minimum``
  apply NumPy's to the values of the union probe; comparisons (``A > 0``) compare
  the plain values (no gradient).

The structure is a constant and is computed with every value present: SciPy drops a
result that is exactly zero (``A - A``, a cancellation in ``A @ B``), tapegrad keeps
it as an explicit zero, since its derivative need not be zero.  For the same reason
``eliminate_zeros`` keeps the entries of a traced matrix, and a traced *dense* array
given to a constructor stores every entry.  Dense results of ``*_matrix`` classes
(``todense``, ``sum(axis)``) come back as 2-D traced arrays, not ``np.matrix``.

Refused with a clear error: LIL and DOK formats with traced values (their values
live in Python lists and dicts: build CSR, CSC or COO), adding a traced scalar (it
would make every entry depend on it), elementwise division by a sparse matrix,
products with sparse arrays of more than two dimensions, ``out=``.  Any other SciPy
sparse function that hands traced values to compiled code (``scipy.sparse.csgraph``'s
graph algorithms, for one) raises :class:`~tapegrad.errors.GradientDroppedError`
naming it; those written with NumPy (``A[i, j] = t``, ``csgraph.laplacian``) run as
written.
NumPy functions given a sparse matrix beside a tracer (``np.dot(A, x)``) raise
NumPy's ``TypeError``: the tracer defers to SciPy's operators
(:func:`tapegrad.array_types.defers_to`), which NumPy's functions do not call.
"""

from __future__ import annotations

import inspect
import types
from typing import Any, Callable, List, Optional, Tuple

import numpy as np
import scipy.sparse as sp
from scipy.sparse import _base, _construct

from ..array_types import hold_tracers_in
from ..dispatch import primitive
from ..errors import NonDifferentiableArgumentError
from ..registry import ORIGINALS, defcomposite, defvjp, intercepted
from ..sparse_batch import SparseCotangent
from ..tracer import Tracer
from ._sparse import coo_parts, innermost, traced_data, with_data

__all__ = [
    "apply", "transposed_apply", "traced_matmul", "sparse_matmul", "scaled", "deduplicated",
    "probe_copy", "probe_product", "probe_sum",
]

_SPBASE = _base._spbase
_EXACT = 2.0 ** 52  # placeholders stay exact integers below this


def _is_sparse(x: Any) -> bool:
    return isinstance(x, _SPBASE)


def _traced(x: Any) -> bool:
    """A tracer, or a sparse matrix holding one as its values."""
    return type(x) is Tracer or (isinstance(x, _SPBASE) and traced_data(x) is not None)


def _original(fun: Any) -> Callable[..., Any]:
    return ORIGINALS.get(fun, fun)


def _refuse(what: str, why: str) -> NonDifferentiableArgumentError:
    return NonDifferentiableArgumentError(f"tapegrad cannot differentiate scipy.sparse {what}: {why}")


# ---------------------------------------------------------------- the one primitive
def _product(matrix: Any, x: Any) -> Any:
    return matrix @ x


apply = primitive(_product)
apply.__name__ = apply.__qualname__ = "apply"
apply.__doc__ = """``matrix @ x``: a constant sparse operator applied to dense, possibly traced, values.

The one primitive of the ``scipy.sparse`` rules.  Its VJP is ``matrix.T @ g``, a
sparse product (:func:`transposed_apply`), so at second order it is recorded too.

Parameters
----------
matrix : scipy.sparse array or matrix
    Plain values (2-D, any format).
x : array or Tracer
    1-D or 2-D, ``x.shape[0] == matrix.shape[1]``.

Returns
-------
array or Tracer
    SciPy's own ``matrix @ x``.
"""


def _apply_vjp(g: Any, ans: Any, matrix: Any, x: Any) -> Any:
    # Reads the matrix and x's shape only (x and ans may be pruned from the tape: needs=).
    if type(g) is SparseCotangent:  # a sparse Jacobian's batch (sparse=True)
        return _sparse_batch_vjp(g, matrix, x)
    return transposed_apply(matrix, g, np.ndim(x))


def _sparse_batch_vjp(g: Any, matrix: Any, x: Any) -> Any:
    """A sparse batch of cotangents times ``matrix``: sparse times sparse, so the Jacobian stays sparse.

    Each kept entry adds its terms in the order the dense product does (ascending
    row of ``matrix``), which holds for canonical CSR and CSC; other operators, and
    non-finite values (whose dense products give NaN), take the dense batch.
    """
    exact = matrix.format in ("csr", "csc") and matrix.has_canonical_format
    if np.ndim(x) != 1 or g.ndim != 2 or not exact or not np.isfinite(matrix.data).all():
        return transposed_apply(matrix, g.dense(), np.ndim(x))
    batch = sp.csr_array((g.data, (g.rows, g.cols)), shape=g.shape)
    product = (batch @ matrix).tocsr()
    product.sort_indices()
    rows = np.repeat(np.arange(g.shape[0], dtype=np.intp), np.diff(product.indptr))
    return SparseCotangent((g.shape[0], matrix.shape[1]), rows, product.indices.astype(np.intp), product.data)


def transposed_apply(matrix: Any, g: Any, core: int) -> Any:
    """``matrix.T @ g`` for a cotangent ``g`` with leading batch axes, applied sparse.

    Parameters
    ----------
    matrix : scipy.sparse array or matrix
        The plain operator of the forward product.
    g : array or Tracer
        ``batch + (m,)`` (``core`` 1) or ``batch + (m, k)`` (``core`` 2).
    core : int
        Dimensions of the forward product's output.

    Returns
    -------
    array or Tracer
        ``batch + (n,)`` or ``batch + (n, k)``: the batch travels as extra columns of
        one sparse product.  Written with NumPy and a SciPy product, so on a traced
        ``g`` it is recorded (second order).
    """
    mt = matrix.T  # CSR -> CSC (and back) shares the arrays: no copy
    shape = np.shape(g)
    if len(shape) == core:
        return mt @ g
    moved = np.moveaxis(g, -core, 0)
    rest = np.shape(moved)[1:]
    out = mt @ np.reshape(moved, (shape[-core], -1))
    return np.moveaxis(np.reshape(out, (mt.shape[0],) + rest), 0, -core)


defvjp(apply, None, _apply_vjp, sparse=True, needs=((0,), (0,)),
       note="sparse product; VJP matrix.T @ g, never densified")


def _selection(index: np.ndarray, size: int, dtype: Any) -> Any:
    """The constant ``len(index) x size`` matrix whose row ``k`` picks entry ``index[k]`` (none for -1)."""
    index = np.asarray(index, dtype=np.int64).ravel()
    keep = index >= 0
    if keep.all():
        indptr = np.arange(len(index) + 1, dtype=np.int64)
        picked = index
    else:
        indptr = np.concatenate([[0], np.cumsum(keep)]).astype(np.int64)
        picked = index[keep]
    return sp.csr_array((np.ones(len(picked), dtype=dtype), picked, indptr), shape=(len(index), size))


def _segments(target: np.ndarray, size: int, dtype: Any) -> Any:
    """The constant ``size x len(target)`` matrix adding entry ``k`` into row ``target[k]``."""
    target = np.asarray(target, dtype=np.int64).ravel()
    n = len(target)
    return sp.csc_array((np.ones(n, dtype=dtype), target, np.arange(n + 1, dtype=np.int64)), shape=(size, n))


def _gather(values: Any, index: np.ndarray) -> Any:
    """``values[index]`` with 0 where ``index`` is -1 (``values`` 1-D, traced or plain)."""
    index = np.asarray(index, dtype=np.int64)
    if type(values) is Tracer:
        if index.size == values.shape[0] and (index.ravel() == np.arange(index.size)).all():
            # Every entry where it was (a copy, CSR's transpose): a copy, never a view that
            # would pass in-place writes between the two matrices.
            return np.reshape(np.copy(values), index.shape)
        return np.reshape(apply(_selection(index, values.shape[0], values.dtype), values), index.shape)
    values = np.asarray(values)
    out = np.zeros(index.shape, dtype=values.dtype)
    keep = index >= 0
    out[keep] = values[index[keep]]
    return out


# ---------------------------------------------------------------- structure helpers
def _usable(matrix: Any) -> Any:
    """``matrix``, or for LIL and DOK (values in Python containers) a plain CSR copy, deduplicated."""
    if matrix.format in ("lil", "dok"):
        if traced_data(matrix) is not None:  # only a user's assignment can put one there
            raise _refuse(f"{matrix.format} format with traced values",
                          "its values live in Python lists or dicts; build CSR, CSC or COO instead.")
        return matrix.tocsr()
    return deduplicated(matrix)


def _plain(matrix: Any, data: Any) -> Any:
    """A plain matrix with ``matrix``'s class and structure (copied) and the values ``data``."""
    return matrix._with_data(np.asarray(data).reshape(np.shape(innermost(matrix.data))), copy=True)


def _flat(matrix: Any) -> Any:
    data = matrix.data
    return data.ravel() if type(data) is Tracer or np.ndim(data) != 1 else data


def _coordinates(matrix: Any) -> Tuple[tuple, tuple]:
    """The coordinates of each stored entry and the shape they index, in the order SciPy sorts them.

    COO of any dimension in C order; CSR by row then column; CSC by column then row.
    """
    if matrix.format == "coo" and getattr(matrix, "coords", None) is not None:
        return tuple(matrix.coords), matrix.shape
    rows, cols, _, shape = coo_parts(matrix)
    if matrix.format == "csc":
        return (cols, rows), (shape[1], shape[0])
    return (rows, cols), shape


def _groups(matrix: Any) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """``None`` when no position of ``matrix`` is stored twice; else ``(unique keys, group of each entry)``.

    Keys are flat indices in the order SciPy's canonical format stores the entries
    (:func:`_coordinates`).  A stable sort, which is linear on the nearly sorted
    entries assembly code makes.
    """
    fmt = matrix.format
    if fmt not in ("csr", "csc", "coo") or matrix.nnz < 2:
        return None
    if matrix.has_canonical_format:  # SciPy's flag (COO) or its check of the structure (CSR, CSC)
        return None
    coords, shape = _coordinates(matrix)
    keys = np.ravel_multi_index(coords, shape)
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    first = np.empty(len(keys), dtype=bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    if first.all():
        return None
    inverse = np.empty(len(keys), dtype=np.int64)
    inverse[order] = np.cumsum(first) - 1
    return ordered[first], inverse


def deduplicated(matrix: Any) -> Any:
    """``matrix`` itself when no position is stored twice; else an equal matrix of its class with them summed.

    Traced values are summed by a constant segment-sum matrix (each duplicate gets
    the full cotangent); plain ones by SciPy.
    """
    groups = _groups(matrix)
    if groups is None:
        return matrix
    if traced_data(matrix) is None:
        copy = matrix.copy()
        copy.sum_duplicates()
        return copy
    unique, inverse = groups
    _, shape = _coordinates(matrix)
    coords = np.unravel_index(unique, shape)
    if matrix.format == "csc":
        coords = coords[::-1]
    numbers = np.arange(1, len(unique) + 1, dtype=np.float64)
    coo = (sp.coo_array if isinstance(matrix, sp.sparray) else sp.coo_matrix)((numbers, coords), shape=matrix.shape)
    layout = coo.asformat(matrix.format)
    where = np.empty(len(unique), dtype=np.int64)
    where[layout.data.astype(np.int64) - 1] = np.arange(len(unique))
    data = traced_data(matrix)
    summed = apply(_segments(where[inverse], len(unique), data.dtype), data)
    return with_data(layout, summed)


# ---------------------------------------------------------------- probes
def _operand(value: Any, offset: int) -> Tuple[Any, Any, int]:
    """``(placeholder version, flat values, count)`` of one operand: a sparse matrix or dense values."""
    if _is_sparse(value):
        value = _usable(value)
        flat = _flat(value)
        n = flat.shape[0]
        numbers = np.arange(offset + 1, offset + n + 1, dtype=np.float64)
        return _plain(value, numbers), flat, n
    if type(value) is not Tracer:
        value = np.asarray(value)
        if value.dtype.kind not in "biufc":
            raise TypeError(f"tapegrad: a scipy.sparse operand of dtype {value.dtype} cannot be probed")
    n = int(np.prod(np.shape(value), dtype=np.int64))
    numbers = np.arange(offset + 1, offset + n + 1, dtype=np.float64).reshape(np.shape(value))
    return numbers, np.reshape(value, (-1,)), n


def _numbers_of(result: Any, what: str = "") -> np.ndarray:
    if _is_sparse(result):
        if result.format in ("lil", "dok"):  # format='lil' asked of a constructor
            raise _refuse(what, f"a {result.format.upper()} result keeps its values in Python lists or a dict, "
                                "which cannot hold traced values: ask for format='csr', 'csc' or 'coo'.")
        return np.asarray(result.data)
    return np.asarray(result)


def _indices(numbers: np.ndarray, total: int, what: str) -> np.ndarray:
    index = numbers.astype(np.int64)
    if not np.array_equal(index, numbers) or (index.size and (index.min() < 0 or index.max() > total)):
        raise _refuse(what, "SciPy combined entries in a way tapegrad cannot follow (please report it).")
    return index - 1


def _finish(result: Any, values: Any, dtype: Any) -> Any:
    if dtype is not None and values.dtype != dtype:
        values = values.astype(dtype)
    if _is_sparse(result):
        return with_data(result, values)
    return values


def _result_dtype(values: List[Any], dtype: Any = None) -> Any:
    if dtype is not None:
        return np.dtype(dtype)
    return np.result_type(*[v.dtype for v in values]) if values else None


def probe_copy(run: Callable[..., Any], operands: List[Any], what: str, dtype: Any = None) -> Any:
    """``run(*operands)`` where every output value is a copy of one operand entry (or absent).

    SciPy runs once on placeholders numbered across all operands (1, 2, 3, ...); the
    traced result gathers the operands' values where the numbers landed (0: nothing).

    Parameters
    ----------
    run : callable
        The SciPy call, taking the operands in order.
    operands : list
        Sparse matrices (traced or plain; duplicates are summed first), dense arrays,
        tracers or scalars; ``None`` passes through.
    what : str
        The name used in errors.
    dtype : dtype, optional
        Of the result (default: the operands' common dtype).

    Returns
    -------
    scipy.sparse array or matrix, or Tracer
        What ``run`` returns, its values traced.

    Raises
    ------
    NonDifferentiableArgumentError
        When the placeholders come back other than as copies (SciPy combined entries).
    """
    placeholders, pieces, offset = [], [], 0
    for value in operands:
        if value is None:
            placeholders.append(None)
            continue
        numbered, flat, n = _operand(value, offset)
        placeholders.append(numbered)
        pieces.append(flat)
        offset += n
    result = run(*placeholders)
    values = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
    numbers = _numbers_of(result, what)
    index = _indices(numbers, offset, what)
    return _finish(result, _gather(values, index), _result_dtype(pieces, dtype))


def _ones_version(value: Any) -> Any:
    if _is_sparse(value):
        value = _usable(value)
        return _plain(value, np.ones(np.shape(innermost(value.data))))
    return np.ones(np.shape(value))


def probe_product(run: Callable[..., Any], operands: List[Any], what: str, dtype: Any = None) -> Any:
    """``run(*operands)`` where every output value is a product of one entry of each operand.

    Probed once per operand (its entries numbered, the others all ones); the traced
    result multiplies the gathered values.
    """
    ones = [_ones_version(v) for v in operands]
    out, result, pieces = None, None, []
    for k, value in enumerate(operands):
        numbered, flat, n = _operand(value, 0)
        pieces.append(flat)
        found = run(*(ones[:k] + [numbered] + ones[k + 1:]))
        numbers = _numbers_of(found, what)
        if result is not None and np.shape(numbers) != np.shape(_numbers_of(result, what)):
            raise _refuse(what, "SciPy's structure changed between probes (please report it).")
        result = found if result is None else result
        factor = _gather(flat, _indices(numbers, n, what))
        out = factor if out is None else out * factor
    return _finish(result, out, _result_dtype(pieces, dtype))


def probe_sum(first: Any, second: Any, sign: int, what: str) -> Any:
    """``first + second`` (``sign`` 1) or ``first - second`` (``sign`` -1) of two sparse matrices.

    One probe: ``first``'s entries numbered ``1 .. n``, ``second``'s scaled past them
    (``k, 2k, ...``), so each sum SciPy makes decodes into its two entries.

    Returns
    -------
    scipy.sparse array or matrix
        SciPy's class and format for the sum, traced values.
    """
    result, a, b = _union(first, second, sign, what)
    return _finish(result, a + b if sign > 0 else a - b, None)


def _union(first: Any, second: Any, sign: int, what: str) -> Tuple[Any, Any, Any]:
    """SciPy's ``first + second`` (or ``-``) on placeholders, and each operand's values at its entries (0: none)."""
    first, second = _usable(first), _usable(second)
    a, b = _flat(first), _flat(second)
    k = a.shape[0] + 1
    if float(k) * (b.shape[0] + 1) >= _EXACT:
        raise _refuse(what, "too many entries to follow exactly.")
    p = _plain(first, np.arange(1, k, dtype=np.float64))
    q = _plain(second, np.arange(1, b.shape[0] + 1, dtype=np.float64) * k)
    result = p + q if sign > 0 else p - q
    numbers = np.asarray(result.data)
    jb = np.floor_divide(numbers, k) * sign
    ja = numbers - sign * k * jb
    ia, ib = _indices(ja, k - 1, what), _indices(jb, b.shape[0], what)
    return result, _gather(a, ia), _gather(b, ib)


# ---------------------------------------------------------------- products
def _compressed(matrix: Any) -> Any:
    """A CSR, CSC or COO form (whose entries :func:`coo_parts` reads), traced or not."""
    return matrix if matrix.format in ("csr", "csc", "coo") else matrix.tocsr()


def _operator(matrix: Any) -> Any:
    if matrix.ndim != 2:
        raise _refuse("products with n-D sparse arrays", "only 2-D sparse matrices are differentiated.")
    return matrix.tocsr() if matrix.format in ("lil", "dok") else matrix


def _dense(x: Any) -> Any:
    return x if type(x) is Tracer else np.asarray(x)


def traced_matmul(matrix: Any, x: Any) -> Any:
    """``matrix @ x`` for a traced sparse ``matrix`` and a dense ``x`` (1-D or 2-D, traced or not).

    ``R @ (d * (C @ x))``: ``C`` picks ``x[cols]`` and ``R`` sums by rows, both
    constant selection matrices, ``d`` the traced values.

    Parameters
    ----------
    matrix : scipy.sparse array or matrix
        2-D, its ``.data`` a tracer.
    x : array_like or Tracer

    Returns
    -------
    Tracer
    """
    x = _dense(x)
    if x.ndim not in (1, 2):
        raise _refuse("products with dense operands of more than 2 dimensions", "use 1-D or 2-D operands.")
    m, n = _operator(matrix).shape
    if x.shape[0] != n:
        raise ValueError(f"matmul: dimension mismatch: {matrix.shape} @ {x.shape}")
    rows, cols, data, _ = coo_parts(_compressed(matrix))
    picked = apply(_selection(cols, n, x.dtype), x) if type(x) is Tracer else np.take(x, cols, axis=0)
    terms = data * picked if x.ndim == 1 else data[:, None] * picked
    return apply(_segments(rows, m, terms.dtype), terms)


def sparse_matmul(first: Any, second: Any) -> Any:
    """``first @ second`` for two sparse matrices, at least one of them traced.

    The pairs of entries ``(p, q)`` with ``col(p) == row(q)`` are joined on the plain
    structures; the values are ``S @ (a[P] * b[Q])`` with ``S`` summing the pairs into
    the entries of SciPy's product of the two patterns (all ones, so no cancellation
    drops an entry).

    Returns
    -------
    scipy.sparse array or matrix
        SciPy's class and format for the product (CSR for BSR and DIA), traced values.
    """
    if first.ndim != 2 or second.ndim != 2:
        raise _refuse("products with n-D sparse arrays", "only 2-D sparse matrices are differentiated.")
    first, second = _usable(first), _usable(second)
    dtype = np.result_type(first.dtype, second.dtype)
    pattern = _plain(first, np.ones(np.shape(innermost(first.data)), dtype)) @ _plain(
        second, np.ones(np.shape(innermost(second.data)), dtype)
    )
    fmt = pattern.format
    pattern = pattern.tocsr() if fmt != "csr" else pattern
    pattern.sort_indices()
    ra, ca, a, _ = coo_parts(_compressed(first))
    second = _compressed(second)
    rb, cb, b, _ = coo_parts(second)
    # The entries of `second` by row: CSR already has them so; others are sorted once.
    if second.format == "csr":
        order, counts = None, np.diff(second.indptr)
    else:
        order, counts = np.argsort(rb, kind="stable"), np.bincount(rb, minlength=second.shape[0])
    starts = np.cumsum(counts) - counts
    per = counts[ca]
    p = np.repeat(np.arange(len(ca)), per)
    q = starts[ca[p]] + (np.arange(len(p)) - np.repeat(np.cumsum(per) - per, per))
    q = q if order is None else order[q]
    # Where each pair lands: SciPy's own lookup in the (sorted) pattern, numbered 1, 2, ...
    numbered = sp.csr_array((np.arange(1, pattern.nnz + 1, dtype=np.float64), pattern.indices, pattern.indptr),
                            shape=pattern.shape)
    where = np.asarray(numbered[ra[p], cb[q]]).astype(np.int64).ravel() - 1
    terms = _gather(a, p) * _gather(b, q)
    product = with_data(pattern, apply(_segments(where, pattern.nnz, terms.dtype), terms))
    return product.asformat(fmt) if fmt in ("csc", "coo") else product


def _scalar(x: Any) -> bool:
    return np.ndim(x) == 0 and not _is_sparse(x)


def scaled(matrix: Any, factor: Any) -> Any:
    """``matrix * factor`` for a scalar ``factor`` (traced or not): same class and structure.

    LIL and DOK operands are converted to CSR first (they cannot hold traced values).
    """
    if matrix.format in ("lil", "dok"):
        matrix = matrix.tocsr()
    return with_data(matrix, matrix.data * factor)


def _matmul(fun: Any, self: Any, other: Any) -> Any:
    if _is_sparse(other):
        if _traced(self) or _traced(other):
            return sparse_matmul(self, other)
    elif _traced(self) or type(other) is Tracer:
        if _scalar(other):
            return scaled(self, other)
        if _traced(self):
            return traced_matmul(self, other)
        if other.ndim not in (1, 2):
            raise _refuse("products with dense operands of more than 2 dimensions", "use 1-D or 2-D operands.")
        return apply(_operator(self), other)
    return _original(fun)(self, other)


def _rmatmul(fun: Any, self: Any, other: Any) -> Any:
    if not (_traced(self) or _traced(other)):
        return _original(fun)(self, other)
    if _scalar(other):
        return scaled(self, other)
    if not _is_sparse(other):
        other = _dense(other)
    return (self.transpose() @ other.T).T


# ---------------------------------------------------------------- elementwise arithmetic
def _multiply(fun: Any, self: Any, other: Any) -> Any:
    if not (_traced(self) or _traced(other)):
        return _original(fun)(self, other)
    if _scalar(other):
        return scaled(self, other)
    return probe_product(lambda a, b: fun(a, b), [self, other], "multiply")


def _divide(fun: Any, self: Any, other: Any, *, rdivide: bool = False) -> Any:
    if not (_traced(self) or _traced(other)):
        return _original(fun)(self, other, rdivide=rdivide)
    if rdivide:
        return other / self.toarray()
    if _scalar(other):
        return scaled(self if self.dtype.kind in "fc" else self.astype(np.float64), 1 / other)
    if _is_sparse(other):
        raise _refuse("division by a sparse matrix", "SciPy's result holds NaN where both are zero.")
    return self.multiply(1 / _dense(other))


def _sum_like(sign: int, reflected: bool) -> Callable[..., Any]:
    def impl(fun: Any, self: Any, other: Any) -> Any:
        if not (_traced(self) or _traced(other)):
            return _original(fun)(self, other)
        if _scalar(other):
            if type(other) is Tracer:
                raise _refuse("a traced scalar added to a sparse matrix",
                              "every entry would depend on it; use A.toarray() + t.")
            return _original(fun)(self, other)
        if _is_sparse(other):
            first, second = (other, self) if reflected else (self, other)
            return probe_sum(first, second, sign, "addition" if sign > 0 else "subtraction")
        dense = self.toarray()
        if reflected:
            return other + dense if sign > 0 else other - dense
        return dense + other if sign > 0 else dense - other

    return impl


# ---------------------------------------------------------------- reductions
def _axis(axis: Any, ndim: int) -> Any:
    if isinstance(axis, tuple):
        if len(axis) == ndim:
            return None
        axis = axis[0] if len(axis) == 1 else axis
    if axis is None:
        return None
    return axis % ndim


def _sum(fun: Any, self: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    if traced_data(self) is None:
        return _original(fun)(self, axis=axis, dtype=dtype, out=out)
    if out is not None:
        raise _refuse("sum(..., out=...)", "write y = A.sum(axis) instead.")
    if self.ndim != 2:
        raise _refuse("sums of n-D sparse arrays", "only 2-D sparse matrices are differentiated.")
    axis = _axis(axis, 2)
    rows, cols, data, (m, n) = coo_parts(_compressed(self))
    matrix_class = not isinstance(self, sp.sparray)
    if axis is None:
        total = np.sum(data)
    elif axis == 0:
        total = apply(_segments(cols, n, data.dtype), data)
        total = total.reshape(1, n) if matrix_class else total
    else:
        total = apply(_segments(rows, m, data.dtype), data)
        total = total.reshape(m, 1) if matrix_class else total
    return total if dtype is None else total.astype(dtype)


def _mean(fun: Any, self: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    if traced_data(self) is None:
        return _original(fun)(self, axis=axis, dtype=dtype, out=out)
    total = self.sum(axis=axis, dtype=dtype, out=out)
    ax = _axis(axis, self.ndim)
    count = int(np.prod(self.shape)) if ax is None else self.shape[ax]
    return total / count


# ---------------------------------------------------------------- copies, conversions, in-place structure
def _copying(what: str) -> Callable[..., Any]:
    def impl(fun: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
        if traced_data(self) is None:
            return _original(fun)(self, *args, **kwargs)
        if kwargs.get("out") is not None:
            raise _refuse(f"{what}(..., out=...)", f"write y = A.{what}() instead.")
        return probe_copy(lambda m: fun(m, *args, **kwargs), [self], what)

    return impl


def _refused_format(fmt: str) -> Callable[..., Any]:
    def impl(fun: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
        if traced_data(self) is None:
            return _original(fun)(self, *args, **kwargs)
        raise _refuse(f"to{fmt}() of a matrix with traced values",
                      f"{fmt.upper()} keeps its values in Python containers; keep CSR, CSC or COO.")

    return impl


def _replace(target: Any, source: Any) -> None:
    """Make ``target`` hold ``source``'s structure and values (the in-place methods)."""
    state = dict(source.__dict__)
    target.__dict__.clear()
    target.__dict__.update(state)


def _sum_duplicates(fun: Any, self: Any) -> None:
    if traced_data(self) is None:
        return _original(fun)(self)
    _replace(self, deduplicated(self))
    return None


def _sort_indices(fun: Any, self: Any) -> None:
    if traced_data(self) is None:
        return _original(fun)(self)
    if not self.has_sorted_indices:
        _replace(self, probe_copy(lambda m: m.sorted_indices(), [self], "sort_indices"))
    return None


def _eliminate_zeros(fun: Any, self: Any) -> None:
    if traced_data(self) is None:
        return _original(fun)(self)
    # A traced value that is zero here need not have a zero derivative: the entry stays.
    return None


def _prune(fun: Any, self: Any) -> None:
    if traced_data(self) is None:
        return _original(fun)(self)
    stored = int(self.indptr[-1])  # entries (blocks for BSR) the structure uses
    if self.data.shape[0] > stored:
        self.data, self.indices = self.data[:stored], self.indices[:stored].copy()
    return None


def _setdiag(fun: Any, self: Any, values: Any, k: int = 0) -> None:
    """``A.setdiag(values, k)`` with traced values or a traced ``A``: ``A - old + new`` on that diagonal.

    ``a - a`` is exactly zero, so each set entry is exactly its new value, and its old
    value gets no derivative; SciPy's rules for short, long and scalar ``values`` hold.
    """
    if not (_traced(self) or _traced(values)):
        return _original(fun)(self, values, k)
    m, n = self.shape
    if (k > 0 and k >= n) or (k < 0 and -k >= m):
        raise ValueError("k exceeds array dimensions")
    if self.format in ("lil", "dok"):
        raise _refuse(f"{self.format}.setdiag with traced values", "build CSR, CSC or COO instead.")
    length = min(m + min(k, 0), n - max(k, 0))
    values = _dense(values)
    values = values * np.ones(length, dtype=values.dtype) if values.ndim == 0 else values[:length]
    count = values.shape[0]
    rows, cols = np.arange(count) - min(k, 0), np.arange(count) + max(k, 0)
    coo = _coo_class(self)
    old = coo((self.diagonal(k)[:count], (rows, cols)), shape=self.shape)
    new = coo((values, (rows, cols)), shape=self.shape)
    _replace(self, ((self - old) + new).asformat(self.format))
    return None


def _maximum_minimum(fun: Any, self: Any, other: Any, np_op: Any) -> Any:
    """``A.maximum(B)``, ``A.minimum(t)``, ...: SciPy's structure, NumPy's ``np_op`` on the traced values."""
    if not (_traced(self) or _traced(other)):
        return _original(fun)(self, other, np_op)
    if self.ndim != 2:
        raise _refuse(f"{np_op.__name__} of n-D sparse arrays", "only 2-D sparse matrices are differentiated.")
    compressed = self if self.format in ("csr", "csc") else self.tocsr()
    if _scalar(other):
        if np_op(0, innermost(other)):  # every entry changes: SciPy's result is dense, stored sparse
            return type(compressed)(np_op(self.toarray(), other))
        compressed = deduplicated(compressed)
        return with_data(compressed, np_op(compressed.data, other))
    if not _is_sparse(other):
        return np_op(self.toarray(), _dense(other))
    if other.shape != self.shape:
        raise ValueError(f"inconsistent shapes {self.shape=} {other.shape=}")
    result, a, b = _union(compressed, other, 1, np_op.__name__)
    return _finish(result, np_op(a, b), None)


def _untraced(value: Any) -> Any:
    if _is_sparse(value) and traced_data(value) is not None:
        return _plain(value, innermost(value.data))
    return innermost(value)


def _comparison(fun: Any, self: Any, other: Any) -> Any:
    """``A == B``, ``A < t``, ...: a boolean result, no gradient; SciPy compares the plain values."""
    return _original(fun)(_untraced(self), _untraced(other))


def _with_data_rule(fun: Any, self: Any, data: Any, copy: bool = True) -> Any:
    if type(data) is not Tracer:
        return _original(fun)(self, data, copy=copy)
    result = _original(fun)(self, innermost(data), copy=copy)
    if np.shape(innermost(result.data)) != data.shape:
        raise _refuse(f"{type(self).__name__}._with_data", "SciPy changed the shape of the values.")
    result.data = data
    return result


# ---------------------------------------------------------------- constructors
def _coo_class(matrix: Any) -> Any:
    return sp.coo_array if isinstance(matrix, sp.sparray) else sp.coo_matrix


def _init(fun: Any, self: Any, arg1: Any, *args: Any, **kwargs: Any) -> None:
    if not _traced(arg1) and not (isinstance(arg1, tuple) and any(_traced(a) for a in arg1)):
        return _original(fun)(self, arg1, *args, **kwargs)
    name = type(self).__name__
    if self.format in ("lil", "dok"):
        raise _refuse(f"{name} with traced values", "build CSR, CSC or COO instead.")
    # The signature of SciPy's own code (the function itself holds the door's while a tape records).
    options = inspect.signature(_original(fun)).bind(self, arg1, *args, **kwargs).arguments
    for key in ("self", "arg1"):
        options.pop(key)
    dtype = options.pop("dtype", None)
    if _is_sparse(arg1):
        built = arg1.asformat(self.format)
        if built is arg1:
            built = arg1.copy()
    elif isinstance(arg1, tuple):
        if any(type(a) is Tracer for a in arg1[1:]):
            raise _refuse(f"{name} with traced indices", "the structure is a constant: pass integer indices.")
        if len(arg1) == 2 and isinstance(arg1[1], tuple) and self.format != "coo":
            # (data, (i, j)) keeps duplicates in COO; converting sums them.
            blocksize = options.pop("blocksize", None)
            coo = _coo_class(self)(arg1, **options)
            built = coo.tobsr(blocksize=blocksize) if self.format == "bsr" else coo.asformat(self.format)
        else:
            built = probe_copy(lambda d: type(self)((d,) + tuple(arg1[1:]), **options), [arg1[0]], name)
    else:
        # A traced dense array: every entry is stored (one that is zero now has a derivative).
        built = probe_copy(lambda d: type(self)(d, **options), [arg1], name)
    if dtype is not None and built.dtype != np.dtype(dtype):
        built = built.astype(dtype)
    _replace(self, built)
    return None


# ---------------------------------------------------------------- construction functions
def _walk(value: Any, depth: int, found: list) -> Any:
    """Collect the operands in ``value`` (lists nested ``depth`` deep); give back a rebuilder."""
    if depth and isinstance(value, np.ndarray) and value.dtype == object:
        value = value.tolist()
    if depth and isinstance(value, (list, tuple)):
        parts = [_walk(v, depth - 1, found) for v in value]
        kind = type(value)
        return lambda ops: kind(p(ops) for p in parts)
    k = len(found)
    found.append(value)
    return lambda ops: ops[k]


def _any_traced(value: Any, depth: int) -> bool:
    if _traced(value):
        return True
    if depth and isinstance(value, (list, tuple)):
        return any(_any_traced(v, depth - 1) for v in value)
    return False


def _construction(position: int, depth: int, product: bool = False) -> Callable[..., Any]:
    """A ``route_all`` rule for a function whose values sit in argument ``position`` (``depth`` lists deep).

    ``product`` (``kron``): arguments ``position`` and the next are multiplied.
    """

    def impl(fun: Any, *args: Any, **kwargs: Any) -> Any:
        original = _original(fun)
        bound = inspect.signature(original).bind(*args, **kwargs)  # blocks= given by keyword too
        args, kwargs = bound.args, bound.kwargs
        count = 2 if product else 1
        if not any(_any_traced(a, depth) for a in args[position:position + count]):
            return original(*args, **kwargs)
        what = fun.__name__
        if product:
            rest = args[position + 2:]
            return probe_product(lambda a, b: original(a, b, *rest, **kwargs), list(args[:2]), what)
        found: list = []
        rebuild = _walk(args[position], depth, found)
        dtype = kwargs.get("dtype")
        dtype = dtype if isinstance(dtype, (type, np.dtype, str)) else None
        head, tail = args[:position], args[position + 1:]
        return probe_copy(lambda *ops: original(*head, rebuild(list(ops)), *tail, **kwargs), found, what, dtype)

    return impl


# ---------------------------------------------------------------- registration
#: method name -> rule body ``impl(fun, self, *args, **kwargs)``; registered on every
#: SciPy sparse class whose own ``__dict__`` defines that method.
METHODS = {
    "_matmul_dispatch": _matmul,
    "dot": _matmul,
    "_rmatmul_dispatch": _rmatmul,
    "multiply": _multiply,
    "_divide": _divide,
    "__add__": _sum_like(1, False),
    "__radd__": _sum_like(1, True),
    "__sub__": _sum_like(-1, False),
    "__rsub__": _sum_like(-1, True),
    "sum": _sum,
    "mean": _mean,
    "tocsr": _copying("tocsr"),
    "tocsc": _copying("tocsc"),
    "tocoo": _copying("tocoo"),
    "todia": _copying("todia"),
    "tobsr": _copying("tobsr"),
    "tolil": _refused_format("lil"),
    "todok": _refused_format("dok"),
    "transpose": _copying("transpose"),
    "toarray": _copying("toarray"),
    "todense": _copying("todense"),
    "diagonal": _copying("diagonal"),
    "__getitem__": _copying("__getitem__"),
    "_getrow": _copying("getrow"),
    "_getcol": _copying("getcol"),
    "sorted_indices": _copying("sorted_indices"),
    "reshape": _copying("reshape"),
    "sum_duplicates": _sum_duplicates,
    "sort_indices": _sort_indices,
    "eliminate_zeros": _eliminate_zeros,
    "prune": _prune,
    "_maximum_minimum": _maximum_minimum,
    "setdiag": _setdiag,
    "__eq__": _comparison,
    "__ne__": _comparison,
    "__lt__": _comparison,
    "__gt__": _comparison,
    "__le__": _comparison,
    "__ge__": _comparison,
    "_with_data": _with_data_rule,
    "__init__": _init,
}

#: construction function -> its rule body ``impl(fun, *args, **kwargs)``.
FUNCTIONS = {
    "hstack": _construction(0, 1),
    "vstack": _construction(0, 1),
    "bmat": _construction(0, 2),
    "block_array": _construction(0, 2),
    "block_diag": _construction(0, 1),
    "diags": _construction(0, 1),
    "diags_array": _construction(0, 1),
    "spdiags": _construction(0, 0),
    "kron": _construction(0, 0, product=True),
}


#: For the coverage table: the operators of SciPy's sparse classes and the methods SciPy
#: routes them through (``A @ x`` is ``__matmul__``, which calls ``_matmul_dispatch``).
OPERATORS = {
    "__matmul__": ("_matmul_dispatch",),
    "__rmatmul__": ("_rmatmul_dispatch",),
    "__mul__": ("multiply", "_matmul_dispatch"),
    "__rmul__": ("multiply", "_rmatmul_dispatch"),
    "__truediv__": ("_divide",),
    "__add__": ("__add__",),
    "__radd__": ("__radd__",),
    "__sub__": ("__sub__",),
    "__rsub__": ("__rsub__",),
    "__neg__": ("__neg__",),
    "__abs__": ("__abs__",),
    "__pow__": ("__pow__",),
    "__getitem__": ("__getitem__",),
    "__init__": ("__init__",),
    "maximum": ("_maximum_minimum",),
    "minimum": ("_maximum_minimum",),
}

#: Methods without a rule of their own whose SciPy code computes with the traced values in
#: NumPy and rebuilds the matrix through ``_with_data`` (which has one): differentiated as
#: written, checked in tests/scipy/test_sparse_traced.py.
AS_WRITTEN = {
    name: "SciPy's NumPy code on the traced values, through _with_data"
    for name in ("__neg__", "__abs__", "power", "astype", "copy", "conj", "conjugate", "sqrt", "expm1", "sin",
                 "tan", "arcsin", "arctan", "sinh", "tanh", "arcsinh", "arctanh", "log1p", "deg2rad", "rad2deg")
}
AS_WRITTEN.update(
    trace="diagonal() summed",
    asformat="calls to<format>()",
    __pow__="matrix power of *_matrix: products A @ A",
    nonzero="reads the structure (and compares values)",
    count_nonzero="compares values: no gradient",
)


#: Remarks shown in the coverage table, by method name.
NOTES = {
    "tolil": "refused for traced values (LIL keeps Python lists)",
    "todok": "refused for traced values (DOK keeps a dict)",
    "eliminate_zeros": "keeps traced entries: a zero now may have a derivative",
    "__add__": "a traced scalar is refused (it would touch every entry)",
    "__sub__": "a traced scalar is refused (it would touch every entry)",
    "_divide": "division by a sparse matrix is refused",
    "__init__": "LIL and DOK refuse traced values; a traced dense array stores every entry",
    "_matmul_dispatch": "VJP A.T @ g, sparse; A @ B joins the structures",
    "sum_duplicates": "each duplicate gets the full cotangent",
    "setdiag": "A - old + new on that diagonal",
    **{op: "a boolean result: no gradient" for op in ("__eq__", "__ne__", "__lt__", "__gt__", "__le__", "__ge__")},
}


def _classes() -> List[type]:
    """SciPy's sparse classes and the mixins they inherit from scipy.sparse."""
    seen: list = []
    stack = [_SPBASE]
    while stack:
        cls = stack.pop()
        for klass in cls.__mro__:
            if klass not in seen and (klass.__module__ or "").startswith("scipy.sparse"):
                seen.append(klass)
        stack.extend(cls.__subclasses__())
    return seen


def _bind(body: Callable[..., Any], fun: Any) -> Callable[..., Any]:
    def impl(*args: Any, **kwargs: Any) -> Any:
        return body(fun, *args, **kwargs)

    return impl


def _register() -> None:
    for cls in _classes():
        for name, body in METHODS.items():
            fun = cls.__dict__.get(name)
            if name == "__init__" and cls.__name__ in ("_spbase", "_data_matrix"):
                continue  # the formats' own constructors call these with plain values
            if isinstance(fun, types.FunctionType):
                defcomposite(intercepted(fun, inspect_self=True), _bind(body, fun), note=NOTES.get(name, ""))
    for name, body in FUNCTIONS.items():
        fun = getattr(_construct, name)
        defcomposite(intercepted(fun, route_all=True), _bind(body, fun))
    # The door must see traced sparse matrices passed as arguments (A_const + B_traced).
    hold_tracers_in(_SPBASE)


_register()
