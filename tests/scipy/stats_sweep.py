"""Every scipy.stats distribution, method and parameter against finite differences.

``python -m tests.scipy.stats_sweep [--jobs N] [--only NAME,...]`` runs the
sweep and writes ``docs/scipy-stats-coverage.md``.  Each case differentiates
``sum(w * dist.method(x, *shapes, loc=loc, scale=scale))`` (random ``w``) with
respect to one argument and classifies it:

``pass``
    first derivative and Hessian agree with central finite differences
    (Richardson-extrapolated; the Hessian against differences of the gradient);
``first``
    first derivative agrees, the Hessian raises a clear tapegrad error;
``error``
    the first derivative raises a clear tapegrad error (naming the parameter);
``wrong``
    a value differs from SciPy's, a derivative disagrees, or the error is not
    tapegrad's: the number that must stay 0;
``fd-noise``
    SciPy's own function is not smooth enough at this step size for finite
    differences to decide (they disagree with themselves at two step sizes).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import sys
import time
import warnings
from typing import Any, Dict, List, Tuple

import numpy as np

CONTINUOUS = ("pdf", "logpdf", "cdf", "logcdf", "sf", "logsf", "ppf", "isf")
DISCRETE = ("pmf", "logpmf", "cdf", "logcdf", "sf", "logsf", "ppf", "isf")
LOC, SCALE = 0.3, 1.3
DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "scipy-stats-coverage.md")
TIMEOUT = 40


#: Limit points where generalized families switch formulas, checked besides SciPy's own lists.
EXTRA = [("genextreme", (0.0,)), ("genpareto", (0.0,)), ("tukeylambda", (0.0,)), ("genlogistic", (1.0,)),
         ("gennorm", (2.0,)), ("kappa3", (1.0,))]


def distributions() -> List[Tuple[str, tuple, bool]]:
    """(label, shape values, discrete) for every distribution and every parameter set SciPy lists.

    The label is the distribution's name for its first parameter set, ``name(params)``
    for the others (and for :data:`EXTRA`).
    """
    import scipy.stats as st
    from scipy.stats._distr_params import distcont, distdiscrete

    seen: Dict[str, List[Tuple[str, tuple, bool]]] = {}
    tables = ((distcont, False), (distdiscrete, True), (EXTRA, False))
    for table, discrete in tables:
        for name, params in table:
            if not isinstance(getattr(st, name, None), (st.rv_continuous, st.rv_discrete)):
                continue
            sets = seen.setdefault(name, [])
            params = tuple(params)
            if any(p == params for _, p, _ in sets):
                continue
            label = name if not sets else f"{name}{params}".replace(" ", "")
            sets.append((label, params, discrete))
    names = list(st._continuous_distns._distn_names) + list(st._discrete_distns._distn_names)
    return [entry for n in names for entry in seen.get(n, [])]


def _dist(label: str) -> Any:
    import scipy.stats as st

    return getattr(st, label.split("(")[0])


def parameters(dist: Any, discrete: bool) -> List[str]:
    """The arguments differentiated: ``x`` (``q`` for ppf/isf, ``k`` for discrete), shapes, loc, scale."""
    names = [s.strip() for s in (dist.shapes or "").split(",") if s.strip()]
    return ["x"] + names + (["loc"] if discrete else ["loc", "scale"])


def _points(dist: Any, method: str, shapes: tuple, discrete: bool) -> np.ndarray:
    if method in ("ppf", "isf"):
        return np.array([0.3, 0.65])
    qs = np.array([0.3, 0.65])
    z = dist.ppf(qs, *shapes)
    if discrete:
        return z + LOC * 0  # integers, loc 0 for discrete distributions
    z = np.where(np.isfinite(z), z, 0.5)
    return z * SCALE + LOC


def _fd(f, theta: np.ndarray, h: float) -> np.ndarray:
    """Richardson-extrapolated central differences of a scalar or vector ``f``, per component."""
    cols = []
    for i in range(theta.size):
        e = np.zeros_like(theta)
        e.flat[i] = 1.0
        step = h * max(1.0, abs(theta.flat[i]))

        def d(s):
            return (np.asarray(f(theta + s * e)) - np.asarray(f(theta - s * e))) / (2 * s)

        d1, d2 = d(step), d(step / 2)
        cols.append((4 * d2 - d1) / 3)
    return np.stack(cols, axis=-1)


def _close(a, b, rtol) -> bool:
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.shape != b.shape or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return False
    scale = max(1.0, float(np.max(np.abs(b))) if b.size else 1.0)
    return bool(np.all(np.abs(a - b) <= rtol * scale))


def _timed_out(exc: BaseException) -> bool:
    """Whether the case's alarm went off somewhere inside ``exc`` (a rule may have wrapped it)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, TimeoutError):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def run_case(name: str, shapes: tuple, discrete: bool, method: str, param: str) -> Tuple[str, str]:
    """Classify one (distribution, method, parameter): (status, detail)."""

    import tapegrad as tg
    from tapegrad.errors import TapegradError

    dist = _dist(name)
    shapes = tuple(np.asarray(s, dtype=float) for s in shapes)
    x = _points(dist, method, shapes, discrete)
    names = parameters(dist, discrete)
    theta0 = {"x": x, "loc": np.float64(0.0 if discrete else LOC), "scale": np.float64(SCALE)}
    for n, v in zip(names[1:], shapes):
        theta0[n] = v
    w = np.array([0.7, -1.3])

    def call(values):
        shp = [values[n] for n in names[1 : 1 + len(shapes)]]
        kw = {"loc": values["loc"]}
        if not discrete:
            kw["scale"] = values["scale"]
        return getattr(dist, method)(values["x"], *shp, **kw)

    def f(t):
        values = dict(theta0)
        values[param] = t
        return np.sum(w * call(values))

    t0 = np.asarray(theta0[param], dtype=float)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        plain = call(theta0)
        if not np.all(np.isfinite(plain)):
            return "skip", "SciPy's value is not finite at the test point"
        try:
            value, g = tg.value_and_grad(f)(t0)
        except Exception as exc:
            if _timed_out(exc):
                raise TimeoutError from exc
            if isinstance(exc, TapegradError):
                return "error", str(exc).split(". ")[0]
            return "wrong", f"{type(exc).__name__}: {exc}"[:200]  # not a clear error
        if not np.array_equal(np.asarray(value), np.sum(w * plain)):
            return "wrong", f"value {value!r} differs from SciPy's {np.sum(w * plain)!r}"
        fd = _fd(f, t0, 1e-5).reshape(np.shape(g))
        if not _close(g, fd, 1e-5) and not _close(g, fd_coarse := _fd(f, t0, 1e-3).reshape(np.shape(g)), 1e-5):
            if not _close(fd, fd_coarse, 1e-4):
                return "fd-noise", f"first: tapegrad {np.ravel(g)} fd {np.ravel(fd)} / {np.ravel(fd_coarse)}"
            return "wrong", f"first: tapegrad {np.ravel(g)} fd {np.ravel(fd)}"
        try:
            hess = tg.hessian(f)(t0)
        except Exception as exc:
            if _timed_out(exc):
                raise TimeoutError from exc
            if isinstance(exc, TapegradError):
                return "first", str(exc).split(". ")[0]
            return "wrong", f"second: {type(exc).__name__}: {exc}"[:200]
        grad = tg.grad(f)
        fd2 = _fd(grad, t0, 1e-4).reshape(np.shape(hess))
        if not _close(hess, fd2, 1e-4) and not _close(hess, fd2_coarse := _fd(grad, t0, 1e-3).reshape(np.shape(hess)),
                                                       1e-4):
            if not _close(fd2, fd2_coarse, 1e-3):
                return "fd-noise", f"second: tapegrad {np.ravel(hess)} fd {np.ravel(fd2)} / {np.ravel(fd2_coarse)}"
            return "wrong", f"second: tapegrad {np.ravel(hess)} fd {np.ravel(fd2)}"
    return "pass", ""


