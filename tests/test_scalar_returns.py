"""Library functions that return ``float(...)`` keep a traced value traced (integrations.scalar_returns).

scikit-learn's metrics are the real case (``tests/sklearn_cases.py`` runs them in SciPy's
array-API mode, in a subprocess); here a module of our own stands in for them, so
every branch is checked in this process: a traced loss comes back traced and right at
first and second order, ``float`` used as a type leaves the function alone (a clear
error names it), a call with no tracer returns the library's own Python float, and the
function's code is the library's again once the window closes.
"""

import sys
import types

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import GradientDroppedError
from tapegrad.integrations import scalar_returns
from tapegrad.testing import check_grads
from tapegrad.tracer import Tracer

SOURCE = '''
import numpy as np

def _mean(x):
    return np.mean(x)

def loss(x, scale=2.0):
    value = float(_mean(x ** 3)) * scale
    return float(value)

def pair(x):
    return float(np.sum(x)), float(np.max(x))

def typed(x):
    value = np.sum(x ** 2)
    return float(value) if not isinstance(value, float) else value

def counted(x):
    return float(len(x))
'''


@pytest.fixture
def fake_library(monkeypatch):
    module = types.ModuleType("fake_metrics_lib")
    module.__dict__["__name__"] = "fake_metrics_lib"
    exec(compile(SOURCE, "fake_metrics_lib.py", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, "fake_metrics_lib", module)
    monkeypatch.setattr(scalar_returns, "MODULES", scalar_returns.MODULES + ("fake_metrics_lib",))
    yield module
    scalar_returns._found.pop("fake_metrics_lib", None)


x0 = np.array([0.3, -1.2, 0.7, 2.0])


def test_traced_loss_is_right_at_first_and_second_order(fake_library):
    check_grads(fake_library.loss, (x0,), order=2)
    assert np.allclose(tg.grad(fake_library.loss)(x0), 2.0 * 3 * x0**2 / x0.size)
    assert np.allclose(tg.hessian(fake_library.loss)(x0), np.diag(2.0 * 6 * x0 / x0.size))


def test_value_inside_is_a_tracer_and_outside_a_python_float(fake_library):
    seen = []

    def f(x):
        value = fake_library.loss(x)
        seen.append(type(value))
        return value

    tg.grad(f)(x0)
    assert seen == [Tracer]
    plain = fake_library.loss(x0)
    assert type(plain) is float and plain == float(np.mean(x0**3)) * 2.0
    assert type(fake_library.counted(x0)) is float


def test_several_returns_and_untraced_arguments(fake_library):
    jac = tg.jacobian(lambda x: np.stack(fake_library.pair(x)))(x0)
    expected = np.array([np.ones(4), (x0 == x0.max()).astype(float)])
    assert np.array_equal(jac, expected)
    # A float() of a plain value inside a traced call stays a Python float.
    assert tg.grad(lambda x: fake_library.counted(x) * np.sum(x))(x0).tolist() == [4.0] * 4


def test_float_used_as_a_type_is_left_alone_with_a_clear_error(fake_library):
    with pytest.raises(GradientDroppedError, match=r"float\(\).* is at fake_metrics_lib\.py:16\."):
        tg.grad(fake_library.typed)(x0)


def test_code_is_restored_after_the_window(fake_library):
    code = fake_library.loss.__code__
    tg.grad(fake_library.loss)(x0)
    assert fake_library.loss.__code__ is code
