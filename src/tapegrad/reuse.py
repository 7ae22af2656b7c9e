"""Record once, evaluate many: ``reuse=True`` on the functional API.

The first call of ``tg.grad(f, reuse=True)`` records ``f`` as usual, with
:mod:`tapegrad.reuse_guards` noting every value its Python read from the tape.  The
recording is then compiled into a :class:`Program`: one straight-line Python
function that calls each node's NumPy function on plain arrays, in tape order,
checks each guard as soon as its inputs exist, and returns the nodes of a new tape
(the rule, the new arguments and output, the recorded parents).  Later calls with
the same signature run that function and the ordinary backward sweep on its tape:
no tracer, no dispatch, no user Python.  A guard that fails (a branch that would
go the other way, a mask or an index that changed) means the recording no longer
describes the call: it is recorded again, transparently, and the result is the one
eager mode gives.

A recording is refused (the function then runs eagerly at every call, with one
warning) when it cannot be replayed faithfully: it drew random numbers, holds
values of other array libraries or of an outer tape, returns wrappers (xarray,
pint), or does not reproduce its own nodes when replayed at the recorded inputs
(every compiled program is checked that way once).
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections import OrderedDict
from typing import Any, Callable, Optional

import numpy as np

from . import constructors as _constructors
from .backward import as_seed
from .strong import MODE
from .errors import TapegradError, element_store_error
from .host import prepare
from .lazy import guard_values
from .memo import sweeping
from .outputs import read_outputs
from .requests import _zeros_like_source, fresh_results, gradient_request, jacobian_request, leading_batch, vjp_request
from .reuse_guards import (
    Environment,
    GuardedTape,
    GuardLog,
    NotReusable,
    Ref,
    activate,
    deactivate,
    random_states,
    same,
    signature,
)
from .reverse import (
    PLAIN_LEAVES,
    _flat_sources,
    _handle,
    _lower_aux,
    _lower_value,
    _normalize_argnums,
    _require_complex_inputs,
    _require_differentiable_output,
    _require_scalar,
    _results_per_arg,
)
from .reverse import grad as _grad
from .reverse import jacrev as _jacrev
from .reverse import value_and_grad as _value_and_grad
from .reverse import vjp as _vjp
from .forward import hvp as _hvp
from .reuse_compile import MAX_NODES, Program, Refused, compile_recording
from .tape import Tape
from .tracer import Tracer, as_source_value
from .tree import flatten, flatten_up_to, unflatten

__all__ = ["ReuseWarning", "ReuseMismatchError", "ReuseStats", "reusable", "Program", "MAX_NODES"]

#: Recordings per signature kept (most recently used first), and signatures per function.
PER_SIGNATURE = 4
SIGNATURES = 32
#: Calls in ``reuse="check"`` mode that are also run eagerly and compared.
CHECKED_CALLS = 3
#: Recordings that fail to replay at their own inputs before a function is refused.
FAILED_COMPILES = 3


class ReuseWarning(UserWarning):
    """A function given ``reuse=True`` runs eagerly at every call (the message says why)."""


class ReuseMismatchError(TapegradError, AssertionError):
    """``reuse="check"``: a reused call gave a result other than eager mode's."""


class ReuseStats:
    """Counts for one reusable function (``fun.reuse_stats``).

    Attributes
    ----------
    recordings : int
        Calls that ran the function's Python and recorded it.
    rerecordings : int
        Recordings made because every kept recording of the signature failed a guard.
    replays : int
        Calls answered from a recording.
    eager : int
        Calls run eagerly without recording (refused, or called with tracers).
    unkept : int
        Recordings answered but not kept: a NumPy call on traced values raised (and the
        function caught it), or the function set ``np.errstate`` to raise.  The next call
        records again.
    refused : str or None
        Why the function is never reused, if it is not.
    """

    __slots__ = ("recordings", "rerecordings", "replays", "eager", "refused", "checked", "unkept")

    def __init__(self) -> None:
        self.recordings = self.rerecordings = self.replays = self.eager = self.checked = self.unkept = 0
        self.refused: Optional[str] = None

    def __repr__(self) -> str:
        return (
            f"ReuseStats(recordings={self.recordings}, rerecordings={self.rerecordings}, "
            f"replays={self.replays}, eager={self.eager}, unkept={self.unkept}, refused={self.refused!r})"
        )



