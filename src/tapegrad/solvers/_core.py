"""What every solver rule shares: plain callbacks, tape levels, the chord step, ties.

The one mechanism
-----------------
A solver's answer ``z`` is the solution of an equation ``G(z, theta) = 0``: a root
(``G = f``), an optimum (``G = grad f``), an ODE trajectory (the collocation
equations of :mod:`tapegrad.solvers.integrate`).  SciPy finds ``z0`` on plain
values.  tapegrad then runs the *chord* iteration

    z_{k+1} = z_k - L0^{-1} (G(z_k, theta) - stop_gradient(G(z_k, theta)))

with ``L0 = dG/dz`` at ``z0`` (plain numbers) and ``G`` evaluated on traced values:
the user's callback runs on tracers, so parameters it closes over, traced ``args``
and traced data all enter.  Every value of the iteration is exactly ``z0`` (the
subtracted residual is the same number), but each step gains one order of
accuracy in the perturbation of ``theta``: after ``m`` steps the derivatives of
``z_m`` are those of the implicit function ``z(theta)`` defined by
``G(z, theta) = G(z0, theta0)`` up to order ``m``.  ``m`` is the number of tapes
whose tracers reach the call (one for a gradient, two for a Hessian), so the
implicit-function theorem at first order and its higher-order derivatives come
from one piece of code, without ever differentiating the solver's iterations.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import threading
from typing import Any, Callable, Iterable, Iterator, Optional, Set

import numpy as np

from ..api import jacobian, stop_gradient
from ..dispatch import current_observer, observing_calls
from ..errors import NonDifferentiableArgumentError
from ..tracer import Tracer, strip

__all__ = [
    "strip_tree",
    "levels_of",
    "Callbacks",
    "tie",
    "chord",
    "plain_jacobian",
    "as_array",
    "refuse",
    "Call",
    "paused",
    "tapes_of",
    "lu_solver",
]


def strip_tree(obj: Any) -> Any:
    """``obj`` with every tracer (at every level) replaced by its plain value."""
    t = type(obj)
    if t is Tracer:
        return strip(obj)
    if t is list:
        return [strip_tree(o) for o in obj]
    if t is tuple:
        return tuple(strip_tree(o) for o in obj)
    if t is dict:
        return {k: strip_tree(v) for k, v in obj.items()}
    if isinstance(obj, np.ndarray) and obj.dtype == object:
        return np.array([strip_tree(o) for o in obj.ravel()]).reshape(obj.shape)
    return obj


def tapes_of(obj: Any) -> list:
    """The tapes of every tracer in ``obj`` (every level), each once."""
    found: list = []

    def walk(o: Any) -> None:
        t = type(o)
        if t is Tracer:
            while type(o) is Tracer:
                if all(o._tape is not f for f in found):
                    found.append(o._tape)
                o = o._value
        elif t is list or t is tuple:
            for v in o:
                walk(v)
        elif t is dict:
            for v in o.values():
                walk(v)

    walk(obj)
    return found


@contextlib.contextmanager
def paused(tapes: Iterable[Any]) -> Iterator[None]:
    """Compute on these tapes' tracers without recording (plain numbers come out)."""
    stopped = [t for t in tapes if t.recording]
    for t in stopped:
        t.recording = False
    try:
        yield
    finally:
        for t in stopped:
            t.recording = True


def levels_of(obj: Any, into: Optional[Set[int]] = None) -> Set[int]:
    """The tape levels of every tracer in ``obj`` (nested tracers count each level)."""
    levels = set() if into is None else into
    t = type(obj)
    if t is Tracer:
        while type(obj) is Tracer:
            levels.add(obj._tape.level)
            obj = obj._value
    elif t is list or t is tuple:
        for o in obj:
            levels_of(o, levels)
    elif t is dict:
        for o in obj.values():
            levels_of(o, levels)
    elif isinstance(obj, np.ndarray) and obj.dtype == object:
        for o in obj.ravel():
            levels_of(o, levels)
    return levels


class _Inside(threading.local):
    owner: Any = None  # the Callbacks whose wrapper called the code running now (this thread)


