"""The compiler of :mod:`tapegrad.reuse`: a recorded tape and its guards into straight-line Python.

:func:`compile_recording` writes the nodes the answer and the guards need as one
function, ``replay(*inputs)``: ``v7 = np.multiply(v3, k12)`` for each node (``k12``
a constant of the namespace), each guard where its inputs exist (``return None``
when it fails), and the new tape's nodes as the result.  For a gradient it also
writes ``replay_gradient``: the same forward, then the gradient's sweep.  That sweep
is planned (:func:`_planned_sweep_lines`): the general sweep is run once here, at the
recorded values, and each of its steps written as what it did (local cotangents,
the sums it made in place, the scatter branch it took, the fitting's reductions,
no line for a cotangent that cannot reach an input), with a check after each value a
rule's Python decides, which hands the replay to the general sweep when it fails.
Where it cannot be planned, ``backward._sweep`` is written out node by node instead
(:func:`_sweep_lines`: the same VJPs, accumulation, scatter and fitting, with the
general sweep's tests).  Either way the same NumPy calls in the same order, so the
same bits.  Every program is run once at the recorded inputs and must reproduce
every recorded value (and the general sweep's gradient) bit for bit.
"""

from __future__ import annotations

import re
import warnings
from typing import Any, Callable, Optional

import numpy as np

from .backward import _fill_zeros, _Pending, _scatter_into, backward, fit_cotangent
from .dispatch import PRUNE_BYTES
from .lazy import _FILL_SIZE
from .parallel import MIN_SIZE as LARGE
from .registry import RULE_TABLE, RULES, UNTRACED
from .reuse_guards import GuardLog, Ref, same
from .rules._util import negative_axes
from .rules.indexing import _getitem
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
            "empty": np.empty, "zeros": np.zeros, "Bail": Bail,
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


#: Keywords of ``np.sum`` that ``np.add.reduce`` takes as they are.
_SUM_KEYWORDS = frozenset({"axis", "keepdims"})


