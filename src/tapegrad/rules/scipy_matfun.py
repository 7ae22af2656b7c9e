"""Primary matrix functions of ``scipy.linalg`` (``expm``, ``logm``, ``sqrtm``, ``cosm``, ...,
``fractional_matrix_power``): VJPs that stay right at every order.

The identity behind every rule
------------------------------
For a primary matrix function ``f`` and a block upper triangular matrix,

    f([[A, E], [0, A]]) = [[f(A), L_f(A, E)], [0, f(A)]],

where ``L_f(A, E)`` is the Frechet derivative, and ``L_f(A, .)`` has the
adjoint ``L_f(A^T, .)`` (holomorphic convention, no conjugation, as in every
tapegrad rule).  So the VJP of ``f`` is the upper right block of
``f([[A^T, G], [0, A^T]])``, and a Hessian differentiates that block matrix
function once more, which gives ``f`` of a ``4n x 4n`` matrix, and so on: at
order ``k``, ``f`` of ``I_{2^k} (x) A`` plus a strictly block upper
triangular coupling.

Why entire functions and branch cuts are treated apart
------------------------------------------------------
``expm``, ``cosm``, ``sinm``, ... (no branch cut) take the block matrix as
it is.  ``sqrtm``, ``logm`` and ``fractional_matrix_power`` have a branch
cut on the negative real axis, and the block matrix repeats every eigenvalue
of ``A`` in Jordan blocks.  A real ``A`` with a negative eigenvalue ``-c``
then hands SciPy a matrix whose computed Schur form splits ``-c`` into
``-c +- 1e-8 i``: the two copies land on opposite sides of the cut, the
Schur recurrence divides by ``sqrt(-c + 1e-8 i) + sqrt(-c - 1e-8 i) ~ 1e-8``,
and the second derivative came out as 1e13 where the truth is below 1 (and
``logm`` met NaNs).  The first-order block happened to keep its exact zeros.

The cure is to never ask SciPy for a Schur form of a block matrix:
:func:`block_function` computes ``f(I_k (x) A + N)`` (``N`` strictly block
upper triangular) from the complex Schur form ``A = Q T Q^H`` of ``A``
alone, taken as SciPy takes it for ``f(A)`` (real Schur and ``rsf2csf`` for a
real matrix, so a real negative eigenvalue is exactly ``-c + 0j``, on the side
SciPy chose).  ``(I (x) Q)^H (I (x) A + N) (I (x) Q)`` is upper *triangular*
with exactly ``T``'s diagonal, repeated; SciPy's ``f`` of a triangular matrix
keeps it (LAPACK's Schur form of a triangular matrix is itself), so every
copy of an eigenvalue takes the same branch.  Its own VJP is again a
:func:`block_function` of ``A^T``, with twice the blocks, so every order is
exact in the same way.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import scipy.linalg as sl

from ..dispatch import primitive
from ..registry import defvjp
from ._util import swap_last as _T

__all__ = ["block_adjoint", "block_function", "branch_adjoint"]


def _absent(g: Any) -> bool:
    """A cotangent that is a plain constant zero (an output nobody used)."""
    return type(g) is np.ndarray and not g.any()


def block_adjoint(f: Any, a: Any, g: Any, *extra: Any) -> Any:
    """``L_f(A^T, G)``: the upper right block of ``f([[A^T, G], [0, A^T]])`` (batch axes of ``g`` kept).

    For functions without a branch cut (``expm`` and its relatives).  The
    block matrix repeats every eigenvalue of ``A``, so SciPy's conditioning
    warnings about it say nothing about the user's matrix: they are silenced.
    """
    n = np.shape(a)[-1]
    at = np.broadcast_to(_T(a), np.broadcast_shapes(np.shape(a), np.shape(g)))
    g = np.broadcast_to(g, np.shape(at))
    zero = np.zeros(np.shape(at), dtype=np.result_type(at, g))
    block = np.concatenate([np.concatenate([at, g], -1), np.concatenate([zero, at], -1)], -2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = f(block, *extra)
    return out[..., :n, n:]


# ---------------------------------------------------------------- f(I (x) A + N) from A's Schur form
def _complex_schur(a: np.ndarray) -> tuple:
    """``(T, Q)`` with ``a = Q T Q^H``, ``T`` upper triangular, the way SciPy's matrix functions take it."""
    if np.iscomplexobj(a):
        return sl.schur(a, output="complex")
    t, q = sl.schur(a, output="real")
    return sl.rsf2csf(t, q)


def _block_diag_of(x: np.ndarray, k: int) -> np.ndarray:
    """``I_k (x) x`` for a batch of square matrices ``x`` of shape ``(..., n, n)``."""
    n = x.shape[-1]
    out = np.zeros(x.shape[:-2] + (k * n, k * n), dtype=x.dtype)
    for i in range(k):
        out[..., i * n:(i + 1) * n, i * n:(i + 1) * n] = x
    return out