# ---------------------------------------------------------------------- recording
def _record(fun: Callable, args: tuple, kwargs: dict, nums: tuple, has_aux: bool, also: tuple = ()) -> tuple:
    """Record ``fun`` as ``reverse._record_call`` does, noting the guards.

    Returns ``(tape, log, out, aux, sources, inputs)``: ``inputs`` are the nodes of
    the watched leaves in the order of the arguments, those of ``also`` included
    (arguments watched so that a replay takes their new values, not differentiated).
    """
    prepare()
    tape = GuardedTape()
    log = GuardLog(tape)
    args = list(args)
    sources = []
    inputs = []
    for a in sorted(set(nums) | set(also)):
        leaves, structure = flatten(args[a])
        watched = [tape.watch(leaf) for leaf in leaves]
        inputs += [w._index for w in watched if type(w) is Tracer]
        if a in nums:
            sources.append((nums.index(a), structure, [_handle(w) for w in watched]))
        args[a] = unflatten(structure, watched)
    sources = [(structure, leaves) for _, structure, leaves in sorted(sources, key=lambda s: s[0])]
    token = activate(log)
    try:
        with _constructors.recording(tape), guard_values((args, kwargs)):
            out = fun(*args, **kwargs)
    except ValueError as exc:
        dropped = element_store_error(exc)
        if dropped is None:
            raise
        raise dropped.with_traceback(exc.__traceback__) from None
    finally:
        deactivate(log, token)
    aux = None
    if has_aux:
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            raise TypeError("has_aux=True needs the function to return a pair (output, aux)")
        out, aux = out
    return tape, log, out, aux, sources, inputs


def _leaf_spec(leaf: Any, tape: Tape, what: str) -> Any:
    """How a replay finds one leaf of the output or ``aux``: a node, or a constant."""
    if type(leaf) is Tracer:
        if leaf._tape is not tape:
            raise Refused(f"{what} holds a value traced by another tape")
        return Ref(leaf._index, leaf._out)
    if leaf is None or isinstance(leaf, PLAIN_LEAVES):
        return leaf
    raise Refused(f"{what} holds a {type(leaf).__name__}, which a replay cannot rebuild")


def _tree_spec(tree: Any, tape: Tape, what: str) -> tuple:
    leaves, structure = flatten(tree)
    return structure, [_leaf_spec(leaf, tape, what) for leaf in leaves]


def _tree_at(spec: tuple, tape: Tape) -> Any:
    structure, leaves = spec
    nodes = tape.nodes
    out = []
    for leaf in leaves:
        if type(leaf) is Ref:
            value = nodes[leaf.index][4]
            if leaf.out >= 0:
                value = value[leaf.out]
            out.append(Tracer(value, leaf.index, tape, leaf.out))
        else:
            out.append(leaf.copy() if type(leaf) is np.ndarray else leaf)
    return unflatten(structure, out)


def _node_value(tape: Tape, ref: Ref) -> Any:
    value = tape.nodes[ref.index][4]
    return value if ref.out < 0 else value[ref.out]


def _swept_sources(program: Program, found: dict, raws: list) -> list:
    """The cotangent of each source leaf after a planned sweep (zeros where none reached it)."""
    results = []
    raw_of = dict(zip(program.inputs, raws))
    for _, leaves in program.sources:
        for leaf in leaves:
            g = found.get(leaf.index) if type(leaf) is Ref else None
            if g is None:  # an input no cotangent reached, or one that is not differentiable (an int)
                g = _zeros_like_source(raw_of[leaf.index] if type(leaf) is Ref else leaf, ())
            results.append(g)
    return results


def _vg_fast(program: Program, found: dict, values: tuple, raws: list, single: bool, has_aux: bool) -> Any:
    """``value_and_grad``'s answer from a replay that swept the gradient itself (see ``_vg_answer``)."""
    results = fresh_results(_swept_sources(program, found, raws))
    grads = _results_per_arg(program.sources, results, single)
    value = values[0]
    if has_aux:
        it = iter(values[1:])
        structure, leaves = program.aux
        aux = unflatten(structure, [next(it) if type(leaf) is Ref else (leaf.copy() if type(leaf) is np.ndarray else leaf)
                                    for leaf in leaves])
        return (value, aux), grads
    return value, grads


