"""autograd.extend on tapegrad: user primitives and vector spaces (see :mod:`autograd.core`)."""

from .core import (  # noqa: F401
    JVPNode,
    SparseObject,
    VJPNode,
    VSpace,
    def_linear,
    defjvp,
    defjvp_argnum,
    defjvp_argnums,
    defvjp,
    defvjp_argnum,
    defvjp_argnums,
    vspace,
)
from .tracer import Box, notrace_primitive, primitive, register_notrace  # noqa: F401
