"""np.pad's statistic, ramp and odd-reflection modes, ``as_strided`` windows and ``x.flat`` as an
iterator (``np.ndenumerate``) on tracers: values NumPy's, derivatives against finite differences."""

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import tapegrad as tg

RNG = np.random.default_rng(11)
X1 = RNG.standard_normal(7)
X2 = RNG.standard_normal((4, 5))


def _fd(f, x, h=1e-6):
    rows = []
    for e in np.eye(x.size):
        e = e.reshape(x.shape)
        rows.append((np.asarray(f(x + h * e)) - np.asarray(f(x - h * e))) / (2 * h))
    return np.moveaxis(np.array(rows), 0, -1).reshape(np.shape(f(x)) + x.shape)


PAD_MODES = [
    dict(mode="mean"), dict(mode="maximum"), dict(mode="minimum"), dict(mode="median"),
    dict(mode="mean", stat_length=2), dict(mode="median", stat_length=3), dict(mode="minimum", stat_length=(1, 4)),
    dict(mode="linear_ramp"), dict(mode="linear_ramp", end_values=(1.5, -2.0)),
    dict(mode="reflect", reflect_type="odd"), dict(mode="symmetric", reflect_type="odd"),
]


@pytest.mark.parametrize("x", [X1, X2], ids=["1d", "2d"])
@pytest.mark.parametrize("width", [2, "uneven"])
@pytest.mark.parametrize("kwargs", PAD_MODES, ids=lambda k: "-".join(f"{v}" for v in k.values()))
def test_pad_modes_match_numpy_and_finite_differences(x, width, kwargs):
    width = ((1, 3),) if width == "uneven" and x.ndim == 1 else ((1, 2), (3, 0)) if width == "uneven" else width
    expected = np.pad(x, width, **kwargs)
    value, _ = tg.vjp(lambda x: np.pad(x, width, **kwargs), x)
    np.testing.assert_allclose(np.asarray(value), expected, rtol=0, atol=1e-14)
    weights = 1.0 + 0.1 * np.arange(expected.size).reshape(expected.shape)

    def f(x):
        return np.sum(np.pad(x, width, **kwargs) ** 2 * weights)

    np.testing.assert_allclose(tg.grad(f)(x), _fd(f, x), rtol=1e-5, atol=1e-6)
    if kwargs["mode"] in ("mean", "linear_ramp") or "reflect_type" in kwargs:  # smooth: second order too
        np.testing.assert_allclose(tg.hessian(f)(x), _fd(tg.grad(f), x), rtol=1e-5, atol=1e-5)


def test_pad_jacobian_equals_stacked_vjps():
    f = lambda x: np.pad(x, ((1, 2), (2, 1)), mode="mean", stat_length=2)  # noqa: E731
    out, pull = tg.vjp(f, X2)
    stacked = np.stack([pull(e.reshape(out.shape))[0] for e in np.eye(out.size)]).reshape(out.shape + X2.shape)
    assert np.array_equal(tg.jacobian(f)(X2), stacked)


def test_pad_refusals_are_numpys_or_clear():
    with pytest.raises(ValueError):
        tg.grad(lambda x: np.sum(np.pad(x, 2, mode="mean", stat_length=0)))(X1)
    with pytest.raises(tg.UnsupportedFunctionError, match="one reflection"):
        tg.grad(lambda x: np.sum(np.pad(x, 9, mode="reflect", reflect_type="odd")))(X1)


# ---------------------------------------------------------------- as_strided
STRIDED = {
    "sliding_windows": lambda x: np.sum(as_strided(x, shape=(len(x) - 2, 3), strides=(8, 8)).mean(axis=1) ** 2),
    "transposed_view": lambda x: np.sum(as_strided(x.reshape(2, 3), shape=(3, 2), strides=(8, 24)) ** 2
                                        * np.arange(6.0).reshape(3, 2)),
    "repeated_rows": lambda x: np.sum(np.tanh(as_strided(x, shape=(3, 6), strides=(0, 8)) * np.arange(1.0, 4.0)[:, None])),
    "every_other": lambda x: np.sum(as_strided(x, shape=(3,), strides=(16,)) ** 3),
}


@pytest.mark.parametrize("name", sorted(STRIDED))
def test_as_strided_gathers_what_numpy_reads(name):
    f = STRIDED[name]
    x = RNG.standard_normal(6)
    np.testing.assert_allclose(tg.grad(f)(x), _fd(f, x), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(tg.hessian(f)(x), _fd(tg.grad(f), x), rtol=1e-5, atol=1e-6)


def test_as_strided_values_and_refusals():
    x = RNG.standard_normal(6)
    value, _ = tg.vjp(lambda x: as_strided(x, shape=(4, 3), strides=(8, 8)), x)
    np.testing.assert_array_equal(np.asarray(value), as_strided(x, shape=(4, 3), strides=(8, 8)))
    with pytest.raises(ValueError, match="outside the array"):
        tg.grad(lambda x: np.sum(as_strided(x, shape=(5, 3), strides=(8, 8))))(x)

    def write_through(x):
        w = as_strided(x, shape=(4, 3), strides=(8, 8))
        w[0, 0] = 5.0  # NumPy would write into x
        return np.sum(x)

    with pytest.raises(tg.GradientDroppedError):
        tg.grad(write_through)(x)


# ---------------------------------------------------------------- x.flat, np.ndenumerate
def test_ndenumerate_and_flat_iteration():
    x = RNG.standard_normal(6)

    def f(x):
        s = 0.0
        for (i, j), v in np.ndenumerate(x.reshape(2, 3)):
            s = s + v**2 * (i + 2 * j + 1)
        return s

    np.testing.assert_allclose(tg.grad(f)(x), 2 * x * (np.array([0, 2, 4, 1, 3, 5]) + 1), rtol=1e-14)
    np.testing.assert_allclose(tg.grad(lambda x: sum(v * v for v in x.flat))(x), 2 * x, rtol=1e-14)

    def coords(x):
        flat = x.reshape(2, 3).flat
        seen = []
        for _ in flat:
            seen.append((flat.index, flat.coords))
        assert seen == [(k + 1, tuple(int(i) for i in np.unravel_index(k + 1, (2, 3))) if k < 5 else (2, 0))
                        for k in range(6)]
        return np.sum(x)

    tg.grad(coords)(x)
