"""Every ``numpy.linalg`` and ``scipy.linalg`` rule at orders 1 and 2, in every composition of modes.

The functions come from the rule registry (:data:`tapegrad.registry.RULES`): each public
function of ``numpy.linalg`` and ``scipy.linalg`` with a primitive or composite rule must have
at least one case in :data:`CASES` (``test_every_registered_function_has_a_case`` fails
naming the ones without), so a new rule is picked up, and has to be given inputs here.

A case says how to build the function's arguments (their *roles*) for each *input kind*,
how to call it, and which real *features* of its outputs a loss is made of.  The loss is

    L = sum_k sum(W_k * f_k + V_k * f_k**2 / 2)

with fixed random weights (a complex output contributes its real and imaginary parts; a
quadratic term so that linear functions have a Hessian too).  Eigen- and singular vectors are
fixed only up to sign or phase (and, at a near-repeated value, up to a rotation), so their
features are gauge-invariant: ``|v|**2`` entry by entry and reconstructions ``V h(w) V^H``,
and, for the ``nearrep`` kind, only the reconstructions and symmetric functions of the values.

Every differentiable argument is one stretch of a flat real parameter vector ``theta`` (a
complex argument as its real and then imaginary parts), and ``F(theta)`` is the loss.
Checks, one test per function x kind x mode:

``grad``
    the traced forward value equals NumPy's / SciPy's (dtype included); ``tg.grad(F)``
    against central differences of ``F`` (float64, step 1e-6 relative); ``tg.grad`` with
    respect to the arguments themselves, complex ones in tapegrad's convention
    (``dL = Re(g * dz)``, found by :func:`complex_convention` from ``|z|**2``), against the
    same differences taken in the real and imaginary parts separately.
``rev_rev``, ``fwd_rev``, ``rev_fwd``, ``fwd_fwd``
    the Hessian of ``F`` by ``tg.hessian``, ``tg.jacfwd(tg.grad(F))``,
    ``tg.jacobian`` of the forward-mode gradient (``tg.jvp`` with the basis as a batch of
    tangents) and ``tg.jacfwd`` of that, each against central differences of the (checked)
    ``tg.grad(F)``, and each equal to ``tg.hessian``'s to 1e-10 relative (``rev_rev``: to its
    own transpose); every Hessian has the parameters' dtype (float32 stays float32).

Errors are normwise, relative to the larger of the two results and to no less than
``1e-3 (1 + |L|)`` (a derivative that is exactly zero is not compared with rounding noise).
Tolerances (order 1, order 2, modes): float64 1e-6, 1e-5, 1e-10; ``nearrep`` 1e-6, 1e-5, 1e-8
(rounding grows like eps / DELTA**2 there); float32 1e-4, 1e-3, 1e-4 against float64 references.

A kind in a case's ``refused`` map is an expected refusal: the test asserts that tapegrad
raises one of its own errors (:class:`tapegrad.TapegradError`) naming the function, at the
order given; a refused kind that starts to work fails, so that it is moved to the checked
kinds.  The default run takes, for each case, the kinds its ``default`` names and, unless the
case is marked ``broad=False`` (the matrix functions, whose forward-over-forward Hessians are
slow), every kind of BROAD_DEFAULT (all but "batched" and "float32"); the rest of the full
cross product is marked ``slow`` (``pytest -m slow tests/rules/test_linalg_orders.py``).
"""

from __future__ import annotations

import functools
import re
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np
import pytest
import scipy.linalg as sl

import tapegrad as tg
import tapegrad.rules.scipy_linalg  # noqa: F401  (registers the scipy.linalg rules)
from tapegrad.registry import COMPOSITE, PRIMITIVE, RULES

# ---------------------------------------------------------------------------- input kinds
#: Every input kind.  Square matrices of one kind share a spectrum (below); "batched" stacks
#: two matrices of the case's base kind, "float32" is the base kind in float32, "tall" and
#: "wide" are rectangular matrices with well separated singular values; "hermitian" is positive definite.
KINDS = (
    "real", "negeig", "cplxeig", "spd", "symind", "complex", "hermitian", "nearrep",
    "batched", "float32", "tall", "wide",
)
MODES = ("grad", "rev_rev", "fwd_rev", "rev_fwd", "fwd_fwd")
#: Kinds that run in the default run for every case with ``broad`` (all but the matrix functions,
#: whose forward-over-forward Hessians are slow); "batched" and "float32" run where a case's
#: ``default`` names them, and everywhere under ``slow``.
BROAD_DEFAULT = ("real", "negeig", "cplxeig", "spd", "symind", "complex", "hermitian", "nearrep", "tall", "wide")

#: Matrix order per kind (n = 2..4).
SIZES = {
    "real": 3, "negeig": 3, "cplxeig": 4, "spd": 3, "symind": 4, "complex": 3, "hermitian": 2,
    "nearrep": 4, "batched": 3, "float32": 3, "tall": 3, "wide": 3,
}
#: The gap of the near-repeated pair of eigenvalues / singular values.
DELTA = 1e-4
SPECTRA = {
    "real": [0.7, 1.3, 2.1, 2.9],  # real, distinct, positive; the matrix is not normal
    "negeig": [-0.8, 1.1, -1.7, 2.6],  # real, two negative: on the branch cut of sqrtm/logm
    "spd": [0.6, 1.2, 2.0, 2.9],
    "symind": [-1.1, 0.5, 1.6, -2.3],
    "complex": [0.8 + 0.4j, -0.9 + 0.7j, 1.3 - 0.6j, 2.1 + 0.2j],
    "hermitian": [0.6, 1.2, 2.0, 2.9],
    "nearrep": [0.5, 1.0, 1.0 + DELTA, 2.0],  # the pair in the middle: max and min stay simple
}
#: Order 2: just the pair (for the matrix functions, whose extreme values play no special role).
NEARREP_2 = [1.0, 1.0 + DELTA]
#: Complex-conjugate pairs (a +- ib) of the real "cplxeig" matrix, then real eigenvalues.
CONJUGATE_PAIRS = [(0.6, 0.9), (-0.4, 1.3)]
SINGULAR_VALUES = [2.3, 1.4, 0.8, 0.5]
COMPLEX_KINDS = ("complex", "hermitian")


def _swap(x: Any) -> Any:
    return np.swapaxes(x, -1, -2)


