"""Right-hand sides with kinks: where an ODE solution changes pieces, and how it crosses.

Why
---
The sensitivities of :mod:`tapegrad.solvers.integrate` come from collocation: one
polynomial per step.  ``np.maximum(0, W @ y + b)``, ``np.abs``, ``np.where(o > 0, o,
0.1 * o)``, ``np.clip``, ``np.sign`` are smooth only piecewise, and a step across a
switch holds a solution whose derivative (or slope, for ``np.sign``) jumps there, which
no polynomial follows: the sensitivities then keep an error of about the jump in
``f_y`` times the step, 1e-3 whatever tolerance SciPy was given.

Where the pieces change
-----------------------
The rule of a piecewise-smooth function names its switches
(:attr:`tapegrad.registry.Rule.switch`: ``a - b`` for ``np.maximum(a, b)``, ``x`` for
``np.abs(x)``, ``a - b`` for ``a > b``; a clip is its maximum and minimum, a where
takes its condition from a comparison).  A :class:`Probe` runs the right-hand side on
tracers of a scratch tape that watches the time and the state, while an observer
(:func:`tapegrad.dispatch.observing_calls`) collects the switch values of every kinked
call made on them, in program order: their signs are the *branch pattern* at a point.
:func:`locate` samples the pattern along SciPy's dense output at SciPy's steps (and at
the collocation nodes of a step whose ends differ, or where a parabola through the
neighbouring samples dips to zero: a switch and back within one step); where it
changes, the switch time is the root of that switch function along the same dense
output (Brent's method, to a few ulps), and the grid gets two points a hair on either
side of it (``a`` and ``b``: the patterns there are checked to be the two pieces',
so that no evaluation sees a tie).  Every collocation step then spans one smooth
piece.  Right-hand sides without kinked calls are not touched: one probe finds none.

SciPy's dense output across a kink is itself one polynomial, with errors its error
estimate does not see; :func:`tapegrad.solvers.integrate._corrected` therefore corrects
the trajectory on the pieces (Newton steps on their collocation equations) and moves
the switches with it (:func:`relocate`, :func:`rebracket`) before linearizing there, and
:func:`follows` checks that the corrected trajectory keeps the patterns SciPy's had.

How the state crosses
---------------------
The switch time ``tau(theta)`` solves ``sigma(tau, y(tau)) = 0`` (``sigma`` the switch
function that crosses zero); its derivatives come from chord steps as for an event.
The state beyond the switch (:meth:`Crossings.cross`) is

    y_b = Phi_R(-delta) (Phi_L(delta) y_a + (y(b) - y(a))),   delta = tau - stop_gradient(tau),

``Phi_L``, ``Phi_R`` Runge-Kutta steps along the left and right pieces (evaluated at
``a`` and at ``b``, so each sees its own piece) of zero length in value: SciPy's values
stay, and the first derivative is the classical jump ``S_b = S_a + (f_L - f_R)
dtau/dtheta``.  One chord step and Euler steps give it exactly; for a Hessian (two
tapes) two chord steps and midpoint steps give the second-order terms of the moving
switch too (Runge-Kutta 4 up to four tapes).  The gap's own width enters at first
order, so its size only costs its square.  A continuous right-hand side (a kink, not
a jump) has ``f_L = f_R`` at the switch, so for a gradient the switch time drops out
and only the gap is crossed.  A discontinuous one whose pieces both push the solution
onto the switching surface (a sliding mode, chattering) has no such crossing: refused.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional

import numpy as np
import scipy.optimize

from ..api import stop_gradient
from ..binding import strip_all
from ..constructors import recording
from ..dispatch import observing_calls
from ..errors import NonDifferentiableArgumentError
from ..registry import RULES, lookup
from ..tape import Tape
from ..tracer import Tracer, strip
from ._core import levels_of, plain_jacobian, tie

__all__ = ["Probe", "Switch", "locate", "relocate", "rebracket", "follows", "Crossings"]

_EPS = float(np.finfo(float).eps)


def _flat(values: Any) -> Any:
    """A switch's values as one flat array (traced or plain); no switch is an empty array."""
    if values is None:
        return np.zeros(0)
    if isinstance(values, (tuple, list)):
        parts = [np.ravel(v) for v in values]
        return np.concatenate(parts) if len(parts) > 1 else parts[0]
    return np.ravel(values)


