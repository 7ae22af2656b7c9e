"""Lists and tuples holding tracers through NumPy's and SciPy's own Python code (issue 30).

``np.mean([a, b])`` is not dispatched to a tracer (NEP 18 looks only at the type
of each argument, a list), so NumPy's Python implementation runs and converts
the list with a function bound when its module was imported
(``numpy._core._methods.asanyarray``) or hands it to a funnel
(``fromnumeric._wrapreduction``).  While a tape records, tapegrad.constructors
reaches those bindings too.  Derivatives are checked against central finite
differences, first and second order; calls without tracers must give NumPy's
and SciPy's exact results and errors, in every thread; inputs are never
mutated; what still cannot work raises an error naming the function.
"""

import re
import sys
import threading
import types
import warnings

import numpy as np
import pytest
import scipy.special as sp

import tapegrad as tg
from tapegrad import constructors
from tapegrad.errors import UnsupportedFunctionError
from tapegrad.testing import check_grads

X = np.array([0.7, 1.3, 2.1, 0.4])
ORIGINAL_ASANYARRAY = np.asanyarray


def _methods_module():
    return sys.modules["numpy._core._methods"]


def _proxies_off():
    return all(p.func is state[0] for p, state in zip(constructors._proxies, constructors._states_off))


@pytest.fixture(autouse=True)
def _clean_state(monkeypatch):
    """Every test starts and ends outside any window, with the default policy."""
    monkeypatch.setattr(constructors, "_choice", None)
    monkeypatch.delenv("TAPEGRAD_PATCH_NUMPY", raising=False)
    assert constructors._depth == 0 and _proxies_off() and np.asanyarray is ORIGINAL_ASANYARRAY
    yield
    assert constructors._depth == 0 and _proxies_off() and np.asanyarray is ORIGINAL_ASANYARRAY


def fd_grad(f, x, eps=1e-6):
    """Central first differences of scalar ``f``."""
    return np.array([(f(x + e) - f(x - e)) / (2 * eps) for e in np.eye(x.size) * eps])


def fd_hessian(f, x, eps=1e-4):
    """Central second differences of scalar ``f``."""
    E = np.eye(x.size) * eps
    return np.array(
        [[(f(x + a + b) - f(x + a - b) - f(x - a + b) + f(x - a - b)) / (4 * eps**2) for b in E] for a in E]
    )


