"""Derivative checks shared by tests/test_xarray.py and tests/test_pint.py.

Each program maps a float64 array to an array (a plain tracer: ``.data`` of a
``DataArray``, ``.magnitude`` of a ``Quantity``).  :func:`check` compares, at
the given point,

* first order: the reverse-mode Jacobian (``tapegrad.jacobian``) and the
  forward-mode one (``tapegrad.jacfwd``) with central differences of the
  program run on plain arrays;
* second order: the Hessian (``tapegrad.hessian``) of a random projection of
  the output with central differences of its reverse-mode gradient, and a
  Hessian-vector product (``tapegrad.hvp``, reverse over reverse) with that
  Hessian times a vector.

Central differences in float64 with a step of 1e-6 (1e-5 for the gradient) are
accurate to about 1e-8 on these smooth, well-scaled programs: the tolerances
leave a margin of a hundred and still tell a right derivative from a wrong one.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

import tapegrad as tg


def _plain(y: Any) -> np.ndarray:
    return np.asarray(y, dtype=float)


def central_jacobian(f: Callable[[np.ndarray], Any], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """``d f / d x`` by central differences, shaped ``f(x).shape + x.shape``."""
    y0 = _plain(f(x.copy()))
    out = np.empty(y0.shape + x.shape)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        out[(...,) + i] = (_plain(f(up)) - _plain(f(down))) / (2 * eps)
    return out


def check(f: Callable[[np.ndarray], Any], x: np.ndarray, order: int = 2, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Assert that tapegrad's derivatives of ``f`` at ``x`` match central differences (see the module)."""
    x = np.asarray(x, dtype=float)
    y0 = _plain(f(x.copy()))
    jac_fd = central_jacobian(f, x)
    jac_rev = np.asarray(tg.jacobian(f)(x.copy()))
    np.testing.assert_allclose(jac_rev, jac_fd, rtol=rtol, atol=atol, err_msg="reverse-mode Jacobian")
    jac_fwd = np.asarray(tg.jacfwd(f)(x.copy()))
    np.testing.assert_allclose(jac_fwd, jac_fd, rtol=rtol, atol=atol, err_msg="forward-mode Jacobian")
    assert np.any(jac_fd != 0), "the program does not depend on x: the check would prove nothing"
    if order < 2:
        return
    rng = np.random.default_rng(1)
    w = rng.standard_normal(y0.shape)

    def g(z: Any) -> Any:
        return np.sum(w * f(z))

    hess = np.asarray(tg.hessian(g)(x.copy())).reshape(x.size, x.size)
    hess_fd = central_jacobian(lambda z: tg.grad(g)(z), x, eps=1e-5).reshape(x.size, x.size)
    scale = max(1.0, float(np.max(np.abs(hess_fd))))
    np.testing.assert_allclose(hess, hess_fd, rtol=1e-4, atol=1e-5 * scale, err_msg="Hessian")
    v = rng.standard_normal(x.shape)
    hv = np.asarray(tg.hvp(g)(x.copy(), v)).ravel()
    np.testing.assert_allclose(hv, hess @ v.ravel(), rtol=1e-8, atol=1e-10 * scale, err_msg="Hessian-vector product")
