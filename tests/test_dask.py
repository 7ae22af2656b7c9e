"""Dask values through the tape: lazy results, no hidden computes, same numbers as NumPy.

Every test uses small arrays cut into small chunks, so that reductions,
slices (stencils) and scatters cross chunk boundaries.  A Dask callback
counts the graphs a local scheduler computes: tracing and the backward sweep
must compute none.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

import tapegrad as tg
from tapegrad.examples import smooth_field_energy
from tapegrad.lazy import LazyComputeError, LazyFallbackError

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
from dask.callbacks import Callback  # noqa: E402

from tests.test_fuzz import UNARY, build, programs  # noqa: E402

pytestmark = pytest.mark.filterwarnings("error:.*is not implemented by Dask array")


class Computes(Callback):
    """Counts the graphs that local schedulers start computing."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def _start(self, dsk) -> None:
        self.count += 1


def _field(n=23, chunks=5, dtype=np.float64, seed=0):
    u = np.random.default_rng(seed).uniform(-1.5, 1.5, n).astype(dtype)
    return u, da.from_array(u, chunks=chunks)


def _lazy_like(result, source):
    assert isinstance(result, da.Array)
    assert result.shape == source.shape and result.dtype == source.dtype
    assert result.chunks == source.chunks


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_grad_is_lazy_chunked_like_the_source_and_matches_numpy(dtype):
    u, ud = _field(dtype=dtype)
    with Computes() as c:
        value, g = tg.value_and_grad(smooth_field_energy)(ud)
    assert c.count == 0
    _lazy_like(g, ud)
    v_np, g_np = tg.value_and_grad(smooth_field_energy)(u)
    value, g = dask.compute(value, g)  # one shared computation
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(value, v_np, rtol=tol)
    np.testing.assert_allclose(g, g_np, rtol=tol, atol=tol)


def test_reduction_cotangents_keep_the_chunks_of_the_input():
    # A scalar cotangent broadcast back over a Dask input must not become one chunk as large
    # as the input (which a later rechunk would split): that would defeat out-of-core sweeps.
    _, ud = _field(n=40, chunks=7)
    g = tg.grad(lambda u: np.mean(np.log1p(u * u)) + np.sum(np.tanh(u)))(ud)
    assert g.chunks == ud.chunks
    assert not [name for name in g.dask.layers if name.startswith("rechunk")]


def test_grad_matches_finite_differences():
    u, ud = _field(n=11, chunks=3)
    g = tg.grad(smooth_field_energy)(ud).compute()
    eps = 1e-6
    for k in range(u.size):
        e = np.zeros_like(u)
        e[k] = eps
        fd = (smooth_field_energy(u + e) - smooth_field_energy(u - e)) / (2 * eps)
        assert g[k] == pytest.approx(fd, rel=1e-6, abs=1e-9)


def test_vjp_jvp_hvp_gradients_and_tape_stay_lazy():
    u, ud = _field()
    v, _ = _field(seed=1)
    vd = da.from_array(v, chunks=4)
    f = lambda x: np.tanh(x[1:] * x[:-1])  # noqa: E731
    loss = lambda x: np.sum(f(x) ** 2)  # noqa: E731
    w = np.linspace(0.0, 1.0, u.size - 1)
    with Computes() as c:
        _, pullback = tg.vjp(f, ud)
        (vjp_d,) = pullback(da.from_array(w, chunks=6))
        _, jvp_d = tg.jvp(f, (ud,), (vd,))
        hvp_d = tg.hvp(loss)(ud, vd)
        with tg.GradientTape() as tape:
            x = tape.watch(ud)
            y = loss(x)
        tape_d = tape.gradient(y, x)
        with tg.GradientTape() as tape2:
            x2 = tape2.watch(ud)
            y2 = loss(x2)
        (grads_d,) = tg.gradients(y2, [x2])
    assert c.count == 0
    for lazy in (vjp_d, hvp_d, tape_d, grads_d):
        _lazy_like(lazy, ud)
    assert isinstance(jvp_d, da.Array)
    _, pullback = tg.vjp(f, u)
    np.testing.assert_allclose(vjp_d.compute(), pullback(w)[0], rtol=1e-12)
    np.testing.assert_allclose(jvp_d.compute(), tg.jvp(f, (u,), (v,))[1], rtol=1e-12)
    np.testing.assert_allclose(hvp_d.compute(), tg.hvp(loss)(u, v), rtol=1e-12)
    np.testing.assert_allclose(tape_d.compute(), tg.grad(loss)(u), rtol=1e-12)
    np.testing.assert_allclose(grads_d.compute(), tg.grad(loss)(u), rtol=1e-12)


