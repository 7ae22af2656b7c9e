"""Large element-wise ufunc calls, split across a few threads.

NumPy runs every ufunc loop on one thread.  For a one-output element-wise
ufunc on large float64 or complex128 arrays (``np.sin(x)`` with ``x`` of 10^6
elements) the output's elements are independent, so the call can be cut into
contiguous chunks that run at once: NumPy releases the GIL inside the loop,
and each element is computed by the very same loop, so the result has the
same bits as the one-thread call.  PyTorch and XLA do the same for their
element-wise kernels; without it a traced Hessian-vector product on 10^6
elements spends a third of its time in single-threaded ``sin`` and ``cos``
(and complex128 ``exp`` or ``log`` take 20-70 ns per element).

The recorder calls this for the forward values of rules marked element-wise
(``Rule.elementwise``), and a sweep for the ``cos(x)`` that ``sin``'s VJP needs
when the forward did not compute it, the sweep for large sums of cotangents,
and the VJPs that are one ufunc call (``g * y``) on the nodes of large outputs
(``Rule.large_twin``).  From :data:`MIN_SIZE` elements, loops that take at least
:data:`SPLIT_NS` per element (timed once, on a sample in cache) are split; from
:data:`SPLIT_ANY` elements every loop is, for two cores move a large product's
memory faster than one.

Floating-point errors keep NumPy's meaning: the chunks run with the caller's
error settings turned into flags, and if any chunk flags an error the caller
has not silenced, the whole call is computed again in the caller's thread,
where NumPy warns, raises or calls back exactly as it would have.

The number of threads is :func:`num_threads`: the environment variable
``TAPEGRAD_NUM_THREADS`` if set, else the CPUs this process may run on (at
most 8); 1 turns the splitting off.  The pool starts on first use and is
rebuilt in a forked child.
"""

from __future__ import annotations

import os
import threading
import warnings
from math import prod
from time import perf_counter
from typing import Any, Callable, Optional, Sequence

import numpy as np

__all__ = ["MIN_SIZE", "SPLIT_ANY", "SPLIT_NS", "call", "num_threads", "set_num_threads", "splittable"]

#: Fewer elements than this run in one call: handing a chunk to another thread
#: costs tens of microseconds, about what 2^18 products take.
MIN_SIZE = 1 << 18
# Chunk boundaries fall on multiples of this many elements (8 KiB), keeping
# every chunk as aligned as the whole array.
_ALIGN = 1 << 10
_MAX_DEFAULT = 8
#: Below :data:`SPLIT_ANY` elements, only loops that take at least this many
#: nanoseconds per element (measured once per ufunc and dtype, on a sample in cache:
#: :func:`_loop_cost`) are split (the sample measures 0.3-0.55 ns for add, multiply,
#: divide, negative, square; a loaded machine once gave 10^6 products 0.495 ms on one
#: thread and 0.491 ms on two).  exp,
#: log1p, sqrt and tanh measure 1.1-1.7 ns and ran 1.5-1.7x faster on two threads;
#: sin and cos measure 8.5 ns, complex128 exp and log 20-70 ns.
SPLIT_NS = 0.8
#: From this many elements on, every loop is split, cheap or not.  Measured on an
#: idle two-core machine (a product of two float64 arrays into a new one):
#: 5 * 10^5 elements 0.44 ms on one thread, 0.37 ms on two; 10^6, 0.89 ms and 0.59 ms;
#: 4 * 10^6, 5.7 ms and 2.3 ms.  The per-element sample above runs in cache and
#: cannot see that: a large product is bound by memory traffic, which two cores
#: still move faster than one.  (At 2 * 10^5 the hand-over cost more than it saved.)
SPLIT_ANY = 1 << 19
# Elements in the sample that _loop_cost times (32 KiB of float64).
_SAMPLE = 4096
_FLOAT64 = np.dtype(np.float64)
_COMPLEX128 = np.dtype(np.complex128)

