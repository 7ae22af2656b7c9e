"""Regression tests: cases that used to give a silently wrong (or a confusing) answer.

Each one now gives the right derivative, checked against finite differences or
a closed form at first and second order, or a clear tapegrad error:

A. ``grad`` of a complex, boolean or integer output (and ``holomorphic=True``);
B. ``std`` / ``var`` of slices with one entry, or no degrees of freedom;
C. SciPy ufuncs named as SciPy's, and ``check`` finding lazily loaded rules;
D. ``check`` observing calls without changing what other threads see;
E. a ``primitive`` without a rule;
F. ``plain[i] = tracer`` and ``plain[i] += tracer``;
G. integer casts of a tracer (``np.int64(x)``, ``int(x)``) and ``np.float64(x)``.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import check
from tapegrad.dispatch import primitive
from tapegrad.errors import GradientDroppedError, UnsupportedFunctionError
from tapegrad.testing import check_grads, numerical_jvp

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def _complex_fd(f, z, h=1e-6):
    """f'(z) of a holomorphic scalar function by central differences along 1 and along i."""
    along_real = (f(z + h) - f(z - h)) / (2 * h)
    along_imag = (f(z + 1j * h) - f(z - 1j * h)) / (2j * h)
    return along_real, along_imag


# ----------------------------------------------------------------- A. complex / bool / int outputs
@pytest.mark.parametrize(
    "fun, x",
    [
        (lambda x: x * (1.0 + 0.2j), 1.0),
        (lambda z: z**2, 1.0 + 2.0j),
        (lambda x: np.sum(np.exp(1j * x)), np.array([0.3, 0.4])),
    ],
)
def test_complex_output_is_refused(fun, x):
    for transform in (tg.grad, tg.value_and_grad):
        with pytest.raises(TypeError, match="complex") as info:
            transform(fun)(x)
        message = str(info.value)
        assert "np.real" in message and "holomorphic=True" in message


@pytest.mark.parametrize(
    "fun, kind",
    [
        (lambda x: np.allclose(x, 0), "bool"),
        (lambda x: np.any(x > 0), "bool"),
        (lambda x: np.sum(x > 0), "int"),
        (lambda x: np.argmax(x), "int"),
        (lambda x: 3, "int"),
    ],
)
def test_boolean_and_integer_outputs_are_refused(fun, kind):
    with pytest.raises(TypeError, match=f"dtype {kind}") as info:
        tg.grad(fun)(np.array([0.5, -1.0]))
    assert "zero wherever it exists" in str(info.value) and "stop_gradient" in str(info.value)
    with pytest.raises(TypeError, match="floating-point output"):
        tg.value_and_grad(fun)(np.array([0.5, -1.0]))


def test_a_float_constant_output_still_has_a_zero_gradient():
    assert tg.grad(lambda x: 1.0 * np.allclose(x, 0))(np.array([0.5, 1.0])).tolist() == [0.0, 0.0]


def test_holomorphic_derivative_of_z_squared():
    z = 1 + 2j
    assert tg.grad(lambda z: z**2, holomorphic=True)(z) == 2 * z
    value, derivative = tg.value_and_grad(lambda z: z**2, holomorphic=True)(z)
    assert value == z**2 and derivative == 2 * z


@pytest.mark.parametrize(
    "f, fprime, fsecond",
    [
        (lambda z: np.sin(z) * z, lambda z: np.cos(z) * z + np.sin(z), lambda z: 2 * np.cos(z) - z * np.sin(z)),
        (lambda z: np.exp(z) / (1 + z**2), None, None),
        (lambda z: np.log(z) ** 3, lambda z: 3 * np.log(z) ** 2 / z, None),
    ],
)
def test_holomorphic_derivative_matches_complex_finite_differences(f, fprime, fsecond):
    z = 0.7 - 0.4j
    d = tg.grad(f, holomorphic=True)(z)
    along_real, along_imag = _complex_fd(f, z)
    # Holomorphic: the same limit along every direction, and tapegrad's answer is it.
    assert abs(along_real - along_imag) < 1e-7
    assert abs(d - along_real) < 1e-8 * max(1.0, abs(d))
    if fprime is not None:
        assert abs(d - fprime(z)) < 1e-12 * max(1.0, abs(d))
    # Second order: the holomorphic derivative of the traced derivative is f''(z).
    dd = tg.grad(tg.grad(f, holomorphic=True), holomorphic=True)(z)
    fd2 = _complex_fd(tg.grad(f, holomorphic=True), z)[0]
    assert abs(dd - fd2) < 1e-7 * max(1.0, abs(dd))
    if fsecond is not None:
        assert abs(dd - fsecond(z)) < 1e-12 * max(1.0, abs(dd))


