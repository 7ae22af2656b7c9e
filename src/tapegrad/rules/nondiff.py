"""Functions whose outputs carry no gradient, and the set/histogram functions.

Constants run on the raw values and return plain arrays: comparisons,
rounding, sign tests, arg-reductions, searches, shape and dtype queries and
constructors shaped like a tracer.  Their derivative is zero wherever it
exists, so treating the output as a constant is exact, not an approximation.

Some functions in this family return *values* of their input, which do carry
a gradient, next to integer outputs that do not; they are composites whose
integer outputs are plain arrays:

* ``unique`` (and ``unique_values``/``unique_counts``/``unique_inverse``/
  ``unique_all``): each unique value is a function of the entries equal to it;
  its cotangent is split equally among them (tapegrad's tie convention),
  while the value itself is exactly NumPy's.  Repeated non-finite values
  (``inf``, ``nan``) give their cotangent to the first occurrence.
* ``bincount(x, weights)``: differentiable in ``weights`` (a scatter-add).
* ``histogram_bin_edges``/``histogram``: computed edges move with ``min(a)``
  and ``max(a)`` (or a traced ``range``/``bins``); counts are constant, but a
  traced ``weights`` and ``density=True`` (through the bin widths) carry
  gradients.
"""

from __future__ import annotations

import numpy as np

from ..dispatch import strip, strip_all
from ..registry import defcomposite, defconstant, defswitch
from ..tracer import Tracer, unwrap_above
from .indexing import untake

CONSTANT_UFUNCS = [
    np.sign, np.floor, np.ceil, np.trunc, np.rint, np.floor_divide, np.signbit,
    np.isnan, np.isinf, np.isfinite, np.equal, np.not_equal, np.less, np.less_equal,
    np.greater, np.greater_equal, np.logical_and, np.logical_or, np.logical_xor,
    np.logical_not, np.spacing,
]

CONSTANT_FUNCTIONS = [
    np.shape, np.ndim, np.size, np.result_type, np.iscomplexobj, np.isrealobj,
    np.argmax, np.argmin, np.argsort, np.nonzero, np.flatnonzero, np.argwhere,
    np.count_nonzero, np.isclose, np.allclose, np.array_equal, np.any, np.all,
    np.round, np.around, np.fix, np.isnan, np.isfinite,
]

#: Searches, set membership, dtype/memory queries and element tests.
CONSTANT_QUERIES = [
    np.searchsorted, np.digitize, np.lexsort, np.isin, np.nanargmax, np.nanargmin,
    np.array_equiv, np.can_cast, np.min_scalar_type, np.shares_memory, np.may_share_memory,
    np.iscomplex, np.isreal, np.isposinf, np.isneginf, np.common_type,
    np.ravel_multi_index, np.unravel_index, np.diag_indices_from, np.tril_indices_from,
    np.triu_indices_from, np.packbits, np.unpackbits,
    np.is_busday, np.busday_count, np.busday_offset, np.datetime_as_string,
    # Text renderings of the raw values (printing a tracer is harmless).
    np.array2string, np.array_repr, np.array_str,
]

defconstant(*CONSTANT_UFUNCS)
defconstant(*CONSTANT_FUNCTIONS)
defconstant(*CONSTANT_QUERIES)
# Where their (piecewise-constant) value changes, for ODE rules (see Rule.switch): a sign or
# an order changes with a difference's sign, an integer part where sin(pi x) changes sign.
defswitch(lambda x, y, *rest, **kwargs: x - y, np.less, np.less_equal, np.greater, np.greater_equal)
defswitch(lambda x, *rest, **kwargs: x, np.sign)
defswitch(lambda x, *rest, **kwargs: np.sin(np.pi * x), np.floor, np.ceil, np.trunc, np.fix)
defswitch(lambda x, *rest, **kwargs: np.cos(np.pi * x), np.rint)
defswitch(lambda a, decimals=0, *rest, **kwargs: np.cos(np.pi * (a * 10.0**decimals)), np.round, np.around)
defswitch(lambda x, y, *rest, **kwargs: np.sin(np.pi * (x / y)), np.floor_divide)
# Names a supported NumPy has and a newer one removed: registered only where present.
# np.in1d: isin's old spelling, deprecated in NumPy 2.0, removed in 2.4.
if hasattr(np, "in1d"):
    defconstant(np.in1d)


# ------------------------------------------------------------------ unique
def _group_values(x, axis, index, inverse, counts):
    """The unique values of ``x`` (as ``x[index]`` along ``axis``), differentiable.

    The value is exactly ``x[index]``; the derivative is the mean over each group
    of equal entries: ``first + sum_group (x_i - first) / count`` adds an exact
    zero in the forward pass and spreads the cotangent equally in the backward one.
    """
    if axis is None:
        x, axis = np.ravel(x), 0
    moved = np.moveaxis(x, axis, 0)
    inverse = np.ravel(inverse)
    # Non-finite duplicates would give inf - inf = nan: they contribute nothing instead
    # (the first occurrence keeps the whole cotangent).
    finite = np.where(np.isfinite(np.moveaxis(strip(x), axis, 0)), moved, 0)
    first = moved[index]
    diff = finite - finite[index][inverse]
    # In x's dtype: integer counts would promote float32 values to float64.
    share = np.reshape(counts[inverse], (-1,) + (1,) * (np.ndim(moved) - 1)).astype(unwrap_above(x, 0).dtype)
    spread = untake(diff / share, (inverse,), np.shape(first))
    return np.moveaxis(first + spread, 0, axis)


