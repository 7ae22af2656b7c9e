"""Refusals only where a gradient would really be lost.

A traced value that depends on no watched input (a tape constant: ``np.zeros_like(x)``
and what is computed from it alone) converts with ``float()``, ``.item()``,
``complex()``, ``.tolist()`` and stores into a plain array element; ``np.full`` with
a traced fill is recorded.  A value that does depend on a watched input is still refused.
"""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg

X = np.array([0.5, -1.5, 2.0])


_PLAIN3 = np.zeros(3)
_PLAIN4 = np.zeros(4)

def _fd(f, x, h=1e-6):
    out = np.empty_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        out[i] = (f(x + e) - f(x - e)) / (2 * h)
    return out


def test_a_tape_constant_converts_to_a_python_number():
    seen = {}

    def f(x):
        c = np.ones_like(x) * 2.0 + 1.0  # depends on no watched value
        loss = np.sum(c**2)
        seen["float"], seen["item"], seen["complex"] = float(loss), loss.item(), complex(loss)
        seen["list"] = c.tolist()
        coef = np.zeros(4)
        coef[-1] = loss  # PoissonRegressor's coef[-1] = ...: float() underneath
        coef[0] = c[1]
        return np.sum(x * coef[:3]) * coef[-1]

    g = tg.grad(f)(X)
    assert seen == {"float": 27.0, "item": 27.0, "complex": 27 + 0j, "list": [3.0, 3.0, 3.0]}
    assert type(seen["float"]) is float and type(seen["item"]) is float
    np.testing.assert_allclose(g, [81.0, 0.0, 0.0])
    np.testing.assert_allclose(tg.hessian(f)(X), np.zeros((3, 3)))


def test_a_value_that_depends_on_a_watched_input_is_still_refused():
    def f(x):
        c = np.zeros_like(x) + x[0]  # reaches x through the addition
        return float(np.sum(c))

    with pytest.raises(tg.GradientDroppedError, match="float"):
        tg.grad(f)(X)
    with pytest.raises(tg.GradientDroppedError, match="item"):
        tg.grad(lambda x: np.sum(x).item())(X)

    def store(x):
        out = _PLAIN3.copy()  # plain (np.zeros in the function would be a traced constant)
        out[0] = np.sum(x)
        return np.sum(out)

    with pytest.raises(tg.GradientDroppedError):
        tg.grad(store)(X)


def test_an_inner_constant_whose_value_depends_on_the_outer_tape_is_refused():
    def f(x):
        with tg.GradientTape() as inner:
            y = inner.watch(x * 2.0)
            d = np.zeros_like(y) + x[0]  # constant for the inner tape, not for the outer one
            _ = y * 1.0
            return float(d[0])

    with pytest.raises(tg.GradientDroppedError):
        tg.grad(f)(X)

    def g(x):
        with tg.GradientTape() as inner:
            y = inner.watch(x * 2.0)
            d = np.zeros_like(y) + 4.0  # constant at every level
            value = float(d[0])
        return np.sum(y) * value

    np.testing.assert_allclose(tg.grad(g)(X), [8.0, 8.0, 8.0])


@pytest.mark.parametrize(
    "f",
    [
        lambda x: np.sum(np.full((3,), x[0]) * x),
        lambda x: np.sum(np.full((2, 3), x) ** 2),
        lambda x: np.sum(np.full(shape=(3,), fill_value=x[1] ** 2) * np.sin(x)),
        lambda x: np.sum(np.full((3,), [x[0], 1.0, x[2]]) * x),
        lambda x: np.sum(np.full_like(x, x[2]) * x),
        lambda x: np.sum(np.broadcast_to(x[0] * x[1], (4,))),
    ],
)
def test_full_with_a_traced_fill(f):
    np.testing.assert_allclose(tg.grad(f)(X), _fd(f, X), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(tg.hessian(f)(X), np.stack([_fd(lambda x, i=i: tg.grad(f)(x)[i], X) for i in range(3)]), rtol=1e-5, atol=1e-6)


def test_full_keeps_numpys_dtype_and_writes_stay_traced():
    def f(x):
        out = np.full((3,), x[0], dtype=np.float32)
        assert out.dtype == np.float32
        out[1] = x[1] * 2.0  # a writable, traced result
        return np.sum(out.astype(np.float64) * x)

    # out = [x0, 2 x1, x0] in float32: f = x0^2 + 2 x1^2 + x0 x2
    np.testing.assert_allclose(tg.grad(f)(X), [2 * X[0] + X[2], 4 * X[1], X[0]])
    assert np.full((2,), 3.0).tolist() == [3.0, 3.0]  # plain calls unchanged


def _masked_quotient(x):
    d = np.maximum(x, 0)
    q = np.divide(np.sin(x), d, out=np.zeros_like(x), where=d != 0)
    return np.sum(q * x)


def _rewritten(x):
    d = np.maximum(x, 0)
    return np.sum(np.where(d != 0, np.sin(x) / np.where(d != 0, d, 1.0), 0.0) * x)


def test_ufunc_out_into_a_traced_array_with_where():
    x = np.array([-1.0, 0.5, 2.0, -0.3])
    assert _masked_quotient(x.copy()) == pytest.approx(_rewritten(x))
    np.testing.assert_array_equal(tg.grad(_masked_quotient)(x), tg.grad(_rewritten)(x))
    np.testing.assert_allclose(tg.grad(_masked_quotient)(x), _fd(_masked_quotient, x), rtol=1e-6, atol=1e-9)
    h = tg.hessian(_masked_quotient)(x)
    assert np.isfinite(h).all()
    np.testing.assert_allclose(h, tg.hessian(_rewritten)(x))

    def accumulate(x):
        y = x * 1.0
        np.multiply(y, 2.0, out=y)
        np.add(y, x, out=(y,), where=x > 0)
        return np.sum(y**2)

    np.testing.assert_allclose(tg.grad(accumulate)(x), np.where(x > 0, 18.0, 8.0) * x)
    with pytest.raises(TypeError, match="Cannot cast"):
        tg.grad(lambda x: np.sum(np.add(x, 1.5j, out=np.zeros_like(x))))(x)  # complex into float64
    with pytest.raises(tg.GradientDroppedError, match="out="):
        tg.grad(lambda x: np.sum(np.add(x, 1.0, out=_PLAIN4.copy())))(x)  # a plain out= still refused
    # np.zeros in the function is a traced constant: out= into it is recorded.
    np.testing.assert_array_equal(tg.grad(lambda x: np.sum(np.add(x, 1.0, out=np.zeros(4)) ** 2))(x), 2 * (x + 1.0))


def test_a_tape_constant_stores_into_a_slice_of_a_plain_array():
    def f(x):
        c = np.ones_like(x) * 3.0  # a tape constant
        out = np.zeros(4)
        out[:3] = c  # NumPy converts with __array__: nothing to drop
        kept = np.asarray(np.zeros_like(x))  # while a tape records: still the tracer itself
        kept[0] = x[0] ** 2  # so this write is recorded
        return np.sum(out[:3] * x) + np.sum(kept)

    np.testing.assert_allclose(tg.grad(f)(X), [3.0 + 2 * X[0], 3.0, 3.0])

    def traced(x):
        out = _PLAIN3.copy()
        out[:] = x * 2.0  # depends on x: refused (a plain array, not allocated by np.zeros & co.)
        return np.sum(out)

    with pytest.raises(tg.GradientDroppedError):
        tg.grad(traced)(X)
