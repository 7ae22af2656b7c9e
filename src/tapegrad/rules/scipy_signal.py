"""Derivatives of ``scipy.signal``'s linear filters, by their exact adjoints.

Reached through SciPy's door (:mod:`tapegrad.interception`).

IIR filters
-----------
``lfilter`` is one primitive: with ``a[0] == 1`` (the composite divides ``b``
and ``a`` by ``a[0]`` first, as SciPy does), ``y = A^{-1} (B x + P zi)`` where
``A`` and ``B`` are the lower-triangular Toeplitz matrices of ``a`` and ``b``
along the time axis and ``P`` places the initial state at the first samples.
With ``w = A^{-T} g`` (the same filter run backwards in time: ``lfilter([1], a)``
on the reversed cotangent):

* ``x̄ = B^T w`` (the FIR part run backwards),
* ``zī = w[:K]`` (its first ``K = max(len(a), len(b)) - 1`` samples),
* ``b̄[k] = sum_n w[n] x[n - k]`` and ``ā[k] = -sum_n w[n] y[n - k]``.

Every one of these is again ``lfilter`` (or sums of products), so the second
derivative is recorded like the first.  The final state ``zf`` is read from the
filter's response to ``K`` extra zero samples: ``zf[m] = sum_{j<=m} a[j] y[N + m - j]``.
``filtfilt`` (``method='pad'``), ``sosfilt``, ``sosfilt_zi`` and
``sosfiltfilt`` are composites that mirror SciPy's Python code on top of it
(``sosfilt`` is the cascade of its sections' ``lfilter`` calls, so its values
agree with SciPy's to rounding, not bit for bit); ``decimate`` with an IIR
filter then runs SciPy's own code unchanged.  ``lfilter_zi`` keeps SciPy's value
(SciPy 1.18 computes it differently from 1.17) with the derivatives of its closed
form ``zi[k] = sum_{j>k} (b[j] - y_inf a[j])``, ``y_inf = sum(b) / sum(a)``.

Convolutions
------------
``convolve`` and ``correlate`` (every mode and method, n-D) are composites of
one primitive, the *full* convolution computed by SciPy with the method asked
for; its VJPs are full convolutions of the cotangent with the reversed other
operand, cropped to the operand's shape (holomorphic: no conjugate).  ``fftconvolve``
and ``oaconvolve`` (with ``axes``, broadcasting the other axes) have a primitive
of their own, computed by SciPy with that function.

Spectra
-------
``ShortTimeFFT.stft_detrend`` writes each segment's FFT into a preallocated
array; its composite stacks them instead, so ``welch``, ``periodogram``,
``csd``, ``spectrogram`` and ``ShortTimeFFT.stft``/``spectrogram`` run SciPy's
own code on tracers (quadratic in ``x``: first and second order); the legacy
helper behind ``spectrogram``, ``stft`` and ``coherence`` (``_fft_helper``, a
sliding-window view) gets the same segments by the same means.

Also here: ``convolve2d``/``correlate2d`` (boundary extension, then a full
convolution), ``upfirdn`` (zero insertion, convolution, decimation; so
``resample_poly`` and FIR ``decimate`` run SciPy's own code), ``lfiltic``,
``detrend`` (per segment, the projection off its line) and
``savgol_filter`` (``ndimage.convolve1d`` with ``savgol_coeffs``; in
``mode='interp'`` the edges are the linear map of the polynomial fit, applied
to the first and last windows; also in ``delta`` and ``cval``).  Where a
composite is not SciPy's own arithmetic it returns SciPy's value and lends it
the traced computation's derivatives.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import scipy.ndimage as _nd
import scipy.signal as _sig
import scipy.fft as _sig_fft
from scipy.signal import _signaltools as _st
from scipy.signal import _spectral_py as _spectral
from scipy.signal._arraytools import axis_reverse, axis_slice

from ..dispatch import primitive, strip
from ..errors import NonDifferentiableArgumentError
from ..registry import CONSTANT_ARG, defcomposite, defvjp, intercepted
from ..tracer import Tracer, unwrap_above
from ._scipy_util import as_array as _as_array, has_tracer as _traced

_sp_lfilter = _sig.lfilter
_sp_convolve = _sig.convolve
_sp_fftconvolve = _sig.fftconvolve
_sp_oaconvolve = _sig.oaconvolve
_sp_lfilter_zi = _sig.lfilter_zi
_sp_sosfilt_zi = _sig.sosfilt_zi






def _constant(name: str, arg: str, value: Any) -> Any:
    if _traced(value):
        raise NonDifferentiableArgumentError(
            f"scipy.signal.{name}: tapegrad does not differentiate with respect to {arg!r}. "
            "Pass a plain value, or tapegrad.stop_gradient(...) of it to use it as a constant."
        )
    return value


def _negative_axis(axis: Any, ndim: int) -> int:
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(axis, ndim)
    return axis - ndim if axis >= 0 else axis


def _inner(ndim: int) -> tuple:
    return tuple(range(-ndim, 0))


# ------------------------------------------------------------------ lfilter
def _lfilter_raw(b, a, x, zi, axis):
    if zi is None:
        return _sp_lfilter(b, a, x, axis)
    return _sp_lfilter(b, a, x, axis, zi)[0]


lfilter_p = primitive(_lfilter_raw)
_ONE = np.ones(1)
_ONE.flags.writeable = False


def _backwards(g: Any, b: Any, a: Any, axis: int) -> Any:
    """The filter ``b / a`` run backwards in time along ``axis`` (the transpose of running it forwards)."""
    return np.flip(lfilter_p(b, a, np.flip(g, axis), None, axis), axis)


def _lagged_products(w: Any, v: Any, taps: int, axis: int, ndim: int) -> Any:
    """``out[..., k] = sum_n w[n] v[n - k]`` for ``k < taps``, summed over ``v``'s axes."""
    wl, vl = np.moveaxis(w, axis, -1), np.moveaxis(v, axis, -1)
    n = np.shape(vl)[-1]
    zero = np.zeros(np.shape(wl)[: np.ndim(wl) - ndim], dtype=np.result_type(unwrap_above(wl, 0), strip(vl)))
    terms = [np.sum(wl[..., k:] * vl[..., : n - k], axis=_inner(ndim)) if k < n else zero for k in range(taps)]
    return np.stack(terms, axis=-1)


