"""SciPy's door: route calls of SciPy's Python-level functions to their rules while a tape records.

SciPy converts its inputs (``np.asarray`` bound at import, ``asarray_chkfinite``,
``x.flags``) or hands them to C, Cython and Fortran, so NumPy's protocols never
see most of its calls.  tapegrad's rules for them are ordinary rules in the one
table (:mod:`tapegrad.registry`), keyed by the SciPy function object itself and
marked with :func:`tapegrad.registry.intercepted`; they live in
``tapegrad/rules/scipy_*.py``, one module per SciPy module, imported the first
time a tape records after that SciPy module was imported (``import tapegrad``
never imports SciPy).

How a call reaches its rule
---------------------------
While at least one tape records (the same window as :mod:`tapegrad.constructors`),
each intercepted *Python* function ``f`` runs a *trampoline* instead of its own
code: ``f.__code__`` is swapped for a small code object that calls the door with
the call's arguments.  Swapping some 460 functions in and out costs about 40 us, so
after the last window closes the trampolines linger: the first intercepted call
made outside a window (and outside tapegrad's own backward sweep) puts SciPy's
code back everywhere, then runs; a loop of gradients swaps nothing after the first.
Each function keeps its own ``__signature__`` while its trampoline is in place.  Because the
function object stays the same, every way of reaching it works alike:
``scipy.stats.norm.logpdf(x)``, ``from scipy.stats import norm``, a frozen
``st.gamma(a).logpdf(x)`` (its method calls the class's), a module attribute
looked up at call time, *and* a name bound early with
``from scipy.ndimage import gaussian_filter`` at the top of a module.  The door
then

1. (unless the rule was registered with ``route_all``, for solvers whose callback
   may close over tracers: then the rule decides) looks for a tracer among the positional and keyword arguments (one level of
   lists and tuples; for methods registered with ``inspect_self``, also among
   the instance's attributes): none (and no xarray ``Variable`` or pint
   ``Quantity`` holding one: such an argument is replaced by its tracer, what
   SciPy's ``np.asarray`` would make of it, :mod:`tapegrad.integrations.wrappers`),
   and it calls a copy of ``f`` that holds the original code, so SciPy's own
   results and errors come back unchanged, at the cost of one extra Python call;
2. otherwise hands the call to :func:`tapegrad.dispatch.dispatch_function` (``ROUTES.function``), like
   any NEP 18 call on a tracer: the rule records a node (primitive), runs
   NumPy and SciPy calls on the tracers (composite), or returns constants.

A rule's own SciPy calls on plain values run SciPy's code (step 1); on traced
values (a VJP at second order) they come back through the door, so a Hessian is
the Jacobian of a traced gradient here too.

What it cannot reach
--------------------
Compiled callables (Cython and C functions, ``np.ufunc`` objects of
``scipy.special`` aside, which NumPy already hands to tapegrad) have no
``__code__`` to swap.  Those that have a rule are replaced by a wrapper on
the attribute of their owner (module or class) given to ``intercepted`` for the
same window, so ``module.f(...)`` works and a reference bound before recording
does not; ``scipy.fft`` is reached through SciPy's own backend mechanism instead
(:mod:`tapegrad.rules.scipy_fft`).  A call that reaches compiled code with a
tracer still raises :class:`~tapegrad.errors.GradientDroppedError`.

Namespace look-ups
------------------
The same window swaps the code of array-api-compat's ``array_namespace`` (SciPy's
and scikit-learn's vendored copies, and the package) and of scikit-learn's
``check_same_namespace``: a NumPy array beside a tracer then belongs to the
tracer's namespace instead of being refused as a second namespace; calls without
a tracer run the library's own code (:mod:`tapegrad.integrations.array_namespaces`).

Opt out with ``TAPEGRAD_INTERCEPT_SCIPY=0`` in the environment or
:func:`intercept_scipy` ``(False)``.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import types
import warnings
from typing import Any, Callable, Dict, Optional, Tuple

from . import array_types
from .binding import has_tracer
from .integrations import array_namespaces, scalar_returns, wrappers
from .registry import INTERCEPTED, ORIGINALS
from .tracer import ROUTES, Tracer

__all__ = ["intercept_scipy", "intercepting_scipy", "install", "uninstall", "load_rules", "original", "RULE_MODULES",
           "hold_tracers_in"]

#: SciPy module -> the tapegrad module holding its rules.  A rule module is imported
#: when its SciPy module is already in ``sys.modules`` as a recording window opens.
RULE_MODULES: Dict[str, str] = {
    "scipy.stats": "tapegrad.rules.scipy_stats",
    "scipy.ndimage": "tapegrad.rules.scipy_ndimage",
    "scipy.ndimage._interpolation": "tapegrad.rules.scipy_ndimage_rotate",
    "scipy.signal": "tapegrad.rules.scipy_signal",
    "scipy.signal._peak_finding": "tapegrad.rules.scipy_peaks",
    "scipy.interpolate": "tapegrad.rules.scipy_interpolate",
    "scipy.fft": "tapegrad.rules.scipy_fft",
    "scipy.linalg": "tapegrad.rules.scipy_linalg",
    "scipy.spatial.transform": "tapegrad.rules.scipy_spatial",
    "scipy.spatial.distance": "tapegrad.rules.scipy_spatial_distance",
    "scipy.integrate": "tapegrad.solvers.integrate",
    "scipy.optimize": "tapegrad.solvers.optimize",
    "scipy.optimize._nnls": "tapegrad.rules.scipy_lsq",
    "scipy.special": "tapegrad.rules.scipy_special_functions",
    "scipy.sparse": "tapegrad.rules.scipy_sparse",
    "scipy.sparse.linalg": "tapegrad.rules.scipy_sparse_linalg",
}

hold_tracers_in = array_types.hold_tracers_in  # for the rule modules: array_types keeps the list


def _holds_tracer(args: tuple, kwargs: dict) -> bool:
    holders = array_types.HOLDER_TYPES
    for a in args:
        if isinstance(a, holders) and _traced_self(a):
            return True
    return bool(kwargs) and any(isinstance(v, holders) and _traced_self(v) for v in kwargs.values())


_ENV_CHOICE = os.environ.get("TAPEGRAD_INTERCEPT_SCIPY", "").strip() != "0"
_choice: Optional[bool] = None
_lock = threading.RLock()
_loaded: set = set()  # SciPy module names whose rule module was imported (or found missing)
_modules_seen: tuple = ()  # sys.modules' size and newest entry at the last look for rule modules


def _modules_changed() -> bool:
    """Whether a module was imported since the last call (a look at sys.modules costs less than a scan)."""
    global _modules_seen
    seen = (len(sys.modules), next(reversed(sys.modules), None))
    if seen == _modules_seen:
        return False
    _modules_seen = seen
    return True
_installed = False
_window_open = False  # a recording window is open (the trampolines may linger after it)
_swaps: Dict[Any, "_Swap"] = {}  # function -> how to swap it (made once per function)


def intercepting_scipy() -> bool:
    """Whether SciPy's functions are routed to their rules in recording windows."""
    return _ENV_CHOICE if _choice is None else _choice