def _forward_call(w: _Writer, fun: Any, exprs: list, filled: list, recorded: Any, call_kwargs: Optional[dict],
                  more: str) -> str:
    """The expression of a forward call whose arguments are names.

    Two calls are written without their Python layer: ``x[index]`` for the indexing
    rule (``operator.getitem``, as the rule calls it), and ``np.add.reduce(x, axis=...)``
    for ``np.sum`` of an array (what ``np.sum`` calls for an ``ndarray``, with the
    same arguments: the same bits).  The replayed values are checked against the
    recording when the program is made.
    """
    if fun is _getitem and len(exprs) == 2 and not call_kwargs:
        return f"{exprs[0]}[{exprs[1]}]"
    if (fun is np.sum and len(exprs) == 1 and type(filled[0]) is Ref and type(recorded) is np.ndarray
            and (not call_kwargs or set(call_kwargs) <= _SUM_KEYWORDS)):
        kw = dict(call_kwargs or {})
        keep = f", keepdims={w.const(kw['keepdims'])}" if "keepdims" in kw else ""
        return f"add_reduce({exprs[0]}, axis={w.const(kw.get('axis'))}{keep})"
    return f"{w.const(fun)}({', '.join(exprs)}{more})"


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
    sweep : str or None
        How ``run_gradient`` sweeps: ``"planned"`` (see :func:`_planned_sweep_lines`),
        ``"written"`` (node by node, see :func:`_sweep_lines`), ``None`` (no
        ``run_gradient``: the general sweep).
    run_vjp : callable or None
        For an HVP: ``run_vjp(seed, *inputs)``, the forward and the planned sweep
        from ``seed`` (see :func:`compile_recording`).
    """

    __slots__ = ("run", "run_gradient", "constant_ids", "inputs", "memo", "environment", "values", "originals", "pins", "out", "aux", "single", "sources",
                 "source", "checked", "sweep", "run_vjp")

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
             wanted_refs: tuple = (), vjp_root: Optional[int] = None) -> Program:
    """Compile ``tape`` (recorded with ``log``) into a :class:`Program`.

    ``inputs`` are the nodes of the watched inputs, ``outputs`` the nodes whose
    values the answer reads.  With ``gradient_root`` (a node with one scalar
    float output) the program also gets ``run_gradient``: the forward and the
    gradient's sweep in one function, returning ``(found, None, values)``
    (``values``: those of ``wanted_refs``), or ``(None, nodes, values)`` when the
    sweep must be the general one (a result with NaN, strong zeros asked for).
    With ``vjp_root`` (a node with one array output) it may get ``run_vjp(seed,
    *inputs)``: the forward and the planned sweep from ``seed`` at that node,
    returning ``(found, None)``, or ``(None, nodes)`` when the sweep must be the
    general one (a seed of another shape or dtype included).
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
            body.append(f"    v{index} = {_forward_call(w, fun, exprs, filled, args[0] if args else None, call_kwargs, more)}")
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
    # Each function is defined in the namespace as it is made (the sweeps are checked by running them).
    exec(compile(source, "<tapegrad reuse>", "exec"), namespace)
    gradient_source = None
    sweep_kind = None
    if gradient_root is not None:
        wanted = ", ".join(w.value(Ref(i, o)) for i, o in wanted_refs)
        ending = (f"\n    if found is None:\n        return None, {node_list}, ({wanted},)\n"
                  f"    return found, None, ({wanted},)\n")

        def gradient_function(sweep: list) -> str:
            text = f"\n\ndef replay_gradient({params}):\n" + "\n".join(body) + "\n" + "\n".join(sweep) + ending
            exec(compile(text, "<tapegrad reuse>", "exec"), namespace)
            return text

        # First the planned sweep (see _planned_sweep_lines); where it cannot be planned, or
        # does not give the general sweep's gradient, the sweep written out node by node.
        planned = _plan(w, nodes, gradient_root, inputs, argexprs, None)
        if planned is not None:
            gradient_source = gradient_function(_guarded_plan("MODE.get() != 'auto'", planned))
            if _gradient_agrees(namespace, tape, gradient_root, inputs):
                sweep_kind = "planned"
            else:
                gradient_source = None
        if gradient_source is None:
            # The same forward, then the sweep of a gradient written out node by node.  Written
            # twice: the first version learns, at the recorded inputs, the shape of each cotangent
            # that needs fitting; the second sums the broadcast axes of those shapes inline.
            plans: dict = {}
            sweep_kind = "written"
            for learning in (True, False):
                sweep = _sweep_lines(w, nodes, gradient_root, inputs, plans, learning, argexprs)
                gradient_source = gradient_function(sweep)
                if learning:
                    raws = [nodes[i][4] for i in inputs]
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        with np.errstate(all="ignore"):
                            namespace["replay_gradient"](*raws)
        source += gradient_source
    if vjp_root is not None:
        source += _vjp_function(w, tape, inputs, argexprs, vjp_root, params, body, node_list)
    program = Program()
    program.run = namespace["replay"]
    program.run_gradient = namespace.get("replay_gradient")
    program.run_vjp = namespace.get("replay_vjp")
    program.constant_ids = frozenset(id(v) for v in _arrays_in(list(namespace.values())))
    program.inputs = inputs
    program.memo = memo
    program.source = source
    program.checked = 0
    program.sweep = sweep_kind
    _self_check(program, tape, keep)
    if program.run_gradient is not None and not _sweep_agrees(program, tape, gradient_root):
        program.run_gradient = None  # replays take the general sweep
        program.sweep = None
    return program


def _guarded_plan(condition: str, planned: list) -> list:
    """Source lines: the planned sweep unless ``condition`` holds; ``found = None`` (the general sweep) on a NaN or a Bail."""
    return [
        f"    if {condition}:",
        "        found = None",
        "    else:",
        "        try:",
        *planned,
        "            for value in found.values():",
        "                if has_nan(value):",
        "                    found = None",
        "                    break",
        "        except Bail:",
        "            found = None",
    ]


def _plan(w: _Writer, nodes: list, root: int, inputs: list, argexprs: dict, seed_name: Optional[str]) -> Optional[list]:
    """:func:`_planned_sweep_lines` inside a ``try`` block, or ``None`` (a rule that fails outside a sweep included)."""
    try:
        return _planned_sweep_lines(w, nodes, root, inputs, argexprs, "            ", seed_name)
    except Exception:
        return None


