"""Derivatives of :mod:`scipy.interpolate`: in the data, the query points and the abscissae.

Interpolants are objects built once and called many times, so the rules come in
two halves that meet in the object's own attributes.

Construction with traced values
    The constructor (``CubicSpline.__init__``, ``make_interp_spline``, ...) runs
    SciPy's own code on the *plain* values, so every attribute, check and error is
    SciPy's, and then replaces the coefficients (and breakpoints or knots) by traced
    ones:

    * ``CubicSpline``: SciPy's tridiagonal system for the slopes, assembled from the
      traced breakpoints, data and boundary values and solved by a primitive whose
      VJP solves the transposed system (``O(n)``), then the Hermite coefficients
      (periodic: the cyclic system, densely, when the breakpoints are traced);
    * ``make_interp_spline`` without derivative or periodic conditions (so every
      ``interp1d`` spline kind): ``B c = y`` with ``B`` the collocation matrix; with
      plain ``x`` the VJP is one sparse solve with ``B^T``; with traced ``x``, SciPy's
      knots are built from it, ``B`` from de Boor's recurrence in banded storage,
      and a banded-solve primitive's VJP solves the transposed band;
    * other coefficients *linear* in the data (``make_interp_spline`` with
      derivative or periodic conditions, ``make_lsq_spline``, ``make_smoothing_spline``
      with ``lam``, a periodic ``CubicSpline`` on plain breakpoints, ``lagrange``):
      one primitive whose forward value is SciPy's coefficient array and whose VJP
      contracts the cotangent with the map's matrix, built on the first backward pass
      by running the same SciPy construction on identity columns (boundary derivative
      values only add a constant, so they are zeroed for the map).  Up to
      :data:`DENSE_LIMIT` elements the matrix is kept; beyond, it is rebuilt and
      contracted a block of columns at a time (``O(n^2)`` time, bounded memory);
    * ``CubicHermiteSpline``, ``PchipInterpolator`` and ``Akima1DInterpolator``:
      SciPy's formulas for the slopes and Hermite coefficients re-run on the traced
      data and breakpoints (branches chosen on the plain values, as SciPy does);
    * ``PPoly(c, x)``, ``BSpline(t, c, k)``: the traced ``c``, ``x``, ``t`` themselves.

    The traced coefficients, breakpoints and knots are stored where SciPy keeps the
    arrays, so ``spline.c``/``.x``/``.t`` read them back traced: SciPy 1.17 keeps
    them in the instance (``_c``, ``_x``, ``_t``), SciPy 1.18 in a NumPy back end,
    the instance's ``_delegate_to`` (``c``, ``x``, ``t``), behind front-end
    properties.  Each instance is asked which it has; an instance with neither gets
    a clear error.  A traced array assigned later (``spline.c = ...``, the
    properties' setters) is stored the same way.

Evaluation (methods intercepted with ``inspect_self``)
    ``PPoly`` (and every subclass) ``__call__``/``derivative``/``antiderivative``/
    ``integrate``, ``BSpline.__call__``/``derivative``/``antiderivative``/
    ``integrate``, ``BPoly.__call__`` and ``BPoly.integrate`` (plain coefficients,
    traced points or limits: SciPy 1.17's ``PPoly`` and ``BPoly`` share
    ``_PPolyBase.__call__``, SciPy 1.18's front ends have their own, each is
    intercepted), FITPACK's ``splev`` (so ``UnivariateSpline.__call__``),
    ``interp1d`` (its ``_evaluate``) and ``RegularGridInterpolator.__call__`` are
    written with NumPy: the interval of each query point is found on plain values
    (``searchsorted``: piecewise constant), the polynomial piece (Horner's rule) or
    B-spline basis (de Boor's recurrence) is evaluated on traced values, so query
    points, data, breakpoints or all of them may be traced, at every order.  The
    grid of ``RegularGridInterpolator``/``interpn`` is differentiated for ``linear``
    and ``pchip``; step kinds and ``nearest`` only compare with the abscissae (a
    zero derivative there).

Not differentiated (a clear error instead): the abscissae of ``make_interp_spline``
with derivative or periodic conditions, of ``make_lsq_spline`` and of
``make_smoothing_spline``; the grid of ``RegularGridInterpolator``'s spline methods;
the breakpoints or knots of a periodic integral; ``roots``/``solve``/``extend``; a
``BPoly`` with traced coefficients (plain ones are evaluated at traced points); the
data of FITPACK's smoothing splines (``UnivariateSpline`` and its subclasses); a
``make_smoothing_spline`` whose ``lam`` is chosen from the data; a traced
``fill_value``; ``interpn(method="splinef2d")``.  Periodic data must have
``y[0] == y[-1]``; the gradient is shared equally between the two.

Values follow the running SciPy's arithmetic: ``interp1d``'s linear kind uses the
formula of SciPy's own ``_call_linear`` (SciPy 1.18 changed it), and ``lagrange``,
which the rule runs once per column of its map, gives SciPy's warnings of the one
call (SciPy 1.18's deprecation) once, at the caller's line.
"""

from __future__ import annotations

import inspect
import os
import sys
import warnings
from typing import Any, Callable, Optional

import numpy as np
import scipy
from scipy import special
from scipy.linalg import solve_banded
from scipy.sparse.linalg import splu
from scipy.interpolate import (
    Akima1DInterpolator,
    BPoly,
    BSpline,
    CubicHermiteSpline,
    CubicSpline,
    InterpolatedUnivariateSpline,
    LSQUnivariateSpline,
    PchipInterpolator,
    PPoly,
    RegularGridInterpolator,
    UnivariateSpline,
    interp1d,
    interpn,
    lagrange,
    make_interp_spline,
    make_lsq_spline,
    make_smoothing_spline,
)
from scipy.interpolate import _fitpack_impl, _rgi

from ..binding import has_tracer, strip_all
from ..dispatch import primitive
from ..errors import NonDifferentiableArgumentError, UnsupportedFunctionError
from ..registry import defcomposite, defvjp, intercepted
from ..tracer import Tracer, strip
from ._scipy_util import reaches_source as _reaches_source

__all__: list = []

# ----------------------------------------------------------------- helpers
def _traced(value: Any) -> bool:
    return type(value) is Tracer or has_tracer(value)




def _plain(function: str, name: str, value: Any, why: str = "") -> Any:
    """``value`` as plain values; a tracer that depends on a watched input there is refused.

    For the arguments tapegrad does not differentiate (knots, orders, options).
    """
    if _reaches_source(value):
        raise NonDifferentiableArgumentError(
            f"tapegrad cannot differentiate scipy.interpolate.{function} with respect to {name}"
            f"{': ' + why if why else ''}. Pass {name} as plain values "
            "(tapegrad.stop_gradient(...) if they are computed from traced values)."
        )
    return strip_all(value)


def _float(value: Any) -> Any:
    """A traced or plain array as SciPy stores data: float64, or complex128 for complex values."""
    if type(value) is not Tracer:
        value = np.asarray(value)
    want = np.complex128 if np.iscomplexobj(value) else np.float64
    return value if value.dtype == want else value.astype(want)


# ----------------------------------------------------------------- where SciPy keeps the arrays
# SciPy 1.17 keeps a piecewise polynomial's coefficients and breakpoints in the
# instance's own slots ``_c``/``_x``, and a B-spline's in ``_c``/``_t``.  SciPy 1.18
# splits PPoly, BPoly and BSpline into a public front end and a NumPy back end, the
# instance's ``_delegate_to``, which holds them as ``c``/``x``/``t``; the front end's
# ``c``/``x``/``t`` are properties reading the back end's.  Each instance is asked
# which it has (no version number is compared).
def _holder(obj: Any, name: str) -> tuple:
    """``(object, attribute)`` where SciPy keeps the array ``name`` (``"c"``, ``"x"`` or ``"t"``) of ``obj``."""
    state = getattr(obj, "__dict__", None) or {}
    delegate = state.get("_delegate_to")
    if delegate is not None and hasattr(delegate, name):
        return delegate, name
    if delegate is None and hasattr(obj, "_" + name):
        return obj, "_" + name
    raise UnsupportedFunctionError(
        f"scipy.interpolate.{type(obj).__name__}",
        f"this SciPy keeps the interpolant's array {name!r} in a layout tapegrad does not know (neither "
        f"SciPy 1.17's {'_' + name!r} nor SciPy 1.18's back end '_delegate_to.{name}'); tapegrad's "
        "interpolate rules need updating for it",
    )


def _get(obj: Any, name: str) -> Any:
    """The interpolant's array ``name`` as SciPy keeps it: traced when tapegrad stored a traced one."""
    holder, attribute = _holder(obj, name)
    return getattr(holder, attribute)


def _put(obj: Any, name: str, value: Any) -> None:
    """Store ``value`` as the interpolant's array ``name``, where SciPy's own attributes read it.

    A traced value is also referenced in the instance's ``__dict__`` under a tapegrad
    name, so that the door's ``inspect_self`` sees the instance as traced wherever
    SciPy keeps the array (a slot, or SciPy 1.18's back end).
    """
    holder, attribute = _holder(obj, name)
    setattr(holder, attribute, value)
    state = getattr(obj, "__dict__", None)
    if state is not None:
        if type(value) is Tracer or has_tracer(value):
            state["_tapegrad_traced_" + name] = value
        else:
            state.pop("_tapegrad_traced_" + name, None)


def _flat_points(x: Any) -> tuple:
    """Query points as SciPy prepares them: ``(flat float64 values, plain copy, shape)``."""
    if type(x) is not Tracer:
        x = np.asarray(x)
    shape = np.shape(x)
    flat = np.reshape(x, (-1,))
    if flat.dtype != np.float64:
        flat = flat.astype(np.float64)
    return flat, np.asarray(strip(flat)), shape


def _trailing(v: Any, nd: int) -> Any:
    """``v`` (one value per query point) shaped to broadcast over ``nd`` trailing axes."""
    return np.reshape(v, np.shape(v) + (1,) * nd)


def _axis_last(out: Any, x_ndim: int, axis: int) -> Any:
    """SciPy's placement of the query axes at ``axis`` of the data's shape."""
    if axis == 0:
        return out
    order = list(range(np.ndim(out)))
    order = order[x_ndim : x_ndim + axis] + order[:x_ndim] + order[x_ndim + axis :]
    return np.transpose(out, order)


