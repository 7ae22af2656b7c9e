"""The tape picture: DOT text that parses, one node per recorded call, data-flow edges."""

import re

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import graph

_NODE = re.compile(r'^\s*(n\d+) \[label="((?:[^"\\]|\\.)*)"(.*)\];$')
_EDGE = re.compile(r'^\s*(n\d+) -> (n\d+)(?: \[label="((?:[^"\\]|\\.)*)"\])?;$')


def parse_dot(text):
    """A strict little parser for the subset of DOT that graph.py writes.

    Returns ``(nodes, edges)``: ``{id: (label, attributes)}`` and
    ``[(tail, head, label)]``; fails on any line it does not understand.
    """
    lines = text.strip().splitlines()
    assert lines[0] == "digraph tape {" and lines[-1] == "}"
    nodes, edges = {}, []
    for line in lines[1:-1]:
        node, edge = _NODE.match(line), _EDGE.match(line)
        if node:
            assert node.group(1) not in nodes, f"node declared twice: {line}"
            nodes[node.group(1)] = (node.group(2).replace("\\n", "\n"), node.group(3))
        elif edge:
            edges.append((edge.group(1), edge.group(2), edge.group(3)))
        else:
            assert re.match(r"^\s*(rankdir|node|edge|labelloc)\b", line), f"unexpected DOT line: {line}"
    for tail, head, _ in edges:
        assert tail in nodes and head in nodes, "edge between undeclared nodes"
        assert int(tail[1:]) < int(head[1:]), "edges follow the tape order"
    try:  # a second opinion when pydot happens to be installed (never required)
        import pydot
    except ImportError:
        pydot = None
    if pydot is not None:
        (parsed,) = pydot.graph_from_dot_data(text)
        assert len(parsed.get_edges()) == len(edges)
    return nodes, edges


def _record(fun, x):
    with tg.GradientTape(persistent=True) as tape:
        x = tape.watch(x)
        y = fun(x)
    return tape, x, y


def test_nodes_edges_and_shapes_of_a_small_program():
    tape, x, z = _record(lambda x: np.sum(np.sin(x) * x, axis=0), np.ones((2, 3)))
    nodes, edges = parse_dot(tape.to_dot(targets=z))
    titles = [label.split("\n")[0] for label, _ in nodes.values()]
    assert titles == ["source", "sin", "multiply", "sum"]
    assert [label.split("\n")[1] for label, _ in nodes.values()] == ["(2, 3) float64"] * 3 + ["(3,) float64"]
    assert sorted(edges) == [("n0", "n1", None), ("n0", "n2", "arg 1"), ("n1", "n2", "arg 0"), ("n2", "n3", None)]


def test_sources_and_targets_highlighted_and_dead_branches_grey():
    def fun(x):
        unused = np.cos(x)  # recorded, but no gradient reaches the target through it
        return np.sum(np.exp(x)), unused

    with tg.GradientTape() as tape:
        x = tape.watch(np.arange(3.0))
        y, unused = fun(x)
    nodes, _ = parse_dot(tape.to_dot(targets={"loss": y}, sources={"x": x}))
    label_of = {label.split("\n")[0]: attrs for label, attrs in nodes.values()}
    assert set(label_of) == {"x", "exp", "cos", "loss = sum"}
    assert "#c8e6c9" in label_of["x"]  # source: green
    assert "#ffcdd2" in label_of["loss = sum"]  # target: red
    assert "dashed" in label_of["cos"] and "dashed" not in label_of["exp"]


def test_multiple_outputs_and_indexing_are_labelled():
    tape, x, parts = _record(lambda x: np.split(x, 2), np.arange(4.0))
    nodes, edges = parse_dot(graph.tape_to_dot(tape))
    assert any(label.startswith("split\n(2,) float64, (2,) float64") for label, _ in nodes.values())

    tape, x, y = _record(lambda x: x[1:, None] * x[0], np.arange(4.0))
    nodes, edges = parse_dot(graph.tape_to_dot(tape, targets=[y]))
    titles = {label.split("\n")[0] for label, _ in nodes.values()}
    assert {"getitem [1:, None]", "getitem [0]", "multiply"} <= titles


def test_output_index_labels_edges_from_multi_output_calls():
    with tg.GradientTape() as tape:
        x = tape.watch(np.arange(4.0))
        a, b = np.split(x, 2)
        y = a * b
    _, edges = parse_dot(tape.to_dot(targets=y))
    assert ("n1", "n2", "arg 0, out 0") in edges and ("n1", "n2", "arg 1, out 1") in edges


def test_write_graph_without_graphviz_writes_dot_only(tmp_path, monkeypatch):
    tape, x, y = _record(lambda x: np.tanh(x), np.ones(2))
    monkeypatch.setattr(graph.shutil, "which", lambda name: None)
    files = graph.write_graph(tape.to_dot(targets=y), str(tmp_path / "t.svg"))
    assert files == [str(tmp_path / "t.dot")]
    parse_dot((tmp_path / "t.dot").read_text())
    assert not (tmp_path / "t.svg").exists()


def test_write_graph_renders_svg_when_graphviz_is_installed(tmp_path):
    tape, x, y = _record(lambda x: np.tanh(x) @ x, np.ones(2))
    files = graph.write_graph(tape.to_dot(targets=y), str(tmp_path / "tape.dot"))
    assert files[0] == str(tmp_path / "tape.dot")
    if graph.can_render():
        assert files[1:] == [str(tmp_path / "tape.svg")]
        svg = (tmp_path / "tape.svg").read_text()
        assert "<svg" in svg and "matmul" in svg and "tanh" in svg
    else:
        assert files[1:] == []


def test_default_sources_are_the_watched_values_and_big_tapes_refused():
    tape, x, y = _record(lambda x: np.sum(x * x), np.ones(3))
    nodes, _ = parse_dot(tape.to_dot())
    assert "#c8e6c9" in nodes["n0"][1]
    with pytest.raises(ValueError, match="max_nodes"):
        graph.tape_to_dot(tape, max_nodes=2)
    with pytest.raises(ValueError, match="context manager"):
        graph.tape_to_dot(tg.GradientTape())


def test_labels_are_escaped():
    tape, x, y = _record(lambda x: np.exp(x), np.ones(1))
    nodes, _ = parse_dot(graph.tape_to_dot(tape, targets={'say "hi"\\': y}, title='a "title"'))
    assert nodes["n1"][0].startswith('say \\"hi\\"\\\\ = exp')
