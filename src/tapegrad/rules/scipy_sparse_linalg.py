"""Derivatives of ``scipy.sparse.linalg``, by adjoints, reached through SciPy's door.

What is differentiated
----------------------
A linear solve ``u = A^{-1} b`` is differentiated as the *exact* solution of its
equation, never through the solver's iterations: the cotangent of ``b`` solves the
transposed equation, ``g_b = A^{-T} g``, and a stored entry ``k`` of ``A`` (at
``(rows[k], cols[k])``) gets ``-g_b[rows[k]] * u[cols[k]]``; duplicate entries, which
SciPy sums, each get that full derivative.  Derivatives flow to the right-hand side
and to the values of a *traced sparse matrix* (:mod:`tapegrad.rules._sparse`: a
genuine SciPy sparse instance whose ``.data`` is a tracer), of a traced dense array,
or to the parameters a ``LinearOperator``'s callables close over.

* Direct solvers (``spsolve``, ``splu(A).solve``, ``factorized``) factorise once with
  SuperLU; the factorisation is kept by the recorded node's (constant) system
  argument, so the adjoint solve reuses it (``trans='T'``, and a CSR matrix is
  factorised as the CSC matrix of its transpose, without a copy): a gradient costs
  one more pair of triangular solves, and the nodes of a Hessian's lower tapes find
  the same factorisation.  It lives as long as the tape.  ``splu``/``spilu`` return
  a small wrapper of SciPy's ``SuperLU`` while a tape records (its compiled ``solve``
  cannot see tracers); a ``SuperLU`` made before recording is SciPy's own.
* Iterative solvers (``cg``, ``gmres``, ``bicgstab``, ``bicg``, ``cgs``, ``qmr``,
  ``minres``, ``lgmres``, ``gcrotmk``, ``tfqmr``) return SciPy's ``(x, info)``;
  ``info`` is a constant.  The derivative is that of the exact solution (like the
  implicit-function derivatives of :mod:`tapegrad.solvers.optimize`): it is as
  accurate as ``x`` is, so ask for a tight ``rtol``.  The adjoint solve runs the
  same solver on ``A^T`` at the same tolerances (``cg`` and ``minres`` assume a
  symmetric ``A``, so there ``A`` itself), with the transposed preconditioner where
  one can be formed (else ``M`` itself: the exact solution does not depend on the
  preconditioner, only the iteration count does); a breakdown or stall is retried
  with GMRES, and an adjoint solve that still stops short warns
  (:class:`AdjointConvergenceWarning`).  A preconditioner (even one closing over
  tracers, or ``spilu`` of the traced matrix), ``x0`` and ``callback`` carry no
  derivative: the exact solution does not depend on them.
* ``lsqr`` and ``lsmr``: the exact minimiser of ``|A x - b|^2 + damp^2 |x|^2``
  (full column rank, or ``damp > 0``), by chord steps on its normal equations;
  the residual and solution norms they return are traced, their estimates constant.
* ``spsolve_triangular`` reads one triangle (not the diagonal with
  ``unit_diagonal``): the other entries get no gradient, and nonzero entries in the
  other triangle are refused (SciPy's result is then no triangular solve).
* ``spilu`` is an approximate factorisation: its ``solve`` of a traced ``b`` with
  constant values is the linear map it applies (adjoint ``trans='T'``); built from
  traced values it may serve as a preconditioner, and its ``solve`` elsewhere is refused.
* ``LinearOperator`` objects whose callables close over tracers return traced
  products (``A.matvec``, ``A @ x``; ``LinearOperator._init_dtype`` is routed too);
  a solve with one is differentiated by one chord step per tape level
  (:mod:`tapegrad.solvers._core` explains why that gives every order), whose
  adjoint uses ``rmatvec`` (``cg``/``minres``: ``A`` is symmetric; a nonsymmetric
  solver without ``rmatvec`` is refused).  ``aslinearoperator`` of a traced matrix
  is solved as that matrix.

Spectral and exponential
------------------------
``eigsh`` eigenvalues (``dlam = v^T dA v / v^T M v``; ``A`` is treated as symmetric,
so derivatives are those of symmetric perturbations) and unit eigenvectors of
``eigsh(A)`` (each moves orthogonally to itself: ``-(A - lam)^+ P dA v``, by
``minres``; sign-invariant functions); ``eigs`` eigenvalues (left vectors by
inverse iteration) and unit eigenvectors (the gauge ``v^H dv = 0`` of
:mod:`tapegrad.rules.linalg`'s eig, by a bordered sparse solve per vector;
phase-dependent functions refused); ``svds`` singular values (``dsigma = u^T dA v``)
and vectors (the unit eigenvectors ``[u; v] / sqrt(2)`` of ``[[0, A], [A^T, 0]]``, by
the same rule as eigsh's; sign-invariant functions).  Second
derivatives exist for ``eigsh``'s eigenvalues without ``M`` and ``svds``' singular
values (the VJP then uses the traced vectors of the same run) and are refused otherwise.  ``expm_multiply``:
w.r.t. ``B`` (``expm_multiply`` with ``A^T``) and the values of ``A`` by
Gauss-Legendre quadrature of ``t int_0^1 (e^{s t A^T} g)(e^{(1-s) t A} B)^T ds`` on
pieces where ``|t A|_1 <= 2`` (accurate to rounding; at every order, the nodes
being expm_multiply calls again); for a ``LinearOperator`` closing over tracers
(with ``rmatvec``) the same integral through its traced ``matvec``, first order only.  ``expm`` of a sparse matrix goes through
``scipy.linalg.expm`` of the dense matrix (its Frechet-derivative rule), on SciPy's
result pattern.  ``norm`` sums duplicates first (``ord=2`` through ``svds``).
``onenormest`` is an estimate, a constant; with ``t >= n`` SciPy computes the
exact norm, which is differentiated.

How the rules are reached
-------------------------
Every rule here is registered with ``route_all``: the door hands it every call made
while a tape records, because neither a traced sparse matrix nor a traced closure is
an argument the door sees by itself (this module does not need
``interception.hold_tracers_in``, which the rules layer cannot import); a rule that
finds nothing traced runs SciPy's own code on the caller's arguments.  The VJPs are
written with this module's primitives (a solve's adjoint is a solve), so a Hessian
(the Jacobian of a traced gradient) differentiates them again.
"""

from __future__ import annotations

import inspect
import threading
import warnings
from typing import Any, Callable, Optional

import numpy as np
import scipy.sparse as _sp
import scipy.sparse.linalg as _spla
from scipy.sparse.linalg import LinearOperator
from scipy.sparse.linalg._interface import MatrixLinearOperator, _CustomLinearOperator

from ..dispatch import primitive
from ..errors import NonDifferentiableArgumentError
from ..registry import ORIGINALS, defcomposite, defvjp, intercepted
from ..tracer import Tracer, strip
from ._sparse import coo_parts, innermost, is_sparse, traced_data, with_data
from .linalg import check_phase_free

__all__ = ["AdjointConvergenceWarning"]

class AdjointConvergenceWarning(RuntimeWarning):
    """The adjoint solve of an iterative solver stopped before its tolerance: the gradient is inaccurate."""


def _original(fun: Any) -> Callable[..., Any]:
    return ORIGINALS.get(fun, fun)


def _refuse(name: str, why: str) -> NonDifferentiableArgumentError:
    return NonDifferentiableArgumentError(f"tapegrad cannot differentiate scipy.sparse.linalg.{name} here: {why}")


def _traced(x: Any) -> bool:
    return type(x) is Tracer or (is_sparse(x) and traced_data(x) is not None)


def _levels(obj: Any, into: Optional[set] = None) -> set:
    """The tape levels of the tracers in ``obj`` (one level of lists and tuples, sparse values)."""
    levels = set() if into is None else into
    if type(obj) in (list, tuple):
        for o in obj:
            _levels(o, levels)
        return levels
    if is_sparse(obj):
        obj = traced_data(obj)
    while type(obj) is Tracer:
        levels.add(obj._tape.level)
        obj = obj._value
    return levels


def _absent(g: Any) -> bool:
    """A cotangent that is a plain constant zero (an output nobody used)."""
    return type(g) is np.ndarray and not g.any()


def _as_columns(g: Any, core: int) -> tuple:
    """``g`` (``batch + (n,)`` or ``batch + (n, k)``) as one right-hand side, and how to undo it."""
    shape = np.shape(g)
    if len(shape) == core:
        return g, None
    moved = np.moveaxis(g, -core, 0)
    return np.reshape(moved, (shape[-core], -1)), np.shape(moved)


def _from_columns(x: Any, moved: Any, core: int) -> Any:
    return x if moved is None else np.moveaxis(np.reshape(x, (np.shape(x)[0],) + tuple(moved[1:])), 0, -core)


