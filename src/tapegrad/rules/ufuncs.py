"""Derivatives of element-wise ufuncs (their ``__call__``).

Each rule is ``g, ans, *inputs -> cotangent of one input``.  Broadcasting
between inputs is undone by the backward driver, and rules reuse the
forward's output where they can (``exp' = ans``, ``tanh' = 1 - ans**2``).

Complex convention (as JAX and autograd): the cotangent ``c`` of a complex
value ``z`` represents the real linear form ``dz -> Re(c * dz)``; for a real
loss ``L`` that is ``c = dL/dRe(z) - 1j * dL/dIm(z)``.  Holomorphic rules
therefore multiply by the plain derivative, without a conjugate.

Points where the derivative does not exist, and what tapegrad returns there:

* ``sqrt`` / ``cbrt`` at 0: the true derivative is infinite, so the gradient
  is ``inf`` (with NumPy's divide-by-zero warning). Where the incoming
  cotangent is exactly 0 the contribution is 0, not ``0 * inf = nan``
  (strong zeros, see ``tapegrad.backward.strong_zero``).
  Write ``np.sqrt(x + eps)`` or ``np.hypot`` if you need a finite value.
* ``abs``, ``fabs``, ``hypot`` at 0 and ``copysign`` at ``x == 0``: the
  subgradient 0.
* ``maximum``/``minimum``/``fmax``/``fmin`` on ties: the cotangent is split
  equally between the two inputs.  A NaN output sends its cotangent to the
  NaN input (``maximum``), a NaN input is ignored by ``fmax``/``fmin``.
* Quotients of ``remainder``/``fmod``/``divmod``/``modf`` and the exponent of
  ``frexp`` are piecewise constant: their derivative (0) is taken everywhere,
  including at the jumps.
* Division by zero follows NumPy: ``inf``/``nan`` with NumPy's warnings.
"""

from __future__ import annotations

import dataclasses
import math
from numbers import Number

import numpy as np

from ..dispatch import primitive, strip
from ..errors import NonDifferentiableArgumentError
from ..registry import CONSTANT_ARG, RULES, defcomposite, defconstant, defswitch, defvjp
from ..memo import remembered
from ..parallel import call as parallel_call

_LN2 = math.log(2.0)  # Python floats: multiplying by them keeps float32 float32
_LN10 = math.log(10.0)
_DEG = math.pi / 180.0


def defufunc(ufunc, *vjps, note="", remember=False, needs=None, elementwise=False):
    """``defvjp`` for a ufunc whose VJPs ignore the call's keyword arguments.

    Ufunc keywords (``dtype=``, ``casting=``, ``order=``) do not change the
    derivative (the driver casts the cotangent); ``out=`` and ``where=`` are
    rejected by the dispatcher before a rule runs.  ``elementwise=True`` declares
    what :attr:`~tapegrad.registry.Rule.elementwise` says.
    """
    # Element-wise derivatives scale the cotangent (or select from it): they keep the
    # sweep's banded batches banded, so they opt in (see Rule.banded).
    defvjp(ufunc, *vjps, note=note, pass_kwargs=False, remember=remember, needs=needs, banded=True, sparse=True)
    # They also take a constant operand as a 0-d array (see Rule.scalar_operands).
    RULES[ufunc].scalar_operands = True
    RULES[ufunc].elementwise = elementwise
    return ufunc


def _core(ufunc, *vjps, **options):
    """:func:`defufunc` for this module's NumPy ufuncs: each one-output rule here is element-wise.

    Their VJPs are expressions of ``g`` and the operands, computed element by
    element with Python-float constants (tests/rules/test_elementwise_rules.py
    checks every rule marked).
    """
    # Only rules with a VJP for every operand: the recorder's fast paths take it as given.
    return defufunc(ufunc, *vjps, elementwise=ufunc.nout == 1 and all(callable(v) for v in vjps), **options)


def _is_const_scalar(v: object) -> bool:
    return isinstance(v, Number) or (isinstance(v, np.ndarray) and v.ndim == 0)


def _nonzero(a):
    """``a`` with zeros replaced by 1, for a quotient whose value at 0 is set to 0."""
    return np.where(a == 0, 1, a)


