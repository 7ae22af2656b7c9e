"""The tape: nodes recorded in creation order, and tape levels for nesting.

A :class:`Tape` is a list of nodes (tuples, see :data:`Node`).  Nodes are appended as
calls happen, so the list is already in topological order and the backward
sweep simply walks it from the end.  Each tape gets a *level* from a global
counter when it starts recording; a tracer of a tape wraps a value that may
itself be a tracer of a lower level.  That ordering is what keeps nested
derivatives (a Hessian, ``d/dx [x * d/dy (x + y)]``) from confusing their
perturbations: a call is always recorded on the highest-level tape among its
arguments, and the lower levels see only the raw values.
"""

from __future__ import annotations

import contextvars
import itertools
import threading
from typing import Any

import numpy as np

from .errors import TapeError
from .registry import RULE_TABLE
from .tracer import Tracer, as_source_value, small_shape

#: True while forward mode (the transpose trick, :mod:`tapegrad.forward`) sweeps a pullback
#: seeded with placeholder cotangents: only the map's linearity in them counts, not their
#: values (zeros), so no rule may read a traced cotangent's value as "this part is unused".
PLACEHOLDER_COTANGENTS: contextvars.ContextVar = contextvars.ContextVar("tapegrad_placeholder_cotangents",
                                                                         default=False)

__all__ = ["PLACEHOLDER_COTANGENTS", "Node", "Tape", "Pruned", "rule_of", "INDEX", "RULE", "ARGS", "KWARGS", "ANS", "PARENTS", "N_OUT", "PARENT_FIELDS", "FITTED", "RELEASED", "parent_runs"]

# next() on itertools.count is atomic under the GIL, so threads get distinct levels.
_levels = itertools.count(1)


#: A recorded call is a plain tuple ``(index, rule, args, kwargs, ans, parents, n_out)``,
#: read through these positions (or unpacked whole):
#:
#: * ``index``: position on the tape (creation order);
#: * ``rule``: the number of the registry rule (``registry.RULE_TABLE``), ``None``
#:   for a source (a watched value or a traced constant); see :func:`rule_of`;
#: * ``args``, ``kwargs``: the call's raw arguments at this tape's level (``kwargs`` as
#:   ``(name, value)`` pairs, or ``None``);
#: * ``ans``: the raw output (a tuple for a function with several outputs);
#: * ``parents``: one flat run of ``PARENT_FIELDS`` numbers per argument that was a
#:   tracer of this tape, ``argnum, position, parent, out``: ``parent`` is the index
#:   of the node that produced it, ``position`` the index inside a sequence argument
#:   (``-1`` for a plain argument, :data:`FITTED` for a plain argument whose cotangent
#:   is known to need no fitting) and ``out`` the output of the parent that was used
#:   (``-1`` for a single output);
#: * ``n_out``: ``0`` for a single output, else the number of outputs.
#:
#: Why flat tuples of numbers and arrays rather than objects with attributes: the
#: cyclic garbage collector stops tracking a tuple once a collection finds nothing
#: trackable inside it (numbers, arrays, strings, untracked tuples; a dict, a slice
#: or any other object keeps it tracked, so the node of a basic index ``x[1:]``
#: stays).  A node's ``args`` and ``parents`` leave at the first collection they
#: meet and the node at the next, so the collector does not walk a long tape again
#: and again in its full collections (an object stays tracked for life, and nested
#: tuples would take one collection per level).
INDEX, RULE, ARGS, KWARGS, ANS, PARENTS, N_OUT = range(7)
PARENT_FIELDS = 4
Node = tuple

#: The ``position`` of a float64 argument with the output's shape and dtype, passed to
#: a rule with element-wise VJPs (:attr:`~tapegrad.registry.Rule.elementwise`): its
#: VJP returns a cotangent that already fits it, so the sweep skips that check.
FITTED = -2

#: What a sweep that releases its tape leaves in place of each node it has done with:
#: such a tape is never swept or drawn again (see ``Tape.released``).
RELEASED: Node = (-1, None, None, None, None, (), 0)


#: The ``args`` of a traced constant's node (:meth:`Tape.constant`); a watched value has ``()``.
CONSTANT_ARGS = ("constant",)


def rule_of(node: Node) -> Any:
    """The :class:`~tapegrad.registry.Rule` that recorded ``node``, or ``None`` for a source."""
    number = node[RULE]
    return None if number is None else RULE_TABLE[number]


def parent_runs(parents: tuple) -> Any:
    """``(argnum, position, parent, out)`` for each traced argument, from a node's flat ``parents``."""
    fields = iter(parents)
    return zip(fields, fields, fields, fields)


