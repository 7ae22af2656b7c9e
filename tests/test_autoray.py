"""autoray-written code differentiates through tapegrad unchanged."""

import subprocess
import sys

import autoray as ar
import numpy as np

import tapegrad as tg
from tapegrad.integrations import autoray as integration
from tapegrad.testing import check_grads

rng = np.random.default_rng(5)


def mps_norm(tensors):
    """<psi|psi> of an open-boundary matrix product state, written only with autoray.do."""
    env = ar.do("ones", (1, 1), like=tensors[0])
    for A in tensors:  # A: (left bond, physical, right bond)
        T = ar.do("tensordot", env, A, axes=([1], [0]))  # (bra left, phys, ket right)
        env = ar.do("tensordot", ar.do("conj", A), T, axes=([0, 1], [0, 1]))  # (bra right, ket right)
    return ar.do("real", ar.do("sum", env))


def random_mps(n=4, d=2, D=3, dtype=float):
    bonds = [1] + [D] * (n - 1) + [1]
    out = []
    for i in range(n):
        A = rng.standard_normal((bonds[i], d, bonds[i + 1]))
        if dtype is complex:
            A = A + 1j * rng.standard_normal(A.shape)
        out.append(A)
    return out


def dense_state(tensors):
    psi = tensors[0]
    for A in tensors[1:]:
        psi = np.tensordot(psi, A, axes=([-1], [0]))
    return psi.reshape(-1)


def test_backend_inference_and_dispatch():
    def probe(x):
        assert ar.infer_backend(x) == "numpy"
        return ar.do("sum", ar.do("sin", x) * x)

    x = rng.standard_normal(4)
    np.testing.assert_allclose(tg.grad(probe)(x), np.cos(x) * x + np.sin(x), rtol=1e-12)
    assert integration.registered


def test_mps_norm_gradient_matches_finite_differences_and_closed_form():
    tensors = random_mps()
    psi = dense_state(tensors)
    assert np.isclose(mps_norm(tensors), psi @ psi)
    grads = tg.grad(mps_norm)(tensors)
    assert [g.shape for g in grads] == [A.shape for A in tensors]
    check_grads(lambda *ts: mps_norm(list(ts)), tensors, order=1)
    # Closed form: <psi|psi> is quadratic in each tensor, so <grad_i, A_i> = 2 <psi|psi> (Euler).
    for g, A in zip(grads, tensors):
        assert np.isclose(np.sum(g * A), 2 * (psi @ psi), rtol=1e-10)


def test_mps_norm_second_order_and_complex():
    tensors = random_mps(n=3, D=2)
    check_grads(lambda A0, A1, A2: mps_norm([A0, A1, A2]), tensors, order=2)
    ctensors = random_mps(n=3, D=2, dtype=complex)
    check_grads(lambda A0, A1, A2: mps_norm([A0, A1, A2]), ctensors, order=1)


def test_svd_through_autoray():
    # Nuclear norm: d sum(s) / dA = U V^T (closed form), with autoray's reduced SVD.
    A = rng.standard_normal((4, 3))

    def nuclear(A):
        U, s, VH = ar.do("linalg.svd", A)
        assert U.shape == (4, 3)  # autoray's numpy convention: full_matrices=False
        return ar.do("sum", s)

    U, s, VH = np.linalg.svd(A, full_matrices=False)
    np.testing.assert_allclose(tg.grad(nuclear)(A), U @ VH, rtol=1e-10)
    check_grads(nuclear, [A], order=1)


def test_stop_gradient_via_autoray():
    def f(x):
        return ar.do("sum", x * ar.do("stop_gradient", x))

    x = rng.standard_normal(3)
    np.testing.assert_allclose(tg.grad(f)(x), x, rtol=1e-12)  # d/dx sum(x * c) = c, c = x
    np.testing.assert_allclose(tg.hessian(f)(x), np.zeros((3, 3)))
    plain = np.ones(2)
    assert ar.do("stop_gradient", plain) is plain  # plain arrays pass through


def test_autoray_numpy_namespace():
    anp = ar.numpy

    def f(x):
        return anp.sum(anp.tanh(anp.reshape(x, (2, 2)) @ x.reshape(2, 2)))

    x = rng.standard_normal(4)
    check_grads(f, [x], order=2)


def test_import_is_lazy_and_registration_automatic():
    code = (
        "import sys, numpy as np, tapegrad as tg\n"
        "assert 'autoray' not in sys.modules\n"
        "tg.grad(lambda x: x * x)(1.0)\n"
        "assert 'autoray' not in sys.modules\n"
        "import autoray as ar\n"  # imported after tapegrad: registered at the next trace
        "g = tg.grad(lambda x: ar.do('sum', ar.do('exp', x)))(np.zeros(2))\n"
        "assert np.allclose(g, 1.0), g\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
