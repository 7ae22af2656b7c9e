"""``python -m tapegrad check MODULE:FUNCTION``: can tapegrad differentiate my code?

Runs a user's existing NumPy function on tracers and reports

1. every NumPy function it called and how tapegrad handles it (``primitive``:
   one recorded call with a derivative rule; ``composite``: rewritten as
   other calls; ``constant``: its output carries no gradient; ``unsupported``:
   no rule, so the gradient cannot be computed);
2. the value and the derivative (gradient, ``--jacobian`` or ``--hessian``);
3. the worst disagreement with central finite differences.

Unsupported calls do not stop the survey: they are evaluated as constants so
that one run lists all of them (no derivative is computed in that case).

Exit status: 0 when everything is supported and agrees with finite
differences, 1 when a derivative disagrees, 3 when a call is unsupported or
tracing failed, 2 for bad usage (unknown function, bad shapes).

>>> import numpy as np
>>> report = check_function(lambda x: np.sum(np.sin(x) * x), [np.linspace(0.1, 1, 4)])
>>> report.ok, report.exit_code
(True, 0)
>>> sorted((c.name, c.kind) for c in report.calls)
[('numpy.multiply', 'primitive'), ('numpy.sin', 'primitive'), ('numpy.sum', 'primitive')]
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, TextIO

import numpy as np

from . import api
from .dispatch import observing_calls, strip_all
from .dropped import translate
from .errors import element_store_error
from .graph import tape_to_dot, write_graph
from .gradient_tape import GradientTape
from .outputs import read_outputs
from .registry import function_name, lookup
from .tape import INDEX, RULE, rule_of

__all__ = ["CallRecord", "CheckReport", "check_function", "load_function", "random_inputs", "load_inputs", "run"]

EXIT_OK, EXIT_WRONG, EXIT_USAGE, EXIT_UNSUPPORTED = 0, 1, 2, 3
MODES = ("gradient", "jacobian", "hessian")


class UsageError(Exception):
    """Bad command-line input: reported in one line, exit status 2."""


@dataclass
class CallRecord:
    """One NumPy function seen while tracing."""

    name: str
    kind: str
    count: int = 0
    note: str = ""


@dataclass
class CheckReport:
    """Everything ``check`` found out about one function at one point."""

    function: str
    inputs: List[Any]
    argnums: List[int]
    mode: str
    calls: List[CallRecord] = field(default_factory=list)
    error: Optional[str] = None
    value: Any = None
    derivatives: List[Any] = field(default_factory=list)
    fd_error: Optional[float] = None
    tolerance: Optional[float] = None
    note: str = ""
    graph_files: List[str] = field(default_factory=list)

    @property
    def unsupported(self) -> List[str]:
        return [c.name for c in self.calls if c.kind == "unsupported"]

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK

    @property
    def exit_code(self) -> int:
        if self.error is not None or self.unsupported:
            return EXIT_UNSUPPORTED
        if self.fd_error is None or not self.fd_error <= self.tolerance:
            return EXIT_WRONG
        return EXIT_OK

    def to_json(self) -> Dict[str, Any]:
        """A JSON-ready dictionary (arrays become nested lists)."""

        def plain(a: Any) -> Any:
            return None if a is None else np.asarray(a).tolist()

        return {
            "function": self.function,
            "inputs": [{"shape": list(np.shape(a)), "dtype": str(np.asarray(a).dtype)} for a in self.inputs],
            "argnums": self.argnums,
            "mode": self.mode,
            "calls": [c.__dict__ for c in self.calls],
            "unsupported": self.unsupported,
            "error": self.error,
            "value": plain(self.value),
            "derivatives": [plain(d) for d in self.derivatives],
            "finite_differences": {
                "max_error": self.fd_error,
                "tolerance": self.tolerance,
                "agree": self.fd_error is not None and self.fd_error <= self.tolerance,
            },
            "note": self.note,
            "graph_files": self.graph_files,
            "ok": self.ok,
            "exit_code": self.exit_code,
        }


# ---------------------------------------------------------------- loading
def load_function(spec: str) -> Callable:
    """Import ``MODULE:FUNCTION``; MODULE is a dotted module name or a path to a ``.py`` file."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"expected MODULE:FUNCTION (e.g. mypackage.physics:energy), got {spec!r}")
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            path = os.path.abspath(module_name)
            name = "_tapegrad_check_" + os.path.splitext(os.path.basename(path))[0]
            spec_obj = importlib.util.spec_from_file_location(name, path)
            if spec_obj is None or spec_obj.loader is None or not os.path.exists(path):
                raise UsageError(f"no Python file at {module_name!r}")
            module = importlib.util.module_from_spec(spec_obj)
            sys.modules[name] = module
            spec_obj.loader.exec_module(module)
        else:
            if "" not in sys.path and os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())  # like `python -m`: modules of the current directory
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"cannot import {module_name!r}: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"{module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UsageError(f"{spec} is not callable")
    return obj


def parse_shape(text: str) -> tuple:
    """``"3,4"`` -> ``(3, 4)``; ``""``, ``"()"`` or ``"scalar"`` -> ``()``."""
    text = text.strip().strip("()[]")
    if text in ("", "scalar"):
        return ()
    try:
        return tuple(int(p) for p in text.replace("x", ",").split(",") if p.strip())
    except ValueError:
        raise UsageError(f"bad shape {text!r}: write sizes separated by commas, e.g. --shape 3,4") from None


def random_inputs(
    shapes: Sequence[tuple], dtype: str = "float64", seed: int = 0, uniform: Optional[Sequence[float]] = None
) -> List[np.ndarray]:
    """One random array per shape: standard normal, or uniform in ``[low, high)``."""
    rng = np.random.default_rng(seed)
    draw = (lambda s: rng.uniform(uniform[0], uniform[1], s)) if uniform else rng.standard_normal
    return [np.asarray(draw(s)).astype(dtype) for s in shapes]


def load_inputs(path: str, fun: Optional[Callable] = None) -> List[np.ndarray]:
    """Arguments from a ``.npy`` file (one argument) or a ``.npz`` file (one per array).

    ``.npz`` arrays are passed in the file's order, or in the function's
    parameter order when their names are all parameter names.
    """
    if not os.path.exists(path):
        raise UsageError(f"no such file: {path}")
    try:
        if path.endswith(".npy"):
            return [np.load(path)]
        with np.load(path) as data:
            names = list(data.files)
            arrays = {n: data[n] for n in names}
    except (OSError, ValueError, EOFError, AttributeError) as exc:
        raise UsageError(f"cannot read inputs from {path}: {exc}") from None
    if fun is not None:
        try:
            params = [p for p in inspect.signature(fun).parameters]
        except (TypeError, ValueError):
            params = []
        if set(names) <= set(params):
            names = [p for p in params if p in arrays]
    return [arrays[n] for n in names]


# ---------------------------------------------------------------- call survey
def _display_name(name: str) -> str:
    for internal, shown in (("_getitem", "x[index]"), ("_setitem", "x[index] = v"), ("_astype", "x.astype")):
        if name.startswith("tapegrad.rules.") and name.endswith(internal):
            return f"{shown} (indexing)"
    return name


class _Survey:
    """Watches the NumPy protocols of :class:`~tapegrad.Tracer` while a function is traced."""

    def __init__(self, tape: Any) -> None:
        self.tape = tape
        self.depth = 0
        self.calls: Dict[str, CallRecord] = {}
        self.covered: set = set()  # tape nodes created inside a surveyed call

    def note_call(self, key: Any) -> Any:

        rule = lookup(key)  # the lookup tracing itself uses (SciPy rules load on first use)
        name = function_name(key)
        if self.depth == 0:
            rec = self.calls.get(name)
            if rec is None:
                kind = "unsupported" if rule is None else rule.kind
                rec = self.calls[name] = CallRecord(name, kind, 0, "" if rule is None else rule.note)
            rec.count += 1
        elif rule is None:  # inside a composite: still a reason the gradient fails
            self.calls.setdefault(name, CallRecord(name, "unsupported", 1, "called by a composite rule"))
        return rule

    def __call__(self, key: Any, args: tuple, kwargs: dict, proceed: Callable[[], Any]) -> Any:
        """The call observer (see :func:`tapegrad.dispatch.observing_calls`).

        Unsupported calls are evaluated on the raw values (as constants) so the
        survey can go on and list all of them.
        """

        rule = self.note_call(key)
        if rule is None:
            fun = getattr(key[0], key[1]) if isinstance(key, tuple) else key
            return fun(*strip_all(args), **strip_all(kwargs))
        with self.enter(rule):
            return proceed()

    @contextlib.contextmanager
    def enter(self, rule: Any) -> Iterator[None]:
        start = len(self.tape.nodes)
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            inside = self.tape.nodes[start:]
            self.covered.update(n[INDEX] for n in inside)
            if self.depth == 0 and rule is not None and rule.kind == "composite" and not rule.note:
                rec = self.calls[rule.name]
                if not rec.note:
                    parts = dict.fromkeys(rule_of(n).name.replace("numpy.", "") for n in inside if n[RULE] is not None)
                    rec.note = "recorded as " + ", ".join(parts) if parts else ""

    def finish(self) -> List[CallRecord]:
        """Add the primitives reached without the protocols (operators, indexing, custom primitives)."""
        calls = dict(self.calls)
        for node in self.tape.nodes:
            rule = rule_of(node)
            if rule is None or node[INDEX] in self.covered:
                continue
            name = _display_name(rule.name)
            rec = calls.get(name)
            if rec is None:
                rec = calls[name] = CallRecord(name, "primitive", 0, rule.note)
            rec.count += 1
        order = {"unsupported": 0, "primitive": 1, "composite": 2, "constant": 3}
        return sorted(calls.values(), key=lambda c: (order.get(c.kind, 9), c.name))


@contextlib.contextmanager
def _surveying(tape: Any) -> Iterator[_Survey]:
    """Observe the NumPy calls that reach tracers in this thread while tracing on ``tape``.

    Nothing global changes: the observer is per thread (see
    :func:`tapegrad.dispatch.observing_calls`), so other threads keep tracing
    (and raising on unsupported calls) as usual.
    """

    survey = _Survey(tape)
    with observing_calls(survey):
        yield survey


def survey_calls(fun: Callable, args: Sequence[Any], argnums: Sequence[int]) -> tuple:
    """Trace ``fun`` once; return ``(calls, tape, out, sources, error)``."""

    tape = GradientTape(persistent=True)
    args = list(args)
    error = None
    out = None
    with tape:
        for k in argnums:
            args[k] = tape.watch(args[k])
        with _surveying(tape._tape) as survey:
            try:
                out = fun(*args)
            except Exception as exc:  # any failure is the answer: report it
                # compiled code refusing a tracer, or a plain element store: as tg.grad says it
                exc = element_store_error(exc) or translate(exc)
                error = f"{type(exc).__name__}: {exc}"
    return survey.finish(), tape, out, [args[k] for k in argnums], error


# ---------------------------------------------------------------- derivatives
def _target_functions(fun: Callable, argnums: Sequence[int], mode: str) -> tuple:
    """Per argument k: ``(T_k, D_k)`` where ``D_k`` is the derivative of ``T_k`` w.r.t. argument k.

    gradient: ``T = sum(f)``; jacobian: ``T = f``; hessian: ``T = grad_k f``.
    """

    def total(*a: Any) -> Any:
        return np.sum(fun(*a))

    pairs = []
    for k in argnums:
        if mode == "gradient":
            pairs.append((total, api.grad(total, k)))
        elif mode == "jacobian":
            pairs.append((fun, api.jacobian(fun, k)))
        else:
            pairs.append((api.grad(fun, k), api.hessian(fun, k)))
    return pairs


def finite_difference_columns(
    target: Callable,
    args: Sequence[Any],
    k: int,
    eps: float,
    progress: Optional[Callable[[int], None]] = None,
) -> np.ndarray:
    """Central differences of ``target`` w.r.t. every element of argument ``k`` (float64).

    Returns an array of shape ``(target.size, args[k].size)``.
    """
    args64 = [np.asarray(a, dtype=np.float64) if np.asarray(a).dtype.kind == "f" else a for a in args]
    x = args64[k]
    columns = []
    for j in range(x.size):
        values = []
        for sign in (1.0, -1.0):
            shifted = x.copy()
            shifted.flat[j] += sign * eps
            a = list(args64)
            a[k] = shifted
            values.append(np.ravel(np.asarray(target(*a), dtype=np.float64)))
        columns.append((values[0] - values[1]) / (2 * eps))
        if progress is not None:
            progress(1)
    if not columns:
        return np.zeros((np.size(target(*args64)), 0))
    return np.stack(columns, axis=1)


def default_tolerance(dtype: Any, mode: str) -> float:
    """Relative tolerance of the finite-difference comparison."""
    if np.dtype(dtype) == np.float32:
        return 2e-3
    return 1e-5 if mode == "hessian" else 1e-6


def check_function(
    fun: Callable,
    args: Sequence[Any],
    argnums: Optional[Sequence[int]] = None,
    mode: str = "gradient",
    eps: float = 1e-6,
    tol: Optional[float] = None,
    graph: Optional[str] = None,
    progress: Optional[Callable[[int, int], None]] = None,
    name: str = "",
) -> CheckReport:
    """Survey, differentiate and check ``fun`` at ``args``.

    Parameters
    ----------
    fun : callable
        Ordinary NumPy code returning one array.
    args : sequence of array_like
        The point; floating-point arguments are differentiated by default.
    argnums : sequence of int, optional
        Which arguments to differentiate.
    mode : {"gradient", "jacobian", "hessian"}
        ``gradient`` of ``sum(fun)`` (the gradient itself when the output is a
        scalar), the full Jacobian, or the Hessian (per argument).
    eps, tol : float
        Finite-difference step and relative tolerance
        (``max |D - FD| / max(1, max |FD|)``).
    graph : str, optional
        Write the tape picture there (see :func:`tapegrad.graph.write_graph`).
    progress : callable, optional
        ``progress(done, total)`` during the finite-difference loop.

    Returns
    -------
    CheckReport
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    args = [np.asarray(a) for a in args]
    if argnums is None:
        argnums = [i for i, a in enumerate(args) if a.dtype.kind == "f"]
    if not argnums:
        raise UsageError("no floating-point argument to differentiate")
    report = CheckReport(name or getattr(fun, "__qualname__", repr(fun)), args, list(argnums), mode)
    calls, tape, returned, sources, error = survey_calls(fun, args, argnums)
    report.calls, report.error = calls, error
    out = read_outputs(returned, strict=False)[0]  # a DataArray's or Quantity's tracer (a Dataset: a dict)
    if graph is not None and tape._tape.nodes:

        targets = {"output": out} if out is not None and error is None else None
        names = {f"argument {k}": s for k, s in zip(argnums, sources)}
        report.graph_files = write_graph(tape_to_dot(tape, targets, names, title=report.function), graph)
    if report.exit_code == EXIT_UNSUPPORTED:
        return report
    if isinstance(out, (tuple, list, dict)):
        report.error = "check needs a function returning one array; it returned a " + type(returned).__name__
        return report
    report.value = fun(*args)
    if mode == "gradient" and np.size(report.value) != 1:
        report.note = "the output is not a scalar: this is the gradient of sum(output); --jacobian gives every derivative"
    if mode == "hessian" and np.size(report.value) != 1:
        report.error = "--hessian needs a function with a scalar output"
        return report
    pairs = _target_functions(fun, argnums, mode)
    total = sum(int(args[k].size) for k in argnums)
    done = [0]

    def step(n: int) -> None:
        done[0] += n
        if progress is not None:
            progress(done[0], total)

    worst = 0.0
    for k, (target, derivative) in zip(argnums, pairs):
        try:
            d = np.asarray(derivative(*args))
        except Exception as exc:
            report.error = f"{type(exc).__name__}: {exc}"
            return report
        report.derivatives.append(d)
        fd = finite_difference_columns(target, args, k, eps, step)
        mine = d.reshape(fd.shape)
        scale = max(1.0, float(np.max(np.abs(fd)))) if fd.size else 1.0
        if fd.size:
            diff = np.abs(mine - fd)
            worst = max(worst, float(np.nanmax(np.where(np.isnan(diff), np.inf, diff))) / scale)
    report.fd_error = worst
    report.tolerance = tol if tol is not None else default_tolerance(args[argnums[0]].dtype, mode)
    return report


# ---------------------------------------------------------------- terminal output
_COLORS = {"primitive": "32", "composite": "36", "constant": "33", "unsupported": "1;31", "ok": "1;32", "bad": "1;31"}


def _paint(text: str, what: str, color: bool) -> str:
    return f"\033[{_COLORS[what]}m{text}\033[0m" if color else text


def _table(rows: List[List[str]], kinds: List[str], color: bool) -> List[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [c.ljust(w) for c, w in zip(row, widths)]
        if n > 0:
            cells[1] = _paint(cells[1], kinds[n - 1], color)
        lines.append("  " + "  ".join(cells).rstrip())
        if n == 0:
            lines.append("  " + "  ".join("-" * w for w in widths))
    return lines


def format_report(report: CheckReport, color: bool = False) -> str:
    """The human-readable report: calls table, value, derivative, finite-difference verdict."""
    out = [f"tapegrad check {report.function}"]
    out.append("  inputs: " + ", ".join(f"{np.shape(a)} {np.asarray(a).dtype}" for a in report.inputs)
               + f"; differentiating argument(s) {', '.join(map(str, report.argnums))}")
    out.append("")
    scipy_called = any(c.name.startswith("scipy.") for c in report.calls)
    out.append("NumPy and SciPy functions called" if scipy_called else "NumPy functions called")
    rows = [["function", "kind", "calls", "note"]]
    rows += [[c.name, c.kind, str(c.count), c.note] for c in report.calls]
    if report.calls:
        out += _table(rows, [c.kind for c in report.calls], color)
    else:
        out.append("  (none: the output does not depend on the differentiated arguments)")
    out.append("")
    if report.unsupported:
        out.append(_paint("unsupported: " + ", ".join(report.unsupported), "bad", color))
        out.append("  register a rule with tapegrad.defvjp(fun, vjp, ...), mark it constant with "
                   "tapegrad.defconstant(fun), or see docs/limits.md")
    if report.error is not None:
        out.append(_paint("error: ", "bad", color) + report.error)
    if report.value is not None:
        with np.printoptions(precision=6, suppress=True, threshold=60, linewidth=100):
            out.append(f"value {np.shape(report.value)}:\n{_indent(np.array2string(np.asarray(report.value)))}")
            for k, d in zip(report.argnums, report.derivatives):
                out.append(f"{report.mode} w.r.t. argument {k} {d.shape}:\n{_indent(np.array2string(d))}")
    if report.note:
        out.append("note: " + report.note)
    if report.fd_error is not None:
        agree = report.fd_error <= report.tolerance
        verdict = _paint("agrees" if agree else "DISAGREES", "ok" if agree else "bad", color)
        out.append(
            f"finite differences: worst error {report.fd_error:.2e} (relative to max(1, |FD|)), "
            f"tolerance {report.tolerance:.0e}: {verdict}"
        )
    for path in report.graph_files:
        out.append(f"tape picture: {path}")
    return "\n".join(out) + "\n"


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def _progress_printer(stream: TextIO, force: bool) -> Callable[[int, int], None]:
    """Progress on ``stream``: a live counter on a terminal, a few lines otherwise.

    Silent for checks that finish within a second unless ``force``.
    """
    start = time.monotonic()
    tty = stream.isatty()
    state = {"shown": False, "last": -1}

    def show(done: int, total: int) -> None:
        if not (force or state["shown"] or time.monotonic() - start > 1.0):
            return
        state["shown"] = True
        if tty:
            stream.write(f"\r  finite differences: {done}/{total} inputs")
            if done == total:
                stream.write("\n")
        else:
            decile = done * 10 // max(total, 1)
            if decile != state["last"]:
                state["last"] = decile
                stream.write(f"  finite differences: {done}/{total} inputs\n")
        stream.flush()

    return show


def add_arguments(parser: Any) -> None:
    """The options of the ``check`` subcommand."""
    parser.add_argument("target", metavar="MODULE:FUNCTION", help="the function to check (MODULE may be a .py path)")
    parser.add_argument("--shape", action="append", default=[], metavar="3,4",
                        help="shape of one positional argument (repeat, in order; '' or 'scalar' for a 0-d array)")
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"], help="dtype of random inputs")
    parser.add_argument("--uniform", nargs=2, type=float, metavar=("LOW", "HIGH"),
                        help="draw random inputs uniformly in [LOW, HIGH) instead of N(0, 1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--inputs", metavar="FILE", help="arguments from a .npy (one) or .npz (several) file")
    parser.add_argument("--argnums", metavar="0,1", help="arguments to differentiate (default: all float arguments)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--jacobian", action="store_true", help="check the full Jacobian")
    group.add_argument("--hessian", action="store_true", help="check the Hessian (scalar functions)")
    parser.add_argument("--eps", type=float, default=1e-6, help="finite-difference step")
    parser.add_argument("--tol", type=float, help="relative tolerance (default 1e-6; 1e-5 for Hessians; 2e-3 float32)")
    parser.add_argument("--graph", metavar="FILE", help="write the tape picture (.dot, plus .svg/.png with Graphviz)")
    parser.add_argument("--json", action="store_true", help="print a JSON report instead of the table")
    parser.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    parser.add_argument("--progress", action="store_true", help="always show finite-difference progress on stderr")


def run(options: Any, stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None) -> int:
    """Carry out ``check`` for parsed command-line ``options``; return the exit status."""
    stdout = sys.stdout if stdout is None else stdout
    stderr = sys.stderr if stderr is None else stderr
    try:
        fun = load_function(options.target)
        if options.inputs:
            args = load_inputs(options.inputs, fun)
        elif options.shape:
            args = random_inputs([parse_shape(s) for s in options.shape], options.dtype, options.seed, options.uniform)
        else:
            raise UsageError("give one --shape per positional argument (e.g. --shape 3,4 --shape 4) or --inputs FILE")
        argnums = None
        if options.argnums:
            argnums = [int(a) for a in options.argnums.split(",")]
            if any(not 0 <= a < len(args) for a in argnums):
                raise UsageError(f"--argnums {options.argnums} out of range for {len(args)} arguments")
        mode = "jacobian" if options.jacobian else "hessian" if options.hessian else "gradient"
        report = check_function(
            fun, args, argnums, mode, options.eps, options.tol, options.graph,
            _progress_printer(stderr, options.progress), options.target,
        )
    except UsageError as exc:
        print(f"tapegrad check: {exc}", file=stderr)
        return EXIT_USAGE
    if options.json:
        json.dump(report.to_json(), stdout, indent=2, default=str)
        stdout.write("\n")
    else:
        color = options.color == "always" or (
            options.color == "auto" and stdout.isatty() and "NO_COLOR" not in os.environ
        )
        stdout.write(format_report(report, color))
    return report.exit_code