def _vjp_fast(program: Program, found: dict, raws: list, seed: np.ndarray) -> Any:
    """``_hvp_answer``'s result from a replay that swept the VJP itself (one array output, no batch)."""
    results = _swept_sources(program, found, raws)
    return tuple(_results_per_arg(program.sources, fresh_results(results, [seed]), False))[0]


# ---------------------------------------------------------------------- the reusable function
class _Reusable:
    """The cache and the call logic shared by every ``reuse=True`` function.

    ``answer(tape, out, aux, sources, single, extra, first)`` turns a tape (recorded
    or replayed) into the API's result; ``extra`` is what the call passes beside the
    recorded program (an HVP's vector).
    """

    def __init__(self, fun: Callable, eager: Callable, argnums: Any, has_aux: bool, answer: Callable,
                 check: bool, split: Optional[Callable] = None, also: tuple = (), quiet: bool = False) -> None:
        self.fun = fun
        self.eager = eager
        self.argnums = argnums
        self.has_aux = has_aux
        self.answer = answer
        self.check = check
        self.split = split  # (args, kwargs) -> (args, kwargs, extra)
        self.also = also  # arguments watched (their new values replayed) but not differentiated
        self.quiet = quiet  # refuse without a warning (tapegrad's own callers fall back themselves)
        self.gradient = False  # a gradient (one scalar output): the program writes the sweep out
        self.vjp = False  # an HVP (one cotangent of the output's shape): the program may sweep from it
        self.cache: OrderedDict = OrderedDict()
        self.failed_compiles = 0
        self.lock = threading.Lock()
        self.stats = ReuseStats()

    def refuse(self, reason: str) -> None:
        if self.stats.refused is None:
            self.stats.refused = reason
            if self.quiet:
                return
            name = getattr(self.fun, "__qualname__", repr(self.fun))
            warnings.warn(
                f"tapegrad: {name} is not reused (reuse=True) and runs eagerly at every call: {reason}. "
                "See docs/reuse.md.",
                ReuseWarning,
                stacklevel=4,
            )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.stats.refused is not None:
            self.stats.eager += 1
            return self.eager(*args, **kwargs)
        call_args, call_kwargs, extra = self.split(args, kwargs) if self.split else (args, kwargs, None)
        try:
            nums, single = _normalize_argnums(self.argnums, len(call_args))
            if len(set(nums)) != len(nums):
                raise NotReusable("an argument named twice in argnums")
            key, inputs, values, pins = signature(call_args, call_kwargs, tuple(set(nums) | set(self.also)))
            key = (MODE.get(), key)  # strong zeros forced on or off: another recording
        except NotReusable:
            self.stats.eager += 1  # called with tracers (inside another derivative), Dask or CuPy values
            return self.eager(*args, **kwargs)
        with self.lock:
            programs = self.cache.get(key)
            if programs is not None:
                self.cache.move_to_end(key, last=False)
                programs = list(programs)
        for program in programs or ():
            result = self.replay(program, inputs, values, pins, extra, single)
            if result is not _STALE:
                if self.check and program.checked < CHECKED_CALLS:
                    program.checked += 1
                    self.compare(result, args, kwargs)
                return result
        return self.record(args, kwargs, call_args, call_kwargs, extra, nums, single, key, inputs, values, pins,
                           again=programs is not None)

    def replay(self, program: Program, inputs: list, values: list, pins: list, extra: Any, single: bool) -> Any:
        if not program.environment.holds():
            return _STALE
        if len(values) != len(program.values) or not all(same(v, r) for v, r in zip(values, program.values)):
            return _STALE
        # The recording's constants may be (views of) the arrays it was recorded with: another
        # array of the recorded values is only as good as those, if the caller wrote into them since.
        if not all(v is o or same(o, r) for v, o, r in zip(values, program.originals, program.values)):
            return _STALE
        if len(pins) != len(program.pins) or not all(p is q for p, q in zip(pins, program.pins)):
            return _STALE
        raws = [x if type(x) is np.ndarray else as_source_value(x)[0] for x in inputs]
        try:
            if program.run_gradient is not None:
                with sweeping(_NO_MEMO):  # its VJPs must not see the memo of a sweep this call is inside
                    ran = program.run_gradient(*raws)
                if ran is None:
                    return _STALE
                found, nodes, values = ran
                if found is not None:  # the gradient's sweep ran inside the replay
                    result = _vg_fast(program, found, values, raws, single, self.has_aux)
                    self.stats.replays += 1
                    return _unshared(result, program.constant_ids)
                tape = program.tape_of(nodes)
            elif program.run_vjp is not None and type(extra) is np.ndarray:
                with sweeping(_NO_MEMO):
                    ran = program.run_vjp(extra, *raws)
                if ran is None:
                    return _STALE
                found, nodes = ran
                if found is not None:  # the VJP's sweep ran inside the replay
                    result = _vjp_fast(program, found, raws, extra)
                    self.stats.replays += 1
                    return _unshared(result, program.constant_ids)
                tape = program.tape_of(nodes)
            else:
                tape = program.evaluate(raws)
            if tape is None:
                return _STALE
            sources = [
                (structure, [Tracer(tape.nodes[i.index][4], i.index, tape) if type(i) is Ref else i for i in leaves])
                for structure, leaves in program.sources
            ]
            out = _tree_at(program.out, tape)
            aux = _tree_at(program.aux, tape) if self.has_aux else None
            result = self.answer(tape, out, aux, sources, single, extra, False)
        except Exception:
            return _STALE  # eager mode decides what this call does (and raises what it raises)
        self.stats.replays += 1
        return _unshared(result, program.constant_ids)

    def record(self, args: tuple, kwargs: dict, call_args: tuple, call_kwargs: dict, extra: Any, nums: tuple,
               single: bool, key: tuple, inputs: list, values: list, pins: list, again: bool) -> Any:
        environment = Environment(self.fun)
        drew = random_states(self.fun, environment, call_args, call_kwargs)
        before = [v.copy() for v in values]  # the caller's arrays as the call found them
        tape, log, out, aux, sources, watched = _record(self.fun, call_args, call_kwargs, nums, self.has_aux,
                                                        self.also)
        self.stats.recordings += 1
        if again:
            self.stats.rerecordings += 1
        program = None
        plain, rebuild = read_outputs(out)
        try:
            if drew():
                raise Refused("it draws from NumPy's random generators")
            if tape.paused:
                raise Refused("it computes with traced values while the tape does not record (stop_recording, "
                               "a SciPy solver's own run), which a recording cannot follow")
            if rebuild is not None:
                raise Refused("it returns a wrapper (xarray, pint), which a replay does not rebuild")
            if not all(same(v, b) for v, b in zip(values, before)):
                log.unreplayable = "the function writes into an array argument"  # a replay would not
            if log.unreplayable is not None:  # this call's answer stands; the next one records again
                self.stats.unkept += 1
                raise _NotKept
            out_spec = _tree_spec(plain, tape, "the output")
            aux_spec = _tree_spec(aux, tape, "aux") if self.has_aux else ((), [])
            if self.has_aux and read_outputs(aux, "aux", strict=False)[1] is not None:
                raise Refused("aux holds a wrapper (xarray, pint)")
            if len(watched) != len(inputs):
                raise Refused("the watched inputs do not match the call's arrays")
            refs = [(leaf.index, leaf.out) for leaf in out_spec[1] + aux_spec[1] if type(leaf) is Ref]
            root = out_spec[1][0] if len(out_spec[1]) == 1 else None
            gradient_root = None
            if self.gradient and type(root) is Ref and root.out < 0 and np.size(_node_value(tape, root)) == 1:
                gradient_root = root.index
            vjp_root = None
            if self.vjp and type(root) is Ref and root.out < 0 and type(_node_value(tape, root)) is np.ndarray:
                vjp_root = root.index  # an HVP: the program may sweep from the vector itself
            try:
                program = compile_recording(tape, log, watched, [i for i, _ in refs], gradient_root, tuple(refs),
                                            vjp_root)
            except Refused:
                raise
            except Exception as exc:  # a replay at the recorded inputs failed: never reuse what cannot replay
                # (slogdet's gradient at a singular matrix raises in eager mode too: a few such
                # points are not kept; a recording that keeps failing is refused.)
                self.failed_compiles += 1
                if self.failed_compiles < FAILED_COMPILES:
                    self.stats.unkept += 1
                    raise _NotKept from None
                raise Refused(f"its recording does not replay ({type(exc).__name__}: {exc})") from None
            program.environment = environment
            program.values = before
            program.originals = list(values)
            program.pins = pins
            program.out, program.aux = out_spec, aux_spec
            program.sources = [
                (structure, [Ref(leaf._index, -1) if type(leaf) is Tracer else leaf for leaf in leaves])
                for structure, leaves in sources
            ]
        except Refused as exc:
            self.refuse(str(exc))
        except _NotKept:
            pass
        result = self.answer(tape, plain, aux, sources, single, extra, True)
        if program is not None:
            with self.lock:
                programs = self.cache.setdefault(key, [])
                programs.insert(0, program)
                del programs[PER_SIGNATURE:]
                self.cache.move_to_end(key, last=False)
                while len(self.cache) > SIGNATURES:
                    self.cache.popitem()
        return result

    def compare(self, result: Any, args: tuple, kwargs: dict) -> None:
        """``reuse="check"``: the reused result must equal eager mode's, bit for bit."""
        expected = self.eager(*args, **kwargs)
        self.stats.checked += 1
        got_leaves, got_structure = flatten(result)
        want_leaves, want_structure = flatten(expected)
        if got_structure != want_structure or not all(same(a, b) for a, b in zip(got_leaves, want_leaves)):
            raise ReuseMismatchError(
                f"tapegrad: a reused recording of {getattr(self.fun, '__qualname__', self.fun)} gave another result "
                "than eager mode. The function reads something its recording froze (see docs/reuse.md); "
                "use reuse=False for it, or pass that value as an argument."
            )


