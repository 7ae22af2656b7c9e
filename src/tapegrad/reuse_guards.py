"""The guards of a reusable recording (:mod:`tapegrad.reuse`): what must hold for it to answer again.

A recording is evaluated at new inputs without running the user's Python, so
everything that Python decided from the values it saw must be decided again and
found the same:

* every traced value that left the tape for Python (``bool(x)``, ``int(x)``,
  ``operator.index``, a value read whole by :func:`tapegrad.tracer.strip`) is kept
  with its answer (:class:`GuardLog`, filled through ``tracer.ROUTES.guard``);
* every non-differentiable function of a traced value (a comparison, ``np.argmax``,
  ``np.floor``: a constant the tape then holds) is kept with the call and its output;
* the call's signature (the structure, shapes and dtypes of the arguments, the
  values of the arguments that are not differentiated) is the key of the cache;
* the objects the function reads directly (its globals, closure cells and defaults)
  are kept by identity, and arrays among them by value (:class:`Environment`).

A function that draws random numbers while it records is never reused
(:func:`random_states`).
"""

from __future__ import annotations

import builtins
import contextvars
import math
import struct
import operator
import threading
import types
import warnings
from typing import Any, Callable, Optional

import numpy as np

from .tape import ARGS, CONSTANT_ARGS, RULE, Tape
from .tracer import ROUTES, Tracer

__all__ = [
    "GuardLog",
    "Ref",
    "activate",
    "deactivate",
    "same",
    "snapshot",
    "Environment",
    "random_states",
    "signature",
    "NotReusable",
    "GuardedTape",
]


class NotReusable(Exception):
    """This call (or this function) cannot be answered from a recording: run it eagerly."""


class Ref:
    """Where a guard's argument comes from: output ``out`` of node ``index`` of the recording."""

    __slots__ = ("index", "out")

    def __init__(self, index: int, out: int) -> None:
        self.index, self.out = index, out


_RECORDING = Tape.recording  # the slot of Tape.recording (a member descriptor)


class GuardedTape(Tape):
    """The tape of a reuse recording: it notes whether it was ever paused.

    Calls on its tracers while it does not record (``GradientTape.stop_recording``, a
    SciPy solver's own run on traced values) compute values from traced inputs that
    leave no node and no guard: such a recording cannot be replayed.
    """

    __slots__ = ("paused",)

    def __init__(self) -> None:
        self.paused = False
        super().__init__()

    @property  # type: ignore[override]
    def recording(self) -> bool:
        return _RECORDING.__get__(self)

    @recording.setter
    def recording(self, value: bool) -> None:
        if not value:
            self.paused = True
        _RECORDING.__set__(self, value)


class GuardLog:
    """What one recording's Python learned from its traced values, in tape order.

    ``guards`` holds ``(position, kind, payload, expected)``: ``position`` is the
    number of nodes recorded when the value was read (the guard can be checked as
    soon as those are evaluated again); ``kind`` is ``"convert"`` (payload
    ``(Ref, to)``: ``to(value)``, or the whole value when ``to`` is ``None``) or
    ``"constant"`` (payload ``(fun, args, kwargs)`` with :class:`Ref` in place of
    the traced values).  ``kwargs`` holds the keywords of calls whose node does not
    keep them (element-wise ufuncs called with ``dtype=`` and the like).
    """

    __slots__ = ("tape", "guards", "kwargs", "unreplayable", "errstate")

    def __init__(self, tape: Tape) -> None:
        self.tape = tape
        self.guards: list = []
        self.kwargs: dict = {}
        #: Why this recording must not be kept (see :func:`_watched`), or None.
        self.unreplayable: Optional[str] = None
        #: NumPy's error state and the warnings filters when the recording started (see :func:`activate`).
        self.errstate: Any = None


# The logs of the recordings in progress (all threads), by tape.  The hook stays
# installed while any is active; each tracer looks its own tape up.
_ACTIVE: dict = {}
_LOCK = threading.Lock()

