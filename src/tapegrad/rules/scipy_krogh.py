"""``scipy.interpolate.KroghInterpolator`` (and ``krogh_interpolate``) with traced data or points.

SciPy computes the Newton coefficients ``c`` of the interpolating polynomial by
writing divided differences into plain arrays, which a traced ``yi`` cannot enter.
Those coefficients are linear in the data: ``c = C @ yi`` with ``C`` SciPy's own
coefficients for the identity data (one SciPy construction on ``np.eye(n)``, the
same nodes and repeated-node rules).  The rule builds the interpolant from the plain
values (SciPy's checks and attributes), then keeps the traced ``c`` on it; its
evaluation ``p(x) = c_0 + sum_k c_k prod_{j<k} (x - xi_j)`` is written with NumPy on
the tracers, so the data and the points may both be traced, at every order.  The
value is SciPy's own, bit for bit.  ``derivative``/``derivatives`` of a traced
interpolant raise a clear error; traced nodes ``xi`` are refused.
"""

from __future__ import annotations

import copy

import numpy as np
from scipy.interpolate import KroghInterpolator

from ..binding import has_tracer, strip_all
from ..errors import NonDifferentiableArgumentError
from ..registry import ORIGINALS, defcomposite, intercepted
from ..tracer import Tracer
from ._scipy_util import with_value

__all__: list = []

_INIT = KroghInterpolator.__dict__["__init__"]
_EVALUATE = KroghInterpolator.__dict__["_evaluate"]
_DERIVATIVES = KroghInterpolator.__dict__["_evaluate_derivatives"]


def _init(self, xi, yi, axis=0):
    if has_tracer(xi):
        raise NonDifferentiableArgumentError(
            "scipy.interpolate.KroghInterpolator: traced nodes xi are not differentiated; "
            "only the data yi (and the evaluation points) may be traced"
        )
    ORIGINALS[_INIT](self, xi, strip_all(yi), axis)
    if not has_tracer(yi):
        return
    basis = KroghInterpolator(self.xi, np.eye(self.n)).c  # (n + 1, n): SciPy's map of the data
    data = yi if type(yi) is Tracer else np.asarray(yi)
    data = np.reshape(np.moveaxis(data, axis, 0), (self.n, self.r))  # SciPy's _reshape_yi layout
    self._tapegrad_plain_c = self.c
    self.c = with_value(basis @ data, self.c)


def _evaluate(self, x):
    plain_c = self.__dict__.get("_tapegrad_plain_c")
    c = self.c
    if plain_c is None and type(x) is not Tracer:
        return ORIGINALS[_EVALUATE](self, x)
    plain = copy.copy(self)  # its slots (dtype) too
    plain.c = plain_c if plain_c is not None else c
    expected = ORIGINALS[_EVALUATE](plain, strip_all(x))
    p = np.zeros_like(expected) + c[0]
    product = 1.0
    for k in range(1, self.n):
        product = product * (x - self.xi[k - 1])
        p = p + product[:, None] * c[k]
    return with_value(p, expected)


def _derivatives(self, x, der=None):
    if "_tapegrad_plain_c" in self.__dict__ or type(x) is Tracer:
        raise NonDifferentiableArgumentError(
            "scipy.interpolate.KroghInterpolator.derivative(s) of traced data or at traced points is not "
            "differentiated; evaluate the interpolant itself, or use a spline (CubicSpline, "
            "make_interp_spline), whose derivatives are"
        )
    return ORIGINALS[_DERIVATIVES](self, x, der)


defcomposite(intercepted(_INIT), _init, note="SciPy's coefficient map of the data, applied to the traced data")
defcomposite(intercepted(_EVALUATE, inspect_self=True), _evaluate, note="the Newton form in NumPy")
defcomposite(intercepted(_DERIVATIVES, inspect_self=True), _derivatives, note="refused with traced data")
