"""The public functional API in one place: reverse and forward mode, Jacobians, Hessians.

Reverse mode (:mod:`tapegrad.reverse`) and forward mode (:mod:`tapegrad.forward`,
built from reverse mode by the transpose trick) are the two layers below;
:func:`jacobian` chooses between them and :func:`hessian` is the Jacobian of the
traced gradient.
"""

from __future__ import annotations

from typing import Callable, Optional, Union

from . import forward as _forward
from . import reverse as _reverse
from .forward import jacfwd, jvp
from .reuse import reusable
from .sparsity import sparse_hessian, sparse_jacobian
from .reverse import (
    ArgNums,
    batch_jacobian,
    gradients,
    jacrev,
    stop_gradient,
    vjp,
)

#: ``reuse=``: ``False`` (record at every call), ``True`` (record once, evaluate many) or ``"check"``.
Reuse = Union[bool, str]

_REUSE_DOC = """    reuse : bool or "check", default False
        Record ``fun`` at the first call and evaluate the recording at later calls
        with the same signature (shapes, dtypes, non-differentiated arguments)
        without running ``fun``'s Python, as long as every guard holds: the value of
        every traced value turned into Python (``bool``, ``int``, an index), every
        non-differentiable function of one (comparisons, ``argmax``, ``floor``), and
        the identity of the globals, closure cells and defaults ``fun`` reads.  A
        failing guard records again (the result is eager mode's).  ``"check"`` also
        runs the first reused calls eagerly and raises
        :class:`tapegrad.reuse.ReuseMismatchError` on a difference.  What is frozen:
        ``docs/reuse.md``.  The returned function carries ``reuse_stats``.
"""


def _with_reuse_doc(doc: Optional[str]) -> str:
    """``doc`` with the ``reuse`` parameter added at the end of its Parameters section."""
    doc = doc or ""
    marker = "\n    Returns\n    -------"
    if marker not in doc:
        return doc
    head, tail = doc.split(marker, 1)
    return head.rstrip("\n") + "\n" + _REUSE_DOC + marker + tail


def value_and_grad(
    fun: Callable, argnums: ArgNums = 0, has_aux: bool = False, holomorphic: bool = False, reuse: Reuse = False
) -> Callable:
    if reuse is not False:
        return reusable("value_and_grad", fun, reuse, argnums, has_aux, holomorphic)
    return _reverse.value_and_grad(fun, argnums, has_aux, holomorphic)


def grad(
    fun: Callable, argnums: ArgNums = 0, has_aux: bool = False, holomorphic: bool = False, reuse: Reuse = False
) -> Callable:
    if reuse is not False:
        return reusable("grad", fun, reuse, argnums, has_aux, holomorphic)
    return _reverse.grad(fun, argnums, has_aux, holomorphic)


def hvp(fun: Callable, reuse: Reuse = False) -> Callable:
    if reuse is not False:
        return reusable("hvp", fun, reuse)
    return _forward.hvp(fun)


value_and_grad.__doc__ = _with_reuse_doc(_reverse.value_and_grad.__doc__)
grad.__doc__ = _with_reuse_doc(_reverse.grad.__doc__)
hvp.__doc__ = _with_reuse_doc(_forward.hvp.__doc__)

__all__ = [
    "grad",
    "value_and_grad",
    "vjp",
    "jvp",
    "hvp",
    "jacobian",
    "jacrev",
    "jacfwd",
    "hessian",
    "batch_jacobian",
    "gradients",
    "stop_gradient",
]


def jacobian(
    fun: Callable,
    argnums: ArgNums = 0,
    has_aux: bool = False,
    chunk_size: Optional[int] = None,
    mode: str = "reverse",
    sparse: bool = False,
    reuse: Reuse = False,
) -> Callable:
    """Return a function computing the full Jacobian of ``fun`` (reverse mode by default).

    For an output of shape ``(m1, ..., mk)`` and an argument of shape
    ``(n1, ..., nl)`` the Jacobian has shape ``(m1, ..., mk, n1, ..., nl)``
    (rank k + l): ``J[i..., j...] = d out[i...] / d x[j...]``.

    All output basis vectors travel through the backward sweep together as a
    batch of cotangents: one sweep, not a loop over outputs.

    Parameters
    ----------
    fun : callable
        Ordinary NumPy code; may return an array or a nested structure of arrays.
    argnums : int or sequence of int, default 0
    has_aux : bool, default False
    chunk_size : int, optional
        Carry at most this many basis vectors per sweep, bounding peak memory
        to about ``chunk_size / out.size`` of the one-sweep peak.
    mode : {"reverse", "forward"}, default "reverse"
        ``"forward"`` is :func:`tapegrad.jacfwd` (one sweep of all input basis
        tangents; cheaper for tall Jacobians, few inputs and many outputs).
    sparse : bool, default False
        Return a ``scipy.sparse.csr_array`` of shape ``(out.size, x.size)``
        (C-order flattening), computed at the cost of its nonzeros: the sweep
        carries a sparse batch of cotangents whose structure comes from the
        computation itself (no pattern to supply), and every value equals the
        dense Jacobian's.  ``fun`` must return one array; reverse mode only.
        See ``docs/sparse.md``.
    reuse : bool or "check", default False
        Record once, evaluate many (see :func:`grad`; reverse mode, dense only).

    Returns
    -------
    callable
        Returns the Jacobian (a tuple of them when ``argnums`` is a sequence;
        a structure of them when ``fun`` returns a structure).
    """
    if reuse is not False:
        if sparse or mode != "reverse":
            raise ValueError("reuse=True computes dense Jacobians in reverse mode; leave sparse and mode out")
        return reusable("jacobian", fun, reuse, argnums, has_aux, chunk_size=chunk_size)
    if sparse:
        if mode != "reverse":
            raise ValueError("sparse=True computes the Jacobian in reverse mode; leave mode out")
        return sparse_jacobian(fun, argnums, has_aux, chunk_size)
    if mode == "forward":
        if chunk_size is not None:
            raise ValueError("chunk_size applies to reverse mode only")
        return jacfwd(fun, argnums, has_aux)
    if mode != "reverse":
        raise ValueError(f"mode must be 'reverse' or 'forward', not {mode!r}")
    return jacrev(fun, argnums, has_aux, chunk_size)


def hessian(
    fun: Callable, argnums: ArgNums = 0, chunk_size: Optional[int] = None, sparse: bool = False, reuse: Reuse = False
) -> Callable:
    """Return a function computing the Hessian of scalar-valued ``fun``.

    The Hessian is the Jacobian of the traced gradient: shape ``x.shape + x.shape``.
    With ``sparse=True`` it is a ``scipy.sparse.csr_array`` of shape
    ``(x.size, x.size)``: the sparse Jacobian of the traced gradient (one
    integer ``argnums``), every value equal to the dense Hessian's.  With
    ``reuse=True`` the first call records the whole computation (the traced
    gradient included) and later calls evaluate it (see :func:`grad`).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> tg.hessian(lambda x: np.sum(x ** 3))(np.array([1.0, 2.0]))
    array([[ 6.,  0.],
           [ 0., 12.]])
    """
    if reuse is not False:
        if sparse:
            raise ValueError("reuse=True computes dense Hessians; leave sparse out")
        return reusable("hessian", fun, reuse, argnums, chunk_size=chunk_size)
    if sparse:
        if not isinstance(argnums, int):  # a sparse Hessian is one matrix: one argument
            raise TypeError("hessian(..., sparse=True) takes one argument number")
        return sparse_hessian(fun, argnums, chunk_size)
    return jacrev(_reverse.grad(fun, argnums), argnums, chunk_size=chunk_size)