_STALE = object()


class _NotKept(Exception):
    """A recording that answers its own call but is not kept (``GuardLog.unreplayable``)."""


class _NoMemo:
    """A stand-in tape with an empty memo, for :class:`tapegrad.memo.sweeping`."""

    memo: dict = {}


_NO_MEMO = _NoMemo()


def _unshared(result: Any, constant_ids: frozenset) -> Any:
    """``result`` with a copy of any array that is one of the program's constants (the caller may write to it)."""
    leaves, structure = flatten(result)
    if not any(id(leaf) in constant_ids for leaf in leaves):
        return result
    return unflatten(structure, [leaf.copy() if id(leaf) in constant_ids else leaf for leaf in leaves])


# ---------------------------------------------------------------------- the answers
def _vg_answer(has_aux: bool, holomorphic: bool) -> Callable:
    def answer(tape: Tape, out: Any, aux: Any, sources: list, single: bool, extra: Any, first: bool) -> Any:
        if first:
            _require_scalar(out, "grad")
            _require_differentiable_output(out, holomorphic)
            if holomorphic:
                _require_complex_inputs(sources)
        flat = _flat_sources(sources)
        results = fresh_results(gradient_request(tape, [out], flat, None, (), "zero"))
        grads = _results_per_arg(sources, results, single)
        value = _lower_value(out, None, tape)
        if has_aux:
            return (value, _lower_aux(aux, tape)), grads
        return value, grads

    return answer


