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

import collections
import inspect
import linecache
import re
import sys
import threading
from types import FrameType, TracebackType
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from .errors import GradientDroppedError, UnsupportedFunctionError

__all__ = [
    "MemoryAttributeError",
    "conversion_error",
    "is_conversion",
    "memory_attribute",
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
        "while a tape records, looked up on the numpy module at call time or bound inside NumPy's "
        "and SciPy's own modules; a name bound earlier elsewhere (`from numpy import asarray` in "
        "your own module) or a conversion inside compiled code (a ufunc or C function given a "
        "list holding tracers, such as np.sin([a, b])) is not intercepted."
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


def _expression(frame: FrameType) -> Optional[str]:
    """The source of the expression ``frame`` is executing (``np.sin([x[0], x[1]])``), on one line."""
    try:
        start, end, first, last = list(frame.f_code.co_positions())[frame.f_lasti // 2]
        if start is None or end is None or first is None or last is None:
            return None
        lines = [linecache.getline(frame.f_code.co_filename, n) for n in range(start, end + 1)]
        if not all(lines):
            return None
        lines[-1] = lines[-1][:last]
        lines[0] = lines[0][first:]
    except (IndexError, TypeError, ValueError):  # no positions (python -X no_debug_ranges), no source
        return None
    text = " ".join(" ".join(lines).split())
    return text if 0 < len(text) <= 160 else None


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
    frames = _stack(caller)
    called, converting, user = _locate(frames)
    if called is None:
        text = (
            f"np.asarray / np.array (or storing it into a plain ndarray){_at(user)} on a tapegrad "
            "tracer would turn it into a plain value and silently drop its gradient. Build arrays "
            "with np.stack / np.concatenate / np.where on the tracers, or preallocate a traced "
            "array (y = np.zeros_like(x) or y = x.copy()) and assign into it with y[i] = v. If you "
            "really want a constant, call "
            "tapegrad.stop_gradient(x) first."
        )
        # No Python frame of a library: compiled code called from that line (np.sin([a, b])).
        expression = next((_expression(f) for f, _ in frames if not _is_library(f)), None)
        if expression:
            text += f" The expression there: {expression}."
    else:
        subject, inside = _library_call(called, converting, user)
        text = (
            f"{subject} converts a tapegrad tracer to a plain ndarray{inside}, which would silently "
            "drop its gradient. " + _ADVICE
        )
    error = GradientDroppedError(text + _interception_note())
    error._tapegrad_conversion = True  # type: ignore[attr-defined]
    return error


def scalar_conversion_error(kind: str) -> GradientDroppedError:
    """The error of ``float()``/``complex()`` on a traced value, naming the library that asked.

    Called from the tracer's ``__float__`` or ``__complex__``: the frame two levels up
    made the conversion.  A library that returns its result as a Python scalar
    (scikit-learn's metrics end with ``return float(...)``) gets a message saying so.
    """
    frames = _stack(sys._getframe(2))
    called, converting, user = _locate(frames, ("sklearn",))
    if called is None:
        return GradientDroppedError(
            f"{kind} (which NumPy also calls to store it into an element of a plain array: out[i] = x)"
            " on a tapegrad tracer would turn it into a plain value and silently drop its "
            "gradient. Keep the value as an array (x.reshape(()) or x[()]); to fill an array element "
            "by element, preallocate a traced one (out = np.zeros_like(x)) or collect the pieces and "
            "np.stack them. If you really want a constant, call tapegrad.stop_gradient(x) first."
            + (f" (The conversion is at {user}.)" if user else "")
        )
    subject, inside = _library_call(called, converting, user)
    return GradientDroppedError(
        f"{subject} turns a traced value into a Python scalar with {kind}{inside}: a Python "
        "number cannot carry a derivative, so its gradient would be silently lost. The library "
        "returns (or stores) that value as a plain number by design; differentiate the same "
        "quantity written with NumPy operations on the arrays (the library's array-level helpers, "
        "or the formula itself), or pass tapegrad.stop_gradient(x) if it is meant as a constant."
    )


#: Per thread: the last NumPy and SciPy frames (id, code, window) in which
#: tapegrad.constructors made a traced array of a list or tuple holding tracers (see
#: :func:`list_conversion_error`).  ``window`` counts the spans of recording (bumped by
#: :func:`new_recording_span`): a site of an earlier span, whose frame may be gone and its
#: id reused, is ignored.
_list_sites = threading.local()
_span = 0


def new_recording_span() -> None:
    """Forget the list conversions seen so far (the first recording window opens)."""
    global _span
    _span += 1


def note_list_conversion(frame: Optional[FrameType]) -> None:
    """Remember that NumPy or SciPy code in ``frame`` was handed a traced array made from a list.

    The NumPy and SciPy frames that called it are remembered too: ``np.corrcoef``
    gets the array from ``np.cov``, which has returned when ``np.corrcoef`` fails.
    """
    sites = getattr(_list_sites, "sites", None)
    if sites is None:
        sites = _list_sites.sites = collections.deque(maxlen=32)
    while frame is not None and _module(frame).partition(".")[0] in ("numpy", "scipy"):
        sites.append((id(frame), frame.f_code, _span))
        frame = frame.f_back


def list_conversion_error(exc: BaseException) -> Optional[GradientDroppedError]:
    """A clear error for library code that could not go on with a traced array made from a list.

    ``np.linalg.inv([[a, b], [c, d]])`` runs NumPy's Python implementation, which
    converts the list; tapegrad makes that a traced array, but the code after it
    may need what only an ndarray has (``__array_wrap__``, an internal gufunc
    without a rule, ``np.clip(..., out=c)``).  Such an error (tapegrad's "no
    rule" or a refusal naming an inner function, or a ``TypeError`` /
    ``AttributeError`` naming ``Tracer``) raised through a frame that was handed
    such an array becomes a :class:`GradientDroppedError` naming the function
    the user called.  NumPy's own errors about the values pass unchanged.
    """
    sites = getattr(_list_sites, "sites", None)
    if not sites or getattr(exc, "_tapegrad_listed", False):
        return None
    message = str(exc)
    if isinstance(exc, GradientDroppedError):
        # A refusal further in (np.clip(..., out=c) inside np.corrcoef) names an inner function;
        # a conversion or memory refusal already names the one the user called.
        if is_conversion(exc) or isinstance(exc, MemoryAttributeError):
            return None
    elif not (
        isinstance(exc, UnsupportedFunctionError)
        or (isinstance(exc, (TypeError, AttributeError)) and "Tracer" in message)
    ):
        return None
    frames = _traceback(exc.__traceback__)
    if not any((id(frame), frame.f_code, _span) in sites for frame, _ in frames):
        return None
    called, converting, user = _locate(frames)
    subject, inside = _library_call(called or "library code", converting, user)
    first = (message.splitlines()[0] if message else message).rstrip(".")
    error = GradientDroppedError(
        f"{subject} was given a list or tuple holding tapegrad tracers. tapegrad made it a traced "
        f"array, as np.asarray would, but the code that follows cannot go on with one{inside} "
        f"({type(exc).__name__}: {first}). Pass np.stack(...) or np.array(...) of the tracers "
        "instead of the list, so that NumPy hands the call itself to tapegrad (where it may have "
        "a rule), or write that step with NumPy functions on the traced values."
    )
    error.__cause__ = exc
    error._tapegrad_listed = True  # type: ignore[attr-defined]
    return error


def is_conversion(exc: BaseException) -> bool:
    """Whether ``exc`` is the refusal of a tracer's ``__array__`` (see :func:`conversion_error`)."""
    return getattr(exc, "_tapegrad_conversion", False)


#: Memory attributes that only read: a tape constant (a work array holding no traced value,
#: tapegrad.buffers) answers them from a read-only view of its value.
READ_ONLY_MEMORY = frozenset({"flags", "strides", "tobytes", "tofile", "dump", "dumps", "getfield"})


def memory_attribute(tracer: Any, name: str) -> Any:
    """``x.flags`` / ``x.strides`` / ... on a tracer: a constant's own, when they only read; else an error."""
    if name in READ_ONLY_MEMORY:
        value = tracer._constant()
        if type(value) is np.ndarray:
            view = value.view()
            view.flags.writeable = False
            return getattr(view, name)
    raise memory_attribute_error(name, depth=3)


def memory_attribute_error(name: str, depth: int = 2) -> MemoryAttributeError:
    """The error reading ``x.flags`` / ``x.strides`` / ... on a tracer raises."""
    called, converting, user = _locate(_stack(sys._getframe(depth)))
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
    r"|Invalid call to pythranized function .*Tracer"  # SciPy's Pythran kernels (funm, the 2-D normal cdf)
    r"|descriptor '\w+' for 'numpy\.ndarray' objects doesn't apply to a 'Tracer' object"  # ndarray.view(t)
    r"|unhashable type: 'Tracer'"  # a tracer used as a dict key (scipy.special.factorial's cache)
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
    "Nothing has to be lost here, only the arrays' kinds differ. While a tape records, tapegrad's "
    "door lets NumPy arrays join a tracer's namespace, but it is switched off here "
    "(TAPEGRAD_INTERCEPT_SCIPY=0 or tapegrad.intercept_scipy(False)). Pass each plain array the "
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


# The arrays of a third library beside a tracer (NumPy's join the tracer's namespace).
_OTHER_LIBRARY_ADVICE = (
    "Convert the other library's arrays to NumPy arrays first (np.asarray(a), or from_dlpack): "
    "NumPy arrays beside tracers belong to the tracers' namespace. See docs/scipy-sklearn.md."
)


def _mixed_namespaces(exc: BaseException, frames: List[Tuple[FrameType, int]], message: str) -> BaseException:
    called, converting, user = _locate(frames, ("sklearn",))
    subject, inside = _library_call(called or "library code", converting, user)
    numpy = re.search(r"\bnumpy\b", message) is not None
    what = "plain NumPy arrays" if numpy else "arrays of another array library"
    error = GradientDroppedError(
        f"{subject} received {what} together with tapegrad tracers{inside}, and in its "
        f"array-API mode it refuses arrays of two namespaces in one call ({type(exc).__name__}: "
        f"{message.splitlines()[0] if message else message}). " + (_MIXED_ADVICE if numpy else _OTHER_LIBRARY_ADVICE)
    )
    error.__cause__ = exc
    return error


# NumPy's error when an object's ``__array__`` returns something else: while a tape records,
# a wrapper holding a tracer (an xarray Variable, a pint Quantity) whose __array__ calls
# np.asarray on the tracer, which then hands back the tracer itself (tapegrad.constructors).
_NOT_AN_ARRAY = "object __array__ method not producing an array"
_WRAPPER_LIBRARIES = ("xarray", "pint")


def _wrapper_at(frames: List[Tuple[FrameType, int]]) -> bool:
    """Whether the innermost frame outside tapegrad holds an xarray or pint object among its local values."""
    for frame, _ in frames:
        if not _module(frame).startswith("tapegrad"):
            return any(
                (getattr(type(value), "__module__", None) or "").partition(".")[0] in _WRAPPER_LIBRARIES
                for value in frame.f_locals.values()
            )
    return False


def _wrapper_conversion(exc: BaseException, frames: List[Tuple[FrameType, int]]) -> BaseException:
    called, converting, user = _locate(frames, _WRAPPER_LIBRARIES + ("pint_xarray",))
    subject, inside = _library_call(called or "library code", converting, user)
    error = GradientDroppedError(
        f"{subject} converts an xarray or pint object that holds a tapegrad tracer with np.asarray{inside} "
        f"(ValueError: {_NOT_AN_ARRAY}): the object's __array__ cannot hand back the tracer. tapegrad "
        "differentiates such a call when it has a rule for the SciPy function that converts (its door "
        "takes the tracer out of the wrapper); for this one, pass the traced array itself (da.data, "
        "q.magnitude) to that function, or write the step with NumPy functions on it."
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
    An error of library code that was handed a traced array made from a list
    is explained by :func:`list_conversion_error`.  tapegrad's own errors and
    anything else pass unchanged.
    """
    if isinstance(exc, GradientDroppedError) or not isinstance(exc, (TypeError, AttributeError, ValueError)):
        return list_conversion_error(exc) or exc
    message = str(exc)
    frames = _traceback(exc.__traceback__)
    replaced = bool(frames) and _site(*frames[0]) == getattr(_last_conversion, "site", None)
    if _matches(frames, message, _MIXED_NAMESPACES):
        return _mixed_namespaces(exc, frames, message)
    if message == _NOT_AN_ARRAY and _wrapper_at(frames):
        return _wrapper_conversion(exc, frames)
    if _library_refusal(frames, message):
        called, converting, user = _locate(frames)
        subject, inside = _library_call(called or "library code", converting, user)
        error = GradientDroppedError(
            f"{subject} does not treat a tapegrad tracer as an array{inside} ({type(exc).__name__}: "
            f"{message}): it cannot be differentiated as it is. " + _ADVICE
        )
        error.__cause__ = exc
        return error
    listed = list_conversion_error(exc)
    if listed is not None:
        return listed
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
