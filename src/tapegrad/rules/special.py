"""Derivatives of ``scipy.special`` ufuncs.

SciPy is optional: ``import tapegrad`` never imports it.  This module is
imported by the dispatcher the first time a non-NumPy ufunc without a rule
reaches a tracer while ``scipy.special`` is loaded (see
``dispatch._rule_on_miss``), so the rules below exist exactly when they can
be needed.

Covered: erf, erfc, erfcx, erfinv, erfcinv, expit, logit, log_expit, gamma,
gammaln, loggamma, digamma (= psi), the Hurwitz ``zeta(s, q)`` in ``q``,
xlogy, xlog1py, ndtr, log_ndtr, ndtri, entr, rel_entr, kl_div, i0, i0e, i1,
i1e.  Python-level helpers built on NumPy calls (``softplus``,
``logsumexp``, ``softmax``, ``log_softmax``) trace through these and NumPy's
rules; ``polygamma`` does not (it calls ``np.asarray`` on its input), nor
``zeta(s)`` without ``q`` or any derivative in ``s`` (SciPy has no
derivative of zeta in ``s``): those raise instead of guessing.

Conventions: ``xlogy(0, y)`` and ``xlog1py(0, y)`` are 0 for every ``y``, so
their ``y``-derivative is 0 where ``x == 0``; the ``x``-derivative there is
``log(y)`` (``-inf`` at ``y == 0``).  ``i1``/``i1e`` at 0 use the limit 1/2.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.special as _scipy_special
from scipy.special import _ufuncs


class _Ufuncs:
    """``sc.<name>``: SciPy's ufunc itself, in both SciPy modes.

    With ``SCIPY_ARRAY_API=1`` SciPy's public names are Python wrappers (their
    ``__wrapped__`` is the ufunc) that pick a namespace; rules belong on the
    ufunc, which is what reaches ``__array_ufunc__``.
    """

    def __getattr__(self, name: str):
        fun = getattr(_scipy_special, name)
        return getattr(fun, "__wrapped__", fun)


sc = _Ufuncs()

from .ufunc_methods import register_methods
from .ufuncs import defufunc

__all__: list = []  # nothing public: importing the module registers the rules

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_SQRT_PI_OVER_2 = math.sqrt(math.pi) / 2.0
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_2PI = math.sqrt(2.0 * math.pi)


def _zeta(s, q):
    """Hurwitz zeta through SciPy's ufunc, so that it dispatches on tracers."""
    return _ufuncs._zeta(s, q)


def _polygamma(n, x):
    """``polygamma(n, x)`` for an integer ``n >= 1``: ``(-1)**(n+1) n! zeta(n+1, x)``."""
    return ((-1) ** (n + 1) * math.factorial(n)) * _zeta(n + 1.0, x)


def _safe_divide(num, den, at_zero):
    """``num / den`` with the value ``at_zero`` where ``den == 0`` (no warning, no nan)."""
    zero = den == 0
    return np.where(zero, at_zero, num / np.where(zero, 1, den))


# --------------------------------------------------------------- error functions
defufunc(sc.erf, lambda g, ans, x: g * (_TWO_OVER_SQRT_PI * np.exp(-(x * x))))
defufunc(sc.erfc, lambda g, ans, x: g * (-_TWO_OVER_SQRT_PI * np.exp(-(x * x))))
# erfcx(x) = exp(x**2) erfc(x): d/dx = 2 x erfcx(x) - 2/sqrt(pi).
defufunc(sc.erfcx, lambda g, ans, x: g * (2 * x * ans - _TWO_OVER_SQRT_PI))
# Inverse functions: 1 / f'(ans).
defufunc(sc.erfinv, lambda g, ans, x: g * (_SQRT_PI_OVER_2 * np.exp(ans * ans)))
defufunc(sc.erfcinv, lambda g, ans, x: g * (-_SQRT_PI_OVER_2 * np.exp(ans * ans)))

# --------------------------------------------------------------- logistic
defufunc(sc.expit, lambda g, ans, x: g * (ans * (1 - ans)))
defufunc(sc.logit, lambda g, ans, x: g / (x * (1 - x)))
# log(expit(x))' = 1 - expit(x) = expit(-x): stable for large |x|.
defufunc(sc.log_expit, lambda g, ans, x: g * sc.expit(-x))

# --------------------------------------------------------------- gamma family
defufunc(sc.gamma, lambda g, ans, x: g * (ans * sc.digamma(x)))
defufunc(sc.gammaln, lambda g, ans, x: g * sc.digamma(x))
defufunc(sc.loggamma, lambda g, ans, x: g * sc.digamma(x))
defufunc(sc.digamma, lambda g, ans, x: g * _polygamma(1, x))  # sc.psi is sc.digamma
# zeta(s, q): d/dq = -s zeta(s + 1, q); no derivative in s.
defufunc(_ufuncs._zeta, None, lambda g, ans, s, q: g * (-s * _zeta(s + 1, q)))

# --------------------------------------------------------------- x log y
defufunc(
    sc.xlogy,
    lambda g, ans, x, y: g * np.log(y),
    lambda g, ans, x, y: g * (x / np.where(x == 0, 1, y)),
    note="d/dy = 0 where x == 0",
)
defufunc(
    sc.xlog1py,
    lambda g, ans, x, y: g * np.log1p(y),
    lambda g, ans, x, y: g * (x / np.where(x == 0, 1, y + 1)),
    note="d/dy = 0 where x == 0",
)

# --------------------------------------------------------------- normal distribution
defufunc(sc.ndtr, lambda g, ans, x: g * (_INV_SQRT_2PI * np.exp(x * x * -0.5)))
# phi(x) / ndtr(x) = exp(-x**2/2 - log_ndtr(x)) / sqrt(2 pi): no underflow for x << 0.
defufunc(sc.log_ndtr, lambda g, ans, x: g * (_INV_SQRT_2PI * np.exp(x * x * -0.5 - ans)))
defufunc(sc.ndtri, lambda g, ans, x: g * (_SQRT_2PI * np.exp(ans * ans * 0.5)))

# --------------------------------------------------------------- entropies
defufunc(sc.entr, lambda g, ans, x: g * -(np.log(x) + 1))
defufunc(
    sc.rel_entr,
    lambda g, ans, x, y: g * (np.log(x / y) + 1),
    lambda g, ans, x, y: g * -(x / y),
)
defufunc(
    sc.kl_div,
    lambda g, ans, x, y: g * np.log(x / y),
    lambda g, ans, x, y: g * (1 - x / y),
)

# --------------------------------------------------------------- modified Bessel functions
defufunc(sc.i0, lambda g, ans, x: g * sc.i1(x))
# i0e(x) = exp(-|x|) i0(x): d/dx = i1e(x) - sign(x) i0e(x).
defufunc(sc.i0e, lambda g, ans, x: g * (sc.i1e(x) - np.sign(x) * ans))
# i1'(x) = i0(x) - i1(x)/x, with the limit 1/2 at 0.
defufunc(sc.i1, lambda g, ans, x: g * np.where(x == 0, 0.5, sc.i0(x) - _safe_divide(ans, x, 0)))
# i1e(x) = exp(-|x|) i1(x): d/dx = i0e(x) - i1e(x) (sign(x) + 1/x), 1/2 at 0.
defufunc(
    sc.i1e,
    lambda g, ans, x: g * np.where(x == 0, 0.5, sc.i0e(x) - np.sign(x) * ans - _safe_divide(ans, x, 0)),
)

register_methods()  # outer / reduce / accumulate / at of the binary ufuncs above
