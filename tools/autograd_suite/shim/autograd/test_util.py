"""autograd.test_util on tapegrad: derivatives against central finite differences.

The same checks as autograd's, at the same tolerances, with tapegrad computing
the derivatives:

* reverse mode (``"rev"``): for random ``u`` (input space) and ``w`` (output
  space), ``<u, vjp(w)>`` from ``tapegrad.vjp`` must equal ``<w, J u>`` from the
  central difference ``(f(x + u eps/2) - f(x - u eps/2)) / eps``, and the VJP
  must live in the input's space (structure, shape, dtype);
* forward mode (``"fwd"``): ``J u`` from ``tapegrad.jvp`` must equal the
  central difference, projected on a random vector;
* ``order=2`` (the default) repeats both checks on the derivative maps
  themselves, ``(x, w) -> vjp_x(w)`` and ``(x, u) -> jvp_x(u)``, with respect to
  both arguments, and so on for higher orders.

``|a - b| < 1e-6`` or ``|a - b| / |a + b| < 1e-6`` passes, with ``eps = 1e-6``.
A failed comparison raises :class:`WrongDerivative` (an ``AssertionError``).
"""

from __future__ import annotations

from itertools import product
from typing import Any, Callable

from ._shim import VSpaceMismatch, WrongDerivative, get_name, unary
from .core import make_jvp, make_vjp, vspace

__all__ = ["check_grads", "combo_check", "check_equivalent", "check_vjp", "check_jvp", "scalar_close",
           "make_numerical_jvp", "TOL", "RTOL", "EPS"]

TOL = 1e-6
RTOL = 1e-6
EPS = 1e-6


def _number(a: Any) -> Any:
    try:
        return float(a)
    except (TypeError, ValueError):
        return a


def scalar_close(a: Any, b: Any) -> bool:
    return abs(a - b) < TOL or abs(a - b) / abs(a + b) < RTOL


def make_numerical_jvp(f: Callable, x: Any) -> Callable:
    """``v -> (f(x + v eps/2) - f(x - v eps/2)) / eps`` in ``f``'s output space."""
    y = f(x)
    x_vs, y_vs = vspace(x), vspace(y)

    def jvp(v: Any) -> Any:
        f_plus = f(x_vs.add(x, x_vs.scalar_mul(v, EPS / 2)))
        f_minus = f(x_vs.add(x, x_vs.scalar_mul(v, -EPS / 2)))
        return y_vs.scalar_mul(y_vs.add(f_plus, y_vs.scalar_mul(f_minus, -1.0)), 1.0 / EPS)

    return jvp


def check_vjp(f: Callable, x: Any) -> None:
    vjp, y = make_vjp(f, x)
    jvp = make_numerical_jvp(f, x)
    x_vs, y_vs = vspace(x), vspace(y)
    x_v, y_v = x_vs.randn(), y_vs.randn()
    vjp_y = x_vs.covector(vjp(y_vs.covector(y_v)))
    if vspace(vjp_y) != x_vs:
        raise VSpaceMismatch(
            f"(VJP) check of {get_name(f)}: the VJP lives in {vspace(vjp_y)}, the argument in {x_vs}"
        )
    exact = x_vs.inner_prod(x_v, vjp_y)
    numeric = y_vs.inner_prod(y_v, jvp(x_v))
    if not scalar_close(numeric, exact):
        raise WrongDerivative(
            f"Derivative (VJP) check of {get_name(f)} failed: "
            f"analytic {_number(exact)!r}, numeric {_number(numeric)!r}\narg: {x}"
        )


def check_jvp(f: Callable, x: Any) -> None:
    x_v = vspace(x).randn()
    exact = make_jvp(f, x)(x_v)[1]
    numeric = make_numerical_jvp(f, x)(x_v)
    _check_equivalent(exact, numeric, f"Derivative (JVP) check of {get_name(f)} failed", x)


def _check_equivalent(x: Any, y: Any, what: str, arg: Any = None) -> None:
    x_vs, y_vs = vspace(x), vspace(y)
    if x_vs != y_vs:
        raise VSpaceMismatch(f"{what}: VSpace mismatch: {x_vs} vs {y_vs}")
    v = x_vs.randn()
    a, b = x_vs.inner_prod(x, v), x_vs.inner_prod(y, v)
    if not scalar_close(a, b):
        where = "" if arg is None else f"\narg: {arg}"
        raise WrongDerivative(f"{what}: projections {_number(a)!r} vs {_number(b)!r}\nx: {x}\ny: {y}{where}")


def check_equivalent(x: Any, y: Any) -> None:
    """Assert that two values are the same point of the same space (projected on a random vector)."""
    _check_equivalent(x, y, "check_equivalent: value mismatch")


def _check(f: Callable, x: Any, modes: Any, order: int) -> None:
    assert all(m in ("fwd", "rev") for m in modes)
    if "fwd" in modes:
        check_jvp(f, x)
        if order > 1:

            def jvp_f(x_: Any, v: Any) -> Any:
                return make_jvp(f, x_)(v)[1]

            jvp_f.__name__ = f"jvp_{get_name(f)}"
            v = vspace(x).randn()
            check_grads(jvp_f, (0, 1), modes, order=order - 1)(x, v)
    if "rev" in modes:
        check_vjp(f, x)
        if order > 1:

            def vjp_f(x_: Any, v: Any) -> Any:
                return make_vjp(f, x_)[0](v)

            vjp_f.__name__ = f"vjp_{get_name(f)}"
            v = vspace(f(x)).randn()
            check_grads(vjp_f, (0, 1), modes, order=order - 1)(x, v)


def check_grads(f: Callable, argnum: Any = 0, modes: Any = ("fwd", "rev"), order: int = 2) -> Callable:
    """``check_grads(f, argnum=0, modes=["fwd", "rev"], order=2)(*args, **kwargs)``, as autograd's."""

    def checker(*args: Any, **kwargs: Any) -> None:
        unary_f, x = unary(f, argnum, args, kwargs)
        _check(unary_f, x, modes, order)

    checker.__name__ = f"check_grads_of_{get_name(f)}_wrt_argnum_{argnum}"
    return checker


def combo_check(fun: Callable, *args: Any, **kwargs: Any) -> Callable:
    """Check ``fun`` at every combination of the given argument and keyword values."""

    def _combo_check(*arg_choices: Any, **kwarg_choices: Any) -> None:
        kwarg_key_vals = [[(k, x) for x in xs] for k, xs in kwarg_choices.items()]
        for _args in product(*arg_choices):
            for _kwargs in product(*kwarg_key_vals):
                check_grads(fun, *args, **kwargs)(*_args, **dict(_kwargs))

    return _combo_check
