"""The ``linalg`` extension of tapegrad's array-API namespace.

NumPy 2's ``numpy.linalg`` already has the standard's signatures
(``cholesky(x, upper=)``, ``pinv(x, rtol=)``, ``matrix_norm``, ``vector_norm``,
``svdvals``, ...), and each of these functions dispatches to a tracer through
NEP 18, so the extension is NumPy's functions themselves: one rule table.
"""

from __future__ import annotations

import numpy as np

from ._fallback import numpy_fallback

__all__ = [
    "cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matmul",
    "matrix_norm", "matrix_power", "matrix_rank", "matrix_transpose", "outer", "pinv",
    "qr", "slogdet", "solve", "svd", "svdvals", "tensordot", "trace", "vecdot",
    "vector_norm",
]

_la = np.linalg
cholesky = _la.cholesky
cross = _la.cross
det = _la.det
diagonal = _la.diagonal
eigh = _la.eigh
eigvalsh = _la.eigvalsh
inv = _la.inv
matmul = _la.matmul
matrix_norm = _la.matrix_norm
matrix_power = _la.matrix_power
matrix_rank = _la.matrix_rank
matrix_transpose = _la.matrix_transpose
outer = _la.outer
pinv = _la.pinv
qr = _la.qr
slogdet = _la.slogdet
solve = _la.solve
svd = _la.svd
svdvals = _la.svdvals
tensordot = _la.tensordot
trace = _la.trace
vecdot = _la.vecdot
vector_norm = _la.vector_norm


# Names the standard lacks (``norm``, ``eig``, ``eigvals``, ``lstsq``) are NumPy's.
__getattr__, __dir__ = numpy_fallback(_la, globals())
