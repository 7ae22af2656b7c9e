"""Time W1-W14 (workloads.py): tapegrad's derivative and the plain NumPy forward pass.

``track_ratio_to_numpy`` measures both in alternation inside one benchmark
and reports their ratio, the quantity the performance targets are stated in.
``peakmem_tapegrad`` is asv's peak resident memory of one derivative call.
"""

import compare
import workloads as W


class Workloads:
    """W1-W6 (tuned for), W7-W11 (ode_nbody, gp_nlml, hvp_large, grid_hessian, per_example), W12-W14 (issue 24)."""

    params = [list(W.WORKLOADS)]
    param_names = ["workload"]
    timeout = 300

    def setup(self, key):
        self.workload = W.get(key)
        self.args = self.workload.make_args()
        self.derivative = W.tapegrad_derivative(self.workload)

    def time_numpy_forward(self, key):
        self.workload.forward(self.args)

    def time_tapegrad(self, key):
        self.derivative(*self.args)

    def peakmem_tapegrad(self, key):
        self.derivative(*self.args)

    def track_ratio_to_numpy(self, key):
        forward, derivative = compare.paired_samples(
            [lambda: self.workload.forward(self.args), lambda: self.derivative(*self.args)],
            repeat=7, min_time=0.02, budget=10.0,
        )
        return compare.statistics.median(derivative) / compare.statistics.median(forward)

    track_ratio_to_numpy.unit = "x numpy forward"
