"""Derivatives of ``scipy.stats`` distributions, reached through SciPy's door.

Rules sit on the *base-class* methods (``rv_continuous.logpdf``,
``rv_discrete.pmf``, ...), so every distribution of ``scipy.stats``, its
frozen form and a user's own subclass are covered by the same code.  Each rule
follows the public method's own steps:

1. SciPy itself computes the result on plain values (``exact``): the returned
   value is that array, bit for bit (:func:`with_value`), with SciPy's support,
   argument checks, ``nan`` for invalid parameters and broadcasting;
2. the entries SciPy evaluates its private method on (valid parameters, inside
   the support) are gathered from the traced arguments, and the private method
   (``_logpdf``, ``_cdf``, ...) is evaluated there on tracers, so its derivative
   in ``x``, ``loc``, ``scale`` and every shape parameter comes from its own
   NumPy / ``scipy.special`` code; the other entries are constants (``0``,
   ``-inf``, ``nan``), whose derivative is zero and never ``nan``;
3. where the private method need not be traced, the mathematics is used
   instead: ``cdf``, ``sf``, ``logcdf``, ``logsf`` with plain shape parameters
   are primitives whose derivative in the standardized ``x`` is the density
   (so a ``_cdf`` computed by numerical integration or compiled code still has
   its derivative in ``x``, ``loc`` and ``scale``), and ``ppf``/``isf`` are
   primitives with ``1 / pdf(ppf(q))``; with traced shape parameters the
   quantile is two Newton steps on ``cdf(z) = q`` taken from SciPy's exact
   answer (value unchanged, first and second derivatives those of the implicit
   function).

Private methods that compute one of ``_pdf`` / ``_logpdf`` in compiled code
are traced through the other; those written with SciPy's ``apply_where`` and
``_lazyselect`` run through their rules (:mod:`.scipy_stats_where`).  A traced
shape parameter exactly at ``0``, where generalized families (``genextreme``,
``genpareto``, ``kappa4``, ``tukeylambda``) switch to a limit formula constant
in it, takes its derivatives from the general formula on both sides
(:func:`_limit_entries`).

A private method that cannot be traced in a parameter that is traced raises
:class:`~tapegrad.errors.NonDifferentiableArgumentError` naming the
distribution, the method and the parameter, never a silent zero; so does a
shape parameter SciPy accepts only at whole numbers (``binom``'s ``n``).
Discrete distributions are differentiated in their shape parameters; their
argument ``k`` and ``loc`` are integer-valued (a traced one is an error), and
``ppf`` and ``isf`` are step functions (an error too).

``nnlf`` of a continuous distribution has a rule (the sum of its traced
``logpdf``); ``median``, ``interval`` and ``support`` run SciPy's own code,
which calls the rules above.  ``mean``, ``var``, ``std``, ``stats``,
``moment``, ``entropy``, ``expect``, ``fit`` and ``rvs`` with traced arguments
raise :class:`~tapegrad.errors.UnsupportedFunctionError`.

The multivariate ``multivariate_normal``, ``multivariate_t`` and ``dirichlet``
are composites of NumPy linear algebra and ``scipy.special`` calls
(:mod:`tapegrad.rules.scipy_stats_multivariate`).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, List, Sequence

import numpy as np
from scipy.stats._distn_infrastructure import rv_continuous, rv_discrete, rv_frozen

from ..binding import strip_all
from ..dispatch import primitive
from ..errors import NonDifferentiableArgumentError, TapegradError, UnsupportedFunctionError
from ..registry import defcomposite, defvjp, intercepted
from ..tracer import Tracer, strip
from ._scipy_util import with_value  # noqa: F401  (part of this module's interface)

__all__ = ["CONTINUOUS_METHODS", "DISCRETE_METHODS", "with_value"]

CONTINUOUS_METHODS = ("pdf", "logpdf", "cdf", "logcdf", "sf", "logsf", "ppf", "isf")
DISCRETE_METHODS = ("pmf", "logpmf", "cdf", "logcdf", "sf", "logsf", "ppf", "isf")
_TAILS = ("cdf", "logcdf", "sf", "logsf")


# ---------------------------------------------------------------- small helpers
def _traced(v: Any) -> bool:
    return type(v) is Tracer


def _as_arg(v: Any) -> Any:
    """A tracer as it is; anything else (a list of tracers included) as an array."""
    return v if type(v) is Tracer else np.asarray(v)


def _plain(v: Any) -> np.ndarray:
    return np.asarray(strip(v))


def _shape_names(dist: Any, n: int) -> List[str]:
    names = [s.strip() for s in (dist.shapes or "").split(",") if s.strip()]
    if len(names) == 1 and n > 1:  # one array unpacked along its last axis (poisson_binom's p)
        return [f"{names[0]}[..., {i}]" for i in range(n)]
    return names + [f"shape parameter {i}" for i in range(len(names), n)]


def _where(dist: Any, method: str) -> str:
    return f"scipy.stats.{getattr(dist, 'name', type(dist).__name__)}.{method}"


def _gather(v: Any, shape: tuple, cond: np.ndarray, always: bool = False) -> Any:
    """``v`` as SciPy's ``argsreduce`` hands it to the private methods, traced (1-d).

    Where ``cond`` holds everywhere (the common case): broadcast to ``shape`` and
    flat, nothing gathered; else the entries where ``cond`` holds, a one-element
    ``v`` as it is.  ``always``: the entries where ``cond`` holds, whatever ``v``.
    Flattened first, so that a 0-d call is indexed like any other.
    """
    if not always and cond.all():
        # As SciPy's argsreduce hands them to the private methods then: every argument
        # broadcast and flat (some zip them); no gather, no scatter.
        return np.reshape(np.broadcast_to(v, shape), (-1,))
    if not always and np.size(v) == 1:  # argsreduce keeps a one-element argument as it is
        return np.reshape(v, (1,))
    return np.reshape(np.broadcast_to(v, shape), (-1,))[np.ravel(cond)]


def _scatter(vals: Any, cond: np.ndarray, fill: np.ndarray) -> Any:
    """``fill`` with ``vals`` written where ``cond`` holds, traced like ``vals``."""
    return _assemble(cond.shape, [(cond, vals)], fill)


def _assemble(shape: tuple, pieces: Sequence[tuple], fill: np.ndarray) -> Any:
    """``fill`` (float64, of ``shape``) with each traced piece's values written where its mask holds.

    The entries a piece covers start at 0 rather than SciPy's value there, so no
    ``inf`` or ``nan`` meets the arithmetic of the traced result.
    """
    pieces = [(m, v) for m, v in pieces if _traced(v)]
    if len(pieces) == 1 and np.all(pieces[0][0]):  # see _gather: computed on every entry, flat
        size = int(np.prod(shape))
        vals = pieces[0][1]
        return np.reshape(vals if np.shape(vals) == (size,) else np.broadcast_to(vals, (size,)), shape)
    flat = np.ravel(np.broadcast_to(fill, shape)).astype(np.float64)
    pieces = [(np.ravel(np.broadcast_to(m, shape)), v) for m, v in pieces]
    for mask, _ in pieces:
        flat = np.where(mask, 0.0, flat)
    ref = max((v for _, v in pieces), key=lambda v: v._tape.level)
    out = np.zeros_like(ref, shape=flat.shape) + flat
    for mask, vals in pieces:
        out[mask] = vals
    return np.reshape(out, shape)


def _result(traced: Any, exact: Any) -> Any:
    return with_value(traced, np.asarray(exact))


def _constant(exact: Any, refs: Sequence[Any]) -> Any:
    """``exact`` as a traced constant (the derivative is zero everywhere)."""
    ref = max((r for r in refs if _traced(r)), key=lambda r: r._tape.level, default=None)
    if ref is None:
        return exact
    return np.zeros_like(ref, shape=np.shape(exact), dtype=np.result_type(exact)) + np.asarray(exact)


def _cannot(dist: Any, method: str, params: Sequence[str], exc: BaseException) -> NonDifferentiableArgumentError:
    which = ", ".join(params)
    return NonDifferentiableArgumentError(
        f"tapegrad cannot differentiate {_where(dist, method)} with respect to {which}: the private "
        f"code SciPy runs for {method} on this distribution cannot be traced there "
        f"({type(exc).__name__}: {exc}). Pass {which} as plain values (or wrap them in "
        "tapegrad.stop_gradient) to treat them as constants."
    )


def _check_integral(dist: Any, method: str, shapes: tuple, shv: tuple) -> None:
    """Refuse a traced shape parameter that SciPy accepts only at whole numbers.

    Such a parameter (``binom``'s ``n``, ``hypergeom``'s ``M``) makes every
    non-integer value invalid: the method has no derivative there.  Parameters
    that SciPy marks integral but accepts at any real value (``nbinom``'s ``n``)
    are differentiated like the others.
    """
    try:
        infos = dist._shape_info()
    except Exception:  # a user's distribution without parameter information
        return
    valid = np.asarray(dist._argcheck(*shv), dtype=bool)
    for i, (info, s) in enumerate(zip(infos, shapes)):
        if not (_traced(s) and getattr(info, "integrality", False)):
            continue
        nudged = list(shv)
        nudged[i] = shv[i] + 0.5
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            still = np.asarray(dist._argcheck(*nudged), dtype=bool)
        if np.any(valid & ~still):
            raise NonDifferentiableArgumentError(
                f"tapegrad cannot differentiate {_where(dist, method)} with respect to {info.name}: "
                f"SciPy accepts only whole numbers for {info.name} (any other value gives nan), so "
                f"there is no derivative. Pass {info.name} as a plain value (or "
                f"tapegrad.stop_gradient({info.name}))."
            )


#: What SciPy's private code raises when it meets a tracer it cannot handle: tapegrad's
#: own errors (compiled code, a function without a rule) and what NumPy or a compiled
#: function makes of an object it does not know.  Anything else propagates unchanged.
_UNTRACEABLE = (TapegradError, TypeError, ValueError, AttributeError, IndexError, NotImplementedError)


# ---------------------------------------------------------------- primitives in the standardized x
def _density(dist: Any, z: Any, shapes: Sequence[Any], log: bool = False, mass: bool = False) -> Any:
    """The standardized (log-)density, from whichever of ``_pdf`` / ``_logpdf`` can be traced.

    Some distributions compute one of the two in compiled code (``beta._pdf``,
    ``binom._pmf``) and the other in NumPy: on tracers the other one is used (the
    same function).  ``mass``: ``_pmf`` / ``_logpmf`` of a discrete distribution.
    """
    plain, logged = (dist._pmf, dist._logpmf) if mass else (dist._pdf, dist._logpdf)
    first, second = (logged, plain) if log else (plain, logged)
    if not any(_traced(v) for v in (z, *shapes)):
        return first(z, *shapes)
    try:
        return first(z, *shapes)
    except TapegradError as exc:
        try:
            other = second(z, *shapes)
        except _UNTRACEABLE:
            raise exc from None
        return np.log(other) if log else np.exp(other)


def _tail_impl(dist: Any, method: str, z: Any, shapes: tuple) -> Any:
    return getattr(dist, "_" + method)(z, *shapes)


def _tail_vjp(g: Any, ans: Any, dist: Any, method: str, z: Any, shapes: tuple) -> Any:
    # d cdf/dz = pdf, d sf/dz = -pdf, d log cdf/dz = pdf / cdf = exp(logpdf - logcdf).
    if method == "cdf":
        return g * _density(dist, z, shapes)
    if method == "sf":
        return -g * _density(dist, z, shapes)
    ratio = np.exp(_density(dist, z, shapes, log=True) - ans)
    return g * ratio if method == "logcdf" else -g * ratio


_tail = primitive(_tail_impl)
defvjp(_tail, None, None, _tail_vjp, None)


def _quantile_impl(dist: Any, method: str, q: Any, shapes: tuple) -> Any:
    return getattr(dist, "_" + method)(q, *shapes)


def _quantile_vjp(g: Any, ans: Any, dist: Any, method: str, q: Any, shapes: tuple) -> Any:
    # cdf(ppf(q)) = q: d ppf/dq = 1 / pdf(ppf(q)); sf(isf(q)) = q: d isf/dq = -1 / pdf(isf(q)).
    density = _density(dist, ans, shapes)
    return g / density if method == "ppf" else -g / density


_quantile = primitive(_quantile_impl)
defvjp(_quantile, None, None, _quantile_vjp, None)


def _newton_quantile(dist: Any, method: str, q: Any, shapes: Sequence[Any], shapes0: Sequence[Any]) -> Any:
    """SciPy's quantile with the derivatives of the implicit function ``F(z, shapes) = q``.

    Two Newton steps on ``F(z) - q - (F(z0) - q0)`` from SciPy's root ``z0``: the
    value stays ``z0`` (the residual is zero by construction), one step makes the
    first derivatives exact and the second the second derivatives.
    """
    q0 = _plain(q)
    z0 = getattr(dist, "_" + method)(q0, *shapes0)
    tail = dist._cdf if method == "ppf" else dist._sf
    sign = 1.0 if method == "ppf" else -1.0
    offset = tail(z0, *shapes0) - q0
    z = z0
    for _ in range(2):
        residual = tail(z, *shapes) - q - offset
        z = z - residual / (sign * _density(dist, z, shapes))
    return z


# ---------------------------------------------------------------- continuous distributions
def _continuous_rule(method: str) -> Callable[..., Any]:
    public = getattr(rv_continuous, method)

    def impl(self: Any, x: Any, *args: Any, **kwds: Any) -> Any:
        shapes, loc, scale = self._parse_args(*args, **kwds)
        x, loc, scale = _as_arg(x), _as_arg(loc), _as_arg(scale)
        shapes = tuple(_as_arg(s) for s in shapes)
        xv, lv, sv = _plain(x), _plain(loc), _plain(scale)
        shv = tuple(_plain(s) for s in shapes)
        # SciPy's own answer (no tracer left: the door runs SciPy's code), from the
        # call's own arguments (a distribution may unpack them: poisson_binom's p).
        exact = public(self, xv, *strip_all(args), **strip_all(kwds))
        refs = (x, loc, scale) + shapes
        traced_shapes = [i for i, s in enumerate(shapes) if _traced(s)]
        if traced_shapes:
            _check_integral(self, method, shapes, shv)

        # _argcheck may answer 1 for "always valid": a mask must be boolean, never an index.
        cond0 = np.asarray(self._argcheck(*shv), dtype=bool) & (sv > 0)
        boundary = []  # (mask, bound) entries whose value is a support bound * scale + loc
        if method in ("ppf", "isf"):
            cond0 = cond0 & (lv == lv)
            cond = cond0 & (0 < xv) & (xv < 1)
            a_mask, b_mask = cond0 & (xv == 0), cond0 & (xv == 1)
            if method == "isf":
                a_mask, b_mask = b_mask, a_mask
            boundary = [(a_mask, 0), (b_mask, 1)]
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                z0 = np.asarray((xv - lv) / sv, dtype=np.promote_types(xv.dtype, np.float64))
            support = self._support_mask if method in ("pdf", "logpdf") else self._open_support_mask
            cond = cond0 & support(z0, *shv) & (sv > 0)
        cond = np.asarray(cond, dtype=bool)
        shape = cond.shape
        pieces = []
        # A traced shape parameter exactly at 0 is where generalized families switch to a
        # limit formula (genextreme, genpareto, kappa4, tukeylambda) that no longer
        # depends on it: those entries take their derivatives from either side.
        limit = np.zeros(shape, dtype=bool)
        for i in traced_shapes:
            limit = limit | np.broadcast_to(shv[i] == 0, shape)
        limit = limit & cond
        regular = cond & ~limit
        if regular.any():
            pieces.append((regular, _valid_entries(self, method, x, loc, scale, shapes, shv, regular, traced_shapes)))
        if limit.any():
            pieces.append((limit, _limit_entries(self, method, x, loc, scale, shapes, shv, limit, traced_shapes)))
        for mask, end in boundary:
            mask = np.broadcast_to(mask, shape)
            if mask.any() and (_traced(loc) or _traced(scale) or traced_shapes):
                pieces.append((mask, _bound_entries(self, method, loc, scale, shapes, mask, end)))
        if not any(_traced(v) for _, v in pieces):
            return _constant(exact, refs)
        out = _assemble(shape, pieces, np.asarray(exact, dtype=np.float64))
        return _result(out, exact)

    impl.__name__ = f"{method}_rule"
    impl.__doc__ = f"Traced ``rv_continuous.{method}``: SciPy's value, derivatives from its private methods."
    return impl


def _valid_entries(
    self: Any, method: str, x: Any, loc: Any, scale: Any, shapes: tuple, shv: tuple, cond: np.ndarray,
    traced_shapes: List[int],
) -> Any:
    """The method's values on the entries SciPy evaluates its private method on (traced)."""
    shape = cond.shape
    xs, ls, ss = (_gather(v, shape, cond) for v in (x, loc, scale))
    shs = tuple(_gather(s, shape, cond) for s in shapes)
    shs0 = tuple(_gather(s, shape, cond) for s in shv)
    names = _shape_names(self, len(shapes))
    try:
        if method in ("ppf", "isf"):
            if traced_shapes:
                z = _newton_quantile(self, method, xs, shs, shs0)
            else:
                z = _quantile(self, method, xs, shs0)
            return z * ss + ls
        z = (xs - ls) / ss
        if np.result_type(z) != np.float64:
            z = z.astype(np.float64)
        if method == "pdf":
            return _density(self, z, shs) / ss
        if method == "logpdf":
            return _density(self, z, shs, log=True) - np.log(ss)
        if traced_shapes:
            return getattr(self, "_" + method)(z, *shs)
        return _tail(self, method, z, shs0)
    except _UNTRACEABLE as exc:
        params = [names[i] for i in traced_shapes]
        if not params or method in ("pdf", "logpdf"):
            params = [n for n, v in (("x" if method not in ("ppf", "isf") else "q", x), ("loc", loc), ("scale", scale))
                      if _traced(v)] + params
        raise _cannot(self, method, params or ["its arguments"], exc) from exc


#: The steps either side of a limit point (see :func:`_limit_entries`).
LIMIT_STEP = 2e-3


def _limit_entries(
    self: Any, method: str, x: Any, loc: Any, scale: Any, shapes: tuple, shv: tuple, cond: np.ndarray,
    traced_shapes: List[int],
) -> Any:
    """Entries where a traced shape parameter is exactly 0: derivatives from both sides.

    SciPy evaluates such a point with a separate limit formula, constant in that
    parameter, so tracing it would give a zero derivative.  The general formula is
    traced at ``0 +- h`` and ``0 +- h/2`` instead, and the symmetric averages
    combined by Richardson extrapolation: first and second derivatives within
    ``O(h**4)`` (about 1e-11 relative for ``h = 2e-3``).  The value returned is
    SciPy's own, as everywhere.  Where a shifted parameter is invalid, or the
    point leaves the support, this raises a clear error instead.
    """
    shape = cond.shape
    zero = {i: np.broadcast_to(shv[i] == 0, shape) for i in traced_shapes}
    names = _shape_names(self, len(shapes))

    def at(step: float) -> Any:
        traced, plain = list(shapes), list(shv)
        for i in traced_shapes:
            offset = np.where(zero[i], step, 0.0)
            traced[i] = shapes[i] + offset
            plain[i] = shv[i] + offset
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            ok = np.broadcast_to(np.asarray(self._argcheck(*plain), dtype=bool), shape)
            if method not in ("ppf", "isf"):
                z0 = (_plain(x) - _plain(loc)) / _plain(scale)
                ok = ok & np.broadcast_to(self._support_mask(z0, *plain), shape)
            vals = _valid_entries(self, method, x, loc, scale, tuple(traced), tuple(plain), cond, traced_shapes)
        if not (np.all(ok[cond]) and np.all(np.isfinite(strip(vals)))):
            which = ", ".join(names[i] for i in traced_shapes)
            raise NonDifferentiableArgumentError(
                f"tapegrad cannot differentiate {_where(self, method)} with respect to {which} at 0: SciPy "
                "evaluates that point by a separate limit formula, and the general one is not defined on "
                "both sides of it here. Move the parameter off 0, or pass it as a plain value."
            )
        return vals

    h = LIMIT_STEP
    wide = (at(h) + at(-h)) / 2
    narrow = (at(h / 2) + at(-h / 2)) / 2
    return (4 * narrow - wide) / 3


def _bound_entries(self: Any, method: str, loc: Any, scale: Any, shapes: tuple, mask: np.ndarray, end: int) -> Any:
    """``ppf(0)``, ``ppf(1)`` (``isf`` alike): a support bound times ``scale`` plus ``loc``."""
    shape = mask.shape
    shs = tuple(_gather(s, shape, mask, always=True) for s in shapes)
    try:
        bound = self._get_support(*shs)[end]
    except _UNTRACEABLE as exc:
        params = [n for n, s in zip(_shape_names(self, len(shapes)), shapes) if _traced(s)]
        raise _cannot(self, method, params, exc) from exc
    bound = np.broadcast_to(bound, np.shape(shs[0]) if shs else (int(mask.sum()),))
    ls, ss = _gather(loc, shape, mask, always=True), _gather(scale, shape, mask, always=True)
    finite = np.isfinite(strip(bound))
    if finite.all():
        out = bound * ss + ls
    else:
        # An infinite bound is a constant (its derivative is zero; inf * 0 would be nan).
        out = np.zeros_like(ls + ss + bound, dtype=np.float64) + np.where(finite, 0.0, _plain(bound))
        out[finite] = (bound * ss + ls)[finite]
    return out


# ---------------------------------------------------------------- discrete distributions
def _discrete_rule(method: str) -> Callable[..., Any]:
    public = getattr(rv_discrete, method)

    def impl(self: Any, k: Any, *args: Any, **kwds: Any) -> Any:
        shapes, loc, _ = self._parse_args(*args, **kwds)
        k, loc = _as_arg(k), _as_arg(loc)
        shapes = tuple(_as_arg(s) for s in shapes)
        arg = "q" if method in ("ppf", "isf") else "k"
        for name, v in ((arg, k), ("loc", loc)):
            if _traced(v):
                raise NonDifferentiableArgumentError(
                    f"tapegrad cannot differentiate {_where(self, method)} with respect to {name}: "
                    + ("the quantile of a discrete distribution is a step function of q"
                       if name == "q" else
                       f"a discrete distribution's {name} is integer-valued")
                    + f". Pass {name} as a plain array (or tapegrad.stop_gradient({name}))."
                )
        kv, lv = _plain(k), _plain(loc)
        shv = tuple(_plain(s) for s in shapes)
        exact = public(self, kv, *strip_all(args), **strip_all(kwds))
        traced_shapes = [i for i, s in enumerate(shapes) if _traced(s)]
        names = _shape_names(self, len(shapes))
        if method in ("ppf", "isf"):
            if traced_shapes:
                raise NonDifferentiableArgumentError(
                    f"tapegrad cannot differentiate {_where(self, method)} with respect to "
                    f"{', '.join(names[i] for i in traced_shapes)}: the quantile of a discrete "
                    "distribution is integer-valued, a step function of its parameters. Pass them "
                    "as plain values (or tapegrad.stop_gradient) to treat them as constants."
                )
            return _constant(exact, shapes)
        if traced_shapes:
            _check_integral(self, method, shapes, shv)
        a, b = self._get_support(*shv)
        kk = np.asarray(kv - lv)
        cond0 = np.asarray(self._argcheck(*shv), dtype=bool)
        if method in ("pmf", "logpmf"):
            cond1 = (kk >= a) & (kk <= b)
            if not isinstance(self, _rv_sample):
                cond1 = cond1 & self._nonzero(kk, *shv)
            cond = cond0 & cond1
        else:
            cond = cond0 & (kk >= a) & (kk < b)
            if method in ("cdf", "sf"):
                cond = cond & np.isfinite(kk)
        cond = np.asarray(cond, dtype=bool)
        if not cond.any() or not traced_shapes:
            return _constant(exact, shapes)
        shape = cond.shape
        ks = _gather(kk, shape, cond)
        shs = tuple(_gather(s, shape, cond) for s in shapes)
        try:
            if method in ("pmf", "logpmf"):
                vals = _density(self, ks, shs, log=method == "logpmf", mass=True)
            else:
                vals = getattr(self, "_" + method)(ks, *shs)
        except _UNTRACEABLE as exc:
            vals = _summed_tail(self, method, ks, shs, _gather(np.broadcast_to(a, shape), shape, cond),
                                _gather(np.asarray(exact, dtype=np.float64), shape, cond, always=True))
            if vals is None:
                raise _cannot(self, method, [names[i] for i in traced_shapes], exc) from exc
        if not _traced(vals):
            return _constant(exact, shapes)
        return _result(_scatter(vals, cond, np.asarray(exact, dtype=np.float64)), exact)

    impl.__name__ = f"{method}_rule"
    impl.__doc__ = f"Traced ``rv_discrete.{method}``: SciPy's value, derivatives in the shape parameters."
    return impl


try:
    from scipy.stats._distn_infrastructure import rv_sample as _rv_sample
except ImportError:  # pragma: no cover - every SciPy this rule module supports has it
    _rv_sample = ()


#: The most probability masses :func:`_summed_tail` adds up in one call.
MAX_SUMMED_TERMS = 10**6


def _summed_tail(self: Any, method: str, ks: Any, shs: tuple, lower: Any, exact: np.ndarray) -> Any:
    """A discrete ``cdf``/``sf``/``logcdf``/``logsf`` whose private method cannot be traced.

    ``cdf(k) = pmf(a) + ... + pmf(k)`` over the finite support ``a, a+1, ...``: an
    exact finite sum of traced masses ``S``.  The result is SciPy's value ``c``
    moved by ``S - S0`` (``S0`` its value): ``c + (S - S0)`` for ``cdf``,
    ``c - (S - S0)`` for ``sf``, their logarithms for ``logcdf``/``logsf``, so
    every derivative is that of the sum, and the tails' own values are SciPy's.
    ``None`` when the support is unbounded below or the sum would be too long.
    """
    ks, lower = np.ravel(np.floor(ks)), np.ravel(np.broadcast_to(lower, np.shape(ks)))
    if ks.size == 0 or not np.all(np.isfinite(lower)):
        return None
    terms = int(np.max(ks - lower)) + 1
    if terms < 1 or terms * ks.size > MAX_SUMMED_TERMS:
        return None
    offsets = np.arange(terms)
    inside = offsets <= (ks - lower)[:, None]
    points = lower[:, None] + np.where(inside, offsets, 0)  # masses beyond k: taken at a, then dropped
    grid = (ks.size, terms)
    flat = tuple(np.reshape(np.broadcast_to(np.reshape(s, (-1, 1)) if np.size(s) > 1 else s, grid), (-1,))
                 for s in shs)
    try:
        masses = np.reshape(_density(self, np.reshape(points, (-1,)), flat, mass=True), grid)
    except _UNTRACEABLE:
        return None
    total = np.sum(np.where(inside, masses, 0.0), axis=-1)
    moved = total - strip(total)
    if method in ("cdf", "logcdf"):
        tail = exact if method == "cdf" else np.exp(exact)
        value = tail + moved
    else:
        tail = exact if method == "sf" else np.exp(exact)
        value = tail - moved
    return value if method in ("cdf", "sf") else np.log(value)


# ---------------------------------------------------------------- frozen distributions
def _frozen_init(self: Any, dist: Any, *args: Any, **kwds: Any) -> None:
    # SciPy's constructor computes the support from the shape parameters: on plain
    # values here; the frozen methods pass the traced ones to the distribution.
    rv_frozen.__init__(self, dist, *strip_all(args), **strip_all(kwds))
    self.args = args
    self.kwds = kwds


# ---------------------------------------------------------------- the negative log-likelihood
def _nnlf(self: Any, theta: Any, x: Any) -> Any:
    """``nnlf(theta, x)``: SciPy's value; the derivative of ``-sum(logpdf(x, *shapes, loc, scale))``."""
    from scipy.stats._distn_infrastructure import rv_generic

    exact = rv_generic.nnlf(self, strip_all(theta), strip_all(x))
    refs = (tuple(theta) if isinstance(theta, (tuple, list)) else (theta,)) + (x,)
    if not isinstance(self, rv_continuous):
        raise UnsupportedFunctionError(
            f"{_where(self, 'nnlf')}", "tapegrad differentiates nnlf of continuous distributions; "
            "write -np.sum(dist.logpmf(k, ...)) for a discrete one."
        )
    if not np.isfinite(exact):  # invalid parameters or data outside the support: SciPy's inf
        return _constant(exact, refs)
    loc, scale, args = self._unpack_loc_scale(theta)
    return _result(-np.sum(self.logpdf(x, *args, loc=loc, scale=scale)), exact)


# ---------------------------------------------------------------- other methods: clear errors
def _unsupported(name: str) -> Callable[..., Any]:
    def impl(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise UnsupportedFunctionError(
            f"scipy.stats.{getattr(self, 'name', type(self).__name__)}.{name}",
            "tapegrad differentiates the pdf/logpdf/pmf/logpmf/cdf/logcdf/sf/logsf/ppf/isf "
            "methods of scipy.stats distributions; compute this quantity from those, or pass "
            "plain parameters.",
        )

    return impl


def _register() -> None:
    for method in CONTINUOUS_METHODS:
        defcomposite(intercepted(rv_continuous.__dict__[method]), _continuous_rule(method))
    for method in DISCRETE_METHODS:
        defcomposite(intercepted(rv_discrete.__dict__[method]), _discrete_rule(method))
    defcomposite(intercepted(rv_frozen.__dict__["__init__"]), _frozen_init)
    from scipy.stats._distn_infrastructure import rv_generic

    if "nnlf" in rv_generic.__dict__:
        defcomposite(intercepted(rv_generic.__dict__["nnlf"]), _nnlf)

    for owner in (rv_generic, rv_continuous, rv_discrete):
        # median and interval are SciPy's own ppf calls: they run as they are.
        # stats (so mean, var and std) and rvs: rules/scipy_stats_moments.py.
        for name in ("entropy", "moment", "expect", "fit", "fit_loc_scale", "logrvs"):
            fun = owner.__dict__.get(name)
            if callable(fun) and getattr(fun, "__code__", None) is not None:
                defcomposite(intercepted(fun), _unsupported(name))


_register()


from . import scipy_stats_binned, scipy_stats_kde, scipy_stats_moments, scipy_stats_multivariate, scipy_stats_where  # noqa: E402,F401  (register their rules on import)
