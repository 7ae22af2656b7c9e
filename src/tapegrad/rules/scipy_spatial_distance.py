"""Derivatives of ``scipy.spatial.distance.cdist``, ``pdist`` and ``squareform``, through SciPy's door.

``cdist`` and ``pdist`` hand their arrays to C loops, so a tracer would lose its
gradient there.  While a tape records, a call with a traced argument (the points,
or a traced weight ``w``, variance ``V`` or inverse covariance ``VI``) comes here:
SciPy's own call on the plain values runs first (its checks, its errors and
its numbers, bit for bit, are the result's), then the distances are
computed again with NumPy on the pairs of rows, which tapegrad records, at any
order.  A pair ``(i, j)`` is one row of each operand gathered with constant
indices (``pdist``: ``i < j`` in SciPy's condensed order), so memory is
``pairs x features``, like the C loop's work.

Metrics: ``euclidean``, ``sqeuclidean``, ``cityblock``, ``minkowski`` (``p``),
``chebyshev``, ``cosine``, ``correlation``, ``seuclidean`` (``V``, by default the
variance of the points with ``ddof=1``, traced with them), ``mahalanobis``
(``VI``, by default the inverse covariance of the points), ``braycurtis``,
``canberra``, the weights ``w`` where SciPy takes them, and a Python callable
(called on each pair of traced rows).  The boolean and set metrics (``hamming``,
``jaccard``, ...) count equal entries: their value is piecewise constant in the
points, a derivative of zero, and they return SciPy's plain result.  Kinks take
tapegrad's usual subgradients: 0 for ``|t|`` at 0 and for a norm at a zero
difference (the distance of a point to itself, a ``cdist`` of coincident points),
ties of ``chebyshev`` shared.  ``squareform`` moves the traced entries.
"""

from __future__ import annotations

from typing import Any, Callable, Dict

import numpy as np
import scipy.spatial.distance as _distance

from ..dispatch import strip
from ..errors import NonDifferentiableArgumentError
from ..registry import ORIGINALS, defcomposite, intercepted
from ..tracer import Tracer
from ._scipy_util import with_value

__all__: list = []

#: Metrics whose value is piecewise constant in the points: SciPy's plain result is exact.
_CONSTANT_METRICS = frozenset(
    {"hamming", "jaccard", "dice", "kulczynski1", "rogerstanimoto", "russellrao", "sokalmichener",
     "sokalsneath", "yule", "matching"}
)


def _safe_sqrt(s: Any) -> Any:
    """``sqrt(s)`` with the subgradient 0 where ``s == 0`` (a zero difference), not ``inf``."""
    positive = strip(s) > 0
    return np.where(positive, np.sqrt(np.where(positive, s, 1.0)), 0.0)


def _safe_ratio(num: Any, den: Any) -> Any:
    """``num / den`` with ``0 / 0 = 0``, as SciPy's canberra and braycurtis."""
    zero = strip(den) == 0
    return np.where(zero, 0.0, num / np.where(zero, 1.0, den))


def _weights(w: Any, n: int) -> Any:
    return np.ones(n) if w is None else w


def _euclidean(u, v, w=None):
    return _safe_sqrt(np.sum(_weights(w, u.shape[-1]) * (u - v) ** 2, axis=-1))


def _sqeuclidean(u, v, w=None):
    return np.sum(_weights(w, u.shape[-1]) * (u - v) ** 2, axis=-1)


def _cityblock(u, v, w=None):
    return np.sum(_weights(w, u.shape[-1]) * np.abs(u - v), axis=-1)


def _minkowski(u, v, p=2.0, w=None):
    if np.isinf(strip(p)):
        return _chebyshev(u, v, w)
    d = np.abs(u - v)
    s = np.sum(_weights(w, u.shape[-1]) * d**p, axis=-1)
    positive = strip(s) > 0
    return np.where(positive, np.where(positive, s, 1.0) ** (1.0 / p), 0.0)


def _chebyshev(u, v, w=None):
    d = np.abs(u - v)
    if w is not None:
        d = np.where(strip(w) > 0, d, 0.0)
    return np.max(d, axis=-1)


def _cosine(u, v, w=None):
    w = _weights(w, u.shape[-1])
    uv = np.sum(w * u * v, axis=-1)
    uu = np.sum(w * u * u, axis=-1)
    vv = np.sum(w * v * v, axis=-1)
    # SciPy clips the distance to [0, 2] (rounding): clip's subgradient is the identity inside.
    return np.clip(1.0 - uv / np.sqrt(uu * vv), 0.0, 2.0)


def _correlation(u, v, w=None, centered=True):
    if centered:
        wv = _weights(w, u.shape[-1])
        u = u - np.sum(wv * u, axis=-1, keepdims=True) / np.sum(wv)
        v = v - np.sum(wv * v, axis=-1, keepdims=True) / np.sum(wv)
    return _cosine(u, v, w)


def _seuclidean(u, v, V):
    return _safe_sqrt(np.sum((u - v) ** 2 / V, axis=-1))


def _mahalanobis(u, v, VI):
    d = u - v
    return _safe_sqrt(np.einsum("...i,ij,...j->...", d, VI, d))


def _braycurtis(u, v, w=None):
    w = _weights(w, u.shape[-1])
    return _safe_ratio(np.sum(w * np.abs(u - v), axis=-1), np.sum(w * np.abs(u + v), axis=-1))


def _canberra(u, v, w=None):
    terms = _safe_ratio(np.abs(u - v), np.abs(u) + np.abs(v))
    return np.sum(_weights(w, u.shape[-1]) * terms, axis=-1)


