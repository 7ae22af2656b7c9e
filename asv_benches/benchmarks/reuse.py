"""Record once, evaluate many (issue 31): ``reuse=True`` against the plain NumPy floor.

Three workloads:

``leapfrog``
    6 particles under softened gravity, 60 leapfrog steps (about 1100 recorded
    small NumPy calls); the gradient of the final energy-like sum with respect to
    the initial state.  Floor: the plain NumPy forward.
``bfgs``
    ``scipy.optimize.minimize(rosen, x0, method="BFGS")`` on a 30-dimensional
    Rosenbrock function, with ``jac=tg.grad(rosen, reuse=True)``, ``jac=tg.grad(rosen)``
    and a hand-written NumPy gradient (the floor).
``ode_fit``
    The Lotka-Volterra fit of ``compare_ode.py`` through ``solve_ivp`` (RK45, rtol
    1e-8): its gradient against a plain solve, with the parameters in ``args=`` and
    in a closure (at first order the ODE rule evaluates the right-hand side once,
    column-wise, on every collocation node: tapegrad.solvers._sensitivity).

``time_*`` are asv timings; ``track_*_ratio`` time the pair in alternation in
one process (median of per-round ratios, garbage collector on).  The same
figures side by side: ``python asv_benches/compare.py --reuse``.
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any, Callable, Dict, Tuple

import numpy as np
from scipy.optimize import minimize

import tapegrad as tg

# ---------------------------------------------------------------------- leapfrog
MASS = np.linspace(1.0, 2.0, 6)
STEPS = 60
DT = 0.01


def leapfrog(state: Any) -> Any:
    """``STEPS`` leapfrog steps of 6 softened-gravity particles in 2-D, then ``|q|^2 + |p|^2 / 2``."""
    q = state[:, :2]
    p = state[:, 2:]
    for _ in range(STEPS):
        d = q[:, None, :] - q[None, :, :]
        r2 = np.sum(d * d, axis=-1) + 0.1
        f = -np.sum(d / r2[..., None] ** 1.5 * MASS[None, :, None], axis=1)
        p = p + 0.5 * DT * f
        q = q + DT * p / MASS[:, None]
        p = p + 0.5 * DT * f
    return np.sum(q * q) + 0.5 * np.sum(p * p)


def leapfrog_input() -> np.ndarray:
    return np.random.default_rng(31).normal(size=(6, 4))


# ---------------------------------------------------------------------- BFGS on Rosenbrock
DIM = 30


def rosen(x: Any) -> Any:
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def rosen_grad(x: np.ndarray) -> np.ndarray:
    """The hand-written gradient (the floor)."""
    d = x[1:] - x[:-1] ** 2
    g = np.zeros_like(x)
    g[:-1] = -400.0 * x[:-1] * d - 2.0 * (1.0 - x[:-1])
    g[1:] += 200.0 * d
    return g


def rosen_start() -> np.ndarray:
    return np.full(DIM, -1.2) + 0.1 * np.arange(DIM) / DIM


def bfgs(jac: Callable) -> Any:
    return minimize(rosen, rosen_start(), jac=jac, method="BFGS", options={"gtol": 1e-8, "maxiter": 2000})


# ---------------------------------------------------------------------- ODE fit
def ode_problem() -> Any:
    import compare_ode as C  # asv_benches/ on the path (asv and compare.py put it there)

    return C.make_problem("lotka_volterra")


def closure_loss(p: Any) -> Callable[[Any], Any]:
    """The same fit with the parameters reaching the right-hand side through a closure, not ``args=``."""
    from scipy.integrate import solve_ivp

    def loss(th: Any) -> Any:
        sol = solve_ivp(lambda t, y: p.rhs(np, t, y, th), (0.0, p.t_end), p.y0, t_eval=p.times, rtol=1e-8,
                        atol=1e-10)
        return np.sum(((sol.y - p.data) / p.scale[:, None]) ** 2)

    return loss


# ---------------------------------------------------------------------- shared by compare.py
def entries() -> Dict[str, Tuple[Tuple[str, Callable[[], Any]], ...]]:
    """For each workload, ``(label, call)`` pairs; the first is the floor the others are divided by."""
    x = leapfrog_input()
    reused, eager = tg.grad(leapfrog, reuse=True), tg.grad(leapfrog)
    rosen_reused, rosen_eager = tg.grad(rosen, reuse=True), tg.grad(rosen)
    out: Dict[str, Tuple[Tuple[str, Callable[[], Any]], ...]] = {
        "leapfrog": (
            ("numpy forward", lambda: leapfrog(x)),
            ("grad reuse=True", lambda: reused(x)),
            ("grad", lambda: eager(x)),
        ),
        "bfgs": (
            ("hand-written jac", lambda: bfgs(rosen_grad)),
            ("jac=grad reuse=True", lambda: bfgs(rosen_reused)),
            ("jac=grad", lambda: bfgs(rosen_eager)),
        ),
    }
    try:
        p = ode_problem()
    except ImportError:  # compare_ode.py not on the path
        return out
    theta = p.theta
    ode_grad = tg.grad(p.loss)
    closure = closure_loss(p)
    closure_grad = tg.grad(closure)
    out["ode_fit"] = (("solve_ivp", lambda: p.loss(theta)), ("grad", lambda: ode_grad(theta)),
                      ("grad, closure", lambda: closure_grad(theta)))
    return out


def paired_ratio(floor: Callable[[], Any], other: Callable[[], Any], rounds: int = 7, min_time: float = 0.05) -> float:
    """Median over rounds of ``time(other) / time(floor)``, the two timed in alternation (GC on)."""

    def per_call(fn: Callable[[], Any], number: int) -> float:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        return (time.perf_counter() - start) / number

    numbers = []
    for fn in (floor, other):
        n = 1
        while per_call(fn, n) * n < min_time:
            n *= 2
        numbers.append(n)
    gc.enable()
    ratios = [per_call(other, numbers[1]) / per_call(floor, numbers[0]) for _ in range(rounds)]
    return statistics.median(ratios)


# ---------------------------------------------------------------------- asv
class Leapfrog:
    def setup(self) -> None:
        self.x = leapfrog_input()
        self.reused = tg.grad(leapfrog, reuse=True)
        self.eager = tg.grad(leapfrog)
        self.reused(self.x)  # the recording

    def time_numpy_forward(self) -> None:
        leapfrog(self.x)

    def time_grad_reuse(self) -> None:
        self.reused(self.x)

    def time_grad_eager(self) -> None:
        self.eager(self.x)

    def peakmem_grad_reuse(self) -> None:
        self.reused(self.x)

    def track_reuse_over_forward(self) -> float:
        return paired_ratio(lambda: leapfrog(self.x), lambda: self.reused(self.x))

    track_reuse_over_forward.unit = "ratio"  # type: ignore[attr-defined]


class Bfgs:
    timeout = 300

    def setup(self) -> None:
        self.reused = tg.grad(rosen, reuse=True)
        self.eager = tg.grad(rosen)

    def time_hand_written(self) -> None:
        bfgs(rosen_grad)

    def time_grad_reuse(self) -> None:
        bfgs(self.reused)

    def time_grad_eager(self) -> None:
        bfgs(self.eager)

    def peakmem_grad_reuse(self) -> None:
        bfgs(self.reused)

    def track_reuse_over_hand_written(self) -> float:
        return paired_ratio(lambda: bfgs(rosen_grad), lambda: bfgs(self.reused), rounds=5)

    track_reuse_over_hand_written.unit = "ratio"  # type: ignore[attr-defined]


class OdeFitReuse:
    timeout = 300

    def setup(self) -> None:
        self.p = ode_problem()
        self.grad = tg.grad(self.p.loss)
        self.closure_grad = tg.grad(closure_loss(self.p))

    def time_solve(self) -> None:
        self.p.loss(self.p.theta)

    def time_grad(self) -> None:
        self.grad(self.p.theta)

    def time_grad_closure(self) -> None:
        self.closure_grad(self.p.theta)

    def peakmem_grad(self) -> None:
        self.grad(self.p.theta)

    def track_grad_over_solve(self) -> float:
        return paired_ratio(lambda: self.p.loss(self.p.theta), lambda: self.grad(self.p.theta), rounds=3)

    track_grad_over_solve.unit = "ratio"  # type: ignore[attr-defined]
