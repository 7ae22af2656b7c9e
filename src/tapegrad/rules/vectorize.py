"""``np.vectorize`` over tracers: the Python function called element by element, traced.

NumPy's ``vectorize`` converts its arguments to object arrays and loops over their
elements in ``np.frompyfunc``, which a tracer cannot enter (its elements would be
plain Python floats: the gradient would be lost, so tapegrad refuses the cast).
While a tape records, ``vectorize._vectorize_call`` is routed here through SciPy's
door (:mod:`tapegrad.interception`, which swaps Python functions of NumPy as well):
the arguments are broadcast, the function is called once per element (per loop
index, with a ``signature``) on 0-d tracers and plain Python scalars, as NumPy
calls it (also when only the function closes over
tracers), and the results are stacked into traced arrays of NumPy's output dtypes
(``otypes``, else those of the first call's results, as NumPy's).  Each element's
calls are recorded, so the derivative is exact at every order, branches on an
element's value included.  The cost is one traced call of the function per
element, like NumPy's own loop.  Size-0 inputs get NumPy's own answer.
"""

from __future__ import annotations

import math
from typing import Any, List

import numpy as np

from ..registry import ORIGINALS, defcomposite, intercepted
from ..tracer import Tracer

__all__: list = []


def _strip(value: Any) -> Any:
    while type(value) is Tracer:
        value = value._value
    return value


def _element(flat: Any, i: int) -> Any:
    """Element ``i``: a 0-d tracer, or the Python scalar NumPy's object loop would pass."""
    value = flat[i]
    # An object array's element is the object itself (a distribution passed as ``self``).
    return value.item() if isinstance(value, np.generic) else value


def _stacked(results: List[Any], otype: Any, shape: tuple) -> Any:
    """One output's results as an array of ``shape`` (plus a core shape) with NumPy's dtype."""
    traced = [r if type(r) is Tracer else np.asarray(r) for r in results]
    dtype = np.dtype(otype) if otype is not None else np.result_type(traced[0])
    if not any(type(r) is Tracer for r in traced):
        out = np.asarray(traced, dtype=dtype)
    else:
        out = np.stack([r.astype(dtype) if r.dtype != dtype else r for r in traced])
    return np.reshape(out, shape + np.shape(out)[1:])


def _outputs(self: Any, results: List[Any], shape: tuple) -> Any:
    single = not isinstance(results[0], tuple)
    columns = [results] if single else [list(c) for c in zip(*results)]
    otypes = self.otypes if self.otypes else [None] * len(columns)
    if len(otypes) != len(columns):
        raise ValueError(f"np.vectorize: {len(columns)} outputs, but otypes names {len(otypes)}")
    outs = tuple(_stacked(c, t, shape) for c, t in zip(columns, otypes))
    return outs[0] if single else outs


def _vectorize_call(self: Any, func: Any, args: Any) -> Any:
    if not args:
        return func()
    if self.signature is not None:
        return _with_signature(self, func, list(args))
    values = [a if type(a) is Tracer else np.asarray(a) for a in args]
    shape = np.broadcast_shapes(*(np.shape(v) for v in values))
    n = math.prod(shape)
    if n == 0:  # nothing to call the function on: NumPy's answer (it needs otypes)
        plain = ORIGINALS[np.vectorize._vectorize_call](self, func, [np.asarray(_strip(v)) for v in values])
        return plain
    flats = [np.reshape(np.broadcast_to(v, shape), (n,)) for v in values]
    results = [func(*(_element(f, i) for f in flats)) for i in range(n)]
    return _outputs(self, results, shape)


def _with_signature(self: Any, func: Any, args: list) -> Any:
    input_core, _ = self._in_and_out_core_dims
    if len(args) != len(input_core):
        raise TypeError(f"wrong number of positional arguments: expected {len(input_core)}, got {len(args)}")
    values = [a if type(a) is Tracer else np.asarray(a) for a in args]
    cores = [np.shape(v)[np.ndim(v) - len(dims):] if dims else () for v, dims in zip(values, input_core)]
    loops = [np.shape(v)[: np.ndim(v) - len(dims)] for v, dims in zip(values, input_core)]
    shape = np.broadcast_shapes(*loops)
    n = math.prod(shape)
    if n == 0:  # nothing to call the function on: NumPy's answer
        return ORIGINALS[np.vectorize._vectorize_call](self, func, [np.asarray(_strip(v)) for v in values])
    flats = [np.reshape(np.broadcast_to(v, shape + core), (n,) + core) for v, core in zip(values, cores)]
    results = [func(*(f[i] for f in flats)) for i in range(n)]
    return _outputs(self, results, shape)


# route_all: the function may close over tracers while its arguments are plain.
defcomposite(
    intercepted(np.vectorize._vectorize_call, route_all=True),
    _vectorize_call,
    note="the function traced once per element (per loop index with a signature)",
)
