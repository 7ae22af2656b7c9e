"""Draw a recorded tape: Graphviz DOT text, and SVG/PNG when Graphviz is installed.

One box per recorded call, labelled with its function name and output shape;
one arrow per data dependency (labelled with the argument position when a
call has several traced arguments).  Sources (the watched inputs) are drawn
green, targets red, and when targets are given the calls that no gradient
flows through (not on a path from a source to a target) are drawn grey.

Constants (plain arrays) are not drawn: the tape only records traced values.

>>> import numpy as np, tapegrad as tg
>>> with tg.GradientTape() as tape:
...     x = tape.watch(np.ones(3))
...     y = np.sum(np.sin(x) * x)
>>> dot = tape.to_dot(targets=y)
>>> print(dot.splitlines()[0])
digraph tape {
>>> "sin" in dot and "multiply" in dot
True
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from .requests import resolve
from .tape import ANS, ARGS, INDEX, PARENT_FIELDS, PARENTS, RULE, parent_runs, rule_of

__all__ = ["tape_to_dot", "write_graph", "render", "can_render", "node_label"]

_SOURCE_STYLE = 'shape=box, style="rounded,filled", fillcolor="#c8e6c9", color="#2e7d32", penwidth=2'
_TARGET_STYLE = 'shape=box, style="rounded,filled", fillcolor="#ffcdd2", color="#c62828", penwidth=2'
_CALL_STYLE = 'shape=box, style="rounded,filled", fillcolor="#e3f2fd", color="#1565c0"'
_OFF_PATH_STYLE = 'shape=box, style="rounded,dashed", color="#9e9e9e", fontcolor="#9e9e9e"'


def _raw_tape(tape: Any) -> Any:
    """Accept a :class:`~tapegrad.tape.Tape` or a :class:`~tapegrad.GradientTape`."""
    inner = getattr(tape, "_tape", None)
    if inner is not None or hasattr(tape, "_watched"):
        if inner is None:
            raise ValueError("this GradientTape has recorded nothing yet: use it as a context manager first")
        return inner
    return tape


def _short_name(name: str) -> str:
    """``numpy.linalg.inv`` -> ``linalg.inv``; ``tapegrad.rules.indexing._getitem`` -> ``getitem``."""
    if name.startswith("numpy."):
        return name[len("numpy.") :]
    return name.rsplit(".", 1)[-1].lstrip("_")


def _format_index(index: Any) -> str:
    """A compact, readable rendering of an indexing key: ``[0, 1:3, ...]``."""
    parts = index if isinstance(index, tuple) else (index,)

    def one(i: Any) -> str:
        if i is Ellipsis:
            return "..."
        if i is None:
            return "None"
        if isinstance(i, slice):
            text = ("" if i.start is None else str(i.start)) + ":" + ("" if i.stop is None else str(i.stop))
            return text + ("" if i.step is None else f":{i.step}")
        if isinstance(i, (int, np.integer)):
            return str(int(i))
        return f"array{np.shape(i)}"

    return "[" + ", ".join(one(i) for i in parts) + "]"


def _shape_text(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return ", ".join(_shape_text(v) for v in value)
    dtype = getattr(value, "dtype", None)
    shape = np.shape(value)
    return f"{shape}{'' if dtype is None else ' ' + str(dtype)}"


def node_label(node: Any, name: Optional[str] = None) -> str:
    """The text of one box: function name (or source name) and output shape."""
    rule = rule_of(node)
    if rule is None:
        title = name or "source"
    else:
        title = _short_name(rule.name)
        args = node[ARGS]
        if title in ("getitem", "setitem") and args is not None and len(args) > 1:
            title += " " + _format_index(args[1])
        if name:
            title = f"{name} = {title}"
    return f"{title}\n{_shape_text(node[ANS])}"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _named_nodes(values: Any, tape: Any) -> List[Tuple[str, Any]]:
    """``(name, node)`` for each traced value of ``tape`` in ``values`` (a value, sequence or dict)."""
    if values is None:
        return []
    if isinstance(values, dict):
        items = list(values.items())
    elif isinstance(values, (list, tuple)):
        items = [("", v) for v in values]
    else:
        items = [("", values)]
    out = []
    for name, v in items:
        t = resolve(v, tape)
        if t is not None:
            out.append((str(name), tape.nodes[t._index]))
    return out


def _reachable(start: Iterable[int], nodes: Sequence[Any], upward: bool) -> set:
    """Indices reachable from ``start`` along parent edges (``upward``) or child edges."""
    seen = set(start)
    if upward:
        stack = list(seen)
        while stack:
            for _, _, parent, _ in parent_runs(nodes[stack.pop()][PARENTS]):
                if parent not in seen:
                    seen.add(parent)
                    stack.append(parent)
    else:  # nodes are in topological order: one forward pass suffices
        for node in nodes:
            if any(p in seen for _, _, p, _ in parent_runs(node[PARENTS])):
                seen.add(node[INDEX])
    return seen


def tape_to_dot(
    tape: Any,
    targets: Any = None,
    sources: Any = None,
    title: Optional[str] = None,
    max_nodes: int = 2000,
) -> str:
    """Return the recorded computation as Graphviz DOT text.

    Parameters
    ----------
    tape : Tape or GradientTape
        The tape to draw.
    targets : tracer, sequence or dict of tracers, optional
        Values to highlight as targets (red).  A dict gives them names.  When
        given, calls that do not lie between a source and a target are grey.
    sources : tracer, sequence or dict of tracers, optional
        Values to highlight as sources (green); by default every watched value
        (every source node) of the tape.
    title : str, optional
        A caption drawn at the top.
    max_nodes : int, default 2000
        Refuse to draw larger tapes (Graphviz layouts grow quickly).

    Returns
    -------
    str
        A ``digraph`` whose node ids are ``n<index>`` (the tape position).
    """
    tape = _raw_tape(tape)
    nodes = tape.nodes
    if len(nodes) > max_nodes:
        raise ValueError(f"the tape has {len(nodes)} nodes, more than max_nodes={max_nodes}; draw a smaller example")
    target_nodes = _named_nodes(targets, tape)
    source_nodes = _named_nodes(sources, tape)
    if sources is None:
        source_nodes = [("", n) for n in nodes if n[RULE] is None]
    names: Dict[int, str] = {}
    for name, node in source_nodes + target_nodes:
        if name:
            names[node[INDEX]] = name
    source_ids = {n[INDEX] for _, n in source_nodes}
    target_ids = {n[INDEX] for _, n in target_nodes}
    on_path = None
    if target_ids:
        on_path = _reachable(target_ids, nodes, upward=True)
        if source_ids:
            on_path &= _reachable(source_ids, nodes, upward=False)

    lines = ["digraph tape {", '  rankdir=TB;', '  node [fontname="Helvetica", fontsize=11];',
             '  edge [fontname="Helvetica", fontsize=9, color="#555555"];']
    if title:
        lines.append(f"  labelloc=t; label={_quote(title)};")
    for node in nodes:
        idx = node[INDEX]
        if idx in target_ids:
            style = _TARGET_STYLE
        elif idx in source_ids:
            style = _SOURCE_STYLE
        elif on_path is not None and idx not in on_path:
            style = _OFF_PATH_STYLE
        else:
            style = _CALL_STYLE
        lines.append(f"  n{idx} [label={_quote(node_label(node, names.get(idx)))}, {style}];")
    for node in nodes:
        several = len(node[PARENTS]) > PARENT_FIELDS
        for argnum, pos, parent, out in parent_runs(node[PARENTS]):
            tags = []
            if several:
                tags.append(f"arg {argnum}" + (f"[{pos}]" if pos >= 0 else ""))
            if out >= 0:
                tags.append(f"out {out}")
            attrs = f" [label={_quote(', '.join(tags))}]" if tags else ""
            lines.append(f"  n{parent} -> n{node[INDEX]}{attrs};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def can_render() -> bool:
    """Whether SVG/PNG output is possible (Graphviz's ``dot`` binary on PATH)."""
    return shutil.which("dot") is not None


def render(dot: str, fmt: str = "svg") -> Optional[bytes]:
    """Lay out DOT text with Graphviz; ``None`` when Graphviz is not installed.

    Uses the ``dot`` binary (the ``graphviz`` Python package needs it too).
    """
    exe = shutil.which("dot")
    if exe is None:
        return None
    done = subprocess.run([exe, f"-T{fmt}"], input=dot.encode(), capture_output=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"Graphviz failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def write_graph(dot: str, path: str) -> List[str]:
    """Write DOT text to ``path``, and a picture beside it when possible.

    ``path`` ending in ``.svg`` or ``.png`` writes that picture (when Graphviz
    is installed) *and* the ``.dot`` file next to it; any other name writes
    the DOT text there and an ``.svg`` next to it when Graphviz is installed.

    Returns
    -------
    list of str
        The files written, the ``.dot`` file first.
    """
    root, ext = os.path.splitext(path)
    fmt = ext[1:].lower() if ext.lower() in (".svg", ".png") else "svg"
    dot_path = root + ".dot" if ext.lower() in (".svg", ".png") else path
    picture_path = path if ext.lower() in (".svg", ".png") else root + ".svg"
    with open(dot_path, "w", encoding="utf-8") as fh:
        fh.write(dot)
    written = [dot_path]
    picture = render(dot, fmt)
    if picture is not None:
        with open(picture_path, "wb") as fh:
            fh.write(picture)
        written.append(picture_path)
    return written
