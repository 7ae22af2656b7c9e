"""User-defined derivative rules: :func:`custom_vjp`.

A function decorated with :func:`custom_vjp` becomes a key of the one rule
registry (:mod:`tapegrad.registry`), exactly like ``np.sin``: when tracers
reach it, :mod:`tapegrad.dispatch` records it as ONE node whose VJPs are the
ones you give, instead of tracing its body.  Because the registry treats it
like any NumPy function, everything that works for built-in rules works for
it: batched cotangents (a Jacobian is one sweep), second and higher order
(the VJPs are themselves NumPy code, traced on the outer tape),
:func:`tapegrad.defconstant`, and nesting inside other custom functions.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from .dispatch import _has_tracer, call_rule
from .registry import DISPATCHED, RULES, defcomposite, defconstant, defvjp

__all__ = ["custom_vjp", "CustomVJPFunction", "defvjp"]


class CustomVJPFunction:
    """A Python function that tapegrad differentiates with user-given rules.

    Create one with :func:`custom_vjp`.  Calling it on plain values simply
    calls the wrapped function; calling it on tracers goes through its
    registry rule.  Until :meth:`defvjp` (or :meth:`defconstant`) is called,
    the rule traces the function's body, i.e. it differentiates as if it
    were not decorated.
    """

    def __init__(self, fun: Callable[..., Any]) -> None:
        functools.update_wrapper(self, fun)
        setattr(self, DISPATCHED, True)  # its calls consult the registry
        self._fun = fun
        # Default rule: differentiate through the body, as an undecorated function.
        defcomposite(self, fun)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _has_tracer(args) or (kwargs and _has_tracer(kwargs)):
            return call_rule(RULES[self], args, kwargs)
        return self._fun(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<tapegrad.custom_vjp {getattr(self, '__qualname__', self._fun)!r}>"

    def defvjp(self, *vjps: Optional[Callable[..., Any]], note: str = "") -> "CustomVJPFunction":
        """Give the vector-Jacobian products, one per positional argument.

        Parameters
        ----------
        *vjps : callable, None or :data:`tapegrad.CONSTANT_ARG`
            ``vjps[i](g, ans, *args, **kwargs)`` returns the cotangent of
            positional argument ``i``.  ``g`` is the output cotangent and may
            carry extra *leading* batch axes (``g.shape == batch + ans.shape``):
            address array axes from the end and return something that
            broadcasts to ``batch + np.shape(args[i])``.  ``ans`` is the
            function's output (a tuple, with ``g`` a tuple, when it returns
            several arrays).  Write the VJPs with NumPy calls that tapegrad
            can differentiate and second derivatives work too.  ``None``: the
            argument has no rule (a tracer there is an error);
            ``CONSTANT_ARG``: the argument carries no gradient by nature.
        note : str, optional
            A remark (e.g. a subgradient choice) kept with the rule.

        Returns
        -------
        CustomVJPFunction
            ``self``, so calls can be chained.
        """
        defvjp(self, *vjps, note=note)
        return self

    def defconstant(self, note: str = "") -> "CustomVJPFunction":
        """Declare that the output carries no gradient: it runs on raw values.

        Same as ``tapegrad.defconstant(f)``.
        """
        defconstant(self, note=note)
        return self


def custom_vjp(fun: Callable[..., Any]) -> CustomVJPFunction:
    """Decorate a function so that tapegrad uses your derivative rules for it.

    Use it for a function tapegrad cannot trace (it calls compiled code,
    SciPy, an iterative solver), or when you know a cheaper or numerically
    better derivative than the one tracing the body would give.

    Parameters
    ----------
    fun : callable
        The function.  Its positional arguments are what the rules
        differentiate; keyword arguments are passed to the rules unchanged.

    Returns
    -------
    CustomVJPFunction
        A callable with a :meth:`~CustomVJPFunction.defvjp` method.  Until
        ``defvjp`` is called the body is traced as usual.

    See Also
    --------
    tapegrad.defvjp : the same for an existing function object or ufunc.
    tapegrad.defconstant : mark a function's output as carrying no gradient.

    Notes
    -----
    The rules follow the registry's convention (see ``docs/dev/rules.md``):
    ``vjp(g, ans, *args, **kwargs)`` with ``g`` possibly batched along
    leading axes, so ``tapegrad.jacobian`` sends all basis cotangents through
    the rule at once.  ``f.defvjp`` and ``tapegrad.defvjp(f, ...)`` are the
    same thing.

    Examples
    --------
    A numerically stable ``log(1 + exp(x))`` with a hand-written derivative:

    >>> import numpy as np, tapegrad as tg
    >>> @tg.custom_vjp
    ... def softplus(x):
    ...     return np.logaddexp(0.0, x)
    >>> _ = softplus.defvjp(lambda g, ans, x: g * np.exp(x - ans))
    >>> tg.grad(lambda x: np.sum(softplus(x)))(np.array([0.0, 800.0]))
    array([0.5, 1. ])
    >>> tg.hessian(lambda x: softplus(x))(0.0)
    array(0.25)
    """
    if isinstance(fun, CustomVJPFunction):
        return fun
    return CustomVJPFunction(fun)
