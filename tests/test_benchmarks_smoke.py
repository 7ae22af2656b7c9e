"""Smoke test of the benchmark workloads (asv_benches/): they run, and tapegrad's answers are right.

Small sizes only, and no timed assertion: the numbers are checked against
closed forms and central finite differences, and compare.py's worker,
table and agreement check run once on tiny settings.
"""

import json
import os
import sys

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import check_grads

from .closed_forms import rosenbrock_hessian

BENCH_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "asv_benches")
sys.path.insert(0, BENCH_DIR)

import compare  # noqa: E402
import workloads as W  # noqa: E402


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


# ------------------------------------------------------------------------ W1
def test_w1_gradient_is_the_product_of_step_derivatives():
    (x,) = W.get("W1").small_args()
    expected = np.ones_like(x)
    v = x.copy()
    for _ in range(W.W1_STEPS):
        expected *= 1.01 * np.cos(v) + 0.5
        v = np.sin(v) * 1.01 + v * 0.5
    np.testing.assert_allclose(tg.grad(W.overhead_step)(x), expected, rtol=1e-10, atol=1e-300)


def test_w1_short_chain_matches_finite_differences():
    (x,) = W.get("W1").small_args()
    check_grads(lambda v: W.overhead_step(v, steps=5), [x], order=2)


# ------------------------------------------------------------------------ W2
def _mlp_manual_grads(params, inputs, onehot):
    """Hand-written backprop of workloads.mlp_loss."""
    hs, h = [inputs], inputs
    n = len(params) // 2
    for k in range(n):
        h = h @ params[2 * k] + params[2 * k + 1]
        if k < n - 1:
            h = np.tanh(h)
        hs.append(h)
    z = hs[-1] - hs[-1].max(axis=-1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)
    delta = (p - onehot) / onehot.shape[0]
    grads = [None] * len(params)
    for k in reversed(range(n)):
        grads[2 * k] = hs[k].T @ delta
        grads[2 * k + 1] = delta.sum(axis=0)
        if k:
            delta = (delta @ params[2 * k].T) * (1 - hs[k] ** 2)
    return grads


def test_w2_gradient_matches_manual_backprop():
    params, inputs, onehot = W.get("W2").small_args()
    got = tg.grad(W.mlp_loss)(params, inputs, onehot)
    want = _mlp_manual_grads(params, inputs, onehot)
    assert len(got) == 6
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12)


def test_w2_matches_finite_differences():
    params, inputs, onehot = W.get("W2").small_args()
    check_grads(lambda w1, b3: W.mlp_loss([w1] + params[1:5] + [b3], inputs, onehot),
                [params[0], params[5]], order=2)


# ------------------------------------------------------------------------ W3
def test_w3_gradient_closed_form():
    (x,) = W.get("W3").small_args()
    s, c, t = np.sin(x) * x, np.cos(x), np.tanh(x)
    expected = _sigmoid(s) * (np.cos(x) * x + np.sin(x)) * c - np.log1p(np.exp(s)) * np.sin(x) + 2 * t * (1 - t * t)
    np.testing.assert_allclose(tg.grad(W.elementwise_large)(x), expected, rtol=1e-10, atol=1e-12)
    check_grads(W.elementwise_large, [x[:8]], order=2)


# ------------------------------------------------------------------------ W4
def test_w4_jacobian_closed_form():
    x, w1, w2 = W.get("W4").small_args()
    h = np.tanh(w1 @ x)
    y = np.tanh(w2 @ h)
    expected = (1 - y * y)[:, None] * w2 * (1 - h * h)[None, :] @ w1
    got = tg.jacobian(W.jacobian_net)(x, w1, w2)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    chunked = tg.jacobian(W.jacobian_net, chunk_size=3)(x, w1, w2)
    np.testing.assert_allclose(chunked, expected, rtol=1e-10, atol=1e-12)
    check_grads(W.jacobian_net, [x, w1, w2], order=2)


