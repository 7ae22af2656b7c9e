"""Plain arrays that a recorded call reads: they must not change under the tape.

A node keeps its constant arguments for the backward sweep (``x * c`` keeps ``c``,
``x[idx]`` keeps ``idx``).  NumPy code often writes into its arrays afterwards: a
work buffer refilled at every step of a loop, ``np.multiply(a, b, out=tmp)``, an
index array advanced in place.  Keeping a reference would then sweep with the new
values: a silently wrong gradient.  So a node keeps, of each plain array one of
its VJPs reads:

* a copy when it is small (at most :data:`COPY_BYTES`: cheaper than any check);
* nothing new when no one can write a large array's memory (it and the array that
  owns the memory are read-only);
* the array itself when it is large, made read-only (with the array that owns
  its memory) until the last recording window closes: a later write raises
  NumPy's "assignment destination is read-only", which :func:`write_error`
  turns into an error that says what to do.  Copying a large matrix at every
  use would double the cost of ``A @ x`` in a loop.

A view made before the array was frozen keeps its own flag; writes through it
are not seen (the one case left, see ``docs/limits.md``).
"""

from __future__ import annotations

import threading
from typing import Any, Optional

import numpy as np

from .errors import GradientDroppedError

__all__ = ["COPY_BYTES", "kept", "kept_index", "kept_read", "thaw_all", "write_error"]

#: Plain arrays up to this size are copied into the node that reads them.
COPY_BYTES = 1 << 15

_frozen: list = []  # arrays made read-only, in order; thawed when the last window closes
_lock = threading.Lock()


def _owner(a: np.ndarray) -> np.ndarray:
    while type(a.base) is np.ndarray:
        a = a.base
    return a


def kept(a: np.ndarray) -> np.ndarray:
    """What a node keeps of the plain ndarray ``a`` that one of its VJPs reads."""
    if a.nbytes <= COPY_BYTES:  # (cheaper than finding out whether anyone can write it)
        # The layout stays (an F-ordered constant gives F-ordered products), except a broadcast one's.
        return a.copy(order="C" if 0 in a.strides else "K")
    flags = a.flags
    owner = a if a.base is None else _owner(a)
    if not flags.writeable and (owner is a or not owner.flags.writeable):
        return a  # (a read-only view of a writable array, np.broadcast_to's, still changes with it)
    with _lock:
        if flags.writeable:
            flags.writeable = False
            _frozen.append(a)
        if owner is not a and owner.flags.writeable:
            owner.flags.writeable = False
            _frozen.append(owner)
    return a


def kept_index(index: Any) -> Any:
    """:func:`kept` for an index: an array, or a tuple holding arrays."""
    if type(index) is np.ndarray:
        return kept(index)
    if type(index) is tuple:
        return tuple(kept(i) if type(i) is np.ndarray else i for i in index)
    return index


def kept_read(needs: Optional[tuple], raw: tuple, positions: tuple, argnums: Any) -> tuple:
    """``raw`` with its plain arrays at ``positions`` kept (:func:`kept_index`) where a VJP of ``argnums`` reads them.

    ``needs`` is the rule's (``needs[argnum]``: the positions that VJP reads; ``None``: all).
    """
    read = None
    if needs is not None:
        read = set()
        for argnum in argnums:
            if argnum < len(needs):
                read.update(needs[argnum])
    out = list(raw)
    for i in positions:
        if read is None or i in read:
            out[i] = kept_index(out[i])
    return tuple(out)


def thaw_all() -> None:
    """Make every frozen array writable again (the last recording window closed)."""
    if not _frozen:
        return
    with _lock:
        arrays = _frozen[::-1]  # the owner after its view was frozen: thawed first
        _frozen.clear()
    for arr in arrays:
        try:
            arr.flags.writeable = True
        except ValueError:  # its owner was made read-only by someone else meanwhile
            pass


def write_error(exc: BaseException) -> Optional[GradientDroppedError]:
    """The error to raise instead of NumPy's read-only error when tapegrad froze the array, else ``None``."""
    if type(exc) is not ValueError or "read-only" not in str(exc) or not _frozen:
        return None
    return GradientDroppedError(
        "an array that a traced computation read was written into afterwards "
        f"({exc}). The gradient needs its values as they were when they were read, so "
        "tapegrad keeps large arrays read-only while it records. Write into a copy "
        "(buf = buf.copy()) or into a new array instead of reusing this one."
    )
