"""Derivatives through ``scipy.optimize``'s root finders, minimizers and fits.

Every rule lets SciPy solve on plain values (the user's callbacks wrapped so that
parameters they close over are seen, :class:`~tapegrad.solvers._core.Callbacks`)
and then attaches the derivative of the solution by the implicit function
theorem, never by differentiating SciPy's iterations:

* roots (``brentq``, ``brenth``, ``ridder``, ``bisect``, ``toms748``, ``newton``,
  ``root_scalar``, ``root``, ``fsolve``): ``f(x*, theta) = 0``, so
  ``dx*/dtheta = -f_x^{-1} f_theta`` with ``f_x`` from tapegrad;
* minima (``minimize``, ``least_squares``, ``curve_fit``): the first-order condition
  ``grad_x F(x*, theta) = 0`` with the exact Hessian (not Gauss-Newton), components
  held at an active bound following that bound, and under ``constraints=`` the KKT
  conditions of the active constraints; the optimal value follows (envelope theorem).

Both are the chord iteration of :mod:`tapegrad.solvers._core`, one step per tape
level, so Hessians of solutions come from the same code.  With nothing traced
(no tracer in the arguments and none returned by a callback), the result is
SciPy's own.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, Callable

import numpy as np
import scipy.optimize as _opt

from ..api import grad, hessian, jacobian
from ..registry import defcomposite, intercepted
from ..tracer import strip
from ._core import Call, as_array, chord, levels_of, lu_solver, plain_jacobian, refuse, strip_tree, tie

__all__: list = []


# ---------------------------------------------------------------------- roots
def _args_tuple(value: Any) -> tuple:
    if value is None:
        return ()
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _first_output(fun: Callable[..., Any], fargs: tuple, returns_tuple: bool) -> Callable[[Any], Any]:
    """``x -> fun(x, *fargs)``, its first output when it also returns derivatives (``jac=True``)."""

    def value(x: Any) -> Any:
        out = fun(x, *fargs)
        return out[0] if returns_tuple else out

    return value


def _root_of(call: Call, residual: Callable[[Any], Any], root: Any, what: str = "Jacobian of the function") -> Any:
    """The traced root: SciPy's ``root`` with the implicit function's derivatives."""
    x0 = np.asarray(strip_tree(root), dtype=np.float64)
    shape = x0.shape

    def flat(x: Any) -> Any:
        return np.reshape(as_array(residual(np.reshape(x, shape))), (-1,))

    z0 = x0.reshape(-1)
    with call.quiet():
        jac = plain_jacobian(flat, z0)
    if jac.shape != (z0.size, z0.size):
        raise refuse(
            call.name, "the function", f"returns {jac.shape[0]} values for {z0.size} unknowns",
            "The implicit function theorem needs as many equations as unknowns.",
        )
    solve = lu_solver(jac, call.name, what)
    z = chord(flat, z0, solve, call.steps())
    return tie(root, np.reshape(z, shape))


def _scalar_bracket(key: Any, function: str = "f") -> Any:
    """brentq, brenth, ridder, bisect, toms748: ``(f, a, b, args, ...)`` -> root [, RootResults]."""

    def impl(*args: Any, **kwargs: Any) -> Any:
        call = Call(key, args, kwargs, (function,))
        out = call.run()
        if not call.traced:
            return out
        f, fargs = call.get(function), _args_tuple(call.get("args"))
        root = out[0] if call.get("full_output") else out
        x = _root_of(call, lambda x: f(x, *fargs), root, "derivative of the function")
        if call.get("full_output"):
            out[1].root = x
            return x, out[1]
        return x

    return impl


for _name in ("brentq", "brenth", "ridder", "bisect", "toms748"):
    _key = getattr(_opt, _name)
    defcomposite(intercepted(_key, route_all=True), _scalar_bracket(_key))


def _newton(*args: Any, **kwargs: Any) -> Any:
    call = Call(_opt.newton, args, kwargs, ("func", "fprime", "fprime2"))
    out = call.run()
    if not call.traced:
        return out
    f, fargs = call.get("func"), _args_tuple(call.get("args"))
    full = call.get("full_output")
    root = out[0] if full else out
    x = _root_of(call, lambda x: f(x, *fargs), root, "derivative of the function")
    if full:
        if hasattr(out, "_replace"):  # an array x0: the namedtuple (root, converged, zero_der)
            return out._replace(root=x)
        out[1].root = x
        return (x,) + tuple(out[1:])
    return x


defcomposite(intercepted(_opt.newton, route_all=True), _newton)


def _root_scalar(*args: Any, **kwargs: Any) -> Any:
    call = Call(_opt.root_scalar, args, kwargs, ("f", "fprime", "fprime2"))
    out = call.run()
    if not call.traced:
        return out
    f, fargs = call.get("f"), _args_tuple(call.get("args"))
    with_derivative = call.get("fprime") is True  # f returns (value, derivative[, second])

    residual = _first_output(f, fargs, with_derivative)

    out.root = _root_of(call, residual, out.root, "derivative of the function")
    return out


defcomposite(intercepted(_opt.root_scalar, route_all=True), _root_scalar)


def _root(*args: Any, **kwargs: Any) -> Any:
    call = Call(_opt.root, args, kwargs, ("fun", "jac", "callback"))
    out = call.run()
    if not call.traced:
        return out
    fun, fargs = call.get("fun"), _args_tuple(call.get("args"))
    with_jac = call.get("jac") is True

    residual = _first_output(fun, fargs, with_jac)

    # out.fun stays SciPy's: f(x*(theta), theta) is constant along the solution, so
    # its derivative is exactly zero.
    out.x = _root_of(call, residual, out.x)
    return out


defcomposite(intercepted(_opt.root, route_all=True), _root)


def _fsolve(*args: Any, **kwargs: Any) -> Any:
    call = Call(_opt.fsolve, args, kwargs, ("func", "fprime"))
    out = call.run()
    if not call.traced:
        return out
    fun, fargs = call.get("func"), _args_tuple(call.get("args"))
    full = call.get("full_output")
    x = _root_of(call, lambda x: fun(x, *fargs), out[0] if full else out)
    return (x,) + tuple(out[1:]) if full else x


defcomposite(intercepted(_opt.fsolve, route_all=True), _fsolve)


# ---------------------------------------------------------------------- optima
def _bounds_arrays(bounds: Any, n: int, pairs: bool) -> tuple:
    """``(lb, ub)`` of length ``n`` (possibly traced) from SciPy's bound forms, or ``(None, None)``.

    ``pairs``: ``minimize``'s form, a sequence of ``(min, max)`` (``None`` unbounded);
    otherwise ``least_squares``'s ``(lb, ub)``, each a scalar or an array.
    """
    if bounds is None:
        return None, None
    if isinstance(bounds, _opt.Bounds):
        lb, ub = bounds.lb, bounds.ub
    elif pairs:
        lb = [(-np.inf if p[0] is None else p[0]) for p in bounds]
        ub = [(np.inf if p[1] is None else p[1]) for p in bounds]
    else:
        lb, ub = bounds

    def vector(v: Any) -> Any:
        if isinstance(v, (list, tuple)) and levels_of(v):
            v = np.stack([x if levels_of(x) else np.asarray(x, dtype=float) for x in v])
        if not levels_of(v):
            v = np.asarray(v, dtype=float)
        return v + np.zeros(n)

    return vector(lb), vector(ub)


def _at_bound(value: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """Where ``value`` sits on a finite ``bound`` (to a relative 1e-7: SciPy's solvers land on it)."""
    finite = np.isfinite(bound)
    return finite & (np.abs(value - np.where(finite, bound, 0.0)) <= 1e-7 * (1.0 + np.abs(np.where(finite, bound, 0.0))))


def _argmin(call: Call, objective: Callable[[Any], Any], x_star: Any, bounds: Any = None, pairs: bool = False) -> Any:
    """The traced minimizer: SciPy's ``x_star`` with the derivatives of the argmin.

    Free components satisfy ``grad F = 0`` (chord steps with the exact Hessian);
    a component at an active bound equals that bound (traced if the bound is).
    """
    x0 = np.asarray(strip_tree(x_star), dtype=np.float64)
    shape = x0.shape
    z0 = x0.reshape(-1)
    n = z0.size

    def f_flat(z: Any) -> Any:
        return objective(np.reshape(z, shape))

    lb, ub = _bounds_arrays(bounds, n, pairs)
    if lb is None:
        free = np.ones(n, dtype=bool)
        base = None
    else:
        lbp, ubp = np.asarray(strip(lb), float), np.asarray(strip(ub), float)
        at_lb = _at_bound(z0, lbp)
        at_ub = _at_bound(z0, ubp) & ~at_lb
        free = ~(at_lb | at_ub)
        base = np.where(at_lb, lb, np.where(at_ub, ub, 0.0))
    take = np.eye(n)[:, free]  # free coordinates -> full vector

    def full(y: Any) -> Any:
        return take @ y if base is None else base + take @ y

    def residual(y: Any) -> Any:
        return take.T @ grad(f_flat)(full(y))

    y0 = z0[free]
    if y0.size:
        with call.quiet():
            hess = np.asarray(strip(hessian(f_flat)(z0)))[np.ix_(free, free)]
        solve = lu_solver(hess, call.name, "Hessian of the objective (in the free coordinates)")
        y = chord(residual, y0, solve, call.steps())
    else:
        y = y0
    return tie(x_star, np.reshape(full(y), shape))


def _active_constraints(call: Call, constraints: list, bounds: Any, x0: np.ndarray) -> Callable[[Any], Any]:
    """``c(x)``: the constraints active at ``x0`` as equalities ``c(x) = 0`` (traced where they are).

    Equalities always; an inequality (``fun(x) >= 0`` in a dict, ``lb <= fun(x) <= ub`` in
    a ``NonlinearConstraint`` or ``LinearConstraint``, a bound) when it holds with
    equality at the solution.
    """
    n = x0.size
    parts: list = []  # (function of x returning a vector, indices of the active components)

    near = _at_bound

    def add(fun: Callable[[Any], Any], lower: Any, upper: Any) -> None:
        with call.quiet():
            value = np.asarray(strip(np.reshape(as_array(fun(x0)), (-1,))), dtype=float)
        lo = lower + np.zeros(value.size) if levels_of(lower) else np.asarray(lower, float) + np.zeros(value.size)
        hi = upper + np.zeros(value.size) if levels_of(upper) else np.asarray(upper, float) + np.zeros(value.size)
        lop, hip = np.asarray(strip(lo)), np.asarray(strip(hi))
        at_lo, at_hi = near(value, lop), near(value, hip) & ~near(value, lop)
        if at_lo.any() or at_hi.any():
            parts.append((fun, lo, hi, at_lo, at_hi))

    for c in constraints:
        if isinstance(c, dict):
            cfun, cargs = c["fun"], _args_tuple(c.get("args"))
            ceq = c.get("type") == "eq"
            add(lambda x, f=cfun, a=cargs: f(x, *a), 0.0, 0.0 if ceq else np.inf)
        elif isinstance(c, _opt.NonlinearConstraint):
            add(c.fun, c.lb, c.ub)
        elif isinstance(c, _opt.LinearConstraint):
            add(lambda x, A=c.A: A @ x, c.lb, c.ub)
        else:
            raise refuse(call.name, "`constraints=`", f"holds a {type(c).__name__}",
                         "Pass dicts, NonlinearConstraint or LinearConstraint objects.")
    lb, ub = _bounds_arrays(bounds, n, True)
    if lb is not None:
        add(lambda x: x, lb, ub)

    def active(x: Any) -> Any:
        pieces = []
        for fun, lo, hi, at_lo, at_hi in parts:
            v = np.reshape(as_array(fun(x)), (-1,))
            pieces += [(v - lo)[at_lo], (v - hi)[at_hi]]
        return np.concatenate(pieces) if pieces else np.zeros(0)

    return active


def _constrained_argmin(call: Call, objective: Callable[[Any], Any], x_star: Any, bounds: Any,
                        constraints: list) -> Any:
    """The traced minimizer under constraints: the KKT conditions at SciPy's solution.

    With the active constraints ``c(x) = 0`` and multipliers ``lam`` (least squares on
    ``grad f + J_c' lam = 0`` at the solution), ``(x, lam)`` is a stationary point of the
    Lagrangian ``f + lam . c``; its chord steps give the derivatives of both.
    """
    x0 = np.asarray(strip_tree(x_star), dtype=np.float64).reshape(-1)
    n = x0.size
    active = _active_constraints(call, constraints, bounds, x0)
    with call.quiet():
        g0 = np.asarray(strip(grad(objective)(x0)))
        jc = np.asarray(strip(jacobian(active)(x0))).reshape(-1, n)
    if jc.shape[0] == 0:
        return _argmin(call, objective, x_star)
    lam0 = np.linalg.lstsq(jc.T, -g0, rcond=None)[0]
    w0 = np.concatenate([x0, lam0])

    def lagrangian(w: Any) -> Any:
        return objective(w[:n]) + w[n:] @ active(w[:n])

    with call.quiet():
        kkt = np.asarray(strip(hessian(lagrangian)(w0)))
    solve = lu_solver(kkt, call.name, "KKT matrix (Hessian of the Lagrangian bordered by the active "
                      "constraints' Jacobian)")
    w = chord(lambda w: grad(lagrangian)(w), w0, solve, call.steps())
    return tie(x_star, np.reshape(w[:n], np.shape(x_star)))


def _warn_if_not_stationary(out: Any) -> None:
    """Warn when SciPy reports failure and its gradient at the returned point is not small.

    The derivative of the argmin is that of the optimality condition, which holds only
    at a stationary point.  BFGS's "precision loss" at a minimum is the common harmless
    failure: its gradient there is tiny, and nothing is said.
    """
    if out.success:
        return
    jac = out.get("jac")
    scale = max(1.0, abs(float(np.asarray(strip_tree(out.get("fun", 0.0))))))
    if isinstance(jac, np.ndarray) and jac.size and float(np.max(np.abs(jac))) <= 1e-5 * scale:
        return
    frame, level = sys._getframe(0), 1
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] in ("tapegrad", "scipy", "numpy"):
        frame, level = frame.f_back, level + 1
    warnings.warn(
        f"scipy.optimize.minimize did not report success ({out.message}) and its gradient at the point it "
        "returned is not small; tapegrad differentiates the optimality condition there, which is the "
        "argmin's derivative only at a stationary point. Tighten the tolerances or raise maxiter.",
        RuntimeWarning,
        stacklevel=level,
    )


