"""Labelled scientific code over tracers: xarray ``DataArray`` and ``Dataset``, unchanged (issue 32).

Each program is written as an xarray user writes it: a field produced by a
small model with parameters ``p`` is labelled (time, lat, lon), then reduced,
grouped, windowed, weighted, interpolated, fitted.  The derivatives in ``p``
(reverse and forward mode, Hessians and Hessian-vector products) are checked
against central differences (:mod:`tests._wrapped_checks`).  A few programs
take the whole field as the variable, so that every element's derivative is
checked, not a projection.

Programs end in a plain tracer (``.data``); the last tests return the
``DataArray`` itself, which is differentiated once wrapped outputs are
(another change): they pass then.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

xr = pytest.importorskip("xarray")
pd = pytest.importorskip("pandas")

import tapegrad as tg  # noqa: E402

from ._wrapped_checks import central_jacobian, check  # noqa: E402

rng = np.random.default_rng(32)
NT, NLAT, NLON = 12, 4, 3
TIME = pd.date_range("2000-01-01", periods=NT, freq="MS")
LAT = np.array([-60.0, -20.0, 20.0, 60.0])
LON = np.array([0.0, 120.0, 240.0])
A, B, C, D = (rng.uniform(0.5, 1.5, (NT, NLAT, NLON)) for _ in range(4))
P0 = np.array([0.3, -0.7, 0.4, 1.2])


def field(p):
    """A smooth model field whose every element depends nonlinearly on every parameter."""
    return A * np.sin(p[0] + B) + p[1] * C + p[3] * np.exp(p[2] * D) + p[0] * p[1] * D


def temperature(p):
    return xr.DataArray(
        field(p), dims=("time", "lat", "lon"), coords={"time": TIME, "lat": LAT, "lon": LON}, name="t"
    )


def data(obj):
    """The tracer a DataArray holds (the programs' outputs)."""
    return obj.data


# ----------------------------------------------------------------------------- programs in p
PROGRAMS = {
    # arithmetic, with broadcasting by dimension name
    "broadcast by name": lambda p: data(
        temperature(p) * xr.DataArray(np.cos(np.deg2rad(LAT)), dims="lat")
        + xr.DataArray(np.array([1.0, 2.0, 3.0]), dims="lon") * temperature(p).isel(time=0)
    ),
    "transpose and align": lambda p: data(temperature(p).transpose("lon", "time", "lat") - temperature(p).mean("time")),
    # reductions over named dimensions
    "mean over time": lambda p: data(temperature(p).mean("time")),
    "std over lat, lon": lambda p: data(temperature(p).std(("lat", "lon"))),
    "var, sum, max": lambda p: data(temperature(p).var("lon") + temperature(p).sum("lat").max("lon")),
    "median": lambda p: data(temperature(p).median("time")),
    "quantile": lambda p: data(temperature(p).quantile(0.3, dim="time")),
    # grouping and resampling
    "seasonal mean": lambda p: data(temperature(p).groupby("time.season").mean()),
    "seasonal anomaly": lambda p: data(
        temperature(p).groupby("time.season") - temperature(p).groupby("time.season").mean()
    ),
    "groupby_bins": lambda p: data(temperature(p).groupby_bins("lat", [-90, 0, 90]).mean()),
    "resample quarterly": lambda p: data(temperature(p).resample(time="QS").mean()),
    # windows
    "rolling mean": lambda p: data(temperature(p).rolling(time=3).mean().fillna(0.0)),
    "rolling centred sum": lambda p: data(temperature(p).rolling(time=3, center=True, min_periods=1).sum()),
    "rolling construct": lambda p: data(temperature(p).rolling(lat=2).construct("w").fillna(0.0) ** 2),
    "coarsen": lambda p: data(temperature(p).coarsen(time=3, lat=2).mean()),
    # weights
    "area-weighted mean": lambda p: data(
        temperature(p).weighted(xr.DataArray(np.cos(np.deg2rad(LAT)), dims="lat")).mean(("lat", "lon"))
    ),
    "weighted std": lambda p: data(temperature(p).weighted(xr.DataArray(LON + 1.0, dims="lon")).std("lon")),
    # masks
    "where, fillna": lambda p: data(temperature(p).where(temperature(p) > 1.0).fillna(-1.0) * temperature(p)),
    "where with other": lambda p: data(xr.where(temperature(p).lat > 0, temperature(p) ** 2, temperature(p))),
    # calculus along named dimensions
    "diff, cumsum": lambda p: data(temperature(p).diff("time").cumsum("lat")),
    "differentiate": lambda p: data(temperature(p).differentiate("lat")),
    "integrate": lambda p: data(temperature(p).integrate("lat")),
    "cumulative_integrate": lambda p: data(temperature(p).cumulative_integrate("lon")),
    # interpolation (SciPy's interpolators underneath)
    "interp linear": lambda p: data(temperature(p).interp(lat=[-40.0, 0.0, 35.0])),
    "interp cubic": lambda p: data(temperature(p).interp(lat=[-40.0, 0.0, 35.0], method="cubic")),
    "interp 2-D": lambda p: data(temperature(p).interp(lat=[-40.0, 10.0], lon=[30.0, 200.0])),
    "interp_like": lambda p: data(
        temperature(p).interp_like(xr.DataArray(np.zeros(2), dims="lat", coords={"lat": [-30.0, 45.0]}))
    ),
    # products
    "xr.dot": lambda p: data(xr.dot(temperature(p), temperature(p) ** 2, dim="lat")),
    "matmul": lambda p: data(temperature(p).isel(time=0) @ temperature(p).isel(time=1).rename(lat="lat2")),
    # fitting
    "polyfit": lambda p: data(temperature(p).polyfit("lat", deg=2).polyfit_coefficients),
    "polyval of polyfit": lambda p: data(
        xr.polyval(temperature(p).lat, temperature(p).polyfit("lat", deg=1).polyfit_coefficients)
    ),
    # apply_ufunc
    "apply_ufunc": lambda p: data(xr.apply_ufunc(np.tanh, temperature(p))),
    "apply_ufunc core dims": lambda p: data(
        xr.apply_ufunc(lambda a: np.linalg.norm(a, axis=-1), temperature(p), input_core_dims=[["lon"]])
    ),
    "apply_ufunc vectorized": lambda p: data(
        xr.apply_ufunc(
            lambda a: np.polyfit(LAT, a, 1), temperature(p), input_core_dims=[["lat"]],
            output_core_dims=[["degree"]], vectorize=True,
        )
    ),
    # combining
    "concat, stack": lambda p: data(
        xr.concat([temperature(p), temperature(p) ** 2], dim="power").stack(cell=("lat", "lon")).sum("time")
    ),
    "stack, unstack": lambda p: data(
        (temperature(p).stack(cell=("lat", "lon")) * 2.0).unstack("cell").transpose("time", "lat", "lon")
    ),
    "merge": lambda p: data(
        xr.merge([temperature(p).rename("t"), (temperature(p) ** 2).rename("t2")]).to_dataarray().sum("variable")
    ),
    # Dataset arithmetic
    "Dataset arithmetic": lambda p: data(
        (lambda ds: (ds * 2.0 + ds.mean("time")) / ds.std())(
            xr.Dataset({"t": temperature(p), "u": np.sin(temperature(p))})
        ).to_dataarray()
    ),
    "Dataset reductions": lambda p: data(
        xr.Dataset({"t": temperature(p), "q": temperature(p) ** 2}).mean(("lat", "lon"))["q"]
    ),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program(name):
    check(PROGRAMS[name], P0)


# ----------------------------------------------------------------------------- the field itself as the variable
SMALL = rng.uniform(0.5, 1.5, (6, 4))
SMALL_COORDS = {"time": np.arange(6.0) ** 1.2, "lat": LAT}


def labelled(x):
    return xr.DataArray(x, dims=("time", "lat"), coords=SMALL_COORDS)


ELEMENTWISE = {
    "rolling mean": lambda x: labelled(x).rolling(time=3, min_periods=1).mean().data,
    "interp on an irregular axis": lambda x: labelled(x).interp(time=[0.3, 1.7, 4.1]).data,
    "differentiate on an irregular axis": lambda x: labelled(x).differentiate("time").data,
    "weighted mean": lambda x: labelled(x).weighted(labelled(SMALL) ** 2).mean("time").data,
    "groupby_bins": lambda x: labelled(x).groupby_bins("time", [0.0, 2.5, 9.0]).std().data,
}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_every_element(name):
    check(ELEMENTWISE[name], SMALL)


# ----------------------------------------------------------------------------- curvefit, interpolators without a rule
CURVE_T = np.linspace(0.0, 3.0, 8)
CURVE_Y = 2.0 * np.exp(-0.7 * CURVE_T) + 0.01 * np.sin(7.0 * CURVE_T)


def curvefit(y):
    da = xr.DataArray(y, dims="t", coords={"t": CURVE_T})
    fit = da.curvefit("t", lambda t, a, k: a * np.exp(-k * t), p0={"a": 1.0, "k": 1.0})
    return fit.curvefit_coefficients.data


def newton_fit(y):
    """The same least-squares fit, converged to rounding (curve_fit stops at its tolerance,
    which central differences of its result would measure instead of the derivative)."""
    theta = np.array([2.0, 0.7])
    for _ in range(30):
        e = np.exp(-theta[1] * CURVE_T)
        r = theta[0] * e - y
        J = np.stack([e, -theta[0] * CURVE_T * e], axis=1)
        H = J.T @ J + np.array([[0.0, np.sum(-r * CURVE_T * e)], [np.sum(-r * CURVE_T * e), np.sum(r * theta[0] * CURVE_T**2 * e)]])
        theta = theta - np.linalg.solve(H, J.T @ r)
    return theta


def test_curvefit():
    expected = central_jacobian(newton_fit, CURVE_Y, eps=1e-5)
    np.testing.assert_allclose(tg.jacobian(curvefit)(CURVE_Y), expected, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(tg.jacfwd(curvefit)(CURVE_Y), expected, rtol=1e-6, atol=1e-8)
    w = np.array([0.3, -1.2])

    def g(y):
        return np.sum(w * curvefit(y))

    hess = tg.hessian(g)(CURVE_Y)
    np.testing.assert_allclose(hess, central_jacobian(lambda y: tg.grad(g)(y), CURVE_Y, eps=1e-4), atol=1e-5)
    assert np.max(np.abs(hess)) > 1e-2


def test_barycentric_and_krogh_interp():
    # SciPy's BarycentricInterpolator converts xarray's Variable with np.asarray: while a
    # tape records that gives the tracer the Variable holds, and SciPy's barycentric
    # formula runs in NumPy on it.  KroghInterpolator has a rule (rules/scipy_krogh.py).
    for method in ("barycentric", "krogh"):
        check(lambda x: labelled(x).interp(lat=[-40.0, 0.0], method=method).data, SMALL)


def test_np_asarray_of_a_data_array_holding_a_tracer_is_the_tracer():
    def f(x):
        da = labelled(x)
        return np.asarray(da) ** 2 + np.array(da.variable) * np.asanyarray(da)[0]

    check(f, SMALL)


# ----------------------------------------------------------------------------- the namespace xarray looks functions up in
def test_namespace_has_what_xarray_calls():
    seen = {}

    def f(x):
        xp = x.__array_namespace__()
        for name in ("pad", "einsum", "gradient", "transpose", "concatenate", "quantile", "lib"):
            seen[name] = getattr(xp, name)
        return np.sum(xp.pad(x, 1, mode="edge") ** 2) + np.sum(xp.einsum("ij,ij->i", x, x) * x[:, 0])

    x = SMALL.copy()
    g = tg.grad(f)(x)
    assert seen["pad"] is np.pad and seen["einsum"] is np.einsum and seen["lib"] is np.lib
    # np.pad(mode="edge") repeats border elements: each element's count of copies
    copies = np.pad(np.arange(x.size).reshape(x.shape), 1, mode="edge")
    counts = np.bincount(copies.ravel(), minlength=x.size).reshape(x.shape)
    rows = np.sum(x * x, axis=1)
    expected = 2 * x * counts
    expected += 2 * x * x[:, :1]
    expected[:, 0] += rows
    np.testing.assert_allclose(g, expected)


def test_namespace_fallback_keeps_the_standard_and_the_tape():
    import tapegrad.array_api as xa

    assert xa.sort is not np.sort and xa.clip is not np.clip  # the standard's adapters win
    assert xa.linalg.norm is np.linalg.norm and xa.linalg.eigvals is np.linalg.eigvals
    assert xa.fft.fft2 is np.fft.fft2
    assert not hasattr(xa.special, "logsumexp")  # SciPy's hasattr test must still say no
    assert not hasattr(xa, "_core") and not hasattr(xa, "__wrapped__")
    assert {"pad", "einsum", "sort"} <= set(dir(xa))
    with pytest.raises(AttributeError, match="tapegrad.array_api"):
        xa.no_such_function
    made = {}

    def f(x):
        xp = x.__array_namespace__()
        made["array"], made["identity"] = xp.array([1.0, 2.0]), xp.identity(2)
        made["plain"] = xa.array([1.0, 2.0])  # the module itself: plain values give ndarrays
        return np.sum(xp.linalg.norm(x, axis=0) * made["array"]) + np.sum(xp.kron(made["identity"], x[:2, :2]))

    x = SMALL[:, :2].copy()
    g = tg.grad(f)(x)
    assert type(made["array"]) is tg.Tracer and type(made["identity"]) is tg.Tracer
    assert type(made["plain"]) is np.ndarray
    expected = x / np.linalg.norm(x, axis=0) * np.array([1.0, 2.0])
    expected[:2, :2] += 2.0  # kron(I2, x[:2, :2]) holds each of those entries twice
    np.testing.assert_allclose(g, expected)


# ----------------------------------------------------------------------------- xarray over Dask over tracers
# DataArray.chunk() of a traced DataArray: a Dask array whose chunks are tracers; .compute()
# runs the traced blocks.  apply_ufunc then wants dask="parallelized" (xarray's rule).
APPLY_UFUNC = {name for name in PROGRAMS if name.startswith("apply_ufunc")}
# xarray fits a chunked array with its NaN-skipping code, which writes each fit into a plain array.
DASK_REFUSED = {"polyfit", "polyval of polyfit"}


def _chunked(p):
    return xr.DataArray.chunk(_eager_temperature(p), {"time": 4})


_eager_temperature = temperature


@pytest.mark.parametrize("name", sorted(set(PROGRAMS) - APPLY_UFUNC))
def test_chunked_with_dask(name, monkeypatch):
    dask = pytest.importorskip("dask")
    monkeypatch.setattr(sys.modules[__name__], "temperature", _chunked)

    def f(p):
        return PROGRAMS[name](p).compute()

    with dask.config.set(scheduler="synchronous"):
        if name in DASK_REFUSED:
            with pytest.raises(tg.GradientDroppedError, match="xarray/core/nputils.py"):
                tg.jacobian(f)(P0)
        else:  # reverse mode against central differences (every mode: the eager tests above)
            expected = central_jacobian(PROGRAMS[name], P0)
            np.testing.assert_allclose(tg.jacobian(f)(P0), expected, rtol=1e-5, atol=1e-6)


def test_chunked_apply_ufunc_and_second_order():
    pytest.importorskip("dask")

    def f(p):
        t = temperature(p).chunk({"time": 4})
        fitted = xr.apply_ufunc(
            lambda a: np.polyfit(LAT, a, 1), t, input_core_dims=[["lat"]], output_core_dims=[["degree"]],
            vectorize=True, dask="parallelized", dask_gufunc_kwargs={"output_sizes": {"degree": 2}},
            output_dtypes=[float],
        )
        weighted = t.weighted(xr.DataArray(np.cos(np.deg2rad(LAT)), dims="lat")).mean(("lat", "lon"))
        return xr.concat([fitted.sum("degree").mean("lon"), weighted], dim="what").compute().data

    check(f, P0)  # the default (threaded) scheduler


# ----------------------------------------------------------------------------- returning the DataArray itself
WRAPPED = {
    "sum": lambda p: temperature(p).sum(),
    "seasonal mean": lambda p: temperature(p).groupby("time.season").mean(),
    "Dataset": lambda p: xr.Dataset({"t": temperature(p).mean("time")}),
}


@pytest.mark.parametrize("name", sorted(WRAPPED))
def test_returning_the_dataarray(name):
    # Derivatives of a wrapped output are those of the array it holds (a Dataset: per variable).
    fun = WRAPPED[name]

    def plain(p):
        out = fun(p)
        return {k: v.data for k, v in out.data_vars.items()} if isinstance(out, xr.Dataset) else out.data

    expected = tg.jacobian(plain)(P0)
    got = tg.jacobian(fun)(P0)
    if isinstance(expected, dict):
        assert sorted(got) == sorted(expected)
        for k in expected:
            np.testing.assert_allclose(np.asarray(got[k]), expected[k], rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-12, atol=1e-12)
    assert np.any(np.asarray(expected if not isinstance(expected, dict) else expected["t"]) != 0)


# ----------------------------------------------------------------------------- xarray over Dask over tracers
@pytest.mark.parametrize("compute", [True, False], ids=["computed", "returned lazy"])
def test_dask_backed_data_array_over_tracers(compute):
    # A DataArray backed by a Dask array whose chunks are tracers: Dask's graph runs the
    # NumPy calls on the tracers when computed.  Returned lazy, it is computed by tapegrad
    # (it once read as a constant: a silent zero gradient).
    dask_array = pytest.importorskip("dask.array")
    weights = xr.DataArray(np.arange(2.0) + 1.0, dims="lat")

    def f(x):
        da = xr.DataArray(dask_array.from_array(x, chunks=(2, 2)), dims=("time", "lat"))
        out = np.sin(da).rolling(time=2).mean().sum("time") + da.where(da > 1.0, 0.0).cumsum("time").sum("time")
        out = out + (da**2).weighted(weights).mean("lat").sum()
        return out.data.compute() if compute else out.data

    check(f, SMALL[:4, :2], order=2 if compute else 1)
