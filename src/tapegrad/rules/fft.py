"""Derivatives of the discrete Fourier transforms in :mod:`numpy.fft`.

Every public transform is a *composite* that normalises its arguments (``n``,
``axis``, ``s``, ``axes``, ``norm``) and calls one of four n-dimensional
primitives: complex ``fftn``/``ifftn`` and the real ``rfftn``/``irfftn``.
Each primitive's VJP is written with the others, so every order works.

Complex convention (as in JAX and autograd, see docs/dev/rules.md): the
cotangent ``c`` of a complex value ``z`` stands for the real linear form
``dz -> Re(c * dz)``; for a real loss ``L`` that is
``c = dL/dRe(z) - 1j * dL/dIm(z)``.  A complex-linear map ``z = A x`` then
has the VJP ``c_x = A^T c`` (a transpose, *no* conjugate), and the DFT
matrix is symmetric, so the VJP of ``fft`` is ``fft`` itself with the same
``norm``.  Consequence for users: the gradient of a real loss with respect to
a complex input is the *conjugate* of the "steepest ascent" direction
``dL/dRe(z) + 1j dL/dIm(z)``; take ``np.conj(tg.grad(f)(z))`` for gradient
ascent/descent steps on complex parameters.  For a real input the gradient is
real and is the ordinary one (e.g. ``sum(abs(fft(x))**2)`` has gradient
``2 * N * x`` by Parseval).

The real transforms are only *real*-linear: ``rfft`` keeps half of the
spectrum, so its VJP zero-pads the cotangent to the full length, applies
``fft`` and keeps the real part; ``irfft`` reads the bins ``1..n//2`` (bar the
Nyquist bin of an even ``n``) twice and ignores the imaginary parts of the DC
and Nyquist bins, so its VJP doubles those bins of a (conjugated) ``rfft``.
``n=``/``s=`` padding and truncation of the input become truncation and
zero-padding of the cotangent.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from ..dispatch import _reject_out, primitive
from ..registry import defcomposite, defvjp

_DUAL_NORM = {None: "forward", "backward": "forward", "forward": "backward", "ortho": "ortho"}


def _dual(norm: Optional[str]) -> str:
    """The norm whose forward transform has the scale of ``norm``'s inverse transform."""
    try:
        return _DUAL_NORM[norm]
    except KeyError:
        raise ValueError(f'Invalid norm value {norm}; should be "backward", "ortho" or "forward".') from None


def _cook(shape: tuple, s: Optional[Sequence], axes: Optional[Sequence], invreal: bool = False) -> tuple:
    """NumPy's ``s``/``axes`` defaults, as tuples with axes made negative.

    ``invreal``: the last transformed axis of a shapeless ``irfftn`` defaults
    to ``2 * (m - 1)`` output points.
    """
    nd = len(shape)
    if axes is None:
        axes = range(-nd, 0) if s is None else range(-len(s), 0)
    axes = [int(a) for a in axes]
    for a in axes:
        if not -nd <= a < nd:
            raise np.exceptions.AxisError(a, nd)
    axes = tuple(a % nd - nd for a in axes)
    if len(set(axes)) != len(axes):
        raise ValueError("tapegrad's FFT rules do not support repeated axes; transform twice instead.")
    if s is None:
        s = [shape[a] for a in axes]
        if invreal and axes:
            s[-1] = 2 * (shape[axes[-1]] - 1)
    else:
        s = list(s)
        if len(s) != len(axes):
            raise ValueError("Shape and axes have different lengths.")
        for i, (n, a) in enumerate(zip(s, axes)):
            if n is None or n == -1:
                s[i] = 2 * (shape[a] - 1) if (invreal and i == len(axes) - 1) else shape[a]
    return tuple(int(n) for n in s), axes


def _fit(h: Any, shape: tuple, axes: tuple) -> Any:
    """Truncate or zero-pad ``h`` along ``axes`` (negative) to the sizes ``shape`` has there.

    This is the adjoint of the padding/truncation that ``n=``/``s=`` apply to an input.
    """
    for a in axes:
        have, want = np.shape(h)[a], shape[a]
        if have > want:
            h = h[(Ellipsis, slice(0, want)) + (slice(None),) * (-a - 1)]
        elif have < want:
            pad_shape = list(np.shape(h))
            pad_shape[a] = want - have
            h = np.concatenate([h, np.zeros(tuple(pad_shape), dtype=np.result_type(h))], axis=a)
    return h


def _numpy_fftn(a, s, axes, norm):
    return np.fft.fftn(a, s, axes, norm)


def _numpy_ifftn(a, s, axes, norm):
    return np.fft.ifftn(a, s, axes, norm)


def _numpy_rfftn(a, s, axes, norm):
    return np.fft.rfftn(a, s, axes, norm)


def _numpy_irfftn(a, s, axes, norm):
    return np.fft.irfftn(a, s, axes, norm)


fftn_p = primitive(_numpy_fftn)
ifftn_p = primitive(_numpy_ifftn)
rfftn_p = primitive(_numpy_rfftn)
irfftn_p = primitive(_numpy_irfftn)