def _minimize(*args: Any, **kwargs: Any) -> Any:
    call = Call(_opt.minimize, args, kwargs, ("fun", "jac", "hess", "hessp", "callback", "constraints"))
    out = call.run()
    if not call.traced:
        return out
    _warn_if_not_stationary(out)
    constraints = call.get("constraints")
    if isinstance(constraints, (dict, _opt.NonlinearConstraint, _opt.LinearConstraint)):
        constraints = [constraints]
    fun, fargs = call.get("fun"), _args_tuple(call.get("args"))
    with_jac = call.get("jac") is True

    objective = _first_output(fun, fargs, with_jac)

    if constraints:
        x = _constrained_argmin(call, objective, out.x, call.get("bounds"), list(constraints))
    else:
        x = _argmin(call, objective, out.x, call.get("bounds"), pairs=True)
    out.x = x
    out.fun = tie(out.fun, objective(x))
    gradient = None
    for key in ("jac", "grad"):  # the objective's gradient (trust-constr: grad; jac holds constraints')
        if isinstance(out.get(key), np.ndarray) and np.shape(out[key]) == np.shape(out.x):
            gradient = grad(objective)(x) if gradient is None else gradient
            out[key] = tie(out[key], gradient)
    return out


defcomposite(intercepted(_opt.minimize, route_all=True), _minimize)


