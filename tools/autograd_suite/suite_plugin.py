"""pytest plugin loaded by run.py into the run of autograd's tests: checks the shim, records outcomes.

For every test it writes one JSON record (to ``$AUTOGRAD_SUITE_JSON``): the
node id, the outcome, and for a failure what the runner needs to put it in a
category: the exception's type and message, whether it is one of the shim's
own exception types, and where it was raised (tapegrad, the shim, NumPy/SciPy
or the test itself) with that line's source.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest

_RECORDS: dict = {}
_T0 = [0.0]


def _where(path: str) -> str:
    path = os.path.abspath(path)
    shim = os.path.abspath(os.environ["AUTOGRAD_SHIM_DIR"])
    import tapegrad

    tapegrad_dir = os.path.dirname(os.path.abspath(tapegrad.__file__))
    if path.startswith(shim + os.sep):
        return "shim"
    if path.startswith(tapegrad_dir + os.sep):
        return "tapegrad"
    if f"{os.sep}numpy{os.sep}" in path or f"{os.sep}scipy{os.sep}" in path:
        return "numpy/scipy"
    if f"{os.sep}_pytest{os.sep}" in path or f"{os.sep}pytest{os.sep}" in path:
        return "pytest"
    if os.path.basename(path).startswith("test_") or os.path.basename(path) == "numpy_utils.py":
        return "test"
    return "other"


def _frames(excinfo: Any) -> list:
    frames = []
    for entry in excinfo.traceback:
        try:
            line = str(entry.statement).strip().splitlines()[0]
        except Exception:
            line = ""
        path = str(entry.path)
        frames.append({"where": _where(path), "file": os.path.basename(path), "line": entry.lineno + 1,
                       "function": entry.name, "source": line[:200]})
    return frames


def _exception_info(excinfo: Any) -> dict:
    from autograd._shim import ShimLimitation, VSpaceMismatch, WrongDerivative
    import tapegrad

    exc = excinfo.value
    kind = "other"
    if isinstance(exc, WrongDerivative):
        kind = "wrong-derivative"
    elif isinstance(exc, VSpaceMismatch):
        kind = "vspace-mismatch"
    elif isinstance(exc, ShimLimitation):
        kind = "shim-limitation"
    elif isinstance(exc, tapegrad.TapegradError):
        kind = "tapegrad-error"
    frames = _frames(excinfo)
    return {
        "type": type(exc).__name__,
        "module": type(exc).__module__,
        "message": str(exc)[:2000],
        "kind": kind,
        "frames": frames[-12:],
        "frames_through_tapegrad": any(f["where"] == "tapegrad" for f in frames),
    }


def pytest_configure(config: Any) -> None:
    import autograd

    shim = os.path.abspath(os.environ["AUTOGRAD_SHIM_DIR"])
    if not os.path.abspath(autograd.__file__).startswith(shim + os.sep) or not getattr(
        autograd, "__tapegrad_shim__", False
    ):
        raise pytest.UsageError(f"import autograd found {autograd.__file__}, not the shim in {shim}")
    _T0[0] = time.perf_counter()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    outcome = yield
    report = outcome.get_result()
    record = _RECORDS.setdefault(report.nodeid, {"nodeid": report.nodeid, "outcome": "passed", "duration": 0.0})
    record["duration"] += getattr(report, "duration", 0.0)
    if report.skipped:
        record["outcome"] = "skipped"
    elif report.failed:
        record["outcome"] = "failed" if call.when == "call" else "error"
        if call.excinfo is not None:
            record["exception"] = _exception_info(call.excinfo)
            record["phase"] = call.when


def pytest_sessionfinish(session: Any, exitstatus: Any) -> None:
    path = os.environ.get("AUTOGRAD_SUITE_JSON")
    if not path:
        return
    with open(path, "w") as fh:
        json.dump({"wall_s": time.perf_counter() - _T0[0], "tests": list(_RECORDS.values())}, fh, indent=1)
