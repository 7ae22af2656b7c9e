"""Checking derivatives against central finite differences, first and second order.

:func:`check_grads` is the one checker every rule test uses.  It compares
projections ``<v, J u>`` (random output cotangent ``v``, random input
direction ``u``) computed by tapegrad's reverse mode with central finite
differences in float64, checks that a *batch* of cotangents gives the same
rows as single VJPs (the property a one-sweep Jacobian relies on), and then
repeats the check on the traced VJP itself for second order.

Complex values follow tapegrad's convention: a cotangent ``c`` of ``z``
stands for the real form ``dz -> Re(c * dz)``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from .reverse import vjp

__all__ = ["check_grads", "numerical_jvp"]


def _is_float(x: Any) -> bool:
    return np.asarray(x).dtype.kind in "fc"


def _random_like(rng: np.random.Generator, x: Any) -> np.ndarray:
    x = np.asarray(x)
    out = rng.standard_normal(x.shape)
    if x.dtype.kind == "c":
        out = out + 1j * rng.standard_normal(x.shape)
    return out.astype(np.result_type(x.dtype, np.float64))


def _as_list(out: Any) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def numerical_jvp(fun: Callable, args: Sequence[Any], argnum: int, direction: Any, eps: float = 1e-6) -> list:
    """Central finite difference of ``fun`` along ``direction`` in argument ``argnum`` (float64)."""
    args64 = [np.asarray(a, dtype=np.result_type(a, np.float64)) if _is_float(a) else a for a in args]

    def shifted(sign: float) -> list:
        a = list(args64)
        a[argnum] = args64[argnum] + sign * eps * direction
        return [np.asarray(o) for o in _as_list(fun(*a))]

    plus, minus = shifted(1.0), shifted(-1.0)
    return [(p - m) / (2 * eps) for p, m in zip(plus, minus)]


def _real_inner(a: Any, b: Any) -> float:
    return float(np.real(np.sum(np.asarray(a) * np.asarray(b))))


def check_grads(
    fun: Callable,
    args: Sequence[Any],
    argnums: Optional[Sequence[int]] = None,
    order: int = 2,
    eps: float = 1e-6,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    batch: int = 3,
    seed: int = 0,
) -> None:
    """Assert that tapegrad's derivatives of ``fun`` match finite differences.

    Parameters
    ----------
    fun : callable
        Ordinary NumPy code; may return an array or a tuple of arrays.
    args : sequence
        Point at which to check (float64 recommended for the check itself).
    argnums : sequence of int, optional
        Arguments to check; by default every floating-point argument.
    order : int, default 2
        1 checks first derivatives; 2 also checks the derivative of the traced VJP.
    batch : int, default 3
        Size of the batch of cotangents compared against single VJPs (0 to skip).

    Raises
    ------
    AssertionError
        With the failing order, argument and the two numbers compared.
    """
    rng = np.random.default_rng(seed)
    args = list(args)
    if argnums is None:
        argnums = [i for i, a in enumerate(args) if _is_float(a)]
    outs = _as_list(fun(*args))
    cotangents = [_random_like(rng, o) for o in outs]
    packed = cotangents if len(cotangents) > 1 or isinstance(fun(*args), (tuple, list)) else cotangents[0]
    out_value, vjp_fun = vjp(fun, *args)
    grads = vjp_fun(packed)
    for k in argnums:
        u = _random_like(rng, args[k])
        fd = numerical_jvp(fun, args, k, u, eps)
        rhs = sum(_real_inner(v, d) for v, d in zip(cotangents, fd))
        lhs = _real_inner(grads[k], u)
        scale = max(1.0, abs(rhs), abs(lhs))
        if not abs(lhs - rhs) <= atol + rtol * scale:
            raise AssertionError(
                f"order 1, argument {k}: reverse mode <g, u> = {lhs!r} but finite differences give {rhs!r}"
            )
        if np.shape(grads[k]) != np.shape(args[k]):
            raise AssertionError(f"gradient of argument {k} has shape {np.shape(grads[k])}, expected {np.shape(args[k])}")
    if batch:
        stacked = [np.stack([_random_like(rng, o) for _ in range(batch)]) for o in outs]
        packed_batch = stacked if isinstance(packed, list) else stacked[0]
        batched = vjp_fun(packed_batch)
        for b in range(batch):
            single = vjp_fun([s[b] for s in stacked] if isinstance(packed, list) else stacked[0][b])
            for k in argnums:
                if not np.allclose(batched[k][b], single[k], rtol=1e-10, atol=1e-12):
                    raise AssertionError(f"batched cotangent row {b} differs from a single VJP for argument {k}")
    if order >= 2:
        # For a linear ``fun`` the VJP does not depend on the point, so differentiating it
        # checks nothing; ``fun(x) ** 2`` makes the cotangent reaching ``fun`` depend on x
        # (2 v fun(x)), which exercises every rule's VJP under a second sweep.
        squared = _squared(fun)
        for k in argnums:
            u = _random_like(rng, args[k])
            for f, cts in ((fun, packed), (squared, packed)):

                def projected_vjp(*a: Any, _k: int = k, _u: Any = u, _f: Any = f, _cts: Any = cts) -> Any:
                    _, f_vjp = vjp(_f, *a)
                    g = f_vjp(_cts)[_k]
                    return np.real(np.sum(g * _u))

                check_grads(
                    projected_vjp, args, argnums=argnums, order=order - 1, eps=eps,
                    rtol=rtol * 10, atol=atol * 10, batch=0, seed=seed + 1,
                )


def _squared(fun: Callable) -> Callable:
    """``fun`` with every floating-point output squared (structure kept)."""

    def square(o: Any) -> Any:
        return o * o if np.result_type(o).kind in "fc" else o

    def squared(*args: Any) -> Any:
        out = fun(*args)
        if isinstance(out, (tuple, list)):
            return type(out)(square(o) for o in out) if type(out) in (tuple, list) else type(out)(*map(square, out))
        return square(out)

    return squared