class Pruned:
    """Stands on a node for a value its VJPs do not read: only shape and dtype are kept.

    A node of ``y = a + b`` needs neither ``a`` nor ``b`` to propagate
    cotangents, only their shapes; holding the arrays would keep every
    intermediate of a long computation alive until the sweep.  Any attempt to
    compute with a pruned value means a rule's declaration is wrong: it raises.
    """

    __slots__ = ("shape", "dtype")

    def __init__(self, value: Any) -> None:
        self.shape = value.shape
        self.dtype = value.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        size = 1
        for n in self.shape:
            size *= n
        return size

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            "tapegrad internal error: a derivative rule read a value its registration said "
            "it does not need (the `needs=` of defvjp is wrong); please report this."
        )

    def __array_function__(self, func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
        # Shape queries are what the backward driver and shape-only rules ask.
        if func is np.shape:
            return self.shape
        if func is np.ndim:
            return len(self.shape)
        if func is np.size and len(args) == 1 and not kwargs:
            return self.size
        return self._refuse()

    __array_ufunc__ = _refuse
    __array__ = _refuse
    __getitem__ = _refuse
    __add__ = __radd__ = __mul__ = __rmul__ = __sub__ = __rsub__ = __truediv__ = __rtruediv__ = _refuse


class Tape:
    """An ordered record of the calls made on the tracers of one level.

    Parameters
    ----------
    persistent : bool
        Whether the tape may answer more than one gradient request.
    """

    __slots__ = ("nodes", "level", "recording", "persistent", "consumed", "released", "memo", "nested",
                 "lock", "__weakref__")

    def __init__(self, persistent: bool = False) -> None:
        self.nodes: list = []
        self.lock = threading.Lock()  # for reindex
        #: (ufunc, id(input)) -> weak reference to the output of remembered ufuncs
        #: (see Rule.remember); their nodes keep the inputs alive, so ids stay unique.
        self.memo: dict = {}
        self.level: int = next(_levels)
        self.recording: bool = True
        self.persistent = persistent
        self.consumed = False
        #: A sweep dropped the saved values (a private single-use tape of grad/jacobian).
        self.released = False
        #: An inner tape watched a tracer of this one (a Hessian, an HVP): this tape's sweep
        #: differentiates a traced gradient, whose VJPs (sin's, of cos's VJP) reuse the
        #: forward's remembered outputs, so the memo holds them strongly (dispatch._append).
        self.nested = False

    def watch(self, value: Any) -> Any:
        """Return ``value`` as a tracer recorded by this tape (a source).

        Values whose dtype cannot carry a gradient (integers, booleans) are
        returned as plain arrays: derivatives with respect to them are zero
        or ``None``, never junk.
        """
        if type(value) is Tracer:
            if value._tape is self:
                return value
            if value._tape.level > self.level:
                raise TapeError(
                    "cannot watch a value traced by a newer (inner) tape on an older (outer) "
                    "tape: watch it on the outer tape first, then on the inner one."
                )
            value._tape.nested = True
        value = as_source_value(value)
        if value is None:
            return None
        raw, traceable = value
        if not traceable:
            return raw
        index = len(self.nodes)
        node = (index, None, (), None, raw, (), 0)
        self.nodes.append(node)
        if self.nodes[index] is not node:
            index = self.reindex(node, index)
        return Tracer(raw, index, self, -1, small_shape(raw))

    def constant(self, value: Any) -> Any:
        """``value`` as a tracer of this tape that no cotangent flows out of.

        ``np.zeros_like(x)`` of a traced ``x`` is such a constant: its derivative is
        zero, but it must stay a tracer so that code filling it in place
        (``out = np.zeros_like(x); out[i] = x[i] ** 2``) records those writes.
        """
        index = len(self.nodes)
        node = (index, None, CONSTANT_ARGS, None, value, (), 0)
        self.nodes.append(node)
        if self.nodes[index] is not node:
            index = self.reindex(node, index)
        return Tracer(value, index, self)

    def reindex(self, node: Node, index: int) -> int:
        """The position of ``node``, appended by this thread, whose ``index`` another thread took.

        Recording takes ``index = len(nodes)`` and then appends ``node``: two threads
        recording on one tape (Dask's threaded scheduler over traced chunks) may take
        the same index, and one of them then finds another node there.  ``list.append``
        is atomic, so its node sits further on: it gets its true position here.  The
        common path pays one identity check instead of a lock per node.
        """
        with self.lock:
            nodes = self.nodes
            position = index + 1
            while nodes[position] is not node:
                position += 1
            nodes[position] = (position,) + node[1:]
            return position

    def reaches_source(self, index: int) -> bool:
        """Whether the value of node ``index`` depends on a value watched on this tape.

        A value computed from traced constants only (``np.zeros_like(x)`` and what
        follows from it) does not: no cotangent reaches a source through it.
        """
        nodes, stack, seen = self.nodes, [index], set()
        while stack:
            i = stack.pop()
            if i in seen:
                continue
            seen.add(i)
            node = nodes[i]
            if node[RULE] is None:
                if node[ARGS] is not CONSTANT_ARGS:
                    return True  # a watched value (or a released node: unknown, so yes)
                continue
            stack.extend(node[PARENTS][2::PARENT_FIELDS])
        return False

    def __repr__(self) -> str:
        return f"<Tape level={self.level} nodes={len(self.nodes)} persistent={self.persistent}>"
