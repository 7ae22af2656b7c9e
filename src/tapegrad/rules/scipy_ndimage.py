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

Derivatives are taken in ``input``, ``weights`` and ``cval``.  Complex inputs
and weights are split into real correlations as SciPy does (complex weights
are conjugated by ``correlate``, as in SciPy).  ``sigma``, ``size``,
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
from ..tracer import Tracer

# SciPy's own functions, bound once: the rules call them on plain arrays.
_sp_correlate1d = _nd.correlate1d
_sp_correlate = _nd.correlate
_sp_uniform_filter1d = _nd.uniform_filter1d


# ------------------------------------------------------------------ argument checks
def _is_traced(value: Any) -> bool:
    if type(value) is Tracer:
        return True
    if isinstance(value, (list, tuple)):
        return any(_is_traced(v) for v in value)
    return False


def _as_array(value: Any) -> Any:
    """A tracer as it is; anything else as an ndarray (lists of tracers are stacked)."""
    if type(value) is Tracer:
        return value
    if isinstance(value, (list, tuple)) and _is_traced(value):
        return np.stack([_as_array(v) for v in value])
    return np.asarray(value)


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
        out = out + last[..., border] @ fold.astype(np.result_type(strip(ge)), copy=False)
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
    ext = last[..., src]
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
    widths = [(0, 0)] * np.ndim(g)
    widths[axis] = (size - 1, size - 1)
    padded = np.pad(g, widths)
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
    profile = correlate1d_p(np.zeros(np.shape(x), dtype=np.result_type(strip(g))), w, 1.0, axis, mode, origin, None)
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
    if np.result_type(strip(w)) != np.float64:
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
    widths = [(0, 0)] * nb + [(s - 1, s - 1) for s in wshape]
    flipped = np.flip(w, axis=tuple(range(np.ndim(w)))).reshape((1,) * nb + wshape)
    full = correlate_p(np.pad(g, widths), flipped, 0.0, "constant", (0,) * (nb + len(wshape)), None)
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
    profile = correlate_p(np.zeros(np.shape(x), dtype=np.result_type(strip(g))), w, 1.0, mode, origins, None)
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
    if np.result_type(strip(w)) != np.float64:
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
    return np.full(size, 1.0 / size, dtype=np.result_type(strip(like), np.float64))


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
    return np.copy(x) if np.result_type(strip(x)) == dtype else x.astype(dtype)


defcomposite(intercepted(_nd.uniform_filter1d), _uniform_filter1d)
defcomposite(intercepted(_nd.uniform_filter), _uniform_filter)


# ------------------------------------------------------------------ Gaussian filters
def _gaussian_filter1d(input, sigma, axis=-1, order=0, output=None, mode="reflect", cval=0.0, truncate=4.0, *, radius=None):
    for arg, value in (("sigma", sigma), ("order", order), ("truncate", truncate), ("radius", radius)):
        _constant("gaussian_filter1d", arg, value)
    sd = float(sigma)
    lw = int(truncate * sd + 0.5) if radius is None else radius
    if not isinstance(lw, (int, np.integer)) or lw < 0:
        raise ValueError("Radius must be a nonnegative integer.")
    weights = _sf._gaussian_kernel1d(sigma, order, lw)[::-1]
    return _correlate1d(input, weights, axis, output, mode, cval, 0)


def _gaussian_filter(input, sigma, order=0, output=None, mode="reflect", cval=0.0, truncate=4.0, *, radius=None, axes=None):
    x = _as_array(input)
    for arg, value in (("sigma", sigma), ("order", order), ("truncate", truncate), ("radius", radius), ("axes", axes)):
        _constant("gaussian_filter", arg, value)
    dtype = _output_dtype("gaussian_filter", output, strip(x))
    axes = _ni_support._check_axes(axes, np.ndim(x))
    n = len(axes)
    orders = _ni_support._normalize_sequence(order, n)
    sigmas = _ni_support._normalize_sequence(sigma, n)
    modes = _ni_support._normalize_sequence(mode, n)
    radii = _ni_support._normalize_sequence(radius, n)
    passes = [(axes[i], sigmas[i], orders[i], modes[i], radii[i]) for i in range(n) if sigmas[i] > 1e-15]
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
    sigmas = _ni_support._normalize_sequence(sigma, len(axes))
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
    _constant("gaussian_laplace", "sigma", sigma)
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
    _constant("gaussian_gradient_magnitude", "sigma", sigma)
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