def intercept_scipy(enabled: bool = True) -> None:
    """Switch tapegrad's SciPy door on or off for the rest of the process.

    Overrides the ``TAPEGRAD_INTERCEPT_SCIPY`` environment variable (``0``
    switches it off).  Off, SciPy functions called on tracers behave as they
    did before the door existed: most raise
    :class:`~tapegrad.errors.GradientDroppedError`.
    """
    global _choice
    with _lock:
        _choice = bool(enabled)
        if not enabled:
            uninstall(now=True)


def load_rules(all_modules: bool = False) -> None:
    """Import the rule modules of the SciPy modules already imported (or of all of them).

    A rule module whose own imports fail (an older SciPy without that function)
    is skipped here; its calls then fail as they did without the door.
    """
    with _lock:
        for scipy_name, rule_module in RULE_MODULES.items():
            if scipy_name in _loaded or (not all_modules and scipy_name not in sys.modules):
                continue
            _loaded.add(scipy_name)
            try:
                importlib.import_module(rule_module)
            except ModuleNotFoundError as exc:
                if exc.name not in (rule_module, scipy_name):
                    raise


# ---------------------------------------------------------------------- the window
def _plan() -> Tuple[list, list]:
    """The swaps to make, as flat tuples (rebuilt only when a rule was intercepted since)."""
    global _planned, _planned_size
    if _planned_size != len(INTERCEPTED):
        codes, attributes = [], []
        for fun, options in list(INTERCEPTED.items()):
            swap = _swaps.get(fun)
            if swap is None:
                swap = _swaps[fun] = _Swap(fun, options)
            if swap.wrapper is None:
                codes.append((swap.fun, swap.code, swap.door_code))
            else:
                attributes.append(swap)
        _planned, _planned_size = (codes, attributes), len(INTERCEPTED)
    return _planned