def _complex_vjp(transform):
    # The DFT matrix (and its inverse) is symmetric: the transpose is the same transform.
    def vjp(g, ans, a, s, axes, norm):
        return _fit(transform(g, None, axes, norm), np.shape(a), axes)

    return vjp


def _rfftn_vjp(g, ans, a, s, axes, norm):
    # Zero-pad the half spectrum back to ``s`` (``fftn``'s own padding does it), transpose.
    return _fit(np.real(fftn_p(g, s, axes, norm)), np.shape(a), axes)


def _half_weights(n: int, dtype: Any) -> np.ndarray:
    """How many times ``irfft`` reads each of its ``n // 2 + 1`` input bins (1 or 2)."""
    w = np.full(n // 2 + 1, 2.0, dtype=dtype)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    return w


def _irfftn_vjp(g, ans, a, s, axes, norm):
    # g is real: the unnormalised inverse DFT of g is conj(rfftn(g)) on the kept half,
    # and the dual norm gives it the scale of ``norm``'s inverse transform.
    # Pass ``s`` explicitly: the VJP of this rfftn (second order) zero-pads its
    # cotangent to ``s`` before transforming back, which ``s=None`` would skip.
    h = np.conjugate(rfftn_p(g, s, axes, _dual(norm)))
    last = axes[-1]
    w = _half_weights(s[-1], np.finfo(np.result_type(h)).dtype)
    h = h * np.reshape(w, (-1,) + (1,) * (-last - 1))
    return _fit(h, np.shape(a), axes)


defvjp(fftn_p, _complex_vjp(fftn_p), note="transpose of the DFT is the DFT (no conjugate)")
defvjp(ifftn_p, _complex_vjp(ifftn_p), note="transpose of the inverse DFT is itself")
defvjp(rfftn_p, _rfftn_vjp, note="zero-pads the half spectrum, real part of the full DFT")
defvjp(irfftn_p, _irfftn_vjp, note="doubles the bins irfft reads twice; ignores Im of DC/Nyquist")


# ----------------------------------------------------------------- public API
def _nd(primitive_fn, invreal=False, default_axes=None):
    """A public n-dimensional transform (``fftn``, ``fft2``, ...) calling ``primitive_fn``."""

    def impl(a, s=None, axes=default_axes, norm=None, out=None):
        _reject_out("numpy.fft", {"out": out})
        s, axes = _cook(np.shape(a), s, axes, invreal)
        _dual(norm)  # validate early, with NumPy's message
        return primitive_fn(a, s, axes, norm)

    return impl


def _one_d(primitive_fn, invreal=False):
    """A public 1-D transform (``fft``, ``rfft``, ...) calling ``primitive_fn``."""

    def impl(a, n=None, axis=-1, norm=None, out=None):
        _reject_out("numpy.fft", {"out": out})
        s, axes = _cook(np.shape(a), None if n is None else (n,), (axis,), invreal)
        if s[0] < 1:
            raise ValueError(f"Invalid number of FFT data points ({s[0]}) specified.")
        _dual(norm)
        return primitive_fn(a, s, axes, norm)

    return impl


def _hfft(a, n=None, axis=-1, norm=None, out=None):
    # NumPy's definition: hfft(a) = irfft(conj(a)) with the opposite normalisation.
    return _one_d(irfftn_p, invreal=True)(np.conjugate(a), n, axis, _dual(norm), out)


def _ihfft(a, n=None, axis=-1, norm=None, out=None):
    return np.conjugate(_one_d(rfftn_p)(a, n, axis, _dual(norm), out))


_NOTE = "complex cotangents as Re(c dz), all norm modes and n=/s= padding"
for _name, _prim, _inv in (("fft", fftn_p, False), ("ifft", ifftn_p, False), ("rfft", rfftn_p, False), ("irfft", irfftn_p, True)):
    defcomposite(getattr(np.fft, _name), _one_d(_prim, _inv), note=_NOTE)
    defcomposite(getattr(np.fft, _name + "n"), _nd(_prim, _inv), note=_NOTE)
    defcomposite(getattr(np.fft, _name + "2"), _nd(_prim, _inv, default_axes=(-2, -1)), note=_NOTE)
defcomposite(np.fft.hfft, _hfft, note=_NOTE)
defcomposite(np.fft.ihfft, _ihfft, note=_NOTE)


# ----------------------------------------------------------------- shifts
def _shift_axes(x: Any, axes: Any) -> Any:
    nd = np.ndim(x)
    if axes is None:
        return tuple(range(-nd, 0))
    if isinstance(axes, (tuple, list)):
        return tuple(int(a) % nd - nd for a in axes)
    return int(axes) % nd - nd


defvjp(np.fft.fftshift, lambda g, ans, x, axes=None: np.fft.ifftshift(g, axes=_shift_axes(x, axes)))
defvjp(np.fft.ifftshift, lambda g, ans, x, axes=None: np.fft.fftshift(g, axes=_shift_axes(x, axes)))
