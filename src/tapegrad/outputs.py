"""Outputs that hold a tracer inside another array library: read through, never taken as constants.

NumPy hands every call on a tracer to tapegrad, so a differentiated function may
build its result in a library that wraps arrays: an xarray ``DataArray``, a pint
``Quantity``, pint-xarray's quantified arrays, any NEP-18 duck array.  The tracer
then sits *inside* the object the function returns.  Read as it is, that object
is no tracer of the tape, so it would count as a constant and its derivative
would be a silent zero.

:func:`read_outputs` is the one place where what a function returned (or what a
caller names as a target) becomes what the sweep differentiates.  Each leaf of
the output (lists, tuples, dicts and named tuples are walked as
:mod:`tapegrad.tree` walks them) becomes:

* a number, an ndarray, a NumPy scalar or a tracer: itself (an object array
  that holds tracers is refused);
* an xarray ``DataArray`` or ``Variable``: its ``.data``; a pint ``Quantity``: its
  ``.magnitude`` (the derivative is that of the magnitude, in the output's units
  per unit of the input); read again until no known wrapper is left, so a
  pint-xarray ``DataArray`` gives the tracer inside its ``Quantity``;
* an xarray ``Dataset``: the dict ``{name: data}`` of its data variables
  (coordinates are labels, not outputs);
* any other object with ``shape`` and ``dtype`` (a duck array): the one tracer of
  its shape found in its attributes (a depth-limited search, known wrappers
  read on the way); a clear error when it holds several, or only tracers of
  other shapes, or when the search could not look through all of it; when it
  holds none it is a constant (a Dask or CuPy array is one without a look);
* anything else (a string, ``None``, a plain Python object): a
  :class:`UnreadableOutputError`, a ``TypeError`` naming the type.

It also returns how to put the wrappers back around plain values: the value
that ``value_and_grad``, ``vjp`` and ``jvp`` return is the function's own output
(a ``DataArray`` with its coordinates, a ``Quantity`` with its units) with its
tracers replaced by their values; another duck array is shallow-copied with its
array attribute replaced, or is that plain array when it cannot be copied.
Derivatives are always plain arrays.
"""

from __future__ import annotations

import copy
import numbers
import operator
import sys
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from .errors import GradientDroppedError, TapegradError
from .tracer import Tracer
from .tree import flatten, unflatten

__all__ = ["UnreadableOutputError", "read_outputs", "read_target"]

#: Leaves that are read as they are, without a look inside (the common case: one test).
_SIMPLE = frozenset({Tracer, float, int, complex, bool})

#: Attribute levels below a duck array that the generic search looks through, and
#: the most objects and containers it opens: an output is read once per request,
#: and a wrapper keeps its data near the top.
MAX_DEPTH = 4
MAX_OBJECTS = 512
MAX_ITEMS = 4096  # entries of one container (a list, a dict, an object array)

#: Array libraries whose arrays a tracer wraps but never the other way round: a
#: value of theirs is a constant, and looking inside (a Dask graph) is costly.
_ARRAY_LIBRARIES = frozenset({"dask", "cupy"})

_asarray = np.asarray  # the original: tapegrad.constructors may patch numpy.asarray later

Rebuild = Callable[[Any], Any]


class UnreadableOutputError(TapegradError, TypeError):
    """A differentiated function returned an object that is neither a number, an array nor a container of them."""


# ------------------------------------------------------------------ known wrappers
def _known(obj: Any) -> Optional[Tuple[Any, Rebuild, str]]:
    """``(inner, wrap, label)`` for a wrapper whose protocol tapegrad knows, else ``None``.

    ``inner`` is the array the wrapper holds, ``wrap(new)`` the same wrapper around
    ``new`` (same dimensions, coordinates, attributes, units), ``label`` where the
    array was read (for messages).  The libraries are looked up in ``sys.modules``:
    an object can only be theirs once they are imported, and tapegrad imports neither.
    """
    xr: Any = sys.modules.get("xarray")
    if xr is not None and isinstance(obj, (getattr(xr, "DataArray", ()), getattr(xr, "Variable", ()))):
        labelled: Any = obj
        return labelled.data, lambda new: labelled.copy(deep=False, data=new), ".data"
    pint: Any = sys.modules.get("pint")
    if pint is not None and isinstance(obj, getattr(pint, "Quantity", ())):
        quantity: Any = obj
        return quantity.magnitude, lambda new: type(quantity)(new, quantity.units), ".magnitude"
    return None