_INSIDE = _Inside()


class Callbacks:
    """Wraps the user's callbacks for SciPy's own run: plain values in and out.

    A callback that closes over traced parameters returns a tracer; SciPy's
    compiled code needs a number, so the wrapper hands it the plain value and
    notes the tape levels it saw (that is how a rule finds parameters reached
    through a closure).  An exception raised by a callback is kept and raised
    again by :meth:`reraise` once SciPy returns or fails, so that the user sees
    their own error (or tapegrad's) rather than what SciPy's C code makes of it.
    """

    def __init__(self) -> None:
        self.levels: Set[int] = set()
        self.tapes: list = []
        self.error: Optional[BaseException] = None
        self._paused: list = []
        self.running = False  # SciPy's own run is on (Call.run): only its calls are watched

    def _seen(self, out: Any) -> None:
        levels_of(out, self.levels)
        for tape in tapes_of(out):
            if all(tape is not t for t in self.tapes):
                self.tapes.append(tape)
            # Once a closure is known to be traced, SciPy's further calls need only its
            # numbers: pause its tapes (a paused tape computes without recording) so that
            # thousands of solver steps do not pile nodes onto the user's tape.
            if tape.recording:
                tape.recording = False
                self._paused.append(tape)

    def _reading(self, outer: Any) -> Callable:
        """An observer that notes the traced values a callback computes with, whatever it returns.

        ``np.where(t > p, 1.0, 0.0)`` with a traced ``p`` returns plain numbers, yet the
        solution moves with ``p`` (where the right-hand side jumps): the comparison is
        the callback's only contact with the tape, and it must not go unnoticed (the
        solve would be taken as constant, its derivative silently zero).
        """

        def observer(key: Any, args: Any, kwargs: Any, proceed: Callable) -> Any:
            # Only noted: pausing the tapes here (as _seen does after a call) would leave this very
            # call unrecorded, and a rule's own traced evaluations pass through here too.
            if _INSIDE.owner is self:
                levels_of((args, kwargs), self.levels)
            return proceed() if outer is None else outer(key, args, kwargs, proceed)

        return observer

    def resume(self) -> None:
        """Restart the tapes paused during SciPy's run."""
        while self._paused:
            self._paused.pop().recording = True

    def wrap(self, fun: Any) -> Any:
        if fun is None or not callable(fun):
            return fun

        def plain(*args: Any, **kwargs: Any) -> Any:
            try:
                # The wrapper nearest the user's code owns what it computes with: a solver's own
                # wrapped callback, called by another solver, strips it before that one sees it.
                enclosing, _INSIDE.owner = _INSIDE.owner, self
                try:
                    if self.levels or not self.running:
                        out = fun(*args, **kwargs)
                    else:  # SciPy's run, until a traced value shows: watch what the callback computes with
                        with observing_calls(self._reading(current_observer())):
                            out = fun(*args, **kwargs)
                finally:
                    _INSIDE.owner = enclosing
            except BaseException as exc:
                if self.error is None:
                    self.error = exc
                raise
            if type(out) is Tracer or (type(out) in (tuple, list, dict) and levels_of(out)):
                self._seen(out)
                return strip_tree(out)
            return out

        plain.__name__ = getattr(fun, "__name__", "callback")
        # Options SciPy reads off the callable itself (solve_ivp's event.terminal, .direction).
        for attribute in ("terminal", "direction"):
            if hasattr(fun, attribute):
                setattr(plain, attribute, getattr(fun, attribute))
        plain.__wrapped_callback__ = fun  # type: ignore[attr-defined]
        # SciPy reads the callable's signature (curve_fit counts the fit parameters when
        # p0 is None): inspect.signature follows __wrapped__ to the user's function.
        plain.__wrapped__ = fun  # type: ignore[attr-defined]
        return plain

    @property
    def traced(self) -> bool:
        return bool(self.levels)

    def reraise(self, exc: Optional[BaseException] = None) -> None:
        """Raise the callback's own error if one happened (``exc``: what SciPy raised)."""
        if self.error is not None:
            error, self.error = self.error, None
            raise error.with_traceback(error.__traceback__) from None
        if exc is not None:
            raise exc


