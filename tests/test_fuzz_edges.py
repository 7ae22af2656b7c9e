"""Differential fuzzing at the edges of tapegrad's reach (issue 30).

Hypothesis draws what the plain fuzzer (``tests/test_fuzz.py``) does not:

* matrix functions of SciPy with a branch cut (``sqrtm``, ``logm``,
  ``fractional_matrix_power``) and without (``expm``, ``cosm``, ``tanhm``),
  composed with ``real``/``imag``/``abs``, on real matrices with negative and
  complex-conjugate eigenvalues, on complex matrices and on stacks, checked at
  first order against central differences and at second order (an HVP, the
  gradient of a directional derivative) against central differences of the
  gradient; and the dense Hessian against stacked HVPs;
* the plain fuzzer's random programs returning their result inside an xarray
  ``DataArray`` (or a ``Dataset``'s variable) or a pint ``Quantity``: every mode
  must give exactly the numbers of the unwrapped program (a wrapped output once
  read as a constant: a silent zero gradient);
* ODE right-hand sides with a kink, a jump or a sign change at a drawn,
  parameter-dependent time, integrated by a drawn ``solve_ivp`` method at a
  drawn tolerance: gradient and Hessian within 20 x rtol of the closed form
  (600 draws pass in the long profile).

Every check compares numbers; a drawn matrix whose function is too
ill-conditioned for finite differences to mean anything (an eigenvalue within
reach of the branch cut's end, 0) is discarded with ``assume``, not compared.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import tapegrad as tg

sl = pytest.importorskip("scipy.linalg")

pytestmark = pytest.mark.fuzz

edge_settings = settings(max_examples=settings().max_examples * 2)

MATRIX_FUNCTIONS = {
    "sqrtm": sl.sqrtm,
    "logm": sl.logm,
    "fmp": lambda a: sl.fractional_matrix_power(a, 0.35),
    "fmp-neg": lambda a: sl.fractional_matrix_power(a, -0.6),
    "expm": sl.expm,
    "cosm": sl.cosm,
    "tanhm": sl.tanhm,
}
PARTS = {
    "real": np.real,
    "imag": np.imag,
    "abs2": lambda z: np.real(z * np.conj(z)),
}


@st.composite
def matrices(draw):
    """A small real or complex matrix (or a stack of two) with eigenvalues drawn where the cuts are."""
    n = draw(st.integers(2, 4))
    seed = draw(st.integers(0, 2**16))
    kind = draw(st.sampled_from(["negative", "pair", "general", "complex", "stack"]))
    rng = np.random.default_rng(seed)

    def one(kind):
        q = np.linalg.qr(rng.standard_normal((n, n)))[0]
        eig = rng.uniform(0.3, 2.0, n) * rng.choice([-1.0, 1.0], n)
        core = np.diag(eig)
        if kind == "pair":
            core[:2, :2] = [[eig[0], 1.5], [-1.5, eig[0]]]
        if kind == "general":
            return rng.standard_normal((n, n)) + 0.5 * np.eye(n)
        if kind == "complex":
            return core + 0.4 * (rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n)))
        return q @ core @ q.T + 0.2 * rng.standard_normal((n, n))

    x = np.stack([one("negative"), one("pair")]) if kind == "stack" else one(kind)
    return x, seed


def _real_parts(x):
    """A complex input is differentiated as a function of its real and imaginary parts."""
    return np.stack([x.real, x.imag]) if np.iscomplexobj(x) else x


def _rebuild(p, complex_input):
    return p[0] + 1j * p[1] if complex_input else p


def _well_conditioned(fun, x):
    """Discard points where the function's own value is too sensitive for differences (near 0, the cut's end)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eig = np.linalg.eigvals(x)
        assume(np.min(np.abs(eig)) > 0.15)
        value = fun(x)
    assume(np.all(np.isfinite(value)) and np.abs(value).max() < 1e3)


def _directional(f, x, u, eps):
    return (f(x + eps * u) - f(x - eps * u)) / (2 * eps)


def _smooth_difference(f, x, u):
    """Central difference along ``u``, kept only where two steps agree (no rounding-level jumps)."""
    fine, coarse = _directional(f, x, u, 1e-6), _directional(f, x, u, 1e-5)
    assume(abs(fine - coarse) <= 1e-5 * (1 + abs(fine)))
    return fine


