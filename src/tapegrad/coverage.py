"""The coverage table: what tapegrad does with every public NumPy array function.

``python -m tapegrad.coverage`` regenerates ``docs/coverage.md`` from the rule
registry for the NumPy (and SciPy) it runs with, and records their versions in
the page; ``tests/test_coverage.py`` fails when the committed table is stale.
NumPy releases add and remove functions, so the table describes the versions it
names: on others the test compares every function both have (:func:`statuses`).

Every public callable of ``numpy``, ``numpy.linalg`` and ``numpy.fft`` that
NumPy dispatches to a tracer (ufuncs through NEP 13, array functions through
NEP 18) gets one row, aliases merged.  A differentiable function is marked
"order 1 and 2 tested" when ``tests/rules/samples.py`` holds a sample call of
it, which ``tests/rules/test_samples.py`` checks against finite differences at
first and second order.

A second section lists every ufunc of ``scipy.special`` (when SciPy is
installed): the arguments it is differentiable in, those that are constants
(integer orders and counts) or have no derivative (orders, shape parameters),
or why it is not supported (``tapegrad.rules.special.UNSUPPORTED``).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set

import numpy as np

__all__ = ["Row", "rows", "special_rows", "render", "main", "generated_with", "recorded_versions", "statuses"]

_DISPATCHER = type(np.concatenate)
_MODULES = (("numpy", np), ("numpy.linalg", np.linalg), ("numpy.fft", np.fft))

# NumPy callables that take arrays but are not dispatched (NEP 18 does not cover
# them), so a tracer reaches them only through conversion, which tapegrad refuses.
CONVERSIONS = (
    "array", "asarray", "asanyarray", "asarray_chkfinite", "ascontiguousarray",
    "asfortranarray", "require", "asmatrix", "from_dlpack",
)

# One-line reasons for functions deliberately left without a derivative.
REASONS: Dict[str, str] = {}


@dataclass
class Row:
    """One NumPy function (with its aliases) and tapegrad's answer for it."""

    names: List[str]
    status: str
    note: str = ""


def _public_functions() -> Dict[int, tuple]:
    found: Dict[int, tuple] = {}
    for prefix, module in _MODULES:
        for name in sorted(dir(module)):
            if name.startswith("_"):
                continue
            obj = getattr(module, name)
            if not (isinstance(obj, np.ufunc) or type(obj) is _DISPATCHER):
                continue
            entry = found.setdefault(id(obj), (obj, []))
            entry[1].append(f"{prefix}.{name}")
    return found


def _sampled() -> Set[int]:
    """ids of the functions that tests/rules/samples.py checks at order 1 and 2."""
    root = Path(__file__).resolve().parents[2]
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        samples = importlib.import_module("tests.rules.samples")
    except ImportError:
        return set()
    return {id(f) for f in samples.SAMPLES}


def rows() -> List[Row]:
    """One :class:`Row` per public NumPy array function, sorted by name."""
    import tapegrad  # noqa: F401  (registers the rules)
    from tapegrad.registry import COMPOSITE, CONSTANT, PRIMITIVE, RULES

    sampled = _sampled()
    out = []
    for obj, names in _public_functions().values():
        rule = RULES.get(obj)
        if rule is None:
            reason = next((REASONS[n] for n in names if n in REASONS), "no derivative rule yet")
            out.append(Row(names, "not supported", reason))
        elif rule.kind in (PRIMITIVE, COMPOSITE):
            status = "differentiable, order 1 and 2 tested" if id(obj) in sampled else "differentiable"
            out.append(Row(names, status, rule.note))
        elif rule.kind == CONSTANT:
            out.append(Row(names, "constant", rule.note or "output carries no gradient"))
    out.sort(key=lambda r: r.names[0])
    return out


def _method_rows() -> List[Row]:
    from tapegrad.registry import CONSTANT, RULES

    out = []
    for key, rule in list(RULES.items()):
        # NumPy's own ufuncs only: SciPy's get their methods on first use, so listing
        # them would make the table depend on what ran before.
        if isinstance(key, tuple) and getattr(np, key[0].__name__, None) is key[0]:
            base = RULES.get(key[0])
            constant = rule.kind == CONSTANT or (base is not None and base.kind == CONSTANT)
            out.append(Row([rule.name], "constant" if constant else "differentiable", rule.note))
    out.sort(key=lambda r: r.names[0])
    return out


