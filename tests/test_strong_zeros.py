"""Strong zeros: a cotangent that is exactly zero contributes exactly zero, whatever the partial.

Masked and overwritten values (the unselected branch of ``np.where``, an entry
written over, a slice that is not read, a product with a structural zero) get a
zero cotangent; where their local partial derivative is infinite or NaN, plain
arithmetic makes ``0 * inf = NaN`` and that NaN spreads into the result.  Each
program below has such a masked singularity.  Its gradient and Hessian must be
finite wherever central finite differences (of the function, of the gradient) are
finite, equal to them there, and every mode must give the numbers of stacked single
VJPs.  Genuine singularities stay visible.
"""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import backward
from tests.test_modes_agree import assert_same_numbers, stacked_hvps, stacked_vjps

X = np.array([-1.3, 0.6, -0.4, 1.7, 2.2, -2.1])


def relu(x):
    return np.maximum(x, 0)


def _overwrite_after_division(x):
    # scikit-learn's _incremental_mean_and_var: 0/0 on the first batch, then overwritten.
    count = np.zeros_like(x) + (x > 0)
    ratio = x / count
    updated = ratio.copy()
    zeros = count == 0
    updated[zeros] = np.sin(x)[zeros]
    return np.sum(updated * x)


def _standard_scaler_like(x):
    X2 = np.reshape(x, (2, 3))
    last_sum = np.zeros(3) * X2[0]
    last_count = np.zeros(3)
    new_sum = np.sum(X2, axis=0)
    new_count = 2.0
    updated_count = last_count + new_count
    last_over_new = last_count / new_count
    updated_mean = (last_sum + new_sum) / updated_count
    updated_var = np.var(X2, axis=0) * new_count
    partial = last_sum / last_over_new  # 0 / 0
    correction = last_over_new / updated_count * (partial - new_sum) ** 2
    zeros = last_count == 0
    correction[zeros] = updated_var[zeros]  # the NaN entries are overwritten
    return np.sum(correction / updated_count) + np.sum(updated_mean**2)


def _setitem_mask(x):
    y = 1.0 / relu(x)
    y[~(x > 0)] = 0.0
    return np.sum(y * x)


def _divide_where(x):
    d = relu(x)
    out = np.zeros_like(x)
    mask = d != 0
    out[mask] = (np.sin(x) / d)[mask]
    return np.sum(out)


# Constant matrices with entries that are not finite, in rows or columns the program never reads.
A_INF = np.arange(24.0).reshape(4, 6) / 7.0
A_INF[3, 1], A_INF[3, 4] = np.inf, -np.inf
B_INF = np.arange(18.0).reshape(6, 3) / 5.0 - 1.0
B_INF[2, 2], B_INF[4, 2] = np.nan, np.inf
T_INF = np.array([[0.5, np.inf], [-1.0, 2.0], [0.25, -np.inf]])

