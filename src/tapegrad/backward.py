"""The vectorized reverse sweep.

One walk over the tape, newest node first.  Cotangents may carry leading
*batch* axes (``()`` for a gradient, ``(m,)`` for a Jacobian chunk), so a
Jacobian is one sweep, not a loop over outputs.  Two things happen here and
nowhere else:

* un-broadcasting: a rule returns a cotangent that broadcasts to its
  argument; the driver sums the broadcast axes away (and casts back to the
  argument's dtype, taking the real part for a real argument);
* accumulation: where a value is used several times its cotangents add up.
  That accumulation, together with a seed of ones, is where the "sum over
  y" of ``tf.gradients`` happens.

The rules are ordinary NumPy calls, so when the recorded values are tracers
of an outer tape the sweep itself is recorded there: higher derivatives come
from the same code.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from .banded import BandedCotangent, plain
from .sparse_batch import SparseCotangent
from .strong import MODE, SafeRules, StrongZerosNeeded, has_nan, lazy_seeds, strong_zero, strong_zeros
from .lazy import broadcast_to, is_duck_array, zeros_like_shaped
from .memo import sweeping
from .parallel import MIN_SIZE as LARGE, call as parallel_call  # below MIN_SIZE a split never pays
from .registry import RULE_TABLE
from .tape import FITTED, INDEX, N_OUT, RELEASED, Node, Tape, parent_runs
from .tracer import Tracer

__all__ = [
    "backward",
    "fit_cotangent",
    "basis_rows",
    "as_seed",
    "seed_for",
    "plain_root",
    "strong_zero",
    "strong_zeros",
    "StrongZerosNeeded",
]


def fit_cotangent(g: Any, target: Any, batch: tuple) -> Any:
    """Shape ``g`` like ``batch + shape(target)`` and give it ``target``'s dtype.

    Sums the axes that broadcasting added (leading extra axes, and axes where
    the target has length 1), broadcasts a cotangent that came back smaller,
    and casts: a complex cotangent of a real value keeps its real part.
    """
    # .shape where it is an ndarray: np.shape goes through NumPy's dispatch (0.3 us a call).
    want = batch + (target.shape if type(target) is np.ndarray else np.shape(target))
    plain = type(g) is np.ndarray
    gshape = g.shape if plain else np.shape(g)
    if gshape != want:
        nb = len(batch)
        # np.add.reduce is np.sum without its Python layer; tracers and Dask keep np.sum.
        total = np.add.reduce if plain else np.sum
        extra = len(gshape) - len(want)
        if extra > 0:
            g = total(g, axis=tuple(range(nb, nb + extra)))
            gshape = np.shape(g)
        if len(gshape) == len(want):
            axes = []
            for k in range(nb, len(want)):
                if want[k] == 1 and gshape[k] != 1:
                    axes.append(k)
            if axes:
                g = total(g, axis=tuple(axes), keepdims=True)
                gshape = np.shape(g)
        if gshape != want:
            g = broadcast_to(g, want, target)  # Dask: chunked like the target
    tdtype = getattr(target, "dtype", None)
    if tdtype is None:
        tdtype = np.result_type(target)
    gdtype = getattr(g, "dtype", None)
    if gdtype != tdtype:
        if gdtype is not None and gdtype.kind == "c" and tdtype.kind != "c":
            g = np.real(g)
        if getattr(g, "dtype", None) != tdtype:
            g = g.astype(tdtype) if hasattr(g, "astype") else np.asarray(g, dtype=tdtype)
    return g


#: Whether :func:`basis_rows` may build banded batches.  Differential tests turn it
#: off to compare every structured sweep with the dense one it stands for.
STRUCTURED = True


def basis_rows(rows: int, size: int, k: int, shape: tuple, dtype: Any, structured: bool = True) -> Any:
    """Basis vectors for one batched sweep: like ``np.eye(rows, size, k)``, each row shaped ``shape``.

    Rows ``start:stop`` of an identity (a Jacobian's seed) are
    ``basis_rows(stop - start, size, start, ...)``; the basis tangents of an
    argument of ``n`` entries at ``offset`` in a batch of ``total`` are
    ``basis_rows(total, n, -offset, ...)``.  The rows are a banded batch, over
    the C-order slots of an N-D ``shape`` (the sweep keeps it a few diagonals
    while rules only scale, slice and add); ``structured=False`` or a 0-d
    ``shape`` gives a dense array.
    """
    rows_of_eye = BandedCotangent.eye(rows, size, k, dtype)
    if structured and STRUCTURED and len(shape) >= 1 and np.dtype(dtype).kind in "fc":
        if len(shape) == 1:
            return rows_of_eye
        # Rows of an N-D value: the same diagonals over the value's C-order slots.
        return BandedCotangent((rows,) + tuple(shape), rows_of_eye.bands, rows_of_eye.dtype)
    return rows_of_eye.to_array().reshape((rows,) + tuple(shape))


def as_seed(cotangent: Any) -> Any:
    """A cotangent given to a sweep: tracers and the sweep's own batches as they are, else an array."""
    t = type(cotangent)
    if t is BandedCotangent or t is np.ndarray or t is Tracer or is_duck_array(cotangent):
        return cotangent
    return np.asarray(cotangent)


def seed_for(seed: Any, root_value: Any) -> Any:
    """``seed`` as the sweep from a root holding ``root_value`` may start from it.

    A banded batch only seeds a sweep over plain values: when the root's value
    is a tracer of an outer tape, the sweep itself is recorded, and recorded calls
    must see plain arrays.
    """
    if type(seed) is BandedCotangent and not plain_root(root_value):
        return seed.dense()
    return seed


def plain_root(value: Any) -> bool:
    """Whether a sweep from a root holding ``value`` may carry banded batches: a plain array (1-D or N-D)."""
    return type(value) is np.ndarray and value.ndim >= 1


class _Pending:
    """Cotangents waiting to be propagated, keyed by node index, and their sums.

    A sum is written in place into an array that this sweep allocated itself
    (an earlier sum) and has not yet handed to any rule; every other array (a
    seed, a rule's output that may alias its input or another cotangent) is
    only read.  That saves an allocation per extra use of a value, which
    matters for the large batched cotangents of Jacobians and Hessians.

    Ownership is kept per slot (a node index, or ``(index, output)`` for a
    node with several outputs), not per array: the sweep takes each slot once
    and never writes to it again (parents come before their children on the
    tape), so a taken slot needs no bookkeeping, which saves work on every node.
    """

    __slots__ = ("slots", "owned")

    def __init__(self) -> None:
        self.slots: dict = {}
        self.owned: set = set()  # slots holding a sum that only this sweep references

    def _sum(self, key: Any, prev: Any, g: Any) -> Any:
        owned = self.owned
        if key in owned and (type(g) is np.ndarray or type(g) is BandedCotangent):
            if g.shape == prev.shape and g.dtype == prev.dtype:
                if type(g) is BandedCotangent:
                    return g.add_into(prev)
                np.add(prev, g, out=prev)
                return prev
        if type(prev) is np.ndarray and type(g) is np.ndarray and prev.size >= LARGE:
            total = parallel_call(np.add, (prev, g))  # same bits, split across threads when large
        else:
            total = prev + g
        if type(total) is np.ndarray:
            owned.add(key)
        else:
            owned.discard(key)
        return total

    def add(self, node: Node, out: int, g: Any) -> None:
        idx = node[INDEX]
        slots = self.slots
        if out < 0:
            prev = slots.get(idx)
            slots[idx] = g if prev is None else self._sum(idx, prev, g)
        else:
            outs = slots.get(idx)
            if outs is None:
                outs = slots[idx] = [None] * node[N_OUT]
            prev = outs[out]
            outs[out] = g if prev is None else self._sum((idx, out), prev, g)


_WHOLE = slice(None)


def _scatter_into(cts: _Pending, rule: Any, args: tuple, parents: tuple, g: np.ndarray, batch: tuple) -> bool:
    """Add the cotangent of ``x[index]`` straight into ``x``'s accumulated cotangent.

    Returns ``False`` (nothing done) when the fast path does not apply: an
    advanced index, or dtypes that need the general path's casting.
    """
    index = rule.scatter_index(args)
    target = args[0]
    _, _, parent, out = parents  # one traced argument; parent: the parent node's index
    if index is None or out >= 0 or g.dtype != target.dtype:
        return False
    if type(g) is BandedCotangent:
        return _scatter_banded(cts, parent, g, index, target)
    slots, owned = cts.slots, cts.owned
    prev = slots.get(parent)
    if prev is not None and type(prev) is not np.ndarray:
        return False  # a traced cotangent (higher order): the sum must be recorded
    if all(i is None or i is Ellipsis or i == _WHOLE for i in index):
        # x[None, :], x[..., None]: the read took every element, so the cotangent is g reshaped.
        g = g.reshape(batch + target.shape)
        slots[parent] = g if prev is None else cts._sum(parent, prev, g)
        return True
    where = (slice(None),) * len(batch) + index
    if prev is not None and parent in owned and prev.shape == batch + target.shape:
        prev[where] += g
        return True
    buf = np.zeros(batch + target.shape, dtype=g.dtype)
    buf[where] = g
    if prev is not None:
        buf += prev  # prev broadcasts to the full shape (fit_cotangent made it so)
    owned.add(parent)
    slots[parent] = buf
    return True


def _scatter_banded(cts: _Pending, parent: int, g: BandedCotangent, index: tuple, target: Any) -> bool:
    """The banded case of :func:`_scatter_into`: ``x[a:b]`` of a 1-D ``x`` shifts the diagonals."""
    shifted = g.scattered(index, np.shape(target))
    if shifted is None:
        return False
    slots = cts.slots
    prev = slots.get(parent)
    if prev is None:
        slots[parent] = shifted
    elif type(prev) is BandedCotangent or type(prev) is np.ndarray:
        slots[parent] = cts._sum(parent, prev, shifted)
    else:
        return False  # a traced cotangent (higher order): the sum must be recorded
    return True


def _fill_zeros(slots: list, ans: Sequence, batch: tuple) -> tuple:
    """Outputs of a multi-output node that received no cotangent get explicit zeros.

    Next to a sparse batch they are empty sparse batches (a dense zero batch of a
    sparse Jacobian's rows could be far too large).
    """
    if any(type(s) is SparseCotangent for s in slots):
        return tuple(
            s if s is not None else SparseCotangent.empty(batch + np.shape(a), getattr(a, "dtype", float))
            for s, a in zip(slots, ans)
        )
    return tuple(
        # zeros in the output's own library (lazy Dask zeros for a Dask output)
        s if s is not None else zeros_like_shaped(a, batch + np.shape(a), getattr(a, "dtype", float))
        for s, a in zip(slots, ans)
    )


def backward(
    tape: Tape,
    roots: Sequence[tuple],
    seeds: Sequence[Any],
    sources: Iterable[int],
    batch: tuple = (),
    stop: frozenset = frozenset(),
    release: bool = False,
) -> dict:
    """Propagate cotangents from ``roots`` back to ``sources`` in one sweep.

    Parameters
    ----------
    tape : Tape
        The tape whose nodes are walked.
    roots : sequence of (int, int)
        The target values as (node index, output index) pairs.
    seeds : sequence of array_like
        One cotangent per root, shaped ``batch + root.shape``.
    sources : iterable of int
        Indices of the nodes whose accumulated cotangent is wanted.
    batch : tuple of int
        The leading batch shape that every cotangent carries.
    stop : frozenset of int
        Indices of nodes treated as constants (``stop_gradients``).
    release : bool
        Drop each node's saved values once its VJPs have run, for a tape that
        will not be swept again: memory is freed during the sweep and reused
        for the cotangents instead of growing.

    Returns
    -------
    dict
        ``{node index: cotangent}`` for each source reached.  Sources that no
        cotangent reached are absent.
    """
    mode = MODE.get()
    with sweeping(tape):  # rules reuse the forward's remembered values (memo.remembered)
        if mode == "on" or (mode == "auto" and lazy_seeds(seeds)):
            # Forced, or lazy (Dask) cotangents, which cannot be looked at without computing.
            return _sweep(tape, roots, seeds, sources, batch, stop, release, SafeRules())
        found = _sweep(tape, roots, seeds, sources, batch, stop, release, RULE_TABLE)
        if mode == "off":
            return found
        for value in found.values():
            if has_nan(value):
                break
        else:
            return found
        if release:  # the values the second sweep would need are gone
            raise StrongZerosNeeded()
        return _sweep(tape, roots, seeds, sources, batch, stop, release, SafeRules())


def _sweep(
    tape: Tape,
    roots: Sequence[tuple],
    seeds: Sequence[Any],
    sources: Iterable[int],
    batch: tuple,
    stop: frozenset,
    release: bool,
    table: Any,
) -> dict:
    cts = _Pending()
    nodes = tape.nodes
    for (index, out), seed in zip(roots, seeds):
        cts.add(nodes[index], out, seed)
    if not cts.slots:
        return {}
    wanted = set(sources)
    found: dict = {}
    start = max(index for index, _ in roots)
    lowest = min(wanted) if wanted else 0
    # Sources are mostly the watched inputs, at the bottom of the tape: above the
    # highest one (and without stop_gradients) a node needs no set look-up.
    highest = max(wanted) if wanted else -1
    stopping = bool(stop)
    unbatched = not batch
    fitted = FITTED
    # Bound once: this loop runs once per recorded call.
    slots = cts.slots
    take = slots.pop
    accumulate = cts._sum
    for idx in range(start, lowest - 1, -1):
        g = take(idx, None)
        if g is None:
            continue
        if idx <= highest and idx in wanted:
            found[idx] = plain(g, fresh=True)
        _, number, args, kwargs, ans, parents, n_out = nodes[idx]
        if not parents or (stopping and idx in stop):
            continue
        rule = table[number]
        # Banded batches reach only the rules that opt in (Rule.banded); the others
        # get the dense array the batch stands for (built once, read-only).
        if n_out:
            g = _fill_zeros(g, ans, batch)
            if not rule.banded:
                g = tuple(c.dense() if type(c) is BandedCotangent else c for c in g)
            if not rule.sparse:
                g = tuple(c.dense() if type(c) is SparseCotangent else c for c in g)
        elif type(g) is BandedCotangent and not rule.banded:
            g = g.dense()
        elif type(g) is SparseCotangent and not rule.sparse:
            g = g.dense()  # sparse batches likewise reach only the rules that opt in (Rule.sparse)
        if (
            rule.scatter_index is not None
            and (type(g) is np.ndarray or type(g) is BandedCotangent)
            and _scatter_into(cts, rule, args, parents, g, batch)
        ):
            if release:  # the node's saved values are freed now
                nodes[idx] = RELEASED
            continue
        vjps = rule.vjps
        # parents is flat (see tape.Node): one run of four fields per traced argument.
        n_fields = len(parents)
        if n_fields == 4:
            argnum, pos, parent, out = parents
            if pos == fitted and out < 0 and not kwargs:
                # The commonest node of a loop of small steps (np.sin(x), x * 0.5): one
                # traced argument whose cotangent fits, one output, no keywords.
                gi = vjps[argnum](g, ans, *args)
                if gi is not None:
                    prev = slots.get(parent)
                    slots[parent] = gi if prev is None else accumulate(parent, prev, gi)
                if release:
                    nodes[idx] = RELEASED
                continue
            runs = (parents,)
        elif n_fields == 8:
            argnum, pos, parent, out, argnum2, pos2, parent2, out2 = parents
            if pos == fitted and pos2 == fitted and out < 0 and out2 < 0 and not kwargs:
                # The same for two traced arguments (x + y, x * y of one shape).
                gi = vjps[argnum](g, ans, *args)
                if gi is not None:
                    prev = slots.get(parent)
                    slots[parent] = gi if prev is None else accumulate(parent, prev, gi)
                gi = vjps[argnum2](g, ans, *args)
                if gi is not None:
                    prev = slots.get(parent2)
                    slots[parent2] = gi if prev is None else accumulate(parent2, prev, gi)
                if release:
                    nodes[idx] = RELEASED
                continue
            runs = (parents[:4], parents[4:])
        else:
            runs = parent_runs(parents)
        seq_cts = None
        for argnum, pos, parent, out in runs:
            if pos < 0:
                if kwargs:  # (name, value) pairs (see tape.Node)
                    gi = vjps[argnum](g, ans, *args, **dict(kwargs))
                elif len(args) == 2:  # most calls: a direct call, no argument tuple to build
                    gi = vjps[argnum](g, ans, args[0], args[1])
                else:
                    gi = vjps[argnum](g, ans, *args)
            else:
                if seq_cts is None:
                    seq_cts = {}
                per_element = seq_cts.get(argnum)
                if per_element is None:
                    per_element = vjps[argnum](g, ans, *args, **dict(kwargs)) if kwargs else vjps[argnum](g, ans, *args)
                    seq_cts[argnum] = per_element
                gi = per_element[pos]
            if gi is None:
                continue
            if pos != fitted:  # FITTED: the recorder knows this cotangent fits (see tape.FITTED)
                target = args[argnum] if pos < 0 else args[argnum][pos]
                # Fast path: a cotangent that already has the target's shape and dtype
                # (builtin dtypes are singletons: ``is`` settles most comparisons).
                try:
                    fits = (gi.shape == target.shape if unbatched else gi.shape == batch + target.shape) and (
                        gi.dtype is target.dtype or gi.dtype == target.dtype
                    )
                except AttributeError:  # a rule returned a Python scalar
                    fits = False
                if not fits:
                    gi = fit_cotangent(gi, target, batch)
            if out < 0:
                prev = slots.get(parent)
                slots[parent] = gi if prev is None else accumulate(parent, prev, gi)
            else:
                cts.add(nodes[parent], out, gi)
        if release:
            nodes[idx] = RELEASED
    if release:
        tape.released = True
    return found
