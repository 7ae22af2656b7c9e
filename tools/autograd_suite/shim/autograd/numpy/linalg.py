"""autograd.numpy.linalg is ``numpy.linalg``, plus autograd's two helpers ``T`` and ``_dot``."""

from typing import Any

import numpy as _np
import numpy.linalg as _linalg


def T(x: Any) -> Any:
    """Swap the last two axes (a stack of transposes)."""
    return _np.swapaxes(x, -1, -2)


def _dot(a: Any, b: Any) -> Any:
    """A stack of matrix products (``...ij,...jk->...ik``)."""
    return _np.einsum("...ij,...jk->...ik", a, b)


def __getattr__(name: str) -> Any:
    return getattr(_linalg, name)