# ======================================================================= systems
# A *system* is the constant part of a linear operator: how to build it from its values
# ``data`` (a plain array at the innermost level) and how to apply its inverse.  It is a
# plain argument of the recorded nodes, so at second order the same object serves the
# nodes of the lower tapes (and the factorisation it keeps is found again).
class _System:
    """Base class: a square (or, for least squares, rectangular) operator with values ``data``."""

    #: the name used in messages
    name = "solve"
    #: whether the operator is symmetric by assumption (cg, minres): its transpose is itself
    symmetric = False

    def __init__(self) -> None:
        self._adjoint_key: Any = None
        self._adjoint_value: Any = None

    # -- to be provided
    def shape(self) -> tuple:
        raise NotImplementedError

    def solve(self, data: Any, b: np.ndarray, trans: bool) -> np.ndarray:
        """``A^{-1} b`` (``A^{-T} b`` when ``trans``) on plain values."""
        raise NotImplementedError

    def positions(self) -> tuple:
        """``(rows, cols)`` of each stored value, in the order of ``data`` (sparse systems)."""
        raise NotImplementedError

    mask: Any = None  # 0/1 weights of the values the solver reads (triangular solves)

    # -- shared
    def adjoint(self, data: Any, g: Any, trans: bool, core: int) -> Any:
        """The cotangent of the right-hand side: the transposed solve of ``g``, batch axes folded in.

        Both VJPs of a node need it; the last one is kept (keyed by the cotangent
        object itself) so that one adjoint solve serves both.
        """
        key = self._adjoint_key
        if key is not None and key[0] is g and key[1] == trans:
            return self._adjoint_value
        cols, moved = _as_columns(g, core)
        gb = _from_columns(_solve_node(data, cols, self, not trans), moved, core)
        self._adjoint_key, self._adjoint_value = (g, trans), gb
        return gb

    def data_cotangent(self, gb: Any, x: Any, trans: bool) -> Any:
        """``-gb x^T`` read at the stored positions (``-x gb^T`` for the transposed operator)."""
        rows, cols = self.positions()
        if trans:
            rows, cols = cols, rows
        if np.ndim(x) == 1:
            out = -(gb[..., rows] * x[..., cols])
        else:
            out = -np.sum(gb[..., rows, :] * x[..., cols, :], axis=-1)
        return out if self.mask is None else out * self.mask


class _SparseSystem(_System):
    """A sparse matrix: ``template``'s structure with values ``data``."""

    def __init__(self, template: Any, name: str) -> None:
        super().__init__()
        self.template = template
        self.name = name
        self._positions: Any = None
        self._canonical = bool(getattr(template, "has_canonical_format", True))

    def shape(self) -> tuple:
        return self.template.shape

    def matrix(self, data: Any) -> Any:
        # contiguous: SciPy's compiled code refuses a strided view (the real part of a complex array)
        matrix = self.template._with_data(np.ascontiguousarray(data), copy=False)
        # SciPy sorts and sums a non-canonical matrix in place (spsolve, splu): never the traced values
        return matrix if self._canonical else matrix.copy()

    def positions(self) -> tuple:
        if self._positions is None:
            rows, cols, _, _ = coo_parts(self.template)
            self._positions = (np.asarray(rows, dtype=np.intp), np.asarray(cols, dtype=np.intp))
        return self._positions


class _DenseSystem(_System):
    """A dense matrix: ``data`` is the matrix itself."""

    def shape(self) -> tuple:
        return self._shape

    def matrix(self, data: Any) -> Any:
        return data

    def data_cotangent(self, gb: Any, x: Any, trans: bool) -> Any:
        if np.ndim(x) == 1:
            out = -(gb[..., :, None] * x[..., None, :])
        else:
            out = -(gb @ np.swapaxes(x, -1, -2))
        return np.swapaxes(out, -1, -2) if trans else out


# ----------------------------------------------------------------------- direct: SuperLU
class _LUSystem(_SparseSystem):
    """Solved by SuperLU; the factorisation of the last values is kept for the adjoint solves."""

    def __init__(self, template: Any, name: str, options: dict) -> None:
        super().__init__(template, name)
        self.options = options
        self._factor: Any = None  # (the values factorised, whether their transpose was, SuperLU)

    def factor(self, data: Any, b: Any = None) -> tuple:
        """SuperLU of these values, in the precision SciPy's ``spsolve`` would use with ``b`` (kept)."""
        values = np.result_type(np.asarray(data).dtype, np.float32)  # SciPy's upcast: integers to float64
        rhs = np.asarray(b).dtype if b is not None else values
        want = np.promote_types(values, np.finfo(rhs).dtype if rhs.kind in "fc" else np.float64)
        kept = self._factor
        if kept is not None and kept[0] is data and np.can_cast(want, self.dtype):
            return kept[1], kept[2]
        matrix = self.matrix(data)
        # SuperLU factorises CSC: CSR values are the CSC values of the transpose, so the
        # transpose is factorised without a copy and A's solves use trans='T'.
        transposed = matrix.format == "csr"
        csc = matrix.T if transposed else matrix.tocsc()
        if csc.dtype != want:
            csc = csc.astype(want)
        elif not csc.has_canonical_format:  # splu sums duplicates in place: not in the traced values
            csc = csc.copy()
        lu = _original(_spla.splu)(csc, **self.options)
        self._factor = (data, transposed, lu)
        self.dtype = csc.dtype
        return transposed, lu

    def solve(self, data: Any, b: np.ndarray, trans: bool) -> np.ndarray:
        try:
            transposed, lu = self.factor(data, b)
        except RuntimeError as exc:  # SuperLU: "Factor is exactly singular"
            if "singular" not in str(exc):
                raise
            warnings.warn("Matrix is exactly singular", _sp.linalg.MatrixRankWarning, stacklevel=4)
            return np.full(np.shape(b), np.nan, dtype=np.result_type(data, b, np.float64))
        return _lu_apply(lu, b, "T" if trans != transposed else "N", self.dtype)


def _lu_apply(lu: Any, b: np.ndarray, trans: str, dtype: Any) -> np.ndarray:
    """SuperLU's solve (``dtype``: the factorisation's), a complex right-hand side of a real one part by part."""
    b = np.asarray(b)
    if dtype.kind == "f" and b.dtype.kind == "c":
        return lu.solve(np.ascontiguousarray(b.real, dtype=dtype), trans=trans) + 1j * lu.solve(
            np.ascontiguousarray(b.imag, dtype=dtype), trans=trans)
    # a factorisation given as a constant (splu of plain float32 values) takes its own precision
    return lu.solve(np.asarray(b, dtype=dtype if np.can_cast(b.dtype, dtype, "same_kind") else None), trans=trans)


def _lu_dtype(lu: Any) -> np.dtype:
    """The values' dtype of a SuperLU object (reading ``lu.L`` would copy the factor)."""
    return lu.solve(np.zeros(lu.shape[0], dtype=np.float32)).dtype


class _FixedLUSystem(_System):
    """A SuperLU factorisation given as a constant (``spilu``, or ``splu`` of plain values)."""

    def __init__(self, lu: Any, name: str, dtype: Any = None) -> None:
        super().__init__()
        self.lu = lu
        self.name = name
        self.dtype = dtype

    def solve(self, data: Any, b: np.ndarray, trans: bool) -> np.ndarray:
        if self.dtype is None:
            self.dtype = _lu_dtype(self.lu)
        return _lu_apply(self.lu, b, "T" if trans else "N", self.dtype)


# ----------------------------------------------------------------------- triangular
class _TriangularSystem(_SparseSystem):
    """``spsolve_triangular``: reads one triangle (and the diagonal unless it is a unit one)."""

    def __init__(self, template: Any, lower: bool, unit: bool) -> None:
        super().__init__(template, "spsolve_triangular")
        self.lower, self.unit = lower, unit
        rows, cols = self.positions()
        read = (rows >= cols) if lower else (rows <= cols)
        if np.any(np.asarray(template.data)[~read] != 0):
            # SciPy's solver then mixes in entries of the other triangle: no triangular solve to differentiate.
            raise _refuse("spsolve_triangular", f"nonzero entries above the diagonal of a lower triangular matrix "
                          f"(or below, for lower=False: here lower={lower}); SciPy's result is then not the "
                          "triangular solve. Pass sp.tril(A) or sp.triu(A).")
        if unit:
            read &= rows != cols
        self.mask = read.astype(np.float64)

    def solve(self, data: Any, b: np.ndarray, trans: bool) -> np.ndarray:
        matrix = self.matrix(data)
        lower = self.lower
        if trans:
            matrix, lower = matrix.T, not lower
        if matrix.format not in ("csr", "csc"):
            matrix = matrix.tocsr()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", _sp.SparseEfficiencyWarning)
            return _original(_spla.spsolve_triangular)(matrix, b, lower=lower, unit_diagonal=self.unit)


# ----------------------------------------------------------------------- iterative
_PRECONDITIONING = threading.local()


class _Iterative:
    """How an iterative solver is run: the function, its options, the preconditioner."""

    def __init__(self, fun: Any, name: str, options: dict, preconditioners: dict, symmetric: bool) -> None:
        self.fun, self.name, self.options = fun, name, options
        self.preconditioners, self.symmetric = preconditioners, symmetric
        self.info: Any = 0

    def run(self, operator: Any, b: np.ndarray, trans: bool, x0: Any = None) -> np.ndarray:
        if np.ndim(b) == 2:  # SciPy's iterative solvers take one right-hand side
            columns = [self.run(operator, b[:, j], trans, None) for j in range(np.shape(b)[1])]
            return np.stack(columns, axis=1) if columns else np.zeros(np.shape(b))
        if not np.any(b):  # a zero right-hand side (a chord step's): zero, without iterating
            return np.zeros(np.shape(b), dtype=np.result_type(b, operator.dtype, np.float64))
        options, precond = self.options, self.preconditioners
        if trans:
            # The adjoint iterates are not the user's: no callback, and no vectors kept from A's solves.
            options = {k: v for k, v in options.items() if k not in ("callback", "outer_v", "CU")}
            if not self.symmetric:
                operator = _transposed(operator)
                precond = {k: _transposed(m) for k, m in precond.items()}
                if "M1" in precond or "M2" in precond:  # A ~ M1 M2, so A^T ~ M2^T M1^T
                    precond = {"M1": precond.get("M2"), "M2": precond.get("M1")}
        _PRECONDITIONING.active = getattr(_PRECONDITIONING, "active", 0) + 1
        try:
            x, info = _original(self.fun)(operator, b, x0=x0, **options, **precond)
        finally:
            _PRECONDITIONING.active -= 1
            _resume(self.preconditioners.values())
        if trans and info != 0 and self.fun is not _spla.gmres:
            # A breakdown (bicgstab's, cgs's on some right-hand sides) or a stall: the exact adjoint
            # does not depend on the method, so GMRES, the most robust of them, tries again.
            n = np.shape(b)[0]
            x, info = _original(_spla.gmres)(operator, b, x0=x, rtol=options.get("rtol", 1e-5),
                                             atol=options.get("atol", 0.0), restart=min(n, 50),
                                             maxiter=max(options.get("maxiter") or 0, min(10 * n, 1000)),
                                             M=precond.get("M"))
        if trans:
            if info != 0:
                warnings.warn(
                    f"tapegrad: the adjoint solve of scipy.sparse.linalg.{self.name} stopped with info={info} "
                    "before its tolerance: the gradient is inaccurate. Raise maxiter, or give a preconditioner "
                    "M (with rmatvec, for a LinearOperator, so that its transpose serves the adjoint).",
                    AdjointConvergenceWarning, stacklevel=5)
        else:
            self.info = info
        return x


