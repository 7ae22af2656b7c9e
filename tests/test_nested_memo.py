"""A nested tape (Hessian, HVP) keeps its forward's remembered outputs for its own sweep.

``sin``'s VJP reuses ``cos(x)`` from the forward pass (memo.remembered).  In an HVP the
traced gradient computes ``sin(x)`` for ``cos``'s VJP, and the outer sweep's VJP of that
``sin`` needs ``cos(x)`` again: the forward computed it, but a weak memo has lost it by
then.  A tape that an inner tape watched holds those outputs strongly.
"""

import weakref

import numpy as np

import tapegrad as tg
from tapegrad import memo

N = 50_000  # large enough to be remembered


def _count_loops(monkeypatch):
    calls = []
    real = memo.parallel_call
    monkeypatch.setattr(memo, "parallel_call", lambda ufunc, args: calls.append(ufunc.__name__) or real(ufunc, args))
    return calls


def test_hvp_of_cos_computes_cos_once(monkeypatch):
    calls = _count_loops(monkeypatch)
    x, v = np.linspace(-2.0, 2.0, N), np.cos(np.arange(N))
    got = tg.hvp(lambda y: np.sum(np.cos(y)))(x, v)
    assert calls == ["sin"]  # the gradient's sin(x); the outer sweep reuses the forward's cos(x)
    np.testing.assert_array_equal(got, -np.cos(x) * v)  # -(v * cos(x)): same bits


def test_hessian_diagonal_of_sin_and_cos_agree_with_the_closed_form():
    x = np.linspace(-2.0, 2.0, 300)
    h = tg.hessian(lambda y: np.sum(np.sin(y) + 2.0 * np.cos(y)))(x)
    np.testing.assert_allclose(h, np.diag(-np.sin(x) - 2.0 * np.cos(x)), rtol=1e-15, atol=0)


def test_a_first_order_tape_keeps_weak_references():
    with tg.GradientTape() as tape:
        x = tape.watch(np.linspace(0.0, 1.0, N))
        c = np.cos(x)
    assert not tape._tape.nested
    (ref,) = [r for r in tape._tape.memo.values()]
    assert isinstance(ref, weakref.ref)
    del c
