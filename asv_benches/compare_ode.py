"""Gradient of an ODE fit's loss: tapegrad (SciPy's ``solve_ivp``) against JAX and torchdiffeq.

Usage (from the repository root)::

    python asv_benches/compare_ode.py                        # both problems, every installed library
    python asv_benches/compare_ode.py --problems lotka_volterra --rounds 9
    python asv_benches/compare_ode.py --threads 1 --json ode.json

Two fits, each a sum of squared residuals at 50 observation times (fixed-seed
synthetic data), differentiated with respect to the rate parameters:

``lotka_volterra`` (non-stiff)
    ``x' = a x - b x y``, ``y' = d x y - g y``, ``(x, y)(0) = (10, 5)``, observed on
    ``[0.3, 15]``; 4 parameters ``(a, b, d, g)``.
``robertson`` (stiff)
    Robertson's chemical kinetics, ``k = exp(theta)`` with ``k = (0.04, 3e7, 1e4)``
    at the data, observed at 50 log-spaced times in ``[1e-3, 40]``; residuals of the
    three species divided by ``(1, 1e-4, 1)`` (the intermediate is ~1e-5).

Each library integrates at the same tolerances (``--rtol 1e-8 --atol 1e-10`` by
default; all three use the RMS norm of ``err / (atol + rtol * |y|)``):

* tapegrad: plain NumPy plus ``scipy.integrate.solve_ivp``, RK45 and DOP853 for
  Lotka-Volterra, BDF and Radau for Robertson; ``tapegrad.grad`` of the loss.
* JAX: ``jax.experimental.ode.odeint`` (Dormand-Prince 5(4), continuous adjoint),
  ``jax.jit(jax.grad(loss))`` and ``jax.jit(loss)``, float64, compiled before timing.
* torchdiffeq: ``odeint`` (backpropagation through the solver's steps) and
  ``odeint_adjoint`` (continuous adjoint), ``method="dopri5"``, float64.

JAX's odeint has only Dopri5, and torchdiffeq only explicit adaptive methods
(``dopri5``, ``dopri8``, ``bosh3``, ...), so on Robertson the peers run an explicit
method whose step size is bounded by stability, not accuracy: that is what they can do.

Timing: all entries of a problem run in one process; in each of ``--rounds`` rounds
every entry is sampled once (its calls looped for at least ``--min-time`` seconds) in
an order that reverses from round to round.  An entry whose single call takes longer
than ``--slow`` seconds is timed once only (its warm-up call).  The table gives the
median and the spread (min-max) of the samples, and the ratio tapegrad / peer of
every round's gradient samples (median and min-max), taking tapegrad's RK45 (or BDF)
gradient as the numerator.

Agreement: every gradient is compared with a reference from central finite differences
of the loss solved far more tightly (DOP853 or Radau at rtol 1e-12, atol 1e-14), and
with tapegrad's gradient at the matched tolerances (relative 2-norm differences).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional


def _limit_threads(argv: List[str]) -> None:
    """``--threads N`` (N > 0): one pool size for NumPy's BLAS, PyTorch and XLA; before their import."""
    n = 0
    for k, arg in enumerate(argv):
        if arg == "--threads" and k + 1 < len(argv):
            n = int(argv[k + 1])
        elif arg.startswith("--threads="):
            n = int(arg.split("=", 1)[1])
    if n <= 0:
        return
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "TAPEGRAD_NUM_THREADS"):
        os.environ[var] = str(n)
    if n == 1:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()


if __name__ == "__main__":
    _limit_threads(sys.argv[1:])

import numpy as np  # noqa: E402
from scipy.integrate import solve_ivp  # noqa: E402

RTOL, ATOL = 1e-8, 1e-10


