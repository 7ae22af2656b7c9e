"""np.array / np.asarray / np.asanyarray / np.ascontiguousarray of tracers while a tape records.

Derivatives are checked against closed forms and central finite differences
(first and second order); calls without a tracer must behave exactly as NumPy's
own functions, in every thread, and the originals must come back afterwards.
"""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from scipy.optimize import rosen, rosen_der, rosen_hess

import tapegrad as tg
from tapegrad import constructors
from tapegrad.testing import check_grads

ORIGINALS = {name: getattr(np, name) for name in constructors.NAMES}
_bound_asarray = np.asarray  # bound at import, like `from numpy import asarray` at the top of a module

rng = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def _clean_state(monkeypatch):
    """Every test starts and ends with the originals installed and the default policy."""
    monkeypatch.setattr(constructors, "_choice", None)
    monkeypatch.delenv("TAPEGRAD_PATCH_NUMPY", raising=False)
    assert _originals_installed()
    yield
    assert _originals_installed()


def _originals_installed():
    return all(getattr(np, name) is original for name, original in ORIGINALS.items())


def fd_jacobian(f, x, eps=1e-6):
    cols = []
    for j in range(x.size):
        e = np.zeros_like(x)
        e.flat[j] = eps
        cols.append((np.ravel(f(x + e)) - np.ravel(f(x - e))) / (2 * eps))
    return np.stack(cols, axis=-1).reshape(np.shape(f(x)) + x.shape)


def fd_hessian(f, x, eps=1e-4):
    """Central second differences of scalar ``f`` (float64)."""
    n = x.size
    H = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            ei, ej = np.zeros(n), np.zeros(n)
            ei[i], ej[j] = eps, eps
            H[i, j] = (f(x + ei + ej) - f(x + ei - ej) - f(x - ei + ej) + f(x - ei - ej)) / (4 * eps**2)
    return H


# ---------------------------------------------------------------- ODE right-hand sides
A, B, C, D = 1.1, 0.4, 0.9, 0.3


def lotka_volterra(y):
    return np.array([A * y[0] - B * y[0] * y[1], -C * y[1] + D * y[0] * y[1]])


def van_der_pol(y, mu=2.5):
    return np.array([y[1], mu * (1.0 - y[0] ** 2) * y[1] - y[0]])


def mixed_rhs(y):
    # Numbers, tracers, a nested row and an integer, as a residual vector is often written.
    return np.array([[y[1], 1.0, -y[0] * y[2]], [2, np.sin(y[0]) + y[2], y[1] ** 2]])


def test_ode_rhs_jacobian_closed_form():
    y = np.array([0.7, 1.3])
    J = tg.jacobian(lotka_volterra)(y)
    expected = np.array([[A - B * y[1], -B * y[0]], [D * y[1], -C + D * y[0]]])
    np.testing.assert_allclose(J, expected, rtol=1e-14)
    np.testing.assert_allclose(tg.jacobian(lotka_volterra)(y), tg.jacfwd(lotka_volterra)(y), rtol=1e-14)
    J = tg.jacobian(van_der_pol)(y)
    np.testing.assert_allclose(J, [[0.0, 1.0], [-2 * 2.5 * y[0] * y[1] - 1.0, 2.5 * (1.0 - y[0] ** 2)]], rtol=1e-14)


@pytest.mark.parametrize("rhs", [lotka_volterra, van_der_pol, mixed_rhs])
def test_ode_rhs_matches_finite_differences_first_and_second_order(rhs):
    y = rng.standard_normal(3 if rhs is mixed_rhs else 2)
    np.testing.assert_allclose(tg.jacobian(rhs)(y), fd_jacobian(rhs, y), rtol=1e-7, atol=1e-8)
    check_grads(rhs, [y], order=2)

    def energy(y):
        return np.sum(rhs(y) ** 2)

    np.testing.assert_allclose(tg.hessian(energy)(y), fd_hessian(energy, y), rtol=1e-5, atol=1e-5)


def test_vjp_and_gradient_tape_use_np_array():
    y = np.array([0.7, 1.3])
    out, pullback = tg.vjp(lotka_volterra, y)
    np.testing.assert_allclose(out, lotka_volterra(y))
    ct = np.array([0.5, -2.0])
    np.testing.assert_allclose(pullback(ct)[0], ct @ fd_jacobian(lotka_volterra, y), rtol=1e-8)
    with tg.GradientTape() as tape:
        t = tape.watch(y)
        z = lotka_volterra(t)
    np.testing.assert_allclose(tape.jacobian(z, t), tg.jacobian(lotka_volterra)(y), rtol=1e-14)


