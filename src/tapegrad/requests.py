"""Answering derivative requests on a tape: gradient (a VJP) and Jacobian.

Both :class:`~tapegrad.gradient_tape.GradientTape` and the functional API
(:mod:`tapegrad.api`) reduce to these two functions, which prepare seeds,
call the one backward sweep, and shape the results.
"""

from __future__ import annotations

import math
from typing import Any, List, Optional, Sequence

import numpy as np

from .array_types import follow_library
from .backward import backward, basis_rows, plain_root, seed_for
from .tracer import strip
from .errors import NonDifferentiableArgumentError, TapeError
from .lazy import guard_values, is_dask, is_duck_array, rechunk_like, zeros_like_shaped
from .tape import Tape
from .tracer import Tracer, unwrap_above

__all__ = [
    "leading_batch",
    "resolve",
    "gradient_request",
    "vjp_request",
    "jacobian_request",
    "check_unconnected",
    "fresh_results",
]

_UNCONNECTED = ("none", "zero")


def leading_batch(values: Sequence[Any], references: Sequence[Any], what: str) -> tuple:
    """The batch axes that every value carries in front of its reference's shape.

    ``vjp`` cotangents and ``jvp`` tangents may carry extra *leading* axes (a
    batch of products in one sweep); they must all carry the same ones.
    ``None`` values (no tangent) are skipped.
    """
    batch = None
    for value, ref in zip(values, references):
        if value is None:
            continue
        extra = np.ndim(value) - np.ndim(ref)
        if extra < 0 or np.shape(value)[extra:] != np.shape(ref):
            raise ValueError(f"{what} shape {np.shape(value)} does not end with the shape {np.shape(ref)}")
        if batch is not None and np.shape(value)[:extra] != batch:
            raise ValueError(f"all {what}s must carry the same leading batch axes")
        batch = np.shape(value)[:extra]
    return batch or ()


def check_unconnected(unconnected_gradients: Any) -> str:
    """Accept ``"none"``/``"zero"`` (any case) or an enum whose value is one of them."""
    value = getattr(unconnected_gradients, "value", unconnected_gradients)
    value = str(value).lower()
    if value not in _UNCONNECTED:
        raise ValueError(f"unconnected_gradients must be 'none' or 'zero', not {unconnected_gradients!r}")
    return value


def resolve(value: Any, tape: Tape) -> Optional[Tracer]:
    """The tracer of ``tape`` that ``value`` stands for, or ``None`` if it is a constant there.

    Tracers of newer (inner) tapes are unwrapped down to ``tape``'s level.
    """
    value = unwrap_above(value, tape.level)
    if type(value) is Tracer and value._tape is tape:
        return value
    return None


def _require_values(tape: Tape) -> None:
    if tape.released:
        raise TapeError(
            "this tape already answered its request and released the values it recorded; "
            "differentiate again (or use a persistent GradientTape / tapegrad.vjp for several requests)."
        )


def _source_nodes(tape: Tape, xs: Sequence[Any]) -> List[Optional[Tracer]]:
    sources = []
    for x in xs:
        t = resolve(x, tape)
        if t is None:
            dtype = getattr(x, "dtype", None)
            if dtype is None:
                dtype = np.asarray(x).dtype if x is not None else None
            if dtype is not None and dtype.kind in "fc":
                raise TapeError(
                    "a source was never watched: gradients can only be taken with respect to "
                    "values returned by tape.watch(x) (or the arguments tapegrad.grad traces), "
                    "or values computed from them."
                )
        sources.append(t)
    return sources


def _zeros_like_source(x: Any, batch: tuple) -> Any:
    if type(x) is Tracer:
        dtype = x.dtype
    else:
        dtype = x.dtype if is_duck_array(x) else np.asarray(x).dtype  # asarray would compute Dask
    # Zeros in the source's own library (lazy Dask zeros for a Dask source).
    return zeros_like_shaped(strip(x), batch + np.shape(x), dtype)


def _finish(xs: Sequence[Any], sources: Sequence[Optional[Tracer]], found: dict, batch: tuple, unconnected: str) -> list:
    results = []
    for x, t in zip(xs, sources):
        g = None
        if t is not None:
            g = found.get(t._index)
            if g is not None and t._out >= 0:
                g = g[t._out]
        if g is None:
            results.append(_zeros_like_source(x, batch) if unconnected == "zero" else None)
        else:
            results.append(rechunk_like(g, x) if not batch else g)
    return results


