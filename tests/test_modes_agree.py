"""Every way of asking for a derivative gives the numbers of the plainest way.

The plainest way is a Python loop of single vector-Jacobian products (for a
Jacobian) or Hessian-vector products (for a Hessian), each a sweep with one
dense basis cotangent.  ``jacobian`` (whole, chunked; banded or dense inside),
``jacfwd``, ``GradientTape.jacobian``, ``batch_jacobian`` and ``hessian`` must
reproduce them entry for entry, NaN and inf included, for 1-D and N-D outputs,
on programs whose singularities are masked (``sqrt(maximum(x, 0))``, ``where``,
``clip``, relu powers), on non-finite inputs, and on programs that write into
their own arguments.  Where a program is smooth, the numbers also match
central finite differences.
"""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import backward

SQRT_TINY = 1e-300


def _relu(x):
    return np.maximum(x, 0)


# name -> elementwise program of a 1-D or N-D array (rows independent along axis 0)
PROGRAMS = {
    "sqrt_of_maximum": lambda x: np.sqrt(np.maximum(x, 0)),
    "sqrt_of_clip": lambda x: np.sqrt(np.clip(x, 0, None)),
    "power_of_where": lambda x: np.where(x > 0, x, 0) ** 0.5,
    "relu_to_1_5": lambda x: _relu(x) ** 1.5,
    "where_after_sqrt": lambda x: np.where(x > 0, np.sqrt(np.abs(x)), 0.0),
    "log_of_maximum": lambda x: np.log(np.maximum(x, SQRT_TINY)) * 0.1,
    "guarded_division": lambda x: np.sin(x) / np.where(x == 0, 1.0, x),
    "arcsin_of_clip": lambda x: np.arcsin(np.clip(x, -1, 1)),
    "cbrt_times_relu": lambda x: np.cbrt(x) * _relu(x),
    "abs_power": lambda x: np.abs(x) ** 0.5 + x,
    # x[..., None] and x[None] are reshapes in the sweep (no scatter into zeros)
    "pairwise_through_newaxis": lambda x: np.sum(x[..., :, None] * np.sin(x[..., None, :]), axis=-1)
    + np.sqrt(np.maximum(x[None], 0))[0],
}


def _writes_scaled(x):
    x *= 2.0
    return np.sin(x)


def _writes_centred(x):
    x -= np.mean(x, axis=-1, keepdims=True)
    return x**2


def _writes_element(x):
    x[..., 0] = x[..., -1] * 10.0
    return np.tanh(x)


def _writes_through_view(x):
    v = x[..., 1:]
    v *= 3.0  # changes x too, as in NumPy
    return x * np.cos(x)


INPLACE = {
    "scaled": _writes_scaled,
    "centred": _writes_centred,
    "element": _writes_element,
    "through_view": _writes_through_view,
}

POINTS = {
    "regular": np.array([-1.3, -0.4, 0.7, 1.9, 2.5]),
    "zeros": np.array([-1.0, 0.0, 4.0, 0.0, 1.0]),
    "nan": np.array([0.5, np.nan, -1.0, 2.0, 0.0]),
    "inf": np.array([np.inf, 1.0, -np.inf, 0.0, 3.0]),
}


