"""Route a call on tracers to its rule and record it on the right tape.

This is the hot path of tapegrad: every ufunc, NumPy function and operator
applied to a tracer passes through :func:`record` (primitives), a composite
implementation, or :func:`call_constant`.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Any, Callable

import numpy as np

from .errors import GradientDroppedError, NonDifferentiableArgumentError, UnsupportedFunctionError
from .registry import (
    COMPOSITE, CONSTANT, CONSTANT_ARG, DISPATCHED, PRIMITIVE, RULES, UNTRACED, Rule, function_name, lookup,
)
from .array_types import follow_library
from .parallel import MIN_SIZE as PARALLEL_LARGE, call as parallel_call
from .tape import FITTED, PARENT_FIELDS, Pruned
from .binding import has_tracer as _has_tracer
from .binding import kwargs_to_positional, strip_all
from .tracer import ROUTES, SMALL_BYTES, Tracer, strip, unwrap_above
from .views import link_opaque_views
from .frozen import kept, kept_read
from .out_arguments import OUT_AT, UNKNOWN, function_into_out, into_traced_out, out_position
from .out_arguments import reject_out as _reject_out  # rules import it from here

__all__ = [
    "record",
    "record_traced_first",
    "call_rule",
    "call_constant",
    "strip",
    "strip_all",
    "primitive",
    "dispatch_function",
    "observing_calls",
]

_SEQ = (list, tuple)


def _traceable(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    return dtype is not None and dtype.kind in "fc"


def record(rule: Rule, args: tuple, kwargs: dict) -> Any:
    """Compute a primitive on raw values and record it on the highest tape among its arguments."""
    tape = None
    for a in args:
        t = type(a)
        if t is Tracer:
            if tape is None or a._tape.level > tape.level:
                tape = a._tape
        elif t is list or t is tuple:
            for e in a:
                if type(e) is Tracer and (tape is None or e._tape.level > tape.level):
                    tape = e._tape
    if kwargs:
        for v in kwargs.values():
            if _has_tracer(v):
                args, kwargs = kwargs_to_positional(rule, args, kwargs)
                return record(rule, args, kwargs)
    if tape is None:
        return rule.fun(*args, **kwargs)

    raw = list(args)
    parents = []
    vjps = rule.vjps
    like = None  # a traced value of another array library (CuPy), which constants must follow
    plain: Any = None  # positions of plain arrays (and index tuples): see frozen.kept
    for i, a in enumerate(args):
        t = type(a)
        if t is Tracer:
            if i < len(vjps) and vjps[i] is CONSTANT_ARG:
                raw[i] = strip(a)
            elif a._tape is tape:
                raw[i] = a._value
                parents += (i, -1, a._index, a._out)
                if type(a._value) is not np.ndarray and type(a._value) is not Tracer:
                    like = a._value
        elif t is np.ndarray:
            plain = (i,) if plain is None else plain + (i,)
        elif (t is list or t is tuple) and a:
            if i < len(vjps) and vjps[i] is CONSTANT_ARG:
                raw[i] = strip_all(a)
                if t is tuple:  # an index: its arrays are read by the VJP
                    plain = (i,) if plain is None else plain + (i,)
                continue
            if any((type(e) is list or type(e) is tuple) and _has_tracer(e) for e in a):
                # np.stack([x[:2], [x[0], x[1]]]): an element that is itself a list holding tracers
                # becomes the traced array NumPy would make of it, so that its values keep their
                # parents (the function's own conversion would hide a tracer inside the raw call).
                a = t(_assembled(e) for e in a)
                if tape is None or any(type(e) is Tracer and e._tape.level > tape.level for e in a):
                    return record(rule, args[:i] + (a,) + args[i + 1 :], kwargs)
                raw[i] = a
            elems = None
            for j, e in enumerate(a):
                if type(e) is Tracer and e._tape is tape:
                    if elems is None:
                        elems = list(a)
                    elems[j] = e._value
                    parents += (i, j, e._index, e._out)
            if elems is not None:
                raw[i] = elems if t is list else tuple(elems)
    if like is not None:
        raw = [follow_library(r, like) for r in raw]
    raw = tuple(raw)
    ans = rule.fun(*raw, **kwargs)
    if plain is not None and tape.recording and parents:
        raw = kept_read(rule.needs, raw, plain, parents[::PARENT_FIELDS])
    # A keyword (np.cos(x, dtype=np.float32)) changes the output: such a call is not remembered.
    out = _emit(rule, tape, raw, kwargs if rule.pass_kwargs else None, ans, parents, remember=not kwargs)
    if kwargs and not rule.pass_kwargs and ROUTES.guard is not None:  # a reuse recording replays them
        ROUTES.guard("kwargs", out, kwargs)
    if rule.returns_view and type(args[0]) is Tracer:
        link_opaque_views(args[0], out)
    return out


#: Arrays smaller than this stay on the tape even when no VJP reads them:
#: pruning them would cost more than it saves.  (The size below which a tracer
#: knows its value's shape, ``Tracer._small``: the fast paths that pass it along
#: therefore never prune nor remember.)
PRUNE_BYTES = SMALL_BYTES


def _prune(rule: Rule, raw: tuple, ans: Any, parents: Any) -> tuple:
    """The values a node keeps: arguments and output its recorded VJPs read, else placeholders."""
    needs = rule.needs
    keep = set()
    for argnum in parents[::PARENT_FIELDS]:
        keep.update(needs[argnum])
    stored = tuple(
        Pruned(a) if i not in keep and (type(a) is np.ndarray or type(a) is Tracer) else a
        for i, a in enumerate(raw)
    )
    return stored, (ans if -1 in keep else Pruned(ans))


def _memo_ref(value: Any) -> Any:
    """A weak reference where possible: the memo must not keep pruned outputs alive."""
    try:
        return weakref.ref(value)
    except TypeError:  # NumPy scalars: small, kept as they are
        return lambda: value


def record_unary(rule: Rule, a: Any) -> Any:
    """Hot path for a one-input ufunc with a VJP (``np.sin(x)``, ``-x``)."""
    if type(a) is not Tracer or not rule.simple:
        return record(rule, (a,), {})
    if rule.fuse is not None:
        fused = rule.fuse(a)
        if fused is not None:
            return fused
    tape = a._tape
    raw = a._value
    small = a._small
    # Not small: an expensive loop on a large float64 or complex128 array is split across threads
    # (same bits; tapegrad.parallel).
    ans = rule.fun(raw) if small is not None or not rule.elementwise else parallel_call(rule.fun, (raw,))
    if not tape.recording:
        return ans
    if small is not None and rule.elementwise:
        # A small float64 input (Tracer._small): the output has its shape and dtype and
        # the cotangent fits without a check (tape.FITTED); no array attribute is read.
        nodes = tape.nodes
        index = len(nodes)
        node = (index, rule.number, (raw,), None, ans, (0, FITTED, a._index, a._out), 0)
        nodes.append(node)
        if nodes[index] is not node:  # another thread appended in between (see Tape.reindex)
            index = tape.reindex(node, index)
        return Tracer(ans, index, tape, -1, small)
    # Any other float64 array input (large, or made where the shape was not passed along):
    # the same knowledge, read from the array (a one-output element-wise ufunc keeps it).
    pos = FITTED if rule.elementwise and type(raw) is np.ndarray and raw.dtype is _FLOAT64 else -1
    return _record_output(rule, tape, (raw,), ans, (0, pos, a._index, a._out))


def record_traced_first(rule: Rule, a: Tracer, rest: tuple, kwargs: Any = None) -> Any:
    """Hot path for a primitive whose one traced argument is the first (``x[1:, None]``, ``np.sum(x, axis=0)``).

    The caller guarantees that ``rest`` and ``kwargs`` hold no tracers (a basic
    index, an axis).
    """
    value = a._value
    raw = (value,) + rest
    fun = rule.fun
    if type(value) is not Tracer:  # nothing to dispatch: skip a primitive wrapper's search for tracers
        fun = getattr(fun, UNTRACED, fun)
    ans = fun(*raw, **kwargs) if kwargs else fun(*raw)
    tape = a._tape
    if (
        type(ans) is np.ndarray
        and ans.nbytes <= PRUNE_BYTES
        and ans.dtype.kind in "fc"
        and tape.recording
        and rule.vjps
        and callable(rule.vjps[0])
    ):
        # _emit's common case inline (a small float output; W7 records 4000 of them):
        # nothing to prune or remember, and argument 0 has a VJP.
        stored = _stored_kwargs(kwargs) if rule.pass_kwargs else None
        index = len(tape.nodes)
        node = (index, rule.number, raw, stored, ans, (0, -1, a._index, a._out), 0)
        tape.nodes.append(node)
        if tape.nodes[index] is not node:
            index = tape.reindex(node, index)
        out = Tracer(ans, index, tape, -1, ans.shape if ans.dtype is _FLOAT64 else None)
    else:
        parents = [0, -1, a._index, a._out]
        out = _emit(rule, tape, raw, kwargs if rule.pass_kwargs else None, ans, parents, remember=not kwargs)
    if rule.returns_view:
        link_opaque_views(a, out)
    return out


_FLOAT64 = np.dtype(np.float64)
_ARRAY_SCALARS: dict = {}


def _array_scalar(value: float) -> np.ndarray:
    """A Python float as a read-only 0-d float64 array (cached): the same number to NumPy.

    With a float64 array operand a Python float and a 0-d float64 array give the
    same loop and the same bits, but NumPy converts the Python float on every
    call (about 0.2 us on a small array), in the forward call and again in each
    VJP that multiplies by it.  Only rules that opt in (``Rule.scalar_operands``)
    see the array.
    """
    cached = _ARRAY_SCALARS.get(value)
    if cached is None:
        if len(_ARRAY_SCALARS) >= 1024:  # a program with many distinct constants
            _ARRAY_SCALARS.clear()
        cached = np.array(value)
        cached.flags.writeable = False
        _ARRAY_SCALARS[value] = cached
    return cached


def _real_float(a: Tracer) -> bool:
    if a._small is not None:  # small float64 (Tracer._small)
        return True
    dtype = getattr(a._value, "dtype", None)
    return dtype is not None and dtype.kind == "f"


def record_binary(rule: Rule, a: Any, b: Any) -> Any:
    """Hot path for a two-input ufunc with VJPs for both inputs (``x * y``, ``x + 1.0``)."""
    if not rule.simple:
        return record(rule, (a, b), {})
    # small: the output's shape when the fast case below applies (see Tracer._small): small
    # float64 operands of the output's shape, or one with a Python float, to an element-wise
    # rule.  The output then has that shape and dtype and every cotangent fits (tape.FITTED).
    small = None
    user_array = False  # the constant operand is the caller's ndarray
    if type(a) is Tracer:
        tape = a._tape
        if type(b) is Tracer:
            tape_b = b._tape
            if tape_b is tape:
                if a is b and rule.same_operands is not None and _real_float(a):
                    return record_unary(RULES[rule.same_operands], a)  # x * x: np.square(x)
                raw = (a._value, b._value)
                shape = a._small
                if shape is not None and rule.elementwise and shape == b._small:
                    small = shape
                    parents = (0, FITTED, a._index, a._out, 1, FITTED, b._index, b._out)
                else:
                    parents = (0, -1, a._index, a._out, 1, -1, b._index, b._out)
                traced = None
            elif tape_b.level > tape.level:
                tape = tape_b
                traced, constant, argnum = b, a, 1
            else:
                traced, constant, argnum = a, b, 0
        else:
            traced, constant, argnum = a, b, 0
    elif type(b) is Tracer:
        tape = b._tape
        traced, constant, argnum = b, a, 1
    else:
        return rule.fun(a, b)
    if traced is not None:  # one operand traced on this tape, the other a constant for it
        value = traced._value
        pos = -1
        if type(constant) is float and rule.scalar_operands:
            shape = traced._small
            if shape is not None:
                cached = _ARRAY_SCALARS.get(constant)  # _array_scalar's cache hit, inline
                constant = _array_scalar(constant) if cached is None else cached
                if rule.elementwise:
                    small = shape
                    pos = FITTED
            elif type(value) is np.ndarray and value.dtype is _FLOAT64:
                constant = _array_scalar(constant)
                if rule.elementwise:
                    pos = FITTED
        elif type(constant) is np.ndarray:
            if type(value) is not np.ndarray:
                constant = follow_library(constant, unwrap_above(traced, 0))
            user_array = type(constant) is np.ndarray
        raw = (value, constant) if argnum == 0 else (constant, value)
        parents = (argnum, pos, traced._index, traced._out)
    if small is None and rule.elementwise:
        # Large float64 or complex128 operands: an expensive loop is split across threads (same bits;
        # tapegrad.parallel).
        ans = parallel_call(rule.fun, raw)
    else:
        ans = rule.fun(*raw)
    if not tape.recording:
        return ans
    if user_array:  # x * c: the node keeps c as it is now (frozen.kept)
        needs = rule.needs
        if needs is None or 1 - argnum in needs[argnum]:
            raw = (value, kept(constant)) if argnum == 0 else (kept(constant), value)
    if small is not None:  # no array attribute to read: shape, dtype and size are known
        nodes = tape.nodes
        index = len(nodes)
        node = (index, rule.number, raw, None, ans, parents, 0)
        nodes.append(node)
        if nodes[index] is not node:
            index = tape.reindex(node, index)
        return Tracer(ans, index, tape, -1, small)
    return _record_output(rule, tape, raw, ans, parents)


def _record_output(rule: Rule, tape: Any, raw: tuple, ans: Any, parents: tuple) -> Any:
    """The node of a computed call without keywords (record_unary's and record_binary's tail).

    A small floating-point array is appended here, without _append's bookkeeping, and
    its tracer learns its shape when it is float64 (see Tracer._small).
    """
    if type(ans) is np.ndarray:
        dtype = ans.dtype
        if dtype.kind in "fc":
            if ans.nbytes <= PRUNE_BYTES:
                nodes = tape.nodes
                index = len(nodes)
                node = (index, rule.number, raw, None, ans, parents, 0)
                nodes.append(node)
                if nodes[index] is not node:
                    index = tape.reindex(node, index)
                return Tracer(ans, index, tape, -1, ans.shape if dtype is _FLOAT64 else None)
            return _append(rule, tape, raw, None, ans, parents)
    dtype = getattr(ans, "dtype", None)
    if type(ans) is tuple or dtype is None or dtype.kind not in "fc":
        return _emit(rule, tape, raw, None, ans, list(parents))
    return _append(rule, tape, raw, None, ans, parents)


def _emit(rule: Rule, tape: Any, raw: tuple, kwargs: Any, ans: Any, parents: list, remember: bool = True) -> Any:
    """Record the node of a computed primitive and wrap its output(s) as tracers.

    ``remember=False`` keeps the output out of the tape's memo (a call with keywords).
    """
    if not tape.recording or not parents:
        return ans
    vjps = rule.vjps
    if None in vjps or parents[-PARENT_FIELDS] >= len(vjps):
        kept: list = []
        for at in range(0, len(parents), PARENT_FIELDS):
            argnum = parents[at]
            if argnum < len(vjps) and vjps[argnum] is not None:
                kept += parents[at : at + PARENT_FIELDS]
            elif tape.reaches_source(parents[at + 2]):
                raise NonDifferentiableArgumentError(
                    f"argument {argnum} of {rule.name} carries no gradient in tapegrad, but a traced value "
                    f"was passed there. Pass a constant (tapegrad.stop_gradient(x)) or register a rule."
                )
            # else a constant of the tape (array-API code makes its constants with xp.asarray,
            # e.g. the degrees of freedom SciPy passes to betaincc): no cotangent to lose.
        if not kept:
            return ans
        parents = kept
    nodes = tape.nodes
    if isinstance(ans, (tuple, list)):
        index = len(nodes)
        node = (index, rule.number, raw, _stored_kwargs(kwargs), ans, tuple(parents), len(ans))
        nodes.append(node)
        if nodes[index] is not node:
            index = tape.reindex(node, index)
        outs = [Tracer(a, index, tape, k) if _traceable(a) else a for k, a in enumerate(ans)]
        if ROUTES.guard is not None:  # lu_factor's pivots, frexp's exponent: a reuse recording guards them
            ROUTES.guard("outputs", tape, index, outs)
        if type(ans) is list:
            return outs
        if type(ans) is tuple:
            return tuple(outs)
        return type(ans)(*outs)  # a named tuple such as SVDResult
    dtype = getattr(ans, "dtype", None)
    if dtype is None or dtype.kind not in "fc":
        if dtype is not None and dtype.kind in "OUSV":
            raise GradientDroppedError(
                f"{rule.name} on a traced value produced an array of dtype {dtype}, which cannot "
                "carry a gradient (object operands?). Convert the other operands to a "
                "floating-point dtype first."
            )
        return ans
    return _append(rule, tape, raw, _stored_kwargs(kwargs), ans, tuple(parents), remember)


def _stored_kwargs(kwargs: Any) -> Any:
    """Keywords as a node keeps them: ``(name, value)`` pairs, or ``None``.

    A tuple, not a dict: the garbage collector never untracks a tuple that holds a
    dict (see :data:`tapegrad.tape.Node`).
    """
    return tuple(kwargs.items()) if kwargs else None


def _append(rule: Rule, tape: Any, raw: tuple, kwargs: Any, ans: Any, parents: tuple, remember: bool = True) -> Any:
    """Record the node of a single floating-point output and return it as a tracer.

    Small outputs skip the bookkeeping (it would cost more than it saves); large
    ones of remembered ufuncs go into the tape's memo, and values no recorded VJP
    reads are pruned from the node.
    """
    nodes = tape.nodes
    if ans.nbytes > PRUNE_BYTES:
        if rule.large_twin is not None and ans.size >= PARALLEL_LARGE:
            rule = rule.large_twin  # its VJPs split their one ufunc call across threads
        if remember and rule.remember and len(raw) == 1:
            # A nested tape's sweep comes after the inner one (the forward's outputs are
            # gone by then): it keeps them (cos(x) for the VJP of the traced sin(x)).
            tape.memo[(rule.key, id(raw[0]))] = (lambda v=ans: v) if tape.nested else _memo_ref(ans)
        if rule.needs is not None and ROUTES.guard is None:  # a reuse recording keeps what replay reads
            stored, kept = _prune(rule, raw, ans, parents)
            index = len(nodes)
            node = (index, rule.number, stored, kwargs, kept, parents, 0)
            nodes.append(node)
            if nodes[index] is not node:
                index = tape.reindex(node, index)
            return Tracer(ans, index, tape)
    index = len(nodes)
    node = (index, rule.number, raw, kwargs, ans, parents, 0)
    nodes.append(node)
    if nodes[index] is not node:
        index = tape.reindex(node, index)
    return Tracer(ans, index, tape)


def call_constant(fun: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """Call ``fun`` on the raw values: its output carries no gradient (a guard, while a reuse recording runs)."""
    if ROUTES.guard is not None:
        return ROUTES.guard("constant", fun, args, kwargs)
    return fun(*strip_all(args), **strip_all(kwargs))


def call_rule(rule: Rule, args: tuple, kwargs: dict) -> Any:
    """Apply ``rule`` to a call whose arguments hold tracers."""
    kind = rule.kind
    if kind is PRIMITIVE:
        return record(rule, args, kwargs)
    if kind is COMPOSITE:
        # Integer and boolean tracers (constants of an array-API tape) are indices,
        # masks and counts: a composite computes with them as plain arrays.
        if any(type(a) is Tracer and a.dtype.kind not in "fc" for a in args):
            args = tuple(strip(a) if type(a) is Tracer and a.dtype.kind not in "fc" else a for a in args)
        return rule.impl(*args, **kwargs)
    if kind is CONSTANT:
        out = call_constant(rule.fun, args, kwargs)
        if rule.traced_constant and args and type(args[0]) is Tracer and getattr(out, "dtype", None) is not None:
            if out.dtype.kind in "fc":
                return args[0]._tape.constant(out)
        return out
    raise AssertionError(kind)


# A per-thread observer of the NumPy calls that reach tracers (``tapegrad check``).
# ``_observing`` counts the threads that have one, so the hot path reads one global.
_THREAD = threading.local()
_observing = 0
_observing_lock = threading.Lock()


def current_observer() -> Any:
    """This thread's observer (:func:`observing_calls`), or ``None``: a new one may pass calls on to it."""
    return getattr(_THREAD, "observer", None)


