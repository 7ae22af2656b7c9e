"""Public names of the callables tapegrad talks about in messages and tables.

NumPy defines most functions in private modules and SciPy's ufuncs carry no
module at all; users know them as ``numpy.linalg.inv`` and ``scipy.special.j0``.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["function_name"]


def function_name(fun: Any) -> str:
    """Return the dotted public name of a function, e.g. ``numpy.linalg.inv``, ``scipy.special.j0``."""
    if isinstance(fun, tuple):  # (ufunc, method)
        return f"{function_name(fun[0])}.{fun[1]}"
    if isinstance(fun, np.ufunc):
        return _ufunc_name(fun)
    module = getattr(fun, "__module__", None) or "numpy"
    name = getattr(fun, "__qualname__", None) or getattr(fun, "__name__", repr(fun))
    # NumPy defines most public functions in private modules; show the public path.
    if module.startswith("numpy"):
        for public in ("numpy.linalg", "numpy.fft"):
            if module.startswith(public):
                return f"{public}.{name}"
        return f"numpy.{name}"
    if module.startswith("scipy."):
        return f"{_public_module(module, name)}.{name}"
    return f"{module}.{name}"


def _public_module(module: str, qualname: str) -> str:
    """``scipy.ndimage`` for ``scipy.ndimage._filters`` when the public module exports the name."""
    parts = module.split(".")
    for end in range(1, len(parts)):
        if parts[end].startswith("_"):
            public = ".".join(parts[:end])
            if hasattr(sys.modules.get(public), qualname.split(".")[0]):
                return public
            break
    return module


def _ufunc_name(ufunc: np.ufunc) -> str:
    """NumPy's ufuncs say ``__module__ == "numpy"``; SciPy's say nothing, so look them up."""
    name = ufunc.__name__
    module = getattr(ufunc, "__module__", None)
    if module == "numpy" or getattr(np, name, None) is ufunc:
        return f"numpy.{name}"
    special = sys.modules.get("scipy.special")
    if special is not None and getattr(special, name, None) is ufunc:
        return f"scipy.special.{name}"
    return f"{module}.{name}" if module else name
