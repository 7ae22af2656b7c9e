"""autograd.builtins on tapegrad: Python's own containers.

autograd boxes containers while tracing and so needs container types of its
own; tapegrad traces the arrays inside ordinary lists, tuples and dicts, so
the containers are Python's.  ``isinstance`` and ``type`` look at a traced
value's plain value, as autograd's look inside a box.
"""

from __future__ import annotations

import builtins as _builtins
from typing import Any

from ._shim import is_tracer, raw
from .core import DictVSpace, ListVSpace, NamedTupleVSpace, SequenceVSpace, TupleVSpace  # noqa: F401

list = _builtins.list
tuple = _builtins.tuple
dict = _builtins.dict


def isinstance(obj: Any, cls: Any) -> bool:
    return _builtins.isinstance(raw(obj) if is_tracer(obj) else obj, cls)


def type(obj: Any) -> Any:
    return _builtins.type(raw(obj) if is_tracer(obj) else obj)