def _lfilter_vjp_b(g, ans, b, a, x, zi, axis):
    w = _backwards(g, _ONE, a, axis)
    return _lagged_products(w, x, np.shape(b)[0], axis, np.ndim(x))


def _lfilter_vjp_a(g, ans, b, a, x, zi, axis):
    w = _backwards(g, _ONE, a, axis)
    return -_lagged_products(w, ans, np.shape(a)[0], axis, np.ndim(x))


def _lfilter_vjp_x(g, ans, b, a, x, zi, axis):
    return _backwards(g, b, a, axis)


def _lfilter_vjp_zi(g, ans, b, a, x, zi, axis):
    w = _backwards(g, _ONE, a, axis)
    k, n = np.shape(zi)[axis], np.shape(x)[axis]
    if n < k:  # a state entry that no output sample reads
        w = np.concatenate([w, np.zeros(np.shape(w)[:axis % np.ndim(w)] + (k - n,) + np.shape(w)[axis % np.ndim(w) + 1 :])], axis=axis)
    return w[(Ellipsis, slice(0, k)) + (slice(None),) * (-axis - 1)]


defvjp(
    lfilter_p,
    _lfilter_vjp_b,
    _lfilter_vjp_a,
    _lfilter_vjp_x,
    _lfilter_vjp_zi,
    CONSTANT_ARG,
    note="exact adjoint: the filter run backwards in time; b and a through the filtered signals",
)


def _normalized(b: Any, a: Any) -> tuple:
    """``b / a[0], a / a[0]`` (SciPy's normalisation), untouched when ``a[0]`` is a plain 1."""
    if type(a) is Tracer or float(np.real(strip(a)[0])) != 1.0 or np.iscomplexobj(strip(a)):
        b, a = b / a[0], a / a[0]
    return b, a


def _lfilter(b, a, x, axis=-1, zi=None):
    b, a, x = np.atleast_1d(_as_array(b)), np.atleast_1d(_as_array(a)), _as_array(x)
    axis = _negative_axis(_constant("lfilter", "axis", axis), np.ndim(x))
    if np.ndim(b) != 1 or np.size(strip(b)) == 0:
        raise ValueError(f"Parameter b is not a non-empty 1d array, since b.shape={np.shape(b)}!")
    if np.ndim(a) != 1 or np.size(strip(a)) == 0:
        raise ValueError(f"Parameter a is not a non-empty 1d array, since a.shape={np.shape(a)}!")
    if float(np.abs(strip(a)[0])) == 0.0:
        _sp_lfilter(strip(b), strip(a), strip(x), axis)  # SciPy's own error
    b, a = _normalized(b, a)
    if zi is None:
        return lfilter_p(b, a, x, None, axis)
    zi = _as_array(zi)
    k = max(np.shape(a)[0], np.shape(b)[0]) - 1
    expected = list(np.shape(x))
    expected[axis] = k
    if np.ndim(zi) != np.ndim(x):
        raise ValueError(f"Dimensions of parameters x and zi must match, but x.ndim={np.ndim(x)}, zi.ndim={np.ndim(zi)}!")
    if tuple(np.shape(zi)) != tuple(expected):
        if np.shape(zi)[axis] != k or any(s not in (1, e) for s, e in zip(np.shape(zi), expected)):
            raise ValueError(f"Unexpected shape for parameter zi: expected {tuple(expected)}, found {np.shape(zi)}.")
        zi = np.broadcast_to(zi, tuple(expected))
    n = np.shape(x)[axis]
    if k == 0:
        y = lfilter_p(b, a, x, zi, axis)
        return y, np.zeros(tuple(expected), dtype=np.result_type(unwrap_above(y, 0)))
    # Run K zero samples past the end: y is unchanged (causal), and the extra outputs give zf.
    zeros = list(np.shape(x))
    zeros[axis] = k
    y_ext = lfilter_p(b, a, np.concatenate([x, np.zeros(zeros, dtype=np.result_type(unwrap_above(x, 0)))], axis=axis), zi, axis)

    def take(start, stop):
        return y_ext[(Ellipsis, slice(start, stop)) + (slice(None),) * (-axis - 1)]

    tail = np.moveaxis(take(n, n + k), axis, -1)
    zf_terms = []
    for m in range(k):
        total = tail[..., m]
        for j in range(1, min(m, np.shape(a)[0] - 1) + 1):
            total = total + a[j] * tail[..., m - j]
        zf_terms.append(total)
    zf = np.moveaxis(np.stack(zf_terms, axis=-1), -1, axis)
    return take(0, n), zf


