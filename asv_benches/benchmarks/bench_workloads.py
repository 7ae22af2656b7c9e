"""Time W1-W6 (workloads.py): tapegrad's derivative and the plain NumPy forward pass.

``track_ratio_to_numpy`` measures both in alternation inside one benchmark
and reports their ratio, the quantity the performance targets are stated in.
"""

import tapegrad as tg

import compare
import workloads as W

TRANSFORMS = {"grad": tg.grad, "jacobian": tg.jacobian, "hessian": tg.hessian}


class Workloads:
    """W1 overhead, W2 mlp, W3 elementwise_large, W4 jacobian, W5 hessian, W6 rosen_hessian."""

    params = [list(W.WORKLOADS)]
    param_names = ["workload"]
    timeout = 300

    def setup(self, key):
        self.workload = W.get(key)
        self.args = self.workload.make_args()
        self.derivative = TRANSFORMS[self.workload.kind](self.workload.fun)

    def time_numpy_forward(self, key):
        self.workload.fun(*self.args)

    def time_tapegrad(self, key):
        self.derivative(*self.args)

    def track_ratio_to_numpy(self, key):
        forward, derivative = compare.paired_samples(
            [lambda: self.workload.fun(*self.args), lambda: self.derivative(*self.args)],
            repeat=7, min_time=0.02, budget=10.0,
        )
        return compare.statistics.median(derivative) / compare.statistics.median(forward)

    track_ratio_to_numpy.unit = "x numpy forward"