def fresh_results(results: list, foreign: Sequence[Any] = ()) -> list:
    """Give each plain result its own writable memory.

    Backward rules may pass a cotangent through unchanged (``d(x + y)``), so
    two results, or a result and the caller's ``grad_ys``, can be one array.
    """
    seen = {id(f) for f in foreign}
    out = []
    for r in results:
        if type(r) is np.ndarray:  # the commonest result: no library checks
            if id(r) in seen or not r.flags.owndata or not r.flags.writeable:
                r = r.copy()
            seen.add(id(r))
        elif r is not None and type(r) is not Tracer:
            if is_dask(r):
                pass  # immutable and lazy: nothing to copy, and np.asarray would compute it
            elif is_duck_array(r):
                r = r.copy()  # CuPy & co.: stays in its library (np.asarray would refuse or move it)
            elif not isinstance(r, np.ndarray):
                r = np.asarray(r)
            elif id(r) in seen or not r.flags.owndata or not r.flags.writeable:
                r = r.copy()
            seen.add(id(r))
        out.append(r)
    return out


def vjp_request(
    tape: Tape,
    ys: Sequence[Any],
    xs: Sequence[Any],
    seeds: Sequence[Any],
    batch: tuple = (),
    stop_gradients: Sequence[Any] = (),
    unconnected: str = "none",
    release: bool = False,
) -> list:
    """One sweep: the cotangents ``seeds`` of ``ys`` (with leading ``batch`` axes) pulled back to each x.

    ``release`` lets the sweep free the tape's saved values as it goes (a private
    tape that will not be asked again).
    """
    _require_values(tape)
    roots, live_seeds = [], []
    for y, seed in zip(ys, seeds):
        t = resolve(y, tape)
        if t is not None:
            seed = seed_for(seed, t._value)
            roots.append((t._index, t._out))
            live_seeds.append(seed)
    sources = _source_nodes(tape, xs)
    stop = frozenset(s._index for s in (resolve(v, tape) for v in stop_gradients) if s is not None)
    indices = [s._index for s in sources if s is not None]
    # Dask values: a NumPy fallback (compute into memory) during the sweep is an error.
    with guard_values(([t for t in sources if t is not None], live_seeds), refuse_compute=True):
        found = backward(tape, roots, live_seeds, indices, batch, stop, release)
    return _finish(xs, sources, found, batch, unconnected)


def gradient_request(
    tape: Tape,
    ys: Sequence[Any],
    xs: Sequence[Any],
    grad_ys: Optional[Sequence[Any]] = None,
    stop_gradients: Sequence[Any] = (),
    unconnected: str = "none",
    release: bool = False,
) -> list:
    """d(sum_i sum(grad_ys[i] * ys[i])) / d xs, one result per x (``None`` when unconnected).

    The seed of ones (when ``grad_ys`` is not given) is what makes this the
    gradient of the *sum* of the targets.
    """
    seeds = []
    for i, y in enumerate(ys):
        gy = None if grad_ys is None else grad_ys[i]
        if gy is None:
            if type(y) is Tracer:  # np.ones without its wrapper, nor np.shape's dispatch to the tracer
                seed = np.empty(y.shape, dtype=y.dtype)
                seed.fill(1)
            else:
                seed = np.ones(np.shape(y), dtype=np.result_type(y))
            if is_duck_array(unwrap_above(y, 0)):  # a seed in the target's library: lazy ones for a Dask target
                seed = np.ones_like(strip(y), dtype=seed.dtype)
        else:
            if np.shape(gy) != np.shape(y):
                raise ValueError(
                    f"grad_ys[{i}] has shape {np.shape(gy)} but the target it weights has shape {np.shape(y)}"
                )
            seed = gy if type(gy) is Tracer else np.asarray(gy)
            if seed.dtype.kind not in "fc":
                seed = seed.astype(y.dtype if type(y) is Tracer else np.result_type(y, 1.0))
        seeds.append(seed)
    return vjp_request(tape, ys, xs, seeds, (), stop_gradients, unconnected, release)


def dtype_of(value: Any) -> np.dtype:
    """The dtype of a value, tracer or array (no ``np.asarray``: a Dask value would compute)."""
    dtype = getattr(value, "dtype", None)
    return dtype if dtype is not None else np.result_type(value)


def _require_real(y: Any) -> None:
    """A sweep seeded with real basis vectors sees only the real part of a complex target."""
    dtype = dtype_of(y)
    if dtype.kind == "c":
        raise NonDifferentiableArgumentError(
            "jacobian in reverse mode needs real outputs, but the function returned a complex "
            f"array ({dtype}): real basis cotangents would give the derivative of its real part "
            "only. Use tapegrad.jacobian(f, mode='forward') (tapegrad.jacfwd), which gives the "
            "complex Jacobian, or differentiate np.real(f(x)) and np.imag(f(x)). (tapegrad.hessian "
            "of a function of complex input meets this with its complex gradient: differentiate "
            "with respect to the real and imaginary parts, f(x + 1j * y) with real x and y.)"
        )