def _one_call(ufunc, operand):
    """A VJP that is the one call ``ufunc(g, operand)`` (``-1``: the output; ``None``: ``ufunc(g)``),
    split across threads on large plain arrays (the same bits as ``g * y``, ``-g``)."""
    if operand is None:
        return lambda g, ans, *args: parallel_call(ufunc, (g,))
    if operand < 0:
        return lambda g, ans, *args: parallel_call(ufunc, (g, ans))
    return lambda g, ans, *args: parallel_call(ufunc, (g, args[operand]))


def _large_twin(ufunc, *calls):
    """Give ``ufunc``'s rule a twin (``Rule.large_twin``) whose VJPs listed in ``calls`` are one split call."""
    rule = RULES[ufunc]
    vjps = tuple(v if c is None else _one_call(*c) for v, c in zip(rule.vjps, calls))
    rule.large_twin = dataclasses.replace(rule, vjps=vjps)


# --------------------------------------------------------------- arithmetic
# Constant factors go onto the cotangent first, ``(g * 2) * x`` rather than
# ``g * (x * 2)``: inside a traced gradient ``g`` is often a plain array, so the
# first product records nothing and a Hessian's sweep has one node less.
_core(np.add, lambda g, ans, x, y: g, lambda g, ans, x, y: g, needs=((), ()))
_core(np.subtract, lambda g, ans, x, y: g, lambda g, ans, x, y: -g, needs=((), ()))
_core(np.multiply, lambda g, ans, x, y: g * y, lambda g, ans, x, y: g * x, needs=((1,), (0,)))
# np.divide is np.true_divide.
_core(np.true_divide, lambda g, ans, x, y: g / y, lambda g, ans, x, y: -g * ans / y, needs=((1,), (1, -1)))
_core(np.negative, lambda g, ans, x: -g, needs=((),))
_core(np.positive, lambda g, ans, x: g, needs=((),))
_core(np.reciprocal, lambda g, ans, x: -g * ans * ans, needs=((-1,),))
_core(np.square, lambda g, ans, x: (g * 2) * x, needs=((0,),))
# NumPy's square loop is the product of the element with itself: the same bits as x * x.
RULES[np.multiply].same_operands = np.square
# (Twins copy their rule whole: made once every attribute is set.)
_large_twin(np.subtract, None, (np.negative, None))
_large_twin(np.multiply, (np.multiply, 1), (np.multiply, 0))
_large_twin(np.true_divide, (np.true_divide, 1), None)
_large_twin(np.negative, (np.negative, None))


def _power_base(g, ans, x, y):
    if _is_const_scalar(y):
        if y == 2:
            return (g * 2) * x
        if y == 1:
            return g
        if y == 0:
            return g * 0
    return (g * y) * x ** (y - 1)


def _power_exponent(g, ans, x, y):
    # d/dy x**y = x**y log(x); at x == 0 the product is taken as 0 (the limit for y > 0).
    safe_log = np.log(np.where(x == 0, 1, x))
    return g * (ans * safe_log)


# np.pow is np.power.
_core(np.power, _power_base, _power_exponent, note="d/dy at x == 0 taken as 0", needs=((0, 1), (0, 1, -1)))
_core(np.float_power, lambda g, ans, x, y: g * (y * np.float_power(x, y - 1)), _power_exponent)

# --------------------------------------------------------------- exp and log
_core(np.exp, lambda g, ans, x: g * ans, needs=((-1,),))
_large_twin(np.exp, (np.multiply, -1))
_core(np.exp2, lambda g, ans, x: (g * _LN2) * ans, needs=((-1,),))
_core(np.expm1, lambda g, ans, x: g * (ans + 1), needs=((-1,),))
_core(np.log, lambda g, ans, x: g / x, needs=((0,),))
_large_twin(np.log, (np.true_divide, 0))
_core(np.log2, lambda g, ans, x: (g / _LN2) / x, needs=((0,),))
_core(np.log10, lambda g, ans, x: (g / _LN10) / x, needs=((0,),))
_core(np.log1p, lambda g, ans, x: g / (x + 1), needs=((0,),))
_core(np.sqrt, lambda g, ans, x: (g * 0.5) / ans, note="inf at 0 (0 where the cotangent is 0)", needs=((-1,),))
_core(np.cbrt, lambda g, ans, x: (g / 3) / (ans * ans), note="inf at 0 (0 where the cotangent is 0)", needs=((-1,),))
# exp(x - ans) <= 1 never overflows: the stable form of e^x / (e^x + e^y).
_core(
    np.logaddexp,
    lambda g, ans, x, y: g * np.exp(x - ans),
    lambda g, ans, x, y: g * np.exp(y - ans),
)
_core(
    np.logaddexp2,
    lambda g, ans, x, y: g * np.exp2(x - ans),
    lambda g, ans, x, y: g * np.exp2(y - ans),
)

