"""Ordinary NumPy programs used by the demo, the docs and the tests.

Nothing here knows about tapegrad: these are the kind of functions users
already have.
"""

from __future__ import annotations

import numpy as np

__all__ = ["lennard_jones_energy", "mlp_loss", "logistic_log_likelihood", "smooth_field_energy"]


def lennard_jones_energy(positions: np.ndarray, epsilon: float = 1.0, sigma: float = 1.0) -> np.ndarray:
    """Total Lennard-Jones energy of particles at ``positions`` (n, 3)."""
    diff = positions[:, None, :] - positions[None, :, :]
    r2 = np.sum(diff**2, axis=-1)
    i, j = np.triu_indices(len(positions), k=1)
    inv6 = (sigma**2 / r2[i, j]) ** 3
    return np.sum(4 * epsilon * (inv6**2 - inv6))


def mlp_loss(params: list, x: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Softmax cross-entropy of a tanh multilayer perceptron (log-softmax with max subtraction)."""
    h = x
    for W, b in params[:-1]:
        h = np.tanh(h @ W + b)
    W, b = params[-1]
    logits = h @ W + b
    logits = logits - np.max(logits, axis=1, keepdims=True)
    log_probs = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
    return -np.mean(log_probs[np.arange(len(labels)), labels])


def logistic_log_likelihood(beta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Log-likelihood of a logistic regression."""
    z = X @ beta
    return np.sum(y * z - np.logaddexp(0.0, z))


def smooth_field_energy(u: np.ndarray) -> np.ndarray:
    """An elementwise + reduction + stencil objective over a 1-D field ``u``.

    A soft-saturating potential of each entry plus the squared discrete
    Laplacian (a three-point stencil): written with slices only, so it runs
    unchanged on NumPy and, lazily and chunk by chunk, on Dask arrays.
    """
    potential = np.log1p(u * u) + 0.1 * np.tanh(u) * u
    laplacian = u[2:] - 2.0 * u[1:-1] + u[:-2]
    return np.mean(potential) + 0.5 * np.mean(laplacian * laplacian)


def spring_mesh_energy(x: np.ndarray, edges: np.ndarray, rest: np.ndarray) -> np.ndarray:
    """Elastic energy of springs along the ``edges`` of a mesh whose vertex coordinates are ``x`` (flat, 3 per vertex).

    Written as mesh codes write it: gathered edge vectors and their lengths by
    ``np.linalg.norm``.  Its Hessian is sparse: a 3 x 3 block per vertex and per edge.
    """
    p = x.reshape(-1, 3)
    lengths = np.linalg.norm(p[edges[:, 0]] - p[edges[:, 1]], axis=1)
    return 0.5 * np.sum((lengths - rest) ** 2)


def grid_mesh(side: int) -> tuple:
    """Vertices (flat, on the plane z = 0), edges and rest lengths of a triangulated ``side`` x ``side`` grid."""
    ids = np.arange(side * side).reshape(side, side)
    edges = np.concatenate([
        np.stack([ids[:, :-1].ravel(), ids[:, 1:].ravel()], axis=1),
        np.stack([ids[:-1, :].ravel(), ids[1:, :].ravel()], axis=1),
        np.stack([ids[:-1, :-1].ravel(), ids[1:, 1:].ravel()], axis=1),
    ])
    grid = np.stack(np.meshgrid(np.arange(side), np.arange(side), indexing="ij"), axis=-1).reshape(-1, 2)
    vertices = np.concatenate([grid, np.zeros((side * side, 1))], axis=1).astype(float).ravel()
    rest = np.linalg.norm(grid[edges[:, 0]] - grid[edges[:, 1]], axis=1)
    return vertices, edges, rest
