"""Closed-form derivatives shared by several test modules."""

import numpy as np


def rosenbrock(x):
    """``sum(100 (x[1:] - x[:-1]**2)**2 + (1 - x[:-1])**2)`` for a 1-D ``x``."""
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def rosenbrock_hessian(x):
    """The tridiagonal Hessian of :func:`rosenbrock`, written out by hand."""
    n = x.size
    h = np.zeros((n, n))
    i = np.arange(n - 1)
    h[i, i] += 1200 * x[:-1] ** 2 - 400 * x[1:] + 2
    h[i + 1, i + 1] += 200
    h[i, i + 1] = h[i + 1, i] = -400 * x[:-1]
    return h
