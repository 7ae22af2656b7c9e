"""The gradient of an objective over a larger-than-memory Dask array, chunk by chunk.

The field ``u`` (float64, 8 GiB by default) is generated lazily by
``dask.array.random``; it never exists in memory as a whole.  tapegrad traces
:func:`tapegrad.examples.smooth_field_energy` (elementwise potential +
three-point stencil + means) on it and returns the value and the gradient as
lazy Dask arrays.  One ``dask.compute`` then evaluates the value, the norm of
the gradient and a few slices of it, chunk by chunk, with Dask's progress bar.
With ``--zarr PATH`` the full gradient is written to a Zarr store instead.

The script reports wall time and peak resident memory (sampled) of a plain
Dask evaluation of the forward objective and of the value-and-gradient, and
their ratio::

    python examples/dask_out_of_core.py                 # 8 GiB
    python examples/dask_out_of_core.py --gib 0.5       # a quick run
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np

import tapegrad as tg
from tapegrad.examples import smooth_field_energy


class PeakRSS:
    """Samples this process's resident memory in a thread; ``peak`` in bytes."""

    def __init__(self, interval: float = 0.02) -> None:
        import psutil

        self._process = psutil.Process()
        self._interval = interval
        self.peak = 0

    def __enter__(self) -> "PeakRSS":
        self.peak = self._process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._process.memory_info().rss)
            self._stop.wait(self._interval)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._process.memory_info().rss)


def field(n: int, chunk: int, seed: int = 0):
    """A lazily generated field of ``n`` float64 values in chunks of ``chunk``."""
    import dask.array as da

    rng = da.random.default_rng(seed)
    return rng.standard_normal(n, chunks=chunk)


def main(argv=None) -> dict:
    import dask
    from dask.diagnostics import ProgressBar

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=8.0, help="size of the float64 field in GiB (default 8)")
    parser.add_argument("--chunk-mib", type=float, default=32.0, help="chunk size in MiB (default 32)")
    parser.add_argument("--zarr", default=None, help="write the gradient to this Zarr store instead of reducing it")
    parser.add_argument("--no-progress", action="store_true", help="hide Dask's progress bar")
    args = parser.parse_args(argv)

    n = int(args.gib * 2**30) // 8
    chunk = int(args.chunk_mib * 2**20) // 8
    u = field(n, chunk)
    print(f"field: {n:,} float64 ({n * 8 / 2**30:.2f} GiB) in {u.numblocks[0]} chunks of {chunk * 8 / 2**20:.0f} MiB")
    progress = (lambda: dask.config.set()) if args.no_progress else ProgressBar  # noqa: E731

    # 1. A plain Dask evaluation of the forward objective: the reference cost.
    with PeakRSS() as mem_f, progress():
        t0 = time.perf_counter()
        forward = float(smooth_field_energy(u).compute())
        t_forward = time.perf_counter() - t0

    # 2. Value and gradient: tracing builds lazy graphs only (no data is touched) ...
    t0 = time.perf_counter()
    value, g = tg.value_and_grad(smooth_field_energy)(u)
    t_trace = time.perf_counter() - t0
    # ... and one compute evaluates them together, chunk by chunk.
    with PeakRSS() as mem_g, progress():
        t0 = time.perf_counter()
        if args.zarr:
            import dask.array as da

            stored = da.to_zarr(g, args.zarr, overwrite=True, compute=False)
            value, _ = dask.compute(value, stored)
            summary = {"zarr": args.zarr}
        else:
            mid = n // 2
            value, norm, head, middle, tail = dask.compute(
                value, np.sqrt(np.sum(g * g)), g[:3], g[mid : mid + 3], g[-3:]
            )
            summary = {"norm": float(norm), "head": head, "middle": middle, "tail": tail}
        t_grad = time.perf_counter() - t0

    assert np.isclose(float(value), forward, rtol=1e-10), (value, forward)
    result = {
        "n": n,
        "gib": n * 8 / 2**30,
        "forward_s": t_forward,
        "forward_peak_mib": mem_f.peak / 2**20,
        "trace_s": t_trace,
        "grad_s": t_grad,
        "grad_peak_mib": mem_g.peak / 2**20,
        "ratio": t_grad / t_forward,
        "value": float(value),
        **summary,
    }
    print(f"forward (plain Dask): {t_forward:8.1f} s   peak RSS {mem_f.peak / 2**20:7.0f} MiB")
    print(f"tracing (tapegrad):   {t_trace:8.2f} s   (graphs only)")
    print(f"value + gradient:     {t_grad:8.1f} s   peak RSS {mem_g.peak / 2**20:7.0f} MiB")
    print(f"ratio gradient / forward: {t_grad / t_forward:.2f}")
    for key, val in summary.items():
        print(f"{key}: {val}")
    return result


if __name__ == "__main__":
    main()
