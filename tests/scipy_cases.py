"""A table of public SciPy functions differentiated by tapegrad, in either SciPy mode.

Each :class:`Case` is one SciPy call written as ``fun(*args)``: every argument
in ``args`` is a float64 array and is differentiated (first and second order,
against central finite differences, with :func:`tapegrad.testing.check_grads`).
Everything else the call needs is a Python scalar or built from ``args`` inside
``fun``, so that in SciPy's array-API mode (``SCIPY_ARRAY_API=1``) no plain
ndarray meets a tracer in ``array_namespace`` (SciPy refuses mixed namespaces,
as it does for JAX or PyTorch arrays).

:func:`run_case` classifies each case:

``pass``      first and second derivatives match finite differences;
``pass1``     first order matches, second order raises a tapegrad error;
``clear``     a tapegrad error (GradientDroppedError, UnsupportedFunctionError,
              NonDifferentiableArgumentError) naming what dropped the gradient;
``wrong``     a derivative differs from finite differences (must never happen);
``other``     any other exception (a bug: the harness or tapegrad must explain it).

``python -m tests.scipy_cases`` prints the per-module table for the mode the
process runs in (``SCIPY_ARRAY_API=1 python -m tests.scipy_cases`` for the
array-API mode; ``-v`` lists what does not pass); ``--json`` prints every case's
status and ``--sklearn`` adds the scikit-learn cases (array-API mode only).  The
test of the array-API mode runs this in a subprocess with ``SCIPY_ARRAY_API=1``,
which SciPy reads once, at import.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Tuple

import numpy as np

import scipy.fft
import scipy.integrate
import scipy.linalg
import scipy.ndimage
import scipy.optimize
import scipy.signal
import scipy.special
import scipy.stats
from scipy.interpolate import CubicSpline, PchipInterpolator, RegularGridInterpolator, interp1d, make_interp_spline
from scipy.spatial.transform import RigidTransform, Rotation

import tapegrad as tg
from tapegrad.testing import check_grads

MODULES = (
    "special", "stats", "fft", "signal", "integrate", "ndimage", "optimize", "spatial.transform", "linalg",
    "interpolate",
)


@dataclass
class Case:
    """One SciPy call ``fun(*args)``; every argument is differentiated."""

    module: str
    name: str
    fun: Callable[..., Any]
    args: Tuple[np.ndarray, ...]
    tol: dict = field(default_factory=dict)


_rng = np.random.default_rng(20240611)


def _u(*shape, lo=-1.0, hi=1.0):
    return _rng.uniform(lo, hi, shape)


def _pos(*shape, lo=0.5, hi=2.0):
    return _rng.uniform(lo, hi, shape)


def _prob(n):
    p = _rng.uniform(0.2, 1.0, n)
    return p / p.sum()


sp, st, sg, si, nd = scipy.special, scipy.stats, scipy.signal, scipy.integrate, scipy.ndimage


def _xp(x):
    """The namespace of ``x`` (tapegrad's for tracers, NumPy's otherwise)."""
    return x.__array_namespace__()


def _spd(a):
    """A symmetric positive definite matrix built from ``a`` (so its derivative is exercised)."""
    xp = _xp(a)
    return a @ xp.matrix_transpose(a) + 3.0 * xp.eye(a.shape[-1])


def _dist_call(name: str, method: str) -> Callable[..., Any]:
    """``scipy.stats.<name>.<method>(x, *params)``, looked up at call time."""

    def call(x: Any, *params: Any) -> Any:
        return getattr(getattr(st, name), method)(x, *params)

    return call


def _knots(y):
    """Interpolation knots as an array of ``y``'s namespace (a constant tracer inside array-API code)."""
    return _xp(y).asarray([0.0, 1.0, 2.5, 3.0, 4.5])


