"""Forward results that VJPs reuse: ``sin``'s VJP needs ``cos(x)``, often computed already.

A tape keeps, in ``tape.memo``, weak references to the large outputs of
one-input functions registered with ``remember=True`` (``cos``, ``cholesky``);
during a sweep over that tape, :func:`remembered` and :func:`recalled` find them
by the identity of their input, and :func:`shared` lets several VJPs of one
sweep share a value derived from them (the inverse of a Cholesky factor).
"""

from __future__ import annotations

import threading
from typing import Any

from .parallel import call as parallel_call

__all__ = ["remembered", "recalled", "shared", "shared_so_far", "sweeping"]


class _MemoStack(threading.local):
    def __init__(self) -> None:
        self.stack: list = []


# The memo of the tape being swept, per thread (sweeps nest for higher orders).
_MEMOS = _MemoStack()
# A key of the memo of a tape whose forward made large outputs (alive or not).
_LARGE = object()


class sweeping:
    """Context of one backward sweep over ``tape``: its memo serves :func:`remembered`.

    The memo holds weak references (it must not keep pruned values alive); during
    the sweep the live ones are held strongly, so that releasing a node cannot drop
    a value a later VJP is about to reuse.
    """

    __slots__ = ("memo",)

    def __init__(self, tape: Any) -> None:
        self.memo = {key: value for key, ref in tape.memo.items() if (value := ref()) is not None}
        if tape.memo:  # the forward made large outputs: large inputs may come (see remembered)
            self.memo[_LARGE] = True

    def __enter__(self) -> None:
        _MEMOS.stack.append(self.memo)

    def __exit__(self, *exc: Any) -> None:
        _MEMOS.stack.pop()


def remembered(ufunc: Any, x: Any) -> Any:
    """``ufunc(x)``, reusing the forward pass's result when the program computed it.

    Only large outputs of ufuncs registered with ``remember=True`` are kept
    (see :class:`tapegrad.registry.Rule`).  Inside a rule, ``x`` is the very object
    the forward call received, so the look-up is by identity.
    """
    stack = _MEMOS.stack
    if stack:
        memo = stack[-1]
        if memo:  # empty unless the forward made large outputs (W1's small steps skip the call)
            hit = memo.get((ufunc, id(x)))
            if hit is not None:
                return hit
            return parallel_call(ufunc, (x,))  # a large array's expensive loop may be split
    return ufunc(x)


def recalled(fun: Any, x: Any) -> Any:
    """The forward pass's ``fun(x)`` when the program computed it (and it was kept), else ``None``."""
    stack = _MEMOS.stack
    if stack and stack[-1]:
        return stack[-1].get((fun, id(x)))
    return None


def shared(derive: Any, x: Any) -> Any:
    """``derive(x)``, computed once per sweep: VJPs that need the same derived value share it.

    Keyed by the identity of ``x``, which the entry holds so that the id stays
    unique for the sweep.  Outside a sweep this is just ``derive(x)``.
    """
    value = shared_so_far(derive, x)
    if value is None:
        value = derive(x)
        stack = _MEMOS.stack
        if stack:
            stack[-1][(derive, id(x))] = (x, value)
    return value


def shared_so_far(derive: Any, x: Any) -> Any:
    """What :func:`shared` has already computed of ``derive(x)`` in this sweep, else ``None``."""
    stack = _MEMOS.stack
    if stack:
        hit = stack[-1].get((derive, id(x)))
        if hit is not None and hit[0] is x:
            return hit[1]
    return None