def cases(only: Tuple[str, ...] = ()) -> List[tuple]:

    out = []
    for name, shapes, discrete in distributions():
        if only and name not in only:
            continue
        dist = _dist(name)
        for method in DISCRETE if discrete else CONTINUOUS:
            for param in parameters(dist, discrete):
                out.append((name, shapes, discrete, method, param))
    return out


def _alarm(signum, frame):  # pragma: no cover - only when a case hangs
    raise TimeoutError("case took too long")


def _run(case: tuple) -> tuple:
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIMEOUT)
    start = time.perf_counter()
    try:
        status, detail = run_case(*case)
    except TimeoutError:
        status, detail = "timeout", f"over {TIMEOUT} s"
    except Exception as exc:  # the harness itself failed on this case: count it as wrong
        if _timed_out(exc):
            status, detail = "timeout", f"over {TIMEOUT} s"
        else:
            status, detail = "wrong", f"harness: {type(exc).__name__}: {exc}"[:200]
    finally:
        signal.alarm(0)
    return case, status, detail, time.perf_counter() - start


def sweep(jobs: int = 1, only: Tuple[str, ...] = (), verbose: bool = False) -> List[tuple]:
    """Run every case (in ``jobs`` processes); results in the order of :func:`cases`."""
    todo = cases(only)
    order = {c[0] + c[3] + c[4]: i for i, c in enumerate(todo)}
    results = []

    def report(result):
        results.append(result)
        (name, _, _, method, param), status, detail, seconds = result
        if verbose and (status != "pass" or seconds > 5):
            print(f"{status:8s} {name}.{method} [{param}] {seconds:.1f}s {detail[:160]}", flush=True)

    if jobs > 1:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            for result in pool.imap_unordered(_run, todo, chunksize=1):
                report(result)
    else:
        for case in todo:
            report(_run(case))
    results.sort(key=lambda r: order[r[0][0] + r[0][3] + r[0][4]])
    return results


STATUSES = ("pass", "first", "error", "fd-noise", "timeout", "skip", "wrong")


