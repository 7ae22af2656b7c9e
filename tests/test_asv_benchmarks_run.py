"""Every asv benchmark (asv_benches/benchmarks) runs once, for every parameter combination.

This is the smoke run that keeps the suite from rotting: no timing is
asserted (timings are asv's job), only that each ``time_*``, ``peakmem_*``
and ``track_*`` method can set up and execute.  ``track_*`` methods must
return a finite number.
"""

import importlib
import itertools
import math
import os
import sys

import pytest

BENCH_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "asv_benches")
PREFIXES = ("time_", "peakmem_", "track_")


def _modules():
    names = sorted(f[:-3] for f in os.listdir(os.path.join(BENCH_DIR, "benchmarks")) if f.endswith(".py") and f != "__init__.py")
    return names


def _cases():
    if BENCH_DIR not in sys.path:
        sys.path.insert(0, BENCH_DIR)
    cases = []
    for name in _modules():
        module = importlib.import_module(f"benchmarks.{name}")
        for cls_name, cls in vars(module).items():
            if not isinstance(cls, type) or cls.__module__ != module.__name__:
                continue
            methods = sorted(m for m in vars(cls) if m.startswith(PREFIXES))
            if not methods:
                continue
            params = getattr(cls, "params", None)
            if params is None:
                combos = [()]
            else:
                grids = params if params and isinstance(params[0], (list, tuple)) else [params]
                combos = list(itertools.product(*grids))
            for combo in combos:
                ident = f"{name}.{cls_name}" + (f"[{','.join(map(str, combo))}]" if combo else "")
                cases.append(pytest.param(cls, combo, methods, id=ident))
    return cases


def test_benchmark_modules_are_found():
    assert {"bench_workloads", "bench_overhead", "bench_memory", "products", "checkpoint"} <= set(_modules())


@pytest.mark.parametrize("cls,combo,methods", _cases())
def test_benchmark_runs_once(cls, combo, methods):
    bench = cls()
    if hasattr(bench, "setup"):
        try:
            bench.setup(*combo)
        except NotImplementedError as exc:  # asv's way to skip (an optional peer is not installed)
            pytest.skip(str(exc))
    try:
        for method in methods:
            result = getattr(bench, method)(*combo)
            if method.startswith("track_"):
                assert isinstance(result, (int, float)) and math.isfinite(result), (method, result)
    finally:
        if hasattr(bench, "teardown"):
            bench.teardown(*combo)