PROGRAMS = {
    # the two of the issue
    "cumsum_sqrt_relu": lambda x: np.sum(np.cumsum(np.sqrt(relu(x)))),
    "sqrt_relu_times_reversed": lambda x: np.sum(np.sqrt(relu(x)) * x[::-1]),
    # np.where, select, clip, maximum: the unselected branch
    "where_sqrt": lambda x: np.sum(np.where(x > 0, np.sqrt(x), 0.0)),
    "where_relu_pow_half": lambda x: np.sum(np.where(x > 0, x, 0.0) ** 0.5),
    "where_reciprocal": lambda x: np.sum(np.where(relu(x) > 0, 1.0 / relu(x), 0.0)),
    "where_y_over_x": lambda x: np.sum(np.where(relu(x) != 0, x**2 / relu(x), 0.0)),
    "where_log_relu": lambda x: np.sum(np.where(x > 0, np.log(relu(x)), 0.0)),
    "where_log2_relu": lambda x: np.sum(np.where(x > 0, np.log2(relu(x)) * x, 0.0)),
    "where_log10_relu": lambda x: np.sum(np.where(x > 0, np.log10(relu(x)), 0.0) ** 2),
    "where_arcsin": lambda x: np.sum(np.where(np.abs(x) < 1, np.arcsin(x), 0.0)),
    "where_arccos": lambda x: np.sum(np.where(np.abs(x) < 1, np.arccos(x), 1.0)),
    "where_arctanh_clip": lambda x: np.sum(np.where(np.abs(x) < 1, np.arctanh(np.clip(x, -1, 1)), 0.0)),
    "where_exp_overflow": lambda x: np.sum(np.where(x < 1, np.exp(x * 800.0), 0.0)),
    "where_entropy": lambda x: np.sum(np.where(relu(x) > 0, relu(x) * np.log(relu(x)), 0.0)),
    "where_cbrt": lambda x: np.sum(np.where(x > 0, np.cbrt(relu(x)), 0.0) * x),
    "select_sqrt": lambda x: np.sum(np.select([x > 1, x > 0], [np.sqrt(x - 1), x], 0.0)),
    "sqrt_clip": lambda x: np.sum(np.sqrt(np.clip(x, 0, None)) * np.cos(x)),
    "minimum_sqrt": lambda x: np.sum(np.minimum(np.sqrt(relu(x)), 1.2)),
    "relu_pow_1_5": lambda x: np.sum(relu(x) ** 1.5),
    "relu_pow_2_5_cumsum": lambda x: np.sum(np.cumsum(relu(x) ** 2.5)),
    "cbrt_relu_pow4": lambda x: np.sum(np.cbrt(relu(x)) ** 4),
    "sqrt_relu_matmul": lambda x: np.sum(np.sqrt(relu(x)) @ np.arange(12.0).reshape(6, 2)),
    "arctan2_relu": lambda x: np.sum(np.where(relu(x) > 0, np.arctan2(relu(x), relu(x)), 0.0) * x),
    # np.isfinite / np.isnan masks, np.nan_to_num
    "isfinite_log": lambda x: np.sum(np.where(np.isfinite(np.log(relu(x))), np.log(relu(x)), 0.0)),
    "isnan_sqrt": lambda x: np.sum(np.where(np.isnan(np.sqrt(x)), 0.0, np.sqrt(x))),
    "nan_to_num_sqrt": lambda x: np.sum(np.nan_to_num(np.sqrt(x)) * x),
    "nan_to_num_quotient": lambda x: np.sum(np.nan_to_num(x / relu(x), posinf=0.0, neginf=0.0)),
    # masked slices, overwrites, structural zeros
    "slice_of_sqrt": lambda x: np.sum(np.sqrt(relu(x))[1::2] ** 3),
    "fancy_of_sqrt": lambda x: np.sum(np.sqrt(relu(x))[[1, 3, 4]]),
    "zero_times_sqrt": lambda x: np.sum(0.0 * np.sqrt(relu(x)) + x**2),
    "overwrite_after_division": _overwrite_after_division,
    "standard_scaler_like": _standard_scaler_like,
    "setitem_mask": _setitem_mask,
    "divide_then_masked_copy": _divide_where,
    "power_traced_exponent": lambda x: np.sum(np.where(x > 0, relu(x) ** np.abs(x[::-1]), 0.0)),
    # a contraction whose constant has inf or NaN where the cotangent is zero (its strong VJPs)
    "matmul_unread_inf_row": lambda x: np.sum((A_INF @ np.sin(x))[:2] ** 2),
    "vector_matmul_unread_nan_column": lambda x: np.sum((np.cos(x) @ B_INF)[:2] * x[:2]),
    "tensordot_unread_inf_column": lambda x: np.sum(np.tensordot(np.sin(x).reshape(2, 3), T_INF, axes=1)[:, 0] ** 2),
}


def _fd_gradient(f, x, h=1e-6):
    out = np.empty_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        out[i] = (f(x + e) - f(x - e)) / (2 * h)
    return out


