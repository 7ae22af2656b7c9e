"""autograd's own test suite, unchanged, against tapegrad (tools/autograd_suite, issue 30).

Runs ``tools/autograd_suite/run.py``: the autograd 1.9.1 sdist's tests, through a
shim that maps ``autograd.numpy`` to NumPy and autograd's transforms and
``check_grads`` to tapegrad.  Skipped only when the sdist cannot be fetched.
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parents[1] / "tools" / "autograd_suite" / "run.py"

#: Tests of autograd's suite (631) that pass on tapegrad; issue 30 asks for at least 600.
MIN_PASSED = 620


@pytest.mark.slow
def test_autograd_suite_has_no_wrong_number(tmp_path):
    summary_path = tmp_path / "summary.json"
    proc = subprocess.run(
        [sys.executable, str(RUN), "--json", str(summary_path)], capture_output=True, text=True, timeout=3600
    )
    if proc.returncode == 2:
        pytest.skip(f"the autograd sdist cannot be fetched: {proc.stderr[-500:]}")
    assert proc.returncode in (0, 1) and summary_path.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(summary_path.read_text())

    wrong = [f"{f['nodeid']}: {f['reason']}" for f in summary["failures"] if f["category"] == "a"]
    assert not wrong, "wrong numbers:\n" + "\n".join(wrong)

    counts = summary["counts"]
    skipped = counts.get("skipped", 0)
    if skipped:  # autograd skips its xarray tests when xarray is missing, and nothing else
        assert importlib.util.find_spec("xarray") is None, proc.stdout[-3000:]
    assert summary["total"] == 631, proc.stdout[-3000:]
    assert counts.get("passed", 0) + skipped >= MIN_PASSED, proc.stdout[-5000:]