class _Collect:
    """The observer of one evaluation: the switch values of its kinked calls, in program order.

    A call counts when one of its arguments is a tracer of ``scratch``, the tape that
    watches the time and the state: kinked calls on parameters alone never switch along
    the solution, and counting only these keeps the numbering the same whether the
    parameters' own tapes record or are paused.  The first kinked call met counts, not
    what it runs inside (its replay on a lower tape level's values, a composite's parts).
    """

    def __init__(self, scratch: Any, want: int = -1) -> None:
        self.scratch = scratch
        self.want = want  # -1: every call's switch as plain numbers; k: call k's, traced
        self.values: list = []
        self.depth = 0

    def __call__(self, key: Any, args: tuple, kwargs: dict, proceed: Callable[[], Any]) -> Any:
        if self.depth:
            return proceed()
        rule = RULES.get(key) or lookup(key)
        switch = None if rule is None else rule.switch
        if switch is None or not any(type(a) is Tracer and a._tape is self.scratch for a in args):
            return proceed()
        self.depth += 1
        try:
            out = proceed()
            if self.want < 0:
                with np.errstate(all="ignore"):
                    value = np.asarray(_flat(switch(*strip_all(args), **strip_all(kwargs))), dtype=float)
            elif len(self.values) == self.want:
                value = _flat(switch(*args, **kwargs))
            else:
                value = None
        finally:
            self.depth -= 1
        self.values.append(value)
        return out


def _watch(tape: Any, value: Any) -> Any:
    """``value`` watched on the scratch ``tape``, leaving the tapes of a traced ``value`` as they were."""
    if type(value) is Tracer:
        below, nested = value._tape, value._tape.nested
        watched = tape.watch(value)
        below.nested = nested  # the scratch tape is never swept: no nesting to prepare for
        return watched
    return tape.watch(np.asarray(value, dtype=float))


def _below(value: Any, tape: Any) -> Any:
    """``value`` without the scratch ``tape``'s level (the traced value underneath)."""
    return value._value if type(value) is Tracer and value._tape is tape else value


class _Restart(Exception):
    """The right-hand side cannot take a traced time: look again with plain times."""


class Probe:
    """The switches of a right-hand side's kinked calls at a point.

    Parameters
    ----------
    rhs : callable
        ``rhs(t, y)`` as the collocation calls it.
    """

    def __init__(self, rhs: Callable[[Any, Any], Any]) -> None:
        self.rhs = rhs
        #: Whether the time reaches the right-hand side as a tracer (so that switches in
        #: ``t``, ``np.where(t > 1, ...)``, show); False for code that needs a float time.
        self.time_traced = True

    def finds(self, t: float, y: np.ndarray) -> bool:
        """Whether the right-hand side makes kinked calls on the time or the state at ``(t, y)``."""
        try:
            return bool(self(t, y))
        except _Restart:
            return bool(self(t, y))

    def __call__(self, t: float, y: np.ndarray) -> list:
        """The plain switch values of each kinked call at ``(t, y)`` (a list of 1-D arrays)."""
        try:
            return self._run(t, y, self.time_traced)
        except Exception:
            if not self.time_traced:
                raise
            self._run(t, y, False)  # the right-hand side's own error, if it is not the time's
            self.time_traced = False
            raise _Restart() from None

    def _run(self, t: float, y: np.ndarray, time_traced: bool) -> list:
        scratch = Tape()
        collect = _Collect(scratch)
        with recording(scratch), observing_calls(collect):
            times = scratch.watch(np.float64(t)) if time_traced else np.float64(t)
            self.rhs(times, scratch.watch(np.array(y, dtype=float)))
        return collect.values

    def traced(self, t: Any, y: Any, key: tuple) -> Any:
        """Switch ``key = (call, element)`` at traced ``(t, y)``, with their derivatives."""
        call, element = key
        scratch = Tape()
        collect = _Collect(scratch, want=call)
        with recording(scratch), observing_calls(collect):
            times = _watch(scratch, t) if self.time_traced else t
            self.rhs(times, _watch(scratch, y))
        if len(collect.values) <= call or collect.values[call] is None:
            raise NonDifferentiableArgumentError(
                "the right-hand side made different kinked calls at the same point (its calls depend on "
                "something other than the time and the state), so tapegrad cannot follow its switches."
            )
        return _below(collect.values[call][element], scratch)


