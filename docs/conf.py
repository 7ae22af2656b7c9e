"""Sphinx configuration: Markdown pages (MyST) and an API reference from NumPy-style docstrings.

Build with warnings as errors, as CI does::

    python -m sphinx -W --keep-going -b html docs docs/_build/html
"""

import os
import sys

# Document the checkout, installed or not.
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "src")))

import tapegrad  # noqa: E402

project = "tapegrad"
author = "tapegrad contributors"
copyright = "tapegrad contributors"
version = release = tapegrad.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "numpydoc"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3
myst_enable_extensions = ["dollarmath"]

autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the numpydoc "Parameters" sections carry the types
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False


html_theme = "alabaster"
html_title = "tapegrad"


# ---------------------------------------------------------------- the "More" table of contents
# Pages generated or written elsewhere (coverage.md by the coverage script,
# benchmarks.md, ...) join the table of contents when they exist, so that a missing
# one is not an error and a new one is not an orphan.  (A toctree glob that matches
# nothing raises a warning that Sphinx does not let us suppress.)
DOCS = os.path.dirname(os.path.abspath(__file__))
GUIDE_PAGES = ["concepts", "tutorial", "check", "limits", "api"]
MARKER = "<!-- more-pages -->"


def more_pages() -> list:
    """how-it-works, then every other top-level page, then the developer pages."""
    skip = set(GUIDE_PAGES) | {"index", "how-it-works"}
    top = sorted(name[:-3] for name in os.listdir(DOCS) if name.endswith(".md") and name[:-3] not in skip)
    dev_dir = os.path.join(DOCS, "dev")
    dev = sorted("dev/" + n[:-3] for n in os.listdir(dev_dir) if n.endswith(".md")) if os.path.isdir(dev_dir) else []
    return ["how-it-works"] + top + dev


def _insert_more_pages(app, docname, source):
    if docname == "index":
        entries = "\n".join(more_pages())
        toctree = "```{toctree}\n:maxdepth: 1\n:caption: More\n\n" + entries + "\n```\n"
        source[0] = source[0].replace(MARKER, toctree)


def setup(app):
    app.connect("source-read", _insert_more_pages)
