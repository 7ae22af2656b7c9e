"""autograd's differential operators, each answered by tapegrad's own.

=========================  ==========================================================
autograd                   tapegrad
=========================  ==========================================================
grad                       ``tg.grad(fun, argnums)``
value_and_grad             ``tg.value_and_grad``
grad_and_aux               ``tg.grad(..., has_aux=True)``
holomorphic_grad           ``tg.grad(..., holomorphic=True)`` (complex arguments)
jacobian                   ``tg.jacobian``
hessian                    ``tg.hessian``
make_vjp                   ``tg.vjp``
make_jvp, deriv            ``tg.jvp``
elementwise_grad           ``tg.vjp`` with a cotangent of ones
make_hvp                   ``tg.hvp`` (and ``tg.grad`` for the gradient it returns)
hessian_tensor_product     ``tg.hvp``
tensor_jacobian_product    ``tg.vjp`` (a full cotangent) or ``tg.jacobian`` (a partial one)
make_ggnvp                 ``tg.jvp``, ``tg.hvp`` and ``tg.vjp``
checkpoint                 ``tg.checkpoint``
=========================  ==========================================================

``argnum`` is autograd's: an integer, or a tuple/list of them (the result is
then a tuple).  Operators are named ``{op}_of_{fun}_wrt_argnum_{argnum}``.
"""

from __future__ import annotations

import inspect
import warnings
from collections import OrderedDict
from typing import Any, Callable

import numpy as np
import tapegrad as tg

from ._shim import argnums, dtype, unary
from .core import make_jvp as _make_jvp
from .core import make_vjp as _make_vjp
from .core import vspace
from .wrap_util import nary_operator, unary_to_nary

__all__ = [
    "grad", "elementwise_grad", "deriv", "jacobian", "holomorphic_grad", "grad_named", "hessian",
    "make_hvp", "hessian_tensor_product", "hessian_vector_product", "tensor_jacobian_product",
    "vector_jacobian_product", "make_jvp_reversemode", "make_ggnvp", "value_and_grad", "grad_and_aux",
    "multigrad_dict", "checkpoint", "make_vjp", "make_jvp",
]

make_vjp = unary_to_nary(_make_vjp)
make_jvp = unary_to_nary(_make_jvp)


@nary_operator
def grad(fun: Callable, argnum: Any) -> Callable:
    """
    Returns a function which computes the gradient of `fun` with respect to
    positional argument number `argnum` (tapegrad.grad). The returned function
    takes the same arguments as `fun` and returns the gradient, shaped like the
    argument. `fun` must return a real scalar."""
    return tg.grad(fun, argnums(argnum))


@unary_to_nary
def elementwise_grad(fun: Callable, x: Any) -> Any:
    """
    Returns a function computing the sum of each column of the Jacobian of `fun`
    in one pass: the VJP with a cotangent of ones (tapegrad.vjp)."""
    vjp, ans = _make_vjp(fun, x)
    if vspace(ans).iscomplex:
        raise TypeError("Elementwise_grad only applies to real-output functions.")
    return vjp(vspace(ans).ones())


@unary_to_nary
def deriv(fun: Callable, x: Any) -> Any:
    """The directional derivative along ones (tapegrad.jvp)."""
    return _make_jvp(fun, x)(vspace(x).ones())[1]


@nary_operator
def jacobian(fun: Callable, argnum: Any) -> Callable:
    """
    Returns a function which computes the Jacobian of `fun` with respect to
    positional argument number `argnum` (tapegrad.jacobian): shape
    out.shape + x.shape."""
    return tg.jacobian(fun, argnums(argnum))


@nary_operator
def holomorphic_grad(fun: Callable, argnum: Any) -> Callable:
    """The complex derivative of a holomorphic function (tapegrad.grad(holomorphic=True))."""
    holomorphic = tg.grad(fun, argnums(argnum), holomorphic=True)

    def gradient(*args: Any, **kwargs: Any) -> Any:
        _, x = unary(fun, argnum, args, kwargs)
        if all(np.dtype(dtype(leaf)).kind == "c" for leaf in (x if isinstance(argnum, (tuple, list)) else [x])):
            return holomorphic(*args, **kwargs)
        # autograd defines holomorphic_grad(f) as grad(real(f)) and only warns for real input
        warnings.warn("Input to holomorphic_grad is not complex")
        return tg.grad(lambda *a, **k: np.real(fun(*a, **k)), argnums(argnum))(*args, **kwargs)

    return gradient


def grad_named(fun: Callable, argname: str) -> Callable:
    """The gradient with respect to a named argument."""
    return grad(fun, inspect.getfullargspec(fun).args.index(argname))


