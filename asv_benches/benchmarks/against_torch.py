"""tapegrad against PyTorch's fastest eager API in the same process (issue 24, part 2).

``track_ratio_to_torch`` times tapegrad's derivative and every PyTorch API that
compare.py knows for the workload's kind, in alternation inside one benchmark, and
reports tapegrad's median over the fastest PyTorch median (issue 24's targets: W2 and
W11 <= 0.8, the GP likelihoods W12/W13 and the HVP W14 <= 1.0).  PyTorch is not a
dependency: without it the benchmark is skipped.  ``TAPEGRAD_BENCH_CLOCK=cpu`` times
CPU seconds instead of the wall clock (steadier on a busy machine, with one thread).

``ReuseAgainstTorch`` (issue 31) adds ``reuse=True`` for W7 and W11; the same table from
the command line, one process: ``python asv_benches/benchmarks/against_torch.py --rounds 9``.
"""

import gc
import os
import statistics
import sys
import time

if __name__ == "__main__":  # run as a script: the workloads live one folder up
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    _THREADS = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--threads=")]
    if _THREADS and int(_THREADS[0]) > 0:  # before NumPy is imported
        for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "TAPEGRAD_NUM_THREADS",
                     "TAPEGRAD_BENCH_THREADS"):
            os.environ[_var] = _THREADS[0]

import compare
import workloads as W


class AgainstTorch:
    params = [["W2", "W8", "W11", "W12", "W13", "W14"]]
    param_names = ["workload"]
    timeout = 600
    number = 1
    repeat = 1

    def setup(self, key):
        try:
            torch_adapter = compare.Torch()
        except ImportError:
            raise NotImplementedError("PyTorch is not installed")
        w = W.get(key)
        args = w.make_args()
        self.calls = []
        for adapter in (compare.Tapegrad(), torch_adapter):
            for api in adapter.apis.get(w.kind, []):
                call, _ = adapter.build(api, w, args)
                call()
                self.calls.append(call)

    def track_ratio_to_torch(self, key):
        clock = time.process_time if os.environ.get("TAPEGRAD_BENCH_CLOCK") == "cpu" else time.perf_counter
        numbers = [compare.autorange(call, 0.05) for call in self.calls]
        samples = [[] for _ in self.calls]
        for r in range(5):
            order = range(len(self.calls)) if r % 2 == 0 else reversed(range(len(self.calls)))
            for k in order:
                self.calls[k]()
                start = clock()
                for _ in range(numbers[k]):
                    self.calls[k]()
                samples[k].append((clock() - start) / numbers[k])
        medians = [statistics.median(s) for s in samples]
        return medians[0] / min(medians[1:])

    track_ratio_to_torch.unit = "x torch"


class ReuseAgainstTorch:
    """Issue 31: tapegrad eager and ``reuse=True`` against PyTorch's fastest eager API, one process.

    W7 (200 RK4 steps) and W11 (per-example gradients); target <= 0.5 for both.
    Entries alternate within each round (order reversed every other round), the
    garbage collector stays on; each ratio is the median over rounds of the round's
    tapegrad sample over the fastest PyTorch sample of that round.
    """

    params = [["W7", "W11"]]
    param_names = ["workload"]
    timeout = 900
    number = 1
    repeat = 1

    def setup(self, key):
        try:
            self.entries = reuse_entries(key)
        except ImportError:
            raise NotImplementedError("PyTorch is not installed")

    def _ratios(self):
        if not hasattr(self, "_samples"):
            self._samples = alternate([call for _, call in self.entries], rounds=5, min_time=0.05)
        return self._samples

    def track_eager_ratio_to_torch(self, key):
        return round_ratios(self.entries, self._ratios(), 0)[0]

    def track_reuse_ratio_to_torch(self, key):
        return round_ratios(self.entries, self._ratios(), 1)[0]

    track_eager_ratio_to_torch.unit = "x torch"
    track_reuse_ratio_to_torch.unit = "x torch"


