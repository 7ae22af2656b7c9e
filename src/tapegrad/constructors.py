"""``np.array`` / ``np.asarray`` of tracers while a tape records: the one host-process policy for it.

NumPy offers no protocol through which ``np.asarray(x)`` or
``np.array([y[1], -y[0] * y[1]])`` could hand a tracer back: both call
``Tracer.__array__``, which must return real memory.  Yet these two lines open
most library functions and most ODE right-hand sides.  So, while at least one
tape records (inside :func:`tapegrad.grad` and the other transforms, or a
``with tapegrad.GradientTape()`` block), the attributes ``numpy.array``,
``numpy.asarray``, ``numpy.asanyarray``, ``numpy.ascontiguousarray``,
``numpy.asfortranarray`` and ``numpy.full`` are thin wrappers that

1. call the original function first, with the same arguments: anything that
   does not involve a tracer gets the original's result or error, unchanged;
2. only when the original failed because a tracer's ``__array__`` was called
   (exactly the error :func:`tapegrad.dropped.conversion_error` marks), build the traced
   result: a tracer passes through (cast when ``dtype`` asks, a traced copy when
   NumPy would copy), nested lists/tuples of tracers and numbers become one
   ``np.stack`` of the pieces.  NumPy itself decides dtype, shape (``ndmin``) and
   every error, by converting the same structure with the tracers' values.

Early bindings inside NumPy and SciPy
-------------------------------------
``np.mean([loss1, loss2])`` never reaches a tracer's ``__array_function__``:
NumPy's dispatch looks only at the type of each argument (a list), so its Python
implementation runs and converts the list with a function bound when its module
was imported (``numpy._core._methods`` holds its own ``asanyarray``,
``numpy.lib._index_tricks_impl`` its ``array``, ``scipy.special._basic`` its
``asarray``).  The same window reaches those too:

* the *targets* are the six originals above, NumPy's ``_array_converter``
  (the other way in of its functions: ``np.cumsum``, ``np.clip``, ``np.round``
  of a list) and NumPy's reduction funnels (:data:`FUNNELS`: ``_wrapreduction``
  behind ``np.sum`` / ``np.max`` / ..., ``_methods._mean`` behind ``np.mean``,
  ...), which hand a list to compiled code (``np.add.reduce``) or run code made
  for ndarrays.  A funnel's wrapper, given a list or tuple holding a tracer as
  first argument, converts it as ``np.asanyarray`` above would and calls the
  public function (or the funnel) with the traced array: ``np.mean([a, b])`` is
  ``np.mean(np.asanyarray([a, b]))``, as NumPy documents for an array_like;
* at the first recording window, every binding of a target in the Python
  modules of :data:`PACKAGES` (found by identity, under any name:
  ``from numpy import array as narray``) is rebound to the target's *proxy*, a
  ``functools.partial`` of the original with no arguments.  A proxy forwards
  each call in C: same result, same error, no extra traceback frame, a few
  tens of nanoseconds.  ``sys.modules`` is looked at again only when it has grown, and only
  new modules are read;
* a window points every proxy at its wrapper, and the last window to close
  points them back at the originals: one ``partial.__setstate__`` per target,
  13 in all, whatever the number of modules.  Rewriting the bindings themselves
  at each window would cost one dict update per module that binds one (25
  with NumPy alone, 60 with much of SciPy), several times as much per gradient
  call.  ``numpy``'s own attributes stay the originals outside windows.

numpy's attributes get their originals back, and the proxies point at theirs
again, when the last recording window closes (a counter under a lock, so nested
and concurrent windows in several threads compose).
A thread that records nothing meanwhile still gets the original's exact
behaviour, since every wrapper tries the original first (a funnel's: whenever
its first argument holds no tracer).

What cannot work: a reference bound outside NumPy and SciPy before the window
opened (``from numpy import asarray`` at the top of the user's own module) is
the original C function, and compiled code converts without looking at any
module: a ufunc or a C function given a list holding tracers
(``np.sin([a, b])``, ``np.dot([a, b], w)``, ``scipy.special.gammaln([a, b])``
inside ``scipy.special.multigammaln``) is refused by NumPy's own conversion.
Those still raise :class:`~tapegrad.errors.GradientDroppedError`, naming the
library function and the user's line (:mod:`tapegrad.dropped`).

The same window puts :mod:`tapegrad.buffers`' wrappers at ``numpy.zeros``,
``ones``, ``empty``, ``full`` and their ``_like`` forms: called by the
differentiated code (not by NumPy or SciPy, whose bindings keep the originals), they
return a floating-point result as a traced constant, so that writes into a work
array record.

Opt out with ``TAPEGRAD_PATCH_NUMPY=0`` in the environment or
:func:`intercept_array_constructors` ``(False)`` (which also puts the originals
back into the bindings).
"""