def _vjp_function(w: _Writer, tape: Tape, inputs: list, argexprs: dict, root: int, params: str, body: list,
                  node_list: str) -> str:
    """The source of ``replay_vjp(seed, *inputs)`` (see :func:`compile_recording`), or ``""``.

    Kept only if, at the recorded inputs and a seed of distinct values, it sweeps
    by itself and gives the general sweep's result bit for bit.
    """
    ans = tape.nodes[root][4]
    if type(ans) is not np.ndarray or ans.dtype.kind not in "fc":
        return ""
    planned = _plan(w, tape.nodes, root, inputs, argexprs, "seed")
    if planned is None:
        return ""
    shape, dtype = w.const(ans.shape), w.const(ans.dtype)
    text = "\n".join([
        f"\n\ndef replay_vjp(seed, {params}):",
        *body,
        *_guarded_plan(
            f"MODE.get() != 'auto' or type(seed) is not ndarray or seed.shape != {shape} or seed.dtype is not {dtype}",
            planned,
        ),
        "    if found is None:",
        f"        return None, {node_list}",
        "    return found, None",
        "",
    ])
    namespace = w.ns
    exec(compile(text, "<tapegrad reuse>", "exec"), namespace)
    if _vjp_agrees(namespace, tape, inputs, root, ans):
        return text
    del namespace["replay_vjp"]
    return ""


def _vjp_agrees(namespace: dict, tape: Tape, inputs: list, root: int, ans: np.ndarray) -> bool:
    """Whether the namespace's ``replay_vjp`` sweeps by itself, with the general sweep's bits (recorded inputs)."""
    raws = [tape.nodes[i][4] for i in inputs]
    seed = np.linspace(0.5, 1.5, ans.size).reshape(ans.shape).astype(ans.dtype)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with np.errstate(all="ignore"):
                found, _ = namespace["replay_vjp"](seed, *raws)
                if found is None:
                    return False
                program = Program()
                program.memo = []
                general = backward(program.tape_of(namespace["replay"](*raws)), [(root, -1)], [seed], inputs)
    except Exception:
        return False
    return found.keys() == general.keys() and all(same(found[k], general[k]) for k in found)


def _gradient_agrees(namespace: dict, tape: Tape, root: int, inputs: list) -> bool:
    """Whether the namespace's ``replay_gradient`` sweeps by itself at the recorded inputs, with the general sweep's bits."""
    program = Program()
    program.run = namespace["replay"]
    program.run_gradient = namespace["replay_gradient"]
    program.inputs = inputs
    program.memo = []
    raws = [tape.nodes[i][4] for i in inputs]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with np.errstate(all="ignore"):
                ran = program.run_gradient(*raws)
        return ran is not None and ran[0] is not None and _sweep_agrees(program, tape, root)
    except Exception:
        return False


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


# ---------------------------------------------------------------------- the planned sweep
class Bail(Exception):
    """Raised inside a planned sweep when a value is not what the plan was made for."""


#: Values a planned sweep tracks by type (``_fact``); anything else leaves the sweep unplanned.
_SCALAR_TYPES = (float, complex)


def _fact(value: Any) -> Optional[tuple]:
    """``(type, shape, dtype)`` of a cotangent a planned sweep can track, else ``None``."""
    t = type(value)
    if t is np.ndarray or (isinstance(value, np.generic) and value.dtype.kind in "fc"):
        return (t, value.shape, value.dtype)
    if t in _SCALAR_TYPES:
        return (t, (), None)
    return None


def _check_lines(w: _Writer, name: str, fact: tuple, ind: str) -> list:
    """Lines that raise :class:`Bail` unless ``name`` has ``fact``'s type (and shape and dtype)."""
    t, shape, dtype = fact
    if t is np.ndarray:
        return [f"{ind}if type({name}) is not ndarray or {name}.shape != {w.const(shape)} "
                f"or {name}.dtype is not {w.const(dtype)}: raise Bail"]
    return [f"{ind}if type({name}) is not {w.const(t)}: raise Bail"]


