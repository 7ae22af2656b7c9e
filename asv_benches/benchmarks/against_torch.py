"""tapegrad against PyTorch's fastest eager API in the same process (issue 24, part 2).

``track_ratio_to_torch`` times tapegrad's derivative and every PyTorch API that
compare.py knows for the workload's kind, in alternation inside one benchmark, and
reports tapegrad's median over the fastest PyTorch median (issue 24's targets: W2 and
W11 <= 0.8, the GP likelihoods W12/W13 and the HVP W14 <= 1.0).  PyTorch is not a
dependency: without it the benchmark is skipped.  ``TAPEGRAD_BENCH_CLOCK=cpu`` times
CPU seconds instead of the wall clock (steadier on a busy machine, with one thread).
"""

import os
import statistics
import time

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
