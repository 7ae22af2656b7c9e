"""tapegrad against PyTorch in one process: medians of interleaved runs, same data.

Usage (from the repository root)::

    python asv_benches/same_process.py --workloads W2,W11,W12,W14 --rounds 7
    python asv_benches/same_process.py --threads=1     # one thread each: steadier on a busy machine

compare.py runs each library in its own subprocess; an outside harness (issue 24)
timed both in the *same* process instead, where PyTorch's OpenMP pool and NumPy's
BLAS pool share the cores.  This script does that: for each workload it builds
tapegrad's derivative and each PyTorch API compare.py knows for the workload's kind,
checks that the results agree, and then takes ``--rounds`` rounds; in every round
each entry is sampled once (its calls looped for at least ``--min-time`` seconds),
in an order that alternates from round to round.  It prints the median of every
entry and, per round, the ratio of tapegrad's sample to PyTorch's fastest API's
sample of that round (the median and the spread of those ratios).  ``--clock cpu`` times
the process's CPU seconds instead of the wall clock: on a machine with more runnable
processes than cores, the wall clock mostly measures the scheduler.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import List

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

if __name__ == "__main__":
    # compare.limit_threads must run before NumPy is imported, and compare imports it.
    _THREADS = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--threads=")]
    if _THREADS and int(_THREADS[0]) > 0:
        for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "TAPEGRAD_NUM_THREADS",
                     "TAPEGRAD_BENCH_THREADS"):
            os.environ[_var] = _THREADS[0]

import compare  # noqa: E402


def main(argv: List[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workloads", default="W2,W11,W12,W13,W14")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--min-time", type=float, default=0.2)
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="cpu: this process's CPU time (time.process_time) instead of the wall clock; with "
                        "--threads=1 it is the work done, whatever the neighbours make the scheduler do")
    p.add_argument("--threads", type=int, default=0,
                   help="--threads=N: BLAS/OpenMP threads of both libraries (0: their defaults)")
    opts = p.parse_args(argv)

    import time

    import numpy as np

    clock = time.process_time if opts.clock == "cpu" else time.perf_counter

    def time_calls(fn, number):
        start = clock()
        for _ in range(number):
            fn()
        return (clock() - start) / number

    W = compare.W
    tg_adapter, torch_adapter = compare.Tapegrad(), compare.Torch()
    print(f"# tapegrad {tg_adapter.version}, torch {torch_adapter.version}, NumPy {np.__version__}, "
          f"torch threads {torch_adapter.torch.get_num_threads()}, load average {os.getloadavg()[0]:.2f} "
          f"at the start, {opts.clock} clock", flush=True)
    for key in opts.workloads.split(","):
        w = W.get(key)
        args = w.make_args()
        entries = []
        for adapter in (tg_adapter, torch_adapter):
            for api in adapter.apis.get(w.kind, []):
                call, to_np = adapter.build(api, w, args)
                entries.append((f"{adapter.name}[{api}]", call, to_np(call())))
        reference = entries[0][2]
        for name, _, result in entries[1:]:
            _, rel = compare._difference(result, reference)
            if rel > compare.REL_TOL:
                print(f"{key} {name}: MISMATCH (relative difference {rel:.1e})")
                return 1
        numbers = [compare.autorange(call, opts.min_time) for _, call, _ in entries]
        samples: List[List[float]] = [[] for _ in entries]
        order = list(range(len(entries)))
        for r in range(opts.rounds):
            for k in (order if r % 2 == 0 else order[::-1]):
                entries[k][1]()  # untimed: switching thread pools costs a spin-down that belongs to neither
                samples[k].append(time_calls(entries[k][1], numbers[k]))
        ratios = [s_tg / min(samples[k][r] for k in range(1, len(entries)))
                  for r, s_tg in enumerate(samples[0])]
        meds = ", ".join(f"{name} {compare._fmt_time(statistics.median(s))}"
                         for (name, _, _), s in zip(entries, samples))
        print(f"{key}: {meds}; tapegrad / torch best, per round: median {statistics.median(ratios):.2f} "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f}); load {os.getloadavg()[0]:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