@nary_operator
def hessian(fun: Callable, argnum: Any) -> Callable:
    """Returns a function that computes the exact Hessian (tapegrad.hessian)."""
    return tg.hessian(fun, argnums(argnum))


@unary_to_nary
def make_hvp(fun: Callable, x: Any) -> tuple:
    """``(hvp, gradient)`` at ``x``: ``hvp(v)`` is the Hessian times ``v`` (tapegrad.hvp)."""
    hvp = tg.hvp(fun)
    return (lambda v: hvp(x, v)), tg.grad(fun)(x)


def hessian_tensor_product(fun: Callable, argnum: int = 0) -> Callable:
    """``h(*args, tensor)``: the Hessian contracted with ``tensor`` over the argument's axes (tapegrad.hvp)."""

    def product(*args: Any, **kwargs: Any) -> Any:
        args, v = args[:-1], args[-1]
        f, x = unary(fun, argnum, args, kwargs)
        if np.shape(v) == np.shape(x):
            return tg.hvp(f)(x, v)
        # a tensor over fewer axes: autograd's definition, grad of <grad f, v>
        return tg.grad(lambda x_: np.tensordot(tg.grad(f)(x_), v, np.ndim(v)))(x)

    return product


hessian_vector_product = hessian_tensor_product


def tensor_jacobian_product(fun: Callable, argnum: int = 0) -> Callable:
    """``p(*args, tensor)``: ``tensor`` contracted with the Jacobian's leading (output) axes."""

    def product(*args: Any, **kwargs: Any) -> Any:
        args, v = args[:-1], args[-1]
        f, x = unary(fun, argnum, args, kwargs)
        out, pullback = tg.vjp(f, x)
        if np.shape(v) == np.shape(out):
            return pullback(v)[0]
        return tg.jacobian(lambda x_: np.tensordot(v, f(x_), axes=np.ndim(v)))(x)

    return product


vector_jacobian_product = tensor_jacobian_product


@unary_to_nary
def make_jvp_reversemode(fun: Callable, x: Any) -> Callable:
    """``v -> J v`` (tapegrad.jvp, which tapegrad itself computes by the transpose trick)."""
    return lambda v: tg.jvp(fun, (x,), (v,))[1]


def make_ggnvp(f: Callable, g: Callable = lambda x: 1.0 / 2 * np.sum(x**2, axis=-1), f_argnum: int = 0) -> Callable:
    """Generalized Gauss-Newton products ``v -> J^T H_g J v`` at a point."""

    @unary_to_nary
    def _make_ggnvp(f_: Callable, x: Any) -> Callable:
        f_x, f_pullback = tg.vjp(f_, x)
        g_hvp = tg.hvp(g)

        def ggnvp(v: Any) -> Any:
            _, jv = tg.jvp(f_, (x,), (v,))
            return f_pullback(g_hvp(f_x, jv))[0]

        return ggnvp

    return _make_ggnvp(f, f_argnum)


@nary_operator
def value_and_grad(fun: Callable, argnum: Any) -> Callable:
    """Returns a function that returns both value and gradient (tapegrad.value_and_grad)."""
    return tg.value_and_grad(fun, argnums(argnum))


@nary_operator
def grad_and_aux(fun: Callable, argnum: Any) -> Callable:
    """The gradient of the first output and the second output unchanged (tapegrad.grad(has_aux=True))."""
    return tg.grad(fun, argnums(argnum), has_aux=True)


def multigrad_dict(fun: Callable) -> Callable:
    """Gradients with respect to all arguments at once, as a dict by argument name."""
    sig = inspect.signature(fun)

    def gradfun(*args: Any, **kwargs: Any) -> Any:
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        names = list(bound.arguments)

        def by_name(values: dict) -> Any:
            pos, kw = [], {}
            for name in names:
                p = sig.parameters[name]
                if p.kind is p.VAR_POSITIONAL:
                    pos.extend(values[name])
                elif p.kind is p.VAR_KEYWORD:
                    kw.update(values[name])
                elif p.kind is p.KEYWORD_ONLY:
                    kw[name] = values[name]
                else:
                    pos.append(values[name])
            return fun(*pos, **kw)

        grads = tg.grad(by_name)(dict(bound.arguments))
        return OrderedDict((name, grads[name]) for name in names)

    return gradfun


def checkpoint(fun: Callable) -> Callable:
    """Recompute ``fun``'s intermediate values in the backward pass (tapegrad.checkpoint)."""
    return tg.checkpoint(fun)

