"""The compiler of :mod:`tapegrad.reuse`: a recorded tape and its guards into straight-line Python.

:func:`compile_recording` writes the nodes the answer and the guards need as one
function, ``replay(*inputs)``: ``v7 = np.multiply(v3, k12)`` for each node (``k12``
a constant of the namespace), each guard where its inputs exist (``return None``
when it fails), and the new tape's nodes as the result.  For a gradient it also
writes ``replay_gradient``: the same forward, then ``backward._sweep`` for this
tape written out node by node (the same VJPs, accumulation, scatter and fitting in
the same order, so the same bits).  Every program is run once at the recorded
inputs and must reproduce every recorded value (and the general sweep's gradient)
bit for bit.
"""

from __future__ import annotations

import re
import warnings
from typing import Any, Callable, Optional

import numpy as np

from .backward import _fill_zeros, _Pending, _scatter_into, backward, fit_cotangent
from .dispatch import PRUNE_BYTES
from .lazy import _FILL_SIZE
from .registry import RULE_TABLE, RULES, UNTRACED
from .reuse_guards import GuardLog, Ref, same
from .rules._util import negative_axes
from .rules.reductions import _sum_vjp
from .rules.ufuncs import _is_const_scalar, _power_base
from .strong import MODE, has_nan
from .tape import CONSTANT_ARGS, FITTED, PARENT_FIELDS, RELEASED, Pruned, Tape
from .tracer import Tracer

__all__ = ["Program", "Refused", "compile_recording", "MAX_NODES"]

#: A recording with more nodes is not compiled (the function runs eagerly).
MAX_NODES = 200_000


class Refused(Exception):
    """A recording that cannot be replayed faithfully (the message says why)."""



# ---------------------------------------------------------------------- compiling
_NAME = re.compile(r"^[vk][0-9]+(\[[0-9]+\])?$")


class _Writer:
    """Builds the source of a replay function and the namespace of its constants."""

    def __init__(self) -> None:
        self.lines: list = []
        self.ns: dict = {
            "RELEASED": RELEASED, "same": same, "MODE": MODE, "Pending": _Pending, "ones": np.ones,
            "ndarray": np.ndarray, "scatter": _scatter_into, "fill_zeros": _fill_zeros, "fitted": _fitted,
            "has_nan": has_nan, "add_reduce": np.add.reduce, "scatter_fixed": _scatter_fixed,
            "empty": np.empty,
        }
        self.count = 0

    def const(self, value: Any) -> str:
        if type(value) is Tracer:
            raise Refused("a traced value of another tape (an outer derivative) is a constant of the recording")
        if type(value) is Pruned:
            raise Refused("a value the recording did not keep")
        name = f"k{self.count}"
        self.count += 1
        self.ns[name] = value
        return name

    def value(self, obj: Any) -> str:
        """An expression for ``obj``: constants by name, :class:`Ref` by the variable of its node."""
        t = type(obj)
        if t is Ref:
            return f"v{obj.index}" if obj.out < 0 else f"v{obj.index}[{obj.out}]"
        if t is list:
            return "[" + ", ".join(self.value(o) for o in obj) + "]"
        if t is tuple:
            if not _has_ref(obj):  # one name for a constant tuple (an index, an axis list)
                _refuse_tracers(obj)
                return self.const(obj)
            return "(" + "".join(self.value(o) + ", " for o in obj) + ")"
        if t is dict:
            if all(type(k) is str for k in obj):
                return "{" + ", ".join(f"{k!r}: {self.value(v)}" for k, v in obj.items()) + "}"
        _refuse_tracers(obj)
        return self.const(obj)

    def call(self, fun: Any, args: Any, kwargs: Optional[dict]) -> str:
        parts = [self.value(a) for a in args]
        if kwargs:
            if not all(type(k) is str and k.isidentifier() for k in kwargs):
                raise Refused("keywords that are not identifiers")
            parts += [f"{k}={self.value(v)}" for k, v in kwargs.items()]
        return f"{self.const(fun)}({', '.join(parts)})"