_METRICS: Dict[str, Callable[..., Any]] = {
    "euclidean": _euclidean, "sqeuclidean": _sqeuclidean, "cityblock": _cityblock,
    "minkowski": _minkowski, "chebyshev": _chebyshev, "cosine": _cosine,
    "correlation": _correlation, "seuclidean": _seuclidean, "mahalanobis": _mahalanobis,
    "braycurtis": _braycurtis, "canberra": _canberra,
}
#: SciPy's other spellings of the same metrics.
_ALIASES = {
    "euclid": "euclidean", "eu": "euclidean", "e": "euclidean", "sqe": "sqeuclidean", "sqeuclid": "sqeuclidean",
    "cblock": "cityblock", "cb": "cityblock", "c": "cityblock", "manhattan": "cityblock",
    "mi": "minkowski", "minkowski": "minkowski", "pnorm": "minkowski", "cos": "cosine",
    "cheb": "chebyshev", "chebychev": "chebyshev", "cheby": "chebyshev", "ch": "chebyshev",
    "chebyshev": "chebyshev", "corr": "correlation", "co": "correlation", "se": "seuclidean",
    "mahal": "mahalanobis", "mah": "mahalanobis", "braycurtis": "braycurtis", "canberra": "canberra",
}


def _name_of(metric: Any, fun: str) -> str:
    name = metric.lower() if isinstance(metric, str) else metric
    name = _ALIASES.get(name, name)
    if name not in _METRICS and name not in _CONSTANT_METRICS:
        raise NonDifferentiableArgumentError(
            f"scipy.spatial.distance.{fun}: tapegrad has no derivative rule for metric={metric!r} with traced "
            f"values; the metrics it differentiates are {', '.join(sorted(_METRICS))} and Python callables"
        )
    return name


def _defaults(name: str, stacked: Any, kwargs: dict) -> dict:
    """SciPy's default ``V``/``VI`` (from all the points, traced with them), else the caller's."""
    if name == "seuclidean" and kwargs.get("V") is None:
        kwargs["V"] = np.var(stacked, axis=0, ddof=1)
    if name == "mahalanobis" and kwargs.get("VI") is None:
        kwargs["VI"] = np.linalg.inv(np.cov(stacked.T)).T
    return kwargs


def _distances(name_or_fun: Any, U: Any, V: Any, kwargs: dict) -> Any:
    if callable(name_or_fun):
        return np.stack([np.asarray(name_or_fun(U[k], V[k], **kwargs)) for k in range(U.shape[0])]) if U.shape[0] else np.zeros(0)
    return _METRICS[name_or_fun](U, V, **kwargs)


def _refuse_out(fun: str, out: Any) -> None:
    if out is not None:
        raise NonDifferentiableArgumentError(
            f"scipy.spatial.distance.{fun}: out= with traced points would write traced distances into a "
            "plain array and drop their gradient; use the returned array instead"
        )


def _as_points(X: Any) -> Any:
    X = X if type(X) is Tracer else np.asarray(X)
    return X.astype(np.float64) if X.dtype != np.float64 else X


def _cdist(XA, XB, metric="euclidean", *, out=None, **kwargs):
    _refuse_out("cdist", out)
    expected = ORIGINALS[_distance.cdist](
        strip(XA), strip(XB), metric, **{k: strip(v) for k, v in kwargs.items()}
    )
    name = metric if callable(metric) else _name_of(metric, "cdist")
    if name in _CONSTANT_METRICS:
        return expected
    XA, XB = _as_points(XA), _as_points(XB)
    if not callable(name):
        kwargs = _defaults(name, np.concatenate([XA, XB]), dict(kwargs))
    m, n = XA.shape[0], XB.shape[0]
    i, j = np.repeat(np.arange(m), n), np.tile(np.arange(n), m)
    return with_value(np.reshape(_distances(name, XA[i], XB[j], kwargs), (m, n)), expected)


def _pdist(X, metric="euclidean", *, out=None, **kwargs):
    _refuse_out("pdist", out)
    expected = ORIGINALS[_distance.pdist](strip(X), metric, **{k: strip(v) for k, v in kwargs.items()})
    name = metric if callable(metric) else _name_of(metric, "pdist")
    if name in _CONSTANT_METRICS:
        return expected
    X = _as_points(X)
    if not callable(name):
        kwargs = _defaults(name, X, dict(kwargs))
    i, j = np.triu_indices(X.shape[0], 1)  # SciPy's condensed order: (0,1), (0,2), ..., (1,2), ...
    return with_value(_distances(name, X[i], X[j], kwargs), expected)


def _squareform(X, force="no", checks=True):
    plain = ORIGINALS[_distance.squareform](strip(X), force, checks)  # SciPy's checks and errors
    if np.ndim(plain) == 2:  # a condensed vector in, a symmetric matrix out
        d = plain.shape[0]
        i, j = np.triu_indices(d, 1)
        upper = np.zeros_like(X, shape=(d, d))  # a traced constant: the writes are recorded
        upper[i, j] = X
        return upper + upper.T
    i, j = np.triu_indices(np.shape(X)[0], 1)  # a matrix in: its upper triangle, condensed
    return X[i, j]


defcomposite(intercepted(_distance.cdist), _cdist, note="pairs of rows gathered, metric recomputed in NumPy")
defcomposite(intercepted(_distance.pdist), _pdist, note="pairs of rows gathered, metric recomputed in NumPy")
defcomposite(intercepted(_distance.squareform), _squareform, note="moves the traced entries")
