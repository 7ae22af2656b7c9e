"""autograd.numpy is plain NumPy.

Every name is looked up on ``numpy`` at the moment it is used (module
``__getattr__``), so user code calls NumPy's own functions, exactly as it
would without autograd; tapegrad sees those calls through NumPy's override
protocols.  The only additions are the few functions autograd's NumPy has and
NumPy has not, written here in ordinary NumPy.
"""

from __future__ import annotations

from typing import Any

import numpy as _np

from . import fft, linalg, random  # noqa: F401


def make_diagonal(D: Any, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Any:
    """autograd's ``make_diagonal``: a stack of diagonal matrices whose diagonals are ``D``'s last axis.

    As autograd's, only ``offset=0, axis1=-1, axis2=-2`` is supported.
    """
    if not (offset == 0 and {axis1, axis2} == {-1, -2}):
        raise NotImplementedError("Currently make_diagonal only supports offset=0, axis1=-1, axis2=-2")
    n = _np.shape(D)[-1]
    return _np.expand_dims(D, -1) * _np.eye(n)


def __getattr__(name: str) -> Any:
    return getattr(_np, name)


def __dir__() -> list:
    return sorted(set(dir(_np)) | {"make_diagonal"})
