"""Tracers inside wrapper arrays (xarray's ``DataArray``/``Variable``, pint's ``Quantity``) at SciPy's door.

xarray and pint wrap any NEP 18 array, so a tracer lives inside them and NumPy's
protocols reach it: the wrapper strips its labels or units, calls NumPy again
on what it holds, and wraps the result (tracers defer to these wrappers, see
:func:`tapegrad.array_types.defers_to`).  SciPy's Python functions instead
convert their inputs (``np.asarray(y)``), and a wrapper's ``__array__`` cannot
return a tracer, so a ``Variable`` holding one reached SciPy's own code and
failed ("object __array__ method not producing an array"): this is how
``DataArray.interp`` calls ``scipy.interpolate.interp1d(x, variable)``.

SciPy's door (:mod:`tapegrad.interception`) therefore looks one step further
when it finds no tracer among a call's arguments: an argument that is such a
wrapper holding a tracer is replaced by the tracer itself, which is exactly the
array SciPy's ``np.asarray`` would have made of it (values, without labels or
units), and the call goes to its rule.

``import tapegrad`` imports neither library: types are recognised by their
module and resolved once each, through ``sys.modules``.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any, Callable, Dict, Optional, Tuple

from ..tracer import Tracer

__all__ = ["active", "held_tracer", "unwrap_arguments", "prepare"]

# type -> how to read the array it holds without converting it (None: not a wrapper)
_HOLDS: Dict[type, Optional[Callable[[Any], Any]]] = {}


def _holder(cls: type) -> Optional[Callable[[Any], Any]]:
    root = (getattr(cls, "__module__", None) or "").partition(".")[0]
    found: Optional[Callable[[Any], Any]] = None
    if root == "xarray":
        xr = sys.modules.get("xarray")
        if xr is not None and issubclass(cls, xr.DataArray):
            found = _data_array
        elif xr is not None and issubclass(cls, xr.Variable):
            found = _variable
    elif root == "pint":
        pint = sys.modules.get("pint")
        if pint is not None and issubclass(cls, pint.Quantity):
            found = _magnitude
    _HOLDS[cls] = found
    return found


# The private attributes, not ``.data``/``.values``: those may convert (a lazily loaded file).
def _data_array(obj: Any) -> Any:
    return obj.variable._data


def _variable(obj: Any) -> Any:
    return obj._data


def _magnitude(obj: Any) -> Any:
    return obj._magnitude


def held_tracer(obj: Any) -> Optional[Tracer]:
    """The tracer that ``obj``, a wrapper (possibly of wrappers), holds; ``None`` if it holds none.

    >>> held_tracer(1.0) is None
    True
    """
    for _ in range(8):  # DataArray -> Variable -> Quantity -> tracer, and a little more
        cls = type(obj)
        if cls is Tracer:
            return obj
        get = _HOLDS[cls] if cls in _HOLDS else _holder(cls)
        if get is None:
            return None
        obj = get(obj)
    return None


def unwrap_arguments(args: tuple, kwargs: dict) -> Optional[Tuple[tuple, dict]]:
    """``(args, kwargs)`` with each wrapper that holds a tracer replaced by its tracer.

    ``None`` when no argument is such a wrapper (the call stays SciPy's own).
    """
    found = False
    new_args = list(args)
    for i, a in enumerate(args):
        t = held_tracer(a) if type(a) is not Tracer else None
        if t is not None:
            new_args[i], found = t, True
    new_kwargs = dict(kwargs)
    for k, v in kwargs.items():
        t = held_tracer(v) if type(v) is not Tracer else None
        if t is not None:
            new_kwargs[k], found = t, True
    return (tuple(new_args), new_kwargs) if found else None


_scipy_installed: Optional[bool] = None

#: Whether xarray or pint was imported when the current recording window opened (the
#: door only looks inside arguments then).
active = False


def prepare() -> None:
    """As a recording window opens: note whether wrappers may occur; import what xarray imports late.

    xarray imports ``scipy.interpolate`` the first time ``interp`` runs; SciPy's
    door loads the rules of the SciPy modules already imported when a window
    opens, so an import inside the differentiated function would leave that
    first call with SciPy's own code.  With xarray imported and SciPy installed,
    ``scipy.interpolate`` is imported here instead (once per process).
    """
    global _scipy_installed, active
    active = "xarray" in sys.modules or "pint" in sys.modules
    if "xarray" not in sys.modules or "scipy.interpolate" in sys.modules:
        return
    if _scipy_installed is None:
        _scipy_installed = importlib.util.find_spec("scipy") is not None
    if _scipy_installed:
        importlib.import_module("scipy.interpolate")
