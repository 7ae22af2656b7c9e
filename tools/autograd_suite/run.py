#!/usr/bin/env python
"""Run autograd's own test suite, unchanged, against tapegrad through a shim.

    python tools/autograd_suite/run.py [--write-results] [--json FILE] [-k EXPR]

1. Obtains autograd's test files, unchanged, from the autograd sdist on PyPI
   (``pip download --no-binary :all: --no-deps autograd==1.9.1``; the installed
   wheel ships no tests).  The sdist is kept in a cache folder outside the
   repository (``$TAPEGRAD_AUTOGRAD_SUITE_CACHE``, else
   ``~/.cache/tapegrad/autograd-suite``) and its ``tests/`` are extracted
   there; nothing of autograd is copied into the repository.
2. Runs them with pytest (no xdist, ``-p no:cacheprovider``) with the shim
   (``tools/autograd_suite/shim``) first on ``sys.path``, so that ``import
   autograd`` and all of its submodules resolve to the shim: ``autograd.numpy``
   is plain NumPy, ``autograd.scipy`` plain SciPy, and autograd's transforms and
   ``autograd.test_util.check_grads`` are answered by tapegrad's public API.
   The plugin ``suite_plugin.py`` refuses to run if ``import autograd`` finds
   anything but the shim.
3. Prints passed / failed / errored and every failure in a category:

   (a) wrong number: a derivative differs from central finite differences
       (``check_grads``) or from an equivalent computation (``check_equivalent``),
       or a test's own assertion on a computed derivative fails;
   (b) tapegrad refused with its own clear error (which function);
   (c) shim limitation: autograd API about autograd's own machinery, or
       autograd.numpy API that plain NumPy does not have;
   (d) other: an expected error that was not raised, a result of another
       type or shape, an unexpected exception.

   ``--write-results`` also writes ``tools/autograd_suite/results.md``.

Exit status: 0 when the run completed and no test gave a wrong number, 1 when
one did, 2 when the sdist could not be obtained, 3 when pytest did not run.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SHIM = HERE / "shim"
AUTOGRAD_VERSION = "1.9.1"
SDIST_NAME = f"autograd-{AUTOGRAD_VERSION}.tar.gz"
EXIT_WRONG_NUMBER, EXIT_NO_SDIST, EXIT_NO_RUN = 1, 2, 3

CATEGORIES = {
    "a": "wrong number",
    "b": "tapegrad refused with its clear error",
    "c": "shim limitation (autograd-internal API)",
    "d": "other",
}

#: Tests whose failure is about autograd itself, whatever tapegrad does, with the reason.
#: A test listed here still counts as a failure; the list only names its category.
SHIM_LIMITATIONS = {
    "test_wrappers.py::test_custom_where": (
        "autograd.numpy.where is autograd's own wrapper, which takes condition/x/y as keywords; "
        "NumPy's where takes them positionally only (nothing to differentiate)"
    ),
    "test_wrappers.py::test_custom_where_dtypes": (
        "autograd.numpy.where returns Python scalars (int, float, list) for scalar arguments; "
        "NumPy's where returns arrays (nothing to differentiate)"
    ),
}

#: Assertions of a test's own (not check_grads') that check a type or a property, not a number.
NOT_A_NUMBER = re.compile(
    r"\bdtype\b|\bisrealobj\b|\biscomplexobj\b|\bisinstance\b|\bisbox\b|\.shape\b|__name__|__doc__"
)


# ---------------------------------------------------------------- the sdist
def cache_dir() -> Path:
    env = os.environ.get("TAPEGRAD_AUTOGRAD_SUITE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "tapegrad" / "autograd-suite"


def fetch_sdist(cache: Path, sdist: Optional[Path] = None) -> Path:
    """The sdist's path: given, cached, or downloaded from PyPI with pip."""
    if sdist is not None:
        if not sdist.is_file():
            raise FileNotFoundError(sdist)
        return sdist
    target = cache / SDIST_NAME
    if target.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
               f"autograd=={AUTOGRAD_VERSION}", "-d", tmp, "--quiet", "--disable-pip-version-check"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        got = Path(tmp) / SDIST_NAME
        if proc.returncode != 0 or not got.is_file():
            raise FileNotFoundError(f"pip download of autograd=={AUTOGRAD_VERSION} failed:\n{proc.stderr[-2000:]}")
        shutil.move(str(got), target)
    return target


