"""asv benchmarks of tapegrad (see docs/benchmarks.md).

The workloads themselves live one folder up in ``workloads.py`` (shared with
``compare.py`` and the smoke test); that folder is put on ``sys.path`` here.

BLAS/OpenMP pools get one thread unless ``TAPEGRAD_BENCH_THREADS`` says
otherwise (``0`` = library defaults): on a small shared machine a second
thread mostly waits for a busy core, which makes timings swing by 10x.  This
works because asv imports this package before NumPy is loaded.
"""

import os
import sys

_THREADS = os.environ.get("TAPEGRAD_BENCH_THREADS", "1")
if _THREADS != "0":
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
        os.environ.setdefault(_var, _THREADS)

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