def _jac_answer(has_aux: bool, chunk_size: Optional[int]) -> Callable:
    def answer(tape: Tape, out: Any, aux: Any, sources: list, single: bool, extra: Any, first: bool) -> Any:
        tape.persistent = True
        flat = _flat_sources(sources)
        out_leaves, out_structure = flatten(out)
        per_output = []
        for y in out_leaves:
            results = fresh_results(jacobian_request(tape, y, flat, "zero", chunk_size))
            per_output.append(_results_per_arg(sources, results, single))
        jac = unflatten(out_structure, per_output)
        return (jac, _lower_aux(aux, tape)) if has_aux else jac

    return answer


def _hvp_answer(tape: Tape, out: Any, aux: Any, sources: list, single: bool, v: Any, first: bool) -> Any:
    flat = _flat_sources(sources)
    out_leaves, out_structure = flatten(out)
    cotangent = read_outputs(v, "the cotangent", strict=False)[0]
    cts = [as_seed(ct) for ct in flatten_up_to(out_structure, cotangent)]
    if len(cts) != len(out_leaves):
        raise ValueError(f"cotangent has {len(cts)} arrays for {len(out_leaves)} outputs")
    batch = leading_batch(cts, out_leaves, "cotangent")
    results = vjp_request(tape, out_leaves, flat, cts, batch, (), "zero")
    return tuple(_results_per_arg(sources, fresh_results(results, cts), False))[0]