def extract_tests(sdist: Path, cache: Path) -> Path:
    """Extract the sdist's ``tests/`` (only) into the cache; return the folder that holds ``tests``."""
    root = cache / f"autograd-{AUTOGRAD_VERSION}-tests"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    prefix = f"autograd-{AUTOGRAD_VERSION}/tests/"
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix) and m.isfile()]
        if not members:
            raise FileNotFoundError(f"{sdist} has no {prefix}")
        for m in members:
            m.name = "tests/" + m.name[len(prefix):]
            try:
                tar.extract(m, root, filter="data")
            except TypeError:  # a Python without extraction filters (before 3.11.4)
                tar.extract(m, root)
    # pytest's configuration for this run (autograd's pyproject asks for xdist and coverage):
    # written beside the tests, not among them.
    (root / "pytest.ini").write_text("[pytest]\naddopts =\n")
    return root


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------- running
def run_pytest(root: Path, json_path: Path, tapegrad_src: Path, extra: list, log_path: Path) -> int:
    env = dict(os.environ)
    paths = [str(SHIM), str(HERE), str(tapegrad_src)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["AUTOGRAD_SHIM_DIR"] = str(SHIM)
    env["AUTOGRAD_SUITE_JSON"] = str(json_path)
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", "tests", "-c", "pytest.ini", "--rootdir", str(root),
           "-p", "no:cacheprovider", "-p", "suite_plugin", "-q", "--tb=short", "-W", "ignore::DeprecationWarning",
           *extra]
    with open(log_path, "w") as log:
        return subprocess.run(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT).returncode


# ---------------------------------------------------------------- categories
def _short_id(nodeid: str) -> str:
    return nodeid.split("/", 1)[-1] if nodeid.startswith("tests/") else nodeid


def _base_id(nodeid: str) -> str:
    return re.sub(r"\[.*\]$", "", _short_id(nodeid))


def _first_line(message: str, limit: int = 220) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _refused_function(message: str) -> str:
    m = re.match(r"\s*([\w.]+(?:\.[\w<>]+)*)\s*(\(called at|on a traced|converts)", message)
    if m:
        return m.group(1)
    m = re.search(r"differentiate ([\w.]+)", message)
    if m:
        return m.group(1)
    m = re.match(r"\s*([\w.]+) at ", message)
    return m.group(1) if m else ""


def categorize(test: dict) -> tuple:
    """``(category letter, reason)`` for a failed or errored test."""
    exc = test.get("exception") or {}
    kind, message, typ = exc.get("kind"), exc.get("message", ""), exc.get("type", "")
    frames = exc.get("frames", [])
    last = frames[-1] if frames else {}
    base = _base_id(test["nodeid"])
    if kind == "wrong-derivative":
        return "a", _first_line(message)
    if base in SHIM_LIMITATIONS:
        return "c", SHIM_LIMITATIONS[base]
    if kind == "shim-limitation":
        return "c", _first_line(message)
    if kind == "tapegrad-error":
        fun = _refused_function(message)
        return "b", f"{typ}{' in ' + fun if fun else ''}: {_first_line(message)}"
    if kind == "vspace-mismatch":
        return "d", "result of another type/shape: " + _first_line(message)
    if typ == "Failed" and "DID NOT RAISE" in message:
        return "d", f"autograd raises here, tapegrad computes an answer ({_first_line(message)})"
    if typ == "AssertionError" and last.get("where") == "test":
        source = last.get("source", "")
        if NOT_A_NUMBER.search(source) or NOT_A_NUMBER.search(message):
            return "d", f"test's own assertion on a type or property: {source}"
        return "a", f"test's own assertion on a number failed: {source} ({_first_line(message, 120)})"
    where = last.get("where", "?")
    if where == "tapegrad" and last.get("source", "").startswith("raise"):
        return "b", f"{typ} raised by tapegrad: {_first_line(message)}"
    if where == "shim" and typ in ("AttributeError", "ImportError", "ModuleNotFoundError"):
        return "c", f"{typ}: {_first_line(message)}"
    return "d", f"{typ} in {where} ({last.get('file', '?')}:{last.get('line', '?')}): {_first_line(message)}"