from __future__ import annotations

import functools
import operator
import os
import sys
import threading
import types
from collections import deque
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from .dispatch import strip
from . import buffers, dropped, frozen, interception
from .buffers import ALLOCATORS, allocating, constant_values, users_call
from .integrations import wrappers
from .dropped import (
    QUIET_CALLERS, conversion_error, is_conversion, new_recording_span, note_list_conversion, translate,
)
from .errors import GradientDroppedError, UnsupportedFunctionError
from .tracer import Tracer

__all__ = ["intercept_array_constructors", "intercepting", "recording", "start", "stop"]

#: The numpy attributes replaced while a tape records, and the name of their first parameter.
NAMES = {
    "array": "object", "asarray": "a", "asanyarray": "a", "ascontiguousarray": "a", "asfortranarray": "a",
    "full": "fill_value",
}

#: Top-level packages in whose modules the targets' bindings are rebound to proxies.
PACKAGES = ("numpy", "scipy")

#: NumPy's funnels, by module: helpers that its Python functions call at run time
#: (``_methods._mean(a, ...)``, a module attribute) with the array_like unconverted,
#: and that hand it to compiled code or to code made for ndarrays.  Each maps to the
#: public function that computes the same on an array (``None``: the funnel itself,
#: which takes a traced array's method of the same name).
FUNNELS: Dict[str, Dict[str, Optional[str]]] = {
    "numpy._core.fromnumeric": {"_wrapreduction": None, "_wrapreduction_any_all": None},
    "numpy._core._methods": {"_mean": "mean", "_var": "var", "_std": "std", "_ptp": "ptp"},
}

_asarray = np.asarray  # the original, for the plain pieces of a traced result
#: Every numpy attribute a window replaces: the conversions above, and the allocators whose
#: results the differentiated code's own calls get as traced constants (tapegrad.buffers).
PATCHED = tuple(NAMES) + tuple(name for name in ALLOCATORS if name not in NAMES)
_ORIGINALS = {name: getattr(np, name) for name in PATCHED}  # the conversions: what the modules of PACKAGES bind
try:  # NumPy >= 2.0: the conversion behind np.cumsum / np.clip / np.linspace of array_likes
    from numpy._core._multiarray_umath import _array_converter as _ARRAY_CONVERTER
except ImportError:  # pragma: no cover - NumPy 1.x
    _ARRAY_CONVERTER = None

