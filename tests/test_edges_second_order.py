"""Programs at the edges, at first and second order, in every mode.

Each program maps a real float64 vector to a real scalar or vector.  For each one:

* ``modes-1``: ``jacobian`` (whole and ``chunk_size=2``), ``jacfwd`` and, for a
  scalar, ``grad`` / ``value_and_grad`` give the numbers of the plainest way,
  stacked single VJPs (``tg.vjp``): NaN and signed infinities exactly, finite
  values to rounding (see :func:`assert_identical`);
* ``modes-2``: for ``loss = sum(w * f)``, ``hessian`` (whole and chunked),
  ``jacobian`` / ``jacfwd`` of ``tg.grad(loss)`` and stacked ``hvp`` give the
  numbers of stacked single VJPs of ``tg.grad(loss)``, in the same sense;
* ``fd-1`` / ``fd-2``: the Jacobian against central differences of the program
  (or of a smooth plain-NumPy reference, where SciPy's own tolerance or a kink
  blurs differences of the program), the Hessian against central differences of
  tapegrad's gradient (of the reference's, where one is given);
* ``convention``: on a kink, the documented convention (``docs/coverage.md``:
  ties split equally, ``abs``/``hypot``/``norm`` take 0, ``np.where`` the branch it
  selects), which is also the one-sided or central difference named with it.

Complex matrices are parametrized by their real and imaginary parts (so every
mode and the Hessian take a real vector); a few programs take complex input
directly and are checked at first order against ``dL/dRe - 1j dL/dIm``.
Optional packages (xarray, pint) are skipped when missing.

A check that exposes a bug is kept as ``xfail(strict=True)`` with the reason and
a minimal reproduction next to the program; a clear tapegrad refusal as
``xfail(strict=True, raises=<the tapegrad error>)``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import GradientDroppedError

scipy = pytest.importorskip("scipy")

import scipy.linalg as sl  # noqa: E402
from scipy import integrate, optimize, special  # noqa: E402

# ---------------------------------------------------------------------------- harness


def _plain(y: Any) -> np.ndarray:
    return np.asarray(y, dtype=float)


def _fd(fun: Callable, x: np.ndarray, h: float) -> np.ndarray:
    """Central differences of ``fun`` at real ``x``: ``fun(x).shape + x.shape``."""
    y0 = _plain(fun(x.copy()))
    out = np.empty(y0.shape + x.shape)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += h
        down[i] -= h
        out[(...,) + i] = (_plain(fun(up)) - _plain(fun(down))) / (2 * h)
    return out


def _stacked_vjps(f: Callable, x: np.ndarray) -> np.ndarray:
    """The plainest Jacobian: one single-cotangent VJP per output entry, stacked."""
    out, pullback = tg.vjp(f, x.copy())
    shape = np.shape(out)
    rows = []
    for i in range(int(np.prod(shape))):
        e = np.zeros(int(np.prod(shape)))
        e[i] = 1.0
        rows.append(np.asarray(pullback(e.reshape(shape))[0]))
    return np.stack(rows).reshape(shape + x.shape)


def assert_identical(actual: Any, expected: np.ndarray, what: str) -> None:
    """The numbers of stacked single VJPs: NaN where NaN, the same signed infinities, and finite
    values equal up to rounding, 1e-11 of the array's largest entry.

    Bit for bit does not hold: when written, ``jacfwd`` or ``jacfwd(grad)`` (the transposed
    VJP) differed from stacked VJPs in the last bits (at most 4e-14 relative) on 38 of 73
    programs, ``hessian`` (whole and chunked, equal to each other) on 4 (at most 4e-16) and
    reverse-mode ``jacobian`` on 2 (1e-16)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if np.iscomplexobj(actual) or np.iscomplexobj(expected):
        actual = np.stack([np.real(actual), np.imag(actual)])
        expected = np.stack([np.real(expected), np.imag(expected)])
    msg = f"{what} differs from stacked single VJPs"
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected), err_msg=msg + " (NaN)")
    np.testing.assert_array_equal(np.isposinf(actual), np.isposinf(expected), err_msg=msg + " (+inf)")
    np.testing.assert_array_equal(np.isneginf(actual), np.isneginf(expected), err_msg=msg + " (-inf)")
    finite = np.isfinite(expected)
    scale = float(np.max(np.abs(expected[finite]), initial=1.0))
    np.testing.assert_allclose(actual[finite], expected[finite], rtol=1e-11, atol=1e-11 * scale, err_msg=msg)


@dataclass
class Case:
    f: Callable
    x: np.ndarray
    ref: Optional[Callable] = None  # smooth plain reference for finite differences
    fd1: bool = True
    fd2: bool = True
    h1: float = 1e-6
    h2: float = 1e-5
    rtol1: float = 1e-6
    atol1: float = 1e-7
    rtol2: float = 1e-5
    atol2: float = 1e-6  # times max(1, |H|)
    grad: Optional[np.ndarray] = None  # the convention at a kink (d loss / dx)
    hess: Optional[np.ndarray] = None
    bugs: dict = field(default_factory=dict)  # check -> reason (xfail strict)
    raises: Optional[type] = None  # a clear refusal, all checks


