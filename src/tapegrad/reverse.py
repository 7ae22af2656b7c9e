"""Reverse mode: grad, value_and_grad, vjp, jacrev, batch_jacobian, gradients.

Each function creates a fresh tape, watches the chosen arguments, runs the
user's unchanged NumPy function on tracers, and answers with one backward
sweep.  Because rules are ordinary NumPy calls, calling one of these inside
another (``jacobian(grad(f))``) records the inner sweep on the outer tape:
that is how Hessians and higher derivatives are computed.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Optional, Sequence, Tuple, Union

import numpy as np

from . import constructors as _constructors
from .backward import StrongZerosNeeded, as_seed, strong_zeros
from .errors import TapeError, element_store_error
from .lazy import guard_values  # Dask values stay lazy
from .derived_requests import batch_jacobian_request, structured_gradient
from .requests import (
    check_unconnected,
    dtype_of,
    fresh_results,
    gradient_request,
    jacobian_request,
    leading_batch,
    vjp_request,
)
from .tape import Tape
from .host import prepare
from .outputs import Rebuild, read_outputs
from .tracer import Tracer, stop_gradient, unwrap_above
from .tree import flatten, flatten_up_to, tree_map, unflatten

__all__ = [
    "grad",
    "value_and_grad",
    "vjp",
    "jacrev",
    "batch_jacobian",
    "gradients",
    "stop_gradient",
]

ArgNums = Union[int, Sequence[int]]


def _normalize_argnums(argnums: ArgNums, nargs: int) -> Tuple[Tuple[int, ...], bool]:
    single = isinstance(argnums, int)
    nums = (argnums,) if single else tuple(argnums)
    for a in nums:
        if not -nargs <= a < nargs:
            raise ValueError(f"argnums {argnums!r} out of range for a call with {nargs} positional arguments")
    return tuple(a % nargs for a in nums), single


def _trace_call(fun: Callable, args: tuple, kwargs: dict, argnums: ArgNums, has_aux: bool):
    """Watch the chosen arguments on a new tape and call ``fun``.

    Returns ``(tape, out, aux, sources, single)`` where ``out`` is what the sweep
    differentiates (:func:`tapegrad.outputs.read_outputs` of what ``fun``
    returned: tracers inside wrappers read through) and ``sources`` is a list of
    ``(structure, leaves)`` per argnum (leaves are the watched tracers or the
    original non-float values).
    """
    tape, out, aux, sources, single = _record_call(fun, args, kwargs, argnums, has_aux)
    return tape, read_outputs(out)[0], aux, sources, single


def _record_call(fun: Callable, args: tuple, kwargs: dict, argnums: ArgNums, has_aux: bool):
    """:func:`_trace_call` with ``out`` as ``fun`` returned it (for the APIs that return the value)."""
    nums, single = _normalize_argnums(argnums, len(args))
    prepare()
    tape = Tape()
    args = list(args)
    sources = []
    for a in nums:
        leaves, structure = flatten(args[a])
        watched = [tape.watch(leaf) for leaf in leaves]
        # The function may write into its own arguments (``x *= 2``, ``x[0] = 0``): the
        # tracer object it received then stands for the written value.  Derivatives are
        # taken with respect to the value passed in, so keep a handle on that one.
        sources.append((structure, [_handle(w) for w in watched]))
        args[a] = unflatten(structure, watched)
    try:
        # np.array / np.asarray of tracers: see tapegrad.constructors.  Dask values: a
        # NumPy fallback (compute into memory) while tracing is an error.
        with _constructors.recording(tape), guard_values((args, kwargs)):
            out = fun(*args, **kwargs)
    except ValueError as exc:
        dropped = element_store_error(exc)
        if dropped is None:
            raise
        raise dropped.with_traceback(exc.__traceback__) from None
    if _computed(out):
        # Nothing records on this tape any more (the sweep records on outer tapes): a value
        # kept past the call (a cached work array, tapegrad.buffers, or what was computed
        # from one) computes plain values from now on, and writes into it are refused
        # (views.write).  A lazy result (a Dask-backed xarray) still computes: it records later.
        tape.recording = None
    aux = None
    if has_aux:
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            raise TypeError("has_aux=True needs the function to return a pair (output, aux)")
        out, aux = out
    return tape, out, aux, sources, single


#: Leaves of a function's result that are values as they stand (besides tracers and ``None``).
PLAIN_LEAVES = (np.ndarray, np.generic, int, float, complex, str, bytes)


def _computed(out: Any) -> bool:
    """Whether ``out`` holds only tracers, arrays, numbers and strings: nothing that computes later."""
    leaves, _ = flatten(out)
    return all(type(leaf) is Tracer or leaf is None or isinstance(leaf, PLAIN_LEAVES) for leaf in leaves)


def _handle(value: Any) -> Any:
    """A private tracer for the same recorded value: in-place writes to ``value`` leave it alone."""
    if type(value) is Tracer:
        return Tracer(value._value, value._index, value._tape, value._out, value._small)
    return value


def _lower(value: Any, tape: Tape) -> Any:
    """Strip ``tape``'s level (and any inner level) from the leaves of ``value``."""
    return tree_map(lambda v: unwrap_above(v, tape.level - 1), value)


