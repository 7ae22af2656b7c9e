"""autograd.scipy.signal: ``scipy.signal``, and autograd's own generalized ``convolve``.

autograd's ``convolve(A, B, axes=None, dot_axes=[(), ()], mode="full")`` is
not SciPy's: it convolves along chosen pairs of axes (``axes``), sums products
along others (``dot_axes``) and keeps the rest, the output's axes being A's
kept axes, then B's, then the convolved ones.  Over all axes with no dot axes
it is SciPy's n-dimensional convolution, and the shim calls SciPy's
``convolve`` (tapegrad's rule for it).  Otherwise the shim computes it in
ordinary NumPy (a gather of B's shifted windows and one ``einsum``), which
tapegrad differentiates like any user code.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
import scipy.signal as _signal


def __getattr__(name: str) -> Any:
    return getattr(_signal, name)


def convolve(A: Any, B: Any, axes: Any = None, dot_axes: Any = ((), ()), mode: str = "full") -> Any:
    assert mode in ("valid", "full", "same"), f"Mode {mode} undefined, it can be one of 'valid', 'full', and 'same'"
    if axes is None and not list(dot_axes[0]) and not list(dot_axes[1]):
        return _signal.convolve(A, B, mode=mode)
    if axes is None:
        axes = (list(range(np.ndim(A))), list(range(np.ndim(A))))
    conv_a, conv_b = [a % np.ndim(A) for a in axes[0]], [b % np.ndim(B) for b in axes[1]]
    dot_a, dot_b = [a % np.ndim(A) for a in dot_axes[0]], [b % np.ndim(B) for b in dot_axes[1]]
    keep_a = [i for i in range(np.ndim(A)) if i not in conv_a + dot_a]
    keep_b = [i for i in range(np.ndim(B)) if i not in conv_b + dot_b]
    a = np.transpose(A, keep_a + dot_a + conv_a)
    b = np.transpose(B, keep_b + dot_b + conv_b)
    na = [np.shape(A)[i] for i in conv_a]
    nb = [np.shape(B)[i] for i in conv_b]

    # Full convolution along each pair: out[n] = sum_i a[i] * b_padded[n - i + na - 1].
    first = len(keep_b) + len(dot_b)
    for k, (m, n) in enumerate(zip(na, nb)):
        axis = first + 2 * k
        pad_shape = list(np.shape(b))
        pad_shape[axis] = m - 1
        zeros = np.zeros(pad_shape, dtype=np.result_type(b))
        b = np.concatenate([zeros, b, zeros], axis=axis)
        out_len = m + n - 1
        index = np.arange(out_len)[:, None] - np.arange(m)[None, :] + (m - 1)
        b = np.take(b, index, axis=axis)

    letters = iter(string.ascii_letters)
    ka = [next(letters) for _ in keep_a]
    kb = [next(letters) for _ in keep_b]
    d = [next(letters) for _ in dot_a]
    i = [next(letters) for _ in conv_a]
    n = [next(letters) for _ in conv_a]
    spec_a = "".join(ka + d + i)
    spec_b = "".join(kb + d + [x for pair in zip(n, i) for x in pair])
    out = np.einsum(f"{spec_a},{spec_b}->{''.join(ka + kb + n)}", a, b)

    if mode == "full":
        return out
    index = [slice(None)] * (len(ka) + len(kb))
    for m, n_ in zip(na, nb):
        if mode == "valid":
            index.append(slice(min(m, n_) - 1, max(m, n_)))
        else:  # "same": the size of A, centred in the full output, as SciPy's
            start = (n_ - 1) // 2
            index.append(slice(start, start + m))
    return out[tuple(index)]
