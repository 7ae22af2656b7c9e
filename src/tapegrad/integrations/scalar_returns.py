"""Library functions that hand back their result as ``float(...)``: a traced value stays traced.

scikit-learn's metrics end with ``return float(_average(loss, ...))``: the loss a
user wants to differentiate leaves as a Python number, which cannot carry a
derivative, so tapegrad has to refuse it.  JAX and PyTorch refuse the same
``float()`` of their tracers.  Here, while a tape records and only for a call that
holds a tracer, such a function runs its own code with the name ``float``
bound to :func:`keep_traced`: a traced float comes back as a 0-d tracer (the
derivative flows on), every other value as ``float(value)``, exactly.

A function qualifies when each use of ``float`` in its code (nested functions
included) is a call (``float(x)``), never a type (``isinstance(x, float)``,
``dtype=float``); the others keep the library's behaviour, and a traced value
given to their ``float()`` raises tapegrad's clear error.  Calls with no tracer
run the library's own code.  The functions are found by looking at the code
of each module in :data:`MODULES` once, when a recording window first opens
after the module was imported; SciPy's door (:mod:`tapegrad.interception`)
swaps them in and out with its own.
"""

from __future__ import annotations

import dis
import sys
import types
from typing import Any, Callable, Dict, List, Tuple

from ..binding import has_tracer
from ..tracer import Tracer

__all__ = ["MODULES", "keep_traced", "doors"]

#: Modules whose functions return their results through ``float()``.
MODULES: Tuple[str, ...] = (
    "sklearn.metrics._regression",
    "sklearn.metrics._classification",
    "sklearn.metrics._ranking",
)


def keep_traced(value: Any = 0.0, /) -> Any:
    """``float(value)``, except that a traced real value stays a (0-d) tracer."""
    if type(value) is Tracer and value.dtype.kind == "f" and value.size == 1:
        return value.reshape(())
    return float(value)


def _calls_only(code: types.CodeType) -> bool:
    """Whether every global ``float`` in ``code`` (and nested code) is loaded to be called."""
    for instruction in dis.get_instructions(code):
        if instruction.opname == "LOAD_GLOBAL" and instruction.argval == "float":
            # CPython marks a global loaded as a call's callable: "NULL + float" (3.11, 3.12),
            # "float + NULL" (3.13+). A bare "float" is a type test or a dtype.
            if "NULL" not in (instruction.argrepr or ""):
                return False
        elif instruction.opname == "LOAD_NAME" and instruction.argval == "float":
            return False
    return all(_calls_only(c) for c in code.co_consts if isinstance(c, types.CodeType))


def _uses_float(code: types.CodeType) -> bool:
    return "float" in code.co_names or any(_uses_float(c) for c in code.co_consts if isinstance(c, types.CodeType))


def _door(original: Callable[..., Any]) -> Callable[[tuple, dict], Any]:
    def door(args: tuple, kwargs: dict) -> Any:
        if not (has_tracer(args) or (kwargs and has_tracer(kwargs))):
            return original(*args, **kwargs)
        namespace = dict(original.__globals__)  # the module's names, float aside
        namespace["float"] = keep_traced
        shadow = types.FunctionType(
            original.__code__, namespace, original.__name__, original.__defaults__, original.__closure__
        )
        shadow.__kwdefaults__ = original.__kwdefaults__
        return shadow(*args, **kwargs)

    return door


_found: Dict[str, List[Any]] = {}


def doors() -> List[Tuple[Any, Callable[[Callable[..., Any]], Callable[[tuple, dict], Any]]]]:
    """``(function, door maker)`` for the qualifying functions of the imported :data:`MODULES`."""
    found = []
    for name in MODULES:
        module = sys.modules.get(name)
        if module is None:
            continue
        functions = _found.get(name)
        if functions is None:
            functions = _found[name] = _qualifying(module)
        found += [(fun, _door) for fun in functions]
    return found


def _qualifying(module: types.ModuleType) -> List[Any]:
    functions = []
    for value in list(vars(module).values()):
        fun = value
        # scikit-learn's public metrics are validate_params wrappers around the real function.
        while isinstance(getattr(fun, "__wrapped__", None), types.FunctionType):
            fun = fun.__wrapped__
        if (
            isinstance(fun, types.FunctionType)
            and fun.__module__ == module.__name__
            and not fun.__code__.co_flags & 0x3A0  # no generators or coroutines
            and _uses_float(fun.__code__)
            and _calls_only(fun.__code__)
        ):
            functions.append(fun)
    return functions