def test_small_jacobian_and_hessian():
    u, ud = _field(n=7, chunks=3)
    f = lambda x: np.cumsum(np.sin(x))[::2]  # noqa: E731
    J = tg.jacobian(f)(ud)
    H = tg.hessian(smooth_field_energy)(ud)
    assert isinstance(J, da.Array) and isinstance(H, da.Array)
    np.testing.assert_allclose(J.compute(), tg.jacobian(f)(u), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(H.compute(), tg.hessian(smooth_field_energy)(u), rtol=1e-10, atol=1e-14)


def test_mixed_dask_source_and_numpy_constants():
    u, ud = _field()
    weights = np.linspace(0.5, 2.0, u.size)
    loss = lambda x, w, s: np.sum(w * np.sin(x) ** 2) * s + np.dot(x, w)  # noqa: E731
    with Computes() as c:
        g, gw = tg.grad(loss, argnums=(0, 1))(ud, weights, 3.0)
    assert c.count == 0
    _lazy_like(g, ud)
    g_np, gw_np = tg.grad(loss, argnums=(0, 1))(u, weights, 3.0)
    np.testing.assert_allclose(g.compute(), g_np, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(gw), gw_np, rtol=1e-12)


def test_fallback_to_numpy_is_an_error_naming_the_function():
    _, ud = _field()
    with pytest.raises(LazyFallbackError, match="numpy.argsort"):
        tg.grad(lambda x: np.sum(np.sort(x) * np.arange(23.0)))(ud)


def test_a_hidden_compute_during_the_sweep_is_an_error():
    _, ud = _field()

    @tg.custom_vjp
    def scaled(x):
        return 2.0 * x

    # A careless VJP that converts the cotangent with np.asarray: that computes it.
    scaled.defvjp(lambda g, ans, x: 2.0 * np.asarray(g))
    with pytest.raises(LazyComputeError, match="computed during tapegrad's backward sweep"):
        tg.grad(lambda x: np.sum(scaled(x) ** 2))(ud)


def test_control_flow_on_a_dask_value_computes_explicitly():
    u, ud = _field()

    def f(x):
        if np.sum(x) > 0:  # a truth test: explicit control flow, computed on purpose
            return np.sum(x**2)
        return np.sum(x**3)

    np.testing.assert_allclose(tg.grad(f)(ud).compute(), tg.grad(f)(u), rtol=1e-12)


@pytest.mark.parametrize("name", sorted(set(UNARY) - {"lowpass", "sort"}))
def test_each_fuzz_operation_computes_nothing_while_differentiated(name):
    # Dask has no np.sort/argsort and FFTs only along a single chunk: those two raise instead.
    x = np.random.default_rng(3).uniform(-1.0, 1.0, (4, 5))
    xd = da.from_array(x, chunks=(3, 2))
    loss = lambda v: np.sum(np.sin(UNARY[name](v)))  # noqa: E731
    with Computes() as c:
        g = tg.grad(loss)(xd)
    assert c.count == 0
    _lazy_like(g, xd)
    np.testing.assert_allclose(g.compute(), tg.grad(loss)(x), rtol=1e-12, atol=1e-14)


# Dask implements neither np.sort (argsort) nor FFTs over chunked axes: the fuzz variant
# replaces those two steps by smooth ones of the same kind.
_LAZY_SUBSTITUTES = {"sort": "flip", "lowpass": "cumsum"}


def _lazy_steps(steps):
    return [("unary", _LAZY_SUBSTITUTES.get(s[1], s[1])) if s[0] == "unary" else s for s in steps]


@settings(max_examples=settings().max_examples)
@given(programs())
def test_fuzz_programs_on_dask_agree_with_numpy(program):
    shape, other, steps, seed = program
    f = build(_lazy_steps(steps))
    rng = np.random.default_rng(seed)
    x, y = rng.uniform(-1.5, 1.5, shape), rng.uniform(-1.5, 1.5, other)
    # One element per chunk: every reduction, slice and scatter crosses chunk boundaries.
    xd, yd = da.from_array(x, chunks=1), da.from_array(y, chunks=1)
    loss = lambda a, b: np.sum(f(a, b))  # noqa: E731
    gx, gy = tg.grad(loss, argnums=(0, 1))(xd, yd)
    ex, ey = tg.grad(loss, argnums=(0, 1))(x, y)
    gx, gy = dask.compute(gx, gy)
    np.testing.assert_allclose(gx, ex, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gy, ey, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_distributed_local_cluster_matches_threads_and_numpy(dtype):
    distributed = pytest.importorskip("distributed")
    u, ud = _field(n=40, chunks=7, dtype=dtype)
    value, g = tg.value_and_grad(smooth_field_energy)(ud)
    threaded = dask.compute(value, g, scheduler="threads")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster, distributed.Client(cluster) as client:
        on_cluster = client.compute([value, g], sync=True)
    v_np, g_np = tg.value_and_grad(smooth_field_energy)(u)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for got in (threaded, on_cluster):
        assert got[1].dtype == dtype
        np.testing.assert_allclose(got[0], v_np, rtol=tol)
        np.testing.assert_allclose(got[1], g_np, rtol=tol, atol=tol)


def test_cupy_values_stay_on_the_gpu():
    cp = pytest.importorskip("cupy")
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no GPU")
    except cp.cuda.runtime.CUDARuntimeError:
        pytest.skip("no GPU")
    u = np.random.default_rng(0).uniform(-1.5, 1.5, 101)
    g = tg.grad(smooth_field_energy)(cp.asarray(u))
    assert isinstance(g, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(g), tg.grad(smooth_field_energy)(u), rtol=1e-12)


def test_fallback_inside_a_gradient_tape_block_is_an_error():
    _, ud = _field()
    with pytest.raises(LazyFallbackError, match="numpy.argsort"), tg.GradientTape() as tape:
        x = tape.watch(ud)
        np.sort(x)


def test_out_of_core_example_runs_at_a_tiny_size():
    pytest.importorskip("psutil")
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parent.parent / "examples" / "dask_out_of_core.py"
    spec = importlib.util.spec_from_file_location("dask_out_of_core", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    result = example.main(["--gib", "0.0005", "--chunk-mib", "0.125", "--no-progress"])
    u = example.field(result["n"], int(0.125 * 2**20) // 8).compute()
    g = tg.grad(smooth_field_energy)(u)
    assert result["value"] == pytest.approx(float(smooth_field_energy(u)), rel=1e-12)
    assert result["norm"] == pytest.approx(float(np.linalg.norm(g)), rel=1e-10)
    np.testing.assert_allclose(result["tail"], g[-3:], rtol=1e-10)
