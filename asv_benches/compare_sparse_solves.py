"""The gradient of a PDE-constrained objective through ``scipy.sparse.linalg.spsolve``, side by side with the plain solve.

Usage (from the repository root)::

    python asv_benches/compare_sparse_solves.py                   # n = 316 (10^5 unknowns), both assemblies
    python asv_benches/compare_sparse_solves.py --n 1000 --rounds 3   # 10^6 unknowns
    python asv_benches/compare_sparse_solves.py --json solves.json

The problem: ``-div(k grad u) = 1`` on the unit square, ``u = 0`` on the boundary,
five-point finite volumes on an ``n x n`` grid of cells with one conductivity ``k``
per cell (edge conductances the mean of the two cells'), and the objective
``sum((u - u_obs)**2)`` with ``u = spsolve(A(k), f)``.  ``A(k)`` is assembled from
``k`` in two ways, both plain NumPy and ``scipy.sparse``:

``diags``
    ``sp.diags_array`` of the five diagonals (no duplicate entries);
``coo``
    ``sp.coo_array((values, (rows, cols))).tocsr()`` with one entry per edge end
    (duplicates summed by SciPy), the finite-element way.

``plain`` is the objective on NumPy arrays (SciPy's own ``spsolve``: one SuperLU
factorisation); ``gradient`` is ``tapegrad.value_and_grad`` of the same function,
which factorises once with ``splu``, keeps the factorisation with the recorded
node and solves the adjoint equation with it (``trans='T'``).

Timing: in each of ``--rounds`` rounds the plain objective and the gradient are
called once each, in an order that alternates, with the garbage collector on;
the ratio of every round is reported (median and min-max).  Memory: each of the
two runs once in a fresh subprocess, which reports its peak resident memory above
what it held before the call (Linux's ``VmHWM``, reset after setup); the ratio is
gradient over plain.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, Tuple

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

ASSEMBLIES = ("diags", "coo")


# ---------------------------------------------------------------------- the problem
def _boundary_faces(n: int) -> np.ndarray:
    """For each cell, how many of its faces lie on the boundary (0 to 2)."""
    faces = np.zeros((n, n))
    faces[0] += 1
    faces[-1] += 1
    faces[:, 0] += 1
    faces[:, -1] += 1
    return faces


def assemble_diags(k: Any, n: int) -> Any:
    """``A(k)`` from its five diagonals (``k`` has ``n * n`` entries, row-major cells)."""
    K = np.reshape(k, (n, n)) * float((n + 1) ** 2)
    across = 0.5 * (K[:, :-1] + K[:, 1:])  # between horizontal neighbours
    down = 0.5 * (K[:-1, :] + K[1:, :])  # between vertical neighbours
    zero_column, zero_row = np.zeros((n, 1)), np.zeros((1, n))
    main = (np.concatenate([across, zero_column], 1) + np.concatenate([zero_column, across], 1)
            + np.concatenate([down, zero_row], 0) + np.concatenate([zero_row, down], 0)
            + 2 * K * _boundary_faces(n))  # a boundary face: half a cell to u = 0
    side = -np.reshape(np.concatenate([across, zero_column], 1), (-1,))[:-1]
    vertical = -np.reshape(down, (-1,))
    return sp.diags_array([np.reshape(main, (-1,)), side, side, vertical, vertical],
                          offsets=[0, 1, -1, n, -n], format="csr")


_COO_PATTERNS: Dict[int, Tuple[np.ndarray, ...]] = {}


def _coo_pattern(n: int) -> Tuple[np.ndarray, ...]:
    if n not in _COO_PATTERNS:
        cells = np.arange(n * n).reshape(n, n)
        first = np.concatenate([cells[:, :-1].ravel(), cells[:-1, :].ravel()])
        second = np.concatenate([cells[:, 1:].ravel(), cells[1:, :].ravel()])
        every = np.arange(n * n)
        rows = np.concatenate([first, second, first, second, every])
        cols = np.concatenate([first, second, second, first, every])
        _COO_PATTERNS[n] = (first, second, rows, cols, 2 * _boundary_faces(n).ravel())
    return _COO_PATTERNS[n]


def assemble_coo(k: Any, n: int) -> Any:
    """``A(k)`` from one entry per edge end, duplicates summed by SciPy (``coo_array(...).tocsr()``)."""
    first, second, rows, cols, boundary = _coo_pattern(n)
    scale = float((n + 1) ** 2)
    c = 0.5 * (k[first] + k[second]) * scale
    values = np.concatenate([c, c, -c, -c, k * boundary * scale])
    return sp.coo_array((values, (rows, cols)), shape=(n * n, n * n)).tocsr()


ASSEMBLE: Dict[str, Callable[[Any, int], Any]] = {"diags": assemble_diags, "coo": assemble_coo}


def objective(k: Any, n: int, f: np.ndarray, u_obs: np.ndarray, assembly: str = "diags") -> Any:
    """``sum((u - u_obs)**2)``, ``u = spsolve(A(k), f)``: plain NumPy and SciPy."""
    u = spla.spsolve(ASSEMBLE[assembly](k, n), f)
    return np.sum((u - u_obs) ** 2)


def make_problem(n: int, seed: int = 0) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(k, f, u_obs)``: a rough conductivity field, a unit source, smooth synthetic observations (no solve)."""
    rng = np.random.default_rng(seed)
    k = 1.0 + 0.5 * rng.uniform(size=n * n)
    x = (np.arange(n) + 0.5) / n
    u_obs = 0.06 * np.outer(np.sin(np.pi * x), np.sin(np.pi * x)).ravel()
    return k, np.ones(n * n), u_obs