# ================================================================================ problems
def lotka_volterra_rhs(xp: Any, t: Any, y: Any, th: Any) -> Any:
    """Predator-prey: ``th = (a, b, d, g)``.  ``xp`` is NumPy, ``jax.numpy`` or ``torch``."""
    return xp.stack([th[0] * y[0] - th[1] * y[0] * y[1], th[2] * y[0] * y[1] - th[3] * y[1]])


def robertson_rhs(xp: Any, t: Any, y: Any, th: Any) -> Any:
    """Robertson's kinetics with rate constants ``exp(th)``."""
    k = xp.exp(th)
    r1, r2, r3 = k[0] * y[0], k[1] * y[1] * y[1], k[2] * y[1] * y[2]
    return xp.stack([r3 - r1, r1 - r2 - r3, r2])


class Problem:
    """One fit: right-hand side, initial state, observation times, data, parameters to differentiate at."""

    def __init__(self, name: str, rhs: Callable, y0: list, t_end: float, times: np.ndarray, truth: np.ndarray,
                 perturb: np.ndarray, scale: np.ndarray, noise: float, methods: List[str], ref_method: str,
                 fd_step: float) -> None:
        self.name, self.rhs, self.t_end, self.times = name, rhs, t_end, times
        self.y0 = np.array(y0, dtype=float)
        self.truth, self.scale, self.methods, self.ref_method = truth, scale, methods, ref_method
        self.fd_step = fd_step
        clean = solve_ivp(self.numpy_rhs, (0.0, t_end), self.y0, t_eval=times, args=(truth,), method=ref_method,
                          rtol=1e-12, atol=1e-14).y
        rng = np.random.default_rng(23)
        self.data = clean + noise * scale[:, None] * rng.standard_normal(clean.shape)  # (species, times)
        self.theta = truth + perturb  # where the gradient is taken: away from the optimum

    def numpy_rhs(self, t: Any, y: Any, th: Any) -> Any:
        return self.rhs(np, t, y, th)

    def loss(self, th: Any, method: str = "RK45", rtol: float = RTOL, atol: float = ATOL) -> Any:
        """The tapegrad workload: plain NumPy and ``solve_ivp``; ``tapegrad.grad`` differentiates it."""
        sol = solve_ivp(self.numpy_rhs, (0.0, self.t_end), self.y0, t_eval=self.times, args=(th,),
                        method=method, rtol=rtol, atol=atol)
        return np.sum(((sol.y - self.data) / self.scale[:, None]) ** 2)

    def fd_gradient(self) -> np.ndarray:
        """Central finite differences of the loss solved at rtol 1e-12, atol 1e-14."""
        g = np.zeros_like(self.theta)
        for i in range(self.theta.size):
            e = np.zeros_like(self.theta)
            e[i] = self.fd_step
            up = self.loss(self.theta + e, self.ref_method, 1e-12, 1e-14)
            down = self.loss(self.theta - e, self.ref_method, 1e-12, 1e-14)
            g[i] = (up - down) / (2 * self.fd_step)
        return g


def make_problem(name: str) -> Problem:
    if name == "lotka_volterra":
        return Problem(name, lotka_volterra_rhs, [10.0, 5.0], 15.0, np.linspace(0.3, 15.0, 50),
                       truth=np.array([1.1, 0.4, 0.1, 0.4]), perturb=np.array([0.05, -0.02, 0.004, -0.01]),
                       scale=np.array([1.0, 1.0]), noise=0.3, methods=["RK45", "DOP853"], ref_method="DOP853",
                       fd_step=1e-6)
    if name == "robertson":
        return Problem(name, robertson_rhs, [1.0, 0.0, 0.0], 40.0, np.geomspace(1e-3, 40.0, 50),
                       truth=np.log([0.04, 3e7, 1e4]), perturb=np.array([0.05, -0.05, 0.05]),
                       scale=np.array([1.0, 1e-4, 1.0]), noise=0.01, methods=["BDF", "Radau"],
                       ref_method="Radau", fd_step=1e-5)
    raise ValueError(f"unknown problem {name!r}: lotka_volterra or robertson")


