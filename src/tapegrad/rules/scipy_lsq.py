"""``scipy.optimize.nnls`` and ``lsq_linear``: bounded linear least squares, by their active sets.

At a solution, the variables on a bound stay there under a small change of ``A``
and ``b`` (away from the switching points, where a variable just reaches or
leaves a bound), and the free ones solve the least-squares problem restricted to
them, with the bounded ones moved to the right-hand side:
``x_F = argmin |A_F x_F - (b - A_B x_B)|``.  The rules run SciPy on the plain
values (its solver, checks and numbers, bit for bit), read the active set off
its answer (``nnls``: the zero entries; ``lsq_linear``: its ``active_mask``), and
solve that restricted problem again with ``np.linalg.lstsq`` on the tracers, so
``A`` and ``b`` (and ``lsq_linear``'s bounds, where a variable sits on one) are
differentiated at every order.  The derivative is that of the exact solution, at
the tolerance SciPy was asked for, like the implicit-function derivatives of
:mod:`tapegrad.solvers.optimize`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.optimize import _nnls, lsq_linear

from ..binding import has_tracer, strip_all
from ..errors import NonDifferentiableArgumentError
from ..registry import ORIGINALS, defcomposite, intercepted
from ..tracer import Tracer
from ._scipy_util import with_value

__all__: list = []

_NNLS = _nnls.nnls
_LSQ_LINEAR = lsq_linear


def _as_traced(value: Any) -> Any:
    return value if type(value) is Tracer else np.asarray(value, dtype=np.float64)


def _restricted(A: Any, b: Any, free: np.ndarray, fixed: Any) -> Any:
    """The solution with ``fixed`` on the bounded entries and the restricted least squares on the ``free`` ones."""
    n = np.shape(A)[1]
    bound_part = np.where(free, 0.0, fixed)
    if not np.any(free):
        return bound_part + 0.0 * b[0] if type(b) is Tracer else bound_part
    rhs = b - A @ bound_part
    solved = np.linalg.lstsq(A[:, free], rhs, rcond=None)[0]
    return bound_part + _scatter(solved, free, n)


def _scatter(values: Any, where: np.ndarray, n: int) -> Any:
    """``values`` placed at the ``True`` entries of ``where`` in a length-``n`` vector (traced)."""
    index = np.flatnonzero(where)
    basis = np.zeros((n, index.size))
    basis[index, np.arange(index.size)] = 1.0
    return basis @ values


def _nnls_rule(A, b, *args, **kwargs):
    x_plain, rnorm_plain = ORIGINALS[_NNLS](strip_all(A), strip_all(b), *args, **kwargs)
    A_t, b_t = _as_traced(A), _as_traced(b)
    free = x_plain > 0
    x = _restricted(A_t, b_t, free, np.zeros(np.shape(A_t)[1]))
    x = with_value(x, x_plain)
    rnorm = with_value(np.linalg.norm(A_t @ x - b_t), np.asarray(rnorm_plain))
    return x, rnorm


def _lsq_linear_rule(A, b, bounds=(-np.inf, np.inf), *args, **kwargs):
    result = ORIGINALS[_LSQ_LINEAR](strip_all(A), strip_all(b), strip_all(bounds), *args, **kwargs)
    if not (has_tracer(A) or has_tracer(b) or has_tracer(bounds)):
        return result
    if type(A).__module__.startswith("scipy.sparse") or hasattr(A, "matvec"):
        raise NonDifferentiableArgumentError(
            "scipy.optimize.lsq_linear: a sparse matrix or LinearOperator with traced values is not "
            "differentiated here; pass a dense array"
        )
    A_t, b_t = _as_traced(A), _as_traced(b)
    n = np.shape(A_t)[1]
    lower, upper = bounds if isinstance(bounds, (tuple, list)) and len(bounds) == 2 else (bounds.lb, bounds.ub)
    lower = np.broadcast_to(_as_traced(lower), (n,))
    upper = np.broadcast_to(_as_traced(upper), (n,))
    active = np.asarray(result.active_mask)
    fixed = np.where(active < 0, lower, np.where(active > 0, upper, 0.0))
    x = with_value(_restricted(A_t, b_t, active == 0, fixed), result.x)
    out = type(result)(result)
    residual = A_t @ x - b_t
    out.x = x
    out.fun = with_value(residual, np.asarray(result.fun))
    out.cost = with_value(0.5 * np.sum(residual * residual), np.asarray(result.cost))
    return out


defcomposite(intercepted(_NNLS), _nnls_rule, note="least squares on SciPy's active set (the positive entries)")
defcomposite(intercepted(_LSQ_LINEAR), _lsq_linear_rule, note="least squares on SciPy's active set")
