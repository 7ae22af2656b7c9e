"""Where a gradient was dropped: name the library call and the user's line.

A tracer that reaches code tapegrad cannot follow (compiled code, a
``from numpy import asarray`` bound before tapegrad intercepted it, a raw
memory attribute) has to fail.  What helps is saying *which* library function
did it and *which line of the user's code* called that function, so this module
walks the Python stack (or an exception's traceback) and picks:

* the *user frame*: the innermost frame whose module is outside tapegrad,
  NumPy and SciPy;
* the *called function*: the library frame that user frame called (its
  public name when the package exports it, e.g. ``scipy.ndimage.gaussian_filter``
  rather than ``scipy.ndimage._filters.gaussian_filter``);
* the *converting function*: the innermost library frame, where the tracer
  actually met compiled code.

:func:`conversion_error` builds the error ``Tracer.__array__`` raises;
:func:`translate` turns a ``TypeError`` / ``AttributeError`` that compiled
code raised on a tracer (``a bytes-like object is required, not 'Tracer'``)
into a :class:`~tapegrad.errors.GradientDroppedError` with the same details.
"""

from __future__ import annotations

import inspect
import re
import sys
import threading
from types import FrameType, TracebackType
from typing import Callable, List, Optional, Tuple

from .errors import GradientDroppedError

__all__ = [
    "MemoryAttributeError",
    "conversion_error",
    "is_conversion",
    "memory_attribute_error",
    "translate",
]

#: Top-level packages whose frames are "library", not the user's code.
LIBRARIES = ("tapegrad", "numpy", "scipy")

#: Attributes and methods that expose an ndarray's memory: a tracer has none.  (Not
#: ``__array_interface__`` / ``__array_struct__``: NumPy probes those on every
#: conversion and needs a plain, cheap AttributeError.)
MEMORY_ATTRIBUTES = frozenset(
    {"flags", "strides", "ctypes", "data", "base", "tobytes", "tofile", "dump", "dumps", "view",
     "getfield", "setfield", "setflags", "byteswap"}
)

_ADVICE = (
    "tapegrad cannot follow a derivative through compiled code or a plain copy. Write that "
    "step with NumPy functions on the traced values, register a rule for it with "
    "tapegrad.defvjp, or pass tapegrad.stop_gradient(x) if the value is meant as a constant."
)


class MemoryAttributeError(GradientDroppedError, AttributeError):
    """An ndarray memory attribute (``flags``, ``strides``, ...) was read on a tracer.

    Also an ``AttributeError``, so ``hasattr(x, "strides")`` stays ``False``.
    """



def _module(frame: FrameType) -> str:
    return frame.f_globals.get("__name__", "") or ""


def _is_library(frame: FrameType, extra: tuple = ()) -> bool:
    top = _module(frame).partition(".")[0]
    return top in LIBRARIES or top in extra


def _public_name(frame: FrameType) -> str:
    """``package.function`` as the user would write it, else ``module.qualname``."""
    code = frame.f_code
    qualname = getattr(code, "co_qualname", code.co_name)
    module = _module(frame)
    path = qualname.split(".")
    if len(path) <= 2 and "<" not in qualname:
        parts = module.split(".")
        # The shortest importable prefix that exports this very function (or its class) wins.
        for n in range(1, len(parts) + 1):
            owner = sys.modules.get(".".join(parts[:n]))
            candidate = owner
            for name in path:
                candidate = getattr(candidate, name, None)
            try:
                if candidate is not None and inspect.unwrap(candidate).__code__ is code:
                    public = f"{'.'.join(parts[:n])}.{qualname}"
                    return public[: -len(".__init__")] if public.endswith(".__init__") else public
            except (AttributeError, ValueError):
                continue
    return f"{module}.{qualname}" if module else qualname


def _locate(
    frames: List[Tuple[FrameType, int]], extra: tuple = ()
) -> Tuple[Optional[str], Optional[str], Optional[str]]:
    """From ``(frame, line)`` pairs, innermost first: (called, converting, user site).

    Frames of tapegrad itself are skipped when naming library functions; ``extra``
    names more top-level packages whose frames count as library.
    """
    called = converting = user = None
    for i, (frame, line) in enumerate(frames):
        if not _is_library(frame, extra):
            user = f"{frame.f_code.co_filename}:{line}"
            library = [f for f, _ in frames[:i] if not _module(f).startswith("tapegrad")]
            if library:
                # A decorator's wrapper (``...<locals>.wrapper``) is not what the user called.
                named = [f for f in library if "<locals>" not in getattr(f.f_code, "co_qualname", "")]
                called = _public_name((named or library)[-1])
                converting = _public_name(library[0])
            break
    return called, converting, user


def _stack(start: Optional[FrameType]) -> List[Tuple[FrameType, int]]:
    frames = []
    while start is not None:
        frames.append((start, start.f_lineno))
        start = start.f_back
    return frames