def _transposed(m: Any) -> Any:
    """The transpose of an operator or preconditioner, or ``m`` itself where none can be formed."""
    if m is None:
        return None
    if isinstance(m, _PlainOperator):
        return m.T if m.has_transpose else None
    if isinstance(m, LinearOperator):
        if isinstance(m, _CustomLinearOperator) and m._CustomLinearOperator__rmatvec_impl is None \
                and m._CustomLinearOperator__rmatmat_impl is None:
            return m  # a preconditioner without a transpose: still one (see the module docstring)
        return m.T
    return m.T


class _IterativeSparseSystem(_SparseSystem):
    def __init__(self, template: Any, runner: _Iterative) -> None:
        super().__init__(template, runner.name)
        self.runner = runner
        self.x0: Any = None

    def solve(self, data: Any, b: np.ndarray, trans: bool) -> np.ndarray:
        return self.runner.run(self.matrix(data), b, trans, None if trans else self.x0)


class _IterativeDenseSystem(_DenseSystem):
    def __init__(self, shape: tuple, runner: _Iterative) -> None:
        super().__init__()
        self._shape, self.runner, self.name = shape, runner, runner.name
        self.x0: Any = None

    def solve(self, data: Any, b: np.ndarray, trans: bool) -> np.ndarray:
        return self.runner.run(np.asarray(data), b, trans, None if trans else self.x0)


class _OperatorSystem(_System):
    """A plain ``LinearOperator`` (the user's, its callables' outputs stripped), solved iteratively."""

    def __init__(self, operator: Any, runner: _Iterative) -> None:
        super().__init__()
        self.operator, self.runner, self.name = operator, runner, runner.name

    def solve(self, data: Any, b: np.ndarray, trans: bool) -> np.ndarray:
        if trans and not self.runner.symmetric and _transposed(self.operator) is None:
            raise _refuse(self.name, "the adjoint solve needs the transpose of a LinearOperator given without "
                                     "rmatvec. Give LinearOperator(..., rmatvec=...) (the transpose's action), or "
                                     "use cg or minres for a symmetric operator.")
        try:
            return self.runner.run(self.operator, b, trans)
        finally:
            self.operator.resume()


# ======================================================================= the solve node
def _solve_forward(data: Any, b: Any, system: _System, trans: bool) -> np.ndarray:
    """``A^{-1} b`` (``A^{-T} b``) with ``A`` the system's operator with values ``data``."""
    return system.solve(data, b, trans)


_solve_node = primitive(_solve_forward)


def _solve_data_vjp(g: Any, ans: Any, data: Any, b: Any, system: _System, trans: bool) -> Any:
    if isinstance(system, (_FixedLUSystem, _OperatorSystem)):
        raise _refuse(system.name, "its values are held by a factorisation or an operator (no gradient flows "
                                   "to them through this node).")
    gb = system.adjoint(data, g, trans, np.ndim(ans))
    return system.data_cotangent(gb, ans, trans)


def _solve_b_vjp(g: Any, ans: Any, data: Any, b: Any, system: _System, trans: bool) -> Any:
    return system.adjoint(data, g, trans, np.ndim(ans))


defvjp(_solve_node, _solve_data_vjp, _solve_b_vjp, None, None, needs=((0, 2, 3, -1), (0, 2, 3, -1)))


# ======================================================================= reading the matrix argument
def _sparse_parts(A: Any, name: str) -> tuple:
    """``(template, data)``: a plain matrix with ``A``'s structure, and ``A``'s values (traced or not)."""
    data = traced_data(A)
    if data is None:
        if A.format not in ("csr", "csc", "coo", "dia", "bsr"):
            A = A.tocsr()  # LIL and DOK keep their values in Python lists
        return A, A.data
    if A.format not in ("csr", "csc", "coo"):
        A = A.tocsr()  # the scipy.sparse rules' conversion of a traced matrix
        data = traced_data(A)
        if data is None or A.format != "csr":
            raise _refuse(name, f"a traced {A.format!r} matrix (convert it with .tocsr() first).")
    template = A._with_data(innermost(data), copy=False)
    return template, data


def _unwrap_operator(A: Any) -> Any:
    """The matrix behind ``aslinearoperator(matrix)``, else ``A``."""
    if isinstance(A, MatrixLinearOperator) and (is_sparse(A.A) or type(A.A) is Tracer
                                                or isinstance(A.A, np.ndarray)):
        return A.A
    return A


def _vector_like(b: Any, n: int) -> tuple:
    """``b`` as SciPy's solvers see it: ``(b, whether it was (n, 1))`` (the result is then 1-D)."""
    column = np.ndim(b) == 2 and np.shape(b)[1] == 1
    return (np.reshape(b, (n,)) if column else b), column


# ======================================================================= spsolve, splu, factorized
def _spsolve(A: Any, b: Any, permc_spec: Any = None, use_umfpack: bool = True) -> Any:
    if not (_traced(A) or _traced(b)):
        return _original(_spla.spsolve)(A, b, permc_spec=permc_spec, use_umfpack=use_umfpack)
    if is_sparse(b) and traced_data(b) is not None:
        raise _refuse("spsolve", "a sparse right-hand side with traced values; pass b.toarray().")
    if not is_sparse(A):
        warnings.warn("spsolve requires A be CSC or CSR matrix format", _sp.SparseEfficiencyWarning, stacklevel=3)
        if type(A) is Tracer:  # a dense traced matrix: the same equation, solved densely
            column = np.ndim(b) == 2 and np.shape(b)[1] == 1
            x = np.linalg.solve(A, b if np.ndim(b) == 2 else b[:, None])
            return x[:, 0] if np.ndim(b) == 1 or column else x
        A = _sp.csc_array(A)
    template, data = _sparse_parts(A, "spsolve")
    n = template.shape[0]
    if template.shape[0] != template.shape[1]:
        raise ValueError(f"matrix must be square (has shape {template.shape})")
    if np.shape(b)[0] != n:
        raise ValueError(f"matrix - rhs dimension mismatch ({template.shape} - {np.shape(b)[0]})")
    system = _LUSystem(template, "spsolve", {"permc_spec": permc_spec})
    if is_sparse(b):
        if b.ndim == 1 or b.shape[1] == 1:  # SciPy solves a sparse vector densely
            return _solve_node(data, np.reshape(b.toarray(), (n,)), system, False)
        # A sparse result (inv(A) = spsolve(A, I)): SciPy's, its values carrying the dense solve's derivatives.
        value = _original(_spla.spsolve)(template._with_data(np.asarray(innermost(data)), copy=True), b,
                                         permc_spec=permc_spec, use_umfpack=use_umfpack)
        solution = _solve_node(data, b.toarray(), system, False)
        rows, cols, values, _ = coo_parts(value)
        exact = solution[rows, cols]
        return with_data(value, values + (exact - strip(exact)))
    b, _ = _vector_like(b, n)
    return _solve_node(data, b, system, False)


defcomposite(intercepted(_spla.spsolve, route_all=True), _spsolve,
             note="adjoint solve on the same SuperLU factorisation")


class _LU:
    """What ``splu``, ``spilu`` return while a tape records: SciPy's ``SuperLU`` and the values it factorised.

    ``solve(rhs, trans)`` is differentiated with respect to ``rhs`` and, for ``splu``,
    the matrix values; the other attributes are SciPy's.  The factors ``L``, ``U``
    of traced values are refused (tapegrad does not differentiate them).
    """

    def __init__(self, lu: Any, data: Any, system: _System, exact: bool, name: str) -> None:
        self._lu, self._data, self._system, self._exact, self._name = lu, data, system, exact, name

    def solve(self, rhs: Any, trans: str = "N") -> Any:
        traced_values = type(self._data) is Tracer
        if not (traced_values or type(rhs) is Tracer):
            return self._lu.solve(rhs, trans=trans)
        if traced_values and not self._exact:
            if getattr(_PRECONDITIONING, "active", 0):
                return self._lu.solve(strip(rhs), trans=trans)
            raise _refuse(f"{self._name}(...).solve", "the incomplete factorisation of traced values is an "
                          "approximation whose derivative tapegrad does not compute. Use it as a preconditioner "
                          "(M=...: the solution does not depend on it), or factorise plain values.")
        if trans not in ("N", "T", "H"):
            raise ValueError(f"trans must be 'N', 'T' or 'H', not {trans!r}")
        if trans == "H" and np.iscomplexobj(self._system_dtype()):
            raise _refuse(f"{self._name}(...).solve", "trans='H' with complex values (conjugation is not "
                          "holomorphic); solve with trans='T' of the conjugate.")
        return _solve_node(self._data, rhs, self._system, trans != "N")

    def _system_dtype(self) -> Any:
        return _lu_dtype(self._lu)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # not yet set (copy, pickle): no recursion through self._lu
            raise AttributeError(name)
        if name in ("L", "U") and type(self._data) is Tracer:
            raise _refuse(self._name, f"the factor {name} of traced values (tapegrad differentiates solves with "
                                      "the factorisation, not its factors).")
        return getattr(self._lu, name)

    def __repr__(self) -> str:
        return f"<tapegrad {self._name} of {self._lu!r}>"


