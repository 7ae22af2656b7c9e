"""autograd.scipy.linalg is ``scipy.linalg`` (each name looked up when used)."""

from typing import Any

import scipy.linalg as _module


def __getattr__(name: str) -> Any:
    return getattr(_module, name)