_LOSSES = {
    "linear": lambda z: z,
    "soft_l1": lambda z: 2.0 * (np.sqrt(1.0 + z) - 1.0),
    "huber": lambda z: np.where(z <= 1.0, z, 2.0 * np.sqrt(np.maximum(z, 1.0)) - 1.0),
    "cauchy": lambda z: np.log1p(z),
    "arctan": lambda z: np.arctan(z),
}


def _least_squares_cost(call: Call, residuals: Callable[[Any], Any]) -> Callable[[Any], Any]:
    loss, scale = call.get("loss"), call.get("f_scale")
    if not isinstance(loss, str) or loss not in _LOSSES:
        raise refuse(
            call.name, "`loss=`", "is a callable, whose derivatives tapegrad does not know",
            f"Use one of the named losses {sorted(_LOSSES)}.",
        )
    rho = _LOSSES[loss]

    def cost(x: Any) -> Any:
        r = residuals(x)
        if loss == "linear":
            return 0.5 * np.sum(r * r)
        c2 = scale * scale
        return 0.5 * c2 * np.sum(rho(r * r / c2))

    return cost


def _least_squares(*args: Any, **kwargs: Any) -> Any:
    call = Call(_opt.least_squares, args, kwargs, ("fun", "jac", "callback"))
    out = call.run()
    if not call.traced:
        return out
    fun, fargs, fkwargs = call.get("fun"), _args_tuple(call.get("args")), call.get("kwargs") or {}

    def residuals(x: Any) -> Any:
        return np.reshape(as_array(fun(x, *fargs, **fkwargs)), (-1,))

    cost = _least_squares_cost(call, residuals)
    bounds = call.get("bounds")
    if not levels_of(bounds) and np.all(np.isinf(np.asarray(bounds, dtype=float))):
        bounds = None
    x = _argmin(call, cost, out.x, bounds)
    out.x = x
    out.cost = tie(out.cost, cost(x))
    out.fun = tie(out.fun, residuals(x))
    out.jac = tie(out.jac, jacobian(residuals)(x)) if isinstance(out.jac, np.ndarray) else out.jac
    out.grad = tie(out.grad, grad(cost)(x))
    return out