def _factorize(name: str, fun: Any, exact: bool) -> Callable[..., Any]:
    def impl(A: Any, *args: Any, **kwargs: Any) -> Any:
        if not _traced(A):
            lu = _original(fun)(A, *args, **kwargs)
            return _LU(lu, None, _FixedLUSystem(lu, name), exact, name)
        if not is_sparse(A):
            raise _refuse(name, "a dense traced matrix (use scipy.linalg.lu_factor, or a sparse matrix).")
        template, data = _sparse_parts(A, name)
        plain = template._with_data(np.asarray(innermost(data)), copy=False)
        csc = plain.tocsc()
        if csc.has_canonical_format is False or csc.data is innermost(data):
            csc = csc.copy()  # SciPy sums duplicates in place: never in the traced values
        lu = _original(fun)(csc, *args, **kwargs)
        system = _LUSystem(template, name, {})
        if exact:  # the adjoint solves reuse this very factorisation
            system._factor = (innermost(data), False, lu)
            system.dtype = np.result_type(plain.dtype, np.float32)  # SciPy's upcast of integer values
        return _LU(lu, data, system, exact, name)

    return impl


defcomposite(intercepted(_spla.splu, route_all=True), _factorize("splu", _spla.splu, True),
             note="returns a SuperLU whose solve is differentiated (values and rhs)")
defcomposite(intercepted(_spla.spilu, route_all=True), _factorize("spilu", _spla.spilu, False),
             note="constant preconditioner; its solve of a traced rhs is linear")


def _factorized(A: Any) -> Any:
    if not _traced(A):
        # SciPy's own: splu(A).solve, whose splu comes through this door (a solve of a traced b is linear).
        return _original(_spla.factorized)(A)
    return _factorize("factorized", _spla.splu, True)(A).solve


defcomposite(intercepted(_spla.factorized, route_all=True), _factorized, note="SuperLU's solve, as splu")


# ----------------------------------------------------------------------- triangular
def _spsolve_triangular(A: Any, b: Any, lower: bool = True, overwrite_A: bool = False, overwrite_b: bool = False,
                        unit_diagonal: bool = False) -> Any:
    if not (_traced(A) or _traced(b)):
        return _original(_spla.spsolve_triangular)(A, b, lower=lower, overwrite_A=overwrite_A,
                                                   overwrite_b=overwrite_b, unit_diagonal=unit_diagonal)
    if not is_sparse(A):
        raise _refuse("spsolve_triangular", "a dense matrix with traced values (use scipy.linalg.solve_triangular).")
    template, data = _sparse_parts(A, "spsolve_triangular")
    if np.ndim(b) not in (1, 2):
        raise ValueError(f"b must have 1 or 2 dims but its shape is {np.shape(b)}.")
    return _solve_node(data, b, _TriangularSystem(template, lower, unit_diagonal), False)


defcomposite(intercepted(_spla.spsolve_triangular, route_all=True), _spsolve_triangular,
             note="gradient on the triangle read")


# ======================================================================= LinearOperator with traced callables
class _PlainOperator(LinearOperator):
    """The user's operator for SciPy's own run: its callables' outputs stripped to plain numbers.

    The first traced output shows which tapes the callables close over; they are
    paused for the rest of the run (a paused tape computes without recording).
    """

    def __init__(self, operator: Any) -> None:
        self.operator = operator
        self.levels: set = set()
        self.paused: list = []
        self.has_transpose = not (isinstance(operator, _CustomLinearOperator)
                                  and operator._CustomLinearOperator__rmatvec_impl is None
                                  and operator._CustomLinearOperator__rmatmat_impl is None)
        super().__init__(operator.dtype if operator.dtype is not None else np.dtype(np.float64), operator.shape)

    def _seen(self, out: Any) -> Any:
        if type(out) is not Tracer:
            return out
        value = out
        while type(value) is Tracer:
            self.levels.add(value._tape.level)
            if value._tape.recording:
                value._tape.recording = False
                self.paused.append(value._tape)
            value = value._value
        return value

    def resume(self) -> None:
        while self.paused:
            self.paused.pop().recording = True

    def _matvec(self, x: Any) -> Any:
        return self._seen(self.operator._matvec(x))

    def _columns(self, one: Callable[[Any], Any], x: Any) -> Any:
        # Column by column through this wrapper: SciPy's default _matmat calls the *public*
        # matvec, which outside a recording window would meet the callables' tracers.
        if np.shape(x)[1] == 0:
            return np.zeros((self.shape[0 if one == self._matvec else 1], 0), dtype=self.dtype)
        return np.stack([one(np.asarray(x)[:, j]) for j in range(np.shape(x)[1])], axis=1)

    def _own(self, name: str) -> bool:
        """Whether the user's operator implements ``name`` itself (a callable given for it)."""
        if isinstance(self.operator, _CustomLinearOperator):
            return getattr(self.operator, f"_CustomLinearOperator__{name}_impl") is not None
        return True

    def _matmat(self, x: Any) -> Any:
        if not self._own("matmat"):
            return self._columns(self._matvec, x)
        return self._seen(self.operator._matmat(x))

    def _rmatvec(self, x: Any) -> Any:
        return self._seen(self.operator._rmatvec(x))

    def _rmatmat(self, x: Any) -> Any:
        if not self._own("rmatmat"):
            return self._columns(self._rmatvec, x)
        return self._seen(self.operator._rmatmat(x))

    def _adjoint(self) -> Any:
        if not self.has_transpose:
            raise NotImplementedError("rmatvec is not defined")
        return super()._adjoint()

    def _transpose(self) -> Any:
        if not self.has_transpose:
            raise NotImplementedError("rmatvec is not defined")
        return super()._transpose()


def _product_rule(method: str, transposed: bool, vector: bool) -> Callable[..., Any]:
    """``LinearOperator.matvec`` (``rmatvec``, ``matmat``, ``rmatmat``): SciPy's checks, traced results kept."""
    inner = "_" + method
    fun = getattr(LinearOperator, method)

    def impl(self: Any, x: Any) -> Any:
        if type(x) is not Tracer:
            if is_sparse(x) or (not vector and type(x).__module__.startswith("sparse")):
                return _original(fun)(self, x)
            x = np.asanyarray(x)
        n = self.shape[0 if transposed else 1]
        if vector and np.shape(x) not in ((n,), (n, 1)):
            raise ValueError("dimension mismatch")
        if not vector and (np.ndim(x) != 2 or np.shape(x)[0] != n):
            raise ValueError(f"dimension mismatch: {self.shape}, {np.shape(x)}")
        y = getattr(self, inner)(x)
        if type(y) is Tracer or type(x) is Tracer:
            m = self.shape[1 if transposed else 0]
            if vector:
                return np.reshape(y, (m,) if np.ndim(x) == 1 else (m, 1))
            return y
        # SciPy's own finish of a plain result
        if vector:
            y = np.asmatrix(y) if isinstance(x, np.matrix) else np.asarray(y)
            m = self.shape[1 if transposed else 0]
            return y.reshape(m) if x.ndim == 1 else y.reshape(m, 1)
        return np.asmatrix(y) if isinstance(y, np.matrix) else y

    return impl


for _method, _transposed_flag, _vector in (("matvec", False, True), ("rmatvec", True, True),
                                           ("matmat", False, False), ("rmatmat", True, False)):
    defcomposite(intercepted(getattr(LinearOperator, _method), route_all=True),
                 _product_rule(_method, _transposed_flag, _vector),
                 note="traced callables give traced products")


def _dot(self: Any, x: Any) -> Any:
    if type(x) is not Tracer:
        return _original(LinearOperator.dot)(self, x)
    if np.ndim(x) == 1 or (np.ndim(x) == 2 and np.shape(x)[1] == 1):
        return self.matvec(x)
    if np.ndim(x) == 2:
        return self.matmat(x)
    raise ValueError(f"expected 1-d or 2-d array or matrix, got {x!r}")


defcomposite(intercepted(LinearOperator.dot, route_all=True), _dot, note="A @ x, A.dot(x) of a traced x")


def _init_dtype(self: Any) -> None:
    if self.dtype is None:
        # Only the dtype is read: a preconditioner from traced values may be called here.
        _PRECONDITIONING.active = getattr(_PRECONDITIONING, "active", 0) + 1
        try:
            out = self.matvec(np.zeros(self.shape[-1], dtype=np.int8))
        finally:
            _PRECONDITIONING.active -= 1
        self.dtype = out.dtype if type(out) is Tracer else np.asarray(out).dtype


defcomposite(intercepted(LinearOperator._init_dtype, route_all=True), _init_dtype,
             note="a matvec closing over tracers")


def _aslinearoperator(A: Any) -> Any:
    if type(A) is Tracer:
        if np.ndim(A) > 2:
            raise ValueError("array must have ndim <= 2")
        return MatrixLinearOperator(np.atleast_2d(A))
    return _original(_spla.aslinearoperator)(A)


defcomposite(intercepted(_spla.aslinearoperator, route_all=True), _aslinearoperator,
             note="a traced matrix is solved as that matrix")


# ======================================================================= iterative solvers
def _resume(operators: Any) -> None:
    """Restart the tapes that the plain runs of these operators paused."""
    for m in operators:
        if isinstance(m, _PlainOperator):
            m.resume()