# --------------------------------------------------------------- trigonometric
# np.asin, np.acos, np.atan, np.atan2, np.asinh, ... are the same ufunc objects.
_core(np.sin, lambda g, ans, x: g * remembered(np.cos, x), remember=True, needs=((0,),))
# -g first: inside a traced gradient g is often plain, so negating it records nothing
# (negating sin(x) would be one more recorded pass over x, and one more VJP).
_core(np.cos, lambda g, ans, x: -g * remembered(np.sin, x), remember=True, needs=((0,),))
_core(np.tan, lambda g, ans, x: g * (ans * ans + 1), needs=((-1,),))
_core(np.arcsin, lambda g, ans, x: g / np.sqrt(1 - x * x))
_core(np.arccos, lambda g, ans, x: -g / np.sqrt(1 - x * x))
_core(np.arctan, lambda g, ans, x: g / (x * x + 1), needs=((0,),))
_core(
    np.arctan2,
    lambda g, ans, y, x: g * (x / (x * x + y * y)),
    lambda g, ans, y, x: g * (-y / (x * x + y * y)),
)
_core(
    np.hypot,
    lambda g, ans, x, y: g * (x / _nonzero(ans)),
    lambda g, ans, x, y: g * (y / _nonzero(ans)),
    note="subgradient 0 at (0, 0)",
)
_core(np.sinh, lambda g, ans, x: g * remembered(np.cosh, x), remember=True, needs=((0,),))
_core(np.cosh, lambda g, ans, x: g * remembered(np.sinh, x), remember=True, needs=((0,),))
_core(np.tanh, lambda g, ans, x: g * (1 - ans * ans), needs=((-1,),))
_core(np.arcsinh, lambda g, ans, x: g / np.sqrt(x * x + 1))
# sqrt(x - 1) * sqrt(x + 1), not sqrt(x*x - 1): the principal branch for complex x.
_core(np.arccosh, lambda g, ans, x: g / (np.sqrt(x - 1) * np.sqrt(x + 1)))
_core(np.arctanh, lambda g, ans, x: g / (1 - x * x))
# np.radians and np.degrees are distinct ufunc objects with the same maths.
for _f in (np.deg2rad, np.radians):
    _core(_f, lambda g, ans, x: g * _DEG)
for _f in (np.rad2deg, np.degrees):
    _core(_f, lambda g, ans, x: g * (1 / _DEG))


# --------------------------------------------------------------- abs, sign-like
def _abs_vjp(g, ans, x):
    if np.iscomplexobj(x):
        # Re(c dz) with d|z| = Re(conj(z) dz) / |z|; 0 at z == 0 (a subgradient).
        return g * (np.conjugate(x) / _nonzero(ans))
    return g * np.sign(x)


# np.abs is np.absolute; np.conj is np.conjugate.
_core(np.absolute, _abs_vjp, note="subgradient 0 at 0")
_core(np.fabs, lambda g, ans, x: g * np.sign(x), note="subgradient 0 at 0")
_core(np.conjugate, lambda g, ans, x: np.conjugate(g))
# copysign(x, y) = |x| * (-1 if signbit(y) else 1): piecewise constant in y.
_core(
    np.copysign,
    lambda g, ans, x, y: np.where(np.signbit(y), -g, g) * np.sign(x),
    CONSTANT_ARG,
    note="subgradient 0 at x == 0; no gradient to the sign source",
)
# nextafter(x, y) is x moved by one unit in the last place towards y: x plus a piecewise
# constant step, so its derivative is 1 in x (0 in y), like JAX's round-to-grid rules.
# It was a constant once: a silent zero gradient.
_core(np.nextafter, lambda g, ans, x, y: g, CONSTANT_ARG, note="derivative 1 in x (the step of one ulp is constant)")
# heaviside(x1, x2) = x2 where x1 == 0, else a constant 0 or 1.
_core(np.heaviside, CONSTANT_ARG, lambda g, ans, x1, x2: np.where(x1 == 0, g, 0))