def write_docs(results: List[tuple], path: str = DOC) -> Dict[str, int]:
    counts = {s: 0 for s in STATUSES}
    rows: Dict[tuple, Dict[str, str]] = {}
    details = []
    for (name, shapes, discrete, method, param), status, detail, _ in results:
        counts[status] += 1
        rows.setdefault((name, method), {})[param] = status
        if status not in ("pass",) and detail:
            details.append(f"| {name} | {method} | {param} | {status} | {detail.replace('|', '/')} |")
    lines = [
        "# scipy.stats: derivative coverage",
        "",
        "Generated by `python -m tests.scipy.stats_sweep` (do not edit by hand). Every distribution",
        "of `scipy.stats` with the parameters of `scipy.stats._distr_params`, at x = ppf(0.3) and",
        f"ppf(0.65) (q = 0.3, 0.65 for ppf/isf), loc = {LOC}, scale = {SCALE} (discrete: loc = 0);",
        "each derivative with respect to one argument checked against central finite differences,",
        "first order and the Hessian.",
        "",
        "Status: `pass` first and second order agree; `first` first order agrees and the Hessian",
        "raises a clear tapegrad error; `error` a clear tapegrad error naming the argument;",
        "`fd-noise` SciPy's own function is too rough for finite differences to decide; `skip`",
        "SciPy's value is not finite at the test point; `wrong` a disagreement (must be 0).",
        "",
        "How (`tapegrad/rules/scipy_stats.py`): the rules sit on the methods of `rv_continuous` and",
        "`rv_discrete`, so every distribution, frozen or not, and a user's own subclass are covered.",
        "The value returned is SciPy's own; the derivatives come from tracing the distribution's",
        "private methods on the entries SciPy evaluates them on (the others are constants with a",
        "zero derivative). cdf/sf/logcdf/logsf in x, loc and scale use the density, ppf/isf",
        "1 / density; ppf/isf in a shape parameter two Newton steps on cdf(z) = q from SciPy's root;",
        "a discrete cdf with compiled code the finite sum of its traced masses.",
        "",
        "Errors by design: a discrete distribution's k and loc (integer-valued), its ppf/isf (step",
        "functions), shape parameters SciPy accepts only at whole numbers (binom's n, hypergeom's",
        "M, n, N, ...). The other errors are private code that cannot be traced in that argument:",
        "compiled densities (ncf, nct, landau, levy_stable, ...) or special functions without a",
        "derivative in that argument (gammainc's a, betainc's a and b, stdtr's df, owens_t, ...).",
        "`first`: the density itself is compiled, so the derivative of a cdf (the density) is not",
        "differentiable again.",
        "",
        "| status | cases |",
        "|---|---|",
    ]
    lines += [f"| {s} | {counts[s]} |" for s in STATUSES]
    by_method: Dict[tuple, Dict[str, int]] = {}
    for (name, shapes, discrete, method, param), status, _, _ in results:
        kind = "discrete" if discrete else "continuous"
        arg = param if param in ("x", "loc", "scale") else "shape"
        if discrete and arg == "x":
            arg = "q" if method in ("ppf", "isf") else "k"
        elif arg == "x" and method in ("ppf", "isf"):
            arg = "q"
        by_method.setdefault((kind, method, arg), {s: 0 for s in STATUSES})[status] += 1
    lines += ["", "By method and argument (`shape`: every shape parameter):", "",
              "| kind | method | argument | " + " | ".join(STATUSES) + " |",
              "|---|---|---|" + "---|" * len(STATUSES)]
    for (kind, method, arg), c in by_method.items():
        lines.append(f"| {kind} | {method} | {arg} | " + " | ".join(str(c[s]) for s in STATUSES) + " |")
    lines += ["", "| distribution | method | " + "arguments |", "|---|---|---|"]
    for (name, method), params in rows.items():
        cells = ", ".join(f"{p}: {s}" for p, s in params.items())
        lines.append(f"| {name} | {method} | {cells} |")
    lines += ["", "## Cases other than pass", "", "| distribution | method | argument | status | detail |",
              "|---|---|---|---|---|"]
    lines += details
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return counts


def read_docs(path: str = DOC) -> Dict[tuple, Dict[str, str]]:
    """The table of ``docs/scipy-stats-coverage.md``: (distribution, method) -> {argument: status}."""
    table: Dict[tuple, Dict[str, str]] = {}
    with open(path) as fh:
        for line in fh:
            parts = [p.strip() for p in line.strip().strip("|").split("|")]
            if len(parts) == 3 and ":" in parts[2] and parts[0] not in ("distribution",):
                table[(parts[0], parts[1])] = dict(c.split(": ") for c in parts[2].split(", "))
    return table


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--only", default="")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)
    only = tuple(n for n in args.only.split(",") if n)
    start = time.time()
    results = sweep(args.jobs, only, verbose=True)
    counts = {s: sum(1 for r in results if r[1] == s) for s in STATUSES}
    if not args.no_docs and not only:
        write_docs(results)
    print(counts, f"{time.time() - start:.0f} s")
    return 1 if counts["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