_planned: Tuple[list, list] = ([], [])
_planned_size = 0


def install() -> None:
    """Put the trampolines in place (called when the first recording window opens)."""
    global _window_open, _installed
    if not intercepting_scipy():
        return
    wrappers.prepare()  # xarray imports scipy.interpolate late: import it now
    _namespaces_on()
    with _lock:  # SciPy's functions, and NumPy's own Python functions with a rule (np.vectorize)
        _window_open = True
        if len(_loaded) < len(RULE_MODULES) and _modules_changed():
            load_rules()  # a SciPy module imported since the last window brings its rules
        if _installed and _planned_size == len(INTERCEPTED):
            return  # still in place since the last window (they linger: see uninstall)
        codes, attributes = _plan()
        # The first window (or one after new rules): one attribute write per intercepted function.
        for fun, _, door_code in codes:
            if fun.__code__ is not door_code:
                fun.__code__ = door_code
        for swap in attributes:
            swap.on()
        _installed = True


def uninstall(now: bool = False) -> None:
    """Close the window: the trampolines linger until an intercepted function is called outside one.

    Swapping every intercepted function's code in and out costs about 0.1 us per
    function (461 with SciPy's modules loaded: 40 us a window, most of a small
    gradient's cost).  A loop of gradient calls with no SciPy call between them
    therefore keeps the trampolines in place; the first intercepted call made outside
    a window (its door sees no open window) restores every function, then runs.  The
    trampolines carry each function's own ``__signature__`` meanwhile.  ``now``
    restores them at once (``intercept_scipy(False)``).
    """
    global _window_open
    with _lock:
        _namespaces_off()
        _window_open = False
        if now:
            _restore()


def _restore() -> None:
    """Put SciPy's own code back in every intercepted function (under ``_lock``)."""
    global _installed
    if not _installed or _window_open:
        return
    codes, attributes = _planned
    for fun, code, door_code in codes:
        if fun.__code__ is door_code:
            fun.__code__ = code
    for swap in attributes:
        swap.off()
    _installed = False


def _outside_window() -> None:
    """A trampoline was entered with no window open: restore SciPy's code, unless tapegrad called.

    A backward sweep runs after its window closed, and its VJPs call SciPy on plain
    cotangents: those calls take the door's plain path instead of restoring every
    function only to swap them all in again at the next gradient.
    """
    frame = sys._getframe(3)  # _outside_window <- door <- trampoline <- the caller
    for _ in range(64):
        if frame is None:
            break
        if (frame.f_globals.get("__name__") or "").startswith("tapegrad."):
            return
        frame = frame.f_back
    with _lock:
        _restore()


# ---------------------------------------------------------------------- namespace look-ups
# NumPy arrays beside tracers in array-API code (tapegrad.integrations.array_namespaces):
# the look-up functions of array-api-compat and scikit-learn, swapped like SciPy's.
_NAMESPACE_SWAPS: Dict[Any, "_Swap"] = {}  # function -> its swap (made once per function)
_namespaces_swapped: list = []
_namespaces_idle: Any = None  # sys.modules' size and newest entry when the last look swapped nothing