# ---------------------------------------------------------------- reporting
def versions(tapegrad_src: Path) -> dict:
    code = (
        "import json, sys, numpy, scipy, pytest, tapegrad, platform;"
        "print(json.dumps({'python': platform.python_version(), 'numpy': numpy.__version__,"
        "'scipy': scipy.__version__, 'pytest': pytest.__version__, 'tapegrad': tapegrad.__version__,"
        "'tapegrad_path': tapegrad.__file__}))"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tapegrad_src), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    info = json.loads(out.stdout) if out.returncode == 0 else {}
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "src"],
                               capture_output=True, text=True)
        info["git"] = head.stdout.strip() + (" + uncommitted changes in src/" if dirty.stdout.strip() else "")
    except OSError:
        info["git"] = "?"
    if tapegrad_src.resolve() != (REPO / "src").resolve():
        info["git"] = f"the source tree {tapegrad_src} (not this checkout's src)"
    info["machine"] = f"{platform.system()} {platform.machine()}"
    return info


def summarize(data: dict, root: Optional[Path] = None) -> dict:
    tests = data["tests"]
    counts = Counter(t["outcome"] for t in tests)
    failures = []
    for t in tests:
        if t["outcome"] in ("failed", "error"):
            letter, reason = categorize(t)
            for path, short in ((root, ""), (SHIM, "shim/"), (REPO, "")):
                if path is not None:
                    reason = reason.replace(str(path) + os.sep, short)
            failures.append({"nodeid": _short_id(t["nodeid"]), "outcome": t["outcome"], "category": letter,
                             "reason": reason})
    by_category = Counter(f["category"] for f in failures)
    return {"counts": dict(counts), "total": len(tests), "failures": failures, "by_category": dict(by_category)}


def render_text(summary: dict, wall: float) -> str:
    c = summary["counts"]
    lines = [
        f"autograd {AUTOGRAD_VERSION} test suite on tapegrad: {c.get('passed', 0)} passed, "
        f"{c.get('failed', 0)} failed, {c.get('error', 0)} errored, {c.get('skipped', 0)} skipped "
        f"of {summary['total']} ({wall:.0f} s)"
    ]
    wrong = [f for f in summary["failures"] if f["category"] == "a"]
    if wrong:
        lines.append("")
        lines.append("!" * 78)
        lines.append(f"!!! {len(wrong)} WRONG NUMBER(S): a derivative disagrees with finite differences")
        for f in wrong:
            lines.append(f"!!!   {f['nodeid']}: {f['reason']}")
        lines.append("!" * 78)
    for letter, title in CATEGORIES.items():
        group = [f for f in summary["failures"] if f["category"] == letter]
        lines.append("")
        lines.append(f"({letter}) {title}: {len(group)}")
        for f in group:
            lines.append(f"    {f['nodeid']}{' [error]' if f['outcome'] == 'error' else ''}: {f['reason']}")
    return "\n".join(lines)


