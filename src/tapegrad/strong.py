"""Strong zeros: an exactly zero cotangent entry contributes exactly zero, whatever it multiplies.

Kept apart from the sweep (:mod:`tapegrad.backward`), which runs with plain arithmetic first
and consults this module only when a result holds NaN.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import math
from typing import Any, Iterator, Sequence

import numpy as np

from .banded import BandedCotangent
from .finiteness import nan_free
from .lazy import is_duck_array
from .registry import RULE_TABLE
from .sparse_batch import SparseCotangent
from .tracer import Tracer, convert, strip

__all__ = ["MODE", "StrongZerosNeeded", "strong_zeros", "strong_zero", "has_nan", "lazy_seeds", "SafeRules"]

# A cotangent entry that is exactly zero contributes exactly zero to every argument,
# whatever the local partial derivative is (inf or NaN): an overwritten entry, the
# unselected branch of np.where, a masked slice.  Plain IEEE arithmetic gives
# 0 * inf = NaN there, and that NaN spreads into the result.
#
# The sweep runs with plain arithmetic first.  Replacing such a 0 * inf by 0 can only
# change result entries that plain arithmetic made NaN (every later step is linear in
# the cotangent: an entry that reads a NaN is NaN, one that does not read it is the
# same either way), so a result without NaN is already the strong-zero result, and the
# only cost is one look at each result.  A result with NaN is computed again with the
# element-wise rules' VJPs wrapped by :func:`strong_zero`.

#: "auto" (plain sweep, a second one with strong zeros when a result holds NaN),
#: "on" (strong zeros from the start), "off" (plain arithmetic only: the cotangents
#: are placeholders whose values mean nothing, as in forward.py's transpose trick).
MODE: contextvars.ContextVar = contextvars.ContextVar("tapegrad_strong_zeros", default="auto")


class StrongZerosNeeded(Exception):
    """A sweep that released its tape found NaN: the caller records again and sweeps with strong zeros."""


@contextlib.contextmanager
def strong_zeros(mode: str = "on") -> Iterator[None]:
    """Sweeps started inside use strong zeros from the start (``"on"``) or never (``"off"``)."""
    token = MODE.set(mode)
    try:
        yield
    finally:
        MODE.reset(token)


def lazy_seeds(seeds: Sequence[Any]) -> bool:
    """Whether a seed is a lazy (Dask) array, which cannot be looked at without computing."""
    for seed in seeds:
        if type(seed) is not np.ndarray and type(seed) is not BandedCotangent and is_duck_array(seed):
            return True
    return False


def has_nan(value: Any) -> bool:
    """Whether a result of the sweep holds NaN (a tracer is looked at through its value)."""
    if type(value) is Tracer:  # a traced result (a Hessian's inner sweep): its answer is a reuse guard
        return convert(value, has_nan)
    raw = value
    if type(raw) is SparseCotangent:
        raw = raw._data  # its stored entries (the others are zeros)
    if isinstance(raw, np.generic):  # a 0-d result can be a NumPy scalar
        return raw.dtype.kind in "fc" and bool(np.isnan(raw))
    if type(raw) is not np.ndarray or raw.dtype.kind not in "fc":
        return False  # Dask and co. never get here (their sweeps start with strong zeros)
    if raw.dtype.kind == "c":
        return bool(np.isnan(raw).any())
    if nan_free(raw):  # a banded product proved finite as it was made
        return False
    if raw.size <= 16 and not math.isnan(sum(raw.reshape(-1).tolist())):
        return False  # a few floats (a small gradient): a NaN entry makes Python's sum NaN
    # np.minimum propagates NaN: the minimum is NaN exactly when an entry is NaN. One
    # thread, no BLAS (a BLAS dot's second thread spins for a busy core on small machines).
    return raw.size > 0 and math.isnan(np.minimum.reduce(raw, axis=None))


def strong_zero(g: Any, gi: Any) -> Any:
    """``gi``, the cotangent an element-wise VJP computed from ``g``, with 0 wherever ``g`` is 0.

    Only entries that are not finite change (a finite ``0 * p`` is already 0). A traced
    ``gi`` (a higher derivative) goes through ``np.where``, which is recorded: its
    unselected branch gets a zero cotangent, so the next order has strong zeros too.
    """
    if gi is None or type(g) is tuple:
        return gi
    raw = strip(gi)
    if isinstance(raw, (np.ndarray, np.generic)):
        if raw.dtype.kind not in "fc":
            return gi
        finite = np.isfinite(raw)
        if finite.all():
            return gi
        # Only the entries that are not finite: a traced cotangent that is 0 here but
        # not nearby keeps its derivative wherever its product is finite.
        zero = (strip(g) == 0) & ~finite
        if not zero.any():
            return gi
        return np.where(zero, raw.dtype.type(0), gi)
    if is_duck_array(raw):  # lazy: no look at the values
        return np.where((strip(g) == 0) & ~np.isfinite(raw), 0, gi)
    return gi


def _strong(vjp: Any) -> Any:
    def vjp_with_strong_zeros(g: Any, ans: Any, *args: Any, **kwargs: Any) -> Any:
        return strong_zero(g, vjp(g, ans, *args, **kwargs))

    return vjp_with_strong_zeros


_SAFE_RULES: dict = {}


class SafeRules:
    """The rule table as a sweep with strong zeros sees it.

    tapegrad's element-wise ufunc rules (those taking 0-d operands, see
    ``Rule.scalar_operands``) get VJPs wrapped by :func:`strong_zero`, rules with
    their own strong VJPs (``Rule.strong_vjps``: the contractions) those, and dense
    cotangents (a banded or sparse batch keeps only its possible nonzeros: the two
    agree once zeros are strong).
    """

    __slots__ = ()

    def __getitem__(self, number: int) -> Any:
        rule = RULE_TABLE[number]
        if not rule.scalar_operands and not rule.strong_vjps:
            return rule
        safe = _SAFE_RULES.get(number)
        if safe is None or safe[0] is not rule:
            wrapped = copy.copy(rule)  # not a new Rule: that would take a place in RULE_TABLE
            if rule.strong_vjps:  # the rule's own (a contraction: tapegrad.rules._util.strong_bilinear)
                wrapped.vjps = rule.strong_vjps
            else:
                wrapped.vjps = tuple(_strong(v) if callable(v) else v for v in rule.vjps)
            wrapped.banded = wrapped.sparse = False  # structured batches arrive dense
            safe = _SAFE_RULES[number] = (rule, wrapped)
        return safe[1]