defcomposite(intercepted(_opt.least_squares, route_all=True), _least_squares)


def _curve_fit(*args: Any, **kwargs: Any) -> Any:
    call = Call(_opt.curve_fit, args, kwargs, ("f", "jac"))
    out = call.run()
    if not call.traced:
        return out
    f, xdata, ydata, sigma = call.get("f"), call.get("xdata"), call.get("ydata"), call.get("sigma")
    popt, pcov = out[0], out[1]
    if call.get("nan_policy") not in (None, "raise") and np.isnan(strip_tree(ydata)).any():
        raise refuse(
            call.name, "`nan_policy=`", "drops points, which tapegrad does not follow",
            "Remove the NaN points yourself before the call.",
        )
    ydata_flat = np.reshape(ydata, (-1,)) if levels_of(ydata) else np.asarray(strip_tree(ydata), float).reshape(-1)
    if sigma is None:

        def weigh(r: Any) -> Any:
            return r

    elif np.ndim(strip_tree(sigma)) == 1:

        def weigh(r: Any) -> Any:
            return r / sigma

    else:  # a covariance matrix: whiten with its Cholesky factor, as SciPy does
        chol = np.linalg.cholesky(sigma)

        def weigh(r: Any) -> Any:
            return np.linalg.solve(chol, r)

    def residuals(p: Any) -> Any:
        return weigh(np.reshape(as_array(f(xdata, *[p[i] for i in range(np.shape(p)[0])])), (-1,)) - ydata_flat)

    def cost(p: Any) -> Any:
        r = residuals(p)
        return 0.5 * np.sum(r * r)

    bounds = call.get("bounds")
    if not levels_of(bounds) and np.all(np.isinf(np.asarray(bounds, dtype=float))):
        bounds = None
    p = _argmin(call, cost, popt, bounds)
    if np.all(np.isfinite(pcov)):
        jac = jacobian(residuals)(p)
        cov = np.linalg.inv(jac.T @ jac)
        if not call.get("absolute_sigma"):
            m, n = np.shape(jac)
            r = residuals(p)
            cov = cov * (np.sum(r * r) / (m - n))
        pcov = tie(pcov, cov)
    if call.get("full_output"):
        info = dict(out[2])
        if "fvec" in info:
            info["fvec"] = tie(info["fvec"], np.reshape(residuals(p), np.shape(info["fvec"])))
        return (p, pcov, info) + tuple(out[3:])
    return p, pcov


