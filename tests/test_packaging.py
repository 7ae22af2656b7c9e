"""What the package declares: its version, its supported range, its type hints.

The supported range is written in three places (``pyproject.toml``'s
``requires-python`` and ``numpy`` pin, ``.ci/oldest.txt`` which CI installs for
its oldest leg, and README's "Supported versions"); these tests keep them one
range, and fail when the suite runs on a Python or NumPy outside it.
"""

import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import numpy as np

import tapegrad

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _release(version):
    """``"2.2.0"`` -> ``(2, 2, 0)``; pre-release and local parts are cut off."""
    return tuple(int(p) for p in re.match(r"\d+(\.\d+)*", version).group(0).split("."))


def _lower_bound(requirement):
    """``"numpy>=2.2"`` -> ``(2, 2)``."""
    return _release(re.search(r">=\s*([\d.]+)", requirement).group(1))


def _oldest_pins():
    pins = {}
    for line in (ROOT / ".ci" / "oldest.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.strip()] = _release(version.strip())
    return pins


def _declared(name):
    """The ``>=`` bound of ``name`` among the dependencies and the ``scipy`` extra."""
    project = PYPROJECT["project"]
    requirements = project["dependencies"] + project["optional-dependencies"]["scipy"]
    (requirement,) = [r for r in requirements if re.match(rf"{name}\b", r)]
    return _lower_bound(requirement)


def test_version_comes_from_the_package_metadata():
    assert tapegrad.__version__ == importlib.metadata.version("tapegrad") == PYPROJECT["project"]["version"]
    assert tapegrad._metadata_version("no-such-distribution-tapegrad") == "0+unknown"


def test_the_running_python_and_numpy_are_inside_the_declared_range():
    assert sys.version_info[:2] >= _lower_bound(PYPROJECT["project"]["requires-python"])
    assert _release(np.__version__)[:2] >= _declared("numpy")
    import scipy

    assert _release(scipy.__version__)[:2] >= _declared("scipy")


def test_ci_pins_the_oldest_declared_releases():
    pins = _oldest_pins()
    assert pins["numpy"][:2] == _declared("numpy") and pins["scipy"][:2] == _declared("scipy")


def test_readme_states_the_declared_range():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Supported versions", 1)[1].split("\n## ", 1)[0]
    python = ".".join(map(str, _lower_bound(PYPROJECT["project"]["requires-python"])))
    numpy_ = ".".join(map(str, _declared("numpy")))
    scipy_ = ".".join(map(str, _declared("scipy")))
    assert f"Python >= {python}" in section and f"NumPy >= {numpy_}" in section and f"SciPy >= {scipy_}" in section


def test_type_hints_ship_with_the_package():
    # PEP 561: the marker sits in the package (installed from package-data in pyproject.toml).
    assert (Path(tapegrad.__file__).parent / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["tapegrad"]
    assert tapegrad.grad.__annotations__  # the public API carries hints for type checkers to read


#: Issue 31: the core (tracer, tape, dispatch, registry, backward, requests, banded) stays small;
#: fast paths and optional machinery live in modules of their own.
CORE_MODULES = ("tracer", "tape", "dispatch", "registry", "backward", "requests", "banded")
CORE_LINES = 3400


def test_the_core_stays_under_its_line_budget():
    src = Path(tapegrad.__file__).parent
    lines = {name: len((src / f"{name}.py").read_text().splitlines()) for name in CORE_MODULES}
    assert sum(lines.values()) < CORE_LINES, f"the core has {sum(lines.values())} lines: {lines}"