def reuse_entries(key):
    """[(label, call)]: tapegrad eager, tapegrad reuse=True, then every PyTorch API; results checked."""
    torch_adapter = compare.Torch()
    tg_adapter = compare.Tapegrad()
    w = W.get(key)
    args = w.make_args()
    entries, reference = [], None
    apis = [(tg_adapter, tg_adapter.apis[w.kind][0]), (tg_adapter, tg_adapter.reuse_apis[w.kind][0])]
    apis += [(torch_adapter, api) for api in torch_adapter.apis.get(w.kind, [])]
    for adapter, api in apis:
        call, to_np = adapter.build(api, w, args)
        result = to_np(call())  # warm-up; for reuse=True this call records
        if adapter is tg_adapter:
            result = to_np(call())  # ... and this one replays
        if reference is None:
            reference = result
        _, rel = compare._difference(result, reference)
        if rel > compare.REL_TOL:
            raise AssertionError(f"{key} {adapter.name}[{api}]: relative difference {rel:.1e} from tapegrad eager")
        entries.append((f"{adapter.name}[{api}]", call))
    return entries


def alternate(calls, rounds, min_time, clock=time.perf_counter):
    """Seconds per call, ``rounds`` samples of each call, order reversed every other round; GC on."""
    gc.enable()
    numbers = [compare.autorange(call, min_time) for call in calls]
    samples = [[] for _ in calls]
    for r in range(rounds):
        for k in (range(len(calls)) if r % 2 == 0 else reversed(range(len(calls)))):
            calls[k]()  # untimed: switching thread pools costs a spin-down that belongs to neither
            start = clock()
            for _ in range(numbers[k]):
                calls[k]()
            samples[k].append((clock() - start) / numbers[k])
    return samples


def round_ratios(entries, samples, k):
    """(median, min, max) over rounds of entry ``k``'s sample / the fastest PyTorch sample of that round."""
    torch_ks = [j for j, (label, _) in enumerate(entries) if label.startswith("torch")]
    ratios = [samples[k][r] / min(samples[j][r] for j in torch_ks) for r in range(len(samples[k]))]
    return statistics.median(ratios), min(ratios), max(ratios)


def main(argv=None):
    """``python asv_benches/benchmarks/against_torch.py --rounds 9``: the ReuseAgainstTorch table."""
    import argparse

    import numpy as np

    p = argparse.ArgumentParser(description=ReuseAgainstTorch.__doc__.split("\n")[0])
    p.add_argument("--workloads", default="W7,W11")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--min-time", type=float, default=0.2)
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    p.add_argument("--threads", type=int, default=0, help="--threads=N: BLAS/OpenMP threads (0: library defaults)")
    opts = p.parse_args(argv)
    if opts.threads > 0 and os.environ.get("TAPEGRAD_BENCH_THREADS") != str(opts.threads):
        p.error("write --threads=N (it must be read before NumPy is imported)")
    clock = time.process_time if opts.clock == "cpu" else time.perf_counter
    m = compare.machine_info()
    import torch

    print(f"# {m['date']} UTC  {m['cpu']} ({m['cores']} cores)  Python {m['python']}  NumPy {np.__version__}  "
          f"tapegrad {compare.Tapegrad().version}  torch {torch.__version__} ({torch.get_num_threads()} threads)")
    print(f"# one process, GC on, {opts.rounds} alternating rounds, >= {opts.min_time} s per sample, "
          f"{opts.clock} clock; load average at the start {'/'.join(f'{v:.2f}' for v in os.getloadavg())}")
    print("| workload | entry | median | min-max | / torch fastest per round: median (min-max) |")
    print("|---|---|---|---|---|")
    for key in opts.workloads.split(","):
        entries = reuse_entries(key)
        samples = alternate([call for _, call in entries], opts.rounds, opts.min_time, clock)
        for k, ((label, _), s) in enumerate(zip(entries, samples)):
            med, lo, hi = round_ratios(entries, samples, k)
            print(f"| {key} | {label} | {compare._fmt_time(statistics.median(s))} | "
                  f"{compare._fmt_time(min(s))}-{compare._fmt_time(max(s))} | {med:.2f}x ({lo:.2f}-{hi:.2f}) |",
                  flush=True)
    print(f"# load average at the end {'/'.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