def _plain_preconditioner(m: Any) -> Any:
    """A preconditioner's plain values: the exact solution does not depend on it."""
    if m is None:
        return None
    if is_sparse(m) and traced_data(m) is not None:
        return m._with_data(np.asarray(innermost(m.data)), copy=False)
    if type(m) is Tracer:
        return strip(m)
    if isinstance(m, LinearOperator) and not isinstance(m, MatrixLinearOperator):
        return _PlainOperator(m)
    if isinstance(m, MatrixLinearOperator):
        return _spla.aslinearoperator(_plain_preconditioner(m.A))
    return m


def _chord(matvec: Callable[[Any], Any], b: Any, x0: np.ndarray, inverse: Callable[[Any], Any],
           steps: int) -> Any:
    """``x <- x - A0^{-1} (A x - b - stop(A x - b))``, ``steps`` times, from SciPy's plain ``x0``.

    The value stays ``x0`` exactly; each step adds one order of derivatives of the
    exact solution of ``A x = b`` (see :mod:`tapegrad.solvers._core`).
    """
    x = x0
    for _ in range(max(1, steps)):
        r = matvec(x) - b
        if type(r) is not Tracer:
            return x
        x = x - inverse(r - strip(r))
    return x


def _iterative(fun: Any, name: str, symmetric: bool, preconditioners: tuple) -> Callable[..., Any]:
    def impl(A: Any, b: Any, x0: Any = None, **kwargs: Any) -> Any:
        if name == "minres" and type(kwargs.get("shift")) is Tracer:
            raise _refuse(name, "a traced shift; add it to the matrix (A - shift * I) instead.")
        op = _unwrap_operator(A)
        closure = isinstance(op, LinearOperator)
        options = dict(kwargs)
        precond = {k: _plain_preconditioner(options.pop(k)) for k in preconditioners if k in options}
        if not closure and not (_traced(op) or _traced(b)):
            _PRECONDITIONING.active = getattr(_PRECONDITIONING, "active", 0) + 1
            try:  # SciPy's own run; a preconditioner closing over tracers gives plain numbers
                return _original(fun)(A, b, x0, **options, **precond)
            finally:
                _PRECONDITIONING.active -= 1
                _resume(precond.values())
        x0 = None if x0 is None else np.asarray(strip(x0))
        runner = _Iterative(fun, name, options, precond, symmetric)
        n = op.shape[1]
        b_vec = _vector_like(b, n)[0] if np.ndim(b) == 2 else b
        if np.ndim(b_vec) != 1:
            raise ValueError(f"{name}: b must be a vector of length {n}, not of shape {np.shape(b)}")
        if closure:
            plain = _PlainOperator(op)
            _PRECONDITIONING.active = getattr(_PRECONDITIONING, "active", 0) + 1
            try:
                x, info = _original(fun)(plain, np.asarray(strip(b_vec)), x0, **{**options, **precond})
            finally:
                _PRECONDITIONING.active -= 1
                _resume([plain, *precond.values()])
            levels = plain.levels | _levels(b_vec)
            if not levels:
                return x, info
            system = _OperatorSystem(plain, runner)
            return _chord(op.matvec, b_vec, x, lambda r: _solve_node(None, r, system, False), len(levels)), info
        if is_sparse(op):
            template, data = _sparse_parts(op, name)
            system = _IterativeSparseSystem(template, runner)
        else:
            data = op
            system = _IterativeDenseSystem(np.shape(op), runner)
        system.x0 = x0
        return _solve_node(data, b_vec, system, False), runner.info

    return impl


for _name, _symmetric, _pre in (("cg", True, ("M",)), ("gmres", False, ("M",)), ("bicgstab", False, ("M",)),
                                ("bicg", False, ("M",)), ("cgs", False, ("M",)), ("qmr", False, ("M1", "M2")),
                                ("minres", True, ("M",)), ("lgmres", False, ("M",)), ("gcrotmk", False, ("M",)),
                                ("tfqmr", False, ("M",))):
    _fun = getattr(_spla, _name)
    defcomposite(intercepted(_fun, route_all=True), _iterative(_fun, _name, _symmetric, _pre),
                 note="derivative of the exact solution; info is a constant")


# ======================================================================= products, densify, segment sums
# Small primitives on the values of a sparse system, for the rules below (and their own VJPs).
def _matvec_forward(data: Any, v: Any, system: _SparseSystem, trans: bool) -> np.ndarray:
    matrix = system.matrix(data)
    return (matrix.T if trans else matrix) @ v


_matvec_node = primitive(_matvec_forward)


def _matvec_data_vjp(g: Any, ans: Any, data: Any, v: Any, system: _SparseSystem, trans: bool) -> Any:
    rows, cols = system.positions()
    if trans:
        rows, cols = cols, rows
    if np.ndim(v) == 1:
        return g[..., rows] * v[..., cols]
    return np.sum(g[..., rows, :] * v[..., cols, :], axis=-1)


def _matvec_v_vjp(g: Any, ans: Any, data: Any, v: Any, system: _SparseSystem, trans: bool) -> Any:
    core = np.ndim(ans)
    cols, moved = _as_columns(g, core)
    return _from_columns(_matvec_node(data, cols, system, not trans), moved, core)


defvjp(_matvec_node, _matvec_data_vjp, _matvec_v_vjp, None, None)


def _todense_forward(data: Any, system: _SparseSystem) -> np.ndarray:
    return system.matrix(data).toarray()


_todense_node = primitive(_todense_forward)
defvjp(_todense_node, lambda g, ans, data, system: g[(Ellipsis,) + system.positions()], None)


def _segment_forward(values: Any, index: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, dtype=np.result_type(values, np.float64))
    np.add.at(out, index, values)
    return out


_segment_node = primitive(_segment_forward)
defvjp(_segment_node, lambda g, ans, values, index, size: g[..., index], None, None)


# ======================================================================= least squares: lsqr, lsmr
class _NormalSystem(_System):
    """``N = A^T A + damp^2 I`` of plain values, solved by ``cg`` (symmetric: its own transpose)."""

    def __init__(self, apply: Callable[[Any], Any], n: int, dtype: Any, name: str, rtol: float) -> None:
        super().__init__()
        self.name, self.rtol = name, rtol
        self.operator = LinearOperator((n, n), matvec=apply, rmatvec=apply, dtype=dtype)

    def solve(self, data: Any, b: np.ndarray, trans: bool) -> np.ndarray:
        if np.ndim(b) == 2:
            return np.stack([self.solve(data, b[:, j], trans) for j in range(np.shape(b)[1])], axis=1)
        if not np.any(b):
            return np.zeros(np.shape(b), dtype=np.result_type(b, np.float64))
        n = np.shape(b)[0]
        x, info = _original(_spla.cg)(self.operator, b, rtol=self.rtol, atol=0.0, maxiter=20 * n + 100)
        if info != 0:
            warnings.warn(f"tapegrad: the normal-equation solve behind the derivative of scipy.sparse.linalg."
                          f"{self.name} stopped with info={info}: the gradient is inaccurate (is A of full column "
                          "rank?).", AdjointConvergenceWarning, stacklevel=5)
        return x


def _least_squares(fun: Any, name: str, norms: dict) -> Callable[..., Any]:
    """``lsqr``/``lsmr``: SciPy's run, then chord steps on the normal equations ``A^T (b - A x) - damp^2 x = 0``.

    ``norms`` maps the result's positions that are norms of the solution or residual
    to how they are computed, so that they carry derivatives too; the other entries
    (iteration counts, estimates of ``|A|`` and its condition) are constants.
    """

    def impl(A: Any, b: Any, damp: Any = 0.0, *args: Any, **kwargs: Any) -> Any:
        op = _unwrap_operator(A)
        closure = isinstance(op, LinearOperator)
        if not closure and not (_traced(op) or _traced(b) or _traced(damp)):
            return _original(fun)(A, b, damp, *args, **kwargs)
        kwargs = {k: (strip(v) if type(v) is Tracer else v) for k, v in kwargs.items()}
        if is_sparse(op):
            template, data = _sparse_parts(op, name)
            system = _SparseSystem(template, name)
            plain_a = system.matrix(innermost(data))

            def forward(v: Any) -> Any:
                return _matvec_node(data, v, system, False)

            def backward(v: Any) -> Any:
                return _matvec_node(data, v, system, True)
        elif closure:
            plain_a = _PlainOperator(op)
            forward, backward = op.matvec, op.rmatvec
        else:
            plain_a = np.asarray(strip(op))

            def forward(v: Any) -> Any:
                return op @ v

            def backward(v: Any) -> Any:
                return np.swapaxes(op, -1, -2) @ v
        m, n = plain_a.shape
        d0 = float(strip(damp))
        try:
            out = _original(fun)(plain_a, np.asarray(strip(b)), d0, *args, **kwargs)
        finally:
            if closure:
                plain_a.resume()
        levels = _levels([op, b, damp]) | (plain_a.levels if closure else set())
        if not levels:
            return out
        if m < n and d0 == 0:
            raise _refuse(name, "an underdetermined system without damping (the minimum-norm solution's derivative "
                                "is not implemented); give damp > 0.")
        x0 = out[0]
        if closure:
            def apply(v: Any) -> Any:
                try:
                    return plain_a.rmatvec(plain_a.matvec(v)) + d0 ** 2 * v
                finally:
                    plain_a.resume()
        else:
            at = plain_a.T

            def apply(v: Any) -> Any:
                return at @ (plain_a @ v) + d0 ** 2 * v
        rtol = min(kwargs.get("atol", 1e-6), kwargs.get("btol", 1e-6), *(args[:2] if args else ()))
        normal = _NormalSystem(apply, n, np.result_type(plain_a.dtype, np.float64), name, max(rtol, 1e-14))
        x = x0
        for _ in range(len(levels)):
            r = backward(b - forward(x)) - damp ** 2 * x
            if type(r) is not Tracer:
                break
            x = x + _solve_node(None, r - strip(r), normal, False)
        result = list(out)
        result[0] = x
        residual = None
        for position, how in norms.items():
            if how == "x":
                exact = np.linalg.norm(x)
            else:
                residual = b - forward(x) if residual is None else residual
                exact = np.linalg.norm(residual)
                if how == "r2":
                    exact = np.sqrt(exact ** 2 + damp ** 2 * np.linalg.norm(x) ** 2)
            result[position] = out[position] + (exact - strip(exact))  # SciPy's estimate, the exact derivative
        return tuple(result)

    return impl


