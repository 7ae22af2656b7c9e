"""SciPy's door (tapegrad.interception): how a call reaches its rule, and that nothing else changes.

The mechanism is tested on small functions of this module, registered exactly as
the SciPy rules are (``intercepted`` + ``defvjp`` / ``defcomposite``); the SciPy
rules themselves are tested in ``tests/scipy/``.
"""

from __future__ import annotations

import functools
import inspect
import threading

import numpy as np
import pytest
import scipy  # noqa: F401  (the door installs only once SciPy is imported)

import tapegrad as tg
from tapegrad import interception
from tapegrad.errors import GradientDroppedError
from tapegrad.registry import INTERCEPTED, RULES, defcomposite, defvjp, intercepted


def scaled(x, factor=2.0, *, shift=0.0):
    """A "library" function that reads its input's memory, as SciPy's compiled paths do."""
    x = np.asarray(x, dtype=float)
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    return x * factor + shift


def _logged(fun):
    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
        wrapper.calls += 1
        return fun(*args, **kwargs)

    wrapper.calls = 0
    return wrapper


@_logged
def decorated(x):
    """A function with a closure (its decorator's cells), like SciPy's batched linalg."""
    return np.asarray(x).copy() ** 3


class Spline:
    """An object holding data, evaluated by a method: CubicSpline(x, y)(t)."""

    def __init__(self, c):
        self.c = c

    def __call__(self, t):
        return np.asarray(self.c).copy() * t


class SlottedSpline(Spline):
    """The same, with its data in a slot (SciPy's PPoly keeps its arrays in __slots__)."""

    __slots__ = ("coefficients",)

    def __init__(self, c):
        self.coefficients = c

    def __call__(self, t):
        return np.asarray(self.coefficients).copy() * t


def solver(fun, x0):
    """A solver whose callback may close over traced values (no argument shows them)."""
    return float(np.asarray(fun(x0)).copy())


def _setup_rules():
    defvjp(intercepted(scaled), lambda g, ans, x, factor=2.0, shift=0.0: g * factor)
    defcomposite(intercepted(decorated), lambda x: x**3)
    defcomposite(intercepted(Spline.__call__, inspect_self=True), lambda self, t: self.c * t)
    defcomposite(intercepted(solver, route_all=True), _solver_rule)
    defcomposite(intercepted(SlottedSpline.__call__, inspect_self=True), lambda self, t: self.coefficients * t)


def _solver_rule(fun, x0):
    value = fun(x0)
    if type(value) is not tg.Tracer:
        return interception.original(solver)(fun, x0)
    return value  # the "solution" is the callback's value: enough to show the routing


_setup_rules()
early_scaled = scaled  # a name bound before any tape records (``from scipy.x import f``)


@pytest.fixture(autouse=True)
def _door_on():
    interception.intercept_scipy(True)
    yield
    interception.intercept_scipy(True)


def test_module_attribute_and_early_bound_name_reach_the_rule():
    x = np.array([1.0, -2.0, 3.0])
    assert np.array_equal(tg.grad(lambda x: np.sum(scaled(x, 3.0)))(x), np.full(3, 3.0))
    assert np.array_equal(tg.grad(lambda x: np.sum(early_scaled(x, factor=0.5)))(x), np.full(3, 0.5))


def test_second_order_through_a_composite_with_a_closure():
    x = np.array([0.5, 2.0])
    assert np.allclose(tg.grad(lambda x: np.sum(decorated(x)))(x), 3 * x**2)
    assert np.allclose(tg.hessian(lambda x: np.sum(decorated(x)))(x), np.diag(6 * x))
    assert decorated.calls == 0  # the rule ran, not the function's own body


def test_everything_is_restored_after_recording():
    # The trampolines linger after a window (swapping 400+ functions costs 40 us a
    # gradient); the first call outside a window restores everything, then runs.
    scaled(np.ones(2))  # a plain call restores whatever an earlier test left lingering
    before = (scaled.__code__, scaled.__kwdefaults__, dict(scaled.__dict__))
    before_decorated = (decorated.__code__, decorated.__dict__.get("__wrapped__"))
    signature = inspect.signature(scaled)
    tg.grad(lambda x: np.sum(scaled(x) + decorated(x)))(np.ones(2))
    assert inspect.signature(scaled) == signature  # while lingering too
    assert np.array_equal(scaled(np.ones(2)), 2.0 * np.ones(2))  # SciPy's own result, and the restore
    assert scaled.__code__ is before[0]
    assert scaled.__kwdefaults__ == before[1]
    assert {k: v for k, v in scaled.__dict__.items() if k != "__signature__"} == {
        k: v for k, v in before[2].items() if k != "__signature__"
    }
    assert decorated.__code__ is before_decorated[0]
    assert decorated.__dict__.get("__wrapped__") is before_decorated[1]
    assert not interception._installed


def test_trampolines_linger_between_gradients_and_survive_the_sweep():
    code = scaled.__code__
    scaled(np.ones(2))  # restored, whatever ran before
    tg.grad(lambda x: np.sum(scaled(x)))(np.ones(2))
    assert scaled.__code__ is not code and interception._installed  # no swap back, no swap in next time
    tg.grad(lambda x: np.sum(scaled(x) ** 2))(np.ones(2))  # the VJP's plain calls do not restore
    assert scaled.__code__ is not code
    interception.uninstall(now=True)
    assert scaled.__code__ is code


