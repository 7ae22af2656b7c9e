"""Per-example derivatives: tg.batch_jacobian and per-example gradients in one sweep."""

import numpy as np

import tapegrad as tg
from tapegrad.testing import check_grads

rng = np.random.default_rng(4)
W = rng.standard_normal((3, 5))


def rowwise(x):
    """(B, 3) -> (B, 5), row b depends only on x[b]."""
    h = np.tanh(x @ W)
    return h * np.sum(x**2, axis=1, keepdims=True)


def test_batch_jacobian_matches_loop_over_rows():
    x = rng.standard_normal((6, 3))
    J = tg.batch_jacobian(rowwise)(x)
    assert J.shape == (6, 5, 3)
    for b in range(6):
        np.testing.assert_allclose(J[b], tg.jacobian(lambda r: rowwise(r[None])[0])(x[b]), rtol=1e-12)
    # ... and the diagonal blocks of the full Jacobian (the rows are independent)
    full = tg.jacobian(rowwise)(x)
    np.testing.assert_allclose(J, np.stack([full[b, :, b, :] for b in range(6)]), rtol=1e-12)


def test_batch_jacobian_multidimensional_rows_and_float32():
    def f(x):  # (B, 2, 3) -> (B, 4)
        return np.concatenate([np.sum(np.sin(x), axis=2), np.prod(x, axis=2)], axis=1)

    x = rng.standard_normal((5, 2, 3)).astype(np.float32)
    J = tg.batch_jacobian(f)(x)
    assert J.shape == (5, 4, 2, 3) and J.dtype == np.float32
    for b in range(5):
        np.testing.assert_allclose(J[b], tg.jacobian(lambda r: f(r[None])[0])(x[b]), rtol=1e-5)


def test_batch_jacobian_is_differentiable():
    # The per-example Jacobians' Frobenius norm, checked against finite differences.
    check_grads(lambda x: np.sum(tg.batch_jacobian(rowwise)(x) ** 2), [rng.standard_normal((3, 3))], order=1)


def _logistic_data(n=8, d=3):
    X = rng.standard_normal((n, d))
    y = (rng.uniform(size=n) < 0.5).astype(float)
    return X, y


def per_example_logistic_loss(w, X, y):
    """Vector of per-example negative log-likelihoods (length B)."""
    z = X @ w
    return np.logaddexp(0.0, z) - y * z


def test_per_example_gradients_logistic_one_sweep():
    X, y = _logistic_data()
    w = rng.standard_normal(3)
    G = tg.jacobian(per_example_logistic_loss)(w, X, y)  # rows are per-example gradients
    assert G.shape == (8, 3)
    p = 1 / (1 + np.exp(-X @ w))
    np.testing.assert_allclose(G, (p - y)[:, None] * X, rtol=1e-12)  # closed form
    for i in range(8):
        gi = tg.grad(lambda w: per_example_logistic_loss(w, X[i : i + 1], y[i : i + 1])[0])(w)
        np.testing.assert_allclose(G[i], gi, rtol=1e-12)
    # the rows add up to the gradient of the total loss
    np.testing.assert_allclose(
        G.sum(axis=0), tg.grad(lambda w: np.sum(per_example_logistic_loss(w, X, y)))(w), rtol=1e-12
    )
    # per-example gradient norms (e.g. for clipping in DP-SGD) are differentiable too
    check_grads(lambda w: np.sum(tg.jacobian(per_example_logistic_loss)(w, X, y) ** 2), [w], order=1)


def test_per_example_gradients_mlp_parameters():
    params = [(rng.standard_normal((3, 4)) * 0.5, np.zeros(4)), (rng.standard_normal((4, 2)) * 0.5, np.zeros(2))]
    X = rng.standard_normal((5, 3))
    labels = np.array([0, 1, 1, 0, 1])

    def per_example_losses(params, X, labels):
        h = np.tanh(X @ params[0][0] + params[0][1])
        logits = h @ params[1][0] + params[1][1]
        logz = np.log(np.sum(np.exp(logits), axis=1))
        return logz - logits[np.arange(len(labels)), labels]

    per_ex = tg.jacobian(per_example_losses)(params, X, labels)  # leading axis: examples
    assert per_ex[0][0].shape == (5, 3, 4) and per_ex[1][1].shape == (5, 2)
    for i in range(5):
        gi = tg.grad(lambda p: per_example_losses(p, X[i : i + 1], labels[i : i + 1])[0])(params)
        for layer in range(2):
            for k in range(2):
                np.testing.assert_allclose(per_ex[layer][k][i], gi[layer][k], rtol=1e-10, atol=1e-14)


def test_per_example_input_gradients_with_batch_jacobian():
    # Gradient of each example's loss with respect to its own input row (saliency maps).
    X, y = _logistic_data()
    w = rng.standard_normal(3)
    G = tg.batch_jacobian(lambda X: per_example_logistic_loss(w, X, y)[:, None])(X)[:, 0, :]
    p = 1 / (1 + np.exp(-X @ w))
    np.testing.assert_allclose(G, (p - y)[:, None] * w, rtol=1e-12)