#: The tracer's entry points that compute on traced values: while a recording is active they
#: are watched (:func:`_watched`), so that an exception one raises, which the user's Python may
#: catch, or an error state the function sets, is seen.  Eager mode never pays for the watch.
_ENTRY_POINTS = (
    "ufunc", "ufunc_call1", "function", "unary", "binary", "getitem", "getitem_basic", "setitem", "astype", "write",
    "write_inplace",
)
_UNWATCHED: dict = {}

# NumPy's error state lives in a context variable whose value is replaced by every np.errstate:
# comparing its identity is the cheap test that the state may have changed (then np.geterr decides).
try:
    from numpy._core._ufunc_config import _extobj_contextvar
except ImportError:  # pragma: no cover - a NumPy that moved it: np.geterr at every call decides
    _errstate_token: Callable[[], Any] = object
else:
    _errstate_token = _extobj_contextvar.get
_START: contextvars.ContextVar = contextvars.ContextVar("tapegrad_reuse_errstate", default=None)
_start_get = _START.get


def activate(log: GuardLog) -> Any:
    """Start noting guards for ``log.tape`` (installs the hook of ``tracer.ROUTES``); returns a token for deactivate."""
    filters = warnings.filters
    log.errstate = (_errstate_token(), np.geterr(), filters, len(filters), frozenset(map(_filter_key, filters)),
                    getattr(warnings, "_showwarnmsg_impl", None), warnings.showwarning)
    token = _START.set(log.errstate)
    with _LOCK:
        _ACTIVE[log.tape] = log
        ROUTES.guard = _hook
        if not _UNWATCHED:
            for name in _ENTRY_POINTS:
                route = getattr(ROUTES, name)
                _UNWATCHED[name] = route
                setattr(ROUTES, name, _watched(route))
    return token


def deactivate(log: GuardLog, token: Any = None) -> None:
    if token is not None:
        _START.reset(token)
    with _LOCK:
        _ACTIVE.pop(log.tape, None)
        if not _ACTIVE:
            ROUTES.guard = None
            for name, route in _UNWATCHED.items():
                setattr(ROUTES, name, route)
            _UNWATCHED.clear()


def _filter_key(entry: tuple) -> tuple:
    """A warnings filter, comparable (its regular expressions by pattern)."""
    return tuple(getattr(part, "pattern", part) for part in entry)


def _mark(args: Any, reason: str) -> None:
    """Mark the recordings whose tracers are among ``args`` as not to be kept."""
    found: dict = {}
    _logs_in(args, found)
    for log in found.values():
        if log.unreplayable is None:
            log.unreplayable = reason


def _watched(route: Callable) -> Callable:
    """``route`` with the two checks a recording needs beside its guards.

    A call on traced values that raises (``inv`` of a singular matrix, ``1 / x`` under
    ``np.errstate(divide="raise")``) may be caught by the function, which then takes a
    path the recording cannot guard: eager mode would take it again only where the call
    raises again.  And an error state that the function sets to ``raise`` (or ``call``)
    is not in force when a replay runs (under the caller's state).  Either marks the
    recording: it answers this call, and is not kept.
    """

    def watched(*args: Any, **kwargs: Any) -> Any:
        try:
            out = route(*args, **kwargs)
        except BaseException as exc:
            _mark((args, kwargs), f"a NumPy call on traced values raised {type(exc).__name__}")
            raise
        start = _start_get()
        if start is not None:
            if _errstate_token() is not start[0]:
                now = np.geterr()
                for kind, action in now.items():
                    was = start[1].get(kind)
                    if action != was and ("raise" in (action, was) or "call" in (action, was)):
                        _mark(args, f"the function sets np.errstate({kind}={action!r})")
                        break
            if getattr(warnings, "_showwarnmsg_impl", None) is not start[5] or warnings.showwarning is not start[6]:
                # warnings.catch_warnings(record=True) inside the function: it may branch on what NumPy warned
                _mark(args, "the function records warnings")
            filters = warnings.filters
            if filters is not start[2] or len(filters) != start[3]:
                # warnings.simplefilter("error") inside the function turns NumPy's RuntimeWarning into an
                # exception it may catch: a replay runs under the caller's filters.
                for entry in filters:
                    if entry[0] == "error" and issubclass(RuntimeWarning, entry[2]) and _filter_key(entry) not in start[4]:
                        _mark(args, "the function turns warnings into errors")
                        break
        return out

    return watched


