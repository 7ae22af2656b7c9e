"""Every code example in docs/*.md runs, and its printed output is what the page shows.

Fenced ```python (or ```pycon) blocks are collected in page order and run in
one namespace per page: blocks with ``>>>`` prompts as doctests, plain blocks
as scripts.  Other fences (```console, ```text, ```dot) are not Python.
"""

import doctest
import pathlib
import re
import textwrap

import numpy as np
import pytest

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
PAGES = sorted(DOCS.glob("*.md"))
_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,})[ \t]*\{?(?:python|pycon)\}?[^\n]*\n(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$",
    re.M | re.S,
)
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def python_blocks(text):
    """``(line number, source)`` of each Python fence of a Markdown page."""
    return [(text.count("\n", 0, m.start()) + 2, textwrap.dedent(m.group("body"))) for m in _FENCE.finditer(text)]


def run_page(path):
    """Run a page's examples; return ``(examples run, failure report)``."""
    text = path.read_text(encoding="utf-8")
    namespace = {"__name__": f"docs.{path.stem}"}
    parser = doctest.DocTestParser()
    report = []
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    count = 0
    with np.printoptions():  # pages may set print options; keep them to the page
        for line, source in python_blocks(text):
            if ">>>" in source:
                test = parser.get_doctest(source, namespace, path.name, str(path), line - 1)
                runner.run(test, out=report.append, clear_globs=False)
                namespace = test.globs  # DocTest works on a copy; later blocks continue from it
                count += len(test.examples)
            else:
                exec(compile(source, f"{path.name}:{line}", "exec"), namespace)
                count += 1
    return count, "".join(report) if runner.failures else ""


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_page_examples_run(page):
    count, failures = run_page(page)
    assert not failures, failures


def test_pages_that_answer_questions_have_examples():
    for name in ("concepts.md", "tutorial.md", "how-it-works.md", "limits.md", "check.md"):
        count, _ = run_page(DOCS / name)
        assert count >= 3, f"{name} has {count} examples"


def test_fence_collector_sees_both_styles():
    text = ("x\n```python\n>>> 1 + 1\n2\n```\n\n```pycon\n>>> 3\n3\n```\n```console\n$ ls\n```\n```python\ny = 2\n```\n"
            "1. item\n\n   ```python\n   >>> 4\n   4\n   ```\n")
    blocks = python_blocks(text)
    assert [b[1] for b in blocks] == [">>> 1 + 1\n2\n", ">>> 3\n3\n", "y = 2\n", ">>> 4\n4\n"]
    assert blocks[0][0] == 3


def test_how_it_works_figure_matches_a_fresh_recording():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_figures", DOCS / "figures" / "make_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    committed = (DOCS / "figures" / "tape-example.dot").read_text()
    assert module.example_dot() == committed, "the figure is stale: run python docs/figures/make_figures.py"
    assert (DOCS / "figures" / "tape-example.svg").exists()
    assert "figures/tape-example.svg" in (DOCS / "how-it-works.md").read_text()
