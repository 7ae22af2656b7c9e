"""First-order ODE sensitivities in plain NumPy: one linear node on the tape instead of a traced chord step.

At first order (one tape reaches the solve) the chord step of
:class:`tapegrad.solvers.integrate.Collocation` is linear in the perturbation of
what is traced: the initial state ``y0`` and the traced leaves of ``args``
(together ``P``).  Its stage values are ``Z_i = Z0_i + S_i dP`` with

    S_i = K_i^{-1} (E S_{i-1}[last] + h_i (A x I) F_P,i),    S_{-1}[last] = dy0/dP,

``K_i = I - h_i (A x F_y,i)`` the step's plain matrix, ``E`` the stages' copy of the
state and ``F_y``, ``F_P`` the right-hand side's derivatives at the step's nodes.  So
instead of running the user's right-hand side on tracers at every node (thousands
of recorded calls, then their sweep), this module computes ``F_y`` and ``F_P`` at
every node, runs the recursion on plain matrices, and puts the stage values on the
tape as ``Z0 + S (P - stop_gradient(P))``: one product whose pullback is ``S^T``.
Values are SciPy's bits (``S`` times an exact zero).

``F_y`` and ``F_P`` at the nodes come from, in order of preference:

* one call of the callback on every node at once, one node per column (SciPy's
  ``vectorized`` convention, :func:`columns_jacobian`), kept only where it is the
  callback's own values and Jacobians at spread nodes; the defect that thins the
  grid uses the same column-wise values (:func:`plain_columns`);
* one recording of the callback per solve on a chunk of nodes, replayed chunk by
  chunk (:class:`ArgsJacobian`, :mod:`tapegrad.reuse` with its guards: a branch
  that goes another way records again).  With plain ``args`` it gives ``F_y`` alone:
  the Jacobians of the traced chord step (``integrate._jacobians``).

It applies only where that is the whole story: one tape level, a right-hand side
whose traced inputs are its state and ``args`` (one that closes over tracers is
refused by the recording, and the traced chord step runs as before), real
floating-point traced leaves.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

import numpy as np

from ..api import jacobian, stop_gradient, vjp
from ..dispatch import primitive
from ..registry import CONSTANT_ARG, defvjp
from ..reuse import reusable
from ..tree import flatten, unflatten
from ._core import as_array, levels_of, strip_tree

__all__ = ["ArgsJacobian", "Stages", "LinearStages", "stage_sensitivities", "columns_jacobian", "plain_columns", "Recursion",
           "propagate", "traced_columns", "remembered", "PropagatedStages", "StageSolve", "solve_stages", "column_chord",
           "scalar_columns"]

#: Points per replayed chunk: a replay costs little per point, its recording grows with the chunk.
CHUNK_VALUES = 16


#: Columns whose values (and two whose Jacobians) the column-wise evaluation is checked at.
CHECKED_COLUMNS = 16
#: At most about this many values of cotangents per block of columns (n x (n + m) per column).
COLUMN_VALUES = 1 << 22


def _args_with(structure: Any, plain_leaves: list, traced: list, values: Sequence[Any]) -> Any:
    """The callback's ``args`` rebuilt with ``values`` in the traced leaves' places (plain leaves elsewhere)."""
    filled = list(plain_leaves)
    for j, position in enumerate(traced):
        filled[position] = values[j]
    return unflatten(structure, filled)


def _on_columns(fun: Callable, times: Any, y: Any, args: Sequence[Any], tfirst: bool) -> Any:
    """``fun`` on every column of ``y`` (one point each) at once, ``times`` the columns' times (SciPy's ``vectorized``)."""
    return as_array(fun(times, y, *args) if tfirst else fun(y, times, *args))


def _agrees(out: np.ndarray, plain_rhs: Callable, times: np.ndarray, states: np.ndarray) -> bool:
    """Whether the column-wise values ``out`` (n, K) are the callback's, point by point, at spread columns."""
    for k in np.unique(np.linspace(0, times.size - 1, CHECKED_COLUMNS).astype(int)):
        want = np.asarray(strip_tree(plain_rhs(times[k], states[k].copy())), dtype=float)  # a callback may write
        if not np.allclose(out[:, k], want, rtol=1e-12, atol=1e-300, equal_nan=True):
            return False
    return True


