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
from .tracer import ROUTES, Tracer, strip

__all__ = ["WHOLE", "link_view", "link_opaque_views", "write", "write_inplace"]


def link_view(base: Tracer, view: Tracer, index: Any) -> None:
    view._viewof = (weakref.ref(base), index)
    views = getattr(base, "_views", None)
    if views is None:
        base._views = [weakref.ref(view)]
    else:
        views[:] = [r for r in views if r() is not None]  # forget dead views
        views.append(weakref.ref(view))


#: The index of a view whose element mapping tapegrad does not track (made by
#: reshape, transpose, ravel, ...): it counts as overlapping everything.
WHOLE = object()


def link_opaque_views(base: Tracer, out: Any) -> None:
    """Mark the outputs of a view-returning call that really share ``base``'s memory."""
    raw_base = strip(base)
    if type(raw_base).__module__.startswith("dask."):  # Dask values never alias (and may_share_memory would compute)
        return  # Dask arrays are immutable (no views to replay), and may_share_memory would compute them
    for view in out if isinstance(out, (list, tuple)) else (out,):
        if type(view) is Tracer and view._tape is base._tape and np.may_share_memory(strip(view), raw_base):
            link_view(base, view, WHOLE)


def _positions(shape: tuple, index: Any) -> np.ndarray:
    size = int(np.prod(shape, dtype=np.int64))
    if index is WHOLE:
        return np.arange(size)
    return np.arange(size).reshape(shape)[index].ravel()


def write_inplace(target: Tracer, new: Any) -> Any:
    """``target op= value``: a write into an array, a rebinding for a scalar.

    NumPy scalars (and Python numbers) are immutable: ``y += 1`` binds ``y`` to a
    new value and leaves other names (a caller's argument) alone.  A tracer of a
    scalar does the same, so a helper that updates its argument in place changes
    the caller's value exactly when NumPy would.
    """
    if not (isinstance(strip(target), np.ndarray) or getattr(target, "_array", False)):
        return new
    return write(target, new, None)


def write(target: Tracer, new: Any, writer: Optional[Tracer], index: Any = Ellipsis) -> Tracer:
    """Make ``target`` (a tracer object) hold ``new`` from now on, as an in-place write.

    ``index`` is the part of ``target`` that changes; ``writer`` a view through
    which the write was made (it is up to date by construction).
    """
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
    if viewof is not None and viewof[1] is WHOLE and viewof[0]() is not None:
        raise GradientDroppedError(
            "in-place write into a view of a traced array made by reshape / transpose / ravel "
            "(or a similar call) while the original is alive: NumPy would change the original "
            "too, which tapegrad cannot replay. Copy first (y = x.reshape(...).copy()) or "
            "write out of place."
        )
    if isinstance(strip(target), np.ndarray):
        # A 0-d array written in place stays an array (NumPy returns a scalar for the
        # arithmetic that computed the new value): later in-place updates must write too.
        target._array = True
    target._value, target._index, target._out, target._tape = new._value, new._index, new._out, new._tape
    target._small = new._small
    if viewof is not None:
        base = viewof[0]()
        if base is not None:
            # Written through a view: replay the write onto the base, as NumPy would.
            view_index = viewof[1]
            write(base, ROUTES.setitem(base, view_index, target), writer=target, index=view_index)
    return target


ROUTES.write = write
ROUTES.write_inplace = write_inplace
ROUTES.link_view = link_view