def tie(value: Any, traced: Any) -> Any:
    """SciPy's exact ``value``, carrying the derivatives of ``traced`` (same shape).

    ``traced - stop_gradient(traced)`` is an exact zero at every level whose
    derivatives are those of ``traced``; adding it keeps SciPy's bits.
    """
    if not levels_of(traced):
        return value
    value = np.asarray(value)
    return value + (traced - stop_gradient(traced))


def as_array(out: Any) -> Any:
    """A callback's output as one array: a list of traced and plain numbers is stacked."""
    if isinstance(out, (list, tuple)):
        parts = [as_array(o) for o in out]
        if levels_of(parts):
            return np.stack([p if levels_of(p) else np.asarray(p, dtype=float) for p in parts])
        return np.asarray(parts, dtype=float)
    return out


def plain_jacobian(fun: Callable[[Any], Any], x: np.ndarray) -> np.ndarray:
    """``d fun / d x`` at plain ``x`` as plain numbers (``fun`` may close over tracers)."""
    return np.asarray(strip(jacobian(fun)(x)))


def chord(residual: Callable[[Any], Any], z0: Any, solve: Callable[[Any], Any], steps: int) -> Any:
    """``steps`` chord steps from plain ``z0``: ``z <- z - solve(G(z) - stop_gradient(G(z)))``.

    ``solve`` applies ``L0^{-1}`` (plain matrix, traced right-hand side).  See the
    module docstring for why the result has SciPy's value and the implicit
    function's derivatives up to order ``steps``.
    """
    z = z0
    for _ in range(max(1, steps)):
        r = residual(z)
        if not levels_of(r) and not levels_of(z):
            return z
        z = z - solve(r - stop_gradient(r))
    return z


def lu_solver(matrix: np.ndarray, name: str, what: str) -> Callable[[Any], Any]:
    """A ``solve(b)`` for a plain square matrix, refusing a singular one with a clear error."""
    matrix = np.atleast_2d(np.asarray(matrix, dtype=np.float64))
    n = matrix.shape[0]
    if not np.all(np.isfinite(matrix)):
        raise NonDifferentiableArgumentError(
            f"{name}: the {what} at the solution is not finite, so the derivative of the solution "
            "is undefined there (the implicit function theorem needs it finite and invertible)."
        )
    # The inverse, and from it the 1-norm condition number (an SVD would cost ten times more
    # on the large collocation systems of a boundary value problem).
    try:
        inverse = np.linalg.inv(matrix) if n else matrix
        cond = np.linalg.norm(matrix, 1) * np.linalg.norm(inverse, 1) if n else 1.0
    except np.linalg.LinAlgError:
        inverse, cond = None, np.inf
    if inverse is None or not np.isfinite(cond) or cond > 1e14:
        raise NonDifferentiableArgumentError(
            f"{name}: the {what} at the solution is singular (condition number {cond:.3g}), so the "
            "solution does not depend differentiably on the parameters (the implicit function theorem "
            "needs it invertible). Check that the solution is isolated (a simple root, a strict "
            "minimum), or fix the degenerate directions."
        )

    def solve(b: Any) -> Any:
        return inverse @ b

    return solve


def refuse(name: str, argument: str, reason: str, instead: str) -> NonDifferentiableArgumentError:
    """The error for a traced call a solver rule cannot differentiate (says what to do)."""
    return NonDifferentiableArgumentError(
        f"tapegrad cannot differentiate {name} here: traced values reach it and {argument} {reason}. "
        f"{instead}"
    )