def _dataset(obj: Any) -> bool:
    xr = sys.modules.get("xarray")
    return xr is not None and isinstance(obj, getattr(xr, "Dataset", ()))


# ------------------------------------------------------------------ messages
def _qualname(obj: Any) -> str:
    t = type(obj)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _accepted() -> str:
    return (
        "tapegrad differentiates numbers, arrays (NumPy, Dask, CuPy, tracers), duck arrays that "
        "wrap one (xarray DataArray, Variable or Dataset, pint Quantity, pint-xarray, any NEP-18 "
        "array with a shape and a dtype), and lists, tuples, dicts and named tuples of them"
    )


def _path_text(path: tuple) -> str:
    parts = []
    for kind, key in path:
        if kind == "known":
            parts.append(key)
        elif kind in ("attr", "slot"):
            parts.append("." + (key if kind == "attr" else key[1]))
        else:
            parts.append(f"[{key!r}]")
    return "".join(parts)


def _refuse(obj: Any, what: str) -> UnreadableOutputError:
    hint = " (did the function forget to return its result?)" if obj is None else ""
    return UnreadableOutputError(
        f"{what} is of type {_qualname(obj)}{hint}, which tapegrad cannot differentiate: {_accepted()}. "
        "Return the array that holds the result."
    )


# ------------------------------------------------------------------ the generic search
def _opaque(value: Any) -> bool:
    """Whether ``value`` certainly holds no tracer (nothing to look into)."""
    if isinstance(value, (numbers.Number, str, bytes, type(None), np.generic, np.dtype, type, range, slice)):
        return True
    if type(value) is np.ndarray:
        return value.dtype != object
    if callable(value) and not hasattr(value, "shape"):
        return True  # functions, methods, ufuncs: code, not data
    return type(value).__module__.partition(".")[0] in _ARRAY_LIBRARIES


def _slots(obj: Any) -> List[Tuple[Any, str, Any]]:
    """``(descriptor, name, class)`` for each slot of ``obj``'s class (read through the descriptor:
    no property or ``__getattr__`` runs)."""
    out = []
    for cls in type(obj).__mro__:
        names = cls.__dict__.get("__slots__", ())
        for name in (names,) if isinstance(names, str) else names:
            if name in ("__dict__", "__weakref__"):
                continue
            if name.startswith("__") and not name.endswith("__"):
                name = f"_{cls.__name__.lstrip('_')}{name}"  # name mangling
            descriptor = cls.__dict__.get(name)
            if descriptor is not None and hasattr(descriptor, "__get__"):
                out.append((descriptor, name, cls))
    return out


def _children(node: Any) -> List[Tuple[tuple, Any]]:
    """``((kind, key), child)`` for what ``node`` holds."""
    known = _known(node)
    if known is not None:
        return [(("known", known[2]), known[0])]
    if isinstance(node, (list, tuple)):
        return [(("item", i), v) for i, v in enumerate(node)]
    if isinstance(node, dict):
        return [(("item", k), v) for k, v in node.items()]
    if isinstance(node, (set, frozenset)):
        return [(("set", None), v) for v in node]
    if type(node) is np.ndarray:  # an object array (other arrays are opaque)
        return [(("flat", i), v) for i, v in enumerate(node.flat)]
    out: List[Tuple[tuple, Any]] = []
    try:  # the instance dict itself: no __getattr__ or property runs
        attributes = object.__getattribute__(node, "__dict__")
    except AttributeError:
        attributes = None
    if isinstance(attributes, dict):
        out.extend((("attr", k), v) for k, v in list(attributes.items()))
    for descriptor, name, cls in _slots(node):
        try:
            value = descriptor.__get__(node, cls)
        except AttributeError:  # an unset slot
            continue
        out.append((("slot", (descriptor, name)), value))
    return out


