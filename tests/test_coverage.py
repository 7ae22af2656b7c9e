"""The committed coverage table matches the registry, and the support target holds."""

from pathlib import Path

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import coverage
from tapegrad.errors import GradientDroppedError

DOCS = Path(__file__).resolve().parents[1] / "docs" / "coverage.md"


def _minor(version):
    return tuple(version.split(".")[:2])


def test_coverage_table_is_up_to_date():
    committed = DOCS.read_text()
    rendered = coverage.render()
    recorded, running = coverage.recorded_versions(committed), coverage.generated_with()
    assert set(recorded) == set(running) and "NumPy" in recorded, (recorded, running)
    if all(_minor(recorded[k]) == _minor(running[k]) for k in recorded):
        # The releases the page was generated with (up to the patch level): every line.
        ours = rendered.replace(coverage._versions_line(running), coverage._versions_line(recorded))
        assert committed == ours, "docs/coverage.md is stale: regenerate it with `python -m tapegrad.coverage`"
    else:
        # Another release: each function both releases have gets the same answer here.
        before, now = coverage.statuses(committed), coverage.statuses(rendered)
        changed = {n: (before[n], now[n]) for n in before.keys() & now.keys() if before[n] != now[n]}
        assert not changed, changed
        assert len(before.keys() & now.keys()) >= 0.95 * len(before), "most of NumPy's API is common"


def test_recorded_versions_and_statuses_read_a_rendered_page():
    text = coverage.render([coverage.Row(["numpy.sin"], "differentiable, order 1 and 2 tested"),
                            coverage.Row(["numpy.all", "numpy.alltrue"], "constant")])
    assert coverage.recorded_versions(text) == coverage.generated_with()
    assert coverage.recorded_versions(text)["NumPy"] == np.__version__
    got = coverage.statuses(text)
    assert {k: got[k] for k in ("numpy.sin", "numpy.all", "numpy.alltrue")} == {
        "numpy.sin": "differentiable", "numpy.all": "constant", "numpy.alltrue": "constant"}


def test_every_function_of_the_running_numpy_has_an_answer():
    # A release that adds a function fails here until it has a rule, is marked constant,
    # or has a reason in coverage.REASONS (a clear refusal).
    undecided = [r.names for r in coverage.rows() if r.note == "no derivative rule yet"]
    assert not undecided, undecided


def test_at_most_five_percent_unsupported():
    rows = coverage.rows()
    unsupported = [r.names[0] for r in rows if r.status == "not supported"]
    assert len(unsupported) <= 0.05 * len(rows), unsupported


#: NumPy's Python functions whose own conversion (bound early in NumPy's module) keeps a
#: tracer while a tape records (tapegrad.constructors): they give the derivative.
CONVERTED_IN_PYTHON = ("asarray_chkfinite", "require")


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.asmatrix's own warning
@pytest.mark.parametrize("name", [n for n in coverage.CONVERSIONS if hasattr(np, n) and n not in CONVERTED_IN_PYTHON])
def test_undispatched_conversions_refuse_tracers(name):
    convert = getattr(np, name)  # bound before the window opens: the original
    with pytest.raises(GradientDroppedError):
        tg.grad(lambda x: np.sum(convert(x)))(np.ones(3))


@pytest.mark.parametrize("name", CONVERTED_IN_PYTHON)
def test_conversions_written_in_python_keep_the_tracer(name):
    convert = getattr(np, name)
    x = np.array([1.0, -2.0, 3.0])
    np.testing.assert_array_equal(tg.grad(lambda x: np.sum(convert(x) * x))(x), 2 * x)
