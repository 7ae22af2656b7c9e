"""Derivatives of union1d, intersect1d, setdiff1d and setxor1d: output values are
entries of the inputs; each value's cotangent is split equally among its equal entries."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import check_grads

SET_FUNCTIONS = [np.union1d, np.intersect1d, np.setdiff1d, np.setxor1d]
# Inputs with repeated and shared values (1 twice in each, 2 in both).
A1 = np.array([3.0, 1.0, 2.0, 1.0, 5.0])
A2 = np.array([2.0, 7.0, 1.0, 1.0, 8.0])


def _value(fun, *args):
    """The forward value computed on tracers."""
    return tg.vjp(fun, *args)[0]


def _expected_jacobians(fun, a1, a2):
    """d out / d (a1, a2) by the convention: 1 / (number of equal entries in both inputs)."""
    out = fun(a1, a2)
    both = np.concatenate((a1.ravel(), a2.ravel()))
    equal = (out[:, None] == both[None, :]).astype(float)
    share = equal / equal.sum(axis=1, keepdims=True)
    return share[:, : a1.size].reshape(out.shape + a1.shape), share[:, a1.size :].reshape(out.shape + a2.shape)


@pytest.mark.parametrize("fun", SET_FUNCTIONS, ids=lambda f: f.__name__)
def test_values_and_tie_split(fun):
    for a1, a2 in [(A1, A2), (A2, A1), (A1.reshape(5, 1), A2[:3])]:
        np.testing.assert_array_equal(_value(fun, a1, a2), fun(a1, a2))
        j1, j2 = tg.jacobian(fun, argnums=(0, 1))(a1, a2)
        e1, e2 = _expected_jacobians(fun, a1, a2)
        np.testing.assert_allclose(j1, e1)
        np.testing.assert_allclose(j2, e2)


@pytest.mark.parametrize("fun", [np.union1d, np.setdiff1d, np.setxor1d], ids=lambda f: f.__name__)
def test_finite_differences_without_ties(fun):
    # Away from ties the output is a selection of the inputs: check orders 1 and 2.
    b1, b2 = np.array([0.3, -1.2, 2.5, 0.9]), np.array([2.4, 4.1, -0.7])
    check_grads(fun, [b1, b2], order=2)
    check_grads(lambda p, q: fun(p, q) ** 2, [b1.reshape(2, 2), b2], order=2)


def test_intersect1d_options_and_second_order():
    v, i1, i2 = _value(lambda p, q: np.intersect1d(p, q, return_indices=True), A1, A2)
    for traced, plain in zip((v, i1, i2), np.intersect1d(A1, A2, return_indices=True)):
        np.testing.assert_array_equal(traced, plain)
    assert not isinstance(i1, tg.Tracer) and i1.dtype.kind == "i"
    # assume_unique with duplicates: NumPy returns repeated values; each keeps its group's split
    u = np.array([1.0, 1.0, 4.0])
    out = _value(lambda p: np.intersect1d(p, np.array([1.0, 4.0]), assume_unique=True), u)
    np.testing.assert_array_equal(out, np.intersect1d(u, [1.0, 4.0], assume_unique=True))
    # sum(out^2), out = mean of its group: Hessian 2 / c^2 on each group block
    hess = tg.hessian(lambda p: np.sum(np.intersect1d(p, A2) ** 2))(A1)
    expected = np.zeros((5, 5))
    for value, count in ((1.0, 4), (2.0, 2)):
        mask = A1 == value
        expected[np.ix_(mask, mask)] = 2.0 / count**2
    np.testing.assert_allclose(hess, expected)


def test_dtypes_and_special_values():
    a32 = A1.astype(np.float32)
    for fun in SET_FUNCTIONS:
        assert _value(fun, a32, A2).dtype == fun(a32, A2).dtype
        assert tg.grad(lambda p: np.sum(fun(p, A2.astype(np.float32))))(a32).dtype == np.float32
    # setdiff1d keeps its first argument's dtype
    assert _value(np.setdiff1d, a32, A2).dtype == np.float32
    # NaNs are kept as NumPy keeps them
    nan = np.array([np.nan, 1.0, np.nan])
    for fun in (np.union1d, np.setxor1d):
        np.testing.assert_array_equal(_value(lambda p: fun(p, np.array([1.0, 2.0])), nan), fun(nan, [1.0, 2.0]))
    # complex values
    z1, z2 = np.array([1 + 1j, 2 - 1j, 3j]), np.array([3j, 5.0 + 0j])
    for fun in SET_FUNCTIONS:
        np.testing.assert_array_equal(_value(fun, z1, z2), fun(z1, z2))
    check_grads(np.setdiff1d, [z1, z2[1:]], order=2)
