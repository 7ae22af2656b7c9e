"""autograd.scipy.special is ``scipy.special`` (each name looked up when used)."""

from typing import Any

import scipy.special as _module


def __getattr__(name: str) -> Any:
    return getattr(_module, name)
