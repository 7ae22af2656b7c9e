"""The arguments of one call: which hold tracers, their raw values, traced keywords.

Walkers over the lists, tuples and dicts NumPy functions take (``np.concatenate([x, y])``,
``np.clip(x, a_min=lo)``), kept apart from the dispatcher's hot path.
"""

from __future__ import annotations

from typing import Any

from .errors import NonDifferentiableArgumentError
from .registry import ORIGINALS
from .tracer import Tracer, strip

__all__ = ["strip_all", "has_tracer", "kwargs_to_positional"]


def strip_all(obj: Any) -> Any:
    """:func:`strip` applied inside lists, tuples and dicts."""
    t = type(obj)
    if t is Tracer:
        return strip(obj)
    if t is list:
        return [strip_all(o) for o in obj]
    if t is tuple:
        return tuple(strip_all(o) for o in obj)
    if t is dict:
        return {k: strip_all(v) for k, v in obj.items()}
    return obj


def has_tracer(obj: Any) -> bool:
    t = type(obj)
    if t is Tracer:
        return True
    if t is list or t is tuple:
        return any(has_tracer(o) for o in obj)
    if t is dict:
        return any(has_tracer(o) for o in obj.values())
    return False


def _plain_keyword(value: Any) -> Any:
    """A traced keyword-only argument as a plain value where no derivative is lost.

    A boolean or integer tracer (``np.mean(a, where=mask)``, a mask array-API code
    computed) carries no derivative; anything else (a float, or an ``out=`` array that
    a write would detach from the tape) stays a tracer and is refused.
    """
    if type(value) is Tracer and value.dtype.kind in "biu":
        return strip(value)
    return value


def kwargs_to_positional(rule: Any, args: tuple, kwargs: dict) -> tuple:
    """Move keyword arguments that hold tracers into positional slots.

    Rare path: only taken when a tracer is passed by keyword (``np.clip(x, a_min=lo)``).
    """
    import inspect  # rare path: keep it off tapegrad's import time
    try:
        # An intercepted SciPy function runs the door's (*args, **kwargs) trampoline while
        # a tape records: its parameters are those of the copy holding SciPy's code.
        sig = inspect.signature(ORIGINALS.get(rule.fun, rule.fun))
        bound = sig.bind(*args, **kwargs)
    except (TypeError, ValueError) as exc:  # builtins without a signature
        raise NonDifferentiableArgumentError(
            f"{rule.name} received a traced keyword argument that tapegrad cannot place: "
            f"pass it positionally. ({exc})"
        ) from None
    values = bound.arguments
    if any(type(v) is Tracer and v.dtype.kind in "fc" for v in values.values()):
        # A boolean or integer tracer next to a traced float (np.sum(a, where=mask)) carries
        # no derivative: its plain value loses nothing, and the slot needs no rule.
        for name, v in values.items():
            if type(v) is Tracer and v.dtype.kind in "biu":
                values[name] = strip(v)
    positional = []
    rest = {}
    params = list(sig.parameters.values())
    last = max(
        (i for i, p in enumerate(params) if p.name in bound.arguments and has_tracer(bound.arguments[p.name])),
        default=-1,
    )
    for i, p in enumerate(params):
        if p.name not in bound.arguments:
            if i <= last:
                if p.default is inspect.Parameter.empty:
                    raise NonDifferentiableArgumentError(f"{rule.name}: cannot bind argument {p.name!r}")
                positional.append(p.default)
            continue
        value = bound.arguments[p.name]
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            positional.extend(value)
        elif p.kind is inspect.Parameter.VAR_KEYWORD:
            if has_tracer(value):
                raise NonDifferentiableArgumentError(
                    f"{rule.name}: a traced value was passed through **kwargs, which has no "
                    "derivative rule; pass it as a named or positional argument"
                )
            rest.update(value)
        elif i <= last and p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            positional.append(value)
        else:
            if has_tracer(value):
                value = _plain_keyword(value)
            if has_tracer(value):
                raise NonDifferentiableArgumentError(
                    f"{rule.name}: keyword-only argument {p.name!r} holds a traced value and has no derivative rule"
                )
            rest[p.name] = value
    return tuple(positional), rest