def _same(p: list, q: list) -> bool:
    return len(p) == len(q) and all(u.shape == v.shape and np.array_equal(u > 0, v > 0) for u, v in zip(p, q))


def _changes(p: list, q: list, where: tuple) -> list:
    """The switches ``(call, element)`` whose sign differs between patterns ``p`` and ``q``."""
    found = []
    for k, (u, v) in enumerate(zip(p, q)):
        if u.shape != v.shape:
            break
        found += [(k, int(j)) for j in np.flatnonzero((u > 0) != (v > 0))]
    if not found and not _same(p, q):
        raise NonDifferentiableArgumentError(
            f"the right-hand side makes different kinked calls at t = {where[0]:.6g} and t = {where[1]:.6g} "
            "without a switch that tapegrad can locate between them (its control flow depends on something "
            "other than the signs of its comparisons)."
        )
    return found


class Switch:
    """One switch along the solution.

    Attributes
    ----------
    tau : float
        The switch time (on the trajectory it was located on).
    a, b : float
        Grid points just before and just after it (in the direction of integration).
    key : tuple
        ``(call, element)``: which kinked call's switch function crosses zero.
    left, right : list
        The branch patterns at ``a`` and at ``b``.
    rate : float
        About ``d sigma / dt`` there (from the samples).
    """

    __slots__ = ("tau", "a", "b", "key", "left", "right", "rate", "together", "ya", "yb", "jump", "slope")

    def __init__(self, tau: float, a: float, b: float, key: tuple, rate: float) -> None:
        self.tau, self.a, self.b, self.key, self.rate = tau, a, b, key, rate
        self.left = self.right = None
        #: Other switches fall in the same gap (within a hair of this one).
        self.together = False
        self.ya = self.yb = None
        self.jump = False
        self.slope = np.nan


def _state(dense: Callable, t: float) -> np.ndarray:
    return np.asarray(dense(np.array([t])), dtype=float)[:, 0]


def _component(probe: Probe, dense: Callable, key: tuple, t: float) -> float:
    """Switch ``key`` at time ``t`` along ``dense``."""
    call, element = key
    values = probe(t, _state(dense, t))
    if len(values) <= call or values[call].size <= element:
        raise NonDifferentiableArgumentError(
            f"the right-hand side's kinked calls change near t = {t:.6g} in a way tapegrad cannot follow "
            "(its control flow depends on more than the signs of its comparisons)."
        )
    return float(values[call][element])


def _root(probe: Probe, dense: Callable, key: tuple, lo: float, hi: float) -> float:
    """Where switch ``key`` crosses zero between ``lo`` and ``hi``, along the dense output."""
    from ..interception import original

    left, right = sorted((lo, hi))
    xtol = 1e-15 * (right - left) + 1e-300
    return float(original(scipy.optimize.brentq)(lambda t: _component(probe, dense, key, t), left, right,
                                                  xtol=xtol, rtol=4 * _EPS))


