"""Command line: ``python -m tapegrad demo``."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

import numpy as np

__all__ = ["main", "demo"]


def _fd_gradient(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    grad = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[idx] = eps
        grad[idx] = (f(x + step) - f(x - step)) / (2 * eps)
    return grad


def demo(out=sys.stdout) -> int:
    """Differentiate real NumPy code and compare with finite differences."""
    import tapegrad as tg
    from tapegrad.examples import lennard_jones_energy

    np.set_printoptions(precision=5, suppress=True, linewidth=100)
    rng = np.random.default_rng(0)
    positions = np.array([[0.0, 0.0, 0.0], [1.1, 0.1, 0.0], [0.5, 1.0, 0.1], [0.4, 0.5, 0.9]])
    positions = positions + 0.01 * rng.standard_normal(positions.shape)
    p = print
    p("tapegrad demo: plain NumPy code, differentiated unchanged\n", file=out)
    p("1) Lennard-Jones energy of 4 atoms -> forces = -gradient", file=out)
    energy, grad = tg.value_and_grad(lennard_jones_energy)(positions)
    fd = _fd_gradient(lennard_jones_energy, positions)
    p(f"   energy = {energy:.6f}", file=out)
    p("   forces =\n" + str(-grad), file=out)
    err1 = np.max(np.abs(grad - fd))
    p(f"   max |gradient - finite differences| = {err1:.2e}\n", file=out)

    W = rng.standard_normal((3, 3))

    def layer(x):
        return np.tanh(W @ x)

    x = rng.standard_normal(3)
    p("2) Jacobian of tanh(W @ x), shape out + in, one batched backward sweep", file=out)
    J = tg.jacobian(layer)(x)
    J_fd = np.stack([_fd_gradient(lambda v, i=i: layer(v)[i], x) for i in range(3)])
    p(str(J), file=out)
    err2 = np.max(np.abs(J - J_fd))
    p(f"   max |Jacobian - finite differences| = {err2:.2e}\n", file=out)

    p("3) Hessian of the energy (12 x 12 reshaped from (4, 3, 4, 3)): the Jacobian of the traced gradient", file=out)
    H = tg.hessian(lambda q: lennard_jones_energy(q.reshape(4, 3)))(positions.ravel())
    gfun = tg.grad(lambda q: lennard_jones_energy(q.reshape(4, 3)))
    H_fd = np.stack([_fd_gradient(lambda q, i=i: gfun(q)[i], positions.ravel()) for i in range(12)])
    p("   diagonal = " + str(np.diag(H)), file=out)
    p(f"   symmetric: {np.allclose(H, H.T)}", file=out)
    err3 = np.max(np.abs(H - H_fd)) / max(1.0, np.max(np.abs(H)))
    p(f"   max relative |Hessian - finite differences of the gradient| = {err3:.2e}\n", file=out)

    ok = err1 < 1e-6 and err2 < 1e-6 and err3 < 1e-5
    p("all derivatives agree with finite differences" if ok else "MISMATCH against finite differences", file=out)
    return 0 if ok else 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tapegrad", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="differentiate real NumPy code and check it against finite differences")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo()
    return 2