@contextlib.contextmanager
def observing_calls(observer: Callable[..., Any]) -> Any:
    """Route this thread's ``__array_ufunc__`` / ``__array_function__`` calls through ``observer``.

    ``observer(key, args, kwargs, proceed)`` returns the call's result;
    ``proceed()`` is the normal dispatch of that call.  Other threads are not affected.
    """
    global _observing
    previous = getattr(_THREAD, "observer", None)
    _THREAD.observer = observer
    with _observing_lock:
        _observing += 1
    try:
        yield
    finally:
        _THREAD.observer = previous
        with _observing_lock:
            _observing -= 1


def dispatch_function(func: Any, args: tuple, kwargs: dict, observe: bool = True) -> Any:
    """The body of ``Tracer.__array_function__``."""
    if _observing and observe and getattr(_THREAD, "observer", None) is not None:
        return _THREAD.observer(func, args, kwargs, lambda: dispatch_function(func, args, kwargs, False))
    rule = RULES.get(func)
    if rule is None:
        return ROUTES.unsupported(func, args, kwargs)  # tape constants only: their values (tapegrad.buffers)
    out_at = OUT_AT.get(func, UNKNOWN)
    if out_at is UNKNOWN:
        out_at = out_position(func)
    if (kwargs and kwargs.get("out") is not None) or (out_at is not None and len(args) > out_at and args[out_at] is not None):
        return function_into_out(func, rule, args, kwargs, out_at, dispatch_function, call_rule)
    if rule.kind is PRIMITIVE and len(args) == 1 and type(args[0]) is Tracer and rule.vjps[:1] != (CONSTANT_ARG,):
        # np.sum(x, axis=0), np.transpose(x): one traced input, constant keywords, no lists to walk.
        for v in kwargs.values():
            if _has_tracer(v):
                return call_rule(rule, args, kwargs)
        return record_traced_first(rule, args[0], (), kwargs)
    return call_rule(rule, args, kwargs)