def _lower_value(out: Any, rebuild: Optional[Rebuild], tape: Tape) -> Any:
    """The function's value as the caller gets it: ``out`` lowered (see :func:`_lower`), wrapped back.

    ``out`` and ``rebuild`` come from :func:`tapegrad.outputs.read_outputs`: a
    ``DataArray`` or ``Quantity`` output is returned as one, holding plain values.
    """
    value = _lower(out, tape)
    return value if rebuild is None else rebuild(value)


def _lower_aux(aux: Any, tape: Tape) -> Any:
    """``aux`` lowered; tracers inside wrappers too, and in the attributes of other objects."""
    plain, rebuild = read_outputs(aux, "aux", strict=False)
    value = _lower_value(plain, rebuild, tape)
    leaves, structure = flatten(value)
    return unflatten(structure, [_lower_attributes(leaf, tape, 3) for leaf in leaves])


def _lower_attributes(obj: Any, tape: Tape, depth: int) -> Any:
    """A shallow copy of ``obj`` (a dataclass, a ``SimpleNamespace``) with its traced attributes lowered.

    Without it the tracers inside came back to the caller, and ``np.asarray`` on them
    later raised.  ``obj`` itself when none of its attributes (``depth`` levels down) holds one.
    """
    if depth == 0 or type(obj) is Tracer or isinstance(obj, (np.ndarray, np.generic, int, float, complex, str, type)):
        return obj
    attributes = getattr(obj, "__dict__", None)
    if type(attributes) is not dict or not attributes:
        return obj
    lowered = {}
    for name, value in attributes.items():
        leaves, structure = flatten(value)
        new = [_lower_attributes(unwrap_above(leaf, tape.level - 1), tape, depth - 1) for leaf in leaves]
        if any(a is not b for a, b in zip(new, leaves)):
            lowered[name] = unflatten(structure, new)
    if not lowered:
        return obj
    import copy  # rare path: an aux object that holds tracers

    clone = copy.copy(obj)
    clone.__dict__.update(lowered)  # through __dict__: a frozen dataclass too
    return clone


def _results_per_arg(sources: list, flat_results: list, single: bool) -> Any:
    out = []
    pos = 0
    for structure, leaves in sources:
        out.append(unflatten(structure, flat_results[pos : pos + len(leaves)]))
        pos += len(leaves)
    return out[0] if single else tuple(out)


def _flat_sources(sources: list) -> list:
    return [leaf for _, leaves in sources for leaf in leaves]


def _require_scalar(out: Any, name: str) -> None:
    # math.prod of the shape, not np.size: Dask has no np.size and would compute `out`.
    # A tracer's own shape: np.shape(tracer) is a dispatched constant call (microseconds).
    if isinstance(out, (list, tuple, dict)) or math.prod(out.shape if type(out) is Tracer else np.shape(out)) != 1:
        shape = "a structure" if isinstance(out, (list, tuple, dict)) else f"shape {np.shape(out)}"
        raise TypeError(
            f"{name} needs a function with a scalar output, but it returned {shape}. "
            "For every derivative use tapegrad.jacobian(f); for the gradient of the sum of "
            "the outputs (what tf.gradients computes) use tapegrad.gradients(ys, xs) or "
            "GradientTape.gradient."
        )


