"""tapegrad: differentiate ordinary NumPy code, unchanged.

A tracer array enters your function, NumPy hands every call on it to the
tracer through its override protocols (NEP 13 and NEP 18), the tracer records
each call on a tape, and one vectorized backward pass walks the tape.

>>> import numpy as np, tapegrad as tg
>>> def f(x):
...     return np.sum(np.sin(x) * x)
>>> tg.grad(f)(np.array([0.0, 1.0]))
array([0.        , 1.38177329])
"""

from .tracer import Tracer
from . import rules as _rules  # noqa: F401  (registers the derivative table)
from . import array_api  # noqa: F401  (Tracer.__array_namespace__; NumPy only)
from .api import batch_jacobian, gradients, grad, hessian, jacobian, jacrev, stop_gradient, value_and_grad, vjp
from .errors import (
    GradientDroppedError,
    NonDifferentiableArgumentError,
    TapeError,
    TapegradError,
    UnsupportedFunctionError,
)
from .gradient_tape import GradientTape
from .checkpoint import checkpoint
from .custom import custom_vjp, defvjp
from .api import hvp, jacfwd, jvp
from .memory import retain_freed_memory
from .parallel import num_threads, set_num_threads
from .constructors import intercept_array_constructors
from .interception import intercept_scipy
from .registry import CONSTANT_ARG, defcomposite, defconstant


def _metadata_version(distribution: str = "tapegrad") -> str:
    """The installed distribution's version (``pyproject.toml``'s), or ``"0+unknown"``.

    The fallback serves a source tree put on ``sys.path`` without installing it.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "0+unknown"


__version__ = _metadata_version()

__all__ = [
    "Tracer",
    "GradientTape",
    "custom_vjp",
    "checkpoint",
    "jvp",
    "jacfwd",
    "hvp",
    "grad",
    "value_and_grad",
    "vjp",
    "jacobian",
    "jacrev",
    "hessian",
    "batch_jacobian",
    "gradients",
    "stop_gradient",
    "defvjp",
    "defcomposite",
    "defconstant",
    "CONSTANT_ARG",
    "retain_freed_memory",
    "num_threads",
    "set_num_threads",
    "intercept_array_constructors",
    "intercept_scipy",
    "TapegradError",
    "UnsupportedFunctionError",
    "GradientDroppedError",
    "NonDifferentiableArgumentError",
    "TapeError",
    "__version__",
]