CASES = [
    # ------------------------------------------------------------------ special
    Case("special", "erf", sp.erf, (_u(5),)),
    Case("special", "erfc", sp.erfc, (_u(5),)),
    Case("special", "erfinv", sp.erfinv, (_u(5, lo=-0.8, hi=0.8),)),
    Case("special", "expit", sp.expit, (_u(5, lo=-3, hi=3),)),
    Case("special", "logit", sp.logit, (_u(5, lo=0.1, hi=0.9),)),
    Case("special", "gammaln", sp.gammaln, (_pos(5, hi=4.0),)),
    Case("special", "psi", sp.psi, (_pos(5, hi=4.0),)),
    Case("special", "ndtr", sp.ndtr, (_u(5, lo=-2, hi=2),)),
    Case("special", "log_ndtr", sp.log_ndtr, (_u(5, lo=-2, hi=2),)),
    Case("special", "ndtri", sp.ndtri, (_u(5, lo=0.1, hi=0.9),)),
    Case("special", "xlogy", sp.xlogy, (_pos(5), _pos(5))),
    Case("special", "xlog1py", sp.xlog1py, (_pos(5), _pos(5))),
    Case("special", "entr", sp.entr, (_pos(5, lo=0.1, hi=0.9),)),
    Case("special", "rel_entr", sp.rel_entr, (_pos(5), _pos(5))),
    Case("special", "i0e", sp.i0e, (_pos(5),)),
    Case("special", "i1", sp.i1, (_pos(5),)),
    Case("special", "logsumexp", lambda x: sp.logsumexp(x, axis=-1), (_u(3, 4),)),
    Case("special", "logsumexp(b=)", lambda x, b: sp.logsumexp(x, b=b), (_u(4), _pos(4))),
    Case("special", "softmax", lambda x: sp.softmax(x, axis=0), (_u(3, 4),)),
    Case("special", "log_softmax", lambda x: sp.log_softmax(x, axis=-1), (_u(3, 4),)),
    Case("special", "gammainc", lambda x: sp.gammainc(2.5, x), (_pos(4),)),
    Case("special", "multigammaln", lambda x: sp.multigammaln(x, 3), (_pos(4, lo=2.5, hi=4),)),
    Case("special", "zeta(x, q)", lambda q: sp.zeta(3.0, q), (_pos(4),)),
    Case("special", "polygamma", lambda x: sp.polygamma(1, x), (_pos(4),)),
    Case("special", "i0", sp.i0, (_pos(5),)),
    Case("special", "i1e", sp.i1e, (_pos(5),)),
    Case("special", "erfcx", sp.erfcx, (_u(5),)),
    Case("special", "log_expit", sp.log_expit, (_u(5),)),
    Case("special", "softplus", sp.softplus, (_u(5),)),
    Case("special", "kl_div", sp.kl_div, (_pos(5), _pos(5))),
    # ------------------------------------------------------------------ stats
    Case("stats", "entropy", st.entropy, (_prob(5),)),
    Case("stats", "entropy(qk)", st.entropy, (_prob(5), _prob(5))),
    Case("stats", "gmean", st.gmean, (_pos(6),)),
    Case("stats", "hmean", st.hmean, (_pos(6),)),
    Case("stats", "pmean", lambda a: st.pmean(a, 2.5), (_pos(6),)),
    Case("stats", "tmean", lambda a: st.tmean(a, (-0.9, 0.9)), (_u(8, lo=-0.5, hi=0.5),)),
    Case("stats", "tvar", st.tvar, (_u(8),)),
    Case("stats", "tstd", st.tstd, (_u(8),)),
    Case("stats", "moment", lambda a: st.moment(a, order=3, axis=0), (_u(7, 2),)),
    Case("stats", "skew", st.skew, (_u(7),)),
    Case("stats", "kurtosis", st.kurtosis, (_u(7),)),
    Case("stats", "sem", st.sem, (_u(7),)),
    Case("stats", "zscore", st.zscore, (_u(6),)),
    Case("stats", "gstd", st.gstd, (_pos(6),)),
    Case("stats", "variation", st.variation, (_pos(6),)),
    Case("stats", "median_abs_deviation", st.median_abs_deviation, (_u(7),)),
    Case("stats", "kstat", lambda a: st.kstat(a, 3), (_u(8),)),
    Case("stats", "kstatvar", st.kstatvar, (_u(8),)),
    Case("stats", "circmean", st.circmean, (_u(6, lo=0.2, hi=1.5),)),
    Case("stats", "circvar", st.circvar, (_u(6, lo=0.2, hi=1.5),)),
    Case("stats", "boxcox_llf", st.boxcox_llf, (np.array(0.7), _pos(6))),
    Case("stats", "yeojohnson_llf", st.yeojohnson_llf, (np.array(0.7), _pos(6))),
    Case("stats", "chisquare", lambda f: st.chisquare(f).statistic, (_pos(5, lo=3, hi=9),)),
    Case("stats", "describe", lambda a: st.describe(a).variance, (_u(7),)),
    Case("stats", "quantile", lambda x: st.quantile(x, 0.3), (_u(9),)),
    Case("stats", "pearsonr", lambda x, y: st.pearsonr(x, y).statistic, (_u(8), _u(8))),
    Case("stats", "tsem", st.tsem, (_u(8),)),
    Case("stats", "tmax", st.tmax, (_u(8),)),
    Case("stats", "gzscore", st.gzscore, (_pos(6),)),
    Case("stats", "zmap", st.zmap, (_u(3), _u(6))),
    Case("stats", "iqr", st.iqr, (_u(9),)),
    Case("stats", "trim_mean", lambda a: st.trim_mean(a, 0.1), (_u(10),)),
    Case("stats", "jarque_bera", lambda a: st.jarque_bera(a).statistic, (_u(10),)),
    Case("stats", "skewtest", lambda a: st.skewtest(a).statistic, (_u(10),)),
    Case("stats", "kurtosistest", lambda a: st.kurtosistest(a).statistic, (_u(25),)),
    Case("stats", "circstd", st.circstd, (_u(6, lo=0.2, hi=1.5),)),
    Case("stats", "differential_entropy", st.differential_entropy, (_u(12),)),
    Case("stats", "power_divergence", lambda f, e: st.power_divergence(f, e * f.sum() / e.sum(), lambda_="cressie-read").statistic, (_pos(5, lo=3, hi=9), _pos(5, lo=3, hi=9))),
    Case("stats", "directional_stats", lambda v: st.directional_stats(v).mean_direction, (_u(5, 3) + np.array([0, 0, 2.0]),)),
    Case("stats", "bartlett", lambda a, b: st.bartlett(a, b).statistic, (_u(6), _u(7))),
    Case("stats", "mood", lambda a, b: st.mood(a, b).statistic, (_u(6), _u(7))),
    Case("stats", "hmean(weights=)", lambda a, w: st.hmean(a, weights=w), (_pos(6), _pos(6))),
    Case("stats", "kstat(n=4)", lambda a: st.kstat(a, 4), (_u(9),)),
    Case("stats", "sigmaclip", lambda a: st.sigmaclip(a).clipped, (_u(9),)),
    Case("stats", "expectile", lambda a: st.expectile(a, 0.3), (_u(9),)),
    # ------------------------------------------------------------------ fft
    Case("fft", "fft", lambda x: scipy.fft.fft(x).real, (_u(8),)),
    Case("fft", "ifft", lambda x: scipy.fft.ifft(x, norm="ortho").imag, (_u(8),)),
    Case("fft", "rfft", lambda x: scipy.fft.rfft(x).imag, (_u(8),)),
    Case("fft", "irfft", lambda x: scipy.fft.irfft(x, n=8), (_u(5),)),
    Case("fft", "hfft", scipy.fft.hfft, (_u(5),)),
    Case("fft", "fftn", lambda x: scipy.fft.fftn(x).real, (_u(3, 4),)),
    Case("fft", "rfft2", lambda x: scipy.fft.rfft2(x).real, (_u(4, 4),)),
    Case("fft", "fftshift", scipy.fft.fftshift, (_u(7),)),
    Case("fft", "dct", scipy.fft.dct, (_u(8),)),
    Case("fft", "ifftn", lambda x: scipy.fft.ifftn(x).real, (_u(3, 4),)),
    Case("fft", "irfftn", lambda x: scipy.fft.irfftn(x, s=(3, 6)), (_u(3, 4),)),
    Case("fft", "ihfft", lambda x: scipy.fft.ihfft(x).imag, (_u(8),)),
    Case("fft", "fft2", lambda x: scipy.fft.fft2(x).imag, (_u(3, 4),)),
    Case("fft", "hfftn", scipy.fft.hfftn, (_u(3, 4),)),
    Case("fft", "fht", lambda x: scipy.fft.fht(x, dln=0.1, mu=0.5), (_u(8),)),
    Case("fft", "ifftshift", scipy.fft.ifftshift, (_u(7),)),
    # ------------------------------------------------------------------ signal
    Case("signal", "freqz_zpk", lambda z, p: sg.freqz_zpk(z, p, 1.0, worN=8)[1].real, (_u(2) * 0.5, _u(2) * 0.5)),
    Case("signal", "envelope", lambda x: sg.envelope(x, residual=None), (_u(16),), {"rtol": 1e-4, "atol": 1e-5}),
    Case("signal", "gauss_spline", lambda x: sg.gauss_spline(x, 3), (_u(6),)),
    Case("signal", "filtfilt", lambda b, x: sg.filtfilt(b, b * 0 + np.array([1.0, -0.3]), x), (_u(2), _u(20))),
    Case("signal", "lfilter", lambda b, x: sg.lfilter(b, _xp(b).asarray([1.0, -0.3]), x), (_u(3), _u(10))),
    Case("signal", "convolve", sg.convolve, (_u(6), _u(3))),
    Case("signal", "convolve(method='direct')", lambda a, v: sg.convolve(a, v, method="direct"), (_u(6), _u(3))),
    Case("signal", "correlate(method='direct')", lambda a, v: sg.correlate(a, v, method="direct"), (_u(6), _u(3))),
    Case("signal", "fftconvolve", sg.fftconvolve, (_u(6), _u(3))),
    Case("signal", "savgol_filter", lambda x: sg.savgol_filter(x, 5, 2), (_u(12),)),
    Case("signal", "detrend", sg.detrend, (_u(9),)),
    Case("signal", "hilbert", lambda x: sg.hilbert(x).imag, (_u(8),)),
    Case("signal", "sosfilt_zi", sg.sosfilt_zi, (np.array([[0.2, 0.1, 0.05, 1.0, -0.3, 0.1]]),)),
    Case("signal", "freqz_zpk(k=)", lambda z, k: sg.freqz_zpk(z, _xp(z).asarray([0.5, -0.2]), k, worN=6)[1].imag, (_u(2) * 0.5, np.array(1.3))),
    # ------------------------------------------------------------------ integrate
    Case("integrate", "trapezoid", si.trapezoid, (_u(7),)),
    Case("integrate", "trapezoid(x=)", lambda y, x: si.trapezoid(y, x=x), (_u(5), np.cumsum(_pos(5)))),
    Case("integrate", "cumulative_trapezoid", lambda y: si.cumulative_trapezoid(y, dx=0.5), (_u(6),)),
    Case("integrate", "cumulative_simpson", si.cumulative_simpson, (_u(7),)),
    Case("integrate", "simpson", si.simpson, (_u(7),)),
    Case("integrate", "romb", lambda y: si.romb(y, dx=0.25), (_u(9),)),
    Case("integrate", "cumulative_trapezoid(initial=0)", lambda y: si.cumulative_trapezoid(y, initial=0), (_u(6),)),
    Case("integrate", "trapezoid(axis=0)", lambda y: si.trapezoid(y, dx=0.3, axis=0), (_u(4, 3),)),
    # ------------------------------------------------------------------ ndimage
    Case("ndimage", "gaussian_filter", lambda x: nd.gaussian_filter(x, 1.0), (_u(5, 5),)),
    Case("ndimage", "uniform_filter1d", lambda x: nd.uniform_filter1d(x, 3), (_u(8),)),
    Case("ndimage", "shift", lambda x: nd.shift(x, 0.5, order=1), (_u(8),)),
    # ------------------------------------------------------------------ optimize
    Case("optimize", "rosen", scipy.optimize.rosen, (_u(5),)),
    Case("optimize", "rosen_der", scipy.optimize.rosen_der, (_u(5),)),
    Case("optimize", "rosen_hess", scipy.optimize.rosen_hess, (_u(4),)),
    Case("optimize", "rosen_hess_prod", scipy.optimize.rosen_hess_prod, (_u(4), _u(4))),
    # ------------------------------------------------------------------ spatial.transform
    Case("spatial.transform", "Rotation.from_rotvec.as_matrix", lambda v: Rotation.from_rotvec(v).as_matrix(), (_u(3),)),
    Case("spatial.transform", "Rotation.from_quat.as_rotvec", lambda q: Rotation.from_quat(q).as_rotvec(), (_u(4) + np.array([0, 0, 0, 2.0]),)),
    Case("spatial.transform", "Rotation.from_euler.as_quat", lambda a: Rotation.from_euler("xyz", a).as_quat(), (_u(3),)),
    Case("spatial.transform", "Rotation.apply", lambda v, p: Rotation.from_rotvec(v).apply(p), (_u(3), _u(2, 3))),
    Case("spatial.transform", "Rotation.magnitude", lambda v: Rotation.from_rotvec(v).magnitude(), (_u(2, 3),)),
    Case("spatial.transform", "Rotation.from_matrix.as_rotvec", lambda v: Rotation.from_matrix(Rotation.from_rotvec(v).as_matrix()).as_rotvec(), (_u(3),)),
    Case("spatial.transform", "Rotation.__mul__.as_euler", lambda a, b: (Rotation.from_rotvec(a) * Rotation.from_rotvec(b)).as_euler("zyx"), (_u(3), _u(3))),
    Case("spatial.transform", "RigidTransform.from_exp_coords.as_matrix", lambda c: RigidTransform.from_exp_coords(c).as_matrix(), (_u(6),)),
    # ------------------------------------------------------------------ linalg
    Case("linalg", "block_diag", scipy.linalg.block_diag, (_u(2, 2), _u(3, 1))),
    Case("linalg", "orthogonal_procrustes", lambda a, b: scipy.linalg.orthogonal_procrustes(a, b)[0], (_u(4, 3), _u(4, 3))),
    Case("linalg", "det", lambda a: scipy.linalg.det(_spd(a)), (_u(3, 3),)),
    Case("linalg", "solve", lambda a, b: scipy.linalg.solve(_spd(a), b), (_u(3, 3), _u(3))),
    Case("linalg", "expm", scipy.linalg.expm, (_u(3, 3) * 0.5,)),
    Case("linalg", "fiedler", scipy.linalg.fiedler, (_u(4),)),
    # ------------------------------------------------------------------ interpolate
    Case("interpolate", "CubicSpline", lambda y: CubicSpline(_knots(y), y)(1.7), (_u(5),)),
    Case("interpolate", "make_interp_spline", lambda y: make_interp_spline(_knots(y), y, k=3)(1.7), (_u(5),)),
    # ------------------------------------------------------------------ through SciPy's door
    # (tapegrad.interception: rules keyed by SciPy's own functions and methods)
    *[
        Case("stats", f"{name}.{method}", _dist_call(name, method), args, tol)
        for name, method, args, tol in (
            ("norm", "logpdf", (_u(5), np.array(0.3), np.array(1.4)), {}),
            ("norm", "cdf", (_u(5), np.array(-0.2), np.array(0.8)), {}),
            ("norm", "ppf", (_u(4, lo=0.1, hi=0.9), np.array(0.5), np.array(2.0)), {}),
            ("t", "logpdf", (_u(5), np.array(4.5)), {}),
            ("gamma", "logpdf", (_pos(5), np.array(2.5)), {}),
            ("gamma", "cdf", (_pos(5), np.array(1.8)), {}),
            ("beta", "logpdf", (_u(5, lo=0.1, hi=0.9), np.array(2.0), np.array(3.0)), {}),
            ("lognorm", "pdf", (_pos(5), np.array(0.7)), {}),
            ("expon", "logsf", (_pos(5), np.array(0.1), np.array(1.5)), {}),
            ("weibull_min", "logpdf", (_pos(5), np.array(1.7)), {}),
            ("cauchy", "isf", (_u(4, lo=0.1, hi=0.9),), {}),
            ("laplace", "logcdf", (_u(5),), {}),
            ("logistic", "logpdf", (_u(5), np.array(0.2), np.array(1.3)), {}),
        )
    ],
    Case("stats", "t.sf(x)", lambda x: st.t.sf(x, 3.5), (_u(5),)),
    Case("stats", "poisson.logpmf(mu)", lambda mu: st.poisson.logpmf(np.array([0.0, 1.0, 3.0, 6.0]), mu), (np.array(2.7),)),
    Case("stats", "binom.pmf(p)", lambda p: st.binom.pmf(np.array([0.0, 2.0, 5.0]), 6, p), (np.array(0.35),)),
    Case("stats", "nbinom.logpmf(p)", lambda p: st.nbinom.logpmf(np.array([0.0, 2.0, 5.0]), 3.5, p), (np.array(0.4),)),
    Case("stats", "norm(loc, scale).logpdf (frozen)", lambda x, m, s: st.norm(m, s).logpdf(x), (_u(5), np.array(0.1), np.array(1.2))),
    Case("stats", "gamma(a, scale=s).logpdf (frozen)", lambda x, a, s: st.gamma(a, scale=s).logpdf(x), (_pos(5), np.array(2.2), np.array(1.3))),
    Case("stats", "multivariate_normal.logpdf", lambda x, m, a: st.multivariate_normal.logpdf(x, m, _spd(a)), (_u(4, 3), _u(3), _u(3, 3))),
    Case("stats", "multivariate_normal(mean, cov).pdf", lambda x, m: st.multivariate_normal(m, np.eye(3) * 1.5).pdf(x), (_u(2, 3), _u(3))),
    Case("stats", "dirichlet.logpdf", lambda a: st.dirichlet.logpdf(np.array([0.2, 0.3, 0.5]), a), (_pos(3),)),
    Case("stats", "multivariate_t.logpdf", lambda x, m: st.multivariate_t.logpdf(x, m, np.eye(2), df=4.0), (_u(3, 2), _u(2))),
    Case("ndimage", "gaussian_filter(mode='constant')", lambda x: nd.gaussian_filter(x, 0.8, mode="constant"), (_u(5, 6),)),
    Case("ndimage", "correlate1d(weights)", lambda x, w: nd.correlate1d(x, w, mode="wrap"), (_u(7), _u(3))),
    Case("ndimage", "convolve(mirror)", lambda x, w: nd.convolve(x, w, mode="mirror"), (_u(4, 5), _u(2, 2))),
    Case("ndimage", "sobel", lambda x: nd.sobel(x, axis=0), (_u(5, 5),)),
    Case("ndimage", "laplace", nd.laplace, (_u(5, 5),)),
    Case("ndimage", "zoom", lambda x: nd.zoom(x, 1.5, order=3), (_u(4, 4),)),
    Case("ndimage", "map_coordinates", lambda x, c: nd.map_coordinates(x, c, order=3), (_u(6, 6), _pos(2, 4, lo=1.0, hi=4.0))),
    Case("signal", "sosfilt", lambda x: sg.sosfilt(np.array([[0.2, 0.1, 0.05, 1.0, -0.3, 0.1]]), x), (_u(12),)),
    Case("signal", "lfilter(a)", lambda a, x: sg.lfilter(np.array([1.0, 0.5]), a, x), (np.array([1.0, -0.4, 0.1]), _u(10))),
    Case("signal", "welch", lambda x: sg.welch(x, nperseg=8)[1], (_u(32),), {"rtol": 1e-5, "atol": 1e-7}),
    Case("signal", "resample", lambda x: sg.resample(x, 12), (_u(8),)),
    Case("fft", "dct(type=2, norm='ortho')", lambda x: scipy.fft.dct(x, norm="ortho"), (_u(8),)),
    Case("fft", "idstn", lambda x: scipy.fft.idstn(x, type=3), (_u(4, 5),)),
    Case("fft", "rfft (scipy)", lambda x: scipy.fft.rfft(x).real, (_u(8),)),
    Case("interpolate", "interp1d(kind='cubic')", lambda y, q: interp1d(np.arange(6.0), y, kind="cubic")(q), (_u(6), _pos(3, lo=0.5, hi=4.5))),
    Case("interpolate", "RegularGridInterpolator", lambda v, p: RegularGridInterpolator((np.arange(4.0), np.arange(5.0)), v)(p), (_u(4, 5), _pos(3, 2, lo=0.2, hi=2.8))),
    Case("interpolate", "PchipInterpolator", lambda y: PchipInterpolator(np.arange(6.0), y)(np.array([0.5, 2.2, 4.9])), (np.cumsum(_pos(6)),)),
    Case("interpolate", "CubicSpline(query points)", lambda q: CubicSpline(np.arange(6.0), np.sin(np.arange(6.0)))(q), (_pos(4, lo=0.2, hi=4.8),)),
    Case("linalg", "expm_frechet", lambda a, e: scipy.linalg.expm_frechet(a, e, compute_expm=False), (_u(3, 3) * 0.5, _u(3, 3))),
    Case("linalg", "sqrtm", lambda a: scipy.linalg.sqrtm(_spd(a)), (_u(3, 3),), {"rtol": 1e-5, "atol": 1e-7}),
    Case("linalg", "logm", lambda a: scipy.linalg.logm(_spd(a)), (_u(3, 3),), {"rtol": 1e-5, "atol": 1e-7}),
    Case("linalg", "cho_solve(cho_factor)", lambda a, b: scipy.linalg.cho_solve(scipy.linalg.cho_factor(_spd(a)), b), (_u(3, 3), _u(3))),
    Case("linalg", "lu_solve(lu_factor)", lambda a, b: scipy.linalg.lu_solve(scipy.linalg.lu_factor(_spd(a)), b), (_u(3, 3), _u(3))),
    Case("linalg", "solve_triangular", lambda a, b: scipy.linalg.solve_triangular(_spd(a), b, lower=True), (_u(3, 3), _u(3))),
    Case("linalg", "eigh", lambda a: scipy.linalg.eigh(_spd(a))[0], (_u(3, 3),)),
    Case("linalg", "solve_sylvester", lambda a, q: scipy.linalg.solve_sylvester(_spd(a), _spd(a), q), (_u(3, 3), _u(3, 3))),
    Case("linalg", "solve_continuous_lyapunov", lambda a, q: scipy.linalg.solve_continuous_lyapunov(-_spd(a), q), (_u(3, 3), _u(3, 3))),
    Case("spatial.transform", "Rotation.from_rotvec.apply (door)", lambda v, p: Rotation.from_rotvec(v).apply(p), (_u(3), _u(2, 3))),
    Case("integrate", "solve_ivp (closure)", lambda k: scipy.integrate.solve_ivp(lambda t, y: -k * y, (0.0, 1.0), np.array([1.0, 2.0]), rtol=1e-10, atol=1e-12).y[:, -1], (_pos(2),), {"rtol": 1e-5, "atol": 1e-7}),
    Case("integrate", "odeint", lambda y0: scipy.integrate.odeint(lambda y, t: -0.5 * y, y0, np.array([0.0, 1.0]), rtol=1e-10, atol=1e-12)[-1], (_pos(2),), {"rtol": 1e-5, "atol": 1e-7}),
    Case("integrate", "quad", lambda a: scipy.integrate.quad(lambda t: np.exp(-a * t * t), 0.0, 1.0)[0], (_pos(1).reshape(()),), {"rtol": 1e-6, "atol": 1e-8}),
    Case("optimize", "brentq", lambda p: scipy.optimize.brentq(lambda x: x**3 + p * x - 1.0, 0.0, 2.0, xtol=1e-14), (_pos(1).reshape(()),), {"rtol": 1e-5, "atol": 1e-7}),
    Case("optimize", "minimize", lambda p: scipy.optimize.minimize(lambda x: np.sum((x - p) ** 2) + np.sum(x**4), np.zeros(2), method="BFGS", options={"gtol": 1e-12}).x, (_u(2),), {"rtol": 1e-4, "atol": 1e-6}),
    Case("optimize", "curve_fit", lambda y: scipy.optimize.curve_fit(lambda t, a, b: a * np.exp(-b * t), np.linspace(0, 2, 6), y, p0=[1.0, 1.0])[0], (np.exp(-0.7 * np.linspace(0, 2, 6)) * 1.3 + _u(6) * 0.01,), {"rtol": 1e-4, "atol": 1e-6}),
]


