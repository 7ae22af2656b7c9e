"""Forward results that VJPs reuse: ``sin``'s VJP needs ``cos(x)``, often computed already.

A tape keeps, in ``tape.memo``, weak references to the large outputs of ufuncs
registered with ``remember=True``; during a sweep over that tape,
:func:`remembered` finds them by the identity of their input.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["remembered", "sweeping"]


class _MemoStack(threading.local):
    def __init__(self) -> None:
        self.stack: list = []


# The memo of the tape being swept, per thread (sweeps nest for higher orders).
_MEMOS = _MemoStack()


class sweeping:
    """Context of one backward sweep over ``tape``: its memo serves :func:`remembered`.

    The memo holds weak references (it must not keep pruned values alive); during
    the sweep the live ones are held strongly, so that releasing a node cannot drop
    a value a later VJP is about to reuse.
    """

    __slots__ = ("memo",)

    def __init__(self, tape: Any) -> None:
        self.memo = {key: value for key, ref in tape.memo.items() if (value := ref()) is not None}

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
    if stack and stack[-1]:
        hit = stack[-1].get((ufunc, id(x)))
        if hit is not None:
            return hit
    return ufunc(x)