def _size(node: Any) -> int:
    """How many entries ``node`` holds when it is a container (0 for other objects)."""
    if type(node) is np.ndarray:
        return node.size
    if isinstance(node, (list, tuple, dict, set, frozenset)):
        return len(node)
    return 0


def _search(obj: Any) -> Tuple[List[Tuple[Tracer, tuple]], bool]:
    """The tracers inside ``obj`` with the path to each, and whether the search was cut short."""
    found: List[Tuple[Tracer, tuple]] = []
    seen = {id(obj)}
    stack: List[Tuple[Any, tuple, int]] = [(obj, (), 0)]
    opened = 0
    truncated = False
    while stack:
        node, path, depth = stack.pop()
        opened += 1
        if _size(node) > MAX_ITEMS:
            truncated = True
            continue
        for step, child in _children(node):
            if type(child) is Tracer:
                found.append((child, path + (step,)))
                continue
            if _opaque(child) or id(child) in seen:
                continue
            seen.add(id(child))
            if depth + 1 > MAX_DEPTH or opened + len(stack) >= MAX_OBJECTS:
                truncated = True
                continue
            stack.append((child, path + (step,), depth + 1))
    return found, truncated


def _replace(node: Any, path: tuple, new: Any) -> Any:
    """A shallow copy of ``node`` with the value at ``path`` replaced by ``new``."""
    if not path:
        return new
    (kind, key), rest = path[0], path[1:]
    if kind == "known":
        inner, wrap, _ = _known(node)  # type: ignore[misc]
        return wrap(_replace(inner, rest, new))
    if kind == "attr":
        value = _replace(vars(node)[key], rest, new)
        result = copy.copy(node)
        vars(result)[key] = value  # the instance dict itself: no __setattr__ of a frozen class runs
        return result
    if kind == "slot":
        descriptor, _ = key
        value = _replace(descriptor.__get__(node, type(node)), rest, new)
        result = copy.copy(node)
        descriptor.__set__(result, value)
        return result
    if kind == "flat":
        result = node.copy()
        result.flat[key] = _replace(node.flat[key], rest, new)
        return result
    if kind == "item":
        value = _replace(node[key], rest, new)
        if isinstance(node, tuple):
            items = list(node)
            items[key] = value
            return type(node)(*items) if hasattr(node, "_fields") else type(node)(items)
        result = copy.copy(node)
        result[key] = value
        return result
    raise TypeError(f"cannot rebuild a {_qualname(node)} through {kind}")  # a set: no place to put it


def _node_key(t: Tracer) -> tuple:
    return (id(t._tape), t._index, t._out)


def _shape_of(obj: Any) -> Optional[tuple]:
    """``obj.shape`` as a tuple of ints when ``obj`` is array-like (a shape and a dtype), else ``None``."""
    try:
        shape = obj.shape
        if getattr(obj, "dtype", None) is None:
            return None
        return tuple(operator.index(s) for s in shape)
    except Exception:  # no shape, or one with unknown lengths (nan): not an array we can check
        return None


def _stand_in(obj: Any, shape: tuple) -> Any:
    """A constant of ``obj``'s shape and dtype in zero memory, or ``obj`` when its dtype is not NumPy's.

    What a request needs from a constant output is its shape and dtype; the stand-in
    keeps the sweep from calling an unknown library's functions (``np.ones_like``).
    """
    try:
        dtype = np.dtype(obj.dtype)
    except TypeError:
        return obj
    return np.broadcast_to(np.zeros((), dtype=dtype), shape)


def _hides_tracer(obj: Any) -> bool:
    """Whether converting ``obj`` reaches a tracer the search did not find (behind a property, a closure)."""
    if not hasattr(type(obj), "__array__"):
        return False
    try:
        converted = _asarray(obj)
    except GradientDroppedError:
        return True
    except Exception:  # any other refusal says nothing about tracers
        return False
    return type(converted) is Tracer


