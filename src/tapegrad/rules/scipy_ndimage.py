"""Derivatives of ``scipy.ndimage``'s linear filters, by their exact adjoints.

Reached through SciPy's door (:mod:`tapegrad.interception`): each public
function below is registered with ``intercepted(...)``, so a call with a tracer
among its arguments comes here, whatever the import style.

How the adjoints are built
--------------------------
Every filter here is a correlation of a boundary-extended signal:
``y[i] = sum_j w[j] * xe[i + j]``, where ``xe`` is ``x`` extended by ``size - 1``
samples according to ``mode`` (``reflect``, ``mirror``, ``wrap``, ...), with
``cval`` where the mode is a constant one.  Its transpose is

1. a *full* convolution of the cotangent with ``w`` (a correlation with the
   reversed weights of the zero-padded cotangent, computed by the same
   primitive, so a second derivative is recorded like any other call), then
2. the transpose of the extension: each extended sample's cotangent is folded
   back onto the input sample it copies (``np.pad``'s adjoint for that mode).

Where each extended sample comes from is *read from SciPy itself*: a probe
correlates ``arange(n)`` with one-hot weights (``cval = -1`` marks the
constant samples), once per ``(n, size, mode, origin)``.  So every mode SciPy
knows, now and later, folds exactly as SciPy extends, with no per-mode formula
to get wrong; the tests compare each adjoint with the transposed dense matrix
of SciPy's operator.

Primitives are few: a 1-D correlation (``correlate1d``), an n-D correlation
(``correlate``) and the running mean (``uniform_filter1d``, whose forward pass
is SciPy's own running sum).  ``convolve1d``, ``convolve``, the Gaussian
filters and their derivatives, ``uniform_filter``, ``sobel``, ``prewitt``,
``laplace``, ``generic_laplace``, ``gaussian_laplace``,
``generic_gradient_magnitude`` and ``gaussian_gradient_magnitude`` are
composites that mirror SciPy's Python code pass for pass (same weights, same
intermediate dtype), so their values agree with SciPy's.

Interpolation (``map_coordinates``, ``zoom``, ``shift``, ``affine_transform``,
``spline_filter``, ``spline_filter1d``) returns SciPy's own value and takes its
derivatives from a traced port of SciPy's tap rules: a gather of the
(prefiltered) coefficients times B-spline weights of the coordinates, so the
input, the coordinates (every order 0-5; order 0 has derivative 0 almost
everywhere), ``shift``, the affine ``matrix``/``offset`` and ``cval`` are all
differentiated; the prefilter's adjoint is its dense matrix, read from SciPy
(lines of up to ``MAX_SPLINE_LINE`` samples; longer ones raise a clear error).

The Fourier-domain filters (``fourier_gaussian``, ``fourier_uniform``,
``fourier_ellipsoid``, ``fourier_shift``) multiply by factors read from SciPy.

Selection filters (minimum/maximum/median/rank/percentile, the grey morphology
built on them, ``scipy.signal.medfilt``) return SciPy's value with the
derivative of the window samples equal to it (ties split equally).

Derivatives are taken in ``input``, ``weights``, ``cval`` and the Gaussian
filters' ``sigma`` (through the kernel, whose radius is piecewise constant in
it).  Complex inputs and weights are split into real correlations as SciPy does
(complex weights are conjugated by ``correlate``, as in SciPy).  ``size``,
``truncate`` and the other shape parameters are not differentiated: a traced
one raises :class:`~tapegrad.errors.NonDifferentiableArgumentError`, and an
``output=`` *array* (SciPy's in-place result) raises
:class:`~tapegrad.errors.GradientDroppedError`; pass a dtype or ``None``.
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Callable, Optional

import numpy as np
import scipy.ndimage as _nd
from scipy.ndimage import _filters as _sf
from scipy.ndimage import _ni_support

from ..dispatch import primitive, strip
from ..errors import GradientDroppedError, NonDifferentiableArgumentError
from ..registry import CONSTANT_ARG, defcomposite, defvjp, intercepted
from ..tracer import Tracer, unwrap_above
from ._scipy_util import as_array as _as_array, has_tracer as _is_traced

# SciPy's own functions, bound once: the rules call them on plain arrays.
_sp_correlate1d = _nd.correlate1d
_sp_correlate = _nd.correlate
_sp_uniform_filter1d = _nd.uniform_filter1d


# ------------------------------------------------------------------ argument checks




def _constant(name: str, arg: str, value: Any) -> Any:
    """``value`` when it is not traced; else a clear error naming the argument."""
    if _is_traced(value):
        raise NonDifferentiableArgumentError(
            f"scipy.ndimage.{name}: tapegrad does not differentiate with respect to {arg!r} "
            "(it sets the shape of the filter). Pass a plain number, or tapegrad.stop_gradient(...) "
            "of it to use its value as a constant."
        )
    return value


def _output_dtype(name: str, output: Any, like: Any, complex_output: bool = False) -> Optional[np.dtype]:
    """The dtype SciPy gives the result for ``output`` (``None``: the input's dtype)."""
    if output is None:
        dtype = np.result_type(like)
        if complex_output and dtype.kind != "c":
            dtype = np.promote_types(dtype, np.complex64)
        return dtype
    if isinstance(output, np.ndarray) or type(output) is Tracer:
        raise GradientDroppedError(
            f"scipy.ndimage.{name}(..., output=<array>) writes the traced result into that array, "
            "which would drop its gradient. Leave output=None (or pass a dtype) and use the returned array."
        )
    dtype = np.dtype(output)
    if complex_output and dtype.kind != "c":
        raise RuntimeError("output must have complex dtype")
    return dtype


def _cast(y: Any, dtype: Optional[np.dtype]) -> Any:
    return y if dtype is None or np.result_type(y) == dtype else y.astype(dtype)


def _axis_slice(axis: int, start: int, stop: int) -> tuple:
    """An index taking ``start:stop`` along the negative ``axis``."""
    return (Ellipsis, slice(start, stop)) + (slice(None),) * (-axis - 1)


def _inner_axes(ndim: int) -> tuple:
    return tuple(range(-ndim, 0))


def _zero_pad(a: Any, axis: int, before: int, after: int) -> Any:
    """``a`` with zeros before and after along ``axis`` (a concatenation: its VJP is a slice)."""
    if not before and not after:
        return a
    dtype = np.result_type(unwrap_above(a, 0))
    parts = []
    for count in (before, after):
        shape = list(np.shape(a))
        shape[axis] = count
        parts.append(np.zeros(shape, dtype=dtype))
    return np.concatenate([parts[0], a, parts[1]], axis=axis)


# ------------------------------------------------------------------ gather / scatter-add on the last axis
# The rules gather samples by index (extensions, spline taps, windows).  A fancy index on
# a tracer would do, but its VJP sorts the indices; these two primitives are each
# other's transpose and scatter with np.bincount.
def _take_raw(a, index):
    return a[..., index]


take_p = primitive(_take_raw)


def _scatter_raw(g, index, size):
    """Sum ``g[..., *index.shape]`` into ``size`` slots of the last axis, at ``index``."""
    g = np.asarray(g)
    batch = g.shape[: g.ndim - index.ndim]
    rows = int(np.prod(batch, dtype=np.intp))
    flat = (np.arange(rows)[:, None] * size + index.reshape(1, -1)).ravel()
    values = g.reshape(rows, -1)

    def count(w):
        return np.bincount(flat, weights=w.ravel(), minlength=rows * size)

    if np.iscomplexobj(values):
        out = count(values.real) + 1j * count(values.imag)
    else:
        out = count(values)
    return out.astype(np.result_type(g.dtype, np.float32), copy=False).reshape(batch + (size,))


scatter_p = primitive(_scatter_raw)
defvjp(take_p, lambda g, ans, a, index: scatter_p(g, index, np.shape(a)[-1]), CONSTANT_ARG)
defvjp(scatter_p, lambda g, ans, h, index, size: take_p(g, index), CONSTANT_ARG, CONSTANT_ARG)


# ------------------------------------------------------------------ the extension, read from SciPy
@functools.lru_cache(maxsize=1024)
def _extension(n: int, size: int, mode: str, origin: int) -> tuple:
    """Where each sample of the extended line comes from, for SciPy's 1-D correlation.

    Returns ``(start, border, fold, outside)``: extended position ``k`` holds
    ``x[k - start]`` for ``start <= k < start + n``; the positions ``border``
    hold the input samples ``fold.argmax(1)`` (``fold`` is the 0/1 matrix
    mapping their cotangents back onto the input), and ``outside`` marks the
    positions that hold ``cval``.
    """
    line = np.arange(n, dtype=np.float64)
    src = np.full(n + size - 1, -2.0)
    # One-hot weights at tap j read extended positions j .. j + n - 1; taps n apart cover them all.
    for j in sorted(set(range(0, size, max(n, 1))) | {size - 1}):
        taps = np.zeros(size)
        taps[j] = 1.0
        src[j : j + n] = _sp_correlate1d(line, taps, mode=mode, cval=-1.0, origin=origin)
    src = src.astype(np.intp)
    start = size // 2 + origin
    if not np.array_equal(src[start : start + n], np.arange(n)):  # SciPy changed how it extends lines
        raise AssertionError(f"scipy.ndimage's {mode!r} extension is not the identity inside the line")
    positions = np.arange(n + size - 1)
    border = positions[((positions < start) | (positions >= start + n)) & (src >= 0)]
    fold = np.zeros((border.size, n))
    fold[np.arange(border.size), src[border]] = 1.0
    outside = src < 0
    for a in (border, fold, outside):
        a.flags.writeable = False
    return start, border, fold, outside


def _fold_back(ge: Any, axis: int, n: int, size: int, mode: str, origin: int) -> Any:
    """Transpose of the extension along ``axis``: ``n + size - 1`` samples onto ``n``."""
    start, border, fold, _ = _extension(n, size, mode, origin)
    last = np.moveaxis(ge, axis, -1) if axis != -1 else ge
    out = last[..., start : start + n]
    if border.size:
        # Each border sample adds onto the one input sample it copies (a scatter-add).
        out = out + scatter_p(take_p(last, border), fold.argmax(axis=1), n)
    return np.moveaxis(out, -1, axis) if axis != -1 else out


def _extend(x: Any, axis: int, size: int, mode: str, origin: int, cval: Any) -> Any:
    """``x`` extended along ``axis`` exactly as SciPy extends it (``n + size - 1`` samples)."""
    n = np.shape(x)[axis]
    start, border, fold, outside = _extension(n, size, mode, origin)
    src = np.full(n + size - 1, 0, dtype=np.intp)
    src[start : start + n] = np.arange(n)
    if border.size:
        src[border] = fold.argmax(axis=1)
    last = np.moveaxis(x, axis, -1) if axis != -1 else x
    ext = take_p(last, src)
    if outside.any():
        ext = np.where(outside, cval, ext)
    return np.moveaxis(ext, -1, axis) if axis != -1 else ext


# ------------------------------------------------------------------ 1-D correlation
def _correlate1d_raw(x, w, cval, axis, mode, origin, dtype):
    return _sp_correlate1d(x, w, axis, dtype, mode, cval, origin)


correlate1d_p = primitive(_correlate1d_raw)


def _full_convolve1d(g: Any, w: Any, axis: int) -> Any:
    """``ge[k] = sum_j w[j] g[k - j]`` along ``axis``: length ``n + size - 1``."""
    size = np.shape(w)[0]
    n = np.shape(g)[axis]
    padded = _zero_pad(g, axis, size - 1, size - 1)
    out = correlate1d_p(padded, w[::-1], 0.0, axis, "constant", 0, None)
    return out[_axis_slice(axis, size // 2, size // 2 + n + size - 1)]


def _correlate1d_vjp_x(g, ans, x, w, cval, axis, mode, origin, dtype):
    n, size = np.shape(x)[axis], np.shape(w)[0]
    return _fold_back(_full_convolve1d(g, w, axis), axis, n, size, mode, origin)


def _correlate1d_vjp_w(g, ans, x, w, cval, axis, mode, origin, dtype):
    n, size = np.shape(x)[axis], np.shape(w)[0]
    xe = np.moveaxis(_extend(x, axis, size, mode, origin, cval), axis, -1)
    gl = np.moveaxis(g, axis, -1)
    inner = _inner_axes(np.ndim(x))
    return np.stack([np.sum(gl * xe[..., j : j + n], axis=inner) for j in range(size)], axis=-1)


def _correlate1d_vjp_cval(g, ans, x, w, cval, axis, mode, origin, dtype):
    # dy/dcval: the filter applied to zeros extended by ones.
    profile = correlate1d_p(np.zeros(np.shape(x), dtype=np.result_type(unwrap_above(g, 0))), w, 1.0, axis, mode, origin, None)
    return np.sum(g * profile, axis=_inner_axes(np.ndim(x)))


defvjp(
    correlate1d_p,
    _correlate1d_vjp_x,
    _correlate1d_vjp_w,
    _correlate1d_vjp_cval,
    CONSTANT_ARG,
    CONSTANT_ARG,
    CONSTANT_ARG,
    CONSTANT_ARG,
    note="exact adjoint: full convolution, then the boundary extension folded back (read from SciPy)",
)


def _via_real_parts(real_filter: Callable[..., Any], x: Any, w: Any, cval: Any, dtype: np.dtype) -> Any:
    """SciPy's complex filtering: real filters of the real and imaginary parts (weights already conjugated)."""
    cx, cw = np.iscomplexobj(strip(x)), np.iscomplexobj(strip(w))
    if cx and cw:
        re = real_filter(np.real(x), np.real(w), np.real(cval)) - real_filter(np.imag(x), np.imag(w), np.imag(cval))
        im = real_filter(np.real(x), np.imag(w), np.real(cval)) + real_filter(np.imag(x), np.real(w), np.imag(cval))
    elif cx:
        re = real_filter(np.real(x), w, np.real(cval))
        im = real_filter(np.imag(x), w, np.imag(cval))
    else:
        if np.iscomplexobj(strip(cval)):
            raise ValueError("Cannot provide a complex-valued cval when the input is real.")
        re = real_filter(x, np.real(w), cval)
        im = real_filter(x, np.imag(w), cval)
    return _cast(re + 1j * im, dtype)


def _correlate1d(input, weights, axis=-1, output=None, mode="reflect", cval=0.0, origin=0):
    x, w = _as_array(input), _as_array(weights)
    axis, mode, origin = (_constant("correlate1d", k, v) for k, v in (("axis", axis), ("mode", mode), ("origin", origin)))
    complex_case = np.iscomplexobj(strip(x)) or np.iscomplexobj(strip(w))
    dtype = _output_dtype("correlate1d", output, strip(x), complex_output=complex_case)
    if np.ndim(w) != 1 or np.shape(w)[0] < 1:
        raise RuntimeError("no filter weights given")
    axis = operator.index(axis)
    ndim = np.ndim(x)
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(axis, ndim)
    axis = axis - ndim if axis >= 0 else axis
    if complex_case:
        if np.iscomplexobj(strip(w)):
            w = np.conjugate(w)

        def real_filter(a, b, c):
            return _correlate1d(a, b, axis, None, mode, c, origin)

        return _via_real_parts(real_filter, x, w, cval, dtype)
    if np.result_type(unwrap_above(w, 0)) != np.float64:
        w = w.astype(np.float64)
    return correlate1d_p(x, w, cval, axis, mode, origin, dtype if output is not None else None)


def _convolve1d(input, weights, axis=-1, output=None, mode="reflect", cval=0.0, origin=0):
    w = _as_array(weights)[::-1]
    origin = -operator.index(_constant("convolve1d", "origin", origin))
    if not np.shape(w)[0] & 1:
        origin -= 1
    if np.iscomplexobj(strip(w)):
        w = np.conjugate(w)  # undone by correlate1d's conjugation, as in SciPy
    return _correlate1d(input, w, axis, output, mode, cval, origin)


defcomposite(intercepted(_nd.correlate1d), _correlate1d)
defcomposite(intercepted(_nd.convolve1d), _convolve1d)


# ------------------------------------------------------------------ n-D correlation
def _correlate_raw(x, w, cval, mode, origins, dtype):
    return _sp_correlate(x, w, dtype, mode, cval, list(origins))


correlate_p = primitive(_correlate_raw)


def _correlate_vjp_x(g, ans, x, w, cval, mode, origins, dtype):
    nb = np.ndim(g) - np.ndim(x)
    shape, wshape = np.shape(x), np.shape(w)
    padded = g
    for k, s in enumerate(wshape):
        padded = _zero_pad(padded, k - len(wshape), s - 1, s - 1)
    flipped = np.flip(w, axis=tuple(range(np.ndim(w)))).reshape((1,) * nb + wshape)
    full = correlate_p(padded, flipped, 0.0, "constant", (0,) * (nb + len(wshape)), None)
    crop = (Ellipsis,) + tuple(slice(s // 2, s // 2 + n + s - 1) for n, s in zip(shape, wshape))
    ge = full[crop]
    for k, (n, s, o) in enumerate(zip(shape, wshape, origins)):
        if s > 1 or o != 0:
            ge = _fold_back(ge, k - len(shape), n, s, mode, o)
    return ge


def _correlate_vjp_w(g, ans, x, w, cval, mode, origins, dtype):
    shape, wshape = np.shape(x), np.shape(w)
    xe = x
    for k, (s, o) in enumerate(zip(wshape, origins)):
        xe = _extend(xe, k - len(shape), s, mode, o, cval)
    inner = _inner_axes(len(shape))
    terms = []
    for offset in np.ndindex(*wshape):
        window = xe[(Ellipsis,) + tuple(slice(j, j + n) for j, n in zip(offset, shape))]
        terms.append(np.sum(g * window, axis=inner))
    nb = np.ndim(g) - len(shape)
    return np.stack(terms, axis=-1).reshape(np.shape(g)[:nb] + wshape)


def _correlate_vjp_cval(g, ans, x, w, cval, mode, origins, dtype):
    profile = correlate_p(np.zeros(np.shape(x), dtype=np.result_type(unwrap_above(g, 0))), w, 1.0, mode, origins, None)
    return np.sum(g * profile, axis=_inner_axes(np.ndim(x)))


defvjp(
    correlate_p,
    _correlate_vjp_x,
    _correlate_vjp_w,
    _correlate_vjp_cval,
    CONSTANT_ARG,
    CONSTANT_ARG,
    CONSTANT_ARG,
    note="exact adjoint: full n-D convolution, then each axis's extension folded back (read from SciPy)",
)


def _correlate_or_convolve(name, input, weights, output, mode, cval, origin, convolution, axes):
    x, w = _as_array(input), _as_array(weights)
    for arg, value in (("mode", mode), ("origin", origin), ("axes", axes)):
        _constant(name, arg, value)
    complex_case = np.iscomplexobj(strip(x)) or np.iscomplexobj(strip(w))
    if complex_case:
        dtype = _output_dtype(name, output, strip(x), complex_output=True)
        if np.iscomplexobj(strip(w)) and not convolution:
            w = np.conjugate(w)

        def real_filter(a, b, c):
            return _correlate_or_convolve(name, a, b, None, mode, c, origin, convolution, axes)

        return _via_real_parts(real_filter, x, w, cval, dtype)
    dtype = _output_dtype(name, output, strip(x))
    ndim = np.ndim(x)
    axes = _ni_support._check_axes(axes, ndim)
    if np.result_type(unwrap_above(w, 0)) != np.float64:
        w = w.astype(np.float64)
    if len(axes) < ndim:
        if np.ndim(w) != len(axes):
            raise RuntimeError(f"weights.ndim ({np.ndim(w)}) must match len(axes) ({len(axes)})")
        w = np.expand_dims(w, tuple(a for a in range(ndim) if a not in axes))
    origins = _sf._expand_origin(ndim, axes, origin)
    if np.ndim(w) != ndim or 0 in np.shape(w):
        raise RuntimeError(f"weights.ndim ({np.ndim(w)}) must match len(axes) ({len(axes)})")
    if not isinstance(mode, str):
        raise RuntimeError("A sequence of modes is not supported")
    if convolution:
        w = np.flip(w, axis=tuple(range(ndim)))
        origins = [-o - (0 if s & 1 else 1) for o, s in zip(origins, np.shape(w))]
    for o, s in zip(origins, np.shape(w)):
        if _sf._invalid_origin(o, s):
            raise ValueError(
                "Invalid origin; origin must satisfy -(weights.shape[k] // 2) <= origin[k] <= (weights.shape[k]-1) // 2"
            )
    return correlate_p(x, w, cval, mode, tuple(int(o) for o in origins), dtype if output is not None else None)


def _correlate(input, weights, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None):
    return _correlate_or_convolve("correlate", input, weights, output, mode, cval, origin, False, axes)


def _convolve(input, weights, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None):
    return _correlate_or_convolve("convolve", input, weights, output, mode, cval, origin, True, axes)


defcomposite(intercepted(_nd.correlate), _correlate)
defcomposite(intercepted(_nd.convolve), _convolve)


# ------------------------------------------------------------------ running mean
def _uniform1d_raw(x, cval, size, axis, mode, origin, dtype):
    return _sp_uniform_filter1d(x, size, axis, dtype, mode, cval, origin)


uniform1d_p = primitive(_uniform1d_raw)


def _uniform_weights(size: int, like: Any) -> np.ndarray:
    return np.full(size, 1.0 / size, dtype=np.result_type(unwrap_above(like, 0), np.float64))


def _uniform1d_vjp_x(g, ans, x, cval, size, axis, mode, origin, dtype):
    # SciPy's running sum is the correlation with `size` equal weights 1/size.
    n = np.shape(x)[axis]
    return _fold_back(_full_convolve1d(g, _uniform_weights(size, g), axis), axis, n, size, mode, origin)


def _uniform1d_vjp_cval(g, ans, x, cval, size, axis, mode, origin, dtype):
    profile = uniform1d_p(np.zeros(np.shape(x)), 1.0, size, axis, mode, origin, None)
    return np.sum(g * profile, axis=_inner_axes(np.ndim(x)))


defvjp(
    uniform1d_p,
    _uniform1d_vjp_x,
    _uniform1d_vjp_cval,
    CONSTANT_ARG,
    CONSTANT_ARG,
    CONSTANT_ARG,
    CONSTANT_ARG,
    CONSTANT_ARG,
    note="exact adjoint of the running mean (equal weights 1/size), boundary folded back",
)


def _uniform_filter1d(input, size, axis=-1, output=None, mode="reflect", cval=0.0, origin=0):
    x = _as_array(input)
    size, axis, mode, origin = (
        _constant("uniform_filter1d", k, v) for k, v in (("size", size), ("axis", axis), ("mode", mode), ("origin", origin))
    )
    ndim = np.ndim(x)
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(axis, ndim)
    axis = axis - ndim if axis >= 0 else axis
    if size < 1:
        raise RuntimeError("incorrect filter size")
    if size // 2 + origin < 0 or size // 2 + origin >= size:
        raise ValueError("invalid origin")
    if np.iscomplexobj(strip(x)):
        dtype = _output_dtype("uniform_filter1d", output, strip(x), complex_output=True)
        re = uniform1d_p(np.real(x), np.real(cval), size, axis, mode, origin, None)
        im = uniform1d_p(np.imag(x), np.imag(cval), size, axis, mode, origin, None)
        return _cast(re + 1j * im, dtype)
    dtype = _output_dtype("uniform_filter1d", output, strip(x))
    return uniform1d_p(x, cval, int(size), axis, mode, origin, dtype if output is not None else None)


def _uniform_filter(input, size=3, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None):
    x = _as_array(input)
    for arg, value in (("size", size), ("mode", mode), ("origin", origin), ("axes", axes)):
        _constant("uniform_filter", arg, value)
    dtype = _output_dtype("uniform_filter", output, strip(x), complex_output=np.iscomplexobj(strip(x)))
    axes = _ni_support._check_axes(axes, np.ndim(x))
    sizes = _ni_support._normalize_sequence(size, len(axes))
    origins = _ni_support._normalize_sequence(origin, len(axes))
    modes = _ni_support._normalize_sequence(mode, len(axes))
    passes = [(axes[i], sizes[i], origins[i], modes[i]) for i in range(len(axes)) if sizes[i] > 1]
    if not passes:
        return _copy_as(x, dtype)
    y = x
    for axis, size_, origin_, mode_ in passes:
        y = _uniform_filter1d(y, int(size_), axis, dtype, mode_, cval, origin_)
    return y


def _copy_as(x: Any, dtype: np.dtype) -> Any:
    return np.copy(x) if np.result_type(unwrap_above(x, 0)) == dtype else x.astype(dtype)


defcomposite(intercepted(_nd.uniform_filter1d), _uniform_filter1d)
defcomposite(intercepted(_nd.uniform_filter), _uniform_filter)


# ------------------------------------------------------------------ Gaussian filters
def _gaussian_kernel(sigma: Any, order: int, radius: int) -> Any:
    """SciPy's Gaussian (derivative) kernel, traced in ``sigma``: ``q(x) * phi(x)``.

    ``phi`` is the normalised Gaussian on ``-radius .. radius`` and ``q`` the polynomial
    that SciPy builds by applying ``D + P`` (``D``: x-derivative, ``P``: times ``-x/sigma^2``)
    ``order`` times to 1.
    """
    x = np.arange(-radius, radius + 1, dtype=np.float64)
    sigma2 = sigma * sigma
    phi = np.exp((-0.5 * x * x) / sigma2)
    phi = phi / np.sum(phi)
    if order == 0:
        return phi
    powers = np.arange(order + 1)
    q = np.zeros(order + 1)
    q[0] = 1.0
    step = np.diag(powers[1:].astype(np.float64), 1) + np.diag(np.ones(order), -1) * (-1.0 / sigma2)
    for _ in range(order):
        q = step @ q
    return (x[:, None] ** powers) @ q * phi


def _sigma_values(sigma: Any, n: int) -> list:
    """``sigma`` as one entry per axis (entries of a traced sequence stay traced)."""
    if _is_traced(sigma):
        sigma = _as_array(sigma)
        return [sigma] * n if np.ndim(sigma) == 0 else [sigma[i] for i in range(np.shape(sigma)[0])]
    return list(_ni_support._normalize_sequence(sigma, n))


def _gaussian_filter1d(input, sigma, axis=-1, order=0, output=None, mode="reflect", cval=0.0, truncate=4.0, *, radius=None):
    for arg, value in (("order", order), ("truncate", truncate), ("radius", radius)):
        _constant("gaussian_filter1d", arg, value)
    sd = float(strip(sigma))
    lw = int(truncate * sd + 0.5) if radius is None else radius
    if not isinstance(lw, (int, np.integer)) or lw < 0:
        raise ValueError("Radius must be a nonnegative integer.")
    weights = _sf._gaussian_kernel1d(sd, order, lw)[::-1]
    if _is_traced(sigma):
        # SciPy's weights, carrying the derivative of the kernel in sigma (the radius is
        # piecewise constant in sigma: no derivative there).
        weights = _with_value(np.ascontiguousarray(weights), _gaussian_kernel(sigma, order, lw)[::-1])
    return _correlate1d(input, weights, axis, output, mode, cval, 0)


def _gaussian_filter(input, sigma, order=0, output=None, mode="reflect", cval=0.0, truncate=4.0, *, radius=None, axes=None):
    x = _as_array(input)
    for arg, value in (("order", order), ("truncate", truncate), ("radius", radius), ("axes", axes)):
        _constant("gaussian_filter", arg, value)
    dtype = _output_dtype("gaussian_filter", output, strip(x))
    axes = _ni_support._check_axes(axes, np.ndim(x))
    n = len(axes)
    orders = _ni_support._normalize_sequence(order, n)
    sigmas = _sigma_values(sigma, n)
    modes = _ni_support._normalize_sequence(mode, n)
    radii = _ni_support._normalize_sequence(radius, n)
    passes = [(axes[i], sigmas[i], orders[i], modes[i], radii[i]) for i in range(n) if strip(sigmas[i]) > 1e-15]
    if not passes:
        return _copy_as(x, dtype)
    y = x
    for axis, sigma_, order_, mode_, radius_ in passes:
        # SciPy stores every pass in the output's dtype.
        y = _gaussian_filter1d(y, sigma_, axis, order_, dtype, mode_, cval, truncate, radius=radius_)
    return y


defcomposite(intercepted(_nd.gaussian_filter1d), _gaussian_filter1d)
defcomposite(intercepted(_nd.gaussian_filter), _gaussian_filter)


# ------------------------------------------------------------------ derivative filters
def _edge_filter(name: str, smooth: list) -> Callable[..., Any]:
    def impl(input, axis=-1, output=None, mode="reflect", cval=0.0):
        x = _as_array(input)
        for arg, value in (("axis", axis), ("mode", mode)):
            _constant(name, arg, value)
        ndim = np.ndim(x)
        axis = operator.index(axis)
        if not -ndim <= axis < ndim:
            raise np.exceptions.AxisError(axis, ndim)
        axis %= ndim
        dtype = _output_dtype(name, output, strip(x))
        modes = _ni_support._normalize_sequence(mode, ndim)
        y = _correlate1d(x, [-1, 0, 1], axis, dtype, modes[axis], cval, 0)
        for other in range(ndim):
            if other != axis:
                y = _correlate1d(y, smooth, other, dtype, modes[other], cval, 0)
        return y

    impl.__name__ = name
    return impl


defcomposite(intercepted(_nd.sobel), _edge_filter("sobel", [1, 2, 1]))
defcomposite(intercepted(_nd.prewitt), _edge_filter("prewitt", [1, 1, 1]))


def _generic_laplace(input, derivative2, output=None, mode="reflect", cval=0.0, extra_arguments=(), extra_keywords=None, *, axes=None):
    x = _as_array(input)
    extra_keywords = {} if extra_keywords is None else extra_keywords
    dtype = _output_dtype("generic_laplace", output, strip(x))
    axes = _ni_support._check_axes(axes, np.ndim(x))
    if not axes:
        return _copy_as(x, dtype)
    modes = _ni_support._normalize_sequence(mode, len(axes))
    # SciPy hands the first call its output array and the others its dtype: here every call gets the dtype.
    y = _cast(derivative2(x, axes[0], dtype, modes[0], cval, *extra_arguments, **extra_keywords), dtype)
    for i in range(1, len(axes)):
        y = _cast(y + derivative2(x, axes[i], dtype, modes[i], cval, *extra_arguments, **extra_keywords), dtype)
    return y


def _laplace(input, output=None, mode="reflect", cval=0.0, *, axes=None):
    def derivative2(x, axis, output, mode, cval):
        return _correlate1d(x, [1, -2, 1], axis, output, mode, cval, 0)

    return _generic_laplace(input, derivative2, output, mode, cval, axes=axes)


def _sigma_per_axis(sigma: Any, axes: list, ndim: int) -> list:
    sigmas = _sigma_values(sigma, len(axes))
    if len(axes) < ndim:
        full = [0] * ndim
        for s, a in zip(sigmas, axes):
            full[a] = s
        sigmas = full
    return sigmas


def _gaussian_derivative(power: int) -> Callable[..., Any]:
    def derivative(x, axis, output, mode, cval, sigma, **kwargs):
        order = [0] * np.ndim(x)
        order[axis] = power
        return _gaussian_filter(x, sigma, order, output, mode, cval, **kwargs)

    return derivative


def _gaussian_laplace(input, sigma, output=None, mode="reflect", cval=0.0, *, axes=None, **kwargs):
    x = _as_array(input)
    axes = _ni_support._check_axes(axes, np.ndim(x))
    sigmas = _sigma_per_axis(sigma, axes, np.ndim(x))
    return _generic_laplace(x, _gaussian_derivative(2), output, mode, cval, extra_arguments=(sigmas,), extra_keywords=kwargs, axes=axes)


def _generic_gradient_magnitude(input, derivative, output=None, mode="reflect", cval=0.0, extra_arguments=(), extra_keywords=None, *, axes=None):
    x = _as_array(input)
    extra_keywords = {} if extra_keywords is None else extra_keywords
    dtype = _output_dtype("generic_gradient_magnitude", output, strip(x))
    axes = _ni_support._check_axes(axes, np.ndim(x))
    if not axes:
        return _copy_as(x, dtype)
    modes = _ni_support._normalize_sequence(mode, len(axes))
    d = _cast(derivative(x, axes[0], dtype, modes[0], cval, *extra_arguments, **extra_keywords), dtype)
    total = d * d
    for i in range(1, len(axes)):
        d = _cast(derivative(x, axes[i], dtype, modes[i], cval, *extra_arguments, **extra_keywords), dtype)
        total = _cast(total + d * d, dtype)
    # Where the magnitude is 0 (a structural zero, e.g. a corner in 'mirror' mode) the
    # subgradient 0 is taken, as tapegrad's norms do at the zero vector.
    positive = strip(total) > 0
    return _cast(np.where(positive, np.sqrt(np.where(positive, total, 1.0)), 0.0), dtype)


def _gaussian_gradient_magnitude(input, sigma, output=None, mode="reflect", cval=0.0, *, axes=None, **kwargs):
    x = _as_array(input)
    axes = _ni_support._check_axes(axes, np.ndim(x))
    sigmas = _sigma_per_axis(sigma, axes, np.ndim(x))
    return _generic_gradient_magnitude(
        x, _gaussian_derivative(1), output, mode, cval, extra_arguments=(sigmas,), extra_keywords=kwargs, axes=axes
    )


defcomposite(intercepted(_nd.generic_laplace), _generic_laplace)
defcomposite(intercepted(_nd.laplace), _laplace)
defcomposite(intercepted(_nd.gaussian_laplace), _gaussian_laplace)
defcomposite(intercepted(_nd.generic_gradient_magnitude), _generic_gradient_magnitude)
defcomposite(
    intercepted(_nd.gaussian_gradient_magnitude),
    _gaussian_gradient_magnitude,
    note="sqrt of a sum of squares: subgradient 0 where the magnitude is 0",
)


# ================================================================== interpolation
# map_coordinates, zoom, shift and affine_transform are, as SciPy computes them,
#   prefilter (spline_filter, linear: per axis, a matrix read from SciPy), then
#   sum over the taps of prod_axis beta_order(cc - tap) * coefficient[mapped tap],
# with SciPy's boundary rules (ni_interpolation.c) for the point and its taps.
# The composite below computes that sum with traced NumPy calls: a gather of the
# coefficients (its VJP is the scatter-add, the exact adjoint in the input) times
# B-spline weights that are polynomials of the coordinates (their derivative).
# The value returned is SciPy's own, bit for bit; the traced sum only lends it
# its derivatives (value + (traced - value_of_traced), whose second term is 0).
_sp_spline_filter1d = _nd.spline_filter1d
_sp_map_coordinates = _nd.map_coordinates
_sp_zoom = _nd.zoom
_sp_shift = _nd.shift
_sp_affine_transform = _nd.affine_transform

#: Longest line whose spline prefilter is differentiated (its dense n x n matrix is kept).
MAX_SPLINE_LINE = 4096


@functools.lru_cache(maxsize=8)  # up to 8 x 128 MiB at the largest line length
def _spline_matrix(n: int, order: int, mode: str) -> np.ndarray:
    """The matrix of SciPy's 1-D spline prefilter on ``n`` samples (column j: the filter of e_j)."""
    m = _sp_spline_filter1d(np.eye(n), order, axis=0, output=np.float64, mode=mode)
    m.flags.writeable = False
    return m


def _spline1d_raw(x, order, axis, mode):
    return _sp_spline_filter1d(x, order, axis, np.float64, mode)


spline1d_p = primitive(_spline1d_raw)


def _spline1d_vjp(g, ans, x, order, axis, mode):
    n = np.shape(x)[axis]
    m = _spline_matrix(n, order, mode)
    last = np.moveaxis(g, axis, -1) @ m.astype(np.result_type(unwrap_above(g, 0), np.float64), copy=False)
    return np.moveaxis(last, -1, axis)


defvjp(spline1d_p, _spline1d_vjp, CONSTANT_ARG, CONSTANT_ARG, CONSTANT_ARG, note="transpose of SciPy's prefilter matrix")


def _spline_filter1d(input, order=3, axis=-1, output=np.float64, mode="mirror"):
    for arg, value in (("order", order), ("axis", axis), ("mode", mode)):
        _constant("spline_filter1d", arg, value)
    if order < 0 or order > 5:
        raise RuntimeError("spline order not supported")
    x = _as_array(input)
    if np.iscomplexobj(strip(x)):
        dtype = _output_dtype("spline_filter1d", output, strip(x), complex_output=True)
        re = _spline_filter1d(np.real(x), order, axis, np.float64, mode)
        im = _spline_filter1d(np.imag(x), order, axis, np.float64, mode)
        return _cast(re + 1j * im, dtype)
    dtype = _output_dtype("spline_filter1d", output, strip(x))
    if order in (0, 1):
        return _copy_as(x, dtype)
    ndim = np.ndim(x)
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(axis, ndim)
    axis = axis % ndim - ndim  # negative: the VJP's cotangent has leading batch axes
    n = np.shape(x)[axis]
    if n > MAX_SPLINE_LINE:
        raise NonDifferentiableArgumentError(
            f"scipy.ndimage spline prefilter: tapegrad differentiates lines of at most {MAX_SPLINE_LINE} samples "
            f"(this one has {n}): its adjoint is the transposed {n} x {n} prefilter matrix. "
            "Use order=1 or prefilter=False, or raise tapegrad.rules.scipy_ndimage.MAX_SPLINE_LINE."
        )
    return _cast(spline1d_p(x, order, axis, mode), dtype)


def _spline_filter(input, order=3, output=np.float64, mode="mirror"):
    _constant("spline_filter", "order", order)
    if order < 2 or order > 5:
        raise RuntimeError("spline order not supported")
    x = _as_array(input)
    complex_output = np.iscomplexobj(strip(x))
    dtype = _output_dtype("spline_filter", output, strip(x), complex_output=complex_output)
    if np.ndim(x) == 0:
        return _copy_as(x, dtype)
    y = x
    for axis in range(np.ndim(x)):
        y = _spline_filter1d(y, order, axis, dtype, mode)
    return y


defcomposite(intercepted(_nd.spline_filter1d), _spline_filter1d)
defcomposite(intercepted(_nd.spline_filter), _spline_filter)


# ------------------------------------------------------------------ SciPy's boundary rules
_MODE_CODES = {"nearest": 0, "wrap": 1, "reflect": 2, "grid-mirror": 2, "mirror": 3, "constant": 4, "grid-wrap": 5, "grid-constant": 6}
_NEAREST, _WRAP, _REFLECT, _MIRROR, _CONSTANT, _GRID_WRAP, _GRID_CONSTANT = 0, 1, 2, 3, 4, 5, 6


def _mode_code(mode: Any) -> int:
    try:
        return _MODE_CODES[mode]
    except (KeyError, TypeError):
        return _ni_support._extend_mode_to_code(mode)  # SciPy's own error


def _map_coordinate(x: np.ndarray, n: int, mode: int) -> tuple:
    """SciPy's ``map_coordinate`` (ni_interpolation.c) on an array: the mapped value and its slope (+1, -1, 0).

    A mapped value of -1 with slope 0 means "outside, use cval" ('constant').
    """
    x = np.array(x, dtype=np.float64)
    slope = np.ones_like(x)
    low, high = x < 0, x > n - 1
    trunc = np.trunc
    if mode in (_NEAREST, _CONSTANT):
        x[low] = 0 if mode == _NEAREST else -1
        x[high] = n - 1 if mode == _NEAREST else -1
        slope[low | high] = 0.0
        return x, slope
    if n <= 1:
        x[low | high] = 0.0
        slope[low | high] = 0.0
        return x, slope
    v = x[low]
    s = np.ones_like(v)
    if mode == _MIRROR:
        sz2 = 2 * n - 2
        v = sz2 * trunc(-v / sz2) + v
        flip = ~(v <= 1 - n)
        v = np.where(flip, -v, v + sz2)
        s = np.where(flip, -1.0, 1.0)
    elif mode == _REFLECT:
        sz2 = 2 * n
        far = v < -sz2
        v = np.where(far, sz2 * trunc(-v / sz2) + v, v)
        flip = ~(v < -n)
        v = np.where(flip, np.where(v > -1e-15, 1e-15, -v) - 1, v + sz2)
        s = np.where(flip, -1.0, 1.0)
    elif mode == _WRAP:
        sz = n - 1
        v = v + sz * (trunc(-v / sz) + 1)
    elif mode == _GRID_WRAP:
        v = v + n * (trunc((-1 - v) / n) + 1)
    x[low], slope[low] = v, s
    v = x[high]
    s = np.ones_like(v)
    if mode == _MIRROR:
        sz2 = 2 * n - 2
        v = v - sz2 * trunc(v / sz2)
        flip = v >= n
        v = np.where(flip, sz2 - v, v)
        s = np.where(flip, -1.0, 1.0)
    elif mode == _REFLECT:
        sz2 = 2 * n
        v = v - sz2 * trunc(v / sz2)
        flip = v >= n
        v = np.where(flip, sz2 - v - 1, v)
        s = np.where(flip, -1.0, 1.0)
    elif mode == _WRAP:
        sz = n - 1
        v = v - sz * trunc(v / sz)
    elif mode == _GRID_WRAP:
        v = v - n * trunc(v / n)
    x[high], slope[high] = v, s
    return x, slope


def _bspline(order: int, t: Any) -> Any:
    """The centred cardinal B-spline of degree ``order`` at ``t`` (|t| below its half support)."""
    u = np.abs(t)
    ur = np.abs(strip(t))
    # The even powers of the centre piece are written in t, not |t|: at t = 0 (a coordinate on a
    # grid point) |t| has the derivative 0, so |t| * |t| would lose its second derivative 2.
    t2 = t * t
    if order == 0:
        return np.ones_like(u)
    if order == 1:
        return 1.0 - u
    if order == 2:
        return np.where(ur < 0.5, 0.75 - t2, 0.5 * (1.5 - u) ** 2)
    if order == 3:
        return np.where(ur < 1.0, 2.0 / 3.0 - t2 + 0.5 * u**3, (2.0 - u) ** 3 / 6.0)
    if order == 4:
        inner = 115.0 / 192.0 - 0.625 * t2 + 0.25 * t2 * t2
        middle = (55.0 + 20.0 * u - 120.0 * u * u + 80.0 * u**3 - 16.0 * u**4) / 96.0
        outer = (2.5 - u) ** 4 / 24.0
        return np.where(ur < 0.5, inner, np.where(ur < 1.5, middle, outer))
    inner = 11.0 / 20.0 - 0.5 * t2 + 0.25 * t2 * t2 - u**5 / 12.0
    middle = 17.0 / 40.0 + 0.625 * u - 1.75 * u * u + 1.25 * u**3 - 0.375 * u**4 + u**5 / 24.0
    outer = (3.0 - u) ** 5 / 120.0
    return np.where(ur < 1.0, inner, np.where(ur < 2.0, middle, outer))


def _interpolate(coef: Any, coords: list, order: int, mode: str, cval: Any, npad: int) -> Any:
    """SciPy's spline interpolation of ``coef`` (already prefiltered) at ``coords``, traced.

    ``coords`` holds one array per axis of ``coef`` (all of one shape).  Values agree
    with SciPy's to rounding; derivatives in ``coef``, ``coords`` and ``cval`` are exact.
    """
    code = _mode_code(mode)
    shape = np.shape(coef)
    taps = order + 1
    flat = 0
    weight = 1.0
    outside_tap = None  # 'grid-constant': taps that read cval
    outside_point = None  # 'constant': points that are cval
    strides = np.cumprod((1,) + shape[::-1])[-2::-1]
    spline_code = _MIRROR if code in (_CONSTANT, _WRAP) else code
    for k, (c, n) in enumerate(zip(coords, shape)):
        raw = np.asarray(strip(c), dtype=np.float64).ravel() + npad
        if code in (_GRID_CONSTANT, _NEAREST):
            cc_raw, slope = raw, np.ones_like(raw)
        else:
            cc_raw, slope = _map_coordinate(raw, n, code)
        if code == _CONSTANT:
            out = cc_raw <= -1.0
            outside_point = out if outside_point is None else (outside_point | out)
        # The traced coordinate: SciPy's mapped value, with the mapping's slope.
        cc = cc_raw
        if type(c) is Tracer:
            cc = cc_raw + slope * (np.reshape(c, (-1,)) - np.reshape(strip(c), (-1,)))
        start = np.floor(cc_raw) if order & 1 else np.floor(cc_raw + 0.5)
        start = start.astype(np.intp) - order // 2
        idx = start[:, None] + np.arange(taps)  # (points, taps) along this axis
        w = _bspline(order, cc[:, None] - idx) if order > 0 else np.ones(idx.shape)
        if code == _GRID_CONSTANT:
            out = (idx < 0) | (idx >= n)
            mapped = np.clip(idx, 0, n - 1)
        else:
            mapped = _map_coordinate(idx.astype(np.float64), n, spline_code)[0].astype(np.intp)
            if code == _CONSTANT:
                mapped = np.clip(mapped, 0, n - 1)  # points outside are replaced by cval below
            out = None
        # Combine with the axes before: (points, taps ** k) x (points, taps) -> (points, taps ** (k + 1)).
        expand = (slice(None), slice(None), None)
        flat = (np.reshape(flat, (len(raw), -1))[expand] if k else 0) + (mapped * strides[k])[:, None, :]
        flat = np.reshape(flat, (len(raw), -1))
        weight = w if k == 0 else np.reshape(np.reshape(weight, (len(raw), -1))[expand] * w[:, None, :], (len(raw), -1))
        if code == _GRID_CONSTANT:
            if outside_tap is None:
                outside_tap = out
            else:
                outside_tap = np.reshape(outside_tap[expand] | out[:, None, :], (len(raw), -1))
    values = take_p(np.reshape(coef, (-1,)), flat)
    if outside_tap is not None and outside_tap.any():
        values = np.where(outside_tap, cval, values)
    result = np.sum(weight * values, axis=-1)
    if outside_point is not None and outside_point.any():
        result = np.where(outside_point, cval, result)
    return np.reshape(result, np.shape(coords[0]))


def _prepad(x: Any, mode: str, cval: Any) -> tuple:
    if mode == "nearest":
        return np.pad(x, 12, mode="edge"), 12
    if mode == "grid-constant":
        return np.pad(x, 12, mode="constant", constant_values=cval), 12
    return x, 0


def _with_value(value: np.ndarray, traced: Any) -> Any:
    """SciPy's ``value``, carrying the derivatives of ``traced`` (which equals it to rounding)."""
    if not _is_traced(traced):
        return value
    return value + (traced - strip(traced)).astype(value.dtype)


def _interpolation(name: str, x: Any, coords_of: Callable[[Any], list], scipy_call: Callable[..., Any], order: int, mode: str, cval: Any, prefilter: bool, dtype: np.dtype) -> Any:
    """The traced interpolation shared by map_coordinates, zoom, shift and affine_transform."""
    if order > 1 and prefilter:
        padded, npad = _prepad(x, mode, cval)
        coef = _spline_filter(padded, order, np.float64, mode)
    else:
        coef, npad = x, 0
    value = np.asarray(scipy_call(strip(x), strip(cval)))
    traced = _interpolate(coef, coords_of(x), order, mode, cval, npad)
    return _with_value(value.astype(dtype, copy=False), traced)


def _check_order(order: Any) -> int:
    if order < 0 or order > 5:
        raise RuntimeError("spline order not supported")
    return int(order)


def _interp_complex(fun: Callable[..., Any], x: Any, cval: Any, dtype: np.dtype) -> Any:
    return _cast(fun(np.real(x), np.real(cval)) + 1j * fun(np.imag(x), np.imag(cval)), dtype)


def _map_coordinates(input, coordinates, output=None, order=3, mode="constant", cval=0.0, prefilter=True):
    for arg, value in (("order", order), ("mode", mode), ("prefilter", prefilter)):
        _constant("map_coordinates", arg, value)
    order = _check_order(order)
    x, coords = _as_array(input), _as_array(coordinates)
    if np.iscomplexobj(strip(coords)):
        raise TypeError("Complex type not supported")
    out_shape = np.shape(coords)[1:]
    if np.ndim(x) < 1 or len(out_shape) < 1:
        raise RuntimeError("input and output rank must be > 0")
    if np.shape(coords)[0] != np.ndim(x):
        raise RuntimeError("invalid shape for coordinate array")
    complex_output = np.iscomplexobj(strip(x))
    dtype = _output_dtype("map_coordinates", output, strip(x), complex_output=complex_output)
    if complex_output:
        return _interp_complex(lambda part, c: _map_coordinates(part, coords, None, order, mode, c, prefilter), x, cval, dtype)

    def scipy_call(raw, c):
        return _sp_map_coordinates(raw, strip(coords), dtype, order, mode, c, prefilter)

    return _interpolation("map_coordinates", x, lambda x: [coords[k] for k in range(np.ndim(x))], scipy_call, order, mode, cval, prefilter, dtype)


def _grid(shape: tuple) -> list:
    return [np.reshape(np.arange(n, dtype=np.float64), (-1,) + (1,) * (len(shape) - k - 1)) * np.ones(shape) for k, n in enumerate(shape)]


def _shift(input, shift, output=None, order=3, mode="constant", cval=0.0, prefilter=True):
    for arg, value in (("order", order), ("mode", mode), ("prefilter", prefilter)):
        _constant("shift", arg, value)
    order = _check_order(order)
    x = _as_array(input)
    if np.ndim(x) < 1:
        raise RuntimeError("input and output rank must be > 0")
    complex_output = np.iscomplexobj(strip(x))
    dtype = _output_dtype("shift", output, strip(x), complex_output=complex_output)
    if complex_output:
        return _interp_complex(lambda part, c: _shift(part, shift, None, order, mode, c, prefilter), x, cval, dtype)
    shifts = _as_array(shift)
    shifts = shifts * np.ones(np.ndim(x)) if np.ndim(shifts) == 0 else shifts
    if np.shape(shifts) != (np.ndim(x),):
        raise RuntimeError("sequence argument must have length equal to input rank")

    def coords_of(x):
        grid = _grid(np.shape(x))
        return [g + (-shifts[k]) for k, g in enumerate(grid)]  # SciPy adds the negated shift

    def scipy_call(raw, c):
        return _sp_shift(raw, strip(shifts), dtype, order, mode, c, prefilter)

    return _interpolation("shift", x, coords_of, scipy_call, order, mode, cval, prefilter, dtype)


def _zoom(input, zoom, output=None, order=3, mode="constant", cval=0.0, prefilter=True, *, grid_mode=False):
    # The output depends on `zoom` only through its (integer) shape: no derivative there.
    zoom = strip(zoom)
    for arg, value in (("order", order), ("mode", mode), ("prefilter", prefilter), ("grid_mode", grid_mode)):
        _constant("zoom", arg, value)
    order = _check_order(order)
    x = _as_array(input)
    if np.ndim(x) < 1:
        raise RuntimeError("input and output rank must be > 0")
    zooms = _ni_support._normalize_sequence(zoom, np.ndim(x))
    out_shape = tuple(int(round(i * z)) for i, z in zip(np.shape(x), zooms))
    complex_output = np.iscomplexobj(strip(x))
    dtype = _output_dtype("zoom", output, strip(x), complex_output=complex_output)
    if all(z == 1 for z in zooms) and prefilter:
        return _copy_as(x, dtype)
    if complex_output:
        return _interp_complex(lambda part, c: _zoom(part, zoom, None, order, mode, c, prefilter, grid_mode=grid_mode), x, cval, dtype)
    div = np.array(out_shape) - (0 if grid_mode else 1)
    num = np.array(np.shape(x)) - (0 if grid_mode else 1)
    factors = np.divide(num, div, out=np.ones(np.ndim(x)), where=div != 0)

    def coords_of(x):
        coords = []
        for k, (n, z) in enumerate(zip(out_shape, factors)):
            cc = np.arange(n, dtype=np.float64)
            cc = (cc + 0.5) * z - 0.5 if grid_mode else cc * z  # as ni_interpolation.c computes it
            coords.append(np.reshape(cc, (-1,) + (1,) * (len(out_shape) - k - 1)) * np.ones(out_shape))
        return coords

    def scipy_call(raw, c):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SciPy's advice on grid modes was given by the traced call
            return _sp_zoom(raw, zooms, dtype, order, mode, c, prefilter, grid_mode=grid_mode)

    return _interpolation("zoom", x, coords_of, scipy_call, order, mode, cval, prefilter, dtype)


def _affine_transform(input, matrix, offset=0.0, output_shape=None, output=None, order=3, mode="constant", cval=0.0, prefilter=True):
    for arg, value in (("order", order), ("mode", mode), ("prefilter", prefilter), ("output_shape", output_shape)):
        _constant("affine_transform", arg, value)
    order = _check_order(order)
    x = _as_array(input)
    ndim = np.ndim(x)
    out_shape = tuple(np.shape(x) if output_shape is None else output_shape)
    if ndim < 1 or len(out_shape) < 1:
        raise RuntimeError("input and output rank must be > 0")
    complex_output = np.iscomplexobj(strip(x))
    dtype = _output_dtype("affine_transform", output, strip(x), complex_output=complex_output)
    if complex_output:
        return _interp_complex(
            lambda part, c: _affine_transform(part, matrix, offset, out_shape, None, order, mode, c, prefilter), x, cval, dtype
        )
    m = _as_array(matrix)
    if np.result_type(unwrap_above(m, 0)) != np.float64:
        m = m.astype(np.float64)
    if np.ndim(m) not in (1, 2) or np.shape(m)[0] < 1:
        raise RuntimeError("no proper affine matrix provided")
    off = offset
    if np.ndim(m) == 2 and np.shape(m)[1] == ndim + 1 and np.shape(m)[0] in (ndim, ndim + 1):
        if np.shape(m)[0] == ndim + 1 and not np.all(strip(m)[ndim] == [0] * ndim + [1]):
            raise ValueError(
                f"Expected homogeneous transformation matrix with shape {np.shape(m)} for image shape "
                f"{np.shape(x)}, but bottom row was not equal to {[0] * ndim + [1]}"
            )
        off = m[:ndim, ndim]
        m = m[:ndim, :ndim]
    if np.shape(m)[0] != ndim:
        raise RuntimeError("affine matrix has wrong number of rows")
    if np.ndim(m) == 2 and np.shape(m)[1] != len(out_shape):
        raise RuntimeError("affine matrix has wrong number of columns")
    off = _as_array(off)
    off = off * np.ones(ndim) if np.ndim(off) == 0 else off
    if np.shape(off) != (ndim,):
        raise RuntimeError("sequence argument must have length equal to input rank")
    if np.ndim(m) == 1 and len(out_shape) != ndim:
        raise RuntimeError("affine matrix has wrong number of rows")

    def coords_of(x):
        grid = _grid(out_shape)
        if np.ndim(m) == 1:
            return [(grid[k] + off[k] / m[k]) * m[k] for k in range(ndim)]  # SciPy's zoom_shift path
        coords = []
        for h in range(ndim):
            c = off[h] + 0.0 * grid[0]
            for col in range(len(out_shape)):
                c = c + grid[col] * m[h, col]  # summed in ni_interpolation.c's order
            coords.append(c)
        return coords

    def scipy_call(raw, c):
        return _sp_affine_transform(raw, strip(m), strip(off), out_shape, dtype, order, mode, c, prefilter)

    return _interpolation("affine_transform", x, coords_of, scipy_call, order, mode, cval, prefilter, dtype)


defcomposite(intercepted(_nd.map_coordinates), _map_coordinates, note="in input, coordinates and cval; every order 0-5 and mode")
defcomposite(intercepted(_nd.shift), _shift, note="in input, shift and cval")
defcomposite(intercepted(_nd.zoom), _zoom, note="in input and cval (the zoom factor only sets the shape)")
defcomposite(intercepted(_nd.affine_transform), _affine_transform, note="in input, matrix, offset and cval")


# ================================================================== selection filters
# minimum/maximum/median/rank/percentile filters (and grey_erosion/grey_dilation, and
# scipy.signal.medfilt, which reach the same private functions) pick one sample of
# each window.  The value returned is SciPy's own; the derivative is that of the
# window samples equal to it (split equally between ties, tapegrad's convention
# for np.max), gathered from the extended input exactly as SciPy extends it.
_sp_rank_filter = _sf._rank_filter
_sp_min_or_max_filter = _sf._min_or_max_filter
_sp_min_or_max_1d = {True: _nd.minimum_filter1d, False: _nd.maximum_filter1d}


def _windows(x: Any, shape: tuple, positions: np.ndarray, origins: list, modes: list, cval: Any) -> Any:
    """The samples of every window, stacked on a last axis (one per footprint position)."""
    ndim = np.ndim(x)
    xe = x
    for k in range(ndim):
        if shape[k] > 1 or origins[k] != 0:
            xe = _extend(xe, k - ndim, shape[k], modes[k], origins[k], cval)
    n = np.shape(x)
    return np.stack([xe[(Ellipsis,) + tuple(slice(j, j + m) for j, m in zip(pos, n))] for pos in positions], axis=-1)


def _select(name: str, windows: Any, value: np.ndarray) -> Any:
    """SciPy's ``value``, with the derivative of the window samples equal to it (ties split)."""
    hit = strip(windows) == value[..., None]
    count = hit.sum(axis=-1)
    if np.any((count == 0) & ~np.isnan(value)):
        raise AssertionError(f"scipy.ndimage.{name}: a filtered value is none of its window's samples")
    traced = np.sum(np.where(hit, windows, 0.0), axis=-1) / np.maximum(count, 1)
    return _with_value(value, traced)


def _per_axis(mode: Any, ndim: int) -> list:
    return [mode] * ndim if isinstance(mode, str) else list(mode)


def _rank_filter(input, rank, size=None, footprint=None, output=None, mode="reflect", cval=0.0, origin=0, operation="rank", axes=None):
    name = {"rank": "rank_filter", "median": "median_filter", "percentile": "percentile_filter"}.get(operation, "rank_filter")
    for arg, value in (("rank", rank), ("size", size), ("footprint", footprint), ("mode", mode), ("origin", origin), ("axes", axes)):
        _constant(name, arg, value)
    x = _as_array(input)
    dtype = _output_dtype(name, output, strip(x))
    value = np.asarray(_sp_rank_filter(strip(x), rank, size, footprint, dtype, mode, strip(cval), origin, operation, axes))
    ndim = np.ndim(x)
    axes = _ni_support._check_axes(axes, ndim)
    if footprint is None:
        footprint = np.ones(_ni_support._normalize_sequence(size, len(axes)), dtype=bool)
    footprint = _sf._expand_footprint(ndim, axes, np.asarray(footprint, dtype=bool))
    origins = _sf._expand_origin(ndim, axes, origin)
    modes = _per_axis(_sf._expand_mode(ndim, axes, mode), ndim)
    return _select(name, _windows(x, footprint.shape, np.argwhere(footprint), origins, modes, cval), value)


def _min_or_max_filter(input, size, footprint, structure, output, mode, cval, origin, minimum, axes=None):
    name = "minimum_filter" if minimum else "maximum_filter"
    for arg, value in (("size", size), ("footprint", footprint), ("structure", structure), ("mode", mode), ("origin", origin), ("axes", axes)):
        _constant(name, arg, value)
    x = _as_array(input)
    dtype = _output_dtype(name, output, strip(x))
    value = np.asarray(_sp_min_or_max_filter(strip(x), size, footprint, structure, dtype, mode, strip(cval), origin, minimum, axes))
    ndim = np.ndim(x)
    axes = _ni_support._check_axes(axes, ndim)
    separable = structure is None and (footprint is None or np.asarray(footprint, dtype=bool).all())
    if separable:
        # SciPy runs 1-D filters axis by axis: so does the derivative, each pass its own selection.
        if footprint is not None:
            size = np.asarray(footprint).shape
        sizes = _ni_support._normalize_sequence(size, len(axes))
        origins = _ni_support._normalize_sequence(origin, len(axes))
        modes = _ni_support._normalize_sequence(mode, len(axes))
        y = x
        passes = [(axes[i], int(sizes[i]), origins[i], modes[i]) for i in range(len(axes)) if sizes[i] > 1]
        if not passes:
            return _copy_as(x, dtype)
        for axis, s, o, m in passes:
            y = _min_or_max_1d(name, y, s, axis, dtype, m, cval, o, minimum)
        return y
    fp = np.ones(np.shape(structure), bool) if footprint is None else np.asarray(footprint, dtype=bool)
    fp = _sf._expand_footprint(ndim, axes, fp)
    origins = _sf._expand_origin(ndim, axes, origin)
    positions = np.argwhere(fp)
    w = _windows(x, fp.shape, positions, origins, [mode] * ndim, cval)
    if structure is not None:
        s = np.asarray(structure, dtype=np.float64)
        if s.ndim != ndim:
            s = np.expand_dims(s, tuple(a for a in range(ndim) if a not in axes))
        offsets = s[tuple(positions.T)]
        w = w - offsets if minimum else w + offsets
    return _select(name, w, value)


def _min_or_max_1d(name, x, size, axis, dtype, mode, cval, origin, minimum):
    value = np.asarray(_sp_min_or_max_1d[minimum](strip(x), size, axis, dtype, mode, strip(cval), origin))
    ndim = np.ndim(x)
    axis = operator.index(axis) % ndim
    shape = [1] * ndim
    shape[axis] = size
    origins = [0] * ndim
    origins[axis] = origin
    positions = np.zeros((size, ndim), dtype=np.intp)
    positions[:, axis] = np.arange(size)
    return _select(name, _windows(x, tuple(shape), positions, origins, [mode] * ndim, cval), value)


def _filter1d(minimum: bool) -> Callable[..., Any]:
    name = "minimum_filter1d" if minimum else "maximum_filter1d"

    def impl(input, size, axis=-1, output=None, mode="reflect", cval=0.0, origin=0):
        for arg, value in (("size", size), ("axis", axis), ("mode", mode), ("origin", origin)):
            _constant(name, arg, value)
        x = _as_array(input)
        return _min_or_max_1d(name, x, size, axis, _output_dtype(name, output, strip(x)), mode, cval, origin, minimum)

    impl.__name__ = name
    return impl


_TIES = "SciPy's value; the derivative of the window samples equal to it (ties split equally)"
defcomposite(intercepted(_sf._rank_filter), _rank_filter, note="rank/median/percentile filters, medfilt: " + _TIES)
defcomposite(intercepted(_sf._min_or_max_filter), _min_or_max_filter, note="minimum/maximum filters, grey morphology: " + _TIES)
defcomposite(intercepted(_nd.minimum_filter1d), _filter1d(True), note=_TIES)
defcomposite(intercepted(_nd.maximum_filter1d), _filter1d(False), note=_TIES)


# ================================================================== Fourier-domain filters
# fourier_gaussian/uniform/ellipsoid/shift multiply their input by a fixed array of
# factors: the product of each axis's factor, read here from SciPy by filtering ones.
def _fourier(name: str, scipy_fun: Callable[..., Any]) -> Callable[..., Any]:
    def impl(input, parameter, n=-1, axis=-1, output=None):
        for arg, value in (("parameter", parameter), ("n", n), ("axis", axis)):
            _constant(name, arg, value)
        x = _as_array(input)
        if isinstance(output, np.ndarray) or type(output) is Tracer:
            _output_dtype(name, output, strip(x))  # the clear error
        value = np.asarray(scipy_fun(strip(x), parameter, n, axis, output))
        factors = scipy_fun(np.ones(np.shape(x), dtype=np.result_type(unwrap_above(x, 0))), parameter, n, axis, output)
        return _with_value(value, x * factors)

    impl.__name__ = name
    return impl


for _name in ("fourier_gaussian", "fourier_uniform", "fourier_ellipsoid", "fourier_shift"):
    defcomposite(intercepted(getattr(_nd, _name)), _fourier(_name, getattr(_nd, _name)), note="input times SciPy's factors")


# The public selection filters, registered by name as well (their calls reach the private
# functions above anyway; this keeps the coverage table honest about them).
def _median_filter(input, size=None, footprint=None, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None):
    return _rank_filter(input, 0, size, footprint, output, mode, cval, origin, "median", axes=axes)


def _rank_filter_public(input, rank, size=None, footprint=None, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None):
    return _rank_filter(input, operator.index(_constant("rank_filter", "rank", rank)), size, footprint, output, mode, cval, origin, "rank", axes=axes)


def _percentile_filter(input, percentile, size=None, footprint=None, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None):
    return _rank_filter(input, percentile, size, footprint, output, mode, cval, origin, "percentile", axes=axes)


def _extremum_filter(minimum: int) -> Callable[..., Any]:
    def impl(input, size=None, footprint=None, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None):
        return _min_or_max_filter(input, size, footprint, None, output, mode, cval, origin, minimum, axes)

    impl.__name__ = "minimum_filter" if minimum else "maximum_filter"
    return impl


defcomposite(intercepted(_nd.median_filter), _median_filter, note=_TIES)
defcomposite(intercepted(_nd.rank_filter), _rank_filter_public, note=_TIES)
defcomposite(intercepted(_nd.percentile_filter), _percentile_filter, note=_TIES)
defcomposite(intercepted(_nd.minimum_filter), _extremum_filter(1), note=_TIES)
defcomposite(intercepted(_nd.maximum_filter), _extremum_filter(0), note=_TIES)


# ================================================================== measurements
# SciPy's measurements run on tracers as written (sums by label through np.bincount),
# except center_of_mass, whose unlabelled result passes through np.array of 0-d
# values: the same computation, returned as SciPy returns it.
def _center_of_mass(input, labels=None, index=None):
    x = _as_array(input)
    normalizer = _nd.sum(x, labels, index)
    grids = np.ogrid[[slice(0, n) for n in np.shape(x)]]
    results = [_nd.sum(x * grids[d].astype(float), labels, index) / normalizer for d in range(np.ndim(x))]
    if np.ndim(results[0]) == 0:
        return tuple(results)
    return [tuple(row) for row in np.swapaxes(np.stack(results), 0, 1)]


defcomposite(intercepted(_nd.center_of_mass), _center_of_mass, note="sums by label, as SciPy computes them")
