"""The SciPy coverage table: what tapegrad does with every public function of SciPy's array modules.

``python -m tapegrad.scipy_coverage`` regenerates ``docs/scipy-coverage.md`` from
the rule registry; ``tests/test_scipy_coverage.py`` fails when the committed page
is stale.  One row per public callable of ``scipy.stats``, ``scipy.linalg``,
``scipy.ndimage``, ``scipy.signal``, ``scipy.interpolate``, ``scipy.fft``,
``scipy.spatial.transform``, ``scipy.integrate``, ``scipy.optimize``, ``scipy.sparse``
and ``scipy.sparse.linalg`` (aliases merged), and one row per method of those modules'
classes that has a rule (``scipy.stats.rv_continuous.logpdf``,
``scipy.interpolate.CubicSpline.__init__``); for ``scipy.sparse`` one row per method and
operator of its sparse arrays and matrices, over every format.

Statuses:

``differentiable``
    a rule reached through SciPy's door (:mod:`tapegrad.interception`): every call
    style, the early-bound ``from scipy.x import f`` included;
``constant``
    a rule that says the output carries no gradient;
``no rule``
    SciPy's own code runs on the tracer: where it is written with NumPy calls it is
    differentiated as written (``tests/scipy_cases.py`` checks many such functions),
    and where it converts the tracer or reaches compiled code it raises
    :class:`~tapegrad.errors.GradientDroppedError` naming the function.
"""

from __future__ import annotations

import importlib
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from .coverage import Row, markdown_table, write_page
from .names import function_name

__all__ = ["MODULES", "module_rows", "render", "main", "function_name"]

#: The SciPy modules the page covers, in the order shown.
MODULES = (
    "scipy.stats", "scipy.linalg", "scipy.ndimage", "scipy.signal", "scipy.interpolate", "scipy.fft",
    "scipy.spatial.transform", "scipy.integrate", "scipy.optimize", "scipy.sparse", "scipy.sparse.linalg",
)


def _load() -> Dict[str, object]:
    """Import the covered SciPy modules and every rule module of the door."""
    from tapegrad import interception

    modules = {}
    for name in MODULES:
        try:
            modules[name] = importlib.import_module(name)
        except ImportError:
            continue
    interception.load_rules(all_modules=True)
    return modules


def _status(rule: object) -> Tuple[str, str]:
    from tapegrad.registry import CONSTANT

    if rule is None:
        return "no rule", ""
    kind = getattr(rule, "kind")
    note = getattr(rule, "note") or ""
    if kind == CONSTANT:
        return "constant", note or "output carries no gradient"
    return f"differentiable ({kind})", note


def _distribution(obj: object) -> bool:
    """A distribution instance (``scipy.stats.norm``): covered by its class's methods."""
    return any(c.__name__ in ("rv_generic", "multi_rv_generic") for c in type(obj).__mro__)


def module_rows() -> Dict[str, List[Tuple[List[str], str, str]]]:
    """``{module: [(names, status, note), ...]}`` for every covered SciPy module."""
    from tapegrad.registry import INTERCEPTED, RULES

    modules = _load()
    by_name = {function_name(fun): fun for fun in list(INTERCEPTED)}
    out: Dict[str, List[Tuple[List[str], str, str]]] = {}
    for module_name, module in modules.items():
        found: Dict[int, Tuple[object, List[str]]] = {}
        for attr in sorted(getattr(module, "__all__", None) or dir(module)):
            obj = getattr(module, attr, None)
            if attr.startswith("_") or obj is None or isinstance(obj, (type, type(sys))) or not callable(obj):
                continue  # classes: their intercepted methods are listed below
            if _distribution(obj):
                continue
            found.setdefault(id(obj), (obj, []))[1].append(f"{module_name}.{attr}")
        rows = []
        listed = set()
        for obj, names in found.values():
            # The rule's key may be the function itself or, behind a dispatcher such as
            # scipy.fft's multimethods, the Python function with the same public name.
            key = obj if obj in INTERCEPTED or _is_ufunc(obj) else next(
                (by_name[n] for n in names if n in by_name), None
            )
            listed.update(names)
            rows.append((names, *_status(None if key is None else RULES.get(key))))
        prefix = module_name + "."
        if module_name == "scipy.sparse":
            rows += _sparse_method_rows()  # its rules sit on private base classes
        else:
            for name, fun in by_name.items():
                if name.startswith(prefix) and name not in listed and "." in name[len(prefix):]:
                    if not any(name.startswith(other + ".") for other in MODULES if len(other) > len(module_name)):
                        rows.append(([name], *_status(RULES.get(fun))))  # a method: Class.method
        rows.sort(key=lambda r: r[0][0])
        out[module_name] = rows
    return out