def render_markdown(summary: dict, wall: float, info: dict, sdist_sha: str) -> str:
    c = summary["counts"]
    out = [
        "# autograd's test suite on tapegrad",
        "",
        "Written by `python tools/autograd_suite/run.py --write-results` (see that file for how the",
        "suite is obtained and run, and `shim/` for how autograd's API maps to tapegrad's).",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- autograd sdist: {AUTOGRAD_VERSION} (sha256 {sdist_sha[:16]}...), tests run unchanged",
        f"- tapegrad: {info.get('tapegrad', '?')} at {info.get('git', '?')}",
        f"- Python {info.get('python', '?')}, NumPy {info.get('numpy', '?')}, SciPy {info.get('scipy', '?')}, "
        f"pytest {info.get('pytest', '?')}, {info.get('machine', '')}",
        f"- wall time of the pytest run: {wall:.0f} s (one process, no xdist)",
        "",
        "| outcome | tests |",
        "| --- | ---: |",
        f"| passed | {c.get('passed', 0)} |",
        f"| failed | {c.get('failed', 0)} |",
        f"| errored | {c.get('error', 0)} |",
        f"| skipped | {c.get('skipped', 0)} |",
        f"| total | {summary['total']} |",
        "",
        "| category of failure | tests |",
        "| --- | ---: |",
    ]
    for letter, title in CATEGORIES.items():
        out.append(f"| ({letter}) {title} | {summary['by_category'].get(letter, 0)} |")
    for letter, title in CATEGORIES.items():
        group = [f for f in summary["failures"] if f["category"] == letter]
        out += ["", f"## ({letter}) {title}: {len(group)}", ""]
        if not group:
            out.append("None.")
        for f in group:
            reason = f["reason"].replace("|", "\\|")
            out.append(f"- `{f['nodeid']}`{' (error)' if f['outcome'] == 'error' else ''}: {reason}")
    out.append("")
    return "\n".join(out)


# ---------------------------------------------------------------- main
def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", type=Path, help="use this autograd sdist instead of the cached or downloaded one")
    parser.add_argument("--cache", type=Path, default=None, help="cache folder (default: %(default)s)")
    parser.add_argument("--tapegrad-src", type=Path, default=REPO / "src",
                        help="the tapegrad source tree to test (default: this checkout's src)")
    parser.add_argument("--json", type=Path, help="also write the summary as JSON here")
    parser.add_argument("--write-results", action="store_true", help="write tools/autograd_suite/results.md")
    parser.add_argument("--results", type=Path, default=HERE / "results.md", help=argparse.SUPPRESS)
    parser.add_argument("-k", dest="keyword", help="pytest -k expression (a partial run)")
    args = parser.parse_args(argv)

    cache = args.cache or cache_dir()
    try:
        sdist = fetch_sdist(cache, args.sdist)
    except (FileNotFoundError, OSError) as exc:
        print(f"cannot obtain the autograd {AUTOGRAD_VERSION} sdist: {exc}", file=sys.stderr)
        return EXIT_NO_SDIST
    root = extract_tests(sdist, cache)
    raw_json = root / "outcomes.json"
    log = root / "pytest.log"
    extra = ["-k", args.keyword] if args.keyword else []
    start = time.perf_counter()
    code = run_pytest(root, raw_json, args.tapegrad_src.resolve(), extra, log)
    wall = time.perf_counter() - start
    if code not in (0, 1) or not raw_json.is_file():
        print(f"pytest did not run the suite (exit {code}); its log: {log}", file=sys.stderr)
        print(log.read_text()[-3000:], file=sys.stderr)
        return EXIT_NO_RUN
    data = json.loads(raw_json.read_text())
    summary = summarize(data, root)
    summary["wall_s"] = wall
    print(render_text(summary, wall))
    print(f"\npytest log: {log}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    if args.write_results:
        info = versions(args.tapegrad_src.resolve())
        args.results.write_text(render_markdown(summary, wall, info, sha256(sdist)))
        print(f"wrote {args.results}")
    return EXIT_WRONG_NUMBER if summary["by_category"].get("a") else 0


if __name__ == "__main__":
    sys.exit(main())
