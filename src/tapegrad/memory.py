"""How tapegrad asks the C allocator to keep freed memory for reuse.

Reverse mode keeps the forward's intermediates alive until the backward sweep
and allocates large batched cotangents, so a gradient allocates far more
memory at once than the plain forward does.  With glibc's default policy that
memory is handed back to the kernel when the call ends and faulted in,
zero-filled, on the next call: measured here, page faults were 25-45 % of a
gradient's time on large arrays (docs/benchmarks.md).

So the first tape tapegrad creates asks glibc (``mallopt``) to keep up to
256 MiB of freed memory and to serve blocks up to 32 MiB from the heap, where
freed blocks are reused instead of unmapped.  That is a process-wide setting:
the resident size may stay near its high-water mark.  Opt out with
``TAPEGRAD_RETAIN_MEMORY=0`` in the environment, or call
``tapegrad.retain_freed_memory(False)`` (which also restores glibc's defaults).
Results never depend on it; where there is no glibc (macOS, Windows, musl)
nothing happens.
"""

from __future__ import annotations

import os

__all__ = ["retain_freed_memory", "apply_default_policy"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# glibc's documented defaults, restored by retain_freed_memory(False).
_DEFAULT_TRIM = 128 * 1024
_DEFAULT_MMAP = 128 * 1024
_RETAINED_TRIM = 256 * 1024 * 1024
_RETAINED_MMAP = 32 * 1024 * 1024

#: Whether the policy has been decided (by the first tape, or by the user).
_decided = False


def _mallopt():
    """glibc's ``mallopt``, or ``None`` where the C library is not glibc."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
    except (AttributeError, ValueError, OSError):
        return None
    import ctypes  # only here: most processes never need it

    try:
        mallopt = ctypes.CDLL(None).mallopt  # the running process's C library, no search
    except (OSError, AttributeError, TypeError):
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt


def retain_freed_memory(enabled: bool = True) -> bool:
    """Keep freed memory in the process (glibc only) so repeated gradients reuse warm pages.

    tapegrad switches this on by itself when it creates its first tape, unless
    ``TAPEGRAD_RETAIN_MEMORY=0`` is set; calling this function decides it for
    the rest of the process.

    Parameters
    ----------
    enabled : bool, default True
        ``True`` raises malloc's trim threshold to 256 MiB and serves blocks up to
        32 MiB from the heap; ``False`` restores glibc's default thresholds.

    Returns
    -------
    bool
        Whether the setting was applied (``False`` where the C library has no
        ``mallopt``, e.g. macOS, Windows or musl).
    """
    global _decided
    _decided = True
    mallopt = _mallopt()
    if mallopt is None:
        return False
    if enabled:
        ok = mallopt(_M_MMAP_THRESHOLD, _RETAINED_MMAP) and mallopt(_M_TRIM_THRESHOLD, _RETAINED_TRIM)
    else:
        ok = mallopt(_M_MMAP_THRESHOLD, _DEFAULT_MMAP) and mallopt(_M_TRIM_THRESHOLD, _DEFAULT_TRIM)
    return bool(ok)


def apply_default_policy() -> None:
    """Called by the first tape: retain freed memory unless the user said otherwise."""
    global _decided
    if _decided:
        return
    _decided = True
    if os.environ.get("TAPEGRAD_RETAIN_MEMORY", "").strip() != "0":
        retain_freed_memory(True)