def _fd_jacobian(g, x, h=1e-6):
    rows = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        rows.append((g(x + e) - g(x - e)) / (2 * h))
    return np.stack(rows, axis=-1)


def test_at_least_thirty_programs():
    assert len(PROGRAMS) >= 30


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_first_and_second_order_are_finite_where_finite_differences_are(name):
    f = PROGRAMS[name]
    x = X.copy()
    with np.errstate(all="ignore"):
        grad = tg.grad(f)(x)
        fd = _fd_gradient(f, x)
        finite = np.isfinite(fd)
        assert finite.any()
        assert np.isfinite(grad[finite]).all(), (grad, fd)
        np.testing.assert_allclose(grad[finite], fd[finite], rtol=1e-5, atol=1e-6)
        hess = tg.hessian(f)(x)
        fd2 = _fd_jacobian(tg.grad(f), x)
        finite = np.isfinite(fd2)
        assert np.isfinite(hess[finite]).all(), (hess, fd2)
        np.testing.assert_allclose(hess[finite], fd2[finite], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(x, X)  # inputs never written


def _tape_hessian(f, x):
    with tg.GradientTape() as outer:
        xo = outer.watch(x.copy())
        with tg.GradientTape() as inner:
            xi = inner.watch(xo)
            y = f(xi)
        g = inner.gradient(y, xi)
    return outer.jacobian(g, xo)


def _dense_inside(compute):
    previous = backward.STRUCTURED
    backward.STRUCTURED = False
    try:
        return compute()
    finally:
        backward.STRUCTURED = previous


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_mode_gives_the_numbers_of_stacked_single_products(name):
    f = PROGRAMS[name]
    x = X.copy()
    gradient = tg.grad(f)
    with np.errstate(all="ignore"):
        expected = stacked_hvps(f, x)
        modes = {
            "hessian": tg.hessian(f)(x),
            "hessian_chunked": tg.hessian(f, chunk_size=2)(x),
            "hessian_dense_inside": _dense_inside(lambda: tg.hessian(f)(x)),
            "jacobian_of_grad": tg.jacobian(gradient)(x),
            "jacfwd_of_grad": tg.jacfwd(gradient)(x),
            "stacked_vjps_of_grad": stacked_vjps(gradient, x),
            "batched_vjp_of_grad": tg.vjp(gradient, x)[1](np.eye(x.size))[0],
            "batched_hvp": tg.hvp(f)(x, np.eye(x.size)),
            "tape": _tape_hessian(f, x),
        }
        for mode, value in modes.items():
            try:
                assert_same_numbers(value, expected)
            except AssertionError as exc:
                raise AssertionError(f"{mode} differs from stacked HVPs") from exc
        # first order: every way of asking
        g1 = gradient(x)
        assert_same_numbers(tg.vjp(f, x)[1](1.0)[0], g1)
        assert_same_numbers(tg.jacobian(f)(x), g1)
        assert_same_numbers(tg.jacfwd(f)(x), g1)
        assert_same_numbers(tg.vjp(f, x)[1](np.ones((3,)))[0], np.stack([g1] * 3))


def _elementwise(x):
    """A vector output: each program's masked singularity, kept per entry."""
    return np.where(x > 0, np.sqrt(relu(x)) * x, 0.0) + np.cumsum(np.sqrt(relu(x)), axis=-1)


def test_jacobian_modes_of_a_vector_output():
    x = X.copy()
    with np.errstate(all="ignore"):
        expected = stacked_vjps(_elementwise, x)
        assert np.isfinite(expected).all()
        for value in (
            tg.jacobian(_elementwise)(x),
            tg.jacobian(_elementwise, chunk_size=4)(x),
            _dense_inside(lambda: tg.jacobian(_elementwise)(x)),
            tg.jacfwd(_elementwise)(x),
        ):
            assert_same_numbers(value, expected)
        rows = np.stack([x, -x[::-1]])
        per_row = tg.batch_jacobian(_elementwise)(rows)
        full = stacked_vjps(_elementwise, rows)
        assert_same_numbers(per_row, np.stack([full[b, :, b, :] for b in range(2)]))


def test_genuine_singularities_stay_visible():
    with np.errstate(all="ignore"):
        assert np.isposinf(tg.grad(np.sqrt)(0.0))
        assert np.isnan(tg.grad(lambda x: x * 0.0 / 0.0)(1.0))  # 0/0 taken on purpose
        assert np.isnan(tg.grad(lambda x: (x - x) / (x - x))(1.0))
        g = tg.grad(lambda x: np.sum(np.sqrt(x)))(np.array([0.0, 4.0]))
        assert np.isposinf(g[0]) and g[1] == 0.25
        h = tg.hessian(lambda x: np.sum(x**1.5))(np.array([0.0, 4.0]))
        assert np.isposinf(h[0, 0]) and h[1, 1] == pytest.approx(0.375)


def test_float32_is_kept():
    x = X.astype(np.float32)
    with np.errstate(all="ignore"):
        g = tg.grad(PROGRAMS["where_sqrt"])(x)
        h = tg.hessian(PROGRAMS["cumsum_sqrt_relu"])(x)
    assert g.dtype == np.float32 and h.dtype == np.float32
    assert np.isfinite(g).all()


def test_the_function_is_recorded_twice_only_when_a_result_holds_nan():
    calls = []

    def f(x):
        calls.append(1)
        return np.sum(np.where(x > 0, np.sqrt(x), 0.0))

    with np.errstate(all="ignore"):
        tg.grad(f)(np.array([1.0, 2.0]))
        assert len(calls) == 1
        tg.grad(f)(X)  # sqrt of negatives: NaN partials met by zeros
        assert len(calls) == 3


def test_dask_cotangents_have_strong_zeros():
    da = pytest.importorskip("dask.array")
    x = da.from_array(X, chunks=3)
    f = PROGRAMS["where_sqrt"]
    with np.errstate(all="ignore"):
        g = tg.grad(f)(x)
        assert isinstance(g, da.Array)
        np.testing.assert_array_equal(g.compute(), tg.grad(f)(X))


@pytest.mark.parametrize("x0", [1.5, -0.7, np.array(1.5), np.array(-2.0)])
def test_zero_dimensional_inputs(x0):
    # A 0-d result of the sweep can be a NumPy scalar: it is looked at too.
    def f(v):
        return np.where(np.abs(v) < 1, np.arcsin(v), 0.0) + np.where(v > 0, np.sqrt(v), 0.0)

    with np.errstate(all="ignore"):
        g = tg.grad(f)(x0)
        h = tg.hessian(f)(x0)
        v = float(x0)
        fd = (f(v + 1e-6) - f(v - 1e-6)) / 2e-6
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)
        assert np.isfinite(h)


