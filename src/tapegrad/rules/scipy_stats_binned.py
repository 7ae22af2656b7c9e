"""``scipy.stats.binned_statistic`` (``_2d``, ``_dd``) over traced values.

Which bin each sample falls in is piecewise constant in the sample coordinates:
SciPy's own call on the plain inputs decides it (its bin edges, its bin numbers,
its checks) and gives the value, bit for bit.  The statistic of each bin is then
recomputed from the traced values with the bin numbers SciPy returned:

* ``sum``: a weighted ``bincount``; ``mean``: the sum over the (constant) count;
  ``std``: the root mean square deviation from the bin's mean; ``count``: a constant;
* ``min``/``max``: the value SciPy picked (the first of equal values in its order);
  ``median``: the middle value, or the mean of the two middle values;
* a Python callable: called on each bin's traced values.

Empty bins keep SciPy's fill (``nan``, or 0 for ``sum`` and ``count``), a constant.
Bin edges computed from a traced sample (no explicit ``bins`` edges or ``range``)
move with its minimum and maximum, as ``np.histogram_bin_edges``' do.
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np
from scipy import stats as _stats

from ..binding import has_tracer, strip_all
from ..errors import NonDifferentiableArgumentError
from ..registry import ORIGINALS, defcomposite, intercepted
from ..tracer import Tracer
from ._scipy_util import with_value

__all__: list = []

_DD = _stats.binned_statistic_dd


def _rows(values: Any, n_samples: int) -> Any:
    """``values`` as SciPy iterates them: ``(rows, n_samples)``."""
    v = values if type(values) is Tracer else np.asarray(values)
    return np.reshape(v, (-1, n_samples))


def _statistic_of(statistic: Any, row: Any, row_plain: np.ndarray, bins: np.ndarray, size: int, fill: np.ndarray):
    """One row's statistic per (extended) bin, traced, ``fill`` where SciPy leaves its fill."""
    count = np.bincount(bins, minlength=size).astype(np.float64)
    filled = count > 0
    safe = np.where(filled, count, 1.0)
    if statistic in ("sum", np.sum):
        return np.bincount(bins, weights=row, minlength=size)
    if statistic in ("mean", np.mean):
        return np.where(filled, np.bincount(bins, weights=row, minlength=size) / safe, fill)
    if statistic in ("std", np.std):
        mean = np.bincount(bins, weights=row, minlength=size) / safe
        delta = row - mean[bins]
        var = np.bincount(bins, weights=delta * delta, minlength=size) / safe
        positive = (np.asarray(strip_all(var)) > 0) & filled
        return np.where(positive, np.sqrt(np.where(positive, var, 1.0)), np.where(filled, 0.0, fill))
    if statistic in ("min", np.min, "max", np.max):
        # SciPy writes the values in sorted order and keeps the last write per bin.
        order = np.argsort(row_plain)
        if statistic in ("min", np.min):
            order = order[::-1]
        last = np.full(size, -1, dtype=np.intp)
        last[bins[order]] = order
        pick = np.where(last >= 0, last, 0)
        return np.where(last >= 0, row[pick], fill)
    if statistic in ("median", np.median):
        order = np.lexsort((row_plain, bins))
        sorted_bins = bins[order]
        present, first, counts = np.unique(sorted_bins, return_index=True, return_counts=True)
        mid = first + (counts - 1) / 2
        lower, upper = order[np.floor(mid).astype(np.intp)], order[np.ceil(mid).astype(np.intp)]
        medians = (row[lower] + row[upper]) / 2
        out = np.zeros_like(medians, shape=(size,)) + fill  # traced: the writes below are recorded
        out[present] = medians
        return out
    if callable(statistic):
        pieces = []
        for b in builtins.range(size):
            members = np.flatnonzero(bins == b)
            pieces.append(statistic(row[members]) if members.size else fill[b])
        return np.stack([p if type(p) is Tracer else np.asarray(p, dtype=np.float64) for p in pieces])
    raise NonDifferentiableArgumentError(f"scipy.stats.binned_statistic_dd: statistic={statistic!r} is not differentiated")


def _traced_edges(sample: Any, plain_edges: list, bins: Any, range_: Any) -> list:
    """The bin edges, traced when SciPy computed them from a traced sample's extent."""
    explicit = not isinstance(bins, (int, np.integer)) and not (
        isinstance(bins, (list, tuple)) and all(isinstance(b, (int, np.integer)) for b in bins)
    )
    if not has_tracer(sample) or explicit or range_ is not None:
        return plain_edges
    if isinstance(sample, (list, tuple)):  # a sequence of 1-D coordinate arrays
        columns = np.stack([c if type(c) is Tracer else np.asarray(c, dtype=np.float64) for c in sample], axis=1)
    elif np.ndim(sample) > 1:
        columns = sample
    else:
        columns = np.reshape(sample, (-1, 1))
    traced = []
    for i, edges in enumerate(plain_edges):
        lo, hi = np.min(columns[:, i]), np.max(columns[:, i])
        if edges[0] != np.min(strip_all(columns)[:, i]) or edges[-1] != np.max(strip_all(columns)[:, i]):
            traced.append(edges)  # SciPy widened an empty extent by +-0.5: constant edges
            continue
        traced.append(with_value(lo + (hi - lo) * np.linspace(0.0, 1.0, len(edges)), edges))
    return traced


def _binned_statistic_dd(sample, values, statistic="mean", bins=10, range=None, expand_binnumbers=False,
                         binned_statistic_result=None):
    plain = ORIGINALS[_DD](strip_all(sample), strip_all(values), statistic, strip_all(bins), strip_all(range),
                           False, binned_statistic_result)
    if not has_tracer(values) or statistic == "count":
        traced_stat = plain.statistic
    else:
        edges = plain.bin_edges
        ext_shape = tuple(len(e) + 1 for e in edges)
        size = int(np.prod(ext_shape))
        bins_flat = np.asarray(plain.binnumber, dtype=np.intp)
        n = bins_flat.shape[0]
        rows = _rows(values, n)
        rows_plain = np.asarray(strip_all(values), dtype=np.float64).reshape(-1, n)
        fill = np.full(size, 0.0 if statistic in ("sum", np.sum) else np.nan)
        if callable(statistic) and statistic not in (np.sum, np.mean, np.std, np.min, np.max, np.median):
            with np.errstate(invalid="ignore"):
                try:
                    fill = np.full(size, float(statistic([])))
                except Exception:
                    fill = np.full(size, np.nan)
        per_row = [_statistic_of(statistic, rows[k], rows_plain[k], bins_flat, size, fill)
                   for k in builtins.range(rows.shape[0])]
        full = np.reshape(np.stack(per_row), (rows.shape[0],) + ext_shape)
        core = full[(slice(None),) + (slice(1, -1),) * len(ext_shape)]
        traced_stat = with_value(np.reshape(core, np.shape(plain.statistic)), plain.statistic)
    edges = _traced_edges(sample, list(plain.bin_edges), bins, range)
    binnumber = plain.binnumber
    if expand_binnumbers and len(edges) > 1:
        binnumber = np.asarray(np.unravel_index(binnumber, tuple(len(e) + 1 for e in plain.bin_edges)))
    return type(plain)(traced_stat, edges, binnumber)


defcomposite(intercepted(_DD), _binned_statistic_dd, note="SciPy's bins; each bin's statistic from the traced values")