_lock = threading.Lock()
_depth = 0  # open recording windows, all threads together
_wrappers: Dict[Any, Callable] = {}  # original -> its wrapper (made once)
_installed: Dict[str, Tuple[Callable, Callable]] = {}  # name -> (original, wrapper)
_made: set = set()  # the wrappers themselves
_choice: Optional[bool] = None  # set by intercept_array_constructors; else the environment decides
_DECLINED = object()
# numpy's attributes in the common case (they hold the originals), read and written in C:
# _read_numpy reads them from numpy's namespace as a tuple (set up at the end of the module).
_read_numpy = operator.itemgetter(*PATCHED)
_NUMPY_ORIGINALS = _read_numpy(_ORIGINALS)


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
    ``numpy.asanyarray``, ``numpy.ascontiguousarray``, ``numpy.asfortranarray``
    and ``numpy.full`` by wrappers that call the original first and, only when
    the original fails on a tracer, return a traced array instead of raising;
    the same functions bound inside NumPy's and SciPy's own modules, and NumPy's
    reduction funnels, forward to such wrappers through their proxies (see the
    module docstring).  The originals are back when the last tape stops
    recording.  This call overrides the ``TAPEGRAD_PATCH_NUMPY`` environment
    variable (``0`` switches it off) for the rest of the process.

    Parameters
    ----------
    enabled : bool, default True
        ``False`` restores the originals at once (also inside a recording
        window), puts them back into the bindings inside NumPy and SciPy, and
        keeps them: ``np.asarray(tracer)`` then raises
        :class:`~tapegrad.errors.GradientDroppedError`.
    """
    global _choice
    with _lock:
        _choice = bool(enabled)
        if _depth and enabled:
            _install()
        elif not enabled:
            _uninstall()
            _unbind_all()


def _wrapper_of(original: Callable, keyword: str) -> Callable:
    """The one wrapper of ``original`` (the numpy attribute and the early bindings share it)."""
    wrapper = _wrappers.get(original)
    if wrapper is None:
        wrapper = _wrappers[original] = _make_wrapper(original, keyword)
        _made.add(wrapper)
    return wrapper


def _numpy_wrapper(name: str, current: Callable) -> Callable:
    """What a window puts at ``numpy.<name>`` in place of ``current``."""
    wrapper = _wrapper_of(current, NAMES[name]) if name in NAMES else current
    if name in ALLOCATORS:  # outermost: it looks at its caller's frame
        inner = wrapper
        wrapper = _wrappers.get((name, inner))
        if wrapper is None:
            wrapper = _wrappers[(name, inner)] = allocating(inner, name)
            _made.add(wrapper)
    return wrapper


def _install() -> None:
    """Point numpy's attributes and the proxies at the wrappers (the first window: rebind, too)."""
    global _switched
    if not _installed and _read_numpy(np.__dict__) == _NUMPY_ORIGINALS:
        np.__dict__.update(_NUMPY_WRAPPED)  # the common case, in C
        _installed.update(_INSTALLED_ALL)
    else:
        for name in PATCHED:
            if name in _installed:
                continue
            current = getattr(np, name)
            if current in _made:
                continue  # already one of ours
            wrapper = _numpy_wrapper(name, current)
            _installed[name] = (current, wrapper)
            setattr(np, name, wrapper)
    if not _switched:
        if len(sys.modules) != _seen:
            _scan()  # new modules: their bindings join
        _switch_all(_proxies, _states_on)
        _switched = True


def _uninstall() -> None:
    """Put numpy's attributes back and point the proxies at the originals."""
    global _switched
    if _installed == _INSTALLED_ALL and _read_numpy(np.__dict__) == _NUMPY_WRAPPERS:
        np.__dict__.update(_ORIGINALS)  # the common case, in C
    else:
        for name, (original, wrapper) in _installed.items():
            # Someone who replaced the attribute after us keeps their replacement.
            if getattr(np, name) is wrapper:
                setattr(np, name, original)
    _installed.clear()
    if _switched:
        if len(sys.modules) != _seen:
            _scan()  # a wrapper bound by a module imported meanwhile is rebound to its proxy
        _switch_all(_proxies, _states_off)
        _switched = False


def _switch_all(proxies: List[functools.partial], states: List[tuple]) -> None:
    """Point every proxy at its wrapper or its original (``states``): one loop in C."""
    deque(map(_setstate, proxies, states), 0)


def start() -> None:
    """Open a recording window (the first one installs the wrappers)."""
    global _depth
    with _lock:
        _depth += 1
        if _depth == 1:
            new_recording_span()  # list conversions remembered for clear errors: dropped.py
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
    written = frozen.write_error(exc) if exc is not None else None  # before the arrays are thawed
    with _lock:
        if _depth > 0:
            _depth -= 1
            if _depth == 0:
                _uninstall()
                interception.uninstall()
                frozen.thaw_all()
    if written is not None:
        raise written from exc
    if exc is not None:
        error = translate(exc)
        if error is not exc:
            raise error from exc


