"""``np.array`` / ``np.asarray`` of tracers while a tape records: the one host-process policy for it.

NumPy offers no protocol through which ``np.asarray(x)`` or
``np.array([y[1], -y[0] * y[1]])`` could hand a tracer back: both call
``Tracer.__array__``, which must return real memory.  Yet these two lines open
most library functions and most ODE right-hand sides.  So, while at least one
tape records (inside :func:`tapegrad.grad` and the other transforms, or a
``with tapegrad.GradientTape()`` block), the attributes ``numpy.array``,
``numpy.asarray``, ``numpy.asanyarray``, ``numpy.ascontiguousarray`` and
``numpy.asfortranarray`` are thin wrappers that

1. call the original function first, with the same arguments: anything that
   does not involve a tracer gets the original's result or error, unchanged;
2. only when the original failed because a tracer's ``__array__`` was called
   (exactly the error :func:`tapegrad.dropped.conversion_error` marks), build the traced
   result: a tracer passes through (cast when ``dtype`` asks, a traced copy when
   NumPy would copy), nested lists/tuples of tracers and numbers become one
   ``np.stack`` of the pieces.  NumPy itself decides dtype, shape (``ndmin``) and
   every error, by converting the same structure with the tracers' values.

The originals are put back when the last recording window closes (a counter
under a lock, so nested and concurrent windows in several threads compose).
A thread that records nothing meanwhile still gets the original's exact
behaviour, since the wrapper tries the original first.

What cannot work: a reference bound before the window opened
(``from numpy import asarray`` at the top of a module) is the original C
function, and compiled code converts without looking at ``numpy``'s
attributes.  Those still raise :class:`~tapegrad.errors.GradientDroppedError`,
naming the library function and the user's line (:mod:`tapegrad.dropped`).

Opt out with ``TAPEGRAD_PATCH_NUMPY=0`` in the environment or
:func:`intercept_array_constructors` ``(False)``.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from .dispatch import strip
from . import dropped, interception
from .dropped import QUIET_CALLERS, conversion_error, is_conversion, translate
from .errors import GradientDroppedError, UnsupportedFunctionError
from .tracer import Tracer

__all__ = ["intercept_array_constructors", "intercepting", "recording", "start", "stop"]

#: The numpy attributes replaced while a tape records, and the name of their first parameter.
NAMES = {
    "array": "object", "asarray": "a", "asanyarray": "a", "ascontiguousarray": "a", "asfortranarray": "a",
    "full": "fill_value",
}

_asarray = np.asarray  # the original, for the plain pieces of a traced result

_lock = threading.Lock()
_depth = 0  # open recording windows, all threads together
_installed: Dict[str, Tuple[Callable, Callable]] = {}  # name -> (original, wrapper)
_wrappers: Dict[Any, Callable] = {}  # original -> its wrapper (made once)
_made: set = set()  # the wrappers themselves
_choice: Optional[bool] = None  # set by intercept_array_constructors; else the environment decides
_DECLINED = object()


#: The environment's choice, read once (at import): this is asked at every recording window.
_ENV_CHOICE = os.environ.get("TAPEGRAD_PATCH_NUMPY", "").strip() != "0"


def _enabled() -> bool:
    if _choice is not None:
        return _choice
    return _ENV_CHOICE


def intercepting() -> bool:
    """Whether ``np.array`` and friends are intercepted in recording windows (now or next time)."""
    return _enabled()


dropped.intercepting = intercepting  # its error messages say whether interception is on


def intercept_array_constructors(enabled: bool = True) -> None:
    """Switch tapegrad's handling of ``np.array`` / ``np.asarray`` on tracers on or off.

    While a tape records, tapegrad replaces ``numpy.array``, ``numpy.asarray``,
    ``numpy.asanyarray``, ``numpy.ascontiguousarray`` and ``numpy.asfortranarray``
    by wrappers that call the original first and, only when the original fails
    on a tracer, return a traced array instead of raising.  The originals are
    restored when the last tape stops recording.  This call overrides the
    ``TAPEGRAD_PATCH_NUMPY`` environment variable (``0`` switches it off) for
    the rest of the process.

    Parameters
    ----------
    enabled : bool, default True
        ``False`` restores the originals at once (also inside a recording
        window) and keeps them: ``np.asarray(tracer)`` then raises
        :class:`~tapegrad.errors.GradientDroppedError`.
    """
    global _choice
    with _lock:
        _choice = bool(enabled)
        if _depth and enabled:
            _install()
        elif not enabled:
            _uninstall()


def _install() -> None:
    for name in NAMES:
        if name in _installed:
            continue
        current = getattr(np, name)
        wrapper = _wrappers.get(current)
        if wrapper is None:
            if current in _made:
                continue  # already one of ours
            wrapper = _wrappers[current] = _make_wrapper(current, NAMES[name])
            _made.add(wrapper)
        _installed[name] = (current, wrapper)
        setattr(np, name, wrapper)


def _uninstall() -> None:
    for name, (original, wrapper) in _installed.items():
        # Someone who replaced the attribute after us keeps their replacement.
        if getattr(np, name) is wrapper:
            setattr(np, name, original)
    _installed.clear()


def start() -> None:
    """Open a recording window (the first one installs the wrappers)."""
    global _depth
    with _lock:
        _depth += 1
        if _depth == 1:
            if _enabled():
                _install()
            interception.install()  # SciPy's door: tapegrad.interception


def stop(exc: Optional[BaseException] = None) -> None:
    """Close a recording window (the last one restores the originals).

    ``exc``, the exception leaving the window if any, is re-raised as a
    :class:`~tapegrad.errors.GradientDroppedError` when it is compiled code
    refusing a tracer (see :func:`tapegrad.dropped.translate`).
    """
    global _depth
    with _lock:
        if _depth > 0:
            _depth -= 1
            if _depth == 0:
                _uninstall()
                interception.uninstall()
    if exc is not None:
        error = translate(exc)
        if error is not exc:
            raise error from exc


class recording:
    """``with recording():`` — a recording window as a context manager (re-entrant)."""

    __slots__ = ()

    def __enter__(self) -> None:
        start()

    def __exit__(self, kind: Any, exc: Optional[BaseException], tb: Any) -> bool:
        stop(exc)
        return False


# ---------------------------------------------------------------------- the wrappers
def _make_wrapper(original: Callable, keyword: str) -> Callable:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        except GradientDroppedError as exc:
            # np.full's copy of a traced fill into its plain result is refused by np.copyto.
            if not is_conversion(exc) and keyword != "fill_value":
                raise
        except UnsupportedFunctionError:
            # ``like=tracer``: NumPy dispatches with the function it finds on the numpy
            # module now (this wrapper), which has no rule; dispatch the original instead.
            like = kwargs.get("like")
            if type(like) is not Tracer:
                raise
            options = {k: v for k, v in kwargs.items() if k != "like"}
            return like.__array_function__(original, (Tracer,), args, options)
        # The refusal was a bare marker (dropped.QUIET_CALLERS); a declined build reports in full.
        if keyword == "fill_value":
            result = _traced_full(original, args, kwargs)
        else:
            result = _traced(original, keyword, args, kwargs)
        if result is _DECLINED:
            raise conversion_error(sys._getframe(1))
        return result

    QUIET_CALLERS.add(wrapper.__code__)
    functools.update_wrapper(wrapper, original)
    return wrapper


def _shadow(obj: Any, found: list) -> Any:
    """``obj`` with every tracer (at any depth of lists/tuples) replaced by its value."""
    if type(obj) is Tracer:
        found.append(True)
        return strip(obj)
    if isinstance(obj, (list, tuple)):
        return [_shadow(item, found) for item in obj]
    return obj


def _has_tracer(obj: Any) -> bool:
    if type(obj) is Tracer:
        return True
    return isinstance(obj, (list, tuple)) and any(_has_tracer(item) for item in obj)


def _assemble(obj: Any, dtype: np.dtype) -> Any:
    """The traced array NumPy would build from ``obj``, before ``ndmin``."""
    if type(obj) is Tracer:
        return obj if obj.dtype == dtype else obj.astype(dtype)
    if isinstance(obj, (list, tuple)) and _has_tracer(obj):
        return np.stack([_assemble(item, dtype) for item in obj])
    return _asarray(obj, dtype=dtype)


def _traced(original: Callable, keyword: str, args: tuple, kwargs: dict) -> Any:
    if args:
        obj, rest, options = args[0], args[1:], kwargs
    elif keyword in kwargs:
        obj, rest = kwargs[keyword], ()
        options = {k: v for k, v in kwargs.items() if k != keyword}
    else:
        return _DECLINED
    found: list = []
    shadow = _shadow(obj, found)
    if not found:
        return _DECLINED
    # NumPy's own answer on the values: its dtype, its shape, its errors.
    value = original(shadow, *rest, **options)
    if not isinstance(value, np.ndarray):
        return _DECLINED
    if type(obj) is Tracer:
        return _pass_through(obj, value)  # a cast to object or str dtype raises there, clearly
    if value.dtype.kind not in "biufc":
        return _DECLINED
    out = _assemble(obj, value.dtype)
    return out if out.shape == value.shape else np.reshape(out, value.shape)


def _traced_full(original: Callable, args: tuple, kwargs: dict) -> Any:
    """``np.full(shape, fill_value, dtype)`` with a traced fill: the fill broadcast, then copied."""
    names = ("shape", "fill_value", "dtype", "order")
    bound = dict(zip(names, args))
    if len(args) > len(names) or any(k in bound for k in kwargs):
        return _DECLINED
    bound.update(kwargs)
    fill = bound.get("fill_value")
    found: list = []
    shadow = _shadow(fill, found)
    if "shape" not in bound or not found:
        return _DECLINED
    # NumPy's own answer on the values: its dtype, its shape, its errors.
    value = original(**{**bound, "fill_value": shadow})
    out = np.broadcast_to(_assemble(fill, value.dtype), value.shape)
    return out.copy()  # writable, as NumPy's result is


def _pass_through(x: Tracer, value: np.ndarray) -> Any:
    """``x`` as NumPy's conversion treated its value: same object, a cast, a copy or a view."""
    raw = strip(x)
    if value is raw:
        return x
    out = x if x.dtype == value.dtype else x.astype(value.dtype)
    if out is x and not np.may_share_memory(value, raw):
        out = np.copy(x)  # NumPy copied: writes into the result must not reach x
    return out if out.shape == value.shape else np.reshape(out, value.shape)