defcomposite(intercepted(_sig.lfilter), _lfilter, note="b, a, x and zi; zf from K extra zero samples")


def _lfilter_zi(b, a):
    """SciPy's value (and its checks); the derivatives of the steady state it solves for.

    SciPy < 1.18 solves ``(I - companion(a).T) zi = b[1:] - a[1:] b[0]`` after
    dropping leading zeros of ``a``; SciPy 1.18 sums ``b - y_inf a`` from the end
    (``y_inf = sum(b) / sum(a)``, the step response's final value) and refuses
    ``a[0] == 0``.  Both give the same ``zi``, whose derivatives come from the closed
    form traced here; the value is always the running SciPy's own.
    """
    b, a = np.atleast_1d(_as_array(b)), np.atleast_1d(_as_array(a))
    value = np.asarray(_sp_lfilter_zi(strip(b), strip(a)))  # SciPy's errors and numbers
    while np.shape(a)[0] > 1 and strip(a)[0] == 0.0:  # what SciPy < 1.18 accepted and dropped
        a = a[1:]
    b, a = _normalized(b, a)
    n = max(np.shape(a)[0], np.shape(b)[0])
    if np.shape(a)[0] < n:
        a = np.concatenate([a, np.zeros(n - np.shape(a)[0])])
    elif np.shape(b)[0] < n:
        b = np.concatenate([b, np.zeros(n - np.shape(b)[0])])
    y_inf = np.sum(b) / np.sum(a)
    zi = np.flip(np.cumsum(np.flip(b - y_inf * a)))[1:]
    if np.shape(zi) != np.shape(value):
        raise NonDifferentiableArgumentError(
            f"scipy.signal.lfilter_zi: this SciPy returned shape {np.shape(value)} where tapegrad's rule "
            f"gives {np.shape(zi)}, so tapegrad cannot differentiate it here."
        )
    return _with_value(value, zi)


defcomposite(intercepted(_sig.lfilter_zi), _lfilter_zi)


def _lfiltic(b, a, y, x=None):
    a, b = np.atleast_1d(_as_array(a)), np.atleast_1d(_as_array(b))
    if np.ndim(a) > 1:
        raise ValueError("Filter coefficients `a` must be 1-D.")
    if np.ndim(b) > 1:
        raise ValueError("Filter coefficients `b` must be 1-D.")
    n, m = np.shape(a)[0] - 1, np.shape(b)[0] - 1
    k = max(m, n)
    y = _as_array(y)
    if n < 0:
        raise ValueError("There must be at least one `a` coefficient.")
    parts = [strip(b), strip(a), strip(y)] + ([] if x is None else [strip(_as_array(x))])
    dtype = np.result_type(*parts)
    if dtype.kind in "biu":
        dtype = np.dtype(np.float64)
    x = np.zeros(m, dtype=dtype) if x is None else _as_array(x).astype(dtype)
    if np.size(strip(x)) < m:
        x = np.concatenate([x, np.zeros(m - np.size(strip(x)))])
    y = y.astype(dtype)
    if np.size(strip(y)) < n:
        y = np.concatenate([y, np.zeros(n - np.size(strip(y)))])
    # SciPy fills a preallocated state in place; here each entry is a sum, and they are stacked.
    terms = []
    for j in range(k):
        z = np.zeros((), dtype=dtype)
        if j < m:
            z = z + np.sum(b[j + 1 :] * x[: m - j], axis=0)
        if j < n:
            z = z - np.sum(a[j + 1 :] * y[: n - j], axis=0)
        terms.append(z)
    zi = np.stack(terms).astype(dtype) if terms else np.zeros(0, dtype=dtype)
    if strip(a)[0] != 1.0:
        if strip(a)[0] == 0.0:
            raise ValueError("First `a` filter coefficient must be non-zero.")
        zi = zi / a[0]
    return zi


defcomposite(intercepted(_sig.lfiltic), _lfiltic)


def _zi_of(b: Any, a: Any) -> Any:
    """SciPy's own ``lfilter_zi`` for plain coefficients (exact values); the traced composite otherwise."""
    if _traced(b) or _traced(a):
        return _lfilter_zi(b, a)
    return _sp_lfilter_zi(b, a)


def _filtfilt(b, a, x, axis=-1, padtype="odd", padlen=None, method="pad", irlen=None):
    b, a, x = np.atleast_1d(_as_array(b)), np.atleast_1d(_as_array(a)), _as_array(x)
    for arg, value in (("axis", axis), ("padtype", padtype), ("padlen", padlen), ("method", method), ("irlen", irlen)):
        _constant("filtfilt", arg, value)
    if method not in ("pad", "gust"):
        raise ValueError("method must be 'pad' or 'gust'.")
    if method == "gust":
        raise NonDifferentiableArgumentError(
            "scipy.signal.filtfilt(..., method='gust'): tapegrad has no rule for Gustafsson's method "
            "(its initial conditions come from a least-squares fit in compiled code). "
            "Use method='pad' (the default), or sosfiltfilt."
        )
    edge, ext = _st._validate_pad(padtype, padlen, x, axis, ntaps=max(np.shape(a)[0], np.shape(b)[0]))
    zi = _zi_of(b, a)
    zi_shape = [1] * np.ndim(x)
    zi_shape[axis] = np.size(strip(zi))
    zi = np.reshape(zi, zi_shape)
    x0 = axis_slice(ext, stop=1, axis=axis)
    y, _ = _lfilter(b, a, ext, axis=axis, zi=zi * x0)
    y0 = axis_slice(y, start=-1, axis=axis)
    y, _ = _lfilter(b, a, axis_reverse(y, axis=axis), axis=axis, zi=zi * y0)
    y = axis_reverse(y, axis=axis)
    if edge > 0:
        y = axis_slice(y, start=edge, stop=-edge, axis=axis)
    return y