def _traceback(tb: Optional[TracebackType]) -> List[Tuple[FrameType, int]]:
    """The traceback's frames, innermost first, then the frames that called its top one."""
    frames = []
    top = tb.tb_frame if tb is not None else None
    while tb is not None:
        frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    frames.reverse()  # innermost first, like _stack
    if top is not None:
        # Caught inside tapegrad (grad calling the user's function directly): the user's
        # line is further out, on the live stack.
        frames.extend(_stack(top.f_back))
    return frames


#: Whether np.array / np.asarray are intercepted while tapes record; set by
#: :mod:`tapegrad.constructors` (a higher layer) when it is imported.
intercepting: Callable[[], bool] = lambda: False


def _interception_note() -> str:
    if not intercepting():
        return (
            " (tapegrad's interception of np.array / np.asarray is switched off: "
            "TAPEGRAD_PATCH_NUMPY=0 or tapegrad.intercept_array_constructors(False).)"
        )
    return (
        " tapegrad lets np.array / np.asarray / np.asanyarray / np.ascontiguousarray through "
        "while a tape records, but only when looked up on the numpy module at call time: a name "
        "bound earlier (`from numpy import asarray`) or a conversion inside compiled code is not "
        "intercepted."
    )


def _at(user: Optional[str]) -> str:
    return f" at {user}" if user else ""


def _library_call(called: str, converting: Optional[str], user: Optional[str]) -> Tuple[str, str]:
    """("scipy.x.f (called at file:line)", " in scipy.x._inner") for a message."""
    subject = f"{called} (called at {user})" if user else called
    inside = f" in {converting}" if converting is not None and converting != called else ""
    return subject, inside


#: Per thread: the innermost Python frame (id, code, line) of the last ``Tracer.__array__``
#: call.  Compiled code often replaces that error by its own (``ValueError: could not
#: convert b, a, and x to a common type``); :func:`translate` recognises it by this site.
_last_conversion = threading.local()


def _site(frame: FrameType, line: int) -> tuple:
    return id(frame), frame.f_code, line


#: Code objects of callers that handle a refusal themselves (tapegrad.constructors'
#: wrappers): they get a bare marked error, without the cost of walking the stack.
QUIET_CALLERS: set = set()


def conversion_error(caller: Optional[FrameType] = None) -> GradientDroppedError:
    """The error ``Tracer.__array__`` raises, naming where the conversion came from.

    ``caller`` is the innermost frame to report from; by default the caller of
    the function that calls this one (``__array__``).  The error is marked
    (:func:`is_conversion`) for :mod:`tapegrad.constructors`.
    """
    if caller is None:
        caller = sys._getframe(2)
        if caller.f_code in QUIET_CALLERS:
            error = GradientDroppedError("np.asarray on a tapegrad tracer")
            error._tapegrad_conversion = True  # type: ignore[attr-defined]
            return error
    _last_conversion.site = _site(caller, caller.f_lineno)
    called, converting, user = _locate(_stack(caller))
    if called is None:
        text = (
            f"np.asarray / np.array (or storing it into a plain ndarray){_at(user)} on a tapegrad "
            "tracer would turn it into a plain value and silently drop its gradient. Build arrays "
            "with np.stack / np.concatenate / np.where on the tracers, or preallocate a traced "
            "array (y = np.zeros_like(x) or y = x.copy()) and assign into it with y[i] = v. If you "
            "really want a constant, call "
            "tapegrad.stop_gradient(x) first."
        )
    else:
        subject, inside = _library_call(called, converting, user)
        text = (
            f"{subject} converts a tapegrad tracer to a plain ndarray{inside}, which would silently "
            "drop its gradient. " + _ADVICE
        )
    error = GradientDroppedError(text + _interception_note())
    error._tapegrad_conversion = True  # type: ignore[attr-defined]
    return error


def is_conversion(exc: BaseException) -> bool:
    """Whether ``exc`` is the refusal of a tracer's ``__array__`` (see :func:`conversion_error`)."""
    return getattr(exc, "_tapegrad_conversion", False)


def memory_attribute_error(name: str) -> MemoryAttributeError:
    """The error reading ``x.flags`` / ``x.strides`` / ... on a tracer raises."""
    called, converting, user = _locate(_stack(sys._getframe(2)))
    what = (
        "which a tapegrad tracer does not have: handing its data to compiled code would drop its "
        "gradient. " + _ADVICE
    )
    if called is None:
        return MemoryAttributeError(f"x.{name}{_at(user)} asks for the memory of a plain ndarray, {what}")
    subject, inside = _library_call(called, converting, user)
    return MemoryAttributeError(f"{subject} reads x.{name}{inside}, the memory of a plain ndarray, {what}")


# Messages that compiled code (CPython, Cython, pybind11) gives an object that is not an array.
_CONVERSION = re.compile(
    r"bytes-like object is required, not 'Tracer'"
    r"|got Tracer\b|Cannot convert Tracer\b"
    r"|Invoked with: .*Tracer\(level="
    r"|must be numpy\.ndarray, not Tracer\b"  # CPython's argument parsing (SciPy 1.18's expm)
)