def test_holomorphic_on_arrays_and_complex64():
    z = np.array([0.5 + 1j, -1.0 + 0.25j, 2.0 - 0.5j])
    np.testing.assert_allclose(tg.grad(lambda z: np.sum(z**3), holomorphic=True)(z), 3 * z**2, rtol=1e-14)
    z64 = z.astype(np.complex64)
    d = tg.grad(lambda z: np.sum(z**3), holomorphic=True)(z64)
    assert d.dtype == np.complex64
    np.testing.assert_allclose(d, 3 * z64**2, rtol=1e-6)


def test_holomorphic_true_on_a_non_holomorphic_function_gives_the_gradient_of_its_real_part():
    # Documented: df/dz + conj(df/dconj(z)), which is the gradient of Re(f) in tapegrad's convention.
    z = 1 + 2j
    assert tg.grad(lambda z: np.conj(z), holomorphic=True)(z) == 1
    for f in (lambda z: z * np.conj(z), lambda z: np.conj(z) ** 2 + z, lambda z: np.abs(z) + 0j):
        np.testing.assert_allclose(
            tg.grad(f, holomorphic=True)(z), tg.grad(lambda z: np.real(f(z)))(z), rtol=1e-14
        )


def test_holomorphic_needs_complex_inputs_and_output():
    with pytest.raises(TypeError, match="complex inputs"):
        tg.grad(lambda x: x * (1.0 + 0.2j), holomorphic=True)(1.0)
    with pytest.raises(TypeError, match="complex output"):
        tg.grad(lambda z: np.abs(z) ** 2, holomorphic=True)(1 + 2j)


def test_complex_input_real_output_convention():
    # A cotangent c of z stands for df = Re(c dz): c = df/dx - i df/dy (JAX's convention).
    assert tg.grad(lambda z: np.abs(z) ** 2)(1 + 2j) == 2 - 4j
    f = lambda z: np.real(np.sin(z) * np.conj(z)) + np.imag(z) ** 3  # noqa: E731
    z = np.array([0.3 + 0.8j, -1.1 + 0.2j])
    c = tg.grad(lambda z: np.sum(f(z)))(z)
    for k in range(2):
        e = np.zeros(2)
        e[k] = 1.0
        (dx,) = numerical_jvp(lambda z: np.sum(f(z)), [z], 0, e)
        (dy,) = numerical_jvp(lambda z: np.sum(f(z)), [z], 0, 1j * e)
        assert abs(np.real(c[k]) - dx) < 1e-7 and abs(-np.imag(c[k]) - dy) < 1e-7


# ----------------------------------------------------------------- B. std / var
X2 = np.array([[1.0, 2.0, 4.0], [3.0, 5.0, 7.5]])


@pytest.mark.parametrize(
    "fun",
    [
        lambda x: np.std(x[0, :1]),
        lambda x: np.std(x[0, :1] + 1j * x[1, :1]),
        lambda x: np.std(x[:, :1], axis=1),
        lambda x: np.std(x[:, :1], axis=1, keepdims=True),
        lambda x: np.std(x[:1, :1], axis=(0, 1)) + np.std(x[1:, :1], axis=None),
        lambda x: np.std(x[:, :1], axis=1, ddof=-1),
        lambda x: np.std(x.astype(np.float32)[:, :1], axis=1),
        lambda x: np.nanstd(np.where([[True, False, False], [False, False, True]], x, np.nan), axis=1),
    ],
)
def test_std_of_one_entry_has_zero_derivatives(fun):
    jac = tg.jacobian(fun)(X2)
    assert np.all(jac == 0)
    hess = tg.jacobian(tg.jacobian(fun))(X2)
    assert np.all(hess == 0)


def test_std_mixing_one_entry_and_longer_slices_matches_finite_differences():
    mask = np.array([[True, False, False], [True, True, False]])
    check_grads(lambda x: np.std(x, axis=1, where=mask), [X2])
    check_grads(lambda x: np.std(x, axis=1, where=mask, keepdims=True), [X2])
    check_grads(lambda x: np.nanstd(np.where(mask, x, np.nan), axis=1), [X2])
    # The slice of two: d std / dx = (x - mean) / (n std); the slice of one: 0.
    g = tg.grad(lambda x: np.sum(np.std(x, axis=1, where=mask)))(X2)
    np.testing.assert_allclose(g, [[0, 0, 0], [-0.5, 0.5, 0]], atol=0)