def _namespaces_on() -> None:
    global _namespaces_idle
    with _lock:
        if _namespaces_swapped:
            return
        imported = (len(sys.modules), next(reversed(sys.modules), None))
        if imported == _namespaces_idle:
            return  # the last look found none of those modules, and none was imported since
        for module_name, doors in array_namespaces.LOOKUPS.items():
            module = sys.modules.get(module_name)
            if module is None:
                continue
            for name, make_door in doors.items():
                fun = module.__dict__.get(name)
                if not isinstance(fun, types.FunctionType):
                    continue  # another release, another layout: the library's own behaviour
                swap = _NAMESPACE_SWAPS.get(fun)
                if swap is None:
                    swap = _NAMESPACE_SWAPS[fun] = _Swap(fun, (None, None, False, False), make_door)
                if fun.__code__ is swap.code:
                    fun.__code__ = swap.door_code
                    _namespaces_swapped.append(swap)
        for fun, make_door in scalar_returns.doors():  # scikit-learn's `return float(loss)`
            swap = _NAMESPACE_SWAPS.get(fun)
            if swap is None:
                swap = _NAMESPACE_SWAPS[fun] = _Swap(fun, (None, None, False, False), make_door)
            if fun.__code__ is swap.code:
                fun.__code__ = swap.door_code
                _namespaces_swapped.append(swap)
        _namespaces_idle = None if _namespaces_swapped else imported


def _namespaces_off() -> None:
    with _lock:
        for swap in _namespaces_swapped:
            if swap.fun.__code__ is swap.door_code:
                swap.fun.__code__ = swap.code
        _namespaces_swapped.clear()


def original(fun: Any) -> Callable[..., Any]:
    """``fun`` with SciPy's own code, whether or not the door is in place now.

    A ``route_all`` rule calls this when it finds nothing traced.
    """
    return ORIGINALS.get(fun, fun)  # only code swaps have a copy; a compiled callable is its own


# ---------------------------------------------------------------------- one swap
def _traced_self(obj: Any) -> bool:
    """Whether an instance's attributes hold a tracer: its ``__dict__`` and its ``__slots__``."""
    state = getattr(obj, "__dict__", None)
    if state and any(type(v) is Tracer or has_tracer(v) for v in state.values()):
        return True
    for slot in _slots_of(type(obj)):
        value = getattr(obj, slot, None)
        if type(value) is Tracer or has_tracer(value):
            return True
    return False


_SLOTS: Dict[type, tuple] = {}


def _slots_of(cls: type) -> tuple:
    """Every slot name ``cls`` and its bases declare (``PPoly`` keeps its arrays in slots)."""
    found = _SLOTS.get(cls)
    if found is None:
        names = []
        for klass in cls.__mro__:
            slots = klass.__dict__.get("__slots__", ())
            names += [slots] if isinstance(slots, str) else [n for n in slots if n not in ("__dict__", "__weakref__")]
        found = _SLOTS[cls] = tuple(names)
    return found


def _make_door(
    key: Any, original: Callable[..., Any], inspect_self: bool, route_all: bool
) -> Callable[[tuple, dict], Any]:
    if route_all:  # the rule itself decides (a solver whose callback closes over tracers)

        def door_all(args: tuple, kwargs: dict) -> Any:
            if not _window_open:  # a lingering trampoline, outside any window
                _outside_window()
                return original(*args, **kwargs)
            return ROUTES.function(key, args, kwargs)

        return door_all

    def door(args: tuple, kwargs: dict) -> Any:
        if not _window_open:  # a lingering trampoline, outside any window
            _outside_window()
            return original(*args, **kwargs)
        for a in args:
            if type(a) is Tracer:
                return ROUTES.function(key, args, kwargs)
        if has_tracer(args) or (kwargs and has_tracer(kwargs)) or (inspect_self and args and _traced_self(args[0])):
            return ROUTES.function(key, args, kwargs)
        if array_types.HOLDER_TYPES and _holds_tracer(args, kwargs):
            return ROUTES.function(key, args, kwargs)
        if wrappers.active:  # an xarray Variable or pint Quantity holding a tracer: SciPy would asarray it
            unwrapped = wrappers.unwrap_arguments(args, kwargs)
            if unwrapped is not None:
                return ROUTES.function(key, *unwrapped)
        return original(*args, **kwargs)

    return door


_PLACEHOLDER = 7340033.25  # a constant the trampoline calls; replaced by the function's own door
_TRAMPOLINES: Dict[int, types.CodeType] = {}