def _argument_names(ufunc: np.ufunc) -> List[str]:
    """Argument names from a SciPy ufunc's docstring (``jv(v, z, out=None)``), else x1, x2, ..."""
    generic = [f"x{i + 1}" for i in range(ufunc.nin)] if ufunc.nin > 1 else ["x"]
    for line in (ufunc.__doc__ or "").splitlines():
        line = line.strip()
        if line.startswith(ufunc.__name__ + "(") and "/" not in line:
            inner = line[len(ufunc.__name__) + 1:].split(")")[0]
            names = [a.strip().split("=")[0].strip() for a in inner.split(",")]
            names = [n for n in names if n and not n.startswith("out") and n != "*"][: ufunc.nin]
            if len(names) == ufunc.nin:
                return names
    return generic


def special_rows() -> List[Row]:
    """One :class:`Row` per ufunc of ``scipy.special`` (aliases merged); empty without SciPy."""
    try:
        import scipy.special as sc
    except ImportError:
        return []
    from tapegrad.registry import CONSTANT, CONSTANT_ARG, RULES
    from tapegrad.rules import special

    found: Dict[int, tuple] = {}
    for name in sorted(dir(sc)):
        obj = getattr(sc, name)
        if not name.startswith("_") and isinstance(obj, np.ufunc):
            found.setdefault(id(obj), (obj, []))[1].append(f"scipy.special.{name}")
    out = []
    for obj, names in found.values():
        rule = RULES.get(obj)
        short = [n.rsplit(".", 1)[1] for n in names]
        if rule is None:
            reason = next((special.UNSUPPORTED[n] for n in short if n in special.UNSUPPORTED), "no derivative rule")
            out.append(Row(names, "not supported", reason))
            continue
        if rule.kind == CONSTANT:
            out.append(Row(names, "constant", rule.note or "output carries no gradient"))
            continue
        args = _argument_names(obj)
        diff = [a for a, v in zip(args, rule.vjps) if callable(v) and v is not CONSTANT_ARG]
        const = [a for a, v in zip(args, rule.vjps) if v is CONSTANT_ARG]
        status = "differentiable in " + ", ".join(diff)
        if const:
            status += "; constant in " + ", ".join(const)
        out.append(Row(names, status, rule.note))
    out.sort(key=lambda r: r.names[0])
    return out


def generated_with() -> Dict[str, str]:
    """``{"NumPy": version, "SciPy": version}`` of this process (SciPy only when installed)."""
    versions = {"NumPy": np.__version__}
    try:
        versions["SciPy"] = importlib.metadata.version("scipy")
    except importlib.metadata.PackageNotFoundError:
        pass
    return versions


def _versions_line(versions: Dict[str, str]) -> str:
    return "Generated with " + " and ".join(f"{name} {v}" for name, v in versions.items()) + "."


_VERSIONS_LINE = re.compile(r"^Generated with (.+)\.$", re.MULTILINE)


def recorded_versions(text: str) -> Dict[str, str]:
    """The versions a rendered page says it was generated with (``{}`` if it names none)."""
    match = _VERSIONS_LINE.search(text)
    if match is None:
        return {}
    return dict(part.split(" ", 1) for part in match.group(1).split(" and "))


def statuses(text: str) -> Dict[str, str]:
    """``{function name: kind}`` from a rendered page, every table, every alias.

    The kind is the status without its details (``differentiable``, ``constant``,
    ``not supported``), which do not depend on the NumPy or SciPy release (the
    argument names of a ``scipy.special`` row come from SciPy's docstrings).
    """
    out: Dict[str, str] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        kind = "differentiable" if cells[1].startswith("differentiable") else cells[1]
        for name in re.findall(r"`([^`]+)`", cells[0]):
            out[name] = kind
    return out


def markdown_table(rows_: Sequence[Row]) -> List[str]:
    lines = ["| function | status | note |", "|---|---|---|"]
    for r in rows_:
        names = ", ".join(f"`{n}`" for n in r.names)
        lines.append(f"| {names} | {r.status} | {r.note.replace('|', '/')} |")
    return lines


def _special_section() -> List[str]:
    rows_ = special_rows()
    if not rows_:
        return []
    differentiable = sum(1 for r in rows_ if r.status.startswith("differentiable"))
    constant = sum(1 for r in rows_ if r.status == "constant")
    unsupported = sum(1 for r in rows_ if r.status == "not supported")
    return [
        "## scipy.special",
        "",
        "Every ufunc of `scipy.special`, aliases merged. *differentiable in* names the arguments",
        "with a derivative rule (checked against central finite differences at first and second",
        "order in `tests/rules/test_special*.py`, unless the note says *first order only*);",
        "*constant in* names integer arguments SciPy truncates (orders, counts), whose derivative",
        "is 0. Any other argument (an order or shape parameter) raises",
        "`tapegrad.NonDifferentiableArgumentError` when it holds a traced value. *not supported*",
        "ufuncs raise `tapegrad.UnsupportedFunctionError`. The rules load the first time a SciPy",
        "ufunc meets a tracer; `import tapegrad` never imports SciPy. Python wrappers over private",
        "ufuncs trace through them: `lambertw(z, k)` is differentiable in z, `zeta(s, q)` in q",
        "(not in s, nor `zeta(s)`); `polygamma`, `logsumexp`, `softmax` trace through their NumPy",
        "code, and `multigammaln` has a composite rule (a sum of `gammaln`), as `comb`, `perm` and "
        "`factorial` (`exact=False`) have (`binom`, `poch`, `gamma`, zeros outside their range).",
        "",
        f"- ufuncs: {len(rows_)}",
        f"- differentiable: {differentiable}",
        f"- constant: {constant}",
        f"- not supported: {unsupported}",
        "",
        *markdown_table(rows_),
        "",
    ]


