"""Derivatives of shape manipulation and array assembly.

Cotangents carry leading batch axes, so every rule maps array axes from the
end (a transpose permutation is applied to the trailing axes only).

Three kinds of rule live here:

* a few primitives with a direct adjoint (reshape, transpose, concatenate,
  split, flip, roll, ...);
* composites that assemble NumPy's Python-level helpers (``hstack``,
  ``atleast_2d``, ``block``, ``tile``, ``meshgrid``, ...) from those;
* composites built on :func:`~tapegrad.rules.indexing.gather` for functions
  that only move, repeat or drop elements (``diagonal``, ``insert``, ``pad``
  in its copying modes, ...): NumPy's own function is run on integer tags, so
  the forward follows NumPy's semantics exactly and the derivative is a
  gather/scatter pair.

Like every traced value, the results are new arrays: where NumPy would return
a view (``reshape``, ``transpose``, ``diagonal``, ...) writing into the result
does not write into the input.  Only views made by basic indexing are
tracked (see :mod:`tapegrad.tracer`).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ..dispatch import strip
from ..errors import GradientDroppedError, UnsupportedFunctionError
from ..lazy import is_dask
from ..registry import PRIMITIVE, RULES, defcomposite, defvjp, intercepted
from ..tracer import Tracer
from ..views import WHOLE, link_view
from ._util import batch_ndim, negative_axes
from .indexing import gather, getitem


# ---------------------------------------------------------------- helpers
def _as_array(a: Any) -> Any:
    """Tracers stay tracers; anything else becomes an ndarray (so ``.dtype`` works)."""
    return a if type(a) is Tracer else np.asarray(a)


def _ordered_axes(axis: Any, ndim: int) -> Any:
    """Negative form of an int or a sequence of axes, keeping the given order."""
    if isinstance(axis, (tuple, list)):
        return tuple(operator.index(a) % ndim - ndim for a in axis)
    return operator.index(axis) % ndim - ndim


def _reverse_trailing(g: Any, nd: int) -> Any:
    """Reverse the order of the last ``nd`` axes of ``g``."""
    nb = np.ndim(g) - nd
    return np.transpose(g, tuple(range(nb)) + tuple(range(np.ndim(g) - 1, nb - 1, -1)))


def _reshape_trailing(g: Any, nb: int, shape: tuple, order: str) -> Any:
    """Reshape the axes of ``g`` behind ``nb`` batch axes to ``shape`` in C or F order."""
    batch = np.shape(g)[:nb]
    if order == "C":
        return np.reshape(g, batch + tuple(shape))
    # reshape(a, s, order="F") == reshape(a.T, s[::-1]).T, with .T on the trailing axes only.
    g = np.reshape(_reverse_trailing(g, np.ndim(g) - nb), batch + tuple(shape)[::-1])
    return _reverse_trailing(g, len(shape))


def _resolve_order(x: Any, order: Any) -> str:
    """``"C"``, ``"F"`` or ``"K"``: the order in which NumPy actually read ``x``."""
    order = "C" if order is None else str(order).upper()
    if order == "A":
        flags = getattr(strip(x), "flags", None)
        return "F" if flags is not None and flags.f_contiguous and not flags.c_contiguous else "C"
    return order


# ---------------------------------------------------------------- reshaping
def _reshape_vjp(g, ans, x, shape=None, order="C", **kwargs):
    return _reshape_trailing(g, batch_ndim(g, ans), np.shape(x), _resolve_order(x, order))


def _same_size_vjp(g, ans, x, *args, **kwargs):
    """Adjoint of a call that keeps the elements in C order (squeeze, expand_dims)."""
    return _reshape_trailing(g, batch_ndim(g, ans), np.shape(x), "C")


def _ravel_vjp(g, ans, x, order="C"):
    order = _resolve_order(x, order)
    nb = batch_ndim(g, ans)
    if order != "K":
        return _reshape_trailing(g, nb, np.shape(x), order)
    # Memory order: ravel an index array laid out like x to learn which element came from where.
    positions = np.empty_like(strip(x), dtype=np.intp)
    positions[...] = np.arange(positions.size).reshape(positions.shape)
    source_of = np.argsort(np.ravel(positions, order="K"))
    return _reshape_trailing(g[..., source_of], nb, np.shape(x), "C")


defvjp(np.reshape, _reshape_vjp, sparse=True)
defvjp(np.ravel, _ravel_vjp, sparse=True)
defvjp(np.squeeze, _same_size_vjp, needs=((),), sparse=True)
defvjp(np.expand_dims, _same_size_vjp, needs=((),), sparse=True)


def _atleast(shape_of):
    def impl(*arys):
        out = tuple(np.reshape(a, shape_of(np.shape(a))) for a in arys)
        return out[0] if len(out) == 1 else out

    return impl


def _shape_1d(s):
    return s if len(s) >= 1 else (1,)


def _shape_2d(s):
    return s if len(s) >= 2 else ((1, 1) if not s else (1,) + s)


def _shape_3d(s):
    if len(s) >= 3:
        return s
    return {0: (1, 1, 1), 1: (1,) + s + (1,), 2: s + (1,)}[len(s)]


defcomposite(np.atleast_1d, _atleast(_shape_1d))
defcomposite(np.atleast_2d, _atleast(_shape_2d))
defcomposite(np.atleast_3d, _atleast(_shape_3d))


# ---------------------------------------------------------------- axes
def _transpose_vjp(g, ans, x, axes=None):
    nd = np.ndim(x)
    nb = np.ndim(g) - nd
    if axes is None:
        perm = list(range(nd))[::-1]
    else:
        perm = [a % nd for a in axes]
    inverse = np.argsort(perm)
    return np.transpose(g, tuple(range(nb)) + tuple(nb + int(i) for i in inverse))


def _swapaxes_vjp(g, ans, x, axis1, axis2):
    nd = np.ndim(x)
    return np.swapaxes(g, (axis1 % nd) - nd, (axis2 % nd) - nd)


def _moveaxis_vjp(g, ans, x, source, destination):
    nd = np.ndim(x)
    src = [s % nd - nd for s in np.atleast_1d(source)]
    dst = [d % nd - nd for d in np.atleast_1d(destination)]
    return np.moveaxis(g, dst, src)


defvjp(np.transpose, _transpose_vjp, needs=((),), sparse=True)  # np.permute_dims is the same function object
defvjp(np.swapaxes, _swapaxes_vjp, needs=((),), sparse=True)
defvjp(np.moveaxis, _moveaxis_vjp, needs=((),), sparse=True)


def _rollaxis(a, axis, start=0):
    nd = np.ndim(a)
    axis = operator.index(axis) % nd if nd else 0
    start = operator.index(start)
    if not -nd <= start <= nd:
        raise np.exceptions.AxisError(f"start arg requires {-nd} <= start < {nd + 1} but {start} was passed in")
    start = start + nd if start < 0 else start
    if axis < start:
        start -= 1
    # NumPy returns a view even when no axis moves (Xr = np.rollaxis(X, 0); Xr -= m writes
    # into X, as scikit-learn's preprocessing.scale does): moveaxis keeps that view.
    return np.moveaxis(a, axis, start) if nd else np.copy(a)


defcomposite(np.rollaxis, _rollaxis)

# ---------------------------------------------------------------- broadcasting and copies
# Broadcasting is undone by the backward driver, which sums the broadcast axes.
defvjp(np.broadcast_to, lambda g, ans, x, shape, subok=False: g, needs=((),), sparse=True)
defvjp(np.copy, lambda g, ans, x, *args, **kwargs: g, needs=((),), sparse=True)


def _copy(a, *args, **kwargs):
    # Dask has no np.copy (it would compute): its arrays are immutable, so a.copy() is lazy.
    return a.copy() if is_dask(a) else np.copy(a, *args, **kwargs)


RULES[np.copy].fun = _copy


def _asarray(a, dtype=None, order=None, *, like=None, **kwargs):
    """``np.asarray(tracer, like=...)``: the tracer itself (a cast when ``dtype`` asks)."""
    if type(a) is not Tracer:  # np.asarray(0.0, like=tracer), as Dask's pad makes its fill value: a constant
        return np.asarray(a, dtype=dtype, order=order, **kwargs)
    return a if dtype is None else a.astype(dtype)


defcomposite(np.asarray, _asarray)


def _broadcast_arrays(*args, subok=False):
    shape = np.broadcast_shapes(*(np.shape(a) for a in args))
    return tuple(np.broadcast_to(a, shape) for a in args)


defcomposite(np.broadcast_arrays, _broadcast_arrays)


def _meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    if indexing not in ("xy", "ij"):
        raise ValueError("Valid values for `indexing` are 'xy' and 'ij'.")
    nd = len(xi)
    places = list(range(nd))
    if indexing == "xy" and nd > 1:
        places[0], places[1] = 1, 0  # Cartesian: the first input runs along columns
    out = []
    for x, place in zip(xi, places):
        shape = [1] * nd
        shape[place] = -1
        out.append(np.reshape(x, tuple(shape)))
    if not sparse and out:
        out = list(np.broadcast_arrays(*out))
    if copy:
        out = [np.copy(o) for o in out]
    return tuple(out)


defcomposite(np.meshgrid, _meshgrid)


# ---------------------------------------------------------------- joining
def _concatenate_vjp(g, ans, arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    if axis is None:
        g = np.reshape(g, np.shape(g)[: batch_ndim(g, ans)] + (-1,))
        axis = -1
        sizes = [int(np.size(a)) for a in arrays]
        shapes = [np.shape(a) for a in arrays]
    else:
        nd = np.ndim(ans)
        axis = axis % nd - nd
        sizes = [np.shape(a)[axis] for a in arrays]
        shapes = None
    # Basic slices rather than np.split: Dask has no np.split (it would compute g).
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    after = (slice(None),) * (-axis - 1)
    pieces = [g[(Ellipsis, slice(int(lo), int(hi))) + after] for lo, hi in zip(bounds[:-1], bounds[1:])]
    if shapes is not None:
        nb = np.ndim(g) - 1
        pieces = [np.reshape(p, np.shape(p)[:nb] + s) for p, s in zip(pieces, shapes)]
    return pieces


def _stack_vjp(g, ans, arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    nd = np.ndim(ans)
    axis = axis % nd - nd
    trailing = (slice(None),) * (-axis - 1)
    return [g[(Ellipsis, i) + trailing] for i in range(len(arrays))]


defvjp(np.concatenate, _concatenate_vjp, sparse=True)  # np.concat is the same function object
defvjp(np.stack, _stack_vjp, sparse=True)


def _joiner(promote, axis_of):
    """A ``*stack`` function: promote every input, then concatenate along ``axis_of(first)``."""

    def impl(tup, **kwargs):
        arrs = [promote(a) for a in tup]
        if not arrs:
            raise ValueError("need at least one array to concatenate")
        return np.concatenate(arrs, axis=axis_of(arrs[0]), **kwargs)

    return impl


def _column(a):
    return np.reshape(a, (-1, 1)) if np.ndim(a) < 2 else a


_promote_1d, _promote_2d, _promote_3d = (_atleast(f) for f in (_shape_1d, _shape_2d, _shape_3d))
defcomposite(np.hstack, _joiner(_promote_1d, lambda a: 0 if np.ndim(a) == 1 else 1))
defcomposite(np.vstack, _joiner(_promote_2d, lambda a: 0))
defcomposite(np.dstack, _joiner(_promote_3d, lambda a: 2))
defcomposite(np.column_stack, _joiner(_column, lambda a: 1))
if hasattr(np, "row_stack"):  # deprecated alias of vstack
    defcomposite(np.row_stack, _joiner(_promote_2d, lambda a: 0))


def _block_depth(a: Any) -> int:
    if type(a) is tuple:
        raise TypeError("np.block does not accept tuples: use lists for nesting")
    if type(a) is not list:
        return 0
    if not a:
        raise ValueError("List at np.block cannot be empty")
    depths = {_block_depth(e) for e in a}
    if len(depths) != 1:
        raise ValueError("List depths are mismatched in np.block")
    return depths.pop() + 1


def _block_ndim(a: Any) -> int:
    return max(_block_ndim(e) for e in a) if type(a) is list else np.ndim(a)


def _block(arrays):
    depth = _block_depth(arrays)
    nd = max(depth, _block_ndim(arrays))

    def assemble(a, level):
        if level == depth:
            return np.reshape(a, (1,) * (nd - np.ndim(a)) + np.shape(a))
        # The innermost lists join along the last axis, their parents along the one before...
        return np.concatenate([assemble(e, level + 1) for e in a], axis=level - depth)

    return assemble(arrays, 0)


defcomposite(np.block, _block)


def _append(arr, values, axis=None):
    # NumPy's first step, looked up at call time: a list holding tracers becomes one traced
    # array while a tape records (tapegrad.constructors).
    arr = np.asanyarray(arr)
    if axis is None:
        if np.ndim(arr) != 1:
            arr = np.ravel(arr)
        return np.concatenate((arr, np.ravel(values)), axis=0)
    return np.concatenate((arr, values), axis=axis)


defcomposite(np.append, _append)


# ---------------------------------------------------------------- splitting
def _split_vjp(g, ans, x, indices_or_sections, axis=0):
    return np.concatenate(g, axis=axis % np.ndim(x) - np.ndim(x))


defvjp(np.split, _split_vjp, sparse=True)
defvjp(np.array_split, _split_vjp, sparse=True)


def _axis_splitter(min_ndim, axis_of):
    def impl(ary, indices_or_sections):
        if np.ndim(ary) < min_ndim:
            raise ValueError(f"this split only works on arrays of {min_ndim} or more dimensions")
        return np.split(ary, indices_or_sections, axis=axis_of(ary))

    return impl


defcomposite(np.hsplit, _axis_splitter(1, lambda a: 1 if np.ndim(a) > 1 else 0))
defcomposite(np.vsplit, _axis_splitter(2, lambda a: 0))
defcomposite(np.dsplit, _axis_splitter(3, lambda a: 2))


def _unstack(x, /, *, axis=0):
    if np.ndim(x) == 0:
        raise ValueError("Input array must be at least 1-d.")
    ax = operator.index(axis) % np.ndim(x)
    lead = (slice(None),) * ax
    # x[...] (Tracer.__getitem__), not the getitem primitive: NumPy's pieces are views of x,
    # and the tracer's indexing links them, so a write through one is seen (or refused).
    return tuple(x[lead + (i,)] for i in range(np.shape(x)[ax]))


defcomposite(np.unstack, _unstack)


# ---------------------------------------------------------------- repeating and reordering
def _tile(A, reps):
    reps = tuple(reps) if np.ndim(reps) else (operator.index(reps),)
    shape = np.shape(A)
    d = max(len(reps), len(shape))
    shape = (1,) * (d - len(shape)) + shape
    reps = (1,) * (d - len(reps)) + reps
    # Interleave a repeat axis before every axis, broadcast along it, then merge the pairs.
    spread = np.reshape(A, sum(((1, s) for s in shape), ()))
    spread = np.broadcast_to(spread, sum(((r, s) for r, s in zip(reps, shape)), ()))
    return np.reshape(spread, tuple(r * s for r, s in zip(reps, shape)))


defcomposite(np.tile, _tile)
defcomposite(np.repeat, lambda a, repeats, axis=None: gather(lambda t: np.repeat(t, repeats, axis), a))


def _sliding_window_view(x, window_shape, axis=None, *, subok=False, writeable=False):
    # NumPy's result is a view: a copy of the same elements is the same values, but a write
    # into it would not reach x (NumPy only allows one with writeable=True).
    if writeable:
        raise GradientDroppedError(
            "numpy.lib.stride_tricks.sliding_window_view(x, ..., writeable=True) on a tracer: its windows "
            "share x's memory, and a write through them would not reach x's gradient. Use writeable=False "
            "(the default) and build new values with np.where or np.concatenate instead of writing."
        )
    view = np.lib.stride_tricks.sliding_window_view
    return gather(lambda t: view(t, window_shape, axis=axis), x)


# xarray's rolling windows (DataArray.rolling(...).construct / .mean) use it.
defcomposite(np.lib.stride_tricks.sliding_window_view, _sliding_window_view)


def _as_strided(x, shape=None, strides=None, subok=False, writeable=True):
    """``as_strided`` on a tracer: the elements its strides address, gathered (older NumPy code's windows).

    The byte strides address the traced value's memory, whose layout is the one plain
    NumPy would have; every element they reach must be one of ``x``'s own (NumPy would
    read whatever memory lies there), else a clear error.  The result is a copy that
    stands for a view: a write into it is refused (NumPy would write into ``x``).
    """
    x = _as_array(x)
    raw = np.asarray(strip(x))
    shape = raw.shape if shape is None else tuple(int(n) for n in shape)
    strides = raw.strides if strides is None else tuple(int(b) for b in strides)
    if len(strides) != len(shape):
        raise ValueError("mismatch in length of strides and shape")

    def byte_offsets(dims: tuple, steps: tuple) -> np.ndarray:
        grid = np.indices(dims, dtype=np.intp).reshape(len(dims), -1)
        return np.asarray(steps, dtype=np.intp) @ grid if dims else np.zeros(1, dtype=np.intp)

    own = byte_offsets(raw.shape, raw.strides)  # of x's elements, in C order
    wanted = byte_offsets(shape, strides)
    order = np.argsort(own, kind="stable")
    at = np.clip(np.searchsorted(own[order], wanted), 0, max(own.size - 1, 0))
    if own.size == 0 or not np.array_equal(own[order][at], wanted):
        if wanted.size:
            raise ValueError(
                "numpy.lib.stride_tricks.as_strided on a tracer: these shape and strides reach memory "
                "outside the array's elements, which tapegrad cannot differentiate (NumPy reads whatever "
                "lies there). Use numpy.lib.stride_tricks.sliding_window_view for windows."
            )
    out = getitem(np.reshape(x, (-1,)), np.reshape(order[at], shape) if wanted.size else np.zeros(shape, np.intp))
    if type(out) is Tracer and type(x) is Tracer:
        link_view(x, out, WHOLE)  # a write through it would reach x in NumPy: refused (views.write)
    return out


defcomposite(intercepted(np.lib.stride_tricks.as_strided), _as_strided)

defvjp(np.flip, lambda g, ans, m, axis=None: np.flip(g, negative_axes(axis, np.ndim(m))), sparse=True)


def _fliplr(m):
    if np.ndim(m) < 2:
        raise ValueError("Input must be >= 2-d.")
    return np.flip(m, 1)


def _flipud(m):
    if np.ndim(m) < 1:
        raise ValueError("Input must be >= 1-d.")
    return np.flip(m, 0)


defcomposite(np.fliplr, _fliplr)
defcomposite(np.flipud, _flipud)


def _rot90(m, k=1, axes=(0, 1)):
    axes = tuple(axes)
    nd = np.ndim(m)
    if len(axes) != 2:
        raise ValueError("len(axes) must be 2.")
    if axes[0] == axes[1] or abs(axes[0] - axes[1]) == nd:
        raise ValueError("Axes must be different.")
    if not (-nd <= axes[0] < nd and -nd <= axes[1] < nd):
        raise ValueError(f"Axes={axes} out of range for array of ndim={nd}.")
    k %= 4
    if k == 0:
        return m[...]  # NumPy's m[:]: a view
    if k == 2:
        return np.flip(np.flip(m, axes[0]), axes[1])
    perm = list(range(nd))
    perm[axes[0] % nd], perm[axes[1] % nd] = perm[axes[1] % nd], perm[axes[0] % nd]
    if k == 1:
        return np.transpose(np.flip(m, axes[1]), perm)
    return np.flip(np.transpose(m, perm), axes[1])


defcomposite(np.rot90, _rot90)


def _roll_vjp(g, ans, a, shift, axis=None):
    back = np.negative(shift)
    if axis is None:
        nb = batch_ndim(g, ans)
        flat = np.reshape(g, np.shape(g)[:nb] + (-1,))
        return np.reshape(np.roll(flat, back, axis=-1), np.shape(g)[:nb] + np.shape(a))
    return np.roll(g, back, axis=_ordered_axes(axis, np.ndim(a)))


defvjp(np.roll, _roll_vjp, sparse=True)


# ---------------------------------------------------------------- padding
_PAD_COPY_MODES = ("edge", "reflect", "symmetric", "wrap")


def _pad(array, pad_width, mode="constant", **kwargs):
    x = _as_array(array)
    if mode == "constant":
        # One extra source holds the per-(axis, side) fill values; np.pad of the tags says where they go.
        fill = np.broadcast_to(_as_array(kwargs.get("constant_values", 0)), (np.ndim(x), 2))
        if x.dtype.kind in "fc" and fill.dtype != x.dtype:
            fill = fill.astype(x.dtype)
        return gather(lambda tx, tf: np.pad(tx, pad_width, "constant", constant_values=tf), x, fill)
    if mode in _PAD_COPY_MODES and kwargs.get("reflect_type", "even") == "even":
        return gather(lambda t: np.pad(t, pad_width, mode, **kwargs), x)
    if mode in _PAD_STATS and set(kwargs) <= {"stat_length"} and x.dtype.kind in "fc":
        return _pad_axis_by_axis(x, pad_width, lambda part, axis, widths, lengths: _stat_sides(
            part, axis, widths, lengths, _PAD_STATS[mode]), _pairs(kwargs.get("stat_length"), np.ndim(x)))
    if mode == "linear_ramp" and set(kwargs) <= {"end_values"} and x.dtype.kind in "fc":
        return _pad_axis_by_axis(x, pad_width, _ramp_sides, _pairs(kwargs.get("end_values", 0), np.ndim(x)))
    if mode in ("reflect", "symmetric") and set(kwargs) == {"reflect_type"} and kwargs["reflect_type"] == "odd":
        return _pad_odd(x, pad_width, mode)
    raise UnsupportedFunctionError(
        "numpy.pad",
        f"Supported: mode='constant' (traced constant_values too), {', '.join(_PAD_COPY_MODES)}, "
        f"reflect_type='odd' within one reflection, {', '.join(_PAD_STATS)} (stat_length too) and "
        f"linear_ramp on floating-point arrays; got mode={mode!r} {kwargs or ''}.",
    )


# NumPy pads the axes in order, each from the array already padded along the earlier ones;
# so do these modes, with traced statistics and ramps concatenated on both sides.
_PAD_STATS = {"maximum": np.max, "mean": np.mean, "median": np.median, "minimum": np.min}


def _pairs(value: Any, ndim: int) -> list:
    """Per axis ``(before, after)``, as NumPy reads ``stat_length`` and ``end_values`` (None stays None)."""
    if value is None:
        return [(None, None)] * ndim
    a = np.asarray(strip(value))
    if a.size == 1:
        return [(a.item(), a.item())] * ndim
    if a.shape in ((2,), (1, 2)):
        return [tuple(a.reshape(2).tolist())] * ndim
    return [tuple(row) for row in np.broadcast_to(a, (ndim, 2)).tolist()]


def _widths(shape: tuple, pad_width: Any) -> list:
    """Per axis ``(before, after)`` of ``pad_width``, parsed (and refused) by NumPy itself."""
    marker = np.pad(np.ones((1,) * len(shape), dtype=bool), pad_width)
    before = [int(i[0]) for i in np.nonzero(marker)]
    return [(b, n - 1 - b) for b, n in zip(before, marker.shape)]


def _at(axis: int, part: slice) -> tuple:
    return (slice(None),) * axis + (part,)


def _pad_axis_by_axis(x: Any, pad_width: Any, sides: Any, per_axis: list) -> Any:
    out = x
    for axis, widths in enumerate(_widths(np.shape(x), pad_width)):
        if widths == (0, 0):
            continue
        left, right = sides(out, axis, widths, per_axis[axis])
        out = np.concatenate([left, out, right], axis=axis)
    return out


def _stat_sides(part: Any, axis: int, widths: tuple, lengths: tuple, stat: Any) -> tuple:
    n = np.shape(part)[axis]
    sides = []
    for side, (width, length) in enumerate(zip(widths, lengths)):
        length = n if length is None else min(int(length), n)
        if length <= 0 and width > 0:
            raise ValueError("stat_length of 0 yields no value for padding")
        chunk = part[_at(axis, slice(0, length) if side == 0 else slice(n - length, n))] if width else part
        value = stat(chunk, axis=axis, keepdims=True) if width else part
        shape = list(np.shape(part))
        shape[axis] = width
        sides.append(np.broadcast_to(value, shape) if width else part[_at(axis, slice(0, 0))])
    return sides[0], sides[1]


def _ramp_sides(part: Any, axis: int, widths: tuple, ends: tuple) -> tuple:
    n = np.shape(part)[axis]
    if n == 0 and any(widths):
        raise ValueError("can't extend empty axis 0 using modes other than 'constant' or 'empty'")
    sides = []
    for side, (width, end) in enumerate(zip(widths, ends)):
        if not width:
            sides.append(part[_at(axis, slice(0, 0))])
            continue
        edge = part[_at(axis, slice(0, 1) if side == 0 else slice(n - 1, n))]
        ramp = np.linspace(end, np.squeeze(edge, axis), width, endpoint=False, dtype=part.dtype, axis=axis)
        sides.append(ramp if side == 0 else np.flip(ramp, axis))
    return sides[0], sides[1]


def _pad_odd(x: Any, pad_width: Any, mode: str) -> Any:
    """``reflect_type="odd"``: twice the edge minus the even reflection, where one reflection covers the pad."""
    out = x
    for axis, (before, after) in enumerate(_widths(np.shape(x), pad_width)):
        n = np.shape(out)[axis]
        reach = n - 1 if mode == "reflect" else n
        if before > reach or after > reach or n == 0:
            raise UnsupportedFunctionError(
                "numpy.pad", f"reflect_type='odd' on a tracer pads at most one reflection ({reach} along axis "
                f"{axis}); got ({before}, {after})."
            )
        widths = [(0, 0)] * np.ndim(x)
        widths[axis] = (before, after)
        even = gather(lambda t: np.pad(t, widths, mode), out)
        first, last = out[_at(axis, slice(0, 1))], out[_at(axis, slice(n - 1, n))]
        left = 2 * first - even[_at(axis, slice(0, before))]
        right = 2 * last - even[_at(axis, slice(before + n, before + n + after))]
        out = np.concatenate([left, out, right], axis=axis)
    return out


defcomposite(np.pad, _pad)


# ---------------------------------------------------------------- triangles and diagonals
def _tri_mask(m, k):
    return np.tri(*np.shape(m)[-2:], k=k, dtype=bool)


defcomposite(np.tril, lambda m, k=0: np.where(_tri_mask(m, k), m, 0))
defcomposite(np.triu, lambda m, k=0: np.where(_tri_mask(m, k - 1), 0, m))


def _with_zero_slot(build):
    """Gather from ``v`` plus one zero: ``build`` fills new positions with tag 0, the zero."""

    def impl(v, k=0):
        v = _as_array(v)
        return gather(lambda tz, tv: build(tv, k), np.zeros(1, dtype=v.dtype), v)

    return impl


defcomposite(np.diag, _with_zero_slot(np.diag))
defcomposite(np.diagflat, _with_zero_slot(np.diagflat))
# np.diagonal, np.trace and np.matrix_transpose live in rules/contractions.py (einsum based);
# np.apply_along_axis and np.apply_over_axes in rules/misc.py.


# ---------------------------------------------------------------- inserting and deleting
def _insert(arr, obj, values, axis=None):
    arr = _as_array(arr)
    out = gather(lambda ta, tv: np.insert(ta, obj, tv, axis), arr, values)
    # NumPy casts the inserted values to the array's dtype.
    return out if out.dtype == arr.dtype else out.astype(arr.dtype)


defcomposite(np.insert, _insert)
defcomposite(np.delete, lambda arr, obj, axis=None: gather(lambda t: np.delete(t, obj, axis), arr))



def _mark_views() -> None:
    """Primitives whose output NumPy may return as a view of their first argument."""
    candidates = (
        np.reshape, np.ravel, np.transpose, np.swapaxes, np.moveaxis, np.squeeze,
        np.expand_dims, np.broadcast_to, np.diagonal, np.split, np.array_split,
        np.real, np.imag, np.matrix_transpose, np.linalg.matrix_transpose, np.linalg.diagonal,
        np.flip,  # (and fliplr, flipud, rot90, made of it and transpose)
    )
    for fun in candidates:
        rule = RULES.get(fun)
        if rule is not None and rule.kind == PRIMITIVE:
            rule.returns_view = True


_mark_views()
