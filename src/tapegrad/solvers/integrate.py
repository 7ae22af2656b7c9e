"""Derivatives through ``scipy.integrate``: ``solve_ivp``, ``odeint``, ``quad`` (and ``dblquad``).

SciPy integrates on plain values; tapegrad then attaches the derivative of the
solution SciPy approximates (to its tolerance), with the user's callback
differentiated by tapegrad, never by differentiating the solver's steps.

ODEs: the sensitivity equations by collocation on SciPy's own steps
--------------------------------------------------------------------
The solution ``y(t; theta)`` of ``y' = f(t, y, theta)``, ``y(t0) = y0`` solves the
collocation equations of the Radau IIA method on any grid:

    Z_ij = Y_i + h_i sum_l a_jl f(t_i + c_l h_i, Z_il),     Y_{i+1} = Z_iq,

and on the grid of SciPy's own accepted steps (plus the output times) those
equations are as accurate as SciPy's solution (Radau IIA with ``q`` stages has
order ``2q - 1``: 7, and 9 for DOP853's grid).  SciPy's dense output gives the
values ``Z0``; the chord step of :mod:`tapegrad.solvers._core` with the exact
linearization (``I - h (A x f_y)`` per step, block lower-triangular, so one
forward substitution: the *forward-sensitivity* system, integrated with the
same L-stable collocation for stiff and non-stiff problems) then carries
derivatives with respect to ``y0``, traced ``args`` and parameters the
right-hand side closes over, at every order (one chord step per tape level).
Reverse mode is the recorded transpose of that substitution: the discrete
adjoint, swept once whatever the number of parameters, so no choice between
forward and adjoint is needed (``tapegrad.jacfwd`` gives the forward flavour).
Output times (``t_eval``, ``t_span``, odeint's ``t``) are differentiated by a
Runge-Kutta step of length ``t - stop_gradient(t)``: ``dy/dt = f``, and higher
derivatives to fourth order.  Terminal and non-terminal events: the event time
solves ``g(t, y(t)) = 0`` and gets its derivative from the same chord step.

Right-hand sides with kinks (``np.maximum``, ``np.abs``, ``np.where`` on a comparison,
``np.clip``, ``np.sign``, ...) are smooth only piecewise: :mod:`tapegrad.solvers._kinks`
finds where their pieces switch along the solution, the collocation is split there
(:class:`Piecewise`, on a trajectory corrected on the pieces by :func:`_corrected`), and
each switch is crossed with the switch time's own derivative.

Quadrature
----------
``quad`` (and ``quad_vec``, on its own intervals and maps) keeps SciPy's value; its derivative is that of a Gauss-Legendre rule
(20 nodes) on the subintervals QUADPACK chose, with the integrand evaluated on
tracers: parameters inside it, and traced limits through the nodes'
positions (Leibniz's rule), including infinite ranges through QUADPACK's own
map ``x = a + (1 - t) / t``.  The rule's value is checked against SciPy's.

That check sees the value's integrand only.  An integrand with a kink that moves
with the parameters, ``np.maximum(t - p, 0) ** 2``, is smooth enough for QUADPACK
to resolve it with few subintervals, but its derivative ``-2 (t - p)_+`` has a kink,
and its second derivative a jump, at ``t = p``, which no Gauss rule across ``t = p``
integrates to the tolerance asked (1e-9 from 20 nodes there, 1e-4 for the Hessian).
So ``quad`` first follows the integrand's kinks (:func:`_follow_kinks`, with the
switches of :mod:`tapegrad.solvers._kinks`): where a kinked call's switch changes sign
between two Gauss nodes, the kink is located and becomes a breakpoint, one that moves
with the traced values (chord steps on the switch, one per tape level) when the switch
does.  Each piece is then smooth, and the rule on the pieces beside a moving
breakpoint differentiates the integral exactly, at every order.  A moving jump (the
integrand itself discontinuous there, ``np.where(t > p, ...)``) is refused with a clear
error: ``points=`` with that point splits the range there.  (``quad_vec`` does not follow
kinks.)
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable, List, Optional

import numpy as np
import scipy.integrate as _int

from ..api import stop_gradient
from ..errors import NonDifferentiableArgumentError
from ..constructors import recording
from ..dispatch import observing_calls
from ..registry import INTERCEPTED, defcomposite, intercepted
from ..tape import Tape
from ..tracer import strip
from ._core import Call, as_array, chord, levels_of, lu_solver, plain_jacobian, refuse, strip_tree, tie
from ._sensitivity import (
    ArgsJacobian,
    LinearStages,
    PropagatedStages,
    Recursion,
    Stages,
    StageSolve,
    column_chord,
    columns_jacobian,
    plain_columns,
    remembered,
    scalar_columns,
    stage_sensitivities,
    traced_columns,
)
from ._kinks import (
    Crossings,
    Probe,
    _below,
    _changes,
    _Collect,
    _flat_values,
    _Restart,
    _root,
    _same,
    _watch,
    flow_step,
    follows,
    locate,
    rebracket,
    relocate,
)

__all__: list = []


# ---------------------------------------------------------------------- collocation
#: At most about this many forward sensitivities (nodes x states x traced inputs) are held.
SENSITIVITY_VALUES = 1 << 22

@functools.lru_cache(maxsize=None)
def radau_iia(q: int) -> tuple:
    """Nodes ``c``, matrix ``A`` and Lagrange coefficients of ``q``-stage Radau IIA collocation."""
    coef = np.zeros(q + 1)
    coef[q], coef[q - 1] = 1.0, -1.0  # P_q - P_{q-1}: zeros are the right Radau nodes
    roots = np.polynomial.legendre.legroots(coef)
    # The roots are real; NumPy >= 2.5 returns them as complex (its eigvals always do).
    c = np.sort((np.real(roots) + 1.0) / 2.0)
    c[-1] = 1.0
    powers = np.arange(q)
    inv_v = np.linalg.inv(c[:, None] ** powers[None, :])  # Lagrange basis coefficients
    a = (c[:, None] ** (powers + 1) / (powers + 1)) @ inv_v
    return c, a, inv_v


def _node_jacobians(rhs: Callable, times: np.ndarray, states: np.ndarray, plain: Optional[Callable] = None) -> tuple:
    """``(f_y at each point, whether they came from the column-wise form)``: see :func:`_jacobians`.

    ``plain`` replaces ``rhs.plain`` as the point-by-point reference of the column-wise check.
    """
    parts = getattr(rhs, "parts", None)
    if parts is not None:
        fun, call, args, tfirst = parts
        found = columns_jacobian(fun, call, strip_tree(args), tfirst, plain or rhs.plain, times, states)
        if found is not None:
            return found[0], True
    return _jacobians(rhs, times, states, columns=False), False


def _jacobians(rhs: Callable, times: np.ndarray, states: np.ndarray, columns: bool = True) -> np.ndarray:
    """``f_y`` at each ``(times[k], states[k])``, ``(k, n, n)``.

    Where the right-hand side's column-wise form agrees with it (:func:`columns_jacobian`),
    from one call on every point.  Otherwise one tapegrad Jacobian per chunk of points: a
    Jacobian call has a fixed cost (a tape, a sweep), and stacking a few dozen points'
    right-hand sides shares it while the batch of cotangents stays small.  Where the
    right-hand side has a plain form, it is recorded once per solve and replayed for
    every chunk (:func:`_replayed_jacobian`).
    """
    if columns:
        return _node_jacobians(rhs, times, states)[0]
    n = states.shape[1]
    replayed = _replayed_jacobian(rhs)
    out = []
    start = 0
    while start < times.size:
        found = None
        if replayed is not None:
            chunk = replayed.chunk(n)
            ts, ys = times[start:start + chunk], states[start:start + chunk]
            found = replayed.replay(ts, ys)
            if found is None:
                replayed = None  # refused: eager from here on
        if found is not None:
            out.append(np.ascontiguousarray(found[0]))  # (k, n, n) in C order, as the eager chunks
        else:
            chunk = max(1, 64 // n)
            ts, ys = times[start:start + chunk], states[start:start + chunk]

            def stacked(y: Any, _ts: np.ndarray = ts) -> Any:
                return np.stack([rhs(t, y[k]) for k, t in enumerate(_ts)])

            jac = plain_jacobian(stacked, ys)  # (k, n, k, n): block diagonal
            out.append(np.stack([jac[k, :, k, :] for k in range(ts.size)]))
        start += ts.size
    return np.concatenate(out)


def _replayed_jacobian(rhs: Callable) -> Optional[ArgsJacobian]:
    """``f_y`` of ``rhs`` recorded once per solve and replayed per chunk, or ``None`` (no plain form).

    :class:`ArgsJacobian` with ``rhs``'s arguments made plain (so ``F_y`` alone), kept on
    ``rhs``: every :func:`_jacobians` of one solve replays one recording.  A chunk it
    cannot replay (a callback that closes over traced values, or refuses traced times)
    gives ``None``, and the caller differentiates it eagerly.
    """
    parts = getattr(rhs, "parts", None)
    if parts is None:
        return None
    replayed = getattr(rhs, "replayed_jacobian", None)
    if replayed is None:
        fun, call, args, tfirst = parts
        replayed = rhs.replayed_jacobian = ArgsJacobian(fun, call, strip_tree(args), tfirst)
    return replayed


def _integrated_basis(theta: Any, inv_v: np.ndarray) -> Any:
    """``b_l(theta) = int_0^theta L_l``, a traced polynomial when ``theta`` is traced."""
    q = inv_v.shape[0]
    return np.stack([theta ** (p + 1) / (p + 1) for p in range(q)]) @ inv_v


class Collocation:
    """The traced ODE solution on a grid: SciPy's values, the solution's derivatives.

    Parameters
    ----------
    name : str
        The SciPy function, for error messages.
    rhs : callable
        ``rhs(t, y)``: the right-hand side as a 1-D array (traced where it closes
        over traced values).
    y0 : array
        The initial state at ``grid[0]`` (traced or plain).
    grid : array
        Increasing or decreasing times: SciPy's steps merged with the output times.
    dense : callable
        SciPy's plain dense solution ``dense(t) -> (n, k)``.
    q : int
        Radau IIA stages.
    """

    def __init__(self, name: str, rhs: Callable, y0: Any, grid: np.ndarray, dense: Callable, q: int,
                 steps: int = 0, quiet: Optional[Callable] = None) -> None:
        self.name, self.rhs, self.y0, self.grid = name, rhs, y0, grid
        self.c, self.a, self.inv_v = radau_iia(q)
        self.h = np.diff(grid)
        nodes = grid[:-1, None] + self.c[None, :] * self.h[:, None]  # (N, q)
        nodes[:, -1] = grid[1:]  # the last node is the step's end, exactly
        self.nodes = nodes
        n = np.size(strip_tree(y0))
        self.n = n
        values = np.asarray(dense(nodes.reshape(-1)), dtype=float).reshape(n, -1).T
        self.z0 = values.reshape(len(self.h), q, n)
        # First order: the sensitivities in plain NumPy, one linear node on the tape (solvers._sensitivity).
        # Made with the tapes recording, so that a right-hand side closing over tracers is seen (and refused).
        self._quiet = quiet
        self.linear = self._first_order() if steps == 1 else None
        if self.linear is None:
            self._chord_inverses()

    def _chord_inverses(self) -> None:
        """``K_i^{-1}`` of every step for the traced chord step (the Jacobians on paused tapes).

        Where the right-hand side's column-wise form agrees with it (:func:`columns_jacobian`),
        the Jacobians come from it and the chord step calls it once per step on every node
        (:func:`column_chord`); otherwise one replayed recording per chunk of nodes.
        """
        q, n = self.c.size, self.n
        with self._quiet() if self._quiet is not None else contextlib.nullcontext():
            jacobians, self.columns = _node_jacobians(self.rhs, self.nodes.reshape(-1), self.z0.reshape(-1, n))
        self.kinv = self._step_inverses(jacobians.reshape(len(self.h), q, n, n))

    def _first_order(self) -> Optional[Callable]:
        """A function making the traced stages at first order (:mod:`._sensitivity`), or ``None``.

        ``None`` means the traced chord step: no plain form of the callback, no column-wise
        or recorded form that agrees with it, or infinite sensitivities (which the chord
        step carries without spoiling SciPy's values).
        """
        parts = getattr(self.rhs, "parts", None)
        if parts is None:
            return None
        q, n = self.c.size, self.n
        times, states = self.nodes.reshape(-1), self.z0.reshape(-1, n)
        args_jacobian = ArgsJacobian(*parts)
        inputs = ([self.y0] if levels_of(self.y0) else []) + args_jacobian.traced_leaves()
        found = None
        # Forward sensitivities hold n x m numbers per node (m: the traced inputs' size); past a
        # bound (many parameters) the adjoint of the recursion, which holds none, is the way.
        m = (n if levels_of(self.y0) else 0) + sum(args_jacobian.sizes)
        if args_jacobian.usable and inputs and times.size * n * m <= SENSITIVITY_VALUES:
            found = columns_jacobian(*parts, self.rhs.plain, times, states) or args_jacobian.at(times, states)
        if found is None:  # traced values reach the callback another way (a closure): propagate them
            return self._propagated(parts, times, states)
        fy, fp = found
        kinv = self._step_inverses(fy.reshape(len(self.h), q, n, n))
        start = np.zeros((n, n + fp.shape[-1])) if levels_of(self.y0) else np.zeros((n, fp.shape[-1]))
        if levels_of(self.y0):
            start[:, :n] = np.eye(n)
            fp = np.concatenate([np.zeros(fp.shape[:-1] + (n,)), fp], axis=-1)
        sens = stage_sensitivities(kinv, self.h, self.a, fp.reshape(len(self.h), q, n, -1), start)
        if not np.all(np.isfinite(sens)):
            return None
        return lambda: LinearStages(self.z0, sens, inputs)

    def _propagated(self, parts: tuple, times: np.ndarray, states: np.ndarray) -> Optional[Callable]:
        """The stages from one column-wise call on tracers and the plain recursion's pullback, or ``None``."""
        q, n = self.c.size, self.n
        plain = remembered(self.rhs.plain)  # both column-wise checks compare with it at the same nodes
        f = traced_columns(*parts, plain, times, states)
        if f is None:
            return None
        with self._quiet() if self._quiet is not None else contextlib.nullcontext():
            fy = _node_jacobians(self.rhs, times, states, plain)[0]
        recursion = Recursion(self._step_inverses(fy.reshape(len(self.h), q, n, n)), self.h, self.a, n)
        if not (np.all(np.isfinite(recursion.forced)) and np.all(np.isfinite(recursion.carried))):
            return None
        return lambda: PropagatedStages(self.z0, recursion, f, self.y0)

    def _step_inverses(self, jacobians: np.ndarray) -> np.ndarray:
        """``K_i^{-1}`` for every step, ``(N, q n, q n)``, from ``f_y`` at the nodes ``(N, q, n, n)``.

        One batched LAPACK call each for the condition numbers and the inverses (the same
        routine per matrix as a loop would call); the first step whose matrix is not finite
        or is singular is named in the error.
        """
        q, n = self.c.size, self.n
        blocks = self.a[None, :, :, None, None] * jacobians[:, None, :, :, :]  # (i, j, l, r, c)
        k = np.eye(q * n) - self.h[:, None, None] * blocks.transpose(0, 1, 3, 2, 4).reshape(-1, q * n, q * n)
        finite = np.all(np.isfinite(k), axis=(1, 2))
        bad = ~finite
        if np.all(finite):
            bad = np.linalg.cond(k) > 1e14
        else:
            bad[finite] = np.linalg.cond(k[finite]) > 1e14
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            raise NonDifferentiableArgumentError(
                f"{self.name}: the Jacobian of the right-hand side is not finite (or the step's "
                f"linearization is singular) near t = {self.grid[i]:.6g}, so the sensitivities of the "
                "solution are undefined there."
            )
        return np.linalg.inv(k)

    def _residuals(self, z: List[Any]) -> List[Any]:
        """``G_i(Z) = Z_i - Y_i - h_i A F(Z_i)`` for each step."""
        out = []
        y = self.y0
        for i, zi in enumerate(z):
            f = np.stack([self.rhs(self.nodes[i, l], zi[l]) for l in range(self.c.size)])
            out.append(zi - y - self.h[i] * (self.a @ f))
            y = zi[-1]
        return out

    def solve(self, steps: int) -> None:
        """``steps`` chord steps: the traced stage values ``self.z`` (one ``(q, n)`` per step)."""
        if self.linear is not None and steps == 1:
            self.z = self.linear()
            return
        if not hasattr(self, "kinv"):
            self._chord_inverses()
        if self.columns:
            solver = StageSolve(self.kinv, self.c.size, self.n)
            stacked = column_chord(self.rhs.parts, self.nodes.reshape(-1), self.nodes.shape, self.z0, self.y0,
                                   self.h, self.a, solver, steps)
            if stacked is not None:
                self.z = Stages(stacked)
                return
        z: List[Any] = list(self.z0)
        for _ in range(max(1, steps)):
            g = self._residuals(z)
            dy: Any = 0.0
            new = []
            for i, gi in enumerate(g):
                r = (gi - stop_gradient(gi)) + dy  # L0 is block lower-bidiagonal: -1 (x) last stage
                d = np.reshape(self.kinv[i] @ np.reshape(r, (-1,)), (self.c.size, self.n))
                new.append(z[i] - d)
                dy = d[-1]
            z = new
        self.z = z

    def at_grid(self, index: int) -> Any:
        """The traced state at ``grid[index]``."""
        return self.y0 if index == 0 else self.z[index - 1][-1]

    def dense(self, t: Any) -> Any:
        """The traced collocation polynomial at times ``t`` (1-D), columns like SciPy's ``sol(t)``."""
        if not hasattr(self, "_f"):
            self._f = {}  # the right-hand side at the nodes of the steps asked for
        tp = np.atleast_1d(np.asarray(strip_tree(t), dtype=float))
        sign = 1.0 if self.grid[-1] >= self.grid[0] else -1.0
        steps = np.clip(np.searchsorted(sign * self.grid, sign * tp, side="right") - 1, 0, len(self.h) - 1)
        t_traced = t if levels_of(t) else tp
        cols = []
        for k, i in enumerate(steps):
            tk = t_traced[k] if np.ndim(t_traced) else t_traced
            theta = (tk - self.grid[i]) / self.h[i]
            if i not in self._f:
                self._f[i] = np.stack([self.rhs(self.nodes[i, l], self.z[i][l]) for l in range(self.c.size)])
            cols.append(self.at_grid(i) + self.h[i] * (_integrated_basis(theta, self.inv_v) @ self._f[i]))
        return np.stack(cols, axis=-1)


class Piecewise:
    """:class:`Collocation` on each smooth piece between the right-hand side's switches.

    The pieces meet at the gaps ``[a, b]`` around the switches (see
    :mod:`tapegrad.solvers._kinks`): each starts from the traced crossing of the one
    before (``crossings``, set by :func:`_kinked_collocation`).  Same interface as
    :class:`Collocation` (``grid``, ``solve``, ``at_grid``, ``dense``), on the whole grid.
    """

    def __init__(self, name: str, rhs: Callable, y0: Any, grid: np.ndarray, dense: Callable, q: int,
                 switches: list) -> None:
        self.name, self.rhs, self.y0, self.grid, self.plain, self.q = name, rhs, y0, grid, dense, q
        self.switches, self.crossings = switches, None
        self.starts, ends = _pieces(grid, switches)
        plain = strip_tree(y0)
        self.pieces = [Collocation(name, rhs, plain, grid[lo:hi], dense, q) for lo, hi in zip(self.starts, ends)]

    def solve(self, steps: int) -> None:
        y = self.y0
        for m, piece in enumerate(self.pieces):
            if m:
                before = self.pieces[m - 1]
                y = self.crossings.cross(m - 1, before.at_grid(before.grid.size - 1))
            piece.y0 = y
            piece.solve(steps)

    def _piece(self, index: int) -> int:
        return int(np.searchsorted(self.starts, index, side="right")) - 1

    def at_grid(self, index: int) -> Any:
        m = self._piece(index)
        return self.pieces[m].at_grid(index - self.starts[m])

    def dense(self, t: Any) -> Any:
        tp = np.atleast_1d(np.asarray(strip_tree(t), dtype=float))
        sign = 1.0 if self.grid[-1] >= self.grid[0] else -1.0
        firsts = sign * self.grid[self.starts]
        which = np.clip(np.searchsorted(firsts, sign * tp, side="right") - 1, 0, len(self.pieces) - 1)
        traced = levels_of(t)
        cols: list = [None] * tp.size
        for m in np.unique(which):
            idx = np.flatnonzero(which == m)
            part = self.pieces[m].dense(np.reshape(t, (-1,))[idx] if traced else tp[idx])
            for k, i in enumerate(idx):
                cols[i] = part[..., k]
        return np.stack(cols, axis=-1)


def _pieces(grid: np.ndarray, switches: list) -> tuple:
    """The first and one-past-last grid index of each smooth piece (the switches' gaps between them)."""
    cuts = []
    for switch in switches:  # grid[cut] = a, grid[cut + 1] = b
        cut = int(np.flatnonzero(grid == switch.a)[0])
        if grid[cut + 1] != switch.b:
            raise AssertionError("tapegrad internal error: a switch's gap holds grid points")
        cuts.append(cut + 1)
    return [0] + cuts, cuts + [grid.size]


def _plain_state(dense: Callable, t: float) -> np.ndarray:
    return np.asarray(dense(np.array([t])), dtype=float)[:, 0]


def _corrected(rhs: Callable, y0: np.ndarray, grid: np.ndarray, dense: Callable, q: int, switches: list,
               probe: Probe, rtol: float, atol: float, known: dict) -> Any:
    """SciPy's solution corrected by a Newton step on the pieces' collocation equations, or ``None``.

    SciPy's dense output inside a step across a kink is one polynomial across the kink,
    and its error estimate does not see it: node values there (and the switch times
    located on them) can be off by hundreds of tolerances, and the derivative, which is
    evaluated there, with them.  A Newton step on the collocation equations of the pieces
    gives their solution (the Newton matrix takes ``f_y`` at each step's end for the
    whole step: exact for piecewise-linear right-hand sides, a contraction otherwise), the
    switches are located again along it, as the pieces meet there.  ``known`` keeps the
    Jacobians by time between calls (a simplified Newton iteration: the next call reuses
    them where the step ends did not move).

    Returns
    -------
    None, when SciPy's values are within tolerance of the pieces' collocation solution
    (or the correction cannot be followed); else ``(trajectory, grid, switches, zones)``:
    the corrected solution as a dense function, the grid with the gaps moved, the moved
    switches and the time ranges they moved across.
    """
    c, a_mat, _ = radau_iia(q)
    direction = 1.0 if grid[-1] >= grid[0] else -1.0
    h = np.diff(grid)
    nodes = grid[:-1, None] + c[None, :] * h[:, None]
    nodes[:, -1] = grid[1:]
    n = y0.size
    z0 = np.asarray(dense(nodes.reshape(-1)), dtype=float).reshape(n, -1).T.reshape(h.size, q, n)
    ends_t = grid[1:].tolist()
    missing = [i for i, t in enumerate(ends_t) if t not in known]
    if missing:
        for i, j in zip(missing, _jacobians(rhs, grid[1:][missing], z0[missing, -1])):
            known[ends_t[i]] = j
    jac = [known[t] for t in ends_t]
    starts, ends = _pieces(grid, switches)
    dy, worst, pieces, taus = np.zeros(n), 0.0, [], []
    f_nodes = plain_columns(getattr(rhs, "parts", None), getattr(rhs, "plain", rhs), nodes.reshape(-1),
                            z0.reshape(-1, n)).reshape(h.size, q, n)
    for m, (lo, hi) in enumerate(zip(starts, ends)):
        y_prev = y0 if m == 0 else _plain_state(dense, grid[lo])
        if m:
            old = switches[m - 1]
            tau = relocate(probe, _Trajectory(pieces[-1:], [], direction, c), old)
            # Within the two pieces it separates (past a step or two, the next Newton step, on the
            # grid moved with it, makes up for the extended polynomial).
            if tau is None or not direction * (tau - grid[starts[m - 1]]) > 0 or \
                    not direction * (grid[hi - 1] - tau) > 0:
                return None
            taus.append(tau)
            # Moving the switch by dt moves the state beyond it by (f_L - f_R) dt.
            f_left = np.asarray(strip(rhs(old.a, _plain_state(dense, old.a))), dtype=float)
            f_right = np.asarray(strip(rhs(old.b, y_prev)), dtype=float)
            dy = dy - (f_left - f_right) * (tau - old.tau)
        first, stages = [], []
        for i in range(lo, hi - 1):
            g = z0[i] - y_prev - h[i] * (a_mat @ f_nodes[i])
            k = np.eye(q * n) - h[i] * np.kron(a_mat, jac[i])
            try:
                d = np.reshape(np.linalg.solve(k, np.reshape(g + dy, (-1,))), (q, n))
            except np.linalg.LinAlgError:
                return None
            first.append(y_prev - dy)
            stages.append(z0[i] - d)
            worst = max(worst, float(np.max(np.abs(d) / (atol + rtol * np.abs(z0[i])))))
            dy, y_prev = d[-1], z0[i][-1]
        pieces.append((grid[lo:hi], np.array(first), np.array(stages)))
    if not worst > 1.0 or not np.all(np.isfinite(dy)):
        return None
    trajectory = _Trajectory(pieces, taus, direction, c)
    moved = [rebracket(probe, trajectory, s, tau, direction) for s, tau in zip(switches, taus)]
    if any(s is None for s in moved):
        return None
    ends = [grid[0]] + [x for s in moved for x in (s.a, s.b)] + [grid[-1]]
    if not np.all(direction * np.diff(ends) > 0):  # the gaps in order, apart, inside the span
        return None
    # The grid with the gaps moved: points that fall inside a new gap go (an output time there too:
    # see _ode_outputs).
    old_edges = {x for s in switches for x in (s.a, s.b)}
    points = np.array([x for x in grid if x not in old_edges])
    for s in moved:
        lo, hi = sorted((s.a, s.b))
        points = points[~((points >= lo) & (points <= hi))]
    grid = _merge_grid(np.concatenate([points[:1], [x for s in moved for x in (s.a, s.b)], points[-1:]]), points)
    zones = [(min(o.a, o.b, s.a, s.b), max(o.a, o.b, s.a, s.b)) for o, s in zip(switches, moved)]
    for t in [t for t in known if any(lo <= t <= hi for lo, hi in zones)]:  # their piece may have changed
        del known[t]
    return trajectory, grid, moved, zones


class _Trajectory:
    """A plain solution made of collocation polynomials, called like SciPy's ``sol(t) -> (n, k)``.

    Parameters
    ----------
    pieces : list of (grid, starts, stages)
        Per piece: its grid, the state at each step's start ``(N, n)`` and the stage
        values ``(N, q, n)``; each step's polynomial interpolates them.
    taus : list of float
        The switch times between consecutive pieces: a time belongs to the piece it
        falls in, each piece's polynomials extended up to its switches.
    """

    def __init__(self, pieces: list, taus: list, direction: float, c: np.ndarray) -> None:
        self.taus, self.direction = direction * np.asarray(taus, dtype=float), direction
        theta = np.concatenate([[0.0], c])
        inverse = np.linalg.inv(theta[:, None] ** np.arange(theta.size)[None, :])
        self.pieces = [(grid, np.einsum("pj,ijn->ipn", inverse, np.concatenate([starts[:, None], stages], axis=1)))
                       for grid, starts, stages in pieces]

    def __call__(self, t: Any) -> np.ndarray:
        t = np.atleast_1d(np.asarray(t, dtype=float))
        which = np.searchsorted(self.taus, self.direction * t, side="right")
        out = np.empty((self.pieces[0][1].shape[-1], t.size))
        for m in np.unique(which):
            idx = np.flatnonzero(which == m)
            grid, coef = self.pieces[m]
            i = np.clip(np.searchsorted(self.direction * grid, self.direction * t[idx], side="right") - 1,
                        0, grid.size - 2)
            theta = (t[idx] - grid[i]) / (grid[i + 1] - grid[i])
            out[:, idx] = np.einsum("kp,kpn->nk", theta[:, None] ** np.arange(coef.shape[1])[None, :], coef[i])
        return out


def _kinked_collocation(name: str, rhs: Callable, probe: Probe, y0: Any, dense: Callable, steps_p: np.ndarray,
                        outputs: np.ndarray, q: int, rtol: float, atol: float, steps: int) -> Any:
    """The collocation of a right-hand side with kinked calls: split where its pieces switch.

    The switches are located along SciPy's solution, which is then corrected on SciPy's
    own steps split there (:func:`_corrected`), and the grid thinned as for a smooth
    right-hand side, by the defect of the corrected solution (SciPy's own, inflated
    around the switches, would let the thinning go too far).  A correction that moves
    the solution across a switch SciPy's did not cross (away from where the switches
    themselves moved) means that SciPy's solution does not follow the pieces it sampled
    (it chatters along a switching surface, or the tolerance is too loose to resolve the
    switches): the switches are then located again along the corrected solution, once.

    Returns ``(grid, colloc)``; ``colloc`` is ``None`` for a grid of one point.
    """
    trajectory, fine = dense, _merge_grid(steps_p, outputs)
    y0p = np.asarray(strip_tree(y0), dtype=float).reshape(-1)
    for attempt in range(2):
        switches, patterns = locate(probe, trajectory, fine, radau_iia(q)[0])
        # The gaps' edges join the grid; points inside a gap leave it, output times too (the state at
        # an output time there is the piece before it, extended: at the switch itself a kinked rule
        # would see a tie, which no piece's derivative is).
        grid = _merge_grid(fine, np.array([x for s in switches for x in (s.a, s.b)]))
        grid = _outside_gaps(grid, switches, keep=[x for s in switches for x in (s.a, s.b)])
        # Newton steps until the last one is within tolerance (from a loose SciPy solution one step
        # does not get there).
        zones: list = []
        strays = None  # a correction that crossed switches SciPy's solution did not
        known: dict = {}
        for _ in range(4):
            better = _corrected(rhs, y0p, grid, trajectory, q, switches, probe, rtol, atol, known)
            if better is None:
                break
            zones += better[3]
            if not follows(probe, better[0], better[1], patterns, zones):
                strays = better[0]
                break
            trajectory, grid, switches = better[:3]
        if strays is None:
            break
        trajectory = strays
    else:
        raise NonDifferentiableArgumentError(
            f"{name}: SciPy's solution does not follow the pieces of the right-hand side that it samples (it "
            "chatters along a switching surface, or the tolerance is too loose to resolve where the pieces "
            "switch), so tapegrad cannot vouch for its derivative. Tighten rtol, or model the motion along "
            "the switching surface explicitly."
        )
    edges = np.array([x for s in switches for x in (s.a, s.b)])
    grid = _choose_grid(rhs, trajectory, grid, np.concatenate([_outside_gaps(outputs, switches), edges]), q,
                        rtol, atol)
    if grid.size < 2:
        return grid, None
    # Linearized at the corrected values.
    colloc = Piecewise(name, rhs, y0, grid, trajectory, q, switches)
    colloc.crossings = Crossings(name, rhs, probe, switches, trajectory, steps)
    return grid, colloc


def _outside_gaps(times: np.ndarray, switches: list, keep: Any = ()) -> np.ndarray:
    """``times`` without those inside a switch's gap (or on its edges, unless in ``keep``)."""
    if not switches or not np.size(times):
        return np.asarray(times)
    a = np.array([s.a for s in switches])
    b = np.array([s.b for s in switches])
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    inside = np.any((times[:, None] >= lo[None, :]) & (times[:, None] <= hi[None, :]), axis=1)
    return times[~inside | np.isin(times, np.asarray(keep, dtype=float))]


def _defect(rhs: Callable, dense: Callable, grid: np.ndarray, q: int, rtol: float, atol: float) -> float:
    """How far SciPy's solution is from solving the collocation equations on ``grid``, in tolerances."""
    parts = getattr(rhs, "parts", None)
    rhs = getattr(rhs, "plain", rhs)  # plain numbers are all it needs: nothing to record on the tape
    c, a, _ = radau_iia(q)
    h = np.diff(grid)
    nodes = grid[:-1, None] + c[None, :] * h[:, None]
    nodes[:, -1] = grid[1:]
    values = np.asarray(dense(np.concatenate([grid[:1], nodes.reshape(-1)])), dtype=float)
    y_start = np.concatenate([values[:, :1], values[:, q::q][:, :-1]], axis=1)  # state at each step's start
    z = values[:, 1:].reshape(-1, h.size, q)  # (n, N, q)
    f = plain_columns(parts, rhs, nodes.reshape(-1), values[:, 1:].T).T
    f = f.reshape(-1, h.size, q)
    g = z - y_start[:, :, None] - h[None, :, None] * np.einsum("jl,nil->nij", a, f)
    return float(np.max(np.abs(g) / (atol + rtol * np.abs(z))))


def _choose_grid(rhs: Callable, dense: Callable, steps: np.ndarray, outputs: np.ndarray, q: int,
                 rtol: float, atol: float) -> np.ndarray:
    """SciPy's steps, thinned while the collocation equations stay as well satisfied.

    Radau IIA's order (7 or 9) is above every SciPy method's, so a low-order method's
    grid is finer than the sensitivities need; each thinning halves the work.
    """
    grid = _merge_grid(steps, outputs)
    if grid.size < 3:
        return grid
    base = max(_defect(rhs, dense, grid, q, rtol, atol), 1.0)
    stride = 2
    while stride < steps.size:
        coarse = _merge_grid(np.concatenate([steps[::stride], steps[-1:]]), outputs)
        if coarse.size == grid.size or _defect(rhs, dense, coarse, q, rtol, atol) > 10.0 * base:
            break
        grid = coarse
        stride *= 2
    return grid


def _merge_grid(steps: np.ndarray, extra: np.ndarray) -> np.ndarray:
    sign = 1.0 if steps[-1] >= steps[0] else -1.0
    merged = sign * np.unique(sign * np.concatenate([steps, extra]))
    lo, hi = sorted((steps[0], steps[-1]))
    return merged[(merged >= lo) & (merged <= hi)]


def _vector_rhs(fun: Callable, args: tuple, tfirst: bool = True, vectorized: bool = False, plain: bool = True) -> Callable:
    def call(f: Callable, t: Any, y: Any, a: tuple) -> Any:
        if vectorized:  # as SciPy calls a vectorized fun for one state: a column
            y = y[:, None]
        return f(t, y, *a) if tfirst else f(y, t, *a)

    def rhs(t: Any, y: Any) -> Any:
        return np.reshape(as_array(call(fun, t, y, args)), (-1,))

    if plain:  # the same with plain arguments: plain evaluations (the grid's defect, the column-wise checks)
        rhs.plain = _vector_rhs(fun, strip_tree(args), tfirst, vectorized, plain=False)
        rhs.parts = (fun, call, args, tfirst)  # for the first-order sensitivities (solvers._sensitivity)
    return rhs


class TracedOdeSolution:
    """SciPy's ``OdeSolution`` whose values carry the solution's derivatives.

    ``sol(t)`` returns SciPy's interpolated value exactly, with the derivatives of
    the collocation polynomial on the same steps (``t`` may be traced).
    """

    def __init__(self, plain: Any, colloc: Collocation) -> None:
        self.plain = plain
        self.colloc = colloc
        self.ts, self.t_min, self.t_max = plain.ts, plain.t_min, plain.t_max

    def __call__(self, t: Any) -> Any:
        value = self.plain(strip_tree(t))
        traced = self.colloc.dense(np.atleast_1d(t) if levels_of(t) else t)
        if np.ndim(strip_tree(t)) == 0:
            traced = traced[..., 0]
        return tie(value, traced)


def _time_flow(rhs: Callable, t_plain: float, y: Any, t: Any, name: str, steps: int) -> Any:
    """The state at traced time ``t`` from the traced state ``y`` at ``t_plain``."""
    if not levels_of(t):
        return y
    if steps > 4:
        raise refuse(
            name, "the time points", "are traced to more than fourth order",
            "Differentiate at most four times with respect to time points.",
        )
    return flow_step(rhs, t_plain, y, t - stop_gradient(t), 4)


def _ode_outputs(call: Call, rhs: Callable, t0: Any, y0: Any, dense: Any, steps_grid: np.ndarray,
                 t_out: Any, method: str, rtol: float, atol: float) -> tuple:
    """Traced states at the output times ``t_out`` (traced or plain), and the collocation."""
    name, steps = call.name, call.steps()
    y0v = y0
    if levels_of(t0):
        # y(t0p) is the flow from (t0, y0) back to t0p.
        y0v = flow_step(rhs, t0, y0, stop_gradient(t0) - t0, 4) if steps <= 4 else None
        if y0v is None:
            raise refuse(name, "the initial time", "is traced to more than fourth order",
                         "Differentiate at most four times with respect to time points.")
    t_plain = np.asarray(strip_tree(t_out), dtype=float).reshape(-1)
    q = 5 if method == "DOP853" else 4
    steps_p = np.asarray(steps_grid, dtype=float)
    with call.quiet():  # plain evaluations: nothing to record
        # A right-hand side with kinked calls (np.maximum, np.abs, comparisons): split the
        # grid where its pieces switch (tapegrad.solvers._kinks); one probe finds none else.
        probe = Probe(rhs)
        kinked = steps_p.size > 1 and probe.finds(steps_p[0], np.asarray(dense(steps_p[:1]), dtype=float)[:, 0])
        if kinked:
            grid, colloc = _kinked_collocation(name, rhs, probe, y0v, dense, steps_p, t_plain, q, rtol, atol, steps)
        else:
            grid = _choose_grid(rhs, dense, steps_p, t_plain, q, rtol, atol)
    if not kinked:
        colloc = Collocation(name, rhs, y0v, grid, dense, q, steps, call.quiet) if grid.size > 1 else None
    if colloc is None:
        return [y0v for _ in t_plain], None
    colloc.solve(steps)
    sign = 1.0 if grid[-1] >= grid[0] else -1.0
    where = np.searchsorted(sign * grid, sign * t_plain)
    states = []
    for k, idx in enumerate(where):
        tk = t_out[k] if levels_of(t_out) else t_plain[k]
        if idx < grid.size and grid[idx] == t_plain[k]:
            state = colloc.at_grid(int(idx))
        else:  # an output time inside a switch's gap (kept off the grid): the piece before it, extended
            state = colloc.dense(t_plain[k:k + 1])[..., 0]
        states.append(_time_flow(rhs, t_plain[k], state, tk, name, steps))
    return states, colloc


def _as_traced_vector(values: Any) -> Any:
    if levels_of(values) and isinstance(values, (list, tuple)):
        return np.stack([v if levels_of(v) else np.asarray(v, dtype=float) for v in values])
    return values


def _solve_ivp(*args: Any, **kwargs: Any) -> Any:
    call = Call(_int.solve_ivp, args, kwargs, ("fun", "events", "options"))
    dense_wanted = bool(call.get("dense_output"))
    # SciPy's built-in methods give the same t, y, events and counts with dense output on
    # (checked in the tests), except DOP853, whose interpolant costs extra evaluations: ask
    # for it up front, so that a traced closure does not need a second run.
    same_counts = call.get("method") in ("RK45", "RK23", "Radau", "BDF", "LSODA")
    out = call.run(dense_output=True) if (call.explicit_levels or same_counts) else call.run()
    if not call.traced:
        if not dense_wanted:
            out.sol = None
        return out
    name = call.name
    if out.status == -1:
        raise NonDifferentiableArgumentError(
            f"{name} failed ({out.message}), so there is no solution to differentiate; its traced "
            "inputs would otherwise get a silently wrong derivative. Fix the integration first "
            "(tolerances, method='Radau' or 'BDF' for stiff problems, a shorter span)."
        )
    plain = out if out.sol is not None else call.run(dense_output=True)
    fun, fargs = call.get("fun"), _args_tuple(call.get("args"))
    y0 = _as_traced_vector(call.get("y0"))
    if np.iscomplexobj(strip_tree(y0)):
        raise refuse(name, "`y0`", "is complex", "Split the state into real and imaginary parts.")
    y0 = np.reshape(y0, (-1,)) if levels_of(y0) else np.asarray(strip_tree(y0), dtype=float).reshape(-1)
    t_span = call.get("t_span")
    t0, t1 = t_span[0], t_span[1]
    t_eval = call.get("t_eval")
    rhs = _vector_rhs(fun, fargs, vectorized=bool(call.get("vectorized")))
    steps = call.steps()
    method = call.get("method") if isinstance(call.get("method"), str) else "custom"
    events = call.get("events")
    event_list = [] if events is None else (list(events) if isinstance(events, (list, tuple)) else [events])

    # Output times: t_eval (as given), else SciPy's steps with t_span's ends traced.
    if t_eval is not None:
        t_out: Any = _as_traced_vector(t_eval) if levels_of(t_eval) else np.asarray(out.t)
        if out.status == 1 and levels_of(t_eval):
            t_out = t_out[: out.t.size]
    else:
        t_out = np.asarray(out.t)
        if levels_of(t0) or (levels_of(t1) and out.status == 0):
            pieces = [np.asarray(out.t[1:-1])]
            first = t0 if levels_of(t0) else np.asarray(out.t[0])
            last = t1 if (levels_of(t1) and out.status == 0) else np.asarray(out.t[-1])
            t_out = np.concatenate([np.reshape(first, (1,)), pieces[0], np.reshape(last, (1,))]) \
                if out.t.size > 1 else np.reshape(first, (1,))
    options = call.get("options") or {}
    rtol, atol = float(options.get("rtol", 1e-3)), np.min(options.get("atol", 1e-6))
    states, colloc = _ode_outputs(call, rhs, t0, y0, plain.sol, plain.sol.ts, t_out, method, rtol, atol)
    if out.status == 1 and event_list and t_eval is None:
        # A terminal event ended the run: the last time is the event's, traced below.
        states[-1], t_end = _event_end(call, rhs, event_list, fargs, out, colloc, steps)
        t_out = np.concatenate([np.reshape(t_out, (-1,))[:-1], np.reshape(t_end, (1,))])
    out.y = tie(out.y, np.stack(states, axis=-1))
    if levels_of(t_out):
        out.t = tie(out.t, np.reshape(t_out, (-1,)))
    if event_list:
        _traced_events(call, rhs, event_list, fargs, out, colloc, steps)
    if dense_wanted and colloc is not None:
        out.sol = TracedOdeSolution(plain.sol, colloc)
    elif not dense_wanted:
        out.sol = None
    return out


def _event_state(colloc: Collocation, rhs: Callable, te: float, dt: Any, steps: int, name: str) -> Any:
    """The traced state at ``te + dt`` (``te`` on the grid or inside a step)."""
    base = colloc.dense(np.array([te]))[..., 0]
    return _time_flow(rhs, te, base, te + dt, name, steps) if levels_of(dt) else base


def _event_time(call: Call, rhs: Callable, g: Callable, fargs: tuple, te: float, colloc: Collocation,
                steps: int) -> Any:
    """The traced time of a zero of ``g(t, y(t))`` at ``te``: chord steps on ``dt``."""
    name = call.name
    ye = np.asarray(strip(colloc.dense(np.array([te]))[..., 0]))
    with call.quiet():
        gy = plain_jacobian(lambda y: np.reshape(g(te, y, *fargs), ()), ye)
        gt = plain_jacobian(lambda t: np.reshape(g(t, ye, *fargs), ()), np.asarray(te))
        fe = np.asarray(strip(rhs(te, ye)))
    slope = float(gt + gy @ fe)
    if slope == 0.0 or not np.isfinite(slope):
        raise NonDifferentiableArgumentError(
            f"{name}: the event function touches zero without crossing it at t = {te:.6g} "
            "(d/dt g(t, y(t)) = 0 there), so the event time is not differentiable."
        )
    dt: Any = np.float64(0.0)
    for _ in range(max(1, steps)):
        y = _event_state(colloc, rhs, te, dt, steps, name)
        r = np.reshape(g(te + dt, y, *fargs), ())
        if not levels_of(r) and not levels_of(dt):
            return np.float64(te)
        dt = dt - (r - stop_gradient(r)) / slope
    return te + dt


def _event_end(call: Call, rhs: Callable, events: list, fargs: tuple, out: Any, colloc: Collocation,
               steps: int) -> tuple:
    """The traced final state and time when a terminal event stopped the run."""
    te = float(out.t[-1])
    for k, g in enumerate(events):
        if out.t_events[k].size and out.t_events[k][-1] == te and getattr(g, "terminal", False):
            t_end = _event_time(call, rhs, g, fargs, te, colloc, steps)
            return _event_state(colloc, rhs, te, t_end - te, steps, call.name), t_end
    return colloc.at_grid(colloc.grid.size - 1), np.float64(te)


def _traced_events(call: Call, rhs: Callable, events: list, fargs: tuple, out: Any, colloc: Collocation,
                   steps: int) -> None:
    for k, g in enumerate(events):
        times, states = [], []
        for te in np.asarray(out.t_events[k], dtype=float):
            t_traced = _event_time(call, rhs, g, fargs, float(te), colloc, steps)
            times.append(t_traced)
            states.append(_event_state(colloc, rhs, float(te), t_traced - te, steps, call.name))
        if times and (levels_of(times) or levels_of(states)):
            out.t_events[k] = tie(out.t_events[k], np.stack(times))
            out.y_events[k] = tie(out.y_events[k], np.stack(states))


defcomposite(intercepted(_int.solve_ivp, route_all=True), _solve_ivp)


def _args_tuple(value: Any) -> tuple:
    if value is None:
        return ()
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _odeint(*args: Any, **kwargs: Any) -> Any:
    call = Call(_int.odeint, args, kwargs, ("func", "Dfun"))
    out = call.run()
    if not call.traced:
        return out
    name = call.name
    func, fargs, tfirst = call.get("func"), _args_tuple(call.get("args")), bool(call.get("tfirst"))
    t = call.get("t")
    t_out = _as_traced_vector(t) if levels_of(t) else np.asarray(strip_tree(t), dtype=float)
    tp = np.asarray(strip_tree(t_out), dtype=float).reshape(-1)
    y0 = _as_traced_vector(call.get("y0"))
    y0 = np.reshape(y0, (-1,)) if levels_of(y0) else np.asarray(strip_tree(y0), dtype=float).reshape(-1)
    rhs = _vector_rhs(func, fargs, tfirst)
    values = out[0] if call.get("full_output") else out
    if tp.size < 2:
        return out
    # odeint keeps no dense solution: SciPy's LSODA through solve_ivp, at odeint's
    # tolerances, gives the steps and the values between them.
    rtol = call.get("rtol") or 1.49012e-8
    atol = call.get("atol") or 1.49012e-8
    from ..interception import original

    plain_rhs = call.callbacks.wrap(lambda s, y: rhs(s, y))
    try:
        dense = original(_int.solve_ivp)(plain_rhs, (tp[0], tp[-1]), strip_tree(y0), method="LSODA",
                                         dense_output=True, rtol=rtol, atol=atol)
    except BaseException as exc:
        call.callbacks.reraise(exc)
        raise
    finally:
        call.callbacks.resume()
    if dense.status != 0:
        raise NonDifferentiableArgumentError(f"{name}: the sensitivity run failed: {dense.message}")
    states, _ = _ode_outputs(call, rhs, t_out[0], y0, dense.sol, dense.sol.ts, t_out, "LSODA",
                             float(rtol), float(np.min(atol)))
    traced = tie(values, np.reshape(np.stack(states), np.shape(values)))
    if call.get("full_output"):
        return (traced,) + tuple(out[1:])
    return traced


defcomposite(intercepted(_int.odeint, route_all=True), _odeint)


# ---------------------------------------------------------------------- quadrature
_GL_X, _GL_W = np.polynomial.legendre.leggauss(20)
_GL_X, _GL_W = (_GL_X + 1.0) / 2.0, _GL_W / 2.0  # on [0, 1]


def _knots(lo_t: Any, hi_t: Any, points: Any) -> tuple:
    """The breakpoints quadrature nodes move with: the limits and the ``points=`` between them.

    A traced breakpoint of a discontinuous integrand moves the pieces on either side of
    it, which gives the jump's term of Leibniz's rule.  Returns traced and plain knots.
    """
    lo_p, hi_p = float(strip(lo_t)), float(strip(hi_t))
    knots_t = [lo_t, hi_t]
    if points is not None:
        if isinstance(points, (list, tuple)):
            points = list(points)
        elif levels_of(points):  # a traced array of points: its elements, still traced
            points = [points[i] for i in range(np.size(strip(points)))]
        else:
            points = list(np.ravel(points))
        inner = [p for p in points if lo_p < float(strip(p)) < hi_p]
        knots_t = [lo_t] + sorted(inner, key=lambda p: float(strip(p))) + [hi_t]
    return knots_t, np.array([float(strip(k)) for k in knots_t])


def _knot_sum(pieces: np.ndarray, knots_t: list, knots_p: np.ndarray, integrand: Callable[[Any], Any],
              at_nodes: Optional[Callable[[Any], Any]] = None) -> Any:
    """Gauss-Legendre on each piece ``[x_l, x_r]`` (in x), ``x = K_j + (K_j+1 - K_j) u`` between knots.

    ``at_nodes(xs)``, when given, evaluates the integrand at a 1-D array of nodes at once
    (``None`` where it cannot: then node by node).
    """
    moving = bool(levels_of(knots_t))
    seg = np.clip(np.searchsorted(knots_p, pieces.mean(axis=1), side="right") - 1, 0, knots_p.size - 2)
    width = knots_p[seg + 1] - knots_p[seg]
    ul, ur = (pieces[:, 0] - knots_p[seg]) / width, (pieces[:, 1] - knots_p[seg]) / width
    terms = []
    for j in np.unique(seg):
        rows = seg == j
        u = (ul[rows, None] + (ur - ul)[rows, None] * _GL_X[None, :]).reshape(-1)
        w = ((ur - ul)[rows, None] * _GL_W[None, :]).reshape(-1)
        k0, k1 = knots_t[j], knots_t[j + 1]
        vals = None
        if at_nodes is not None:
            vals = at_nodes(k0 + (k1 - k0) * u if moving else knots_p[j] + (knots_p[j + 1] - knots_p[j]) * u)
        if vals is None and moving:
            vals = np.stack([integrand(k0 + (k1 - k0) * ui) for ui in u])
        elif vals is None:
            vals = np.stack([integrand(np.float64(knots_p[j] + (knots_p[j + 1] - knots_p[j]) * ui)) for ui in u])
        terms.append((k1 - k0) * np.tensordot(w, vals, axes=1))
    return sum(terms[1:], terms[0])


def _refined(total: Callable[[np.ndarray], Any], intervals: np.ndarray, reproduces: Callable[[Any], bool]) -> tuple:
    """``(total(pieces), True)`` for SciPy's ``intervals`` halved until the traced sum ``reproduces`` SciPy's value.

    At most five tries (every interval halved between two); ``(last sum, False)`` when none reproduces it.
    """
    for _ in range(5):
        traced = total(intervals)
        if reproduces(traced):
            return traced, True
        mid = intervals.mean(axis=1)
        intervals = np.concatenate([np.stack([intervals[:, 0], mid], 1), np.stack([mid, intervals[:, 1]], 1)])
    return traced, False


class _Integrand:
    """quad's integrand in the variable of QUADPACK's intervals, times that variable's weight.

    On a finite range the variable is ``x`` itself; on an infinite one it is QUADPACK's
    ``t`` in ``(0, 1]``, ``x = bound +- (1 - t) / t`` with weight ``1 / t**2`` (both
    signs summed on the whole line).  A call takes one node (plain or traced);
    :meth:`columns` every node of a 1-D array at once where the integrand allows
    (:func:`scalar_columns`), :meth:`vector` the same call unchecked (for probes).
    """

    def __init__(self, func: Callable, fargs: tuple, quiet: Callable, lo_t: Any, hi_t: Any) -> None:
        self.func, self.fargs, self.quiet = func, fargs, quiet
        self.lo_t, self.hi_t = lo_t, hi_t
        lo_p, hi_p = float(strip(lo_t)), float(strip(hi_t))
        self.whole = np.isinf(lo_p) and np.isinf(hi_p)
        self.upper = np.isinf(hi_p) and not self.whole  # [lo, inf)
        self.lower = np.isinf(lo_p) and not self.whole  # (-inf, hi]
        self.finite = not (self.whole or self.upper or self.lower)

    def _at(self, x: Any) -> Any:
        return np.reshape(self.func(x, *self.fargs), ())

    def __call__(self, v: Any) -> Any:
        if self.finite:
            return self._at(v)
        s = (1.0 - v) / v
        if self.whole:
            vals = self._at(s) + self._at(-s)
        else:
            vals = self._at(self.lo_t + s) if self.upper else self._at(self.hi_t - s)
        return vals / v ** 2

    def _mapped(self, v: Any, at: Callable[[Any], Any]) -> Any:
        if self.finite:
            return at(v)
        s = (1.0 - v) / v
        if self.whole:
            pos, neg = at(s), at(-s)
            return None if pos is None or neg is None else (pos + neg) / v ** 2
        vals = at(self.lo_t + s) if self.upper else at(self.hi_t - s)
        return None if vals is None else vals / v ** 2

    def columns(self, vs: Any) -> Optional[Any]:
        """The weighted integrand at every node of ``vs`` in one call, or ``None`` (node by node, then)."""
        return self._mapped(vs, lambda xs: scalar_columns(self.func, self.fargs, xs, self.quiet))

    def vector(self, vs: Any) -> Any:
        """The same call on every node, unchecked: a probe checks what it finds node by node."""
        return self._mapped(vs, lambda xs: self.func(xs, *self.fargs))


# ---------------------------------------------------------------------- quadrature across kinks
#: The probes' state: a quadrature's integrand has its variable only.
_NO_STATE = np.zeros(0)
#: Where a step between two nodes whose switches may dip through zero and back is sampled.
_DIP_SAMPLES = np.linspace(0.0, 1.0, 10)[1:-1]
#: A breakpoint of QUADPACK's this close to a kink (relative to the kink's segment) only served to
#: resolve the kink: once the kink is a knot it is dropped, so that no piece is a sliver beside it.
_KINK_MARGIN = 1e-3
#: Nodes checked one by one against a probe of all the nodes at once.
_CHECKED_PATTERNS = 4


class _Probing(threading.local):
    #: The scratch variable of the plain probe running now (this thread), or ``None``.
    variable: Any = None


_PROBING = _Probing()


def _no_dense(times: np.ndarray) -> np.ndarray:
    return np.zeros((0, np.size(times)))


def _solver(key: Any) -> bool:
    """Whether ``key`` is a SciPy solver whose rule runs callbacks (``quad`` inside ``dblquad``'s integrand)."""
    try:
        options = INTERCEPTED.get(key)
    except TypeError:  # an unhashable key
        return False
    return options is not None and bool(options[3])


class _QuadCollect(_Collect):
    """:class:`tapegrad.solvers._kinks._Collect`, leaving the calls made inside a nested solver to it.

    ``dblquad``'s outer integrand is an inner ``quad``: the inner integrand's kinks are in
    the inner variable (the inner ``quad`` follows them itself), and its nodes change in
    number from one outer point to the next.
    """

    def __call__(self, key: Any, args: tuple, kwargs: dict, proceed: Callable[[], Any]) -> Any:
        if not self.depth and _solver(key):
            self.depth += 1
            try:
                return proceed()
            finally:
                self.depth -= 1
        return super().__call__(key, args, kwargs, proceed)


class _QuadProbe(Probe):
    """The switches of quad's kinked calls along its variable (:class:`tapegrad.solvers._kinks.Probe`)."""

    def __init__(self, integrand: _Integrand) -> None:
        super().__init__(lambda t, y: integrand(t))
        self.integrand = integrand

    def _run(self, t: float, y: np.ndarray, time_traced: bool) -> list:
        scratch = Tape()
        collect = _QuadCollect(scratch)
        variable = scratch.watch(np.float64(t)) if time_traced else np.float64(t)
        outer, _PROBING.variable = _PROBING.variable, variable if time_traced else None
        try:
            with recording(scratch), observing_calls(collect), np.errstate(all="ignore"):
                self.rhs(variable, y)
        finally:
            _PROBING.variable = outer
        return collect.values

    def at(self, t: float) -> list:
        """The plain switch values of each kinked call at ``t`` (none once the integrand needs a float)."""
        try:
            return self(t, _NO_STATE)
        except _Restart:
            return self(t, _NO_STATE)

    def traced(self, t: Any, y: Any, key: tuple) -> Any:
        call, element = key
        scratch = Tape()
        collect = _QuadCollect(scratch, want=call)
        with recording(scratch), observing_calls(collect):
            self.rhs(_watch(scratch, t), y)
        if len(collect.values) <= call or collect.values[call] is None:
            raise NonDifferentiableArgumentError(
                "scipy.integrate.quad: the integrand made different kinked calls at the same point (they depend on "
                "something other than the integration variable), so tapegrad cannot follow its kinks."
            )
        return _below(collect.values[call][element], scratch)

    def patterns(self, nodes: np.ndarray) -> Optional[list]:
        """The switch values at every node (plain), or ``None`` where the integrand has no kinked call.

        One call on every node where each kinked call gives one value per node and
        spread nodes agree with their own probe; else node by node (a few spread nodes
        first: none of them kinked, none is).
        """
        n = nodes.size
        spread = np.unique(np.linspace(0, n - 1, _CHECKED_PATTERNS).astype(int))
        found = self._vector(nodes)
        if found is not None and not found:
            return None
        if found is not None:
            columns = [[v[k:k + 1] for v in found] for k in range(n)]
            if all(_agree(self.at(float(nodes[k])), columns[k]) for k in spread):
                return columns
        first = {}
        for k in np.unique(np.linspace(0, n - 1, 5).astype(int)):
            first[int(k)] = self.at(float(nodes[k]))
            if not self.time_traced:  # the integrand needs a float: no switch along it shows
                return None
        if not any(first.values()):
            return None
        return [first[k] if k in first else self.at(float(nodes[k])) for k in range(n)]

    def _vector(self, nodes: np.ndarray) -> Optional[list]:
        scratch = Tape()
        collect = _QuadCollect(scratch)
        try:
            with recording(scratch), observing_calls(collect), np.errstate(all="ignore"):
                self.integrand.vector(scratch.watch(np.array(nodes, dtype=float)))
        except Exception:  # not written for arrays of nodes: node by node
            return None
        if any(v.shape != nodes.shape for v in collect.values):
            return None
        return collect.values


def _agree(p: list, q: list) -> bool:
    """Two patterns with the same calls, signs and (to rounding) values."""
    if not _same(p, q):
        return False
    u, v = _flat_values(p)[0], _flat_values(q)[0]
    return bool(np.allclose(u, v, rtol=1e-9, atol=1e-12 * (1.0 + np.max(np.abs(u), initial=0.0))))


def _changed(nodes: np.ndarray, patterns: list) -> np.ndarray:
    """The steps between consecutive nodes where a switch changes sign, or may change and change back.

    The second: the ends agree but a parabola through a neighbouring node dips through
    zero (:func:`tapegrad.solvers._kinks._double_crossings`, here on all steps at once
    when every node's pattern has one structure).
    """
    first = patterns[0]
    if not all(_same_shapes(first, p) for p in patterns):
        return np.array([not _same(p, q) for p, q in zip(patterns[:-1], patterns[1:])], dtype=bool)
    values = np.stack([_flat_values(p)[0] for p in patterns])  # (nodes, switches)
    if values.shape[1] == 0:
        return np.zeros(nodes.size - 1, dtype=bool)
    positive = values > 0
    flagged = np.any(positive[:-1] != positive[1:], axis=1)
    if nodes.size < 3:
        return flagged
    k = np.arange(nodes.size - 1)
    for j in (k - 1, k + 2):
        ok = (j >= 0) & (j < nodes.size)
        jj = np.clip(j, 0, nodes.size - 1)
        t0, t1, t2 = nodes[k, None], nodes[k + 1, None], nodes[jj, None]
        v0, v1, v2 = values[k], values[k + 1], values[jj]
        with np.errstate(all="ignore"):
            d1 = (v1 - v0) / (t1 - t0)
            d2 = ((v2 - v0) / (t2 - t0) - d1) / (t2 - t1)
            tm = 0.5 * (t0 + t1) - d1 / (2 * d2)
            inside = (d2 != 0) & ((tm - t0) * (tm - t1) < 0)
            vm = v0 + d1 * (tm - t0) + d2 * (tm - t0) * (tm - t1)
        dips = inside & ((vm * v0 <= 0) | (np.abs(vm) < 0.1 * np.minimum(np.abs(v0), np.abs(v1))))
        flagged |= ok & np.any(dips, axis=1)
    return flagged


def _same_shapes(p: list, q: list) -> bool:
    return len(p) == len(q) and all(u.shape == v.shape for u, v in zip(p, q))


def _kink_roots(name: str, probe: _QuadProbe, nodes: np.ndarray, patterns: list) -> list:
    """``(x, key)`` of every switch between the nodes: where a kinked call's switch crosses zero."""
    roots = []
    for k in np.flatnonzero(_changed(nodes, patterns)):
        lo, hi = float(nodes[k]), float(nodes[k + 1])
        if _same(patterns[k], patterns[k + 1]):  # a dip: a switch and back between two nodes
            inner = lo + _DIP_SAMPLES * (hi - lo)
            times = np.concatenate([[lo], inner, [hi]])
            samples = [patterns[k]] + [probe.at(float(t)) for t in inner] + [patterns[k + 1]]
        else:
            times, samples = np.array([lo, hi]), [patterns[k], patterns[k + 1]]
        for i in range(1, times.size):
            if _same(samples[i - 1], samples[i]):
                continue
            if not _same_shapes(samples[i - 1], samples[i]) and len(samples[i - 1]) != len(samples[i]):
                raise NonDifferentiableArgumentError(
                    f"{name}: the integrand makes different kinked calls at x = {times[i - 1]:.9g} and "
                    f"x = {times[i]:.9g} (its control flow depends on more than the signs of its comparisons), so "
                    "tapegrad cannot locate its kink there. Pass points=[...] at the integrand's kinks."
                )
            for key in _changes(samples[i - 1], samples[i], (times[i - 1], times[i])):
                roots.append((_switch_root(probe, key, times[i - 1], times[i]), key))
    return sorted(roots, key=lambda r: r[0])


def _switch_root(probe: _QuadProbe, key: tuple, lo: float, hi: float) -> float:
    """Where switch ``key`` crosses zero between ``lo`` and ``hi`` (Brent's method, to a few ulps).

    A switch with a multiple root (``np.maximum((x - p) ** 3, 0)``) takes Brent's method
    more than its default hundred steps: bisection finishes it then.
    """
    try:
        return _root(probe, _no_dense, key, lo, hi)
    except RuntimeError:
        pass
    call, element = key
    sign_lo = probe.at(lo)[call][element] > 0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        if (probe.at(mid)[call][element] > 0) == sign_lo:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _kink_knot(name: str, probe: _QuadProbe, tau: float, key: tuple, steps: int, quiet: Callable) -> Any:
    """The kink at plain ``tau`` as a traced knot: chord steps on its switch ``sigma(x) = 0``.

    ``tau`` comes back plain where the switch does not move with anything traced.
    """
    r = probe.traced(np.float64(tau), _NO_STATE, key)
    if not levels_of(r):
        return tau
    with quiet():
        slope = float(np.reshape(plain_jacobian(lambda d: probe.traced(tau + d, _NO_STATE, key), np.float64(0.0)), ()))
    if not np.isfinite(slope) or slope == 0.0:
        raise NonDifferentiableArgumentError(
            f"{name}: a switch of the integrand crosses zero at x = {tau:.9g} with zero slope (a multiple root), so "
            "tapegrad cannot tell how that kink moves with the traced values. Pass that point in points=[...] "
            "(traced), so that the range is split there."
        )
    delta: Any = -(r - stop_gradient(r)) / slope
    for _ in range(steps - 1):
        r = probe.traced(tau + delta, _NO_STATE, key)
        delta = delta - (r - stop_gradient(r)) / slope
    return tau + delta


def _jumps(probe: _QuadProbe, integrand: _Integrand, tau: float, key: tuple, scale: float, width: float) -> bool:
    """Whether the integrand jumps at the root ``tau`` of switch ``key`` (rather than only kinks there).

    Its values a margin either side of ``tau`` differ by about the jump whatever the
    margin, by about the margin times the change in slope at a kink: compared at
    margins sixteen times apart (at each, the two points probed to straddle the switch).
    """
    call, element = key
    margin = max(1e-12 * width, 1e4 * np.finfo(float).eps * abs(tau))
    gaps = []
    for m in (margin, 16.0 * margin, 256.0 * margin):
        a, b = tau - m, tau + m
        left, right = probe.at(a), probe.at(b)
        if len(left) <= call or len(right) <= call or (left[call][element] > 0) == (right[call][element] > 0):
            continue
        with np.errstate(all="ignore"):
            gaps.append(abs(float(strip(integrand(np.float64(b)))) - float(strip(integrand(np.float64(a))))))
    if len(gaps) < 2 or not np.all(np.isfinite(gaps)):
        return True  # cannot tell: as if it jumped (a moving jump is refused)
    return gaps[0] > 1e-9 * scale and gaps[-1] < 4.0 * gaps[0]


def _follow_kinks(name: str, integrand: _Integrand, pieces: np.ndarray, knots_t: list, knots_p: np.ndarray,
                  steps: int, quiet: Callable) -> tuple:
    """QUADPACK's ``pieces`` and the ``knots`` split at the integrand's kinks: ``(pieces, knots_t, knots_p)``.

    The switches of the integrand's kinked calls (``np.maximum``, ``np.abs``,
    comparisons, ...) are sampled at the Gauss nodes of every piece; where they change
    sign, the kink is located (Brent's method on that switch) and becomes a knot, which
    moves with the traced values (chord steps on the switch, one per tape level) when
    the switch does.  Every piece is then smooth, and the rule on the pieces each side
    of a moving knot differentiates the integral exactly, at every order (Leibniz's
    rule at the knot).  A moving jump (the integrand discontinuous there) is refused:
    ``points=`` with that point splits the range there instead.
    """
    probe = _QuadProbe(integrand)
    order = np.argsort(pieces[:, 0], kind="stable")
    pieces = pieces[order]
    nodes = (pieces[:, :1] + (pieces[:, 1:] - pieces[:, :1]) * _GL_X[None, :]).reshape(-1)
    with quiet():
        patterns = probe.patterns(nodes)
        if patterns is None:
            return pieces, knots_t, knots_p
        roots = _kink_roots(name, probe, nodes, patterns)
        if not roots:
            return pieces, knots_t, knots_p
    scale: List[float] = []  # the integrand's size, for telling a jump from a kink: found once, if needed
    knots_t, span = list(knots_t), float(knots_p[-1] - knots_p[0])
    old_knots = knots_p.copy()
    added: List[float] = []
    done: List[float] = []
    for tau, key in roots:
        if any(abs(tau - d) <= 1e-12 * span for d in done):
            continue  # another call switching at the same point (np.clip's two, a repeated np.maximum)
        done.append(tau)
        near = int(np.argmin(np.abs(knots_p - tau)))
        at_knot = abs(knots_p[near] - tau) <= 1e-12 * span
        if at_knot and (levels_of(knots_t[near]) or near in (0, knots_p.size - 1)):
            continue  # a traced knot of points= already there (or a limit)
        knot = _kink_knot(name, probe, tau, key, steps, quiet)
        if levels_of(knot):
            with quiet():
                if not scale:
                    with np.errstate(all="ignore"):
                        spread = nodes[np.unique(np.linspace(0, nodes.size - 1, 16).astype(int))]
                        sizes = np.abs([float(strip(integrand(np.float64(x)))) for x in spread])
                    scale.append(float(np.max(sizes[np.isfinite(sizes)], initial=0.0)))
                width = float(np.min(np.abs(nodes - tau)))
                jump = _jumps(probe, integrand, tau, key, scale[0], width)
            if jump:
                raise NonDifferentiableArgumentError(
                    f"{name}: the integrand jumps at x = {tau:.9g}, a point that moves with the traced values, and "
                    "tapegrad does not add the jump's term of Leibniz's rule by itself. Pass that point in "
                    "points=[...] (traced), so that the range is split there."
                )
        if at_knot:
            knots_t[near] = knot  # a plain breakpoint of points= that the kink moves
            continue
        slot = int(np.searchsorted(knots_p, tau))
        knots_t.insert(slot, knot)
        knots_p = np.insert(knots_p, slot, tau)
        added.append(tau)
    if not added:
        return pieces, knots_t, knots_p
    breaks = np.unique(pieces.ravel())
    keep = np.ones(breaks.size, dtype=bool)
    for tau in added:
        seg = int(np.clip(np.searchsorted(old_knots, tau) - 1, 0, old_knots.size - 2))
        close = np.abs(breaks - tau) < _KINK_MARGIN * (old_knots[seg + 1] - old_knots[seg])
        keep &= ~close | np.isin(breaks, old_knots)
    breaks = np.unique(np.concatenate([breaks[keep], added]))
    return np.stack([breaks[:-1], breaks[1:]], axis=1), knots_t, knots_p


def _quad(*args: Any, **kwargs: Any) -> Any:
    call = Call(_int.quad, args, kwargs, ("func",))
    out = call.run()
    if not call.traced:
        return out
    if _PROBING.variable is not None:
        # Inside a plain probe of an outer quad's integrand (dblquad): only the values count there,
        # and the probe's variable keeps what follows from this one a traced value of its tape.
        return (out[0] + 0.0 * _PROBING.variable,) + tuple(out[1:])
    name = call.name
    for option in ("weight",):
        if call.get(option) is not None:
            raise refuse(name, f"`{option}=`", "selects QUADPACK's weighted rules, which tapegrad does not "
                         "differentiate", "Multiply the weight into the integrand instead.")
    if call.get("complex_func"):
        raise refuse(name, "`complex_func=True`", "is not supported",
                     "Integrate the real and imaginary parts separately.")
    func, fargs = call.get("func"), _args_tuple(call.get("args"))
    a, b = call.get("a"), call.get("b")
    full = call.get("full_output")
    info = out[2] if full else call.run(full_output=1)[2]
    value, abserr = out[0], out[1]
    last = int(info.get("last", 0)) if isinstance(info, dict) else 0
    if isinstance(info, dict) and last and "alist" not in info:
        raise refuse(name, "`points=` on this range", "leaves no subintervals to follow",
                     "Split the range yourself at the points.")
    ap, bp = float(strip(a)), float(strip(b))
    if ap == bp:
        return (tie(value, 0.0 * (a - b)),) + tuple(out[1:])
    # SciPy integrates over the sorted range and negates: so do we.
    sign, lo_t, hi_t = (-1.0, b, a) if bp < ap else (1.0, a, b)
    integrand = _Integrand(func, fargs, call.quiet, lo_t, hi_t)
    if last == 0:
        intervals = np.array([[0.0, 1.0]]) if not integrand.finite else np.array([[float(strip(lo_t)), float(strip(hi_t))]])
    else:
        intervals = np.stack([info["alist"][:last], info["blist"][:last]], axis=1)
    if integrand.finite:
        knots_t, knots_p = _knots(lo_t, hi_t, call.get("points"))
    else:  # the intervals are in QUADPACK's t in (0, 1]
        knots_t, knots_p = [0.0, 1.0], np.array([0.0, 1.0])
    intervals, knots_t, knots_p = _follow_kinks(name, integrand, intervals, knots_t, knots_p, call.steps(), call.quiet)

    def total(pieces: np.ndarray) -> Any:
        return sign * _knot_sum(pieces, knots_t, knots_p, integrand, integrand.columns)

    target = max(10.0 * float(abserr), 1e-12 * abs(float(value)), 1e-300)
    traced, reproduced = _refined(total, intervals, lambda t: abs(float(strip(t)) - float(value)) <= target)
    if not reproduced:
        raise NonDifferentiableArgumentError(
            f"{name}: tapegrad's quadrature of the derivative could not reproduce SciPy's value "
            f"({float(strip(traced))!r} against {float(value)!r}, error estimate {float(abserr):.3g}), "
            "so it cannot vouch for the derivative. Split the range at the integrand's kinks or "
            "singularities with points= (or several calls)."
        )
    return (tie(value, traced),) + tuple(out[1:])


defcomposite(intercepted(_int.quad, route_all=True), _quad)


def _quad_vec(*args: Any, **kwargs: Any) -> Any:
    call = Call(_int.quad_vec, args, kwargs, ("f", "norm"))
    out = call.run()
    if not call.traced:
        return out
    name = call.name
    f, fargs = call.get("f"), _args_tuple(call.get("args"))
    a, b = call.get("a"), call.get("b")
    info = out[2] if call.get("full_output") else call.run(full_output=True)[2]
    value, err = out[0], out[1]
    ap, bp = float(strip(a)), float(strip(b))
    intervals = np.sort(np.asarray(info.intervals, dtype=float), axis=1)
    finite = np.isfinite(ap) and np.isfinite(bp)
    if not finite and levels_of(call.get("points")):
        raise refuse(name, "`points=` on an infinite range", "are mapped by quad_vec's own transformation",
                     "Split the range at the points into finite pieces and an infinite tail.")
    sign, lo_t, hi_t = (-1.0, b, a) if bp < ap else (1.0, a, b)
    if finite:
        knots_t, knots_p = _knots(lo_t, hi_t, call.get("points"))

    def integrand(x: Any) -> Any:
        return as_array(f(x, *fargs))

    def nodes(pieces: np.ndarray) -> tuple:
        left, right = pieces[:, :1], pieces[:, 1:]
        return (left + (right - left) * _GL_X[None, :]).reshape(-1), ((right - left) * _GL_W[None, :]).reshape(-1)

    def total(pieces: np.ndarray) -> Any:
        if np.isfinite(ap) and np.isfinite(bp):  # quad_vec's intervals are in x
            return sign * _knot_sum(pieces, knots_t, knots_p, integrand)
        u, w = nodes(pieces)  # in quad_vec's own variable t
        if np.isinf(ap) and np.isinf(bp):  # t in [-1, 1], x = (1 - |t|) / t
            vals = [integrand(np.float64((1.0 - abs(t)) / t)) for t in u]
            return (1.0 if bp > ap else -1.0) * np.tensordot(w / u**2, np.stack(vals), axes=1)
        # one infinite end: t in (0, 1], x = start + sgn (1 - t) / t, negated when a is infinite
        start, infinite = (a, bp) if np.isfinite(ap) else (b, ap)
        sgn = -1.0 if infinite < 0 else 1.0
        vals = [integrand(start + sgn * (1.0 - t) / t) for t in u]
        flip = 1.0 if np.isfinite(ap) else -1.0
        return flip * sgn * np.tensordot(w / u**2, np.stack(vals), axes=1)

    value_norm = float(np.linalg.norm(np.ravel(value)))
    target = max(10.0 * float(err), 1e-12 * value_norm, 1e-300)
    traced, reproduced = _refined(
        total, intervals, lambda t: float(np.linalg.norm(np.ravel(strip(t) - value))) <= target
    )
    if not reproduced:
        raise NonDifferentiableArgumentError(
            f"{name}: tapegrad's quadrature of the derivative could not reproduce SciPy's value "
            f"(error estimate {float(err):.3g}), so it cannot vouch for the derivative. Split the "
            "range at the integrand's kinks or singularities with points=."
        )
    return (tie(value, traced),) + tuple(out[1:])


defcomposite(intercepted(_int.quad_vec, route_all=True), _quad_vec)


# ---------------------------------------------------------------------- the ode class
def _ode_integrate(self: Any, *args: Any, **kwargs: Any) -> Any:
    """``scipy.integrate.ode.integrate``: a clear error when a traced value reaches the ODE.

    The class keeps its state between calls in compiled integrators, so tapegrad does
    not differentiate it; ``solve_ivp`` (same integrators: ``method="RK45"``,
    ``"DOP853"``, ``"LSODA"``, ...) does.
    """
    from ..interception import original

    fparams = getattr(self, "f_params", ())
    traced = bool(levels_of((args, kwargs, fparams, getattr(self, "_y", None))))
    if not traced and getattr(self, "f", None) is not None:
        with contextlib.suppress(Exception):  # a probe only: SciPy's own run reports errors
            traced = bool(levels_of(self.f(self.t, np.asarray(self._y), *fparams)))
    if traced:
        raise refuse(
            "scipy.integrate.ode", "its right-hand side", "depends on traced values, and the ode class "
            "keeps its state in compiled integrators between calls",
            "Use scipy.integrate.solve_ivp (the same integrators: method='RK45', 'DOP853', 'LSODA', "
            "'BDF'), which tapegrad differentiates.",
        )
    return original(_int.ode.integrate)(self, *args, **kwargs)


defcomposite(intercepted(_int.ode.integrate, route_all=True), _ode_integrate)


# ---------------------------------------------------------------------- cubature
_GL8_X, _GL8_W = np.polynomial.legendre.leggauss(10)
_GL8_X, _GL8_W = (_GL8_X + 1.0) / 2.0, _GL8_W / 2.0  # on [0, 1]


def _cubature(*args: Any, **kwargs: Any) -> Any:
    call = Call(_int.cubature, args, kwargs, ("f",))
    out = call.run()
    if not call.traced:
        return out
    name = call.name
    f, fargs = call.get("f"), _args_tuple(call.get("args"))
    a, b = call.get("a"), call.get("b")
    ap, bp = np.asarray(strip_tree(a), dtype=float), np.asarray(strip_tree(b), dtype=float)
    if not (np.all(np.isfinite(ap)) and np.all(np.isfinite(bp))):
        raise refuse(name, "an infinite limit", "is mapped by cubature's own transformation, which tapegrad "
                     "does not follow", "Integrate over finite limits (or use quad / quad_vec per dimension).")
    a_t = np.reshape(_as_traced_vector(a), (-1,)) if levels_of(a) else ap.reshape(-1)
    b_t = np.reshape(_as_traced_vector(b), (-1,)) if levels_of(b) else bp.reshape(-1)
    dim = ap.size
    # a tensor-product Gauss-Legendre rule on each region SciPy kept, in u with x = a + (b - a) u
    grid = np.stack(np.meshgrid(*([_GL8_X] * dim), indexing="ij"), axis=-1).reshape(-1, dim)
    weights = np.prod(np.stack(np.meshgrid(*([_GL8_W] * dim), indexing="ij"), axis=-1).reshape(-1, dim), axis=1)
    span = bp.reshape(-1) - ap.reshape(-1)
    total: Any = 0.0
    for region in out.regions:
        lo = (np.asarray(region.a, dtype=float) - ap.reshape(-1)) / span
        hi = (np.asarray(region.b, dtype=float) - ap.reshape(-1)) / span
        u = lo + (hi - lo) * grid  # (nodes, dim)
        x = a_t + (b_t - a_t) * u if levels_of((a_t, b_t)) else ap.reshape(-1) + span * u
        values = as_array(f(x, *fargs))  # cubature's f is vectorized: (nodes, ...) out
        w = weights * np.prod(hi - lo)
        total = total + np.tensordot(w, values, axes=1)
    total = total * np.prod(b_t - a_t)
    if np.max(np.abs(np.asarray(strip(total)) - out.estimate)) > max(10 * np.max(out.error), 1e-10 * np.max(
            np.abs(out.estimate)), 1e-300):
        raise NonDifferentiableArgumentError(
            f"{name}: tapegrad's quadrature of the derivative could not reproduce SciPy's value on SciPy's "
            "regions, so it cannot vouch for the derivative. Split the domain at kinks or singularities "
            "(points=) or tighten rtol."
        )
    out.estimate = tie(out.estimate, total)
    return out


defcomposite(intercepted(_int.cubature, route_all=True), _cubature)


# ---------------------------------------------------------------------- boundary value problems
class TracedBvpSolution:
    """``solve_bvp``'s spline ``sol(x, nu=0)``: SciPy's values with the solution's derivatives.

    SciPy's ``sol`` is the cubic Hermite spline through the mesh values and slopes;
    this one evaluates the same spline from their traced counterparts.
    """

    def __init__(self, plain: Any, mesh: Any, y: Any, yp: Any) -> None:
        self.plain, self.mesh, self.y, self.yp = plain, mesh, y, yp
        self.x = plain.x

    def __call__(self, x: Any, nu: int = 0) -> Any:
        xp = np.asarray(strip_tree(x), dtype=float)
        value = self.plain(xp, nu)
        mesh_p = np.asarray(strip(self.mesh), dtype=float)
        i = np.clip(np.searchsorted(mesh_p, np.atleast_1d(xp), side="right") - 1, 0, mesh_p.size - 2)
        x0, h = self.mesh[i], self.mesh[i + 1] - self.mesh[i]
        s = (np.reshape(x, (-1,)) if levels_of(x) else np.atleast_1d(xp)) - x0
        y0, y1, f0, f1 = self.y[:, i], self.y[:, i + 1], self.yp[:, i], self.yp[:, i + 1]
        slope = (y1 - y0) / h
        t = (f0 + f1 - 2 * slope) / h
        c = [t / h, (slope - f0) / h - t, f0, y0]  # SciPy's create_spline, highest power first
        powers = [3, 2, 1, 0]
        total: Any = 0.0
        for coef, k in zip(c, powers):
            if k >= nu:
                factor = float(np.prod(np.arange(k - nu + 1, k + 1))) if nu else 1.0
                total = total + factor * coef * s ** (k - nu)
        traced = total if np.ndim(xp) else total[:, 0]
        return tie(value, traced)


def _solve_bvp(*args: Any, **kwargs: Any) -> Any:
    call = Call(_int.solve_bvp, args, kwargs, ("fun", "bc", "fun_jac", "bc_jac"))
    out = call.run()
    if not call.traced:
        return out
    name = call.name
    if out.status != 0:
        raise NonDifferentiableArgumentError(
            f"{name} did not converge ({out.message}), so there is no solution to differentiate; its traced "
            "inputs would otherwise get a silently wrong derivative. Fix the solve first (a finer initial "
            "mesh, a better initial guess, max_nodes, tol)."
        )
    if call.get("S") is not None:
        raise refuse(name, "`S=` (a singular term)", "is not supported", "Write the singular term into fun.")
    fun, bc = call.get("fun"), call.get("bc")
    with_p = call.get("p") is not None
    x_in = call.get("x")
    mesh_p = np.asarray(out.x, dtype=float)
    y0 = np.asarray(out.y, dtype=float)
    n, m = y0.shape
    k = np.size(out.p) if with_p else 0
    # The mesh scales with traced end points of the interval (the solution depends on them).
    a_t, b_t = (x_in[0], x_in[-1]) if levels_of(x_in) else (mesh_p[0], mesh_p[-1])
    if levels_of((a_t, b_t)):
        unit = (mesh_p - mesh_p[0]) / (mesh_p[-1] - mesh_p[0])
        mesh: Any = a_t + (b_t - a_t) * unit
    else:
        mesh = mesh_p

    def f(x: Any, y: Any, p: Any) -> Any:
        return as_array(fun(x, y, p) if with_p else fun(x, y))

    def residual(w: Any) -> Any:
        # SciPy's own collocation equations (Lobatto IIIA, cubic spline) and boundary conditions
        y = np.reshape(w[: n * m], (n, m))
        p = w[n * m:] if with_p else None
        h = mesh[1:] - mesh[:-1]
        fy = f(mesh, y, p)
        y_mid = 0.5 * (y[:, 1:] + y[:, :-1]) - 0.125 * h * (fy[:, 1:] - fy[:, :-1])
        f_mid = f(mesh[:-1] + 0.5 * h, y_mid, p)
        col = y[:, 1:] - y[:, :-1] - h / 6 * (fy[:, :-1] + fy[:, 1:] + 4 * f_mid)
        bcv = as_array(bc(y[:, 0], y[:, -1], p) if with_p else bc(y[:, 0], y[:, -1]))
        return np.concatenate([np.reshape(col, (-1,)), np.reshape(bcv, (-1,))])

    w0 = np.concatenate([y0.reshape(-1), np.asarray(out.p, dtype=float).reshape(-1) if with_p else np.zeros(0)])
    with call.quiet():
        jac = plain_jacobian(residual, w0)
    if jac.shape != (w0.size, w0.size):
        raise refuse(name, "the boundary conditions", f"give {jac.shape[0] - n * (m - 1)} equations for "
                     f"{n + k} unknown values", "Give n + k boundary conditions.")
    solve = lu_solver(jac, name, "Jacobian of the collocation system")
    w = chord(residual, w0, solve, call.steps())
    y = np.reshape(w[: n * m], (n, m))
    p = w[n * m:] if with_p else None
    out.y = tie(out.y, y)
    yp = f(mesh, y, p)
    out.yp = tie(out.yp, yp)
    if with_p:
        out.p = tie(out.p, p)
    if levels_of(mesh):
        out.x = tie(out.x, mesh)
    out.sol = TracedBvpSolution(out.sol, mesh, y, yp)
    return out


defcomposite(intercepted(_int.solve_bvp, route_all=True), _solve_bvp)
