"""Forward-mode products built from reverse mode: jvp, jacfwd, hvp.

tapegrad only has vector-Jacobian products (VJP) rules.  A Jacobian-vector
product (JVP) comes from the *transpose trick*: the pullback
``w -> vjp(f, x)(w) = J^T w`` is linear in the cotangent ``w``, so its own
VJP, evaluated with ``u`` as cotangent, is ``(J^T)^T u = J u``.  Concretely:

1. trace ``f`` at ``x`` and keep its pullback (tape level L1);
2. run the pullback on a *watched* placeholder cotangent ``w`` (level L2 >
   L1), so the backward sweep of ``f`` is recorded on L2; its value is
   irrelevant because the map is linear in ``w``;
3. one backward sweep of L2 seeded with the tangents gives ``J u``.

Step 3 accepts tangents with leading batch axes, so ``k`` JVPs (or the
``n`` basis tangents of :func:`jacfwd`) cost one sweep.  Since every rule is
ordinary NumPy code, all of this nests: a JVP inside ``grad`` or ``hessian``
is differentiated like any other code.

:func:`hvp` multiplies the Hessian by vectors without forming it: it is the
VJP of the traced gradient (reverse over reverse), using the symmetry of the
Hessian, which costs a small multiple of one gradient.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence, Tuple, Union

import numpy as np

from .reverse import _normalize_argnums, _vjp, grad, jacrev, vjp
from .backward import basis_rows, strong_zeros
from .requests import leading_batch
from .array_types import follow_library
from .tape import PLACEHOLDER_COTANGENTS
from .tracer import Tracer, strip
from .tree import flatten, unflatten
from .errors import NonDifferentiableArgumentError

__all__ = ["jvp", "jacfwd", "hvp"]

ArgNums = Union[int, Sequence[int]]


def _is_float(x: Any) -> bool:
    dtype = x.dtype if type(x) is Tracer else getattr(x, "dtype", None)
    if dtype is None:
        dtype = np.result_type(x)
    return dtype.kind in "fc"


def _tangent_leaves(primals: tuple, tangents: tuple) -> Tuple[list, tuple]:
    """Check tangents against primals; return (filled tangent tree, batch shape).

    Tangents of non-float leaves (integers, booleans) are replaced by zeros.
    """
    p_leaves, p_structure = flatten(primals)
    t_leaves, t_structure = flatten(tangents)
    if t_structure != p_structure:
        raise ValueError("tangents must have the same structure as primals (one tangent per primal array)")
    batch = leading_batch([t if _is_float(p) else None for p, t in zip(p_leaves, t_leaves)], p_leaves, "tangent")
    filled = [
        t if _is_float(p) and t is not None else np.zeros(batch + np.shape(p), dtype=np.result_type(p))
        for p, t in zip(p_leaves, t_leaves)
    ]
    return unflatten(p_structure, filled), batch


def jvp(fun: Callable, primals: Sequence[Any], tangents: Sequence[Any], has_aux: bool = False) -> tuple:
    """Evaluate ``fun(*primals)`` and its Jacobian-vector product with ``tangents``.

    Parameters
    ----------
    fun : callable
        Ordinary NumPy code; may return an array or a nested structure of arrays.
    primals : sequence
        The positional arguments (arrays or nested lists/tuples/dicts of arrays).
    tangents : sequence
        One tangent per primal, same structure and shapes.  Every tangent may
        carry the same extra *leading* batch axes, ``(k,) + x.shape``, to
        compute ``k`` products in one sweep.  Tangents of integer or boolean
        primals are ignored (use ``None`` or zeros).
    has_aux : bool, default False
        ``fun`` returns ``(output, aux)``; ``aux`` is returned undifferentiated.

    Returns
    -------
    out, tangent_out[, aux]
        ``out`` is what ``fun`` returned (a ``DataArray`` or ``Quantity`` stays
        one, holding values).  ``tangent_out`` has the structure of ``out``'s
        arrays (a ``Dataset``: a dict of its data variables), each leaf a plain
        array shaped ``batch + y.shape``: the directional derivative ``J u``.

    Notes
    -----
    Computed by the transpose trick (see the module docstring): a forward
    pass, the backward pass recorded once, and one backward sweep of that
    record that carries all tangents together.  The result is exact (not a
    finite difference) and differentiable again.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> out, t = tg.jvp(np.sin, (np.array([0.0, np.pi]),), (np.array([1.0, 2.0]),))
    >>> t
    array([ 1., -2.])
    >>> tg.jvp(lambda x: x ** 3, (2.0,), (np.array([1.0, 10.0]),))[1]
    array([ 12., 120.])
    """
    primals = tuple(primals)
    tangents = tuple(tangents)
    if len(primals) != len(tangents):
        raise ValueError(f"jvp got {len(primals)} primals but {len(tangents)} tangents")
    tangents, _ = _tangent_leaves(primals, tangents)
    out, plain, pullback, aux = _vjp(fun, primals, has_aux)
    tangent_out, _ = _push_forward(plain, pullback, tangents)
    if has_aux:
        return out, tangent_out, aux
    return out, tangent_out


def _push_forward(plain: Any, pullback: Callable, tangents: Any) -> tuple:
    """``J u`` for each tangent ``u``: the VJP of the (linear) pullback, evaluated at ``u``.

    Also returns the pullback of a zero cotangent, which the transpose trick
    computes anyway: it is zero unless the reverse sweep meets an infinite partial
    derivative (``0 * inf``), and then holds NaN.  ``plain`` is the output's arrays
    without their wrappers (a ``DataArray``'s data, a ``Dataset``'s dict of data
    variables), as :func:`tapegrad.reverse._vjp` gives them; tangents have its structure.
    """
    out_leaves, out_structure = flatten(plain)
    # Zeros in each output's own library (CuPy needs its operands on the device).
    placeholders = [follow_library(np.zeros(np.shape(y), dtype=np.result_type(y)), strip(y)) for y in out_leaves]

    def pulled_back(*cotangent_leaves: Any) -> tuple:
        # The placeholders' zeros are not zeros of the map: no strong zeros in this sweep.
        token = PLACEHOLDER_COTANGENTS.set(True)
        try:
            with strong_zeros("off"):
                return pullback(unflatten(out_structure, list(cotangent_leaves)))
        finally:
            PLACEHOLDER_COTANGENTS.reset(token)

    # The pullback is linear in its cotangent: the VJP of that map is J u.
    at_zero, transpose = vjp(pulled_back, *placeholders)
    return unflatten(out_structure, list(transpose(tangents))), at_zero


def _all_finite(tree: Any) -> bool:
    leaves, _ = flatten(tree)
    return all(bool(np.isfinite(leaf).all()) for leaf in leaves if leaf is not None and type(leaf) is not Tracer)


def jacfwd(fun: Callable, argnums: ArgNums = 0, has_aux: bool = False) -> Callable:
    """Return a function computing the full Jacobian of ``fun`` in forward mode.

    Same result and layout as :func:`tapegrad.jacobian`: shape
    ``out.shape + x.shape``.  All ``n = x.size`` basis tangents go through one
    batched sweep, so the cost grows with the number of *inputs*: prefer it
    for tall Jacobians (few inputs, many outputs) and :func:`tapegrad.jacobian`
    (reverse mode, cost grows with the number of outputs) for wide ones.

    Parameters
    ----------
    fun : callable
        Ordinary NumPy code; may return an array or a nested structure of arrays.
    argnums : int or sequence of int, default 0
        Positional argument(s) to differentiate (each may be a nested structure).
    has_aux : bool, default False
        ``fun`` returns ``(output, aux)``; the Jacobian function returns ``(jac, aux)``.

    Returns
    -------
    callable
        Returns the Jacobian (a tuple of them when ``argnums`` is a sequence,
        a structure of them when ``fun`` returns a structure).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> f = lambda x: np.stack([x[0] * x[1], np.sin(x[0]), x[1] ** 2])
    >>> tg.jacfwd(f)(np.array([0.0, 3.0]))
    array([[3., 0.],
           [1., 0.],
           [0., 6.]])
    """

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nums, single = _normalize_argnums(argnums, len(args))
        primals = tuple(args[a] for a in nums)
        leaves, structure = flatten(primals)
        sizes = [int(np.size(x)) if _is_float(x) else 0 for x in leaves]
        total = sum(sizes)
        tangents, offset = [], 0
        for x, n in zip(leaves, sizes):
            # Leaf x takes basis vectors offset .. offset + n of one shared batch.
            # Row offset + i is e_i (for a plain 1-D x, one diagonal the sweep keeps banded).
            plain_1d = type(x) is np.ndarray and x.ndim == 1
            if n:
                basis = basis_rows(total, n, -offset, np.shape(x), np.result_type(x), structured=plain_1d)
                tangents.append(follow_library(basis, strip(x)))
            else:  # an integer or boolean leaf: no tangent
                tangents.append(np.zeros((total,) + np.shape(x), dtype=np.result_type(x)))
            offset += n

        def partial(*dynamic: Any) -> Any:
            full = list(args)
            for a, value in zip(nums, dynamic):
                full[a] = value
            return fun(*full, **kwargs)

        _, out, pullback, aux = _vjp(partial, primals, has_aux)
        if any(n and np.result_type(x).kind == "c" for x, n in zip(leaves, sizes)):
            _require_complex_outputs(out)
        pushed, at_zero = _push_forward(out, pullback, tuple(unflatten(structure, tangents)))
        if not (_all_finite(pushed) and _all_finite(at_zero)):
            # An infinite partial derivative somewhere: forward and reverse sweeps meet
            # it in opposite orders, so 0 * inf lands on different entries.  Every way
            # of asking gives the numbers of stacked single VJPs: take reverse mode.
            return jacrev(fun, argnums, has_aux)(*args, **kwargs)
        t_leaves, out_structure = flatten(pushed)
        y_leaves, _ = flatten(out)
        per_output = [_split_jacobian(t, y, leaves, sizes, structure, single) for t, y in zip(t_leaves, y_leaves)]
        jac = unflatten(out_structure, per_output)
        if has_aux:
            return jac, aux
        return jac

    return wrapper


def _require_complex_outputs(out: Any) -> None:
    """Forward mode pushes the real unit tangent of a complex input: right for complex outputs only.

    For a holomorphic function it gives ``f'(z)``; for a real output of a complex input
    (``abs(z)**2``) it gives the derivative along the real axis alone, where reverse mode
    gives the whole (conjugate) gradient.  Such a call is refused rather than answered
    with half the derivative.
    """
    for y in flatten(out)[0]:
        if np.result_type(strip(y)).kind != "c":
            raise NonDifferentiableArgumentError(
                "jacfwd of a real-valued output with respect to a complex input would give the derivative "
                "along the real axis only (forward mode pushes real tangents). Use tapegrad.grad or "
                "tapegrad.jacobian (reverse mode), which give the complex gradient, or differentiate with "
                "respect to the real and imaginary parts as real arguments."
            )


def _split_jacobian(t_out: Any, y: Any, leaves: list, sizes: list, structure: Any, single: bool) -> Any:
    """Cut the batched tangent ``(n_total,) + y.shape`` into ``y.shape + x.shape`` blocks."""
    yshape = np.shape(y)
    blocks, offset = [], 0
    for x, n in zip(leaves, sizes):
        if n == 0 and not _is_float(x):
            blocks.append(np.zeros(yshape + np.shape(x), dtype=np.result_type(x)))
            continue
        block = t_out[offset : offset + n]
        offset += n
        block = np.moveaxis(np.reshape(block, (n,) + yshape), 0, -1)
        block = np.reshape(block, yshape + np.shape(x))
        x_dtype = x.dtype if type(x) is Tracer else np.result_type(x)
        if block.dtype.kind == "f" and x_dtype.kind == "f" and block.dtype != x_dtype:
            # Reverse mode's rows are cotangents of x, in x's dtype (float32 stays float32):
            # the same numbers in the same dtype, whichever way the Jacobian is asked for.
            block = block.astype(x_dtype)
        blocks.append(block)
    per_arg = unflatten(structure, blocks)
    return per_arg[0] if single else per_arg


def hvp(fun: Callable) -> Callable:
    """Return ``h(x, v, *args, **kwargs) = H(x) @ v``, the Hessian of ``fun`` times ``v``.

    The Hessian (with respect to the first argument of scalar-valued ``fun``)
    is never formed: the product is the VJP of the traced gradient with
    cotangent ``v`` (reverse over reverse; ``H`` is symmetric), at a cost of a
    few gradient evaluations.  The signature matches SciPy's ``hessp``
    (``scipy.optimize.minimize(f, x0, jac=tg.grad(f), hessp=tg.hvp(f))``).

    Parameters
    ----------
    fun : callable
        Scalar-valued NumPy code ``fun(x, *args, **kwargs)``.

    Returns
    -------
    callable
        ``h(x, v, *args, **kwargs)``.  ``v`` is shaped like ``x`` (or a nested
        structure like it) and may carry leading batch axes, ``(k,) + x.shape``,
        for ``k`` products in one sweep.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> f = lambda x: np.sum(x ** 3) + x[0] * x[1]
    >>> tg.hvp(f)(np.array([1.0, 2.0]), np.array([1.0, 0.0]))
    array([6., 1.])
    """

    @functools.wraps(fun)
    def product(x: Any, v: Any, *args: Any, **kwargs: Any) -> Any:
        gradient = grad(fun)
        _, pullback = vjp(lambda x_: gradient(x_, *args, **kwargs), x)
        return pullback(v)[0]

    return product
