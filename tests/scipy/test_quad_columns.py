"""``quad``'s derivative with the integrand called once on every Gauss node (tapegrad.solvers._sensitivity).

Where the integrand takes an array of nodes and returns one value each, equal to its
point-by-point values at spread nodes, the Gauss-Legendre rule of the derivative uses
one call per piece instead of one per node.  It must give the node-by-node numbers (to
rounding), at first and second order, with traced limits, infinite ranges and
``points=``; an integrand written for scalars only is called node by node.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.integrate import quad

import tapegrad as tg
from tapegrad.solvers import integrate


@pytest.fixture
def kept(monkeypatch):
    seen = []
    original = integrate.scalar_columns

    def spying(*args):
        out = original(*args)
        seen.append(out is not None)
        return out

    monkeypatch.setattr(integrate, "scalar_columns", spying)
    return seen


def _node_by_node(monkeypatch, derivative, f, k):
    with monkeypatch.context() as m:
        m.setattr(integrate, "scalar_columns", lambda *args: None)
        return derivative(f)(k)


def _fd(f, k, h=1e-6):
    return np.array([(f(k + h * e) - f(k - h * e)) / (2 * h) for e in np.eye(k.size)])


def gaussian_wave(x, k):
    return np.exp(-k[0] * x ** 2) * np.cos(k[1] * x)


CASES = {
    "finite": lambda k: quad(gaussian_wave, 0.0, 10.0, args=(k,), limit=200)[0],
    "half_infinite": lambda k: quad(lambda x: gaussian_wave(x, k), 0.0, np.inf)[0],
    "whole_line": lambda k: quad(lambda x: gaussian_wave(x, k), -np.inf, np.inf)[0],
    "traced_limits": lambda k: quad(lambda x: gaussian_wave(x, k), k[0], 3.0 * k[1])[0],
    "points": lambda k: quad(lambda x: np.abs(x - k[0]) * gaussian_wave(x, k), 0.0, 4.0, points=[k[0]])[0],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_and_hessian_on_columns_are_the_node_by_node_ones(monkeypatch, kept, name):
    f = CASES[name]
    k = np.array([0.7, 3.0])
    g = tg.grad(f)(k)
    assert any(kept)  # pieces of fewer than 32 nodes go node by node
    np.testing.assert_allclose(g, _node_by_node(monkeypatch, tg.grad, f, k), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(g, _fd(f, k), rtol=1e-6, atol=1e-8)
    hess = tg.hessian(f)(k)
    np.testing.assert_allclose(hess, _node_by_node(monkeypatch, tg.hessian, f, k), rtol=1e-11, atol=1e-13)


def test_an_integrand_for_scalars_only_goes_node_by_node(monkeypatch, kept):
    def f(k):
        return quad(lambda x: math.exp(-0.5 * x) * x * k[0] + np.sin(k[1] * x), 0.0, 3.0)[0]

    k = np.array([0.7, 3.0])
    with pytest.raises(Exception):
        math.exp(np.ones(3))  # what the column-wise call meets
    g = tg.grad(f)(k)
    assert kept and not any(kept)
    np.testing.assert_allclose(g, _fd(f, k), rtol=1e-6, atol=1e-8)


def test_an_integrand_that_reduces_over_its_argument_goes_node_by_node(monkeypatch, kept):
    # x * k / sum(x) is x * k / x for one node, but another thing for an array of nodes
    def f(k):
        return quad(lambda x: np.sum(x) * k[0] * np.exp(-x) / np.sum(x) + k[1], 0.5, 3.0)[0]

    k = np.array([0.7, 3.0])
    g = tg.grad(f)(k)
    np.testing.assert_allclose(g, _fd(f, k), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(g, _node_by_node(monkeypatch, tg.grad, f, k), rtol=1e-12)