def jacobian_request(
    tape: Tape,
    y: Any,
    xs: Sequence[Any],
    unconnected: str = "none",
    chunk_size: Optional[int] = None,
    release: bool = False,
) -> list:
    """The full Jacobian of ``y`` w.r.t. each x: ``y.shape + x.shape``, one batched sweep per chunk.

    ``release`` frees the tape's saved values during the last sweep.
    """
    _require_values(tape)
    _require_real(y)
    t = resolve(y, tape)
    yshape = _shape(y)
    size = math.prod(yshape)
    sources = _source_nodes(tape, xs)
    if t is None or size == 0:
        found: dict = {}
        res = _finish(xs, sources, found, (size,), unconnected)
        return [None if r is None else np.reshape(r, yshape + np.shape(x)) for r, x in zip(res, xs)]
    if chunk_size is not None and chunk_size < 1:
        raise ValueError("chunk_size must be a positive integer")
    if chunk_size is not None:
        step = int(chunk_size)
    elif type(unwrap_above(t, 0)) is np.ndarray:  # NumPy values; Dask and CuPy sweeps stay whole
        step = _automatic_chunk(size, xs, np.dtype(t.dtype).itemsize)
    else:
        step = size
    indices = [s._index for s in sources if s is not None]
    pieces: List[list] = []
    # Plain rows go straight into one array per x (no second copy by concatenation).
    filled: List[Any] = [None] * len(xs)
    for start in range(0, size, step):
        stop = min(size, start + step)
        seed = follow_library(basis_rows(stop - start, size, start, yshape, t.dtype, structured=plain_root(t._value)), strip(t))
        with guard_values((sources, t), refuse_compute=True):  # Dask: no fallback, no compute
            found = backward(tape, [(t._index, t._out)], [seed], indices, (stop - start,), release=release and stop == size)
        chunk = _finish(xs, sources, found, (stop - start,), "none")
        if step < size:
            chunk = [_fill_rows(filled, k, r, start, stop, yshape) for k, r in enumerate(chunk)]
        # A chunk of outputs that does not reach x contributes zero rows.
        pieces.append([(stop - start, r) for r in chunk])
    results = []
    for k, x in enumerate(xs):
        parts = [p[k] for p in pieces]
        if filled[k] is not None and all(r is _FILLED for _, r in parts):
            results.append(filled[k][0])  # already shaped yshape + x's shape, and its own memory
            continue
        if all(r is None for _, r in parts):
            results.append(None if unconnected == "none" else _zeros_like_source(x, yshape))
            continue
        if filled[k] is not None:  # rows of another kind came too: take the filled ones back
            rows = filled[k][1]
            parts = [(n, rows[i : i + n] if r is _FILLED else r) for i, (n, r) in zip(_offsets(parts), parts)]
        parts = [r if r is not None else _zeros_like_source(x, (n,)) for n, r in parts]
        full = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
        if np.shape(full) != yshape + _shape(x):  # a view would cost a copy later
            full = np.reshape(full, yshape + _shape(x))
        results.append(full)
    return results


#: Without ``chunk_size``, a Jacobian sweep carries at most about this many bytes of
#: cotangents per value (rows x the larger of the output's and the inputs' sizes).  Its
#: arrays are each that large: one sweep for all rows of a 10^4 x 10^4 Jacobian (800 MB)
#: peaked at 5.4 times the Jacobian's size; in chunks under this bound, the filled result
#: and one chunk's arrays (1.0-1.1 times), and the chunks also run faster (in cache).
AUTO_CHUNK_BYTES = 16 << 20

# Marks a chunk's rows already written into the result (_fill_rows).
_FILLED = object()


def _automatic_chunk(size: int, xs: Sequence[Any], itemsize: int) -> int:
    """Rows per sweep for a Jacobian of ``size`` outputs when the caller gave no ``chunk_size``."""
    widest = max([size] + [math.prod(_shape(x)) for x in xs])
    return max(1, min(size, AUTO_CHUNK_BYTES // max(1, widest * itemsize)))


def _shape(value: Any) -> tuple:
    """``np.shape(value)``; a tracer's without NumPy's dispatch (a constant call, several microseconds)."""
    return value.shape if type(value) is Tracer else np.shape(value)


def _offsets(parts: list) -> list:
    out, at = [], 0
    for n, _ in parts:
        out.append(at)
        at += n
    return out


def _fill_rows(filled: list, k: int, rows: Any, start: int, stop: int, yshape: tuple) -> Any:
    """Write a chunk's plain rows for x number ``k`` into its result (made at the first such chunk).

    ``filled[k]`` is ``(result, flat rows view)``: the result has the Jacobian's
    shape, ``yshape + x.shape``, so it is returned as it is.
    """
    if type(rows) is not np.ndarray:
        return rows  # None, or a CuPy / Dask piece: concatenated at the end
    if filled[k] is None:
        result = np.empty(yshape + rows.shape[1:], dtype=rows.dtype)
        filled[k] = (result, result.reshape((-1,) + rows.shape[1:]))
    target = filled[k][1]
    if target.shape[1:] != rows.shape[1:] or target.dtype != rows.dtype:
        return rows
    target[start:stop] = rows
    return _FILLED