def _planned_sweep_lines(w: _Writer, nodes: list, root: int, inputs: list, argexprs: dict, ind: str,
                         seed_name: Optional[str] = None) -> Optional[list]:
    """``backward._sweep`` for this tape planned at compile time, or ``None`` where it does not apply.

    The general sweep is run here once, at the recorded values, on a real
    :class:`~tapegrad.backward._Pending`; each step writes the line that does what
    that step did: which slots are empty (a first contribution is a plain binding),
    which sums may be written in place (``c += gi``: ``_Pending._sum``'s ``np.add``
    with ``out=``), which scatter branch runs, which cotangents need fitting (the
    fitting's ``np.add.reduce`` calls written inline), and which cotangents can never
    reach an input (not computed at all).  Cotangents live in local variables, not
    in a dict.  The NumPy calls are the general sweep's, in its order, so the bits
    are its bits.  Where a value's type, shape or dtype is decided by a rule's Python
    (a VJP that is called, not written out) the line after it checks it and raises
    :class:`Bail`, and the replay takes the general sweep.  The sweep starts from ones
    at ``root`` (a gradient), or from the variable ``seed_name`` (a VJP: the caller
    makes sure it is an array of the root's shape and dtype; the plan does not depend
    on its values).
    """
    wanted = set(inputs)
    lowest = min(wanted) if wanted else 0
    # Live: nodes from which a cotangent can reach an input (an input or a parent of a live node).
    live = [False] * len(nodes)
    for i in range(lowest, root + 1):
        if i in wanted:
            live[i] = True
        else:
            live[i] = any(live[p] for p in nodes[i][5][2::PARENT_FIELDS])
    if not live[root]:
        return None
    seed_value = nodes[root][4]
    if not hasattr(seed_value, "dtype"):
        return None
    seed = np.ones(np.shape(seed_value), seed_value.dtype)
    cts = _Pending()
    slots = cts.slots
    slots[root] = seed
    if seed_name is None:
        # One read-only array of ones for every replay: the sweep never writes into a slot it
        # did not make, and fresh_results copies a result that is read-only or a view.
        ones = np.ones(seed.shape, seed.dtype)
        ones.flags.writeable = False
        lines = [f"{ind}c{root} = {w.const(ones)}"]
    else:
        lines = [f"{ind}c{root} = {seed_name}"]  # the caller's array: a slot the sweep does not own
    found: list = []
    # Slots holding np.sum's cotangent as a reshaped view, not yet filled into the summed
    # shape: parent -> (the view's value, the name of the shape).  See _fuses.
    lazy: dict = {}

    def materialize(parent: int) -> None:
        if parent in lazy:
            shape = lazy.pop(parent)[1]
            # "filled", not "gi": a cotangent on its way to this slot may be waiting in gi
            lines.extend([f"{ind}filled = empty({shape}, c{parent}.dtype)", f"{ind}filled[...] = c{parent}",
                          f"{ind}c{parent} = filled"])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            for idx in range(root, lowest - 1, -1):
                g = slots.pop(idx, None)
                if g is None:
                    continue  # no cotangent reaches this node: nothing to write
                gfact = _fact(g)
                if gfact is None:
                    return None
                if idx in lazy and (idx in wanted or not _fuses(nodes[idx], g, lazy[idx][0], live, argexprs)):
                    materialize(idx)
                lazy.pop(idx, None)
                if idx in wanted:
                    found.append((idx, gfact))
                _, number, args, kwargs, ans, parents, n_out = nodes[idx]
                if not parents:
                    continue
                if n_out:
                    return None
                rule = RULE_TABLE[number]
                runs = [parents[at : at + PARENT_FIELDS] for at in range(0, len(parents), PARENT_FIELDS)]
                if any(out >= 0 for _, _, _, out in runs):
                    return None
                if not any(live[parent] for _, _, parent, _ in runs):
                    continue
                per_element: dict = {}  # argnum -> the VJP's cotangents of a sequence argument's elements
                gname = f"c{idx}"  # the cotangent's own variable, used where the general sweep uses g
                sub = re.compile(r"\bg\b")
                v = f"v{idx}"
                exprs = argexprs.get(idx)
                call_args = (", " + (f"*t{idx}" if exprs is None else ", ".join(exprs))) if args else ""
                kw = f", **{w.const(dict(kwargs))}" if kwargs else ""
                arg = (lambda k: f"t{idx}[{k}]") if exprs is None else exprs.__getitem__  # noqa: E731
                if rule.scatter_index is not None and type(g) is np.ndarray:
                    index = rule.scatter_index(args)
                    target = args[0]
                    parent = parents[2]
                    prev = slots.get(parent)
                    if index is not None and g.dtype == target.dtype and (prev is None or type(prev) is np.ndarray):
                        if type(target) is not np.ndarray:
                            return None
                        if live[parent]:
                            materialize(parent)
                            step = _scatter_lines(w, cts, parent, g, index, target.shape, ind)
                            if step is None:
                                return None
                            lines.extend(sub.sub(gname, line) for line in step)
                        _scatter_fixed(cts, parent, g, index, _is_whole(index), target.shape)
                        continue
                vjps = rule.vjps
                for argnum, pos, parent, out in runs:
                    if not live[parent]:
                        continue  # a cotangent that never reaches an input: not computed
                    vjp = vjps[argnum]
                    if pos >= 0:  # an element of a sequence argument (np.stack([x, y]))
                        if argnum not in per_element:
                            seq = vjp(g, ans, *args, **dict(kwargs)) if kwargs else vjp(g, ans, *args)
                            if type(seq) not in (list, tuple):
                                return None
                            per_element[argnum] = seq
                            lines.append(f"{ind}pe{argnum} = {w.const(vjp)}({gname}, {v}{call_args}{kw})")
                            lines.append(f"{ind}if type(pe{argnum}) is not {w.const(type(seq))} "
                                         f"or len(pe{argnum}) != {len(seq)}: raise Bail")
                        gi = per_element[argnum][pos]
                        expr, checked, special = f"pe{argnum}[{pos}]", False, None
                    else:
                        gi = vjp(g, ans, *args, **dict(kwargs)) if kwargs else vjp(g, ans, *args)
                        special = (_special_vjp(w, rule, argnum, args, kwargs, ans, exprs, scalar_ans=True)
                                   if len(parents) == PARENT_FIELDS else None)
                        checked = True
                        expr = None  # the cotangent as one expression (no line of its own), or "gi"
                    if pos < 0 and special is not None and _special_applies(special[0], g, ans):
                        fill = _FILL.match(special[-1]) if len(special) == 3 else None
                        if (fill and slots.get(parent) is None and pos != FITTED and type(gi) is np.ndarray
                                and gi.shape == np.shape(args[argnum])):
                            # np.sum's cotangent: the reshaped view now, filled in only if its use needs it
                            lines.append(f"{ind}c{parent} = {gname}.reshape({fill.group(1)})")
                            lazy[parent] = (g.reshape(w.ns[fill.group(1)]), w.const(gi.shape))
                            slots[parent] = gi
                            continue
                        step = [sub.sub(gname, line[4:]) for line in special[1:]]
                        if len(step) == 1 and step[0].startswith("gi = "):
                            expr = step[0][5:]
                        else:
                            lines.extend(ind + line for line in step)
                            expr = "gi"
                    elif pos < 0:
                        inline = None if kwargs or exprs is None else _inline_vjp(vjp, [gname, v] + exprs)
                        if inline:
                            expr = inline
                        else:
                            expr = f"{w.const(vjp)}({gname}, {v}{call_args}{kw})"
                            checked = False
                    if gi is None:
                        lines.append(f"{ind}if {expr} is not None: raise Bail")
                        continue
                    fact = _fact(gi)
                    if fact is None:
                        return None
                    if not checked:
                        if expr != "gi":
                            lines.append(f"{ind}gi = {expr}")
                            expr = "gi"
                        lines.extend(_check_lines(w, "gi", fact, ind))
                    if pos != FITTED:
                        value = args[argnum] if pos < 0 else args[argnum][pos]
                        target_expr = arg(argnum) if pos < 0 else f"{arg(argnum)}[{pos}]"
                        same_fit = (hasattr(value, "shape") and hasattr(value, "dtype") and gi.shape == value.shape
                                    and (gi.dtype is value.dtype or gi.dtype == value.dtype))
                        if not same_fit:
                            plan = _fit_plan(gi, value)
                            if expr != "gi":
                                lines.append(f"{ind}gi = {expr}")
                                expr = "gi"
                            if plan is not None:
                                _, extra, keep = plan
                                if extra:
                                    lines.append(f"{ind}gi = add_reduce(gi, axis={w.const(extra)})")
                                if keep:
                                    lines.append(f"{ind}gi = add_reduce(gi, axis={w.const(keep)}, keepdims=True)")
                            else:
                                lines.append(f"{ind}gi = fitted(gi, {target_expr})")
                            gi = _fitted(gi, value)
                            fact = _fact(gi)
                            if fact is None:
                                return None
                            if plan is None:
                                lines.extend(_check_lines(w, "gi", fact, ind))
                    materialize(parent)
                    step = _accumulate_lines(cts, parent, gi, expr, ind)
                    if step is None:
                        return None
                    lines.extend(step)
                if type(g) is np.ndarray and g.nbytes > PRUNE_BYTES:
                    lines.append(f"{ind}del {gname}")  # the general sweep lets go of it here too
    lines.append(f"{ind}found = {{" + ", ".join(f"{i}: c{i}" for i, _ in found) + "}")
    for i, fact in found:  # what reaches the caller is what the plan was made for
        lines.extend(_check_lines(w, f"c{i}", fact, ind))
    return lines