def _flat_values(pattern: list) -> tuple:
    """A pattern's switch values as one vector, with its structure (to compare neighbours)."""
    shapes = tuple(v.shape for v in pattern)
    return (np.concatenate(pattern) if pattern else np.zeros(0)), shapes


def _double_crossings(times: np.ndarray, patterns: list) -> np.ndarray:
    """Steps whose ends agree but where a parabola through neighbouring samples dips through zero.

    A switch function that crosses zero and back within one step leaves its ends with
    the same sign; the parabola through three consecutive samples shows the dip when
    the samples resolve the switch function (as SciPy's steps resolve the solution).
    A dip to a tenth of the ends' size also counts, for safety.
    """
    flagged = np.zeros(times.size - 1, dtype=bool)
    flat = [_flat_values(p) for p in patterns]
    for k in range(times.size - 1):
        for j in (k - 1, k + 2):  # the third point: before or after the step
            if j < 0 or j >= times.size:
                continue
            if not (flat[k][1] == flat[k + 1][1] == flat[j][1]):
                continue
            t0, t1, t2 = times[k], times[k + 1], times[j]
            v0, v1, v2 = flat[k][0], flat[k + 1][0], flat[j][0]
            d1 = (v1 - v0) / (t1 - t0)
            d2 = ((v2 - v0) / (t2 - t0) - d1) / (t2 - t1)
            with np.errstate(divide="ignore", invalid="ignore"):
                tm = 0.5 * (t0 + t1) - d1 / (2 * d2)
                inside = (d2 != 0) & ((tm - t0) * (tm - t1) < 0)
                vm = v0 + d1 * (tm - t0) + d2 * (tm - t0) * (tm - t1)
            dips = inside & ((vm * v0 <= 0) | (np.abs(vm) < 0.1 * np.minimum(np.abs(v0), np.abs(v1))))
            if np.any(dips):
                flagged[k] = True
                break
    return flagged


def locate(probe: Probe, dense: Callable, fine: np.ndarray, c: np.ndarray) -> tuple:
    """The switches along the solution, each with its grid points ``a`` and ``b`` either side.

    Parameters
    ----------
    probe : Probe
    dense : callable
        SciPy's plain dense solution.
    fine : array
        SciPy's steps merged with the output times (in the direction of integration).
    c : array
        Collocation nodes in ``(0, 1]``: a step whose pattern changes, or may change and
        change back, is sampled there too.

    Returns
    -------
    switches : list of Switch
    patterns : dict
        The branch pattern at each time of ``fine``.
    """
    for _ in range(2):  # a second look with plain times if the first one needed a float time
        try:
            return _locate(probe, dense, fine, c)
        except _Restart:
            continue
    raise AssertionError("unreachable")  # pragma: no cover


def _locate(probe: Probe, dense: Callable, fine: np.ndarray, c: np.ndarray) -> tuple:
    direction = 1.0 if fine[-1] >= fine[0] else -1.0
    states = np.asarray(dense(fine), dtype=float)
    patterns = [probe(t, states[:, k]) for k, t in enumerate(fine)]
    changed = np.array([not _same(p, q) for p, q in zip(patterns[:-1], patterns[1:])], dtype=bool)
    changed |= _double_crossings(fine, patterns)
    switches: List[Switch] = []
    for k in np.flatnonzero(changed):
        inner = fine[k] + c[:-1] * (fine[k + 1] - fine[k])
        times = np.concatenate([fine[k:k + 1], inner, fine[k + 1:k + 2]])
        inner_states = np.asarray(dense(inner), dtype=float)
        samples = [patterns[k]] + [probe(t, inner_states[:, i]) for i, t in enumerate(inner)] + [patterns[k + 1]]
        for i in range(1, times.size):
            if _same(samples[i - 1], samples[i]):
                continue
            lo, hi = times[i - 1], times[i]
            keys = _changes(samples[i - 1], samples[i], (lo, hi))
            roots = sorted(((_root(probe, dense, key, lo, hi), key) for key in keys), key=lambda r: direction * r[0])
            rates = {key: (samples[i][key[0]][key[1]] - samples[i - 1][key[0]][key[1]]) / (hi - lo) for key in keys}
            switches += _bracket(probe, dense, roots, rates, samples[i - 1], samples[i], lo, hi, direction)
    start, end = fine[0], fine[-1]
    kept: List[Switch] = []
    for s in switches:
        if not (direction * (s.a - start) > 0 and direction * (end - s.b) > 0):
            continue  # at the very start or end: no piece beyond it to cross into
        if kept and direction * (s.a - kept[-1].b) <= 0:  # gaps that overlap: one crossing
            kept[-1].b, kept[-1].right, kept[-1].together = s.b, s.right, True
            continue
        kept.append(s)
    return kept, dict(zip(fine.tolist(), patterns))