def _has_ref(obj: Any) -> bool:
    t = type(obj)
    if t is Ref:
        return True
    if t is list or t is tuple:
        return any(_has_ref(o) for o in obj)
    if t is dict:
        return any(_has_ref(o) for o in obj.values())
    return False


def _refuse_tracers(obj: Any) -> None:
    t = type(obj)
    if t is Tracer:
        raise Refused("a traced value of another tape (an outer derivative) is a constant of the recording")
    if t is list or t is tuple:
        for o in obj:
            _refuse_tracers(o)
    elif t is dict:
        for o in obj.values():
            _refuse_tracers(o)


def _guard_refs(payload: Any, out: list) -> None:
    t = type(payload)
    if t is Ref:
        out.append(payload.index)
    elif t is list or t is tuple:
        for p in payload:
            _guard_refs(p, out)
    elif t is dict:
        for p in payload.values():
            _guard_refs(p, out)


def _needed(nodes: list, roots: list) -> list:
    """Whether each node is an ancestor of ``roots`` (the outputs, the guards, the inputs)."""
    keep = [False] * len(nodes)
    stack = list(roots)
    while stack:
        i = stack.pop()
        if keep[i]:
            continue
        keep[i] = True
        stack.extend(nodes[i][5][2::PARENT_FIELDS])
    return keep


class Program:
    """A compiled recording: ``run(*inputs)`` evaluates its nodes, or returns ``None`` when a guard fails.

    Attributes
    ----------
    run : callable
        The replay function (plain arrays in, the new tape's nodes out).
    inputs : list of int
        The node of each differentiated input, in the order of the call's leaves.
    memo : list of (key, node, argument node)
        The nodes whose outputs the tape's memo holds (see :mod:`tapegrad.memo`).
    """

    __slots__ = ("run", "run_gradient", "constant_ids", "inputs", "memo", "environment", "values", "pins", "out", "aux", "single", "sources",
                 "source", "checked")

    def evaluate(self, raws: list) -> Optional[Tape]:
        """The recording's tape at new inputs (``None`` when a guard fails)."""
        nodes = self.run(*raws)
        return None if nodes is None else self.tape_of(nodes)

    def tape_of(self, nodes: list) -> Tape:
        """A tape holding the replayed ``nodes`` (and the memo their sweep may use)."""
        tape = Tape()
        tape.nodes = nodes
        tape.persistent = True
        for key, index, arg in self.memo:
            node = nodes[index]
            ans = node[4]
            tape.memo[(key, id(node[2][0]))] = lambda v=ans: v
        return tape


