"""NumPy constants beside tracers in array-API code: the call's namespace is the tracer's.

Array-API-generic code asks its inputs for one namespace
(``array_api_compat.array_namespace(x, y)``) and refuses two: SciPy in its
array-API mode (``SCIPY_ARRAY_API=1``) and scikit-learn with
``array_api_dispatch=True`` raise "Multiple namespaces for array inputs" for
``special.xlogy(c, x)``, ``stats.pearsonr(x, y)`` or ``rbf_kernel(X, Y)``
when ``x`` is traced and ``c``/``y``/``Y`` are NumPy arrays held fixed.  Users
mix constants and variables all the time, and a NumPy array is a valid
operand of every function of tapegrad's namespace (NumPy's own functions,
which hand a call with a tracer in it to tapegrad).  So while a tape records,
SciPy's door (:mod:`tapegrad.interception`) also routes these look-ups:

``array_namespace(*xs, api_version=None, use_compat=None)``
    (array-api-compat's, in each copy: SciPy's and scikit-learn's vendored ones
    and the standalone package; SciPy's own ``array_namespace`` and
    scikit-learn's ``get_namespace`` call it).  When ``xs`` holds a tracer and
    at least one NumPy array (``ndarray`` or NumPy scalar, of a numerical or
    boolean dtype) and nothing but tracers, such NumPy arrays, Python scalars
    and ``None``, the answer is the tracer's namespace: the library then converts the constants with
    ``xp.asarray`` (a constant of the tape) or mixes them in NumPy calls.
``check_same_namespace(X, estimator, attribute=, method=)``
    (scikit-learn's check that ``predict(X)`` gets the namespace ``fit`` saw).
    An estimator fitted on NumPy arrays and applied to a tracer, or fitted on
    tracers and applied to a NumPy array, mixes constants with a tracer, as
    above: the check passes, and NumPy hands the mixed calls to tapegrad.

Every other call, and every call with no tracer, runs the library's own code:
its results and its errors are the library's (an array of a third library
beside a tracer still raises "Multiple namespaces", ``use_compat=True`` still
refuses a namespace without a compat wrapper).  Outside a recording window
nothing is routed.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import numpy as np

from ..tracer import Tracer

__all__ = ["LOOKUPS", "namespace_door", "same_namespace_door"]

_SCALARS = (bool, int, float, complex)


def _is_numpy(x: Any) -> bool:
    # Exactly NumPy's numerical and boolean arrays: SciPy refuses np.matrix, masked arrays
    # and other dtypes itself, and an array of strings is no operand of the tracer's namespace.
    return (type(x) is np.ndarray or isinstance(x, np.generic)) and x.dtype.kind in "biufc"


def _tracer_beside_numpy(xs: tuple) -> Optional[Tracer]:
    """The first tracer of ``xs`` when the others are NumPy arrays (one at least) or scalars; else ``None``."""
    tracer = None
    numpy = False
    for x in xs:
        if type(x) is Tracer:
            if tracer is None:
                tracer = x
        elif _is_numpy(x):
            numpy = True
        elif x is not None and not isinstance(x, _SCALARS):
            return None  # another library's array: its own error, or its own answer
    return tracer if numpy else None


def namespace_door(original: Callable[..., Any]) -> Callable[[tuple, dict], Any]:
    """The door of array-api-compat's ``array_namespace(*xs, api_version=None, use_compat=None)``."""

    def door(args: tuple, kwargs: dict) -> Any:
        if not kwargs.get("use_compat"):
            tracer = _tracer_beside_numpy(args)
            if tracer is not None:
                return tracer.__array_namespace__(api_version=kwargs.get("api_version"))
        return original(*args, **kwargs)

    return door


def same_namespace_door(original: Callable[..., Any]) -> Callable[[tuple, dict], Any]:
    """The door of scikit-learn's ``check_same_namespace(X, estimator, *, attribute, method)``."""

    def door(args: tuple, kwargs: dict) -> Any:
        X = args[0] if args else kwargs.get("X")
        estimator = args[1] if len(args) > 1 else kwargs.get("estimator")
        attribute = kwargs.get("attribute", args[2] if len(args) > 2 else None)
        if isinstance(attribute, str):
            fitted = getattr(estimator, attribute, None)
            if (type(X) is Tracer and _is_numpy(fitted)) or (type(fitted) is Tracer and _is_numpy(X)):
                return None  # constants beside a tracer: one namespace, the tracer's
        return original(*args, **kwargs)

    return door


#: module -> {function name: door maker}; a module is looked at only once it is imported.
#: SciPy 1.18 moved its vendored array-api-compat from scipy._lib to scipy._external.
LOOKUPS: Dict[str, Dict[str, Callable[[Callable[..., Any]], Callable[[tuple, dict], Any]]]] = {
    "scipy._lib.array_api_compat.common._helpers": {"array_namespace": namespace_door},
    "scipy._external.array_api_compat.common._helpers": {"array_namespace": namespace_door},
    "sklearn.externals.array_api_compat.common._helpers": {"array_namespace": namespace_door},
    "array_api_compat.common._helpers": {"array_namespace": namespace_door},
    "sklearn.utils._array_api": {"check_same_namespace": same_namespace_door},
}
