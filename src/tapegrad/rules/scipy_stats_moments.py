"""Moments and reparameterized draws of ``scipy.stats`` distributions with traced parameters.

``stats`` (and so ``mean``, ``var``, ``std``, frozen or not)
    SciPy's own value on the plain parameters first (its checks, its numbers, bit
    for bit); the derivative comes from the distribution's closed-form moments,
    its private ``_stats`` (or an overridden ``_munp``), run on the tracers: the
    mean is ``mu * scale + loc``, the variance ``mu2 * scale**2``, skewness and
    excess kurtosis do not move with ``loc`` and ``scale``.  Invalid parameters
    give SciPy's ``nan`` (no derivative).  A moment SciPy computes by numerical
    integration (no closed form) raises a clear error.
``rvs`` (continuous distributions)
    The reparameterization trick, with the draw SciPy makes: ``rvs(..., loc, scale)``
    is ``z * scale + loc`` where ``z`` is SciPy's standard draw from the same random
    state (one draw, the same numbers as the eager call), so its derivative in
    ``loc`` is 1 and in ``scale`` is ``z``.  A traced shape parameter raises a clear
    error (its draw is not a smooth function of it in SciPy's samplers).  Discrete
    draws are integers, with no derivative: SciPy's own call.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.stats._distn_infrastructure import rv_continuous, rv_discrete, rv_generic

from ..binding import has_tracer, strip_all
from ..errors import NonDifferentiableArgumentError, UnsupportedFunctionError
from ..registry import ORIGINALS, defcomposite, intercepted
from ._scipy_util import with_value

__all__: list = []

_STATS = rv_generic.__dict__["stats"]
_RVS = rv_generic.__dict__["rvs"]


def _name(dist: Any) -> str:
    return f"scipy.stats.{getattr(dist, 'name', type(dist).__name__)}"


def _closed_form_moment(dist: Any, k: int, shapes: tuple, what: str) -> Any:
    overridden = type(dist)._munp is not rv_continuous._munp and type(dist)._munp is not rv_discrete._munp
    if not overridden:
        raise UnsupportedFunctionError(
            f"{_name(dist)}.{what}",
            "SciPy computes this moment by numerical integration (the distribution has no closed form "
            "for it), which tapegrad does not differentiate; pass plain parameters.",
        )
    return dist._munp(k, *shapes)


def _traced_stats(self, *args, **kwds):
    exact = ORIGINALS[_STATS](self, *strip_all(args), **strip_all(kwds))
    shapes, loc, scale, moments = self._parse_args_stats(*args, **kwds)
    p_shapes, p_loc, p_scale = strip_all(shapes), np.asarray(strip_all(loc)), np.asarray(strip_all(scale))
    cond = self._argcheck(*map(np.asarray, p_shapes)) & (p_scale > 0) & (p_loc == p_loc)
    if not np.any(cond):
        return exact
    shape = np.shape(cond)
    shapes = tuple(np.broadcast_to(s, shape) if np.ndim(s) or shape else s for s in shapes)
    with np.errstate(all="ignore"):
        if self._stats_has_moments:
            mu, mu2, g1, g2 = self._stats(*shapes, moments=moments)
        else:
            mu, mu2, g1, g2 = self._stats(*shapes)
        if ("m" in moments or "v" in moments) and mu is None:
            mu = _closed_form_moment(self, 1, shapes, "mean")
        if "v" in moments and mu2 is None:
            mu2 = _closed_form_moment(self, 2, shapes, "var") - mu**2
        if ("s" in moments and g1 is None) or ("k" in moments and g2 is None):
            raise UnsupportedFunctionError(
                f"{_name(self)}.stats", "this distribution's skewness or kurtosis has no closed form in SciPy; "
                "tapegrad differentiates the closed-form moments only."
            )
        values = {"m": lambda: mu * scale + loc, "v": lambda: mu2 * scale * scale, "s": lambda: g1, "k": lambda: g2}
        results = []
        for moment, value in zip(moments, exact if len(moments) > 1 else (exact,)):
            traced = np.where(cond, values[moment](), self.badvalue)
            results.append(with_value(np.reshape(np.broadcast_to(traced, shape), np.shape(value)), value))
    return results[0] if len(results) == 1 else tuple(results)


def _traced_rvs(self, *args, **kwds):
    if not (has_tracer(args) or has_tracer(kwds)) or isinstance(self, rv_discrete):
        return ORIGINALS[_RVS](self, *strip_all(args), **strip_all(kwds))  # integer draws: no derivative
    kwds = dict(kwds)
    discrete, random_state = kwds.pop("discrete", None), kwds.pop("random_state", None)
    shapes, loc, scale, size = self._parse_args_rvs(*strip_all(args), **strip_all(kwds))
    traced_shapes, traced_loc, traced_scale = self._parse_args(*args, **{k: v for k, v in kwds.items() if k != "size"})
    if has_tracer(traced_shapes):
        raise NonDifferentiableArgumentError(
            f"{_name(self)}.rvs: a traced shape parameter is not differentiated (SciPy's sampler for it is "
            "not a smooth function of the parameter); only loc and scale are reparameterized"
        )
    cond = np.logical_and(self._argcheck(*shapes), (np.asarray(scale) >= 0))
    extra = {} if discrete is None else {"discrete": discrete}
    if not np.all(cond) or np.all(np.asarray(scale) == 0):
        # SciPy's own error (before any draw), or its constant loc * ones(size): the same call.
        out = ORIGINALS[_RVS](self, *shapes, loc=loc, scale=scale, size=size, random_state=random_state, **extra)
        return out if not np.all(cond) else traced_loc * np.ones(size, "d")
    standard = ORIGINALS[_RVS](self, *shapes, loc=0, scale=1, size=size, random_state=random_state)
    return standard * traced_scale + traced_loc  # SciPy's own arithmetic: vals * scale + loc


defcomposite(intercepted(_STATS), _traced_stats, note="closed-form moments (_stats) on the tracers")
defcomposite(intercepted(_RVS), _traced_rvs, note="z * scale + loc with SciPy's standard draw z")
