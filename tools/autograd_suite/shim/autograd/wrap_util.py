"""autograd's calling convention for operators: ``op(fun, argnum=0, ...)(*args, **kwargs)``."""

from __future__ import annotations

import functools
from typing import Any, Callable

from ._shim import get_doc, get_name, unary

__all__ = ["unary_to_nary", "wraps", "wrap_nary_f", "get_name", "get_doc"]


def wraps(fun: Any, namestr: str = "{fun}", docstr: str = "{doc}", **kwargs: Any) -> Callable:
    """Name (and document) the decorated function after ``fun``, formatting the templates."""

    def name_it(f: Any) -> Any:
        try:
            f.__name__ = namestr.format(fun=get_name(fun), **kwargs)
            f.__doc__ = docstr.format(fun=get_name(fun), doc=get_doc(fun), **kwargs)
        except Exception:
            pass
        return f

    return name_it


_NARY_DOC = """\
    {op} of function {fun} with respect to argument number {argnum}. Takes the
    same arguments as {fun} but returns the {op}.
    """


def wrap_nary_f(fun: Any, op: Any, argnum: Any) -> Callable:
    return wraps(fun, "{op}_of_{fun}_wrt_argnum_{argnum}", _NARY_DOC, op=get_name(op), argnum=argnum)


def unary_to_nary(unary_operator: Callable) -> Callable:
    """Turn ``op(f, x, ...)`` (``f`` of one value) into ``op(fun, argnum=0, ...)(*args, **kwargs)``."""

    @functools.wraps(unary_operator)
    def nary_operator(fun: Any, argnum: Any = 0, *op_args: Any, **op_kwargs: Any) -> Callable:
        assert type(argnum) in (int, tuple, list), argnum

        @wrap_nary_f(fun, unary_operator, argnum)
        def nary_f(*args: Any, **kwargs: Any) -> Any:
            unary_f, x = unary(fun, argnum, args, kwargs)
            return unary_operator(unary_f, x, *op_args, **op_kwargs)

        return nary_f

    return nary_operator


def nary_operator(op: Callable) -> Callable:
    """Like :func:`unary_to_nary` for operators that take ``(fun, argnum)`` themselves.

    ``op(fun, argnum, *op_args, **op_kwargs)`` returns the computing function; it
    is named ``{op}_of_{fun}_wrt_argnum_{argnum}`` as autograd names it.
    """

    @functools.wraps(op)
    def operator(fun: Any, argnum: Any = 0, *op_args: Any, **op_kwargs: Any) -> Callable:
        assert type(argnum) in (int, tuple, list), argnum
        computing = op(fun, argnum, *op_args, **op_kwargs)

        @wrap_nary_f(fun, op, argnum)
        def nary_f(*args: Any, **kwargs: Any) -> Any:
            return computing(*args, **kwargs)

        return nary_f

    return operator
