"""Derivatives of ``scipy.special`` ufuncs.

SciPy is optional: ``import tapegrad`` never imports it.  This module is
imported by the dispatcher the first time a non-NumPy ufunc without a rule
reaches a tracer while ``scipy.special`` is loaded (see
``dispatch._rule_on_miss``), so the rules below exist exactly when they can
be needed.  It registers the error-function, logistic, normal, entropy and
``xlogy`` rules itself and imports the families kept in their own modules:

* ``special_bessel``: Bessel, Hankel, Struve, Kelvin and Airy functions;
* ``special_stats``: gamma/beta functions, incomplete gamma/beta, distributions;
* ``special_misc``: elementary helpers, integrals, elliptic integrals,
  orthogonal polynomials, hypergeometric, Box-Cox, Huber, Mathieu, Lambert W.

Every ufunc of ``scipy.special`` is either given a rule there, or listed in
:data:`UNSUPPORTED` with the reason it has none (calling it on a tracer raises
``UnsupportedFunctionError``); ``python -m tapegrad.coverage`` lists both.
Derivatives in an order or shape parameter that SciPy cannot differentiate
are ``None`` VJP entries: a traced value there raises
``NonDifferentiableArgumentError`` while the other arguments stay
differentiable.

Python-level helpers built on NumPy calls (``softplus``) trace through these
and NumPy's rules, as do ``polygamma``, ``logsumexp`` and ``softmax``
(their ``np.asarray`` keeps a tracer while a tape records:
:mod:`tapegrad.constructors`); ``multigammaln`` has a composite rule
(:mod:`tapegrad.rules.scipy_special_functions`); ``zeta(s)`` without ``q``
and any derivative in ``s`` raise (SciPy has no derivative of zeta in ``s``).

Conventions: ``xlogy(0, y)`` and ``xlog1py(0, y)`` are 0 for every ``y``, so
their ``y``-derivative is 0 where ``x == 0``; the ``x``-derivative there is
``log(y)`` (``-inf`` at ``y == 0``).  Complex arguments follow the holomorphic
convention (cotangent ``g * f'(z)``); functions whose complex form is not
holomorphic refuse complex arguments when differentiated.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import _ufuncs



from ._special_util import sc
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

# --------------------------------------------------------------- Hurwitz zeta
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

# --------------------------------------------------------------- the other families
from . import special_bessel, special_misc, special_stats  # noqa: E402,F401  (register their rules)

#: ``scipy.special`` ufuncs deliberately left without a derivative, with the reason.
UNSUPPORTED = {
    "zetac": "no closed-form derivative in s (SciPy has no derivative of zeta in s)",
    "mathieu_a": "characteristic value: no closed-form derivative in q",
    "mathieu_b": "characteristic value: no closed-form derivative in q",
    "elliprc": "Carlson integral: its derivatives need integrals SciPy lacks",
    "elliprd": "Carlson integral: its derivatives need integrals SciPy lacks",
    "elliprf": "Carlson integral: its second derivatives need integrals SciPy lacks",
    "elliprg": "Carlson integral: its derivatives need integrals SciPy lacks",
    "elliprj": "Carlson integral: its derivatives need integrals SciPy lacks",
    "stdtridf": "inverse in the degrees of freedom: no derivative in df",
    "chdtriv": "inverse in the degrees of freedom: no derivative in df",
    "chndtridf": "inverse in the degrees of freedom: no derivative in df",
    "chndtrinc": "inverse in the noncentrality: no derivative in nc",
    "fdtridfd": "inverse in the degrees of freedom: no derivative in df",
    "ncfdtridfd": "inverse in the degrees of freedom: no derivative in df",
    "ncfdtridfn": "inverse in the degrees of freedom: no derivative in df",
    "ncfdtrinc": "inverse in the noncentrality: no derivative in nc",
    "nctdtridf": "inverse in the degrees of freedom: no derivative in df",
    "nctdtrinc": "inverse in the noncentrality: no derivative in nc",
    "gdtrib": "inverse in the shape: no derivative in the shape",
    "btdtria": "inverse in a shape parameter: no derivative in the shape",
    "btdtrib": "inverse in a shape parameter: no derivative in the shape",
    "bdtrik": "inverse in the count k: no derivative in k",
    "bdtrin": "inverse in the count n: no derivative in n",
    "nbdtrik": "inverse in the count k: no derivative in k",
    "nbdtrin": "inverse in the count n: no derivative in n",
    "pdtrik": "inverse in the count k: no derivative in k",
    "obl_cv": "spheroidal characteristic value: no closed-form derivative",
    "pro_cv": "spheroidal characteristic value: no closed-form derivative",
    **{
        f"{kind}_{part}{suffix}": "spheroidal wave function: derivative not implemented (singular ODE at +-1)"
        for kind in ("obl", "pro")
        for part in ("ang1", "rad1", "rad2")
        for suffix in ("", "_cv")
    },
}

register_methods()  # outer / reduce / accumulate / at of the binary ufuncs above