def assert_same_numbers(actual, expected):
    """Equal NaN and inf positions (with signs) and equal finite values, to rounding."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
    np.testing.assert_array_equal(np.isposinf(actual), np.isposinf(expected))
    np.testing.assert_array_equal(np.isneginf(actual), np.isneginf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(actual[finite], expected[finite], rtol=1e-12, atol=1e-12)


def stacked_vjps(f, x):
    """The plainest Jacobian: one single-cotangent VJP per output entry, stacked."""
    out, pullback = tg.vjp(f, x.copy())
    rows = []
    for i in range(np.size(out)):
        e = np.zeros(np.size(out))
        e[i] = 1.0
        rows.append(pullback(e.reshape(np.shape(out)))[0])
    return np.reshape(np.stack(rows), np.shape(out) + x.shape)


def stacked_hvps(loss, x):
    """The plainest Hessian: one Hessian-vector product per basis vector, stacked."""
    rows = []
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = 1.0
        rows.append(tg.hvp(loss)(x.copy(), e.reshape(x.shape)))
    return np.reshape(np.stack(rows), x.shape + x.shape)


def _tape_jacobian(f, x):
    with tg.GradientTape() as tape:
        t = tape.watch(x.copy())
        # f may write into its argument; a watched name then stands for the written
        # value (as a rebound name does in TensorFlow), so hand f its own copy.
        y = f(t.copy())
    return tape.jacobian(y, t)


def test_a_watched_name_written_in_place_stands_for_the_written_value():
    with tg.GradientTape(persistent=True) as tape:
        t = tape.watch(np.array([1.0, 2.0]))
        s = t
        t *= 3.0
        y = t**2
    np.testing.assert_allclose(tape.gradient(y, t), 2 * np.array([3.0, 6.0]))
    assert s is t  # one object, like an ndarray written in place


def _modes(f, x):
    """Every Jacobian mode, evaluated on copies of ``x`` (the programs may write into it)."""
    return {
        "jacobian": tg.jacobian(f)(x.copy()),
        "jacobian_chunked": tg.jacobian(f, chunk_size=2)(x.copy()),
        "jacobian_dense_inside": _dense_inside(lambda: tg.jacobian(f)(x.copy())),
        "jacfwd": tg.jacfwd(f)(x.copy()),
        "tape_jacobian": _tape_jacobian(f, x),
    }


def _dense_inside(compute):
    previous = backward.STRUCTURED
    backward.STRUCTURED = False
    try:
        return compute()
    finally:
        backward.STRUCTURED = previous


ALL = {**PROGRAMS, **{f"writes_{k}": v for k, v in INPLACE.items()}}


@pytest.mark.parametrize("point", sorted(POINTS))
@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.parametrize("layout", ["vector", "matrix"])
def test_every_jacobian_mode_equals_stacked_vjps(name, point, layout):
    f = ALL[name]
    x = POINTS[point] if layout == "vector" else np.stack([POINTS[point], POINTS[point][::-1] * 0.5])
    original = x.copy()
    with np.errstate(all="ignore"):
        expected = stacked_vjps(f, x)
        for mode, jac in _modes(f, x).items():
            assert jac.shape == expected.shape, mode
            try:
                assert_same_numbers(jac, expected)
            except AssertionError as exc:
                raise AssertionError(f"{mode} differs from stacked VJPs") from exc
    np.testing.assert_array_equal(x, original)  # the caller's array is never written


@pytest.mark.parametrize("point", sorted(POINTS))
@pytest.mark.parametrize("name", sorted(ALL))
def test_batch_jacobian_equals_stacked_vjps(name, point):
    f = ALL[name]
    x = np.stack([POINTS[point], POINTS[point][::-1] * 0.5])  # rows are independent
    with np.errstate(all="ignore"):
        full = stacked_vjps(f, x)
        per_row = tg.batch_jacobian(f)(x.copy())
    expected = np.stack([full[b, :, b, :] for b in range(x.shape[0])])
    assert_same_numbers(per_row, expected)


@pytest.mark.parametrize("point", sorted(POINTS))
@pytest.mark.parametrize("name", sorted(ALL))
def test_every_hessian_mode_equals_stacked_hvps(name, point):
    f = ALL[name]
    weights = np.linspace(0.5, 1.5, 5)

    def loss(x):
        return np.sum(f(x) * weights)

    x = POINTS[point]
    with np.errstate(all="ignore"):
        expected = stacked_hvps(loss, x)
        assert_same_numbers(tg.hessian(loss)(x.copy()), expected)
        assert_same_numbers(tg.hessian(loss, chunk_size=2)(x.copy()), expected)
        assert_same_numbers(_dense_inside(lambda: tg.hessian(loss)(x.copy())), expected)
        assert_same_numbers(tg.jacfwd(tg.grad(loss))(x.copy()), expected)


def _central_jacobian(f, x, eps=1e-6):
    cols = []
    for j in range(x.size):
        e = np.zeros(x.size)
        e[j] = eps
        e = e.reshape(x.shape)
        cols.append((f(x + e) - f(x - e)) / (2 * eps))
    return np.moveaxis(np.stack(cols), 0, -1).reshape(np.shape(f(x.copy())) + x.shape)


@pytest.mark.parametrize("name", sorted(ALL))
def test_smooth_points_match_finite_differences(name):
    f = ALL[name]
    # Away from every kink and singularity of the programs above.
    x = np.array([[-1.3, -0.4, 0.7, 0.45, 0.25], [0.3, -0.8, 0.55, -0.35, 0.9]])
    with np.errstate(divide="ignore", invalid="ignore"):  # sqrt(0) of a masked-away branch
        _check_against_finite_differences(f, x)


def _check_against_finite_differences(f, x):
    jac = tg.jacobian(f)(x.copy())
    np.testing.assert_allclose(jac, _central_jacobian(lambda v: f(v.copy()), x), rtol=1e-6, atol=1e-7)
    weights = np.linspace(0.5, 1.5, 5)
    loss = lambda v: np.sum(f(v) * weights)  # noqa: E731
    hess = tg.hessian(loss)(x.copy())
    fd = _central_jacobian(lambda v: tg.grad(loss)(v.copy()), x)
    np.testing.assert_allclose(hess, fd, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- issue regressions
def test_inplace_scaling_of_the_argument_is_differentiated():
    def f(x):
        x *= 2
        return np.sum(x)

    x = np.ones(3)
    np.testing.assert_array_equal(tg.grad(f)(x), [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(x, np.ones(3))


def test_writing_one_row_from_another_is_differentiated():
    def f(A):
        A[1] = A[0] * 10
        return np.sum(A)

    np.testing.assert_array_equal(tg.grad(f)(np.ones(5)), [11.0, 0.0, 1.0, 1.0, 1.0])


def test_overwritten_row_does_not_depend_on_its_old_value():
    def f(A, b):
        A[1] = b
        return A

    jA, jb = tg.jacobian(f, argnums=(0, 1))(np.ones(3), 2.0)
    np.testing.assert_array_equal(jA, np.diag([1.0, 0.0, 1.0]))
    np.testing.assert_array_equal(jb, [0.0, 1.0, 0.0])


def test_centring_the_argument_in_place():
    def f(x):
        x -= x.mean()
        return np.sum(x**2)

    x = np.array([0.0, 1.0, 5.0])
    np.testing.assert_allclose(tg.grad(f)(x), 2 * (x - x.mean()))
    np.testing.assert_allclose(tg.hessian(f)(x), 2 * (np.eye(3) - 1 / 3))


@pytest.mark.parametrize(
    "f",
    [
        lambda x: np.sqrt(np.maximum(x, 0)),
        lambda x: np.sqrt(np.clip(x, 0, None)),
        lambda x: np.where(x > 0, x, 0) ** 0.5,
    ],
)
def test_masked_singularity_jacobian_is_zero_not_nan(f):
    x = np.array([-1.0, 4.0])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(tg.jacobian(f)(x), [[0.0, 0.0], [0.0, 0.25]])
        np.testing.assert_array_equal(tg.jacfwd(f)(x), [[0.0, 0.0], [0.0, 0.25]])


def test_masked_singularity_hessian_is_zero_not_nan():
    with np.errstate(all="ignore"):
        h = tg.hessian(lambda x: np.sum(np.maximum(x, 0) ** 1.5))(np.array([-1.0, 4.0]))
    np.testing.assert_allclose(h, [[0.0, 0.0], [0.0, 0.375]])


def test_rule_for_a_plain_python_function_is_refused():
    def my_function(x):
        return x * 2

    with pytest.raises(TypeError, match="custom_vjp"):
        tg.defvjp(my_function, lambda g, ans, x: g * 3)
    with pytest.raises(TypeError, match="custom_vjp"):
        tg.defconstant(my_function)


def test_user_rules_receive_plain_arrays_in_a_banded_sweep():
    seen = []

    @tg.custom_vjp
    def double(x):
        return x * 2

    double.defvjp(lambda g, ans, x: seen.append(type(g)) or g * 2)
    np.testing.assert_array_equal(tg.jacobian(double)(np.ones(4)), 2 * np.eye(4))
    assert seen and all(t is np.ndarray for t in seen)


def _update(v):
    v += np.tanh(v) * 0.5  # a helper that updates its argument in place


@pytest.mark.parametrize("make", [np.float64, float, np.array], ids=["numpy-scalar", "python-float", "0-d-array"])
def test_in_place_update_in_a_helper_follows_numpy_mutability(make):
    # A NumPy scalar or Python float is immutable: the helper's update is local.
    # A 0-d array is written, so the caller sees the update.
    def f(x):
        _update(x)
        _update(x)
        return x * x

    x0 = make(0.3)
    value, grad = tg.value_and_grad(f)(x0)
    np.testing.assert_allclose(value, f(make(0.3)))
    eps = 1e-6
    fd = (f(make(0.3 + eps)) - f(make(0.3 - eps))) / (2 * eps)
    np.testing.assert_allclose(grad, fd, rtol=1e-7)


def test_reverse_jacobian_of_a_complex_output_refuses():
    # Real basis cotangents would see only the real part; forward mode gives the complex Jacobian.
    f = lambda x: x * (1.0 + 0.2j)  # noqa: E731
    x = np.array([1.0, 2.0])
    with pytest.raises(TypeError, match="mode='forward'"):
        tg.jacobian(f)(x)
    with pytest.raises(TypeError, match="mode='forward'"):
        tg.batch_jacobian(f)(x.reshape(2, 1))
    with tg.GradientTape() as tape:
        t = tape.watch(x)
        y = f(t)
    with pytest.raises(TypeError, match="mode='forward'"):
        tape.jacobian(y, t)
    np.testing.assert_allclose(tg.jacobian(f, mode="forward")(x), np.diag([1.0 + 0.2j, 1.0 + 0.2j]))
