"""autograd.util: small helpers and the deprecated ``quick_grad_check``."""

from __future__ import annotations

import warnings
from typing import Any, Callable

from ._shim import subvals


def subval(x: Any, i: int, v: Any) -> tuple:
    return subvals(x, [(i, v)])


def func(f: Callable) -> Callable:
    return f


def quick_grad_check(fun: Callable, arg0: Any, extra_args: tuple = (), kwargs: Any = None, verbose: bool = True,
                     eps: float = 1e-4, rtol: float = 1e-4, atol: float = 1e-6, rs: Any = None) -> None:
    warnings.warn("\nThe quick_grad_check function is deprecated. See the update guide.")
    from .test_util import check_grads

    kwargs = kwargs or {}
    check_grads(lambda a: fun(a, *extra_args, **kwargs), modes=["rev"], order=1)(arg0)


__all__ = ["subvals", "subval", "func", "quick_grad_check"]