def sklearn_cases() -> list:
    """scikit-learn metrics with ``array_api_dispatch=True`` (needs SciPy's array-API mode).

    scikit-learn returns averaged metrics as Python floats (``float(...)``, which a
    tracer refuses); ``multioutput="raw_values"`` keeps them arrays.
    """
    import sklearn
    import sklearn.metrics as skm

    sklearn.set_config(array_api_dispatch=True)
    raw = {"multioutput": "raw_values"}
    return [
        Case("sklearn", "mean_squared_error", lambda t, p: skm.mean_squared_error(t, p, **raw), (_u(6, 2), _u(6, 2))),
        Case("sklearn", "r2_score", lambda t, p: skm.r2_score(t, p, **raw), (_u(6, 2), _u(6, 2))),
        Case("sklearn", "mean_absolute_error", lambda t, p: skm.mean_absolute_error(t, p, **raw), (_u(6, 2), _u(6, 2))),
        Case("sklearn", "explained_variance_score", lambda t, p: skm.explained_variance_score(t, p, **raw), (_u(6, 2), _u(6, 2))),
        Case("sklearn", "mean_pinball_loss", lambda t, p: skm.mean_pinball_loss(t, p, **raw), (_u(6, 2), _u(6, 2))),
        Case("sklearn", "pairwise.euclidean_distances", skm.pairwise.euclidean_distances, (_u(3, 2), _u(4, 2))),
        Case("sklearn", "pairwise.rbf_kernel", lambda a, b: skm.pairwise.rbf_kernel(a, b, gamma=0.5), (_u(3, 2), _u(4, 2))),
    ]


