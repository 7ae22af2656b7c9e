"""Derivatives of ``multivariate_normal`` and ``multivariate_t`` (imported by :mod:`.scipy_stats`).

SciPy factors the covariance (or shape) matrix with ``scipy.linalg.eigh`` in
compiled code, which no tracer can pass.  These composites first let SciPy
process and check the plain arguments (its errors and its exact value come
back unchanged), then compute the same density with differentiable NumPy
linear algebra on the traced arguments:

    log N(x; m, S) = -(d log(2 pi) + log det S + (x - m)^T S^-1 (x - m)) / 2

with ``S`` built from the *lower triangle* of ``cov``, the only part SciPy's
``eigh`` reads (so the derivative with respect to an upper entry is zero, as
SciPy's function is constant in it).  A singular matrix (``allow_singular``
with rank below the dimension) is differentiated by none of them: a clear
error.  ``dirichlet`` needs no rule: its SciPy code is NumPy and
``scipy.special`` calls, traced as they are.
"""

from __future__ import annotations

import math
from typing import Any, Tuple

import numpy as np
from scipy.stats import _multivariate as mv

from ..errors import NonDifferentiableArgumentError, UnsupportedFunctionError
from ..registry import defcomposite, intercepted
from ..tracer import Tracer, strip
from ._scipy_util import with_value

_LOG_2PI = math.log(2 * math.pi)


def _traced(v: Any) -> bool:
    return type(v) is Tracer


def _as_arg(v: Any) -> Any:
    return v if v is None or type(v) is Tracer else np.asarray(v)


def _plain(v: Any) -> Any:
    return None if v is None else np.asarray(strip(v))


def _constant_like(exact: Any, refs: Tuple[Any, ...]) -> Any:
    ref = max((r for r in refs if _traced(r)), key=lambda r: r._tape.level, default=None)
    if ref is None:
        return exact
    return np.zeros_like(ref, shape=np.shape(exact), dtype=np.float64) + np.asarray(exact)


def _exact(traced: Any, exact: Any) -> Any:
    return with_value(np.reshape(traced, np.shape(exact)), np.asarray(exact))


def _vector(v: Any, dim: int, default: Any) -> Any:
    if v is None:
        return default
    v = v.astype(np.float64) if np.result_type(v) != np.float64 else v
    return np.reshape(v, (1,)) if dim == 1 else v


def _matrix(c: Any, dim: int, name: str, where: str) -> Any:
    """The full matrix SciPy makes of ``c`` (scalar, diagonal or matrix), symmetric from its lower triangle."""
    if isinstance(c, mv._covariance.Covariance):
        return c.covariance
    c = c.astype(np.float64) if np.result_type(c) != np.float64 else c
    if dim == 1:
        c = np.reshape(c, (1, 1))
    if np.ndim(c) == 0:
        return c * np.eye(dim)
    if np.ndim(c) == 1:
        return np.diag(c)
    lower = np.tril(c)
    return lower + np.swapaxes(np.tril(c, -1), -1, -2)


def _quantiles(x: Any, dim: int) -> Any:
    x = x.astype(np.float64) if np.result_type(x) != np.float64 else x
    if np.ndim(x) == 0:
        return np.reshape(x, (1,))
    if np.ndim(x) == 1:
        return np.reshape(x, (-1, 1)) if dim == 1 else np.reshape(x, (1, -1))
    return x


def _check_rank(rank: int, dim: int, where: str, name: str) -> None:
    if rank < dim:
        raise NonDifferentiableArgumentError(
            f"tapegrad cannot differentiate {where} with a singular {name} matrix (rank {rank} < {dim}): "
            f"SciPy then uses a pseudo-inverse on the subspace it spans. Give a nonsingular {name}, "
            "or pass the arguments as plain values (tapegrad.stop_gradient)."
        )


def _log_det_and_maha(x: Any, mean: Any, S: Any) -> Tuple[Any, Any]:
    dim = np.shape(S)[-1]
    dev = x - mean
    flat = np.reshape(dev, (-1, dim))
    solved = np.linalg.solve(S, np.swapaxes(flat, -1, -2))
    maha = np.reshape(np.sum(np.swapaxes(flat, -1, -2) * solved, axis=-2), np.shape(dev)[:-1])
    return np.linalg.slogdet(S)[1], maha


# ------------------------------------------------------------------ multivariate_normal
def _mvn_logpdf_traced(x: Any, mean: Any, cov: Any, allow_singular: bool, where: str) -> Tuple[int, Any]:
    dist = mv.multivariate_normal
    dim, _, cov_object = dist._process_parameters(_plain(mean), cov if isinstance(cov, mv._covariance.Covariance)
                                                  else _plain(cov), allow_singular)
    _check_rank(int(np.min(cov_object.rank)), dim, where, "covariance")
    m = _vector(_as_arg(mean), dim, np.zeros(dim))
    S = _matrix(cov if isinstance(cov, mv._covariance.Covariance) else _as_arg(cov), dim, "cov", where)
    xq = _quantiles(_as_arg(x), dim)
    log_det, maha = _log_det_and_maha(xq, m, S)
    return dim, -0.5 * (dim * _LOG_2PI + log_det + maha)