def render(rows_: Optional[Sequence[Row]] = None) -> str:
    """The Markdown text of ``docs/coverage.md``."""
    rows_ = list(rows()) if rows_ is None else list(rows_)
    total = len(rows_)
    counts: Dict[str, int] = {}
    for r in rows_:
        key = "differentiable" if r.status.startswith("differentiable") else r.status
        counts[key] = counts.get(key, 0) + 1
    tested = sum(1 for r in rows_ if r.status == "differentiable, order 1 and 2 tested")
    unsupported = counts.get("not supported", 0)
    lines = [
        "# Coverage of the NumPy API",
        "",
        "Generated by `python -m tapegrad.coverage` from tapegrad's rule registry; a test fails",
        "when this page is stale. One row per public function of `numpy`, `numpy.linalg` and",
        "`numpy.fft` that NumPy dispatches to a tracer (ufuncs and array functions), aliases merged.",
        "NumPy releases add and remove functions (NumPy 2.4 removed `numpy.in1d`, 2.5",
        "`numpy.row_stack`), so this page lists what the NumPy named below has; a rule for a name",
        "that another supported release lacks is registered only where NumPy has it.",
        "",
        _versions_line(generated_with()),
        "",
        "- **differentiable**: derivative rule (primitive or composite); *order 1 and 2 tested* means",
        "  a sample call is checked against central finite differences at first and second order",
        "  and with a batch of cotangents (`tests/rules/test_samples.py`), besides the family tests.",
        "- **constant**: the output carries no gradient (comparisons, rounding, arg-reductions,",
        "  shape queries); the call runs on the raw values and returns plain arrays.",
        "- **not supported**: calling it on a tracer raises `tapegrad.UnsupportedFunctionError`",
        "  naming the function; register a rule with `tapegrad.defvjp`.",
        "",
        "## Totals",
        "",
        f"- functions: {total}",
        f"- differentiable: {counts.get('differentiable', 0)} (order 1 and 2 sample-tested: {tested})",
        f"- constant: {counts.get('constant', 0)}",
        f"- not supported: {unsupported} ({100.0 * unsupported / max(total, 1):.1f}%)",
        "",
        "## Functions",
        "",
        *markdown_table(rows_),
        "",
        "## Ufunc methods",
        "",
        *markdown_table(_method_rows()),
        "",
        *_special_section(),
        "## Conversions NumPy does not dispatch",
        "",
        "These take arrays but NumPy never hands them to a tracer; they would turn it into a",
        "plain array, so tapegrad raises `tapegrad.GradientDroppedError` (from `__array__`):",
        "",
        ", ".join(f"`numpy.{n}`" for n in CONVERSIONS if hasattr(np, n)) + ".",
        "",
        "Except while a tape records: then `np.array`, `np.asarray`, `np.asanyarray`,",
        "`np.ascontiguousarray` and `np.asfortranarray`, looked up on `numpy` at call time,",
        "return traced arrays, and so do NumPy's and SciPy's own Python functions that call",
        "them (`np.asarray_chkfinite`, `np.require`, `np.mean` of a list; `tapegrad.constructors`;",
        "see *Limits*).",
        "",
    ]
    return "\n".join(lines)


def write_page(text: str, page: str, argv: Optional[Sequence[str]], usage: str) -> int:
    """Write a generated page to ``docs/<page>`` (or the one path in ``argv``) and print its totals."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print(usage)
        return 0 if argv[0] in ("-h", "--help") else 2
    target = Path(argv[0]) if argv else Path(__file__).resolve().parents[2] / "docs" / page
    target.write_text(text)
    totals = text.split("## Totals", 1)[1].split("\n## ", 1)[0].strip()
    print(f"wrote {target}\n{totals}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Write ``docs/coverage.md`` (or the path given) and print the totals."""
    return write_page(render(), "coverage.md", argv, "usage: python -m tapegrad.coverage [PATH]")


if __name__ == "__main__":
    raise SystemExit(main())
