"""Values that are not NumPy arrays: Dask, CuPy and other NEP 13/18 arrays.

A tracer may hold any array that implements NumPy's dispatch protocols
(``__array_ufunc__`` and ``__array_function__``): rules keep calling ``np.*``
and NumPy hands each call to the value's own library, so a Dask value stays a
lazy Dask graph through the forward pass *and* the backward sweep, and a CuPy
value stays on the GPU.  This module holds the few helpers the core needs for
such "duck" values and the guard that keeps a Dask trace from silently
computing.

Dask falls back to NumPy for a function it does not implement: it warns
("... is not implemented by Dask array"), computes every argument into memory
and calls NumPy.  For a 100 GB array that is exactly what must not happen, so
while tapegrad traces or sweeps Dask values that warning is an error naming
the function (:class:`LazyFallbackError`).

``import tapegrad`` never imports Dask: the guard looks at ``sys.modules``,
and the helpers import ``dask`` only when they are handed a Dask value.
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import warnings
from math import prod as _prod
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from .errors import GradientDroppedError, UnsupportedFunctionError
from .tracer import unwrap_above  # not strip: what is read here is the type, not a guarded value
from .tree import flatten

__all__ = [
    "LazyComputeError",
    "LazyFallbackError",
    "any_duck",
    "broadcast_to",
    "guard",
    "is_dask",
    "is_duck_array",
    "zeros_like_shaped",
]

# Dask's warning text names the NumPy function it is about to compute for.
_FALLBACK = re.compile(r"The `(?P<name>[\w.]+)` function is not implemented by Dask array")


class LazyFallbackError(UnsupportedFunctionError):
    """A NumPy function on a Dask value would compute it into memory (Dask has no lazy version)."""

    def __init__(self, name: str) -> None:
        Exception.__init__(
            self,
            f"{name} is not implemented by Dask array: called on a Dask value during tapegrad's "
            "tracing or backward sweep, Dask would compute every argument into one NumPy array "
            "(silently, and possibly far larger than memory). Use a function Dask implements, "
            "write this step with dask.array.map_blocks / map_overlap inside a "
            "tapegrad.custom_vjp, or call .compute() on the input first if it fits in memory.",
        )
        self.name = name


def is_duck_array(value: Any) -> bool:
    """Whether ``value`` is an array of another library that NumPy dispatches to.

    True for Dask and CuPy arrays (anything with ``__array_function__``, a
    shape and a dtype that is not an ndarray or NumPy scalar).  Callers must
    test for tracers first: a tracer is also such an object.
    """
    if isinstance(value, (np.ndarray, np.generic)):
        return False
    t = type(value)
    if t.__module__.startswith("tapegrad."):
        return False  # tracers, pruned placeholders and banded cotangents are tapegrad's own
    return hasattr(t, "__array_function__") and hasattr(value, "shape") and hasattr(value, "dtype")


def is_dask(value: Any) -> bool:
    """Whether ``value`` is a Dask collection (immutable: it never aliases another value)."""
    return type(value).__module__.startswith("dask.")


def any_duck(values: Iterable[Any]) -> bool:
    """Whether any of ``values`` (raw values, tracers unwrapped) is a duck array."""
    return any(is_duck_array(unwrap_above(v, 0)) for v in values)


class LazyComputeError(GradientDroppedError):
    """A Dask value was computed during tapegrad's backward sweep (a rule converted it)."""


# Per thread: how many guards that refuse computes are open.
_STATE = threading.local()
_CALLBACK: Any = None


def _no_compute_callback() -> Any:
    """A Dask callback (registered once) that refuses computes inside a guarded thread."""
    global _CALLBACK
    if _CALLBACK is None:
        from dask.callbacks import Callback

        class _Refuse(Callback):
            def _start(self, dsk: Any) -> None:
                if getattr(_STATE, "refusing", 0):
                    raise LazyComputeError(
                        "a Dask array was computed during tapegrad's backward sweep (a derivative rule "
                        "converted it with np.asarray / float() or similar): tapegrad "
                        "keeps Dask values lazy. Keep the value as a Dask array, or compute the input "
                        "first if it fits in memory."
                    )

        _CALLBACK = _Refuse()
        _CALLBACK.register()
    return _CALLBACK


_UNGUARDED = contextlib.nullcontext()


