"""Derivatives of :mod:`scipy.fft`: the DFTs, the DCTs and DSTs, the fast Hankel transform.

How calls reach these rules
---------------------------
SciPy's public transforms (``scipy.fft.dct`` ...) are ``uarray`` multimethods,
compiled objects with no ``__code__`` to swap.  They hand every call to the active
backend; SciPy's own backend (``scipy.fft._backend._ScipyBackend``) looks the
method's name up, *at call time*, in three Python modules (``_basic_backend``,
``_realtransforms_backend``, ``_fftlog_backend``) and calls that function with the
call's arguments unchanged.  Those functions are what is intercepted here, with
the door's ordinary trampolines: so ``scipy.fft.dct(x)``, an early-bound
``from scipy.fft import dct`` and ``scipy.fft.set_backend("scipy")`` all work, no
backend is installed or replaced, and nothing needs a hook in
:mod:`tapegrad.interception`.  A call made under a user's own backend
(``set_backend(pyfftw_backend)``) goes to that backend instead, as SciPy says.

The rules
---------
Every transform is one primitive whose forward is SciPy's own call on the plain
values (the same numbers, dtypes, errors and ``workers=``), and whose VJP is the
exact transpose of the linear map, written with SciPy transforms so that it is
differentiable again (second order comes back through the door):

* complex DFTs: the DFT matrix is symmetric, so the VJP of ``fftn`` is ``fftn``
  with the same ``norm`` (tapegrad's complex convention, see
  :mod:`tapegrad.rules.fft`: a cotangent ``c`` of ``z`` stands for ``Re(c dz)``);
* real DFTs: as in :mod:`tapegrad.rules.fft` (half spectra zero-padded or
  doubled), and ``hfftn``/``ihfftn`` through their definitions
  ``irfftn(conj(x))``/``conj(rfftn(x))`` with the opposite normalisation;
* DCT/DST of types 1-4: each call is ``scale * o_out * Core(o_in * x)`` along each
  axis, with ``Core`` SciPy's unnormalised transform of the type it really runs
  (``idct`` type 2 runs type 3), ``scale`` from ``norm`` and ``o_in``/``o_out``
  the first/last-entry factors of ``orthogonalize``.  The cores' transposes are
  cores too: types 4 and DST-I are symmetric, ``DCT2^T = DCT3 diag(2, 1, ...)``,
  ``DCT3^T = diag(1/2, 1, ...) DCT2``, ``DCT1^T = diag(w) DCT1 diag(1/w)`` with
  ``w = (1/2, 1, ..., 1, 1/2)``, and the DST-II/III pair with the last entry in
  place of the first.

``n=``/``s=`` padding and truncation become truncation and zero-padding of the
cotangent; ``overwrite_x`` is ignored (the input is never written to).  The fast
Hankel transforms ``fht``/``ifht`` replay SciPy's FFTLog steps on the traced array
(their coefficients come from the plain ``dln``, ``mu``, ``offset`` and ``bias``);
``fftshift``/``ifftshift`` are NumPy's.  A length, type, order or FFTLog parameter
that depends on a traced input raises a clear error naming it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.fft
from scipy.fft import _basic_backend, _fftlog_backend, _helper, _realtransforms_backend

from ..binding import strip_all
from ..dispatch import primitive
from ..errors import NonDifferentiableArgumentError
from ..registry import defcomposite, defvjp, intercepted
from .fft import _cook, _dual, _fit, _half_weights
from ._scipy_util import reaches_source as _reaches_source

__all__: list = []

_PLAN_MESSAGE = "Passing a precomputed plan is not yet supported by scipy.fft functions"




def _plain(function: str, name: str, value: Any) -> Any:
    """``value`` as plain values; refuse a tracer there that depends on a watched input."""
    if _reaches_source(value):
        raise NonDifferentiableArgumentError(
            f"tapegrad cannot differentiate scipy.fft.{function} with respect to {name}: it must be a "
            f"plain number. Pass {name} as a float (use tapegrad.stop_gradient if it is computed from "
            "traced values)."
        )
    return strip_all(value)


def _real_dtype(h: Any) -> np.dtype:
    return np.finfo(np.result_type(h)).dtype


# ----------------------------------------------------------------- the DFTs
def _dft_forward(a, kind, s, axes, norm, one_d, workers=None):
    if one_d:
        return getattr(scipy.fft, kind)(a, s[0], axes[0], norm, workers=workers)
    return getattr(scipy.fft, kind + "n")(a, s, axes, norm, workers=workers)


dft_p = primitive(_dft_forward)


def _dft_vjp(g, ans, a, kind, s, axes, norm, one_d, workers=None):
    shape = np.shape(a)
    if kind in ("fft", "ifft"):
        # The (inverse) DFT matrix is symmetric: its transpose is itself, same norm.
        h = dft_p(g, kind, s, axes, norm, False)
    elif kind == "rfft":
        # fftn zero-pads the half spectrum to s: the adjoint of dropping the upper half.
        h = np.real(dft_p(g, "fft", s, axes, norm, False))
    elif kind == "irfft":
        # irfft reads the bins 1..n//2 (bar an even n's Nyquist bin) twice.
        h = np.conjugate(dft_p(g, "rfft", s, axes, _dual(norm), False))
        h = h * np.reshape(_half_weights(s[-1], _real_dtype(h)), (-1,) + (1,) * (-axes[-1] - 1))
    elif kind == "hfft":
        # hfftn(x) = irfftn(conj(x), dual norm): conj of irfftn's VJP at the dual norm.
        h = dft_p(g, "rfft", s, axes, norm, False)
        h = h * np.reshape(_half_weights(s[-1], _real_dtype(h)), (-1,) + (1,) * (-axes[-1] - 1))
    else:  # ihfft(x) = conj(rfftn(x, dual norm))
        h = np.real(dft_p(np.conjugate(g), "fft", s, axes, _dual(norm), False))
    return _fit(h, shape, axes)


defvjp(dft_p, _dft_vjp, None, None, None, None, None, note="exact transposes of SciPy's DFTs")


def _dft_one_d(kind):
    def impl(x, n=None, axis=-1, norm=None, overwrite_x=False, workers=None, *, plan=None):
        if plan is not None:
            raise NotImplementedError(_PLAN_MESSAGE)
        n = _plain(kind, "n", n)
        _dual(norm)  # SciPy's ValueError for an unknown norm, before any work
        s, axes = _cook(np.shape(x), None if n is None else (n,), (axis,), kind in ("irfft", "hfft"))
        return dft_p(x, kind, s, axes, norm, True, workers=workers)

    return impl


def _dft_nd(kind, default_axes=None):
    def impl(x, s=None, axes=default_axes, norm=None, overwrite_x=False, workers=None, *, plan=None):
        if plan is not None:
            raise NotImplementedError(_PLAN_MESSAGE)
        s = _plain(kind + "n", "s", s)
        _dual(norm)
        if axes is not None and np.ndim(axes) == 0:
            axes = (axes,)
        if s is not None and np.ndim(s) == 0:
            s = (s,)
        s, axes = _cook(np.shape(x), s, axes, kind in ("irfft", "hfft"))
        if not axes:  # SciPy transforms nothing
            return x
        return dft_p(x, kind, s, axes, norm, False, workers=workers)

    return impl


for _kind in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft"):
    defcomposite(intercepted(getattr(_basic_backend, _kind)), _dft_one_d(_kind))
    defcomposite(intercepted(getattr(_basic_backend, _kind + "n")), _dft_nd(_kind))
    defcomposite(intercepted(getattr(_basic_backend, _kind + "2")), _dft_nd(_kind, (-2, -1)))


# ----------------------------------------------------------------- DCT and DST
_INVERSE_TYPE = {1: 1, 2: 3, 3: 2, 4: 4}


def _r2r_forward(x, kind, type, s, axes, norm, orthogonalize, one_d, workers=None):
    if one_d:
        return getattr(scipy.fft, kind)(
            x, type, s[0], axes[0], norm, workers=workers, orthogonalize=orthogonalize
        )
    return getattr(scipy.fft, kind + "n")(x, type, s, axes, norm, workers=workers, orthogonalize=orthogonalize)


r2r_p = primitive(_r2r_forward)


def _along(v: np.ndarray, axis: int) -> np.ndarray:
    """``v`` shaped to multiply an array along the (negative) ``axis``."""
    return np.reshape(v, (-1,) + (1,) * (-axis - 1))


def _r2r_transpose(g, kind, type, n, axis, norm, ortho):
    """The transpose of one 1-D ``kind`` transform of length ``n`` along ``axis``, applied to ``g``.

    The call is ``scale * o_out * Core(o_in * x)`` with ``Core`` SciPy's unnormalised
    transform of type ``t`` (the type SciPy's compiled FFT runs, pocketfft up to SciPy 1.17 and
    duccfft from 1.18, the same Python layer: ``idct`` type 2 runs type 3);
    its transpose is ``scale * o_in * Core^T(o_out * g)``, and ``Core^T`` is
    ``post * Core'(pre * v)`` for another core ``Core'`` (see the module docstring).
    """
    base = kind.lstrip("i")
    inverse = kind.startswith("i")
    t = _INVERSE_TYPE[type] if inverse else type
    dtype = _real_dtype(g)
    # The compiled FFT's logical length (pocketfft's, duccfft's), which sets the normalisation.
    if t == 1:
        logical = 2 * (n - 1) if base == "dct" else 2 * (n + 1)
    else:
        logical = 2 * n
    mode = {None: 0, "backward": 0, "ortho": 1, "forward": 2}[norm]
    if inverse:
        mode = 2 - mode
    scale = (1.0, 1.0 / np.sqrt(logical), 1.0 / logical)[mode]

    o_in = np.ones(n, dtype)
    o_out = np.ones(n, dtype)
    if ortho:
        root2 = np.sqrt(2.0)
        end = 0 if base == "dct" else -1  # DCT adjusts the first entry, DST the last
        if t == 1 and base == "dct":
            o_in[[0, -1]] = root2
            o_out[[0, -1]] = 1 / root2
        elif t == 2:
            o_out[end] = 1 / root2
        elif t == 3:
            o_in[end] = root2

    pre = np.ones(n, dtype)
    post = np.ones(n, dtype)
    t_transposed = t
    end = 0 if base == "dct" else -1
    if t == 1 and base == "dct":
        pre[[0, -1]] = 2.0
        post[[0, -1]] = 0.5
    elif t == 2:
        pre[end] = 2.0
        t_transposed = 3
    elif t == 3:
        post[end] = 0.5
        t_transposed = 2

    before = o_out * pre
    after = (o_in * post) * dtype.type(scale)
    if not np.all(before == 1):
        g = g * _along(before, axis)
    h = getattr(scipy.fft, base)(g, t_transposed, axis=axis)
    if not np.all(after == 1):
        h = h * _along(after, axis)
    return h


def _r2r_vjp(g, ans, x, kind, type, s, axes, norm, orthogonalize, one_d, workers=None):
    # SciPy transforms a complex input's real and imaginary parts without passing
    # orthogonalize on: pocketfft (duccfft from SciPy 1.18) then orthogonalizes exactly when norm="ortho".
    if np.iscomplexobj(x) or orthogonalize is None:
        ortho = norm == "ortho"
    else:
        ortho = bool(orthogonalize)
    for n, axis in zip(s, axes):
        g = _r2r_transpose(g, kind, type, n, axis, norm, ortho)
    return _fit(g, np.shape(x), axes)


defvjp(r2r_p, _r2r_vjp, None, None, None, None, None, None, None, note="exact transposes, types 1-4, every norm")


def _check_type(kind, type):
    type = _plain(kind, "type", type)
    if type not in (1, 2, 3, 4):
        raise ValueError(f"invalid transform type {type!r}; must be 1, 2, 3 or 4")
    return type


def _r2r_one_d(kind):
    def impl(x, type=2, n=None, axis=-1, norm=None, overwrite_x=False, workers=None, orthogonalize=None):
        type = _check_type(kind, type)
        n = _plain(kind, "n", n)
        _dual(norm)
        s, axes = _cook(np.shape(x), None if n is None else (n,), (axis,))
        return r2r_p(x, kind, type, s, axes, norm, orthogonalize, True, workers=workers)

    return impl


def _r2r_nd(kind):
    def impl(x, type=2, s=None, axes=None, norm=None, overwrite_x=False, workers=None, orthogonalize=None):
        type = _check_type(kind + "n", type)
        s = _plain(kind + "n", "s", s)
        _dual(norm)
        if axes is not None and np.ndim(axes) == 0:
            axes = (axes,)
        if s is not None and np.ndim(s) == 0:
            s = (s,)
        s, axes = _cook(np.shape(x), s, axes)
        if not axes:  # SciPy returns the input itself
            return x
        return r2r_p(x, kind, type, s, axes, norm, orthogonalize, False, workers=workers)

    return impl


for _kind in ("dct", "idct", "dst", "idst"):
    defcomposite(intercepted(getattr(_realtransforms_backend, _kind)), _r2r_one_d(_kind))
    defcomposite(intercepted(getattr(_realtransforms_backend, _kind + "n")), _r2r_nd(_kind))


# ----------------------------------------------------------------- fast Hankel transform
def _hankel(inverse):
    name = "ifht" if inverse else "fht"

    def impl(a, dln, mu, offset=0.0, bias=0.0):
        # SciPy's own FFTLog steps (scipy/fft/_fftlog_backend.py), on the traced array:
        # a linear map of ``a``, with its coefficients computed from the plain parameters.
        dln, mu, offset, bias = (
            _plain(name, arg, value) for arg, value in (("dln", dln), ("mu", mu), ("offset", offset), ("bias", bias))
        )
        n = np.shape(a)[-1]
        if bias != 0:
            j = np.arange(n, dtype=np.float64) - (n - 1) / 2
            weight = np.exp(bias * (j * dln + offset)) if inverse else np.exp(-bias * j * dln)
            a = a * weight
        u = _fftlog_backend.fhtcoeff(n, dln, mu, offset=offset, bias=bias, inverse=inverse)
        spectrum = scipy.fft.rfft(a, axis=-1)
        spectrum = spectrum / np.conjugate(u) if inverse else spectrum * u
        out = np.flip(scipy.fft.irfft(spectrum, n, axis=-1), axis=-1)
        if bias != 0:
            out = out / np.exp(-bias * j * dln) if inverse else out * np.exp(-bias * (j * dln + offset))
        return out

    return impl


defcomposite(intercepted(_fftlog_backend.fht), _hankel(False), note="SciPy's FFTLog steps on the traced array")


# ----------------------------------------------------------------- shifts
def _shift(numpy_shift):
    # SciPy's fftshift/ifftshift are NumPy's (a roll) for NumPy arrays and tracers alike.
    def impl(x, axes=None):
        return numpy_shift(x, axes=axes)

    return impl


for _name in ("fftshift", "ifftshift"):
    defcomposite(intercepted(getattr(_helper, _name)), _shift(getattr(np.fft, _name)), note="numpy.fft's rule")
defcomposite(intercepted(_fftlog_backend.ifht), _hankel(True), note="SciPy's FFTLog steps on the traced array")