def _assembled(obj: Any) -> Any:
    """A (nested) list holding tracers as one traced array, as ``np.array`` makes it; anything else as it is."""
    if (type(obj) is list or type(obj) is tuple) and _has_tracer(obj):
        return np.stack([_assembled(e) for e in obj])
    return obj


def dispatch_ufunc(ufunc: np.ufunc, method: str, inputs: tuple, kwargs: dict, observe: bool = True) -> Any:
    """The body of ``Tracer.__array_ufunc__``."""
    if _observing and observe and getattr(_THREAD, "observer", None) is not None:
        key = ufunc if method == "__call__" else (ufunc, method)
        return _THREAD.observer(key, inputs, kwargs, lambda: dispatch_ufunc(ufunc, method, inputs, kwargs, False))
    if "out" in kwargs:
        written = into_traced_out(ufunc, method, inputs, kwargs, dispatch_ufunc)
        if written is not None:
            return written
        _reject_out(function_name(ufunc if method == "__call__" else (ufunc, method)), kwargs, inputs)
        kwargs = {k: v for k, v in kwargs.items() if k != "out"}
    key = ufunc if method == "__call__" else (ufunc, method)
    rule = RULES.get(key) or lookup(key)
    if rule is None:
        return ROUTES.unsupported(key, inputs, kwargs)
    if not kwargs and method == "__call__" and rule.kind is PRIMITIVE:
        n = len(inputs)
        if n == 2:
            return record_binary(rule, inputs[0], inputs[1])
        if n == 1:
            return record_unary(rule, inputs[0])
        return record(rule, inputs, {})
    if method == "__call__" and "where" in kwargs and rule.kind is not CONSTANT and kwargs["where"] is not True:
        raise GradientDroppedError(
            f"{function_name(ufunc)}(..., where=mask) without out= leaves the masked entries "
            "uninitialised; write np.where(mask, f(x), fallback) instead."
        )
    return call_rule(rule, inputs, kwargs)