_lock = threading.Lock()
_threads: Optional[int] = None
_pool: Any = None
_pool_pid: Optional[int] = None
# Per (ufunc, arity, type char): whether it has a loop from that type to that type,
# so that such operands give an output of their dtype (``np.ldexp`` does not qualify).
_LOOPS: dict = {}
# Per (ufunc, type char): nanoseconds per element of its loop (_loop_cost), measured once.
_COST: dict = {}


def num_threads() -> int:
    """The number of threads an element-wise call on a large array is split across."""
    global _threads
    if _threads is None:
        env = os.environ.get("TAPEGRAD_NUM_THREADS", "").strip()
        if env:
            try:
                _threads = max(1, int(env))
            except ValueError:
                warnings.warn(
                    f"TAPEGRAD_NUM_THREADS={env!r} is not a whole number; using one thread per CPU "
                    "(at most 8). Set it to 1 to turn splitting off.",
                    RuntimeWarning,
                    stacklevel=2,
                )
                env = ""
        if not env:
            try:
                cpus = len(os.sched_getaffinity(0))
            except AttributeError:  # macOS, Windows
                cpus = os.cpu_count() or 1
            _threads = max(1, min(cpus, _MAX_DEFAULT))
    return _threads


def set_num_threads(n: int) -> None:
    """Split large element-wise calls across ``n`` threads (1: never split).

    Parameters
    ----------
    n : int
        At least 1.  Takes effect for the next call; a running pool is replaced.
    """
    global _threads, _pool
    if int(n) < 1:
        raise ValueError(f"set_num_threads: n must be at least 1, got {n}")
    with _lock:
        _threads = int(n)
        old, _pool = _pool, None
    if old is not None:
        old.shutdown(wait=False)


def _get_pool(workers: int) -> Any:
    global _pool, _pool_pid
    pid = os.getpid()
    if _pool is None or _pool_pid != pid:  # a forked child inherits a pool without threads
        with _lock:
            if _pool is None or _pool_pid != pid:
                from concurrent.futures import ThreadPoolExecutor  # only when a large call comes

                _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tapegrad")
                _pool_pid = pid
    return _pool


def _after_fork_in_child() -> None:
    # The child has none of the parent's threads, and a lock another thread held at
    # the fork stays held: start both afresh.
    global _lock, _pool, _pool_pid
    _lock = threading.Lock()
    _pool = _pool_pid = None


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _has_loop(ufunc: np.ufunc, nin: int, char: str) -> bool:
    """Whether ``ufunc`` has a one-output loop from ``nin`` operands of type ``char`` to it."""
    key = (ufunc, nin, char)
    known = _LOOPS.get(key)
    if known is None:
        known = ufunc.nout == 1 and (char * nin + "->" + char) in ufunc.types
        _LOOPS[key] = known
    return known


def splittable(values: Sequence[Any], placeholders: bool = False) -> Optional[tuple]:
    """``(shape, dtype)`` shared by ``values`` when a call on them can be cut into flat chunks, else None.

    Every value must be an array of one dtype, float64 or complex128, and one
    shape with at least :data:`MIN_SIZE` elements (C-contiguous, or 1-D with
    any stride, so that a flat range of it is a view), a 0-d array of that
    dtype or a Python float (or, next to complex128 arrays, a Python complex),
    each passed whole to every chunk; with ``placeholders`` any other non-array
    object (a pruned value the call does not read) is passed whole too.
    """
    shape = dtype = None
    has_complex = False
    for v in values:
        t = type(v)
        if t is np.ndarray:
            vtype = v.dtype
            if dtype is None:
                if vtype != _FLOAT64 and vtype != _COMPLEX128:
                    return None
                dtype = _FLOAT64 if vtype == _FLOAT64 else _COMPLEX128
            elif vtype != dtype:
                return None  # mixed: NumPy casts, which its own call does best
            if v.ndim == 0:
                continue
            if shape is None:
                if v.size < MIN_SIZE:
                    return None
                shape = v.shape
            elif v.shape != shape:
                return None
            if v.ndim > 1 and not v.flags.c_contiguous:
                return None
        elif t is complex:
            has_complex = True
        elif t is not float and (not placeholders or isinstance(v, (np.ndarray, np.generic, int))):
            return None  # other arrays, NumPy scalars, Python ints: NumPy's own rules decide
    if shape is None or (has_complex and dtype is not _COMPLEX128):
        return None
    return shape, dtype