@edge_settings
@given(matrices(), st.sampled_from(sorted(MATRIX_FUNCTIONS)), st.sampled_from(sorted(PARTS)))
def test_matrix_function_first_and_second_order(drawn, name, part):
    x, seed = drawn
    fun = MATRIX_FUNCTIONS[name]
    _well_conditioned(fun, x)
    complex_input = np.iscomplexobj(x)
    rng = np.random.default_rng(seed + 1)
    weights = rng.standard_normal(x.shape)

    def loss(p):
        return np.sum(PARTS[part](fun(_rebuild(p, complex_input))) * weights)

    p = _real_parts(x)
    u = rng.standard_normal(p.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grad = tg.grad(loss)
        g = grad(p)
        fd = _smooth_difference(loss, p, u)
        assert np.sum(g * u) == pytest.approx(fd, rel=1e-5, abs=1e-6)

        def directional_gradient(q):
            return np.sum(grad(q) * u)

        uhu = np.sum(tg.grad(directional_gradient)(p) * u)
        fd2 = _smooth_difference(directional_gradient, p, u)
        assert uhu == pytest.approx(fd2, rel=1e-4, abs=1e-5)
        # Every way of asking for the Hessian: the dense one, its product with u (reverse over
        # reverse) and the forward-over-reverse product agree with the directional one.
        assert np.sum(tg.hvp(loss)(p, u) * u) == pytest.approx(uhu, rel=1e-8, abs=1e-9)
        forward_over_reverse = tg.jvp(grad, (p,), (u,))[1]
        assert np.sum(forward_over_reverse * u) == pytest.approx(uhu, rel=1e-8, abs=1e-9)
    if p.size <= 18:
        h = tg.hessian(loss)(p).reshape(p.size, p.size)
        assert u.ravel() @ h @ u.ravel() == pytest.approx(uhu, rel=1e-8, abs=1e-9)


# ---------------------------------------------------------------- outputs wrapped by other libraries
from tests.test_fuzz import build, programs, _inputs  # noqa: E402  (the plain fuzzer's programs)


def _wrappers():
    """Ways a function hands back its traced result inside another library's object (same numbers)."""
    out = {}
    try:
        import xarray as xr

        out["DataArray"] = lambda v: xr.DataArray(v)
        out["Dataset-variable"] = lambda v: xr.Dataset({"a": xr.DataArray(v)})["a"]
    except ImportError:  # pragma: no cover - xarray is in the test extra
        pass
    try:
        import pint

        ureg = pint.UnitRegistry()
        out["Quantity"] = lambda v: ureg.Quantity(v, "m")
        out["Quantity-dimensionless"] = lambda v: ureg.Quantity(v, "m") / ureg.Quantity(1.0, "m")
    except ImportError:  # pragma: no cover - pint is in the test extra
        pass
    return out


WRAPPERS = _wrappers()


def _magnitude(value):
    value = getattr(value, "data", value)
    value = getattr(value, "magnitude", value)
    return np.asarray(value)


@settings(max_examples=settings().max_examples)  # xarray's and pint's own overhead per call
@given(programs(), st.sampled_from(sorted(WRAPPERS)))
def test_wrapped_output_gives_the_unwrapped_numbers(program, wrapper):
    shape, other, steps, seed = program
    f = build(steps)
    x, y = _inputs(shape, other, seed)
    wrap = WRAPPERS[wrapper]

    def plain(x):
        return np.sum(f(x, y)) * 0.5

    def wrapped(x):
        return wrap(np.sum(f(x, y))) * 0.5

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value, grad = tg.value_and_grad(wrapped)(x)
        np.testing.assert_array_equal(grad, tg.grad(plain)(x))
        assert _magnitude(value) == pytest.approx(float(plain(x)), rel=1e-12, abs=1e-12)
        u = np.random.default_rng(seed).standard_normal(x.shape)
        np.testing.assert_array_equal(tg.hvp(wrapped)(x, u), tg.hvp(plain)(x, u))
        if x.size <= 12:
            np.testing.assert_array_equal(tg.jacobian(lambda x: wrap(f(x, y)))(x), tg.jacobian(lambda x: f(x, y))(x))


# ---------------------------------------------------------------- ODE right-hand sides with kinks
from tests.scipy.test_ode_kinks import METHODS, PIECES, T, exact, switched  # noqa: E402


@settings(max_examples=max(settings().max_examples // 5, 4))  # each draw solves a kinked ODE 2 to 3 times
@given(
    st.sampled_from(sorted(PIECES)),
    st.sampled_from(METHODS),
    st.floats(0.3, 1.5),  # k: the jump's or kink's size
    st.floats(0.5, 1.5),  # w: the speed at which p crosses 1
    st.floats(-0.2, 0.6),  # p0: with w, where in (0, T) the switch falls
    st.sampled_from([1e-5, 1e-7]),
)
def test_kinked_ode_first_and_second_order_against_the_closed_form(kind, method, k, w, p0, rtol):
    # A drawn switch time inside the interval, away from its ends (a switch at t = T is a
    # different problem: the output time sits on the kink).
    tau = (1 - p0) / w
    assume(0.2 < tau < T - 0.2)
    theta = np.array([k, w, p0])
    grad = tg.grad(lambda th: switched(th, kind, method, rtol=rtol))(theta)
    truth = tg.grad(lambda th: exact(th, kind))(theta)
    # Accurate to the tolerance asked (issue 30: at most about 20 x rtol, normwise).
    assert np.linalg.norm(grad - truth) <= 20 * rtol * np.linalg.norm(truth)
    hess = tg.hessian(lambda th: switched(th, kind, method, rtol=rtol))(theta)
    hess_truth = tg.hessian(lambda th: exact(th, kind))(theta)
    assert np.linalg.norm(hess - hess_truth) <= 20 * rtol * max(np.linalg.norm(hess_truth), 1.0)
