"""``scipy.interpolate.RBFInterpolator`` over tracers: SciPy's own array-API back end, on tracers.

SciPy computes RBF interpolants with a Pythran back end for NumPy arrays and a
back end written with array-API calls (``scipy.interpolate._rbfinterp_xp``) for
other namespaces.  A tracer handed to the Pythran one loses its gradient, so
while a tape records the two entry points are routed here:

* ``RBFInterpolator(y, d, smoothing=...)`` with traced centres ``y``, data ``d``
  or ``smoothing``: SciPy's constructor runs on the plain values (its checks,
  errors and attributes), then the array-API back end solves the same system on
  the tracers (tapegrad's namespace), and the instance keeps the traced ``y``,
  ``d`` and coefficients with that namespace;
* ``__call__(x)``: an instance holding tracers, or a traced ``x``, is evaluated
  by the array-API back end's ``compute_interpolation`` on the tracers, with
  SciPy's own (plain) call for the checks and the value, bit for bit.

Every kernel and polynomial degree is covered, at any order (the back end is made
of NumPy calls and ``solve``).  Not covered, with a clear error: complex data and
``neighbors=`` (SciPy's KD-tree is NumPy-only there too).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.interpolate import RBFInterpolator
from scipy.interpolate import _rbfinterp_xp as _xp_backend

from ..dispatch import strip
from ..errors import NonDifferentiableArgumentError
from ..registry import ORIGINALS, defcomposite, intercepted
from ..tracer import Tracer
from ._scipy_util import with_value

__all__: list = []

_INIT = RBFInterpolator.__dict__["__init__"]
_CALL = RBFInterpolator.__dict__["__call__"]


def _namespace(*values: Any) -> Any:
    tracer = next(v for v in values if type(v) is Tracer)
    return tracer.__array_namespace__()


def _init(self, y, d, neighbors=None, smoothing=0.0, kernel="thin_plate_spline", epsilon=None, degree=None):
    ORIGINALS[_INIT](self, strip(y), strip(d), neighbors, strip(smoothing), kernel, epsilon, degree)
    if neighbors is not None:
        raise NonDifferentiableArgumentError(
            "scipy.interpolate.RBFInterpolator: traced values with neighbors= are not differentiated "
            "(SciPy's KD-tree path is NumPy-only); leave neighbors=None"
        )
    if np.iscomplexobj(strip(d)):
        raise NonDifferentiableArgumentError(
            "scipy.interpolate.RBFInterpolator: complex traced data are not differentiated; "
            "interpolate the real and imaginary parts separately"
        )
    xp = _namespace(y, d, smoothing)
    self._tapegrad_plain = dict(self.__dict__)  # SciPy's own plain interpolant, for values and checks
    ny = self.y.shape[0]
    y_t = np.asarray(y, dtype=np.float64) if type(y) is not Tracer else y.astype(np.float64)
    d_t = np.reshape(d if type(d) is Tracer else np.asarray(d, dtype=np.float64), (ny, -1)).astype(np.float64)
    if type(smoothing) is Tracer:
        s_t = np.broadcast_to(smoothing.astype(np.float64), (ny,))
    else:
        s_t = self.smoothing  # SciPy's own array (a scalar broadcast to ny)
    with np.errstate(divide="ignore", invalid="ignore"):  # r**2 log r at r == 0, masked by SciPy's where
        shift, scale, coeffs = _xp_backend._build_and_solve_system(
            y_t, d_t, s_t, self.kernel, self.epsilon, self.powers, xp
        )
    self.y, self.d, self.smoothing = y_t, d_t, s_t
    self._shift, self._scale, self._coeffs = shift, scale, coeffs
    self._xp = xp


def _call(self, x):
    plain_state = self.__dict__.get("_tapegrad_plain")
    if plain_state is None and type(x) is not Tracer:
        return ORIGINALS[_CALL](self, x)
    plain = self
    if plain_state is not None:
        plain = object.__new__(type(self))
        plain.__dict__.update(plain_state)
    expected = ORIGINALS[_CALL](plain, strip(x))  # SciPy's checks, errors and numbers
    xp = self._xp if plain_state is not None else _namespace(x)
    x_t = x.astype(np.float64) if type(x) is Tracer else np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        traced = _xp_backend.compute_interpolation(
            x_t, self.y, self.kernel, self.epsilon, self.powers, self._shift, self._scale, self._coeffs, xp
        )
    return with_value(np.reshape(traced, np.shape(expected)), expected)


defcomposite(intercepted(_INIT), _init, note="SciPy's array-API back end on the tracers")
defcomposite(intercepted(_CALL, inspect_self=True), _call, note="SciPy's array-API back end on the tracers")