def _unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *, equal_nan=True, sorted=True):
    raw = strip(ar)
    # ``sorted`` is new in NumPy 2.3; an older NumPy never passes it (its unique refuses it).
    unsorted = {} if sorted else {"sorted": False}
    if raw.dtype.kind not in "fc":  # integers and booleans carry no derivative: NumPy's own answer
        return np.unique(raw, return_index, return_inverse, return_counts, axis=axis, equal_nan=equal_nan, **unsorted)
    values, index, inverse, counts = np.unique(
        raw, return_index=True, return_inverse=True, return_counts=True, axis=axis, equal_nan=equal_nan, **unsorted
    )
    if np.ndim(raw) == 0 and axis is None:
        ar = np.reshape(ar, (1,))
    out = [_group_values(ar, axis, index, inverse, counts)]
    out += [v for flag, v in ((return_index, index), (return_inverse, inverse), (return_counts, counts)) if flag]
    return out[0] if len(out) == 1 else tuple(out)


def _array_api_unique(fun, fields):
    """``unique_values``/``unique_counts``/``unique_inverse``/``unique_all`` (``equal_nan=False``)."""

    def impl(x):
        raw = strip(x)
        result = fun(raw)
        if raw.dtype.kind not in "fc":  # integers and booleans carry no derivative: NumPy's own answer
            return result
        values, index, inverse, counts = np.unique(
            raw, return_index=True, return_inverse=True, return_counts=True, equal_nan=False
        )
        numpy_values = result if fields is None else result[0]
        order = np.arange(values.size)
        if not np.array_equal(values, numpy_values, equal_nan=True):
            # Hash-based (unsorted) result: find each value's group in the sorted one.
            order = np.searchsorted(values, numpy_values)
            if np.unique(order).size != order.size or not np.array_equal(values[order], numpy_values):
                raise NotImplementedError(f"{fun.__name__} of this input is not supported while tracing")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        traced = _group_values(np.ravel(x), None, index[order], rank[np.ravel(inverse)], counts[order])
        if fields is None:
            return traced
        return type(result)(traced, *result[1:])

    return impl


_UNIQUE_NOTE = "cotangent of a unique value split equally among its equal entries (non-finite: first one)"
defcomposite(np.unique, _unique, note=_UNIQUE_NOTE)
defcomposite(np.unique_values, _array_api_unique(np.unique_values, None), note=_UNIQUE_NOTE)
for _fun in (np.unique_counts, np.unique_inverse, np.unique_all):
    defcomposite(_fun, _array_api_unique(_fun, True), note=_UNIQUE_NOTE)


# ------------------------------------------------------------------ counting
def _bincount(x, weights=None, minlength=0):
    if weights is None or type(weights) is not Tracer:
        return np.bincount(strip(x), weights=weights, minlength=minlength)
    counts = np.bincount(strip(x), minlength=minlength)  # NumPy's own checks of x
    if np.shape(weights) != np.shape(strip(x)):
        raise ValueError("The weights and list don't have the same length.")
    total = untake(weights, (np.asarray(strip(x)),), (counts.size,))
    return total if np.result_type(total) == np.float64 else total.astype(np.float64)


defcomposite(np.bincount, _bincount, note="differentiable in weights (a scatter-add)")


def _bin_edges(a, bins, range, weights):
    raw_edges = np.histogram_bin_edges(strip(a), strip(bins), strip_all(range), strip(weights))
    if np.ndim(bins) == 1:
        return bins if type(bins) is Tracer else raw_edges
    if range is not None:
        first, last = range
    elif np.size(a) == 0:
        return raw_edges
    else:
        first, last = np.min(a), np.max(a)
    if strip(first) == strip(last):
        first, last = first - 0.5, last + 0.5
    if type(first) is not Tracer and type(last) is not Tracer:
        return raw_edges
    return np.linspace(first, last, np.size(raw_edges), endpoint=True, dtype=raw_edges.dtype)


def _histogram_bin_edges(a, bins=10, range=None, weights=None):
    return _bin_edges(a, bins, range, weights)


def _histogram(a, bins=10, range=None, density=None, weights=None):
    edges = _bin_edges(a, bins, range, weights)
    raw_edges = strip(edges)
    if type(weights) is Tracer:
        values = np.ravel(strip(a))
        n = np.size(raw_edges) - 1
        # Bin i holds edges[i] <= v < edges[i+1]; the last bin also holds its right edge.
        which = np.searchsorted(raw_edges, values, side="right") - 1
        which = np.where(values == raw_edges[-1], n - 1, which)
        keep = (values >= raw_edges[0]) & (values <= raw_edges[-1])
        hist = untake(np.ravel(weights)[keep], (which[keep],), (n,))
    else:
        hist = np.histogram(strip(a), raw_edges, None, False, strip(weights))[0]
    if density:
        widths = edges[1:] - edges[:-1]
        return hist / widths / np.sum(hist), edges
    return hist, edges


defcomposite(np.histogram_bin_edges, _histogram_bin_edges, note="edges follow min/max of a (or a traced range)")
defcomposite(np.histogram, _histogram, note="counts constant; weights and density differentiable")

# Constants, but traced ones: code written for ndarrays fills these in place
# (``out = np.zeros_like(x); out[i] = f(x[i])``), and as tracers of x's tape those
# writes are recorded instead of failing on a plain array.
defconstant(
    np.zeros_like, np.ones_like, np.empty_like,
    note="a traced constant: in-place writes into it are recorded",
    traced=True,
)


def _full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, **kwargs):
    # A traced constant filled by a recorded write: a traced fill_value keeps its gradient.
    out = np.zeros_like(a, dtype=dtype, order=order, subok=subok, shape=shape, **kwargs)
    out[...] = fill_value
    return out


defcomposite(np.full_like, _full_like, note="a traced constant, or the traced fill_value broadcast")
