"""The public functional API in one place: reverse and forward mode, Jacobians, Hessians.

Reverse mode (:mod:`tapegrad.reverse`) and forward mode (:mod:`tapegrad.forward`,
built from reverse mode by the transpose trick) are the two layers below;
:func:`jacobian` chooses between them and :func:`hessian` is the Jacobian of the
traced gradient.
"""

from __future__ import annotations

from typing import Callable, Optional

from .forward import hvp, jacfwd, jvp
from .sparsity import sparse_hessian, sparse_jacobian
from .reverse import (
    ArgNums,
    batch_jacobian,
    grad,
    gradients,
    jacrev,
    stop_gradient,
    value_and_grad,
    vjp,
)

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

    Returns
    -------
    callable
        Returns the Jacobian (a tuple of them when ``argnums`` is a sequence;
        a structure of them when ``fun`` returns a structure).
    """
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


def hessian(fun: Callable, argnums: ArgNums = 0, chunk_size: Optional[int] = None, sparse: bool = False) -> Callable:
    """Return a function computing the Hessian of scalar-valued ``fun``.

    The Hessian is the Jacobian of the traced gradient: shape ``x.shape + x.shape``.
    With ``sparse=True`` it is a ``scipy.sparse.csr_array`` of shape
    ``(x.size, x.size)``: the sparse Jacobian of the traced gradient (one
    integer ``argnums``), every value equal to the dense Hessian's.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> tg.hessian(lambda x: np.sum(x ** 3))(np.array([1.0, 2.0]))
    array([[ 6.,  0.],
           [ 0., 12.]])
    """
    if sparse:
        if not isinstance(argnums, int):  # a sparse Hessian is one matrix: one argument
            raise TypeError("hessian(..., sparse=True) takes one argument number")
        return sparse_hessian(fun, argnums, chunk_size)
    return jacrev(grad(fun, argnums), argnums, chunk_size=chunk_size)