_FILL = re.compile(r"^    gi\[\.\.\.\] = g\.reshape\((k[0-9]+)\)$")

#: Templates made of IEEE operations that are correctly rounded element by element (negation,
#: +, -, *, /): the same on a broadcast view as on the array it stands for, bit for bit.
_EXACT_TEMPLATES = frozenset({"g * y", "g * x", "g / y", "-g * ans / y", "(g * 2) * x", "g * ans",
                              "-g * ans * ans"})


def _fuses(node: tuple, g: Any, view: Any, live: list, argexprs: dict) -> bool:
    """Whether the node's VJPs may read ``view`` (np.sum's cotangent, not filled in) for ``g``.

    Only when every cotangent the node sends on is a written-out element-wise
    expression of :data:`_EXACT_TEMPLATES` that broadcasts ``view`` to ``g``'s full
    shape: each element is then the same operations on the same numbers (tested here
    once, bit for bit, at the recorded values).  Saves ``np.empty`` and the fill, where
    the expression broadcasts anyway (its other operands are not of ``g``'s shape:
    NumPy's broadcasting loops cost more than its contiguous ones on small arrays).
    """
    index, number, args, kwargs, ans, parents, n_out = node
    if number is None or n_out or kwargs or not parents or argexprs.get(index) is None:
        return False
    rule = RULE_TABLE[number]
    if rule.scatter_index is not None or rule is RULES.get(np.sum) or rule is RULES.get(np.power):
        return False
    for at in range(0, len(parents), PARENT_FIELDS):
        argnum, pos, parent, out = parents[at : at + PARENT_FIELDS]
        if pos >= 0 or out >= 0:
            return False
        if not live[parent]:
            continue
        found = _template_of(rule.vjps[argnum], 2 + len(args))
        if found is None or found[0] not in _EXACT_TEMPLATES:
            return False
        template, params = found
        values = dict(zip(params, (g, ans) + tuple(args)))
        if any(np.shape(values[name]) == np.shape(g) for name in set(re.findall(r"[a-z]+", template)) - {"g"}):
            return False  # it would broadcast where the filled cotangent does not: slower, not faster
        try:
            whole = eval(template, {}, values)
            fused = eval(template, {}, dict(zip(params, (view, ans) + tuple(args))))
        except Exception:
            return False
        if not same(whole, fused):
            return False
    return True