defcomposite(intercepted(_spla.lsqr, route_all=True), _least_squares(_spla.lsqr, "lsqr", {3: "r", 4: "r2", 8: "x"}),
             note="derivative of the exact minimiser; r1norm, r2norm, xnorm traced, other outputs constant")
defcomposite(intercepted(_spla.lsmr, route_all=True), _least_squares(_spla.lsmr, "lsmr", {3: "r2", 7: "x"}),
             note="derivative of the exact minimiser; normr, normx traced, other outputs constant")


# ======================================================================= eigsh, eigs, svds
def _plain_matrix(op: Any, name: str) -> tuple:
    """``(data, system, plain matrix)`` of a sparse or dense matrix argument (traced or not)."""
    if is_sparse(op):
        template, data = _sparse_parts(op, name)
        system = _SparseSystem(template, name)
        return data, system, system.matrix(innermost(data))
    if type(op) is Tracer or isinstance(op, np.ndarray):
        system = _DenseSystem()
        system._shape, system.name = np.shape(op), name
        return op, system, np.asarray(strip(op))
    raise _refuse(name, f"traced values with a {type(op).__name__} (give the matrix itself: a sparse matrix or "
                        "an array).")


def _outer_at(system: _System, left: Any, right: Any) -> Any:
    """``sum_i left[:, i] right[:, i]^T`` read where the system stores values (all entries, for a dense one)."""
    if isinstance(system, _DenseSystem):
        return left @ right.T
    rows, cols = system.positions()
    return np.sum(left[rows, :] * right[cols, :], axis=-1)


class _SpectralSystem:
    """One call of ``eigsh``, ``eigs`` or ``svds`` on plain values, and the vectors its VJP needs.

    A call that returns values only is run as asked (SciPy's values, in SciPy's
    order) and once more with vectors, matched to the values: the price of a
    derivative of ``return_eigenvectors=False``.
    """

    def __init__(self, fun: Any, name: str, system: _System, options: dict, vectors_asked: bool) -> None:
        self.fun, self.name, self.system, self.options, self.vectors_asked = fun, name, system, options, vectors_asked
        self.found: Any = None  # (values, vectors...) with vectors, in the order of the values returned
        self.found_for: Any = None  # the values ``found`` belongs to

    def with_vectors(self, data: Any) -> "_SpectralSystem":
        """The same call returning its vectors too, whose forward pass at ``data`` is the run already made."""
        flag = "return_singular_vectors" if self.name == "svds" else "return_eigenvectors"
        full = _SpectralSystem(self.fun, self.name, self.system, {**self.options, flag: True}, True)
        full.found, full.found_for = self.found, data
        return full

    def run(self, plain: Any, data: Any) -> Any:
        if self.found_for is data and self.vectors_asked:
            return self.found
        self.found_for = data
        out = _original(self.fun)(plain, **self.options)
        if self.vectors_asked:
            self.found = out
            return out
        flag = "return_singular_vectors" if self.name == "svds" else "return_eigenvectors"
        full = _original(self.fun)(plain, **{**self.options, flag: True})
        values = full[1] if self.name == "svds" else full[0]
        order = [int(np.argmin(np.abs(values - w))) for w in np.asarray(out)]
        if self.name == "svds":
            self.found = (full[0][:, order], np.asarray(out), full[2][order, :])
        else:
            self.found = (np.asarray(out), full[1][:, order])
        return out


def _spectral_forward(data: Any, spectral: _SpectralSystem) -> Any:
    return spectral.run(spectral.system.matrix(data), data)


_spectral_node = primitive(_spectral_forward)


def _second_order(name: str) -> NonDifferentiableArgumentError:
    return _refuse(name, "a second derivative here (eigsh's eigenvalues and svds' singular values have one; "
                         "vectors, eigs and generalized problems do not: it would need the derivatives of the "
                         "vectors' derivatives). Use scipy.linalg.eigh, eig or svd of A.toarray() for Hessians.")


def _spectral_vjp(g: Any, ans: Any, data: Any, spectral: _SpectralSystem) -> Any:
    name, system = spectral.name, spectral.system
    parts = g if isinstance(g, (tuple, list)) else (g,)
    if type(data) is Tracer:  # traced cotangents alone (forward mode) are fine: the VJP is linear in them
        return _traced_spectral_vjp(parts, data, spectral)
    outs = ans if isinstance(ans, (tuple, list)) else (ans,)
    nb = np.ndim(parts[0]) - np.ndim(outs[0])
    if nb:  # a batch of cotangents (a Jacobian): one VJP each, on the few values these solvers return
        batch = np.shape(parts[0])[:nb]
        flat = [np.reshape(p, (-1,) + np.shape(p)[nb:]) for p in parts]
        each = [_spectral_vjp(tuple(f[i] for f in flat) if isinstance(g, (tuple, list)) else flat[0][i], ans, data,
                              spectral) for i in range(flat[0].shape[0])]
        return np.reshape(np.stack(each), batch + np.shape(each[0]))
    if name == "svds":
        u, s, vt = spectral.found
        g_u, g_s, g_vt = parts if spectral.vectors_asked else (None, parts[0], None)
        out = _outer_at(system, u * g_s, vt.T)
        used = [p if p is not None and not _absent(p) else None for p in (g_u, g_vt)]
        if any(p is not None for p in used):
            out = out + _svds_vector_cotangent(system, system.matrix(innermost(data)), s, u, vt, *used)
        return out
    w, v = spectral.found
    g_w, g_v = parts if spectral.vectors_asked else (parts[0], None)
    if name == "eigs":
        a = system.matrix(innermost(data))
        left = _left_vectors(a, w, v)
        out = _outer_at(system, left * g_w, v)
        if g_v is not None and not _absent(g_v):
            if spectral.options.get("M") is not None:
                raise _refuse(name, "a cotangent on the eigenvectors of a generalized problem (only those of "
                                    "eigs(A) without M are differentiated).")
            out = out + _eigs_vector_cotangent(a, w, v, left, g_v, system)
        return out if np.iscomplexobj(data) else np.real(out)
    # eigsh: dlam_i = v_i^T dA v_i / v_i^T M v_i
    metric = spectral.options.get("M")
    norms = np.sum(v * (metric @ v), axis=0) if metric is not None else np.sum(v * v, axis=0)
    out = _outer_at(system, v * (g_w / norms), v)
    if g_v is not None and not _absent(g_v):
        if metric is not None or spectral.options.get("sigma") is not None and spectral.options.get("mode") not in (
                None, "normal"):
            raise _refuse(name, "a cotangent on the eigenvectors of a generalized problem (only those of "
                                "eigsh(A) without M are differentiated).")
        out = out + _eigsh_vector_cotangent(system, system.matrix(innermost(data)), w, v, g_v)
    return out


def _traced_spectral_vjp(parts: tuple, data: Any, spectral: _SpectralSystem) -> Any:
    """The VJP of eigen- or singular values at traced values (second order), with traced vectors.

    ``sum_i g_i v_i v_i^T`` (eigsh) or ``sum_i g_i u_i v_i^T`` (svds): the vectors come
    from the same call recorded on the lower tape (SciPy's run is reused), so their
    own derivatives (the vector rules) carry the second order.
    """
    name = spectral.name
    if name == "svds":
        g_w = parts[1] if spectral.vectors_asked else parts[0]
        vector_parts = (parts[0], parts[2]) if spectral.vectors_asked else ()
    else:
        g_w = parts[0]
        vector_parts = parts[1:2] if spectral.vectors_asked else ()
    if name == "eigs" or spectral.options.get("M") is not None or any(not _absent(p) for p in vector_parts):
        raise _second_order(name)
    found = _spectral_node(data, spectral.with_vectors(innermost(data)))
    left, right = (found[0], found[2].T) if name == "svds" else (found[1], found[1])
    if np.ndim(g_w) > 1:  # a batch of cotangents
        return np.stack([_outer_at(spectral.system, left * row, right) for row in g_w])
    return _outer_at(spectral.system, left * g_w, right)


def _pseudo_solves(a: Any, w: np.ndarray, v: np.ndarray, g_v: Any, name: str) -> Any:
    """Columns ``(A - w_i)^+ P_i g_i`` for a symmetric ``A`` with unit eigenvectors ``v_i``, ``P_i = I - v_i v_i^T``.

    ``minres`` with ``shift=w_i`` from a right-hand side orthogonal to ``v_i`` stays
    orthogonal to it: the solution the pseudo-inverse gives (projected again).
    """
    columns = []
    for i in range(len(w)):
        y = g_v[:, i] - v[:, i] * (v[:, i] @ g_v[:, i])
        z, info = _spla.minres(a, y, shift=w[i], rtol=1e-13, maxiter=20 * len(y) + 100)  # y traced in forward mode
        if info != 0:
            warnings.warn(f"tapegrad: the solve behind the vector derivative of scipy.sparse.linalg.{name} "
                          f"stopped with info={info}: the gradient is inaccurate (a repeated value?).",
                          AdjointConvergenceWarning, stacklevel=4)
        columns.append(z - v[:, i] * (v[:, i] @ z))
    return np.stack(columns, axis=1)


