"""Derivatives of element-wise ufuncs (their ``__call__``).

Each rule is ``g, ans, *inputs -> cotangent of one input``.  Broadcasting
between inputs is undone by the backward driver, and rules reuse the
forward's output where they can (``exp' = ans``, ``tanh' = 1 - ans**2``).

Complex convention (as JAX and autograd): the cotangent ``c`` of a complex
value ``z`` represents the real linear form ``dz -> Re(c * dz)``; for a real
loss ``L`` that is ``c = dL/dRe(z) - 1j * dL/dIm(z)``.  Holomorphic rules
therefore multiply by the plain derivative, without a conjugate.
"""

from __future__ import annotations

from numbers import Number

import numpy as np

from ..registry import defvjp

_LN2 = np.log(2.0)
_LN10 = np.log(10.0)


def _is_const_scalar(v: object) -> bool:
    return isinstance(v, Number) or (isinstance(v, np.ndarray) and v.ndim == 0)


# --------------------------------------------------------------- arithmetic
defvjp(np.add, lambda g, ans, x, y: g, lambda g, ans, x, y: g)
defvjp(np.subtract, lambda g, ans, x, y: g, lambda g, ans, x, y: -g)
defvjp(np.multiply, lambda g, ans, x, y: g * y, lambda g, ans, x, y: g * x)
defvjp(np.true_divide, lambda g, ans, x, y: g / y, lambda g, ans, x, y: -g * ans / y)
defvjp(np.negative, lambda g, ans, x: -g)
defvjp(np.positive, lambda g, ans, x: g)
defvjp(np.reciprocal, lambda g, ans, x: -g * ans * ans)
defvjp(np.square, lambda g, ans, x: g * (x * 2))


def _power_base(g, ans, x, y):
    if _is_const_scalar(y):
        if y == 2:
            return g * (x * 2)
        if y == 1:
            return g
        if y == 0:
            return g * 0
    return g * (y * x ** (y - 1))


def _power_exponent(g, ans, x, y):
    # d/dy x**y = x**y log(x); at x == 0 the product is taken as 0 (the limit for y > 0).
    safe_log = np.log(np.where(x == 0, 1, x))
    return g * (ans * safe_log)


defvjp(np.power, _power_base, _power_exponent)
defvjp(np.float_power, lambda g, ans, x, y: g * (y * np.float_power(x, y - 1)), _power_exponent)

# --------------------------------------------------------------- exp and log
defvjp(np.exp, lambda g, ans, x: g * ans)
defvjp(np.exp2, lambda g, ans, x: g * (ans * _LN2))
defvjp(np.expm1, lambda g, ans, x: g * (ans + 1))
defvjp(np.log, lambda g, ans, x: g / x)
defvjp(np.log2, lambda g, ans, x: g / (x * _LN2))
defvjp(np.log10, lambda g, ans, x: g / (x * _LN10))
defvjp(np.log1p, lambda g, ans, x: g / (x + 1))
defvjp(np.sqrt, lambda g, ans, x: g / (ans * 2))
defvjp(np.cbrt, lambda g, ans, x: g / (ans * ans * 3))
defvjp(
    np.logaddexp,
    lambda g, ans, x, y: g * np.exp(x - ans),
    lambda g, ans, x, y: g * np.exp(y - ans),
)
defvjp(
    np.logaddexp2,
    lambda g, ans, x, y: g * np.exp2(x - ans),
    lambda g, ans, x, y: g * np.exp2(y - ans),
)

# --------------------------------------------------------------- trigonometric
defvjp(np.sin, lambda g, ans, x: g * np.cos(x))
defvjp(np.cos, lambda g, ans, x: -g * np.sin(x))
defvjp(np.tan, lambda g, ans, x: g * (ans * ans + 1))
defvjp(np.arcsin, lambda g, ans, x: g / np.sqrt(1 - x * x))
defvjp(np.arccos, lambda g, ans, x: -g / np.sqrt(1 - x * x))
defvjp(np.arctan, lambda g, ans, x: g / (x * x + 1))
defvjp(
    np.arctan2,
    lambda g, ans, y, x: g * (x / (x * x + y * y)),
    lambda g, ans, y, x: g * (-y / (x * x + y * y)),
)
defvjp(np.hypot, lambda g, ans, x, y: g * (x / ans), lambda g, ans, x, y: g * (y / ans))
defvjp(np.sinh, lambda g, ans, x: g * np.cosh(x))
defvjp(np.cosh, lambda g, ans, x: g * np.sinh(x))
defvjp(np.tanh, lambda g, ans, x: g * (1 - ans * ans))
defvjp(np.arcsinh, lambda g, ans, x: g / np.sqrt(x * x + 1))
defvjp(np.arccosh, lambda g, ans, x: g / np.sqrt(x * x - 1))
defvjp(np.arctanh, lambda g, ans, x: g / (1 - x * x))
defvjp(np.deg2rad, lambda g, ans, x: g * (np.pi / 180))
defvjp(np.rad2deg, lambda g, ans, x: g * (180 / np.pi))
# np.radians and np.degrees are distinct ufunc objects with the same maths.
defvjp(np.radians, lambda g, ans, x: g * (np.pi / 180))
defvjp(np.degrees, lambda g, ans, x: g * (180 / np.pi))


# --------------------------------------------------------------- abs, sign-like
def _abs_vjp(g, ans, x):
    if np.iscomplexobj(x):
        # Re(c dz) with d|z| = Re(conj(z) dz) / |z|; 0 at z == 0 (a subgradient).
        return g * (np.conjugate(x) / np.where(ans == 0, 1, ans))
    return g * np.sign(x)


defvjp(np.absolute, _abs_vjp, note="subgradient 0 at 0")
defvjp(np.fabs, lambda g, ans, x: g * np.sign(x), note="subgradient 0 at 0")
defvjp(np.conjugate, lambda g, ans, x: np.conjugate(g))


# --------------------------------------------------------------- max / min
def _tie_weights(x, y, prefer_x):
    """1 where ``x`` wins, 0.5 on ties, 0 where ``y`` wins (ties split equally)."""
    return np.where(prefer_x, 1.0, np.where(x == y, 0.5, 0.0))


defvjp(
    np.maximum,
    lambda g, ans, x, y: g * _tie_weights(x, y, x > y),
    lambda g, ans, x, y: g * _tie_weights(y, x, y > x),
    note="ties split equally",
)
defvjp(
    np.minimum,
    lambda g, ans, x, y: g * _tie_weights(x, y, x < y),
    lambda g, ans, x, y: g * _tie_weights(y, x, y < x),
    note="ties split equally",
)

# --------------------------------------------------------------- complex parts
# real(z): dL = g dRe(z) = Re(g dz)  -> c = g;  imag(z): dL = g dIm(z) = Re(-1j g dz) -> c = -1j g.
defvjp(np.real, lambda g, ans, z: g)
defvjp(np.imag, lambda g, ans, z: -1j * g)