def _block_function_value(a: Any, coupling: Any, *, fun: Any, extra: tuple = ()) -> np.ndarray:
    """``fun(I_k (x) a + coupling, *extra)``, ``coupling`` strictly block upper triangular (see module docstring)."""
    a, coupling = np.asarray(a), np.asarray(coupling)
    n, size = a.shape[-1], coupling.shape[-1]
    k = size // n
    batch = np.broadcast_shapes(a.shape[:-2], coupling.shape[:-2])
    dtype = np.result_type(a, coupling, 1j)
    t = np.empty(a.shape, dtype=dtype)
    q = np.empty(a.shape, dtype=dtype)
    for idx in np.ndindex(*a.shape[:-2]):
        t[idx], q[idx] = _complex_schur(a[idx])
    if k > 1 and _infinite_at_zero(fun, extra) and np.any(np.diagonal(t, axis1=-2, axis2=-1) == 0):
        # sqrt, log and powers below 1 have no finite derivative at a zero eigenvalue: SciPy's
        # recurrence divides by sqrt(0) + sqrt(0) and gave finite garbage (1e291) there.
        return np.full(batch + (size, size), np.nan, dtype=dtype)
    qk = _block_diag_of(q, k)
    upper = _block_diag_of(t, k) + np.swapaxes(qk.conj(), -1, -2) @ coupling @ qk
    upper = np.triu(np.broadcast_to(upper, batch + (size, size)))
    with warnings.catch_warnings():  # the repeated eigenvalues say nothing about the user's matrix
        warnings.simplefilter("ignore")
        out = fun(upper, *extra)
    if isinstance(out, tuple):  # disp=False: (value, error estimate)
        out = out[0]
    return qk @ out @ np.swapaxes(qk.conj(), -1, -2)


def _infinite_at_zero(fun: Any, extra: tuple) -> bool:
    """Whether the scalar function behind ``fun`` has an infinite derivative at 0."""
    if fun is sl.sqrtm or fun is sl.logm:
        return True
    if fun is sl.fractional_matrix_power and extra:
        p = np.real(extra[0])
        return bool(p < 1 and p != 0)
    return False


block_function = primitive(_block_function_value)
block_function.__name__ = block_function.__qualname__ = "block_function"


def _reversed_blocks(k: int, n: int) -> np.ndarray:
    """Index that reverses the order of ``k`` blocks of size ``n`` (``J_k (x) I_n``)."""
    return np.arange(k * n).reshape(k, n)[::-1].reshape(-1)


def _block_function_grad(w: Any, a: Any, coupling: Any, fun: Any, extra: tuple) -> Any:
    """``L_f(M^T, W)`` for ``M = I_k (x) a + coupling``, itself a :func:`block_function` of ``a^T``.

    ``[[M^T, W], [0, M^T]]`` is ``I_2k (x) a^T`` plus a coupling that is block
    *lower* triangular inside each half; reversing the block order inside
    each half makes it strictly block upper triangular again.
    """
    n, size = np.shape(a)[-1], np.shape(coupling)[-1]
    k = size // n
    rev = _reversed_blocks(k, n)
    batch = np.broadcast_shapes(np.shape(w)[:-2], np.shape(coupling)[:-2])
    nt = _T(coupling)[..., rev, :][..., :, rev]
    nt = np.broadcast_to(nt, batch + (size, size))
    w_rev = np.broadcast_to(w[..., rev, :][..., :, rev], batch + (size, size))
    zero = np.zeros(batch + (size, size), dtype=np.result_type(nt, w_rev))
    doubled = np.concatenate([np.concatenate([nt, w_rev], -1), np.concatenate([zero, nt], -1)], -2)
    out = block_function(_T(a), doubled, fun=fun, extra=extra)
    return out[..., :size, size:][..., rev, :][..., :, rev]


def _real_if(x: Any, like: Any) -> Any:
    """The real part when the argument ``like`` is real: the derivative with respect to a real input."""
    return x if np.iscomplexobj(like) or not np.iscomplexobj(x) else np.real(x)


def _block_function_vjp_a(g, ans, a, coupling, *, fun, extra=()):
    n, size = np.shape(a)[-1], np.shape(coupling)[-1]
    gm = _block_function_grad(g, a, coupling, fun, extra)
    total = sum(gm[..., i * n:(i + 1) * n, i * n:(i + 1) * n] for i in range(size // n))
    return _real_if(total, a)


def _block_function_vjp_coupling(g, ans, a, coupling, *, fun, extra=()):
    return _real_if(_block_function_grad(g, a, coupling, fun, extra), coupling)


defvjp(block_function, _block_function_vjp_a, _block_function_vjp_coupling,
       note="f(I (x) A + N) from A's Schur form; VJP: the same with twice the blocks")


def branch_adjoint(f: Any, a: Any, g: Any, *extra: Any) -> Any:
    """``L_f(A^T, G)`` for a function with a branch cut, through :func:`block_function` of ``A^T``."""
    n = np.shape(a)[-1]
    batch = np.broadcast_shapes(np.shape(a)[:-2], np.shape(g)[:-2])
    g = np.broadcast_to(g, batch + (n, n))
    zero = np.zeros(batch + (n, n), dtype=np.result_type(g))
    coupling = np.concatenate([np.concatenate([zero, g], -1), np.concatenate([zero, zero], -1)], -2)
    return block_function(_T(a), coupling, fun=f, extra=tuple(extra))[..., :n, n:]
