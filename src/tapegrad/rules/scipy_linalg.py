"""Derivatives of ``scipy.linalg``, reached through SciPy's door (:mod:`tapegrad.interception`).

How the rules are built
-----------------------
Most functions are *primitives whose forward pass is SciPy's own call*: the
door hands a call with tracers to the rule, the rule runs SciPy on the raw
values (so the numbers, the warnings, ``check_finite`` and every error are
SciPy's), and records one node.  The VJPs are written with NumPy calls and
with ``scipy.linalg`` calls: on plain cotangents those run SciPy's code, on
traced ones (a Hessian differentiates the recorded VJP) they come back
through the door to these very rules, so second order needs nothing more.

* Decompositions (``cholesky``, ``lu``, ``qr``, ``eigh``, ``svd``, ``eig``,
  ``polar``, ``schur``) have closed-form VJPs written with their outputs, so
  the gradient belongs to exactly the factors SciPy returned (its signs, its
  pivoting), and a second derivative differentiates those formulas.
* Primary matrix functions (``expm``, ``logm``, ``sqrtm``, ``cosm``, ...,
  ``fractional_matrix_power``) use one identity: for such an ``f``,
  ``f([[A, E], [0, A]]) = [[f(A), L_f(A, E)], [0, f(A)]]`` where ``L_f`` is
  the Frechet derivative, and ``L_f(A, .)`` has the adjoint ``L_f(A^T, .)``.
  So the VJP is the upper right block of ``f([[A^T, G], [0, A^T]])``;
  for ``logm``, ``sqrtm`` and ``fractional_matrix_power`` (a branch cut) it
  is computed from ``A``'s own Schur form, so that every copy of an
  eigenvalue in the block matrix takes SciPy's branch, at every order
  (:mod:`tapegrad.rules.scipy_matfun`).
* Solvers (``solve``, ``solve_triangular``, ``cho_solve``, ``lu_solve``,
  ``solve_banded``, ``solveh_banded``, Sylvester and Lyapunov equations)
  differentiate the equation: the cotangent of the right-hand side solves the
  transposed equation, and the matrix gets minus its product with the solution.
* Matrix builders whose entries are copies of the inputs (``toeplitz``,
  ``hankel``, ``circulant``, ``block_diag``, ``leslie``,
  ``convolution_matrix``) are composites: SciPy builds the matrix once from
  numbered placeholders, which tells where each input entry lands, and the
  traced result gathers the inputs there (checked against SciPy's own result).

Where SciPy reads one triangle (``assume_a='pos'``, ``cholesky``, ``eigh``,
``solveh_banded``, ``pinvh``) the gradient lives on that triangle, as in
:mod:`tapegrad.rules.linalg`; where it reads less than the whole matrix
(``assume_a='diagonal'``, ``'tridiagonal'``, triangular solves, a unit
diagonal) the entries it does not read get no gradient.

Eigen and Schur vectors, complex input: ``eig`` (unit-norm right eigenvectors,
as LAPACK returns them), ``eigh``, ``svd`` and ``schur`` follow
:mod:`tapegrad.rules.linalg`.  Complex vectors are fixed only up to a phase
each (Schur vectors: ``Z -> Z D``, ``T -> D^H T D``): a function of them is
differentiated if it does not depend on the phases (checked on every cotangent,
else :class:`~tapegrad.errors.NonDifferentiableArgumentError`), and then at every
order.  ``schur`` takes the complex form and the real one (2 x 2 blocks
included, each adding the rotation that keeps its diagonal equal; a normal
block, ``b + c = 0``, is refused: its rotation is free at the point and fixed
by a direction-dependent amount nearby), with any ``sort``.  Real vector signs
(and the signs that real Schur vectors give ``T``'s off-diagonal entries) are
LAPACK's: SciPy can flip them under a perturbation of 1e-12, so only
sign-invariant functions have finite-difference derivatives; the rules give
the derivative of the factors SciPy returned.  ``signm`` has its own rule: the
Sylvester equation ``(S A) L + L (S A) = E - S E S`` of its Frechet derivative.

Decompositions (``cholesky``, ``qr``, ``eigh``, ``eigvalsh``, ``svd``,
``svdvals``, ``eig``, ``eigvals``, ``schur``), ``inv``, ``det``, ``solve``
(general, symmetric, triangular), ``solve_triangular``, Sylvester equations,
``signm`` and the matrix functions take complex input (Hermitian where LAPACK
reads a triangle: the gradient is on that triangle, with a real diagonal);
``lu``, ``cho_factor``/``cho_solve``, ``polar``, ``rq``, ``pinv``, ``lstsq``,
``null_space``, ``eigh_tridiagonal``, Lyapunov, Riccati and the banded solvers
are differentiated for real input.
``overwrite_*`` flags are cleared before SciPy runs on a tracer's raw value
(see :func:`_scipy_rule`).  What is not differentiable raises
:class:`~tapegrad.errors.NonDifferentiableArgumentError` naming the function and
the argument; functions without a rule here still raise
:class:`~tapegrad.errors.GradientDroppedError` where SciPy converts a tracer.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import scipy.linalg as sl

from ..dispatch import primitive, strip, strip_all
from ..errors import NonDifferentiableArgumentError
from ..registry import CONSTANT_ARG, defcomposite, defconstant, defvjp, intercepted
from ._util import may_be_nonzero, swap_last as _T
from .linalg import (
    _complex_cholesky_cotangent,
    _cj,
    _ct as _H,
    check_phase_free,
    eig_cotangent,
    eigh_cotangent,
    svd_cotangent,
)
from .scipy_matfun import block_adjoint as _block_adjoint, branch_adjoint

# ---------------------------------------------------------------- helpers


def _scipy_rule(fun: Any, *vjps: Any, note: str = "") -> None:
    """Register ``vjps`` for the SciPy function ``fun``, run as one node whose forward pass is SciPy's call.

    SciPy's ``overwrite_*`` flags would let LAPACK write over the raw value a
    tracer holds (the caller's array, and what the VJPs read): for a function
    with such flags the door's rule is a composite that clears them and calls
    a private primitive holding the VJPs.  Without them, the function itself
    is the primitive.
    """
    sig = inspect.signature(fun)
    flags = [name for name in sig.parameters if name.startswith("overwrite_")]
    if not flags:
        defvjp(intercepted(fun), *vjps, note=note)
        return

    def forward(*args: Any, **kwargs: Any) -> Any:
        return fun(*args, **kwargs)

    forward.__name__, forward.__qualname__, forward.__module__ = fun.__name__, fun.__qualname__, fun.__module__
    forward.__signature__ = sig  # binding traced keywords (tapegrad.binding) sees SciPy's parameters
    node = primitive(forward)
    defvjp(node, *vjps, note=note)

    def impl(*args: Any, **kwargs: Any) -> Any:
        bound = sig.bind(*args, **kwargs)
        for name in flags:
            if bound.arguments.get(name):
                bound.arguments[name] = False
        return node(*bound.args, **bound.kwargs)

    defcomposite(intercepted(fun), impl, note=note)




def _refuse(name: str, why: str) -> NonDifferentiableArgumentError:
    return NonDifferentiableArgumentError(f"tapegrad cannot differentiate scipy.linalg.{name} here: {why}")


def _real_only(name: str, *xs: Any) -> None:
    if any(np.iscomplexobj(x) for x in xs if x is not None):
        raise _refuse(name, "complex input (tapegrad differentiates it for real matrices only).")


def _absent(g: Any) -> bool:
    """A cotangent that is a plain constant zero (an output nobody used)."""
    return type(g) is np.ndarray and not g.any()


def _real_dtype(x: Any) -> np.dtype:
    return np.finfo(np.result_type(x)).dtype


def _eye(n: int, like: Any) -> np.ndarray:
    return np.eye(n, dtype=_real_dtype(like))


def _onto_triangle(m: Any, lower: bool) -> Any:
    """The gradient of ``f(S)``, ``S`` the symmetric matrix read from one triangle, given ``m = df/dS``.

    Off-diagonal entries of the read triangle stand for two entries of ``S``
    (``m_ij + m_ji``), the diagonal for one, the other triangle for none.
    """
    n = np.shape(m)[-1]
    half = np.tri(n, dtype=_real_dtype(m)) - 0.5 * np.eye(n, dtype=_real_dtype(m))
    return (m + _T(m)) * (half if lower else half.T)


def _onto_hermitian_triangle(m: Any, lower: bool) -> Any:
    """:func:`_onto_triangle` for a Hermitian matrix read from one triangle (LAPACK's ``he*`` / ``po*``).

    An off-diagonal entry stands for itself and its conjugate mirror
    (``m_ij + conj(m_ji)``); the diagonal's imaginary part is not read (its
    cotangent is ``Re m_ii``).  The same as :func:`_onto_triangle` for real ``m``.
    """
    n = np.shape(m)[-1]
    half = np.tri(n, dtype=_real_dtype(m)) - 0.5 * np.eye(n, dtype=_real_dtype(m))
    return (m + _H(m)) * (half if lower else half.T)


def _hermitian(a: Any, lower: bool) -> Any:
    """The Hermitian matrix LAPACK reads from one triangle of ``a`` (the diagonal as stored; its imaginary
    part is ignored by every reader)."""
    if lower:
        return np.tril(a) + _H(np.tril(a, -1))
    return np.triu(a) + _H(np.triu(a, 1))


def _symmetric(a: Any, lower: bool) -> Any:
    """The symmetric matrix SciPy reads from one triangle of ``a`` (traced-capable)."""
    if lower:
        return np.tril(a) + _T(np.tril(a, -1))
    return np.triu(a) + _T(np.triu(a, 1))


def _spectral(w: Any, like: Any) -> Any:
    """``F_ij = 1 / (w_j - w_i)`` off the diagonal, 0 on it (inf where eigenvalues repeat)."""
    eye = _eye(np.shape(w)[-1], like)
    return 1 / (w[..., None, :] - w[..., :, None] + eye) - eye


def _solve_right_t(b: Any, r: Any) -> Any:
    """``b @ inv(r).T`` = ``solve(r, b.T).T`` (traced-capable)."""
    return _T(np.linalg.solve(r, _T(b)))


def _as_columns(g: Any, n: int, core: int) -> tuple:
    """Fold the leading batch axes of a cotangent into extra right-hand-side columns.

    ``g`` is ``batch + (n,)`` (``core`` 1) or ``batch + (n, k)`` (``core`` 2);
    the result is ``(n, m)`` and the shape needed to undo it.
    """
    shape = np.shape(g)
    if len(shape) == core and core == 2:
        return g, None
    moved = np.moveaxis(g, -core, 0)
    return np.reshape(moved, (n, -1)), np.shape(moved)


def _from_columns(x: Any, moved_shape: Any, core: int) -> Any:
    if moved_shape is None:
        return x
    return np.moveaxis(np.reshape(x, moved_shape), 0, -core)


def _outer_grad(gb: Any, x: Any, vector: bool) -> Any:
    """``-gb x^T`` (the cotangent of ``A`` in ``A x = b`` given that of ``b``), batch axes kept."""
    if vector:
        return -(gb[..., :, None] * x[..., None, :])
    return -(gb @ _T(x))


# ---------------------------------------------------------------- inv, det, solve
_STRUCTURES = {
    None: "general", "general": "general", "gen": "general", "banded": "general",
    "diagonal": "diagonal", "tridiagonal": "tridiagonal",
    "upper triangular": "upper", "lower triangular": "lower",
    "pos": "pos", "positive definite": "pos", "sym": "sym", "symmetric": "sym",
    "her": "her", "hermitian": "her",
}


def _structure(name: str, assume_a: Any, a: Any) -> str:
    kind = _STRUCTURES.get(assume_a)
    if kind is None:  # SciPy's own call has already refused it; keep a clear message anyway
        raise _refuse(name, f"assume_a={assume_a!r} is not a structure SciPy knows.")
    if kind in ("pos", "her") and np.iscomplexobj(a):
        raise _refuse(name, f"assume_a={assume_a!r} on complex input (Hermitian solvers are not holomorphic).")
    return kind


def _effective(a: Any, kind: str, lower: bool) -> Any:
    """The matrix SciPy actually uses for ``a`` under ``assume_a`` (what it reads, as a full matrix)."""
    if kind == "general":
        return a
    n = np.shape(a)[-1]
    if kind == "diagonal":
        return a * _eye(n, a)
    if kind == "tridiagonal":
        return a * (np.tri(n, k=1, dtype=_real_dtype(a)) - np.tri(n, k=-2, dtype=_real_dtype(a)))
    if kind == "upper":
        return np.triu(a)
    if kind == "lower":
        return np.tril(a)
    return _symmetric(a, lower)


def _project(m: Any, kind: str, lower: bool) -> Any:
    """Map the gradient with respect to the effective matrix onto the entries of ``a`` SciPy read."""
    if kind in ("general", "diagonal", "tridiagonal", "upper", "lower"):
        return _effective(m, kind, lower)  # a linear mask: self-adjoint
    return _onto_triangle(m, lower)


def _inv_vjp(g, ans, a, overwrite_a=False, check_finite=True, *, assume_a=None, lower=False):
    kind = _structure("inv", assume_a, a)
    if kind == "diagonal":
        # SciPy 1.17 inverts the diagonal and returns the off-diagonal entries of a as they
        # were (copies): the gradient follows what it computes.
        eye = _eye(np.shape(a)[-1], a)
        return g * (1 - eye) - g * eye * _T(ans) ** 2
    at = _T(ans)
    return _project(-((at @ g) @ at), kind, lower)


def _det_vjp(g, ans, a, overwrite_a=False, check_finite=True):
    # d det = det * tr(A^-1 dA): the cotangent is g det A^-T (needs a nonsingular A).
    return (g * ans)[..., None, None] * _T(np.linalg.inv(a))


_scipy_rule(sl.inv, _inv_vjp)
_scipy_rule(sl.det, _det_vjp, note="uses inv(A): raises LinAlgError at a singular matrix")


def _solve_parts(g, ans, a, b, lower, assume_a, transposed):
    kind = _structure("solve", assume_a, a)
    eff = _effective(a, kind, lower)
    vector = np.ndim(b) == 1
    if np.shape(a)[-2:] == (1, 1):  # SciPy divides by a 1 x 1 matrix, whatever b's length
        return kind, vector, g / (eff[..., 0] if vector else eff)
    # op(A) x = b with op(A) = A or A^T: the cotangent of b solves op(A)^T gb = g.
    m = eff if transposed else _T(eff)
    gb = np.linalg.solve(m, g[..., None])[..., 0] if vector else np.linalg.solve(m, g)
    return kind, vector, gb


def _solve_a(g, ans, a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True,
             assume_a=None, transposed=False):
    kind, vector, gb = _solve_parts(g, ans, a, b, lower, assume_a, transposed)
    if np.shape(a)[-2:] == (1, 1):  # x = b / a: da gets -sum(gb * x)
        total = np.sum(gb * ans, axis=-1 if vector else (-2, -1))
        return -total[..., None, None]
    ga = _outer_grad(gb, ans, vector)
    return _project(_T(ga) if transposed else ga, kind, lower)


def _solve_b(g, ans, a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True,
             assume_a=None, transposed=False):
    return _solve_parts(g, ans, a, b, lower, assume_a, transposed)[2]


_scipy_rule(sl.solve, _solve_a, _solve_b, note="the gradient lives on the entries assume_a reads")


def _trans_flag(trans: Any) -> int:
    return {0: 0, 1: 1, 2: 2, "N": 0, "T": 1, "C": 2}[trans]


def _tri_matrix(a, lower, unit_diagonal):
    t = np.tril(a) if lower else np.triu(a)
    if unit_diagonal:  # the diagonal is not read: it is 1
        n = np.shape(a)[-1]
        eye = _eye(n, a)
        t = t * (1 - eye) + eye
    return t


def _tri_parts(g, a, b, trans, lower, unit_diagonal):
    flag = _trans_flag(trans)
    if flag == 2 and np.iscomplexobj(a):
        raise _refuse("solve_triangular", "trans='C' on complex input (not holomorphic); use trans='T'.")
    # op(T) x = b: gb solves op(T)^T gb = g, i.e. the other transpose flag with the same triangle.
    other = 0 if flag else 1
    vector = np.ndim(b) == 1
    cols, moved = _as_columns(g, np.shape(a)[-1], 1 if vector else 2)
    if np.ndim(a) == 2:
        gb = sl.solve_triangular(a, cols, trans=other, lower=lower, unit_diagonal=unit_diagonal)
        gb = _from_columns(gb, moved, 1 if vector else 2)
    else:  # a batch of matrices: SciPy broadcasts the batch axes
        rhs = g[..., None] if vector else g
        gb = sl.solve_triangular(a, rhs, trans=other, lower=lower, unit_diagonal=unit_diagonal)
        gb = gb[..., 0] if vector else gb
    return flag, vector, gb


def _solve_triangular_a(g, ans, a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                        check_finite=True):
    flag, vector, gb = _tri_parts(g, a, b, trans, lower, unit_diagonal)
    ga = _outer_grad(gb, ans, vector)
    ga = _T(ga) if flag else ga
    ga = np.tril(ga) if lower else np.triu(ga)
    if unit_diagonal:
        ga = ga * (1 - _eye(np.shape(a)[-1], a))
    return ga


def _solve_triangular_b(g, ans, a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                        check_finite=True):
    return _tri_parts(g, a, b, trans, lower, unit_diagonal)[2]


_scipy_rule(sl.solve_triangular, _solve_triangular_a, _solve_triangular_b,
       note="the gradient lives on the triangle read (not on a unit diagonal)")


# ---------------------------------------------------------------- Cholesky
def _cholesky_cotangent(factor: Any, gf: Any, lower: bool) -> Any:
    """The gradient ``df/dS`` (a full matrix, before the triangle map) of ``S = L L^T`` given ``df/dL``.

    ``dL = L Phi(L^-1 dS L^-T)``, Phi the lower triangle with half the diagonal,
    so ``df/dS = L^-T Phi(L^T G) L^-1``.
    """
    low, g_low = (factor, gf) if lower else (_T(factor), _T(gf))
    n = np.shape(low)[-1]
    half = np.tri(n, dtype=_real_dtype(low)) - 0.5 * np.eye(n, dtype=_real_dtype(low))
    p = (_T(low) @ g_low) * half
    left = np.linalg.solve(_T(low), p)  # L^-T P
    return _T(np.linalg.solve(_T(low), _T(left)))  # (L^-T (L^-T P)^T)^T = L^-T P L^-1


def _cholesky_vjp(g, ans, a, lower=False, overwrite_a=False, check_finite=True):
    if np.iscomplexobj(a) or np.iscomplexobj(ans):  # a = L L^H (lower) or U^H U
        return _onto_hermitian_triangle(_complex_cholesky_cotangent(g, ans, not lower), lower)
    return _onto_triangle(_cholesky_cotangent(ans, g, lower), lower)


_scipy_rule(sl.cholesky, _cholesky_vjp, note="gradient on the triangle read (Hermitian for complex input)")


_CHO_FACTOR_COPIES: list = []


def _cho_factor_copies() -> bool:
    """Whether ``cho_factor`` (without ``overwrite_a``) leaves ``a``'s entries in c's other triangle.

    SciPy < 1.18 copies them through; SciPy 1.18 zeros that triangle, as ``cholesky``
    does.  Asked of the running SciPy once, on a 2 x 2 matrix whose lower entry is 3.
    """
    if not _CHO_FACTOR_COPIES:
        c = sl.cho_factor(np.array([[4.0, 1.0], [3.0, 4.0]]), lower=False)[0]
        if c[1, 0] not in (0.0, 3.0):
            raise _refuse(
                "cho_factor",
                f"this SciPy leaves {c[1, 0]!r} in the triangle it does not factor where a holds 3.0 (neither a "
                "copy of a nor zero), so that triangle's derivative is unknown. Use scipy.linalg.cholesky.",
            )
        _CHO_FACTOR_COPIES.append(bool(c[1, 0] == 3.0))
    return _CHO_FACTOR_COPIES[0]


def _cho_factor_vjp(g, ans, a, lower=False, overwrite_a=False, check_finite=True):
    _real_only("cho_factor", a)
    gc = g[0]
    n = np.shape(a)[-1]
    read = np.tri(n, dtype=_real_dtype(a)) if lower else np.tri(n, dtype=_real_dtype(a)).T
    factor = ans[0] * read
    # The factor's triangle follows the Cholesky rule.  The other triangle of c holds a's own
    # entries, copied through (SciPy < 1.18), or zeros that depend on nothing (SciPy >= 1.18).
    ga = _onto_triangle(_cholesky_cotangent(factor, gc * read, lower), lower)
    return ga + gc * (1 - read) if _cho_factor_copies() else ga


_scipy_rule(sl.cho_factor, _cho_factor_vjp, note="c's other triangle is a copy of a's")


def _cho_parts(c_and_lower, b):
    c, lower = c_and_lower
    # cho_factor of a batch returns one flag per matrix (SciPy 1.18: an array even for one matrix).
    flags = np.unique(np.asarray(strip(lower), dtype=bool))
    if flags.size > 1:
        raise _refuse("cho_solve", "a batch of factors whose `lower` flags differ (call it once per flag).")
    lower = bool(flags[0]) if flags.size else False
    n = np.shape(c)[-1]
    read = np.tri(n, dtype=_real_dtype(c))
    factor = c * (read if lower else read.T)
    # A = L L^T (lower) or U^T U (upper).
    a = factor @ _T(factor) if lower else _T(factor) @ factor
    return factor, bool(lower), a, np.ndim(b) == 1


def _cho_solve_c(g, ans, c_and_lower, b, overwrite_b=False, check_finite=True):
    _real_only("cho_solve", c_and_lower[0], b)
    factor, lower, a, vector = _cho_parts(c_and_lower, b)
    gb = np.linalg.solve(a, g[..., None])[..., 0] if vector else np.linalg.solve(a, g)
    ga = _outer_grad(gb, ans, vector)
    sym = ga + _T(ga)
    # dA = dL L^T + L dL^T (lower) or dU^T U + U^T dU (upper).
    gc = np.tril(sym @ factor) if lower else np.triu(factor @ sym)
    return [gc, None]


def _cho_solve_b(g, ans, c_and_lower, b, overwrite_b=False, check_finite=True):
    _real_only("cho_solve", c_and_lower[0], b)
    _, _, a, vector = _cho_parts(c_and_lower, b)
    return np.linalg.solve(a, g[..., None])[..., 0] if vector else np.linalg.solve(a, g)


_scipy_rule(sl.cho_solve, _cho_solve_c, _cho_solve_b, note="gradient on the factor's triangle of c")


# ---------------------------------------------------------------- LU
def _lu_pads(lu_packed: Any) -> tuple:
    """``L`` (m x m, unit lower) and ``U`` (n x n, upper) of a packed ``m x n`` LU, padded with identity."""
    m, n = np.shape(lu_packed)[-2:]
    k = min(m, n)
    dt = _real_dtype(lu_packed)
    lo = np.tril(lu_packed[..., :, :k], -1)
    if m > k:
        lo = np.concatenate([lo, np.broadcast_to(np.zeros((m, m - k), dtype=dt), np.shape(lo)[:-1] + (m - k,))], -1)
    lo = lo + np.eye(m, dtype=dt)
    up = np.triu(lu_packed[..., :k, :])
    if n > k:
        extra = np.concatenate([np.zeros((n - k, k), dtype=dt), np.eye(n - k, dtype=dt)], -1)
        up = np.concatenate([up, np.broadcast_to(extra, np.shape(up)[:-2] + (n - k, n))], -2)
    return lo, up


def _packed_cotangent(lu_packed: Any, glu: Any) -> Any:
    """Cotangent of ``P^T A`` given that of the packed factors (``L`` strictly below, ``U`` on and above).

    The tangent is ``dLU = L tril(X, -1) + triu(X) U`` with ``X = L^-1 (P^T dA) U^-1``.
    """
    lo, up = _lu_pads(lu_packed)
    gx = np.tril(_T(lo) @ glu, -1) + np.triu(glu @ _T(up))
    return np.linalg.solve(_T(lo), _solve_right_t(gx, up))


def _take_rows(x: Any, perm: Any) -> Any:
    """``x[..., perm, :]`` where ``perm`` may be a batch of row orders (one per matrix)."""
    if np.ndim(perm) == 1:
        return x[..., perm, :]
    return np.take_along_axis(x, np.broadcast_to(perm[..., :, None], np.shape(x)), axis=-2)


def _unpermute_rows(g: Any, perm: Any) -> Any:
    """``h`` with ``h[..., perm, :] = g``: the cotangent of ``A`` from that of ``A[perm]``."""
    return _take_rows(g, np.argsort(perm, axis=-1))


def _perm_from_piv(piv: np.ndarray, m: int) -> np.ndarray:
    """Row order ``perm`` with ``A[perm] = L U`` from LAPACK's pivots (row i swapped with piv[i])."""
    piv = np.asarray(strip(piv))
    flat = piv.reshape(-1, piv.shape[-1])
    out = np.empty((flat.shape[0], m), dtype=np.intp)
    for row, p in enumerate(flat):
        order = np.arange(m)
        for i, j in enumerate(p):
            order[i], order[j] = order[j], order[i]
        out[row] = order
    return out.reshape(piv.shape[:-1] + (m,))


def _lu_factor_vjp(g, ans, a, overwrite_a=False, check_finite=True):
    _real_only("lu_factor", a)
    lu_packed, piv = ans
    perm = _perm_from_piv(piv, np.shape(a)[-2])
    return _unpermute_rows(_packed_cotangent(lu_packed, g[0]), perm)


_scipy_rule(sl.lu_factor, _lu_factor_vjp, note="pivoting is locally constant")


def _lu_vjp(g, ans, a, permute_l=False, overwrite_a=False, check_finite=True, p_indices=False):
    _real_only("lu", a)
    m, n = np.shape(a)[-2:]
    if permute_l:
        pl, u = ans
        gpl, gu = g
        # The same call without permute_l pivots alike: it gives the row order, and L = P^T (P L).
        perm = np.argsort(sl.lu(strip(a), p_indices=True)[0], axis=-1)
        lo, gl = _take_rows(pl, perm), _take_rows(gpl, perm)
    else:
        p, lo, u = ans
        _, gl, gu = g
        # A = P L U: (P^T A)[i] = A[perm[i]].  p_indices gives A = (L U)[p], so perm = argsort(p).
        perm = np.argsort(strip(p), axis=-1) if p_indices else np.argmax(strip(p), axis=-2)
    # Packed form: L strictly below the diagonal of an m x n array, U on and above.
    packed = _pack(lo, u, m, n)
    return _unpermute_rows(_packed_cotangent(packed, _pack(gl, gu, m, n)), perm)


def _pack(lo: Any, u: Any, m: int, n: int) -> Any:
    """``tril(L, -1) + triu(U)`` as one ``m x n`` array (L is m x k, U is k x n)."""
    k = min(m, n)
    lo_part = np.tril(lo, -1)
    if n > k:
        lo_part = np.concatenate([lo_part, np.zeros(np.shape(lo_part)[:-1] + (n - k,), dtype=np.result_type(lo))], -1)
    up_part = np.triu(u)
    if m > k:
        up_part = np.concatenate([up_part, np.zeros(np.shape(up_part)[:-2] + (m - k, n), dtype=np.result_type(u))], -2)
    return lo_part + up_part


_scipy_rule(sl.lu, _lu_vjp, note="pivoting is locally constant")


def _lu_solve_parts(lu_and_piv, b, g, trans):
    lu_packed, piv = lu_and_piv
    flag = _trans_flag(trans)
    vector = np.ndim(b) == 1
    cols, moved = _as_columns(g, np.shape(lu_packed)[-1], 1 if vector else 2)
    # op(A) x = b: gb solves op(A)^T gb = g (the other transpose, same factors).
    gb = sl.lu_solve((lu_packed, piv), cols, trans=0 if flag else 1)
    return flag, vector, _from_columns(gb, moved, 1 if vector else 2)


def _lu_solve_lu(g, ans, lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    _real_only("lu_solve", lu_and_piv[0], b)
    lu_packed, piv = lu_and_piv
    if np.ndim(lu_packed) != 2:
        raise _refuse("lu_solve", "a batch of factorizations (call it once per matrix).")
    flag, vector, gb = _lu_solve_parts(lu_and_piv, b, g, trans)
    ga = _outer_grad(gb, ans, vector)
    ga = _T(ga) if flag else ga
    # A = P L U: dA = P (dL U + L dU), so gL = tril(P^T gA U^T, -1) and gU = triu(L^T P^T gA).
    perm = _perm_from_piv(piv, np.shape(lu_packed)[-2])
    pga = ga[..., perm, :]
    lo, up = _lu_pads(lu_packed)
    return [np.tril(pga @ _T(up), -1) + np.triu(_T(lo) @ pga), None]


def _lu_solve_b(g, ans, lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    _real_only("lu_solve", lu_and_piv[0], b)
    if np.ndim(lu_and_piv[0]) != 2:
        raise _refuse("lu_solve", "a batch of factorizations (call it once per matrix).")
    return _lu_solve_parts(lu_and_piv, b, g, trans)[2]


_scipy_rule(sl.lu_solve, _lu_solve_lu, _lu_solve_b)


# ---------------------------------------------------------------- symmetric eigenproblems
def _subset_positions(w: Any, w_full: Any) -> Any:
    """Where each returned eigenvalue sits in the full (ascending) spectrum."""
    w, w_full = np.asarray(strip(w)), np.asarray(strip(w_full))
    return np.argmin(np.abs(w_full[..., :, None] - w[..., None, :]), axis=-2)


def _eigh_standard(g_w, g_v, w, v, a, lower, subset):
    """``df/dS`` for ``w, v = eigh(S)`` (a full matrix; the triangle map comes after).

    With every eigenpair: :func:`tapegrad.rules.linalg.eigh_cotangent`,
    ``V (diag(gw) + F o (V^H G_V)) V^H`` (conjugate convention).  With a subset,
    the eigenvector terms need the whole spectrum, taken from ``np.linalg.eigh``
    of the same Hermitian matrix: only projectors ``v_i v_i^H`` of the extra
    eigenvectors enter, so their signs (phases) do not matter.
    """
    if not subset or _absent(g_v):
        return eigh_cotangent("scipy.linalg.eigh", g_w, g_v, w, v)
    out = (v * np.real(g_w)[..., None, :]) @ _H(v)
    gv_c = _cj(g_v)
    if np.iscomplexobj(v):
        own = np.sum(np.conj(strip(v)) * strip(gv_c), axis=-2)  # v_j^H G_j
        check_phase_free("scipy.linalg.eigh", np.imag(own), np.linalg.norm(strip(g_v), axis=-2), "eigenvectors")
    w_full, v_full = np.linalg.eigh(_hermitian(a, lower))
    n = np.shape(a)[-1]
    here = np.arange(n)[:, None] == _subset_positions(w, w_full)[..., None, :]
    gap = w[..., None, :] - w_full[..., :, None]
    f = np.where(here, 0.0, 1 / np.where(here, 1.0, gap))
    return _cj(out + (v_full @ (f * (_H(v_full) @ gv_c))) @ _H(v))


def _eigh_general(g_w, g_v, w, v):
    """``(df/dA, df/dB)`` for ``A v = w B v``, ``V^H B V = I`` (full matrices).

    In the conjugate convention (``G = conj(g)``), with ``H = V^H G_V`` and
    ``K = F o H``: ``gA = V (diag(gw) + K) V^H`` and
    ``gB = -V (diag(gw w) + K diag(w) + diag(H)/2) V^H``; conjugated back.  Complex
    eigenvectors: ``H``'s diagonal must be real (phase-invariant, checked).
    """
    n = np.shape(v)[-1]
    eye = _eye(n, v)
    g_w = np.real(g_w)
    inner_a = g_w[..., None, :] * eye
    inner_b = (g_w * w)[..., None, :] * eye
    if not _absent(g_v):
        h = _H(v) @ _cj(g_v)
        if np.iscomplexobj(h):
            check_phase_free("scipy.linalg.eigh", np.imag(np.diagonal(strip(h), axis1=-2, axis2=-1)),
                             np.linalg.norm(strip(g_v), axis=-2), "eigenvectors")
        k = _spectral(w, v) * h
        inner_a = inner_a + k
        inner_b = inner_b + k * w[..., None, :] + 0.5 * (h * eye)
    return _cj((v @ inner_a) @ _H(v)), _cj(-((v @ inner_b) @ _H(v)))


def _eigh_outputs(g, ans, eigvals_only):
    if eigvals_only:
        return g, np.zeros(()), ans, None
    return g[0], g[1], ans[0], ans[1]


def _eigh_checks(name, a, b, type, subset_by_index, subset_by_value):
    subset = subset_by_index is not None or subset_by_value is not None
    if b is not None and (type != 1 or subset):
        raise _refuse(name, "a generalized problem with type != 1 or a subset (use type=1, all eigenvalues).")
    return subset


def _eigh_a(g, ans, a, b=None, *, lower=True, eigvals_only=False, overwrite_a=False, overwrite_b=False, type=1,
            check_finite=True, subset_by_index=None, subset_by_value=None, driver=None):
    subset = _eigh_checks("eigh", a, b, type, subset_by_index, subset_by_value)
    g_w, g_v, w, v = _eigh_outputs(g, ans, eigvals_only)
    if b is None:
        if v is None:  # eigvals_only: the eigenvectors come from the same call with them (traced at
            # second order, so that their derivative enters the Hessian)
            w, v = sl.eigh(a, lower=lower, subset_by_index=subset_by_index, subset_by_value=subset_by_value,
                           driver=driver)
        return _onto_hermitian_triangle(_eigh_standard(g_w, g_v, w, v, a, lower, subset), lower)
    if v is None:
        w, v = sl.eigh(a, b, lower=lower, driver=driver)
    return _onto_hermitian_triangle(_eigh_general(g_w, g_v, w, v)[0], lower)


def _eigh_b(g, ans, a, b=None, *, lower=True, eigvals_only=False, overwrite_a=False, overwrite_b=False, type=1,
            check_finite=True, subset_by_index=None, subset_by_value=None, driver=None):
    _eigh_checks("eigh", a, b, type, subset_by_index, subset_by_value)
    g_w, g_v, w, v = _eigh_outputs(g, ans, eigvals_only)
    if v is None:
        w, v = sl.eigh(a, b, lower=lower, driver=driver)
    return _onto_hermitian_triangle(_eigh_general(g_w, g_v, w, v)[1], lower)


_scipy_rule(sl.eigh, _eigh_a, _eigh_b,
       note="gradient on the triangle read; eigenvector cotangents give inf/nan at repeated eigenvalues; "
            "complex eigenvectors: phase-invariant functions only")


def _eigvalsh_a(g, ans, a, b=None, *, lower=True, overwrite_a=False, overwrite_b=False, type=1, check_finite=True,
                subset_by_index=None, subset_by_value=None, driver=None):
    return _eigh_a(g, ans, a, b, lower=lower, eigvals_only=True, type=type, subset_by_index=subset_by_index,
                   subset_by_value=subset_by_value, driver=driver)


def _eigvalsh_b(g, ans, a, b=None, *, lower=True, overwrite_a=False, overwrite_b=False, type=1, check_finite=True,
                subset_by_index=None, subset_by_value=None, driver=None):
    return _eigh_b(g, ans, a, b, lower=lower, eigvals_only=True, type=type, subset_by_index=subset_by_index,
                   subset_by_value=subset_by_value, driver=driver)


_scipy_rule(sl.eigvalsh, _eigvalsh_a, _eigvalsh_b, note="gradient on the triangle read")


# ---------------------------------------------------------------- SVD
def _svd_vjp(g, ans, a, full_matrices=True, compute_uv=True, overwrite_a=False, check_finite=True,
             lapack_driver="gesdd"):
    if not compute_uv:
        u, _, vh = np.linalg.svd(a, full_matrices=False)
        return _cj((u * np.real(g)[..., None, :]) @ vh)
    u, s, vh = ans
    gu, gs, gvh = g
    k = np.shape(s)[-1]
    if full_matrices:
        # The extra singular vectors of a full SVD are not unique: only a cotangent that
        # leaves them out is differentiable.
        if may_be_nonzero(gu[..., k:]) or may_be_nonzero(gvh[..., k:, :]):
            raise _refuse("svd", "a cotangent on the extra singular vectors of full_matrices=True (they are not "
                                 "unique); use full_matrices=False.")
        u, gu, vh, gvh = u[..., :, :k], gu[..., :, :k], vh[..., :k, :], gvh[..., :k, :]
    return svd_cotangent("scipy.linalg.svd", gu, gs, gvh, u, s, vh)


_scipy_rule(sl.svd, _svd_vjp,
       note="vector cotangents give inf/nan at repeated or zero singular values; complex singular vectors: "
            "phase-invariant functions only")


def _svdvals_vjp(g, ans, a, check_finite=True):
    u, _, vh = np.linalg.svd(a, full_matrices=False)
    return _cj((u * np.real(g)[..., None, :]) @ vh)


_scipy_rule(sl.svdvals, _svdvals_vjp)


# ---------------------------------------------------------------- QR
def _qr_tall(q, r, gq, gr):
    """Gradient of ``a = q r`` with square ``r`` (thin factors, ``m >= n``), in the conjugate convention.

    As :func:`tapegrad.rules.linalg._qr_tall_cotangent`: LAPACK's ``R`` has a real
    diagonal, which fixes the phases of complex ``Q``'s columns.
    """
    m = r @ _H(gr) - _H(gq) @ q
    low = np.tril(m, -1)
    copyltu = low + _H(low) + np.real(m) * _eye(np.shape(r)[-1], r)
    return _H(np.linalg.solve(r, _H(gq + q @ copyltu)))  # B R^-H


def _qr_thin(q, r, gq, gr, a):
    """Cotangent of ``a`` (tapegrad's convention in and out) from those of thin ``q, r``."""
    gq, gr = _cj(gq), _cj(gr)
    m, n = np.shape(a)[-2:]
    if m >= n:
        return _cj(_qr_tall(q, r, gq, gr))
    # Wide: a = [x | y] with x = q r1 square, y = q r2 (r2 = q^H y).
    gr1, gr2 = gr[..., :, :m], gr[..., :, m:]
    gx = _qr_tall(q, r[..., :, :m], gq + a[..., :, m:] @ _H(gr2), gr1)
    return _cj(np.concatenate([gx, q @ gr2], axis=-1))


def _qr_vjp(g, ans, a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True):
    if mode == "raw":
        raise _refuse("qr", "mode='raw' (Householder reflectors); use mode='economic'.")
    m, n = np.shape(a)[-2:]
    k = min(m, n)
    if pivoting:
        perm = np.asarray(strip(ans[-1]))
        ans, g = ans[:-1], g[:-1]
        a = np.take(a, perm, axis=-1) if np.ndim(perm) == 1 else a  # a[:, P] = Q R
    if mode == "r":
        if isinstance(ans, tuple):  # (R,) for one matrix; a batch gives the stacked R itself
            ans, g = ans[0], g[0]
        r = ans[..., :k, :]
        gr = g[..., :k, :]
        # Q = A[:, :k] R[:, :k]^-1 (the Q that belongs to SciPy's R).
        q = _solve_right_t(a[..., :, :k], _T(r[..., :, :k]))
        gq = np.zeros(np.shape(gr)[:-2] + (m, k), dtype=np.result_type(gr))
    else:
        q, r = ans
        gq, gr = g
        if mode == "full" and m > n:
            if may_be_nonzero(gq[..., n:]):
                raise _refuse("qr", "a cotangent on the extra columns of Q in mode='full' (they are not unique); "
                                    "use mode='economic'.")
            q, gq, r, gr = q[..., :, :n], gq[..., :, :n], r[..., :n, :], gr[..., :n, :]
    ga = _qr_thin(q, r, gq, gr, a)
    if pivoting:
        if np.ndim(perm) != 1:
            raise _refuse("qr", "pivoting=True on a batch of matrices.")
        ga = np.take(ga, np.argsort(perm), axis=-1)
    return ga


_scipy_rule(sl.qr, _qr_vjp, note="modes 'economic', 'r', 'full' (unique columns only)")


# ---------------------------------------------------------------- pseudo-inverses and least squares
def _pinv_cotangent(gx, x, a):
    """Cotangent of ``a`` given that of ``x = pinv(a)`` (constant rank).

    ``-X^T G X^T + (I - A X) G^T X X^T + X^T X G^T (I - X A)``.
    """
    m, n = np.shape(a)[-2:]
    xt, gt = _T(x), _T(gx)
    term = -((xt @ gx) @ xt)
    term = term + (_eye(m, a) - a @ x) @ (gt @ (x @ xt))
    return term + ((xt @ x) @ gt) @ (_eye(n, a) - x @ a)


def _pinv_vjp(g, ans, a, *, atol=None, rtol=None, return_rank=False, check_finite=True):
    _real_only("pinv", a)
    x, gx = (ans[0], g[0]) if return_rank else (ans, g)
    return _pinv_cotangent(gx, x, a)


def _pinvh_vjp(g, ans, a, atol=None, rtol=None, lower=True, return_rank=False, check_finite=True):
    _real_only("pinvh", a)
    x, gx = (ans[0], g[0]) if return_rank else (ans, g)
    return _onto_triangle(_pinv_cotangent(gx, x, _symmetric(a, lower)), lower)


_scipy_rule(sl.pinv, _pinv_vjp, note="assumes the numerical rank is locally constant")
_scipy_rule(sl.pinvh, _pinvh_vjp, note="gradient on the triangle read; constant rank")


def _rank_pinv(a, rank):
    """``pinv(a)`` keeping the ``rank`` largest singular values (the rank lstsq found)."""
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    keep = np.arange(np.shape(s)[-1]) < np.asarray(strip(rank))[..., None]
    inv_s = np.where(keep, 1 / np.where(keep, s, 1), 0)
    return (_T(vh) * inv_s[..., None, :]) @ _T(u)


def _lstsq_a(g, ans, a, b, cond=None, overwrite_a=False, overwrite_b=False, check_finite=True, lapack_driver=None):
    _real_only("lstsq", a, b)
    x, res, rank, _ = ans
    gx, gres, _, gs = g
    vector = np.ndim(b) == 1
    outer = gx[..., :, None] * b if vector else gx @ _T(b)
    ga = _pinv_cotangent(outer, _rank_pinv(a, rank), a)
    if np.size(res) and not _absent(gres):
        # Envelope theorem: d min ||b - a x||^2 / da = -2 r x^T at the minimiser.
        r = b - a @ x
        ga = ga - 2 * (gres[..., None, None] * (r[:, None] * x) if vector else (r * gres[..., None, :]) @ _T(x))
    if not _absent(gs):
        u, _, vh = np.linalg.svd(a, full_matrices=False)
        ga = ga + (u * gs[..., None, :]) @ vh
    return ga


def _lstsq_b(g, ans, a, b, cond=None, overwrite_a=False, overwrite_b=False, check_finite=True, lapack_driver=None):
    _real_only("lstsq", a, b)
    x, res, rank, _ = ans
    gx, gres = g[0], g[1]
    vector = np.ndim(b) == 1
    pinv = _rank_pinv(a, rank)
    gb = gx @ pinv if vector else _T(pinv) @ gx
    if np.size(res) and not _absent(gres):
        r = b - a @ x
        gb = gb + 2 * (r * (gres[..., None] if vector else gres[..., None, :]))
    return gb


_scipy_rule(sl.lstsq, _lstsq_a, _lstsq_b,
       note="solution, residues and singular values (constant rank); rank is an integer")


def _check_finite(x, check_finite):
    if check_finite and not np.all(np.isfinite(strip(x))):
        raise ValueError("array must not contain infs or NaNs")


def _norm(a, ord=None, axis=None, keepdims=False, check_finite=True):
    _check_finite(a, check_finite)
    return np.linalg.norm(a, ord=ord, axis=axis, keepdims=keepdims)


defcomposite(intercepted(sl.norm), _norm, note="numpy.linalg.norm's rules; subgradient 0 at zero")


# ---------------------------------------------------------------- Schur form
def _schur_blocks(t: np.ndarray) -> tuple:
    """The diagonal blocks of one (quasi-)triangular Schur factor: ``((start, size), ...)``, sizes 1 or 2.

    A real Schur form holds a complex conjugate pair of eigenvalues in a 2 x 2
    block, marked by a nonzero entry below the diagonal (LAPACK sets the others
    to exactly zero); a complex one is triangular.
    """
    n = t.shape[-1]
    below = np.diagonal(t, -1) != 0 if not np.iscomplexobj(t) and n > 1 else np.zeros(max(n - 1, 0), bool)
    blocks, p = [], 0
    while p < n:
        size = 2 if p < n - 1 and below[p] else 1
        blocks.append((p, size))
        p += size
    return tuple(blocks)


def _block_masks(blocks: tuple, n: int, dtype: Any) -> tuple:
    """``(on or above the block diagonal, strictly below it)`` as 0/1 matrices."""
    owner = np.repeat(np.arange(len(blocks)), [size for _, size in blocks])
    above = (owner[:, None] <= owner[None, :]).astype(dtype)
    return above, 1 - above


def _lower_adjoint_solve(t: Any, r: Any, blocks: tuple) -> Any:
    """The strictly block lower ``Y`` with ``blocktril(Y T^H - T^H Y) = R``, batch axes kept.

    The map ``X -> blocktril(X T - T X)`` on strictly block lower ``X`` (how the
    free part of ``Z^H dZ`` meets the strictly block lower part of ``Z^H dA Z`` in
    a Schur form) has this adjoint.  Block column ``J`` couples only to the block
    columns right of it and to its own rows below, so the block columns are solved
    from the last to the first, each by one Sylvester equation
    ``Y_J T_JJ^H - T_sub^H Y_J = R_J - Y[:, after J] T[J, after J]^H`` with the
    block lower ``T_sub^H`` (a linear system of order ``m`` or ``2m``).  Singular
    exactly where two eigenvalues coincide.  Ordinary NumPy calls on (possibly
    traced) arrays, so a second derivative differentiates it.
    """
    n = np.shape(t)[-1]
    batch = np.broadcast_shapes(np.shape(t)[:-2], np.shape(r)[:-2])
    dtype = np.result_type(t, r)
    known = None  # the block columns right of the current one, (..., n, n - end)
    for start, size in reversed(blocks):
        end = start + size
        m = n - end
        if m == 0:
            cols = np.zeros(batch + (n, size), dtype=dtype)
        else:
            rhs = np.broadcast_to(r[..., end:, start:end], batch + (m, size))
            if known is not None:
                rhs = rhs - known[..., end:, :] @ _H(t[..., start:end, end:])
            sub = _H(t[..., end:, end:])
            eye = _eye(m, t)
            tjj = _cj(t[..., start:end, start:end])
            if size == 1:
                mat = tjj * eye - sub
                y = np.linalg.solve(np.broadcast_to(mat, batch + (m, m)), rhs)
            else:  # vec(Y T_JJ^H - T_sub^H Y) = (conj(T_JJ) (x) I - I (x) T_sub^H) vec(Y), columns stacked
                row0 = np.concatenate([tjj[..., 0:1, 0:1] * eye - sub, tjj[..., 0:1, 1:2] * eye + 0 * sub], -1)
                row1 = np.concatenate([tjj[..., 1:2, 0:1] * eye + 0 * sub, tjj[..., 1:2, 1:2] * eye - sub], -1)
                mat = np.broadcast_to(np.concatenate([row0, row1], -2), batch + (2 * m, 2 * m))
                stacked = np.concatenate([rhs[..., :, 0], rhs[..., :, 1]], -1)[..., None]
                yv = np.linalg.solve(mat, stacked)[..., 0]
                y = np.stack([yv[..., :m], yv[..., m:]], -1)
            cols = np.concatenate([np.zeros(batch + (end, size), dtype=dtype), y], -2)
        known = cols if known is None else np.concatenate([cols, known], -1)
    return known


def _schur_one_structure(t, z, gt, gz, blocks):
    """The Schur VJP (conjugate convention in and out) for factors that share one block structure.

    See :func:`_schur_vjp`.  A 2 x 2 block ``[[a, b], [c, a]]`` of a real Schur
    form (LAPACK's standard form: equal diagonal, ``b c < 0``) adds one unknown,
    the rotation ``omega`` inside the block, fixed by keeping the diagonal equal:
    ``omega = (W_11 - W_00) / (2 (b + c))`` (``W``: what the rest leaves of
    ``Z^H dA Z`` there).  Transposed, it moves ``beta / (2 (b + c))`` between the
    block's diagonal entries of the cotangent, ``beta`` being the loss's rate of
    change under that rotation (of ``Z``'s two columns and of ``T``).  A normal
    block (``b + c = 0``) leaves ``omega`` free while nearby matrices fix it by an
    amount that depends on the direction: no derivative, refused.
    """
    n = np.shape(t)[-1]
    above, below = _block_masks(blocks, n, _real_dtype(t))
    upper = gt * above
    j = _H(z) @ gz
    if np.iscomplexobj(t) or np.iscomplexobj(z):
        # d/dphi_m of the loss along Z -> Z diag(exp(i phi)), T -> conj(D) T D:
        # Im J_mm + row_m - col_m of Im(conj(G_T) o T).
        q = np.imag(np.conj(strip(upper)) * strip(t))
        drift = np.imag(np.diagonal(strip(j), axis1=-2, axis2=-1)) + np.sum(q, axis=-1) - np.sum(q, axis=-2)
        size = np.linalg.norm(strip(gz), axis=-2) + np.linalg.norm(strip(upper) * np.abs(strip(t)), axis=(-2, -1))[..., None]
        check_phase_free("scipy.linalg.schur", drift, size, "Schur vectors")
    v = upper
    pairs = [start for start, size in blocks if size == 2]
    if pairs:
        comm = upper @ _H(t) - _H(t) @ upper
        for p in pairs:
            beta = (j[..., p + 1, p] - j[..., p, p + 1]) - (comm[..., p + 1, p] - comm[..., p, p + 1])
            bc = t[..., p, p + 1] + t[..., p + 1, p]
            block = np.asarray(strip(t))[..., p:p + 2, p:p + 2]
            eps = np.finfo(block.dtype).eps
            if np.any(np.abs(np.asarray(strip(bc))) <= np.sqrt(eps) * np.linalg.norm(block, axis=(-2, -1))):
                # b + c = 0: the block is normal and every rotation keeps it in standard form, while
                # nearby matrices fix the rotation by a direction-dependent amount: no derivative.
                raise _refuse("schur", "a real Schur form with a normal 2 x 2 block (b + c = 0, as for orthogonal "
                                       "or skew-symmetric matrices): its Schur vectors and T's block are not "
                                       "differentiable there. Pass output='complex'.")
            coef = beta / (2 * bc)
            step = np.zeros((n, n), dtype=_real_dtype(t))
            step[p, p], step[p + 1, p + 1] = -1.0, 1.0
            v = v + coef[..., None, None] * step
    k = j - v @ _H(t) + _H(t) @ v
    y = _lower_adjoint_solve(t, (k - _H(k)) * below, blocks)
    return (z @ (v + y)) @ _H(z)


def _schur_vjp(g, ans, a, output="real", lwork=None, overwrite_a=False, sort=None, check_finite=True):
    """Cotangent of ``A = Z T Z^H`` (``T`` upper (quasi-)triangular, ``Z`` unitary).

    ``C = Z^H dA Z = Omega T - T Omega + dT`` with ``Omega = Z^H dZ`` anti-Hermitian:
    the strictly (block) lower part of ``C`` fixes the strictly lower part ``X``
    of ``Omega`` (``tril(X T - T X, -1) = tril(C, -1)``), ``Omega = X - X^H`` (its
    diagonal is the phase gauge, 0 here), and ``dT = C - Omega T + T Omega``.
    Transposed, in the conjugate convention (``G = conj(g)``): with
    ``U = triu(G_T)`` and ``K = Z^H G_Z - U T^H + T^H U``, ``Y`` solves the adjoint
    triangular system for ``tril(K - K^H, -1)`` (:func:`_lower_adjoint_solve`) and
    ``G_A = Z (U + Y) Z^H``.  Complex Schur vectors carry a free phase each
    (``Z -> Z D``, ``T -> D^H T D``): the cotangent must be invariant (checked).
    The real Schur form's 2 x 2 blocks add a rotation each
    (:func:`_schur_one_structure`).  ``sort`` only chooses the order of the
    eigenvalues, which is locally constant.
    """
    t, z = ans[0], ans[1]
    gt, gz = _cj(g[0]), _cj(g[1])
    t_plain = np.asarray(strip(t))
    structures = {idx: _schur_blocks(t_plain[idx]) for idx in np.ndindex(*t_plain.shape[:-2])}
    try:
        if len(set(structures.values())) == 1:
            out = _schur_one_structure(t, z, gt, gz, next(iter(structures.values())))
        else:  # a stack whose matrices have their pairs at different places: one matrix at a time
            n = t_plain.shape[-1]
            parts = [_schur_one_structure(t[idx], z[idx], gt[(...,) + idx + (slice(None),) * 2],
                                          gz[(...,) + idx + (slice(None),) * 2], blocks)
                     for idx, blocks in structures.items()]
            out = np.stack(parts, axis=-3)
            out = np.reshape(out, np.shape(out)[:-3] + t_plain.shape[:-2] + (n, n))
    except np.linalg.LinAlgError:
        raise _refuse("schur", "a matrix with repeated eigenvalues (its Schur vectors are not differentiable "
                               "there).") from None
    out = _cj(out)
    return out if np.iscomplexobj(a) else np.real(out)


_scipy_rule(sl.schur, _schur_vjp, note="distinct eigenvalues; complex Schur vectors: phase-invariant functions "
                                       "only; real form: not at a normal 2 x 2 block")


# ---------------------------------------------------------------- matrices built from copies of the inputs
def _placeholders(arrays: list) -> list:
    """Each input entry numbered 1, 2, ... in float64 and as ``k + k i`` (so a conjugated copy shows)."""
    out, start = [], 1
    for x in arrays:
        size = int(np.size(x))
        ids = np.arange(start, start + size, dtype=np.float64).reshape(np.shape(x))
        out.append(ids * (1 + 1j) if np.iscomplexobj(x) else ids)
        start += size
    return out


def _gathered(public: str, arrays: list, call: Any) -> Any:
    """``call(*arrays)`` (a SciPy builder) as a gather of the (traced) input entries.

    SciPy builds the matrix once from numbered placeholders: each output entry
    is then the number of the input entry copied there (0 for a structural
    zero), and its imaginary part tells a conjugated copy.  The gather of the
    real values is checked against SciPy's own result, so a function that does
    more than copy is refused rather than differentiated wrongly.
    """
    plain = [np.asarray(strip_all(x)) for x in arrays]
    expected = np.asarray(call(*plain))
    ids = np.asarray(call(*_placeholders(plain)))
    index = np.rint(np.real(ids)).astype(np.intp)
    conj = np.iscomplexobj(ids) & (np.imag(ids) < 0)
    flat_plain = np.concatenate([np.zeros(1, dtype=expected.dtype)] + [np.ravel(x).astype(expected.dtype) for x in plain])
    check = flat_plain[index]
    check = np.where(conj, np.conj(check), check)
    if check.shape != expected.shape or not np.array_equal(check, expected, equal_nan=True):
        raise _refuse(public, "its output is not a copy of its inputs' entries here.")
    flat = np.concatenate([np.zeros(1, dtype=expected.dtype)] + [np.ravel(x) for x in arrays])
    out = flat[index]
    if conj.any():
        out = np.where(conj, np.conj(out), out)
    return out if np.result_type(out) == expected.dtype else out.astype(expected.dtype)


def _builder(fun: Any) -> None:
    public = fun.__name__

    def impl(*args: Any, **kwargs: Any) -> Any:
        # The array arguments, positional or keyword (sizes, modes and None stay as they are).
        def is_array(x: Any) -> bool:
            return not isinstance(x, (int, str)) and x is not None

        where = [i for i, x in enumerate(args) if is_array(x)] + [k for k, x in kwargs.items() if is_array(x)]

        def call(*xs: Any) -> Any:
            full, named = list(args), dict(kwargs)
            for key, x in zip(where, xs):
                if isinstance(key, int):
                    full[key] = x
                else:
                    named[key] = x
            return fun(*full, **named)

        return _gathered(public, [args[k] if isinstance(k, int) else kwargs[k] for k in where], call)

    defcomposite(intercepted(fun), impl, note="entries are copies of the inputs' entries")


for _f in (sl.toeplitz, sl.hankel, sl.circulant, sl.block_diag, sl.leslie, sl.convolution_matrix):
    _builder(_f)


def _companion(a):
    sl.companion(strip_all(a))  # SciPy's own checks (length >= 2, a[0] != 0)
    n = np.shape(a)[-1]
    first = -a[..., 1:] / a[..., :1]
    below = np.broadcast_to(np.eye(n - 2, n - 1, dtype=np.result_type(first)), np.shape(a)[:-1] + (n - 2, n - 1))
    return np.concatenate([first[..., None, :], below], axis=-2)


def _fiedler(a):
    expected = sl.fiedler(strip_all(a))
    if np.ndim(a) == 0 or np.size(a) == 0:
        return expected
    return np.abs(a[..., :, None] - a[..., None, :])


def _khatri_rao(a, b):
    sl.khatri_rao(strip_all(a), strip_all(b))  # SciPy's own shape checks
    out = a[..., :, None, :] * b[..., None, :, :]
    shape = np.shape(out)
    return np.reshape(out, shape[:-3] + (shape[-3] * shape[-2], shape[-1]))


defcomposite(intercepted(sl.companion), _companion)
defcomposite(intercepted(sl.fiedler), _fiedler, note="subgradient 0 where entries tie")
defcomposite(intercepted(sl.khatri_rao), _khatri_rao)


# ---------------------------------------------------------------- primary matrix functions
def _matrix_function(f: Any, adjoint: Any, *, n_extra: int = 0) -> None:
    """Register ``f``'s VJP ``L_f(A^T, G)``, computed by ``adjoint`` (see :mod:`tapegrad.rules.scipy_matfun`)."""
    name = f.__name__

    def vjp(g, ans, a, *args, **kwargs):
        extra = args[:n_extra]
        if isinstance(ans, tuple):  # disp=False: (value, error estimate)
            if not _absent(g[1]):
                raise _refuse(name, "a cotangent on the error estimate of disp=False.")
            g = g[0]
        out = adjoint(f, a, g, *extra)
        return out if np.iscomplexobj(a) or not np.iscomplexobj(out) else np.real(out)

    vjps = [vjp] + [None] * n_extra
    how = "; A's Schur form, one branch for every copy of an eigenvalue" if adjoint is branch_adjoint else ""
    _scipy_rule(f, *vjps, note="VJP: f([[A^T, G], [0, A^T]]) (Frechet derivative adjoint)" + how)


for _f in (sl.expm, sl.cosm, sl.sinm, sl.tanm, sl.coshm, sl.sinhm, sl.tanhm):
    _matrix_function(_f, _block_adjoint)
for _f in (sl.logm, sl.sqrtm):  # branch cut on the negative real axis
    _matrix_function(_f, branch_adjoint)
_matrix_function(sl.fractional_matrix_power, branch_adjoint, n_extra=1)


def _expm_frechet_grads(g, ans, a, e, compute_expm):
    """Cotangents of ``A`` and ``E``: ``expm([[A, E], [0, A]]) = [[expm(A), L(A, E)], [0, expm(A)]]``."""
    n = np.shape(a)[-1]
    if compute_expm:
        g_x, g_l = g
    else:
        g_x, g_l = None, g
    batch = np.broadcast_shapes(np.shape(a), np.shape(e), np.shape(g_l))
    a_b, e_b = np.broadcast_to(a, batch), np.broadcast_to(e, batch)
    zero = np.zeros(batch, dtype=np.result_type(a, e, g_l))
    block = np.concatenate([np.concatenate([a_b, e_b], -1), np.concatenate([zero, a_b], -1)], -2)
    top = np.concatenate([zero if g_x is None or _absent(g_x) else np.broadcast_to(g_x, batch), np.broadcast_to(g_l, batch)], -1)
    g_block = np.concatenate([top, np.concatenate([zero, zero], -1)], -2)
    gm = _block_adjoint(sl.expm, block, g_block)
    return gm[..., :n, :n] + gm[..., n:, n:], gm[..., :n, n:]


_scipy_rule(
    sl.expm_frechet,
    lambda g, ans, A, E, method=None, compute_expm=True, check_finite=True: _expm_frechet_grads(
        g, ans, A, E, compute_expm)[0],
    lambda g, ans, A, E, method=None, compute_expm=True, check_finite=True: _expm_frechet_grads(
        g, ans, A, E, compute_expm)[1],
)


# ---------------------------------------------------------------- Sylvester and Lyapunov equations
def _sylvester_parts(g, ans, a, b):
    # A X + X B = Q: the adjoint equation A^T Y + Y B^T = G gives gQ = Y, gA = -Y X^T, gB = -X^T Y.
    return sl.solve_sylvester(_T(a), _T(b), g)


_scipy_rule(
    sl.solve_sylvester,
    lambda g, ans, a, b, q: -(_sylvester_parts(g, ans, a, b) @ _T(ans)),
    lambda g, ans, a, b, q: -(_T(ans) @ _sylvester_parts(g, ans, a, b)),
    lambda g, ans, a, b, q: _sylvester_parts(g, ans, a, b),
)


def _lyap_y(g, a, discrete, method=None):
    if discrete:  # X = A X A^T + Q: adjoint Y = A^T Y A + G
        return sl.solve_discrete_lyapunov(_T(a), g, method=method)
    return sl.solve_continuous_lyapunov(_T(a), g)  # A X + X A^T = Q: adjoint A^T Y + Y A = G


def _continuous_a(g, ans, a, q):
    _real_only("solve_continuous_lyapunov", a, q)
    y = _lyap_y(g, a, False)
    return -(y @ _T(ans) + _T(y) @ ans)


def _continuous_q(g, ans, a, q):
    _real_only("solve_continuous_lyapunov", a, q)
    return _lyap_y(g, a, False)


def _discrete_a(g, ans, a, q, method=None):
    _real_only("solve_discrete_lyapunov", a, q)
    y = _lyap_y(g, a, True, method)
    return y @ (a @ _T(ans)) + _T(y) @ (a @ ans)


def _discrete_q(g, ans, a, q, method=None):
    _real_only("solve_discrete_lyapunov", a, q)
    return _lyap_y(g, a, True, method)


_scipy_rule(sl.solve_continuous_lyapunov, _continuous_a, _continuous_q, note="real input")
_scipy_rule(sl.solve_discrete_lyapunov, _discrete_a, _discrete_q, note="real input")


# ---------------------------------------------------------------- banded systems
def _band_index(rows: int, n: int, upper: int) -> tuple:
    """For banded storage ``ab[upper + i - j, j] = A[i, j]``: each slot's row ``i`` and whether it is in range."""
    r = np.arange(rows)[:, None]
    j = np.arange(n)[None, :]
    i = r + j - upper
    valid = (i >= 0) & (i < n)
    return np.where(valid, i, 0), np.broadcast_to(j, (rows, n)), valid


def _transpose_banded(ab: Any, lower: int, upper: int) -> Any:
    """The banded storage of ``A^T`` (``upper`` and ``lower`` swapped), gathered from ``ab``."""
    rows, n = np.shape(ab)[-2:]
    r = np.arange(rows)[:, None]
    j = np.arange(n)[None, :]
    # A^T[i, j] = A[j, i]: slot (r, j) of A^T's storage (its upper = lower) holds A[j, i], i = r + j - lower,
    # which sits in ab at row upper + j - i, column i.
    i = r + j - lower
    valid = (i >= 0) & (i < n)
    src_row = np.where(valid, upper + j - i, 0)
    src_col = np.where(valid, i, 0)
    return np.where(valid, ab[..., src_row, src_col], 0)


def _banded_parts(l_and_u, ab, b, g):
    lower, upper = (int(v) for v in l_and_u)
    vector = np.ndim(b) == 1
    n = np.shape(ab)[-1]
    cols, moved = _as_columns(g, n, 1 if vector else 2)
    gb = sl.solve_banded((upper, lower), _transpose_banded(ab, lower, upper), cols)
    return lower, upper, vector, _from_columns(gb, moved, 1 if vector else 2)


def _solve_banded_ab(g, ans, l_and_u, ab, b, overwrite_ab=False, overwrite_b=False, check_finite=True):
    _real_only("solve_banded", ab, b)
    lower, upper, vector, gb = _banded_parts(l_and_u, ab, b, g)
    rows, n = np.shape(ab)[-2:]
    i, j, valid = _band_index(rows, n, upper)
    # gA[i, j] = -sum_k gb[i, k] x[j, k], read only at the stored slots.
    if vector:
        vals = -(gb[..., i] * ans[..., j])
    else:
        vals = -np.sum(gb[..., i, :] * ans[..., j, :], axis=-1)
    return np.where(valid, vals, 0)


def _solve_banded_b(g, ans, l_and_u, ab, b, overwrite_ab=False, overwrite_b=False, check_finite=True):
    _real_only("solve_banded", ab, b)
    return _banded_parts(l_and_u, ab, b, g)[3]


_scipy_rule(sl.solve_banded, CONSTANT_ARG, _solve_banded_ab, _solve_banded_b, note="real input")


def _solveh_parts(ab, b, g, lower):
    if np.ndim(ab) != 2:
        raise _refuse("solveh_banded", "a batch of banded matrices (call it once per matrix).")
    vector = np.ndim(b) == 1
    cols, moved = _as_columns(g, np.shape(ab)[-1], 1 if vector else 2)
    gb = sl.solveh_banded(ab, cols, lower=lower)  # A is symmetric: its own transpose
    return vector, _from_columns(gb, moved, 1 if vector else 2)


def _solveh_banded_ab(g, ans, ab, b, overwrite_ab=False, overwrite_b=False, lower=False, check_finite=True):
    _real_only("solveh_banded", ab, b)
    vector, gb = _solveh_parts(ab, b, g, lower)
    rows, n = np.shape(ab)[-2:]
    # Upper storage: ab[rows - 1 + i - j, j] = A[i, j] (i <= j); lower: ab[i - j, j] = A[i, j] (i >= j).
    i, j, valid = _band_index(rows, n, 0 if lower else rows - 1)
    if vector:
        vals = -(gb[..., i] * ans[..., j] + gb[..., j] * ans[..., i])
    else:
        vals = -np.sum(gb[..., i, :] * ans[..., j, :] + gb[..., j, :] * ans[..., i, :], axis=-1)
    diagonal = (i == j)
    return np.where(valid, np.where(diagonal, 0.5 * vals, vals), 0)


def _solveh_banded_b(g, ans, ab, b, overwrite_ab=False, overwrite_b=False, lower=False, check_finite=True):
    _real_only("solveh_banded", ab, b)
    return _solveh_parts(ab, b, g, lower)[1]


_scipy_rule(sl.solveh_banded, _solveh_banded_ab, _solveh_banded_b, note="real input; symmetric storage")


# ---------------------------------------------------------------- polar decomposition, Procrustes
def _polar_right(gu, gp, u, p, a):
    """Cotangent of ``a = u p`` (``u`` with orthonormal columns, ``p`` symmetric positive definite).

    ``U^T dA = Omega P + dP`` with ``Omega = U^T dU`` antisymmetric, so
    ``P Omega + Omega P = U^T dA - dA^T U`` and ``dP = U^T dA - Omega P``.
    With ``W`` solving ``P W + W P = U^T gU - gP P``: ``gA = U gP + U (W - W^T)``,
    plus ``(I - U U^T) gU P^-1`` when ``u`` is tall.
    """
    m, n = np.shape(a)[-2:]
    gp = np.zeros_like(p) if gp is None else gp
    gu = np.zeros_like(u) if gu is None else gu
    w = sl.solve_sylvester(p, p, _T(u) @ gu - gp @ p)
    ga = u @ gp + u @ (w - _T(w))
    if m > n:
        ga = ga + _solve_right_t(gu - u @ (_T(u) @ gu), p)  # P is symmetric: P^-T = P^-1
    return ga


def _polar_vjp(g, ans, a, side="right"):
    _real_only("polar", a)
    u, p = ans
    gu, gp = g
    m, n = np.shape(a)[-2:]
    if side == "right":
        if m < n:
            raise _refuse("polar", "side='right' for a wide matrix (p is singular there); use side='left'.")
        return _polar_right(gu, gp, u, p, a)
    if m > n:
        raise _refuse("polar", "side='left' for a tall matrix (p is singular there); use side='right'.")
    # a = p u  <=>  a^T = u^T p^T: the right decomposition of a^T.
    return _T(_polar_right(_T(gu), _T(gp), _T(u), _T(p), _T(a)))


_scipy_rule(sl.polar, _polar_vjp, note="real input, full rank")


def _orthogonal_procrustes(A, B, check_finite=True):
    sl.orthogonal_procrustes(strip_all(A), strip_all(B), check_finite=check_finite)  # SciPy's own checks
    _real_only("orthogonal_procrustes", A, B)  # through polar, which is differentiated for real input
    u, p = sl.polar(_T(A) @ B)  # R = U V^T of svd(A^T B) is the polar factor; scale = sum(s) = trace(p)
    return u, np.trace(p, axis1=-2, axis2=-1)


defcomposite(intercepted(sl.orthogonal_procrustes), _orthogonal_procrustes, note="through polar(A^T B)")


# ---------------------------------------------------------------- general eigenvalues, structure queries
def _eig_cotangent(g_w, g_v, a, w=None, v=None):
    """The cotangent of ``a`` for ``w, v = eig(a)`` (see :func:`tapegrad.rules.linalg.eig_cotangent`).

    SciPy's right eigenvectors have unit norm, as NumPy's.  Without them (``eigvals``),
    they come from ``sl.eig(a)`` itself (traced at second order, where only the
    phase-invariant ``V diag(.) V^-1`` enters).
    """
    if v is None:
        w, v = sl.eig(a)
    out = eig_cotangent("scipy.linalg.eig", g_w, g_v, w, v)
    return out if np.iscomplexobj(a) else np.real(out)


def _eig_vjp(g, ans, a, b=None, left=False, right=True, overwrite_a=False, overwrite_b=False, check_finite=True,
             homogeneous_eigvals=False):
    if b is not None or homogeneous_eigvals:
        raise _refuse("eig", "a generalized problem or homogeneous_eigvals=True (only eig(a) is differentiated).")
    if not isinstance(ans, (tuple, list)):  # eigenvalues only (left=False, right=False); SciPy lists a batch's
        return _eig_cotangent(g, np.zeros(()), a)
    w, g_w = ans[0], g[0]
    if left:  # (w, vl, vr) or (w, vl)
        if not _absent(g[1]):
            raise _refuse("eig", "a cotangent on the left eigenvectors (only eigenvalues and right eigenvectors are "
                                 "differentiated); use eig(a.conj().T) for the left ones.")
        rest_v, rest_g = ans[2:], g[2:]
    else:
        rest_v, rest_g = ans[1:], g[1:]
    if rest_v:
        return _eig_cotangent(g_w, rest_g[0], a, w, rest_v[0])
    return _eig_cotangent(g_w, np.zeros(()), a)


_EIGVALS_SIGNATURE = inspect.signature(sl.eigvals)  # SciPy 1.18 added overwrite_b before check_finite


def _eigvals_vjp(g, ans, *args, **kwargs):
    bound = _EIGVALS_SIGNATURE.bind(*args, **kwargs)
    a = bound.arguments["a"]
    if bound.arguments.get("b") is not None or bound.arguments.get("homogeneous_eigvals"):
        raise _refuse("eigvals", "a generalized problem or homogeneous_eigvals=True.")
    return _eig_cotangent(g, np.zeros(()), a)


_scipy_rule(sl.eig, _eig_vjp, note="eigenvalues and unit-norm right eigenvectors (complex ones: phase-invariant "
                                   "functions only); inf/nan at repeated eigenvalues")
_scipy_rule(sl.eigvals, _eigvals_vjp)


def _solve_toeplitz(c_or_cr, b, check_finite=True):
    plain = sl.solve_toeplitz(strip_all(c_or_cr), strip_all(b), check_finite=check_finite)  # SciPy's checks
    c, r = c_or_cr if isinstance(c_or_cr, tuple) else (c_or_cr, None)
    # In the dtype SciPy computes in (float64 for float32 input), so the values are SciPy's.
    return np.linalg.solve(np.astype(sl.toeplitz(c, r), plain.dtype), np.astype(np.asarray(b), plain.dtype))


defcomposite(intercepted(sl.solve_toeplitz), _solve_toeplitz, note="solve(toeplitz(c, r), b): a dense solve")
defconstant(intercepted(sl.bandwidth), intercepted(sl.issymmetric), intercepted(sl.ishermitian))


# ---------------------------------------------------------------- symmetric tridiagonal eigenproblems
def _tridiagonal(d: Any, e: Any) -> Any:
    """The dense symmetric tridiagonal matrix of ``d`` (diagonal) and ``e`` (off-diagonal), traced-capable."""
    n = np.shape(d)[-1]
    dt = _real_dtype(np.result_type(d, e))
    # e padded to length n scales the rows of the first superdiagonal.
    e_rows = np.concatenate([e, np.zeros(np.shape(e)[:-1] + (1,), dtype=dt)], axis=-1)
    upper = e_rows[..., :, None] * np.eye(n, k=1, dtype=dt)
    return d[..., :, None] * np.eye(n, dtype=dt) + upper + _T(upper)


def _tridiagonal_grads(g, ans, d, e, eigvals_only, select):
    _real_only("eigh_tridiagonal", d, e)
    g_w, g_v, w, v = _eigh_outputs(g, ans, eigvals_only)
    subset = select not in ("a", "all", 0)
    t = _tridiagonal(d, e)
    if v is None:  # eigenvalues only: the eigenvectors of the selection, from the dense matrix
        w_full, v_full = np.linalg.eigh(t)  # traced at second order; only projectors enter
        if subset:
            idx = _subset_positions(w, w_full)
            v_full = np.take_along_axis(v_full, np.broadcast_to(idx[..., None, :], np.shape(v_full)[:-1] +
                                                                np.shape(idx)[-1:]), axis=-1)
            w_full = np.take_along_axis(w_full, idx, axis=-1)
        w, v = w_full, v_full
    m = _eigh_standard(g_w, g_v, w, v, t, True, subset)
    return np.diagonal(m, axis1=-2, axis2=-1), np.diagonal(m, 1, -2, -1) + np.diagonal(m, -1, -2, -1)


def _eigh_tridiagonal_d(g, ans, d, e, eigvals_only=False, select="a", select_range=None, check_finite=True,
                        tol=0.0, lapack_driver="auto"):
    return _tridiagonal_grads(g, ans, d, e, eigvals_only, select)[0]


def _eigh_tridiagonal_e(g, ans, d, e, eigvals_only=False, select="a", select_range=None, check_finite=True,
                        tol=0.0, lapack_driver="auto"):
    return _tridiagonal_grads(g, ans, d, e, eigvals_only, select)[1]


def _eigvalsh_tridiagonal_d(g, ans, d, e, select="a", select_range=None, check_finite=True, tol=0.0,
                            lapack_driver="auto"):
    return _tridiagonal_grads(g, ans, d, e, True, select)[0]


def _eigvalsh_tridiagonal_e(g, ans, d, e, select="a", select_range=None, check_finite=True, tol=0.0,
                            lapack_driver="auto"):
    return _tridiagonal_grads(g, ans, d, e, True, select)[1]


_scipy_rule(sl.eigh_tridiagonal, _eigh_tridiagonal_d, _eigh_tridiagonal_e,
       note="through the dense tridiagonal matrix; inf/nan at repeated eigenvalues with vector cotangents")
_scipy_rule(sl.eigvalsh_tridiagonal, _eigvalsh_tridiagonal_d, _eigvalsh_tridiagonal_e)


# ---------------------------------------------------------------- banded Cholesky
def _band_slots(ab: Any, lower: bool) -> tuple:
    """Row ``i``, column ``j`` and validity of each slot of symmetric banded storage.

    Upper form: ``ab[u + i - j, j] = A[i, j]`` (``i <= j``); lower form: ``ab[i - j, j] = A[i, j]``.
    """
    rows, n = np.shape(ab)[-2:]
    return _band_index(rows, n, 0 if lower else rows - 1)


def _band_to_triangle(ab: Any, lower: bool) -> Any:
    """The dense triangle stored in ``ab`` (zeros elsewhere), gathered so that a tracer follows."""
    rows, n = np.shape(ab)[-2:]
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    r = (i - j) if lower else (rows - 1 + i - j)
    valid = (r >= 0) & (r < rows)
    return np.where(valid, ab[..., np.where(valid, r, 0), np.broadcast_to(j, (n, n))], 0)


def _triangle_to_band(m: Any, ab: Any, lower: bool) -> Any:
    """The entries of the dense ``m`` at the slots of ``ab``'s storage (0 at unused slots)."""
    i, j, valid = _band_slots(ab, lower)
    return np.where(valid, m[..., i, j], 0)


def _cholesky_banded_vjp(g, ans, ab, overwrite_ab=False, lower=False, check_finite=True):
    _real_only("cholesky_banded", ab)
    if np.ndim(ab) != 2:
        raise _refuse("cholesky_banded", "a batch of banded matrices (call it once per matrix).")
    factor = _band_to_triangle(ans, lower)
    g_factor = _band_to_triangle(g, lower)
    grad = _triangle_to_band(_onto_triangle(_cholesky_cotangent(factor, g_factor, lower), lower), ab, lower)
    # LAPACK leaves the unused corner of the storage as it was: SciPy returns those entries of ab.
    _, _, valid = _band_slots(ab, lower)
    return grad + np.where(valid, 0, g)


_scipy_rule(sl.cholesky_banded, _cholesky_banded_vjp, note="real input; through the dense factor")


def _cho_solve_banded_parts(cb_and_lower, b, g):
    cb, lower = cb_and_lower
    if np.ndim(cb) != 2:
        raise _refuse("cho_solve_banded", "a batch of banded factors (call it once per matrix).")
    vector = np.ndim(b) == 1
    cols, moved = _as_columns(g, np.shape(cb)[-1], 1 if vector else 2)
    gb = sl.cho_solve_banded((cb, lower), cols)  # A is symmetric: its own transpose
    return bool(lower), vector, _from_columns(gb, moved, 1 if vector else 2)


def _cho_solve_banded_cb(g, ans, cb_and_lower, b, overwrite_b=False, check_finite=True):
    _real_only("cho_solve_banded", cb_and_lower[0], b)
    lower, vector, gb = _cho_solve_banded_parts(cb_and_lower, b, g)
    ga = _outer_grad(gb, ans, vector)
    sym = ga + _T(ga)
    factor = _band_to_triangle(cb_and_lower[0], lower)
    # A = L L^T (lower) or U^T U (upper), as in cho_solve.
    g_factor = sym @ factor if lower else factor @ sym
    return [_triangle_to_band(g_factor, cb_and_lower[0], lower), None]


def _cho_solve_banded_b(g, ans, cb_and_lower, b, overwrite_b=False, check_finite=True):
    _real_only("cho_solve_banded", cb_and_lower[0], b)
    return _cho_solve_banded_parts(cb_and_lower, b, g)[2]


_scipy_rule(sl.cho_solve_banded, _cho_solve_banded_cb, _cho_solve_banded_b, note="real input")


# ---------------------------------------------------------------- RQ
def _rq_vjp(g, ans, a, overwrite_a=False, lwork=None, mode="full", check_finite=True):
    """``A = R Q`` is a QR decomposition of ``B = A^T J`` (``J`` reverses the order):
    ``B = (Q^T J) (J R^T J)``, so the QR rule gives the cotangent of ``B`` and ``A = J B^T``.
    """
    _real_only("rq", a)
    if mode == "raw":
        raise _refuse("rq", "mode='raw'; use mode='economic'.")
    m, n = np.shape(a)[-2:]
    if mode == "r":
        r, gr = ans, g
        r_e, gr_e = (r[..., :, n - m:], gr[..., :, n - m:]) if m < n else (r, gr)
        # Q from SciPy's R: the last min(m, n) rows of A = R Q.
        rows = min(m, n)
        q_e = np.linalg.solve(r_e[..., m - rows:, :], a[..., m - rows:, :])
        gq_e = np.zeros(np.shape(gr)[:-2] + np.shape(q_e)[-2:], dtype=np.result_type(gr))
    else:
        (r, q), (gr, gq) = ans, g
        r_e, q_e, gr_e, gq_e = r, q, gr, gq
        if mode == "full" and m < n:
            if may_be_nonzero(gq[..., : n - m, :]):
                raise _refuse("rq", "a cotangent on the extra rows of Q in mode='full' (they are not unique); "
                                    "use mode='economic'.")
            r_e, q_e, gr_e, gq_e = r[..., :, n - m:], q[..., n - m:, :], gr[..., :, n - m:], gq[..., n - m:, :]
    q1, r1 = _T(q_e)[..., ::-1], _T(r_e)[..., ::-1, ::-1]
    gq1, gr1 = _T(gq_e)[..., ::-1], _T(gr_e)[..., ::-1, ::-1]
    gb = _qr_thin(q1, r1, gq1, gr1, _T(a)[..., ::-1])
    return _T(gb)[..., ::-1, :]


_scipy_rule(sl.rq, _rq_vjp, note="real input; modes 'economic', 'r', 'full' (unique rows only)")


# ---------------------------------------------------------------- algebraic Riccati equations
def _riccati_check(name, a, b, q, r, e, s):
    _real_only(name, a, b, q, r)
    if e is not None or s is not None:
        raise _refuse(name, "the generalized form (e= or s=); only e=None, s=None is differentiated.")


def _care_grads(g, x, a, b, q, r):
    """Cotangents of ``A^T X + X A - X G X + Q = 0``, ``G = B R^-1 B^T``.

    With ``Acl = A - G X`` the tangent solves ``Acl^T dX + dX Acl = -W``
    (``W = dA^T X + X dA - X dG X + dQ``); ``Z`` solves the adjoint equation
    ``Acl Z + Z Acl^T = gX``, and ``gQ = -Z``, ``gA = -X (Z + Z^T)``,
    ``gG = X Z X``, from which ``gB`` and ``gR`` follow through ``G``.
    """
    r_inv = np.linalg.inv(r)
    closed = a - (b @ r_inv) @ (_T(b) @ x)
    z = sl.solve_continuous_lyapunov(closed, g)
    g_g = (x @ z) @ x
    g_b = g_g @ (b @ _T(r_inv)) + _T(g_g) @ (b @ r_inv)
    g_rinv = (_T(b) @ g_g) @ b
    g_r = -((_T(r_inv) @ g_rinv) @ _T(r_inv))
    return -(x @ (z + _T(z))), g_b, -z, g_r


def _dare_grads(g, x, a, b, q, r):
    """Cotangents of ``X = A^T X A - A^T X B (R + B^T X B)^-1 B^T X A + Q``.

    With the gain ``K = (R + B^T X B)^-1 B^T X A`` and ``Acl = A - B K`` (the
    terms in ``dK`` vanish: ``K`` is optimal), ``dX - Acl^T dX Acl =
    D^T X Acl + Acl^T X D + K^T dR K + dQ`` with ``D = dA - dB K``; ``Z``
    solves ``Z - Acl Z Acl^T = gX``.
    """
    gain = np.linalg.solve(r + (_T(b) @ x) @ b, (_T(b) @ x) @ a)
    closed = a - b @ gain
    z = sl.solve_discrete_lyapunov(closed, g)
    g_d = (x @ closed) @ (z + _T(z))
    return g_d, -(g_d @ _T(gain)), z, (gain @ z) @ _T(gain)


def _riccati_rule(fun, grads, k):
    name = fun.__name__

    def vjp(g, ans, a, b, q, r, e=None, s=None, balanced=True):
        _riccati_check(name, a, b, q, r, e, s)
        out = grads(g, ans, a, b, q, r)[k]
        # SciPy accepts symmetric q and r only: their gradients are the symmetric ones.
        return 0.5 * (out + _T(out)) if k >= 2 else out

    return vjp


for _fun, _grads in ((sl.solve_continuous_are, _care_grads), (sl.solve_discrete_are, _dare_grads)):
    _scipy_rule(_fun, *[_riccati_rule(_fun, _grads, k) for k in range(4)],
           note="real input, e=None and s=None; through the closed-loop Lyapunov equation")


# ---------------------------------------------------------------- null space
def _null_space_vjp(g, ans, A, rcond=None, overwrite_a=False, check_finite=True, lapack_driver="gesdd"):
    """A one-dimensional null space ``v`` (``A v = 0``, ``|v| = 1``): ``dv = -pinv(A) dA v``.

    A basis of two or more vectors is not unique (any rotation of it is one),
    so it has no derivative; an empty one carries none.
    """
    _real_only("null_space", A)
    n, d = np.shape(ans)[-2:]
    if d == 0:
        return np.zeros(np.shape(g)[:-2] + np.shape(A), dtype=np.result_type(g))
    if d > 1:
        raise _refuse("null_space", f"a null space of dimension {d} (its basis is not unique; only a "
                                    "one-dimensional null space, unique up to sign, is differentiated).")
    v, gv = ans[..., :, 0], g[..., :, 0]
    pinv = _rank_pinv(A, n - 1)
    return -((_T(pinv) @ gv[..., :, None]) * v[..., None, :])


_scipy_rule(sl.null_space, _null_space_vjp, note="one-dimensional null spaces (unique up to sign)")


# ---------------------------------------------------------------- principal angles
def _subspace_angles(A, B):
    """SciPy's algorithm (Knyazev and Argentati) on traced values: ``orth`` and ``svdvals`` have rules."""
    sl.subspace_angles(strip_all(A), strip_all(B))  # SciPy's own checks (shapes, finite values)
    qa, qb = sl.orth(A), sl.orth(B)
    cross = np.conj(_T(qa)) @ qb
    sigma = sl.svdvals(cross)
    if np.shape(qa)[1] >= np.shape(qb)[1]:
        rest = qb - qa @ cross
    else:
        rest = qa - qb @ np.conj(_T(cross))
    mask = np.asarray(strip(sigma)) ** 2 >= 0.5  # small angles from the sines, large ones from the cosines
    sines = np.arcsin(np.clip(sl.svdvals(rest), -1.0, 1.0)) if mask.any() else 0.0
    return np.where(mask, sines, np.arccos(np.clip(sigma[::-1], -1.0, 1.0)))


defcomposite(intercepted(sl.subspace_angles), _subspace_angles, note="through orth and svdvals")


# ---------------------------------------------------------------- matrix sign function
def _signm_vjp(g, ans, A, disp=None):
    """Cotangent of ``S = signm(A)`` (a primary matrix function: holomorphic, no conjugation).

    ``sign`` is locally constant off the imaginary axis, so in an eigenbasis the
    Frechet derivative is ``L_ij = E_ij (s_i - s_j) / (l_i - l_j)``: nonzero only
    between eigenvalues on opposite sides.  With ``N = S A`` (eigenvalues
    ``s_i l_i``, all in the open right half-plane) that is the one nonsingular
    Sylvester equation ``N L + L N = E - S E S`` (both sides vanish where
    ``s_i = s_j``; where ``s_i = -s_j`` they give ``s_i (l_i - l_j) L_ij = 2 E_ij``).
    Its transpose: ``Y`` solves ``N^T Y + Y N^T = G`` and the cotangent is
    ``Y - S^T Y S^T``.  Written with ``solve_sylvester`` and ``S`` itself, so a
    second derivative runs through the same rules.
    """
    if isinstance(ans, tuple):  # disp=False: (S, error estimate)
        if not _absent(g[1]):
            raise _refuse("signm", "a cotangent on the error estimate of disp=False.")
        s, g = ans[0], g[0]
    else:
        s = ans
    st = _T(s)
    nt = _T(A) @ st  # (S A)^T = A^T S^T
    y = sl.solve_sylvester(nt, nt, g)
    out = y - (st @ y) @ st
    return out if np.iscomplexobj(A) or not np.iscomplexobj(out) else np.real(out)


_scipy_rule(sl.signm, _signm_vjp, note="eigenvalues off the imaginary axis (sign is locally constant there)")