def _read_dask_over_tracers(lazy: Any) -> Tuple[Any, Rebuild]:
    """A Dask array whose chunks are tracers (``da.from_array(x)`` of a traced ``x``): computed.

    Its graph runs now, in this thread (the tracers record on their tape as any call
    does); left lazy it would read as a constant, a silent zero gradient.  Its value
    comes back as a Dask array with the same chunks.
    """
    traced = lazy.compute(scheduler="sync")

    def rebuild(new: Any) -> Any:
        chunks = lazy.chunks
        if any(c != c for dim in chunks for c in dim):  # unknown (NaN) chunk sizes
            return new
        return sys.modules["dask.array"].from_array(new, chunks=chunks)

    return traced, rebuild


def _read_generic(obj: Any, what: str) -> Tuple[Any, Optional[Rebuild]]:
    """An array-like object of no known library: the one tracer of its shape inside it."""
    if type(obj).__module__.partition(".")[0] in _ARRAY_LIBRARIES:
        if type(getattr(obj, "_meta", None)) is Tracer:
            return _read_dask_over_tracers(obj)
        return obj, None  # a Dask or CuPy constant (its shape may be unknown): zeros in its library
    shape = _shape_of(obj)
    if shape is None:
        raise _refuse(obj, what)
    found, truncated = _search(obj)
    candidates: dict = {}
    for t, path in found:
        if t.shape == shape:
            candidates.setdefault(_node_key(t), (t, path))
    if len(candidates) == 1:
        ((t, path),) = candidates.values()

        def rebuild(new: Any) -> Any:
            try:
                return _replace(obj, path, new)
            except Exception:  # the object cannot be copied or written: its plain data (documented)
                return new

        return t, rebuild
    name = _qualname(obj)
    if candidates:
        paths = ", ".join("out" + _path_text(p) for _, p in candidates.values())
        raise UnreadableOutputError(
            f"{what} is a {name} of shape {shape} that holds {len(candidates)} different traced arrays "
            f"of that shape ({paths}): tapegrad cannot tell which one is its data. Return that "
            "array itself."
        )
    if found:
        t, path = found[0]
        raise UnreadableOutputError(
            f"{what} is a {name} of shape {shape}, but the traced array it holds (out{_path_text(path)}) "
            f"has shape {t.shape}: tapegrad cannot tell how the output's elements relate to it. "
            "Return the traced array itself."
        )
    if truncated:
        raise UnreadableOutputError(
            f"{what} is a {name} in which tapegrad found no traced array within {MAX_DEPTH} levels of "
            f"attributes and {MAX_OBJECTS} objects, but could not look through all of it, so it cannot "
            "tell a constant from a wrapped tracer. Return the array the object wraps."
        )
    if _hides_tracer(obj):
        raise UnreadableOutputError(
            f"{what} is a {name} that converts to a traced array tapegrad cannot find among its "
            "attributes: return that array itself."
        )
    stand_in = _stand_in(obj, shape)
    return (stand_in, None) if stand_in is obj else (stand_in, lambda _: obj)


def _read_leaf(obj: Any, what: str, strict: bool, depth: int = 0) -> Tuple[Any, Optional[Rebuild]]:
    """``(inner, rebuild)``: what the sweep differentiates for one output leaf, and how to wrap a value back."""
    if isinstance(obj, np.ndarray):
        if obj.dtype == object and any(type(v) is Tracer for v in obj.flat):
            raise UnreadableOutputError(
                f"{what} is an ndarray of dtype object that holds traced values: tapegrad cannot "
                "differentiate through it. Build the array with np.stack / np.concatenate instead."
            )
        return obj, None
    if type(obj) in _SIMPLE or isinstance(obj, (np.generic, numbers.Number)):
        return obj, None
    if depth > MAX_DEPTH:
        raise UnreadableOutputError(f"{what} wraps arrays more than {MAX_DEPTH} levels deep ({_qualname(obj)})")
    if _dataset(obj):
        return _read_dataset(obj, what, strict, depth)
    known = _known(obj)
    if known is not None:
        inner, wrap, label = known
        if np.shape(inner) != tuple(obj.shape):
            raise UnreadableOutputError(
                f"{what} is a {_qualname(obj)} of shape {tuple(obj.shape)} whose {label} has shape "
                f"{np.shape(inner)}"
            )
        inner, rebuild_inner = _read_leaf(inner, what, strict, depth + 1)
        if rebuild_inner is None:
            return inner, wrap
        return inner, lambda new: wrap(rebuild_inner(new))
    if not strict:
        return obj, None  # aux values and cotangents: only the known wrappers are read
    return _read_generic(obj, what)