# ------------------------------------------------------------------------ W5
def test_w5_hessian_closed_form():
    x, a = W.get("W5").small_args()
    p = _sigmoid(a @ x)
    expected = a.T @ ((p * (1 - p))[:, None] * a) + np.eye(x.size)
    np.testing.assert_allclose(tg.hessian(W.logistic_ridge)(x, a), expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(tg.grad(W.logistic_ridge)(x, a), a.T @ p + x, rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------------ W6
def test_w6_hessian_closed_form():
    (x,) = W.get("W6").small_args()
    np.testing.assert_allclose(tg.hessian(W.rosenbrock)(x), rosenbrock_hessian(x), rtol=1e-10, atol=1e-9)
    check_grads(W.rosenbrock, [x], order=2)


# ------------------------------------------------------------------------ W7
def test_w7_short_integration_matches_finite_differences():
    state, mass = W.get("W7").small_args()
    check_grads(lambda s: W.nbody_rk4(s, mass, steps=3), [state], order=2)


def test_w7_conserves_momentum_and_its_gradient_has_the_state_shape():
    state, mass = W.get("W7").small_args()
    g = tg.grad(W.nbody_rk4)(state, mass)
    assert g.shape == state.shape and np.all(np.isfinite(g))
    # The pairwise forces cancel: total momentum is constant through every RK4 stage.
    q = state[0]
    a = W._nbody_accel(q, mass, np)
    np.testing.assert_allclose(np.sum(mass[:, None] * a, axis=0), 0.0, atol=1e-12)


# ------------------------------------------------------------------------ W8
def test_w8_gradient_closed_form():
    theta, d2, y, eye = W.get("W8").small_args()
    s, ell2, noise = np.exp(theta[0]), np.exp(2 * theta[1]), np.exp(theta[2])
    kse = s * np.exp(-0.5 * d2 / ell2)
    k = kse + (noise + W.GP_JITTER) * eye
    kinv = np.linalg.inv(k)
    alpha = kinv @ y
    inner = kinv - np.outer(alpha, alpha)
    d_k = [kse, kse * d2 / ell2, noise * eye]  # dK / dtheta_i
    expected = np.array([0.5 * np.sum(inner * dk) for dk in d_k])
    np.testing.assert_allclose(tg.grad(W.gp_nlml)(theta, d2, y, eye), expected, rtol=1e-9, atol=1e-12)
    n = y.size
    value = 0.5 * y @ alpha + 0.5 * np.linalg.slogdet(k)[1] + 0.5 * n * np.log(2 * np.pi)
    np.testing.assert_allclose(W.gp_nlml(theta, d2, y, eye), value, rtol=1e-12)
    check_grads(lambda t: W.gp_nlml(t, d2, y, eye), [theta], order=2)


@pytest.mark.parametrize("key", ["W12", "W13"])
def test_w12_w13_are_w8s_likelihood_written_otherwise(key):
    args = W.get(key).small_args()
    np.testing.assert_allclose(W.get(key).fun(*args), W.gp_nlml(*args), rtol=1e-12)
    np.testing.assert_allclose(tg.grad(W.get(key).fun)(*args), tg.grad(W.gp_nlml)(*args), rtol=1e-9, atol=1e-12)


# ------------------------------------------------------------------------ W9
def test_w9_hvp_closed_form():
    x, v = W.get("W9").small_args()
    diag = 2 * (1 - x * x) / (1 + x * x) ** 2 - 0.1 * np.cos(x)
    expected = diag * v + rosenbrock_hessian(x) @ v
    np.testing.assert_allclose(tg.hvp(W.hvp_objective)(x, v), expected, rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(W.tapegrad_derivative(W.get("W9"))(x, v), expected, rtol=1e-10, atol=1e-9)


def test_w14_hvp_closed_form():
    x, v = W.get("W14").small_args()
    diag = np.exp(x) / (1 + np.exp(x)) ** 2 - np.cos(x)
    expected = diag * v + rosenbrock_hessian(x) @ v
    np.testing.assert_allclose(W.tapegrad_derivative(W.get("W14"))(x, v), expected, rtol=1e-10, atol=1e-9)


# ------------------------------------------------------------------------ W10
def _grid_gradient(x):
    g = x**3
    dx = x[1:, :] - x[:-1, :]
    dy = x[:, 1:] - x[:, :-1]
    px, py = 2 * dx / (1 + dx * dx), 2 * dy / (1 + dy * dy)
    g[1:, :] += px
    g[:-1, :] -= px
    g[:, 1:] += py
    g[:, :-1] -= py
    return g


def test_w10_hessian_matches_differences_of_the_closed_form_gradient():
    (x,) = W.get("W10").small_args()
    np.testing.assert_allclose(tg.grad(W.grid_energy)(x), _grid_gradient(x), rtol=1e-12, atol=1e-12)
    eps, n = 1e-6, x.shape[0]
    fd = np.zeros((n, n, n, n))
    for i in range(n):
        for j in range(n):
            d = np.zeros_like(x)
            d[i, j] = eps
            fd[..., i, j] = (_grid_gradient(x + d) - _grid_gradient(x - d)) / (2 * eps)
    hess = tg.hessian(W.grid_energy)(x)
    assert hess.shape == (n, n, n, n)
    np.testing.assert_allclose(hess, fd, rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------------ W11
def test_w11_per_example_gradients_closed_form():
    w, x, y = W.get("W11").small_args()
    expected = (-y * _sigmoid(-y * (x @ w)))[:, None] * x
    np.testing.assert_allclose(W.tapegrad_derivative(W.get("W11"))(w, x, y), expected, rtol=1e-12, atol=1e-14)
    # One row is one example's loss: the form vmap(grad(...)) differentiates.
    np.testing.assert_allclose(tg.grad(W.per_example_losses)(w, x[2], y[2]), expected[2], rtol=1e-12)


# ------------------------------------------------------------------------ full-size data, memory hooks
@pytest.mark.parametrize("key", list(W.WORKLOADS))
def test_full_size_data_is_fixed_and_float64(key):
    w = W.get(key)
    first, again = w.make_args(), w.make_args()
    leaves = [a for arg in first for a in (arg if isinstance(arg, list) else [arg])]
    assert all(a.dtype == np.float64 for a in leaves)
    np.testing.assert_array_equal(np.ravel(w.forward(first)), np.ravel(w.forward(again)))


def test_chunked_jacobian_and_deep_chain_scenarios_agree():
    x, a, b = W.wide_to_narrow_args(n=4, hidden=30, m=6)
    full = tg.jacobian(W.wide_to_narrow)(x, a, b)
    expected = b @ ((1 - np.tanh(a @ x) ** 2)[:, None] * a)
    np.testing.assert_allclose(full, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(tg.jacobian(W.wide_to_narrow, chunk_size=4)(x, a, b), expected, rtol=1e-10)
    (v,) = W.deep_chain_args(n=5)
    d = np.ones_like(v)
    y = v.copy()
    for _ in range(40):
        d *= 0.9 * (1 - np.tanh(y) ** 2) + 0.1
        y = np.tanh(y) * 0.9 + 0.1 * y
    np.testing.assert_allclose(tg.grad(lambda u: W.deep_chain(u, depth=40, block_size=10))(v), d, rtol=1e-10)
    assert W.traced_peak(lambda: np.ones(100_000)) >= 800_000


def test_per_op_definitions_differentiate():
    x, y = W.op_args(10)
    for name, op in W.OPS.items():
        check_grads(lambda v, _op=op: np.sum(_op(v, y)), [x], order=1)
    for name, step in W.CHAIN_OPS.items():
        check_grads(lambda v, _s=step: W.chain(_s, v, y, 3), [x], order=1)


# ------------------------------------------------------------------------ compare.py
def test_compare_worker_table_and_agreement(tmp_path):
    compare.run_worker("tapegrad", ["W1", "W6"], repeat=1, min_time=0.0, budget=0.0, outdir=str(tmp_path))
    report = json.loads((tmp_path / "tapegrad.json").read_text())
    assert report["status"] == "ok"
    assert [e["workload"] for e in report["entries"]] == ["W1", "W6"]
    assert all(e["status"] == "ok" and len(e["samples"]) == 3 for e in report["entries"])
    merged = {("tapegrad", e["workload"], e["api"]): e for e in report["entries"]}
    rows = compare._rows(merged, ["W1", "W6"], ["tapegrad"], str(tmp_path))
    assert all(r["max_abs_diff"] == 0.0 and r["status"] == "ok" for r in rows)
    hess = compare._load(str(tmp_path), merged[("tapegrad", "W6", "hessian")]["result_file"])[0]
    np.testing.assert_allclose(hess, rosenbrock_hessian(W.get("W6").make_args()[0]), rtol=1e-10, atol=1e-8)
    text = compare.format_report({"machine": compare.machine_info(), "libraries": {"tapegrad": report},
                                  "rows": rows, "targets": compare.targets(rows),
                                  "options": {"repeat": 1, "rounds": 1, "min_time": 0.0}})
    assert "tapegrad[hessian]" in text and "n/a (torch[functional.hessian(vectorize=True)] not measured)" in text


def test_compare_worker_runs_the_new_kinds(tmp_path):
    compare.run_worker("tapegrad", ["W11"], repeat=1, min_time=0.0, budget=0.0, outdir=str(tmp_path))
    report = json.loads((tmp_path / "tapegrad.json").read_text())
    (entry,) = report["entries"]
    assert entry["status"] == "ok" and entry["api"] == "jacobian"
    rows = compare._rows({("tapegrad", "W11", "jacobian"): entry}, ["W11"], ["tapegrad"], str(tmp_path))
    (grads,) = compare._load(str(tmp_path), entry["result_file"])
    w, x, y = W.get("W11").make_args()
    np.testing.assert_allclose(grads, (-y * _sigmoid(-y * (x @ w)))[:, None] * x, rtol=1e-12, atol=1e-15)
    assert rows[0]["status"] == "ok"


def test_best_eager_target_takes_the_fastest_non_jit_api():
    rows = [
        {"workload": "W8", "lib": "tapegrad", "api": "grad", "median_s": 2.0, "ratio": 3.0},
        {"workload": "W8", "lib": "torch", "api": "slow", "median_s": 4.0, "ratio": 6.0},
        {"workload": "W8", "lib": "torch", "api": "fast", "median_s": 2.5, "ratio": 4.0},
        {"workload": "W8", "lib": "torch", "api": "jit(fast)", "median_s": 0.1, "ratio": 0.2},
    ]
    (w8,) = [t for t in compare.targets(rows) if t["workload"] == "W8"]
    assert w8["value"] == pytest.approx(0.8) and w8["verdict"] == "PASS" and "[fast]" in w8["target"]
    rows[2]["median_s"] = 2.4
    (w8,) = [t for t in compare.targets(rows) if t["workload"] == "W8"]
    assert w8["verdict"] == "FAIL"


class _NoLinalg(compare.Adapter):
    name = "nolinalg"
    apis = {"grad": ["grad"]}
    xp = object()


def test_a_peer_without_linalg_is_told_clearly():
    with pytest.raises(NotImplementedError, match="nolinalg has no linalg"):
        _NoLinalg().build("grad", W.get("W8"), ())


def test_compare_flags_a_wrong_result(tmp_path):
    ref = [np.array([1.0, 2.0])]
    np.savez(tmp_path / "ref.npz", *ref)
    np.savez(tmp_path / "bad.npz", np.array([1.0, 2.1]))
    merged = {
        ("tapegrad", "W1", "grad"): {"status": "ok", "samples": [1.0], "numpy_samples": [0.5], "result_file": "ref.npz"},
        ("peer", "W1", "grad"): {"status": "ok", "samples": [2.0], "numpy_samples": [0.5], "result_file": "bad.npz"},
    }
    rows = compare._rows(merged, ["W1"], ["tapegrad", "peer"], str(tmp_path))
    peer = rows[1]
    assert peer["status"] == "MISMATCH" and peer["max_abs_diff"] == pytest.approx(0.1)
    assert peer["ratio"] == 4.0


def test_missing_library_is_reported_not_raised(tmp_path, monkeypatch):
    class Missing(compare.Adapter):
        def __init__(self):
            import tapegrad_no_such_peer  # noqa: F401

    monkeypatch.setitem(compare.ADAPTERS, "missing", Missing)
    compare.run_worker("missing", ["W1"], repeat=1, min_time=0.0, budget=0.0, outdir=str(tmp_path))
    report = json.loads((tmp_path / "missing.json").read_text())
    assert report["status"].startswith("not installed") and report["entries"] == []


# ------------------------------------------------------------------------ full sizes (slow)
@pytest.mark.slow
def test_full_size_workloads_match_closed_forms():
    """The benchmarked sizes themselves: W3 to W6 against closed forms (``pytest -m slow``)."""
    (x,) = W.get("W3").make_args()
    s, c, t = np.sin(x) * x, np.cos(x), np.tanh(x)
    expected = _sigmoid(s) * (np.cos(x) * x + np.sin(x)) * c - np.log1p(np.exp(s)) * np.sin(x) + 2 * t * (1 - t * t)
    np.testing.assert_allclose(tg.grad(W.elementwise_large)(x), expected, rtol=1e-9, atol=1e-12)

    x, w1, w2 = W.get("W4").make_args()
    h = np.tanh(w1 @ x)
    y = np.tanh(w2 @ h)
    expected = (1 - y * y)[:, None] * w2 * (1 - h * h)[None, :] @ w1
    np.testing.assert_allclose(tg.jacobian(W.jacobian_net)(x, w1, w2), expected, rtol=1e-9, atol=1e-12)

    x, a = W.get("W5").make_args()
    p = _sigmoid(a @ x)
    expected = a.T @ ((p * (1 - p))[:, None] * a) + np.eye(x.size)
    np.testing.assert_allclose(tg.hessian(W.logistic_ridge)(x, a), expected, rtol=1e-9, atol=1e-10)

    (x,) = W.get("W6").make_args()
    np.testing.assert_allclose(tg.hessian(W.rosenbrock)(x), rosenbrock_hessian(x), rtol=1e-10, atol=1e-8)
