"""Requests built on the core ones (:mod:`tapegrad.requests`): per-row Jacobians, nested structures.

:func:`batch_jacobian_request` answers ``batch_jacobian`` (rows that do not interact,
one basis cotangent shared by every row); :func:`structured_gradient` is the one body
of ``tg.gradients`` and ``GradientTape.gradient`` for nested targets and sources.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from .array_types import follow_library
from .backward import backward, basis_rows
from .outputs import read_outputs
from .requests import _finish, _require_real, _source_nodes, fresh_results, gradient_request, resolve
from .tape import Tape
from .tracer import strip
from .tree import flatten, flatten_up_to, unflatten

__all__ = ["batch_jacobian_request", "structured_gradient"]


def batch_jacobian_request(
    tape: Tape,
    y: Any,
    x: Any,
    unconnected: str = "none",
    chunk_size: Optional[int] = None,
) -> Any:
    """Per-row Jacobians of ``y`` (B, ...) w.r.t. ``x`` (B, ...) whose rows are independent.

    Every batch row gets the same basis cotangent at once, so the sweep carries
    only ``prod(y.shape[1:])`` cotangents instead of ``y.size``.
    """
    _require_real(y)
    yshape, xshape = np.shape(y), np.shape(x)
    if not yshape or not xshape or yshape[0] != xshape[0]:
        raise ValueError(
            f"batch_jacobian needs target and source with the same leading batch axis, got {yshape} and {xshape}"
        )
    rows, row_shape, xrow = yshape[0], yshape[1:], xshape[1:]
    size = int(np.prod(row_shape, dtype=np.int64))
    sources = _source_nodes(tape, [x])
    t = resolve(y, tape)
    if t is None or sources[0] is None or size == 0:
        if unconnected == "none" and size:
            return None
        return np.zeros((rows,) + row_shape + xrow, dtype=np.result_type(x))
    step = size if chunk_size is None else int(chunk_size)
    if step < 1:
        raise ValueError("chunk_size must be a positive integer")
    pieces = []
    for start in range(0, size, step):
        stop = min(size, start + step)
        basis = follow_library(basis_rows(stop - start, size, start, row_shape, t.dtype, structured=False), strip(t))
        seed = np.broadcast_to(basis[:, None], (stop - start, rows) + row_shape)
        found = backward(tape, [(t._index, t._out)], [seed], [sources[0]._index], (stop - start,))
        (piece,) = _finish([x], sources, found, (stop - start,), "zero")
        pieces.append(piece)
    full = pieces[0] if len(pieces) == 1 else np.concatenate(pieces, axis=0)
    full = np.moveaxis(full, 0, 1)
    return np.reshape(full, (rows,) + row_shape + xrow)


def structured_gradient(
    tape: Tape, ys: Any, xs: Any, grad_ys: Any, stop_gradients: Sequence[Any], unconnected: str
) -> Any:
    """:func:`gradient_request` for nested structures: the one body of ``tg.gradients`` and
    ``GradientTape.gradient``.  Results keep the structure of ``xs``.

    Targets that wrap a tracer (a ``DataArray``, a ``Quantity``) are read through
    (:func:`tapegrad.outputs.read_outputs`), and so are weights given in such wrappers.
    """
    ys = read_outputs(ys, "the target")[0]
    if grad_ys is not None:
        grad_ys = read_outputs(grad_ys, "output_gradients", strict=False)[0]
    y_leaves, y_structure = flatten(ys)
    x_leaves, structure = flatten(xs)
    gys = None if grad_ys is None else flatten_up_to(y_structure, grad_ys)
    results = gradient_request(tape, y_leaves, x_leaves, gys, stop_gradients, unconnected)
    return unflatten(structure, fresh_results(results, gys or ()))
