"""Forward-mode and product costs: jvp, hvp and per-example gradients against a gradient.

Rosenbrock in n = 10 000 dimensions for the products (an hvp should cost a
small multiple of a gradient, never the Hessian), and a logistic loss over a
batch of 512 examples for per-example gradients (one sweep, not a loop).
"""

import numpy as np

import tapegrad as tg

N = 10_000


def _rosen(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def _per_example_loss(w, X, y):
    return np.logaddexp(0.0, -y * (X @ w))


class Products:
    timeout = 120

    def setup(self):
        rng = np.random.default_rng(0)
        self.x = rng.uniform(-1.0, 1.0, N)
        self.v = rng.standard_normal(N)
        self.grad = tg.grad(_rosen)
        self.hvp = tg.hvp(_rosen)
        self.X = rng.standard_normal((512, 30))
        self.y = np.sign(rng.standard_normal(512))
        self.w = rng.standard_normal(30) * 0.1

    def time_grad(self):
        self.grad(self.x)

    def time_hvp(self):
        self.hvp(self.x, self.v)

    def time_jvp(self):
        tg.jvp(_rosen, (self.x,), (self.v,))

    def time_per_example_gradients(self):
        # Rows of the Jacobian of the per-example losses: one batched sweep.
        tg.jacobian(_per_example_loss)(self.w, self.X, self.y)

    def time_per_example_gradients_loop(self):
        for i in range(self.X.shape[0]):
            tg.grad(_per_example_loss)(self.w, self.X[i : i + 1], self.y[i : i + 1])


class StructuredHessians:
    """Hessians whose sweep can stay banded (tapegrad.banded) next to one that cannot.

    Rosenbrock's Hessian (n = 1000) by reverse over reverse and by forward over
    reverse: the batch of basis cotangents stays three diagonals.  The same n
    with a dense coupling (``x @ A @ x``) shows the cost when it cannot.
    """

    timeout = 120

    def setup(self):
        rng = np.random.default_rng(1)
        self.x = rng.uniform(-1.0, 1.0, 1000)
        self.A = rng.standard_normal((1000, 1000)) / 1000
        self.rev = tg.hessian(_rosen)
        self.fwd = tg.jacfwd(tg.grad(_rosen))
        self.dense = tg.hessian(lambda x: np.sum(np.tanh(x)) + x @ self.A @ x)

    def time_rosenbrock_hessian_reverse_over_reverse(self):
        self.rev(self.x)

    def time_rosenbrock_hessian_forward_over_reverse(self):
        self.fwd(self.x)

    def time_dense_coupling_hessian(self):
        self.dense(self.x)

    def peakmem_rosenbrock_hessian(self):
        self.rev(self.x)
