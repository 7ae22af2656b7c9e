"""The committed coverage table matches the registry, and the support target holds."""

from pathlib import Path

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import coverage
from tapegrad.errors import GradientDroppedError

DOCS = Path(__file__).resolve().parents[1] / "docs" / "coverage.md"


def test_coverage_table_is_up_to_date():
    assert DOCS.read_text() == coverage.render(), (
        "docs/coverage.md is stale: regenerate it with `python -m tapegrad.coverage`"
    )


def test_at_most_five_percent_unsupported():
    rows = coverage.rows()
    unsupported = [r.names[0] for r in rows if r.status == "not supported"]
    assert len(unsupported) <= 0.05 * len(rows), unsupported


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.asmatrix's own warning
@pytest.mark.parametrize("name", [n for n in coverage.CONVERSIONS if hasattr(np, n)])
def test_undispatched_conversions_refuse_tracers(name):
    convert = getattr(np, name)
    with pytest.raises(GradientDroppedError):
        tg.grad(lambda x: np.sum(convert(x)))(np.ones(3))