def plain_columns(parts: tuple, plain_rhs: Callable, times: np.ndarray, states: np.ndarray) -> np.ndarray:
    """The right-hand side's plain values at every point, ``(K, n)``: one column-wise call where it agrees.

    See :func:`columns_jacobian` for the column-wise call and its checks; otherwise one
    call per point.
    """
    size = times.size
    if parts is not None and size >= 2 * CHECKED_COLUMNS:
        fun, _, args, tfirst = parts
        plain_args = strip_tree(args)
        try:
            with np.errstate(all="ignore"):
                y = np.ascontiguousarray(states.T)
                out = _on_columns(fun, times, y, plain_args, tfirst)
            out = np.asarray(strip_tree(out), dtype=float)
        except Exception:
            out = None
        if out is not None and out.shape == (states.shape[1], size) and _agrees(out, plain_rhs, times, states):
            return out.T
    return np.stack([np.asarray(strip_tree(plain_rhs(t, y)), dtype=float) for t, y in zip(times, states)])


def columns_jacobian(fun: Callable, call: Callable, args: tuple, tfirst: bool, plain_rhs: Callable,
                     times: np.ndarray, states: np.ndarray) -> Optional[tuple]:
    """``(F_y, F_P)`` at every point from ONE call of the callback on all of them, or ``None``.

    SciPy's ``vectorized=True`` convention: ``fun(t, Y)`` with ``Y`` of shape ``(n, K)``
    (one column per point) returns ``(n, K)``; here ``t`` is the row of the points' times
    and each traced leaf of ``args`` gets a trailing axis of ``K`` copies, so one batched
    sweep of ``n`` cotangents gives every column's Jacobian.  Most right-hand sides written
    with ``y[0]``, ``A @ y``, ``th[0] * y[1]`` work that way whether or not they declare
    it.  Those that do not (a branch on ``t``, a reduction over the whole state, a
    reshape) either fail, return another shape, or return other values; so the call is
    kept only if its shape is ``(n, K)``, no traced value of another tape reaches it (a
    closure over tracers), its values equal the point-by-point callback at
    ``CHECKED_COLUMNS`` spread columns, and its Jacobians equal point-by-point
    Jacobians at two of them.  Otherwise ``None``: the recording per point takes over
    (:class:`ArgsJacobian`).
    """
    leaves, structure = flatten(args)
    traced = [k for k, leaf in enumerate(leaves) if levels_of(leaf)]
    plain_leaves = strip_tree(leaves)
    n, size = states.shape[1], times.size
    if size < 2 * CHECKED_COLUMNS or any(np.asarray(plain_leaves[k]).dtype.kind != "f" for k in traced):
        return None  # few points: the recording per point costs no more
    m = sum(int(np.size(plain_leaves[k])) for k in traced)
    # Blocks of columns, so that the batch of cotangents (n x (n + m) per column) stays bounded.
    block = max(2 * CHECKED_COLUMNS, COLUMN_VALUES // max(1, n * (n + m)))
    fys, fps = [], []
    for start in range(0, size, block):
        stop = size if size - start < block + 2 * CHECKED_COLUMNS else start + block  # no tiny last block
        found = _columns_block(fun, call, structure, plain_leaves, traced, tfirst, plain_rhs, times[start:stop],
                               states[start:stop])
        if found is None:
            return None
        fys.append(found[0])
        fps.append(found[1])
        if stop == size:
            break
    return np.concatenate(fys), np.concatenate(fps)


def _columns_block(fun: Callable, call: Callable, structure: Any, plain_leaves: list, traced: list, tfirst: bool,
                   plain_rhs: Callable, times: np.ndarray, states: np.ndarray) -> Optional[tuple]:
    """:func:`columns_jacobian` on one block of columns."""
    n, size = states.shape[1], times.size

    def columns(y: Any, *per_column: Any) -> Any:
        return _on_columns(fun, times, y, _args_with(structure, plain_leaves, traced, per_column), tfirst)

    copies = [np.repeat(np.asarray(plain_leaves[k], dtype=float)[..., None], size, axis=-1) for k in traced]
    try:
        with np.errstate(all="ignore"):
            out, pull = vjp(columns, np.ascontiguousarray(states.T), *copies)
        if levels_of(out) or np.shape(out) != (n, size):
            return None
        seeds = np.zeros((n, n, size))
        seeds[np.arange(n), np.arange(n), :] = 1.0
        cts = strip_tree(pull(seeds))
    except Exception:  # not written for columns: the recording per point
        return None
    fy = np.asarray(cts[0]).transpose(2, 0, 1)  # (K, n, n)
    fp = np.concatenate([np.reshape(np.moveaxis(np.asarray(c), -1, 0), (size, n, -1)) for c in cts[1:]] or
                        [np.zeros((size, n, 0))], axis=-1)
    if not _agrees(np.asarray(out, dtype=float), plain_rhs, times, states):
        return None
    picks = np.unique(np.linspace(0, size - 1, CHECKED_COLUMNS).astype(int))
    for k in picks[[0, len(picks) // 2]]:
        def point(y: Any, *leaf_values: Any, _t: float = times[k]) -> Any:
            a = _args_with(structure, plain_leaves, traced, leaf_values)
            return np.reshape(as_array(call(fun, _t, y, a)), (-1,))

        exact = strip_tree(jacobian(point, argnums=tuple(range(1 + len(traced))))(
            states[k], *[np.asarray(plain_leaves[j], dtype=float) for j in traced]))
        want_p = np.concatenate([np.reshape(e, (n, -1)) for e in exact[1:]] or [np.zeros((n, 0))], axis=-1)
        if not (np.allclose(fy[k], exact[0], rtol=1e-10, atol=1e-12, equal_nan=True) and
                np.allclose(fp[k], want_p, rtol=1e-10, atol=1e-12, equal_nan=True)):
            return None
    return fy, fp


class ArgsJacobian:
    """``(F_y, F_P)`` of a right-hand side at many points, from one recording per solve.

    Parameters
    ----------
    fun : callable
        The user's callback, called as ``rhs(t, y)`` would call it (see ``call``).
    call : callable
        ``call(fun, t, y, args) -> array``: how the right-hand side calls ``fun``.
    args : tuple
        The callback's extra arguments; their traced leaves are differentiated.
    tfirst : bool
        Whether ``fun`` takes ``(t, y)`` (else ``(y, t)``).

    The points' stacked right-hand sides are recorded with the times as replayed inputs
    (:mod:`tapegrad.reuse`: the same guards as ``reuse=True``) on a chunk of
    ``CHUNK_VALUES // n`` points, every chunk padded to that size, and replayed for each
    chunk.  Row ``k`` depends on point ``k``'s state and copy of the traced leaves only,
    so the ``n`` cotangents ``e_i`` at every point at once give every point's Jacobians
    (a batch of ``n`` rows, not ``k * n``).  With plain ``args`` (nothing traced) ``F_P``
    has no columns: ``F_y`` alone, for the traced chord step.

    ``usable`` is False when a traced leaf of ``args`` is not real floating-point.
    """

    def __init__(self, fun: Callable, call: Callable, args: tuple, tfirst: bool = True) -> None:
        self.leaves, self.structure = flatten(args)
        self.traced = [k for k, leaf in enumerate(self.leaves) if levels_of(leaf)]
        self.plain_leaves = strip_tree(self.leaves)
        kinds = [np.asarray(self.plain_leaves[k]).dtype.kind for k in self.traced]
        self.usable = all(kind == "f" for kind in kinds)
        self.sizes = [int(np.size(self.plain_leaves[k])) for k in self.traced]
        self.values = [np.array(self.plain_leaves[k], dtype=float) for k in self.traced] if self.usable else []
        self.seeds: Optional[np.ndarray] = None  # the cotangents e_i at every point of a chunk, made once
        fun_, call_, structure, plain_leaves, traced = fun, call, self.structure, self.plain_leaves, self.traced

        def stacked(x: tuple, ts: Any) -> Any:
            # Point k sees its own copy of each traced leaf, so the batched pullback keeps the
            # points apart (block-diagonal) instead of summing them into the shared parameters.
            ys, per_point = x[0], x[1:]
            rows = []
            for k in range(len(ys)):
                a = _args_with(structure, plain_leaves, traced, [leaf[k] for leaf in per_point])
                rows.append(np.reshape(as_array(call_(fun_, ts[k], ys[k], a)), (-1,)))
            return np.stack(rows)

        self.pull = reusable("pullback", stacked, True, also=(1,), quiet=True)

    @staticmethod
    def chunk(n: int) -> int:
        """Points per replay for ``n`` states."""
        return max(1, CHUNK_VALUES // n)

    def replay(self, times: np.ndarray, states: np.ndarray) -> Optional[tuple]:
        """:meth:`at` on at most :meth:`chunk` points: one replay, or ``None`` once the recording is refused.

        A call that fails (a callback refusing traced times, ``float(t)``) refuses the
        recording from then on; the caller's eager path decides (and raises what it raises).
        """
        if self.pull.reuse_stats.refused is not None:
            return None
        n, keep = states.shape[1], times.size
        chunk = self.chunk(n)
        pad = chunk - keep  # every chunk padded to one size: one recording per solve
        ys = np.concatenate([states, np.repeat(states[-1:], pad, axis=0)])
        ts = np.concatenate([times, np.repeat(times[-1:], pad)])
        x = (ys,) + tuple(np.repeat(leaf[None], chunk, axis=0) for leaf in self.values)
        if self.seeds is None or self.seeds.shape != (n, chunk, n):
            self.seeds = np.zeros((n, chunk, n))
            self.seeds[np.arange(n), :, np.arange(n)] = 1.0
        try:
            rows = strip_tree(self.pull(self.seeds, x, ts))  # per input: (n, chunk, *its shape)
        except Exception:
            self.pull.reuse_stats.refused = "the callback fails on traced times"
            return None
        fy = np.asarray(rows[0])[:, :keep].transpose(1, 0, 2)
        parts = [np.asarray(r)[:, :keep].reshape(n, keep, -1) for r in rows[1:]]
        fp = np.concatenate(parts, axis=-1).transpose(1, 0, 2) if parts else np.zeros((keep, n, 0))
        return fy, fp

    def at(self, times: np.ndarray, states: np.ndarray) -> Optional[tuple]:
        """``(F_y (k, n, n), F_P (k, n, m))`` at ``(times[k], states[k])``, or ``None`` (not replayable).

        ``F_P``'s columns are the traced leaves, flattened, in order.
        """
        chunk = self.chunk(states.shape[1])
        fy: List[np.ndarray] = []
        fp: List[np.ndarray] = []
        for start in range(0, times.size, chunk):
            found = self.replay(times[start:start + chunk], states[start:start + chunk])
            if found is None or self.pull.reuse_stats.refused is not None:  # recorded, but it closes over tracers
                return None
            fy.append(found[0])
            fp.append(found[1])
        return np.concatenate(fy), np.concatenate(fp)

    def traced_leaves(self) -> list:
        """The traced leaves of ``args``, in ``F_P``'s column order."""
        return [self.leaves[k] for k in self.traced]


def _carried(kinv: np.ndarray, q: int, n: int) -> np.ndarray:
    """``K_i^{-1} E`` for every step, ``(N, q n, n)``: how a step's starting state enters its stages."""
    return kinv.reshape(kinv.shape[0], q * n, q, n).sum(axis=2)


def stage_sensitivities(kinv: np.ndarray, h: np.ndarray, a: np.ndarray, fp: np.ndarray,
                        start: np.ndarray) -> np.ndarray:
    """``S`` of the module docstring for every step: ``(N, q, n, m)``.

    Parameters
    ----------
    kinv : (N, q n, q n)
        Each step's ``K_i^{-1}`` (rows and columns ordered stage, component).
    h : (N,)
        Step lengths.
    a : (q, q)
        Radau IIA's matrix.
    fp : (N, q, n, m)
        ``F_P`` at each step's nodes.
    start : (n, m)
        ``dy0 / dP``.
    """
    steps, q, n, m = fp.shape
    forced = h[:, None, None, None] * np.einsum("jl,ilrm->ijrm", a, fp)  # h_i (A x I) F_P,i
    forced = np.matmul(kinv, forced.reshape(steps, q * n, m))  # K^{-1} h (A x I) F_P: all steps at once
    carried = _carried(kinv, q, n)
    last = slice((q - 1) * n, q * n)
    carried_last, forced_last = carried[:, last], forced[:, last]
    states = np.empty((steps, n, m))  # dY_i: the sensitivity of each step's starting state
    y = np.asarray(start, dtype=float)
    for i in range(steps):  # sequential through the states only: n x n times n x m per step
        states[i] = y
        y = carried_last[i] @ y + forced_last[i]
    out = np.matmul(carried, states) + forced
    return out.reshape(steps, q, n, m)


class Stages(Sequence):
    """Per-step traced stage values ``(q, n)`` read off one stacked traced array ``(N, q, n)``, on first use."""

    def __init__(self, stacked: Any) -> None:
        self._all = stacked
        self._steps = np.shape(stacked)[0]
        self._made: dict = {}

    def __len__(self) -> int:
        return self._steps

    def __getitem__(self, i: Any) -> Any:
        if not isinstance(i, (int, np.integer)):
            raise TypeError("the stages take one step index")
        i = int(i) % self._steps
        if i not in self._made:
            self._made[i] = self._all[i]
        return self._made[i]


class LinearStages(Stages):
    """The traced stage values ``Z0_i + S_i dP``: one product puts every stage on the tape.

    ``dP = P - stop_gradient(P)`` with ``P`` the traced inputs flattened into one vector.
    """

    def __init__(self, z0: np.ndarray, sens: np.ndarray, inputs: list) -> None:
        p = np.concatenate([np.reshape(x, (-1,)) for x in inputs]) if len(inputs) > 1 else np.reshape(inputs[0], (-1,))
        dp = p - stop_gradient(p)
        steps, q, n, m = sens.shape
        super().__init__(np.reshape(np.matmul(sens.reshape(steps * q * n, m), dp), (steps, q, n)) + z0)


# ---------------------------------------------------------------------- any traced inputs (closures too)
class Recursion:
    """The plain linear map ``(dF, dy0) -> dZ`` of one collocation (the module docstring's recursion).

    ``dF`` holds the right-hand side's perturbation at every node, ``(n, K)`` with the
    nodes as columns (``K = N q``); ``dy0`` the initial state's, ``(n,)``.  Used by
    :func:`propagate`, whose pullback is :meth:`adjoint`: what makes stages whose traced
    inputs reach the callback any way at all (closures included) cost one column-wise call
    on tracers instead of one traced call per node.
    """

    def __init__(self, kinv: np.ndarray, h: np.ndarray, a: np.ndarray, n: int) -> None:
        steps, q = h.size, a.shape[0]
        self.steps, self.q, self.n = steps, q, n
        self.carried = _carried(kinv, q, n)
        forcing = h[:, None, None] * np.kron(a, np.eye(n))[None]  # h (A x I): (N, q n, q n)
        self.forced = np.matmul(kinv, forcing)  # K^{-1} h (A x I)

    def forward(self, df: np.ndarray, dy0: np.ndarray) -> np.ndarray:
        steps, q, n = self.steps, self.q, self.n
        forced = np.matmul(self.forced, np.reshape(np.transpose(df), (steps, q * n, 1)))[..., 0]
        out = np.empty((steps, q * n))
        y = np.asarray(dy0, dtype=float)
        for i in range(steps):
            out[i] = self.carried[i] @ y + forced[i]
            y = out[i, (q - 1) * n:]
        return out.reshape(steps, q, n)

    def adjoint(self, g: Any) -> tuple:
        """``(dF_bar (..., n, K), dy0_bar (..., n))`` for ``g`` of shape ``(..., N, q, n)`` (traceable NumPy).

        The states' cotangents ``c_i`` flow backwards: ``c_i = t_i (K_i^{-1} E)`` with
        ``t_i = g_i + [0, ..., 0, c_{i+1}]``; the part of ``g_i`` is one batched product for
        all steps, so each step adds one small product.
        """
        steps, q, n = self.steps, self.q, self.n
        batch = np.shape(g)[:-3]
        flat = np.reshape(g, batch + (steps, q * n))
        own = np.matmul(flat[..., None, :], self.carried)[..., 0, :]  # g_i (K^{-1} E): (..., N, n)
        last = self.carried[:, (q - 1) * n:]  # how c_{i+1} reaches c_i: (N, n, n)
        carries = [None] * (steps + 1)
        carries[steps] = np.zeros(batch + (n,))
        for i in range(steps - 1, -1, -1):
            carries[i] = own[..., i, :] + np.matmul(carries[i + 1][..., None, :], last[i])[..., 0, :]
        later = np.stack(carries[1:], axis=-2)  # c_{i+1} for each step: (..., N, n)
        totals = np.concatenate([flat[..., : (q - 1) * n], flat[..., (q - 1) * n:] + later], axis=-1)
        df = np.matmul(totals[..., None, :], self.forced)[..., 0, :]  # M_i^T t_i
        df = np.swapaxes(np.reshape(df, batch + (steps * q, n)), -1, -2)
        return df, carries[0]


def _propagate(df: Any, dy0: Any, recursion: Recursion) -> np.ndarray:
    return recursion.forward(df, dy0)


propagate = primitive(_propagate)
defvjp(
    propagate,
    lambda g, ans, df, dy0, recursion: recursion.adjoint(g)[0],
    lambda g, ans, df, dy0, recursion: recursion.adjoint(g)[1],
    CONSTANT_ARG,
)


def traced_columns(fun: Callable, call: Callable, args: tuple, tfirst: bool, plain_rhs: Callable,
                   times: np.ndarray, states: np.ndarray) -> Optional[Any]:
    """The callback at every node in one column-wise call with the tapes recording: ``(n, K)``, traced.

    Its values must be the callback's at spread nodes (see :func:`columns_jacobian`);
    ``None`` otherwise (or when it fails, or nothing traced comes out).
    """
    try:
        with np.errstate(all="ignore"):
            y = np.ascontiguousarray(states.T)
            out = _on_columns(fun, times, y, args, tfirst)
    except Exception:
        return None
    if not levels_of(out) or np.shape(out) != (states.shape[1], times.size):
        return None
    if not _agrees(np.asarray(strip_tree(out), dtype=float), plain_rhs, times, states):
        return None
    return out


def remembered(plain_rhs: Callable) -> Callable:
    """``plain_rhs`` computing its plain value at each ``(t, y)`` once.

    The closure path checks the column-wise form at the same spread nodes twice: its
    traced values (:func:`traced_columns`), then the call whose pullback gives ``F_y``
    (:func:`columns_jacobian`).  The two column-wise calls differ, so both comparisons
    stay; the point-by-point values they are compared with are the same work.
    """
    seen: dict = {}

    def point(t: Any, y: np.ndarray) -> np.ndarray:
        key = (float(t), np.asarray(y).tobytes())
        if key not in seen:
            seen[key] = np.asarray(strip_tree(plain_rhs(t, y)), dtype=float)
        return seen[key]

    return point


class PropagatedStages(Stages):
    """The traced stage values ``Z0 + propagate(F - stop_gradient(F), y0 - stop_gradient(y0))``."""

    def __init__(self, z0: np.ndarray, recursion: Recursion, f: Any, y0: Any) -> None:
        df = f - stop_gradient(f)
        dy0 = y0 - stop_gradient(y0) if levels_of(y0) else np.zeros(recursion.n)
        super().__init__(propagate(df, dy0, recursion) + z0)


# ---------------------------------------------------------------------- the chord step on columns (every order)
class StageSolve:
    """The plain block lower-bidiagonal solve of one chord step: ``d_i = K_i^{-1} (R_i + E d_{i-1}[last])``.

    :func:`solve_stages` applies it to traced residuals; its pullback
    (:meth:`adjoint`) is traceable NumPy, so chord steps on tracers of several tapes
    (second and higher derivatives) differentiate through it.
    """

    def __init__(self, kinv: np.ndarray, q: int, n: int) -> None:
        steps = kinv.shape[0]
        self.steps, self.q, self.n, self.kinv = steps, q, n, kinv
        self.carried = _carried(kinv, q, n)

    def forward(self, r: np.ndarray) -> np.ndarray:
        steps, q, n = self.steps, self.q, self.n
        own = np.matmul(self.kinv, np.reshape(r, (steps, q * n, 1)))[..., 0]
        out = np.empty((steps, q * n), dtype=np.result_type(own, float))
        carry = np.zeros(n)
        for i in range(steps):
            out[i] = own[i] + self.carried[i] @ carry
            carry = out[i, (q - 1) * n:]
        return out.reshape(steps, q, n)

    def adjoint(self, g: Any) -> Any:
        """``R_bar`` for ``g`` of shape ``(..., N, q, n)``: ``u_i = (g_i + [0, ..., 0, E^T u_{i+1}]) K_i^{-1}``."""
        steps, q, n = self.steps, self.q, self.n
        batch = np.shape(g)[:-3]
        flat = np.reshape(g, batch + (steps, q * n))
        own = np.matmul(flat[..., None, :], self.kinv)[..., 0, :]  # g_i K_i^{-1}
        last = self.kinv[:, (q - 1) * n:, :]  # how the carry enters: (N, n, q n)
        us = [None] * steps
        us[steps - 1] = own[..., steps - 1, :]
        for i in range(steps - 2, -1, -1):
            carry = np.sum(np.reshape(us[i + 1], batch + (q, n)), axis=-2)  # E^T u_{i+1}
            us[i] = own[..., i, :] + np.matmul(carry[..., None, :], last[i])[..., 0, :]
        return np.reshape(np.stack(us, axis=-2), batch + (steps, q, n))


def _solve_stages(r: Any, solver: StageSolve) -> np.ndarray:
    return solver.forward(r)


solve_stages = primitive(_solve_stages)
defvjp(solve_stages, lambda g, ans, r, solver: solver.adjoint(g), CONSTANT_ARG)


def column_chord(parts: tuple, times: np.ndarray, nodes_shape: tuple, z0: np.ndarray, y0: Any, h: np.ndarray,
                 a: np.ndarray, solver: StageSolve, steps: int) -> Optional[Any]:
    """The chord steps with the right-hand side called once per step on every node (columns), or ``None``.

    The same iteration as :meth:`Collocation.solve`, written for all steps at once:
    residuals ``G = Z - Y_start - h (A F(Z))``, then ``Z <- Z - solve_stages(G - stop_gradient(G))``.
    The caller has checked the column-wise form on plain values (:func:`columns_jacobian`).
    """
    fun, _, args, tfirst = parts
    count, q, n = z0.shape
    z: Any = z0
    try:
        for _ in range(max(1, steps)):
            y = np.transpose(np.reshape(z, (count * q, n)))
            if not levels_of(y):  # the plain stages themselves: a callback that writes into y gets a copy
                y = np.ascontiguousarray(y)
            f = _on_columns(fun, times, y, args, tfirst)
            if np.shape(f) != (n, count * q):
                return None
            f = np.reshape(np.transpose(f), (count, q, n))
            start = np.concatenate([np.reshape(y0, (1, n)), z[:-1, -1, :]], axis=0)
            g = z - start[:, None, :] - h[:, None, None] * np.matmul(a, f)
            z = z - solve_stages(g - stop_gradient(g), solver)
    except Exception:  # the per-node chord step decides (and raises what it raises)
        return None
    return z


# ---------------------------------------------------------------------- scalar callbacks (quadrature)
def scalar_columns(fun: Callable, args: tuple, xs: Any, quiet: Callable) -> Optional[Any]:
    """A scalar callback ``fun(x, *args)`` at every node of the 1-D ``xs`` in one call, or ``None``.

    Integrands written with NumPy (``np.exp(-k * x ** 2)``) take an array of nodes as
    they take one; the call is kept only if it returns one value per node, equal to
    the point-by-point callback (on plain numbers, ``quiet``: the tapes paused) at
    ``CHECKED_COLUMNS`` spread nodes.  ``None`` (node by node, then) when it fails, or
    for fewer than ``2 * CHECKED_COLUMNS`` nodes.
    """
    size = int(np.shape(strip_tree(xs))[0])
    if size < 2 * CHECKED_COLUMNS:
        return None
    try:
        with np.errstate(all="ignore"):
            vals = fun(xs, *args)
        if np.shape(vals) != (size,):
            return None
        with quiet():
            got = np.asarray(strip_tree(vals), dtype=float)
            points = np.asarray(strip_tree(xs), dtype=float)
            plain_args = strip_tree(args)
            for k in np.unique(np.linspace(0, size - 1, CHECKED_COLUMNS).astype(int)):
                want = float(np.reshape(np.asarray(strip_tree(fun(np.float64(points[k]), *plain_args)), dtype=float), ()))
                if not np.allclose(got[k], want, rtol=1e-12, atol=1e-300, equal_nan=True):
                    return None
    except Exception:  # not written for arrays of nodes: node by node
        return None
    return vals