def compile_recording(tape: Tape, log: GuardLog, inputs: list, outputs: list, gradient_root: Optional[int] = None,
             wanted_refs: tuple = ()) -> Program:
    """Compile ``tape`` (recorded with ``log``) into a :class:`Program`.

    ``inputs`` are the nodes of the watched inputs, ``outputs`` the nodes whose
    values the answer reads.  With ``gradient_root`` (a node with one scalar
    float output) the program also gets ``run_gradient``: the forward and the
    gradient's sweep in one function, returning ``(found, None, values)``
    (``values``: those of ``wanted_refs``), or ``(None, nodes, values)`` when the
    sweep must be the general one (a result with NaN, strong zeros asked for).
    """
    nodes = tape.nodes
    if len(nodes) > MAX_NODES:
        raise Refused(f"the recording has {len(nodes)} nodes (more than {MAX_NODES})")
    guard_roots: list = []
    for _, kind, payload, _ in log.guards:
        _guard_refs(payload, guard_roots)
    keep = _needed(nodes, list(outputs) + guard_roots + list(inputs))
    position_of = {index: k for k, index in enumerate(inputs)}
    by_position: dict = {}
    for number, guard in enumerate(log.guards):
        by_position.setdefault(guard[0], []).append((number, guard))
    w = _Writer()
    body = w.lines
    memo = []
    entries = []
    argexprs: dict = {}  # node -> its arguments' expressions, when they are names

    def emit_guards(position: int) -> None:
        for number, (_, kind, payload, expected) in by_position.get(position, ()):
            e = w.const(expected)
            if kind == "convert":
                ref, to = payload
                test = w.value(ref) if to is None else f"{w.const(to)}({w.value(ref)})"
            else:
                fun, args, kwargs = payload
                test = w.call(fun, args, kwargs)
            body.append(f"    if not same({test}, {e}): return None")

    for index, node in enumerate(nodes):
        emit_guards(index)
        if not keep[index]:
            entries.append("RELEASED")
            continue
        _, number, args, kwargs, ans, parents, n_out = node
        if number is None:
            if args is CONSTANT_ARGS:
                entries.append(w.const(node))
                body.append(f"    v{index} = {w.const(ans)}")
            elif args == () and index in position_of:
                body.append(f"    v{index} = a{position_of[index]}")
                entries.append(f"({index}, None, (), None, v{index}, (), 0)")
            else:
                raise Refused("a source the recording does not know")
            continue
        if node is RELEASED:
            raise Refused("a released node")
        rule = RULE_TABLE[number]
        fun = getattr(rule.fun, UNTRACED, rule.fun)
        filled: list = list(args)
        for at in range(0, len(parents), PARENT_FIELDS):
            argnum, pos, parent, out = parents[at : at + PARENT_FIELDS]
            if pos < 0:  # the whole argument (FITTED included)
                filled[argnum] = Ref(parent, out)
            else:
                seq = list(filled[argnum])  # a copy: the recorded list stays as it is
                seq[pos] = Ref(parent, out)
                filled[argnum] = seq if type(args[argnum]) is list else tuple(seq)
        call_kwargs = log.kwargs.get(index)
        if call_kwargs is None and kwargs:
            call_kwargs = dict(kwargs)
        exprs = [w.value(a) for a in filled]
        more = f", **{w.const(call_kwargs)}" if call_kwargs else ""
        if all(_NAME.match(e) for e in exprs):
            # Names only: the call, the node and the sweep pass them as they are (no tuple per call).
            argexprs[index] = exprs
            body.append(f"    v{index} = {w.const(fun)}({', '.join(exprs)}{more})")
            arg_tuple = "(" + "".join(e + ", " for e in exprs) + ")"
        else:  # a list or tuple built from traced values: built once, shared by the call and the sweep
            body.append(f"    t{index} = (" + "".join(e + ", " for e in exprs) + ")")
            body.append(f"    v{index} = {w.const(fun)}(*t{index}{more})")
            arg_tuple = f"t{index}"
        entries.append(f"({index}, {number}, {arg_tuple}, {w.const(kwargs)}, v{index}, {w.const(parents)}, {n_out})")
        if (
            rule.remember and len(args) == 1 and not kwargs and index not in log.kwargs
            and type(ans) is np.ndarray and ans.nbytes > PRUNE_BYTES
        ):
            memo.append((rule.key, index, parents[2]))
    emit_guards(len(nodes))
    params = ", ".join(f"a{k}" for k in range(len(inputs)))
    node_list = "[" + ", ".join(entries) + "]"
    source = f"def replay({params}):\n" + "\n".join(body) + f"\n    return {node_list}\n"
    namespace = w.ns
    if gradient_root is not None:
        # The same forward, then the sweep of a gradient written out node by node.  Written
        # twice: the first version learns, at the recorded inputs, the shape of each cotangent
        # that needs fitting; the second sums the broadcast axes of those shapes inline.
        wanted = ", ".join(w.value(Ref(i, o)) for i, o in wanted_refs)
        plans: dict = {}
        for learning in (True, False):
            sweep = _sweep_lines(w, nodes, gradient_root, inputs, plans, learning, argexprs)
            gradient_source = (
                f"\n\ndef replay_gradient({params}):\n" + "\n".join(body) + "\n"
                + "\n".join(sweep)
                + f"\n    if found is None:\n        return None, {node_list}, ({wanted},)\n"
                + f"    return found, None, ({wanted},)\n"
            )
            exec(compile(gradient_source, "<tapegrad reuse>", "exec"), namespace)
            if learning:
                raws = [nodes[i][4] for i in inputs]
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with np.errstate(all="ignore"):
                        namespace["replay_gradient"](*raws)
        source += gradient_source
    exec(compile(source, "<tapegrad reuse>", "exec"), namespace)
    program = Program()
    program.run = namespace["replay"]
    program.run_gradient = namespace.get("replay_gradient")
    program.constant_ids = frozenset(id(v) for v in _arrays_in(list(namespace.values())))
    program.inputs = inputs
    program.memo = memo
    program.source = source
    program.checked = 0
    _self_check(program, tape, keep)
    if program.run_gradient is not None and not _sweep_agrees(program, tape, gradient_root):
        program.run_gradient = None  # replays take the general sweep
    return program