def _raw(value: Any) -> Any:
    while type(value) is Tracer:
        value = value._value
    return value


def _raw_all(obj: Any) -> Any:
    t = type(obj)
    if t is Tracer:
        return _raw(obj)
    if t is list:
        return [_raw_all(o) for o in obj]
    if t is tuple:
        return tuple(_raw_all(o) for o in obj)
    if t is dict:
        return {k: _raw_all(v) for k, v in obj.items()}
    return obj


def snapshot(value: Any) -> Any:
    """A copy of the arrays in ``value`` (the user may later write into what they got)."""
    if type(value) is np.ndarray:
        return value.copy()
    if type(value) is tuple or type(value) is list:
        return type(value)(snapshot(v) for v in value)
    return value


def _is_constant_node(tape: Tape, index: int) -> bool:
    node = tape.nodes[index]
    return node[RULE] is None and node[ARGS] is CONSTANT_ARGS


def _note_convert(value: Tracer, to: Optional[Callable], result: Any) -> None:
    while type(value) is Tracer:
        log = _ACTIVE.get(value._tape)
        if log is not None and not _is_constant_node(log.tape, value._index):
            expected = snapshot(result) if to is None else result
            log.guards.append((len(log.tape.nodes), "convert", (Ref(value._index, value._out), to), expected))
        value = value._value


def _logs_in(obj: Any, found: dict) -> None:
    t = type(obj)
    if t is Tracer:
        while type(obj) is Tracer:
            log = _ACTIVE.get(obj._tape)
            if log is not None:
                found[id(log)] = log
            obj = obj._value
    elif t is list or t is tuple:
        for o in obj:
            _logs_in(o, found)
    elif t is dict:
        for o in obj.values():
            _logs_in(o, found)


def _template(obj: Any, tape: Tape) -> Any:
    """``obj`` with each tracer that has a level on ``tape`` replaced by a :class:`Ref` to its node."""
    t = type(obj)
    if t is Tracer:
        value = obj
        while type(value) is Tracer:
            if value._tape is tape:
                if _is_constant_node(tape, value._index):
                    return _raw(value)
                return Ref(value._index, value._out)
            value = value._value
        return value
    if t is list:
        return [_template(o, tape) for o in obj]
    if t is tuple:
        return tuple(_template(o, tape) for o in obj)
    if t is dict:
        return {k: _template(v, tape) for k, v in obj.items()}
    return obj


def _hook(kind: str, a: Any, b: Any = None, c: Any = None) -> Any:
    """``tracer.ROUTES.guard``: called by the core where a traced value leaves the tape."""
    if kind == "convert":  # (value, to)
        raw = _raw(a)
        try:
            result = raw if b is None else b(raw)
        except BaseException as exc:  # int(nan): the function may catch it (see _watched)
            _mark(a, f"converting a traced value raised {type(exc).__name__}")
            raise
        _note_convert(a, b, result)
        return result
    if kind == "constant":  # (fun, args, kwargs): a non-differentiable function of traced values
        args, kwargs = _raw_all(b), _raw_all(c)
        out = a(*args, **kwargs)
        found: dict = {}
        _logs_in(b, found)
        _logs_in(c, found)
        if found:
            # np.empty_like gives whatever memory held: its guard is the shape and dtype (zeros of them).
            check = _GUARDED_AS.get(a, a)
            expected = snapshot(out) if check is a else check(*args, **kwargs)
            for log in found.values():
                guard = (check, _template(b, log.tape), _template(c, log.tape))
                log.guards.append((len(log.tape.nodes), "constant", guard, expected))
        return out
    if kind == "outputs":  # (tape, index, outputs) of a node with several outputs
        log = _ACTIVE.get(a)
        if log is not None:
            for k, out in enumerate(c):
                if type(out) is not Tracer:  # an integer output: later Python and calls read it as it is
                    log.guards.append((len(a.nodes), "convert", (Ref(b, k), None), snapshot(out)))
        return None
    if kind == "kwargs":  # (output, kwargs) of a call whose node does not keep its keywords
        first = a[0] if isinstance(a, (tuple, list)) and a else a
        if type(first) is Tracer:
            log = _ACTIVE.get(first._tape)
            if log is not None:
                log.kwargs[first._index] = dict(b)
        return None
    raise AssertionError(kind)