def guard_values(values: Any, refuse_compute: bool = False) -> Any:
    """:func:`guard`, active when any leaf of ``values`` (a nested structure) is a duck array.

    Without Dask imported this is a shared no-op context: NumPy-only calls pay one
    dictionary look-up, not a walk over their arguments.
    """
    if "dask" not in sys.modules:
        return _UNGUARDED
    return guard(any_duck(flatten(values)[0]), refuse_compute)


@contextlib.contextmanager
def guard(active: bool = True, refuse_compute: bool = False) -> Iterator[None]:
    """Turn Dask's compute-and-fall-back-to-NumPy warning into :class:`LazyFallbackError`.

    Parameters
    ----------
    active : bool
        ``False`` (no Dask value involved) makes this a no-op, so NumPy-only
        calls pay nothing.
    refuse_compute : bool
        Also refuse every compute a local Dask scheduler starts in this thread
        (:class:`LazyComputeError`).  Used for the backward sweep, which has no
        control flow of the user's; while tracing, the program's own truth
        tests (``if np.sum(x) > 0:``) compute on purpose and are allowed.

    Notes
    -----
    Dask's fallback warning becomes :class:`LazyFallbackError`; with
    ``refuse_compute`` a Dask callback also refuses computes.  Computes on a
    ``dask.distributed`` client do not run local callbacks; the warning check
    still applies there.  Warning filters are
    process-wide in Python < 3.14: while a guarded Dask trace runs, another
    thread's Dask fallback warnings also become errors.
    """
    if not active or "dask" not in sys.modules:
        yield
        return
    if refuse_compute:
        _no_compute_callback()
    _STATE.refusing = getattr(_STATE, "refusing", 0) + refuse_compute
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=_FALLBACK.pattern, category=FutureWarning)
            try:
                yield
            except FutureWarning as warning:
                match = _FALLBACK.search(str(warning))
                if match is None:
                    raise
                raise LazyFallbackError(match.group("name")) from None
    finally:
        _STATE.refusing -= refuse_compute


def zeros_like_shaped(value: Any, shape: tuple, dtype: Any) -> Any:
    """Zeros of ``shape`` and ``dtype`` in ``value``'s array library (NumPy for plain values)."""
    if is_duck_array(value):
        return np.zeros_like(value, dtype=dtype, shape=shape)
    return np.zeros(shape, dtype=dtype)


#: A broadcast of a plain array to at most this many elements is filled in, not a view.
_FILL_SIZE = 2048


def broadcast_to(value: Any, shape: tuple, like: Any = None) -> Any:
    """``np.broadcast_to``, chunked sensibly for a Dask value.

    Dask's ``broadcast_to`` makes each new or stretched axis one chunk: the
    cotangent of a full reduction (a scalar) would become a single chunk as
    large as the whole input.  Here trailing axes take the chunks of ``like``
    (the Dask primal the cotangent belongs to) where it has that length, and
    the remaining new or stretched axes Dask's automatic chunks.  Other values
    (NumPy, tracers) take ``np.broadcast_to``, except that a small NumPy result
    is a filled, writable copy.
    """
    if type(value) is np.ndarray:
        if _prod(shape) <= _FILL_SIZE:
            # Small: filling a fresh array costs less than np.broadcast_to's Python layer.
            out = np.empty(shape, dtype=value.dtype)
            out[...] = value
            return out
        return np.broadcast_to(value, shape)
    if not is_dask(value):
        return np.broadcast_to(value, shape)
    import dask.array as da
    from dask.array.core import normalize_chunks

    shape = tuple(shape)
    hint = like.chunks if is_dask(like) else ()
    new, off = len(shape) - value.ndim, len(shape) - len(hint)
    spec = []
    for k, n in enumerate(shape):
        if k >= off and like.shape[k - off] == n:
            spec.append(hint[k - off])
        elif k >= new and value.shape[k - new] == n:
            spec.append(value.chunks[k - new])
        else:
            spec.append("auto")
    return da.broadcast_to(value, shape, chunks=normalize_chunks(tuple(spec), shape, dtype=value.dtype))


def rechunk_like(g: Any, x: Any) -> Any:
    """A Dask gradient gets its Dask source's chunks (lazily: a rechunk in the graph)."""
    raw = unwrap_above(x, 0)
    if is_dask(g) and is_dask(raw) and g.shape == raw.shape and g.chunks != raw.chunks:
        return g.rechunk(raw.chunks)
    return g