def dispatch_ufunc_call1(ufunc: np.ufunc, a: Tracer) -> Any:
    """``Tracer.__array_ufunc__`` for ``ufunc(a)`` without keywords (``np.sin(x)``).

    The checks of :func:`dispatch_ufunc` that such a call can need, in the order
    that sends the common case (a one-input primitive, nobody observing) straight
    to :func:`record_unary`: a quarter of the cost of recording ``np.sin(x)`` on a
    small array went to the general path.
    """
    rule = RULES.get(ufunc)
    if rule is None or _observing or rule.kind is not PRIMITIVE:
        return dispatch_ufunc(ufunc, "__call__", (a,), {})
    small = a._small
    if small is not None and rule.elementwise and rule.fuse is None:
        # record_unary's fast case, without the call: see there.
        tape = a._tape
        raw = a._value
        ans = rule.fun(raw)
        if tape.recording:
            nodes = tape.nodes
            index = len(nodes)
            node = (index, rule.number, (raw,), None, ans, (0, FITTED, a._index, a._out), 0)
            nodes.append(node)
            if nodes[index] is not node:
                index = tape.reindex(node, index)
            return Tracer(ans, index, tape, -1, small)
        return ans
    return record_unary(rule, a)


def primitive(fun: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a Python function so that calls with tracers go through its registry rule.

    Used for tapegrad's internal helpers (scatter-add for indexing, ...); the
    registered rule may be a primitive, a composite or a constant.
    """

    def traced(args: tuple, kwargs: dict) -> Any:
        rule = RULES.get(wrapper)
        if rule is None:  # wrapped, but no rule was ever registered for it
            raise UnsupportedFunctionError(function_name(wrapper))
        return call_rule(rule, args, kwargs)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for a in args:
            if type(a) is Tracer or ((type(a) is list or type(a) is tuple) and _has_tracer(a)):
                return traced(args, kwargs)
        if kwargs and _has_tracer(kwargs):
            return traced(args, kwargs)
        return fun(*args, **kwargs)

    wrapper.__name__ = getattr(fun, "__name__", "primitive")
    wrapper.__qualname__ = getattr(fun, "__qualname__", wrapper.__name__)
    wrapper.__module__ = getattr(fun, "__module__", "tapegrad")
    wrapper.__doc__ = getattr(fun, "__doc__", None)
    wrapper.__wrapped__ = fun
    setattr(wrapper, DISPATCHED, True)
    setattr(wrapper, UNTRACED, fun)
    return wrapper


# The tracer's protocol entry points and operators land here.
ROUTES.ufunc = dispatch_ufunc
ROUTES.ufunc_call1 = dispatch_ufunc_call1
ROUTES.function = dispatch_function
ROUTES.unary = record_unary
ROUTES.binary = record_binary