def _require_differentiable_output(out: Any, holomorphic: bool) -> None:
    """Refuse outputs whose "gradient" would be a silent guess (complex, boolean, integer)."""
    dtype = dtype_of(out)
    if holomorphic:
        if dtype.kind != "c":
            raise TypeError(
                f"grad(..., holomorphic=True) needs a complex output, but the function returned dtype "
                f"{dtype}. For a real output leave holomorphic out."
            )
        return
    if dtype.kind == "c":
        raise TypeError(
            f"grad needs a real output, but the function returned a complex value (dtype {dtype}): "
            "a complex output has no gradient, and tapegrad will not silently differentiate its real "
            "part. Differentiate a real function of it (np.real(out), np.abs(out) ** 2), or pass "
            "holomorphic=True (with complex inputs) for the complex derivative f'(z) of a "
            "holomorphic function."
        )
    if dtype.kind in "biu":
        raise TypeError(
            f"grad needs a floating-point output, but the function returned dtype {dtype}. A boolean "
            "or integer output is piecewise constant: its derivative is zero wherever it exists, "
            "which tapegrad will not return in place of the derivative you probably meant. Return a "
            "floating-point value that depends smoothly on the input; if zero is really what you "
            "want, return a float (1.0 * out) or use tapegrad.stop_gradient."
        )
    if dtype.kind != "f":
        raise TypeError(f"grad needs a floating-point output, but the function returned dtype {dtype}")


def _require_complex_inputs(sources: list) -> None:
    for structure, leaves in sources:
        for leaf in leaves:
            dtype = dtype_of(leaf)
            if dtype.kind != "c":
                raise TypeError(
                    f"grad(..., holomorphic=True) needs complex inputs, but a differentiated argument "
                    f"has dtype {dtype}: pass it as complex (x.astype(complex) or x + 0j)."
                )


def value_and_grad(
    fun: Callable, argnums: ArgNums = 0, has_aux: bool = False, holomorphic: bool = False
) -> Callable:
    """Return a function computing ``fun``'s value and its gradient.

    Parameters
    ----------
    fun : callable
        Ordinary NumPy code returning a real scalar (an array of size 1), or a
        wrapper of one (an xarray ``DataArray``, a pint ``Quantity``: its data or
        magnitude is differentiated, see :mod:`tapegrad.outputs`).
    argnums : int or sequence of int, default 0
        Which positional arguments to differentiate.  Arguments may be nested
        lists/tuples/dicts of arrays; gradients keep their structure.
    has_aux : bool, default False
        ``fun`` returns ``(value, aux)``; ``aux`` is passed through undifferentiated.
    holomorphic : bool, default False
        ``fun`` is a holomorphic function of complex inputs with a complex
        output: return the complex derivative ``f'(z)`` (see :func:`grad`).

    Returns
    -------
    callable
        ``(*args, **kwargs) -> (value, grads)`` or ``((value, aux), grads)``.
        ``value`` is what ``fun`` returned with its tracers replaced by their
        values (a ``DataArray`` or ``Quantity`` stays one).  ``grads`` is one
        array shaped like the argument, or a tuple when ``argnums`` is a
        sequence.  Integer and boolean arguments get zeros.

    Raises
    ------
    TypeError
        When the output is not a scalar, is complex (unless ``holomorphic``),
        or is boolean or integer (see :func:`grad`), or is no number, array or
        wrapper of one (:class:`tapegrad.outputs.UnreadableOutputError`).
    """

    def traced_gradient(args: tuple, kwargs: dict) -> tuple:
        tape, out, aux, sources, single = _record_call(fun, args, kwargs, argnums, has_aux)
        out, rebuild = read_outputs(out)
        _require_scalar(out, "grad")
        _require_differentiable_output(out, holomorphic)
        if holomorphic:
            _require_complex_inputs(sources)
        flat = _flat_sources(sources)
        results = gradient_request(tape, [out], flat, None, (), "zero", release=True)
        return tape, out, rebuild, aux, sources, single, results

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            tape, out, rebuild, aux, sources, single, results = traced_gradient(args, kwargs)
        except StrongZerosNeeded:
            # The sweep found NaN after freeing the values it would need to sweep again
            # with strong zeros: record once more (see backward.strong_zero).
            with strong_zeros("on"):
                tape, out, rebuild, aux, sources, single, results = traced_gradient(args, kwargs)
        results = fresh_results(results)
        grads = _results_per_arg(sources, results, single)
        value = _lower_value(out, rebuild, tape)
        if has_aux:
            return (value, _lower_aux(aux, tape)), grads
        return value, grads

    return wrapper