class recording:
    """``with recording(tape):`` — a recording window as a context manager (re-entrant).

    ``tape``, the tape the differentiated code records on, is this thread's innermost
    one meanwhile: the work arrays that code allocates become its traced constants
    (:mod:`tapegrad.buffers`).
    """

    __slots__ = ("tape",)

    def __init__(self, tape: Any = None) -> None:
        self.tape = tape

    def __enter__(self) -> None:
        start()
        if self.tape is not None:
            buffers.push(self.tape)

    def __exit__(self, kind: Any, exc: Optional[BaseException], tb: Any) -> bool:
        if self.tape is not None:
            buffers.pop()
        stop(exc)
        return False


# ---------------------------------------------------------------------- early bindings
# Targets, proxies and the scan: see "Early bindings inside NumPy and SciPy" above.

_targets: Dict[int, Tuple[Any, Callable, functools.partial]] = {}  # id of an original, wrapper or proxy -> all three
_funnel_modules: set = set()  # the FUNNELS modules whose funnels are targets
_modules: Dict[str, Any] = {}  # module name -> the module object scanned under that name
_rebound: List[Tuple[dict, str, Any, functools.partial]] = []  # (namespace, name, original, proxy)
_seen = -1  # len(sys.modules) at the last scan
_switched = False  # whether the proxies point at the wrappers
_proxies: List[functools.partial] = []
_states_on: List[tuple] = []  # per proxy, the __setstate__ argument that forwards to the wrapper ...
_states_off: List[tuple] = []  # ... and to the original
_setstate = functools.partial.__setstate__  # type: ignore[attr-defined]
_NO_ARGS: tuple = ()
_NO_KEYWORDS: dict = {}  # shared, never written: a partial with empty keywords forwards by vectorcall


def _target(original: Any, wrapper: Callable) -> None:
    proxy = functools.partial(original)
    _targets[id(original)] = _targets[id(wrapper)] = _targets[id(proxy)] = (original, wrapper, proxy)
    _proxies.append(proxy)
    _states_on.append((wrapper, _NO_ARGS, _NO_KEYWORDS, None))
    _states_off.append((original, _NO_ARGS, _NO_KEYWORDS, None))


def _make_targets() -> None:
    """The objects to replace and their wrappers: the conversion functions, then each funnel module's funnels."""
    if not _targets:
        for name, keyword in NAMES.items():
            _target(_ORIGINALS[name], _wrapper_of(_ORIGINALS[name], keyword))
        if _ARRAY_CONVERTER is not None:
            _target(_ARRAY_CONVERTER, _make_converter_wrapper(_ARRAY_CONVERTER))
    for module_name, names in FUNNELS.items():
        module = sys.modules.get(module_name)
        if module is None or module_name in _funnel_modules:
            continue
        _funnel_modules.add(module_name)
        for name, public in names.items():
            funnel = getattr(module, name, None)
            if isinstance(funnel, types.FunctionType):  # another NumPy version may lack it
                _target(funnel, _make_funnel_wrapper(funnel, public))


def _scan() -> None:
    """Rebind the targets to their proxies in the modules of PACKAGES imported since the last scan.

    Found by identity, under any name (``from numpy import array as narray``),
    in modules of Python code (compiled modules read no bindings at run time);
    ``numpy``'s own attributes are public and stay as they are.  A binding of a
    wrapper (made by a module imported during a window) is rebound too.  A few
    milliseconds for NumPy and SciPy together, once; then only new modules.
    """
    global _seen
    _make_targets()
    modules = list(sys.modules.items())
    _seen = len(modules)
    for name, module in modules:
        if _modules.get(name) is module:
            continue
        _modules[name] = module
        if (
            name.partition(".")[0] not in PACKAGES
            or name in PACKAGES
            or not isinstance(module, types.ModuleType)
            or not (vars(module).get("__file__") or "").endswith((".py", ".pyc"))  # no __getattr__ hook
        ):
            continue
        namespace = module.__dict__
        for key, value in list(namespace.items()):
            target = _targets.get(id(value))
            if target is not None and (value is target[0] or value is target[1]):
                namespace[key] = target[2]
                _rebound.append((namespace, key, target[0], target[2]))


