"""In-place writes and views of tracers, replayed as NumPy would.

NumPy's basic indexing returns views: writing through a view changes the base
and vice versa.  Tracers are values, so tapegrad reproduces that aliasing for
views made by basic indexing (the write is replayed onto the base) and refuses
in-place writes that it cannot replay, rather than computing something else.
A tracer sends its in-place operations here through ``tracer.ROUTES``.
"""

from __future__ import annotations

import weakref
from typing import Any, Optional

import numpy as np

from .errors import GradientDroppedError
from .tracer import ROUTES, Tracer, unwrap_above  # unwrap_above: types and memory, no reuse guard

__all__ = ["WHOLE", "Mapped", "link_view", "link_opaque_views", "write", "write_inplace"]


class _Held:
    """A strong reference that reads like a ``weakref.ref`` (``held()`` is the object)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __call__(self) -> Any:
        return self.obj


def link_view(base: Tracer, view: Tracer, index: Any) -> None:
    # A view of a view keeps its base alive, as NumPy's ``.base`` does: in
    # ``v = y.reshape(2, 3).T`` the reshaped array is a temporary that still links v to y.
    held = _Held(base) if getattr(base, "_viewof", None) is not None else weakref.ref(base)
    view._viewof = (held, index)
    views = getattr(base, "_views", None)
    if views is None:
        base._views = [weakref.ref(view)]
    else:
        views[:] = [r for r in views if r() is not None]  # forget dead views
        views.append(weakref.ref(view))


#: The index of a view whose element mapping tapegrad does not track (``np.real`` of a
#: complex array, a ``.view`` of another item size): it counts as overlapping
#: everything, and writing through it is refused.
WHOLE = object()


class Mapped:
    """The index of a view made by a call (reshape, transpose, swapaxes, ravel, ...).

    Keeps the two arrays NumPy made, which share memory, and reads from their data
    addresses, when first asked, which element of the base each element of the view
    is: ``positions`` has the view's shape and holds flat (C-order) positions in the
    base.  A write through such a view is replayed onto the base, as for a slice.
    """

    __slots__ = ("_view", "_base", "_positions", "writeable")

    def __init__(self, view: np.ndarray, base: np.ndarray) -> None:
        self._view, self._base, self._positions = view, base, None
        self.writeable = bool(view.flags.writeable)  # broadcast_to and diagonal give read-only views

    @property
    def positions(self) -> Optional[np.ndarray]:
        """Flat positions in the base, shaped like the view; ``None`` if some are not in the base."""
        if self._positions is None:
            in_base = _addresses(self._base).ravel()
            order = np.argsort(in_base, kind="stable")
            ordered = in_base[order]
            wanted = _addresses(self._view)
            at = np.minimum(np.searchsorted(ordered, wanted), ordered.size - 1)
            if ordered.size == 0 or not np.array_equal(ordered[at], wanted):
                self._positions = False
            else:
                self._positions = order[at]
            self._view = self._base = None  # the mapping is all that is needed from now on
        return None if self._positions is False else self._positions


def _addresses(a: np.ndarray) -> np.ndarray:
    """The memory address of each element of ``a``, shaped like ``a``."""
    out = np.full(a.shape, a.__array_interface__["data"][0], dtype=np.int64)
    for axis, (n, stride) in enumerate(zip(a.shape, a.strides)):
        step = np.arange(n, dtype=np.int64) * stride
        out += step.reshape((n,) + (1,) * (a.ndim - axis - 1))
    return out


def link_opaque_views(base: Tracer, out: Any) -> None:
    """Mark the outputs of a view-returning call that really share ``base``'s memory."""
    raw_base = unwrap_above(base, 0)
    if type(raw_base).__module__.startswith("dask."):  # Dask values never alias (and may_share_memory would compute)
        return  # Dask arrays are immutable (no views to replay), and may_share_memory would compute them
    for view in out if isinstance(out, (list, tuple)) else (out,):
        if type(view) is Tracer and view._tape is base._tape:
            raw_view = unwrap_above(view, 0)
            if np.may_share_memory(raw_view, raw_base):
                mappable = (
                    type(raw_view) is np.ndarray and type(raw_base) is np.ndarray
                    and raw_view.dtype == raw_base.dtype
                )
                link_view(base, view, Mapped(raw_view, raw_base) if mappable else WHOLE)


def _positions(shape: tuple, index: Any) -> np.ndarray:
    size = int(np.prod(shape, dtype=np.int64))
    if index is WHOLE:
        return np.arange(size)
    if type(index) is Mapped:
        positions = index.positions
        return np.arange(size) if positions is None else positions.ravel()
    return np.arange(size).reshape(shape)[index].ravel()


