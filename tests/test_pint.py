"""Unit-aware code over tracers: pint ``Quantity`` and pint-xarray, unchanged (issue 32).

A ``Quantity`` wraps any NEP 18 array, so a tracer lives inside it: pint strips
the units, calls NumPy on the tracer and puts the units back.  Tracers defer to
pint for every call that involves a ``Quantity`` (``x * q``, ``np.where(mask, q,
x_q)``), so the tracer never ends up holding a ``Quantity``.

Programs are written as an engineer writes them (conversions, dimensionless
exponentials, linear algebra, statistics, pint-xarray's ``quantify``/``to``/
``dequantify``) and end in a plain tracer (``.magnitude`` in chosen units); their
derivatives at first and second order, in reverse and forward mode, are checked
against central differences (:mod:`tests._wrapped_checks`).  The last tests
return the ``Quantity`` itself, which is differentiated once wrapped outputs are
(another change): they pass then.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pint = pytest.importorskip("pint")

import tapegrad as tg  # noqa: E402

from ._wrapped_checks import check  # noqa: E402

ureg = pint.UnitRegistry()
Q = ureg.Quantity
rng = np.random.default_rng(7)
X0 = rng.uniform(0.5, 1.5, 6)
M0 = rng.uniform(-1.0, 1.0, (3, 3)) + 3.0 * np.eye(3)
B = rng.uniform(-1.0, 1.0, 3)


def magnitude(q, units):
    """The tracer inside ``q`` in ``units`` (the programs' outputs)."""
    return q.to(units).magnitude


PROGRAMS = {
    # conversions
    "m to cm": lambda x: magnitude(Q(x, "m"), "cm"),
    "speed": lambda x: magnitude(Q(x, "km") / Q(x[::-1] ** 2, "h"), "m/s"),
    "base units": lambda x: Q(x, "kWh").to_base_units().magnitude,
    "in-place ito": lambda x: (lambda q: (q.ito("mm"), q.magnitude)[1])(Q(x * x, "m")),
    "offset units": lambda x: magnitude(Q(x * 30.0, "degC"), "kelvin"),
    "mixed arithmetic": lambda x: magnitude(Q(x, "m") * 3.0 + Q(x**2, "cm") - x[0] * Q(1.0, "mm"), "m"),
    "tracer times quantity": lambda x: magnitude(x * Q(2.0, "N") + Q(x, "N") * x, "N"),
    # dimensionless exponentials and logarithms
    "Arrhenius": lambda x: np.exp(-Q(50.0, "kJ/mol") * x / (ureg.molar_gas_constant * Q(300.0 + 10 * x, "K")))
    .to("dimensionless")
    .magnitude,
    "log of a ratio": lambda x: np.log(Q(x, "km") / Q(x[::-1], "m")).to("").magnitude,
    "sin of an angle": lambda x: np.sin(Q(x * 90.0, "degree")).magnitude,
    "power with a unit": lambda x: magnitude(Q(x, "m") ** 3 / Q(x[0], "m"), "m**2"),
    "sqrt": lambda x: magnitude(np.sqrt(Q(x, "m**2")), "cm"),
    # linear algebra
    "norm": lambda x: magnitude(np.linalg.norm(Q(x, "m")), "cm"),
    "matmul": lambda x: magnitude(Q(x.reshape(2, 3), "N") @ Q(x.reshape(3, 2), "m"), "J"),
    "solve": lambda x: magnitude(np.linalg.solve(Q(M0 * x[0], "N/m"), Q(B * x[1:4], "N")), "mm"),
    "dot, cross": lambda x: magnitude(np.dot(Q(x[:3], "m"), np.cross(Q(x[3:], "N"), Q(B, "m"))), "J*m"),
    # statistics
    "mean, std": lambda x: magnitude(np.mean(Q(x, "m")) + np.std(Q(x, "cm")), "m"),
    "var": lambda x: magnitude(np.var(Q(x, "m")), "cm**2"),
    "median, percentile": lambda x: magnitude(np.median(Q(x, "s")) + np.percentile(Q(x, "ms"), 30), "s"),
    "weighted average": lambda x: magnitude(np.average(Q(x, "kg"), weights=np.arange(1.0, 7.0)), "g"),
    "cumsum, diff": lambda x: magnitude(np.cumsum(np.diff(Q(x, "m") ** 2)), "cm**2"),
    "trapezoid": lambda x: magnitude(np.trapezoid(Q(x, "m/s"), Q(np.arange(6.0), "s")), "m"),
    "where": lambda x: magnitude(np.where(x > 1.0, Q(x, "m"), Q(x**2, "cm")), "m"),
    "interp": lambda x: magnitude(np.interp(Q([0.5, 2.5], "s"), Q(np.arange(6.0), "s"), Q(x, "m")), "m"),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program(name):
    check(PROGRAMS[name], X0)


def test_units_stay_checked():
    # A dimension error is pint's own, with or without a tracer.
    with pytest.raises(pint.DimensionalityError):
        tg.grad(lambda x: np.sum((Q(x, "m") + Q(x, "s")).magnitude))(X0)
    with pytest.raises(pint.DimensionalityError):
        tg.grad(lambda x: np.sum(np.exp(Q(x, "m")).magnitude))(X0)


def test_gradient_in_the_output_units_per_input_unit():
    # Beam deflection d = F L^3 / (3 E I): dd/dL = F L^2 / (E I), here in mm per m.
    F, E, I = Q(2.0, "kN"), Q(200.0, "GPa"), Q(8.0e6, "mm**4")

    def deflection_mm(length_m):
        L = Q(length_m, "m")
        return (F * L**3 / (3 * E * I)).to("mm").magnitude

    L0 = 2.5
    g = tg.grad(deflection_mm)(L0) * ureg("mm/m")
    expected = (F * Q(L0, "m") ** 2 / (E * I)).to("mm/m")
    assert g.units == expected.units
    np.testing.assert_allclose(g.magnitude, expected.magnitude, rtol=1e-12)


# ----------------------------------------------------------------------------- pint-xarray
xr = pytest.importorskip("xarray")
pytest.importorskip("pint_xarray")

TIME = np.arange(6.0)


def height(x):
    return xr.DataArray(x, dims="t", coords={"t": TIME})


XR_PROGRAMS = {
    "quantify, to, magnitude": lambda x: height(x).pint.quantify("m").pint.to("cm").pint.magnitude,
    "round trip": lambda x: height(x).pint.quantify("m").pint.to("mm").pint.dequantify().data,
    "reduction with units": lambda x: (height(x).pint.quantify("m") ** 2).mean("t").pint.to("cm**2").pint.magnitude,
    "speed": lambda x: (height(x).pint.quantify("m") / height(x[::-1] + 1.0).pint.quantify("s"))
    .pint.to("km/h")
    .pint.magnitude,
    "differentiate": lambda x: height(x**2)
    .pint.quantify("m")
    .assign_coords(t=("t", TIME, {"units": "s"}))
    .pint.quantify()
    .differentiate("t")
    .pint.to("cm/s")
    .pint.magnitude,
    "rolling with units": lambda x: height(x).pint.quantify("m").rolling(t=2).mean().fillna(0).pint.to("cm").pint.magnitude,
    "pint interp": lambda x: height(x).pint.quantify("m").pint.interp(t=[0.5, 3.2]).pint.to("cm").pint.magnitude,
    "sum of .data": lambda x: height(x).pint.quantify("m").pint.to("cm").sum().data.magnitude,
}


@pytest.mark.parametrize("name", sorted(XR_PROGRAMS))
def test_pint_xarray(name):
    check(XR_PROGRAMS[name], X0)


# ----------------------------------------------------------------------------- returning the Quantity itself
WRAPPED = {
    "Quantity": lambda x: np.sum(Q(x, "m") ** 2).to("cm**2"),
    "Quantity array": lambda x: (Q(x, "km") / Q(2.0, "h")).to("m/s"),
    "pint-xarray DataArray": lambda x: (height(x).pint.quantify("m") ** 2).pint.to("cm**2"),
}


@pytest.mark.parametrize("name", sorted(WRAPPED))
def test_returning_the_quantity(name):
    # The derivative of a Quantity output is that of its magnitude in the output's own units.
    fun = WRAPPED[name]

    def plain(x):
        out = fun(x)
        return out.pint.magnitude if isinstance(out, xr.DataArray) else out.magnitude

    expected = np.asarray(tg.jacobian(plain)(X0))
    got = np.asarray(tg.jacobian(fun)(X0))
    assert np.any(expected != 0)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_np_asarray_of_a_quantity_holding_a_tracer_is_its_magnitude():
    # np.asarray(q) gives the magnitude (pint warns that the units are stripped); while a
    # tape records, the tracer the Quantity holds.
    def f(x):
        q = ureg.Quantity(x, "m").to("cm")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.asarray(q) * np.sin(x)

    check(f, X0)
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(f(x)))(X0), 100 * (np.sin(X0) + X0 * np.cos(X0)))
