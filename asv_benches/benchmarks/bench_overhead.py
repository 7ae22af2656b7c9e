"""Per-call cost of tracing, on tiny (10) and large (1e6 element) arrays.

Each timed method makes ``k`` calls (``workloads.op_calls``: 100 on 10
elements, 5 on 1e6) so that creating the tape is amortised: divide the
reported time by ``k`` for one call.  ``python asv_benches/compare.py
--overhead`` prints the same quantities already divided, in microseconds.
"""

import numpy as np
import tapegrad as tg

import workloads as W


class PerOp:
    """One op (a ufunc, an operator, a NumPy function, indexing): plain, traced, and its gradient."""

    params = [list(W.OPS), list(W.OP_SIZES)]
    param_names = ["op", "size"]

    def setup(self, op, size):
        self.x, self.y = W.op_args(size)
        self.k = W.op_calls(size)
        self.fn = W.OPS[op]
        self.grad = tg.grad(lambda v: np.sum(self.fn(v, self.y)))

    def time_numpy(self, op, size):
        W.run_ops(self.fn, self.x, self.y, self.k)

    def time_traced_forward(self, op, size):
        with tg.GradientTape() as tape:
            W.run_ops(self.fn, tape.watch(self.x), self.y, self.k)

    def time_grad_single_call(self, op, size):
        # Not divided by k: one tg.grad of sum(op(x)), fixed costs of a gradient included.
        self.grad(self.x)


class Chain:
    """``k`` chained calls then a sum: the traced forward and the gradient (backward per node)."""

    params = [list(W.CHAIN_OPS), list(W.OP_SIZES)]
    param_names = ["op", "size"]

    def setup(self, op, size):
        self.x, self.y = W.op_args(size)
        self.k = W.op_calls(size)
        step = W.CHAIN_OPS[op]
        self.fun = lambda v: W.chain(step, v, self.y, self.k)
        self.grad = tg.grad(self.fun)

    def time_numpy(self, op, size):
        self.fun(self.x)

    def time_traced_forward(self, op, size):
        with tg.GradientTape() as tape:
            self.fun(tape.watch(self.x))

    def time_grad(self, op, size):
        self.grad(self.x)
