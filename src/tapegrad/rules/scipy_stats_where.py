"""SciPy's masked evaluation helpers on tracers (imported by :mod:`.scipy_stats`).

Most distributions of ``scipy.stats`` evaluate their formulas branch by branch
with ``scipy._lib.array_api_extra.apply_where`` (``xpx.apply_where``) or
``scipy._lib._util._lazyselect``: each branch runs only on the entries its
condition selects, and the pieces are written into a *plain* array, which a
tracer cannot enter.  These rules do the same with a traced result: the
condition is a constant (it selects the branch, it carries no derivative), each
branch runs on the selected traced entries, and the pieces are scattered into
a traced array, so an entry's derivative is its own branch's, and an unselected
branch never makes a ``nan`` partial.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..registry import defcomposite, intercepted
from ..tracer import Tracer, strip, unwrap_above


def _traced(v: Any) -> bool:
    return type(v) is Tracer


def _highest(values: Sequence[Any]) -> Optional[Tracer]:
    return max((v for v in values if _traced(v)), key=lambda v: v._tape.level, default=None)


def _assemble(shape: tuple, dtype: Any, pieces: Sequence[tuple], base: Any) -> Any:
    """``base`` broadcast to ``shape``, then each piece's ``values`` written where its ``mask`` holds.

    Pieces are written in order (a later one wins, as with ``np.place``); an entry
    overwritten keeps no derivative of what was there before.
    """
    # Flat, so that a 0-d call is indexed like any other.
    size = int(np.prod(shape))
    ref = _highest([v for _, v in pieces] + [base])
    flat_base = np.reshape(np.broadcast_to(base, shape), (size,))
    if ref is None:
        out = np.array(flat_base, dtype=dtype)
    else:
        out = np.zeros_like(ref, shape=(size,), dtype=dtype) + flat_base
    for mask, values in pieces:
        out[np.ravel(mask)] = values
    return np.reshape(out, shape)


def _flat(a: Any, shape: tuple) -> Any:
    return np.reshape(np.broadcast_to(a, shape), (-1,))


def _apply_where(
    cond: Any,
    args: Any,
    f1: Callable[..., Any],
    f2: Optional[Callable[..., Any]] = None,
    /,
    *,
    fill_value: Any = None,
    xp: Any = None,
) -> Any:
    """Traced ``apply_where``: ``f1(*args)`` where ``cond``, else ``f2(*args)`` or ``fill_value``."""
    if (f2 is None) == (fill_value is None):
        raise TypeError("Exactly one of `fill_value` or `f2` must be given.")
    args_ = list(args) if isinstance(args, tuple) else [args]
    cond = np.asarray(strip(cond), dtype=bool)
    shapes = [np.shape(a) for a in args_] + [cond.shape]
    if fill_value is not None and not isinstance(fill_value, (int, float, complex)):
        shapes.append(np.shape(fill_value))
    shape = np.broadcast_shapes(*shapes)
    cond = np.broadcast_to(cond, shape)
    args_ = [_flat(a, shape) for a in args_]
    temp1 = f1(*(a[np.ravel(cond)] for a in args_))
    if f2 is None:
        dtype = np.result_type(unwrap_above(temp1, 0), strip(fill_value))
        return _assemble(shape, dtype, [(cond, temp1)], fill_value)
    ncond = ~cond
    temp2 = f2(*(a[np.ravel(ncond)] for a in args_))
    dtype = np.result_type(unwrap_above(temp1, 0), strip(temp2))
    return _assemble(shape, dtype, [(ncond, temp2), (cond, temp1)], np.zeros((), dtype))


def _lazyselect(condlist: Sequence[Any], choicelist: Sequence[Callable[..., Any]], arrays: Sequence[Any],
                default: Any = 0) -> Any:
    """Traced ``_lazyselect``: like ``np.select``, each choice evaluated only where chosen."""
    shape = np.broadcast_shapes(*(np.shape(a) for a in arrays))
    tcode = np.mintypecode([np.result_type(unwrap_above(a, 0)).char for a in arrays])
    arrays = [_flat(a, shape) for a in arrays]
    pieces = []
    for func, cond in zip(choicelist, condlist):
        if np.all(cond is False):
            continue
        cond = np.broadcast_to(np.asarray(strip(cond), dtype=bool), shape)
        pieces.append((cond, func(*(a[np.ravel(cond)] for a in arrays))))
    return _assemble(shape, np.dtype(tcode), pieces, default)


def _register() -> None:
    # Keyed by the very objects the distributions call (``xpx.apply_where`` as
    # ``_continuous_distns`` imported it), wherever a SciPy version keeps them.
    import scipy.stats._continuous_distns as cd

    xpx = getattr(cd, "xpx", None)
    apply_where = getattr(xpx, "apply_where", None)
    if callable(apply_where) and getattr(apply_where, "__code__", None) is not None:
        defcomposite(intercepted(apply_where), _apply_where)
    lazyselect = getattr(cd, "_lazyselect", None)
    if callable(lazyselect) and getattr(lazyselect, "__code__", None) is not None:
        defcomposite(intercepted(lazyselect), _lazyselect)


_register()