def follows(probe: Probe, state: Callable, times: np.ndarray, patterns: dict, zones: list) -> bool:
    """Whether trajectory ``state`` has the same ``patterns`` at ``times`` (outside the ``zones`` switches moved in)."""
    for t in times.tolist():
        if t in patterns and not any(lo <= t <= hi for lo, hi in zones):
            if not _same(probe(t, _state(state, t)), patterns[t]):
                return False
    return True


def _bracket(probe: Probe, dense: Callable, roots: list, rates: dict, left: list, right: list, lo: float, hi: float,
             direction: float) -> List[Switch]:
    """Grid points either side of each root in ``(lo, hi)``, far enough that every evaluation sees the sign.

    The margin starts at a millionth of a millionth of the sampling interval (and ten
    thousand ulps of the time) and grows until the patterns at ``a`` and ``b`` are the
    ones on either side (rounding in the switch function's terms must not flip a sign
    there).
    """
    margin = max(1e-12 * abs(hi - lo), 1e4 * _EPS * max(abs(lo), abs(hi)))
    for _ in range(6):
        out: List[Switch] = []
        for tau, key in roots:
            a, b = tau - direction * margin, tau + direction * margin
            if out and direction * (a - out[-1].b) <= 0:  # two switches at once: one crossing
                out[-1].b, out[-1].together = b, True
                continue
            out.append(Switch(tau, a, b, key, rates[key]))
        before, ok = left, True
        for m, s in enumerate(out):
            s.left, s.right = probe(s.a, _state(dense, s.a)), probe(s.b, _state(dense, s.b))
            after = right if m == len(out) - 1 else s.right
            if not (_same(s.left, before) and _same(s.right, after)) or _same(s.left, s.right):
                ok = False
                break
            before = s.right
        if ok:
            return out
        margin *= 16.0
    raise NonDifferentiableArgumentError(
        f"the right-hand side switches between pieces near t = {roots[0][0]:.9g} in a way tapegrad cannot "
        "separate (several switches within a hair of each other, or a switch function that does not change "
        "sign cleanly), so it cannot vouch for the derivative there."
    )


def relocate(probe: Probe, state: Callable, s: Switch) -> Optional[float]:
    """The time of switch ``s`` along a corrected trajectory ``state`` (secant steps from ``s.a``).

    ``state`` follows the piece before the switch (extended beyond it); ``None`` when
    the secant steps do not settle.
    """
    def sigma(t: float) -> float:
        return _component(probe, state, s.key, t)

    if not np.isfinite(s.rate) or s.rate == 0.0:
        return None
    x0, g0 = s.a, sigma(s.a)
    x1 = x0 - g0 / s.rate
    for _ in range(16):
        g1 = sigma(x1)
        if g1 == 0.0 or g1 == g0 or abs(x1 - x0) <= 4 * _EPS * max(abs(x0), abs(x1)):
            return float(x1) if np.isfinite(x1) else None
        x0, x1, g0 = x1, x1 - g1 * (x1 - x0) / (g1 - g0), g1
    return None