def _special_applies(condition: str, g: Any, ans: Any) -> bool:
    """Whether a :func:`_special_vjp`'s first line holds for the cotangent ``g`` of ``ans``."""
    if condition == "if True:":
        return True
    return type(g) is np.ndarray and g.shape == np.shape(ans)


def _is_whole(index: tuple) -> bool:
    return all(i is None or i is Ellipsis or i == _WHOLE for i in index)


def _accumulate_lines(cts: _Pending, parent: int, gi: Any, name: str, ind: str) -> Optional[list]:
    """``_Pending``'s accumulation of ``gi`` into ``parent``'s slot, as it goes now (and the sum kept)."""
    slots, owned = cts.slots, cts.owned
    prev = slots.get(parent)
    if prev is None:
        slots[parent] = gi
        return [f"{ind}c{parent} = {name}"]
    if (parent in owned and type(gi) is np.ndarray and gi.shape == prev.shape and gi.dtype == prev.dtype):
        line = f"{ind}c{parent} += {name}"  # np.add(prev, gi, out=prev), as _Pending._sum does (gi first)
    elif type(prev) is np.ndarray and type(gi) is np.ndarray and prev.size >= LARGE:
        return None  # a threaded sum: the general sweep's
    else:
        line = f"{ind}c{parent} = c{parent} + ({name})"
    slots[parent] = cts._sum(parent, prev, gi)
    return [line]


