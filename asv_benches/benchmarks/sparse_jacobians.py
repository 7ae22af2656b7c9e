"""Sparse Jacobians and Hessians (``sparse=True``) against SciPy's colored finite differences.

The five programs of issue 24 (``sparse_programs``: a 2-D Bratu residual, a
Ginzburg-Landau energy's Hessian, a graph of springs built with ``np.add.at``,
a 1-D reaction-diffusion right-hand side, a bundle-adjustment residual) at
10^4 unknowns, and one that densifies (``A @ np.tanh(x)``, dense ``A``).
``time_scipy_colored_fd`` is ``approx_derivative(f, x0, sparsity=(pattern,
groups))`` given the exact pattern and its coloring (computed in setup).
Larger sizes (10^5 - 10^6): ``python asv_benches/sparse_compare.py --n ...``.
"""

import numpy as np
import sparse_programs as P

import tapegrad as tg


class SparseJacobians:
    params = [P.NAMES]
    param_names = ["program"]
    timeout = 300

    def setup(self, name):
        from scipy.optimize._numdiff import group_columns

        self.fun, self.x0, kind, self.fd_fun = P.make(name, 10_000)
        self.sparse = (tg.hessian if kind == "hessian" else tg.jacobian)(self.fun, sparse=True)
        pattern = self.sparse(self.x0)
        pattern.data[:] = 1
        self.sparsity = (pattern, group_columns(pattern))

    def time_tapegrad_sparse(self, name):
        self.sparse(self.x0)

    def time_scipy_colored_fd(self, name):
        from scipy.optimize._numdiff import approx_derivative

        approx_derivative(self.fd_fun, self.x0, sparsity=self.sparsity)

    def peakmem_tapegrad_sparse(self, name):
        self.sparse(self.x0)


class DensifyingJacobian:
    """``A @ np.tanh(x)`` with a dense ``A`` (n = 1500): ``sparse=True`` densifies, against the dense Jacobian."""

    timeout = 300

    def setup(self):
        n = 1500
        A = np.random.default_rng(4).standard_normal((n, n))
        self.f = lambda x: A @ np.tanh(x)
        self.x0 = np.linspace(-1, 1, n)

    def time_sparse(self):
        tg.jacobian(self.f, sparse=True)(self.x0)

    def time_dense(self):
        tg.jacobian(self.f)(self.x0)

    def peakmem_sparse(self):
        tg.jacobian(self.f, sparse=True)(self.x0)

    def peakmem_dense(self):
        tg.jacobian(self.f)(self.x0)
