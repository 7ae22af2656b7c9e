"""Programs for the sparse Jacobian and Hessian benchmarks (issue 24), written the ordinary NumPy way.

Each ``make_<name>(n)`` returns ``(fun, x0, kind, fd_fun)`` for about ``n``
unknowns: ``kind`` is ``"jacobian"`` (``fun`` maps x to a residual) or
``"hessian"`` (``fun`` is a scalar energy); ``fd_fun`` is the function whose
Jacobian SciPy's colored finite differences approximate (the residual itself,
or the energy's hand-written gradient).  Used by ``benchmarks/sparse_jacobians.py``
and the side-by-side script ``sparse_compare.py``.
"""

from __future__ import annotations

import math

import numpy as np

NAMES = ["bratu", "ginzburg_landau", "graph", "reaction_diffusion", "bundle", "mesh_springs", "fem"]


def make_bratu(n: int, lam: float = 6.0):
    """2-D Bratu residual on a square grid of about ``n`` interior points (zero boundary)."""
    side = max(3, int(round(math.sqrt(n))))
    h2 = 1.0 / (side + 1) ** 2

    def residual(u_flat):
        u = u_flat.reshape(side, side)
        U = np.pad(u, 1)
        lap = U[2:, 1:-1] + U[:-2, 1:-1] + U[1:-1, 2:] + U[1:-1, :-2] - 4 * U[1:-1, 1:-1]
        return (lap / h2 + lam * np.exp(u)).ravel()

    x0 = 0.1 * np.random.default_rng(0).random(side * side)
    return residual, x0, "jacobian", residual


def make_ginzburg_landau(n: int, eps: float = 0.3):
    """Ginzburg-Landau-like energy on a 2-D grid of about ``n`` points (its Hessian is wanted)."""
    side = max(3, int(round(math.sqrt(n))))

    def energy(u_flat):
        u = u_flat.reshape(side, side)
        dx = u[1:, :] - u[:-1, :]
        dy = u[:, 1:] - u[:, :-1]
        return 0.5 * np.sum(dx * dx) + 0.5 * np.sum(dy * dy) + 0.25 * eps * np.sum((1 - u * u) ** 2)

    def gradient(u_flat):
        u = u_flat.reshape(side, side)
        g = eps * (u * u - 1) * u
        dx = u[1:, :] - u[:-1, :]
        dy = u[:, 1:] - u[:, :-1]
        g[1:, :] += dx
        g[:-1, :] -= dx
        g[:, 1:] += dy
        g[:, :-1] -= dy
        return g.ravel()

    x0 = np.random.default_rng(1).standard_normal(side * side)
    return energy, x0, "hessian", gradient


def make_graph(n: int):
    """Forces of nonlinear springs on an unstructured graph (a ring plus random chords), via ``np.add.at``."""
    rng = np.random.default_rng(2)
    ring = np.arange(n)
    i = np.concatenate([ring, rng.integers(0, n, 2 * n)])
    j = np.concatenate([(ring + 1) % n, rng.integers(0, n, 2 * n)])

    def forces(x):
        d = x[i] - x[j]
        f = d + d**3
        out = np.zeros_like(x)
        np.add.at(out, i, f)
        np.add.at(out, j, -f)
        return out + 0.1 * np.sin(x)

    x0 = rng.standard_normal(n)
    return forces, x0, "jacobian", forces


