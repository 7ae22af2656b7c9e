"""``scipy.signal.find_peaks``, ``peak_prominences`` and ``peak_widths`` over a traced signal.

SciPy finds peaks in compiled loops.  Which samples are peaks, and the bases and
plateau edges, are piecewise constant in the signal: SciPy's own call on the plain
values decides them (every condition, every tie rule).  The *values* it reports
are functions of the signal, and come back traced, each written with the
indices SciPy chose:

* ``peak_heights = x[p]``; ``left_thresholds = x[p] - x[p - 1]``, ``right_thresholds = x[p] - x[p + 1]``;
* ``prominences = x[p] - max(x[left_base], x[right_base])``;
* ``width_heights = x[p] - rel_height * prominence``, and ``left_ips``/``right_ips``:
  the crossing of that height, found on the plain samples as SciPy scans them and
  linearly interpolated between the two samples around it (``widths`` is their
  difference).

Each traced property is checked against SciPy's plain one before it is returned,
and its value is SciPy's, bit for bit.  Derivatives are exact away from the
switching points (where a peak appears, two bases tie, or a crossing moves to
another pair of samples), as for any piecewise-smooth function in tapegrad.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import signal as _signal

from ..binding import strip_all
from ..errors import NonDifferentiableArgumentError
from ..registry import ORIGINALS, defcomposite, intercepted
from ..tracer import Tracer
from ._scipy_util import with_value

__all__: list = []


def _checked(name: str, traced: Any, plain: np.ndarray) -> Any:
    if not np.allclose(strip_all(traced), plain, rtol=1e-9, atol=1e-12, equal_nan=True):
        raise NonDifferentiableArgumentError(
            f"scipy.signal: tapegrad's traced {name} disagree with SciPy's; please report this"
        )
    return with_value(traced, plain)


def _crossings(x_plain: np.ndarray, peaks, heights, left_bases, right_bases):
    """The samples SciPy's width scan stops at, on each side of each peak (plain indices)."""
    left = np.empty(len(peaks), dtype=np.intp)
    right = np.empty(len(peaks), dtype=np.intp)
    for k, (peak, height, lo, hi) in enumerate(zip(peaks, heights, left_bases, right_bases)):
        i = peak
        while lo < i and height < x_plain[i]:
            i -= 1
        left[k] = i
        i = peak
        while i < hi and height < x_plain[i]:
            i += 1
        right[k] = i
    return left, right


def _traced_widths(x, x_plain, peaks, prominences, left_bases, right_bases, rel_height):
    """``widths, width_heights, left_ips, right_ips`` traced in ``x`` (and a traced prominence)."""
    heights = x[peaks] - prominences * rel_height
    heights_plain = strip_all(heights)
    left, right = _crossings(x_plain, peaks, heights_plain, left_bases, right_bases)
    # Interpolate where the crossing lies strictly between two samples, as SciPy does.
    below_left = x_plain[left] < heights_plain
    below_right = x_plain[right] < heights_plain
    next_left = np.minimum(left + 1, len(x_plain) - 1)
    prev_right = np.maximum(right - 1, 0)
    left_step = np.where(below_left, (heights - x[left]) / np.where(below_left, x[next_left] - x[left], 1.0), 0.0)
    right_step = np.where(below_right, (heights - x[right]) / np.where(below_right, x[prev_right] - x[right], 1.0), 0.0)
    left_ips = left + left_step
    right_ips = right - right_step
    return right_ips - left_ips, heights, left_ips, right_ips


def _prominences_of(x, peaks, left_bases, right_bases):
    return x[peaks] - np.maximum(x[left_bases], x[right_bases])


def _find_peaks(x, height=None, threshold=None, distance=None, prominence=None, width=None, wlen=None,
                rel_height=0.5, plateau_size=None):
    conditions = [strip_all(c) for c in (height, threshold, distance, prominence, width, wlen, rel_height, plateau_size)]
    peaks, props = ORIGINALS[_signal.find_peaks](strip_all(x), *conditions)
    if type(x) is not Tracer:
        return peaks, props
    x_plain = strip_all(x)
    traced = dict(props)
    if "peak_heights" in props:
        traced["peak_heights"] = _checked("peak heights", x[peaks], props["peak_heights"])
    if "left_thresholds" in props:
        traced["left_thresholds"] = _checked("thresholds", x[peaks] - x[peaks - 1], props["left_thresholds"])
        traced["right_thresholds"] = _checked("thresholds", x[peaks] - x[peaks + 1], props["right_thresholds"])
    if "prominences" in props:
        prom = _prominences_of(x, peaks, props["left_bases"], props["right_bases"])
        traced["prominences"] = _checked("prominences", prom, props["prominences"])
    if "widths" in props:
        parts = _traced_widths(x, x_plain, peaks, traced["prominences"], props["left_bases"], props["right_bases"],
                               conditions[6])
        for key, value in zip(("widths", "width_heights", "left_ips", "right_ips"), parts):
            traced[key] = _checked(key.replace("_", " "), value, props[key])
    return peaks, traced


def _peak_prominences(x, peaks, wlen=None):
    prominences, left_bases, right_bases = ORIGINALS[_signal.peak_prominences](strip_all(x), strip_all(peaks), strip_all(wlen))
    peaks = np.asarray(strip_all(peaks), dtype=np.intp)
    prom = _prominences_of(x, peaks, left_bases, right_bases)
    return _checked("prominences", prom, prominences), left_bases, right_bases


def _peak_widths(x, peaks, rel_height=0.5, prominence_data=None, wlen=None):
    plain = ORIGINALS[_signal.peak_widths](strip_all(x), strip_all(peaks), strip_all(rel_height), strip_all(prominence_data),
                                           strip_all(wlen))
    peaks = np.asarray(strip_all(peaks), dtype=np.intp)
    if prominence_data is None:
        prominences, left_bases, right_bases = _peak_prominences(x, peaks, wlen)
    else:
        prominences, left_bases, right_bases = prominence_data
        left_bases, right_bases = np.asarray(strip_all(left_bases)), np.asarray(strip_all(right_bases))
    parts = _traced_widths(x, strip_all(x), peaks, prominences, left_bases, right_bases, strip_all(rel_height))
    return tuple(_checked(name, value, p) for name, value, p in zip(("widths", "width heights", "left ips", "right ips"),
                                                                    parts, plain))


defcomposite(intercepted(_signal.find_peaks), _find_peaks, note="peaks chosen by SciPy; their values traced")
defcomposite(intercepted(_signal.peak_prominences), _peak_prominences, note="bases chosen by SciPy; values traced")
defcomposite(intercepted(_signal.peak_widths), _peak_widths, note="crossings chosen as SciPy's scan; interpolated")