# ---------------------------------------------------------------- libraries that open with asarray
def test_scipy_rosen_and_rosen_der_are_differentiated():
    x = rng.uniform(-1.5, 1.5, 7)
    np.testing.assert_allclose(tg.grad(rosen)(x), rosen_der(x), rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(tg.hessian(rosen)(x), rosen_hess(x), rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(tg.jacobian(rosen_der)(x), rosen_hess(x), rtol=1e-12, atol=1e-9)
    check_grads(rosen_der, [x], order=2, rtol=1e-5, atol=1e-4)


def standardize(X):
    """A library-style function: ``asarray`` first, then plain NumPy (numpy-ml's Standardizer)."""
    X = np.asarray(X)
    return (X - X.mean(axis=0)) / X.std(axis=0)


def test_library_function_opening_with_asarray():
    X = rng.standard_normal((5, 2))
    check_grads(lambda X: np.sum(standardize(X) ** 3), [X], order=2)


# ---------------------------------------------------------------- conversion semantics
def _traced(f, x):
    """Run ``f`` on ``x`` watched by a tape; return what it returns."""
    with tg.GradientTape(persistent=True) as tape:
        t = tape.watch(x)
        return t, f(t), tape


def test_asarray_passes_a_tracer_through_unchanged():
    x = np.array([0.5, -1.0, 2.0])
    for name in ("asarray", "asanyarray", "ascontiguousarray", "asfortranarray"):
        # Looked up on numpy at call time, as `np.asarray(x)` does.
        t, out, _ = _traced(lambda t: getattr(np, name)(t), x)
        assert out is t
    t, out, _ = _traced(lambda t: np.asarray(a=t), x)
    assert out is t
    # like= makes NumPy dispatch to the tracer (NEP 35), with the wrapper as the function.
    t, out, _ = _traced(lambda t: np.asarray(t, like=t), x)
    assert out is t
    t, out, _ = _traced(lambda t: np.asarray(t, dtype=np.float32, like=t), x)
    assert out.dtype == np.float32


def test_array_copies_like_numpy():
    x = np.array([0.5, -1.0, 2.0])

    def f(t):
        y = np.array(t)  # a copy: writing into it must not reach t
        y[0] = 10.0 * y[1]
        return np.sum(y * t)

    # sum(y * t) = 10 x1 x0 + x1^2 + x2^2 when t itself is untouched
    expected = np.array([10.0 * x[1], 10.0 * x[0] + 2 * x[1], 2 * x[2]])
    np.testing.assert_allclose(tg.grad(f)(x), expected, rtol=1e-14)
    check_grads(f, [x], order=2)
    t, out, _ = _traced(lambda t: np.array(t, copy=False), x)
    assert out is t


def test_dtype_argument_is_honoured():
    x = np.array([0.5, -1.0, 2.0])
    t, out, tape = _traced(lambda t: np.asarray(t, dtype=np.float32), x)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(tg.stop_gradient(out), x.astype(np.float32))
    assert tape.gradient(out, t).dtype == np.float64
    np.testing.assert_allclose(tape.gradient(out, t), np.ones(3))
    g = tg.grad(lambda x: np.sum(np.array([x[0], x[1] * x[2]], dtype=np.complex128).real ** 2))(x)
    np.testing.assert_allclose(g, [2 * x[0], 2 * x[1] * x[2] ** 2, 2 * x[2] * x[1] ** 2], rtol=1e-14)
    with pytest.raises(ValueError) as numpy_says:
        np.array(x, dtype=np.float32, copy=False)
    with pytest.raises(ValueError) as we_say:
        _traced(lambda t: np.array(t, dtype=np.float32, copy=False), x)
    assert str(we_say.value) == str(numpy_says.value)


def test_integer_dtype_is_a_constant():
    x = np.array([0.5, 1.7, 2.2])

    def f(x):
        return np.sum(np.array([x[0] * 4, x[1]], dtype=int) * x[:2])

    assert f(x) == tg.value_and_grad(f)(x)[0]
    np.testing.assert_array_equal(tg.grad(f)(x), [2.0, 1.0, 0.0])  # the int factors, held constant


def test_float32_is_preserved_and_promotion_follows_numpy():
    x = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    _, out, _ = _traced(lambda t: np.array([t[0], t[1] * t[2]]), x)
    assert out.dtype == np.float32
    g = tg.grad(lambda t: np.sum(np.array([t[0], t[1] * t[2]]) ** 2))(x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, [2 * x[0], 2 * x[1] * x[2] ** 2, 2 * x[2] * x[1] ** 2], rtol=1e-6)
    # Mixed with Python floats and float32 rows, the dtype is whatever NumPy gives the values.
    for build in (lambda v: [v[0], 1.0], lambda v: [v, [1.0, 2.0, 3.0]], lambda v: (v[1:], np.ones(2, np.float32))):
        _, out, _ = _traced(lambda t: np.array(build(t)), x)
        assert out.dtype == np.array(build(x)).dtype


def test_ndmin_nested_lists_tuples_and_keywords():
    x = np.array([0.5, -1.0, 2.0])
    t, out, tape = _traced(lambda t: np.array(t, ndmin=3), x)
    assert out.shape == (1, 1, 3)
    np.testing.assert_allclose(tape.jacobian(out, t), np.eye(3).reshape(1, 1, 3, 3))

    def nested(t):
        return np.array(object=((t[0], 1.0), [2, t[1] * t[2]]), ndmin=3)

    t, out, tape = _traced(nested, x)
    np.testing.assert_array_equal(tg.stop_gradient(out), nested(x))
    J = tape.jacobian(out, t)
    expected = np.zeros((1, 2, 2, 3))
    expected[0, 0, 0, 0] = 1.0
    expected[0, 1, 1] = [0.0, x[2], x[1]]
    np.testing.assert_array_equal(J, expected)
    check_grads(lambda x: np.array([x, [1.0, 2.0, 3.0], x**2]), [x], order=2)


def test_errors_numpy_raises_stay_numpy_errors():
    x = np.array([0.5, -1.0, 2.0])
    with pytest.raises(ValueError) as numpy_says:
        np.array([x, [1.0]])
    with pytest.raises(ValueError) as we_say:
        _traced(lambda t: np.array([t, [1.0]]), x)
    assert str(we_say.value) == str(numpy_says.value)
    # Object arrays cannot carry a gradient: still the clear error.
    with pytest.raises(tg.GradientDroppedError, match="drop its gradient"):
        _traced(lambda t: np.array([t[0], t[1]], dtype=object), x)
    with pytest.raises(tg.GradientDroppedError, match="dtype object"):
        _traced(lambda t: np.asarray(t, dtype=object), x)


# ---------------------------------------------------------------- calls without a tracer
class Ducky:
    def __array__(self, dtype=None, copy=None):
        return np.arange(3.0)


PLAIN_CALLS = [
    ("asarray", (np.arange(4.0),), {}),
    ("asarray", ([1, 2.5],), {"dtype": np.float32}),
    ("array", ([[1, 2], [3, 4]],), {"ndmin": 3}),
    ("array", ([1, "a", None],), {}),
    ("array", ([[1.0], [1.0, 2.0]],), {"dtype": object}),
    ("array", ([[1.0], [1.0, 2.0]],), {}),  # ragged: NumPy's ValueError
    ("array", (np.arange(3.0),), {"dtype": np.int32, "copy": False}),  # NumPy's ValueError
    ("asarray", ("text",), {}),
    ("asarray", (Ducky(),), {}),
    ("asanyarray", (np.ma.masked_array([1.0, 2.0], mask=[0, 1]),), {}),
    ("ascontiguousarray", (np.ones((3, 4))[:, ::2],), {}),
    ("asfortranarray", (np.ones((3, 4)),), {}),
    ("array", (), {"object": [1.0, 2.0], "copy": True}),
    ("asarray", (), {}),  # NumPy's TypeError for a missing argument
]


def _outcome(name, args, kwargs, functions=ORIGINALS):
    try:
        out = functions[name](*args, **kwargs)
    except Exception as exc:  # the error is the outcome to compare
        return ("error", type(exc), str(exc))
    same = args and out is args[0]
    return ("value", type(out), out.dtype, out.shape, out.flags.c_contiguous, bool(same), out.tolist())


def _compare_plain_calls():
    wrapped = {name: getattr(np, name) for name in ORIGINALS}
    for name, args, kwargs in PLAIN_CALLS:
        assert _outcome(name, args, kwargs, wrapped) == _outcome(name, args, kwargs), (name, args, kwargs)


def test_calls_without_tracers_are_identical_inside_a_window():
    with tg.GradientTape():
        assert not _originals_installed()  # the wrappers are in place ...
        _compare_plain_calls()  # ... and give NumPy's exact results and errors


def test_a_thread_that_does_not_record_sees_original_behaviour():
    inside, done = threading.Event(), threading.Event()
    failures = []

    def recorder():
        with tg.GradientTape() as tape:
            x = tape.watch(np.ones(2))
            np.asarray(x)
            inside.set()
            done.wait(10)

    def bystander():
        inside.wait(10)
        try:
            _compare_plain_calls()
        except AssertionError as exc:  # reported by the main thread
            failures.append(exc)
        finally:
            done.set()

    threads = [threading.Thread(target=recorder), threading.Thread(target=bystander)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not failures, failures


def test_concurrent_recording_threads():
    errors = []
    y = np.array([0.7, 1.3])
    expected = tg.jacobian(lotka_volterra)(y)

    def work():
        try:
            for _ in range(30):
                np.testing.assert_allclose(tg.jacobian(lotka_volterra)(y), expected)
        except Exception as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert constructors._depth == 0


# ---------------------------------------------------------------- windows open and close
def test_originals_restored_after_exceptions_and_nesting():
    def fails(x):
        assert not _originals_installed()
        raise KeyError("inside")

    with pytest.raises(KeyError):
        tg.grad(fails)(np.ones(2))
    assert _originals_installed()
    with pytest.raises(KeyError):
        with tg.GradientTape():
            raise KeyError("inside a tape")
    assert _originals_installed()

    def inner_checks(x):
        g = tg.grad(lambda z: np.sum(np.array([z[0] * z[1], z[1]]) ** 2))(x)
        assert not _originals_installed()  # the outer window is still open
        return g

    H = tg.jacobian(inner_checks)(np.array([0.3, 0.8]))
    f = lambda z: np.sum(np.stack([z[0] * z[1], z[1]]) ** 2)  # noqa: E731
    np.testing.assert_allclose(H, tg.hessian(f)(np.array([0.3, 0.8])), rtol=1e-14)
    assert constructors._depth == 0


def test_a_later_replacement_of_numpy_asarray_is_kept():
    def theirs(*args, **kwargs):
        return ORIGINALS["asarray"](*args, **kwargs)

    try:
        with tg.GradientTape():
            np.asarray = theirs  # someone else's patch, made while tapegrad's is in place
        assert np.asarray is theirs
    finally:
        np.asarray = ORIGINALS["asarray"]


# ---------------------------------------------------------------- what does not work, and the opt-out
def test_asarray_bound_before_recording_raises_the_clear_error():
    def f(x):
        return np.sum(_bound_asarray(x) ** 2)

    line = f.__code__.co_firstlineno + 1
    with pytest.raises(tg.GradientDroppedError, match="drop its gradient") as info:
        tg.grad(f)(np.ones(2))
    message = str(info.value)
    assert f"{__file__}:{line}" in message
    assert "from numpy import asarray" in message


def test_opt_out_function():
    tg.intercept_array_constructors(False)
    with pytest.raises(tg.GradientDroppedError, match="switched off"):
        tg.grad(lambda x: np.sum(np.asarray(x) ** 2))(np.ones(2))
    tg.intercept_array_constructors(True)
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(np.asarray(x) ** 2))(np.ones(2)), [2.0, 2.0])

    def switches_off_inside(x):
        assert not _originals_installed()
        tg.intercept_array_constructors(False)
        assert _originals_installed()
        return np.sum(x)

    tg.grad(switches_off_inside)(np.ones(2))


def test_opt_out_environment_variable():
    code = (
        "import numpy as np, tapegrad as tg\n"
        "original = np.asarray\n"
        "def f(x):\n"
        "    assert np.asarray is original\n"
        "    return np.sum(np.asarray(x) ** 2)\n"
        "try:\n"
        "    tg.grad(f)(np.ones(2))\n"
        "except tg.GradientDroppedError as exc:\n"
        "    print('refused:', 'TAPEGRAD_PATCH_NUMPY=0' in str(exc))\n"
    )
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    env = dict(os.environ, TAPEGRAD_PATCH_NUMPY="0", PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "refused: True", result.stderr