defcomposite(intercepted(_opt.curve_fit, route_all=True), _curve_fit)


# ---------------------------------------------------------------------- scalar minimizers
def _scalar_argmin(call: Call, objective: Callable[[Any], Any], x_star: Any, bounds: Any = None) -> Any:
    """The traced minimizer of a function of one variable (``bounds``: ``(lo, hi)`` or ``None``).

    Bounded scalar methods stop a tolerance away from a bound rather than on it: a
    minimum whose slope still points out of the interval, that close to the bound,
    is the bound's.
    """
    if bounds is not None:
        lo, hi = bounds[0], bounds[1]
        x0 = float(np.asarray(strip_tree(x_star)))
        with call.quiet():
            slope = float(np.asarray(strip(grad(objective)(np.float64(x0)))))
            curvature = float(np.asarray(strip(hessian(objective)(np.float64(x0)))))
        width = abs(float(strip(hi)) - float(strip(lo)))
        for bound, outward in ((lo, slope > 0), (hi, slope < 0)):
            near = abs(x0 - float(strip(bound))) <= 1e-3 * width
            # stationary would need |slope| <~ curvature * distance; a larger slope means the
            # minimum is the bound itself (the method stopped on its way to it)
            if near and outward and abs(slope) > 10 * abs(curvature) * abs(x0 - float(strip(bound))) + 1e-12:
                return tie(x_star, bound) if levels_of(bound) else x_star
    return _argmin(call, objective, x_star)