defcomposite(intercepted(_sig.filtfilt), _filtfilt, note="method='pad' (Gustafsson's method raises)")


# ------------------------------------------------------------------ second-order sections
def _validate_sos(sos: Any) -> tuple:
    sos = _as_array(sos)
    if np.ndim(sos) == 1:
        sos = sos[None, :]
    if np.ndim(sos) != 2:
        raise ValueError("sos array must be 2D")
    n_sections, m = np.shape(sos)
    if m != 6:
        raise ValueError("sos array must be shape (n_sections, 6)")
    if not np.all(strip(sos)[:, 3] == 1):
        raise ValueError("sos[:, 3] should be all ones")
    return sos, n_sections


def _sosfilt(sos, x, axis=-1, zi=None):
    sos, n_sections = _validate_sos(sos)
    x = _as_array(x)
    if np.result_type(unwrap_above(x, 0)).kind not in "fc":
        x = x.astype(np.float64)
    axis = _negative_axis(_constant("sosfilt", "axis", axis), np.ndim(x))
    dtype = np.result_type(unwrap_above(sos, 0), strip(x))
    if zi is not None:
        zi = _as_array(zi)
        expected = list(np.shape(x))
        expected[axis] = 2
        expected = tuple([n_sections] + expected)
        if tuple(np.shape(zi)) != expected:
            raise ValueError(
                f"Invalid zi shape. With axis={axis!r}, an input with shape {np.shape(x)!r}, and an sos array "
                f"with {n_sections} sections, zi must have shape {expected!r}, got {np.shape(zi)!r}."
            )
        dtype = np.result_type(dtype, strip(zi))
    y, states = x, []
    for s in range(n_sections):
        if zi is None:
            y = _lfilter(sos[s, :3], sos[s, 3:], y, axis=axis)
        else:
            y, zf = _lfilter(sos[s, :3], sos[s, 3:], y, axis=axis, zi=zi[s])
            states.append(zf)
    y = y if np.result_type(unwrap_above(y, 0)) == dtype else y.astype(dtype)
    if zi is None:
        return y
    zf = np.stack(states)
    return y, (zf if np.result_type(unwrap_above(zf, 0)) == dtype else zf.astype(dtype))


defcomposite(intercepted(_sig.sosfilt), _sosfilt, note="the cascade of its sections' lfilter calls")


def _sosfilt_zi(sos):
    sos = _as_array(sos)
    if np.ndim(sos) != 2 or np.shape(sos)[1] != 6:
        raise ValueError("sos must be shape (n_sections, 6)")
    if np.result_type(unwrap_above(sos, 0)).kind in "biu":
        sos = sos.astype(np.float64)
    rows, scale = [], 1.0
    for s in range(np.shape(sos)[0]):
        b, a = sos[s, :3], sos[s, 3:]
        rows.append(scale * _lfilter_zi(b, a))
        scale = scale * (np.sum(b) / np.sum(a))  # the section's gain at DC
    return np.stack(rows)


defcomposite(intercepted(_sig.sosfilt_zi), _sosfilt_zi)


def _sosfiltfilt(sos, x, axis=-1, padtype="odd", padlen=None):
    for arg, value in (("axis", axis), ("padtype", padtype), ("padlen", padlen)):
        _constant("sosfiltfilt", arg, value)
    sos, n_sections = _validate_sos(sos)
    x = _as_array(x)
    if np.result_type(unwrap_above(x, 0)).kind not in "fc":
        x = x.astype(np.float64)
    raw = strip(sos)
    ntaps = 2 * n_sections + 1 - min(int((raw[:, 2] == 0).sum()), int((raw[:, 5] == 0).sum()))
    edge, ext = _st._validate_pad(padtype, padlen, x, axis, ntaps=ntaps)
    zi = _sosfilt_zi(sos) if _traced(sos) else _sp_sosfilt_zi(raw)
    zi_shape = [1] * np.ndim(x)
    zi_shape[axis] = 2
    zi = np.reshape(zi, [n_sections] + zi_shape)
    x0 = axis_slice(ext, stop=1, axis=axis)
    y, _ = _sosfilt(sos, ext, axis=axis, zi=zi * x0)
    y0 = axis_slice(y, start=-1, axis=axis)
    y, _ = _sosfilt(sos, axis_reverse(y, axis=axis), axis=axis, zi=zi * y0)
    y = axis_reverse(y, axis=axis)
    if edge > 0:
        y = axis_slice(y, start=edge, stop=-edge, axis=axis)
    return y


defcomposite(intercepted(_sig.sosfiltfilt), _sosfiltfilt)


# ------------------------------------------------------------------ convolution
def _convolve_full_raw(a, b, method):
    return _sp_convolve(a, b, "full", method)