def make_reaction_diffusion(n: int, a: float = 1.0, b: float = 3.0, alpha: float = 0.02):
    """Right-hand side of a 1-D two-species (Brusselator) reaction-diffusion system, ``n`` unknowns."""
    m = max(3, n // 2)
    c = alpha * (m + 1) ** 2

    def rhs(y):
        u, v = y[:m], y[m:]
        lap_u = np.roll(u, 1) - 2 * u + np.roll(u, -1)
        lap_v = np.roll(v, 1) - 2 * v + np.roll(v, -1)
        uuv = u * u * v
        return np.concatenate([a + uuv - (b + 1) * u + c * lap_u, b * u - uuv + c * lap_v])

    grid = np.linspace(0, 1, m)
    y0 = np.concatenate([1 + np.sin(2 * np.pi * grid), np.full(m, 3.0)])
    return rhs, y0, "jacobian", rhs


def make_bundle(n: int):
    """A bundle-adjustment residual (rotation vector, translation, focal, two radial terms per camera)."""
    n_points = max(4, int(n / 3.18))  # 3 coordinates per point, 9 parameters per 50 points: about n unknowns
    n_cams = max(2, n_points // 50)
    per_point = 4
    rng = np.random.default_rng(3)
    point_idx = np.repeat(np.arange(n_points), per_point)
    cam_idx = rng.integers(0, n_cams, point_idx.size)
    cams0 = np.concatenate(
        [0.1 * rng.standard_normal((n_cams, 3)), rng.standard_normal((n_cams, 2)), 10 + rng.random((n_cams, 1)),
         500 + rng.random((n_cams, 1)), 1e-3 * rng.standard_normal((n_cams, 2))], axis=1)
    points0 = rng.standard_normal((n_points, 3))
    observed = rng.standard_normal((point_idx.size, 2))

    def residual(x):
        cams = x[: 9 * n_cams].reshape(n_cams, 9)
        points = x[9 * n_cams :].reshape(n_points, 3)
        c = cams[cam_idx]
        p = points[point_idx]
        r = c[:, :3]
        theta = np.sqrt(np.sum(r * r, axis=1, keepdims=True) + 1e-12)
        k = r / theta
        cos, sin = np.cos(theta), np.sin(theta)
        cross = np.stack(
            [k[:, 1] * p[:, 2] - k[:, 2] * p[:, 1], k[:, 2] * p[:, 0] - k[:, 0] * p[:, 2],
             k[:, 0] * p[:, 1] - k[:, 1] * p[:, 0]], axis=1)
        dot = np.sum(k * p, axis=1, keepdims=True)
        rotated = p * cos + cross * sin + k * dot * (1 - cos) + c[:, 3:6]
        proj = -rotated[:, :2] / rotated[:, 2:3]
        r2 = np.sum(proj * proj, axis=1, keepdims=True)
        scale = c[:, 6:7] * (1 + c[:, 7:8] * r2 + c[:, 8:9] * r2 * r2)
        return (proj * scale - observed).ravel()

    x0 = np.concatenate([cams0.ravel(), points0.ravel()])
    return residual, x0, "jacobian", residual


def make_mesh_springs(n: int, stiffness: float = 1.0):
    """Spring energy of a triangulated 3-D surface (a grid of about ``n / 3`` vertices), edge lengths by ``norm``."""
    side = max(3, int(round(math.sqrt(n / 3))))
    ids = np.arange(side * side).reshape(side, side)
    edges = np.concatenate([
        np.stack([ids[:, :-1].ravel(), ids[:, 1:].ravel()], axis=1),  # horizontal
        np.stack([ids[:-1, :].ravel(), ids[1:, :].ravel()], axis=1),  # vertical
        np.stack([ids[:-1, :-1].ravel(), ids[1:, 1:].ravel()], axis=1),  # diagonal
    ])
    rng = np.random.default_rng(5)
    grid = np.stack(np.meshgrid(np.arange(side), np.arange(side), indexing="ij"), axis=-1).reshape(-1, 2)
    rest = np.linalg.norm(grid[edges[:, 0]] - grid[edges[:, 1]], axis=1)

    def energy(x):
        p = x.reshape(-1, 3)
        lengths = np.linalg.norm(p[edges[:, 0]] - p[edges[:, 1]], axis=1)
        return 0.5 * stiffness * np.sum((lengths - rest) ** 2)

    def gradient(x):
        p = x.reshape(-1, 3)
        d = p[edges[:, 0]] - p[edges[:, 1]]
        lengths = np.sqrt(np.sum(d * d, axis=1))
        f = (stiffness * (lengths - rest) / lengths)[:, None] * d
        g = np.zeros_like(p)
        np.add.at(g, edges[:, 0], f)
        np.add.at(g, edges[:, 1], -f)
        return g.ravel()

    flat = np.concatenate([grid, np.zeros((side * side, 1))], axis=1).astype(float)
    x0 = (flat + 0.1 * rng.standard_normal(flat.shape)).ravel()
    return energy, x0, "hessian", gradient


def make_fem(n: int):
    """A P1 finite-element energy on a triangulated square, ``0.5 u.K u + 0.25 sum(u^4)``, element by element with ``einsum``."""
    side = max(3, int(round(math.sqrt(n))))
    ids = np.arange(side * side).reshape(side, side)
    a, b, c, d = ids[:-1, :-1].ravel(), ids[:-1, 1:].ravel(), ids[1:, :-1].ravel(), ids[1:, 1:].ravel()
    triangles = np.concatenate([np.stack([a, b, d], axis=1), np.stack([a, d, c], axis=1)])
    h = 1.0 / (side - 1)
    grid = np.stack(np.meshgrid(np.arange(side) * h, np.arange(side) * h, indexing="ij"), axis=-1).reshape(-1, 2)
    p = grid[triangles]  # (elements, 3, 2)
    e1, e2 = p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]
    area = 0.5 * np.abs(e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0])
    # Gradients of the three hat functions: rotated opposite edges over twice the area.
    opposite = p[:, [2, 0, 1]] - p[:, [1, 2, 0]]
    grads = np.stack([-opposite[..., 1], opposite[..., 0]], axis=-1) / (2 * area[:, None, None])
    stiffness = area[:, None, None] * np.einsum("eik,ejk->eij", grads, grads)

    def energy(u):
        ue = u[triangles]
        return 0.5 * np.sum(ue * np.einsum("eij,ej->ei", stiffness, ue)) + 0.25 * np.sum(u**4)

    def gradient(u):
        forces = np.einsum("eij,ej->ei", stiffness, u[triangles])
        g = u**3
        np.add.at(g, triangles, forces)
        return g

    x0 = np.random.default_rng(6).standard_normal(side * side)
    return energy, x0, "hessian", gradient


def make(name: str, n: int):
    """``(fun, x0, kind, fd_fun)`` of program ``name`` with about ``n`` unknowns."""
    return globals()[f"make_{name}"](n)