def _trampoline(nfree: int) -> types.CodeType:
    """A code object ``(*args, **kwargs)`` that calls :data:`_PLACEHOLDER`, with ``nfree`` free variables.

    ``f.__code__`` may only be replaced by code with as many free variables as
    ``f`` has closure cells; the trampoline names them in a branch that never runs.
    The door is a constant of the code (not a default or a global): a call that
    entered the trampoline finishes through it even if the window closes meanwhile.
    """
    code = _TRAMPOLINES.get(nfree)
    if code is None:
        cells = [f"_tapegrad_cell{i}" for i in range(nfree)]
        lines = ["def _outer():"]
        lines += [f"    {c} = None" for c in cells]
        lines.append("    def trampoline(*args, **kwargs):")
        if cells:
            lines.append(f"        if kwargs is args: return ({', '.join(cells)},)")
        lines.append(f"        return ({_PLACEHOLDER!r})(args, kwargs)")
        lines.append("    return trampoline")
        namespace: dict = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)  # "'float' object is not callable"
            exec(compile("\n".join(lines), "<tapegrad door>", "exec"), namespace)
        code = _TRAMPOLINES[nfree] = namespace["_outer"]().__code__
    return code


class _Swap:
    """How one intercepted callable is routed to its rule, and back."""

    __slots__ = ("fun", "code", "door_code", "owner", "name", "wrapper", "original")

    def __init__(
        self,
        fun: Any,
        options: Tuple[Any, Optional[str], bool, bool],
        make_door: Optional[Callable[[Callable[..., Any]], Callable[[tuple, dict], Any]]] = None,
    ) -> None:
        owner, name, inspect_self, route_all = options
        self.fun = fun
        self.owner = self.name = self.wrapper = None
        if isinstance(fun, types.FunctionType) and not (fun.__code__.co_flags & 0x3A0):  # no generators or coroutines
            original = types.FunctionType(
                fun.__code__, fun.__globals__, fun.__name__, fun.__defaults__, fun.__closure__
            )
            original.__kwdefaults__ = fun.__kwdefaults__
            original.__dict__.update(fun.__dict__)
            original.__qualname__ = fun.__qualname__
            self.original = original
            self.code = fun.__code__
            if make_door is None:
                ORIGINALS[fun] = original  # its signature, for binding traced keywords
                _keep_signature(fun, original)
                door = _make_door(fun, original, inspect_self, route_all)
            else:  # a namespace look-up: its own door, no rule
                door = make_door(original)
            template = _trampoline(len(self.code.co_freevars))
            replace = {
                "co_name": self.code.co_name,
                "co_filename": self.code.co_filename,
                "co_consts": tuple(door if c == _PLACEHOLDER else c for c in template.co_consts),
            }
            if sys.version_info >= (3, 11):
                replace["co_qualname"] = self.code.co_qualname
            self.door_code = template.replace(**replace)
        elif owner is not None and name is not None:
            # A compiled callable: only the attribute of its owner can be replaced.
            self.owner, self.name, self.original = owner, name, fun
            door = _make_door(fun, fun, inspect_self, route_all)
            self.wrapper = _attribute_wrapper(fun, door)
        else:
            raise TypeError(f"cannot intercept {fun!r}: not a Python function, and no owner attribute given")

    def on(self) -> None:
        """Replace a compiled callable's attribute by the wrapper (code swaps are made by install)."""
        if getattr(self.owner, self.name, None) is self.fun:
            setattr(self.owner, self.name, self.wrapper)

    def off(self) -> None:
        if getattr(self.owner, self.name, None) is self.wrapper:
            setattr(self.owner, self.name, self.fun)


def _keep_signature(fun: Any, original: Any) -> None:
    """Give ``fun`` its own ``__signature__``: the trampoline (``*args, **kwargs``) lingers between windows."""
    if "__signature__" in fun.__dict__:
        return
    import inspect  # rare path: once per intercepted function

    try:
        fun.__signature__ = inspect.signature(original)
    except (TypeError, ValueError):
        pass


def _attribute_wrapper(fun: Any, door: Callable[[tuple, dict], Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return door(args, kwargs)

    wrapper.__name__ = getattr(fun, "__name__", "wrapper")
    wrapper.__qualname__ = getattr(fun, "__qualname__", wrapper.__name__)
    wrapper.__doc__ = getattr(fun, "__doc__", None)
    wrapper.__wrapped__ = fun
    return wrapper