# --------------------------------------------------------------- max / min
def _split(g, wins, tie):
    """``g`` where this input wins, ``g / 2`` on a tie, 0 where the other input wins."""
    return np.where(wins, g, np.where(tie, g * 0.5, 0))


def _extremum(ufunc, better, nan_propagates):
    """Register maximum-like ``ufunc``; ``better(a, b)`` says that ``a`` is selected over ``b``."""

    def wins(a, b, first):
        strictly = better(a, b)
        a_nan, b_nan = np.isnan(a), np.isnan(b)
        if nan_propagates:  # maximum: a NaN is the output (the first one if both are NaN)
            return strictly | (a_nan if first else a_nan & ~b_nan)
        return strictly | (b_nan & ~a_nan)  # fmax: the non-NaN input is the output

    _core(
        ufunc,
        lambda g, ans, x, y: _split(g, wins(x, y, True), x == y),
        lambda g, ans, x, y: _split(g, wins(y, x, False), x == y),
        note="ties split equally",
    )


_extremum(np.maximum, np.greater, True)
_extremum(np.minimum, np.less, True)
_extremum(np.fmax, np.greater, False)
_extremum(np.fmin, np.less, False)


# --------------------------------------------------------------- remainders and parts
def _quotient_rule(quotient):
    """VJPs of ``r = x - q(x, y) * y`` with a piecewise-constant integer quotient ``q``."""
    return (
        lambda g, ans, x, y: g,
        lambda g, ans, x, y: -g * quotient(strip(x), strip(y), strip(ans)),
    )


# np.mod is np.remainder; NumPy computes it consistently with floor_divide.
_core(np.remainder, *_quotient_rule(lambda x, y, r: np.floor_divide(x, y)), note="quotient treated as constant")
# fmod's quotient truncates; recovered exactly (it is an integer) from the result.
_core(np.fmod, *_quotient_rule(lambda x, y, r: np.rint((x - r) / y)), note="quotient treated as constant")
# divmod(x, y) = (floor_divide(x, y), remainder(x, y)); the quotient output carries no gradient.
_core(
    np.divmod,
    lambda g, ans, x, y: g[1],
    lambda g, ans, x, y: -g[1] * strip(ans[0]),
    note="quotient output has zero gradient",
)
# modf(x) = (fractional part, integral part); the integral part is piecewise constant.
_core(np.modf, lambda g, ans, x: g[0], note="integral part has zero gradient")


# --------------------------------------------------------------- switches (Rule.switch)
# Where the smooth piece of a kinked function changes: ODE rules split their steps there.
def _difference(x, y, *rest, **kwargs):
    return x - y


def _real_argument(x, *rest, **kwargs):
    return None if np.iscomplexobj(x) else x


def _quotient_switch(x, y, *rest, **kwargs):
    # The integer quotient changes where x / y crosses an integer: where sin(pi x / y) changes sign.
    return np.sin(np.pi * (x / y))


defswitch(_difference, np.maximum, np.minimum, np.fmax, np.fmin)
defswitch(_real_argument, np.absolute, np.fabs, np.heaviside)
defswitch(lambda x, y, *rest, **kwargs: (x, y), np.copysign)
defswitch(_quotient_switch, np.remainder, np.fmod, np.divmod)


# --------------------------------------------------------------- mantissa and exponent
# frexp(x) = (m, e) with x = m * 2**e: dm/dx = 2**-e (e is an integer output).
_core(np.frexp, lambda g, ans, x: np.ldexp(g[0], -ans[1]), note="exponent output is an integer")
_core(np.ldexp, lambda g, ans, x, e: np.ldexp(g, e), CONSTANT_ARG)


