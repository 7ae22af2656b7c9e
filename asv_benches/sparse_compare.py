"""Side by side: tapegrad's sparse Jacobians/Hessians against SciPy's colored finite differences.

    python asv_benches/sparse_compare.py [--n 100000 1000000] [--programs bratu graph ...]

For each program of ``sparse_programs`` and size: the time and traced peak
memory (tracemalloc, NumPy buffers included) of ``tg.jacobian(f, sparse=True)``
(``tg.hessian(f, sparse=True)`` for an energy), and of
``scipy.optimize._numdiff.approx_derivative(fd_fun, x0, sparsity=(pattern, groups))``
given the exact pattern and its column groups (the grouping's own time is
printed apart).  At ``--check`` sizes the sparse result is also compared with
the dense one, entry by entry.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sparse_programs as P  # noqa: E402

import tapegrad as tg  # noqa: E402


def _timed(call, repeat):
    best = float("inf")
    out = None
    for _ in range(repeat):
        t = time.perf_counter()
        out = call()
        best = min(best, time.perf_counter() - t)
    return best, out


def _peak(call):
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def run(name, n, repeat, memory, check):
    from scipy.optimize._numdiff import approx_derivative, group_columns

    fun, x0, kind, fd_fun = P.make(name, n)
    sparse = (tg.hessian if kind == "hessian" else tg.jacobian)(fun, sparse=True)
    t_tg, J = _timed(lambda: sparse(x0), repeat)
    pattern = J.copy()
    pattern.data[:] = 1
    t_group, groups = _timed(lambda: group_columns(pattern), 1)
    t_fd, J_fd = _timed(lambda: approx_derivative(fd_fun, x0, sparsity=(pattern, groups)), repeat)
    line = (
        f"{name:19s} n={x0.size:8d} nnz={J.nnz:9d} colors={groups.max() + 1:3d}  "
        f"tapegrad {t_tg * 1e3:9.1f} ms   scipy FD {t_fd * 1e3:9.1f} ms (+ grouping {t_group * 1e3:7.1f} ms)"
        f"   ratio {t_tg / t_fd:5.2f}"
    )
    if memory:
        m_tg = _peak(lambda: sparse(x0))
        m_fd = _peak(lambda: approx_derivative(fd_fun, x0, sparsity=(pattern, groups)))
        line += f"   peak {m_tg / 2**20:8.1f} MiB vs {m_fd / 2**20:8.1f} MiB"
    if check:
        dense = (tg.hessian if kind == "hessian" else tg.jacobian)(fun)(x0).reshape(J.shape)
        line += f"   equal to dense: {np.array_equal(J.toarray(), dense, equal_nan=True)}"
    print(line, flush=True)


def densifying(n, memory):
    """``A @ np.tanh(x)`` with a dense ``A``: the sparse request densifies, the numbers stay the dense ones."""
    A = np.random.default_rng(4).standard_normal((n, n))

    def f(x):
        return A @ np.tanh(x)

    x0 = np.linspace(-1, 1, n)
    tg.jacobian(f, sparse=True)(x0)  # SciPy's first import is not part of the cost
    t_sp, J = _timed(lambda: tg.jacobian(f, sparse=True)(x0), 2)
    t_d, D = _timed(lambda: tg.jacobian(f)(x0), 2)
    line = (
        f"densifying A@tanh(x) n={n}: sparse=True {t_sp * 1e3:.1f} ms, dense {t_d * 1e3:.1f} ms, "
        f"equal {np.array_equal(J.toarray(), D)}"
    )
    if memory:
        m_sp = _peak(lambda: tg.jacobian(f, sparse=True)(x0))
        m_d = _peak(lambda: tg.jacobian(f)(x0))
        line += f", peak {m_sp / 2**20:.1f} MiB vs dense {m_d / 2**20:.1f} MiB (ratio {m_sp / m_d:.2f})"
    print(line, flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100_000])
    parser.add_argument("--programs", nargs="+", default=P.NAMES)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--memory", action="store_true", help="also trace peak memory (slower)")
    parser.add_argument("--check", type=int, default=900, help="compare with dense at sizes up to this")
    parser.add_argument("--densifying", type=int, default=0, help="size of the A @ tanh(x) case (0: skip)")
    args = parser.parse_args(argv)
    for n in args.n:
        for name in args.programs:
            run(name, n, args.repeat, args.memory, n <= args.check)
    if args.densifying:
        densifying(args.densifying, args.memory)


if __name__ == "__main__":
    main()
