"""The square of a modulus or a norm: ``np.abs(z)**2``, ``np.linalg.norm(x)**2``, ``np.hypot(a, b)**2``.

Both are smooth everywhere (``|z|**2 = z conj(z)``, ``|x|**2 = sum(x**2)``), but
the chain of their two rules is not at ``z == 0``: the modulus's derivative there
is the subgradient 0, so the Hessian of ``|z|**2`` at 0 came out as 0 instead of
2 (``2 |z| d|z|``, differentiated, is ``2 (d|z|)**2 + 2 |z| d2|z|``, and both terms
vanish).  A ridge penalty ``norm(w)**2`` at ``w = 0`` or a probability ``|psi|**2``
at a node of ``psi`` met it.  So ``np.square`` opts in to :attr:`Rule.fuse`: the
square of a value that a modulus or 2-norm node just made is recorded as one node
from the modulus's own input, with NumPy's value (``np.square`` of that very
modulus, bit for bit) and the derivative of ``z conj(z)``.  The modulus node stays
on the tape for any other use of it.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..dispatch import primitive
from ..registry import RULES, defvjp
from ..tape import PARENT_FIELDS
from ..tracer import Tracer
from ._util import unreduce
from .linalg import _cj, pnorm, whole_norm


def _abs_squared(z):
    return np.square(np.abs(z))


def _norm_squared(x, p, axis, keepdims):
    return np.square(np.linalg.vector_norm(x, ord=p, axis=axis, keepdims=keepdims))


def _whole_norm_squared(x, keepdims):
    return np.square(np.linalg.norm(x, keepdims=keepdims))


def _hypot_squared(a, b):
    return np.square(np.hypot(a, b))


hypot_squared = primitive(_hypot_squared)
abs_squared = primitive(_abs_squared)
norm_squared = primitive(_norm_squared)
whole_norm_squared = primitive(_whole_norm_squared)


def _norm_squared_vjp(g: Any, x: Any, axis: Any, keepdims: bool) -> Any:
    return unreduce(g * 2, np.shape(x), axis, keepdims) * _cj(x)


# d|z|^2 = 2 Re(conj(z) dz): the cotangent of a complex z is 2 g conj(z) (tapegrad's convention,
# dL/dRe - 1j dL/dIm), of a real one 2 g z.
# Element-wise, like np.square's own VJP: they take the sweep's banded and sparse batches too.
defvjp(abs_squared, lambda g, ans, z: (g * 2) * _cj(z), banded=True, sparse=True)
defvjp(
    norm_squared,
    lambda g, ans, x, p, axis, keepdims: _norm_squared_vjp(g, x, axis, keepdims),
    None, None, None,
    sparse=True,
)
defvjp(
    whole_norm_squared,
    lambda g, ans, x, keepdims: _norm_squared_vjp(g, x, tuple(range(-np.ndim(x), 0)), keepdims),
    None,
    sparse=True,
)
defvjp(hypot_squared, lambda g, ans, a, b: (g * 2) * a, lambda g, ans, a, b: (g * 2) * b, banded=True, sparse=True)

_HYPOT = RULES[np.hypot].number
_ABS = RULES[np.absolute].number
_NORM = RULES[pnorm].number
_WHOLE_NORM = RULES[whole_norm].number


def _fuse_square(a: Tracer) -> Optional[Any]:
    """``np.square(a)`` where ``a`` is the output of ``np.abs`` or a 2-norm node: see the module."""
    tape = a._tape
    if a._out != -1 or not tape.recording:
        return None
    node = tape.nodes[a._index]
    number = node[1]
    raw, parents = node[2], node[5]
    if number == _HYPOT and len(raw) == 2 and not node[3]:
        args = list(raw)
        for at in range(0, len(parents), PARENT_FIELDS):
            argnum, pos, index, out = parents[at : at + PARENT_FIELDS]
            if pos >= 0:
                return None
            args[argnum] = Tracer(raw[argnum], index, tape, out)
        return hypot_squared(*args)
    if number != _ABS and number != _NORM and number != _WHOLE_NORM:
        return None
    if len(parents) != PARENT_FIELDS or parents[0] != 0 or parents[1] >= 0:
        return None
    source = Tracer(raw[0], parents[2], tape, parents[3])
    if number == _ABS:
        return abs_squared(source)
    call = dict(zip(("x", "p", "axis", "keepdims") if number == _NORM else ("x", "keepdims"), raw))
    call.update(node[3] or ())  # the keywords the node keeps, as (name, value) pairs
    keepdims = call.get("keepdims", False)
    if not isinstance(keepdims, bool):
        return None
    if number == _WHOLE_NORM:
        return whole_norm_squared(source, keepdims)
    if call.get("p") != 2:
        return None
    return norm_squared(source, 2, call.get("axis"), keepdims)


RULES[np.square].fuse = _fuse_square