def write_inplace(target: Tracer, new: Any) -> Any:
    """``target op= value``: a write into an array, a rebinding for a scalar.

    NumPy scalars (and Python numbers) are immutable: ``y += 1`` binds ``y`` to a
    new value and leaves other names (a caller's argument) alone.  A tracer of a
    scalar does the same, so a helper that updates its argument in place changes
    the caller's value exactly when NumPy would.
    """
    if not (isinstance(unwrap_above(target, 0), np.ndarray) or getattr(target, "_array", False)):
        return new
    return write(target, new, None)


def write(target: Tracer, new: Any, writer: Optional[Tracer], index: Any = Ellipsis) -> Tracer:
    """Make ``target`` (a tracer object) hold ``new`` from now on, as an in-place write.

    ``index`` is the part of ``target`` that changes; ``writer`` a view through
    which the write was made (it is up to date by construction).
    """
    if target._tape.recording is None:  # a finished transform's (reverse._record_call): nodes may hold it
        raise GradientDroppedError(
            "an array traced by a differentiated call that has returned (a work array made by np.zeros & co. "
            "and kept in a cache or a module-level workspace) is written into; recorded calls may still read "
            "it. Write into a copy (w = w.copy()), or allocate the work array in each call."
        )
    if type(new) is not Tracer and target.dtype.kind not in "fc" and np.result_type(new).kind not in "fc":
        new = target._tape.constant(new)  # an integer or boolean array (array-API code): no gradient to drop
    if type(new) is not Tracer:
        raise GradientDroppedError(
            "an in-place update of a traced array produced an untraced value (inside "
            "stop_recording?); write the update out of place instead."
        )
    views = getattr(target, "_views", None)
    if views:
        stale = [v for v in (r() for r in views) if v is not None and v is not writer]
        if stale:
            written = _positions(target.shape, index)
            for view in stale:
                if np.intersect1d(written, _positions(target.shape, view._viewof[1])).size:
                    raise GradientDroppedError(
                        "in-place write into a traced array that overlaps a view of it (made by slicing, "
                        "reshape or transpose) that is still alive: NumPy would change that view too, which "
                        "tapegrad does not replay. Write out of place (y = x + 1, or "
                        "y = x.copy(); y[i] = v), or drop the view first."
                    )
    viewof = getattr(target, "_viewof", None)
    if viewof is not None and type(viewof[1]) is Mapped and not viewof[1].writeable:
        raise ValueError("assignment destination is read-only")  # NumPy's own refusal (broadcast_to)
    if viewof is not None and viewof[0]() is not None:
        how = viewof[1]
        if how is WHOLE or (type(how) is Mapped and not _one_to_one(how)):
            raise GradientDroppedError(
                "in-place write into a view of a traced array whose elements tapegrad cannot map "
                "onto the original (np.real / np.imag of a complex array, or a view of another "
                "item size) while the original is alive: NumPy would change the original too. "
                "Copy first (y = np.real(x).copy()) or write out of place."
            )
    old = unwrap_above(target, 0)
    if isinstance(old, np.ndarray):
        # A 0-d array written in place stays an array (NumPy returns a scalar for the
        # arithmetic that computed the new value): later in-place updates must write too.
        target._array = True
        if old.ndim > 1 and old.flags.f_contiguous and not old.flags.c_contiguous:
            # NumPy writes into the array's own memory: an F-ordered array stays F-ordered
            # (ravel(order="K") and the like read it), whatever layout the new value has.
            fresh = unwrap_above(new, 0)
            if isinstance(fresh, np.ndarray) and not fresh.flags.f_contiguous:
                new = np.copy(new, order="F")
    target._value, target._index, target._out, target._tape = new._value, new._index, new._out, new._tape
    target._small = new._small
    if viewof is not None:
        base = viewof[0]()
        if base is not None:
            # Written through a view: replay the write onto the base, as NumPy would.
            view_index = viewof[1]
            if type(view_index) is Mapped:
                # Each element of the view is one element of the base (see Mapped).
                if base.ndim == 0:  # a view of a 0-d array has its one element
                    written = np.reshape(target, ()).copy()  # a new value, not a view of the writer
                else:
                    written = ROUTES.setitem(base, np.unravel_index(view_index.positions, base.shape), target)
                write(base, written, writer=target, index=view_index)
            else:
                write(base, ROUTES.setitem(base, view_index, target), writer=target, index=view_index)
    return target


def _one_to_one(how: Mapped) -> bool:
    positions = how.positions
    return positions is not None and np.unique(positions).size == positions.size


ROUTES.write = write
ROUTES.write_inplace = write_inplace
ROUTES.link_view = link_view