def _minimize_scalar(*args: Any, **kwargs: Any) -> Any:
    call = Call(_opt.minimize_scalar, args, kwargs, ("fun",))
    out = call.run()
    if not call.traced:
        return out
    fun, fargs = call.get("fun"), _args_tuple(call.get("args"))

    objective = _first_output(fun, fargs, False)

    bounds = call.get("bounds")
    method = call.get("method")
    bounded = bounds is not None and (method is None or str(method).lower() == "bounded")
    out.x = _scalar_argmin(call, objective, out.x, bounds if bounded else None)
    out.fun = tie(out.fun, objective(out.x))
    return out


defcomposite(intercepted(_opt.minimize_scalar, route_all=True), _minimize_scalar)


def _scalar_legacy(key: Any, bounds_names: Any = None) -> Callable[..., Any]:
    """brent, golden, fminbound: ``xmin`` or, with full_output, ``(xmin, fval, ...)``."""

    def impl(*args: Any, **kwargs: Any) -> Any:
        call = Call(key, args, kwargs, ("func",))
        out = call.run()
        if not call.traced:
            return out
        func, fargs = call.get("func"), _args_tuple(call.get("args"))

        objective = _first_output(func, fargs, False)

        bounds = None if bounds_names is None else tuple(call.get(n) for n in bounds_names)
        full = bool(call.get("full_output"))
        x = _scalar_argmin(call, objective, out[0] if full else out, bounds)
        if full:
            return (x, tie(out[1], objective(x))) + tuple(out[2:])
        return x

    return impl


defcomposite(intercepted(_opt.brent, route_all=True), _scalar_legacy(_opt.brent))
defcomposite(intercepted(_opt.golden, route_all=True), _scalar_legacy(_opt.golden))
defcomposite(intercepted(_opt.fminbound, route_all=True), _scalar_legacy(_opt.fminbound, ("x1", "x2")))


