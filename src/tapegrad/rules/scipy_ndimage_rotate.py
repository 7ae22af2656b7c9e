"""``scipy.ndimage.rotate`` over tracers: SciPy's geometry, then ``affine_transform``'s rule.

SciPy's ``rotate`` allocates its output and has ``affine_transform`` write each
rotated plane into it, which a traced image cannot do.  The rule computes the same
rotation matrix, offset and output shape (SciPy's formulas) and calls
``affine_transform`` without an output array, plane by plane for more than two
dimensions, so the derivative is that of SciPy's interpolation, in the image and
in the angle, at every order.  The output shape (``reshape=True``) depends on the
plain angle only.  SciPy's own call on the plain values runs first (its checks and
its numbers, bit for bit).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from scipy import ndimage as _nd

from ..binding import has_tracer, strip_all
from ..errors import NonDifferentiableArgumentError
from ..registry import ORIGINALS, defcomposite, intercepted
from ..tracer import Tracer
from ._scipy_util import with_value

__all__: list = []


def _rotation(angle: Any) -> tuple:
    """``cos`` and ``sin`` of an angle in degrees, exact at multiples of 90 like SciPy's ``cosdg``/``sindg``."""
    plain = float(np.asarray(strip_all(angle)))
    if type(angle) is not Tracer:
        from scipy import special

        return special.cosdg(plain), special.sindg(plain)
    radians = np.deg2rad(angle)
    return np.cos(radians), np.sin(radians)


def _rotate(input, angle, axes=(1, 0), reshape=True, output=None, order=3, mode="constant", cval=0.0,
            prefilter=True):
    if output is not None:
        raise NonDifferentiableArgumentError(
            "scipy.ndimage.rotate: output= would receive traced values and drop their gradient; leave it None"
        )
    expected = ORIGINALS[_nd.rotate](strip_all(input), strip_all(angle), axes, reshape, None, order, mode, cval,
                                     prefilter)
    image = input if type(input) is Tracer else np.asarray(input)
    ndim = np.ndim(image)
    axes = sorted(a + ndim if a < 0 else a for a in axes)
    c, s = _rotation(angle)
    rot = np.stack([np.stack([c, s]), np.stack([-s, c])]) if has_tracer((c, s)) else np.array([[c, s], [-s, c]])
    img_shape = np.asarray(np.shape(image))
    in_plane = img_shape[axes]
    out_plane = np.asarray(expected.shape)[axes]  # SciPy's (reshape=True: from the plain angle)
    offset = (in_plane - 1) / 2 - rot @ ((out_plane - 1) / 2)
    if ndim <= 2:
        traced = _nd.affine_transform(image, rot, offset, tuple(out_plane), order=order, mode=mode, cval=cval,
                                      prefilter=prefilter)
    else:
        moved = np.moveaxis(image, axes, (-2, -1))
        batch = np.shape(moved)[:-2]
        planes = [
            _nd.affine_transform(moved[index], rot, offset, tuple(out_plane), order=order, mode=mode, cval=cval,
                                 prefilter=prefilter)
            for index in itertools.product(*(range(n) for n in batch))
        ]
        traced = np.moveaxis(np.reshape(np.stack(planes), batch + tuple(out_plane)), (-2, -1), axes)
    return with_value(traced, expected)


defcomposite(intercepted(_nd.rotate), _rotate, note="SciPy's rotation matrix and offset, affine_transform's rule")
