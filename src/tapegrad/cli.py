"""Command line: ``python -m tapegrad demo`` and ``python -m tapegrad check MODULE:FUNCTION``.

``demo`` differentiates example NumPy programs, compares with finite
differences and draws the tape of one of them; ``check`` surveys and checks
one of your own functions (see :mod:`tapegrad.check`).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Optional, Sequence

import numpy as np

from . import check

__all__ = ["main", "demo", "draw_demo_tape"]


def _fd_gradient(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    grad = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[idx] = eps
        grad[idx] = (f(x + step) - f(x - step)) / (2 * eps)
    return grad


def draw_demo_tape(positions: np.ndarray, directory: Optional[str] = None) -> list:
    """Record the Lennard-Jones energy on a tape and write its picture; return the files written.

    The picture goes to ``directory`` (default: a new temporary directory) as
    ``tapegrad-demo-tape.dot``, plus ``.svg`` when Graphviz is installed.
    """
    import tapegrad as tg
    from tapegrad.examples import lennard_jones_energy
    from tapegrad.graph import write_graph

    if directory is None:
        directory = tempfile.mkdtemp(prefix="tapegrad-demo-")
    with tg.GradientTape() as tape:
        x = tape.watch(positions)
        energy = lennard_jones_energy(x)
    dot = tape.to_dot(targets={"energy": energy}, sources={"positions": x})
    return write_graph(dot, os.path.join(directory, "tapegrad-demo-tape.dot"))


def demo(out=None, graph_dir: Optional[str] = None) -> int:
    """Differentiate real NumPy code, compare with finite differences, draw the tape."""
    out = sys.stdout if out is None else out
    # Print options are scoped so that calling the demo leaves NumPy's state alone.
    with np.printoptions(precision=5, suppress=True, linewidth=100):
        return _demo(out, graph_dir)


def _demo(out, graph_dir: Optional[str]) -> int:
    import tapegrad as tg
    from tapegrad.examples import lennard_jones_energy

    rng = np.random.default_rng(0)
    # A regular tetrahedron with edges near the pair-potential minimum 2**(1/6), jiggled.
    edge = 1.15
    positions = edge * np.array(
        [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.5, np.sqrt(3) / 2, 0.0], [0.5, np.sqrt(3) / 6, np.sqrt(2 / 3)]]
    )
    positions = positions + 0.02 * rng.standard_normal(positions.shape)
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

    scipy_ok = _demo_scipy(out)

    files = draw_demo_tape(positions, graph_dir)
    p("5) The tape recorded for the energy (one box per NumPy call, arrows for data flow):", file=out)
    for path in files:
        p(f"   {path}", file=out)
    if len(files) == 1:
        p("   (install Graphviz to get an .svg too, or run: dot -Tsvg FILE.dot -o tape.svg)", file=out)
    p("", file=out)

    ok = err1 < 1e-6 and err2 < 1e-6 and err3 < 1e-5 and scipy_ok
    p("all derivatives agree with finite differences" if ok else "MISMATCH against finite differences", file=out)
    return 0 if ok else 1


def _demo_scipy(out) -> bool:
    """Step 4: SciPy's own functions, differentiated as called; whether all agree (True without SciPy)."""
    import tapegrad as tg

    p = print
    p("4) SciPy, unchanged (its compiled core reached through tapegrad's SciPy door)", file=out)
    try:
        import scipy.optimize
        import scipy.stats
        from scipy.ndimage import gaussian_filter
        from scipy.optimize import rosen, rosen_der, rosen_hess
    except ImportError:
        p("   skipped: SciPy is not installed (pip install scipy)\n", file=out)
        return True
    x = np.array([0.8, 1.2, 0.7, 1.1])
    g = tg.grad(rosen)(x)
    h = tg.hessian(rosen)(x)
    err = max(np.max(np.abs(g - rosen_der(x))), np.max(np.abs(h - rosen_hess(x))))
    p(f"   scipy.optimize.rosen: max |tapegrad - SciPy's own rosen_der / rosen_hess| = {err:.2e}", file=out)

    data = np.random.default_rng(1).gamma(2.5, 1.5, size=200)

    def nll(params):  # a gamma likelihood, its shape and scale the unknowns
        return -np.sum(scipy.stats.gamma.logpdf(data, params[0], scale=params[1]))

    theta = np.array([2.0, 1.7])
    g_nll = tg.grad(nll)(theta)
    err_nll = np.max(np.abs(g_nll - _fd_gradient(nll, theta))) / max(1.0, np.max(np.abs(g_nll)))
    p(f"   scipy.stats.gamma.logpdf likelihood: gradient in (a, scale) = {g_nll}, "
      f"relative error against finite differences {err_nll:.2e}", file=out)

    image = np.random.default_rng(2).random((6, 6))

    def blurred_energy(u):
        return np.sum(gaussian_filter(u, 1.0, mode="reflect") ** 2)

    err_img = np.max(np.abs(tg.grad(blurred_energy)(image) - _fd_gradient(blurred_energy, image)))
    p(f"   scipy.ndimage.gaussian_filter: max |gradient - finite differences| = {err_img:.2e}", file=out)

    def root(k):  # where x**3 + k*x = 1: the implicit function theorem on brentq's root
        return scipy.optimize.brentq(lambda z: z**3 + k * z - 1.0, 0.0, 2.0, xtol=1e-14)

    k = np.array(0.7)
    z = root(k)
    exact = -z / (3 * z**2 + k)
    err_root = abs(float(tg.grad(root)(k)) - exact)
    p(f"   scipy.optimize.brentq: d root / d k = {float(tg.grad(root)(k)):.6f} (closed form {exact:.6f})",
      file=out)

    from tapegrad.examples import grid_mesh, spring_mesh_energy

    vertices, edges, rest = grid_mesh(12)
    x_mesh = vertices + 0.05 * np.random.default_rng(3).standard_normal(vertices.shape)
    H_sparse = tg.hessian(spring_mesh_energy, sparse=True)(x_mesh, edges, rest)
    same = bool(np.array_equal(H_sparse.toarray(), tg.hessian(spring_mesh_energy)(x_mesh, edges, rest)))
    p(f"   sparse Hessian of a spring mesh ({x_mesh.size} unknowns, edge lengths by np.linalg.norm): "
      f"scipy.sparse.{type(H_sparse).__name__}, {H_sparse.nnz} nonzeros of {x_mesh.size ** 2}, "
      f"every entry equal to the dense Hessian's: {same}\n", file=out)
    # Exact references to 1e-8; finite differences (step 1e-6) to 1e-6, as in steps 1-3.
    return bool(err < 1e-8 and err_root < 1e-8 and err_nll < 1e-6 and err_img < 1e-6 and same)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tapegrad", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo_parser = sub.add_parser("demo", help="differentiate real NumPy code and check it against finite differences")
    demo_parser.add_argument("--graph-dir", metavar="DIR", help="where to write the tape picture (default: a temp dir)")
    check_parser = sub.add_parser(
        "check",
        help="survey and check one of your functions: python -m tapegrad check MODULE:FUNCTION --shape 3,4",
        description=(check.__doc__ or "").split("\n\n>>>")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_arguments(check_parser)
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo(graph_dir=args.graph_dir)
    if args.command == "check":
        return check.run(args)
    return 2
