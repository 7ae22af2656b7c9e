"""``scipy.stats.gaussian_kde``'s ``evaluate``/``pdf``/``__call__`` and ``logpdf`` over tracers.

The constructor already runs on tracers (NumPy's ``cov`` and the Cholesky factor
through :mod:`tapegrad.rules.scipy_linalg`), so a KDE built from traced data holds
a traced ``dataset``, ``weights`` and ``cho_cov``; only the kernel sum is compiled
(``gaussian_kernel_estimate``).  Its rule is the same sum written with NumPy:

``f(x_j) = (2 pi)^(-d/2) / prod(diag L) * sum_i w_i exp(-|L^-1 (d_i - x_j)|^2 / 2)``

with ``L = cho_cov``, and ``logpdf`` its log-sum-exp, so the points, the data,
the weights and the bandwidth (a traced ``bw_method``) may all be traced, at any
order.  The value is SciPy's own, bit for bit (``with_value``).  Memory is
``points x data x dimensions``, where SciPy's loop holds one row.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.linalg import solve_triangular
from scipy.special import logsumexp
from scipy.stats import gaussian_kde

from ..dispatch import strip
from ..registry import ORIGINALS, defcomposite, intercepted
from ._scipy_util import with_value

__all__: list = []


def _points(self: Any, x: Any) -> Any:
    """``x`` as SciPy shapes it: ``(d, m)``, a row vector of one point accepted."""
    points = np.atleast_2d(x)
    d, m = np.shape(points)
    if d != self.d and d == 1 and m == self.d:
        points = np.reshape(points, (self.d, 1))
    return points


def _log_kernels(self: Any, points: Any) -> Any:
    """``log(w_i) - |L^-1 (d_i - x_j)|^2 / 2 + log(norm)``, shape ``(m, n)``."""
    chol = self.cho_cov
    whitened_data = solve_triangular(chol, self.dataset, lower=True)  # (d, n)
    whitened_points = solve_triangular(chol, points, lower=True)  # (d, m)
    diff = whitened_points.T[:, None, :] - whitened_data.T[None, :, :]
    log_norm = -0.5 * self.d * np.log(2 * np.pi) - np.sum(np.log(np.diagonal(chol)))
    return np.log(self.weights)[None, :] - 0.5 * np.sum(diff * diff, axis=-1) + log_norm


def _traced_self_copy(self: Any) -> Any:
    """``self`` with its plain values, for SciPy's own call (its checks, errors and numbers)."""
    plain = object.__new__(type(self))
    plain.__dict__.update({k: strip(v) for k, v in self.__dict__.items()})
    return plain


def _evaluate(self, points):
    expected = ORIGINALS[gaussian_kde.evaluate](_traced_self_copy(self), strip(points))
    traced = np.sum(np.exp(_log_kernels(self, _points(self, points))), axis=-1)
    return with_value(traced, expected)


def _logpdf(self, x):
    expected = ORIGINALS[gaussian_kde.logpdf](_traced_self_copy(self), strip(x))
    traced = logsumexp(_log_kernels(self, _points(self, x)), axis=-1)
    return with_value(traced, expected)


defcomposite(intercepted(gaussian_kde.evaluate, inspect_self=True), _evaluate, note="the kernel sum in NumPy")
defcomposite(intercepted(gaussian_kde.logpdf, inspect_self=True), _logpdf, note="log-sum-exp of the kernels")