PROBLEMS = ["lotka_volterra", "robertson"]


# ================================================================================ libraries
class Entry:
    """One library's way of computing the loss and its gradient."""

    def __init__(self, lib: str, label: str, forward: Callable[[], Any], gradient: Callable[[], Any],
                 compiles: bool = False) -> None:
        self.lib, self.label, self.forward, self.gradient = lib, label, forward, gradient
        self.compiles = compiles  # the first call compiles: it is run once untimed


def tapegrad_entries(p: Problem, rtol: float, atol: float) -> List[Entry]:
    import tapegrad as tg

    out = []
    for method in p.methods:
        grad = tg.grad(p.loss)
        out.append(Entry("tapegrad", f"tapegrad solve_ivp {method}",
                         lambda m=method: p.loss(p.theta, m, rtol, atol),
                         lambda m=method, g=grad: g(p.theta, m, rtol, atol)))
    return out


def jax_entries(p: Problem, rtol: float, atol: float) -> List[Entry]:
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from jax.experimental.ode import odeint

    t = jnp.asarray(np.concatenate([[0.0], p.times]))
    y0, data, scale = jnp.asarray(p.y0), jnp.asarray(p.data.T), jnp.asarray(p.scale)

    def loss(th: Any) -> Any:
        ys = odeint(lambda y, s, th: p.rhs(jnp, s, y, th), y0, t, th, rtol=rtol, atol=atol)
        return jnp.sum(((ys[1:] - data) / scale) ** 2)

    theta = jnp.asarray(p.theta)
    forward, gradient = jax.jit(loss), jax.jit(jax.grad(loss))
    return [Entry("jax", "JAX odeint dopri5 (adjoint), jit",
                  lambda: forward(theta).block_until_ready(), lambda: gradient(theta).block_until_ready(),
                  compiles=True)]


