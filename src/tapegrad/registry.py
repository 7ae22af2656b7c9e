"""The one table of derivative rules.

Every NumPy call that reaches a tracer is looked up here, keyed by the
function object itself (``np.sum``), by a ufunc (``np.sin``, meaning its
``__call__``), or by ``(ufunc, method)`` for the other ufunc methods
(``(np.add, "reduce")``).  A rule is one of three kinds:

``primitive``
    Recorded as one node on the tape.  ``vjps[i]`` is the vector-Jacobian
    product for positional argument ``i``: ``vjp(g, ans, *args, **kwargs)``
    where ``g`` is the cotangent of the output *with any number of leading
    batch axes*, ``ans`` the output and ``args``/``kwargs`` the call's raw
    values.  A ``None`` entry marks an argument that carries no gradient
    (an axis, an index).  For an argument that is a sequence of arrays
    (``np.concatenate``) the VJP returns one cotangent per element.
``composite``
    Implemented by other NumPy calls on tracers, so it is recorded as the
    nodes of those calls (``np.var`` = mean, subtract, square, mean).
``constant``
    The output carries no gradient (``np.argmax``, comparisons, ``np.floor``):
    the function runs on the raw values and returns plain arrays.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from .names import function_name

__all__ = [
    "Rule",
    "RULES",
    "defvjp",
    "defcomposite",
    "defconstant",
    "defswitch",
    "lookup",
    "RESOLVERS",
    "function_name",
    "CONSTANT_ARG",
    "RULE_TABLE",
    "INTERCEPTED",
    "ORIGINALS",
    "intercepted",
]

#: A ``vjps`` entry for an argument that is non-differentiable by nature (a
#: condition, an index): a tracer passed there is used as a constant.  A
#: ``None`` entry instead means "no rule" and a tracer there is an error.
CONSTANT_ARG = "constant-argument"

PRIMITIVE = "primitive"
COMPOSITE = "composite"
CONSTANT = "constant"


#: Every rule ever made, by its ``number``: a recorded node holds that number, not
#: the rule, so that the node is a tuple of plain values (see tapegrad.tape).
RULE_TABLE: list = []
_TABLE_LOCK = threading.Lock()


@dataclass(eq=False)
class Rule:
    """How tapegrad handles one NumPy function (or ufunc method)."""

    key: Any
    kind: str
    fun: Callable[..., Any]
    vjps: tuple = ()
    impl: Optional[Callable[..., Any]] = None
    name: str = ""
    #: Extra notes for the coverage table (e.g. "ties split equally").
    note: str = ""
    #: Keep the outputs of this one-input function in the tape's memo, keyed by the
    #: input, so that other rules can reuse them: sin's VJP needs cos(x), which
    #: the program being differentiated has often computed already.
    remember: bool = False
    #: Whether VJPs receive the call's keyword arguments.
    pass_kwargs: bool = True
    #: The output may be a view of the first argument (reshape, transpose, ...):
    #: tapegrad then refuses in-place writes that NumPy would propagate between them.
    returns_view: bool = False

    #: For a read of part of argument 0 (``x[1:]``): ``scatter_index(args)`` gives the
    #: basic index whose cotangent is ``g`` written there, or ``None``.  The backward
    #: driver then adds ``g`` straight into that part of the accumulated cotangent
    #: instead of materialising zeros around it and adding those.
    scatter_index: Optional[Callable[[tuple], Any]] = None
    #: For each VJP, the argument positions it reads (``-1`` for the output), or
    #: ``None`` (reads everything).  Values no recorded VJP reads are pruned from
    #: the node (see :class:`tapegrad.tape.Pruned`), so they can be freed early.
    needs: Optional[tuple] = None
    #: A constant whose output, on a traced first argument, stays a (constant) tracer.
    traced_constant: bool = False
    #: The VJPs accept the backward sweep's structured batches of cotangents
    #: (:class:`tapegrad.banded.BandedCotangent`), an internal optimisation that
    #: tapegrad's own element-wise, slicing and summing rules opt into.  Every other
    #: rule (and every user rule) receives plain arrays.
    banded: bool = False
    #: The VJPs accept the sweep's sparse batches of cotangents
    #: (:class:`tapegrad.sparse_batch.SparseCotangent`, a Jacobian with ``sparse=True``):
    #: tapegrad's own element-wise, indexing, reshaping and summing rules opt in.
    #: Every other rule (and every user rule) receives plain arrays.
    sparse: bool = False
    #: The forward call and VJPs take a 0-d float64 array where the program passed a
    #: Python float next to a float64 array (``x * 0.5``): the same numbers, without
    #: NumPy converting the float on every call.  tapegrad's ufunc rules opt in.
    scalar_operands: bool = False
    #: A one-output ufunc whose VJPs are element-wise expressions of the cotangent and
    #: the operands: given an operand of the output's shape and dtype, its VJP returns
    #: exactly the cotangent's shape and dtype.  The recorder marks such float64 operands
    #: (``tape.FITTED``) and the sweep then skips checking their cotangent's fit (a
    #: sixth of a small call's sweep cost).  tapegrad's own arithmetic and elementary
    #: functions opt in; tests/rules/test_elementwise_rules.py checks each one.  Only
    #: ``simple`` rules may set it (the fast paths do not check both).
    elementwise: bool = False
    #: The same rule with VJPs that make their one ufunc call (``g * y``) through
    #: :func:`tapegrad.parallel.call`, split across threads with the same bits: the
    #: recorder records the nodes of large outputs with it (``dispatch._append``), so
    #: the sweep of a small node pays nothing for it.  tapegrad's arithmetic opts in.
    large_twin: Any = None
    #: For a two-input ufunc: the one-input ufunc that gives the same bits when both
    #: operands are one and the same real floating-point tracer (``x * x`` is
    #: ``np.square(x)``).  The recorder records that instead: one parent and one VJP
    #: rather than two products and their sum, in the gradient and again in a Hessian.
    same_operands: Any = None
    #: For a piecewise-smooth function (``np.maximum``, ``np.abs``, a comparison):
    #: ``switch(*args, **kwargs)`` gives an array (NumPy code, so it runs on tracers too)
    #: whose signs select the smooth piece that the call computes; the piece changes only
    #: where an element crosses zero (``a - b`` for ``np.maximum(a, b)``).  ODE rules split
    #: their steps there (:mod:`tapegrad.solvers._kinks`).  Set with :func:`defswitch`.
    switch: Optional[Callable[..., Any]] = None
    #: VJPs for a sweep with strong zeros (:class:`tapegrad.strong.SafeRules`), where an
    #: exactly zero cotangent entry must contribute zero inside a contraction too (a
    #: matmul's ``0 * inf``).  Set with :func:`defstrong`; empty: the plain VJPs.
    strong_vjps: tuple = ()
    #: For a one-input rule: ``fuse(tracer)`` may record the call as another node made from
    #: the input's own node (``np.square`` of ``np.abs(z)`` is ``|z|**2``, whose derivatives
    #: are finite at ``z == 0`` where the chain of the two is not), or return ``None``.
    fuse: Optional[Callable[[Any], Any]] = None
    #: A primitive with a VJP for every argument: eligible for the operator fast path.
    simple: bool = field(init=False, default=False)
    #: Position in RULE_TABLE.
    number: int = field(init=False, default=-1)

    def __post_init__(self) -> None:
        self.simple = self.kind == PRIMITIVE and all(callable(v) for v in self.vjps)
        with _TABLE_LOCK:  # resolvers may make rules from several threads at once
            self.number = len(RULE_TABLE)
            RULE_TABLE.append(self)


RULES: dict = {}

#: Called in turn with a key that has no rule: ``resolver(key)`` may register one
#: (rules loaded on first use, ufunc methods derived from the ufunc's rule) and
#: returns it, or ``None``.  Rule modules add theirs when imported.
RESOLVERS: list = []


#: Set on callables whose calls with tracers consult the registry (tapegrad's
#: ``dispatch.primitive`` wrappers, ``custom_vjp`` functions).
DISPATCHED = "__tapegrad_dispatched__"
#: Set by ``dispatch.primitive`` on its wrappers: the wrapped function itself.
UNTRACED = "__tapegrad_untraced__"


#: SciPy's Python-level functions (and methods) whose calls tapegrad's SciPy door
#: (:mod:`tapegrad.interception`) routes to their rule while a tape records:
#: function -> ``(owner, attribute name, inspect_self, route_all)``.
INTERCEPTED: dict = {}
#: For each intercepted Python function: a copy that keeps SciPy's own code (and so its
#: signature) while the door's trampoline runs in the function itself.
ORIGINALS: dict = {}


def intercepted(
    fun: Any, owner: Any = None, name: Optional[str] = None, inspect_self: bool = False, route_all: bool = False
) -> Any:
    """Mark a SciPy function (or method) as reached through tapegrad's SciPy door.

    Register its rule with :func:`defvjp`, :func:`defcomposite` or
    :func:`defconstant` as for a NumPy function: ``defvjp(intercepted(f), ...)``.

    Parameters
    ----------
    fun : callable
        A Python function, or a method as found in its class's ``__dict__``.
    owner, name : optional
        For a compiled callable (no ``__code__`` to route): the module or class
        whose attribute ``name`` holds it and is replaced while a tape records.
    inspect_self : bool, default False
        For a method: also route the call when the instance's attributes hold a
        tracer (an interpolant built from traced data, called at plain points).
    route_all : bool, default False
        For a composite whose traced values may hide where no argument shows them
        (a solver's callback closing over traced parameters): every call made while
        a tape records goes to the rule, which must call the original itself when it
        finds nothing traced (``registry.INTERCEPTED`` is not consulted for that).

    Returns
    -------
    fun
    """
    INTERCEPTED[fun] = (owner, name, inspect_self, route_all)
    return fun


def _check_reachable(fun: Any) -> None:
    """Refuse a key that calls on tracers can never reach: its rule would silently go unused.

    NumPy hands tapegrad the calls of ufuncs (and their methods) and of NEP 18
    array functions; tapegrad's own wrappers consult the registry themselves.
    A plain Python function runs its body on the tracers instead.
    """
    if isinstance(fun, tuple):
        if len(fun) == 2 and isinstance(fun[0], np.ufunc) and isinstance(fun[1], str):
            return
    elif isinstance(fun, np.ufunc) or hasattr(fun, "_implementation") or getattr(fun, DISPATCHED, False):
        return
    elif fun in INTERCEPTED:
        return
    elif str(getattr(fun, "__module__", None)).split(".")[0] == "numpy":
        return  # NumPy's C-level functions (np.asarray(..., like=x), np.concatenate) dispatch too
    name = getattr(fun, "__qualname__", None) or repr(fun)
    raise TypeError(
        f"cannot register a rule for {name}: NumPy never hands calls of a plain Python function "
        "to tapegrad, so the rule would silently never be used. Decorate the function with "
        "@tapegrad.custom_vjp and give its rule with f.defvjp(...) (or wrap an existing one: "
        "f = tapegrad.custom_vjp(f)). Rules can be registered for ufuncs, (ufunc, method) "
        "pairs and NumPy array functions (NEP 18)."
    )


def _call_of(key: Any) -> Callable[..., Any]:
    if isinstance(key, tuple):
        ufunc, method = key
        return getattr(ufunc, method)
    return key


def defvjp(
    fun: Any,
    *vjps: Optional[Callable[..., Any]],
    note: str = "",
    pass_kwargs: bool = True,
    remember: bool = False,
    needs: Optional[tuple] = None,
    banded: bool = False,
    scatter_index: Optional[Callable[[tuple], Any]] = None,
    sparse: bool = False,
) -> Any:
    """Register the vector-Jacobian products of a function, one per positional argument.

    Parameters
    ----------
    fun : callable or ufunc or (ufunc, str)
        The NumPy (or third-party) function, a ufunc, or a ``(ufunc, method)``
        pair such as ``(np.add, "reduce")``.
    *vjps : callable or None
        ``vjps[i](g, ans, *args, **kwargs)`` returns the cotangent of positional
        argument ``i`` given the output cotangent ``g``.  ``g`` may carry extra
        *leading* batch axes; address array axes from the end.  Return a value
        that broadcasts to ``g.shape[:nb] + np.shape(args[i])``: the backward
        driver sums broadcast axes away, so rules need not.  ``None`` marks an
        argument without a rule (a tracer there raises an error);
        :data:`CONSTANT_ARG` one that carries no gradient by nature (an index, a
        condition), where a tracer is used as a constant.
    note : str, optional
        A remark shown in the coverage table.
    pass_kwargs : bool, default True
        Whether the VJPs receive the call's keyword arguments (ufunc keywords
        such as ``dtype=`` do not change a derivative, so ufunc rules skip them).
    remember : bool, default False
        Keep the outputs in the tape's memo for other rules (see :class:`Rule`).
    needs : tuple of tuple of int, optional
        ``needs[i]``: the argument positions VJP ``i`` reads (``-1`` for the
        output).  Large arrays no recorded VJP reads are not kept on the tape,
        which lowers the peak memory of a gradient.  Leave it out to keep all.
    banded : bool, default False
        Internal to tapegrad's own rules: the VJPs may receive the sweep's
        structured (banded) batches of cotangents.  Without it a rule always
        receives plain arrays (or tracers, at higher order).
    scatter_index : callable, optional
        Internal: for a read of part of argument 0, see :attr:`Rule.scatter_index`.
    sparse : bool, default False
        Internal to tapegrad's own rules: the VJPs may receive the sweep's sparse
        batches of cotangents (see :attr:`Rule.sparse`).

    Returns
    -------
    fun
        The function itself, so ``defvjp`` can be used as a decorator helper.

    Examples
    --------
    >>> import numpy as np
    >>> from tapegrad.registry import defvjp
    >>> _ = defvjp(np.cbrt, lambda g, ans, x: g / (3 * ans ** 2))

    A plain Python function is refused (use :func:`tapegrad.custom_vjp`): NumPy
    never hands its calls to tapegrad.

    Raises
    ------
    TypeError
        ``fun`` is not something whose calls on tracers reach the registry.
    """
    _check_reachable(fun)
    RULES[fun] = Rule(
        fun,
        PRIMITIVE,
        _call_of(fun),
        tuple(vjps),
        name=function_name(fun),
        note=note,
        remember=remember,
        pass_kwargs=pass_kwargs,
        needs=needs,
        banded=banded,
        scatter_index=scatter_index,
        sparse=sparse,
    )
    return fun


def defcomposite(fun: Any, impl: Callable[..., Any], note: str = "") -> Any:
    """Register ``impl`` as the traced implementation of ``fun``.

    ``impl`` receives the call's arguments (tracers included) and must compute
    the same result using NumPy calls that tapegrad can differentiate.
    """
    _check_reachable(fun)
    RULES[fun] = Rule(fun, COMPOSITE, _call_of(fun), impl=impl, name=function_name(fun), note=note)
    return fun


def defconstant(*funs: Any, note: str = "", traced: bool = False) -> None:
    """Mark functions whose outputs carry no gradient.

    They run on the raw values and return plain arrays, unless ``traced``: then a
    floating-point output of a call on a tracer is returned as a *traced* constant
    of that tracer's tape (``np.zeros_like(x)``), so that code filling it in place
    records those writes.
    """
    for fun in funs:
        _check_reachable(fun)
        RULES[fun] = Rule(fun, CONSTANT, _call_of(fun), name=function_name(fun), note=note, traced_constant=traced)


def defswitch(switch: Callable[..., Any], *funs: Any) -> None:
    """Mark the (registered) rules of ``funs`` piecewise smooth, their pieces selected by ``switch``.

    ``switch`` receives a call's arguments and returns an array, or a tuple of
    arrays, whose signs select the piece (see :attr:`Rule.switch`); ``None`` when
    the call has no switch (``np.abs`` of a complex value).
    """
    for fun in funs:
        RULES[fun].switch = switch


def defstrong(fun: Any, *vjps: Optional[Callable[..., Any]]) -> None:
    """Give the (registered) rule of ``fun`` its VJPs for sweeps with strong zeros (:attr:`Rule.strong_vjps`)."""
    RULES[fun].strong_vjps = vjps


def lookup(key: Any) -> Optional[Rule]:
    """The rule for ``key``: registered, or made on first use by a resolver; else ``None``.

    This is the one look-up that tracing and ``python -m tapegrad check`` share.
    """
    rule = RULES.get(key)
    if rule is None:
        for resolver in RESOLVERS:
            rule = resolver(key)
            if rule is not None:
                break
    return rule