def _weights(f: Callable, x: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        shape = np.shape(_plain(f(x.copy())))
    return np.linspace(0.7, 1.3, int(np.prod(shape))).reshape(shape) if shape else np.array(1.0)


def _loss(case: Case, w: np.ndarray) -> Callable:
    if w.shape == ():
        return case.f
    return lambda z: np.sum(w * case.f(z))


def _check_modes_1(case: Case) -> None:
    f, x = case.f, case.x
    expected = _stacked_vjps(f, x)
    assert_identical(tg.jacobian(f)(x.copy()), expected, "jacobian")
    assert_identical(tg.jacobian(f, chunk_size=2)(x.copy()), expected, "jacobian(chunk_size=2)")
    assert_identical(tg.jacfwd(f)(x.copy()), expected, "jacfwd")
    if expected.shape == x.shape:
        if np.ndim(_plain(f(x.copy()))) == 0:
            assert_identical(tg.grad(f)(x.copy()), expected, "grad")
            value, g = tg.value_and_grad(f)(x.copy())
            assert_identical(g, expected, "value_and_grad")
            # the plain program's value (up to rounding: a rule may compute it by another LAPACK path)
            np.testing.assert_allclose(np.asarray(value), _plain(f(x.copy())), rtol=1e-14, atol=0)
    np.testing.assert_array_equal(x, case.x)


def _check_modes_2(case: Case) -> None:
    x = case.x
    loss = _loss(case, _weights(case.f, x))
    g = tg.grad(loss)
    expected = _stacked_vjps(g, x)
    assert_identical(tg.hessian(loss)(x.copy()), expected, "hessian")
    assert_identical(tg.hessian(loss, chunk_size=2)(x.copy()), expected, "hessian(chunk_size=2)")
    assert_identical(tg.jacobian(g)(x.copy()), expected, "jacobian(grad)")
    assert_identical(tg.jacfwd(g)(x.copy()), expected, "jacfwd(grad)")
    hvps = []
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = 1.0
        hvps.append(np.asarray(tg.hvp(loss)(x.copy(), e.reshape(x.shape))))
    assert_identical(np.stack(hvps).reshape(x.shape + x.shape), expected, "stacked hvp")


def _check_fd_1(case: Case) -> None:
    jac = _stacked_vjps(case.f, case.x)
    ref = case.ref or case.f
    fd = _fd(ref, case.x, case.h1)
    np.testing.assert_allclose(jac, fd, rtol=case.rtol1, atol=case.atol1, err_msg="first order vs differences")


def _check_fd_2(case: Case) -> None:
    w = _weights(case.f, case.x)
    hess = np.asarray(tg.hessian(_loss(case, w))(case.x.copy()))
    ref = case.ref or case.f
    ref_loss = ref if w.shape == () else (lambda z: np.sum(w * ref(z)))
    fd = _fd(tg.grad(ref_loss), case.x, case.h2)
    scale = max(1.0, float(np.nanmax(np.abs(fd))))
    np.testing.assert_allclose(hess, fd, rtol=case.rtol2, atol=case.atol2 * scale, err_msg="Hessian vs differences")


def _check_convention(case: Case) -> None:
    w = _weights(case.f, case.x)
    loss = _loss(case, w)
    if case.grad is not None:
        np.testing.assert_allclose(tg.grad(loss)(case.x.copy()), case.grad, rtol=1e-12, atol=1e-14)
    if case.hess is not None:
        np.testing.assert_allclose(tg.hessian(loss)(case.x.copy()), case.hess, rtol=1e-12, atol=1e-14)


CHECKS = {
    "modes-1": _check_modes_1,
    "modes-2": _check_modes_2,
    "fd-1": _check_fd_1,
    "fd-2": _check_fd_2,
    "convention": _check_convention,
}


def _applies(case: Case, check: str) -> bool:
    if check == "fd-1":
        return case.fd1
    if check == "fd-2":
        return case.fd2
    if check == "convention":
        return case.grad is not None or case.hess is not None
    return True


def _run(case: Case, check: str) -> None:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        CHECKS[check](case)


def _params(table: dict) -> list:
    params = []
    for name, case in table.items():
        for check in CHECKS:
            if not _applies(case, check):
                continue
            marks = []
            if case.raises is not None:
                marks.append(pytest.mark.xfail(strict=True, raises=case.raises, reason="clear tapegrad refusal"))
            elif check in case.bugs:
                marks.append(pytest.mark.xfail(strict=True, reason=case.bugs[check]))
            params.append(pytest.param(name, check, marks=marks, id=f"{name}-{check}"))
    return params


# ---------------------------------------------------------------------------- data

_rng = np.random.default_rng(20261)
V2 = _rng.standard_normal((2, 2))
V3 = _rng.standard_normal((3, 3))
B3 = _rng.standard_normal((3, 3)) + 1j * _rng.standard_normal((3, 3))
RHS_C = np.array([1.0 - 0.5j, 0.3 + 2.0j])


def _pack(a: np.ndarray) -> np.ndarray:
    """Real parameters (real and imaginary parts, flattened) of a complex matrix."""
    return np.concatenate([a.real.ravel(), a.imag.ravel()])


def _unpack(x: Any, n: int) -> Any:
    return np.reshape(x[: n * n], (n, n)) + 1j * np.reshape(x[n * n :], (n, n))


# A complex 2 x 2 matrix with eigenvalues in the right half plane (logm, sqrtm away from the cut).
A2 = np.array([[1.6 + 0.3j, 0.4 - 0.7j], [-0.2 + 0.5j, 1.1 - 0.4j]])
# A small complex 3 x 3 matrix (entire functions, decompositions).
A3 = 0.6 * B3 + 0.5 * np.eye(3)
# A real non-symmetric 3 x 3 matrix with a complex-conjugate eigenvalue pair.
R3 = np.array([[0.5, -2.0, 0.3], [1.5, 0.2, -0.4], [0.1, 0.6, 1.2]])


def _hermitian(x: Any) -> Any:
    b = _unpack(x, 3)
    return b + np.conj(b).T


PX2 = _pack(A2)
PX3 = _pack(A3)

# ---------------------------------------------------------------------------- complex matrix functions

_SVD_AT_REPEATED = (
    "Hessian of sum(s**2) (= ||A||_F**2, smooth, Hessian 2 I) at exactly repeated singular values is "
    "NaN in every mode: the rule divides by s_i - s_j = 0 (docs/limits.md says values alone stay "
    "finite). Repro: tg.hessian(lambda a: np.sum(np.linalg.svd(a.reshape(2, 2), compute_uv=False)**2))"
    "(np.eye(2).ravel()) -> all NaN, expected 2 * np.eye(4)"
)

COMPLEX = {
    "expm re(exp(A)) . V": Case(lambda x: np.sum(np.real(sl.expm(_unpack(x, 2))) * V2), PX2),
    "expm |exp(A)|^2": Case(lambda x: np.sum(np.abs(sl.expm(_unpack(x, 3))) ** 2), PX3),
    "logm re and im": Case(
        lambda x: np.sum(np.real(sl.logm(_unpack(x, 2))) * V2) + np.sum(np.imag(sl.logm(_unpack(x, 2))) * V2.T), PX2
    ),
    "sqrtm angle(trace)": Case(lambda x: np.angle(np.trace(sl.sqrtm(_unpack(x, 2)))), PX2),
    # refused: GradientDroppedError naming scipy.linalg.funm (its pythran loop gets the tracer)
    "funm exp": Case(lambda x: np.sum(np.real(sl.funm(_unpack(x, 2), np.exp)) * V2), PX2, raises=GradientDroppedError),
    "cosm sinm tanhm": Case(
        lambda x: np.real(np.trace(sl.cosm(_unpack(x, 2)) @ sl.sinm(_unpack(x, 2)))) + np.imag(sl.tanhm(_unpack(x, 2))[0, 1]),
        PX2,
    ),
    "expm_frechet complex A and E": Case(
        lambda x: np.sum(np.real(sl.expm_frechet(_unpack(x, 2), np.conj(_unpack(x, 2)).T, compute_expm=False)) * V2),
        PX2,
    ),
    "eig non-symmetric sum |w|^2": Case(lambda x: np.sum(np.abs(np.linalg.eig(R3 + x.reshape(3, 3))[0]) ** 2), np.zeros(9)),
    "eigvals non-symmetric re^3 and im^2": Case(
        lambda x: np.sum(np.real(np.linalg.eigvals(R3 * x.reshape(3, 3))) ** 3)
        + np.sum(np.imag(np.linalg.eigvals(R3 * x.reshape(3, 3))) ** 2),
        np.ones(9) + 0.1 * _rng.standard_normal(9),
    ),
    "eigh hermitian eigenvalues": Case(lambda x: np.sum(np.linalg.eigh(_hermitian(x))[0] ** 3 * [1.0, 0.5, -0.7]), _pack(B3)),
    "eigvalsh upper hermitian": Case(
        lambda x: np.sum(np.exp(0.3 * np.linalg.eigvalsh(_hermitian(x), UPLO="U"))), _pack(B3)
    ),
    "eigh hermitian |v|^2": Case(lambda x: np.sum(np.abs(np.linalg.eigh(_hermitian(x))[1]) ** 2 * V3), _pack(B3)),
    "svd complex singular values": Case(lambda x: np.sum(np.linalg.svd(_unpack(x, 3), compute_uv=False) ** 3), PX3),
    "inv complex |.|^2": Case(lambda x: np.sum(np.abs(np.linalg.inv(_unpack(x, 2))) ** 2 * V2), PX2),
    "solve complex": Case(lambda x: np.real(np.vdot(RHS_C, np.linalg.solve(_unpack(x, 2), RHS_C * x[0]))), PX2),
    "det complex |det|^2 and angle": Case(
        lambda x: np.abs(np.linalg.det(_unpack(x, 3))) ** 2 + np.angle(np.linalg.det(_unpack(x, 3))), PX3
    ),
    "slogdet complex": Case(
        lambda x: (lambda s: s[1] + np.angle(s[0]) + np.real(s[0]) ** 2)(np.linalg.slogdet(_unpack(x, 3))), PX3
    ),
    "expm(t A + s B) traced scalars": Case(
        lambda x: np.real(np.trace(sl.expm(x[0] * A3 + x[1] * np.conj(A3).T))) + np.imag(sl.expm(x[0] * 1j * A3)[0, 1]),
        np.array([0.7, -0.4]),
    ),
    "expm(i t R) of a real matrix": Case(lambda x: np.abs(sl.expm(1j * x[0] * R3 * x[1])[0, 2]) ** 2, np.array([0.8, 1.3])),
    "conj products and angle": Case(
        lambda x: (lambda z: np.sum(np.real(z * np.conj(z[::-1])) * V2) + np.sum(np.angle(z) * V2.T))(
            _unpack(x, 2) @ _unpack(x, 2)
        ),
        PX2,
    ),
    # at singular and repeated spectra
    "svd sum s^2 at I (repeated)": Case(
        lambda x: np.sum(np.linalg.svd(x.reshape(2, 2), compute_uv=False) ** 2), np.eye(2).ravel(),
        bugs={"fd-2": _SVD_AT_REPEATED},
    ),
    # Repro: tg.hessian(f)(np.zeros(4)) with f = lambda a: np.sum(np.linalg.svd(a.reshape(2, 2),
    # compute_uv=False)**2) gives diag(2, 0, 0, 2); f is ||A||_F**2, Hessian 2 * np.eye(4).
    "svd sum s^2 at the zero matrix": Case(
        lambda x: np.sum(np.linalg.svd(x.reshape(2, 2), compute_uv=False) ** 2), np.zeros(4),
        bugs={"fd-2": "Hessian of sum(svd(A)**2) at A = 0 is diag(2, 0, 0, 2), a finite wrong number: "
                      "the off-diagonal entries' curvature is lost (truth 2 I)"},
    ),
    # Repro: f = lambda a: np.sum(np.linalg.eigvalsh(a.reshape(2, 2))**2) (= a00**2 + a11**2 + 2 a10**2
    # on the lower triangle eigvalsh reads); at np.eye(2).ravel(): tg.hessian(f) is NaN everywhere,
    # the truth diag(2, 0, 4, 2); tg.hessian(f, chunk_size=1) and stacked VJPs of tg.grad(f) give
    # row 1 (the unread upper entry) as 0, tg.hessian(f) and tg.jacfwd(tg.grad(f)) give it NaN.
    "eigvalsh sum w^2 at I (repeated)": Case(
        lambda x: np.sum(np.linalg.eigvalsh(x.reshape(2, 2)) ** 2), np.eye(2).ravel(),
        bugs={
            "fd-2": "Hessian of the smooth sum(eigvalsh(A)**2) at repeated eigenvalues is NaN (truth diag(2, 0, 4, 2))",
            "modes-2": "batched Hessian (hessian, jacfwd(grad)) puts NaN in row 1, which stacked single VJPs "
                       "and hessian(chunk_size=1) give as 0: NaN crosses between cotangents of one batch",
        },
    ),
    # Repro: f = lambda a: np.sum(np.real(sl.sqrtm(a.reshape(2, 2)))); tg.jacobian(f)(np.zeros(4)) gives
    # 2.49e291 in every entry, tg.jacfwd(f)(np.zeros(4)) 6.24e290: the derivative is infinite there.
    "sqrtm of the zero matrix": Case(
        # The derivative is infinite: NaN in every mode (it was finite garbage, 2.49e291 and 6.24e290).
        lambda x: np.sum(np.real(sl.sqrtm(x.reshape(2, 2)))), np.zeros(4), fd1=False, fd2=False,
    ),
}

# ---------------------------------------------------------------------------- kinks and guards

X5 = np.array([-0.7, -1e-3, 1e-3, 0.45, 1.3])  # next to the kinks at 0
ON = np.array([-0.7, 0.0, 0.5, 0.0, 1.3])  # on the kinks at 0 (and 0.5)
W5 = np.array([0.7, 0.85, 1.0, 1.15, 1.3])  # the weights _weights gives a 5-vector


def _relu(x):
    return np.maximum(x, 0)


def _sqrt_guard(x):
    return np.where(x > 0, np.sqrt(np.where(x > 0, x, 1.0)), 0.0)


def _xlogx_guard(x):
    return np.where(x > 0, x * np.log(np.where(x > 0, x, 1.0)), 0.0)


_SOFTMAX01 = np.array([0.0, 0.0, 1.0, np.e]) / (1.0 + np.e)

_SQUARE_OF_KINK = (
    "{what} is smooth with Hessian {truth}, but tapegrad's Hessian at 0 is 0 there: the chain rule "
    "through the kink's subgradient 0 loses the curvature (2 g g^T with g = 0; the |x| * |x|'' term "
    "is a strong zero). Repro: {repro}"
)

KINKS = {
    # next to the kinks: smooth there, differences are exact
    "clip, maximum next to bounds": Case(
        lambda x: np.clip(x, -1e-3 + 5e-4, 0.45 + 1e-4) ** 2 + np.maximum(x, 0) * np.minimum(x[::-1], 0), X5
    ),
    "sqrt guarded by where, next to 0": Case(_sqrt_guard, X5, h1=1e-7, h2=1e-7, rtol2=1e-4),
    "x log x guarded, next to 0": Case(_xlogx_guard, X5, h1=1e-7, h2=1e-7, rtol2=1e-4),
    "sinc near 0": Case(lambda x: np.sinc(x), np.array([-0.5, -1e-3, 1e-7, 0.1 / np.pi + 1e-9, 0.031])),
    "hypot near (0, 0)": Case(lambda x: np.hypot(x[:2], x[2:]), np.array([1e-3, -2e-3, 3e-3, 1e-3]), h2=1e-7),
    "arctan2 near the axes": Case(
        lambda x: np.arctan2(x[:4], x[4:]), np.array([1e-4, -1e-4, 1.0, 1e-12, -1.0, -1.0, 1e-4, 1.0]), h2=1e-6
    ),
    # on the kinks: the documented convention
    "maximum tie with itself": Case(
        lambda x: np.sum(np.maximum(x, x[::-1]) * W5), np.array([0.3, -1.0, 0.2, 0.5, 0.3]), fd1=False, fd2=False,
        grad=np.array([0.7 * 0.5 + 1.3 * 0.5, 0.0, 1.0, 0.85 + 1.15, 0.7 * 0.5 + 1.3 * 0.5]), hess=np.zeros((5, 5)),
    ),
    "relu on 0 (tie split)": Case(
        lambda x: np.sum(_relu(x) * W5), ON, fd2=False, grad=np.array([0.0, 0.85 / 2, 1.0, 1.15 / 2, 1.3])
    ),
    # The second derivative does not exist at 0 (one-sided 0 and 2); the split rule gives 2 * 0.5**2,
    # which is neither side nor the central difference of the gradient (1).
    "relu squared on 0": Case(
        lambda x: np.sum(_relu(x) ** 2 * W5), ON, fd2=False, atol1=1e-5, grad=2 * _relu(ON) * W5,
        hess=np.diag(W5 * [0.0, 0.5, 2.0, 0.5, 2.0]),
    ),
    "minimum with constant on it": Case(
        lambda x: np.sum(np.minimum(x, 0.5) * W5), ON, fd2=False, grad=np.array([0.7, 0.85, 0.5, 1.15, 0.0])
    ),
    "abs on 0 (subgradient 0)": Case(
        lambda x: np.sum(np.abs(x) * W5), ON, fd2=False, grad=np.array([-0.7, 0.0, 1.0, 0.0, 1.3]),
        hess=np.zeros((5, 5)),
    ),
    "abs cubed on 0": Case(lambda x: np.sum(np.abs(x) ** 3), ON, atol2=1e-4),
    "abs squared on 0": Case(
        lambda x: np.sum(np.abs(x) ** 2 * W5), ON, atol1=1e-5,
    ),
    "norm squared at 0": Case(
        lambda x: np.linalg.norm(x) ** 2 + np.sum(x), np.zeros(3), atol1=1e-5,
    ),
    "complex |z|^2 at z = 0": Case(
        lambda x: np.sum(np.abs(x[:2] + 1j * x[2:]) ** 2 * [1.0, 2.0]), np.array([0.0, 0.6, 0.0, -0.3]), atol1=1e-5,
    ),
    "hypot squared on (0, 0)": Case(
        lambda x: np.hypot(x[0], x[1]) ** 2, np.array([0.0, 0.0]), atol1=1e-5,
    ),
    "clip on its bounds (tie split)": Case(
        lambda x: np.sum(np.clip(x, 0.0, 0.5) * W5), ON, fd2=False, grad=np.array([0.0, 0.85 / 2, 1.0 / 2, 1.15 / 2, 0.0])
    ),
    "where x|x| on 0 (else branch)": Case(
        lambda x: np.sum(np.where(x > 0, x**2, -(x**2))), ON, fd2=False, atol1=1e-5,
        hess=np.diag(np.where(ON > 0, 2.0, -2.0)),
    ),
    "sqrt guarded by where on 0": Case(
        lambda x: np.sum(_sqrt_guard(x) * W5), ON, fd1=False, fd2=False,
        grad=np.array([0.0, 0.0, 1.0 / (2 * np.sqrt(0.5)), 0.0, 1.3 / (2 * np.sqrt(1.3))]),
        hess=np.diag([0.0, 0.0, -0.25 * 0.5**-1.5, 0.0, -1.3 * 0.25 * 1.3**-1.5]),
    ),
    "x log x guarded on 0": Case(
        lambda x: np.sum(_xlogx_guard(x) * W5), ON, fd1=False, fd2=False,
        grad=np.array([0.0, 0.0, np.log(0.5) + 1.0, 0.0, 1.3 * (np.log(1.3) + 1.0)]),
        hess=np.diag([0.0, 0.0, 1 / 0.5, 0.0, 1.3 / 1.3]),
    ),
    "xlogy(x, x) on 0 (genuine -inf)": Case(
        lambda x: np.sum(special.xlogy(x, x) * W5), np.array([0.3, 0.0, 0.5, 0.0, 1.3]), fd1=False, fd2=False
    ),
    "sinc on 0": Case(lambda x: np.sinc(x), np.array([0.0, 1.0, -2.0, 0.5])),
    "hypot on (0, 0) (subgradient 0)": Case(
        lambda x: np.hypot(x[0], x[1]) + np.hypot(x[2], 0.0), np.array([0.0, 0.0, 0.0]), fd1=False, fd2=False,
        grad=np.zeros(3),
    ),
    # the y-derivative from above the cut (y = +0.0), where arctan2 is pi
    "arctan2 on the negative x axis": Case(
        lambda x: np.arctan2(x[0], x[1]) * x[1], np.array([0.0, -1.5]), fd1=False, fd2=False, grad=np.array([1.0, np.pi])
    ),
    "arctan2 at (0, 0)": Case(lambda x: np.arctan2(x[0], x[1]), np.array([0.0, 0.0]), fd1=False, fd2=False),
    "norm at 0 (subgradient 0)": Case(
        lambda x: np.linalg.norm(x) + np.sum(x), np.zeros(3), fd1=False, fd2=False, grad=np.ones(3)
    ),
    "softplus at overflow": Case(
        lambda x: np.logaddexp(0.0, x), np.array([-800.0, 0.0, 800.0]), fd1=False, fd2=False,
        grad=np.array([0.0, 0.5, 1.3]), hess=np.diag([0.0, 0.25, 0.0]),
    ),
    "relu chain on kinks": Case(
        lambda x: np.sum(_relu(_relu(x) - 0.5) * W5 + _relu(-_relu(x))), ON, fd1=False, fd2=False,
        # relu(-relu(x)) is identically 0, but at x = 0 the tie rule splits twice: -0.5 * 0.5
        grad=np.array([0.0, -0.25, 0.5, -0.25, 1.3]),
    ),
    "sqrt of x^2 on 0 (NaN, as 0 * inf)": Case(lambda x: np.sum(np.sqrt(x**2)), ON, fd1=False, fd2=False),
    # non-finite inputs and outputs: every mode gives the same NaN and inf
    "NaN input": Case(lambda x: np.sin(x) * x[0] + np.maximum(x, 0.1), np.array([0.5, np.nan, -1.0]), fd1=False, fd2=False),
    "inf inputs": Case(
        lambda x: np.exp(-x) + np.tanh(x) + np.arctan(x), np.array([np.inf, -np.inf, 1.0]), fd1=False, fd2=False
    ),
    "log output -inf": Case(lambda x: np.log(x) + np.sqrt(x), np.array([0.0, 1.0, -1.0]), fd1=False, fd2=False),
    "fmax NaN gets no gradient": Case(
        lambda x: np.fmax(x, 0.2) ** 2 + np.fmin(x[::-1], 0.0), np.array([np.nan, 0.5, 0.1, -0.3]), fd1=False, fd2=False,
    ),
    # -inf entries get exactly 0 (softmax), at both orders
    "logsumexp with -inf entries": Case(
        lambda x: special.logsumexp(x) + special.logsumexp(x[1:]), np.array([-np.inf, -np.inf, 0.0, 1.0]),
        fd1=False, fd2=False, grad=2 * _SOFTMAX01, hess=2 * np.pad(np.diag(_SOFTMAX01[2:]) - np.outer(_SOFTMAX01[2:],
                                                                                             _SOFTMAX01[2:]), (2, 0)),
    ),
}

# ---------------------------------------------------------------------------- solvers with kinks

T_END = 5.0


def _abs_sin_integral(u):
    """int_0^u |sin s| ds for any real u (odd in u)."""
    u = np.asarray(u)
    a = np.abs(u)
    k = np.floor(a / np.pi)
    return np.sign(u) * (2.0 * k + 1.0 - np.cos(a - k * np.pi))


def _ode_abs_sin(x):
    # y' = p |sin(t - q)|: kinks in time at q and q + pi, moving with q.
    p, q = x[0], x[1]
    sol = integrate.solve_ivp(lambda t, y: p * np.abs(np.sin(t - q)) + 0.0 * y, (0.0, T_END), np.zeros(1) + 0.0 * p,
                              rtol=1e-10, atol=1e-12)
    return sol.y[0, -1]


def _ode_abs_sin_ref(x):
    return x[0] * (_abs_sin_integral(T_END - x[1]) - _abs_sin_integral(-x[1]))


def _rotation_rhs(kink):
    def rhs(t, y):
        return np.stack([-y[1], y[0], kink(y[0])])
    return rhs


def _ode_rotation(x, kink, method="RK45"):
    sol = integrate.solve_ivp(_rotation_rhs(kink), (0.0, T_END), np.stack([x[0], x[1], 0.0 * x[0]]), method=method,
                              rtol=1e-10, atol=1e-12)
    return sol.y[2, -1]


def _abs_cos_integral(u):
    return _abs_sin_integral(u + np.pi / 2) - _abs_sin_integral(np.pi / 2)


def _rotation_abs_ref(x):
    # x(t) = r cos(t + phi): int_0^T |x| dt = r (G(T + phi) - G(phi)), G' = |cos|
    r, phi = np.hypot(x[0], x[1]), np.arctan2(x[1], x[0])
    return r * (_abs_cos_integral(T_END + phi) - _abs_cos_integral(phi))


def _rotation_relu_ref(x):
    r, phi = np.hypot(x[0], x[1]), np.arctan2(x[1], x[0])
    return 0.5 * (_rotation_abs_ref(x) + r * (np.sin(T_END + phi) - np.sin(phi)))


def _odeint_where(x):
    # odeint, y' = where(y > c, -k (y - c), 0.1 k): y0 = 2 > c decays towards c, never crossing it.
    k, c = x[0], x[1]
    t = np.array([0.0, 1.0, 2.0])
    y = integrate.odeint(lambda y, t: np.where(y > c, -k * (y - c), 0.1 * k), np.stack([2.0 + 0.0 * k]), t,
                         rtol=1e-11, atol=1e-12)
    return y[1:, 0]


def _odeint_where_ref(x):
    k, c = x[0], x[1]
    return c + (2.0 - c) * np.exp(-k * np.array([1.0, 2.0]))


def _ode_unvisited_kink(x):
    # the max term is zero along the whole solution; the parameter moving the kink has no effect
    k, c = x[0], x[1]
    sol = integrate.solve_ivp(lambda t, y: -k * y + 3.0 * np.maximum(y - c, 0.0), (0.0, 2.0), np.ones(1) + 0.0 * k,
                              method="DOP853", rtol=1e-11, atol=1e-13)
    return sol.y[0, -1]


def _ode_unvisited_kink_ref(x):
    return np.exp(-2.0 * x[0]) + 0.0 * x[1]


def _root_kink_away(x):
    # y^3 + y - p0 = 0 near 0.68; the |y - 5| - (5 - y) term is zero for y < 5 (a kink at 5)
    sol = optimize.root(lambda y: y**3 + x[1] * y - x[0] + 0.5 * (np.abs(y - 5.0) - (5.0 - y)), np.array([3.0]),
                        tol=1e-14)
    return sol.x[0]


def _cubic_root(p, q):
    y = np.cbrt(p) * 0 + 0.7
    for _ in range(60):
        y = y - (y**3 + q * y - p) / (3 * y**2 + q)
    return y


def _minimize_kink_away(x):
    def objective(y):
        return 0.5 * np.sum((y - x) ** 2) + 0.1 * np.sum(y**4) + 0.5 * np.sum(np.maximum(y - 10.0, 0.0))

    sol = optimize.minimize(objective, np.zeros(2), method="BFGS", options={"gtol": 1e-12})
    return np.sum(sol.x**2 * [1.0, 2.0])


def _minimize_kink_away_ref(x):
    # y - p + 0.4 y^3 = 0, elementwise
    y = x * 0 + 0.5
    for _ in range(60):
        y = y - (y - x + 0.4 * y**3) / (1 + 1.2 * y**2)
    return np.sum(y**2 * [1.0, 2.0])


def _brentq_kink_away(x):
    return optimize.brentq(lambda y: np.tanh(y) - x[0] * np.exp(-y) + np.abs(np.minimum(y + 3.0, 0.0)), -4.0, 3.0,
                           xtol=1e-15, rtol=1e-15)


def _brentq_ref(x):
    y = 0.5 + 0 * x[0]
    for _ in range(60):
        y = y - (np.tanh(y) - x[0] * np.exp(-y)) / (1 - np.tanh(y) ** 2 + x[0] * np.exp(-y))
    return y


def _quad_abs_points(x):
    p, q = x[0], x[1]
    val, _ = integrate.quad(lambda t: q * np.abs(t - p) + t * q**2, 0.0, 2.0, points=[p], epsabs=1e-13, epsrel=1e-13)
    return val


def _quad_abs_ref(x):
    p, q = x[0], x[1]
    return q * (p**2 / 2 + (2.0 - p) ** 2 / 2) + 2.0 * q**2


def _quad_relu_fixed_points(x):
    p = x[0]
    val, _ = integrate.quad(lambda t: np.maximum(t - p, 0.0) ** 2 * x[1], 0.0, 2.0, points=[0.5, 1.0],
                            epsabs=1e-13, epsrel=1e-13)
    return val


def _quad_relu_ref(x):
    return x[1] * (2.0 - x[0]) ** 3 / 3


_T8 = np.linspace(0.0, 1.0, 8)
_DATA8 = 1.5 * _T8 + 0.2 * np.sin(9 * _T8) + np.where(np.arange(8) == 3, 2.0, 0.0)  # one outlier
_B8 = np.column_stack([_T8, np.ones(8)])


def _huber_fit(x):
    # Huber loss: quadratic for |r| <= f_scale, linear beyond (a kink in rho''); no residual sits on it
    sol = optimize.least_squares(lambda c: c[0] * _T8 + c[1] - _DATA8 * x[0], np.zeros(2), loss="huber",
                                 f_scale=x[1], xtol=1e-15, ftol=1e-15, gtol=1e-15)
    return np.sum(sol.x**2 * [1.0, 3.0])


def _huber_fit_ref(x):
    c = np.linalg.lstsq(_B8, _DATA8 * x[0], rcond=None)[0]
    for _ in range(30):  # Newton on the piecewise quadratic: exact once the inliers are found
        r = _B8 @ c - _DATA8 * x[0]
        inlier = np.abs(r) <= x[1]
        c = c - np.linalg.solve(_B8.T @ (_B8 * inlier[:, None]), _B8.T @ (np.where(inlier, 1.0, x[1] / np.abs(r)) * r))
    return np.sum(c**2 * [1.0, 3.0])


SOLVERS = {
    "solve_ivp |sin(t - q)|, moving time kinks": Case(_ode_abs_sin, np.array([1.3, 0.8]), ref=_ode_abs_sin_ref,
                                                      rtol1=1e-6, rtol2=1e-4),
    "solve_ivp rotation, |x| crossed 2 times": Case(
        lambda x: _ode_rotation(x, np.abs), np.array([0.8, 0.5]), ref=_rotation_abs_ref, rtol1=1e-6, rtol2=1e-4
    ),
    "solve_ivp rotation, max(x, 0) (Radau)": Case(
        lambda x: _ode_rotation(x, lambda u: np.maximum(u, 0.0), "Radau"), np.array([0.8, 0.5]),
        ref=_rotation_relu_ref, rtol1=1e-5, rtol2=1e-4, atol2=1e-5,
    ),
    "odeint where, never crossing": Case(_odeint_where, np.array([0.9, 0.5]), ref=_odeint_where_ref, rtol2=1e-4),
    "solve_ivp kink never visited": Case(_ode_unvisited_kink, np.array([0.7, 4.0]), ref=_ode_unvisited_kink_ref),
    "root with |.| kink away": Case(_root_kink_away, np.array([0.9, 1.0]), ref=lambda x: _cubic_root(x[0], x[1])),
    "minimize with max kink away": Case(_minimize_kink_away, np.array([1.0, -0.6]), ref=_minimize_kink_away_ref),
    "brentq with min kink away": Case(_brentq_kink_away, np.array([0.8]), ref=_brentq_ref),
    "quad |t - p| with points=[p]": Case(_quad_abs_points, np.array([0.7, 1.4]), ref=_quad_abs_ref),
    # The kink at t = p (not among points=) becomes a knot that moves with p: exact at both orders.
    "quad relu^2 with fixed points": Case(_quad_relu_fixed_points, np.array([0.7, 1.4]), ref=_quad_relu_ref),
    "least_squares huber loss": Case(_huber_fit, np.array([1.0, 0.5]), ref=_huber_fit_ref),
}

# ---------------------------------------------------------------------------- complex input, first order


def _complex_fd(f: Callable, z: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """``dL/dRe - 1j dL/dIm`` by central differences (tapegrad's convention)."""
    out = np.empty(z.shape, dtype=complex)
    for i in np.ndindex(z.shape):
        e = np.zeros(z.shape, dtype=complex)
        e[i] = h
        out[i] = (f(z + e) - f(z - e)) / (2 * h) - 1j * (f(z + 1j * e) - f(z - 1j * e)) / (2 * h)
    return out


COMPLEX_INPUT = {
    "expm |.|^2": lambda a: np.sum(np.abs(sl.expm(a)) ** 2 * V2),
    "logm imag": lambda a: np.sum(np.imag(sl.logm(a)) * V2),
    "det angle and inv": lambda a: np.angle(np.linalg.det(a)) + np.sum(np.real(np.linalg.inv(a)) * V2),
    "svdvals and eigvals": lambda a: np.sum(np.linalg.svd(a, compute_uv=False) ** 2 * [1.0, 3.0])
    + np.sum(np.abs(np.linalg.eigvals(a)) ** 3),
}


def _complex_input_run(name, ask):
    f = COMPLEX_INPUT[name]
    z = A2.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = ask(f, z)
    np.testing.assert_array_equal(z, A2)
    return f, out


@pytest.mark.parametrize("name", sorted(COMPLEX_INPUT))
def test_complex_input_first_order(name):
    f, g = _complex_input_run(name, lambda f, z: tg.grad(f)(z.copy()))
    np.testing.assert_allclose(g, _complex_fd(f, A2), rtol=1e-6, atol=1e-7)
    _, pullback = tg.vjp(f, A2.copy())
    assert_identical(pullback(1.0)[0], np.asarray(g), "vjp")
    assert_identical(tg.jacobian(f)(A2.copy()), np.asarray(g), "jacobian")
    assert_identical(tg.jacobian(f, chunk_size=2)(A2.copy()), np.asarray(g), "jacobian(chunk_size=2)")


# jacfwd of a real function of complex input gave array([2.]) (real dtype, dL/dRe only) where
# tg.grad / tg.jacobian / tg.vjp give array([2.-4.j]) (dL/dRe - 1j dL/dIm): forward mode pushes real
# tangents. It is now refused by name (tapegrad/forward.py, _require_complex_outputs).
@pytest.mark.parametrize("name", ["expm |.|^2", "det angle and inv"])
def test_complex_input_jacfwd_of_a_real_output_is_refused(name):
    with pytest.raises(tg.NonDifferentiableArgumentError, match="real axis"):
        _complex_input_run(name, lambda f, z: tg.jacfwd(f)(z.copy()))


def test_complex_input_jacfwd_of_a_holomorphic_function():
    z = np.array([1.0 + 2.0j, -0.5 + 0.25j])
    np.testing.assert_allclose(tg.jacfwd(lambda z: z**3)(z), np.diag(3 * z**2), rtol=1e-15)


# The traced gradient of a complex input is complex, and reverse-mode jacobian refuses complex
# outputs: a tapegrad error whose message names the hessian case.
def test_complex_input_hessian_is_refused():
    with pytest.raises(tg.NonDifferentiableArgumentError, match="real and imaginary parts"):
        _complex_input_run("expm |.|^2", lambda f, z: tg.hessian(f)(z.copy()))


# ---------------------------------------------------------------------------- wrappers: xarray, pint


def _xr():
    return pytest.importorskip("xarray")


def _ureg():
    pint = pytest.importorskip("pint")
    global _UREG
    if _UREG is None:
        _UREG = pint.UnitRegistry()
    return _UREG


_UREG = None


def _xr_kinked(x):
    xr = _xr()
    da = xr.DataArray(x.reshape(2, 3), dims=("a", "b"), coords={"b": [0.0, 1.0, 2.0]})
    s = (np.abs(da) * da.b + np.maximum(da, 0.2) ** 2).sum(dim="a")
    return (np.exp(-s) + xr.where(da > 0, np.sqrt(da.clip(min=1e-6)), 0.0).mean(dim="b")).values


def _xr_scalar(x):
    xr = _xr()
    da = xr.DataArray(x, dims="t", coords={"t": np.arange(5.0)})
    return (np.tanh(da.diff("t")) ** 2 * da.t.isel(t=slice(1, None))).sum().values


def _xr_float(x):
    xr = _xr()
    return float(xr.DataArray(x, dims="t").sum())


def _pint_kinked(x):
    Q = _ureg().Quantity
    v = Q(x, "m/s")
    e = 0.5 * Q(2.0, "kg") * np.maximum(v, Q(36.0, "cm/s")) ** 2 + Q(1.0, "N") * Q(np.abs(x), "mm")
    return e.to("J").magnitude


def _pint_hypot(x):
    Q = _ureg().Quantity
    return np.hypot(Q(x[0], "m"), Q(x[1], "cm")).to("mm").magnitude + np.sqrt(Q(x[2] ** 2 + 1.0, "km**2")).to("m").magnitude


def _pint_offset(x):
    Q = _ureg().Quantity
    temperature = Q(x * 10.0, "degC")
    kelvin = temperature.to("K").magnitude
    return np.sum(np.log(kelvin) * x) + np.clip(Q(x, "m"), Q(0.3, "m"), Q(1.2, "m")).to("cm").magnitude.sum()


def _pint_xarray(x):
    xr = _xr()
    _ureg()
    pytest.importorskip("pint_xarray")
    da = xr.DataArray(x.reshape(2, 3), dims=("a", "b")).pint.quantify("m")
    return ((da**2).sum(dim="b").pint.to("cm**2") ** 0.5).pint.dequantify().values


X_WRAP = np.array([0.9, -0.4, 0.3, 1.2, 0.25, -1.1])

WRAPPERS = {
    "xarray kinks, sum(dim=), .values": Case(_xr_kinked, X_WRAP),
    "xarray diff, scalar .values": Case(_xr_scalar, np.array([0.3, -0.2, 0.8, 1.1, 0.1])),
    "xarray float()": Case(_xr_float, np.array([0.3, -0.2]), raises=GradientDroppedError),
    "pint maximum, abs, J": Case(_pint_kinked, X_WRAP),
    "pint hypot m and cm": Case(_pint_hypot, np.array([0.3, 40.0, 0.7])),
    "pint offset units and clip": Case(_pint_offset, np.array([0.9, 0.2, 1.5, 0.7])),
    "pint-xarray quantify, to, dequantify": Case(_pint_xarray, X_WRAP),
}

TABLES = {"complex": COMPLEX, "kinks": KINKS, "solvers": SOLVERS, "wrappers": WRAPPERS}
ALL = {name: case for table in TABLES.values() for name, case in table.items()}


def test_program_count():
    assert 50 <= len(ALL) + len(COMPLEX_INPUT) <= 80


@pytest.mark.parametrize("name, check", _params(ALL))
def test_edge(name, check):
    _run(ALL[name], check)


