"""How a SciPy sparse matrix with traced values is held, for the ``scipy.sparse`` rules.

The contract shared by :mod:`tapegrad.rules.scipy_sparse` (construction, arithmetic,
products) and :mod:`tapegrad.rules.scipy_sparse_linalg` (solves, spectra):

* A *traced sparse matrix* is a genuine SciPy sparse instance, of the class the user
  asked for (``csr_array``, ``coo_matrix``, ...), built by SciPy from the *plain*
  values, whose ``.data`` attribute was then replaced by a tapegrad tracer holding
  exactly the array SciPy stores there.  Its structure (``indices``, ``indptr``,
  ``row``/``col``/``coords``, ``offsets``) stays plain: the structure is a constant,
  the values are traced.
* Such a matrix reaches the rules through SciPy's door: its methods are intercepted
  with ``inspect_self`` and the door looks for tracers among the attributes of sparse
  arguments (:func:`tapegrad.array_types.hold_tracers_in`).  A SciPy method with no
  rule that hands ``.data`` to compiled code raises tapegrad's clear
  ``GradientDroppedError``; one that computes with ``.data`` in NumPy records it.

Nothing here imports SciPy at module level: the rule modules load it.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from ..tracer import Tracer

__all__ = ["is_sparse", "traced_data", "is_traced_sparse", "innermost", "with_data", "coo_parts"]


def is_sparse(obj: Any) -> bool:
    """Whether ``obj`` is a SciPy sparse array or matrix (without importing SciPy)."""
    module = type(obj).__module__ or ""
    if not module.startswith("scipy.sparse"):
        return False
    from scipy.sparse import issparse

    return issparse(obj)


def traced_data(matrix: Any) -> Optional[Tracer]:
    """The tracer a traced sparse matrix holds as ``.data``, or ``None`` for a constant one."""
    data = getattr(matrix, "data", None)
    return data if type(data) is Tracer else None


def is_traced_sparse(obj: Any) -> bool:
    return is_sparse(obj) and traced_data(obj) is not None


def innermost(value: Any) -> Any:
    """The plain array under every level of tracer (what SciPy can store)."""
    while type(value) is Tracer:
        value = value._value
    return value


def with_data(matrix: Any, data: Any) -> Any:
    """A matrix with ``matrix``'s class and structure and the values ``data`` (traced or not).

    SciPy builds the object from the plain values (its checks and dtype rules apply);
    the tracer, if any, then replaces ``.data``.
    """
    plain = innermost(data)
    result = matrix._with_data(plain, copy=True)
    if type(data) is Tracer:
        result.data = data
    return result


def coo_parts(matrix: Any) -> Tuple[np.ndarray, np.ndarray, Any, Tuple[int, int]]:
    """``(rows, cols, data, shape)`` of a 2-D sparse matrix, entry ``k`` of ``data`` at ``(rows[k], cols[k])``.

    ``data`` is the matrix's own ``.data`` (traced or not), in the order it is
    stored, with duplicates (which SciPy sums) left as they are.  Formats other
    than CSR, CSC and COO are read through a plain copy converted to COO, which
    must keep the stored order: a traced matrix of such a format must be
    converted by its rule first.
    """
    fmt = matrix.format
    if fmt == "csr" or fmt == "csc":
        major = np.repeat(np.arange(len(matrix.indptr) - 1, dtype=matrix.indices.dtype), np.diff(matrix.indptr))
        minor = matrix.indices
        rows, cols = (major, minor) if fmt == "csr" else (minor, major)
        return rows, cols, matrix.data, matrix.shape
    if fmt == "coo":
        coords = getattr(matrix, "coords", None)
        rows, cols = (coords[0], coords[1]) if coords is not None else (matrix.row, matrix.col)
        return rows, cols, matrix.data, matrix.shape
    if traced_data(matrix) is not None:
        raise TypeError(f"tapegrad: coo_parts of a traced {fmt!r} sparse matrix needs its rule to convert it first")
    plain = matrix.tocoo()
    return plain.row, plain.col, plain.data, plain.shape
