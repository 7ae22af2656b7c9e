"""What the shim itself needs: its error types and small helpers.

The shim answers autograd's public API with tapegrad's public API.  Three
kinds of failure are told apart by type, so that the runner can say which
category a failing test falls in:

``WrongDerivative``
    A derivative differs from central finite differences (``check_grads``) or
    from another way of computing the same number (``check_equivalent``).  It
    subclasses ``AssertionError``, as autograd's checker raises.
``VSpaceMismatch``
    A result has another structure, shape or dtype than autograd's contract
    says (a float64 gradient for a float32 argument): the numbers may be
    right, the type is not.
``ShimLimitation``
    Part of autograd's API that is about autograd's own machinery (boxes,
    nodes, graph replay) and has no faithful counterpart in tapegrad.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tapegrad as tg


class WrongDerivative(AssertionError):
    """A derivative disagrees with finite differences or with an equivalent computation."""


class VSpaceMismatch(AssertionError):
    """A result's structure, shape or dtype is not the one autograd's contract gives."""


class ShimLimitation(NotImplementedError):
    """autograd API about autograd's own internals, with no faithful tapegrad counterpart."""


def get_name(f: Any) -> str:
    return getattr(f, "__name__", "[unknown name]")


def get_doc(f: Any) -> str:
    return getattr(f, "__doc__", "")


def is_tracer(x: Any) -> bool:
    return type(x) is tg.Tracer


def raw(x: Any) -> Any:
    """The plain value under any number of tracer levels (autograd's ``getval``)."""
    return tg.stop_gradient(x)


def ndim(x: Any) -> int:
    n = getattr(x, "ndim", None)
    return n if n is not None else np.ndim(x)


def shape(x: Any) -> tuple:
    s = getattr(x, "shape", None)
    return tuple(s) if s is not None else np.shape(x)


def dtype(x: Any) -> np.dtype:
    d = getattr(x, "dtype", None)
    return d if d is not None else np.result_type(x)


def subvals(x: Any, ivs: Any) -> tuple:
    x_ = list(x)
    for i, v in ivs:
        x_[i] = v
    return tuple(x_)


def unary(fun: Any, argnum: Any, args: tuple, kwargs: dict) -> tuple:
    """autograd's reading of ``argnum``: ``(f, x)`` with ``f(x)`` the call with ``x`` put in place.

    An integer ``argnum`` picks one argument; a tuple or list picks several, and
    ``x`` is then the tuple of them.
    """
    if isinstance(argnum, int):
        x = args[argnum]

        def unary_f(x_: Any) -> Any:
            return fun(*subvals(args, [(argnum, x_)]), **kwargs)

    else:
        x = tuple(args[i] for i in argnum)

        def unary_f(x_: Any) -> Any:
            return fun(*subvals(args, zip(argnum, x_)), **kwargs)

    try:
        unary_f.__name__ = get_name(fun)
        unary_f.__doc__ = get_doc(fun)
    except (AttributeError, TypeError):
        pass
    return unary_f, x


def argnums(argnum: Any) -> Any:
    """autograd's ``argnum`` as tapegrad's ``argnums`` (a list becomes a tuple)."""
    assert type(argnum) in (int, tuple, list), argnum
    return argnum if isinstance(argnum, int) else tuple(argnum)