#: Non-differentiable functions whose output is not a function of their inputs' values: the guard
#: calls the second instead (their output's shape and dtype are all a recording relies on).
_GUARDED_AS = {np.empty_like: np.zeros_like, np.empty: np.zeros}


# ---------------------------------------------------------------------- equality
def _same_float(a: float, b: float) -> bool:
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b) or (a != a and b != b)


#: Up to this many bytes, two copies (``tobytes``) compare faster than a pass of NumPy's ``equal``;
#: above it the copies cost more than the pass (and fresh memory for each, page by page).
_COPY_BYTES = 1 << 15

#: The unsigned integer type of each word size: bitwise equality of words is equality of integers.
_WORDS = ((8, np.uint64), (4, np.uint32), (2, np.uint16), (1, np.uint8))


def _same_words(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equality of two C-contiguous arrays of one shape and dtype, without copying them.

    Both are read as unsigned integers of the widest size that divides the item
    size: integers are equal exactly when their bits are (unlike floats, whose
    NaN differs from itself and whose -0.0 equals 0.0).
    """
    size = a.dtype.itemsize
    word = next(w for s, w in _WORDS if size % s == 0)
    return bool(np.equal(a.reshape(-1).view(word), b.reshape(-1).view(word)).all())


def _same_array(a: Any, b: Any) -> bool:
    """:func:`same` for two arrays (or two NumPy scalars) of one type."""
    if a.shape != b.shape or a.dtype != b.dtype or a.dtype.kind == "O":
        return False
    if a is b:
        return True
    if a.nbytes > _COPY_BYTES and type(a) is np.ndarray and not a.dtype.hasobject:
        if a.flags.c_contiguous and b.flags.c_contiguous:
            return _same_words(a, b)
        if a.flags.f_contiguous and b.flags.f_contiguous:
            return _same_words(a.T, b.T)  # the same elements, C-contiguous
    return a.tobytes() == b.tobytes()


def same(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are the same value, bit for bit (shape and dtype included)."""
    t = type(a)
    if t is not type(b):
        return False
    if t is np.ndarray or isinstance(a, np.generic):
        return _same_array(a, b)
    if t is tuple or t is list or isinstance(a, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if t is float:
        return _same_float(a, b)
    if t is complex:
        return _same_float(a.real, b.real) and _same_float(a.imag, b.imag)
    if t is dict:
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if t is int or t is bool or t is str or a is None or t is bytes or t is slice or t is type(Ellipsis):
        return a == b
    return a is b


# ---------------------------------------------------------------------- the call
_SCALARS = (int, bool, str, bytes, type(None), type(Ellipsis))
_DOUBLE = struct.Struct("<d")


def _leaf_key(obj: Any, diff: bool, inputs: list, values: list, pins: list) -> Any:
    """The cache key of one leaf of the arguments (see :func:`signature`)."""
    t = type(obj)
    if t is np.ndarray:
        if diff and obj.dtype.kind in "fc":
            inputs.append(obj)
            # Strides and writability decide which calls return views, and whether writes through them raise.
            return ("x", obj.shape, obj.dtype.str, obj.strides, obj.flags.writeable)
        values.append(obj)
        # Writability decides whether f's writes into it raise; strides, what order="K" reads.
        return ("a", obj.shape, obj.dtype.str, obj.strides, obj.flags.writeable)
    if t is float or t is complex:
        if diff:
            inputs.append(obj)
            return ("x", t)
        # By bits: float.hex() writes 'nan' for every NaN, whose sign np.copysign reads.
        return (t, _DOUBLE.pack(obj) if t is float else _DOUBLE.pack(obj.real) + _DOUBLE.pack(obj.imag))
    if isinstance(obj, np.generic):
        if diff and obj.dtype.kind in "fc":
            inputs.append(obj)
            return ("x", t)
        return (t, obj.tobytes())
    if t in _SCALARS:
        return (t, obj)
    if t is Tracer:
        raise NotReusable("traced argument")
    if hasattr(obj, "__array_function__") or hasattr(obj, "__array_ufunc__"):
        raise NotReusable(f"an argument of type {t.__name__} (only NumPy arrays are replayed)")
    pins.append(obj)  # compared by identity: kept alive so that its id stays its own
    return ("o", id(obj))


def _key(obj: Any, diff: bool, inputs: list, values: list, pins: list) -> Any:
    t = type(obj)
    if t is np.ndarray:  # the common case first
        return _leaf_key(obj, diff, inputs, values, pins)
    if t is list or t is tuple or (isinstance(obj, tuple) and hasattr(obj, "_fields")):
        return (t, tuple(_key(c, diff, inputs, values, pins) for c in obj))
    if t is dict:
        return (dict, tuple((k, _key(v, diff, inputs, values, pins)) for k, v in obj.items()))
    return _leaf_key(obj, diff, inputs, values, pins)


def signature(args: tuple, kwargs: dict, nums: tuple) -> tuple:
    """``(key, inputs, values, pins)`` for one call.

    ``key`` is hashable: the structure of every argument, the shape, dtype,
    strides and writability of the differentiated arrays (``inputs``, in the order the tape watches
    them), the shape and dtype of the other arrays (``values``, compared by value
    by the recording), the other arguments by value (numbers, strings) or by
    identity (``pins``: any other object).
    """
    inputs: list = []
    values: list = []
    pins: list = []
    parts = tuple(_key(a, i in nums, inputs, values, pins) for i, a in enumerate(args))
    if kwargs:
        parts += tuple((k, _key(v, False, inputs, values, pins)) for k, v in sorted(kwargs.items()))
    return parts, inputs, values, pins


# ---------------------------------------------------------------------- the function's world
_MISSING = object()


def _names(code: types.CodeType, out: set) -> None:
    out.update(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):  # lambdas, comprehensions, nested functions
            _names(const, out)


def _functions(fun: Any) -> list:
    """The plain Python functions behind ``fun`` (a partial, a bound method, a callable object)."""
    seen = []
    while True:
        if isinstance(fun, types.MethodType):
            fun = fun.__func__
        elif hasattr(fun, "func") and hasattr(fun, "keywords"):  # functools.partial
            fun = fun.func
        elif isinstance(fun, types.FunctionType):
            seen.append(fun)
            wrapped = getattr(fun, "__wrapped__", None)  # functools.wraps: the function it wraps
            if wrapped is None or any(wrapped is s for s in seen):
                return seen
            fun = wrapped
        else:
            call = getattr(type(fun), "__call__", None)
            return seen + ([call] if isinstance(call, types.FunctionType) else [])


class Environment:
    """The objects a function reads directly, kept by identity (arrays also by value).

    Its globals (the names its code and nested code load, looked up in
    ``__globals__`` then in the builtins), its closure cells, its defaults, and
    the pieces of a ``functools.partial`` or bound method.  Anything those objects
    hold is frozen (see ``docs/reuse.md``).
    """

    __slots__ = ("entries", "arrays")

    def __init__(self, fun: Any) -> None:
        entries = []  # (getter, expected object)
        arrays = []  # (getter, copy) of the ndarrays among them
        for f in _functions(fun):
            names: set = set()
            _names(f.__code__, names)
            glob = f.__globals__
            for name in sorted(names):
                if name in glob:
                    entries.append((_item(glob, name), glob[name]))
                elif name in builtins.__dict__:
                    entries.append((_builtin(glob, name), builtins.__dict__[name]))
            for cell in f.__closure__ or ():
                try:
                    entries.append((_cell(cell), cell.cell_contents))
                except ValueError:  # an empty cell (a name assigned later in the outer function)
                    entries.append((_cell(cell), _MISSING))
            entries.append((_attr(f, "__defaults__"), f.__defaults__))
            entries.append((_attr(f, "__kwdefaults__"), f.__kwdefaults__))
            for key, value in (f.__kwdefaults__ or {}).items():  # the dict written in place
                entries.append((_kwdefault(f, key), value))
            entries.append((_attr(f, "__code__"), f.__code__))
        for getter, holder in _holders(fun):
            entries.append((getter, holder))
        for getter, obj in entries:
            for value in _defaults_values(obj):
                if type(value) is np.ndarray:
                    arrays.append((_element(getter, value), value.copy()))
        self.entries = entries
        self.arrays = arrays

    def holds(self) -> bool:
        """Whether every object is still the one (and every array the value) seen when recording."""
        for getter, obj in self.entries:
            if getter() is not obj:
                return False
        for getter, copy in self.arrays:
            value = getter()
            if type(value) is not np.ndarray or not same(value, copy):
                return False
        return True

    def objects(self) -> list:
        return [obj for _, obj in self.entries]


def _item(d: dict, name: str) -> Callable:
    return lambda: d.get(name, _MISSING)


def _builtin(glob: dict, name: str) -> Callable:
    """A builtin as the function finds it: a global of that name, defined later, shadows it."""
    return lambda: glob.get(name, builtins.__dict__.get(name, _MISSING))


def _cell(cell: Any) -> Callable:
    def read() -> Any:
        try:
            return cell.cell_contents
        except ValueError:
            return _MISSING

    return read


def _attr(obj: Any, name: str) -> Callable:
    return lambda: getattr(obj, name)


def _kwdefault(f: Any, key: str) -> Callable:
    return lambda: (f.__kwdefaults__ or {}).get(key, _MISSING)


def _holders(fun: Any) -> list:
    """``(getter, object)`` for a partial's arguments and a bound method's instance (identity guards).

    Each getter reads the object again (a partial's ``keywords`` dict may be written in place).
    """
    out = []
    seen: set = set()
    while id(fun) not in seen:
        seen.add(id(fun))
        if isinstance(fun, types.MethodType):
            out.append((lambda obj=fun.__self__: obj, fun.__self__))
            fun = fun.__func__
        elif hasattr(fun, "func") and hasattr(fun, "keywords"):
            out.append((_attr(fun, "args"), fun.args))
            out.append((_attr(fun, "keywords"), fun.keywords))
            # The dict may be written in place (its arrays are compared by value through it).
            out.extend((_partial_keyword(fun, key), value) for key, value in fun.keywords.items()
                       if type(value) is not np.ndarray)
            fun = fun.func
        elif isinstance(fun, types.FunctionType) and getattr(fun, "__wrapped__", None) is not None:
            fun = fun.__wrapped__  # functools.wraps (hessian/hvp wrap ``fun`` in a gradient)
        else:
            return out
    return out


def _partial_keyword(p: Any, key: str) -> Callable:
    return lambda: p.keywords.get(key, _MISSING)


def _defaults_values(obj: Any) -> list:
    """The object itself, or the items of a defaults tuple / keyword-defaults dict."""
    if type(obj) is tuple:
        return list(obj)
    if type(obj) is dict:
        return list(obj.values())
    return [obj]


def _element(getter: Callable, value: np.ndarray) -> Callable:
    """A getter for ``value`` itself when it sits inside a defaults tuple or dict."""
    obj = getter()
    if obj is value:
        return getter
    if type(obj) is tuple:
        k = next(i for i, v in enumerate(obj) if v is value)
        return lambda: (lambda o: o[k] if type(o) is tuple and len(o) > k else _MISSING)(getter())
    key = next(k for k, v in obj.items() if v is value)
    return lambda: (lambda o: o.get(key, _MISSING) if type(o) is dict else _MISSING)(getter())


# ---------------------------------------------------------------------- random numbers
_GENERATORS = (np.random.Generator, np.random.RandomState, np.random.BitGenerator)


def _state_key(state: Any) -> Any:
    if isinstance(state, dict):
        return tuple((k, _state_key(v)) for k, v in sorted(state.items()))
    if isinstance(state, np.ndarray):
        return state.tobytes()
    if isinstance(state, (tuple, list)):
        return tuple(_state_key(s) for s in state)
    return state


def _state(gen: Any) -> Any:
    if isinstance(gen, np.random.Generator):
        return _state_key(gen.bit_generator.state)
    if isinstance(gen, np.random.RandomState):
        return _state_key(gen.get_state(legacy=False))
    return _state_key(gen.state)


#: How far (and through how many objects) the search for generators goes.
_SEARCH_DEPTH = 4
_SEARCH_OBJECTS = 4000


def _generators_in(roots: list) -> list:
    """The NumPy random generators reachable from ``roots``.

    Through containers (lists, tuples, named tuples, dicts, sets), the attributes of
    instances (``self.rng``), bound methods, ``functools.partial`` objects, and
    functions (closure cells, defaults and the globals their code names: a helper's
    own generator), up to :data:`_SEARCH_DEPTH` steps and :data:`_SEARCH_OBJECTS` objects.
    """
    found: dict = {}
    seen: set = set()
    layer = list(roots)
    for _ in range(_SEARCH_DEPTH + 1):
        nxt: list = []
        for obj in layer:
            if id(obj) in seen or len(seen) > _SEARCH_OBJECTS:
                continue
            seen.add(id(obj))
            if isinstance(obj, _GENERATORS):
                found[id(obj)] = obj
                continue
            t = type(obj)
            if t is np.ndarray or obj is None or t in _SCALARS or t in (float, complex):
                continue
            if isinstance(obj, (list, tuple, set, frozenset)):
                nxt.extend(obj)
            elif isinstance(obj, dict):
                nxt.extend(obj.values())
            elif isinstance(obj, types.MethodType):
                nxt += [obj.__self__, obj.__func__]
            elif isinstance(obj, types.FunctionType):
                nxt.extend(value for value in (_cell(c)() for c in obj.__closure__ or ()) if value is not _MISSING)
                nxt.extend(obj.__defaults__ or ())
                nxt.extend((obj.__kwdefaults__ or {}).values())
                names: set = set()
                _names(obj.__code__, names)
                nxt.extend(obj.__globals__[n] for n in names if n in obj.__globals__)
            elif hasattr(obj, "func") and hasattr(obj, "keywords"):  # functools.partial
                nxt += [obj.func, obj.args, obj.keywords]
            elif isinstance(obj, (types.ModuleType, type)):
                continue  # a module's or class's whole namespace: what the function reads is a global already
            else:
                d = getattr(obj, "__dict__", None)
                if type(d) is dict:
                    nxt.extend(d.values())
                slots = getattr(type(obj), "__slots__", ())
                nxt.extend(getattr(obj, n) for n in ((slots,) if isinstance(slots, str) else slots)
                           if isinstance(n, str) and hasattr(obj, n))
        layer = nxt
    return list(found.values())


def random_states(fun: Any, environment: Environment, args: tuple, kwargs: dict) -> Callable[[], bool]:
    """Snapshot NumPy's random generators the function can reach; returns ``drew()``.

    The global generator (``np.random.*``) always; ``Generator``, ``RandomState``
    and bit generators among the arguments, the objects the function reads
    directly and the globals of the functions among those.  ``drew()`` says whether
    any of them moved since the snapshot.
    """
    roots = [np.random.mtrand._rand, fun] + environment.objects() + list(args) + list(kwargs.values())
    gens = _generators_in(roots)
    before = [(g, _state(g)) for g in gens]

    def drew() -> bool:
        return any(_state(g) != state for g, state in before)

    return drew


#: Conversions a guard may name (the hook passes these callables).
CONVERSIONS = (bool, int, operator.index)
