"""The gradient of an ODE fit's loss through ``scipy.integrate.solve_ivp`` (issue 23).

The two fits of ``compare_ode.py``: Lotka-Volterra (non-stiff, 4 rates, RK45 and
DOP853) and Robertson's kinetics (stiff, 3 log-rates, BDF and Radau), each a sum
of squared residuals at 50 observation times, solved at rtol 1e-8, atol 1e-10.
``time_forward`` is the plain NumPy/SciPy loss, ``time_grad`` tapegrad's gradient
of it, ``track_grad_over_forward`` the two timed in alternation (median of
ratios).  JAX and torchdiffeq side by side: ``python asv_benches/compare_ode.py``.
"""

import statistics
import time

import compare_ode as C

import tapegrad as tg

CASES = ["lotka_volterra-RK45", "lotka_volterra-DOP853", "robertson-BDF", "robertson-Radau"]
_PROBLEMS: dict = {}


def _problem(name):
    if name not in _PROBLEMS:  # the data come from a tight reference solve: build once
        _PROBLEMS[name] = C.make_problem(name)
    return _PROBLEMS[name]


class OdeFit:
    params = [CASES]
    param_names = ["problem-method"]
    timeout = 300

    def setup(self, case):
        name, self.method = case.split("-")
        self.p = _problem(name)
        self.grad = tg.grad(self.p.loss)

    def time_forward(self, case):
        self.p.loss(self.p.theta, self.method)

    def time_grad(self, case):
        self.grad(self.p.theta, self.method)

    def peakmem_grad(self, case):
        self.grad(self.p.theta, self.method)

    def track_grad_over_forward(self, case):
        ratios = []
        for _ in range(3):
            start = time.perf_counter()
            self.p.loss(self.p.theta, self.method)
            forward = time.perf_counter() - start
            start = time.perf_counter()
            self.grad(self.p.theta, self.method)
            ratios.append((time.perf_counter() - start) / forward)
        return statistics.median(ratios)

    track_grad_over_forward.unit = "ratio"
