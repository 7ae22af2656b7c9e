"""docs/scipy-coverage.md is what ``python -m tapegrad.scipy_coverage`` generates now."""

import pathlib
import re

import numpy as np
import pytest
import scipy

from tapegrad import scipy_coverage
from tapegrad.registry import CONSTANT, INTERCEPTED, RULES

PAGE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "scipy-coverage.md"


@pytest.fixture(scope="module")
def rows():
    return scipy_coverage.module_rows()


def test_page_is_current(rows):
    text = PAGE.read_text(encoding="utf-8")
    generated_with = re.search(r"with SciPy (\S+) from", text).group(1)
    if generated_with != scipy.__version__:
        pytest.skip(f"the page was generated with SciPy {generated_with}, this is {scipy.__version__}")
    assert text == scipy_coverage.render(rows), "stale: run python -m tapegrad.scipy_coverage"


def test_every_module_is_listed_with_rules(rows):
    assert set(rows) == set(scipy_coverage.MODULES)
    for module, module_rows in rows.items():
        assert module_rows, module
        assert any(status.startswith("differentiable") for _, status, _ in module_rows), module


def test_statuses_agree_with_the_rule_table(rows):
    # Every intercepted function is listed under its module with its rule's kind.
    listed = {name: status for module_rows in rows.values() for names, status, _ in module_rows for name in names}
    assert listed["scipy.ndimage.gaussian_filter"].startswith("differentiable")
    assert listed["scipy.stats.rv_continuous.logpdf"].startswith("differentiable")
    assert listed["scipy.fft.dct"].startswith("differentiable")  # behind scipy.fft's multimethod
    assert listed["scipy.linalg.qz"] == "no rule"
    for fun in list(INTERCEPTED):
        rule = RULES.get(fun)
        assert rule is not None, fun  # intercepted without a rule: the door would refuse every call
        expected = "constant" if rule.kind == CONSTANT else f"differentiable ({rule.kind})"
        name = scipy_coverage.function_name(fun)
        if name in listed:
            assert listed[name] == expected, name


def smoothed_energy(u):
    """A user function calling SciPy through the door (for ``tapegrad check``)."""
    import scipy.ndimage
    import scipy.stats

    return np.sum(scipy.ndimage.gaussian_filter(u, 1.0) ** 2) - np.sum(scipy.stats.norm.logpdf(u, 0.5, 2.0))


def test_check_lists_scipy_calls_with_their_rules():
    from tapegrad import check

    report = check.check_function(smoothed_energy, [np.linspace(0.0, 1.0, 7)])
    calls = {c.name: c for c in report.calls}
    assert calls["scipy.ndimage.gaussian_filter"].kind == "composite"
    assert calls["scipy.stats.rv_continuous.logpdf"].count == 1
    assert report.ok, report.error
    assert "NumPy and SciPy functions called" in check.format_report(report)