def run_case(case: Case) -> Tuple[str, str]:
    """Check one case: ``(status, detail)`` with the statuses of the module docstring."""
    tol = {"rtol": 1e-5, "atol": 1e-6, **case.tol}
    try:
        check_grads(case.fun, case.args, order=1, **tol)
    except tg.TapegradError as exc:
        return "clear", f"{type(exc).__name__}: {exc}"
    except AssertionError as exc:
        return "wrong", str(exc)
    except Exception as exc:  # noqa: BLE001  (recorded, and a test fails on it)
        return "other", f"{type(exc).__name__}: {exc}"
    try:
        check_grads(case.fun, case.args, order=2, **tol)
    except tg.TapegradError as exc:
        return "pass1", f"{type(exc).__name__}: {exc}"
    except AssertionError as exc:
        return "wrong", str(exc)
    except Exception as exc:  # noqa: BLE001
        return "other", f"{type(exc).__name__}: {exc}"
    return "pass", ""


def array_api_mode() -> bool:
    """Whether SciPy in this process runs in array-API mode (fixed when SciPy is imported)."""
    from scipy._lib._array_api import SCIPY_ARRAY_API

    return bool(SCIPY_ARRAY_API)


def run_all(cases: Optional[list] = None) -> dict:
    """``{case name: [module, status, detail]}`` for every case, in this process's SciPy mode."""
    return {f"{c.module}:{c.name}": [c.module, *run_case(c)] for c in (CASES if cases is None else cases)}