class Inputs:
    """Builders of arguments for one case and one kind (deterministic: seeded by both)."""

    def __init__(self, case: "Case", kind: str):
        self.kind = kind
        self.base = case.base
        self.rng = np.random.default_rng(zlib.crc32(f"{case.id}/{kind}".encode()))
        self.ctx: Dict[str, Any] = {}
        self.n = case.n or SIZES[kind]
        self.complex = kind in COMPLEX_KINDS
        self.dtype = np.float32 if kind == "float32" else np.complex128 if self.complex else np.float64

    # -- helpers
    def _cast(self, x: Any) -> np.ndarray:
        x = np.asarray(x)
        if self.kind == "float32":
            return x.real.astype(np.float32)
        return x.astype(self.dtype) if self.complex else np.real_if_close(x).astype(np.float64)

    def _normal(self, shape: tuple, complex_: Optional[bool] = None) -> np.ndarray:
        complex_ = self.complex if complex_ is None else complex_
        x = self.rng.standard_normal(shape)
        return x + 1j * self.rng.standard_normal(shape) if complex_ else x

    def _orth(self, n: int, complex_: bool = False) -> np.ndarray:
        q, r = np.linalg.qr(self._normal((n, n), complex_))
        return q * (np.diagonal(r) / np.abs(np.diagonal(r)))

    def _similar(self, blocks: np.ndarray, complex_: bool = False) -> np.ndarray:
        """S D S^-1 with cond(S) = 2: a non-normal matrix with D's spectrum."""
        n = blocks.shape[0]
        s = self._orth(n, complex_) @ np.diag(np.linspace(1.0, 2.0, n)) @ self._orth(n, complex_)
        return s @ blocks @ np.linalg.inv(s)

    def _spectral(self, lam: Any, complex_: bool = False) -> np.ndarray:
        q = self._orth(len(lam), complex_)
        return (q * np.asarray(lam)) @ q.conj().T

    def _svd_matrix(self, m: int, n: int) -> np.ndarray:
        k = min(m, n)
        u = self._orth(m, self.complex)[:, :k]
        v = self._orth(n, self.complex)[:, :k]
        return (u * np.asarray(SINGULAR_VALUES[:k])) @ v.conj().T

    def _square(self, kind: str, n: int) -> np.ndarray:
        if kind == "real":
            return self._similar(np.diag(SPECTRA["real"][:n]))
        if kind == "negeig":
            return self._similar(np.diag(SPECTRA["negeig"][:n]))
        if kind == "cplxeig":
            d = np.zeros((n, n))
            for i, (a, b) in enumerate(CONJUGATE_PAIRS[: n // 2]):
                d[2 * i: 2 * i + 2, 2 * i: 2 * i + 2] = [[a, b], [-b, a]]
            if n % 2:
                d[-1, -1] = 1.8
            return self._similar(d)
        if kind in ("spd", "symind"):
            return self._spectral(SPECTRA[kind][:n])
        if kind == "complex":
            return self._similar(np.diag(SPECTRA["complex"][:n]), complex_=True)
        if kind == "hermitian":
            return self._spectral(SPECTRA["hermitian"][:n], complex_=True)
        if kind == "nearrep":
            lam = NEARREP_2 if n == 2 else SPECTRA["nearrep"][:n]
            if self.base == "spd":
                return self._spectral(lam)
            if self.base == "symind":  # indefinite: one negative eigenvalue besides the pair
                return self._spectral([-v if v == 0.5 else v for v in lam])
            if self.base == "svd":  # near-repeated singular values, not eigenvalues
                u, v = self._orth(n), self._orth(n)
                return (u * np.asarray(lam)) @ v.T
            return self._similar(np.diag(lam))
        if kind in ("batched", "float32"):
            base = "real" if self.base == "svd" else self.base
            if kind == "float32":
                return self._square(base, n)
            return np.stack([self._square(base, n), self._square(base, n)])
        if kind == "tall":
            return self._svd_matrix(n + 2, n)
        if kind == "wide":
            return self._svd_matrix(n, n + 2)
        raise ValueError(kind)

    # -- roles
    def square(self) -> np.ndarray:
        """The main matrix: the kind itself (rectangular for "tall" and "wide")."""
        return self._cast(self._square(self.kind, self.n))

    def rect(self) -> np.ndarray:
        """A rectangular matrix: (n, n+2) for "wide", else (n+2, n), of the kind's dtype."""
        m, n = (self.n, self.n + 2) if self.kind == "wide" else (self.n + 2, self.n)
        x = self._svd_matrix(m, n)
        if self.kind == "batched":
            x = np.stack([x, self._svd_matrix(m, n)])
        return self._cast(x)

    def well(self, n: int) -> np.ndarray:
        """A well-conditioned square matrix of order n (not stacked), of the kind's dtype."""
        if self.complex:
            return self._cast(self._similar(np.diag(SPECTRA["complex"][:n]), complex_=True))
        return self._cast(self._similar(np.diag(np.linspace(0.8, 2.4, n))))

    def spd(self, n: Optional[int] = None) -> np.ndarray:
        """A symmetric (Hermitian for complex kinds) positive definite matrix, stacked for "batched"."""
        n = n or self.n
        one = lambda: self._spectral(np.linspace(0.7, 2.5, n), self.complex)  # noqa: E731
        return self._cast(np.stack([one(), one()]) if self.kind == "batched" else one())

    def vec(self, m: Optional[int] = None, batch: bool = False) -> np.ndarray:
        """A vector (length m, default n); with ``batch``, (2, m) for the "batched" kind."""
        m = m or self.n
        shape = (2, m) if batch and self.kind == "batched" else (m,)
        return self._cast(self._normal(shape))

    def mat(self, k: int = 2, m: Optional[int] = None) -> np.ndarray:
        """A right-hand side (m, k), (2, m, k) for the "batched" kind."""
        m = m or self.n
        shape = (2, m, k) if self.kind == "batched" else (m, k)
        return self._cast(self._normal(shape))

    def rand(self, *shape: int) -> np.ndarray:
        return self._cast(self._normal(shape))

    def real_vec(self, values: Any) -> np.ndarray:
        """A real vector (float32 for that kind) near ``values``; two of them stacked for "batched"."""
        shape = (2, len(values)) if self.kind == "batched" else (len(values),)
        v = np.asarray(values, dtype=float) + 0.05 * self.rng.standard_normal(shape)
        return v.astype(np.float32 if self.kind == "float32" else np.float64)


# ---------------------------------------------------------------------------- features
def _leaves(out: Any) -> list:
    if isinstance(out, (tuple, list)):
        return [leaf for o in out for leaf in _leaves(o)]
    return [out]


def parts(out: Any) -> list:
    """Every floating-point output, complex ones as real and imaginary parts (integers dropped)."""
    res = []
    for o in _leaves(out):
        kind = np.result_type(o).kind
        if kind == "f":
            res.append(o)
        elif kind == "c":
            res += [np.real(o), np.imag(o)]
    return res


def _abs2(x: Any) -> Any:
    """|x|**2 entry by entry, smooth (sign- and phase-invariant)."""
    return np.real(x) ** 2 + np.imag(x) ** 2 if np.result_type(x).kind == "c" else x * x


def _recon(v: Any, h: Any, vh: Any = None) -> Any:
    """``v diag(h) vh`` (``vh`` defaults to ``v^H``): invariant under any rotation of v within a cluster."""
    right = np.conj(_swap(v)) if vh is None else vh
    return (v * h[..., None, :]) @ right


def _power_sums(w: Any) -> Any:
    """sum(w**k) for k = 1..4: symmetric in the values, so the order LAPACK returns them in is irrelevant."""
    return parts(np.stack([np.sum(w ** k, axis=-1) for k in (1, 2, 3, 4)], axis=-1))


def eigh_features(out: Any) -> list:
    w, v = out
    return [w, *parts(_abs2(v)), *parts(_recon(v, np.sin(w)))]


def eigh_invariant(out: Any) -> list:
    w, v = out
    return [*_power_sums(w), *parts(_recon(v, np.sin(w)))]


def values_invariant(w: Any) -> list:
    return _power_sums(w)


def svd_features(out: Any) -> list:
    u, s, vh = out
    k = np.shape(s)[-1]  # full_matrices=True: the extra vectors enter through |.|**2 only
    return [s, _abs2(u), _abs2(vh), *parts(_recon(u[..., :, :k], np.cos(s), vh[..., :k, :]))]


def svd_invariant(out: Any) -> list:
    u, s, vh = out
    return [*_power_sums(s), *parts(_recon(u, np.cos(s), vh)), *parts(_recon(_swap(np.conj(vh)), s * s))]


def eig_value_features(out: Any) -> list:
    return _power_sums(out[0])


def eig_vector_features(out: Any) -> list:
    w, v = out
    return [*_power_sums(w), _abs2(v)]


def schur_features(out: Any) -> list:
    t, z = out
    d = np.diagonal(t, axis1=-2, axis2=-1)
    return [*parts(d), _abs2(z), *parts(_recon(z, np.sin(d)))]


def null_space_features(v: Any) -> list:
    return parts(v @ np.conj(_swap(v)))  # the projector: sign-invariant


# ---------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class Refused:
    """An expected refusal: from ``order`` on, tapegrad raises a TapegradError matching ``match``."""

    match: str
    order: int = 1


COMPLEX_INPUT = Refused("complex input")


@dataclass(eq=False)
class Case:
    fn: Any
    build: Callable[[Inputs], list]
    call: Optional[Callable] = None
    variant: str = ""
    roles: str = "a"
    ok: Tuple[str, ...] = ()
    refused: Dict[str, Refused] = field(default_factory=dict)
    #: Kinds in the default run (None: the first kind; (): none, the case runs under slow only).
    default: Optional[Tuple[str, ...]] = None
    base: str = "real"
    features: Callable[[Any], list] = parts
    invariant: Optional[Callable[[Any], list]] = None
    #: Matrix order for every kind (instead of SIZES): the matrix functions' forward-over-forward
    #: Hessians evaluate them on blocks of 16 n x 16 n for a batch of n**4 tangent pairs.
    n: Optional[int] = None
    #: Run every kind of BROAD_DEFAULT by default too (cheap cases); False: ``default`` only.
    broad: bool = True

    def __post_init__(self) -> None:
        if self.call is None:
            self.call = self.fn
        if self.default is None:
            self.default = (self.ok or tuple(self.refused))[:1]

    @property
    def module(self) -> str:
        return "np.linalg" if getattr(np.linalg, self.fn.__name__, None) is self.fn else "scipy.linalg"

    @property
    def id(self) -> str:
        return f"{self.module}.{self.fn.__name__}" + (f"[{self.variant}]" if self.variant else "")

    @property
    def kinds(self) -> Tuple[str, ...]:
        return tuple(self.ok) + tuple(k for k in self.refused if k not in self.ok)

    def expectation(self, kind: str, order: int) -> Optional[Refused]:
        r = self.refused.get(kind)
        return r if r is not None and order >= r.order else None


#: Kinds of square-matrix input, every spectrum.
MATFUN = ("real", "negeig", "cplxeig", "spd", "symind", "complex", "hermitian", "nearrep", "batched", "float32")
GENERAL = ("real", "complex", "batched", "float32")
SQUARE = ("real", "negeig", "cplxeig", "symind", "complex", "batched", "float32")
SYM = ("spd", "symind", "batched", "float32")
SPD = ("spd", "batched", "float32")
VECTORS = ("real", "complex", "float32")


def _sq(i: Inputs) -> list:
    return [i.square()]


def _sym(x: Any) -> Any:
    """The symmetric part (SciPy's Riccati solvers refuse a q or r that is not symmetric)."""
    return 0.5 * (x + _swap(x))


def _banded_spd(i: Inputs) -> np.ndarray:
    """Upper banded storage (2, n) of a diagonally dominant symmetric tridiagonal matrix (two for "batched")."""
    n = i.n

    def one() -> np.ndarray:
        ab = np.zeros((2, n))
        ab[1] = 3.0 + i.rng.uniform(0, 1, n)
        ab[0, 1:] = i.rng.uniform(-1, 1, n - 1)
        return ab

    return np.stack([one(), one()]) if i.kind == "batched" else one()


def _cast_like(i: Inputs, x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32) if i.kind == "float32" else x


def _lu_solve_build(i: Inputs) -> list:
    lu, piv = sl.lu_factor(i.square())
    i.ctx["piv"] = piv
    return [lu, i.vec()]


def _cho_solve_build(i: Inputs) -> list:
    return [sl.cholesky(i.spd()), i.mat() if i.kind == "batched" else i.vec()]


def _cho_solve_banded_build(i: Inputs) -> list:
    return [_cast_like(i, sl.cholesky_banded(_banded_spd(i))), i.vec()]


def _solve_banded_build(i: Inputs) -> list:
    n = i.n
    ab = i.rng.uniform(-1, 1, (3, n))
    ab[1] = 4.0 + ab[1]
    return [_cast_like(i, ab), i.vec()]


def _lyapunov_build(scale: float) -> Callable[[Inputs], list]:
    """a with the spectrum of "real" times ``scale`` (0.3: inside the unit disc), and q."""
    return lambda i: [scale * i.square(), i.mat(i.n)]


def _are_build(i: Inputs) -> list:
    n = i.n
    return [i.rand(n, n), i.rand(n, 2), i._cast(i._spectral(np.linspace(1.0, 2.0, n))),
            i._cast(i._spectral([1.0, 1.6]))]


def _eigh_subset_build(i: Inputs) -> list:
    i.ctx["subset"] = (1, i.n - 1)  # all but the smallest eigenvalue
    return [i.square()]


def _null_space_build(i: Inputs) -> list:
    n = i.n
    m = i._svd_matrix(n - 1, n)
    return [i._cast(np.stack([m, i._svd_matrix(n - 1, n)]) if i.kind == "batched" else m)]


CASES = [
    # ------------------------------------------------------------------ numpy.linalg
    Case(np.linalg.cholesky, _sq, base="spd", ok=("spd", "nearrep", "hermitian", "batched", "float32"),
         default=("spd", "hermitian")),
    Case(np.linalg.cholesky, _sq, lambda a: np.linalg.cholesky(a, upper=True), "upper", base="spd",
         ok=("spd", "hermitian", "batched", "float32"), default=("spd",)),
    Case(np.linalg.cond, _sq, base="svd", ok=("real", "complex", "nearrep", "tall", "wide", "batched", "float32"),
         default=("real", "complex")),
    Case(np.linalg.cond, _sq, lambda a: np.linalg.cond(a, "fro"), "fro", ok=GENERAL, default=("complex",)),
    Case(np.linalg.cross, lambda i: [i.vec(3, batch=True), i.vec(3, batch=True)], roles="a, b", ok=GENERAL),
    Case(np.linalg.det, _sq, ok=SQUARE, default=("real", "complex")),
    Case(np.linalg.diagonal, _sq, ok=GENERAL),
    Case(np.linalg.eig, _sq, variant="values", ok=SQUARE, features=eig_value_features, default=("cplxeig",)),
    Case(np.linalg.eig, _sq, variant="vectors", ok=SQUARE, features=eig_vector_features,
         default=("real", "complex")),
    Case(np.linalg.eigh, _sq, base="symind", ok=SYM + ("nearrep", "hermitian"),
         features=eigh_features, invariant=eigh_invariant, default=("symind", "nearrep", "hermitian")),
    Case(np.linalg.eigh, _sq, lambda a: np.linalg.eigh(a, UPLO="U"), "UPLO=U", base="symind",
         ok=SYM + ("hermitian",), features=eigh_features, default=("spd",)),
    Case(np.linalg.eigvals, _sq, ok=SQUARE, features=values_invariant, default=("complex",)),
    Case(np.linalg.eigvalsh, _sq, base="symind", ok=SYM + ("nearrep", "hermitian"),
         invariant=values_invariant, default=("symind", "hermitian")),
    Case(np.linalg.inv, _sq, ok=MATFUN, default=("real", "complex")),
    Case(np.linalg.lstsq, lambda i: [i.rect(), i.vec(i.n if i.kind == "wide" else i.n + 2)], roles="a, b",
         ok=("real", "wide", "float32"), refused={"complex": COMPLEX_INPUT}, default=("real", "wide")),
    Case(np.linalg.matmul, lambda i: [i.square(), i.mat()], roles="x1, x2", ok=GENERAL),
    Case(np.linalg.matrix_norm, _sq, variant="fro", ok=GENERAL + ("tall",), default=("complex",)),
    Case(np.linalg.matrix_norm, _sq, lambda a: np.linalg.matrix_norm(a, ord="nuc"), "nuc", base="svd",
         ok=("real", "complex", "nearrep", "tall", "batched", "float32"), default=("real",)),
    Case(np.linalg.matrix_norm, _sq, lambda a: np.linalg.matrix_norm(a, ord=2), "2", base="svd",
         ok=("real", "complex", "nearrep", "wide", "batched", "float32"), default=("nearrep",)),
    Case(np.linalg.matrix_power, _sq, lambda a: np.linalg.matrix_power(a, 3), "3", ok=GENERAL,
         default=("real",)),
    Case(np.linalg.matrix_power, _sq, lambda a: np.linalg.matrix_power(a, -2), "-2",
         ok=GENERAL + ("negeig",), default=("complex",)),
    Case(np.linalg.matrix_transpose, _sq, ok=GENERAL),
    Case(np.linalg.multi_dot, lambda i: [i.rand(3, 4), i.rand(4, 2), i.rand(2, 3)],
         lambda a, b, c: np.linalg.multi_dot([a, b, c]), roles="[a, b, c]", ok=VECTORS),
    Case(np.linalg.norm, _sq, variant="fro", ok=GENERAL, default=("complex",)),
    Case(np.linalg.norm, _sq, lambda a: np.linalg.norm(a, 2), "2", base="svd",
         ok=("real", "complex", "nearrep", "tall", "float32"), default=("real",)),
    Case(np.linalg.norm, _sq, lambda a: np.linalg.norm(a, "nuc"), "nuc", base="svd",
         ok=("real", "complex", "nearrep", "wide", "float32"), default=("wide",)),
    Case(np.linalg.norm, lambda i: [i.vec(5, batch=True)], lambda x: np.linalg.norm(x, 3, axis=-1), "vector-3",
         ok=GENERAL),
    Case(np.linalg.outer, lambda i: [i.vec(3), i.vec(4)], roles="x1, x2", ok=VECTORS),
    Case(np.linalg.pinv, _sq, base="svd", ok=("real", "tall", "wide", "nearrep", "batched", "float32"),
         refused={"complex": COMPLEX_INPUT}, default=("wide",)),
    Case(np.linalg.pinv, _sq, lambda a: np.linalg.pinv(a, hermitian=True), "hermitian=True", base="symind",
         ok=SYM, refused={"hermitian": COMPLEX_INPUT}, default=("symind",)),
    Case(np.linalg.qr, _sq, variant="reduced", ok=("real", "complex", "tall", "wide", "batched", "float32"),
         default=("tall", "complex")),
    Case(np.linalg.qr, _sq, lambda a: np.linalg.qr(a, mode="r"), "r",
         ok=("real", "complex", "tall", "wide", "float32"), default=("wide",)),
    Case(np.linalg.qr, _sq, lambda a: np.linalg.qr(a, mode="complete"), "complete",
         ok=("real", "complex", "wide", "float32"), refused={"tall": Refused("complete")}, default=("tall",)),
    Case(np.linalg.slogdet, _sq, ok=SQUARE, default=("negeig", "complex")),
    Case(np.linalg.solve, lambda i: [i.square(), i.vec()], variant="vector", roles="a, b", ok=GENERAL,
         default=("real",)),
    Case(np.linalg.solve, lambda i: [i.square(), i.mat()], variant="matrix", roles="a, B", ok=GENERAL,
         default=("complex", "batched")),
    Case(np.linalg.svd, _sq, lambda a: np.linalg.svd(a, full_matrices=False), "thin", base="svd",
         ok=("real", "complex", "tall", "wide", "nearrep", "batched", "float32"),
         features=svd_features, invariant=svd_invariant, default=("tall", "nearrep", "complex")),
    Case(np.linalg.svd, _sq, variant="square", base="svd", ok=("real", "complex", "float32"),
         refused={"wide": Refused("full_matrices")}, features=svd_features, default=("real",)),
    Case(np.linalg.svd, _sq, lambda a: np.linalg.svd(a, compute_uv=False), "values", base="svd",
         ok=("real", "complex", "wide", "nearrep", "batched", "float32"), invariant=values_invariant,
         default=("real",)),
    Case(np.linalg.svdvals, _sq, base="svd", ok=("real", "complex", "tall", "nearrep", "batched", "float32"),
         invariant=values_invariant, default=("nearrep",)),
    Case(np.linalg.tensordot, lambda i: [i.rand(2, 3, 4), i.rand(3, 4, 2)], roles="a, b", ok=VECTORS),
    Case(np.linalg.tensorinv, lambda i: [np.reshape(i.well(4), (2, 2, 4))], ok=VECTORS),
    Case(np.linalg.tensorsolve, lambda i: [np.reshape(i.well(4), (2, 2, 4)), i.rand(2, 2)], roles="a, b",
         ok=VECTORS),
    Case(np.linalg.trace, _sq, ok=GENERAL),
    Case(np.linalg.vecdot, lambda i: [i.vec(4, batch=True), i.vec(4, batch=True)], roles="x1, x2", ok=GENERAL,
         default=("complex",)),
    Case(np.linalg.vector_norm, lambda i: [i.vec(5, batch=True)], variant="2", ok=GENERAL, default=("complex",)),
    Case(np.linalg.vector_norm, lambda i: [i.vec(5, batch=True)],
         lambda x: np.linalg.vector_norm(x, ord=3, axis=-1), "3", ok=GENERAL, default=("real",)),
    # ------------------------------------------------------------------ scipy.linalg: builders
    Case(sl.block_diag, lambda i: [i.rand(2, 2), i.rand(1, 3)], roles="a, b", ok=VECTORS),
    Case(sl.circulant, lambda i: [i.vec(4)], roles="c", ok=VECTORS),
    Case(sl.companion, lambda i: [i.vec(4) + 2.0], roles="a", ok=VECTORS),
    Case(sl.convolution_matrix, lambda i: [i.vec(3)], lambda a: sl.convolution_matrix(a, 4), roles="a",
         ok=VECTORS),
    Case(sl.fiedler, lambda i: [i._cast(np.array([0.3, 1.4, -0.9, 2.2]) + 0.01 * i._normal((4,)))], roles="a",
         ok=VECTORS),
    Case(sl.hankel, lambda i: [i.vec(3), i.vec(4)], roles="c, r", ok=VECTORS),
    Case(sl.khatri_rao, lambda i: [i.rand(2, 3), i.rand(4, 3)], roles="a, b", ok=VECTORS),
    Case(sl.leslie, lambda i: [i.vec(4), i.vec(3)], roles="f, s", ok=VECTORS),
    Case(sl.toeplitz, lambda i: [i.vec(3), i.vec(4)], roles="c, r", ok=VECTORS),
    # ------------------------------------------------------------------ scipy.linalg: solvers
    Case(sl.det, _sq, ok=SQUARE, default=("negeig", "complex")),
    Case(sl.inv, _sq, ok=MATFUN, default=("real", "complex")),
    Case(sl.inv, _sq, lambda a: sl.inv(a, assume_a="pos"), "assume_a=pos", base="spd", ok=SPD,
         refused={"hermitian": Refused("assume_a")}, default=("spd",)),
    Case(sl.solve, lambda i: [i.square(), i.vec()], variant="general", roles="a, b", ok=GENERAL,
         default=("real", "complex", "batched")),
    Case(sl.solve, lambda i: [i.square(), i.mat()], lambda a, b: sl.solve(a, b, assume_a="pos"), "pos",
         roles="a, B", base="spd", ok=SPD, refused={"hermitian": Refused("assume_a")}, default=("spd",)),
    Case(sl.solve, lambda i: [i.square(), i.vec()], lambda a, b: sl.solve(a, b, assume_a="sym", lower=True),
         "sym", roles="a, b", base="symind", ok=SYM, default=("symind",)),
    Case(sl.solve_triangular, lambda i: [i.square(), i.vec()],
         lambda a, b: sl.solve_triangular(a, b, lower=True), "lower", roles="a, b", ok=GENERAL,
         default=("real", "complex")),
    Case(sl.solve_triangular, lambda i: [i.square(), i.mat()],
         lambda a, b: sl.solve_triangular(a, b, trans="T"), "upper-trans", roles="a, B", ok=GENERAL,
         default=("batched",)),
    Case(sl.lstsq, lambda i: [i.rect(), i.vec(i.n if i.kind == "wide" else i.n + 2)], roles="a, b",
         ok=("real", "wide", "float32"), refused={"complex": COMPLEX_INPUT}, default=("real",)),
    Case(sl.solve_banded, _solve_banded_build, lambda ab, b: sl.solve_banded((1, 1), ab, b), roles="ab, b",
         ok=("real", "float32")),
    Case(sl.solveh_banded, lambda i: [_cast_like(i, _banded_spd(i)), i.vec()], roles="ab, b",
         ok=("real", "float32")),
    Case(sl.solve_toeplitz, lambda i: [i.vec(4) + 4.0, i.vec(4), i.vec(4)],
         lambda c, r, b: sl.solve_toeplitz((c, r), b), roles="(c, r), b", ok=VECTORS),
    Case(sl.solve_sylvester, lambda i: [i.square(), i.square(), i.rand(i.n, i.n)], roles="a, b, q",
         ok=GENERAL, default=("real", "complex")),
    Case(sl.solve_continuous_lyapunov, _lyapunov_build(1.0), roles="a, q", ok=("real", "batched", "float32"),
         refused={"complex": COMPLEX_INPUT}),
    Case(sl.solve_discrete_lyapunov, _lyapunov_build(0.3), roles="a, q", ok=("real", "batched", "float32"),
         refused={"complex": COMPLEX_INPUT}),
    Case(sl.solve_continuous_are, _are_build,
         lambda a, b, q, r: sl.solve_continuous_are(a, b, _sym(q), _sym(r)), roles="a, b, q (sym), r (sym)",
         ok=("real", "float32"), refused={"complex": COMPLEX_INPUT}),
    Case(sl.solve_discrete_are, _are_build,
         lambda a, b, q, r: sl.solve_discrete_are(a, b, _sym(q), _sym(r)), roles="a, b, q (sym), r (sym)",
         ok=("real", "float32"), refused={"complex": COMPLEX_INPUT}),
    # ------------------------------------------------------------------ scipy.linalg: factorizations
    Case(sl.cholesky, _sq, base="spd", ok=("spd", "nearrep", "hermitian", "batched", "float32"),
         default=("spd", "hermitian")),
    Case(sl.cholesky, _sq, lambda a: sl.cholesky(a, lower=True), "lower", base="spd", ok=SPD + ("hermitian",),
         default=("batched",)),
    Case(sl.cho_factor, _sq, lambda a: sl.cho_factor(a, lower=True), "lower", base="spd", ok=SPD,
         refused={"hermitian": COMPLEX_INPUT}, default=("spd",)),
    Case(sl.cho_solve, _cho_solve_build, lambda c, b: sl.cho_solve((c, False), b), roles="(c, lower), b",
         base="spd", ok=("spd", "batched", "float32"), refused={"hermitian": COMPLEX_INPUT}, default=("spd",)),
    Case(sl.cholesky_banded, lambda i: [_cast_like(i, _banded_spd(i))], roles="ab", ok=("real", "float32"),
         refused={"batched": Refused("batch")}),
    Case(sl.cho_solve_banded, _cho_solve_banded_build, lambda cb, b: sl.cho_solve_banded((cb, False), b),
         roles="(cb, lower), b", ok=("real", "float32")),
    Case(sl.lu, _sq, variant="p,l,u", ok=("real", "tall", "wide", "batched", "float32"),
         refused={"complex": COMPLEX_INPUT}, default=("real", "complex")),
    Case(sl.lu, _sq, lambda a: sl.lu(a, permute_l=True), "permute_l", ok=("real", "tall", "wide", "float32"),
         refused={"complex": COMPLEX_INPUT}, default=("wide",)),
    Case(sl.lu_factor, _sq, ok=("real", "tall", "batched", "float32"), refused={"complex": COMPLEX_INPUT}),
    Case(sl.lu_solve, _lu_solve_build, lambda lu, b, piv: sl.lu_solve((lu, piv), b), roles="(lu, piv), b",
         ok=("real", "float32"), refused={"complex": COMPLEX_INPUT}),
    Case(sl.qr, _sq, lambda a: sl.qr(a, mode="economic"), "economic",
         ok=("real", "complex", "tall", "wide", "batched", "float32"), default=("tall", "complex")),
    Case(sl.qr, _sq, lambda a: sl.qr(a, mode="r"), "r", ok=("real", "complex", "tall", "wide", "float32"),
         default=("wide",)),
    Case(sl.qr, _sq, variant="full", ok=("real", "complex", "wide", "float32"),
         refused={"tall": Refused("extra columns")}, default=("tall",)),
    Case(sl.qr, _sq, lambda a: sl.qr(a, mode="economic", pivoting=True), "pivoting",
         ok=("real", "complex", "tall", "wide", "float32"), default=("real",)),
    Case(sl.rq, _sq, lambda a: sl.rq(a, mode="economic"), "economic", ok=("real", "tall", "wide", "float32"),
         refused={"complex": COMPLEX_INPUT}, default=("wide",)),
    Case(sl.rq, _sq, lambda a: sl.rq(a, mode="r"), "r", ok=("real", "tall", "wide", "float32"),
         refused={"complex": COMPLEX_INPUT}, default=("tall",)),
    Case(sl.polar, _sq, variant="right", base="svd", ok=("real", "tall", "nearrep", "batched", "float32"),
         refused={"complex": COMPLEX_INPUT}, default=("tall",)),
    Case(sl.polar, _sq, lambda a: sl.polar(a, side="left"), "left", base="svd", ok=("real", "wide", "float32"),
         refused={"complex": COMPLEX_INPUT}, default=("wide",)),
    Case(sl.orthogonal_procrustes, lambda i: [i.rect(), i.rect()], roles="A, B", ok=("real", "float32"),
         refused={"complex": COMPLEX_INPUT}),
    Case(sl.null_space, _null_space_build, ok=("real", "batched", "float32"),
         refused={"complex": COMPLEX_INPUT}, features=null_space_features),
    Case(sl.pinv, _sq, base="svd", ok=("real", "tall", "wide", "nearrep", "batched", "float32"),
         refused={"complex": COMPLEX_INPUT}, default=("tall",)),
    Case(sl.pinvh, _sq, base="symind", ok=SYM + ("nearrep",), refused={"hermitian": COMPLEX_INPUT},
         default=("symind",)),
    Case(sl.subspace_angles, lambda i: [i.rect(), i.rect()[:, :2]], roles="A, B", ok=VECTORS),
    # ------------------------------------------------------------------ scipy.linalg: spectral
    Case(sl.eig, _sq, variant="values", ok=SQUARE, features=eig_value_features, default=("cplxeig", "batched")),
    Case(sl.eig, _sq, variant="vectors", ok=SQUARE, features=eig_vector_features, default=("real", "complex")),
    Case(sl.eigvals, _sq, ok=SQUARE, features=values_invariant, default=("real",)),
    Case(sl.eigh, _sq, variant="vectors", base="symind", ok=SYM + ("nearrep", "hermitian"),
         features=eigh_features, invariant=eigh_invariant, default=("symind", "nearrep", "hermitian")),
    Case(sl.eigh, _sq, lambda a: sl.eigh(a, eigvals_only=True), "eigvals_only", base="symind",
         ok=SYM + ("nearrep", "hermitian"), invariant=values_invariant, default=("spd",)),
    Case(sl.eigh, lambda i: [i.square(), i.spd()], variant="generalized", roles="a, b", base="symind",
         ok=SYM + ("hermitian",), features=eigh_features, default=("symind",)),
    Case(sl.eigh, _eigh_subset_build, lambda a, subset: sl.eigh(a, subset_by_index=subset), "subset",
         base="symind",
         ok=SYM + ("hermitian",), features=eigh_features, default=("spd",)),
    Case(sl.eigvalsh, _sq, base="symind", ok=SYM + ("nearrep", "hermitian"), invariant=values_invariant,
         default=("symind",)),
    Case(sl.eigh_tridiagonal, lambda i: [i.real_vec([0.4, 1.3, 2.2, 3.1]), i.real_vec([0.5, -0.6, 0.7])],
         variant="vectors", roles="d, e", ok=("real", "batched", "float32"), features=eigh_features),
    Case(sl.eigh_tridiagonal, lambda i: [i.real_vec([0.4, 1.3, 2.2, 3.1]), i.real_vec([0.5, -0.6, 0.7])],
         lambda d, e: sl.eigh_tridiagonal(d, e, eigvals_only=True), "eigvals_only", roles="d, e",
         ok=("real", "batched", "float32")),
    Case(sl.eigvalsh_tridiagonal, lambda i: [i.real_vec([0.4, 1.3, 2.2, 3.1]), i.real_vec([0.5, -0.6, 0.7])],
         roles="d, e", ok=("real", "batched", "float32")),
    Case(sl.schur, _sq, ok=("real", "negeig", "spd", "symind", "complex", "hermitian", "batched", "float32"),
         features=schur_features, default=("symind", "real", "complex")),
    Case(sl.svd, _sq, variant="square", base="svd", ok=("real", "complex", "nearrep", "batched", "float32"),
         features=svd_features, invariant=svd_invariant, default=("real", "nearrep")),
    Case(sl.svd, _sq, lambda a: sl.svd(a, full_matrices=False), "thin", base="svd",
         ok=("tall", "wide", "complex", "float32"), features=svd_features, default=("wide",)),
    Case(sl.svd, _sq, lambda a: sl.svd(a, compute_uv=False), "values", base="svd",
         ok=("real", "complex", "tall", "nearrep", "float32"), invariant=values_invariant, default=("tall",)),
    Case(sl.svdvals, _sq, base="svd", ok=("real", "complex", "wide", "nearrep", "float32"),
         invariant=values_invariant, default=("real",)),
    Case(sl.norm, _sq, variant="fro", ok=GENERAL, default=("complex",)),
    Case(sl.norm, _sq, lambda a: sl.norm(a, 2), "2", base="svd", ok=("real", "complex", "nearrep", "float32"),
         default=("real",)),
    # ------------------------------------------------------------------ scipy.linalg: matrix functions
    Case(sl.expm, _sq, ok=MATFUN, n=2, broad=False, default=("real", "complex")),
    Case(sl.cosm, _sq, ok=MATFUN, n=2, broad=False, default=("cplxeig",)),
    Case(sl.sinm, _sq, ok=MATFUN, n=2, broad=False, default=("symind",)),
    Case(sl.tanm, _sq, ok=MATFUN, n=2, broad=False, default=("hermitian",)),
    Case(sl.coshm, _sq, ok=MATFUN, n=2, broad=False, default=("batched",)),
    Case(sl.sinhm, _sq, ok=MATFUN, n=2, broad=False, default=("float32",)),
    Case(sl.tanhm, _sq, ok=MATFUN, n=2, broad=False, default=("nearrep",)),
    Case(sl.expm_frechet, lambda i: [i.square(), i.square()], roles="A, E", n=2, broad=False,
         ok=("real", "negeig", "cplxeig", "complex", "batched", "float32"), default=("real",)),
    Case(sl.sqrtm, _sq, ok=MATFUN, n=2, broad=False, default=("negeig", "complex", "symind")),
    Case(sl.logm, _sq, ok=MATFUN, n=2, broad=False, default=("negeig", "cplxeig", "nearrep")),
    # sign(A) is locally constant: its derivative is zero unless eigenvalues lie on both sides of the
    # imaginary axis.  These kinds have both (cplxeig with n = 4, complex with n = 3, and nearrep and the
    # stacks of the base kind symind); real, spd and hermitian (one side only) are checked to give
    # exactly zero in test_signm_derivatives_are_zero_where_the_sign_is_constant.
    Case(sl.signm, _sq, ok=("negeig", "cplxeig", "symind", "complex", "nearrep", "batched", "float32"),
         base="symind", broad=False, default=("negeig", "complex", "nearrep")),
    Case(sl.fractional_matrix_power, _sq, lambda a: sl.fractional_matrix_power(a, 0.37), "p=0.37",
         ok=MATFUN, n=2, broad=False, default=("negeig", "hermitian")),
    Case(sl.fractional_matrix_power, _sq, lambda a: sl.fractional_matrix_power(a, -1.6), "p=-1.6",
         ok=MATFUN, n=2, broad=False, default=("real", "symind")),
    # 3 x 3 across the branch cut, slow run only (forward over forward: up to a minute each).
    Case(sl.sqrtm, _sq, variant="n=3", ok=("negeig", "cplxeig", "complex"), n=3, broad=False, default=()),
    Case(sl.logm, _sq, variant="n=3", ok=("negeig", "cplxeig"), n=3, broad=False, default=()),
    Case(sl.fractional_matrix_power, _sq, lambda a: sl.fractional_matrix_power(a, 0.37), "p=0.37,n=3",
         ok=("cplxeig",), n=3, broad=False, default=()),
]


# ---------------------------------------------------------------------------- tapegrad's complex convention
@functools.lru_cache(maxsize=None)
def complex_convention() -> str:
    """How tapegrad reports the gradient of a real loss of a complex input, asked of ``sum(|z|**2)``.

    ``"conj"``: ``g = dL/dx - i dL/dy`` (``dL = Re(g dz)``; here ``2 conj(z)``);
    ``"plain"``: ``g = dL/dx + i dL/dy`` (here ``2 z``).
    """
    z = np.array([0.3 + 0.4j, -1.2 + 0.5j, 0.7 - 2.0j])
    g = tg.grad(lambda z: np.sum(np.abs(z) ** 2))(z)
    if np.allclose(g, 2 * np.conj(z), rtol=1e-14, atol=0):
        return "conj"
    if np.allclose(g, 2 * z, rtol=1e-14, atol=0):
        return "plain"
    raise AssertionError(f"grad of sum(|z|**2) at {z} is {g}: neither 2 conj(z) nor 2 z")


def as_convention(gx: np.ndarray, gy: np.ndarray) -> np.ndarray:
    """The complex gradient from the derivatives in the real (gx) and imaginary (gy) parts."""
    return gx - 1j * gy if complex_convention() == "conj" else gx + 1j * gy


# ---------------------------------------------------------------------------- one problem: F(theta)
TOLERANCES = {
    # (order 1 vs differences, order 2 vs differences, modes against each other)
    "float64": (1e-6, 1e-5, 1e-10),
    # A pair of values DELTA apart: the rules' intermediate terms grow like 1/DELTA (order 1)
    # and 1/DELTA**2 (order 2) before they cancel, and so does their rounding error
    # (eps / DELTA**2 = 2e-8): the modes differ by up to that much, legitimately.
    "nearrep": (1e-6, 1e-5, 1e-8),
    "float32": (1e-4, 1e-3, 1e-4),  # against the float64 references (worst seen: 2e-6, 1e-5, 7e-6)
}


def tolerances(kind: str) -> Tuple[float, float, float]:
    return TOLERANCES[kind if kind in TOLERANCES else "float64"]


def _err(got: Any, ref: Any, floor: float) -> float:
    """max |got - ref| relative to the larger of the two (normwise), and to no less than ``floor``.

    The floor (``Problem.floor``) keeps a derivative that is zero (``signm`` where every
    eigenvalue is on one side) from being compared against the rounding noise of differences.
    """
    got, ref = np.asarray(got), np.asarray(ref)
    scale = max(np.max(np.abs(ref), initial=0.0), np.max(np.abs(got), initial=0.0), floor)
    return float(np.max(np.abs(got - ref), initial=0.0) / scale)


class Problem:
    """The arguments of one case and kind, the loss ``F(theta)`` and the cached references."""

    def __init__(self, case: Case, kind: str):
        self.case, self.kind = case, kind
        inputs = Inputs(case, kind)
        self.args = [np.asarray(a) for a in case.build(inputs)]
        self.ctx = inputs.ctx
        self.dtype = np.float32 if kind == "float32" else np.float64
        self.layout = [(a.shape, a.dtype.kind == "c") for a in self.args]
        self.theta = np.concatenate(
            [p for a in self.args for p in ((a.real.ravel(), a.imag.ravel()) if a.dtype.kind == "c" else (a.ravel(),))]
        ).astype(self.dtype)
        self.theta64 = self.theta.astype(np.float64)
        self.features = case.invariant if kind == "nearrep" and case.invariant is not None else case.features
        feats = [np.asarray(f) for f in self.features(self.call(*self.args))]
        rng = np.random.default_rng(zlib.crc32(f"weights/{case.id}/{kind}".encode()))
        self.w64 = [(rng.standard_normal(f.shape), rng.standard_normal(f.shape)) for f in feats]
        self.w32 = [(w.astype(np.float32), v.astype(np.float32)) for w, v in self.w64]
        self.step = 1e-6 * max(1.0, float(np.max(np.abs(self.theta64))))
        # Differences of a loss of size |L| carry a rounding error of about eps |L| / step = 2e-10 |L|
        # (more through an ill-conditioned function): errors are measured against at least this.
        self.floor = 1e-3 * (1.0 + abs(float(self.F(self.theta64))))
        self._cache: Dict[str, Any] = {}

    def call(self, *args: Any) -> Any:
        return self.case.call(*args, **self.ctx)

    def unpack(self, theta: Any) -> list:
        out, offset = [], 0
        for shape, cplx in self.layout:
            size = int(np.prod(shape, dtype=np.int64))
            x = np.reshape(theta[offset: offset + size], shape)
            offset += size
            if cplx:
                x = x + 1j * np.reshape(theta[offset: offset + size], shape)
                offset += size
            out.append(x)
        return out

    def loss_of_args(self, *args: Any) -> Any:
        feats = self.features(self.call(*args))
        single = all(np.result_type(f) == np.float32 for f in feats)
        weights = self.w32 if single else self.w64
        return sum(np.sum(w * f + 0.5 * v * (f * f)) for (w, v), f in zip(weights, feats))

    def F(self, theta: Any) -> Any:
        return self.loss_of_args(*self.unpack(theta))

    def cached(self, key: str, compute: Callable[[], Any]) -> Any:
        if key not in self._cache:
            try:
                self._cache[key] = (True, compute())
            except Exception as exc:  # remembered: every test that needs it reports it
                self._cache[key] = (False, exc)
        ok, value = self._cache[key]
        if not ok:
            raise value
        return value

    # -- references
    def fd_grad(self) -> np.ndarray:
        def compute() -> np.ndarray:
            t, h = self.theta64, self.step
            g = np.empty_like(t)
            for i in range(t.size):
                e = np.zeros_like(t)
                e[i] = h
                g[i] = (self.F(t + e) - self.F(t - e)) / (2 * h)
            return g

        return self.cached("fd_grad", compute)

    def grad64(self, theta: np.ndarray) -> np.ndarray:
        return tg.grad(self.F)(theta)

    def fd_hessian(self) -> np.ndarray:
        def compute() -> np.ndarray:
            t, h = self.theta64, self.step
            cols = []
            for i in range(t.size):
                e = np.zeros_like(t)
                e[i] = h
                cols.append((self.grad64(t + e) - self.grad64(t - e)) / (2 * h))
            return np.stack(cols, axis=1)

        return self.cached("fd_hessian", compute)

    def hessian(self, mode: str) -> np.ndarray:
        def compute() -> np.ndarray:
            theta, F = self.theta, self.F
            basis = np.eye(theta.size, dtype=theta.dtype)
            if mode == "rev_rev":
                return tg.hessian(F)(theta)
            if mode == "fwd_rev":
                return tg.jacfwd(tg.grad(F))(theta)
            if mode == "rev_fwd":
                return tg.jacobian(lambda t: tg.jvp(F, (t,), (basis,))[1])(theta)
            if mode == "fwd_fwd":
                return tg.jacfwd(lambda t: tg.jvp(F, (t,), (basis,))[1])(theta)
            raise ValueError(mode)

        return np.asarray(self.cached(mode, compute))


@functools.lru_cache(maxsize=None)
def problem(case_index: int, kind: str) -> Problem:
    return Problem(CASES[case_index], kind)


# ---------------------------------------------------------------------------- the checks
def _short_name(case: Case) -> str:
    return case.fn.__name__


def _assert_refused(case: Case, kind: str, mode: str, refusal: Refused) -> None:
    prob = problem(CASES.index(case), kind)
    try:
        if mode == "grad":
            tg.grad(prob.F)(prob.theta)
        else:
            prob.hessian(mode)
    except tg.TapegradError as exc:
        message = str(exc)
        assert _short_name(case) in message, f"the refusal does not name {_short_name(case)}: {message!r}"
        assert re.search(refusal.match, message), f"refusal {message!r} does not say {refusal.match!r}"
        return
    except Exception as exc:  # not a clear refusal: a crash inside a rule
        raise AssertionError(
            f"{case.id} ({kind}, {mode}): expected a TapegradError refusing it ({refusal.match!r}), "
            f"got {type(exc).__name__}: {exc}"
        ) from exc
    raise AssertionError(
        f"{case.id} ({kind}, {mode}) was expected to be refused ({refusal.match!r}) but tapegrad now "
        "differentiates it: move the kind to the checked ones in CASES"
    )


def _check_forward(prob: Problem) -> None:
    expected = prob.call(*prob.args)
    traced = tg.vjp(lambda *a: prob.call(*a), *prob.args)[0]
    for t, e in zip(_leaves(traced), _leaves(expected)):
        t, e = np.asarray(t), np.asarray(e)
        assert t.shape == e.shape and t.dtype == e.dtype, (
            f"traced forward value {t.shape} {t.dtype}, plain call {e.shape} {e.dtype}")
        # A composite may multiply in another order (matrix_power): rounding of the dtype.
        rtol = 1e-5 if e.dtype in (np.float32, np.complex64) else 1e-12
        np.testing.assert_allclose(t, e, rtol=rtol, atol=rtol * max(1.0, float(np.max(np.abs(e), initial=0))))


def _check_order1(prob: Problem) -> None:
    tol = tolerances(prob.kind)[0]
    fd = prob.fd_grad()
    g = tg.grad(prob.F)(prob.theta)
    assert g.dtype == prob.dtype, f"gradient dtype {g.dtype}, parameters {prob.dtype}"
    err = _err(g, fd, prob.floor)
    assert err <= tol, f"grad vs central differences: relative error {err:.2e} > {tol:g}"
    # With respect to the arguments themselves: complex ones in tapegrad's convention.
    argnums = tuple(range(len(prob.args)))
    per_arg = tg.grad(prob.loss_of_args, argnums=argnums)(*prob.args)
    offset = 0
    for k, (a, ga) in enumerate(zip(prob.args, per_arg)):
        size = a.size
        gx = fd[offset: offset + size].reshape(a.shape)
        offset += size
        if a.dtype.kind == "c":
            gy = fd[offset: offset + size].reshape(a.shape)
            offset += size
            ref = as_convention(gx, gy)
        else:
            ref = gx
        assert np.shape(ga) == a.shape and np.result_type(ga) == a.dtype, (k, np.shape(ga), np.result_type(ga))
        err = _err(ga, ref, prob.floor)
        assert err <= tol, f"grad of argument {k} ({a.dtype}) vs central differences: relative error {err:.2e}"


def _check_order2(prob: Problem, mode: str) -> None:
    _, tol2, tol_modes = tolerances(prob.kind)
    h = prob.hessian(mode)
    p = prob.theta.size
    assert h.shape == (p, p), (h.shape, p)
    assert h.dtype == prob.dtype, f"{mode} Hessian of {np.dtype(prob.dtype)} parameters has dtype {h.dtype}"
    assert np.all(np.isfinite(h)), f"{mode} Hessian has non-finite entries"
    errors = []
    err_fd = _err(h, prob.fd_hessian(), prob.floor)
    if err_fd > tol2:
        errors.append(f"{mode} vs central differences of grad: relative error {err_fd:.2e} > {tol2:g}")
    try:
        ref = prob.hessian("rev_rev")
    except Exception as exc:
        errors.append(f"cannot compare with rev_rev, which raised {type(exc).__name__}: {exc}")
    else:
        ref = ref.T if mode == "rev_rev" else ref
        err_modes = _err(h, ref, prob.floor)
        if err_modes > tol_modes:
            what = "its transpose" if mode == "rev_rev" else "rev_rev"
            errors.append(f"{mode} vs {what}: relative difference {err_modes:.2e} > {tol_modes:g}")
    assert not errors, "; ".join(errors)


def _params():
    out = []
    for index, case in enumerate(CASES):
        for kind in case.kinds:
            for mode in MODES:
                default = kind in case.default or (case.broad and kind in BROAD_DEFAULT)
                marks = () if default else (pytest.mark.slow,)
                out.append(pytest.param(index, kind, mode, id=f"{case.id}-{kind}-{mode}", marks=marks))
    return out


@pytest.mark.parametrize("index, kind, mode", _params())
def test_linalg_rule(index, kind, mode):
    case = CASES[index]
    refusal = case.expectation(kind, 1 if mode == "grad" else 2)
    if refusal is not None:
        _assert_refused(case, kind, mode, refusal)
        return
    prob = problem(index, kind)
    if mode == "grad":
        _check_forward(prob)
        _check_order1(prob)
    else:
        _check_order2(prob, mode)


# ---------------------------------------------------------------------------- the table itself
def registered_functions() -> Dict[str, Any]:
    """Every public function of numpy.linalg and scipy.linalg with a primitive or composite rule."""
    found: Dict[int, Tuple[str, Any]] = {}
    for prefix, module in (("np.linalg", np.linalg), ("scipy.linalg", sl)):
        names = getattr(module, "__all__", None) or dir(module)
        for name in sorted(names):
            obj = getattr(module, name, None)
            if name.startswith("_") or obj is None or not callable(obj) or isinstance(obj, type):
                continue
            try:
                rule = RULES.get(obj)
            except TypeError:  # unhashable
                continue
            if rule is not None and rule.kind in (PRIMITIVE, COMPOSITE):
                found.setdefault(id(obj), (f"{prefix}.{name}", obj))
    return dict(found.values())


def test_every_registered_function_has_a_case():
    covered = {id(c.fn) for c in CASES}
    missing = sorted(name for name, fn in registered_functions().items() if id(fn) not in covered)
    assert not missing, f"registered linalg rules without a case in CASES: {missing}"
    registered = {id(fn) for fn in registered_functions().values()}
    stale = sorted({c.id for c in CASES if id(c.fn) not in registered})
    assert not stale, f"cases for functions without a differentiable rule: {stale}"


def test_the_table_is_well_formed():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    for case in CASES:
        assert set(case.kinds) <= set(KINDS), (case.id, case.kinds)
        assert case.kinds, f"{case.id} has no kind"
        assert set(case.default) <= set(case.kinds), (case.id, case.default)
        assert len(set(case.kinds)) == len(case.kinds), (case.id, case.kinds)
        both = [k for k in case.ok if k in case.refused and case.refused[k].order == 1]
        assert not both, f"{case.id}: {both} both checked and refused at order 1"
        if "nearrep" in case.ok and case.features not in (parts,):
            assert case.invariant is not None, f"{case.id}: vector features need an invariant form at nearrep"
    # The default run covers every kind somewhere.
    assert {k for c in CASES for k in c.default} == set(KINDS)


def test_inputs_have_the_spectra_their_kind_names():
    case = Case(sl.expm, _sq)
    for kind, check in {
        "negeig": lambda w: np.sum(w.real < 0) == 2 and np.allclose(w.imag, 0),
        "cplxeig": lambda w: np.sum(np.abs(w.imag) > 0.5) == 4,
        "spd": lambda w: np.all(w.real > 0),
        "symind": lambda w: np.any(w.real < 0) and np.any(w.real > 0),
        "nearrep": lambda w: np.min(np.diff(np.sort(w.real))) < 2 * DELTA,
    }.items():
        a = Inputs(case, kind).square()
        assert check(np.linalg.eigvals(a)), (kind, np.linalg.eigvals(a))
    assert np.allclose(Inputs(Case(sl.expm, _sq, base="spd"), "spd").square(),
                       Inputs(Case(sl.expm, _sq, base="spd"), "spd").square().T)
    h = Inputs(case, "hermitian").square()
    assert np.iscomplexobj(h) and np.allclose(h, h.conj().T) and np.all(np.linalg.eigvalsh(h) > 0)
    assert Inputs(case, "float32").square().dtype == np.float32
    assert Inputs(case, "batched").square().shape == (2, 3, 3)


@pytest.mark.parametrize("kind", ["real", "spd", "hermitian"])
def test_signm_derivatives_are_zero_where_the_sign_is_constant(kind):
    """Every eigenvalue in the right half-plane: signm is I nearby, and every derivative is exactly zero.

    Central differences there measure only the rounding of SciPy's iteration (about 1e-10 of the
    loss), so these kinds are checked against zero instead of in the table.
    """
    case = next(c for c in CASES if c.fn is sl.signm)
    prob = Problem(case, kind)
    assert np.allclose(sl.signm(prob.args[0]), np.eye(prob.args[0].shape[-1]), atol=1e-12)
    scale = 1e-10 * (1.0 + abs(float(prob.F(prob.theta))))
    assert np.max(np.abs(tg.grad(prob.F)(prob.theta))) <= scale
    for mode in MODES[1:]:
        assert np.max(np.abs(prob.hessian(mode))) <= scale, mode


def test_complex_convention_matches_finite_differences():
    """tapegrad's gradient of a real loss of complex z, checked on |z|**2 and on a non-holomorphic loss."""
    assert complex_convention() in ("conj", "plain")
    z = np.array([0.3 + 0.4j, -1.2 + 0.5j])

    def loss(z):
        return np.sum(np.abs(z) ** 2 * np.real(z) + np.imag(z * z) ** 2)

    h = 1e-6
    gx = np.array([(loss(z + h * e) - loss(z - h * e)) / (2 * h) for e in np.eye(2)])
    gy = np.array([(loss(z + 1j * h * e) - loss(z - 1j * h * e)) / (2 * h) for e in np.eye(2)])
    np.testing.assert_allclose(tg.grad(loss)(z), as_convention(gx, gy), rtol=1e-7)