# ---------------------------------------------------------------------- legacy interfaces
def _leastsq(*args: Any, **kwargs: Any) -> Any:
    call = Call(_opt.leastsq, args, kwargs, ("func", "Dfun"))
    out = call.run()
    if not call.traced:
        return out
    func, fargs = call.get("func"), _args_tuple(call.get("args"))

    def residuals(x: Any) -> Any:
        return np.reshape(as_array(func(x, *fargs)), (-1,))

    def cost(x: Any) -> Any:
        r = residuals(x)
        return 0.5 * np.sum(r * r)

    x = _argmin(call, cost, out[0])
    if not call.get("full_output"):
        return (x,) + tuple(out[1:])
    cov = out[1]
    if cov is not None:
        jac = np.reshape(jacobian(residuals)(np.reshape(x, (-1,))), (-1, np.size(strip_tree(x))))
        cov = tie(cov, np.linalg.inv(jac.T @ jac))
    info = dict(out[2])
    if "fvec" in info:
        info["fvec"] = tie(info["fvec"], np.reshape(residuals(x), np.shape(info["fvec"])))
    return (x, cov, info) + tuple(out[3:])


defcomposite(intercepted(_opt.leastsq, route_all=True), _leastsq)


def _legacy_min(key: Any, fun_name: str, callbacks: tuple, always_tuple: bool = False,
                bounds_name: Any = None, returns_fopt: bool = True) -> Callable[..., Any]:
    """fmin, fmin_powell, fmin_bfgs, fmin_cg, fmin_ncg, fmin_l_bfgs_b, fmin_tnc.

    ``x`` is the first output (the only one unless ``full_output``/``retall``); with
    ``full_output`` the second is the optimal value.  The iterates of ``retall`` and
    the other diagnostics stay SciPy's plain numbers.
    """

    def impl(*args: Any, **kwargs: Any) -> Any:
        call = Call(key, args, kwargs, (fun_name,) + callbacks)
        out = call.run()
        if not call.traced:
            return out
        fun, fargs = call.get(fun_name), _args_tuple(call.get("args"))
        # fmin_l_bfgs_b and fmin_tnc: without fprime or approx_grad, fun returns (f, g)
        with_grad = "approx_grad" in call.values and call.get("fprime") is None and not call.get("approx_grad")

        objective = _first_output(fun, fargs, with_grad)

        bounds = call.get(bounds_name) if bounds_name else None
        tupled = always_tuple or bool(call.get("full_output")) or bool(call.values.get("retall"))
        x = _argmin(call, objective, out[0] if tupled else out, bounds or None, pairs=True)
        if not tupled:
            return x
        rest = list(out[1:])
        if returns_fopt and (always_tuple or call.get("full_output")):
            rest[0] = tie(rest[0], objective(x))
        return (x,) + tuple(rest)

    return impl


for _key, _fun, _cbs, _kw in (
    (_opt.fmin, "func", ("callback",), {}),
    (_opt.fmin_powell, "func", ("callback",), {}),
    (_opt.fmin_bfgs, "f", ("fprime", "callback"), {}),
    (_opt.fmin_cg, "f", ("fprime", "callback"), {}),
    (_opt.fmin_ncg, "f", ("fprime", "fhess_p", "fhess", "callback"), {}),
    (_opt.fmin_l_bfgs_b, "func", ("fprime", "callback"), dict(always_tuple=True, bounds_name="bounds")),
    (_opt.fmin_tnc, "func", ("fprime", "callback"), dict(always_tuple=True, bounds_name="bounds",
                                                         returns_fopt=False)),
):
    defcomposite(intercepted(_key, route_all=True), _legacy_min(_key, _fun, _cbs, **_kw))