def table(results: dict) -> str:
    """Markdown table: per module, cases that pass (both orders), first order only, clear error."""
    lines = ["| module | cases | pass (1st + 2nd order) | 1st order only | clear error | wrong or other |", "|---|---|---|---|---|---|"]
    totals = np.zeros(5, dtype=int)
    for module in MODULES:
        statuses = [s for m, s, _ in results.values() if m == module]
        row = np.array([len(statuses), statuses.count("pass"), statuses.count("pass1"), statuses.count("clear"),
                        statuses.count("wrong") + statuses.count("other")])
        totals += row
        lines.append(f"| {module} | " + " | ".join(map(str, row)) + " |")
    lines.append("| **all** | " + " | ".join(f"**{t}**" for t in totals) + " |")
    return "\n".join(lines)


def main(argv: list) -> None:
    cases = CASES + (sklearn_cases() if "--sklearn" in argv else [])
    results = run_all(cases)
    if "--json" in argv:
        print(json.dumps(results))
        return
    mode = "array-API mode (SCIPY_ARRAY_API=1)" if array_api_mode() else "default mode"
    print(f"SciPy {scipy.__version__}, {mode}:\n")
    print(table(results))
    if "-v" in argv:
        for name, (_, status, detail) in results.items():
            if status != "pass":
                print(f"{name}: {status}: {detail[:300]}")


if __name__ == "__main__":
    main(sys.argv[1:])
