"""Helpers shared by the ``scipy.special`` rule modules."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import scipy.special as _scipy_special

from ..errors import NonDifferentiableArgumentError

__all__ = ["nonzero", "real_only", "near", "polyval", "unless_unused"]


def nonzero(a: Any) -> Any:
    """``a`` with zeros replaced by 1, for a quotient whose value at 0 is set separately."""
    return np.where(a == 0, 1, a)


def real_only(vjp: Callable[..., Any], name: str) -> Callable[..., Any]:
    """Wrap ``vjp`` so that a complex argument raises instead of getting a wrong cotangent.

    For functions whose complex form is not holomorphic (a scale factor such as
    ``exp(-|Im z|)``) or whose complex derivative SciPy cannot evaluate.
    """

    def checked(g: Any, ans: Any, *args: Any) -> Any:
        if any(np.iscomplexobj(a) for a in args):
            raise NonDifferentiableArgumentError(
                f"tapegrad differentiates {name} for real arguments only: its complex form is not "
                "holomorphic, or SciPy lacks the function its complex derivative needs. Differentiate "
                "a real input, or treat the complex value as a constant with tapegrad.stop_gradient."
            )
        return vjp(g, ans, *args)

    checked.__name__ = getattr(vjp, "__name__", "vjp")
    return checked


def polyval(coefficients: Any, x: Any) -> Any:
    """``sum(c[k] x**k)`` by Horner's rule with NumPy calls (traced at higher order)."""
    out = coefficients[-1]
    for c in coefficients[-2::-1]:
        out = out * x + c
    return out


def near(x: Any, x0: float, radius: float, series: Callable[[Any], Any], formula: Callable[[Any], Any]) -> Any:
    """``series(x)`` where ``|x - x0| < radius``, else ``formula(x)``, without NaN leaks.

    ``formula`` has a removable singularity (0/0) at ``x0``; it is evaluated on
    a safe stand-in there, so neither the value nor any derivative of the
    unused branch is NaN (``np.where`` differentiates both branches).
    """
    close = np.abs(x - x0) < radius
    safe = np.where(close, x0 + 2 * radius, x)
    return np.where(close, series(x), formula(safe))


def unless_unused(g: Any, d: Callable[[], Any], singular: Any) -> Any:
    """``g * d()`` for a derivative that is infinite where ``singular``, but 0 there when
    ``g`` is 0.

    A multi-output ufunc (``sici``, ``iti0k0``, ...) may have one output singular at a
    point where the others are finite; when only the others are used, that output's
    cotangent is 0 and ``0 * inf`` would turn a finite gradient into NaN.  The
    singular output's own value is infinite there, so no warning is added.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(singular & (g == 0), 0.0, g * d())


class _Ufuncs:
    """``sc.<name>``: SciPy's ufunc itself, in both SciPy modes.

    With ``SCIPY_ARRAY_API=1`` SciPy's public names are Python wrappers (their
    ``__wrapped__`` is the ufunc) that pick a namespace; rules belong on the
    ufunc, which is what reaches ``__array_ufunc__``.
    """

    def __getattr__(self, name: str) -> Any:
        fun = getattr(_scipy_special, name)
        return getattr(fun, "__wrapped__", fun)


#: Used by the rule modules in place of ``scipy.special``.
sc = _Ufuncs()
