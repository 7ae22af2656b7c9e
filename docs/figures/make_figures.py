"""Regenerate the figures of docs/how-it-works.md: ``python docs/figures/make_figures.py``.

The DOT text is compared with the committed copy by tests/test_docs.py, so the
picture cannot drift from what tapegrad records; the SVG needs Graphviz's
``dot`` to be re-rendered.
"""

import os

import numpy as np

import tapegrad as tg
from tapegrad.graph import tape_to_dot, write_graph

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "tape-example.dot")


def predict(x, W):
    """The example program drawn in how-it-works.md."""
    h = np.tanh(W @ x)
    return np.sum(h**2) + x[0] * np.sum(h)


def example_dot() -> str:
    """Record ``predict`` on a tape and return its DOT text."""
    x = np.array([0.5, -1.0, 2.0])
    W = np.array([[1.0, 2.0, 0.0], [0.0, 1.0, -1.0]])
    with tg.GradientTape() as tape:
        xt, Wt = tape.watch(x), tape.watch(W)
        y = predict(xt, Wt)
    return tape_to_dot(tape, targets={"y": y}, sources={"x": xt, "W": Wt})


if __name__ == "__main__":
    for path in write_graph(example_dot(), os.path.join(HERE, "tape-example.svg")):
        print("wrote", path)
