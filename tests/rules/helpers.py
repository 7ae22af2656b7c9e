"""Helpers shared by the rule tests."""

import numpy as np

import tapegrad as tg


def traced_value(fun, *args):
    """The forward value ``fun(*args)`` computed on tracers."""
    return tg.vjp(fun, *args)[0]


def assert_same_as_numpy(traced, plain, rtol=1e-12):
    """Traced results equal NumPy's own, in shape, dtype and value."""
    traced = traced if isinstance(traced, (tuple, list)) else [traced]
    plain = plain if isinstance(plain, (tuple, list)) else [plain]
    assert len(traced) == len(plain)
    for t, p in zip(traced, plain):
        assert np.shape(t) == np.shape(p) and np.result_type(t) == np.result_type(p)
        np.testing.assert_allclose(t, p, rtol=rtol, atol=1e-12)


def assert_same_forward(fun, args):
    """The traced forward equals NumPy's exactly, output by output (shape, dtype, values)."""
    expected = fun(*args)
    got = traced_value(fun, *args)
    if isinstance(expected, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(expected)
        pairs = zip(got, expected)
    else:
        pairs = [(got, expected)]
    for g, e in pairs:
        assert np.shape(g) == np.shape(e)
        assert np.asarray(g).dtype == np.asarray(e).dtype
        np.testing.assert_array_equal(g, e)


def assert_float32_gradient(fun, x32, rtol, atol):
    """The gradient of ``sum(fun(x))`` at a float32 point is float32 and close to float64's."""
    g = tg.grad(lambda x: np.sum(fun(x)))(x32)
    assert g.dtype == np.float32
    assert np.allclose(g, tg.grad(lambda x: np.sum(fun(x)))(x32.astype(np.float64)), rtol=rtol, atol=atol)