def _read_dataset(ds: Any, what: str, strict: bool, depth: int) -> Tuple[Any, Optional[Rebuild]]:
    """An xarray Dataset: the dict of its data variables, each read as a DataArray."""
    names = list(ds.data_vars)
    read = {name: _read_leaf(ds[name], f"{what} (data variable {name!r})", strict, depth + 1) for name in names}

    def rebuild(new: dict) -> Any:
        return ds.assign({name: rb(new[name]) if rb is not None else new[name] for name, (_, rb) in read.items()})

    return {name: inner for name, (inner, _) in read.items()}, rebuild


# ------------------------------------------------------------------ entry points
def read_outputs(tree: Any, what: str = "the function's output", strict: bool = True) -> Tuple[Any, Optional[Rebuild]]:
    """What the sweep differentiates for ``tree``, and how to wrap its values back.

    Parameters
    ----------
    tree : object
        What a function returned, or a target: an array, a wrapper of one, or a
        list/tuple/dict/named tuple of them.
    what : str
        How messages name ``tree`` ("the function's output", "the target").
    strict : bool, default True
        Refuse objects that are not arrays (:class:`UnreadableOutputError`).  With
        ``False`` (``aux`` values, cotangents) they stay as they are, and only
        xarray and pint objects are read.

    Returns
    -------
    plain : object
        ``tree`` with each wrapper replaced by the array it wraps (a ``Dataset``
        by a dict of its data variables); ``tree`` itself when nothing was wrapped.
    rebuild : callable or None
        ``rebuild(values)`` puts the wrappers back around ``values``, a structure
        like ``plain`` (its tracers lowered to plain values); ``None`` when
        nothing was wrapped.

    Raises
    ------
    UnreadableOutputError
        A leaf is not a number, an array or a wrapper of one, or is a duck array
        that holds several traced arrays of its shape, or only ones of another
        shape (a ``TypeError``; the message names the type).
    """
    t = type(tree)
    if t is Tracer or (t is np.ndarray and tree.dtype != object):  # the common case: nothing to look into
        return tree, None
    leaves, structure = flatten(tree)
    plain: List[Any] = []
    rebuilders: List[Optional[Rebuild]] = []
    changed = False
    for leaf in leaves:
        if type(leaf) in _SIMPLE:
            plain.append(leaf)
            rebuilders.append(None)
            continue
        try:
            inner, rebuild = _read_leaf(leaf, what, strict)
        except UnreadableOutputError:
            if strict:
                raise
            inner, rebuild = leaf, None
        changed = changed or inner is not leaf
        plain.append(inner)
        rebuilders.append(rebuild)
    if not changed:
        return tree, None
    pieces = [flatten(p) for p in plain]  # a Dataset's dict is several leaves of the plain tree
    counts = [len(leaves_) for leaves_, _ in pieces]

    def rebuild_all(values: Any) -> Any:
        flat, _ = flatten(values)
        out, at = [], 0
        for rb, n, (_, inner_structure) in zip(rebuilders, counts, pieces):
            piece = unflatten(inner_structure, flat[at : at + n])
            at += n
            out.append(piece if rb is None else rb(piece))
        return unflatten(structure, out)

    return unflatten(structure, plain), rebuild_all


def read_target(target: Any, what: str) -> Any:
    """One target array for a request that takes one (a Jacobian): a Dataset, which holds several, is refused."""
    plain, _ = read_outputs(target, what)
    if _dataset(target):
        raise UnreadableOutputError(
            f"{what} is an xarray Dataset, which holds one output per data variable "
            f"({', '.join(map(repr, plain))}); this request takes one array: ask for each "
            "variable (ds['name']) in turn"
        )
    return plain