# ----------------------------------------------------------------- coefficients linear in the data
#: The largest map matrix (in elements, 128 MiB of float64) kept for reuse by later
#: backward passes; a larger one is built and contracted a block of columns at a time.
DENSE_LIMIT = 2**24


class _LinearMap:
    """SciPy's coefficients for one data array, and the matrix of their linear map from it.

    ``build(Y)`` runs the SciPy construction on data ``Y`` of shape ``(n, m)`` (the
    interpolation axis first, homogeneous boundary values) and returns the
    coefficient array ``C + (m,)``: column ``j`` of the map for ``Y = e_j``.
    ``periodic`` data have ``y[0] == y[-1]``, so the first and last columns are
    both half the map of ``e_0 + e_{n-1}`` (the ends share the derivative).
    """

    __slots__ = ("coefficients", "build", "n", "periodic", "_matrix")

    def __init__(self, coefficients: Any, build: Callable[[np.ndarray], Any], n: int, periodic: bool) -> None:
        self.coefficients = coefficients
        self.build = build
        self.n = n
        self.periodic = periodic
        self._matrix: Optional[np.ndarray] = None

    def _columns(self, start: int, stop: int) -> np.ndarray:
        n = self.n
        basis = np.zeros((n, stop - start))
        basis[np.arange(start, stop), np.arange(stop - start)] = 1.0
        ends = [j for j in (0, n - 1) if start <= j < stop] if self.periodic else []
        for j in ends:
            basis[n - 1 - j, j - start] = 1.0
        block = np.array(self.build(basis), dtype=np.float64)
        for j in ends:
            block[..., j - start] *= 0.5
        return block

    def blocks(self, per_column: int):
        """The map's matrix ``C + (n,)``, whole (kept) or in blocks of columns."""
        if self._matrix is not None:
            yield self._matrix
            return
        if per_column * self.n <= DENSE_LIMIT:
            self._matrix = self._columns(0, self.n)
            yield self._matrix
            return
        step = max(1, DENSE_LIMIT // max(per_column, 1))
        for start in range(0, self.n, step):
            yield self._columns(start, min(start + step, self.n))


def _linear_coefficients(y0: Any, linear_map: _LinearMap) -> Any:
    # The map was built from these very data: its coefficients are SciPy's own.
    return linear_map.coefficients


linear_coefficients_p = primitive(_linear_coefficients)


def _linear_coefficients_vjp(g, ans, y0, linear_map):
    n_r = np.ndim(y0) - 1
    n_c = np.ndim(ans) - n_r
    nd = np.ndim(g)
    axes = list(range(nd - n_r - n_c, nd - n_r))
    per_column = int(np.prod(np.shape(ans)[:n_c]))
    pieces = [np.tensordot(g, block, axes=(axes, list(range(n_c)))) for block in linear_map.blocks(per_column)]
    h = pieces[0] if len(pieces) == 1 else np.concatenate(pieces, axis=-1)  # batch + R + (n,)
    return np.moveaxis(h, -1, nd - n_r - n_c)  # batch + (n,) + R


defvjp(linear_coefficients_p, _linear_coefficients_vjp, None, note="contracts with SciPy's map on identity columns")


def _traced_coefficients(y_traced: Any, axis: int, coefficients: Any, build, periodic: bool = False) -> Any:
    y0 = np.moveaxis(_float(y_traced), axis, 0)
    return linear_coefficients_p(y0, _LinearMap(coefficients, build, np.shape(y0)[0], periodic))


# ----------------------------------------------------------------- piecewise polynomials
def _breakpoints(self: Any) -> Any:
    """The piecewise polynomial's breakpoints: traced when it was built from traced ``x``."""
    return _get(self, "x")


def _keep_breakpoints(obj: Any, x: Any) -> None:
    """Store traced breakpoints where SciPy keeps them, so that ``spline.x`` is traced too."""
    if type(x) is Tracer:
        _put(obj, "x", x)


def _pp_derivative_coefficients(c: Any, nu: int) -> Any:
    """Coefficients of the ``nu``-th derivative (SciPy's ``PPoly.derivative``)."""
    if nu == 0:
        return c
    k = np.shape(c)[0]
    if k <= nu:
        return np.zeros((1,) + np.shape(c)[1:], dtype=np.result_type(c))
    factor = special.poch(np.arange(k - nu, 0, -1), nu)
    return c[:-nu] * _trailing(factor, np.ndim(c) - 1)


def _pp_local_antiderivative(c: Any, nu: int) -> Any:
    """Each piece integrated ``nu`` times from its left breakpoint (zero integration constants)."""
    k = np.shape(c)[0]
    factor = special.poch(np.arange(k, 0, -1), nu)
    zeros = np.zeros((nu,) + np.shape(c)[1:], dtype=np.result_type(c))
    return np.concatenate([c / _trailing(factor, np.ndim(c) - 1), zeros], axis=0)


def _horner(c: Any, t: Any) -> Any:
    out = c[0]
    for j in range(1, np.shape(c)[0]):
        out = out * t + c[j]
    return out


def _pp_antiderivative_coefficients(c: Any, x: np.ndarray, nu: int) -> Any:
    """SciPy's ``PPoly.antiderivative``: integrate once ``nu`` times, continuous across breakpoints."""
    h = np.diff(x)
    for _ in range(nu):
        c = _pp_local_antiderivative(c, 1)
        # Piece i starts where piece i - 1 ended: its constant is the sum of the earlier pieces' integrals.
        ends = _horner(c, _trailing(h, np.ndim(c) - 2))  # (m,) + R
        zero = np.zeros((1,) + np.shape(ends)[1:], dtype=np.result_type(ends))
        constants = np.concatenate([zero, np.cumsum(ends[:-1], axis=0)], axis=0)
        c = np.concatenate([c[:-1], constants[None]], axis=0)
    return c


def _pp_intervals(x: np.ndarray, points: np.ndarray) -> tuple:
    """SciPy's interval of each point (ascending or descending breakpoints) and which lie outside."""
    m = len(x) - 1
    if x[-1] >= x[0]:
        index = np.searchsorted(x, points, side="right") - 1
        inside = (points >= x[0]) & (points <= x[-1])
    else:
        index = np.searchsorted(-x, -points, side="right") - 1
        inside = (points <= x[0]) & (points >= x[-1])
    return np.clip(index, 0, m - 1), ~inside


def _without_nan(flat: Any, plain: np.ndarray, safe: float) -> tuple:
    """NaN query points replaced by ``safe`` (their output is set to NaN afterwards): a NaN
    inside the polynomial would turn the zero cotangent reaching it into NaN."""
    nan_points = np.isnan(plain)
    if not np.any(nan_points):
        return flat, plain
    return np.where(nan_points, safe, flat), np.where(nan_points, safe, plain)


def _pp_evaluate(c: Any, x: Any, points: Any, nu: int, extrapolate: Any, axis: int) -> Any:
    """``x``: the breakpoints, plain or traced (intervals are found on their plain values)."""
    flat, plain, shape = _flat_points(points)
    if extrapolate == "periodic":
        flat = x[0] + np.mod(flat - x[0], x[-1] - x[0])
        plain = np.asarray(strip(flat))
        extrapolate = False
    if nu < 0:
        raise ValueError("Order of derivative cannot be negative")  # SciPy's message
    if nu > 0:
        c = _pp_derivative_coefficients(c, nu)
    xv = np.asarray(strip(x))
    nan_points = np.isnan(plain)
    flat, plain = _without_nan(flat, plain, xv[0])
    index, outside = _pp_intervals(xv, plain)
    n_r = np.ndim(c) - 2
    t = _trailing(flat - x[index], n_r)
    out = _horner(c[:, index], t)
    # NaN where SciPy gives NaN: NaN points (also where the derivative is a constant), and
    # points outside unless extrapolating.
    undefined = nan_points | (outside if not extrapolate else False)
    if np.any(undefined):
        out = np.where(_trailing(undefined, n_r), np.nan, out)
    out = np.reshape(out, shape + np.shape(c)[2:])
    return _axis_last(out, len(shape), axis)


def _require_ppoly(self: Any, method: str) -> None:
    if not isinstance(self, PPoly):
        raise UnsupportedFunctionError(
            f"scipy.interpolate.{type(self).__name__}.{method}",
            "tapegrad differentiates piecewise polynomials in the power basis (PPoly and its "
            "subclasses); convert with PPoly.from_bernstein_basis(bp) first",
        )


def _new_like(self: Any, c: Any, extrapolate: Any) -> Any:
    """A new instance of ``self``'s class holding ``c`` (SciPy's ``construct_fast``)."""
    plain_x = np.asarray(strip(_breakpoints(self)))
    out = type(self).construct_fast(np.asarray(strip_all(c)), plain_x, extrapolate, self.axis)
    if _traced(c):
        _put(out, "c", c)
    _keep_breakpoints(out, _breakpoints(self))
    return out


def _ppoly_call(self, x, nu=0, extrapolate=None):
    nu = _plain(f"{type(self).__name__}.__call__", "nu", nu)
    if extrapolate is None:
        extrapolate = self.extrapolate
    c, breakpoints = _get(self, "c"), _breakpoints(self)
    if isinstance(self, BPoly) and not _traced(c):
        # Plain Bernstein coefficients, traced points: the same polynomials in the power basis.
        power = PPoly.from_bernstein_basis(self)
        c, breakpoints = _get(power, "c"), _get(power, "x")
    else:
        _require_ppoly(self, "__call__")
    return _pp_evaluate(c, breakpoints, x, int(nu), extrapolate, self.axis)


def _ppoly_derivative(self, nu=1):
    _require_ppoly(self, "derivative")
    if nu < 0:
        return self.antiderivative(-nu)
    return _new_like(self, _pp_derivative_coefficients(_get(self, "c"), nu), self.extrapolate)


def _ppoly_antiderivative(self, nu=1):
    _require_ppoly(self, "antiderivative")
    if nu <= 0:
        return self.derivative(-nu)
    c = _pp_antiderivative_coefficients(_get(self, "c"), _breakpoints(self), nu)
    return _new_like(self, c, False if self.extrapolate == "periodic" else self.extrapolate)


def _primitive_at(c: Any, x: np.ndarray, points: Any, extrapolate: Any) -> Any:
    """The antiderivative (coefficients ``c``) at ``points``; NaN outside unless extrapolating."""
    return _pp_evaluate(c, x, points, 0, bool(extrapolate), 0)


def _ppoly_integrate(self, a, b, extrapolate=None):
    _require_ppoly(self, "integrate")
    if extrapolate is None:
        extrapolate = self.extrapolate
    x = _breakpoints(self)
    anti = _pp_antiderivative_coefficients(_get(self, "c"), x, 1)
    sign = 1.0
    if strip(b) < strip(a):
        a, b, sign = b, a, -1.0
    if extrapolate != "periodic":
        ends = _primitive_at(anti, x, np.stack([a, b]), extrapolate)
        return sign * (ends[1] - ends[0])
    a, b = _plain(f"{type(self).__name__}.integrate", "a and b", (a, b), "periodic integration limits")
    x = np.asarray(_plain(f"{type(self).__name__}.integrate", "the breakpoints", x, "periodic integration"))
    xs, xe = x[0], x[-1]
    n_periods, left = divmod(b - a, xe - xs)
    whole = _primitive_at(anti, x, np.array([xs, xe]), False)
    total = (whole[1] - whole[0]) * n_periods
    a = xs + (a - xs) % (xe - xs)
    b = a + left
    if b <= xe:
        part = _primitive_at(anti, x, np.array([a, b]), False)
        total = total + (part[1] - part[0])
    else:
        part = _primitive_at(anti, x, np.array([a, xe, xs, xs + left + a - xe]), False)
        total = total + (part[1] - part[0]) + (part[3] - part[2])
    return sign * total


def _bpoly_integrate(self, a, b, extrapolate=None):
    # SciPy's BPoly.integrate: the difference of its (plain) antiderivative at the limits,
    # here at traced limits (the antiderivative's calls come back through the door).
    if _traced(_get(self, "c")) or _traced(_get(self, "x")):
        _require_ppoly(self, "integrate")
    if extrapolate is None:
        extrapolate = self.extrapolate
    if extrapolate == "periodic":
        a, b = _plain(f"{type(self).__name__}.integrate", "a and b", (a, b), "periodic integration limits")
        return self.integrate(a, b, extrapolate)  # plain: SciPy's own
    antiderivative = self.antiderivative()
    antiderivative.extrapolate = extrapolate
    return antiderivative(b) - antiderivative(a)


def _array_setter(name: str):
    """``spline.c = value`` (or ``.x``, ``.t``) with a traced value: stored where SciPy keeps the array."""

    def impl(self, value):
        _put(self, name, value if type(value) is Tracer else np.asarray(value))

    return impl


def _ppoly_unsupported(method: str, why: str):
    def impl(self, *args, **kwargs):
        raise UnsupportedFunctionError(f"scipy.interpolate.{type(self).__name__}.{method}", why)

    return impl


def _ppoly_init(self, c, x, extrapolate=None, axis=0):
    if isinstance(self, BPoly):
        raise UnsupportedFunctionError(
            "scipy.interpolate.BPoly", "tapegrad differentiates PPoly (power basis) only; build a PPoly instead"
        )
    # SciPy's checks and attributes (PPoly.__init__ is _PPolyBase's in SciPy 1.17, the front end's in 1.18).
    PPoly.__init__(self, strip_all(c), strip_all(x), extrapolate, axis)
    c = _float(c)
    if axis != 0:
        c = np.moveaxis(np.moveaxis(c, axis + 1, 0), axis + 1, 0)
    _put(self, "c", c)
    _keep_breakpoints(self, _breakpoints_of(x))


def _breakpoints_of(x: Any) -> Any:
    """User breakpoints as SciPy keeps them (float64): traced if they reach a watched input."""
    if _reaches_source(x):
        x = x if type(x) is Tracer else np.stack(x)
        return x if x.dtype == np.float64 else x.astype(np.float64)
    return np.asarray(strip_all(x), dtype=np.float64)


def _hermite_coefficients(x: Any, y0: Any, d0: Any) -> Any:
    """SciPy's ``CubicHermiteSpline`` coefficients from values and slopes (interpolation axis first)."""
    dx = np.diff(x)
    dxr = np.reshape(dx, (dx.shape[0],) + (1,) * (np.ndim(y0) - 1))
    slope = (y0[1:] - y0[:-1]) / dxr
    t = (d0[:-1] + d0[1:] - 2 * slope) / dxr
    return np.stack((t / dxr, (slope - d0[:-1]) / dxr - t, d0[:-1], y0[:-1]))


def _hermite_init(self, x, y, dydx, axis=0, extrapolate=None):
    CubicHermiteSpline.__init__(self, strip_all(x), strip_all(y), strip_all(dydx), axis, extrapolate)
    x = _breakpoints_of(x)
    y0 = np.moveaxis(_float(y), self.axis, 0)
    d0 = np.moveaxis(_float(dydx), self.axis, 0)
    _put(self, "c", _hermite_coefficients(x, y0, d0))
    _keep_breakpoints(self, x)


def _pchip_edge(h0, h1, m0, m1, h0v, h1v, m0v, m1v):
    # SciPy's PchipInterpolator._edge_case, its branches taken on the plain values.
    d = ((2 * h0 + h1) * m0 - h0 * m1) / (h0 + h1)
    dv = ((2 * h0v + h1v) * m0v - h0v * m1v) / (h0v + h1v)
    mask = np.sign(dv) != np.sign(m0v)
    mask2 = (np.sign(m0v) != np.sign(m1v)) & (np.abs(dv) > 3.0 * np.abs(m0v))
    return np.where(mask, 0.0, np.where((~mask) & mask2, 3.0 * m0, d))


def _pchip_slopes(x: Any, y0: Any) -> Any:
    """SciPy's ``PchipInterpolator._find_derivatives`` on traced values and breakpoints (axis 0)."""
    shape = np.shape(y0)
    y = np.reshape(y0, (shape[0], -1))
    yv = np.asarray(strip(y))
    h = np.reshape(np.diff(x), (-1, 1))
    hv = np.asarray(strip(h))
    m = (y[1:] - y[:-1]) / h
    mv = (yv[1:] - yv[:-1]) / hv
    if shape[0] == 2:
        return np.reshape(np.concatenate([m, m], axis=0), shape)
    sm = np.sign(mv)
    flat = (sm[1:] != sm[:-1]) | (mv[1:] == 0) | (mv[:-1] == 0)
    w1 = 2 * h[1:] + h[:-1]
    w2 = h[1:] + 2 * h[:-1]
    # Where the slope is set to zero, divide by ones instead (no NaN reaches the gradient).
    m_left = np.where(flat, 1.0, m[:-1])
    m_right = np.where(flat, 1.0, m[1:])
    inner = np.where(flat, 0.0, (w1 + w2) / (w1 / m_left + w2 / m_right))
    first = _pchip_edge(h[0], h[1], m[0], m[1], hv[0], hv[1], mv[0], mv[1])
    last = _pchip_edge(h[-1], h[-2], m[-1], m[-2], hv[-1], hv[-2], mv[-1], mv[-2])
    d = np.concatenate([first[None], inner, last[None]], axis=0)
    return np.reshape(d, shape)


def _pchip_init(self, x, y, axis=0, extrapolate=None):
    PchipInterpolator.__init__(self, strip_all(x), strip_all(y), axis, extrapolate)
    x = _breakpoints_of(x)
    y0 = np.moveaxis(_float(y), self.axis, 0)
    _put(self, "c", _hermite_coefficients(x, y0, _pchip_slopes(x, y0)))
    _keep_breakpoints(self, x)


def _akima_slopes(x: Any, y0: Any, method: str) -> Any:
    """SciPy's Akima (``makima``) slopes on traced values and breakpoints (axis 0), branches on plain values."""
    shape = np.shape(y0)
    y = np.reshape(y0, (shape[0], -1))
    h = np.reshape(np.diff(x), (-1, 1))
    mk = (y[1:] - y[:-1]) / h
    if shape[0] == 2:
        return np.reshape(np.concatenate([mk, mk], axis=0), shape)
    m1 = 2.0 * mk[0] - mk[1]
    m0 = 2.0 * m1 - mk[0]
    mm2 = 2.0 * mk[-1] - mk[-2]
    mm1 = 2.0 * mm2 - mk[-1]
    m = np.concatenate([m0[None], m1[None], mk, mm2[None], mm1[None]], axis=0)
    mv = np.asarray(strip(m))
    t = 0.5 * (m[3:] + m[:-3])
    dm = np.abs(np.diff(m, axis=0))
    dmv = np.abs(np.diff(mv, axis=0))
    if method == "makima":
        pm = np.abs(m[1:] + m[:-1])
        pmv = np.abs(mv[1:] + mv[:-1])
        f1, f2 = dm[2:] + 0.5 * pm[2:], dm[:-2] + 0.5 * pm[:-2]
        f12v = dmv[2:] + 0.5 * pmv[2:] + dmv[:-2] + 0.5 * pmv[:-2]
    else:
        f1, f2 = dm[2:], dm[:-2]
        f12v = dmv[2:] + dmv[:-2]
    f12 = f1 + f2
    mmax = np.max(f12v) if f12v.size > 0 else -np.inf
    weighted = f12v > 1e-9 * mmax
    f12_safe = np.where(weighted, f12, 1.0)
    t = np.where(weighted, m[1:-2] + (f2 / f12_safe) * (m[2:-1] - m[1:-2]), t)
    return np.reshape(t, shape)


def _akima_init(self, x, y, axis=0, *, method="akima", extrapolate=None):
    Akima1DInterpolator.__init__(self, strip_all(x), strip_all(y), axis, method=method, extrapolate=extrapolate)
    x = _breakpoints_of(x)
    y0 = np.moveaxis(_float(y), self.axis, 0)
    _put(self, "c", _hermite_coefficients(x, y0, _akima_slopes(x, y0, method)))
    _keep_breakpoints(self, x)


def _homogeneous_cubic_bc(bc_type: Any, n: int) -> Any:
    """``bc_type`` with its derivative values zeroed, shaped for ``n`` data columns."""
    if isinstance(bc_type, str):
        return bc_type
    return tuple(bc if isinstance(bc, str) else (bc[0], np.zeros(n)) for bc in bc_type)


def _tridiagonal_solve(lower: Any, main: Any, upper: Any, b: Any) -> np.ndarray:
    """Solve ``A s = b`` for the tridiagonal ``A`` (sub-, main and super-diagonal), ``b`` of shape ``(n, ...)``."""
    n = np.shape(main)[0]
    banded = np.zeros((3, n), dtype=np.result_type(main, lower, upper))
    banded[0, 1:], banded[1], banded[2, :-1] = upper, main, lower
    b = np.asarray(b)
    s = solve_banded((1, 1), banded, np.reshape(b, (n, -1)), check_finite=False)
    return np.reshape(s, np.shape(b))


tridiagonal_solve_p = primitive(_tridiagonal_solve)


def _tridiagonal_vjps():
    # s = A^-1 b: the cotangent of b is lam = A^-T g (A's transpose swaps its off-diagonals),
    # and that of A is -lam s^T, of which only the three diagonals are kept.
    def adjoint(g, ans, lower, main, upper, b):
        nb = np.ndim(g) - np.ndim(ans)  # leading batch axes
        lam = tridiagonal_solve_p(upper, main, lower, np.moveaxis(g, nb, 0))
        return np.moveaxis(lam, 0, nb)

    def band(lam_rows: slice, s_rows: slice):
        def vjp(g, ans, lower, main, upper, b):
            nb = np.ndim(g) - np.ndim(ans)
            lam = adjoint(g, ans, lower, main, upper, b)
            product = lam[(slice(None),) * nb + (lam_rows,)] * ans[s_rows]
            return -np.sum(product, axis=tuple(range(nb + 1, np.ndim(product))))

        return vjp

    # lower[i] = A[i + 1, i], main[i] = A[i, i], upper[i] = A[i, i + 1]
    return band(slice(1, None), slice(None, -1)), band(slice(None), slice(None)), band(slice(None, -1), slice(1, None)), adjoint


defvjp(tridiagonal_solve_p, *_tridiagonal_vjps(), note="transposed tridiagonal solve")


def _shift_rows(band: Any, rows: list, shifts: list) -> Any:
    """Stack ``band[rows[q]]`` moved by ``shifts[q]`` columns (``out[q, j] = band[rows[q], j + shift]``, 0 outside)."""
    n = np.shape(band)[1]
    out = []
    for r, shift in zip(rows, shifts):
        row = band[r]
        if shift > 0:
            row = np.concatenate([row[shift:], np.zeros(min(shift, n), dtype=np.result_type(band))])
        elif shift < 0:
            row = np.concatenate([np.zeros(min(-shift, n), dtype=np.result_type(band)), row[: n + shift]])
        out.append(row)
    return np.stack(out)


def _banded_solve(ab: Any, b: Any, lower: int, upper: int) -> np.ndarray:
    """Solve ``A s = b``, ``A`` in LAPACK's banded storage ``ab[upper + i - j, j] = A[i, j]``."""
    b = np.asarray(b)
    n = np.shape(b)[0]
    return np.reshape(solve_banded((lower, upper), ab, np.reshape(b, (n, -1)), check_finite=False), np.shape(b))


banded_solve_p = primitive(_banded_solve)


def _transposed_band(ab: Any, lower: int, upper: int) -> Any:
    # A^T[i, j] = A[j, i]: row r of its storage is row lower + upper - r of ab, moved by r - lower.
    rows = list(range(lower + upper + 1))
    return _shift_rows(ab, [lower + upper - r for r in rows], [r - lower for r in rows])


def _banded_adjoint(g, ans, ab, b, lower, upper):
    nb = np.ndim(g) - np.ndim(ans)
    lam = banded_solve_p(_transposed_band(ab, lower, upper), np.moveaxis(g, nb, 0), upper, lower)
    return np.moveaxis(lam, 0, nb)


def _banded_matrix_vjp(g, ans, ab, b, lower, upper):
    # The cotangent of A is -lam s^T; its storage entry [r, j] is A[j + r - upper, j].
    nb = np.ndim(g) - np.ndim(ans)
    lam = np.moveaxis(_banded_adjoint(g, ans, ab, b, lower, upper), nb, 0)  # (n, batch..., R...)
    s = np.reshape(ans, np.shape(ans)[:1] + (1,) * nb + np.shape(ans)[1:])
    trailing = tuple(range(1 + nb, np.ndim(lam)))
    rows = []
    for r in range(lower + upper + 1):
        shift = r - upper  # lam row j + shift pairs with s row j
        n = np.shape(ans)[0]
        if shift >= 0:
            part = lam[shift:] * s[: n - shift] if shift < n else None
            pad = [np.zeros((min(shift, n),) + np.shape(lam)[1:], dtype=np.result_type(lam))]
            pieces = ([part] if part is not None else []) + pad
        else:
            part = lam[: n + shift] * s[-shift:] if -shift < n else None
            pad = [np.zeros((min(-shift, n),) + np.shape(lam)[1:], dtype=np.result_type(lam))]
            pieces = pad + ([part] if part is not None else [])
        full = np.concatenate(pieces, axis=0)  # (n, batch..., R...): entry j is lam[j + shift] s[j]
        rows.append(-np.sum(full, axis=trailing) if trailing else -full)
    return np.moveaxis(np.stack(rows), (0, 1), (-2, -1))  # batch + (bands, n)


defvjp(banded_solve_p, _banded_matrix_vjp, _banded_adjoint, None, None, note="transposed banded solve")


def _cubic_bc_sides(bc_type: Any) -> list:
    """``bc_type`` as SciPy validates it: two sides, each a string or ``(order, value)``."""
    sides = (bc_type, bc_type) if isinstance(bc_type, str) else tuple(bc_type)
    out = []
    for bc in sides:
        if isinstance(bc, str):
            out.append({"clamped": (1, 0.0), "natural": (2, 0.0)}.get(bc, bc))
        else:
            out.append((int(strip(bc[0])), bc[1]))
    return out


def _cubic_spline_slopes(x: Any, y0: Any, bc_type: Any) -> Any:
    """SciPy's ``CubicSpline`` slopes from traced breakpoints, data and boundary values.

    The same linear system as SciPy's (rows for the boundary conditions, the
    periodic one closed cyclically), assembled with traced entries and solved densely
    (the periodic one, ``O(n^3)``) or as tridiagonal (every other, ``O(n)``).
    """
    n = np.shape(x)[0]
    extra = (1,) * (np.ndim(y0) - 1)
    ones = np.ones(np.shape(y0)[1:])
    dx = np.diff(x)
    dxr = np.reshape(dx, (-1,) + extra)
    slope = (y0[1:] - y0[:-1]) / dxr
    start, end = _cubic_bc_sides(bc_type)
    if n == 2:
        start = (1, slope[0]) if isinstance(start, str) else start
        end = (1, slope[0]) if isinstance(end, str) else end
    if start == "periodic":
        # Unknowns s[0..n-2] (s[n-1] = s[0]); row i couples knot i to its cyclic neighbours.
        m = n - 1
        dx_left = np.concatenate([dx[-1:], dx[:-1]])
        slope_left = np.concatenate([slope[-1:], slope[:-1]], axis=0)
        shift_left = np.roll(np.eye(m), -1, axis=1)  # row i picks s[i - 1]
        shift_right = np.roll(np.eye(m), 1, axis=1)  # row i picks s[i + 1]
        a = np.diag(2 * (dx_left + dx)) + dx[:, None] * shift_left + dx_left[:, None] * shift_right
        b = 3 * (dxr * slope_left + np.reshape(dx_left, (-1,) + extra) * slope)
        s = np.reshape(np.linalg.solve(a, np.reshape(b, (m, -1))), np.shape(b))
        return np.concatenate([s, s[:1]], axis=0)
    if n == 3 and start == "not-a-knot" and end == "not-a-knot":
        # SciPy's 3 x 3 system [[1, 1, 0], [dx1, 2 (dx0 + dx1), dx0], [0, 1, 1]]: tridiagonal too.
        lower = np.stack([dx[1], np.ones(())])
        main = np.stack([np.ones(()), 2 * (dx[0] + dx[1]), np.ones(())])
        upper = np.stack([np.ones(()), dx[0]])
        b = np.stack([2 * slope[0], 3 * (dxr[0] * slope[1] + dxr[1] * slope[0]), 2 * slope[1]])
    else:
        if start == "not-a-knot":
            d = x[2] - x[0]
            main0, upper0 = dx[1], d
            b0 = ((dxr[0] + 2 * d) * dxr[1] * slope[0] + dxr[0] ** 2 * slope[1]) / d
        elif start[0] == 1:
            main0, upper0, b0 = np.ones(()), np.zeros(()), start[1] * ones
        else:
            main0, upper0 = 2 * dx[0], dx[0]
            b0 = -0.5 * start[1] * dx[0] ** 2 + 3 * (y0[1] - y0[0])
        if end == "not-a-knot":
            d = x[-1] - x[-3]
            main1, lower1 = dx[-2], d
            b1 = (dxr[-1] ** 2 * slope[-2] + (2 * d + dxr[-1]) * dxr[-2] * slope[-1]) / d
        elif end[0] == 1:
            main1, lower1, b1 = np.ones(()), np.zeros(()), end[1] * ones
        else:
            main1, lower1 = 2 * dx[-1], dx[-1]
            b1 = 0.5 * end[1] * dx[-1] ** 2 + 3 * (y0[-1] - y0[-2])
        main = np.concatenate([np.reshape(main0, (1,)), 2 * (dx[:-1] + dx[1:]), np.reshape(main1, (1,))])
        upper = np.concatenate([np.reshape(upper0, (1,)), dx[:-1]])
        lower = np.concatenate([dx[1:], np.reshape(lower1, (1,))])
        middle = 3 * (dxr[1:] * slope[:-1] + dxr[:-1] * slope[1:])
        b = np.concatenate([np.reshape(b0 * ones, (1,) + np.shape(ones)), middle,
                            np.reshape(b1 * ones, (1,) + np.shape(ones))], axis=0)
    return tridiagonal_solve_p(lower, main, upper, b)


def _cubic_spline_init(self, x, y, axis=0, bc_type="not-a-knot", extrapolate=None):
    CubicSpline.__init__(self, strip_all(x), strip_all(y), axis, strip_all(bc_type), extrapolate)
    periodic = isinstance(bc_type, str) and bc_type == "periodic"
    if _reaches_source(x) or _reaches_source(bc_type) or not periodic:
        # SciPy's own system on the traced entries: O(n) but for periodic breakpoints.
        knots = _breakpoints_of(x)
        y0 = np.moveaxis(_float(y), self.axis, 0)
        _put(self, "c", _hermite_coefficients(knots, y0, _cubic_spline_slopes(knots, y0, bc_type)))
        _keep_breakpoints(self, knots)
        return
    # Periodic data with plain breakpoints: the linear map of y (SciPy's cyclic solve on identity columns).
    knots = _get(self, "x")
    homogeneous = _homogeneous_cubic_bc(bc_type, len(knots))

    def build(basis):
        return CubicSpline(knots, basis, 0, homogeneous).c

    _put(self, "c", _traced_coefficients(y, self.axis, _get(self, "c"), build, periodic))


# ----------------------------------------------------------------- B-splines
def _bspline_basis(t: np.ndarray, k: int, index: np.ndarray, x: Any) -> list:
    """The ``k + 1`` B-splines nonzero on each point's interval ``index`` (de Boor's recurrence).

    ``x`` and the knots may be traced; the denominators are knot spans around a
    nonempty interval, so none is zero.
    """
    h = [np.ones(np.shape(index))]
    for j in range(1, k + 1):
        previous = h
        h = [np.zeros(np.shape(index))] + [None] * j
        for r in range(1, j + 1):
            right = t[index + r]
            left = t[index + r - j]
            w = previous[r - 1] / (right - left)
            h[r - 1] = h[r - 1] + w * (right - x)
            h[r] = w * (x - left)
    return h


def _bspline_derivative_tck(t: np.ndarray, c: Any, k: int, nu: int, strict: bool = True) -> tuple:
    """SciPy's ``splder`` on traced coefficients (and knots).

    ``strict``: raise as ``splder`` does on internal repeated knots; otherwise (evaluating
    a derivative, as SciPy's ``__call__(x, nu)`` does) the B-splines over an empty span
    are zero, so their coefficients are set to 0.
    """
    if nu > k:
        raise ValueError(f"Order of derivative (n = {nu!r}) must be <= order of spline (k = {k!r})")
    pad = len(t) - np.shape(c)[0]
    if pad > 0:
        c = np.concatenate([c, np.zeros((pad,) + np.shape(c)[1:], dtype=np.result_type(c))], axis=0)
    for _ in range(nu):
        dt = t[k + 1 : -1] - t[1 : -k - 1]
        empty = np.asarray(strip(dt)) == 0
        if np.any(empty):
            if strict:
                raise ValueError(f"The spline has internal repeated knots and is not differentiable {nu} times")
            dt = np.where(empty, 1.0, dt)
        c = (c[1 : -1 - k] - c[: -2 - k]) * k / _trailing(dt, np.ndim(c) - 1)
        if np.any(empty):
            c = np.where(_trailing(empty, np.ndim(c) - 1), 0.0, c)
        c = np.concatenate([c, np.zeros((k,) + np.shape(c)[1:], dtype=np.result_type(c))], axis=0)
        t = t[1:-1]
        k -= 1
    return t, c, k


def _bspline_antiderivative_tck(t: np.ndarray, c: Any, k: int, nu: int) -> tuple:
    """SciPy's ``splantider`` on traced coefficients (and knots)."""
    pad = len(t) - np.shape(c)[0]
    if pad > 0:
        c = np.concatenate([c, np.zeros((pad,) + np.shape(c)[1:], dtype=np.result_type(c))], axis=0)
    for _ in range(nu):
        dt = t[k + 1 :] - t[: -k - 1]
        c = np.cumsum(c[: -k - 1] * _trailing(dt, np.ndim(c) - 1), axis=0) / (k + 1)
        zero = np.zeros((1,) + np.shape(c)[1:], dtype=np.result_type(c))
        c = np.concatenate([zero, c] + [c[-1:]] * (k + 2), axis=0)
        t = np.concatenate([t[:1], t, t[-1:]])
        k += 1
    return t, c, k


def _bspline_evaluate(t: Any, c: Any, k: int, points: Any, nu: int, extrapolate: Any, axis: int) -> Any:
    """``t``: the knots, plain or traced (intervals are found on their plain values)."""
    flat, plain, shape = _flat_points(points)
    n = len(t) - k - 1
    if extrapolate == "periodic":
        flat = t[k] + np.mod(flat - t[k], t[n] - t[k])
        plain = np.asarray(strip(flat))
        extrapolate = False
    if nu < 0:
        raise ValueError(f"Cannot do derivative order {nu}.")
    n_r = np.ndim(c) - 1
    tv = np.asarray(strip(t))
    # NaN where SciPy gives NaN: NaN points, and points outside the base interval unless extrapolating.
    undefined = np.isnan(plain) if extrapolate else ~((plain >= tv[k]) & (plain <= tv[n]))
    flat, plain = _without_nan(flat, plain, tv[k])
    if nu > k:  # a derivative past the degree: zero
        out = np.zeros((len(plain),) + np.shape(c)[1:], dtype=np.result_type(c))
    else:
        if nu > 0:
            t, c, k = _bspline_derivative_tck(t, c, k, nu, strict=False)
            n = len(t) - k - 1
            tv = np.asarray(strip(t))
        index = np.clip(np.searchsorted(tv, plain, side="right") - 1, k, n - 1)
        basis = _bspline_basis(t, k, index, flat)
        out = 0.0
        for r in range(k + 1):
            out = out + _trailing(basis[r], n_r) * c[index - k + r]
    if np.any(undefined):
        out = np.where(_trailing(undefined, n_r), np.nan, out)
    out = np.reshape(out, shape + np.shape(c)[1:])
    return _axis_last(out, len(shape), axis)


def _knots(self: Any) -> Any:
    """The B-spline's knots: traced when it was built from traced ``t`` (``spline.t`` is then traced too)."""
    return _get(self, "t")


def _bspline_init(self, t, c, k, extrapolate=True, axis=0):
    BSpline.__init__(self, strip_all(t), strip_all(c), k, extrapolate, axis)
    c = _float(c)
    if self.axis != 0:
        c = np.moveaxis(c, self.axis, 0)
    _put(self, "c", c)
    knots = _breakpoints_of(t)
    if type(knots) is Tracer:
        _put(self, "t", knots)


def _bspline_call(self, x, nu=0, extrapolate=None):
    nu = _plain(f"{type(self).__name__}.__call__", "nu", nu)
    if extrapolate is None:
        extrapolate = self.extrapolate
    return _bspline_evaluate(_knots(self), _get(self, "c"), self.k, x, int(nu), extrapolate, self.axis)


def _bspline_new(self, tck: tuple, extrapolate: Any) -> Any:
    t, c, k = tck
    out = type(self).construct_fast(np.asarray(strip(t)), np.asarray(strip_all(c)), k, extrapolate=extrapolate,
                                    axis=self.axis)
    _put(out, "c", c)
    if type(t) is Tracer:
        _put(out, "t", t)
    return out


def _bspline_derivative(self, nu=1):
    if nu < 0:
        return self.antiderivative(-nu)
    return _bspline_new(self, _bspline_derivative_tck(_knots(self), _get(self, "c"), self.k, nu), self.extrapolate)


def _bspline_antiderivative(self, nu=1):
    if nu < 0:
        return self.derivative(-nu)
    tck = _bspline_antiderivative_tck(_knots(self), _get(self, "c"), self.k, nu)
    return _bspline_new(self, tck, False if self.extrapolate == "periodic" else self.extrapolate)


def _bspline_integrate(self, a, b, extrapolate=None):
    if extrapolate is None:
        extrapolate = self.extrapolate
    return _bspline_integral(_knots(self), _get(self, "c"), self.k, a, b, extrapolate)


def _bspline_integral(t: Any, c: Any, k: int, a: Any, b: Any, extrapolate: Any) -> Any:
    """SciPy's ``BSpline.integrate`` of the spline ``(t, c, k)`` (any of them and the limits may be traced)."""
    sign = 1.0
    if strip(b) < strip(a):
        a, b, sign = b, a, -1.0
    n = len(t) - k - 1
    ta, ca, ka = _bspline_antiderivative_tck(t, c, k, 1)

    def primitive_at(points, extrap):
        return _bspline_evaluate(ta, ca, ka, points, 0, extrap, 0)

    if extrapolate != "periodic":
        if not extrapolate:
            # Both limits into the base interval, as SciPy (an interval outside it integrates to 0).
            a = np.minimum(np.maximum(a, t[k]), t[n])
            b = np.minimum(np.maximum(b, t[k]), t[n])
        ends = primitive_at(np.stack([a, b]), bool(extrapolate))
        return sign * (ends[1] - ends[0])
    a, b = _plain("BSpline.integrate", "a and b", (a, b), "periodic integration limits")
    t = _plain("BSpline.integrate", "the knots", t, "periodic integration")
    ta, ca, ka = _bspline_antiderivative_tck(t, c, k, 1)
    ts, te = t[k], t[n]
    n_periods, left = divmod(b - a, te - ts)
    whole = primitive_at(np.array([ts, te]), False)
    total = (whole[1] - whole[0]) * n_periods
    a = ts + (a - ts) % (te - ts)
    b = a + left
    if b <= te:
        part = primitive_at(np.array([a, b]), False)
        total = total + (part[1] - part[0])
    else:
        part = primitive_at(np.array([a, te, ts, ts + b - te]), False)
        total = total + (part[1] - part[0]) + (part[3] - part[2])
    return sign * total


def _homogeneous_spline_bc(bc_type: Any, n: int) -> Any:
    """``make_interp_spline``'s ``bc_type`` with derivative values zeroed for ``n`` data columns."""
    if bc_type is None or isinstance(bc_type, str):
        return bc_type
    out = []
    for side in bc_type:
        if side is None or isinstance(side, str):
            out.append(side)
        else:
            out.append([(order, np.zeros(n)) for order, _ in side])
    return tuple(out)


class _Collocation:
    """An interpolating B-spline's square collocation matrix ``B`` (``B c = y``), factored on demand."""

    __slots__ = ("coefficients", "matrix", "_lu")

    def __init__(self, coefficients: Any, matrix: Any) -> None:
        self.coefficients = coefficients
        self.matrix = matrix
        self._lu: Any = None

    def solve(self, rhs: np.ndarray, transpose: bool) -> np.ndarray:
        if self._lu is None:
            self._lu = splu(self.matrix.tocsc())
        shape = np.shape(rhs)
        flat = np.reshape(rhs, (shape[0], -1))
        trans = "T" if transpose else "N"
        if np.iscomplexobj(flat):  # SuperLU of a real matrix: real and imaginary parts apart
            out = self._lu.solve(np.ascontiguousarray(flat.real), trans) + 1j * self._lu.solve(
                np.ascontiguousarray(flat.imag), trans
            )
        else:
            out = self._lu.solve(np.ascontiguousarray(flat, dtype=np.float64), trans)
        return np.reshape(out, shape)


def _collocation_solve(rhs: Any, system: _Collocation, transpose: bool) -> np.ndarray:
    return system.solve(rhs, transpose)


collocation_solve_p = primitive(_collocation_solve)


def _solve_batched(g: Any, ans: Any, system: _Collocation, transpose: bool) -> Any:
    # g: batch + (n,) + R; the solve runs along the n axis.
    nb = np.ndim(g) - np.ndim(ans)
    return np.moveaxis(collocation_solve_p(np.moveaxis(g, nb, 0), system, transpose), 0, nb)


def _collocation_coefficients(y0: Any, system: _Collocation) -> Any:
    # Solved from these very data by SciPy: its coefficients.
    return system.coefficients


collocation_coefficients_p = primitive(_collocation_coefficients)
defvjp(collocation_solve_p, lambda g, ans, rhs, system, transpose: _solve_batched(g, ans, system, not transpose),
       None, None, note="the transposed collocation solve")
defvjp(collocation_coefficients_p, lambda g, ans, y0, system: _solve_batched(g, ans, system, True), None,
       note="c = B^-1 y: the VJP solves with B^T")


def _interp_spline_in_x(x: Any, y0: Any, k: int, t: Any) -> tuple:
    """``make_interp_spline``'s knots and coefficients (no derivative conditions) from traced abscissae.

    The same knots as SciPy's (``_not_a_knot``, or ``t``), the collocation matrix
    ``B[i, j] = B_j(x_i)`` from de Boor's recurrence on the traced values, in banded
    storage, and ``c = B^-1 y`` by a banded solve whose VJP solves with ``B^T``.
    """
    if k == 0:
        return np.concatenate([x, x[-1:]]), y0
    if k == 1 and t is None:
        return np.concatenate([x[:1], x, x[-1:]]), y0
    if t is None:
        if k % 2 == 1:
            inner = x[(k + 1) // 2 : -((k + 1) // 2)]
        else:
            inner = ((x[1:] + x[:-1]) / 2)[k // 2 : -(k // 2)]
        t = np.concatenate([x[:1]] * (k + 1) + [inner] + [x[-1:]] * (k + 1))
    else:
        t = np.asarray(t, dtype=np.float64)
    tv, xv = np.asarray(strip(t)), np.asarray(strip(x))
    n = len(xv)
    index = np.clip(np.searchsorted(tv, xv, side="right") - 1, k, len(tv) - k - 2)
    basis = _bspline_basis(t, k, index, x)  # basis[r][i] = B_{index_i - k + r}(x_i)
    rows = np.arange(n)
    lower = int(np.max(rows - (index - k)))
    upper = int(max(np.max(index - rows), 0))
    ab = np.zeros_like(basis[-1], shape=(lower + upper + 1, n))
    for r in range(k + 1):
        columns = index - k + r
        ab[upper + rows - columns, columns] = basis[r]
    c = banded_solve_p(ab, np.reshape(y0, (n, -1)), lower, upper)
    return t, np.reshape(c, np.shape(y0))


def _make_interp_spline(x, y, k=3, t=None, bc_type=None, axis=0, check_finite=True):
    t = _plain("make_interp_spline", "t", t, "knots are not differentiated")
    if _reaches_source(x):
        if not (bc_type is None or (isinstance(bc_type, str) and bc_type == "not-a-knot")):
            _plain("make_interp_spline", "x", x,
                   "the abscissae are differentiated without derivative or periodic boundary conditions only")
        spline = make_interp_spline(strip_all(x), strip_all(y), k, t, strip_all(bc_type), axis, check_finite)
        knots, c = _interp_spline_in_x(_breakpoints_of(x), np.moveaxis(_float(y), spline.axis, 0), spline.k, t)
        _put(spline, "c", c)
        if type(knots) is Tracer:
            _put(spline, "t", knots)
        return spline
    x = strip_all(x)
    bc_type = _plain("make_interp_spline", "bc_type", bc_type, "boundary derivative values are not differentiated")
    spline = make_interp_spline(x, strip_all(y), k, t, bc_type, axis, check_finite)
    n = np.shape(y)[axis]
    xs = np.asarray(x, dtype=np.float64)
    if bc_type is None or (isinstance(bc_type, str) and bc_type == "not-a-knot"):
        # No derivative conditions: B c = y with B the (banded, sparse) collocation matrix, so
        # the VJP is one sparse solve with B^T (O(n)) instead of the map's dense matrix.
        matrix = BSpline.design_matrix(xs, _get(spline, "t"), spline.k)
        c = _get(spline, "c")
        if matrix.shape[0] == matrix.shape[1] == np.shape(c)[0]:
            y0 = np.moveaxis(_float(y), spline.axis, 0)
            _put(spline, "c", collocation_coefficients_p(y0, _Collocation(c, matrix)))
            return spline
    homogeneous = _homogeneous_spline_bc(bc_type, n)

    def build(basis):
        return make_interp_spline(xs, basis, k, t, homogeneous, 0, False).c

    _put(spline, "c", _traced_coefficients(y, spline.axis, _get(spline, "c"), build, bc_type == "periodic"))
    return spline


def _make_lsq_spline(x, y, t, k=3, w=None, axis=0, check_finite=True, *, method="qr"):
    x, t, w = (
        _plain("make_lsq_spline", n, v, "only the data y are differentiated") for n, v in (("x", x), ("t", t), ("w", w))
    )
    spline = make_lsq_spline(x, strip_all(y), t, k, w, axis, check_finite, method=method)

    def build(basis):
        return make_lsq_spline(x, basis, t, k, w, 0, False, method=method).c

    _put(spline, "c", _traced_coefficients(y, spline.axis, _get(spline, "c"), build))
    return spline


def _make_smoothing_spline(x, y, w=None, lam=None, *, axis=0):
    x, w, lam = (
        _plain("make_smoothing_spline", n, v, "only the data y are differentiated")
        for n, v in (("x", x), ("w", w), ("lam", lam))
    )
    if lam is None:
        raise NonDifferentiableArgumentError(
            "tapegrad cannot differentiate scipy.interpolate.make_smoothing_spline with lam=None: the "
            "smoothing parameter is then chosen from the data by generalized cross-validation. Pass lam "
            "explicitly (e.g. the one found on plain data: spline = make_smoothing_spline(x, y_plain), "
            "whose lam you can recompute) to differentiate in y."
        )
    spline = make_smoothing_spline(x, strip_all(y), w, lam, axis=axis)

    def build(basis):
        return make_smoothing_spline(x, basis, w, lam, axis=0).c

    _put(spline, "c", _traced_coefficients(y, spline.axis, _get(spline, "c"), build))
    return spline


# ----------------------------------------------------------------- interp1d
def _interp1d_init(self, x, y, kind="linear", axis=-1, copy=True, bounds_error=None, fill_value=np.nan,
                   assume_sorted=False):
    # The abscissae enter the linear kind's slopes and the spline kinds' collocation;
    # the step kinds only compare with them.
    traced_x = _reaches_source(x)
    fill_value = _plain("interp1d", "fill_value", fill_value)
    plain_x = strip_all(x)
    interp1d.__init__(self, plain_x, strip_all(y), kind, axis, copy, bounds_error, fill_value, assume_sorted)
    order = None if assume_sorted else np.argsort(np.asarray(plain_x), kind="mergesort")
    if traced_x:  # f.x is the traced (sorted) abscissae
        knots = _breakpoints_of(x)
        self.x = knots if order is None else knots[order]
    y = _float(y)
    if order is not None:
        y = np.take(y, order, axis=self.axis)
    self.y = y
    self._y = np.reshape(np.moveaxis(y, self.axis, 0), (np.shape(y)[self.axis], -1))
    if self._kind == "spline" and self._call is interp1d._call_spline:
        self._spline = make_interp_spline(self.x, self._y, k=self._spline.k, check_finite=False)
    if isinstance(fill_value, str) and fill_value == "extrapolate" and self._kind in ("previous", "next"):
        # SciPy extrapolates previous/next with the last/first data value: a traced fill.
        edge = np.reshape(np.take(y, -1 if self._kind == "previous" else 0, axis=self.axis), (-1,))
        if self._kind == "previous":
            self._fill_value_above = edge
        else:
            self._fill_value_below = edge


#: SciPy's arithmetic for interp1d's linear kind (np.interp aside), so that values are SciPy's to
#: the last bit: ``slope * (x - x_lo) + y_lo`` up to SciPy 1.17, the two weights
#: ``(x - x_lo) / h * y_hi + (x_hi - x) / h * y_lo`` from SciPy 1.18 (read off its code).
_LINEAR_TWO_WEIGHTS = "slope" not in interp1d._call_linear.__code__.co_varnames


def _interp1d_bounds(self, xv: np.ndarray, plain: np.ndarray) -> tuple:
    """SciPy's ``interp1d._check_bounds`` (its messages) on the plain abscissae."""
    below, above = plain < xv[0], plain > xv[-1]
    if self.bounds_error and below.any():
        raise ValueError(f"A value ({plain[np.argmax(below)]}) in x_new is below "
                         f"the interpolation range's minimum value ({xv[0]}).")
    if self.bounds_error and above.any():
        raise ValueError(f"A value ({plain[np.argmax(above)]}) in x_new is above "
                         f"the interpolation range's maximum value ({xv[-1]}).")
    return below, above


def _interp1d_evaluate(self, x_new):
    # SciPy's interp1d._evaluate: x_new is flat (interp1d.__call__ prepared it); the
    # result is (points, data columns), which __call__ reshapes as SciPy does.
    flat, plain, _ = _flat_points(x_new)
    xv = np.asarray(strip(self.x))  # the abscissae may be traced
    n = len(xv)
    y = self._y
    kind = self._kind
    if kind == "linear":
        hi = np.clip(np.searchsorted(xv, plain), 1, n - 1)
        lo = hi - 1
        x_lo, x_hi = self.x[lo], self.x[hi]
        if _LINEAR_TWO_WEIGHTS and self._call is not interp1d._call_linear_np:
            span = x_hi - x_lo
            out = ((flat - x_lo) / span)[:, None] * y[hi] + ((x_hi - flat) / span)[:, None] * y[lo]
        else:
            slope = (y[hi] - y[lo]) / (x_hi - x_lo)[:, None]
            out = slope * (flat - x_lo)[:, None] + y[lo]
    elif kind in ("nearest", "nearest-up"):
        out = y[np.clip(np.searchsorted(self.x_bds, plain, side=self._side), 0, n - 1)]
    elif kind in ("previous", "next"):
        index = np.clip(np.searchsorted(self._x_shift, plain, side=self._side), 1 - self._ind, n - self._ind)
        out = y[index + self._ind - 1]
    elif self._call is interp1d._call_nan_spline:
        out = np.full((len(plain), np.shape(y)[1]), np.nan)
    else:
        out = self._spline(flat)
    if not self._extrapolate:
        below, above = _interp1d_bounds(self, xv, plain)
        if len(plain) > 0:
            out = np.where(below[:, None], self._fill_value_below, out)
            out = np.where(above[:, None], self._fill_value_above, out)
    return out


# ----------------------------------------------------------------- regular grids
def _rgi_init(self, points, values, method="linear", bounds_error=True, fill_value=np.nan, *, solver=None,
              solver_args=None):
    # The grid enters the linear and pchip weights; the spline methods' weights come from
    # SciPy's own solves on the plain grid.
    traced_grid = _reaches_source(points)
    if traced_grid and method not in ("linear", "nearest", "pchip"):
        _plain("RegularGridInterpolator", "points", points,
               f"the grid of method={method!r} is not differentiated ('linear', 'nearest' and 'pchip' are)")
    fill_value = _plain("RegularGridInterpolator", "fill_value", fill_value)
    RegularGridInterpolator.__init__(
        self, strip_all(points), strip_all(values), method, bounds_error, fill_value, solver=solver,
        solver_args=solver_args,
    )
    if traced_grid:  # rgi.grid is the traced (ascending) grid; a plain copy serves the searches
        self.__dict__["_tapegrad_plain_grid"] = self._grid
        grid = [_breakpoints_of(p) for p in points]
        self._grid = tuple(np.flip(g) if d in self._descending_dimensions else g for d, g in enumerate(grid))
    if type(values) is not Tracer:
        values = np.asarray(values)
    if values.dtype.kind not in "fc":
        values = values.astype(np.float64)
    if self._descending_dimensions:
        values = np.flip(values, axis=self._descending_dimensions)
    self._values = values


def _plain_grid(self) -> tuple:
    """The grid's plain values (``self._grid`` is traced when built from a traced grid)."""
    return self.__dict__.get("_tapegrad_plain_grid", self._grid)


def _rgi_points(self, xi):
    """SciPy's ``_prepare_xi`` on traced points: ``(flat (P, ndim), plain, shape, nans, outside)``."""
    grid = _plain_grid(self)
    ndim = len(grid)
    # SciPy's _ndim_coords_from_arrays: a tuple of coordinate arrays, or points (..., ndim).
    if isinstance(xi, tuple) and len(xi) == 1:
        xi = xi[0]
    if isinstance(xi, tuple):
        xi = np.stack(np.broadcast_arrays(*xi), axis=-1)
    else:
        if type(xi) is not Tracer:
            xi = np.asarray(xi)
        if np.ndim(xi) == 1:
            xi = np.reshape(xi, (-1, ndim))
    shape = np.shape(xi)
    if shape[-1] != ndim:
        raise ValueError(
            f"The requested sample points xi have dimension {shape[-1]} but this "
            f"RegularGridInterpolator has dimension {ndim}"
        )
    flat = np.reshape(xi, (-1, ndim))
    if flat.dtype != np.float64:
        flat = flat.astype(np.float64)
    plain = np.asarray(strip(flat))
    nans = np.any(np.isnan(plain), axis=-1)
    if self.bounds_error:
        for i, p in enumerate(plain.T):
            if not np.logical_and(np.all(grid[i][0] <= p), np.all(p <= grid[i][-1])):
                raise ValueError(f"One of the requested xi is out of bounds in dimension {i}")
        outside = None
    else:  # SciPy's _find_out_of_bounds
        outside = np.zeros(len(plain), dtype=bool)
        for p, g in zip(plain.T, grid):
            outside |= (p < g[0]) | (p > g[-1])
    return flat, plain, shape, nans, outside


def _spline_weights(grid: np.ndarray, k: int, points: Any, nu: int) -> Any:
    """``W[p, i]``: the 1-D not-a-knot spline through ``e_i`` (degree ``k``) at ``points[p]``."""
    cardinal = make_interp_spline(grid, np.eye(len(grid)), k=k)
    return _bspline_evaluate(_get(cardinal, "t"), _get(cardinal, "c"), k, points, nu, True, 0)


def _rgi_pchip(grid: tuple, values: Any, flat: Any, plain: np.ndarray, plain_grid: tuple) -> Any:
    """SciPy's recursive PCHIP on a grid: fold the last axis, then each axis at each point's coordinate.

    SciPy fits one ``PchipInterpolator`` per point and axis; here the slopes and
    Hermite coefficients of all points' data are computed at once and each point
    reads its own column.
    """
    ndim = len(grid)
    points = np.arange(np.shape(flat)[0])
    # Last grid axis first: its interpolants are evaluated at every point.
    folded = None
    for d in range(ndim - 1, -1, -1):
        g = grid[d]
        if folded is None:
            y0 = np.moveaxis(values, d, 0)  # (n_d, n_0, ..., n_{d-1}, extra)
        else:
            y0 = np.moveaxis(folded, d + 1, 0)  # (n_d, P, n_0, ..., n_{d-1}, extra)
        c = _hermite_coefficients(g, y0, _pchip_slopes(g, y0))
        index, _ = _pp_intervals(plain_grid[d], plain[:, d])
        pieces = c[:, index] if folded is None else c[:, index, points]  # (4, P, ...)
        t = np.reshape(flat[:, d] - g[index], (-1,) + (1,) * (np.ndim(pieces) - 2))
        folded = _horner(pieces, t)  # (P, n_0, ..., n_{d-1}, extra)
    return folded


def _rgi_call(self, xi, method=None, *, nu=None):
    method = self.method if method is None else method
    if method not in self._ALL_METHODS:
        raise ValueError(f"Method '{method}' is not defined")
    if nu is not None and method not in self._SPLINE_METHODS_ndbspl:
        raise ValueError(f"Can only compute derivatives for methods {self._SPLINE_METHODS_ndbspl}, got {method =}.")
    if method != self.method and method in self._SPLINE_METHODS:
        self._validate_grid_dimensions(_plain_grid(self), method)
    flat, plain, shape, nans, outside = _rgi_points(self, xi)
    values = self._values
    grid, plain_grid = self._grid, _plain_grid(self)  # grid: traced when built from a traced grid
    if grid is not plain_grid and method not in ("linear", "nearest", "pchip"):
        _plain("RegularGridInterpolator.__call__", "points (the grid)", grid,
               f"the grid of method={method!r} is not differentiated ('linear', 'nearest' and 'pchip' are)")
    ndim = len(plain_grid)
    extra = np.ndim(values) - ndim
    if method in ("linear", "nearest"):
        indices, distances = _rgi.find_indices(plain_grid, np.ascontiguousarray(plain.T))
        if method == "nearest":
            # SciPy's own distances decide the neighbour (ties at exactly one half included).
            result = values[tuple(np.where(w <= 0.5, i, i + 1) for i, w in zip(indices, distances))]
        else:
            result = 0.0
            weights = []
            for d in range(ndim):
                g, i = grid[d], indices[d]
                w = (flat[:, d] - g[i]) / (g[i + 1] - g[i])
                weights.append(((i, 1 - w), (i + 1, w)))
            for corner in np.ndindex(*(2,) * ndim):
                index = tuple(weights[d][corner[d]][0] for d in range(ndim))
                weight = 1.0
                for d in range(ndim):
                    weight = weight * weights[d][corner[d]][1]
                result = result + values[index] * _trailing(weight, extra)
    elif method == "pchip":
        result = _rgi_pchip(grid, values, flat, plain, plain_grid)
    else:
        k = self._SPLINE_DEGREE_MAP[method]
        orders = (0,) * ndim if nu is None else tuple(int(v) for v in np.broadcast_to(nu, (ndim,)))
        # The tensor-product spline: one 1-D cardinal spline per axis, contracted axis by axis.
        w_last = _spline_weights(plain_grid[-1], k, flat[:, -1], orders[-1])  # (P, n_last)
        result = np.moveaxis(np.tensordot(values, w_last, axes=([ndim - 1], [1])), -1, 0)
        for d in range(ndim - 2, -1, -1):
            w = _spline_weights(plain_grid[d], k, flat[:, d], orders[d])  # (P, n_d)
            result = np.sum(result * np.reshape(w, np.shape(w)[:1] + (1,) * d + np.shape(w)[1:] + (1,) * extra),
                            axis=d + 1)
    if not self.bounds_error and self.fill_value is not None:
        result = np.where(_trailing(outside, extra), self.fill_value, result)
    if np.any(nans):
        result = np.where(_trailing(nans, extra), np.nan, result)
    return np.reshape(result, shape[:-1] + np.shape(values)[ndim:])


def _interpn(points, values, xi, method="linear", bounds_error=True, fill_value=np.nan):
    if method == "splinef2d":
        raise UnsupportedFunctionError(
            "scipy.interpolate.interpn",
            "method='splinef2d' runs FITPACK's compiled code; use method='cubic' (the same "
            "kind of tensor-product spline, differentiated by tapegrad)",
        )
    return RegularGridInterpolator(points, values, method=method, bounds_error=bounds_error,
                                   fill_value=fill_value)(xi)


# ----------------------------------------------------------------- Lagrange polynomial
def _lagrange_coefficients(x: np.ndarray, w: np.ndarray, caught: Optional[list] = None) -> np.ndarray:
    """SciPy's coefficients of ``lagrange(x, w)``, zero-padded in front to ``len(x)``.

    SciPy's warnings (SciPy 1.18 deprecates ``lagrange``) are collected in ``caught``
    rather than shown: the rule runs SciPy's ``lagrange`` many times for one call.
    """
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        coefficients = lagrange(x, w).coeffs
    if caught is not None:
        caught.extend(seen)
    return np.concatenate([np.zeros(len(x) - len(coefficients), dtype=coefficients.dtype), coefficients])


#: SciPy's files and tapegrad's, skipped to find the line of the caller's own call.
_SKIPPED_FILES = (os.path.dirname(scipy.__file__), os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _warn_as_scipy(caught: list) -> None:
    """SciPy's own warnings of the call a rule stands for, once each, at the caller's line."""
    seen = set()
    for w in caught:
        key = (w.category, str(w.message))
        if key in seen:
            continue
        seen.add(key)
        if sys.version_info >= (3, 12):
            warnings.warn(str(w.message), w.category, skip_file_prefixes=_SKIPPED_FILES)
        else:
            warnings.warn(str(w.message), w.category, stacklevel=2)


def _lagrange(x, w):
    # np.poly1d trims leading coefficients that are exactly zero, by value: SciPy's own
    # code run on a traced w drops w[j] == 0 (poly1d(w[j]) becomes a plain [0.]). The
    # coefficients are linear in w: SciPy's map on identity columns, all len(x) of them kept.
    x = np.asarray(_plain("lagrange", "x", x, "the nodes are not differentiated"), dtype=np.float64)
    n = len(x)

    def build(basis):
        return np.stack([_lagrange_coefficients(x, basis[:, i]) for i in range(basis.shape[1])], axis=-1)

    w0 = _float(w)
    caught: list = []
    plain = _lagrange_coefficients(x, np.asarray(strip(w0)), caught)
    _warn_as_scipy(caught)
    coefficients = linear_coefficients_p(w0, _LinearMap(plain, build, n, False))
    out = np.poly1d.__new__(np.poly1d)  # without __init__'s trimming, which would drop derivatives
    out.__dict__.update(coeffs=coefficients, _variable="x")
    return out


# ----------------------------------------------------------------- FITPACK's splev
def _splev(x, tck, der=0, ext=0):
    t, c, k = tck
    if isinstance(c, (list, tuple)) and len(c) and np.ndim(c[0]) > 0:  # parametric: one spline per coordinate
        return [_splev(x, (t, ci, k), der, ext) for ci in c]
    if not (0 <= der <= k):
        raise ValueError(f"0<=der={der}<=k={k} must hold")
    if ext not in (0, 1, 2, 3):
        raise ValueError(f"ext = {ext} not in (0, 1, 2, 3) ")
    t = _breakpoints_of(t)
    tv = np.asarray(strip(t))
    n = len(tv) - k - 1
    flat, plain, shape = _flat_points(x)
    outside = (plain < tv[k]) | (plain > tv[n])
    if ext == 2 and np.any(outside):
        raise ValueError("Found x value not in the domain")  # FITPACK's own message
    if ext == 3 and der == 0:
        # The boundary value, constant outside (FITPACK's splder extrapolates derivatives instead).
        flat = np.minimum(np.maximum(flat, t[k]), t[n])
    out = _bspline_evaluate(t, _float(c), k, flat, int(der), True, 0)
    if ext == 1:
        out = np.where(outside, 0.0, out)
    return np.reshape(out, shape)


def _splint(a, b, tck, full_output=0):
    t, c, k = tck
    if isinstance(c, (list, tuple)) and len(c) and np.ndim(c[0]) > 0:  # parametric: one spline per coordinate
        return [_splint(a, b, (t, ci, k), full_output) for ci in c]
    # FITPACK takes the spline as zero outside its base interval: BSpline.integrate without extrapolation.
    value = _bspline_integral(_breakpoints_of(t), _float(c), int(k), a, b, False)
    if full_output:
        # The integrals of the B-splines themselves: they depend on the knots and limits only.
        t = _plain("splint", "the knots tck[0]", t, "with full_output")
        a, b = _plain("splint", "a and b", (a, b), "with full_output")
        return value, _fitpack_impl.splint(a, b, (t, np.asarray(strip_all(c)), k), full_output=1)[1]
    return value


# ----------------------------------------------------------------- FITPACK smoothing splines
def _fitpack_refused(name: str):
    def impl(self, *args, **kwargs):
        raise NonDifferentiableArgumentError(
            f"tapegrad cannot differentiate scipy.interpolate.{name}: FITPACK chooses its knots from "
            "the data in compiled code. For an interpolating spline use make_interp_spline(x, y) or "
            "CubicSpline(x, y); for a smoothing spline, make_smoothing_spline(x, y, lam=...) or "
            "make_lsq_spline(x, y, t) with fixed knots t, all differentiated in y and in the query points."
        )

    return impl


# ----------------------------------------------------------------- registration
_NOTE = "in the data (not the abscissae) and in the query points"


def _once(*functions: Callable) -> list:
    """The distinct functions among ``functions``: in SciPy 1.17, ``PPoly`` and ``BPoly`` share
    ``_PPolyBase``'s ``__init__``, ``__call__`` and ``extend``; in SciPy 1.18 each front end has its own."""
    out: list = []
    for f in functions:
        if all(f is not g for g in out):
            out.append(f)
    return out


for _f in _once(PPoly.__init__, BPoly.__init__):
    defcomposite(intercepted(_f), _ppoly_init, note=_NOTE)
defcomposite(intercepted(CubicHermiteSpline.__init__), _hermite_init, note=_NOTE)
defcomposite(intercepted(PchipInterpolator.__init__), _pchip_init, note=_NOTE)
defcomposite(intercepted(Akima1DInterpolator.__init__), _akima_init, note=_NOTE)
defcomposite(intercepted(CubicSpline.__init__), _cubic_spline_init, note=_NOTE)
for _f in _once(PPoly.__call__, BPoly.__call__):
    defcomposite(intercepted(_f, inspect_self=True), _ppoly_call, note=_NOTE)
defcomposite(intercepted(PPoly.derivative, inspect_self=True), _ppoly_derivative, note=_NOTE)
defcomposite(intercepted(PPoly.antiderivative, inspect_self=True), _ppoly_antiderivative, note=_NOTE)
defcomposite(intercepted(PPoly.integrate, inspect_self=True), _ppoly_integrate, note=_NOTE)
_REFUSED = "refused with a tapegrad error naming the argument: "
for _method, _why in (
    ("roots", "the roots of a traced piecewise polynomial are not differentiated"),
    ("solve", "the solutions of p(x) = y are not differentiated"),
):
    defcomposite(intercepted(getattr(PPoly, _method), inspect_self=True), _ppoly_unsupported(_method, _why),
                 note=_REFUSED + _why)
defcomposite(intercepted(BPoly.integrate, inspect_self=True), _bpoly_integrate,
             note="at traced limits (plain coefficients)")
for _f in _once(PPoly.extend, BPoly.extend):
    defcomposite(
        intercepted(_f, inspect_self=True),
        _ppoly_unsupported("extend", "extending a traced piecewise polynomial in place is not supported"),
        note=_REFUSED + "extending a traced piecewise polynomial in place",
    )

# The arrays' setters (spline.c = ...): properties of PPoly/BPoly/BSpline in SciPy 1.17 and 1.18 alike.
_ARRAYS = ((PPoly, "c"), (PPoly, "x"), (BPoly, "c"), (BPoly, "x"), (BSpline, "c"), (BSpline, "t"))
for _f in _once(*(getattr(inspect.getattr_static(cls, name, None), "fset", None) for cls, name in _ARRAYS)):
    if _f is not None:
        defcomposite(intercepted(_f), _array_setter(_f.__name__), note="stores the traced array where SciPy keeps it")

defcomposite(intercepted(BSpline.__init__), _bspline_init, note=_NOTE)
defcomposite(intercepted(BSpline.__call__, inspect_self=True), _bspline_call, note=_NOTE)
defcomposite(intercepted(BSpline.derivative, inspect_self=True), _bspline_derivative, note=_NOTE)
defcomposite(intercepted(BSpline.antiderivative, inspect_self=True), _bspline_antiderivative, note=_NOTE)
defcomposite(intercepted(BSpline.integrate, inspect_self=True), _bspline_integrate, note=_NOTE)
defcomposite(intercepted(make_interp_spline), _make_interp_spline, note=_NOTE)
defcomposite(intercepted(make_lsq_spline), _make_lsq_spline, note=_NOTE)
defcomposite(intercepted(make_smoothing_spline), _make_smoothing_spline, note="with lam given: " + _NOTE)

defcomposite(intercepted(interp1d.__init__), _interp1d_init, note=_NOTE)
defcomposite(intercepted(interp1d._evaluate, inspect_self=True), _interp1d_evaluate, note=_NOTE)
defcomposite(intercepted(RegularGridInterpolator.__init__), _rgi_init, note=_NOTE)
defcomposite(intercepted(RegularGridInterpolator.__call__, inspect_self=True), _rgi_call, note=_NOTE)
defcomposite(intercepted(interpn), _interpn, note=_NOTE)

defcomposite(intercepted(lagrange), _lagrange, note="in the values w; all len(x) coefficients kept")
defcomposite(intercepted(_fitpack_impl.splev), _splev, note="splev and UnivariateSpline.__call__: " + _NOTE)
defcomposite(intercepted(_fitpack_impl.splint), _splint, note="splint and UnivariateSpline.integral: " + _NOTE)
for _cls in (UnivariateSpline, InterpolatedUnivariateSpline, LSQUnivariateSpline):
    defcomposite(intercepted(_cls.__init__), _fitpack_refused(_cls.__name__),
                 note=_REFUSED + "FITPACK chooses the knots from the data (evaluation at traced points works)")

from . import scipy_rbf  # noqa: E402,F401  (RBFInterpolator: registers its rules on import)
from . import scipy_griddata  # noqa: E402,F401  (griddata: registers its rule on import)
from . import scipy_krogh  # noqa: E402,F401  (KroghInterpolator: registers its rules on import)
