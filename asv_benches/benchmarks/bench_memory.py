"""Peak memory: gradient vs forward, chunked vs unchunked Jacobian, a deep chain.

Two measures per scenario (``workloads.memory_scenario_names``):

* ``peakmem_call`` is asv's process peak RSS, interpreter and setup data
  included; subtract ``peakmem_setup_only`` (same setup, no call) for the
  call's own share.
* ``track_traced_peak`` is tracemalloc's peak of the call alone (NumPy
  buffers included), and ``track_peak_ratio`` divides it by the scenario's
  reference (e.g. the chunked Jacobian by the unchunked one; the target is
  about ``chunk_size / m``).

The deep-chain scenarios are the hook for checkpointing: a
"deep chain grad (checkpoint)" scenario appears as soon as
``tapegrad.checkpoint`` exists (see ``workloads.checkpoint_block``).
"""

import workloads as W

SCENARIOS = W.memory_scenario_names()


class PeakMemory:
    params = [SCENARIOS]
    param_names = ["scenario"]
    timeout = 300

    def setup(self, name):
        self.fn, self.refs, _ = W.memory_scenario(name)

    def peakmem_setup_only(self, name):
        pass

    def peakmem_call(self, name):
        self.fn()

    def track_traced_peak(self, name):
        return W.traced_peak(self.fn)

    track_traced_peak.unit = "bytes"


class PeakRatio:
    params = [[n for n in SCENARIOS if W.memory_references(n)]]
    param_names = ["scenario"]
    timeout = 300

    def track_peak_ratio(self, name):
        fn, refs, _ = W.memory_scenario(name)
        peak = W.traced_peak(fn)
        del fn
        return peak / W.traced_peak(W.memory_scenario(refs[0])[0])

    track_peak_ratio.unit = "x reference"