def grad(fun: Callable, argnums: ArgNums = 0, has_aux: bool = False, holomorphic: bool = False) -> Callable:
    """Return a function computing the gradient of real scalar-valued ``fun``.

    Parameters
    ----------
    fun : callable
        Ordinary NumPy code returning a real scalar.
    argnums : int or sequence of int, default 0
        Positional argument(s) to differentiate with respect to.
    has_aux : bool, default False
        ``fun`` returns ``(value, aux)``; the gradient function then returns ``(grads, aux)``.
    holomorphic : bool, default False
        ``fun`` is holomorphic, with complex inputs and a complex output: return
        its complex derivative ``f'(z)``.

    Returns
    -------
    callable
        Same arguments as ``fun``; returns plain ndarrays shaped like the arguments.

    Raises
    ------
    TypeError
        When the output is complex and ``holomorphic`` is not set (take
        ``np.real`` or ``np.abs(.)**2`` of it first), when the output is boolean
        or integer (piecewise constant: its derivative is zero wherever it
        exists), or when ``holomorphic=True`` meets a real input or output.

    Notes
    -----
    *Complex inputs, real output.*  For complex ``z = x + iy`` the gradient is
    ``df/dx - i df/dy``, the cotangent ``c`` with ``df = Re(c * dz)`` (the
    convention of JAX; PyTorch and autograd return its conjugate, the direction of
    steepest ascent).  ``grad(lambda z: np.abs(z) ** 2)(1 + 2j)`` is ``2 - 4j``:
    step against ``np.conj`` of it to descend.

    *Holomorphic functions.*  With ``holomorphic=True`` the output is seeded
    with 1, which gives ``c`` with ``Re(dw) = Re(c * dz)`` for ``w = f(z)``: that
    is ``f'(z)`` when ``f`` is holomorphic.  tapegrad does not check
    holomorphy; for a non-holomorphic ``f`` the result is
    ``df/dz + conj(df/dconj(z))`` (Wirtinger derivatives), the gradient of
    ``Re(f)``, which is no complex derivative (``f(z) = conj(z)`` gives 1).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> tg.grad(lambda x: x * x)(3.0)
    array(6.)
    >>> tg.grad(lambda x, w: np.sum(np.tanh(w * x)), argnums=(0, 1))(np.ones(2), 0.5)[1]
    array(1.57289547)
    >>> tg.grad(lambda z: z ** 2, holomorphic=True)(1 + 2j)
    array(2.+4.j)
    """
    vg = value_and_grad(fun, argnums, has_aux, holomorphic)

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        value, grads = vg(*args, **kwargs)
        if has_aux:
            return grads, value[1]
        return grads

    return wrapper


def vjp(fun: Callable, *primals: Any, has_aux: bool = False) -> Any:
    """Evaluate ``fun(*primals)`` and return a function for vector-Jacobian products.

    Returns
    -------
    out, vjp_fun[, aux]
        ``out`` is what ``fun`` returned, its tracers replaced by their values
        (a ``DataArray`` or ``Quantity`` output stays one).  ``vjp_fun(cotangent)``
        returns one cotangent per primal (a tuple).  The cotangent may carry
        extra leading batch axes (``(k,) + out.shape``) to compute ``k`` products
        in one sweep, and may come in the output's wrapper (its data is used; an
        xarray ``Dataset`` output takes a dict or a ``Dataset``).  ``vjp_fun``
        may be called many times.
    """
    value, _, vjp_fun, aux = _vjp(fun, primals, has_aux)
    if has_aux:
        return value, vjp_fun, aux
    return value, vjp_fun


def _vjp(fun: Callable, primals: tuple, has_aux: bool) -> tuple:
    """:func:`vjp`'s work: ``(value, plain, vjp_fun, aux)``.

    ``plain`` is the value's arrays without their wrappers (:func:`tapegrad.outputs.read_outputs`),
    in the structure ``vjp_fun`` takes cotangents in: forward mode builds its tangents on it.
    """
    tape, out, aux, sources, _ = _record_call(fun, primals, {}, tuple(range(len(primals))), has_aux)
    out, rebuild = read_outputs(out)
    tape.persistent = True
    flat = _flat_sources(sources)
    out_leaves, out_structure = flatten(out)

    def vjp_fun(cotangent: Any) -> tuple:
        # A cotangent may come in the output's own wrapper (a DataArray, a Dataset): its data.
        cotangent = read_outputs(cotangent, "the cotangent", strict=False)[0]
        cts = [as_seed(ct) for ct in flatten_up_to(out_structure, cotangent)]
        if len(cts) != len(out_leaves):
            raise ValueError(f"cotangent has {len(cts)} arrays for {len(out_leaves)} outputs")
        batch = leading_batch(cts, out_leaves, "cotangent")
        results = vjp_request(tape, out_leaves, flat, cts, batch, (), "zero")
        return tuple(_results_per_arg(sources, fresh_results(results, cts), False))

    plain = _lower(out, tape)
    value = plain if rebuild is None else rebuild(plain)
    return value, plain, vjp_fun, _lower_aux(aux, tape) if has_aux else None


