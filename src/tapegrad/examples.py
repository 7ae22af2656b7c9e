"""Ordinary NumPy programs used by the demo, the docs and the tests.

Nothing here knows about tapegrad: these are the kind of functions users
already have.
"""

from __future__ import annotations

import numpy as np

__all__ = ["lennard_jones_energy", "mlp_loss", "logistic_log_likelihood"]


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
