"""Gradient checkpointing: trade recomputation for tape memory.

``tapegrad.checkpoint(fn)`` returns a function recorded as ONE node: the
forward pass runs ``fn`` on the raw values (its intermediates are not kept on
the tape), and the node's VJP runs ``fn`` again under a fresh tape and
backpropagates through that short-lived record.  Splitting a long chain into
``k`` checkpointed segments keeps only the ``k`` segment boundaries alive
between the forward and backward passes, plus the intermediates of one
segment at a time during the backward pass.

The node is a registry primitive (:func:`tapegrad.dispatch.primitive`) whose
single differentiable argument is the list of every array leaf of the call,
so one recomputation serves all arguments.  When the values are tracers of
an outer tape (a Hessian), the recomputation inside the VJP is itself
recorded there, so checkpointed functions work at every order.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from .dispatch import primitive
from .registry import CONSTANT_ARG, defvjp
from .reverse import vjp
from .tracer import Tracer
from .tree import flatten, unflatten

__all__ = ["checkpoint"]


class _Call:
    """What a checkpointed call needs besides its array leaves (opaque to the tape)."""

    __slots__ = ("fun", "structure", "traced", "out_structure")

    def __init__(self, fun: Callable, structure: Any, traced: tuple) -> None:
        self.fun = fun
        self.structure = structure  # of (args, kwargs)
        self.traced = traced  # positions of the leaves that held tracers at call time
        self.out_structure = None


def _run(leaves: list, call: _Call) -> tuple:
    """Call the user's function on ``leaves``; return its output leaves as a tuple."""
    args, kwargs = unflatten(call.structure, list(leaves))
    out_leaves, call.out_structure = flatten(call.fun(*args, **kwargs))
    return tuple(out_leaves)


def _recompute_vjp(g: tuple, ans: tuple, leaves: list, call: _Call) -> list:
    """Re-run the function under a fresh tape and pull ``g`` back to the traced leaves."""
    traced = call.traced
    differentiable: list = []  # positions of the output leaves that are tracers

    def on_traced(*values: Any) -> tuple:
        full = list(leaves)
        for i, v in zip(traced, values):
            full[i] = v
        out = _run(full, call)
        # Only tracers carry a gradient; the other leaves (a name, None, a constant) are
        # left out of the vjp, which refuses outputs that are not arrays.
        differentiable[:] = [k for k, o in enumerate(out) if type(o) is Tracer]
        return tuple(out[k] for k in differentiable)

    _, pullback = vjp(on_traced, *[leaves[i] for i in traced])
    cts = pullback(tuple(g[k] for k in differentiable))
    out = [None] * len(leaves)
    for i, c in zip(traced, cts):
        out[i] = c
    return out


_checkpointed = primitive(_run)
defvjp(_checkpointed, _recompute_vjp, CONSTANT_ARG, note="recomputes the forward pass in its VJP")


def checkpoint(fun: Callable) -> Callable:
    """Return ``fun`` recorded as one tape node that recomputes its intermediates.

    Parameters
    ----------
    fun : callable
        Ordinary NumPy code.  Arguments (positional or keyword) may be arrays or
        nested lists/tuples/dicts of arrays; so may the output.  It must be a
        pure function of its arguments (it runs twice: once forward, once
        inside the backward pass).

    Returns
    -------
    callable
        Same signature and values as ``fun``.  Under differentiation only the
        inputs and outputs are stored on the tape, not the intermediates.

    Notes
    -----
    A single checkpoint saves no peak memory: its backward recomputes every
    intermediate at once.  Checkpoint *segments* of a long computation, so
    that only segment boundaries stay alive and one segment is recomputed at
    a time (about ``sqrt(n)`` segments of ``sqrt(n)`` steps minimise peak
    memory for a chain of ``n`` steps).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> def block(x):
    ...     for _ in range(10):
    ...         x = np.sin(x) + x
    ...     return x
    >>> def f(x, step):
    ...     for _ in range(5):
    ...         x = step(x)
    ...     return np.sum(x)
    >>> x = np.linspace(0.0, 1.0, 4)
    >>> bool(np.allclose(tg.grad(f)(x, tg.checkpoint(block)), tg.grad(f)(x, block)))
    True
    """

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        leaves, structure = flatten((args, kwargs))
        traced = tuple(i for i, leaf in enumerate(leaves) if type(leaf) is Tracer)
        if not traced:
            return fun(*args, **kwargs)
        call = _Call(fun, structure, traced)
        out = _checkpointed(leaves, call)
        return unflatten(call.out_structure, list(out))

    return wrapper