def _unbind_all() -> None:
    """Put the originals back into every binding that still holds a proxy (the opt-out)."""
    global _seen
    for namespace, key, original, proxy in _rebound:
        if namespace.get(key) is proxy:
            namespace[key] = original
    _rebound.clear()
    _modules.clear()
    _seen = -1


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
        except ValueError:
            # np.asarray(data_array) of an xarray or pint object holding a tracer: its
            # __array__ cannot hand the tracer back; the tracer is what NumPy would make of it.
            held = wrappers.held_tracer(args[0]) if args and wrappers.active else None
            if held is None:
                raise
            return wrapper(held, *args[1:], **kwargs)
        # The refusal was a bare marker (dropped.QUIET_CALLERS); a declined build reports in full.
        if not users_call(sys._getframe(1), NAMES):
            # A library's conversion (or compiled code's, calling np.asarray) of tape constants only
            # (work arrays, tapegrad.buffers): their values, copied, as NumPy would hand them.
            found: list = []
            plain_args, plain_kwargs = constant_values(args, found, True), constant_values(kwargs, found, True)
            if found and plain_args is not None and plain_kwargs is not None:
                return original(*plain_args, **plain_kwargs)
        if keyword == "fill_value":
            result = _traced_full(original, args, kwargs)
        else:
            result = _traced(original, keyword, args, kwargs)
        if result is _DECLINED:
            raise conversion_error(sys._getframe(1))
        first = args[0] if args else kwargs.get(keyword)
        if type(first) is list or type(first) is tuple:
            note_list_conversion(sys._getframe(1))  # library code may not go on with it: dropped.py
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
    # NumPy's layout too (np.asfortranarray, order="F"): ravel(order="K") and the like read it.
    fortran = value.ndim > 1 and value.flags.f_contiguous and not value.flags.c_contiguous
    out = x if x.dtype == value.dtype else x.astype(value.dtype, order="F" if fortran else "K")
    if out is x and not np.may_share_memory(value, raw):
        out = np.copy(x, order="F" if fortran else "K")  # NumPy copied: writes into the result must not reach x
    elif fortran and out is x and not raw.flags.f_contiguous:
        out = np.copy(x, order="F")
    return out if out.shape == value.shape else np.reshape(out, value.shape)


# ---------------------------------------------------------------------- NumPy's _array_converter
def _make_converter_wrapper(original: Any) -> Callable:
    def converter(*array_likes: Any) -> Any:
        try:
            return original(*array_likes)
        except GradientDroppedError as exc:
            if not is_conversion(exc):
                raise
        stand_in = _TracedConverter.make(original, array_likes)
        if stand_in is None:
            raise conversion_error(sys._getframe(1))
        if any(type(a) is list or type(a) is tuple for a in array_likes):
            note_list_conversion(sys._getframe(1))  # library code may not go on with it: dropped.py
        return stand_in

    QUIET_CALLERS.add(converter.__code__)
    converter.__name__ = converter.__qualname__ = original.__name__
    converter.__doc__ = original.__doc__
    converter.__wrapped__ = original  # type: ignore[attr-defined]
    return converter


