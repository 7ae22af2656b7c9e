"""Derivatives of ``matmul`` and of ``numpy.linalg``.

Cotangents carry leading batch axes; matrix rules use ``swapaxes(-1, -2)``
(a view: BLAS reads it through its transpose flag) and broadcasting so that
a batch of cotangents (a Jacobian) runs as one stacked product.  Where one
operand is a single matrix, the batched cotangent is folded into the rows of
one 2-D product (one BLAS call) instead of a stack of small products.

Conventions and limits (also in each rule's ``note``):

* Complex input follows tapegrad's convention (:mod:`tapegrad.rules.ufuncs`):
  the cotangent ``c`` of ``z`` stands for ``dz -> Re(c dz)``, so the gradient of
  a real loss is ``dL/dRe - 1j dL/dIm``.  Holomorphic rules (``inv``, ``det``,
  ``solve``, ``eig``'s eigenvalues) use ``J^T g``; the decompositions that are
  not holomorphic (``svd``, ``eigh``, ``cholesky``, ``qr``, ``eig``'s unit-norm
  eigenvectors) are derived for the gradient ``G = conj(c)`` of the real inner
  product ``Re tr(G^H dX)`` and conjugated back.  For real input every
  conjugate is the identity: the formulas are the usual real ones.
* Complex singular vectors (``u_i, v_i`` together), eigenvectors of ``eigh``
  and of ``eig`` are fixed by LAPACK only up to a phase ``exp(i phi)`` each.
  A function of them has a derivative only if it does not depend on those
  phases (``abs(v)**2``, projectors ``v v^H``, ``U @ Vh``, ``V diag(w) V^-1``):
  then every order is exact.  Reverse mode checks it on each cotangent
  (``Im diag(V^H G_V)`` must be rounding-sized, :func:`check_phase_free`) and
  raises :class:`~tapegrad.errors.NonDifferentiableArgumentError` otherwise.
  Forward mode (``jvp``/``jacfwd``, built from these VJPs) cannot see the
  function downstream: it gives the vectors' tangents in the gauge
  ``Im(v_i^H dv_i) = 0`` (``svd``: opposite halves on ``u_i`` and ``v_i``), exact
  for phase-invariant code, one representative otherwise.  Real vectors have
  a sign only, which is locally constant.
* ``cholesky``, ``eigh``, ``eigvalsh`` read one triangle of their input
  (NumPy passes ``UPLO``/``upper`` to LAPACK), so the gradient is exactly that:
  it lives on the triangle that was read, with off-diagonal entries carrying
  both symmetric (Hermitian) halves, and a real diagonal (LAPACK ignores the
  imaginary part of a Hermitian diagonal).  For an input built symmetric
  (``A = X @ X.T``) this equals the symmetrized gradient JAX and autograd report.
* Repeated eigen/singular values: the derivative of the vectors is undefined
  there, and the rules return ``inf``/``nan`` (as JAX does) rather than an
  arbitrary number.  Cotangents that are exactly a constant zero (an output the
  function never used) are skipped, so ``eigvalsh``, ``eigvals``,
  ``svd(compute_uv=False)`` and the norms built on them stay finite at repeated
  values.  Near-repeated values with a gap ``d`` (relative to the spectrum) are
  exact in exact arithmetic; in floating point the vector terms lose about
  ``eps / d`` (first order) and ``eps / d^2`` (second order) even where the
  function is smooth (a projector onto a cluster, ``V f(w) V^H``).
* ``svd`` differentiates ``full_matrices=False`` (and square matrices); for a
  non-square matrix with ``full_matrices=True`` the extra singular vectors are
  not unique and a clear error is raised (also for ``hermitian=True``).  ``qr``
  supports ``'reduced'``, ``'r'`` and, where it equals the reduced one,
  ``'complete'``; LAPACK's complex ``R`` has a real diagonal, which fixes ``Q``.
* ``pinv`` and ``lstsq`` are real-only; ``inv``, ``det``, ``slogdet``,
  ``solve`` and every decomposition above also take complex input.
* Unsupported options raise :class:`~tapegrad.errors.NonDifferentiableArgumentError`.
* Norms give the subgradient 0 at the zero vector; ``pinv``/``lstsq`` assume
  the numerical rank does not change under a small perturbation.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import numpy as np

from ..dispatch import primitive, strip
from ..tracer import unwrap_above
from ..array_types import follow_library
from ..finiteness import all_true, finite
from ..errors import NonDifferentiableArgumentError
from ..memo import recalled, shared, shared_so_far
from ..registry import defcomposite, defconstant, defstrong, defvjp
from ._util import negative_axes, strong_bilinear, swap_last, unreduce

# ---------------------------------------------------------------- helpers


def _real_dtype(x: Any) -> np.dtype:
    return np.finfo(np.result_type(x)).dtype


def _eye(n: int, like: Any) -> np.ndarray:
    return np.eye(n, dtype=_real_dtype(like))


@functools.lru_cache(maxsize=256)
def _half_tri(n: int, lower: bool, dtype: np.dtype) -> np.ndarray:
    """1 strictly inside one triangle, 1/2 on the diagonal, 0 in the other triangle."""
    m = np.tri(n, dtype=dtype) - 0.5 * np.eye(n, dtype=dtype)
    m.flags.writeable = False
    return m if lower else m.T


def _absent(g: Any) -> bool:
    """True for a cotangent that is a plain constant zero (an output nobody used)."""
    return type(g) is np.ndarray and not g.any()


def _not_differentiable(name: str, why: str) -> NonDifferentiableArgumentError:
    return NonDifferentiableArgumentError(f"tapegrad cannot differentiate {name} here: {why}")


def _real_only(name: str, a: Any) -> None:
    if np.iscomplexobj(a):
        raise _not_differentiable(name, "complex input (tapegrad differentiates it for real matrices only).")


def _cj(x: Any) -> Any:
    """The complex conjugate of a complex array; a real one as it is."""
    return np.conjugate(x) if np.iscomplexobj(x) else x


def _ct(x: Any) -> Any:
    """The conjugate transpose of the last two axes (the plain transpose of a real stack)."""
    return _cj(swap_last(x))


def _tri_cotangent(m: Any, lower: bool) -> Any:
    """Map the gradient ``m`` of a symmetric (Hermitian) input function onto the triangle it read.

    Off-diagonal entries of the read triangle get ``m_ij + m_ji`` (complex:
    ``m_ij + conj(m_ji)``, the entry stands for itself and its conjugate
    mirror), the diagonal ``m_ii`` (complex: its real part, LAPACK ignores the
    imaginary part of a Hermitian matrix's diagonal) and the unread triangle 0.
    """
    return (m + _ct(m)) * follow_library(_half_tri(np.shape(m)[-1], lower, _real_dtype(m)), strip(m))


#: A cotangent whose phase-dependent part (see :func:`check_phase_free`) is below this
#: many times the square root of the dtype's eps, relative to the cotangent's size, is
#: taken as phase-invariant up to rounding.
_PHASE_RTOL = 10.0


def check_phase_free(name: str, drift: Any, scale: Any, what: str) -> None:
    """Refuse a cotangent of complex singular/eigen vectors that depends on their phases.

    LAPACK fixes each vector (or pair ``u_i, v_i``) only up to a factor
    ``exp(i phi)``; a function of the vectors has a derivative only if it does
    not change under it.  ``drift[..., i]`` is that change per unit ``phi``
    (``Im(v_i^H g_i)`` in the conjugate-gradient convention), ``scale[..., i]``
    the size of the cotangent it came from: ``|drift| <= _PHASE_RTOL sqrt(eps) scale``
    counts as rounding.  Plain values are compared (at second order too).
    """
    drift = np.abs(np.asarray(strip(drift)))
    scale = np.asarray(strip(scale))
    tol = _PHASE_RTOL * np.sqrt(np.finfo(_real_dtype(drift)).eps)
    if np.any(drift > tol * scale):
        worst = float(np.max(drift / np.where(scale > 0, scale, 1)))
        raise _not_differentiable(
            name,
            f"the result depends on the phases of the complex {what} (it changes under v -> v exp(i phi), "
            f"at a relative rate of {worst:.2g}), and LAPACK chooses those phases arbitrarily, so it has no "
            "derivative. Differentiate a phase-invariant function of them instead: abs(v)**2, projectors "
            "v v^H, reconstructions such as V diag(w) V^-1, or the values alone.",
        )


#: Below this many rows a dense product is cheaper than looking for sparsity.
_SPARSE_ROWS = 64


def _one_hot_rows_times(g: np.ndarray, m: np.ndarray) -> Any:
    """``g @ m`` when every row of ``g`` has at most one nonzero, else ``None``.

    A Jacobian's sweep starts from basis cotangents (one-hot rows), and
    element-wise rules keep them one-hot: the first matrix product of the sweep
    is then a scaled gather of rows of ``m``, O(n k) instead of O(n^2 k).
    Checking costs one pass over ``g``, small next to the product it replaces.
    """
    nonzeros = np.count_nonzero(g)
    if nonzeros > g.shape[0]:
        return None
    if g.shape[0] == g.shape[1] == m.shape[0] and np.count_nonzero(np.diagonal(g)) == nonzeros:
        return np.diagonal(g)[:, None] * m  # a diagonal g: the usual first step of a Jacobian sweep
    rows, cols = np.nonzero(g)
    if rows.size and np.any(rows[1:] == rows[:-1]):
        return None
    scale = g[rows, cols][:, None]
    out = np.zeros((g.shape[0], m.shape[1]), dtype=np.result_type(g, m))
    out[rows] = scale * np.take(m, cols, axis=0)
    return out


def _rows_times(g: Any, m: Any) -> Any:
    """``g @ m`` for a 2-D ``m``: every leading axis of ``g`` folds into rows (one BLAS call)."""
    shape = np.shape(g)
    g2 = g if len(shape) <= 2 else np.reshape(g, (-1, shape[-1]))
    out = None
    if type(g2) is np.ndarray and type(m) is np.ndarray and g2.ndim == 2 and g2.shape[0] >= _SPARSE_ROWS:
        out = _one_hot_rows_times(g2, m)
    if out is None:
        out = g2 @ m
    return out if len(shape) <= 2 else np.reshape(out, shape[:-1] + (np.shape(m)[-1],))


# ---------------------------------------------------------------- triangular solves
#: Below this order a triangular block is solved through its inverse; above, it is split.
_TRI_BLOCK = 64


def _plain(*xs: Any) -> bool:
    """True when every argument is a plain ndarray (no tracer of an outer tape among them)."""
    return all(type(x) is np.ndarray for x in xs)


def _fold_columns(t: Any, rhs: Any) -> tuple:
    """``rhs`` (..., n, k) as one (n, m) block when ``t`` is a single matrix, else unchanged.

    Every cotangent of a batch (a Jacobian's rows) becomes extra columns of one
    triangular solve instead of a stack of small ones.
    """
    if np.ndim(t) != 2 or np.ndim(rhs) <= 2:
        return rhs, None
    moved = np.moveaxis(rhs, -2, 0)
    return np.reshape(moved, (np.shape(t)[-1], -1)), np.shape(moved)


def _unfold_columns(x: Any, moved_shape: Any) -> Any:
    if moved_shape is None:
        return x
    return np.moveaxis(np.reshape(x, moved_shape), 0, -2)


def _blocked_tri_solve(t: np.ndarray, rhs: np.ndarray, lower: bool) -> np.ndarray:
    """``inv(t) @ rhs`` for a triangular ``t`` by recursive halving: matrix products do the work.

    Substitution by blocks costs ``n^2 k`` flops (a triangular solve's count,
    against ``2/3 n^3 + 2 n^2 k`` for an LU solve), and every product runs in
    NumPy's own BLAS.  SciPy's ``solve_triangular`` would be faster alone, but
    it brings a second OpenBLAS thread pool whose idle workers spin on the
    cores NumPy's pool needs: on two cores that doubled W8's ``cholesky``.
    Diagonal blocks of order <= ``_TRI_BLOCK`` are inverted (``n k _TRI_BLOCK``
    flops in all), which keeps the error at a triangular solve's level for the
    well-conditioned factors the VJPs meet (a Cholesky or QR factor).
    """
    n = t.shape[-1]
    if n <= _TRI_BLOCK:
        return np.linalg.inv(t) @ rhs
    h = n // 2
    shape = np.broadcast_shapes(t.shape[:-2], rhs.shape[:-2]) + rhs.shape[-2:]
    out = np.empty(shape, dtype=np.result_type(t, rhs))
    # Lower: the top rows first, then the bottom ones less the top's contribution;
    # upper: the other way round.
    first, second = (slice(None, h), slice(h, None)) if lower else (slice(h, None), slice(None, h))
    done = out[..., first, :] = _blocked_tri_solve(t[..., first, first], rhs[..., first, :], lower)
    rest = rhs[..., second, :] - t[..., second, first] @ done
    out[..., second, :] = _blocked_tri_solve(t[..., second, second], rest, lower)
    return out


#: Up to this order a lower triangular matrix is inverted by block rows (:func:`_lower_inverse_by_rows`);
#: above it, by recursive halving.  Measured on 2 idle cores (ms, recursion / block rows):
#: n = 128: 0.20 / 0.16; 250: 0.75 / 0.67; 400: 1.91 / 1.25; 1000: 8.7 / 10.6.
_ROWS_MAX = 512
#: Rows per block of :func:`_lower_inverse_by_rows`.
_ROW_BLOCK = 50


def _lower_inverse_by_rows(t: np.ndarray) -> np.ndarray:
    """``inv(t)`` of a 2-D lower triangular ``t``, one block of ``_ROW_BLOCK`` rows at a time.

    With ``X = inv(t)`` known above row ``i``, the block rows ``i:j`` are
    ``X[i:j, :i] = -inv(D) t[i:j, :i] X[:i, :i]`` and ``X[i:j, i:j] = inv(D)`` for the
    diagonal block ``D``: about ``n^3 / 3`` multiply-adds in two products per block,
    against ``2 n^3 / 3`` for halving, whose products also multiply the zero blocks.
    """
    n = t.shape[0]
    out = np.zeros(t.shape, dtype=t.dtype)
    for i in range(0, n, _ROW_BLOCK):
        j = min(i + _ROW_BLOCK, n)
        block = np.tril(np.linalg.inv(t[i:j, i:j]))
        if i:
            np.negative(block @ (t[i:j, :i] @ out[:i, :i]), out=out[i:j, :i])
        out[i:j, i:j] = block
    return out


def _tri_inverse(t: np.ndarray, lower: bool) -> np.ndarray:
    """``inv(t)`` of a triangular ``t`` by recursive halving (``n^3 / 3`` multiply-adds, in matrix products).

    ``inv([[A, 0], [C, B]]) = [[inv(A), 0], [-inv(B) C inv(A), inv(B)]]`` (and
    the transposed pattern for an upper ``t``).  Diagonal blocks of order
    <= ``_TRI_BLOCK`` go through ``np.linalg.inv``; the other triangle is set
    to exact zeros.
    """
    n = t.shape[-1]
    if n <= _TRI_BLOCK:
        inverse = np.linalg.inv(t)
        return np.tril(inverse) if lower else np.triu(inverse)
    if n <= _ROWS_MAX and t.ndim == 2:
        return _lower_inverse_by_rows(t) if lower else swap_last(_lower_inverse_by_rows(swap_last(t)))
    h = n // 2
    out = np.zeros(t.shape, dtype=t.dtype)
    top = out[..., :h, :h] = _tri_inverse(t[..., :h, :h], lower)
    bottom = out[..., h:, h:] = _tri_inverse(t[..., h:, h:], lower)
    if lower:
        out[..., h:, :h] = -(bottom @ (t[..., h:, :h] @ top))
    else:
        out[..., :h, h:] = -(top @ (t[..., :h, h:] @ bottom))
    return out


def _solved_without_inverse(t: Any) -> bool:
    """Marks (memo.shared) a factor whose Cholesky VJP ran by triangular solves, without ``inv(L)``."""
    return True


def _lower_inverse(t: np.ndarray) -> np.ndarray:
    """``inv(t)`` of a lower factor: the key under which a sweep shares it (memo.shared)."""
    return _tri_inverse(t, lower=True)


def _inverse_from_cholesky(a: Any) -> Any:
    """``inv(a)`` from the Cholesky factor that the forward pass computed of this very ``a``, else ``None``.

    ``np.linalg.cholesky(a)`` reads one triangle, so its factor ``L`` gives
    ``a = L L^T`` only for an exactly symmetric ``a``; that is checked (an
    O(n^2) pass next to the O(n^3) work it saves).  ``inv(a) = inv(L)^T inv(L)``
    costs about a third of an LU inverse, and the sweep computes ``inv(L)``
    once for every VJP that needs it (``slogdet``, ``det``, ``cholesky``).
    """
    factor = _cholesky_of(a)
    if factor is None:
        return None
    inv_low = shared(_lower_inverse, factor)
    if np.ndim(inv_low) == 2:
        return _lower_gram(inv_low)
    return swap_last(inv_low) @ inv_low  # one operand transposed: NumPy calls syrk (half the flops)


#: From this order on, an exactly symmetric matrix that the forward pass did not factor
#: is inverted through a Cholesky factor of its own (when it is positive definite).
_SPD_INVERSE_MIN = 64


def _general_inverse(a: np.ndarray) -> np.ndarray:
    """``inv(a)`` of a plain matrix the forward pass did not factor: the key under which a sweep shares it.

    An exactly symmetric, real, positive definite ``a`` of order >=
    ``_SPD_INVERSE_MIN`` (a covariance, a kernel matrix) goes through
    ``L = cholesky(a)``: ``inv(a) = inv(L)^T inv(L)``, about ``n^3`` flops against
    ``8/3 n^3`` for LU with the identity as right-hand side.  ``cholesky`` refusing
    (not positive definite) leaves the LU inverse.
    """
    if (a.ndim == 2 and a.shape[-1] >= _SPD_INVERSE_MIN and not np.iscomplexobj(a)
            and np.array_equal(a, a.T)):
        try:
            low = np.linalg.cholesky(a)
        except np.linalg.LinAlgError:
            pass
        else:
            return _lower_gram(_tri_inverse(low, lower=True))
    return np.linalg.inv(a)


def _cholesky_of(a: Any) -> Any:
    """The lower factor ``L`` of ``np.linalg.cholesky(a)`` that the forward pass computed, when ``a = L L^T``.

    That holds for an exactly symmetric ``a`` only: ``cholesky`` reads one triangle.
    """
    if not _plain(a) or np.ndim(a) < 2 or np.iscomplexobj(a):
        return None
    factor = recalled(np.linalg.cholesky, a)  # remembered only for a call without keywords: lower
    if factor is None or not _plain(factor) or factor.shape != np.shape(a) or factor.dtype != a.dtype:
        return None
    if not np.array_equal(a, swap_last(a)):
        return None
    return factor


def tri_solve(t: Any, rhs: Any, lower: bool, trans: bool = False) -> Any:
    """``inv(t) @ rhs`` (``inv(t.T) @ rhs`` if ``trans``) for a triangular ``t``.

    ``rhs`` is ``(..., n, k)`` and may carry more leading (batch) axes than
    ``t``.  On plain ndarrays this is a blocked substitution
    (:func:`_blocked_tri_solve`).  When any argument is a tracer (the sweep is
    being recorded for a higher-order derivative) it is ``np.linalg.solve``,
    which tapegrad differentiates.
    """
    if not _plain(t, rhs) or np.iscomplexobj(t) or np.iscomplexobj(rhs):
        t = swap_last(t) if trans else t
        if np.ndim(rhs) > np.ndim(t) and type(unwrap_above(t, 0)) is not np.ndarray:
            # CuPy's solve does not broadcast a matrix against a batch of right-hand sides.
            t = np.broadcast_to(t, np.shape(rhs)[:-2] + np.shape(t)[-2:])
        return np.linalg.solve(t, rhs)
    folded, moved_shape = _fold_columns(t, rhs)
    # t.T of a lower factor is upper: a transposed view, read by BLAS through its flag.
    x = _blocked_tri_solve(swap_last(t) if trans else t, folded, lower != trans)
    return _unfold_columns(x, moved_shape)


def _triangle(a: Any) -> Any:
    """``"lower"`` / ``"upper"`` when the plain ndarray ``a`` is exactly triangular, else ``None``.

    One O(n^2) scan, cheap next to the O(n^3) solve it can replace.
    """
    if not _plain(a) or np.ndim(a) < 2 or np.shape(a)[-1] < 2 or np.iscomplexobj(a):
        return None
    if not np.triu(a, 1).any():
        return "lower"
    if not np.tril(a, -1).any():
        return "upper"
    return None


# ---------------------------------------------------------------- matmul
def _finite_through(v: Any, ans: Any) -> bool:
    """Whether the matrix in ``ans = m @ v`` (or ``v @ m``) is proved finite by the forward's values.

    With ``v`` real, finite and free of zeros, an inf or NaN in ``m`` makes every sum it
    enters inf or NaN, in any order of summation: a finite ``ans`` proves ``m`` finite.
    A banded cotangent's product with ``m`` then needs no look at ``m`` (a pass over
    the per-example Jacobian ``diag(d) @ X`` otherwise).
    """
    return (
        type(v) is np.ndarray
        and v.dtype.kind == "f"
        and type(ans) is np.ndarray
        and ans.dtype.kind == "f"
        and finite(v)
        and all_true(v)
        and finite(ans)
    )



def _proved_rows_times(g: Any, m: Any, v: Any, ans: Any) -> Any:
    """``g @ m`` with ``m`` proved finite through ``v`` and ``ans``, for a batch that can use the proof; else ``None``.

    A structured batch (the sweep's banded one) offers ``times_finite(m)``; the rule
    only supplies the proof, so it needs no knowledge of the batch's type.
    """
    times_finite = getattr(type(g), "times_finite", None)
    if times_finite is None or type(m) is not np.ndarray or not _finite_through(v, ans):
        return None
    return times_finite(g, m)


def _matmul_x(g, ans, x, y, **kwargs):
    xd, yd = np.ndim(x), np.ndim(y)
    if xd == 1 and yd == 1:  # ans = x . y, g is batch-shaped
        return g[..., None] * y
    if yd == 2:  # covers x 1-D (ans[..., m] = sum_k x[k] y[k, m]) and stacked x
        if xd == 1:  # ans = x @ y: y is finite where x has no zeros and ans is finite
            out = _proved_rows_times(g, swap_last(y), x, ans)
            if out is not None:
                return out
        return _rows_times(g, swap_last(y))
    if xd == 1:
        return (y @ g[..., None])[..., 0]
    if yd == 1:  # ans[..., n] = sum_k x[..., n, k] y[k]
        return g[..., None] * y
    return g @ swap_last(y)


def _matmul_y(g, ans, x, y, **kwargs):
    xd, yd = np.ndim(x), np.ndim(y)
    if xd == 1 and yd == 1:
        return g[..., None] * x
    if yd == 1:
        if xd == 2:  # ans = x @ y: x is finite where y has no zeros and ans is finite
            out = _proved_rows_times(g, x, y, ans)
            return out if out is not None else _rows_times(g, x)
        # Stacked x: the stack is summed away, so fold it into one product.
        nb = np.ndim(g) - np.ndim(ans)
        k = np.shape(x)[-1]
        return _rows_times(np.reshape(g, np.shape(g)[:nb] + (-1,)), np.reshape(x, (-1, k)))
    if xd == 1:
        return x[:, None] * g[..., None, :]
    if yd == 2 and xd > 2:
        # Stacked x against one matrix: contract the stack and rows in one product.
        nb = np.ndim(g) - np.ndim(ans)
        x2 = np.reshape(x, (-1, np.shape(x)[-1]))
        g2 = np.reshape(g, np.shape(g)[:nb] + (-1, np.shape(g)[-1]))
        return swap_last(x2) @ g2
    return swap_last(x) @ g


# Each VJP reads the other operand (and only the ndim of its own, and ans's ndim).
defvjp(np.matmul, _matmul_x, _matmul_y, needs=((1,), (0, -1)), banded=True, sparse=True)
defstrong(np.matmul, strong_bilinear(_matmul_x, 1), strong_bilinear(_matmul_y, 0))


# ---------------------------------------------------------------- inverse, determinants, solve
def _inv_vjp(g, ans, a):
    at = swap_last(ans)
    return -((at @ g) @ at)


def _inv_t(a):
    inverse = _inverse_from_cholesky(a)
    if inverse is not None:  # symmetric: its own transpose
        return inverse
    if _plain(a):
        # Shared in the sweep: a solve(a, b) VJP of the same a takes it (_solve_t).
        return swap_last(shared(_general_inverse, a))
    return swap_last(np.linalg.inv(a))


def _det_vjp(g, ans, a):
    try:
        return (g * ans)[..., None, None] * _inv_t(a)
    except np.linalg.LinAlgError:  # singular: det's gradient is still its cofactor matrix
        return g[..., None, None] * _cofactors(a)


def _cofactors(a):
    """The cofactor matrix of ``a`` (the gradient of ``det``), from the determinants of its minors.

    ``det(a) inv(a)^T`` where ``a`` is invertible; at a singular matrix (the area of a
    degenerate triangle) the minors' determinants still give it, and they are NumPy
    calls, so second derivatives follow (a singular minor takes this path again).
    """
    n = np.shape(a)[-1]
    if n == 1:
        return np.ones_like(a)
    keep = np.array([[k for k in range(n) if k != i] for i in range(n)])  # (n, n - 1): the rows (columns) kept
    minors = a[..., keep[:, None, :, None], keep[None, :, None, :]]  # (..., n, n, n - 1, n - 1)
    signs = (-1.0) ** np.add.outer(np.arange(n), np.arange(n))
    return signs * np.linalg.det(minors)


def _slogdet_vjp(g, ans, a):
    g_sign, g_log = g
    coef = g_log
    if np.iscomplexobj(a):
        # The sign exp(i theta) moves with theta = Im(log det): its cotangent enters too.
        coef = g_log + 1j * np.imag(g_sign * ans[0])
    return coef[..., None, None] * _inv_t(a)


defvjp(np.linalg.inv, _inv_vjp)
# Both scale inv(A) by the cotangent: a sparse batch (a Hessian through tetrahedron volumes) stays sparse.
defvjp(np.linalg.det, _det_vjp, note="det(A) inv(A)^T; cofactors at a singular matrix", sparse=True)
defvjp(np.linalg.slogdet, _slogdet_vjp, note="sign is constant for real input", sparse=True)


def _inverse_t_times(inverse, rhs, vector):
    """``solve(a.T, rhs)`` given ``inverse = inv(a)`` (``rhs`` with leading batch axes)."""
    if not vector:
        return swap_last(inverse) @ rhs
    if np.ndim(inverse) == 2:
        return _rows_times(rhs, inverse)  # x[..., i] = sum_j rhs[..., j] inv(a)[j, i]
    return (swap_last(inverse) @ rhs[..., None])[..., 0]


def _solve_t(a, rhs, vector):
    """``solve(a.T, rhs)`` where ``rhs`` carries leading batch axes.

    For a single matrix ``a`` every right-hand side is folded into the columns
    of one solve (one factorisation) instead of one solve per batch row.  An
    exactly triangular plain ``a`` (``solve(L, y)`` after a Cholesky) takes a
    triangular solve instead of a new LU factorisation, and so does an ``a``
    whose Cholesky factor the forward pass computed (two solves with ``L``).
    """
    at = swap_last(a)
    two_d = np.ndim(a) == 2
    plain = _plain(a, rhs)
    inverse = shared_so_far(_general_inverse, a) if plain else None
    if inverse is not None:  # a slogdet / det / inv VJP of this sweep inverted this very a
        return _inverse_t_times(inverse, rhs, vector)
    factor = _cholesky_of(a) if plain else None
    if factor is not None:  # a = L L^T is symmetric: solve(a.T, rhs) = L^-T (L^-1 rhs)
        if two_d and np.shape(a)[-1] > _TRI_BLOCK and shared_so_far(_solved_without_inverse, factor) is None:
            # inv(L), shared: the cholesky(a) VJP of this sweep (the factor was computed,
            # so it is most likely differentiated, after this VJP) needs it too.
            inv_low = shared(_lower_inverse, factor)
            if vector:
                return _rows_times(_rows_times(rhs, swap_last(inv_low)), inv_low)
            return swap_last(inv_low) @ (inv_low @ rhs)
        r = rhs[..., None] if vector else rhs
        x = tri_solve(factor, tri_solve(factor, r, lower=True), lower=True, trans=True)
        return x[..., 0] if vector else x
    triangle = _triangle(a) if _plain(rhs) else None
    if triangle is not None:
        # a.T is triangular of the other kind: solve with trans instead of transposing.
        lower = triangle == "lower"
        if vector:
            return tri_solve(a, rhs[..., None], lower, trans=True)[..., 0]
        return tri_solve(a, rhs, lower, trans=True)
    if vector:
        if np.ndim(rhs) == 1:
            return _columns_solved(at, rhs[:, None])[:, 0]
        if two_d:
            flat = np.reshape(rhs, (-1, np.shape(a)[-1]))
            return np.reshape(swap_last(_columns_solved(at, swap_last(flat))), np.shape(rhs))
        return np.linalg.solve(at, rhs[..., None])[..., 0]
    if two_d and np.ndim(rhs) > 2:
        moved = np.moveaxis(rhs, -2, 0)
        x = _columns_solved(at, np.reshape(moved, (np.shape(a)[-1], -1)))
        return np.moveaxis(np.reshape(x, np.shape(moved)), 0, -2)
    return _columns_solved(at, rhs) if two_d and np.ndim(rhs) == 2 else np.linalg.solve(at, rhs)


def _columns_solved(a, columns):
    """``np.linalg.solve(a, columns)`` for one matrix and a 2-D block of right-hand sides.

    LAPACK solves one right-hand side by another kernel than several (OpenBLAS's
    triangular solve for one column rounds differently, by an ulp), while with two or
    more every column gets the same numbers whatever their count.  So one column is
    solved as two: a single VJP then gives exactly the numbers of the same row of a
    Jacobian's batched sweep.
    """
    if np.shape(columns)[-1] == 1 and _plain(a, columns):
        return np.linalg.solve(a, np.concatenate([columns, columns], axis=-1))[:, :1]
    return np.linalg.solve(a, columns)


def _solve_a(g, ans, a, b):
    vector = np.ndim(b) == 1
    gb = _solve_t(a, g, vector)
    if vector:
        return -(gb[..., :, None] * ans[..., None, :])
    return -(gb @ swap_last(ans))


defvjp(np.linalg.solve, _solve_a, lambda g, ans, a, b: _solve_t(a, g, np.ndim(b) == 1))


# ---------------------------------------------------------------- pseudo-inverse and least squares
def _pinv_cotangent(gx, x, a):
    """Cotangent of ``a`` given the cotangent ``gx`` of ``x = pinv(a)`` (constant rank).

    ``-X^T G X^T + (I - A X) G^T X X^T + X^T X G^T (I - X A)``.
    """
    m, n = np.shape(a)[-2:]
    xt, gt = swap_last(x), swap_last(gx)
    term = -((xt @ gx) @ xt)
    term = term + (_eye(m, a) - a @ x) @ (gt @ (x @ xt))
    return term + ((xt @ x) @ gt) @ (_eye(n, a) - x @ a)


def _refuse_cut_values(name: str, a: Any, rcond: Any, hermitian: bool = False) -> None:
    """Refuse a cutoff that discards a singular value that is not (numerically) zero.

    The constant-rank formula is the derivative of the pseudo-inverse only where the
    discarded part of the matrix is zero: a truncated SVD whose discarded singular values
    are not zero also rotates the kept singular vectors (the coupling ``1 / (s_i^2 - s_j^2)``
    between kept and discarded ones), which it leaves out: a wrong gradient, off by about
    the discarded value.  Below ``sqrt(eps)`` of the largest value the error is below that too.
    """
    raw = np.asarray(strip(a))
    if raw.size == 0:
        return
    values = np.linalg.svd(raw, compute_uv=False, hermitian=hermitian)
    largest = np.max(values, axis=-1, keepdims=True)
    cut = values <= np.asarray(rcond)[..., None] * largest
    significant = cut & (values > np.sqrt(np.finfo(values.dtype).eps) * largest)
    if np.any(significant):
        worst = float(np.max(np.where(significant, values / largest, 0.0)))
        raise _not_differentiable(
            name,
            f"its cutoff (rcond/rtol) discards a singular value that is not zero ({worst:.3g} of the largest). "
            "The derivative of such a truncation also turns the kept singular vectors, which tapegrad's "
            "pseudo-inverse rule leaves out. Write the truncation with np.linalg.svd (u, s, vh) and mask s, "
            "or use a cutoff below the values you keep and above those that are zero.",
        )


def _pinv_rcond(a: Any, rcond: Any, kwargs: dict) -> Any:
    """NumPy's cutoff for ``pinv`` (``rcond`` or ``rtol``, with their defaults)."""
    if rcond is not None:
        return rcond
    rtol = kwargs.get("rtol", _NO_VALUE)
    if rtol is _NO_VALUE:
        return 1e-15
    if rtol is None:
        return max(np.shape(a)[-2:]) * np.finfo(_real_dtype(a)).eps
    return rtol


try:
    from numpy._globals import _NoValue as _NO_VALUE
except ImportError:  # pragma: no cover
    _NO_VALUE = object()


def _pinv_vjp(g, ans, a, rcond=None, hermitian=False, **kwargs):
    _real_only("numpy.linalg.pinv", a)
    _refuse_cut_values("numpy.linalg.pinv", a, _pinv_rcond(a, rcond, kwargs), hermitian)
    if not hermitian:
        return _pinv_cotangent(g, ans, a)
    # hermitian=True reads the lower triangle only: differentiate at that symmetric matrix.
    n = np.shape(a)[-1]
    lower = np.tri(n, dtype=bool)
    strict = np.tri(n, k=-1, dtype=bool)
    sym = np.where(lower, a, 0) + swap_last(np.where(strict, a, 0))
    return _tri_cotangent(_pinv_cotangent(g, ans, sym), True)


defvjp(np.linalg.pinv, _pinv_vjp, note="assumes the numerical rank is locally constant")


def _lstsq_rcond(a, rcond):
    if rcond is None:
        return np.finfo(_real_dtype(a)).eps * max(np.shape(a))
    if rcond < 0:
        return np.finfo(_real_dtype(a)).eps
    return rcond


def _svdvals_cotangent(gs, a):
    u, _, vh = np.linalg.svd(a, full_matrices=False)
    return (u * gs[..., None, :]) @ vh


def _lstsq_a(g, ans, a, b, rcond=None):
    _real_only("numpy.linalg.lstsq", a)
    _refuse_cut_values("numpy.linalg.lstsq", a, _lstsq_rcond(a, rcond))
    x, res = ans[0], ans[1]
    gx, gres, gs = g[0], g[1], g[3]
    pinv = np.linalg.pinv(a, rcond=_lstsq_rcond(a, rcond))
    vector = np.ndim(b) == 1
    outer = gx[..., :, None] * b if vector else gx @ swap_last(b)
    ga = _pinv_cotangent(outer, pinv, a)
    if np.size(res) and not _absent(gres):
        # Envelope theorem: d min ||b - a x||^2 / da = -2 r x^T at the minimiser.
        r = b - a @ x
        if vector:
            ga = ga - 2 * gres[..., None] * (r[:, None] * x)
        else:
            ga = ga - 2 * ((r * gres[..., None, :]) @ swap_last(x))
    if not _absent(gs):
        ga = ga + _svdvals_cotangent(gs, a)
    return ga


def _lstsq_b(g, ans, a, b, rcond=None):
    _real_only("numpy.linalg.lstsq", a)
    x, res = ans[0], ans[1]
    gx, gres = g[0], g[1]
    pinv = np.linalg.pinv(a, rcond=_lstsq_rcond(a, rcond))
    vector = np.ndim(b) == 1
    gb = gx @ pinv if vector else swap_last(pinv) @ gx
    if np.size(res) and not _absent(gres):
        r = b - a @ x
        gb = gb + 2 * (r * (gres if vector else gres[..., None, :]))
    return gb


defvjp(
    np.linalg.lstsq,
    _lstsq_a,
    _lstsq_b,
    note="solution, residuals and singular values are differentiated (constant rank); rank is an integer",
)


# ---------------------------------------------------------------- Cholesky
def _lower_gram(r: np.ndarray) -> np.ndarray:
    """``r.T @ r`` of a lower triangular 2-D ``r``, exactly symmetric, skipping its zero blocks.

    ``[[A, 0], [C, D]]^T [[A, 0], [C, D]] = [[A^T A + C^T C, C^T D], [D^T C, D^T D]]``, the
    triangular Gram blocks by recursion (LAPACK's ``lauum``): about ``n^3 / 2`` flops
    against ``n^3`` for one ``syrk``.  Every block product with one operand transposed
    (``X.T @ X``) runs as NumPy's ``syrk``, which writes both triangles alike.
    """
    n = r.shape[0]
    if n <= _ROWS_MAX:  # one syrk was faster up to here (n = 400: 0.74 against 0.90 ms, 2 idle cores)
        return swap_last(r) @ r
    h = n // 2
    c = r[h:, :h]
    out = np.empty((n, n), dtype=r.dtype)
    out[:h, :h] = _lower_gram(r[:h, :h]) + swap_last(c) @ c
    out[h:, :h] = swap_last(r[h:, h:]) @ c
    out[:h, h:] = swap_last(out[h:, :h])
    out[h:, h:] = _lower_gram(r[h:, h:])
    return out


@functools.lru_cache(maxsize=64)
def _twice_below(n: int, dtype: np.dtype) -> np.ndarray:
    """2 strictly below the diagonal, 1 on it, 0 above: ``_tri_cotangent`` of a symmetric ``m`` is ``m`` times this."""
    m = 2.0 * np.tri(n, k=-1, dtype=dtype) + np.eye(n, dtype=dtype)
    m.flags.writeable = False
    return m


def _diagonal_only(g: Any) -> Any:
    """The diagonal of a plain square 2-D ``g`` whose entries off it are all zero, else ``None``.

    One O(n^2) pass (what ``sum(log(diag(cholesky(a))))`` sends back is such a ``g``).
    """
    if type(g) is not np.ndarray or g.ndim != 2 or g.shape[0] != g.shape[1] or g.shape[0] <= _TRI_BLOCK:
        return None
    d = np.diagonal(g)
    return d.copy() if np.count_nonzero(g) == np.count_nonzero(d) else None


def _complex_cholesky_cotangent(g, ans, upper):
    """Cotangent of a Hermitian ``a = L L^H`` (``L`` or ``U = L^H`` given), before the triangle map.

    With ``G = conj(g)`` (the gradient in ``dL -> Re tr(G^H dL)``), ``dL = L Phi(L^-1 dA L^-H)``
    (``Phi``: lower triangle, half the diagonal, which is real) gives
    ``L^-H Phi(L^H G_L) L^-1``; conjugated back to tapegrad's convention.
    """
    low = _ct(ans) if upper else ans
    g_low = swap_last(g) if upper else _cj(g)  # G_L = G_U^H = conj(g)^H
    n = np.shape(low)[-1]
    p = (_ct(low) @ g_low) * follow_library(_half_tri(n, True, _real_dtype(low)), strip(g_low))
    left = np.linalg.solve(_ct(low), p)  # L^-H P
    return _cj(_ct(np.linalg.solve(_ct(low), _ct(left))))  # (L^-H (L^-H P)^H)^H = L^-H P L^-1


def _cholesky_vjp(g, ans, a, upper=False):
    if np.iscomplexobj(a) or np.iscomplexobj(ans):
        return _tri_cotangent(_complex_cholesky_cotangent(g, ans, upper), not upper)
    low, g_low = (swap_last(ans), swap_last(g)) if upper else (ans, g)
    n = np.shape(a)[-1]
    d = None if upper else _diagonal_only(g)
    if d is not None and _plain(ans):
        # log det a = 2 sum(log(diag(L))): a diagonal cotangent.  Then phi(L^T g) is the
        # diagonal p = diag(L) d / 2, and L^-T diag(p) L^-1 is one product with inv(L)
        # (shared with solve(a, b) and slogdet(a) VJPs of this sweep), a symmetric
        # one (syrk, half a general product's flops) when every p >= 0.
        p = (np.diagonal(ans) * d) * 0.5
        inv_low = shared(_lower_inverse, ans)
        if np.all(p >= 0):
            # exactly symmetric: m + m^T is 2 m, so the triangle needs no transposed pass
            gram = _lower_gram(np.sqrt(p)[:, None] * inv_low)
            return gram * follow_library(_twice_below(n, _real_dtype(a)), gram)
        return _tri_cotangent((swap_last(inv_low) * p) @ inv_low, True)
    # dL = L phi(L^-1 dA L^-T), phi = lower triangle with half diagonal (self-adjoint).
    p = (swap_last(low) @ g_low) * follow_library(_half_tri(n, True, _real_dtype(a)), strip(g_low))
    # inv(L) when a slogdet(a) / det(a) VJP of this sweep has formed it already
    # (_inverse_from_cholesky; it meets lower factors only, as upper=True is a call
    # with a keyword, never remembered): two products.  Otherwise two triangular
    # solves (as fast as forming inv(L) and multiplying).
    inv_low = None if upper else shared_so_far(_lower_inverse, ans)
    if inv_low is not None and _plain(p):
        return _tri_cotangent(swap_last(inv_low) @ p @ inv_low, True)
    if not upper:
        shared(_solved_without_inverse, ans)  # a solve(a, b) VJP after this one: no inv(L) for it alone
    left = tri_solve(low, p, lower=True, trans=True)
    return _tri_cotangent(swap_last(tri_solve(low, swap_last(left), lower=True, trans=True)), not upper)


# remember: slogdet(a) / det(a) of the same matrix invert it through the factor.
defvjp(np.linalg.cholesky, _cholesky_vjp, note="gradient on the triangle NumPy reads", remember=True)


# ---------------------------------------------------------------- QR
def _qr_reduced_impl(a):
    return np.linalg.qr(a, mode="reduced")


qr_reduced = primitive(_qr_reduced_impl)


def _qr_tall_cotangent(q, r, gq, gr):
    """Gradient of ``a = q r`` with square ``r`` (``m >= n``), all in the conjugate convention.

    ``G = conj(g)`` (the gradient in ``dX -> Re tr(G^H dX)``): with
    ``M = R G_R^H - G_Q^H Q``, ``G_A = (G_Q + Q copyltu(M)) R^-H`` where ``copyltu``
    mirrors the strict lower triangle onto the upper one, conjugated, and keeps the
    diagonal's real part.  LAPACK's complex ``R`` has a real diagonal: that fixes
    the phases of ``Q``'s columns, so the complex QR is differentiable as it is.
    """
    n = np.shape(r)[-1]
    m = r @ _ct(gr) - _ct(gq) @ q
    dtype = _real_dtype(r)
    strict = m * np.tri(n, k=-1, dtype=dtype)
    copyltu = strict + _ct(strict) + np.real(m) * np.eye(n, dtype=dtype)
    # B R^-H = (R^-1 B^H)^H: one triangular solve instead of inv(R) and a product.
    return _ct(tri_solve(r, _ct(gq + q @ copyltu), lower=False))


def _qr_vjp(g, ans, a):
    q, r = ans
    gq, gr = _cj(g[0]), _cj(g[1])
    m, n = np.shape(a)[-2:]
    if m >= n:
        return _cj(_qr_tall_cotangent(q, r, gq, gr))
    # Wide: a = [x | y] with x = q r1 square, y = q r2 (so r2 = q^H y).
    gr1, gr2 = gr[..., :, :m], gr[..., :, m:]
    gy = q @ gr2
    gx = _qr_tall_cotangent(q, r[..., :, :m], gq + a[..., :, m:] @ _ct(gr2), gr1)
    return _cj(np.concatenate([gx, gy], axis=-1))


defvjp(qr_reduced, _qr_vjp)


def _qr(a, mode="reduced"):
    if mode in ("reduced", "r"):
        res = qr_reduced(a)
        return res if mode == "reduced" else res[1]
    m, n = np.shape(a)[-2:]
    if mode == "complete" and m <= n:
        return qr_reduced(a)
    raise _not_differentiable(
        "numpy.linalg.qr",
        f"mode={mode!r}. Only 'reduced', 'r', and 'complete' for m <= n are differentiable "
        "(the extra columns of a complete Q are not unique).",
    )


defcomposite(np.linalg.qr, _qr)


# ---------------------------------------------------------------- symmetric eigenproblem
def _spectral_f(w, like):
    """``F_ij = 1 / (w_j - w_i)`` off the diagonal, 0 on it (inf where values repeat)."""
    eye = _eye(np.shape(w)[-1], like)
    return 1 / (w[..., None, :] - w[..., :, None] + eye) - eye


def eigh_cotangent(name, gw, gv, w, v):
    """Cotangent of the Hermitian matrix ``S = V diag(w) V^H`` (a full matrix, before the triangle map).

    In the conjugate convention (``G = conj(g)``): ``V (diag(g_w) + F o (V^H G_V)) V^H``,
    ``F_ij = 1 / (w_j - w_i)``, conjugated back.  A complex ``V`` is fixed only up
    to a phase per column: the cotangent must not depend on it
    (``Im diag(V^H G_V) = 0``, :func:`check_phase_free`); then the phase term of
    ``dV`` drops out and the result is exact.
    """
    n = np.shape(v)[-1]
    inner = np.real(gw)[..., None, :] * _eye(n, v)
    if not _absent(gv):
        j = _ct(v) @ _cj(gv)
        if np.iscomplexobj(j):
            check_phase_free(name, np.imag(np.diagonal(strip(j), axis1=-2, axis2=-1)),
                             np.linalg.norm(strip(gv), axis=-2), "eigenvectors")
        inner = inner + _spectral_f(w, v) * j
    return _cj((v @ inner) @ _ct(v))


def _eigh_vjp(g, ans, a, UPLO="L"):
    w, v = ans
    gw, gv = g
    return _tri_cotangent(eigh_cotangent("numpy.linalg.eigh", gw, gv, w, v), UPLO.upper() == "L")


defvjp(
    np.linalg.eigh,
    _eigh_vjp,
    note="gradient on the triangle UPLO names; eigenvector cotangents give inf/nan at repeated eigenvalues; "
    "complex eigenvectors: phase-invariant functions only",
)
defcomposite(np.linalg.eigvalsh, lambda a, UPLO="L": np.linalg.eigh(a, UPLO=UPLO)[0])


# ---------------------------------------------------------------- general eigenproblem
def eig_cotangent(name, gw, gv, w, v):
    """Cotangent of ``a`` for ``w, v = eig(a)``, eigenvectors of unit norm (LAPACK's, NumPy's and SciPy's).

    In eigen coordinates ``C = V^-1 dA V``: ``dw = diag(C)`` and, with
    ``F_ij = 1 / (w_j - w_i)``, ``dV = W - V diag(diag(V^H W))``, ``W = V (F o C)``:
    each column moves orthogonally to itself, which keeps its norm and takes the
    phase gauge ``Im(v_i^H dv_i) = 0``.  Transposed (tapegrad's convention, no
    conjugate on the holomorphic part): with ``H = V^T g_V``,
    ``V^-T (diag(g_w) + F o (H - V^T conj(V) diag(diag H))) V^T``.  The result is
    exact for functions that do not depend on the eigenvectors' phases
    (``Im diag H = 0``, checked); real eigenvectors (real ``a`` with real
    eigenvalues) have only a sign, which is locally constant.
    """
    vt = swap_last(v)
    inner = gw[..., None, :] * _eye(np.shape(v)[-1], v)
    if not _absent(gv):
        h = vt @ gv
        d = np.diagonal(h, axis1=-2, axis2=-1)
        if np.iscomplexobj(h):
            check_phase_free(name, np.imag(strip(d)), np.linalg.norm(strip(gv), axis=-2), "eigenvectors")
        inner = inner + _spectral_f(w, v) * (h - (vt @ _cj(v)) * d[..., None, :])
    return np.linalg.solve(vt, inner @ vt)


def _eig_vjp(g, ans, a):
    w, v = ans
    gw, gv = g
    return eig_cotangent("numpy.linalg.eig", gw, gv, w, v)


defvjp(np.linalg.eig, _eig_vjp,
       note="unit-norm eigenvectors: phase-invariant functions of complex ones; inf/nan at repeated eigenvalues")
defcomposite(np.linalg.eigvals, lambda a: np.linalg.eig(a)[0])


# ---------------------------------------------------------------- SVD
def _svd_reduced_impl(a):
    return np.linalg.svd(a, full_matrices=False)


svd_reduced = primitive(_svd_reduced_impl)


def svd_cotangent(name, gu, gs, gvh, u, s, vh):
    """Cotangent of ``a = u diag(s) vh`` (thin factors, ``k = min(m, n)``).

    In the conjugate convention (``G = conj(g)``, ``G_V = G_vh^H``), with
    ``J_U = U^H G_U``, ``J_V = V^H G_V``, ``K = F o J`` and ``F_ij = 1 / (s_j^2 - s_i^2)``:
    ``U (diag(g_s) + (K_U + K_U^H) S + S (K_V + K_V^H) + i diag(Im(J_U - J_V) / 2s)) V^H``
    plus ``(I - U U^H) G_U S^-1 V^H`` (tall) and ``U S^-1 G_V^H (I - V V^H)`` (wide).
    Complex ``u_i, v_i`` share one arbitrary phase: the cotangent must not depend on
    it (``Im diag(J_U + J_V) = 0``, :func:`check_phase_free`).  For real input every
    conjugate is the identity and the formula is the usual real one.
    """
    m, n = np.shape(u)[-2], np.shape(vh)[-1]
    k = np.shape(s)[-1]
    inner = np.real(gs)[..., None, :] * _eye(k, s)
    use_u, use_v = not _absent(gu), not _absent(gvh)
    if not (use_u or use_v):
        return _cj((u @ inner) @ vh)
    gu_c, gv_c = _cj(gu), swap_last(gvh)  # G_U and G_V = G_vh^H = conj(gvh)^H
    f = _spectral_f(s * s, s)
    scale = 0
    if use_u:
        ju = _ct(u) @ gu_c
        ku = f * ju
        inner = inner + (ku + _ct(ku)) * s[..., None, :]
    if use_v:
        jv = vh @ gv_c
        kv = f * jv
        inner = inner + s[..., :, None] * (kv + _ct(kv))
    if np.iscomplexobj(u) or np.iscomplexobj(vh):
        # The relative phase of u_i and v_i is fixed by s_i > 0 real: (U^H dU - V^H dV)_ii = i Im(C_ii) / s_i
        # with C = U^H dA V, shared half and half; the common phase is the gauge.
        im_u = np.imag(np.diagonal(ju, axis1=-2, axis2=-1)) if use_u else 0
        im_v = np.imag(np.diagonal(jv, axis1=-2, axis2=-1)) if use_v else 0
        if use_u:
            scale = scale + np.linalg.norm(strip(gu), axis=-2)
        if use_v:
            scale = scale + np.linalg.norm(strip(gvh), axis=-1)
        check_phase_free(name, strip(im_u) + strip(im_v), scale, "singular vectors")
        inner = inner + (1j * (im_u - im_v) / (2 * s))[..., None, :] * _eye(k, s)
    ga = (u @ inner) @ vh
    if use_u and m > k:
        gu_s = gu_c / s[..., None, :]
        ga = ga + (gu_s - u @ (_ct(u) @ gu_s)) @ vh
    if use_v and n > k:
        gvh_s = _cj(gvh) / s[..., :, None]  # G_V^H S^-1, by rows
        ga = ga + u @ (gvh_s - (gvh_s @ _ct(vh)) @ vh)
    return _cj(ga)


def _svd_vjp(g, ans, a):
    u, s, vh = ans
    gu, gs, gvh = g
    return svd_cotangent("numpy.linalg.svd", gu, gs, gvh, u, s, vh)


defvjp(svd_reduced, _svd_vjp)


def _hermitian_svd(a, compute_uv):
    """NumPy's ``svd(a, hermitian=True)``: its ``eigh`` (the lower triangle), signs and order, traced."""
    if not compute_uv:
        return np.sort(np.abs(np.linalg.eigvalsh(a)), axis=-1)[..., ::-1]
    w, v = np.linalg.eigh(a)
    sign = np.copysign(1.0, strip(w))  # a constant: +1 or -1 (a zero eigenvalue counts as +1)
    order = np.argsort(np.abs(strip(w)), axis=-1)[..., ::-1]  # descending, as NumPy orders them
    s = np.take_along_axis(np.abs(w), order, axis=-1)
    u = np.take_along_axis(v, order[..., None, :], axis=-1)
    sign = np.take_along_axis(sign, order, axis=-1)
    vh = np.conjugate(np.swapaxes(u * sign[..., None, :], -1, -2))
    return _SVD_RESULT(u, s, vh)


_SVD_RESULT = type(np.linalg.svd(np.eye(1)))  # NumPy's named tuple (u, S, Vh)


def _svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    if hermitian:
        # NumPy computes it from eigh of the lower triangle: the same steps on the tracers.
        return _hermitian_svd(a, compute_uv)
    res = svd_reduced(a)
    if not compute_uv:
        return res[1]
    m, n = np.shape(a)[-2:]
    if full_matrices and m != n:
        raise _not_differentiable(
            "numpy.linalg.svd",
            "full_matrices=True for a non-square matrix (the extra singular vectors are not unique); "
            "pass full_matrices=False.",
        )
    return res


defcomposite(
    np.linalg.svd,
    _svd,
    note="full_matrices=False (or square); vector cotangents give inf/nan at repeated or zero singular values",
)
defcomposite(np.linalg.svdvals, lambda x: svd_reduced(x)[1])


# ---------------------------------------------------------------- norms
def _pnorm_impl(x, p, axis, keepdims):
    return np.linalg.vector_norm(x, ord=p, axis=axis, keepdims=keepdims)


pnorm = primitive(_pnorm_impl)


def _pnorm_vjp(g, ans, x, p, axis, keepdims):
    shape = np.shape(x)
    r = ans if keepdims else np.expand_dims(ans, axis)
    safe = np.where(r == 0, 1, r)
    if p == 2:
        d = (np.conjugate(x) if np.iscomplexobj(x) else x) / safe
    else:
        ax = np.abs(x)
        nonzero = ax != 0
        ax_safe = np.where(nonzero, ax, 1)
        unit = np.conjugate(x) / ax_safe if np.iscomplexobj(x) else np.sign(x)
        d = np.where(nonzero, unit * (ax_safe / safe) ** (p - 1), 0)
    return unreduce(g, shape, axis, keepdims) * d


defvjp(pnorm, _pnorm_vjp, note="subgradient 0 at the zero vector (and at zero entries for p < 1)", sparse=True)


def _whole_norm_impl(x, keepdims):
    return np.linalg.norm(x, keepdims=keepdims)  # NumPy's own sqrt(x . x): its value, bit for bit


whole_norm = primitive(_whole_norm_impl)
defvjp(
    whole_norm,
    lambda g, ans, x, keepdims: _pnorm_vjp(g, ans, x, 2, tuple(range(-np.ndim(x), 0)), keepdims),
    None,
    note="subgradient 0 at the zero vector",
    sparse=True,
)


def _vector_norm(x, ord, axis, keepdims):
    axis = negative_axes(axis, np.ndim(x))
    if ord is None or ord == 2:
        return pnorm(x, p=2, axis=axis, keepdims=keepdims)
    if isinstance(ord, str):
        raise ValueError(f"Invalid norm order '{ord}' for vectors")
    if ord == np.inf:
        return np.max(np.abs(x), axis=axis, keepdims=keepdims)
    if ord == -np.inf:
        return np.min(np.abs(x), axis=axis, keepdims=keepdims)
    if ord == 0:  # a count: piecewise constant
        return np.linalg.vector_norm(strip(x), ord=0, axis=axis, keepdims=keepdims)
    if ord == 1:
        return np.sum(np.abs(x), axis=axis, keepdims=keepdims)
    return pnorm(x, p=float(ord), axis=axis, keepdims=keepdims)


def _matrix_norm(x, ord, axis, keepdims):
    nd = np.ndim(x)
    row, col = (int(a) % nd for a in axis)
    if row == col:
        raise ValueError("Duplicate axes given.")
    if ord is None or ord in ("fro", "f"):
        return pnorm(x, p=2, axis=negative_axes((row, col), nd), keepdims=keepdims)
    if ord in (2, -2, "nuc"):
        s = np.linalg.svd(np.moveaxis(x, (row, col), (-2, -1)), compute_uv=False)
        out = np.sum(s, axis=-1) if ord == "nuc" else s[..., 0 if ord == 2 else -1]
        return np.expand_dims(out, (row, col)) if keepdims else out
    if ord in (1, -1, np.inf, -np.inf):
        inner, outer = (row, col) if ord in (1, -1) else (col, row)
        extremum = np.max if ord > 0 else np.min
        out = extremum(np.sum(np.abs(x), axis=inner, keepdims=True), axis=outer, keepdims=True)
        return out if keepdims else np.squeeze(out, axis=(row, col))
    raise ValueError("Invalid norm order for matrices.")


def _norm(x, ord=None, axis=None, keepdims=False):
    nd = np.ndim(x)
    if axis is None:
        if ord is None or (ord in ("f", "fro") and nd == 2) or (ord == 2 and nd == 1):
            return whole_norm(x, keepdims)
        axis = tuple(range(nd))
    elif not isinstance(axis, tuple):
        axis = (int(axis),)
    if len(axis) == 1:
        return _vector_norm(x, ord, axis, keepdims)
    if len(axis) == 2:
        return _matrix_norm(x, ord, axis, keepdims)
    raise ValueError("Improper number of dimensions to norm.")


defcomposite(np.linalg.norm, _norm, note="subgradient 0 at zero")
defcomposite(
    np.linalg.vector_norm,
    lambda x, axis=None, keepdims=False, ord=2: _vector_norm(x, ord, axis, keepdims),
    note="subgradient 0 at zero",
)
defcomposite(
    np.linalg.matrix_norm,
    lambda x, keepdims=False, ord="fro": _matrix_norm(x, ord, (-2, -1), keepdims),
)


# NumPy before 2.3 returns cond(x, p) of a complex x in x's complex dtype for p other than
# None and +-2 (a real number with a zero imaginary part): the traced value follows it.
_COND_KEEPS_COMPLEX = np.iscomplexobj(np.linalg.cond(np.eye(1, dtype=np.complex128), "fro"))


def _cond(x, p=None):
    if p is None or (not isinstance(p, str) and p in (2, -2)):
        s = np.linalg.svd(x, compute_uv=False)
        return s[..., -1] / s[..., 0] if p == -2 else s[..., 0] / s[..., -1]
    out = _matrix_norm(x, p, (-2, -1), False) * _matrix_norm(np.linalg.inv(x), p, (-2, -1), False)
    if _COND_KEEPS_COMPLEX and np.iscomplexobj(x):
        out = np.astype(out, np.result_type(x))
    return out


defcomposite(np.linalg.cond, _cond)


# ---------------------------------------------------------------- composites of the above
def _matrix_power(a, n):
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError("exponent must be an integer") from None
    if n == 0:  # the identity: NumPy returns it as integers, and it carries no gradient
        return np.linalg.matrix_power(strip(a), 0)
    if n < 0:
        a, n = np.linalg.inv(a), -n
    result, power = None, a
    while True:  # binary powering
        if n & 1:
            result = power if result is None else result @ power
        n >>= 1
        if not n:
            return result
        power = power @ power


def _tensorinv(a, ind=2):
    shape = np.shape(a)
    if ind <= 0:
        raise ValueError("Invalid ind argument.")
    rows = int(np.prod(shape[ind:], dtype=np.int64))
    inv = np.linalg.inv(np.reshape(a, (rows, -1)))
    return np.reshape(inv, shape[ind:] + shape[:ind])


def _tensorsolve(a, b, axes=None):
    nd = np.ndim(a)
    if axes is not None:
        order = list(range(nd))
        for k in axes:
            order.remove(k)
            order.insert(nd, k)
        a = np.transpose(a, order)
    x_shape = np.shape(a)[-(nd - np.ndim(b)) :]
    size = int(np.prod(x_shape, dtype=np.int64))
    if int(np.prod(np.shape(a), dtype=np.int64)) != size * size:
        raise np.linalg.LinAlgError(
            "Input arrays must satisfy the requirement prod(a.shape[b.ndim:]) == prod(a.shape[:b.ndim])"
        )
    x = np.linalg.solve(np.reshape(a, (size, size)), np.ravel(b))
    return np.reshape(x, x_shape)


defcomposite(np.linalg.matrix_power, _matrix_power)
defcomposite(np.linalg.tensorinv, _tensorinv)
defcomposite(np.linalg.tensorsolve, _tensorsolve)
defconstant(np.linalg.matrix_rank)