def jacrev(fun: Callable, argnums: ArgNums = 0, has_aux: bool = False, chunk_size: Optional[int] = None) -> Callable:
    """The full Jacobian of ``fun`` in reverse mode (see :func:`tapegrad.jacobian`).

    All output basis vectors travel through the backward sweep together as a
    batch of cotangents: one sweep (per chunk of ``chunk_size``), not a loop
    over outputs.
    """

    def traced_jacobian(args: tuple, kwargs: dict) -> tuple:
        tape, out, aux, sources, single = _trace_call(fun, args, kwargs, argnums, has_aux)
        tape.persistent = True
        flat = _flat_sources(sources)
        out_leaves, out_structure = flatten(out)
        per_output = []
        for k, y in enumerate(out_leaves):
            last = k == len(out_leaves) - 1
            results = fresh_results(jacobian_request(tape, y, flat, "zero", chunk_size, release=last))
            per_output.append(_results_per_arg(sources, results, single))
        return unflatten(out_structure, per_output), _lower_aux(aux, tape) if has_aux else None

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            jac, aux = traced_jacobian(args, kwargs)
        except StrongZerosNeeded:  # NaN in the last sweep, whose values are freed: record again
            with strong_zeros("on"):
                jac, aux = traced_jacobian(args, kwargs)
        if has_aux:
            return jac, aux
        return jac

    return wrapper


def batch_jacobian(fun: Callable, argnums: int = 0, chunk_size: Optional[int] = None) -> Callable:
    """Per-example Jacobians of a function whose batch rows are independent.

    For ``fun`` mapping ``x`` of shape ``(B, ...)`` to ``y`` of shape ``(B, ...)``
    where row ``b`` of ``y`` depends only on row ``b`` of ``x``, returns
    ``J`` of shape ``(B,) + y.shape[1:] + x.shape[1:]`` with
    ``J[b] = d y[b] / d x[b]``, in one sweep of ``prod(y.shape[1:])`` cotangents.
    """

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        tape, out, _, sources, _ = _trace_call(fun, args, kwargs, argnums, False)
        x = sources[0][1]
        if len(x) != 1:
            raise TypeError("batch_jacobian differentiates with respect to one array argument")
        result = batch_jacobian_request(tape, out, x[0], "zero", chunk_size)
        return fresh_results([result])[0]

    return wrapper


def _find_tape(xs: list) -> Tape:
    tapes = {}
    for x in xs:
        if type(x) is Tracer:
            tapes[x._tape.level] = x._tape
    if not tapes:
        raise TapeError(
            "gradients(ys, xs): none of xs is traced. Differentiate with respect to values "
            "returned by GradientTape.watch (or computed from them)."
        )
    # The lowest level among xs: higher-level tracers are unwrapped down to it.
    return tapes[min(tapes)]


def gradients(
    ys: Any,
    xs: Any,
    grad_ys: Any = None,
    stop_gradients: Any = None,
    unconnected_gradients: str = "none",
) -> Any:
    """The derivative of ``sum(ys)`` with respect to each of ``xs``, as ``tf.gradients``.

    Parameters
    ----------
    ys : array or nested structure of arrays
        Targets computed from traced values.  Their *sum* (over all elements
        and all targets) is differentiated.
    xs : array or nested structure of arrays
        Traced values (watched, or intermediate results).
    grad_ys : same structure as ``ys``, optional
        Weights of the sum: the result is
        ``d(sum_i sum(grad_ys[i] * ys[i])) / d x``, a vector-Jacobian product.
    stop_gradients : array or structure of arrays, optional
        Intermediate values held constant (partial, not total, derivatives).
    unconnected_gradients : {"none", "zero"}
        What an x that no y depends on gets: ``None`` or zeros shaped like x.

    Returns
    -------
    list or structure
        One result per x, shaped like x, in the structure of ``xs`` (a list
        when ``xs`` is a single array, like ``tf.gradients``).

    Notes
    -----
    Works on values recorded by any tape, inside or after its ``with`` block,
    without the tape object, and does not consume the tape.
    """
    unconnected = check_unconnected(unconnected_gradients)
    if not isinstance(xs, (list, tuple, dict)):
        xs = [xs]  # like tf.gradients: a list of results for a single x
    stops, _ = flatten(stop_gradients) if stop_gradients is not None else ([], None)
    tape = _find_tape(flatten(xs)[0])
    return structured_gradient(tape, ys, xs, grad_ys, stops, unconnected)
