"""``__array_namespace_info__`` of tapegrad's array-API namespace.

Tracers live where NumPy's arrays live (the CPU) and use NumPy's dtypes, so
the answers are NumPy's; only the capabilities say what holds for tracers.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

__all__ = ["Info", "__array_namespace_info__"]


class Info:
    """Inspection object of the namespace (array API standard, "inspection utilities")."""

    __module__ = "tapegrad.array_api"

    def __init__(self) -> None:
        self._numpy = np.__array_namespace_info__()

    def capabilities(self) -> dict:
        """Boolean indexing and data-dependent shapes work on tracers (eager evaluation)."""
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": 64}

    def default_device(self) -> str:
        return "cpu"

    def devices(self) -> list:
        return ["cpu"]

    def default_dtypes(self, *, device: Optional[Any] = None) -> dict:
        return self._numpy.default_dtypes(device=device)

    def dtypes(self, *, device: Optional[Any] = None, kind: Any = None) -> dict:
        return self._numpy.dtypes(device=device, kind=kind)


def __array_namespace_info__() -> Info:
    """Return the namespace's inspection object."""
    return Info()