def _scatter_lines(w: _Writer, cts: _Pending, parent: int, g: np.ndarray, index: tuple, shape: tuple,
                   ind: str) -> Optional[list]:
    """The branch of :func:`_scatter_fixed` that runs now, written out (the state is updated by the caller)."""
    slots, owned = cts.slots, cts.owned
    prev = slots.get(parent)
    if _is_whole(index):
        lines = [f"{ind}gi = g.reshape({w.const(shape)})"]
        if prev is None:
            return lines + [f"{ind}c{parent} = gi"]
        if parent in owned and prev.shape == shape and prev.dtype == g.dtype:
            return lines + [f"{ind}c{parent} += gi"]
        if prev.size >= LARGE:
            return None
        return lines + [f"{ind}c{parent} = c{parent} + gi"]
    if prev is not None and parent in owned and prev.shape == shape:
        return [f"{ind}c{parent}[{w.const(index)}] += g"]
    lines = [f"{ind}buf = zeros({w.const(shape)}, dtype={w.const(g.dtype)})", f"{ind}buf[{w.const(index)}] = g"]
    if prev is not None:
        lines.append(f"{ind}buf += c{parent}")
    return lines + [f"{ind}c{parent} = buf"]


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
    found = _template_of(vjp, len(names))
    if found is None:
        return None
    template, params = found
    mapping = dict(zip(params, names))
    return re.sub(r"\b[a-z]+\b", lambda m: mapping.get(m.group(0), m.group(0)), template)


def _template_of(vjp: Any, n_args: int) -> Optional[tuple]:
    """``(template, parameter names)`` when ``vjp`` (of ``n_args`` parameters) is one of :data:`_TEMPLATES`."""
    code = getattr(vjp, "__code__", None)
    if (code is None or getattr(vjp, "__closure__", None) or getattr(vjp, "__defaults__", None)
            or code.co_argcount != n_args or code.co_flags & 0x0C):  # no *args / **kwargs
        return None
    params = code.co_varnames[: code.co_argcount]
    for template in _TEMPLATES:
        key = (params, template)
        reference = _TEMPLATE_CODE.get(key)
        if reference is None:
            reference = _TEMPLATE_CODE[key] = eval(f"lambda {', '.join(params)}: {template}").__code__
        if (code.co_code == reference.co_code and code.co_consts == reference.co_consts
                and code.co_names == reference.co_names and code.co_varnames == reference.co_varnames):
            return template, params
    return None


def _special_vjp(w: _Writer, rule: Any, argnum: int, args: tuple, kwargs: Any, ans: Any,
                 exprs: Optional[list], scalar_ans: bool = False) -> Optional[list]:
    """The lines of a VJP written out for its recorded arguments, or ``None``.

    Two VJPs whose Python work is all decided by the recording (the same NumPy
    calls on the same values follow, so the same bits): ``np.sum``'s (the cotangent
    filled into the input's shape, as ``rules._util.unreduce`` does for a small
    input) and ``np.power``'s with respect to the base at a constant exponent
    (``y - 1`` computed once).  Each line starts with ``if``: the written form
    applies to a plain cotangent of the recorded shape, the caller's ``else``
    calls the rule.  The compiled sweep is checked against the general one once.
    ``scalar_ans``: a sum to a NumPy scalar too (for the planned sweep, which knows
    that the cotangent is an array: ``unreduce`` then takes the same path).
    """
    if exprs is None or argnum != 0:
        return None
    x = args[0]
    if rule is RULES.get(np.sum) and rule.vjps[0] is _sum_vjp and type(x) is np.ndarray:
        kw = dict(kwargs) if kwargs else {}
        if len(args) == 2 and "axis" not in kw:
            kw["axis"] = args[1]  # np.sum(x, 1): the axis given by position
        elif len(args) > 2:
            return None
        if set(kw) - {"axis", "keepdims"} or x.size > _FILL_SIZE or x.dtype != getattr(ans, "dtype", None):
            return None
        if type(ans) is not np.ndarray and not (scalar_ans and isinstance(ans, np.generic)):
            return None  # a NumPy scalar's cotangent may take another path in unreduce
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