def _mvn_logpdf(self: Any, x: Any, mean: Any = None, cov: Any = 1, allow_singular: bool = False) -> Any:
    exact = mv.multivariate_normal_gen.logpdf(self, _plain(x), _plain(mean), _plain_cov(cov), allow_singular)
    if not any(_traced(v) for v in (x, mean, cov)):
        return exact
    _, out = _mvn_logpdf_traced(x, mean, cov, allow_singular, "scipy.stats.multivariate_normal.logpdf")
    return _exact(out, exact)


def _mvn_pdf(self: Any, x: Any, mean: Any = None, cov: Any = 1, allow_singular: bool = False) -> Any:
    exact = mv.multivariate_normal_gen.pdf(self, _plain(x), _plain(mean), _plain_cov(cov), allow_singular)
    if not any(_traced(v) for v in (x, mean, cov)):
        return exact
    _, out = _mvn_logpdf_traced(x, mean, cov, allow_singular, "scipy.stats.multivariate_normal.pdf")
    return _exact(np.exp(out), exact)


def _mvn_entropy(self: Any, mean: Any = None, cov: Any = 1) -> Any:
    exact = mv.multivariate_normal_gen.entropy(self, _plain(mean), _plain_cov(cov))
    if not _traced(cov):
        return _constant_like(exact, (mean,))
    dim, _, cov_object = self._process_parameters(_plain(mean), _plain(cov))
    _check_rank(int(cov_object.rank), dim, "scipy.stats.multivariate_normal.entropy", "covariance")
    S = _matrix(cov, dim, "cov", "scipy.stats.multivariate_normal.entropy")
    return _exact(0.5 * (dim * (_LOG_2PI + 1) + np.linalg.slogdet(S)[1]), exact)


def _plain_cov(cov: Any) -> Any:
    return cov if isinstance(cov, mv._covariance.Covariance) else _plain(cov)


_MVN_TRACED = "_tapegrad_traced"  # the frozen object's traced (mean, cov), when it was made from tracers


def _mvn_frozen_init(self: Any, mean: Any = None, cov: Any = 1, allow_singular: bool = False, seed: Any = None,
                     maxpts: Any = None, abseps: float = 1e-5, releps: float = 1e-5) -> None:
    mv.multivariate_normal_frozen.__init__(self, _plain(mean), _plain_cov(cov), allow_singular, seed, maxpts,
                                           abseps, releps)
    self.__dict__[_MVN_TRACED] = (mean, cov)


def _frozen_params(self: Any, cov_attr: str) -> Tuple[Any, Any]:
    traced = self.__dict__.get(_MVN_TRACED)
    if traced is not None:
        return traced
    return strip(getattr(self, "mean" if cov_attr == "cov_object" else "loc")), getattr(self, cov_attr)


def _mvn_frozen_logpdf(self: Any, x: Any) -> Any:
    mean, cov = _frozen_params(self, "cov_object")
    return _mvn_logpdf(mv.multivariate_normal, x, mean, cov, self.allow_singular)


def _mvn_frozen_pdf(self: Any, x: Any) -> Any:
    mean, cov = _frozen_params(self, "cov_object")
    return _mvn_pdf(mv.multivariate_normal, x, mean, cov, self.allow_singular)


def _mvn_frozen_entropy(self: Any) -> Any:
    mean, cov = _frozen_params(self, "cov_object")
    if isinstance(cov, mv._covariance.Covariance):
        return mv.multivariate_normal_frozen.entropy(self)
    return _mvn_entropy(mv.multivariate_normal, mean, cov)


# ------------------------------------------------------------------ multivariate_t
def _mvt_logpdf_traced(x: Any, loc: Any, shape: Any, df: Any, allow_singular: bool, where: str) -> Any:
    dist = mv.multivariate_t
    dim, _, shape_p, df_p = dist._process_parameters(_plain(loc), _plain(shape), _plain(df))
    if df_p == np.inf:
        return _mvn_logpdf_traced(x, loc, shape, allow_singular, where)[1]
    _check_rank(mv._PSD(shape_p, allow_singular=allow_singular).rank, dim, where, "shape")
    m = _vector(_as_arg(loc), dim, np.zeros(dim))
    S = _matrix(_as_arg(shape), dim, "shape", where)
    xq = _quantiles(_as_arg(x), dim)
    log_det, maha = _log_det_and_maha(xq, m, S)
    from scipy.special import gammaln

    df = _as_arg(df)
    t = 0.5 * (df + dim)
    return gammaln(t) - gammaln(0.5 * df) - dim / 2.0 * np.log(df * np.pi) - 0.5 * log_det - t * np.log1p(maha / df)


