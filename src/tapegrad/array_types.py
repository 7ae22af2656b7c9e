"""Array type in, array type out: what the array-API door needs from the tracer layer.

Array-API-generic code (SciPy with ``SCIPY_ARRAY_API=1``, scikit-learn) asks an
array for its namespace and refuses to mix array types.  The namespace lives in
:mod:`tapegrad.array_api` (a higher layer), which installs itself here when
imported.  Tapes whose tracers were asked for it keep "array type in, array type
out": the outputs of constant-valued calls (masks, indices, counts) come back as
constant tracers of the tape (so do the namespace's creation functions).  Integers
and booleans carry no gradient, so such tracers turn back into plain values freely
(``int()``, ``np.asarray``, indexing).
"""

from __future__ import annotations

import sys
import weakref
from typing import Any, Callable, Dict, Optional

import numpy as np

__all__ = ["TAPES", "set_array_namespace", "namespace_of", "as_array_type", "follow_library", "defers_to",
           "HOLDER_TYPES", "hold_tracers_in", "refuse_sparse_operands"]

_namespace: Optional[Callable[[Any, Optional[str]], Any]] = None

#: The tapes whose tracers were asked for their namespace.
TAPES: "weakref.WeakSet" = weakref.WeakSet()


def set_array_namespace(getter: Callable[[Any, Optional[str]], Any]) -> None:
    """Install ``getter(tape, api_version)``, the function behind ``Tracer.__array_namespace__``."""
    global _namespace
    _namespace = getter


def namespace_of(tape: Any, api_version: Optional[str]) -> Any:
    """The namespace for the tracers of ``tape``; the tape keeps array types from now on."""
    if _namespace is None:
        raise RuntimeError("tapegrad.array_api is not imported (import tapegrad imports it)")
    TAPES.add(tape)
    return _namespace(tape, api_version)


def as_array_type(tape: Any, out: Any) -> Any:
    """``out`` with its plain arrays (also inside tuples and lists) made constants of ``tape``."""
    if isinstance(out, (np.ndarray, np.generic)):
        return tape.constant(out)
    if isinstance(out, tuple):
        items = [as_array_type(tape, o) for o in out]
        return type(out)(*items) if hasattr(out, "_fields") else tuple(items)
    if isinstance(out, list):
        return [as_array_type(tape, o) for o in out]
    return out


#: Libraries whose arrays wrap other arrays (units, labels) and so may hold tracers.
WRAPPER_LIBRARIES = {"pint", "xarray", "pint_xarray"}

#: type -> whether a tracer defers to it (filled on first sight of each type).
DEFERS: Dict[type, bool] = {}


#: Types whose instances may keep a tracer among their attributes (a SciPy sparse matrix
#: with traced values keeps it as ``.data``): SciPy's door (:mod:`tapegrad.interception`)
#: treats an argument of such a type that holds one as a traced argument.
HOLDER_TYPES: tuple = ()


def hold_tracers_in(cls: type) -> None:
    """Let SciPy's door look for tracers among the attributes of arguments of type ``cls`` (rule modules call it)."""
    global HOLDER_TYPES
    if cls not in HOLDER_TYPES:
        HOLDER_TYPES = HOLDER_TYPES + (cls,)


def refuse_sparse_operands(ufunc: Any, inputs: tuple) -> None:
    """Raise a clear error for a NumPy ufunc given a SciPy sparse matrix beside a tracer.

    NumPy's functions do not know sparse matrices (on plain arrays ``np.dot(A, x)``
    builds an object array); the tracer defers to the matrix, whose operators have
    rules, so the error says to use them.
    """
    for item in inputs:
        if (type(item).__module__ or "").startswith("scipy.sparse"):
            from .errors import NonDifferentiableArgumentError

            name = getattr(ufunc, "__name__", str(ufunc))
            raise NonDifferentiableArgumentError(
                f"numpy.{name} was given a SciPy sparse {type(item).__name__} beside a tapegrad tracer: "
                "NumPy's functions do not handle sparse matrices (np.dot, np.matmul and np.multiply of "
                "plain arrays would not either). Use the matrix's own operators, which tapegrad "
                "differentiates: A @ x, x @ A, A.dot(x), A.multiply(x)."
            )


def defers_to(cls: type) -> bool:
    """Whether tracers leave a NumPy call that involves an instance of ``cls`` to ``cls``.

    A wrapper array (pint's ``Quantity``, xarray's ``DataArray``/``Variable``) may
    hold a tracer, so it must handle a call mixing it with a tracer itself: it
    strips its units or labels, calls NumPy again on what it holds, and wraps the
    result (NEP 13/18: the tracer's ``__array_ufunc__``/``__array_function__``
    and operators return ``NotImplemented``).  Taken as a constant by the tracer
    instead, the wrapper would end up inside a tracer (``x * quantity`` a tracer
    holding a ``Quantity``).  Arrays a tracer may hold (NumPy's, Dask's, CuPy's)
    are not deferred to.  SciPy's sparse matrices and operators (no NEP 13/18
    protocols) are deferred to by the operators: ``x @ A`` and ``x * A`` become
    ``A.__rmatmul__(x)`` and ``A.__rmul__(x)``, which SciPy's door routes to rules;
    a NumPy function given one beside a tracer (``np.matmul(x, A)``) raises NumPy's
    ``TypeError`` naming both types.
    """
    known = DEFERS.get(cls)
    if known is None:
        module = getattr(cls, "__module__", None) or ""
        wrapper = module.partition(".")[0] in WRAPPER_LIBRARIES and (
            hasattr(cls, "__array_function__") or hasattr(cls, "__array_ufunc__")
        )
        # A class that opts out of ufuncs (``__array_ufunc__ = None``: NumPy's Polynomial) gets
        # NotImplemented from the operators, as NEP 13 asks, so its reflected operator runs.
        opted_out = getattr(cls, "__array_ufunc__", False) is None
        sparse = hasattr(cls, "__rmatmul__") and any(
            (getattr(k, "__module__", None) or "").startswith("scipy.sparse.") for k in cls.__mro__
        )
        known = DEFERS[cls] = wrapper or opted_out or sparse
    return known


def follow_library(constant: Any, like: Any) -> Any:
    """``constant`` (a NumPy array) moved to the array library of ``like`` when that library needs it.

    CuPy refuses NumPy operands (no implicit copy to the GPU); a constant that tapegrad
    itself made with ``np.*`` (a Jacobian's basis rows, a mask) must then follow the
    traced value to its device.  Dask mixes with NumPy arrays as they are, and NumPy
    values need nothing: both come back unchanged.
    """
    if type(constant) is not np.ndarray or type(like) is np.ndarray:
        return constant
    library = sys.modules.get(type(like).__module__.partition(".")[0])
    if library is None or library.__name__ != "cupy":
        return constant
    return library.asarray(constant)