def rebracket(probe: Probe, state: Callable, s: Switch, tau: float, direction: float) -> Optional[Switch]:
    """Switch ``s`` moved to ``tau`` on trajectory ``state``: grid points either side with ``s``'s patterns.

    The margin starts at ``s``'s and grows until the patterns at the new ``a`` and ``b``
    are ``s.left`` and ``s.right``; ``None`` when that fails.
    """
    margin = 0.5 * abs(s.b - s.a)
    for _ in range(6):
        moved = Switch(tau, tau - direction * margin, tau + direction * margin, s.key, s.rate)
        moved.left, moved.right = probe(moved.a, _state(state, moved.a)), probe(moved.b, _state(state, moved.b))
        if _same(moved.left, s.left) and _same(moved.right, s.right):
            return moved
        margin *= 16.0
    return None


def flow_step(rhs: Callable, t: Any, y: Any, h: Any, order: int, f0: Any = None) -> Any:
    """A Runge-Kutta step of Taylor order ``order`` (1, 2 or 4): ``y(t + h)`` along the piece at ``t``.

    ``h`` is zero in value (a traced switch time's offset), so a step exact to order
    ``p`` in ``h`` gives the derivatives of the flow exactly up to order ``p``; ``f0`` is
    ``rhs(t, y)`` when already at hand.
    """
    k1 = rhs(t, y) if f0 is None else f0
    if order == 1:
        return y + h * k1
    if order == 2:  # the midpoint rule
        return y + h * rhs(t + h / 2, y + (h / 2) * k1)
    k2 = rhs(t + h / 2, y + (h / 2) * k1)
    k3 = rhs(t + h / 2, y + (h / 2) * k2)
    k4 = rhs(t + h, y + h * k3)
    return y + (h / 6) * (k1 + 2 * k2 + 2 * k3 + k4)