# --------------------------------------------------------------- vector / matrix ufuncs
# vecdot(a, b) = sum(conj(a) * b, -1), matvec(A, v) = A v, vecmat(v, A) = conj(v) A.
# The conjugated argument is anti-holomorphic: dL = Re(g conj(da) b) = Re(da conj(g b)).
def _conj(v):
    return np.conjugate(v) if np.iscomplexobj(v) else v


def _vecdot_a(g, ans, a, b, **kwargs):
    return _conj(np.expand_dims(g, -1) * b)


def _vecdot_b(g, ans, a, b, **kwargs):
    return np.expand_dims(g, -1) * _conj(a)


def _matvec_a(g, ans, a, v, **kwargs):
    return np.expand_dims(g, -1) * np.expand_dims(v, -2)


def _matvec_v(g, ans, a, v, **kwargs):
    return np.matvec(np.swapaxes(a, -1, -2), g)


def _vecmat_v(g, ans, v, a, **kwargs):
    return _conj(np.matvec(a, g))


def _vecmat_a(g, ans, v, a, **kwargs):
    return np.expand_dims(_conj(v), -1) * np.expand_dims(g, -2)


def _gufunc(ufunc, *vjps):
    """Register a gufunc as a primitive on its last (core) axes plus ``axes=``/``axis=`` handling.

    The primitive always works on trailing core dimensions, so its VJPs can
    use negative axes; other layouts are moved there with ``np.moveaxis``.
    """
    inputs, output = ufunc.signature.split("->")
    core_in = [c.count(",") + 1 for c in inputs[1:-1].split("),(")]  # no 0-d core inputs here
    core_out = output != "()"
    last = primitive(lambda *args, **kwargs: ufunc(*args, **kwargs))
    last.__name__ = last.__qualname__ = f"{ufunc.__name__}_core_last"
    # The VJPs are products of the cotangent with the other operand (or matvecs, which
    # build the dense batch where they meet a sparse one): sparse batches may come.
    defvjp(last, *vjps, sparse=True)

    def impl(*args, axes=None, axis=None, keepdims=False, **kwargs):
        if keepdims:
            raise NonDifferentiableArgumentError(
                f"numpy.{ufunc.__name__}(..., keepdims=True) is not differentiable in tapegrad; "
                "use np.expand_dims on the result instead."
            )
        if axis is not None:
            axes = [(axis,)] * len(core_in) + ([(axis,)] if core_out else [])
        if axes is None:
            return last(*args, **kwargs)
        axes = [tuple(ax) if isinstance(ax, (tuple, list)) else (ax,) for ax in axes]
        moved = [np.moveaxis(a, ax, tuple(range(-len(ax), 0))) for a, ax in zip(args, axes)]
        out = last(*moved, **kwargs)
        if core_out:
            out = np.moveaxis(out, -1, axes[len(core_in)][0] if len(axes) > len(core_in) else -1)
        return out

    impl.__name__ = impl.__qualname__ = ufunc.__name__
    defcomposite(ufunc, impl)
    return impl


#: The traced implementations, by ufunc (rules/contractions.py may register its own
#: composites for the same ufuncs; the module imported last wins the registry).
GUFUNC_IMPLS = {
    np.vecdot: _gufunc(np.vecdot, _vecdot_a, _vecdot_b),
    np.matvec: _gufunc(np.matvec, _matvec_a, _matvec_v),
    np.vecmat: _gufunc(np.vecmat, _vecmat_v, _vecmat_a),
}

# --------------------------------------------------------------- complex parts
# real(z): dL = g dRe(z) = Re(g dz)  -> c = g;  imag(z): dL = g dIm(z) = Re(-1j g dz) -> c = -1j g.
defvjp(np.real, lambda g, ans, z: g)
defvjp(np.imag, lambda g, ans, z: -1j * g)

# --------------------------------------------------------------- integer-valued ufuncs
# Bitwise and integer ufuncs (their outputs are integers or booleans) carry no
# gradient; rules/nondiff.py holds the other constant ufuncs (sign, floor, ...).
_INTEGER_UFUNCS = (
    np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.invert, np.left_shift, np.right_shift,
    np.bitwise_count, np.gcd, np.lcm, np.isnat,
)
defconstant(*(f for f in _INTEGER_UFUNCS if f not in RULES))