class Call:
    """One call of a SciPy solver, bound to its signature: plain run, traced inputs.

    Parameters
    ----------
    key : callable
        The intercepted SciPy function (its original code is what runs).
    args, kwargs :
        The call as the user made it.
    callbacks : tuple of str
        The parameters that hold the user's callables (wrapped for SciPy's run).
    """

    def __init__(self, key: Any, args: tuple, kwargs: dict, callbacks: tuple) -> None:
        from ..interception import original

        self.name = f"{key.__module__.split('._')[0]}.{key.__name__}"
        self.original = original(key)
        self.signature = inspect.signature(self.original)
        self.raw = (args, kwargs)
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:  # a wrong call: SciPy's own code gives its own error
            bound = None
        self.unbound = bound is None
        if bound is None:
            self.user = self.values = {}
            self.callback_names, self.callbacks = callbacks, Callbacks()
            self.explicit_levels, self.explicit_tapes = set(), []
            return
        self.user = dict(bound.arguments)  # as given (tracers included)
        bound.apply_defaults()
        self.values = dict(bound.arguments)  # with defaults
        self.callback_names = callbacks
        self.callbacks = Callbacks()
        self.explicit_levels: Set[int] = set()
        self.explicit_tapes: list = []
        for name, value in self.values.items():
            value = _constraint_parts(value)  # traced bounds inside constraint objects count too
            levels_of(value, self.explicit_levels)
            self.explicit_tapes += [t for t in tapes_of(value) if all(t is not e for e in self.explicit_tapes)]

    def get(self, name: str) -> Any:
        return self.values[name]

    def run(self, **overrides: Any) -> Any:
        """SciPy's own code on plain values, the callbacks wrapped (see :class:`Callbacks`)."""
        if self.unbound:
            return self.original(*self.raw[0], **self.raw[1])
        arguments = {}
        for name, value in self.user.items():
            if name in self.callback_names:
                value = _wrap_callables(self.callbacks, value)
            elif type(value).__name__ in _CONSTRAINT_TYPES:  # Bounds(lb, ub) with traced lb, ub
                value = copy.copy(value)
                for key, v in vars(value).items():
                    setattr(value, key, strip_tree(v))
            else:
                value = strip_tree(value)
            arguments[name] = value
        arguments.update(overrides)
        positional, keywords = [], {}
        for name, param in self.signature.parameters.items():
            if name not in arguments:
                continue
            value = arguments[name]
            if param.kind is param.VAR_POSITIONAL:
                positional.extend(value)
            elif param.kind is param.VAR_KEYWORD:
                keywords.update(value)
            elif param.kind is param.POSITIONAL_ONLY:
                positional.append(value)
            else:
                keywords[name] = value
        running, self.callbacks.running = self.callbacks.running, True
        try:
            return self.original(*positional, **keywords)
        except BaseException as exc:
            self.callbacks.reraise(exc)
            raise
        finally:
            self.callbacks.running = running
            self.callbacks.error = None
            self.callbacks.resume()

    def quiet(self) -> Any:
        """A context in which the call's tapes compute without recording (plain evaluations)."""
        return paused(self.explicit_tapes + self.callbacks.tapes)

    @property
    def traced(self) -> bool:
        return bool(self.explicit_levels or self.callbacks.levels)

    def steps(self) -> int:
        """The number of chord steps: one per tape whose tracers reach the call."""
        return max(1, len(self.explicit_levels | self.callbacks.levels))


_CONSTRAINT_TYPES = ("NonlinearConstraint", "LinearConstraint", "Bounds")


def _constraint_parts(value: Any) -> Any:
    """SciPy's constraint objects as lists of their attributes (to find tracers in them)."""
    if type(value).__name__ in _CONSTRAINT_TYPES:
        return list(vars(value).values())
    if type(value) in (list, tuple):
        return [_constraint_parts(v) for v in value]
    return value


def _wrap_callables(callbacks: Callbacks, value: Any) -> Any:
    """Callables wrapped for SciPy's run, everything else plain (constraint objects copied)."""
    if type(value).__name__ in _CONSTRAINT_TYPES:
        value = copy.copy(value)
        for key, v in vars(value).items():
            setattr(value, key, _wrap_callables(callbacks, v))
        return value
    if callable(value):
        return callbacks.wrap(value)
    if type(value) in (list, tuple):
        return type(value)(_wrap_callables(callbacks, v) for v in value)
    if type(value) is dict:
        return {k: _wrap_callables(callbacks, v) for k, v in value.items()}
    return strip_tree(value)
