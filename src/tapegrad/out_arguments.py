"""``out=`` arguments of NumPy calls on tracers: written into a traced buffer, or refused.

NumPy writes a result into ``out`` and returns ``out``.  On the tape that is an in-place
write (``y[...] = result``) into a traced ``y``; a plain ``y`` holds numbers, not their
record, so a differentiable result there is refused with the call's name.  The
dispatcher (:mod:`tapegrad.dispatch`) sends every ufunc and array-function call with
``out`` here, so no rule needs to look for it (left to a rule, the raw call would fill
the buffer while the tape went on with another value: a gradient silently lost).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import numpy as np

from .binding import has_tracer as _has_tracer
from .errors import GradientDroppedError
from .registry import CONSTANT, function_name
from .tracer import ROUTES, Tracer, strip

__all__ = ["OUT_AT", "UNKNOWN", "out_position", "function_into_out", "into_traced_out", "write_result", "reject_out"]


# Where an array function takes ``out`` by position (``np.sum(a, axis, dtype, out)``), read once
# per function from its signature; None when it has no positional ``out``.
OUT_AT: dict = {}
UNKNOWN = object()


def out_position(func: Any) -> Any:
    at = None
    try:
        parameters = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):  # no signature: ``out`` can only come as a keyword
        parameters = []
    for i, p in enumerate(parameters):
        if p.kind is inspect.Parameter.VAR_POSITIONAL or p.kind is inspect.Parameter.KEYWORD_ONLY:
            break
        if p.name == "out":
            at = i
            break
    OUT_AT[func] = at
    return at


def function_into_out(
    func: Any, rule: Any, args: tuple, kwargs: dict, out_at: Any, compute: Callable, call_rule: Callable
) -> Any:
    """``f(..., out=y)`` for an array function (``np.sum``, ``np.cumsum``, ``x.mean(out=y)``).

    NumPy writes the result into ``y`` and returns ``y``.  A traced ``y`` gets the
    result as an in-place write, recorded like ``y[...] = f(...)``; a plain ``y`` can
    hold no gradient, so a differentiable result is refused (a constant one, an
    ``argmax``, is NumPy's own call).  Left to the rule, the raw call would fill the
    buffer while the tape returned another value: a gradient silently lost.
    ``compute`` is the dispatch of the call without ``out``; ``call_rule`` the rule's own call.
    """
    name = function_name(func)
    if kwargs and kwargs.get("out") is not None:
        target = kwargs["out"]
        rest_args, rest_kwargs = args, {k: v for k, v in kwargs.items() if k != "out"}
    else:
        target = args[out_at]
        rest_args, rest_kwargs = args[:out_at] + (None,) + args[out_at + 1 :], kwargs
    if type(target) is not Tracer:
        if rule.kind is CONSTANT and not _has_tracer(target):
            return call_rule(rule, args, kwargs)  # no gradient: NumPy writes the plain answer
        reject_out(name, {"out": target})
    result = compute(func, rest_args, rest_kwargs)
    if np.shape(result) != target.shape:
        raise ValueError(f"{name}: out has shape {target.shape}, but the result has shape {np.shape(result)}")
    return write_result(target, result, "same_kind" if rule.kind is not CONSTANT else "unsafe", name)


def write_result(target: Tracer, result: Any, casting: str, name: str) -> Any:
    """Write ``result`` (broadcast to its shape) into the traced array ``target`` in place, as NumPy's ``out=``."""
    dtype = result.dtype if type(result) is Tracer else np.result_type(result)
    if not np.can_cast(dtype, target.dtype, casting=casting):
        raise TypeError(f"Cannot cast {name} output from {dtype!r} to {target.dtype!r} with casting rule {casting!r}")
    if np.shape(result) != target.shape:
        result = np.broadcast_to(result, target.shape)
    if dtype != target.dtype:
        result = result.astype(target.dtype)
    if type(result) is not Tracer:  # every input was a constant: the written entries are too
        result = target._tape.constant(np.asarray(result))
    return ROUTES.write(target, result, None)


def reject_out(name: str, kwargs: dict, inputs: tuple = ()) -> None:
    out = kwargs.get("out")
    outs = out if isinstance(out, tuple) else (out,)
    if out is not None and any(o is not None and any(o is i for i in inputs) for o in outs):
        # ``y += x``, ``y[1:-1] *= x``: NumPy's in-place operator on a plain y calls the ufunc with out=y.
        raise GradientDroppedError(
            f"an in-place update of a plain array with a traced value (y += x, y[i:j] *= x: {name} "
            "with out=y) would write traced results into y and drop their gradient. Make y traced "
            "where it is made (y = np.zeros(...) inside the differentiated function, y = np.zeros_like(x), or y = x.copy()): "
            "writes into it are recorded. Or write y = y + x."
        )
    if out is not None and any(o is not None for o in outs):
        raise GradientDroppedError(
            f"{name} was called with out=...: writing a traced result into a preallocated array "
            "would drop its gradient. Write y = f(x) instead of f(x, out=y) (and y = y + x "
            "instead of y += x when y is a plain array)."
        )


def into_traced_out(ufunc: np.ufunc, method: str, inputs: tuple, kwargs: dict, compute: Callable) -> Any:
    """``ufunc(*inputs, out=y, where=mask)`` with a traced ``y``: an in-place write into ``y``.

    ``np.divide(a, b, out=np.zeros_like(b), where=b != 0)`` is ``y = where(mask, a / b, y)``
    written into ``y`` (recorded as any in-place update of a traced array); ``None`` when
    ``out`` is not one traced array (a plain one is refused by the caller).
    """
    out = kwargs["out"]
    target = out[0] if type(out) is tuple and len(out) == 1 else out
    if type(target) is not Tracer or method != "__call__" or ufunc.nout != 1:
        return None
    where = kwargs.get("where", True)
    rest = {k: v for k, v in kwargs.items() if k not in ("out", "where")}
    casting = rest.pop("casting", "same_kind")
    if where is True:
        result = compute(ufunc, method, inputs, rest)
    else:
        # NumPy never computes the masked entries: neither do their warnings appear.
        with np.errstate(all="ignore"):
            result = compute(ufunc, method, inputs, rest)
    if where is not True:
        dtype = result.dtype if type(result) is Tracer else np.result_type(result)
        if not np.can_cast(dtype, target.dtype, casting=casting):  # before the selection promotes
            raise TypeError(
                f"Cannot cast ufunc '{ufunc.__name__}' output from {dtype!r} to {target.dtype!r} "
                f"with casting rule {casting!r}"
            )
        if np.shape(result) != target.shape:
            result = np.broadcast_to(result, target.shape)
        result = np.where(strip(where), result, target)
    return write_result(target, result, casting, f"ufunc '{ufunc.__name__}'")
