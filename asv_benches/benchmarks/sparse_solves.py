"""A PDE-constrained objective through ``scipy.sparse.linalg.spsolve`` (issue 33): gradient against the plain solve.

The problem of ``compare_sparse_solves.py``: a 2-D Poisson equation on a 316 x 316
grid (99,856 unknowns) with one traced conductivity per cell, ``A(k)`` assembled
with ``sp.diags_array`` or with ``sp.coo_array(...).tocsr()``, and the objective
``sum((u - u_obs)**2)`` with ``u = spsolve(A(k), f)``.  ``time_plain`` is the
objective on NumPy arrays (SciPy's own solve), ``time_gradient`` tapegrad's
``value_and_grad`` of it (one ``splu`` factorisation kept for the adjoint solve),
``track_gradient_over_plain`` the two timed in alternation (median of 3 ratios;
the target is at most 2.5).  ``peakmem_*`` are asv's peak resident memory of the
process; the call's own share, and the side-by-side table, come from
``python asv_benches/compare_sparse_solves.py`` (target: at most 2x the plain peak).
"""

import statistics

import compare_sparse_solves as C

N = 316


class SparseSolves:
    params = [list(C.ASSEMBLIES)]
    param_names = ["assembly"]
    timeout = 300

    def setup(self, assembly):
        self.k, self.f, self.u_obs = C.make_problem(N)
        self.grad = C.gradient_function()
        small = C.make_problem(4)
        self.grad(small[0], 4, small[1], small[2], assembly)  # the door's rule modules, imported once

    def time_plain(self, assembly):
        C.objective(self.k, N, self.f, self.u_obs, assembly)

    def time_gradient(self, assembly):
        self.grad(self.k, N, self.f, self.u_obs, assembly)

    def peakmem_plain(self, assembly):
        C.objective(self.k, N, self.f, self.u_obs, assembly)

    def peakmem_gradient(self, assembly):
        self.grad(self.k, N, self.f, self.u_obs, assembly)

    def track_gradient_over_plain(self, assembly):
        return statistics.median(C.time_rounds(N, assembly, 3)["ratio"])

    track_gradient_over_plain.unit = "ratio"