def gradient_function() -> Callable[..., Any]:
    import tapegrad as tg

    return tg.value_and_grad(objective)


# ---------------------------------------------------------------------- measuring
def time_rounds(n: int, assembly: str, rounds: int) -> Dict[str, Any]:
    k, f, u_obs = make_problem(n)
    grad = gradient_function()
    grad(k, n, f, u_obs, assembly)  # warm-up: imports, the door's rule modules
    objective(k, n, f, u_obs, assembly)
    plain, gradient, ratios = [], [], []
    for r in range(rounds):
        order = ("plain", "gradient") if r % 2 == 0 else ("gradient", "plain")
        sample = {}
        for which in order:
            start = time.perf_counter()
            if which == "plain":
                objective(k, n, f, u_obs, assembly)
            else:
                grad(k, n, f, u_obs, assembly)
            sample[which] = time.perf_counter() - start
        plain.append(sample["plain"])
        gradient.append(sample["gradient"])
        ratios.append(sample["gradient"] / sample["plain"])
    return {"plain_s": plain, "gradient_s": gradient, "ratio": ratios}


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")  # resets VmHWM to the current resident size
        return True
    except OSError:
        return False


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


def peak_above_start(n: int, assembly: str, which: str) -> float:
    """Peak resident memory (MiB) of one call above the resident memory just before it (this process)."""
    k, f, u_obs = make_problem(n)
    call = gradient_function() if which == "gradient" else objective
    small_k, small_f, small_obs = make_problem(4)
    call(small_k, 4, small_f, small_obs, assembly)  # imports (the door's rule modules) outside the measured call
    gc.collect()
    if not _reset_peak():
        raise RuntimeError("cannot reset the peak resident memory (needs Linux /proc/self/clear_refs)")
    before = _status_kib("VmRSS")
    call(k, n, f, u_obs, assembly)
    return (_status_kib("VmHWM") - before) / 1024


def peak_in_subprocess(n: int, assembly: str, which: str) -> float:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--peak", which, "--n", str(n),
                          "--assemblies", assembly], check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=316, help="cells per side (n * n unknowns)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--assemblies", default=",".join(ASSEMBLIES))
    parser.add_argument("--json", default=None)
    parser.add_argument("--peak", choices=("plain", "gradient"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    assemblies = args.assemblies.split(",")
    if args.peak:
        print(peak_above_start(args.n, assemblies[0], args.peak))
        return 0
    results = {}
    print(f"2-D Poisson, n = {args.n} ({args.n * args.n} unknowns), {args.rounds} rounds, GC on")
    print(f"{'assembly':9s} {'plain s':>16s} {'gradient s':>16s} {'ratio':>22s} {'peak MiB plain':>15s} "
          f"{'gradient':>9s} {'ratio':>6s}")
    for assembly in assemblies:
        timing = time_rounds(args.n, assembly, args.rounds)
        peak_plain = peak_in_subprocess(args.n, assembly, "plain")
        peak_gradient = peak_in_subprocess(args.n, assembly, "gradient")
        timing.update(peak_plain_mib=peak_plain, peak_gradient_mib=peak_gradient)
        results[assembly] = timing
        r = timing["ratio"]
        print(f"{assembly:9s} {statistics.median(timing['plain_s']):16.3f} "
              f"{statistics.median(timing['gradient_s']):16.3f} "
              f"{statistics.median(r):8.2f} ({min(r):.2f}-{max(r):.2f})    {peak_plain:15.0f} {peak_gradient:9.0f} "
              f"{peak_gradient / peak_plain:6.2f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"n": args.n, "rounds": args.rounds, "results": results}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