def test_restored_after_an_error_and_after_nested_windows():
    code = scaled.__code__

    def failing(x):
        scaled(x)
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        tg.grad(failing)(np.ones(2))
    scaled(np.ones(2))  # the first call outside a window restores SciPy's code
    assert scaled.__code__ is code

    def outer(x):
        inner = tg.grad(lambda y: np.sum(scaled(y) * x))(x)
        assert scaled.__code__ is not code  # the outer window is still open
        return np.sum(inner)

    tg.grad(outer)(np.ones(2))
    scaled(np.ones(2))
    assert scaled.__code__ is code


def test_plain_calls_while_recording_give_the_originals_results_and_errors():
    seen = {}

    def f(x):
        seen["value"] = scaled(np.array([1.0, 2.0]), 3.0, shift=1.0)
        with pytest.raises(ValueError) as info:
            scaled("not a number")
        seen["error"] = str(info.value)
        seen["signature"] = inspect.signature(scaled)  # its own, even while the trampoline is in place
        return np.sum(x)

    tg.grad(f)(np.ones(2))
    assert np.array_equal(seen["value"], np.array([4.0, 7.0]))
    with pytest.raises(ValueError) as info:
        scaled("not a number")
    assert seen["error"] == str(info.value)
    assert str(seen["signature"]) == "(x, factor=2.0, *, shift=0.0)"
    assert str(inspect.signature(scaled)) == "(x, factor=2.0, *, shift=0.0)"  # restored


def test_traced_keyword_argument_is_bound_by_the_real_signature():
    x = np.array([1.0, 2.0])
    grad = tg.grad(lambda x: np.sum(scaled(x=x, factor=4.0)))(x)
    assert np.array_equal(grad, np.full(2, 4.0))


def test_method_of_an_object_holding_tracers():
    t = np.array([1.0, 2.0, 3.0])

    def f(c):
        return np.sum(Spline(c)(t))  # the argument t is plain; the instance holds the tracer

    assert np.array_equal(tg.grad(f)(np.array(2.0)), np.array(6.0))
    assert np.array_equal(tg.grad(lambda c: np.sum(SlottedSpline(c)(t)))(np.array(2.0)), np.array(6.0))


def test_route_all_sees_tracers_a_callback_closes_over():
    def f(k):
        return solver(lambda x: k * x, 3.0)

    assert np.array_equal(tg.grad(f)(np.array(2.0)), np.array(3.0))
    assert solver(lambda x: 2 * x, 3.0) == 6.0


def test_switched_off_the_call_runs_the_original_and_refuses_clearly():
    interception.intercept_scipy(False)
    with pytest.raises(GradientDroppedError):
        tg.grad(lambda x: np.sum(scaled(x)))(np.ones(2))
    interception.intercept_scipy(True)
    assert np.array_equal(tg.grad(lambda x: np.sum(scaled(x)))(np.ones(2)), np.full(2, 2.0))


def test_other_threads_get_exact_results_while_a_tape_records():
    x = np.linspace(0, 1, 5)
    expected = x * 2.0
    errors = []
    stop = threading.Event()

    def plain_caller():
        while not stop.is_set():
            out = scaled(x)
            if type(out) is not np.ndarray or not np.array_equal(out, expected):
                errors.append(out)

    thread = threading.Thread(target=plain_caller)
    thread.start()
    try:
        for _ in range(200):
            tg.grad(lambda y: np.sum(scaled(y) ** 2))(x)
    finally:
        stop.set()
        thread.join()
    assert not errors


def test_compiled_callable_is_reached_through_its_owner_attribute():
    namespace = type("Namespace", (), {})()
    compiled = np.cumsum  # stands in for a compiled callable (no __code__)
    namespace.cumulative = compiled
    key = compiled
    saved = (RULES.get(key), INTERCEPTED.get(key))
    try:
        intercepted(compiled, owner=namespace, name="cumulative")
        interception.uninstall()

        def f(x):
            assert namespace.cumulative is not compiled
            return np.sum(namespace.cumulative(x))

        assert np.array_equal(tg.grad(f)(np.ones(3)), np.array([3.0, 2.0, 1.0]))
        assert np.array_equal(namespace.cumulative(np.ones(3)), np.array([1.0, 2.0, 3.0]))  # restores
        assert namespace.cumulative is compiled
    finally:
        INTERCEPTED.pop(key, None)
        interception._swaps.pop(key, None)
        if saved[1] is not None:
            INTERCEPTED[key] = saved[1]


def test_generators_are_refused_at_registration_time():
    def gen(x):
        yield x

    intercepted(gen)
    try:
        with pytest.raises(TypeError, match="cannot intercept"):
            interception._Swap(gen, INTERCEPTED[gen])
    finally:
        INTERCEPTED.pop(gen)


def test_plain_python_function_without_intercepted_is_still_refused():
    def private(x):
        return x

    with pytest.raises(TypeError, match="custom_vjp"):
        defvjp(private, lambda g, ans, x: g)