# ---------------------------------------------------------------- what works now
# Each takes a list (or tuple) holding tracers to a NumPy or SciPy function.
CASES = {
    # the calls of the issue
    "mean": lambda x: np.mean([x[0] ** 2, x[1] * x[2]]),
    "std": lambda x: np.std([x[0] ** 2, x[1] * x[2], x[3]]),
    "var": lambda x: np.var([x[0] ** 2, x[1] * x[2], x[3]], ddof=1),
    "norm": lambda x: np.linalg.norm([x[0] ** 2, x[1] * x[2]]),
    "norm_matrix": lambda x: np.linalg.norm([[x[0], x[1]], [x[2], x[3]]]),
    "append": lambda x: np.sum(np.append([x[0]], [x[1]]) ** 2),
    "append_to_traced": lambda x: np.sum(np.append([x[0], 2.0], x[1]) ** 2),  # tapegrad's own append rule
    "r_": lambda x: np.sum(np.r_[x, x**2] ** 2),
    "c_": lambda x: np.sum(np.c_[x, x**2] ** 3),
    "r_mixed": lambda x: np.sum(np.r_[x[0], 1.0, x[1]] ** 2),
    "polygamma": lambda x: np.sum(sp.polygamma(1, x)),
    "polygamma_list": lambda x: np.sum(sp.polygamma([1, 2], [x[0], x[1]])),
    "multigammaln": lambda x: sp.multigammaln(x[2] + 2, 2),
    "sort": lambda x: np.sum(np.sort([x[1], x[0] ** 2]) * x[:2]),
    # checked besides
    "median": lambda x: np.median([x[0], x[1], x[2]]),
    "percentile": lambda x: np.percentile([x[0], x[1], x[2]], 30),
    "average": lambda x: np.average([x[0], x[1] ** 2], weights=[x[2], 2.0]),
    "cov": lambda x: np.sum(np.cov([x, x**2]) ** 2),
    "hstack": lambda x: np.sum(np.hstack([x, x**2]) ** 2),
    "vstack": lambda x: np.sum(np.vstack([x, x**2]) ** 2),
    "column_stack": lambda x: np.sum(np.column_stack([x, x**2]) ** 2),
    "block": lambda x: np.sum(np.block([x, x**2]) ** 2),
    "outer": lambda x: np.sum(np.outer([x[0], x[1]], (x[2], 1.0)) ** 2),
    "diff": lambda x: np.sum(np.diff([x[0], x[1] ** 2, x[2]]) ** 2),
    "trapezoid": lambda x: np.trapezoid([x[0], x[1] ** 2, x[2]], x=[0.0, x[3], 2.0]),
    "cumsum": lambda x: np.sum(np.cumsum([x[0], x[1] ** 2, x[2]]) ** 2),
    "ptp": lambda x: np.ptp([x[0], x[1] ** 2, x[2]]),
    "clip": lambda x: np.sum(np.clip([x[0], x[1] ** 2, x[2]], 0.8, 2.0) ** 2),
    "logsumexp": lambda x: sp.logsumexp([x[0], x[1] ** 2, x[2]]),
    "softmax": lambda x: np.sum(sp.softmax([x[0], x[1] ** 2, x[2]]) ** 2),
    # the reductions behind NumPy's funnels, and _array_converter's users
    "sum": lambda x: np.sum([x[0] ** 2, x[1] * x[2]], where=[True, False], initial=3.0),
    "prod": lambda x: np.prod((x[0], x[1], x[2])),
    "max": lambda x: np.max([x[0] ** 2, x[1] * x[2], 1.0]),
    "min_axis": lambda x: np.sum(np.min([[x[0], x[1]], [x[2], x[3]]], axis=0) ** 2),
    "mean_axis_where": lambda x: np.sum(np.mean([x[:2] ** 2, x[2:]], axis=0, where=[[True, True], [False, True]]) ** 2),
    "var_keepdims": lambda x: np.sum(np.var([[x[0], x[1]], [x[2], x[3]]], axis=1, keepdims=True) ** 2),
    "cumprod": lambda x: np.sum(np.cumprod([x[0], x[1] ** 2, x[2]])),
    "round": lambda x: np.sum(np.round([x[0], x[1]], 1) * x[:2]),
    "take": lambda x: np.sum(np.take([x[0], x[1], x[2]], [2, 0]) ** 2),
    "squeeze": lambda x: np.sum(np.squeeze([[x[0], x[1]]]) ** 3),
    "expand_dims": lambda x: np.sum(np.expand_dims([x[0], x[1]], 0) ** 3),
    "ediff1d": lambda x: np.sum(np.ediff1d([x[0], x[1] ** 2, x[2]]) ** 2),
    "linspace": lambda x: np.sum(np.linspace([x[0], 0.0], [x[1], x[2]], 4) ** 2),
    "polyval": lambda x: np.polyval([x[0], x[1], x[2]], 1.5),
    "tensordot": lambda x: np.tensordot([x[0], x[1]], [x[2], x[3]], axes=1),
    "any_all": lambda x: np.sum(x**2) * np.all([x[0], x[1]]) * np.any((x[2], x[3])),
    "matrix_power": lambda x: np.sum(np.linalg.matrix_power([[x[0], x[1]], [x[2], x[3]]], 2)),
    "vector_norm": lambda x: np.linalg.vector_norm((x[0], x[1] * x[2])),
}
# NumPy 2.5's cond calls its internal svd gufunc on the converted list: refused (REFUSED below).
NUMPY_2_5 = np.lib.NumpyVersion(np.__version__) >= "2.5.0"
COND = lambda x: np.linalg.cond([[x[0] + 2, x[1]], [x[2], x[3] + 1]])  # noqa: E731
if not NUMPY_2_5:
    CASES["cond"] = COND


