"""autograd.misc.flatten: nested containers of arrays to one vector and back.

The flat vector is the concatenation of the raveled leaves (dict items in
sorted key order); ``unflatten`` is the VJP of that linear map, computed by
tapegrad, exactly as autograd defines it.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import tapegrad as tg

from ..builtins import type as value_type


def _flatten(value: Any) -> Any:
    t = value_type(value)
    if t in (list, tuple):
        return _concatenate([_flatten(v) for v in value])
    if t is dict:
        return _concatenate([_flatten(value[k]) for k in sorted(value)])
    return np.ravel(value)


def _concatenate(parts: list) -> Any:
    return np.concatenate(parts) if parts else np.array([])


def flatten(value: Any) -> tuple:
    """``(vector, unflatten)`` for a nesting of tuples, lists and dicts of arrays and scalars."""
    flat, pullback = tg.vjp(_flatten, value)
    return flat, lambda vector: pullback(vector)[0]


def flatten_func(func: Callable, example: Any) -> tuple:
    _ex, unflatten = flatten(example)

    def _func(_x: Any, *args: Any) -> Any:
        return flatten(func(unflatten(_x), *args))[0]

    return _func, unflatten, _ex
