"""autograd.scipy.integrate is ``scipy.integrate`` (each name looked up when used)."""

from typing import Any

import scipy.integrate as _module


def __getattr__(name: str) -> Any:
    return getattr(_module, name)
