"""autograd.tracer on tapegrad: a box is a tapegrad tracer; primitives are ``tapegrad.custom_vjp``."""

from __future__ import annotations

from typing import Any, Callable

import tapegrad as tg

from ._shim import ShimLimitation, is_tracer, raw
from .core import Primitive, primitive

__all__ = ["primitive", "notrace_primitive", "register_notrace", "isbox", "getval", "Box", "Primitive"]

#: autograd's Box: the object that stands for a value while it is traced.
Box = tg.Tracer


def isbox(x: Any) -> bool:
    """Whether ``x`` is being traced (a tapegrad tracer)."""
    return is_tracer(x)


def getval(x: Any) -> Any:
    """The plain value under a traced one."""
    return raw(x)


def notrace_primitive(f_raw: Callable) -> Callable:
    """A function whose output carries no gradient: it runs on plain values (``defconstant``)."""
    return tg.custom_vjp(f_raw).defconstant()


def register_notrace(trace_type: Any, primitive_fun: Any) -> None:
    raise ShimLimitation("register_notrace registers a primitive with one of autograd's node types")