def test_masked_out_entries_get_zero_not_nan():
    # Row 0 has no entry: its mean is NaN, which must not reach row 0's derivatives.
    mask = np.array([[False] * 3, [True, True, False]])
    with pytest.warns(RuntimeWarning):
        for fun in (np.var, np.std):
            jac = tg.jacobian(lambda x: fun(x, axis=1, where=mask))(X2)
            assert np.all(np.isfinite(jac))
            assert np.all(jac[0] == 0) and np.all(jac[1, 0] == 0)
            np.testing.assert_allclose(jac[1, 1, :2], [-1.0, 1.0] if fun is np.var else [-0.5, 0.5])


@pytest.mark.parametrize("fun", [np.var, np.std, np.nanvar, np.nanstd])
@pytest.mark.parametrize("x, ddof", [(X2[:, :1], 1), (X2, 3), (X2, 5)])
def test_no_degrees_of_freedom_is_a_constant(fun, x, ddof):
    with pytest.warns(RuntimeWarning):
        expected = fun(x, axis=1, ddof=ddof)
        value = tg.value_and_grad(lambda x: np.sum(fun(x, axis=1, ddof=ddof)))(x)[0]
        jac = tg.jacobian(lambda x: fun(x, axis=1, ddof=ddof))(x)
    assert not np.any(np.isfinite(expected))  # NumPy's own answer: inf or NaN
    np.testing.assert_array_equal(value, np.sum(expected))
    assert np.all(jac == 0)  # NumPy's inf/NaN does not change with the data


# ----------------------------------------------------------------- C. SciPy names, check's lookup
def test_scipy_ufuncs_are_named_by_their_module():
    sc = pytest.importorskip("scipy.special")
    from tapegrad.registry import function_name

    assert function_name(sc.j0) == "scipy.special.j0"
    assert function_name((sc.j0, "reduce")) == "scipy.special.j0.reduce"
    assert function_name(np.sin) == "numpy.sin"
    assert function_name(np.frompyfunc(math.erf, 1, 1)) == "erf (vectorized)"
    # zetac has no rule (see tapegrad.rules.special.UNSUPPORTED): the error names it right.
    with pytest.raises(UnsupportedFunctionError, match=r"scipy\.special\.zetac") as info:
        tg.grad(lambda x: sc.zetac(x))(3.0)
    assert "numpy.zetac" not in str(info.value)
    report = check.check_function(lambda x: np.sum(sc.zetac(x)), [np.array([2.5, 3.0])])
    assert report.unsupported == ["scipy.special.zetac"] and report.exit_code == 3


def test_check_finds_lazily_loaded_scipy_rules():
    pytest.importorskip("scipy.special")
    # A fresh process: SciPy imported after tapegrad, its rules not loaded yet.
    code = (
        "import numpy as np, tapegrad, scipy.special as sc, sys\n"
        "from tapegrad.check import check_function\n"
        "assert 'tapegrad.rules.special' not in sys.modules\n"
        "r = check_function(lambda x: np.sum(sc.erf(x) * x), [np.array([0.1, 0.5, -0.3])])\n"
        "kinds = {c.name: c.kind for c in r.calls}\n"
        "print(r.exit_code, kinds['scipy.special.erf'], r.unsupported)\n"
    )
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["0", "primitive", "[]"]


# ----------------------------------------------------------------- D. check and other threads
def test_check_does_not_change_what_another_thread_sees():
    unsupported = np.frompyfunc(math.erf, 1, 1)
    in_check = threading.Event()
    other_done = threading.Event()
    outcome = {}

    def surveyed(x):
        in_check.set()
        assert other_done.wait(30), "the other thread did not finish"
        return np.sum(unsupported(x).astype(float) * np.sin(x))

    def other_thread():
        in_check.wait(30)
        try:
            outcome["grad"] = tg.grad(lambda x: np.sum(unsupported(x).astype(float) * x))(np.array([0.2, 0.4]))
        except Exception as exc:  # the expected path
            outcome["error"] = exc
        finally:
            other_done.set()

    worker = threading.Thread(target=other_thread)
    worker.start()
    report = check.check_function(surveyed, [np.array([0.1, 0.2])])
    worker.join(30)
    assert isinstance(outcome.get("error"), UnsupportedFunctionError), outcome
    # ... while check, in its own thread, still surveyed everything.
    assert report.unsupported == ["erf (vectorized)"] and report.exit_code == 3
    assert {"numpy.sin", "numpy.sum"} <= {c.name for c in report.calls if c.kind == "primitive"}


def test_check_leaves_no_observer_behind():
    unsupported = np.frompyfunc(math.erf, 1, 1)
    check.check_function(lambda x: np.sum(unsupported(x).astype(float) * x), [np.array([0.1])])
    with pytest.raises(UnsupportedFunctionError):
        tg.grad(lambda x: np.sum(unsupported(x).astype(float) * x))(np.array([0.2]))


