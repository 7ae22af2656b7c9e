"""``x.flat`` of a tracer: NumPy's flat iterator, read and written through ``x`` itself."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["FlatIndexer"]


class FlatIndexer:
    """``x.flat`` for a tracer: iterate, read ``x.flat[k]`` and write ``x.flat[k] = v``
    (``K.flat[::n + 1] += alpha``, scikit-learn's kernel ridge), as for an ndarray.

    ``k`` indexes ``x`` in C order whatever its layout: it becomes an index into ``x``
    itself, so a write lands in ``x`` (and its views) through tapegrad's in-place rules.

    It is its own iterator, as NumPy's ``flatiter`` is: ``coords`` and ``index`` say
    where the next element comes from (``np.ndenumerate`` reads them).
    """

    __slots__ = ("_x", "_pos", "_flat", "_seen")

    def __init__(self, x: Any) -> None:
        self._x = x
        self._pos = 0
        self._flat: Any = None
        self._seen = -1

    def _where(self, key: Any) -> tuple:
        return np.unravel_index(np.arange(self._x.size)[key], self._x.shape)

    def __iter__(self) -> "FlatIndexer":
        return self

    def __next__(self) -> Any:
        x = self._x
        if self._pos >= x.size:
            raise StopIteration
        if self._flat is None or self._seen != x._index:  # written since: read the new values
            self._flat, self._seen = np.ravel(x), x._index
        value = self._flat[self._pos]
        self._pos += 1
        return value

    @property
    def coords(self) -> tuple:
        """The index (a tuple) of the element the next step returns."""
        shape = self._x.shape
        if self._pos < self._x.size:
            return tuple(int(i) for i in np.unravel_index(self._pos, shape))
        return (shape[0],) + (0,) * (len(shape) - 1) if shape else ()  # past the end, as NumPy's flatiter

    @property
    def index(self) -> int:
        """The flat (C-order) index of the element the next step returns."""
        return self._pos

    @property
    def base(self) -> Any:
        return self._x

    def __len__(self) -> int:
        return self._x.size

    def __getitem__(self, key: Any) -> Any:
        return self._x[self._where(key)]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._x[self._where(key)] = value