def _sweep_agrees(program: Program, tape: Tape, root: int) -> bool:
    """Whether the written-out sweep gives the general sweep's gradient, bit for bit, at the recorded inputs."""
    raws = [tape.nodes[i][4] for i in program.inputs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            ran = program.run_gradient(*raws)
            if ran is None or ran[0] is None:
                return ran is not None  # a NaN result: replays sweep the general way anyway
            nodes = program.run(*raws)
            ans = nodes[root][4]
            general = backward(program.tape_of(nodes), [(root, -1)], [np.ones(np.shape(ans), ans.dtype)],
                               program.inputs)
    found = ran[0]
    return found.keys() == general.keys() and all(same(found[k], general[k]) for k in found)


def _sweep_lines(w: _Writer, nodes: list, root: int, inputs: list, plans: dict, learning: bool,
                 argexprs: dict) -> list:
    """The lines of ``backward._sweep`` for this tape, a gradient seeded with ones at ``root``.

    The same calls in the same order (the same ``_Pending`` accumulation, scatter
    fast path and fitting), so the results are the general sweep's bit for bit;
    what goes is the loop's work: reading each node, its rule and its parents.
    ``learning``: each fitting site ``k`` stores in ``plans[k]`` how the cotangent it
    met was fitted (see :func:`_fit_plan`); otherwise those plans are written inline.
    """
    site = 0
    reach = [False] * len(nodes)
    reach[root] = True
    for idx in range(root, -1, -1):
        if reach[idx]:
            parents = nodes[idx][5]
            for parent in parents[2::PARENT_FIELDS]:
                reach[parent] = True
    wanted = set(inputs)
    lowest = min(wanted) if wanted else 0
    ans = nodes[root][4]
    lines = [
        "    if MODE.get() != 'auto':",
        "        found = None",
        "    else:",
        "        cts = Pending(); slots = cts.slots; take = slots.pop; get = slots.get; accumulate = cts._sum",
        f"        slots[{root}] = ones({w.const(np.shape(ans))}, {w.const(ans.dtype)})",
        "        found = {}",
    ]
    ind = "        "
    written = {root}  # slots some earlier site may have written (the seed's included)
    for idx in range(root, lowest - 1, -1):
        if not reach[idx]:
            continue
        _, number, args, kwargs, ans, parents, n_out = nodes[idx]
        is_source = idx in wanted
        if not parents and not is_source:
            lines.append(f"{ind}take({idx}, None)")
            continue
        lines.append(f"{ind}g = take({idx}, None)")
        lines.append(f"{ind}if g is not None:")
        body = ind + "    "
        if is_source:
            lines.append(f"{body}found[{idx}] = g")
        if not parents:
            if not is_source:
                lines.append(f"{body}pass")
            continue
        rule = RULE_TABLE[number]
        v = f"v{idx}"
        exprs = argexprs.get(idx)
        if exprs is None:
            t, call_args = f"t{idx}", f"*t{idx}"
            arg = lambda k: f"t{idx}[{k}]"  # noqa: E731
        else:
            t = "(" + "".join(e + ", " for e in exprs) + ")"
            call_args = ", ".join(exprs)
            arg = exprs.__getitem__
        call_args = (", " + call_args) if call_args else ""
        if n_out:
            lines.append(f"{body}g = fill_zeros(g, {v}, ())")
        if rule.scatter_index is not None:
            index = rule.scatter_index(args)  # a basic index among the constants: the same at every replay
            target = args[0]
            if index is not None and parents[3] < 0 and type(target) is np.ndarray:
                # backward._scatter_into with its look-ups done here (see _scatter_fixed)
                whole = all(i is None or i is Ellipsis or i == _WHOLE for i in index)
                lines.append(f"{body}if type(g) is ndarray and g.dtype == {w.const(target.dtype)} and scatter_fixed("
                             f"cts, {parents[2]}, g, {w.const(index)}, {whole}, {w.const(target.shape)}):")
            else:
                lines.append(f"{body}if type(g) is ndarray and scatter(cts, {w.const(rule)}, {t}, {w.const(parents)}, g, ()):")
            lines.append(f"{body}    pass")
            lines.append(f"{body}else:")
            body += "    "
            # The scatter writes the slot of argument 0 (its own branch), after the slot test of
            # the VJP branch: that branch decides on what was written before this node.
            scattered = parents[2]
        else:
            scattered = None
        kw = f", **{w.const(dict(kwargs))}" if kwargs else ""
        per_element: dict = {}
        for at in range(0, len(parents), PARENT_FIELDS):
            argnum, pos, parent, out = parents[at : at + PARENT_FIELDS]
            vjp = w.const(rule.vjps[argnum])
            special = _special_vjp(w, rule, argnum, args, kwargs, ans, exprs) if len(parents) == PARENT_FIELDS else None
            if special is not None:
                lines.extend(body + line for line in special)
                lines.append(f"{body}else:")
                lines.append(f"{body}    gi = {vjp}(g, {v}{call_args}{kw})")
            elif pos < 0:
                inline = None if kwargs or exprs is None else _inline_vjp(rule.vjps[argnum], ["g", v] + exprs)
                lines.append(f"{body}gi = {inline}" if inline else f"{body}gi = {vjp}(g, {v}{call_args}{kw})")
            else:
                if argnum not in per_element:
                    per_element[argnum] = f"pe{argnum}"
                    lines.append(f"{body}pe{argnum} = {vjp}(g, {v}{call_args}{kw})")
                lines.append(f"{body}gi = pe{argnum}[{pos}]")
            lines.append(f"{body}if gi is not None:")
            if pos != FITTED:
                target = arg(argnum) if pos < 0 else f"{arg(argnum)}[{pos}]"
                value = args[argnum] if pos < 0 else args[argnum][pos]
                if type(value) is np.ndarray:  # its shape and dtype are the recording's: test them inline
                    shape, dtype = w.const(value.shape), w.const(value.dtype)
                    lines.append(f"{body}    if type(gi) is not ndarray or gi.shape != {shape} or gi.dtype is not {dtype}:")
                    plan = plans.get(site)
                    if learning:
                        lines.append(f"{body}        gi = {w.const(_learner(plans, site))}(gi, {target})")
                    elif plan is not None:
                        gshape, extra, keep = plan
                        lines.append(f"{body}        if type(gi) is ndarray and gi.shape == {w.const(gshape)} "
                                     f"and gi.dtype is {dtype}:")
                        if extra:
                            lines.append(f"{body}            gi = add_reduce(gi, axis={w.const(extra)})")
                        if keep:
                            lines.append(f"{body}            gi = add_reduce(gi, axis={w.const(keep)}, keepdims=True)")
                        lines.append(f"{body}        else:")
                        lines.append(f"{body}            gi = fitted(gi, {target})")
                    else:
                        lines.append(f"{body}        gi = fitted(gi, {target})")
                    site += 1
                else:
                    lines.append(f"{body}    gi = fitted(gi, {target})")
            if out < 0 and parent not in written:  # no earlier site writes this slot: nothing to add to
                lines.append(f"{body}    slots[{parent}] = gi")
                written.add(parent)
            elif out < 0:
                lines.append(f"{body}    prev = get({parent})")
                lines.append(f"{body}    slots[{parent}] = gi if prev is None else accumulate({parent}, prev, gi)")
            else:
                stub = w.const((parent, None, None, None, None, (), nodes[parent][6]))
                lines.append(f"{body}    cts.add({stub}, {out}, gi)")
        if scattered is not None:
            written.add(scattered)
    lines.append(f"{ind}for value in found.values():")
    lines.append(f"{ind}    if has_nan(value):")
    lines.append(f"{ind}        found = None")
    lines.append(f"{ind}        break")
    return lines


_WHOLE = slice(None)


#: Expressions that tapegrad's element-wise VJPs are (``lambda g, ans, x, y: g * y``): a VJP
#: whose compiled code is one of these, parameter names included, is written inline.
_TEMPLATES = ("g", "-g", "g * y", "g * x", "g / y", "-g * ans / y", "(g * 2) * x", "g * ans", "-g * ans * ans")
_TEMPLATE_CODE: dict = {}


def _inline_vjp(vjp: Any, names: list) -> Optional[str]:
    """``vjp``'s expression with its parameters replaced by ``names``, if it is one of :data:`_TEMPLATES`.

    The test is the code object itself (bytecode, constants, names, parameters), so an
    edited rule is never inlined with a stale formula.
    """
    code = getattr(vjp, "__code__", None)
    if (code is None or getattr(vjp, "__closure__", None) or getattr(vjp, "__defaults__", None)
            or code.co_argcount != len(names) or code.co_flags & 0x0C):  # no *args / **kwargs
        return None
    params = code.co_varnames[: code.co_argcount]
    for template in _TEMPLATES:
        key = (params, template)
        reference = _TEMPLATE_CODE.get(key)
        if reference is None:
            reference = _TEMPLATE_CODE[key] = eval(f"lambda {', '.join(params)}: {template}").__code__
        if (code.co_code == reference.co_code and code.co_consts == reference.co_consts
                and code.co_names == reference.co_names and code.co_varnames == reference.co_varnames):
            mapping = dict(zip(params, names))
            return re.sub(r"\b[a-z]+\b", lambda m: mapping.get(m.group(0), m.group(0)), template)
    return None


def _special_vjp(w: _Writer, rule: Any, argnum: int, args: tuple, kwargs: Any, ans: Any,
                 exprs: Optional[list]) -> Optional[list]:
    """The lines of a VJP written out for its recorded arguments, or ``None``.

    Two VJPs whose Python work is all decided by the recording (the same NumPy
    calls on the same values follow, so the same bits): ``np.sum``'s (the cotangent
    filled into the input's shape, as ``rules._util.unreduce`` does for a small
    input) and ``np.power``'s with respect to the base at a constant exponent
    (``y - 1`` computed once).  Each line starts with ``if``: the written form
    applies to a plain cotangent of the recorded shape, the caller's ``else``
    calls the rule.  The compiled sweep is checked against the general one once.
    """
    if exprs is None or argnum != 0:
        return None
    x = args[0]
    if rule is RULES.get(np.sum) and rule.vjps[0] is _sum_vjp and type(x) is np.ndarray:
        kw = dict(kwargs) if kwargs else {}
        if set(kw) - {"axis", "keepdims"} or x.size > _FILL_SIZE or x.dtype != getattr(ans, "dtype", None):
            return None
        if type(ans) is not np.ndarray:
            return None  # a NumPy scalar's cotangent takes another path in unreduce
        axes = negative_axes(kw.get("axis"), x.ndim)
        kept = list(ans.shape)
        if not kw.get("keepdims", False) and axes:
            ndim = len(kept) + len(axes)
            for a in axes:
                kept.insert(ndim + a, 1)
        return [
            f"if type(g) is ndarray and g.shape == {w.const(ans.shape)}:",
            f"    gi = empty({w.const(x.shape)}, g.dtype)",
            f"    gi[...] = g.reshape({w.const(tuple(kept))})",
        ]
    if rule is RULES.get(np.power) and rule.vjps[0] is _power_base and len(args) == 2:
        y = args[1]
        if _is_const_scalar(y) and y in (0, 1, 2):
            return None
        if not isinstance(y, (np.ndarray, np.generic, float)):
            return None
        return [
            "if True:",
            f"    gi = (g * {exprs[1]}) * {exprs[0]} ** {w.const(y - 1)}",
        ]
    return None


def _scatter_fixed(cts: _Pending, parent: int, g: np.ndarray, index: tuple, whole: bool, shape: tuple) -> bool:
    """``backward._scatter_into`` for a plain cotangent of one dtype with the target's, index known.

    The same steps on the same values (the same ownership of the accumulated sum),
    without asking the rule for the index at every replay.
    """
    slots = cts.slots
    prev = slots.get(parent)
    if prev is not None and type(prev) is not np.ndarray:
        return False
    if whole:
        g = g.reshape(shape)
        slots[parent] = g if prev is None else cts._sum(parent, prev, g)
        return True
    owned = cts.owned
    if prev is not None and parent in owned and prev.shape == shape:
        prev[index] += g
        return True
    buf = np.zeros(shape, dtype=g.dtype)
    buf[index] = g
    if prev is not None:
        buf += prev
    owned.add(parent)
    slots[parent] = buf
    return True


def _fit_plan(g: Any, target: Any) -> Optional[tuple]:
    """How ``fit_cotangent(g, target, ())`` fits ``g``, when it only sums axes: ``(g.shape, extra, keep)``.

    ``extra`` the leading axes summed away, ``keep`` the axes then summed with
    ``keepdims`` (the target's length-1 axes); ``None`` for anything else (a
    broadcast, a cast).  The same ``np.add.reduce`` calls give the same bits.
    """
    if type(g) is not np.ndarray or type(target) is not np.ndarray or g.dtype != target.dtype:
        return None
    want, shape = target.shape, g.shape
    n_extra = len(shape) - len(want)
    extra = tuple(range(n_extra)) if n_extra > 0 else ()
    after = shape[n_extra:] if n_extra > 0 else shape
    keep: tuple = ()
    if len(after) == len(want):
        keep = tuple(k for k in range(len(want)) if want[k] == 1 and after[k] != 1)
        after = tuple(1 if k in keep else n for k, n in enumerate(after))
    if after != want:
        return None
    return shape, extra, keep


def _learner(plans: dict, site: int) -> Callable:
    def learn(gi: Any, target: Any) -> Any:
        plans[site] = _fit_plan(gi, target)
        return _fitted(gi, target)

    return learn


def _fitted(gi: Any, target: Any) -> Any:
    """``gi`` fitted to ``target`` as the general sweep does it (a fast look first)."""
    try:
        if gi.shape == target.shape and (gi.dtype is target.dtype or gi.dtype == target.dtype):
            return gi
    except AttributeError:  # a rule returned a Python scalar
        pass
    return fit_cotangent(gi, target, ())


def _arrays_in(values: list) -> list:
    """The arrays among ``values`` and inside their tuples and lists (a program's constants)."""
    out = []
    stack = list(values)
    while stack:
        v = stack.pop()
        if type(v) is np.ndarray:
            out.append(v)
        elif type(v) is tuple or type(v) is list:
            stack.extend(v)
        elif type(v) is dict:
            stack.extend(v.values())
    return out


def _self_check(program: Program, tape: Tape, keep: list) -> None:
    """Replay at the recorded inputs: every node must come out as recorded, bit for bit."""
    raws = [tape.nodes[i][4] for i in program.inputs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the recording already showed the user its warnings
        with np.errstate(all="ignore"):
            nodes = program.run(*raws)
    if nodes is None:
        raise Refused("a guard fails at the recorded inputs (the function is not deterministic)")
    for index, (old, new) in enumerate(zip(tape.nodes, nodes)):
        if keep[index] and old[1] is not None:
            a, b = old[4], new[4]
            if not same(a, b) or (type(a) is np.ndarray and a.strides != b.strides):
                name = RULE_TABLE[old[1]].name
                raise Refused(f"node {index} ({name}) does not give the recorded value when replayed")
