"""The ``fft`` extension of tapegrad's array-API namespace.

The transforms are ``numpy.fft``'s (same signatures, dispatching to tracers
through NEP 18); only the frequency helpers need the standard's ``dtype=``.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ._fallback import numpy_fallback

__all__ = [
    "fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft",
    "fftfreq", "rfftfreq", "fftshift", "ifftshift",
]

_f = np.fft
fft = _f.fft
ifft = _f.ifft
fftn = _f.fftn
ifftn = _f.ifftn
rfft = _f.rfft
irfft = _f.irfft
rfftn = _f.rfftn
irfftn = _f.irfftn
hfft = _f.hfft
ihfft = _f.ihfft
fftshift = _f.fftshift
ifftshift = _f.ifftshift


def fftfreq(n: int, /, *, d: float = 1.0, dtype: Optional[Any] = None, device: Optional[Any] = None) -> np.ndarray:
    """Sample frequencies of ``fft`` (a constant)."""
    out = _f.fftfreq(n, d=d, device=device)
    return out if dtype is None else out.astype(dtype, copy=False)


def rfftfreq(n: int, /, *, d: float = 1.0, dtype: Optional[Any] = None, device: Optional[Any] = None) -> np.ndarray:
    """Sample frequencies of ``rfft`` (a constant)."""
    out = _f.rfftfreq(n, d=d, device=device)
    return out if dtype is None else out.astype(dtype, copy=False)


# Names the standard lacks (``fft2``, ``rfft2``) are NumPy's.
__getattr__, __dir__ = numpy_fallback(_f, globals())