def torchdiffeq_entries(p: Problem, rtol: float, atol: float) -> List[Entry]:
    import torch
    from torchdiffeq import odeint, odeint_adjoint

    f64 = torch.float64
    t = torch.tensor(np.concatenate([[0.0], p.times]), dtype=f64)
    y0, data = torch.tensor(p.y0, dtype=f64), torch.tensor(p.data.T, dtype=f64)
    scale = torch.tensor(p.scale, dtype=f64)

    class Field(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.theta = torch.nn.Parameter(torch.tensor(p.theta, dtype=f64))

        def forward(self, s: Any, y: Any) -> Any:
            return p.rhs(torch, s, y, self.theta)

    field = Field()

    def loss(solver: Callable) -> Any:
        ys = solver(field, y0, t, rtol=rtol, atol=atol, method="dopri5")
        return torch.sum(((ys[1:] - data) / scale) ** 2)

    def forward(solver: Callable) -> Any:
        with torch.no_grad():
            return loss(solver)

    def gradient(solver: Callable) -> Any:
        return torch.autograd.grad(loss(solver), [field.theta])[0]

    return [Entry("torchdiffeq", f"torchdiffeq {name} dopri5", lambda s=solver: forward(s),
                  lambda s=solver: gradient(s))
            for name, solver in (("odeint", odeint), ("odeint_adjoint", odeint_adjoint))]


LIBS: Dict[str, Callable[[Problem, float, float], List[Entry]]] = {
    "tapegrad": tapegrad_entries, "jax": jax_entries, "torchdiffeq": torchdiffeq_entries}


def versions() -> Dict[str, str]:
    import scipy

    import tapegrad

    out = {"python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__,
           "tapegrad": getattr(tapegrad, "__version__", "?")}
    for mod in ("jax", "jaxlib", "torch", "torchdiffeq"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            out[mod] = "not installed"
    return out


def machine() -> Dict[str, Any]:
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "cpu": cpu, "cores": os.cpu_count(),
            "load_average": [round(v, 2) for v in os.getloadavg()], "platform": platform.platform()}


# ================================================================================ timing
def _per_call(fn: Callable[[], Any], min_time: float) -> float:
    """Seconds per call of ``fn``, looped for at least ``min_time`` seconds."""
    number, total = 0, 0.0
    start = time.perf_counter()
    while total < min_time or number == 0:
        fn()
        number += 1
        total = time.perf_counter() - start
    return total / number


def _as_array(g: Any) -> np.ndarray:
    if hasattr(g, "detach"):
        g = g.detach().numpy()
    return np.asarray(g, dtype=float)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def run_problem(name: str, libs: List[str], opts: argparse.Namespace) -> dict:
    p = make_problem(name)
    entries: List[Entry] = []
    missing = {}
    for lib in libs:
        try:
            entries += LIBS[lib](p, opts.rtol, opts.atol)
        except ImportError as exc:
            missing[lib] = f"not installed ({exc})"
    fd = p.fd_gradient()
    rows: List[dict] = []
    slots = []  # (row, kind, callable): everything timed in rounds
    for e in entries:
        row: dict = {"lib": e.lib, "label": e.label}
        for kind, fn in (("forward", e.forward), ("gradient", e.gradient)):
            try:
                if e.compiles:
                    start = time.perf_counter()
                    fn()
                    row[kind + "_compile_s"] = time.perf_counter() - start
                start = time.perf_counter()
                value = fn()
                first = time.perf_counter() - start
            except Exception as exc:  # a peer that fails is reported, not hidden
                row[kind] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"}
                continue
            row[kind] = {"first_call_s": first, "samples": []}
            if kind == "forward":
                row["loss"] = float(_as_array(value))
            if kind == "gradient":
                g = _as_array(value)
                row["gradient_value"] = g.tolist()
                row["finite"] = bool(np.all(np.isfinite(g)))
                row["rel_diff_fd"] = _rel(g, fd)
            if first > opts.slow:
                row[kind]["samples"] = [first]
                row[kind]["note"] = "one run (slower than --slow)"
            else:
                slots.append((row, kind, fn))
        rows.append(row)
    reference = next((r for r in rows if r["lib"] == "tapegrad" and "gradient_value" in r), None)
    for r in rows:
        if reference is not None and "gradient_value" in r:
            r["rel_diff_tapegrad"] = _rel(np.array(r["gradient_value"]), np.array(reference["gradient_value"]))
    for k in range(opts.rounds):
        for row, kind, fn in (slots if k % 2 == 0 else slots[::-1]):
            fn()  # untimed: the previous entry's caches and thread pools belong to neither
            row[kind]["samples"].append(_per_call(fn, opts.min_time))
    for r in rows:
        for kind in ("forward", "gradient"):
            s = r.get(kind, {}).get("samples")
            if s:
                r[kind].update(median_s=statistics.median(s), min_s=min(s), max_s=max(s))
        if "median_s" in r.get("gradient", {}) and "median_s" in r.get("forward", {}):
            r["grad_over_forward"] = r["gradient"]["median_s"] / r["forward"]["median_s"]
    if reference is not None:
        ref_samples = reference["gradient"]["samples"]
        for r in rows:
            s = r.get("gradient", {}).get("samples")
            if r["lib"] == "tapegrad" or not s or not r.get("finite"):
                continue
            if len(s) == len(ref_samples):  # paired by round
                ratios = [a / b for a, b in zip(ref_samples, s)]
            else:
                ratios = [statistics.median(ref_samples) / statistics.median(s)]
            r["tapegrad_over_peer"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
                                       "against": reference["label"]}
    return {"problem": name, "fd_gradient": fd.tolist(), "fd_loss": float(p.loss(p.theta, p.ref_method, 1e-12, 1e-14)), "rows": rows, "missing": missing,
            "load_average_after": [round(v, 2) for v in os.getloadavg()]}


# ================================================================================ report
def _t(s: Optional[float]) -> str:
    if s is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s * 1e9:.3g} ns"