def _sparse_method_rows() -> List[Tuple[List[str], str, str]]:
    """One row per method and operator of SciPy's sparse arrays and matrices, over every format.

    SciPy defines them on private base classes (``_spbase``, ``_cs_matrix``, ...) and
    routes operators through private methods (``A @ x`` through ``_matmul_dispatch``):
    each row is named on ``scipy.sparse.sparray`` and gives the status shared by the
    ``*_array`` and ``*_matrix`` classes of every format, naming those that differ.
    """
    import scipy.sparse as sp

    from tapegrad.registry import RULES
    from tapegrad.rules.scipy_sparse import AS_WRITTEN, OPERATORS

    classes = [getattr(sp, f"{fmt}_{kind}") for fmt in ("csr", "csc", "coo", "bsr", "dia", "lil", "dok")
               for kind in ("array", "matrix")]
    names = sorted({n for c in classes for n in dir(c)
                    if (not n.startswith("_") or n in OPERATORS) and callable(getattr(c, n, None))})
    rows = []
    for name in names:
        statuses: Dict[str, List[str]] = {}
        notes: Dict[str, str] = {}
        for cls in classes:
            if not callable(getattr(cls, name, None)):
                continue
            rule = None
            for method in OPERATORS.get(name, (name,)):
                fun = next((k.__dict__[method] for k in cls.__mro__ if method in k.__dict__), None)
                rule = RULES.get(fun) if fun is not None else None
                if rule is not None:
                    break
            status, remark = _status(rule)
            statuses.setdefault(status, []).append(cls.__name__)
            notes[status] = notes.get(status) or remark
        ranked = sorted(statuses, key=lambda s: -len(statuses[s]))
        status = ranked[0]
        note = AS_WRITTEN.get(name, "") if status == "no rule" else (notes[status] or "every format")
        others = [f"{s} for {', '.join(statuses[s])}" for s in ranked[1:]]
        if others:
            note = "; ".join(([note] if note and note != "every format" else []) + others)
        rows.append(([f"scipy.sparse.sparray.{name}"], status, note))
    return rows


def _is_ufunc(obj: object) -> bool:
    import numpy as np

    return isinstance(obj, np.ufunc)


def render(rows: Optional[Dict[str, List[Tuple[List[str], str, str]]]] = None) -> str:
    """The Markdown text of ``docs/scipy-coverage.md``."""
    import scipy

    rows = module_rows() if rows is None else rows
    lines = [
        "# Coverage of SciPy",
        "",
        f"Generated by `python -m tapegrad.scipy_coverage` with SciPy {scipy.__version__} from",
        "tapegrad's rule registry; a test fails when this page is stale. One row per public",
        "function of each module (aliases merged) and per class method with a rule.",
        "",
        "- **differentiable**: a rule reached through SciPy's door (`tapegrad.interception`),",
        "  whatever the import style; *primitive* rules record one node with a hand-written",
        "  derivative, *composite* rules record the NumPy and SciPy calls they make.",
        "- **constant**: the output carries no gradient.",
        "- **no rule**: SciPy's own code runs on the tracer. Where that code is NumPy it is",
        "  differentiated as written (`tests/scipy_cases.py` checks many such functions at first",
        "  and second order); where it converts the tracer or reaches compiled code, the call raises",
        "  `tapegrad.GradientDroppedError` naming the function and your line.",
        "",
        "Distributions of `scipy.stats` are covered by the methods of `rv_continuous`,",
        "`rv_discrete` and the multivariate classes; the per-distribution, per-parameter results",
        "are in *SciPy stats coverage* (`docs/scipy-stats-coverage.md`).",
        "",
        "## Totals",
        "",
        "| module | functions and methods | differentiable | constant | no rule |",
        "|---|---|---|---|---|",
    ]
    for module_name, module_rows_ in rows.items():
        diff = sum(1 for r in module_rows_ if r[1].startswith("differentiable"))
        const = sum(1 for r in module_rows_ if r[1] == "constant")
        none = sum(1 for r in module_rows_ if r[1] == "no rule")
        lines.append(f"| `{module_name}` | {len(module_rows_)} | {diff} | {const} | {none} |")
    for module_name, module_rows_ in rows.items():
        lines += ["", f"## `{module_name}`", ""]
        lines += markdown_table([Row(names, status, note) for names, status, note in module_rows_])
    lines.append("")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Write ``docs/scipy-coverage.md`` (or the path given) and print the totals."""
    return write_page(render(), "scipy-coverage.md", argv, "usage: python -m tapegrad.scipy_coverage [PATH]")


if __name__ == "__main__":
    raise SystemExit(main())
