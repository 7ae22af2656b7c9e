"""Small helpers the SciPy rule modules share (``rules/scipy_*.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..binding import has_tracer
from ..dispatch import primitive
from ..registry import defvjp
from ..tracer import Tracer

__all__ = ["as_array", "has_tracer", "reaches_source", "with_value"]


def as_array(value: Any) -> Any:
    """A tracer as it is; anything else as an ndarray (a list or tuple holding tracers is stacked)."""
    if type(value) is Tracer:
        return value
    if isinstance(value, (list, tuple)) and has_tracer(value):
        return np.stack([as_array(v) for v in value])
    return np.asarray(value)


def reaches_source(value: Any) -> bool:
    """Whether a tracer in ``value`` (lists, tuples, dicts too) depends on a watched input.

    Array-API code makes constant tracers (``xp.asarray([0.0, 1.0])``): those carry
    no derivative and are used as plain values.
    """
    if type(value) is Tracer:
        while type(value) is Tracer:
            if value._tape.reaches_source(value._index):
                return True
            value = value._value
        return False
    if isinstance(value, (list, tuple)):
        return any(reaches_source(v) for v in value)
    if isinstance(value, dict):
        return any(reaches_source(v) for v in value.values())
    return False


def _with_value_impl(traced: Any, exact: Any) -> Any:
    return exact


#: ``with_value(t, exact)`` is ``exact`` with the derivative of ``t``: the value a
#: rule returns is SciPy's own result bit for bit, whatever rounding the traced
#: evaluation has (scipy.stats' private methods, multivariate densities).
with_value = primitive(_with_value_impl)
defvjp(with_value, lambda g, ans, traced, exact: g, None)