def _eigsh_vector_cotangent(system: _System, a: Any, w: np.ndarray, v: np.ndarray, g_v: np.ndarray) -> Any:
    """``-sum_i (A - w_i)^+ P_i g_i v_i^T``: unit eigenvectors, each moving orthogonally to itself."""
    return -_outer_at(system, _pseudo_solves(a, w, v, g_v, "eigsh"), v)


def _svds_vector_cotangent(system: _System, a: Any, s: np.ndarray, u: np.ndarray, vt: np.ndarray, g_u: Any,
                           g_vt: Any) -> Any:
    """Singular vectors as the eigenvectors ``[u; v] / sqrt(2)`` of ``H = [[0, A], [A^T, 0]]`` (eigenvalue ``s``).

    ``H``'s eigenvector rule (:func:`_eigsh_vector_cotangent`) gives ``g_H``, and ``A``
    sits in two blocks of ``H``: its cotangent is the upper right block plus the
    transpose of the lower left one.
    """
    m, n = a.shape
    at = a.T

    def apply(x: Any) -> Any:
        return np.concatenate([a @ x[m:], at @ x[:m]])

    h = LinearOperator((m + n, m + n), matvec=apply, rmatvec=apply, dtype=np.result_type(a.dtype, np.float64))
    root = np.sqrt(2.0)
    w = np.concatenate([u, vt.T], axis=0) / root
    zero_u, zero_v = np.zeros(u.shape), np.zeros(vt.T.shape)
    g_w = np.concatenate([zero_u if g_u is None else g_u, zero_v if g_vt is None else g_vt.T], axis=0) * root
    z = _pseudo_solves(h, s, w, g_w, "svds")
    return -(_outer_at(system, z[:m], w[m:]) + _outer_at(system, w[:m], z[m:]))


def _eigs_vector_cotangent(a: Any, w: np.ndarray, v: np.ndarray, left: np.ndarray, g_v: Any,
                           system: _System) -> Any:
    """Unit eigenvectors of a general ``A`` in the gauge ``v_i^H dv_i = 0`` (as :mod:`tapegrad.rules.linalg`'s eig).

    ``(A - w_i) dv_i = -(I - v_i u_i^T) dA v_i`` (``u_i^T v_i = 1``) fixes ``dv_i`` up to
    a multiple of ``v_i``, which the gauge removes.  Transposed: with
    ``y_i = (I - conj(v_i) v_i^T) g_i``, ``z_i`` solves the bordered system
    ``[[A^T - w_i, u_i], [v_i^T, 0]] [z_i; 0] = [y_i; 0]`` and the cotangent is
    ``-sum_i z_i v_i^T``.  Phase-dependent functions are refused.
    """
    check_phase_free("scipy.sparse.linalg.eigs", np.imag(np.sum(v * g_v, axis=0)),
                     np.linalg.norm(strip(g_v), axis=0), "eigenvectors")
    n = a.shape[0]
    at = _sp.csc_array(a.T if is_sparse(a) else np.asarray(a).T, dtype=np.complex128)
    columns = []
    for i in range(len(w)):
        y = g_v[:, i] - np.conj(v[:, i]) * (v[:, i] @ g_v[:, i])
        bordered = _sp.block_array([[at - w[i] * _sp.eye_array(n, format="csc"), left[:, i:i + 1]],
                                    [v[None, :, i], None]], format="csc")
        # through the door: in forward mode y is traced, and the solve is linear in it
        solution = _spla.spsolve(bordered, np.concatenate([y, np.zeros(1, dtype=np.complex128)]))
        columns.append(solution[:n])
    return -_outer_at(system, np.stack(columns, axis=1), v)


