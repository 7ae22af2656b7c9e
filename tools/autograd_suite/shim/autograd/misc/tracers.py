"""autograd.misc.tracers: ``const_graph`` replays autograd's recorded graph.

Replaying a recorded computation on new inputs without calling the Python
function again is a feature of autograd's graph; tapegrad records a fresh tape
on every call and has no public way to replay one, so the shim refuses.
"""

from __future__ import annotations

from typing import Any

from .._shim import ShimLimitation


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise ShimLimitation("const_graph replays autograd's recorded graph; tapegrad has no tape replay")


def const_graph_unary(fun: Any) -> Any:
    return _refuse


def const_graph(fun: Any, *args: Any, **kwargs: Any) -> Any:
    return _refuse