# Library code that takes a tracer for something other than an array and says so in its
# own words: (module of the raising frame, message).  SciPy's array-API helpers treat an
# object without ``__array_namespace__`` as read-only, so ``xpx.at(x, i).set(v)`` refuses.
# SciPy 1.18 moved its vendored array_api_compat and array_api_extra from scipy._lib
# to scipy._external.
_LIBRARY_REFUSALS = (
    ("scipy._lib.array_api_extra.", re.compile(r"^Can't update read-only array")),
    ("scipy._external.array_api_extra.", re.compile(r"^Can't update read-only array")),
)

# A call that mixes plain NumPy arrays with tracers, refused by the library's array-API
# mode: SciPy (SCIPY_ARRAY_API=1) and scikit-learn (array_api_dispatch=True) want every
# array of one call, or an estimator's fitted arrays and its input, in one namespace.
_MIXED_NAMESPACES = (
    ("scipy.", re.compile(r"^Multiple namespaces for array inputs: .*tapegrad")),
    ("sklearn.", re.compile(r"^Multiple namespaces for array inputs: .*tapegrad")),
    ("sklearn.", re.compile(r"must use the same namespace .*fit\(\)(?s:.*)tapegrad")),
)

_MIXED_ADVICE = (
    "Nothing has to be lost here, only the arrays' kinds differ. Pass each plain array the "
    "call takes through the tracer's namespace (xp = x.__array_namespace__(); c = xp.asarray(c)), "
    "fit an estimator on the same kind of array as you then transform (fit inside the "
    "differentiated function, or move_estimator_to(estimator, x.__array_namespace__(), None) "
    "from sklearn.utils._array_api), or use SciPy in its default mode (SCIPY_ARRAY_API unset), "
    "where tapegrad's rules for SciPy functions apply. See docs/scipy-sklearn.md."
)


def _matches(frames: List[Tuple[FrameType, int]], message: str, table: tuple) -> bool:
    if not frames:
        return False
    module = _module(frames[0][0])
    return any(module.startswith(prefix) and pattern.search(message) for prefix, pattern in table)


def _library_refusal(frames: List[Tuple[FrameType, int]], message: str) -> bool:
    return _matches(frames, message, _LIBRARY_REFUSALS)


def _mixed_namespaces(exc: BaseException, frames: List[Tuple[FrameType, int]], message: str) -> BaseException:
    called, converting, user = _locate(frames, ("sklearn",))
    subject, inside = _library_call(called or "library code", converting, user)
    error = GradientDroppedError(
        f"{subject} received plain NumPy arrays together with tapegrad tracers{inside}, and in its "
        f"array-API mode it refuses arrays of two namespaces in one call ({type(exc).__name__}: "
        f"{message.splitlines()[0] if message else message}). " + _MIXED_ADVICE
    )
    error.__cause__ = exc
    return error


def translate(exc: BaseException) -> BaseException:
    """``exc`` itself, or a :class:`GradientDroppedError` if compiled code choked on a tracer.

    Only a ``TypeError`` / ``AttributeError`` / ``ValueError`` is translated, and
    only when its message is one of the known "this object is not an array"
    messages naming ``Tracer``, when it was raised by the very call in which a
    tracer's ``__array__`` refused last (compiled code that swallowed that refusal
    and raised its own error), or when it is a known refusal of a library helper
    (SciPy's array-API ``at(x, i).set(v)``: "Can't update read-only array").
    tapegrad's own errors and anything else pass unchanged.
    """
    if isinstance(exc, GradientDroppedError) or not isinstance(exc, (TypeError, AttributeError, ValueError)):
        return exc
    message = str(exc)
    frames = _traceback(exc.__traceback__)
    replaced = bool(frames) and _site(*frames[0]) == getattr(_last_conversion, "site", None)
    if _matches(frames, message, _MIXED_NAMESPACES):
        return _mixed_namespaces(exc, frames, message)
    if _library_refusal(frames, message):
        called, converting, user = _locate(frames)
        subject, inside = _library_call(called or "library code", converting, user)
        error = GradientDroppedError(
            f"{subject} does not treat a tapegrad tracer as an array{inside} ({type(exc).__name__}: "
            f"{message}): it cannot be differentiated as it is. " + _ADVICE
        )
        error.__cause__ = exc
        return error
    if not (replaced or _CONVERSION.search(message)):
        return exc
    called, converting, user = _locate(frames)
    problem = f"that needs a plain ndarray ({type(exc).__name__}: {message}), which would drop its gradient. "
    if called is None:
        error = GradientDroppedError(f"a tapegrad tracer reached compiled code{_at(user)} {problem}" + _ADVICE)
    else:
        subject, inside = _library_call(called, converting, user)
        error = GradientDroppedError(f"{subject} hands a tapegrad tracer to compiled code{inside} {problem}" + _ADVICE)
    error.__cause__ = exc
    return error