def _finish(reusable: _Reusable, fun: Callable, shape: Optional[Callable] = None) -> Callable:
    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = reusable(*args, **kwargs)
        return result if shape is None else shape(result)

    wrapper.reuse_stats = reusable.stats  # type: ignore[attr-defined]
    wrapper._reusable = reusable  # type: ignore[attr-defined]  # its cache, for tests and diagnostics
    return wrapper


def _check_flag(reuse: Any) -> bool:
    if reuse is True:
        return False
    if reuse == "check":
        return True
    raise ValueError(f"reuse must be False, True or 'check', not {reuse!r}")


def reusable(kind: str, fun: Callable, reuse: Any, argnums: Any = 0, has_aux: bool = False,
             holomorphic: bool = False, chunk_size: Optional[int] = None, also: tuple = (),
             quiet: bool = False) -> Callable:
    """The ``reuse=True`` version of ``tg.<kind>(fun, ...)`` (``kind``: value_and_grad, grad, jacobian, hvp).

    The returned function carries ``reuse_stats`` (:class:`ReuseStats`).  ``also``
    (jacobian only): argument positions whose values are replayed, not
    differentiated (a solver's times); ``quiet``: refuse without a warning.
    """
    check = _check_flag(reuse)
    if kind in ("value_and_grad", "grad"):
        eager = _value_and_grad(fun, argnums, has_aux, holomorphic)
        r = _Reusable(fun, eager, argnums, has_aux, _vg_answer(has_aux, holomorphic), check)
        r.gradient = True
        if kind == "value_and_grad":
            return _finish(r, fun)
        return _finish(r, fun, (lambda vg: (vg[1], vg[0][1])) if has_aux else (lambda vg: vg[1]))
    if kind == "jacobian":
        eager = _jacrev(fun, argnums, has_aux, chunk_size)
        r = _Reusable(fun, eager, argnums, has_aux, _jac_answer(has_aux, chunk_size), check, also=also, quiet=quiet)
        return _finish(r, fun)
    if kind == "hessian":
        inner = _grad(fun, argnums)
        eager = _jacrev(inner, argnums, False, chunk_size)
        return _finish(_Reusable(inner, eager, argnums, False, _jac_answer(False, chunk_size), check), fun)
    if kind == "hvp":
        inner = _grad(fun)
        eager = _hvp(fun)

        def split(args: tuple, kwargs: dict) -> tuple:
            if len(args) < 2:
                raise TypeError("hvp(f)(x, v, *args, **kwargs) needs x and v")
            return (args[0],) + args[2:], kwargs, args[1]

        r = _Reusable(inner, eager, 0, False, _hvp_answer, check, split)
        r.vjp = True  # (not the solvers' pullbacks: their batched cotangents take the general sweep)
        return _finish(r, fun)
    if kind == "pullback":  # tapegrad's own: (cotangent, x, *args) -> the VJP with respect to x

        def pullback(ct: Any, x: Any, *args: Any) -> Any:
            _, pull = _vjp(lambda y: fun(y, *args), x)
            return pull(ct)[0]

        def split_cotangent(args: tuple, kwargs: dict) -> tuple:
            return args[1:], kwargs, args[0]

        r = _Reusable(fun, pullback, 0, False, _hvp_answer, check, split_cotangent, also=also, quiet=quiet)
        return _finish(r, fun)
    raise ValueError(kind)