convolve_full_p = primitive(_convolve_full_raw)


def _convolve_vjp(other: int):
    # d/da of sum_k g[k] (a * b)[k] is sum_k g[k] b[k - i]: the full convolution of g with
    # the reversed b, read from offset len(b) - 1 on every axis.
    def vjp(g, ans, a, b, method):
        this, that = (a, b) if other == 1 else (b, a)
        nb = np.ndim(g) - np.ndim(this)
        flipped = np.flip(that, axis=tuple(range(np.ndim(that))))
        full = convolve_full_p(g, np.reshape(flipped, (1,) * nb + np.shape(that)), "auto" if method == "auto" else method)
        crop = (Ellipsis,) + tuple(slice(m - 1, m - 1 + n) for n, m in zip(np.shape(this), np.shape(that)))
        return full[crop]

    return vjp


defvjp(convolve_full_p, _convolve_vjp(1), _convolve_vjp(0), CONSTANT_ARG, note="full convolutions with the reversed other operand")


def _crop(full: Any, s1: tuple, s2: tuple, mode: str) -> Any:
    if mode == "full":
        return full
    if mode == "same":
        shape = s1
    elif mode == "valid":
        shape = tuple(abs(i - j) + 1 for i, j in zip(s1, s2))
    else:
        raise ValueError("Acceptable mode flags are 'valid', 'same', or 'full'.")
    start = [(f - n) // 2 for f, n in zip(np.shape(full), shape)]
    return full[tuple(slice(s, s + n) for s, n in zip(start, shape))]


def _check_convolve(name: str, in1: Any, in2: Any, mode: Any, method: Any) -> None:
    _constant(name, "mode", mode)
    _constant(name, "method", method)
    if np.ndim(in1) != np.ndim(in2):
        raise ValueError(f"{'volume and kernel' if name == 'convolve' else 'in1 and in2'} should have the same dimensionality")
    if mode not in ("full", "same", "valid"):
        raise ValueError("Acceptable mode flags are 'valid', 'same', or 'full'.")
    if method not in ("auto", "direct", "fft"):
        raise ValueError("Acceptable method flags are 'auto', 'direct', or 'fft'.")
    if mode == "valid" and not (
        all(i >= j for i, j in zip(np.shape(in1), np.shape(in2))) or all(j >= i for i, j in zip(np.shape(in1), np.shape(in2)))
    ):
        raise ValueError("For 'valid' mode, one must be at least as large as the other in every dimension")


def _result_dtype(y: Any, dtype: np.dtype) -> Any:
    return y if np.result_type(unwrap_above(y, 0)) == dtype else y.astype(dtype)


def _convolve(in1, in2, mode="full", method="auto"):
    a, b = _as_array(in1), _as_array(in2)
    if np.ndim(a) == 0 and np.ndim(b) == 0:
        return a * b
    _check_convolve("convolve", a, b, mode, method)
    dtype = np.result_type(unwrap_above(a, 0), strip(b))
    return _result_dtype(_crop(convolve_full_p(a, b, method), np.shape(a), np.shape(b), mode), dtype)


def _correlate(in1, in2, mode="full", method="auto"):
    a, b = _as_array(in1), _as_array(in2)
    if np.ndim(a) == 0 and np.ndim(b) == 0:
        return a * (np.conjugate(b) if np.iscomplexobj(strip(b)) else b)
    _check_convolve("correlate", a, b, mode, method)
    dtype = np.result_type(unwrap_above(a, 0), strip(b))
    swap = mode == "valid" and any(j > i for i, j in zip(np.shape(a), np.shape(b)))
    if swap:
        # SciPy correlates the larger with the smaller and reverses (and conjugates) the result.
        a, b = b, a
    rev = np.flip(b, axis=tuple(range(np.ndim(b))))
    if np.iscomplexobj(strip(rev)):
        rev = np.conjugate(rev)
    out = _crop(convolve_full_p(a, rev, method), np.shape(a), np.shape(b), mode)
    if swap:
        out = np.flip(out, axis=tuple(range(np.ndim(out))))
        if np.iscomplexobj(strip(out)):
            out = np.conjugate(out)
    return _result_dtype(out, dtype)


defcomposite(intercepted(_sig.convolve), _convolve, note="every mode and method")
defcomposite(intercepted(_sig.correlate), _correlate, note="every mode and method (complex in2 conjugated)")


def _freq_full_raw(a, b, axes, kind):
    return (_sp_oaconvolve if kind == "oa" else _sp_fftconvolve)(a, b, "full", axes)


freq_full_p = primitive(_freq_full_raw)


def _freq_vjp(other: int):
    def vjp(g, ans, a, b, axes, kind):
        this, that = (a, b) if other == 1 else (b, a)
        nb = np.ndim(g) - np.ndim(this)
        flipped = np.flip(that, axis=axes) if axes else that
        full = freq_full_p(g, np.reshape(flipped, (1,) * nb + np.shape(that)), tuple(nb + ax for ax in axes), kind)
        crop = [slice(None)] * np.ndim(this)
        for ax in axes:
            m = np.shape(that)[ax]
            crop[ax] = slice(m - 1, m - 1 + np.shape(this)[ax])
        return full[(Ellipsis,) + tuple(crop)]

    return vjp


defvjp(freq_full_p, _freq_vjp(1), _freq_vjp(0), CONSTANT_ARG, CONSTANT_ARG, note="full convolutions with the reversed other operand")


def _freq_convolve(kind: str):
    name = "oaconvolve" if kind == "oa" else "fftconvolve"

    def impl(in1, in2, mode="full", axes=None):
        a, b = _as_array(in1), _as_array(in2)
        _constant(name, "mode", mode)
        _constant(name, "axes", axes)
        if np.ndim(a) == 0 and np.ndim(b) == 0:
            return a * b
        if np.ndim(a) != np.ndim(b):
            raise ValueError("in1 and in2 should have the same dimensionality")
        if np.size(strip(a)) == 0 or np.size(strip(b)) == 0:
            return np.asarray([])
        if mode not in ("full", "same", "valid"):
            raise ValueError("acceptable mode flags are 'valid', 'same', or 'full'")
        # SciPy's own checks and axis normalisation (it swaps the operands for 'valid' when needed).
        r1, r2, norm_axes = _st._init_freq_conv_axes(strip(a), strip(b), mode, axes, sorted_axes=False)
        if r1 is not strip(a):
            a, b = b, a
        full = freq_full_p(a, b, tuple(int(ax) for ax in norm_axes), kind)
        s1, s2 = np.shape(a), np.shape(b)
        if mode == "full":
            return full
        if mode == "same":
            shape = s1
        else:
            shape = [np.shape(full)[i] if i not in norm_axes else s1[i] - s2[i] + 1 for i in range(np.ndim(full))]
        start = [(f - n) // 2 for f, n in zip(np.shape(full), shape)]
        return full[tuple(slice(st, st + n) for st, n in zip(start, shape))]

    impl.__name__ = name
    return impl


# oaconvolve's own code adds overlapping blocks through views of np.split results,
# which a trace cannot replay: both get rules here.
defcomposite(intercepted(_sig.fftconvolve), _freq_convolve("fft"), note="every mode, axes")
defcomposite(intercepted(_sig.oaconvolve), _freq_convolve("oa"), note="every mode, axes")


_sp_convolve2d = _sig.convolve2d
_sp_correlate2d = _sig.correlate2d
_BOUNDARIES = {"fill": "fill", "pad": "fill", "wrap": "wrap", "circular": "wrap", "symm": "symm", "symmetric": "symm"}


def _with_value(value: np.ndarray, traced: Any) -> Any:
    """SciPy's ``value``, carrying the derivatives of ``traced`` (equal to it up to rounding)."""
    if not _traced(traced):
        return value
    return value + (traced - strip(traced)).astype(value.dtype)


def _extend2d(a: Any, rows: int, cols: int, boundary: str, fillvalue: Any) -> Any:
    """``a`` extended by ``rows``/``cols`` samples on each side, as convolve2d's boundary extends it."""
    if boundary == "fill":
        dtype = np.result_type(unwrap_above(a, 0), strip(fillvalue))
        top = np.zeros((rows, np.shape(a)[1]), dtype=dtype) + fillvalue
        a = np.concatenate([top, a, top], axis=0)
        side = np.zeros((np.shape(a)[0], cols), dtype=dtype) + fillvalue
        return np.concatenate([side, a, side], axis=1)
    return np.pad(a, ((rows, rows), (cols, cols)), mode="wrap" if boundary == "wrap" else "symmetric")


def _convolve2d_like(correlate: bool):
    name = "correlate2d" if correlate else "convolve2d"
    scipy_fun = _sp_correlate2d if correlate else _sp_convolve2d

    def impl(in1, in2, mode="full", boundary="fill", fillvalue=0):
        _constant(name, "mode", mode)
        _constant(name, "boundary", boundary)
        a, b = _as_array(in1), _as_array(in2)
        # SciPy's own checks and value (exact); the traced computation only lends it derivatives.
        value = np.asarray(scipy_fun(strip(a), strip(b), mode, boundary, strip(fillvalue)))
        if mode == "valid":
            traced = (_correlate if correlate else _convolve)(a, b, "valid", "direct")
            return _with_value(value, traced)
        kh, kw = np.shape(b)
        kernel = b
        if correlate:
            kernel = np.flip(b, axis=(0, 1))
            if np.iscomplexobj(strip(kernel)):
                kernel = np.conjugate(kernel)
        ext = _extend2d(a, kh - 1, kw - 1, _BOUNDARIES[boundary], fillvalue)
        full = convolve_full_p(ext, kernel, "auto")[kh - 1 : kh - 1 + np.shape(a)[0] + kh - 1, kw - 1 : kw - 1 + np.shape(a)[1] + kw - 1]
        if mode == "same":
            # SciPy centres 'same' differently for the two (on even kernel sizes).
            r0, c0 = ((kh // 2, kw // 2) if correlate else ((kh - 1) // 2, (kw - 1) // 2))
            full = full[r0 : r0 + np.shape(a)[0], c0 : c0 + np.shape(a)[1]]
        return _with_value(value, full)

    impl.__name__ = name
    return impl


defcomposite(intercepted(_sig.convolve2d), _convolve2d_like(False), note="every mode and boundary; in in1, in2 and fillvalue")
defcomposite(intercepted(_sig.correlate2d), _convolve2d_like(True), note="every mode and boundary; in in1, in2 and fillvalue")


_sp_upfirdn = _sig.upfirdn


def _upfirdn(h, x, up=1, down=1, axis=-1, mode="constant", cval=0):
    for arg, value in (("up", up), ("down", down), ("axis", axis), ("mode", mode), ("cval", cval)):
        _constant("upfirdn", arg, value)
    h, x = _as_array(h), _as_array(x)
    value = np.asarray(_sp_upfirdn(strip(h), strip(x), up, down, axis, mode, cval))  # SciPy's checks and value
    if mode != "constant" or cval != 0:
        raise NonDifferentiableArgumentError(
            f"scipy.signal.upfirdn(..., mode={mode!r}, cval={cval!r}): tapegrad differentiates the zero-padded "
            "filter only (mode='constant', cval=0)."
        )
    up, down = int(up), int(down)
    axis = _negative_axis(axis, np.ndim(x))
    xl = np.moveaxis(x, axis, -1)
    n = np.shape(xl)[-1]
    if up > 1:
        # Zero insertion: each sample followed by up - 1 zeros, the trailing ones dropped.
        zeros = np.zeros(np.shape(xl) + (up - 1,), dtype=np.result_type(unwrap_above(xl, 0)))
        xl = np.reshape(np.concatenate([xl[..., None], zeros], axis=-1), np.shape(xl)[:-1] + (n * up,))
        xl = xl[..., : (n - 1) * up + 1]
    kernel = np.reshape(h, (1,) * (np.ndim(xl) - 1) + (-1,))
    y = convolve_full_p(xl, kernel, "auto")[..., ::down][..., : np.shape(value)[axis]]
    return _with_value(value, np.moveaxis(y, -1, axis))


defcomposite(intercepted(_sig.upfirdn), _upfirdn, note="mode='constant' (zero padding); in h and x")


# ------------------------------------------------------------------ spectra
def _stft_detrend(self, x, detr, p0=None, p1=None, *, k_offset=0, padding="zeros", axis=-1):
    x = _as_array(x)
    if self.onesided_fft and np.iscomplexobj(strip(x)):
        raise ValueError(
            f"Complex-valued `x` not allowed for self.fft_mode={self.fft_mode!r}'! "
            "Set property `fft_mode` to 'twosided' or 'centered'."
        )
    if isinstance(detr, str):
        detr = partial(_sig.detrend, type=detr)
    elif not (detr is None or callable(detr)):
        raise ValueError(f"Parameter detr={detr!r} is not a str, function or None!")
    n = np.shape(x)[axis]
    m2p = self.m_num - self.m_num_mid
    if not n >= m2p:
        raise ValueError(f"len(x)={n} must be >= ceil(m_num/2) = {m2p}!")
    if np.ndim(x) > 1:
        x = np.moveaxis(x, axis, -1)
    p0, p1 = self.p_range(n, p0, p1)
    if p1 <= p0:
        s = np.zeros(np.shape(x)[:-1] + (self.f_pts, 0), dtype=complex)
    elif (detr is None or isinstance(detr, partial)) and self.phase_shift is None and padding == "zeros":
        # All segments at once (a few recorded calls instead of a few per segment); a callable
        # detrend is still given one segment at a time, as SciPy gives it.
        segments = _segments(x, self.m_num, self.m_num_mid, self.hop, k_offset, p0, p1)
        if detr is not None:
            segments = detr(segments)
        s = np.swapaxes(self._fft_func(segments * self.win.conj()), -1, -2).astype(complex)
    else:
        columns = []
        for x_ in self._x_slices(x, k_offset, p0, p1, padding):
            if detr is not None:
                x_ = detr(x_)
            columns.append(self._fft_func(x_ * self.win.conj()))
        # SciPy writes each segment into a complex128 array; stacking records the same values.
        s = np.stack(columns, axis=-1).astype(complex)
    if np.ndim(x) > 1:
        return np.moveaxis(s, -2, axis if axis >= 0 else axis - 1)
    return s


def _segments(x: Any, m_num: int, m_num_mid: int, hop: int, k_offset: int, p0: int, p1: int) -> Any:
    """The zero-padded segments ``p0 .. p1 - 1`` of ``x`` (last axis), stacked: ``(..., p1 - p0, m_num)``."""
    n, count = np.shape(x)[-1], p1 - p0
    k0 = p0 * hop - m_num_mid + k_offset
    k1 = k0 + count * hop + m_num
    part = x[..., max(k0, 0) : min(k1, n)]
    before, after = -min(k0, 0), max(k1 - n, 0)
    if before or after:  # zeros by concatenation: its VJP is a slice
        zeros = np.zeros(np.shape(part)[:-1] + (1,), dtype=np.result_type(unwrap_above(part, 0)))
        part = np.concatenate([np.repeat(zeros, before, axis=-1), part, np.repeat(zeros, after, axis=-1)], axis=-1)
    if m_num % hop == 0:
        # Segments made of whole hops: r shifted views of the signal cut into hops.
        r = m_num // hop
        blocks = np.reshape(part[..., : (count + r - 1) * hop], np.shape(part)[:-1] + (count + r - 1, hop))
        return np.concatenate([blocks[..., j : j + count, :] for j in range(r)], axis=-1)
    return np.stack([part[..., p * hop : p * hop + m_num] for p in range(count)], axis=-2)


defcomposite(
    intercepted(_sig.ShortTimeFFT.stft_detrend),
    _stft_detrend,
    note="segments stacked instead of written into a preallocated array (welch, periodogram, csd, spectrogram)",
)


def _fft_helper(x, win, detrend_func, nperseg, noverlap, nfft, sides):
    # The legacy spectral helper (spectrogram, stft, istft's inputs): SciPy's sliding
    # window view becomes the same segments cut from whole hops (or stacked slices).
    x = _as_array(x)
    if nperseg == 1 and noverlap == 0:
        segments = x[..., None]
    else:
        step = nperseg - noverlap
        count = (np.shape(x)[-1] - nperseg) // step + 1
        segments = _segments(x, nperseg, 0, step, 0, 0, count)
    segments = detrend_func(segments)
    segments = win * segments
    if sides == "twosided":
        return _sig_fft.fft(segments, n=nfft)
    return _sig_fft.rfft(np.real(segments), n=nfft)


defcomposite(
    intercepted(_spectral._fft_helper),
    _fft_helper,
    note="segments cut without a sliding-window view (spectrogram, stft, coherence's legacy path)",
)


# ------------------------------------------------------------------ Savitzky-Golay
_sp_savgol_filter = _sig.savgol_filter


def _edge_fit(window: int, polyorder: int, deriv: int, points: np.ndarray) -> np.ndarray:
    """The linear map from ``window`` samples to the fitted polynomial's ``deriv``-th derivative at ``points``."""
    coef = np.polyfit(np.arange(window, dtype=np.float64), np.eye(window), polyorder)  # (polyorder + 1, window)
    for _ in range(deriv):
        coef = coef[:-1] * np.arange(coef.shape[0] - 1, 0, -1)[:, None]
    if coef.shape[0] == 0:
        return np.zeros((len(points), window))
    return np.polyval(coef, points.astype(np.float64)[:, None])


def _savgol_filter(x, window_length, polyorder, deriv=0, delta=1.0, axis=-1, mode="interp", cval=0.0):
    for arg, value in (("window_length", window_length), ("polyorder", polyorder), ("deriv", deriv), ("axis", axis), ("mode", mode)):
        _constant("savgol_filter", arg, value)
    x = _as_array(x)
    if np.result_type(unwrap_above(x, 0)) not in (np.float64, np.float32):
        x = x.astype(np.float64)
    # SciPy's checks and value; the traced computation below only lends it derivatives.
    value = np.asarray(_sp_savgol_filter(strip(x), window_length, polyorder, deriv, strip(delta), axis, mode, strip(cval)))
    coeffs = _sig.savgol_coeffs(window_length, polyorder, deriv=deriv, delta=1.0)
    # The delta dependence is a factor delta ** -deriv (1 exactly at the point itself).
    scale = 1.0 / np.asarray(strip(delta), dtype=np.float64) ** deriv
    if _traced(delta) and deriv:
        scale = scale * (strip(delta) / delta) ** deriv
    if mode != "interp":
        return _with_value(value, _nd.convolve1d(x, coeffs * scale, axis=axis, mode=mode, cval=cval))
    y = _nd.convolve1d(x, coeffs * scale, axis=axis, mode="constant")
    axis = _negative_axis(axis, np.ndim(x))
    n, half = np.shape(x)[axis], window_length // 2
    xl, yl = np.moveaxis(x, axis, -1), np.moveaxis(y, axis, -1)
    left = xl[..., :window_length] @ _edge_fit(window_length, polyorder, deriv, np.arange(half)).T
    right_points = np.arange(window_length - half, window_length)
    right = xl[..., n - window_length :] @ _edge_fit(window_length, polyorder, deriv, right_points).T
    middle = yl[..., half : n - half]
    y = np.concatenate([left * scale, middle, right * scale], axis=-1)
    return _with_value(value, np.moveaxis(y, -1, axis))


defcomposite(
    intercepted(_sig.savgol_filter),
    _savgol_filter,
    note="the convolution with savgol_coeffs, edges by the linear map of the polynomial fit; also in delta and cval",
)


# ------------------------------------------------------------------ detrend
_sp_detrend = _sig.detrend


def _detrend(data, axis=-1, type="linear", bp=0, overwrite_data=False):
    for arg, value in (("axis", axis), ("type", type), ("bp", bp)):
        _constant("detrend", arg, value)
    x = _as_array(data)
    value = np.asarray(_sp_detrend(strip(x), axis, type, bp, False))  # SciPy's checks and value
    if np.result_type(unwrap_above(x, 0)).char not in "dfDF":
        x = x.astype(np.float64)
    if type in ("constant", "c"):
        return _with_value(value, x - np.mean(x, axis=axis, keepdims=True))
    axis = _negative_axis(axis, np.ndim(x))
    n = np.shape(x)[axis]
    cuts = np.sort(np.unique(np.concatenate(np.atleast_1d(0, np.asarray(bp), n))))
    xl = np.moveaxis(x, axis, -1)
    pieces = []
    for start, stop in zip(cuts[:-1], cuts[1:]):
        count = int(stop - start)
        design = np.ones((count, 2))
        design[:, 0] = np.arange(1, count + 1) / count
        q = np.linalg.qr(design)[0]  # the segment minus its projection on the line
        seg = xl[..., start:stop]
        pieces.append(seg - (seg @ q) @ q.T)
    return _with_value(value, np.moveaxis(np.concatenate(pieces, axis=-1), -1, axis))


defcomposite(intercepted(_sig.detrend), _detrend, note="the projection off a line (or the mean) per segment")
