"""``np.vectorize`` over tracers (rules/vectorize.py): the function traced once per element."""

import math
import subprocess
import sys

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import GradientDroppedError
from tapegrad.testing import check_grads

X = np.linspace(0.3, 1.7, 5) + 0.01  # no element on the branch point 1.0


def branchy(a):
    if a > 1.0:  # a Python branch on the element's value: right on each side
        return a**2
    return np.sin(a) + 1


def test_branch_on_each_element_first_and_second_order():
    f = np.vectorize(branchy)
    check_grads(f, (X,), order=2)
    expected = np.where(X > 1.0, 2 * X, np.cos(X))
    np.testing.assert_allclose(tg.grad(lambda x: f(x).sum())(X), expected, rtol=1e-14)
    np.testing.assert_allclose(np.diag(tg.hessian(lambda x: f(x).sum())(X)), np.where(X > 1.0, 2.0, -np.sin(X)))
    assert np.array_equal(f(X), np.array([branchy(a) for a in X]))  # NumPy's own call is untouched


def test_broadcasting_excluded_and_keyword_arguments():
    f = np.vectorize(lambda a, b: a * b + b**2)
    check_grads(lambda x: f(x[:, None], x[None, :3]), (X,), order=2)
    g = np.vectorize(lambda a, k, scale=1.0: scale * a**k, excluded={"k"})
    check_grads(lambda x: g(x, k=3, scale=x[::-1]), (X,), order=2)


def test_several_outputs_signature_and_otypes():
    two = np.vectorize(lambda a: (a**2, np.exp(a)))
    check_grads(lambda x: np.stack(two(x)), (X,), order=2)
    rows = np.vectorize(lambda v: np.array([v.sum(), (v**2).sum()]), signature="(n)->(2)")
    m = np.arange(6.0).reshape(2, 3) / 5 + 0.2
    check_grads(rows, (m,), order=2)
    assert rows(m).shape == (2, 2)
    single = np.vectorize(lambda a: a * 2, otypes=[np.float32])
    seen = {}

    def f(x):
        out = single(x)
        seen["dtype"] = out.dtype
        return out

    np.testing.assert_array_equal(tg.jacobian(f)(X), 2 * np.eye(5))
    assert seen["dtype"] == np.float32 and single(X).dtype == np.float32
    counts = np.vectorize(lambda a: int(a > 1.0))  # an integer result carries no derivative
    assert np.array_equal(tg.grad(lambda x: np.sum(counts(x) * x))(X), (X > 1.0).astype(float))


def test_modes_agree_and_input_not_mutated():
    f = np.vectorize(branchy)
    x = X.copy()
    rows = np.stack([tg.grad(lambda x, i=i: f(x)[i])(x) for i in range(5)])
    np.testing.assert_array_equal(tg.jacobian(f)(x), rows)
    np.testing.assert_allclose(tg.jacfwd(f)(x), rows, rtol=1e-15)
    assert np.array_equal(x, X)


def test_a_python_math_call_is_a_clear_error():
    with pytest.raises(GradientDroppedError, match=r"float\(\)"):
        tg.grad(lambda x: np.vectorize(math.sin)(x).sum())(X)


def test_works_without_scipy_imported():
    code = (
        "import sys, numpy as np, tapegrad as tg\n"
        "f = np.vectorize(lambda a: a ** 3 if a > 0 else -a)\n"
        "g = tg.grad(lambda x: f(x).sum())(np.array([-1.0, 2.0]))\n"
        "assert g.tolist() == [-1.0, 12.0], g\n"
        "assert 'scipy' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_a_function_closing_over_a_tracer_on_plain_elements():
    grid = np.array([0.5, 1.5, 2.5])

    def f(p):
        model = np.vectorize(lambda t: p[0] * np.exp(-p[1] * t))
        return model(grid)

    p0 = np.array([2.0, 0.7])
    check_grads(f, (p0,), order=2)
    empty = np.vectorize(lambda t: t * 2.0, otypes=[float])
    assert tg.grad(lambda p: np.sum(empty(np.zeros(0))) + p[0])(p0).tolist() == [1.0, 0.0]


def test_an_object_argument_is_passed_as_the_object():
    # SciPy's discrete distributions vectorize a method over `self` too: an object array's
    # element is the object itself, not a scalar to unwrap
    class Scale:
        def __init__(self, k):
            self.k = k

    f = np.vectorize(lambda obj, x: obj.k * x ** 2, otypes="d")
    x = np.array([0.5, -1.0, 2.0])
    grad = tg.grad(lambda x: np.sum(f(Scale(3.0), x)))(x)
    np.testing.assert_allclose(grad, 6.0 * x)