@pytest.mark.parametrize("name", list(CASES))
def test_gradient_and_hessian_match_finite_differences(name):
    f = CASES[name]
    x = X.copy()
    value, g = tg.value_and_grad(f)(x)
    # The traced forward pass is NumPy's own computation (to rounding: np.linalg.cond's svd
    # of a traced array is tapegrad's rule).
    np.testing.assert_allclose(value, f(X), rtol=1e-13, atol=0)
    np.testing.assert_allclose(g, fd_grad(f, X), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(tg.hessian(f)(x), fd_hessian(f, X), rtol=1e-5, atol=2e-5)
    np.testing.assert_array_equal(x, X)  # the input is untouched


@pytest.mark.parametrize("name", ["mean", "std", "norm", "r_mixed", "polygamma", "cov", "cumsum", "trapezoid"])
def test_traced_vjp_of_vjp(name):
    check_grads(CASES[name], [X.copy()], order=2)


def test_jacobian_of_a_list_valued_result():
    def f(x):
        return np.r_[np.mean([x[0], x[1] ** 2]), np.cumsum((x[2], x[3] * x[0]))]

    J = tg.jacobian(f)(X)
    expected = np.stack([fd_grad(lambda x, i=i: f(x)[i], X) for i in range(3)])
    np.testing.assert_allclose(J, expected, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(tg.jacfwd(f)(X), J, rtol=1e-13)


def test_lists_and_their_plain_arrays_are_not_mutated():
    plain = np.array([5.0, 6.0])

    def f(x):
        items = [x[:2], plain, x[2:] ** 2]
        out = np.mean(items, axis=0) + np.cumsum(items, axis=0)[-1]
        joined = np.r_[items[0], plain]
        assert items[1] is plain and len(items) == 3  # the list itself is left as it was
        return np.sum(out**2) + np.sum(joined**3)

    x = X.copy()
    np.testing.assert_allclose(tg.grad(f)(x), fd_grad(f, X), rtol=1e-6)
    np.testing.assert_array_equal(plain, [5.0, 6.0])
    np.testing.assert_array_equal(x, X)


def test_gradient_tape_and_nested_windows():
    with tg.GradientTape() as tape:
        t = tape.watch(X)
        y = np.std([t[0], t[1] * t[2]])
    np.testing.assert_allclose(tape.gradient(y, t), fd_grad(lambda x: np.std([x[0], x[1] * x[2]]), X), rtol=1e-6)

    def inner(x):  # a gradient taken inside another function's window
        return tg.grad(lambda z: np.mean([z[0] ** 3, z[1]]))(x)

    np.testing.assert_allclose(tg.jacobian(inner)(X)[0, 0], 6 * X[0] / 2, rtol=1e-12)


# ---------------------------------------------------------------- without tracers: NumPy's and SciPy's own
PLAIN_CALLS = [
    (np.mean, ([1.0, 2.5, 4.0],), {}),
    (np.mean, ([[1.0, 2.0], [3.0]],), {}),  # ragged: NumPy's ValueError
    (np.mean, ([],), {}),  # NumPy's nan (and its warning)
    (np.std, ([1, 2, 4],), {"ddof": 1}),
    (np.var, ((1.0, 2.0),), {"axis": 2}),  # NumPy's AxisError
    (np.sum, ([1, 2, 3],), {"dtype": np.int8}),
    (np.sum, ([[1, 2], [3]],), {}),
    (np.max, ([],), {}),  # zero-size: NumPy's ValueError
    (np.ptp, ([3, 1, 2],), {}),
    (np.any, ([0, 0.0],), {}),
    (np.linalg.norm, ([3, 4],), {}),
    (np.linalg.norm, ([[1, 2], [3]],), {}),
    (np.append, ([1], [2.5]), {}),
    (np.r_.__getitem__, ((slice(1, 3), 5.0, [7]),), {}),
    (np.c_.__getitem__, (([1, 2], [3, 4]),), {}),
    (np.r_.__getitem__, (([1, 2], [[3]]),), {}),  # NumPy's error for mismatched dimensions
    (np.cumsum, ([1, 2, 3],), {}),
    (np.cumsum, (["a", "b"],), {}),  # NumPy's error for strings
    (np.clip, ([1, 5, 9],), {"a_min": 2, "a_max": 6}),
    (np.round, ((1.26, 2.5),), {"decimals": 1}),
    (np.linspace, ([0.0, 1.0], [1.0, 3.0], 3), {}),
    (np.outer, ([1, 2], [3, 4]), {}),
    (np.cov, ([[1.0, 2.0, 4.0], [0.5, 0.1, 0.3]],), {}),
    (np.diff, ([1, 4, 9],), {}),
    (np.trapezoid, ([1, 4, 9],), {}),
    (sp.polygamma, (1, [1.5, 2.5]), {}),
    (sp.multigammaln, (3.5, 2), {}),
    (sp.logsumexp, ([1.0, 2.0],), {}),
]


def _outcome(fun, args, kwargs):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # NumPy's "Mean of empty slice" and the like
            out = fun(*args, **kwargs)
    except Exception as exc:  # the error is the outcome to compare
        return ("error", type(exc), str(exc))
    out = np.asarray(out)
    return ("value", type(out), out.dtype, out.shape, repr(out.tolist()))


EXPECTED = [_outcome(*call) for call in PLAIN_CALLS]  # outside any window, at import


def _compare_plain_calls():
    for call, expected in zip(PLAIN_CALLS, EXPECTED):
        assert _outcome(*call) == expected, call


def test_calls_without_tracers_are_identical_inside_a_window():
    with tg.GradientTape() as tape:
        tape.watch(X)
        assert not _proxies_off()  # the proxies point at the wrappers ...
        _compare_plain_calls()  # ... which give NumPy's and SciPy's exact results and errors
    _compare_plain_calls()


def test_numpy_errors_about_the_values_stay_numpy_errors():
    for build in (lambda v: np.mean([[v[0], v[1]], [v[2]]]), lambda v: np.linalg.norm([[v[0], v[1]], [v[2]]])):
        with pytest.raises(ValueError) as numpy_says:
            build(X)
        with pytest.raises(ValueError) as we_say:
            tg.grad(build)(X)
        assert str(we_say.value) == str(numpy_says.value)


def test_a_thread_that_does_not_record_sees_original_behaviour():
    inside, done = threading.Event(), threading.Event()
    failures = []

    def recorder():
        with tg.GradientTape() as tape:
            t = tape.watch(X)
            np.mean([t[0], t[1]])
            inside.set()
            done.wait(10)

    def bystander():
        inside.wait(10)
        try:
            assert not _proxies_off()
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
    f = CASES["std"]
    expected = fd_grad(f, X)
    errors = []

    def work():
        try:
            for _ in range(20):
                np.testing.assert_allclose(tg.grad(f)(X), expected, rtol=1e-6)
        except Exception as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors


# ---------------------------------------------------------------- the bindings
def test_bindings_are_proxies_switched_by_the_window():
    tg.grad(CASES["mean"])(X)  # the first window has rebound them
    namespace = _methods_module().__dict__
    proxy = namespace["asanyarray"]
    assert proxy.func is ORIGINAL_ASANYARRAY and proxy(X) is X  # outside: NumPy's own function
    basic = sys.modules["scipy.special._basic"].__dict__["asarray"]
    assert basic.func is np.asarray
    with tg.GradientTape():
        # A window writes no module namespace: it points the proxies at the wrappers.
        assert namespace["asanyarray"] is proxy and proxy.func is np.asanyarray is not ORIGINAL_ASANYARRAY
        assert basic.func is np.asarray
    assert proxy.func is ORIGINAL_ASANYARRAY


def test_a_module_imported_during_a_window_gets_the_original_back():
    name = "numpy._tapegrad_test_late_module"
    module = types.ModuleType(name)
    module.__file__ = __file__  # Python code, as a real module of NumPy's
    try:
        with tg.GradientTape():
            sys.modules[name] = module
            module.narray = np.array  # `from numpy import array as narray`: the wrapper, now
            assert module.narray is not np.array.__wrapped__
        assert module.narray.func is np.array  # the window's end rebound it to its proxy
        assert module.narray([1, 2]).tolist() == [1, 2]
        grad = tg.grad(lambda x: np.sum(module.narray([x[0], x[1] ** 2]) ** 2))(X)
        np.testing.assert_allclose(grad, [2 * X[0], 4 * X[1] ** 3, 0.0, 0.0], rtol=1e-13)
    finally:
        sys.modules.pop(name, None)


def test_opt_out_puts_the_original_bindings_back():
    tg.grad(CASES["mean"])(X)
    try:
        tg.intercept_array_constructors(False)
        assert _methods_module().asanyarray is ORIGINAL_ASANYARRAY
        with pytest.raises(tg.GradientDroppedError, match="numpy.mean.*switched off"):
            tg.grad(CASES["mean"])(X)
    finally:
        tg.intercept_array_constructors(True)
    np.testing.assert_allclose(tg.grad(CASES["mean"])(X), fd_grad(CASES["mean"], X), rtol=1e-6)
    assert _methods_module().asanyarray.func is ORIGINAL_ASANYARRAY


# ---------------------------------------------------------------- what stays refused, and says so
REFUSED = {
    # a ufunc or C function given a list by the user's own line
    "sin": (lambda x: np.sum(np.sin([x[0], x[1]])), r"The expression there: np\.sin\(\[x\[0\], x\[1\]\]\)"),
    "dot": (lambda x: np.dot([x[0], x[1]], [x[2], 2.0]), r"The expression there: np\.dot\("),
    # the implementation goes on where a traced array cannot
    "inv": (
        lambda x: np.sum(np.linalg.inv([[x[0] + 2, x[1]], [x[2], x[3] + 2]])),
        r"numpy\.linalg\.inv \(called at .*list or tuple holding tapegrad tracers.*__array_wrap__",
    ),
    "det": (lambda x: np.linalg.det([[x[0], x[1]], [x[2], x[3]]]), r"numpy\.linalg\.det \(called at .*no derivative rule"),
    "corrcoef": (lambda x: np.sum(np.corrcoef([x, x**2])), r"numpy\.corrcoef \(called at .*in-place write into a traced array that overlaps a view"),
    "object_dtype": (lambda x: np.mean([x[0], "a"]), r"numpy\.mean \(called at "),
}


if NUMPY_2_5:
    REFUSED["cond"] = (COND, r"numpy\.linalg\.cond \(called at .*svd")


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_cannot_be_differentiated_names_the_function(name):
    f, pattern = REFUSED[name]
    with pytest.raises(tg.GradientDroppedError, match=pattern) as info:
        tg.grad(f)(X.copy())
    assert __file__ in str(info.value)  # and the user's line


def test_an_unrelated_error_after_a_list_conversion_is_left_alone():
    identity = np.frompyfunc(lambda v: v, 1, 1)  # an object ufunc: tapegrad has no rule for it

    def f(x):
        m = np.mean([x[0], x[1]])  # a list converted inside NumPy, which then returns
        return np.sum(identity(x) * m)

    with pytest.raises(UnsupportedFunctionError) as info:
        tg.grad(f)(X)
    assert not isinstance(info.value, tg.GradientDroppedError)


def test_unique_of_a_list_is_right_or_refused():
    # NumPy 2.2's np.unique sorts the converted array with ndarray.sort (a traced sort):
    # right there; newer NumPy reads x.flags and the like: a clear refusal there.
    def f(x):
        return np.sum(np.unique([x[1], x[0] ** 2]) * np.array([1.0, 3.0]))

    try:
        g = tg.grad(f)(X)
    except tg.GradientDroppedError as error:
        assert re.search(r"numpy\.unique \(called at ", str(error)), str(error)
    else:
        np.testing.assert_allclose(g, fd_grad(f, X), rtol=1e-6, atol=1e-9)