def _flat(values: Sequence[Any]) -> list:
    """``(flat view, True)`` for each array to cut, ``(value, False)`` for each passed whole."""
    return [(v.reshape(-1), True) if type(v) is np.ndarray and v.ndim else (v, False) for v in values]


def _run(size: int, task: Callable[[int, int], None], threads: int) -> bool:
    """Run ``task(start, stop)`` over ``[0, size)`` in one range per thread; True when an error was flagged.

    Floating-point errors the caller does not ignore become flags (the caller
    redoes such a call whole, in its own thread, where NumPy reports them).
    """
    step = -(-size // threads)
    step = -(-step // _ALIGN) * _ALIGN
    watched = {kind: ("ignore" if action == "ignore" else "call") for kind, action in np.geterr().items()}
    flagged: list = []

    def flag(kind: str, code: int) -> None:
        flagged.append(kind)

    def run(start: int) -> None:
        with np.errstate(call=flag, **watched):
            task(start, min(start + step, size))

    starts = list(range(step, size, step))
    futures = []
    try:
        pool = _get_pool(threads - 1)
        while starts:
            futures.append(pool.submit(run, starts[0]))
            del starts[0]
    except RuntimeError:  # no thread can start (interpreter shutdown, a thread limit)
        pass  # this thread computes the chunks not handed over
    try:
        run(0)
        for start in starts:
            run(start)
    finally:
        for f in futures:
            f.result()
    return bool(flagged)


def _loop_cost(ufunc: np.ufunc, operands: Sequence[Any], dtype: np.dtype) -> float:
    """Nanoseconds per element of ``ufunc``'s loop on the first :data:`_SAMPLE` elements of ``operands``.

    Timed on copies small enough to stay in the core's cache (best of three,
    after a warm-up call), so that it measures the loop's arithmetic: timing a
    first large call measured page faults and cold caches instead (an add came
    out at 8.7 ns per element, four times ``cos``'s real cost).
    """
    sample = [v.reshape(-1)[:_SAMPLE].copy() if type(v) is np.ndarray and v.ndim else v for v in operands]
    out = np.empty(_SAMPLE, dtype=dtype)
    best = float("inf")
    with np.errstate(all="ignore"):  # the real call reports errors, not this sample
        for _ in range(4):
            began = perf_counter()
            ufunc(*sample, out=out)
            best = min(best, perf_counter() - began)
    return best * 1e9 / _SAMPLE


def call(ufunc: Callable[..., Any], operands: Sequence[Any]) -> Any:
    """``ufunc(*operands)``, split across threads when that gives the same bits faster.

    Split only when the operands are :func:`splittable`, ``ufunc`` is a NumPy
    ufunc with a one-output loop from their dtype to it, and that loop takes at
    least :data:`SPLIT_NS` per element (any loop from :data:`SPLIT_ANY` elements
    on); otherwise, and with one thread, this is ``ufunc(*operands)``.
    """
    threads = _threads if _threads is not None else num_threads()
    common = splittable(operands) if threads > 1 and type(ufunc) is np.ufunc else None
    if common is None or not _has_loop(ufunc, len(operands), common[1].char):
        return ufunc(*operands)
    shape, dtype = common
    size = prod(shape)
    if size < SPLIT_ANY:
        key = (ufunc, dtype.char)
        cost = _COST.get(key)
        if cost is None:
            cost = _COST[key] = _loop_cost(ufunc, operands, dtype)
        if cost < SPLIT_NS:
            return ufunc(*operands)
    result = np.empty(shape, dtype=dtype)
    flat_out = result.reshape(-1)
    flat = _flat(operands)

    def task(start: int, stop: int) -> None:
        ufunc(*[v[start:stop] if cut else v for v, cut in flat], out=flat_out[start:stop])

    if _run(size, task, threads):
        return ufunc(*operands)  # NumPy reports the error as the one-thread call would
    return result