class Crossings:
    """The crossing of each switch: plain data at SciPy's solution, then the traced state beyond it.

    Parameters
    ----------
    name : str
        The SciPy function, for error messages.
    rhs : callable
        ``rhs(t, y)``.
    probe : Probe
    switches : list of Switch
    dense : callable
        SciPy's plain dense solution.
    steps : int
        Chord steps (tape levels) the derivative needs.
    """

    def __init__(self, name: str, rhs: Callable, probe: Probe, switches: List[Switch], dense: Callable,
                 steps: int) -> None:
        self.name, self.rhs, self.probe, self.switches, self.steps = name, rhs, probe, switches, steps
        for s in switches:  # plain numbers: run inside the call's quiet context
            s.ya, s.yb = _state(dense, s.a), _state(dense, s.b)
            fa = np.asarray(strip(rhs(s.a, s.ya)), dtype=float)
            fb = np.asarray(strip(rhs(s.b, s.yb)), dtype=float)
            # A kink leaves f continuous: over the gap it moves by about margin * |f'|.
            s.jump = bool(np.linalg.norm(fb - fa) > 1e-9 * (np.linalg.norm(fa) + np.linalg.norm(fb)))
            if s.jump or steps > 1:
                s.slope = self._slope(s, s.a, s.ya, fa)
                if not np.isfinite(s.slope) or s.slope == 0.0:
                    raise NonDifferentiableArgumentError(
                        f"{name}: the solution touches a switch of the right-hand side without crossing it at "
                        f"t = {s.tau:.6g}, so the time of the switch is not differentiable there."
                    )
            if s.jump:
                slope_b = self._slope(s, s.b, s.yb, fb)
                if not slope_b * s.slope > 0:
                    raise NonDifferentiableArgumentError(
                        f"{name}: at t = {s.tau:.6g} both pieces of the discontinuous right-hand side push the "
                        "solution onto the surface where they switch (a sliding mode: the solution chatters "
                        "along it), so it has no derivative tapegrad can vouch for. Model the motion on the "
                        "surface explicitly (an event that switches to the sliding dynamics)."
                    )
            if s.together and (s.jump or steps > 1):
                raise NonDifferentiableArgumentError(
                    f"{name}: several pieces of the right-hand side switch at once at t = {s.tau:.6g}, so "
                    "tapegrad cannot tell how the time of the switch moves with the parameters."
                )
            if (s.jump or steps > 1) and steps > 4:
                raise NonDifferentiableArgumentError(
                    f"{name}: the right-hand side switches pieces at t = {s.tau:.6g}; tapegrad follows the "
                    "switch time to fourth order, not further."
                )
            if steps > 1 and not probe.time_traced:
                raise NonDifferentiableArgumentError(
                    f"{name}: the right-hand side switches pieces at t = {s.tau:.6g} and needs the time as a "
                    "float (math functions, float(t)), so tapegrad cannot take the second derivative of the "
                    "switch time. Write the time-dependent terms with NumPy functions."
                )

    def _slope(self, s: Switch, t: float, y: np.ndarray, f: np.ndarray) -> float:
        """``d/dt sigma(t, y(t))`` along the piece at ``t`` (plain)."""
        if self.probe.time_traced:
            slope = plain_jacobian(lambda d: self.probe.traced(t + d, flow_step(self.rhs, t, y, d, 1), s.key),
                                   np.float64(0.0))
            return float(np.reshape(slope, ()))
        # The right-hand side needs a float time: the time derivative by a central difference.
        sy = plain_jacobian(lambda v: self.probe.traced(t, v, s.key), y)
        dt = 1e-6 * max(1.0, abs(t))
        call, element = s.key
        ahead = self.probe(t + dt, y)[call][element]
        behind = self.probe(t - dt, y)[call][element]
        return float(np.reshape(sy, (-1,)) @ f + (ahead - behind) / (2 * dt))

    def cross(self, index: int, ya: Any) -> Any:
        """The traced state at switch ``index``'s ``b`` from the traced state ``ya`` at its ``a``."""
        s, steps = self.switches[index], self.steps
        f_left = self.rhs(s.a, ya)
        if not levels_of(ya) and not levels_of(f_left) and not levels_of(self.probe.traced(s.a, ya, s.key)):
            # Nothing traced reaches the solution here: not the state, not the right-hand side, and
            # not the switch (np.where(t > p, 1.0, 0.0) moves the jump with p, and only that way).
            return s.yb
        # The gap itself, [a, tau] on the left piece and [tau, b] on the right, to first order
        # (its values are SciPy's difference y(b) - y(a)): a gap of width w then costs O(w^2).
        shift = s.yb - s.ya
        if not s.jump and steps == 1:
            # A kink: the sensitivities are continuous across it, the switch time drops out.
            return tie(s.yb, ya + (s.tau - s.a) * f_left + (s.b - s.tau) * self.rhs(s.b, ya + shift))
        order = 1 if steps == 1 else (2 if steps == 2 else 4)
        delta: Any = 0.0
        y = ya
        for k in range(steps):  # chord steps on sigma(a + delta, y(a + delta)) = 0
            if k:
                y = flow_step(self.rhs, s.a, ya, delta, order, f_left)
            t = s.a + delta if self.probe.time_traced else s.a
            r = self.probe.traced(t, y, s.key)
            delta = delta - (r - stop_gradient(r)) / s.slope
        left = flow_step(self.rhs, s.a, ya, delta, order, f_left)
        f_right = self.rhs(s.b, left + shift)
        # left + shift is the state at b + delta (the gap crossed delta later): the step back along
        # the right piece starts there.  From b, a right-hand side that depends on the time (a kink
        # at t = p) would be sampled delta too early: wrong second derivatives.
        start = s.b + delta if self.probe.time_traced else s.b
        right = flow_step(self.rhs, start, left + shift, -delta, order,
                          None if self.probe.time_traced else f_right)
        return tie(s.yb, right - shift + (s.tau - s.a) * f_left + (s.b - s.tau) * f_right)