def _left_vectors(a: Any, w: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Left eigenvectors ``u_i`` (``A^T u_i = w_i u_i``) scaled so that ``u_i^T v_i = 1``, by inverse iteration."""
    n = a.shape[0]
    rng = np.random.default_rng(0)
    at = a.T if is_sparse(a) else np.asarray(a).T
    out = np.empty(v.shape, dtype=np.result_type(v, np.complex128))
    for i in range(len(w)):
        shifted = (at - w[i] * _sp.eye_array(n)) if is_sparse(a) else at - w[i] * np.eye(n)
        # A shift off by rounding keeps the factorisation regular; a relative nudge if it is exactly singular.
        for nudge in (0.0, 1e-10, 1e-7):
            try:
                matrix = shifted - nudge * abs(w[i] if w[i] else 1) * (_sp.eye_array(n) if is_sparse(a) else np.eye(n))
                lu = _original(_spla.splu)(_sp.csc_array(matrix, dtype=np.complex128))
                break
            except RuntimeError:
                continue
        else:
            raise _refuse("eigs", f"the left eigenvector of eigenvalue {w[i]} could not be found.")
        x = rng.normal(size=n).astype(np.complex128)
        for _ in range(3):
            x = lu.solve(x)
            x /= np.linalg.norm(x)
        out[:, i] = x / (x @ v[:, i])
    return out


defvjp(_spectral_node, _spectral_vjp, None)


def _spectral(fun: Any, name: str) -> Callable[..., Any]:
    flag = "return_singular_vectors" if name == "svds" else "return_eigenvectors"

    signature = inspect.signature(fun)

    def impl(A: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(A, *args, **kwargs)
        op = _unwrap_operator(A)
        others = {k: v for k, v in bound.arguments.items() if k != "A"}
        if not _traced(op):
            if isinstance(op, LinearOperator) and not isinstance(A, MatrixLinearOperator):
                plain = _PlainOperator(op)
                try:
                    out = _original(fun)(plain, **others)
                finally:
                    plain.resume()
                if plain.levels:
                    raise _refuse(name, "a LinearOperator whose callables close over traced values (give the "
                                        "matrix itself, sparse or dense).")
                return out
            return _original(fun)(A, *args, **kwargs)
        for key in ("M", "Minv", "OPinv", "OPpart"):
            if _traced(others.get(key)):
                raise _refuse(name, f"a traced {key} (only the values of A are differentiated).")
        vectors = others.get(flag, True)
        if name == "svds" and others.get("solver", "arpack") not in ("arpack", "propack", "lobpcg"):
            raise _refuse(name, f"solver={others.get('solver')!r}")
        data, system, _ = _plain_matrix(op, name)
        spectral = _SpectralSystem(fun, name, system, others, bool(vectors))
        return _spectral_node(data, spectral)

    return impl


defcomposite(intercepted(_spla.eigsh, route_all=True), _spectral(_spla.eigsh, "eigsh"),
             note="eigenvalues; unit eigenvectors of eigsh(A) (sign-invariant functions); first order")
defcomposite(intercepted(_spla.eigs, route_all=True), _spectral(_spla.eigs, "eigs"),
             note="eigenvalues; unit eigenvectors (phase-invariant functions); first order")
defcomposite(intercepted(_spla.svds, route_all=True), _spectral(_spla.svds, "svds"),
             note="singular values and vectors (sign-invariant functions); first order")


# ======================================================================= expm_multiply, expm
def _bilinear(system: _System, p: Any, q: Any, trans: bool) -> Any:
    """``p q^T`` (summed over columns) read at the stored values; ``p`` may carry leading batch axes.

    With ``trans`` the product belongs to ``A^T``: entry ``(r, c)`` of ``A`` reads ``p[c] q[r]``.
    """
    if np.ndim(q) == 1:
        p, q = p[..., None], q[:, None]
    if isinstance(system, _DenseSystem):
        out = p @ np.swapaxes(q, -1, -2)
        return np.swapaxes(out, -1, -2) if trans else out
    rows, cols = system.positions()
    if trans:
        rows, cols = cols, rows
    return np.sum(p[..., rows, :] * q[cols, :], axis=-1)


def _expm_forward(data: Any, b: Any, system: _System, t: float, trans: bool) -> np.ndarray:
    matrix = system.matrix(data)
    if not np.any(b):  # a zero right-hand side (the tie of a quadrature node): zero
        return np.zeros(np.shape(b), dtype=np.result_type(b, matrix.dtype, np.float64))
    if trans:
        matrix = matrix.T
    if not isinstance(system, _OperatorExpSystem):
        return _original(_spla.expm_multiply)(t * matrix, b)
    trace = None if system.trace is None else t * system.trace
    try:
        with warnings.catch_warnings():  # SciPy estimates a missing trace, and said so in the user's own call
            warnings.simplefilter("ignore", UserWarning)
            return _original(_spla.expm_multiply)(t * matrix, b, traceA=trace)
    finally:
        system.operator.resume()


class _OperatorExpSystem(_System):
    """A plain ``LinearOperator`` (the user's, its callables' outputs stripped) for ``expm_multiply``."""

    name = "expm_multiply"

    def __init__(self, operator: "_PlainOperator", trace: Any) -> None:
        super().__init__()
        self.operator, self.trace = operator, trace

    def matrix(self, data: Any) -> Any:
        return self.operator


_expm_node = primitive(_expm_forward)
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(8)


def _expm_b_vjp(g: Any, ans: Any, data: Any, b: Any, system: _System, t: float, trans: bool) -> Any:
    core = np.ndim(ans)
    cols, moved = _as_columns(g, core)
    return _from_columns(_expm_node(data, cols, system, t, not trans), moved, core)


def _expm_data_vjp(g: Any, ans: Any, data: Any, b: Any, system: _System, t: float, trans: bool) -> Any:
    """``t int_0^1 (e^{s t A^T} g)(e^{(1-s) t A} b)^T ds`` at the stored values, by Gauss-Legendre.

    The integrand is entire in ``s``; pieces of ``[0, 1]`` on which ``|t A|_1`` is
    at most 2 make eight nodes each accurate to rounding.
    """
    plain = system.matrix(innermost(data))
    norm1 = float(abs(plain).sum(axis=0).max()) if is_sparse(plain) else float(np.abs(plain).sum(axis=0).max())
    pieces = max(1, int(np.ceil(abs(t) * norm1 / 2)))
    core = np.ndim(ans)
    cols, moved = _as_columns(g, core)
    total = 0
    for j in range(pieces):
        for node, weight in zip(_NODES, _WEIGHTS):
            s = (j + (node + 1) / 2) / pieces
            p = _from_columns(_expm_node(data, cols, system, s * t, not trans), moved, core)
            q = _expm_node(data, b, system, (1 - s) * t, trans)
            total = total + (weight / 2 / pieces * t) * _bilinear(system, p, q, trans)
    return total


defvjp(_expm_node, _expm_data_vjp, _expm_b_vjp, None, None, None)


def _expm_multiply(A: Any, B: Any, start: Any = None, stop: Any = None, num: Any = None, endpoint: Any = None,
                   traceA: Any = None) -> Any:
    op = _unwrap_operator(A)
    if any(type(v) is Tracer for v in (start, stop, traceA)):
        raise _refuse("expm_multiply", "traced start, stop or traceA (scale the matrix instead: "
                                       "expm_multiply(t * A, B)).")
    if isinstance(op, LinearOperator):
        return _expm_multiply_operator(op, B, start, stop, num, endpoint, traceA)
    if not (_traced(op) or _traced(B)):
        return _original(_spla.expm_multiply)(A, B, start=start, stop=stop, num=num, endpoint=endpoint,
                                              traceA=traceA)
    if any(type(v) is Tracer for v in (start, stop, traceA)):
        raise _refuse("expm_multiply", "traced start, stop or traceA (scale the matrix instead: "
                                       "expm_multiply(t * A, B)).")
    data, system, plain = _plain_matrix(op, "expm_multiply")
    value = _original(_spla.expm_multiply)(plain, np.asarray(strip(B)), start=start, stop=stop, num=num,
                                           endpoint=endpoint, traceA=traceA)
    if all(v is None for v in (start, stop, num, endpoint)):
        traced = _expm_node(data, B, system, 1.0, False)
    else:
        times = np.linspace(0.0 if start is None else start, 1.0 if stop is None else stop,
                            50 if num is None else num, endpoint=True if endpoint is None else endpoint)
        traced = np.stack([_expm_node(data, B, system, float(t), False) for t in times])
    return value + (traced - strip(traced))  # SciPy's numbers, the exact derivatives


def _expm_multiply_operator(op: Any, B: Any, start: Any, stop: Any, num: Any, endpoint: Any, traceA: Any) -> Any:
    """``expm_multiply`` of a ``LinearOperator`` whose callables may close over tracers (first order).

    ``dY = int_0^1 e^{sA} dA e^{(1-s)A} B ds``: at each Gauss-Legendre node the
    plain ``q = e^{(1-s)A} B`` goes through the user's traced ``matvec``, and
    ``e^{sA}`` (a node whose adjoint is ``e^{sA^T}``, so ``rmatvec`` is needed) carries
    ``A(theta) q - stop(A(theta) q)``, a zero with ``dA q`` as its derivative.
    """
    plain = _PlainOperator(op)
    try:
        value = _original(_spla.expm_multiply)(plain, np.asarray(strip(B)), start=start, stop=stop, num=num,
                                               endpoint=endpoint, traceA=traceA)
    finally:
        plain.resume()
    levels = plain.levels | _levels(B)
    if not levels:
        return value
    if any(v is not None for v in (start, stop, num, endpoint)):
        raise _refuse("expm_multiply", "start, stop, num or endpoint with a LinearOperator and traced values "
                                       "(call it once per time t with t * A).")
    if len(levels) > 1:
        raise _refuse("expm_multiply", "a second derivative with a LinearOperator (give the matrix itself, sparse "
                                       "or dense, for Hessians).")
    if not plain.has_transpose:
        raise _refuse("expm_multiply", "a LinearOperator without rmatvec and traced values (the adjoint is "
                                       "expm_multiply of A^T): give LinearOperator(..., rmatvec=...).")
    system = _OperatorExpSystem(plain, traceA)
    traced = _expm_node(None, B, system, 1.0, False)
    if plain.levels:
        try:
            norm1 = float(_spla.onenormest(plain))
        finally:
            plain.resume()
        pieces = max(1, int(np.ceil(norm1 / 2)))
        b_plain = np.asarray(strip(B))
        for j in range(pieces):
            for node, weight in zip(_NODES, _WEIGHTS):
                s = (j + (node + 1) / 2) / pieces
                q = _expm_forward(None, b_plain, system, 1 - s, False)
                r = op.matvec(q) if np.ndim(q) == 1 else op.matmat(q)
                traced = traced + (weight / 2 / pieces) * _expm_node(None, r - strip(r), system, s, False)
    return value + (traced - strip(traced))


defcomposite(intercepted(_spla.expm_multiply, route_all=True), _expm_multiply,
             note="w.r.t. B (expm_multiply with A^T) and the values of A (quadrature of the Frechet integral)")


def _expm(A: Any) -> Any:
    if not _traced(A):
        return _original(_spla.expm)(A)
    import scipy.linalg as _sl

    if type(A) is Tracer:
        return _sl.expm(A)
    data, system, plain = _plain_matrix(A, "expm")
    value = _original(_spla.expm)(plain)  # SciPy's result: its class and its pattern
    dense = _sl.expm(_todense_node(data, system))  # scipy.linalg.expm's rule carries the derivative
    rows, cols, values, _ = coo_parts(value)
    exact = dense[rows, cols]
    return with_data(value, values + (exact - strip(exact)))


defcomposite(intercepted(_spla.expm, route_all=True), _expm,
             note="through scipy.linalg.expm of the dense matrix (its Frechet-derivative rule)")


# ======================================================================= norm, onenormest
def _unique_values(data: Any, system: _SparseSystem) -> tuple:
    """The values SciPy sums for each position (duplicates added), and their ``(rows, cols)``."""
    rows, cols = system.positions()
    m, n = system.shape()
    key = rows.astype(np.int64) * n + cols
    unique, inverse = np.unique(key, return_inverse=True)
    if len(unique) == len(key):
        return data, rows, cols
    return _segment_node(data, inverse, len(unique)), (unique // n).astype(np.intp), (unique % n).astype(np.intp)


def _norm(x: Any, ord: Any = None, axis: Any = None) -> Any:
    if not _traced(x):
        return _original(_spla.norm)(x, ord=ord, axis=axis)
    if not is_sparse(x):
        return np.linalg.norm(x, ord=ord, axis=axis)
    _original(_spla.norm)(x._with_data(np.asarray(innermost(x.data)), copy=False), ord=ord, axis=axis)  # SciPy's checks
    template, data = _sparse_parts(x, "norm")
    system = _SparseSystem(template, "norm")
    values, rows, cols = _unique_values(data, system)
    m, n = system.shape()
    mag = np.abs(values)
    if axis is None or (isinstance(axis, tuple) and len(axis) == 2):
        if ord in (None, "fro", "f"):
            return np.sqrt(np.sum(mag ** 2))
        if ord in (1, -1):
            sums = _segment_node(mag, cols, n)
            return np.max(sums) if ord == 1 else np.min(sums)
        if ord in (np.inf, -np.inf):
            sums = _segment_node(mag, rows, m)
            return np.max(sums) if ord == np.inf else np.min(sums)
        if ord == 2:
            return _spla.svds(x, k=1, return_singular_vectors=False, rng=0)[0]
        raise _refuse("norm", f"ord={ord!r} with traced values.")
    axis = axis[0] if isinstance(axis, tuple) else axis
    along_rows = axis in (1, -1)  # one norm per row
    index, size = (rows, m) if along_rows else (cols, n)
    if ord in (None, 2):
        return np.sqrt(_segment_node(mag ** 2, index, size))
    if ord == 1:
        return _segment_node(mag, index, size)
    if ord in (np.inf, -np.inf, 0):
        raise _refuse("norm", f"ord={ord!r} along an axis with traced values (use A.toarray() and numpy's norm).")
    return _segment_node(mag ** ord, index, size) ** (1.0 / ord)


defcomposite(intercepted(_spla.norm, route_all=True), _norm, note="duplicates summed first; ord=2 through svds")


def _onenormest(A: Any, t: int = 2, itmax: int = 5, compute_v: bool = False, compute_w: bool = False) -> Any:
    op = _unwrap_operator(A)
    if not _traced(op):
        return _original(_spla.onenormest)(A, t=t, itmax=itmax, compute_v=compute_v, compute_w=compute_w)
    # strip (not innermost): a recording for reuse keeps these values as a guard, so a replay never returns
    # a stale estimate
    plain = op._with_data(np.asarray(strip(op.data)), copy=False) if is_sparse(op) else np.asarray(strip(op))
    out = _original(_spla.onenormest)(plain, t=t, itmax=itmax, compute_v=compute_v, compute_w=compute_w)
    if t < plain.shape[1]:
        return out  # an estimate: a constant (see the module docstring)
    # t >= n: SciPy computes the exact norm, the largest column sum, and w is that column.
    exact = _norm(op, 1) if is_sparse(op) else np.max(np.sum(np.abs(op), axis=0))
    if not (compute_v or compute_w):
        return out + (exact - strip(exact))
    result = list(out)
    result[0] = out[0] + (exact - strip(exact))
    if compute_w:
        j = int(np.flatnonzero(out[1])[0]) if compute_v else int(np.argmax(abs(plain).sum(axis=0)))
        dense = _todense_node(*_plain_matrix(op, "onenormest")[:2]) if is_sparse(op) else op
        w = dense[:, j]
        result[-1] = out[-1] + (w - strip(w))
    return tuple(result)


defcomposite(intercepted(_spla.onenormest, route_all=True), _onenormest,
             note="an estimate: a constant; exact (t >= n): the largest column sum, differentiated")