def _cell(d: dict) -> str:
    if "error" in d:
        return d["error"]
    if "median_s" not in d:
        return "-"
    if len(d["samples"]) == 1:
        return f"{_t(d['median_s'])} (1 run)"
    return f"{_t(d['median_s'])} ({_t(d['min_s'])}-{_t(d['max_s'])})"


def format_report(report: dict) -> str:
    lines = [f"# {report['machine']['date']}, {report['machine']['cpu']}, {report['machine']['cores']} cores, "
             f"load average {report['machine']['load_average'][0]} at the start; rtol={report['rtol']}, "
             f"atol={report['atol']}, {report['rounds']} rounds, threads={report['threads'] or 'default'}",
             "# " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()), ""]
    for pr in report["problems"]:
        lines += [f"## {pr['problem']}: loss {pr['fd_loss']:.10g} and finite-difference gradient "
                  f"{np.array2string(np.array(pr['fd_gradient']), precision=6)} at rtol 1e-12, atol 1e-14",
                  "", "| library, API | loss | forward loss | gradient | gradient / forward | tapegrad / peer (gradient) "
                  "| rel. diff. to FD | rel. diff. to tapegrad |", "|---|---|---|---|---|---|---|---|"]
        for r in pr["rows"]:
            ratio = r.get("tapegrad_over_peer")
            rtext = f"{ratio['median']:.3g} ({ratio['min']:.3g}-{ratio['max']:.3g})" if ratio else "-"
            if "gradient_value" in r and not r["finite"]:
                rtext = "gradient not finite"
            fd = f"{r['rel_diff_fd']:.1e}" if "rel_diff_fd" in r and r.get("finite") else "-"
            tgd = f"{r['rel_diff_tapegrad']:.1e}" if "rel_diff_tapegrad" in r and r.get("finite") else "-"
            gf = f"{r['grad_over_forward']:.3g}" if "grad_over_forward" in r else "-"
            loss = f"{r['loss']:.10g}" if "loss" in r else "-"
            lines.append(f"| {r['label']} | {loss} | {_cell(r.get('forward', {}))} | {_cell(r.get('gradient', {}))} | {gf} "
                         f"| {rtext} | {fd} | {tgd} |")
        for lib, why in pr["missing"].items():
            lines.append(f"| {lib} | {why} | | | | | | |")
        lines += ["", f"load average after: {pr['load_average_after'][0]}", ""]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", default=",".join(PROBLEMS), help="lotka_volterra,robertson")
    ap.add_argument("--libs", default=",".join(LIBS), help="tapegrad,jax,torchdiffeq")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=0.2, help="seconds each sample loops for, at least")
    ap.add_argument("--slow", type=float, default=5.0, help="an entry whose call takes longer is timed once")
    ap.add_argument("--rtol", type=float, default=RTOL)
    ap.add_argument("--atol", type=float, default=ATOL)
    ap.add_argument("--threads", type=int, default=0, help="threads of every library (0: their defaults)")
    ap.add_argument("--json", default=None, help="write the full report (every sample) here")
    opts = ap.parse_args(argv)
    libs = opts.libs.split(",")
    if opts.threads > 0 and "torchdiffeq" in libs:
        try:
            import torch

            torch.set_num_threads(opts.threads)
        except ImportError:
            pass
    report = {"machine": machine(), "versions": versions(), "rtol": opts.rtol, "atol": opts.atol,
              "rounds": opts.rounds, "threads": opts.threads, "problems": []}
    for name in opts.problems.split(","):
        report["problems"].append(run_problem(name, libs, opts))
        print(format_report({**report, "problems": report["problems"][-1:]}), flush=True)
    if opts.json:
        with open(opts.json, "w") as fh:
            json.dump(report, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