def test_forward_mode_keeps_genuine_infinities_and_zero_tangents_are_strong():
    # The transpose trick sweeps with placeholder cotangents whose zeros mean nothing:
    # no strong zeros there; the tangents' own zeros are strong.
    x = np.array([0.0, 4.0])
    with np.errstate(all="ignore"):
        assert_same_numbers(tg.jvp(np.sqrt, (x,), (np.array([1.0, 1.0]),))[1], np.array([np.inf, 0.25]))
        assert_same_numbers(tg.jvp(np.sqrt, (x,), (np.array([0.0, 1.0]),))[1], np.array([0.0, 0.25]))
        expected = stacked_vjps(np.sqrt, x)
        assert_same_numbers(expected, np.array([[np.inf, 0.0], [0.0, 0.25]]))
        assert_same_numbers(tg.jacfwd(np.sqrt)(x), expected)
        assert_same_numbers(tg.jacobian(np.sqrt)(x), expected)


def test_checkpointed_code_has_strong_zeros_too():
    def f(x):
        return np.where(x > 0, np.sqrt(x), 0.0) * x[::-1]

    cf = tg.checkpoint(f)
    with np.errstate(all="ignore"):
        for order in (tg.grad, tg.hessian):
            plain = order(lambda x: np.sum(f(x)))(X)
            assert np.isfinite(plain).all()
            assert_same_numbers(order(lambda x: np.sum(cf(x)))(X), plain)