def _fmin_slsqp(*args: Any, **kwargs: Any) -> Any:
    names = ("func", "eqcons", "f_eqcons", "ieqcons", "f_ieqcons", "fprime", "fprime_eqcons", "fprime_ieqcons",
             "callback")
    call = Call(_opt.fmin_slsqp, args, kwargs, names)
    out = call.run()
    if not call.traced:
        return out
    func, fargs = call.get("func"), _args_tuple(call.get("args"))
    # the same problem in minimize's terms: the KKT conditions of its active constraints
    constraints = [{"type": "eq", "fun": c, "args": fargs} for c in call.get("eqcons") or ()]
    constraints += [{"type": "ineq", "fun": c, "args": fargs} for c in call.get("ieqcons") or ()]
    for name, kind in (("f_eqcons", "eq"), ("f_ieqcons", "ineq")):
        if call.get(name) is not None:
            constraints.append({"type": kind, "fun": call.get(name), "args": fargs})
    full = bool(call.get("full_output"))

    objective = _first_output(func, fargs, False)

    bounds = call.get("bounds") or None
    if constraints:
        x = _constrained_argmin(call, objective, out[0] if full else out, bounds, constraints)
    else:
        x = _argmin(call, objective, out[0] if full else out, bounds, pairs=True)
    if full:
        return (x, tie(out[1], objective(x))) + tuple(out[2:])
    return x


defcomposite(intercepted(_opt.fmin_slsqp, route_all=True), _fmin_slsqp)


def _fixed_point(*args: Any, **kwargs: Any) -> Any:
    call = Call(_opt.fixed_point, args, kwargs, ("func",))
    out = call.run()
    if not call.traced:
        return out
    func, fargs = call.get("func"), _args_tuple(call.get("args"))
    # x* = g(x*): a root of g(x) - x
    return _root_of(call, lambda x: as_array(func(x, *fargs)) - x, out, "Jacobian of g(x) - x")


defcomposite(intercepted(_opt.fixed_point, route_all=True), _fixed_point)


# ---------------------------------------------------------------------- global minimizers
def _global_min(key: Any) -> Callable[..., Any]:
    """differential_evolution, shgo, direct: the found minimum's implicit derivative.

    Which basin a global method settles in is piecewise constant in the parameters;
    within it the minimizer moves as any local minimizer does.
    """

    def impl(*args: Any, **kwargs: Any) -> Any:
        call = Call(key, args, kwargs, ("func", "callback", "constraints", "minimizer_kwargs"))
        out = call.run()
        if not call.traced:
            return out
        func, fargs = call.get("func"), _args_tuple(call.get("args"))

        objective = _first_output(func, fargs, False)

        constraints = call.values.get("constraints")
        if isinstance(constraints, (dict, _opt.NonlinearConstraint, _opt.LinearConstraint)):
            constraints = [constraints]
        bounds = call.get("bounds")
        if constraints:
            x = _constrained_argmin(call, objective, out.x, bounds, list(constraints))
        else:
            x = _argmin(call, objective, out.x, bounds, pairs=not isinstance(bounds, _opt.Bounds))
        out.x = x
        out.fun = tie(out.fun, objective(x))
        return out

    return impl


for _key in (_opt.differential_evolution, _opt.shgo, _opt.direct, _opt.dual_annealing):
    defcomposite(intercepted(_key, route_all=True), _global_min(_key))


def _basinhopping(*args: Any, **kwargs: Any) -> Any:
    call = Call(_opt.basinhopping, args, kwargs, ("func", "take_step", "accept_test", "callback",
                                                    "minimizer_kwargs"))
    out = call.run()
    if not call.traced:
        return out
    options = call.get("minimizer_kwargs") or {}
    func, fargs = call.get("func"), _args_tuple(options.get("args"))
    with_jac = options.get("jac") is True

    objective = _first_output(func, fargs, with_jac)

    constraints = options.get("constraints")
    if isinstance(constraints, (dict, _opt.NonlinearConstraint, _opt.LinearConstraint)):
        constraints = [constraints]
    if constraints:
        x = _constrained_argmin(call, objective, out.x, options.get("bounds"), list(constraints))
    else:
        x = _argmin(call, objective, out.x, options.get("bounds"), pairs=True)
    out.x = x
    out.fun = tie(out.fun, objective(x))
    return out


defcomposite(intercepted(_opt.basinhopping, route_all=True), _basinhopping)
