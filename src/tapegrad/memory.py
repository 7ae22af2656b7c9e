"""Opt-in allocator tuning for large gradients.

Reverse mode keeps the forward's intermediates alive until the backward sweep,
so a gradient allocates far more memory at once than the plain forward does.
With glibc's default policy that memory is handed back to the kernel when the
call ends and faulted in, zero-filled, on the next call: for workloads of large
arrays that is a visible share of the time (measured in docs/benchmarks.md).

:func:`retain_freed_memory` asks glibc to keep freed memory in the process for
reuse instead.  It changes the allocator of the *whole process* (the resident
size then stays at its high-water mark), so tapegrad never does it on its own:
call it, or set ``TAPEGRAD_RETAIN_MEMORY=1`` before ``import tapegrad``.
"""

from __future__ import annotations

__all__ = ["retain_freed_memory"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# glibc's documented defaults, restored by retain_freed_memory(False).
_DEFAULT_TRIM = 128 * 1024
_DEFAULT_MMAP = 128 * 1024


def retain_freed_memory(enabled: bool = True) -> bool:
    """Keep freed memory in the process (glibc only) so repeated gradients reuse warm pages.

    Parameters
    ----------
    enabled : bool, default True
        ``True`` raises malloc's trim threshold to 512 MiB and serves blocks up to
        32 MiB from the heap; ``False`` restores glibc's default thresholds.

    Returns
    -------
    bool
        Whether the setting was applied (``False`` where the C library has no
        ``mallopt``, e.g. macOS, Windows or musl).
    """
    import ctypes  # only here: most processes never need it
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if enabled:
        ok = mallopt(_M_MMAP_THRESHOLD, 32 * 1024 * 1024) and mallopt(_M_TRIM_THRESHOLD, 512 * 1024 * 1024)
    else:
        ok = mallopt(_M_MMAP_THRESHOLD, _DEFAULT_MMAP) and mallopt(_M_TRIM_THRESHOLD, _DEFAULT_TRIM)
    return bool(ok)