def _mvt_logpdf(self: Any, x: Any, loc: Any = None, shape: Any = 1, df: Any = 1) -> Any:
    exact = mv.multivariate_t_gen.logpdf(self, _plain(x), _plain(loc), _plain(shape), _plain(df))
    if not any(_traced(v) for v in (x, loc, shape, df)):
        return exact
    return _exact(_mvt_logpdf_traced(x, loc, shape, df, False, "scipy.stats.multivariate_t.logpdf"), exact)


def _mvt_pdf(self: Any, x: Any, loc: Any = None, shape: Any = 1, df: Any = 1, allow_singular: bool = False) -> Any:
    exact = mv.multivariate_t_gen.pdf(self, _plain(x), _plain(loc), _plain(shape), _plain(df), allow_singular)
    if not any(_traced(v) for v in (x, loc, shape, df)):
        return exact
    out = _mvt_logpdf_traced(x, loc, shape, df, allow_singular, "scipy.stats.multivariate_t.pdf")
    return _exact(np.exp(out), exact)


def _mvt_frozen_init(self: Any, loc: Any = None, shape: Any = 1, df: Any = 1, allow_singular: bool = False,
                     seed: Any = None) -> None:
    mv.multivariate_t_frozen.__init__(self, _plain(loc), _plain(shape), _plain(df), allow_singular, seed)
    self.__dict__[_MVN_TRACED] = (loc, shape, df, allow_singular)


def _mvt_frozen_params(self: Any) -> Tuple[Any, Any, Any, bool]:
    traced = self.__dict__.get(_MVN_TRACED)
    if traced is not None:
        return traced
    return self.loc, self.shape, self.df, bool(self.shape_info.rank < self.dim)


def _mvt_frozen_logpdf(self: Any, x: Any) -> Any:
    loc, shape, df, allow_singular = _mvt_frozen_params(self)
    exact = mv.multivariate_t_frozen.logpdf(self, _plain(x)) if _MVN_TRACED not in self.__dict__ else \
        mv.multivariate_t_frozen(_plain(loc), _plain(shape), _plain(df), allow_singular).logpdf(_plain(x))
    out = _mvt_logpdf_traced(x, loc, shape, df, allow_singular, "scipy.stats.multivariate_t.logpdf")
    return _exact(out, exact)


def _mvt_frozen_pdf(self: Any, x: Any) -> Any:
    return np.exp(_mvt_frozen_logpdf(self, x))


def _frozen_unsupported(dist: str, name: str) -> Any:
    def impl(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise UnsupportedFunctionError(
            f"scipy.stats.{dist}(...).{name}",
            f"tapegrad differentiates the logpdf, pdf{' and entropy' if dist == 'multivariate_normal' else ''} "
            f"of a frozen {dist} made from traced parameters (or called at traced points); "
            f"pass plain parameters to use {name}.",
        )

    return impl


def _register() -> None:
    # Methods of a frozen object made from traced parameters that have no rule refuse
    # (SciPy would compute them from the plain copies the constructor keeps).
    for dist, frozen in (("multivariate_normal", mv.multivariate_normal_frozen),
                         ("multivariate_t", mv.multivariate_t_frozen)):
        for name in ("cdf", "logcdf", "rvs", "marginal", "entropy"):
            fun = frozen.__dict__.get(name)
            if fun is not None and not (dist == "multivariate_normal" and name == "entropy"):
                defcomposite(intercepted(fun, inspect_self=True), _frozen_unsupported(dist, name))
    gen, frozen = mv.multivariate_normal_gen, mv.multivariate_normal_frozen
    defcomposite(intercepted(gen.__dict__["logpdf"]), _mvn_logpdf)
    defcomposite(intercepted(gen.__dict__["pdf"]), _mvn_pdf)
    defcomposite(intercepted(gen.__dict__["entropy"]), _mvn_entropy)
    defcomposite(intercepted(frozen.__dict__["__init__"]), _mvn_frozen_init)
    defcomposite(intercepted(frozen.__dict__["logpdf"], inspect_self=True), _mvn_frozen_logpdf)
    defcomposite(intercepted(frozen.__dict__["pdf"], inspect_self=True), _mvn_frozen_pdf)
    defcomposite(intercepted(frozen.__dict__["entropy"], inspect_self=True), _mvn_frozen_entropy)
    tgen, tfrozen = mv.multivariate_t_gen, mv.multivariate_t_frozen
    defcomposite(intercepted(tgen.__dict__["logpdf"]), _mvt_logpdf)
    defcomposite(intercepted(tgen.__dict__["pdf"]), _mvt_pdf)
    defcomposite(intercepted(tfrozen.__dict__["__init__"]), _mvt_frozen_init)
    defcomposite(intercepted(tfrozen.__dict__["logpdf"], inspect_self=True), _mvt_frozen_logpdf)
    defcomposite(intercepted(tfrozen.__dict__["pdf"], inspect_self=True), _mvt_frozen_pdf)


_register()