# ----------------------------------------------------------------- E. primitive without a rule
def _no_rule_helper(x):
    return x * 2.0


def test_primitive_without_a_rule_raises_unsupported():
    wrapped = primitive(_no_rule_helper)
    assert wrapped(np.array(3.0)) == 6.0  # untraced calls just run
    with pytest.raises(UnsupportedFunctionError, match="_no_rule_helper") as info:
        tg.grad(lambda x: wrapped(x))(1.0)
    assert "tapegrad.defvjp" in str(info.value)


# ----------------------------------------------------------------- F. plain arrays filled with tracers
# Plain arrays the function did not allocate with np.zeros & co. (those are traced
# constants: tests/test_allocated_buffers.py): a copy of a module constant stays plain.
_PLAIN3 = np.zeros(3)
_PLAIN3_COMPLEX = np.zeros(3, complex)


def _fill_add(x):
    out = _PLAIN3.copy()
    out[0] += x[0]
    return np.sum(out)


def _fill_set(x):
    out = _PLAIN3.copy()
    for i in range(3):
        out[i] = x[i] ** 2
    return np.sum(out)


def _fill_slice(x):
    out = _PLAIN3.copy()
    out[:] = x
    return np.sum(out)


def _fill_complex(x):
    out = _PLAIN3_COMPLEX.copy()
    out[1] = x[1]
    return np.sum(out.real)


@pytest.mark.parametrize("fun", [_fill_add, _fill_set, _fill_slice, _fill_complex])
def test_storing_a_tracer_into_a_plain_array_raises_gradient_dropped(fun):
    for transform in (tg.grad, tg.jacobian, tg.hessian):
        with pytest.raises(GradientDroppedError, match="zeros_like"):
            transform(fun)(np.array([0.5, -1.0, 2.0]))
    report = check.check_function(fun, [np.array([0.5, -1.0, 2.0])])
    assert report.exit_code == 3 and report.error.startswith("GradientDroppedError")


def test_the_advised_rewrite_works():
    def fill(x):
        out = np.zeros_like(x)
        out[0] += x[0]
        out[1] = x[1] ** 2
        return np.sum(out)

    x = np.array([0.5, -1.0, 2.0])
    np.testing.assert_array_equal(tg.grad(fill)(x), [1.0, -2.0, 0.0])
    np.testing.assert_array_equal(tg.hessian(fill)(x), np.diag([0.0, 2.0, 0.0]))


# ----------------------------------------------------------------- G. integer casts
@pytest.mark.parametrize(
    "cast, kind",
    [
        (np.int64, np.int64),
        (np.int32, np.int32),
        (np.uint8, np.uint8),
        (int, int),
        (lambda v: np.asarray(v, dtype=np.int16), np.ndarray),
    ],
)
def test_integer_casts_are_constants_like_astype(cast, kind):
    seen = []

    def f(x):
        n = cast(x)
        seen.append(n)
        return n * x**2

    x = 2.75
    assert tg.grad(f)(x) == 2 * 2 * x  # d/dx (trunc(x) x^2) = 2 trunc(x) x
    assert tg.hessian(f)(x) == 2 * 2
    for n in seen:  # every level of the Hessian saw the plain integer
        assert type(n) is kind and n == 2


def test_integer_cast_of_an_array_matches_astype():
    x = np.array([1.5, -2.5, 3.25])
    got = {}

    def f(x):
        got["int64"] = np.int64(x)
        got["astype"] = x.astype(np.int64)
        got["bool"] = np.bool_(x[0])
        return np.sum(x * got["int64"])

    np.testing.assert_array_equal(tg.grad(f)(x), np.trunc(x))
    assert type(got["int64"]) is np.ndarray and got["int64"].dtype == np.int64
    np.testing.assert_array_equal(got["int64"], got["astype"])
    assert got["bool"] is np.True_


@pytest.mark.parametrize(
    "drop",
    [np.float64, np.float32, np.complex128, lambda v: [0, 1, 2][v]],
    ids=["float64", "float32", "complex128", "index"],
)
def test_float_casts_still_refuse(drop):
    with pytest.raises(GradientDroppedError, match="drop its gradient"):
        tg.grad(lambda x: np.sum(drop(x) * x))(1.0)


def test_asarray_with_a_float_dtype_is_a_traced_cast():
    # While a tape records, np.asarray of a tracer is intercepted (tapegrad.constructors).
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(np.asarray(x, dtype=float) * x))(1.5), 3.0)