class _TracedConverter:
    """NumPy's ``_array_converter(*array_likes)`` where some array_likes hold tracers.

    NumPy's own converter of the same inputs with the tracers' values decides
    every dtype, shape, scalar flag and error; the arrays it hands out are
    traced where the input was.  ``wrap`` returns a traced result as it is (a
    0-d tracer is tapegrad's scalar) and leaves a plain one to NumPy.
    """

    __slots__ = ("_plain", "_inputs", "_traced")

    def __init__(self, plain: Any, inputs: tuple, traced: tuple) -> None:
        self._plain, self._inputs, self._traced = plain, inputs, traced

    @classmethod
    def make(cls, original: Any, array_likes: tuple) -> Optional["_TracedConverter"]:
        found: list = []
        shadows = [_shadow(a, found) for a in array_likes]
        if not found or any(isinstance(a, np.ndarray) and type(a) is not np.ndarray for a in array_likes):
            return None  # a subclass would wrap the result: not a tracer's
        plain = original(*shadows)  # NumPy's answer on the values: its dtypes, its errors
        traced = tuple(_has_tracer(a) for a in array_likes)
        if any(t and plain[i].dtype.kind not in "biufc" for i, t in enumerate(traced)):
            return None  # object or string arrays cannot carry a gradient
        return cls(plain, array_likes, traced)

    def _traced_array(self, i: int, value: np.ndarray) -> Any:
        obj = self._inputs[i]
        if type(obj) is Tracer:
            return _pass_through(obj, value)
        out = _assemble(obj, value.dtype)
        return out if out.shape == value.shape else np.reshape(out, value.shape)

    def as_arrays(self, subok: bool = True, pyscalars: str = "convert_if_no_array") -> tuple:
        arrays = self._plain.as_arrays(subok=subok, pyscalars=pyscalars)
        return tuple(self._traced_array(i, a) if t else a for i, (t, a) in enumerate(zip(self._traced, arrays)))

    def __getitem__(self, i: int) -> Any:
        value = self._plain[i]
        index = operator.index(i) % len(self._traced)
        return self._traced_array(index, value) if self._traced[index] else value

    def __len__(self) -> int:
        return len(self._traced)

    def __iter__(self) -> Any:
        return iter([self[i] for i in range(len(self._traced))])

    def wrap(self, arr: Any, to_scalar: Optional[bool] = None) -> Any:
        if type(arr) is Tracer:
            return arr
        return self._plain.wrap(arr, to_scalar=to_scalar)

    def result_type(self, extra_dtype: Any = None, ensure_inexact: bool = False) -> np.dtype:
        return self._plain.result_type(extra_dtype=extra_dtype, ensure_inexact=ensure_inexact)

    @property
    def scalar_input(self) -> tuple:
        return self._plain.scalar_input


# ---------------------------------------------------------------------- NumPy's funnels
def _holds_tracer(seq: Any) -> bool:
    """Whether a list or tuple holds a tracer at any depth (the types are gathered in C)."""
    kinds = set(map(type, seq))
    if Tracer in kinds:
        return True
    if list in kinds or tuple in kinds:
        return any(_holds_tracer(item) for item in seq if type(item) is list or type(item) is tuple)
    return False


def _make_funnel_wrapper(funnel: Callable, public: Optional[str]) -> Callable:
    # Every np.sum / np.mean of an ndarray inside a window passes here, so the common case
    # is a type test and the same argument tuple passed on (each funnel takes the
    # array_like first, positionally).
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        obj = args[0] if args else None
        if (type(obj) is list or type(obj) is tuple) and _holds_tracer(obj):
            traced = _traced(_ORIGINALS["asanyarray"], "a", (obj,), {})
            if traced is not _DECLINED:
                note_list_conversion(sys._getframe(1))  # see dropped.list_conversion_error
                if public is None:
                    return funnel(traced, *args[1:], **kwargs)
                # What NumPy computes for an array_like: the public function on the array.
                return getattr(np, public)(traced, *args[1:], **kwargs)
        return funnel(*args, **kwargs)  # a declined list fails there, naming the public function

    functools.update_wrapper(wrapper, funnel)
    return wrapper


# The wrappers, proxies and funnels exist from import on (cheap); bindings are rebound at the first window.
_make_targets()
_NUMPY_WRAPPED = {name: _numpy_wrapper(name, _ORIGINALS[name]) for name in PATCHED}
_NUMPY_WRAPPERS = _read_numpy(_NUMPY_WRAPPED)
_INSTALLED_ALL = {name: (_ORIGINALS[name], _NUMPY_WRAPPED[name]) for name in PATCHED}