def test_sparse_jacobians_have_strong_zeros_too():
    import inspect

    if "sparse" not in inspect.signature(tg.jacobian).parameters:
        pytest.skip("no sparse Jacobians in this tapegrad")
    pytest.importorskip("scipy.sparse")
    x = X.copy()
    with np.errstate(all="ignore"):
        for name in ("cumsum_sqrt_relu", "sqrt_relu_times_reversed", "where_sqrt", "overwrite_after_division"):
            g = tg.grad(PROGRAMS[name])
            sparse = tg.jacobian(g, sparse=True)(x)
            assert_same_numbers(sparse.toarray() if hasattr(sparse, "toarray") else sparse, tg.hessian(PROGRAMS[name])(x))
        sparse = tg.jacobian(_elementwise, sparse=True)(x)
        assert_same_numbers(sparse.toarray() if hasattr(sparse, "toarray") else sparse, stacked_vjps(_elementwise, x))


def _brute_matmul_cotangent(g, m):
    """``g @ m.T`` with strong zeros, term by term: the nonzero entries of ``g`` only."""
    out = np.empty((g.shape[0], m.shape[0]))
    for i in range(g.shape[0]):
        for k in range(m.shape[0]):
            terms = [g[i, j] * m[k, j] for j in range(g.shape[1]) if g[i, j] != 0]
            out[i, k] = np.sum(terms) if terms else 0.0
    return out


def test_strong_contraction_sums_only_the_nonzero_cotangent_entries():
    from tapegrad.registry import RULES

    rng = np.random.default_rng(7)
    x, m = rng.standard_normal((5, 4)), rng.standard_normal((4, 6))
    m[0, 1], m[2, 1] = np.inf, -np.inf  # both infinities in one column of m.T's row
    m[1, 3], m[3, 5] = np.nan, np.inf
    g = rng.standard_normal((5, 6))
    g[0, 1] = g[1, 3] = g[2, :] = 0.0
    g[3, 1] = -0.0  # a negative zero is a zero
    strong_x = RULES[np.matmul].strong_vjps[0]
    with np.errstate(all="ignore"):
        got = strong_x(g, x @ m, x, m)
        plain = RULES[np.matmul].vjps[0](g, x @ m, x, m)
        expected = _brute_matmul_cotangent(g, m)
    assert np.isnan(plain).any() and not np.array_equal(plain, expected, equal_nan=True)
    np.testing.assert_allclose(got, expected, rtol=1e-14, atol=1e-14)
    assert np.array_equal(np.isnan(got), np.isnan(expected)) and np.array_equal(np.isinf(got), np.isinf(expected))
    # a finite cotangent against a finite matrix: the plain VJP's very numbers
    assert RULES[np.matmul].strong_vjps[0](g, x @ m, x, np.nan_to_num(m)).tobytes() == (g @ np.nan_to_num(m).T).tobytes()


def test_contractions_with_unread_infinities_agree_with_stacked_vjps():
    def f(w):  # the outputs that read B_INF's third column and T_INF's second are dropped
        return np.tanh(w @ B_INF)[:2] + np.tensordot(np.sin(w[:3]), T_INF, axes=1)[0]

    w = np.linspace(-1.0, 1.0, 6)
    with np.errstate(all="ignore"):
        jac = tg.jacobian(f)(w)
        assert_same_numbers(jac, stacked_vjps(f, w))
        assert_same_numbers(tg.jacfwd(f)(w), jac)
    assert np.isfinite(jac).all()
    np.testing.assert_allclose(jac[:, 3:], (1.0 - np.tanh(w @ B_INF[:, :2]) ** 2)[:, None] * B_INF[3:, :2].T, rtol=1e-14)
