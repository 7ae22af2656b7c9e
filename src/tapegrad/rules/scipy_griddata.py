"""``scipy.interpolate.griddata`` over traced *values*: the interpolant is linear in them.

For fixed sample points and query points, ``griddata``'s ``linear`` and ``nearest``
methods are linear maps of the values: each query point is a barycentric
combination of the corners of the Delaunay simplex that holds it (``linear``),
or the value at the nearest sample (``nearest``).  The rule lets SciPy find the
simplices, barycentric weights and nearest samples on the plain points (Qhull
and the KD-tree, in compiled code), then gathers the traced values there with
NumPy, so the derivative is exact at every order; points outside the convex hull
take ``fill_value``, a constant.  The value is SciPy's own, bit for bit.

One-dimensional data run SciPy's own code (``interp1d``, which has rules of its
own), every method included.  Not differentiated, with a clear error: traced
sample points or query points (the triangulation is combinatorial; for smooth
dependence on the points use ``RBFInterpolator``), ``method="cubic"`` in 2-D
(Clough-Tocher's gradients come from an iterative solve), and ``rescale=True``.
"""

from __future__ import annotations

import sys

import numpy as np
from scipy.interpolate import LinearNDInterpolator, griddata

from ..dispatch import strip
from ..errors import NonDifferentiableArgumentError
from ..registry import ORIGINALS, defcomposite, intercepted
from ..tracer import Tracer
from ._scipy_util import has_tracer, with_value

__all__: list = []


def _refuse(why: str) -> NonDifferentiableArgumentError:
    return NonDifferentiableArgumentError(f"scipy.interpolate.griddata: {why}")


def _griddata(points, values, xi, method="linear", fill_value=np.nan, rescale=False):
    original = ORIGINALS[griddata]
    if has_tracer(points) or has_tracer(xi):
        raise _refuse(
            "traced sample or query points are not differentiated (the Delaunay triangulation is "
            "combinatorial); only the values may be traced. RBFInterpolator depends smoothly on its points."
        )
    coords = sys.modules[griddata.__module__]._ndim_coords_from_arrays
    sample = coords(points)
    ndim = sample.shape[-1] if sample.ndim >= 2 else sample.ndim
    if ndim == 1 or type(values) is not Tracer:
        return original(points, values, xi, method, fill_value, rescale)  # interp1d, with its own rules
    expected = original(points, strip(values), xi, method, fill_value, rescale)
    if method not in ("linear", "nearest"):
        raise _refuse(f"method={method!r} with traced values is not differentiated; use 'linear' or 'nearest'")
    if rescale:
        raise _refuse("rescale=True with traced values is not differentiated; rescale the points yourself")
    sample = np.reshape(sample, (-1, ndim))
    query = np.reshape(coords(xi, ndim=ndim), (-1, ndim))
    n = sample.shape[0]
    if method == "nearest":
        # SciPy's own nearest sample (its KD-tree and tie rule): interpolate the sample numbers.
        nearest = original(sample, np.arange(n), query, "nearest").astype(np.intp)
        traced = values[nearest]
    else:
        tri = LinearNDInterpolator(sample, np.zeros(n)).tri  # the triangulation griddata's interpolant uses
        simplex = tri.find_simplex(query)
        inside = simplex >= 0
        transform = tri.transform[np.where(inside, simplex, 0)]
        b = np.einsum("mij,mj->mi", transform[:, :ndim, :], query - transform[:, ndim, :])
        weights = np.concatenate([b, 1.0 - b.sum(axis=1, keepdims=True)], axis=1)  # (m, ndim + 1)
        corners = tri.simplices[np.where(inside, simplex, 0)]  # (m, ndim + 1)
        gathered = values[corners]  # (m, ndim + 1) + values' trailing shape
        weights = np.reshape(weights, weights.shape + (1,) * (np.ndim(values) - 1))
        combined = np.sum(weights * gathered, axis=1)
        mask = np.reshape(inside, (-1,) + (1,) * (np.ndim(values) - 1))
        traced = np.where(mask, combined, np.asarray(fill_value, dtype=float))
    traced = np.reshape(traced, np.shape(expected))
    # The gathered map must be SciPy's: checked on the plain values (a point Qhull places
    # differently within rounding of a simplex's face would otherwise get another map).
    if not np.allclose(strip(traced), expected, rtol=1e-9, atol=1e-12, equal_nan=True):
        raise _refuse("tapegrad's gathering of the values disagrees with SciPy's interpolation here; please report this")
    return with_value(traced, expected)


defcomposite(intercepted(griddata), _griddata, note="linear in the values: SciPy's simplices and weights, gathered")
