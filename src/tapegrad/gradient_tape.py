"""A TensorFlow-style gradient tape over plain NumPy code."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

from . import buffers as _buffers
from . import constructors as _constructors
from .errors import TapeError
from .lazy import any_duck, guard
from .derived_requests import batch_jacobian_request, structured_gradient
from .requests import (
    check_unconnected,
    fresh_results,
    jacobian_request,
)
from .graph import tape_to_dot
from .sparsity import sparse_jacobian_request
from .host import prepare
from .outputs import read_target
from .tape import Tape
from .tracer import Tracer
from .tree import flatten, unflatten

__all__ = ["GradientTape"]


class GradientTape:
    """Record NumPy calls on watched values to differentiate them later.

    Parameters
    ----------
    persistent : bool, default False
        A non-persistent tape answers one request (``gradient``, ``jacobian`` or
        ``batch_jacobian``); a second one raises :class:`~tapegrad.errors.TapeError`.

    Notes
    -----
    Unlike TensorFlow, NumPy arrays cannot be marked in place, so
    :meth:`watch` *returns* the value to use from then on::

        with tg.GradientTape() as tape:
            x = tape.watch(x)
            y = np.sin(x) * x
        dy_dx = tape.gradient(y, x)

    ``tape.gradient(y, x)`` is the gradient of ``sum(y)``, shaped like ``x``;
    :meth:`jacobian` gives every derivative.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> with tg.GradientTape() as tape:
    ...     x = tape.watch(np.array(3.0))
    ...     y = x * x
    >>> tape.gradient(y, x)
    array(6.)
    """

    def __init__(self, persistent: bool = False) -> None:
        self.persistent = persistent
        self._tape: Optional[Tape] = None
        self._watched: list = []

    # ------------------------------------------------------------ context
    def __enter__(self) -> "GradientTape":
        if self._tape is None:
            prepare()
            self._tape = Tape(self.persistent)
        _constructors.start()  # np.array / np.asarray of tracers: see tapegrad.constructors
        _buffers.push(self._tape)  # np.zeros & co. in the block: traced constants (tapegrad.buffers)
        return self

    def __exit__(self, *exc: Any) -> bool:
        _buffers.pop()
        _constructors.stop(exc[1])
        guarded = self.__dict__.pop("_lazy_guard", None)
        if guarded is not None:
            guarded.__exit__(*exc)  # may turn a Dask fallback warning into LazyFallbackError
        return False

    def _require_tape(self) -> Tape:
        if self._tape is None:
            raise TapeError("use the tape as a context manager first: `with tg.GradientTape() as tape:`")
        return self._tape

    def watch(self, tensor: Any) -> Any:
        """Start tracing ``tensor`` (an array, a scalar, or a nested list/tuple/dict of them).

        Returns
        -------
        object
            The same structure with every floating-point leaf replaced by a tracer;
            use it in place of the original.  Integer and boolean leaves are
            returned unchanged (their gradients are ``None``).
        """
        tape = self._require_tape()
        leaves, structure = flatten(tensor)
        traced = [tape.watch(leaf) for leaf in leaves]
        if "_lazy_guard" not in self.__dict__ and any_duck(leaves):
            # A Dask value: the rest of the `with` block must not fall back to NumPy (compute).
            self._lazy_guard = guard()
            self._lazy_guard.__enter__()
        self._watched.extend(t for t in traced if type(t) is Tracer)
        return unflatten(structure, traced)

    def watched_variables(self) -> tuple:
        """The tracers returned by :meth:`watch`, in order."""
        return tuple(self._watched)

    def to_dot(self, targets: Any = None, sources: Any = None) -> str:
        """The recorded calls as Graphviz DOT text (see :func:`tapegrad.graph.tape_to_dot`).

        ``targets`` are drawn red, ``sources`` (default: the watched values)
        green; write a picture with :func:`tapegrad.graph.write_graph`.
        """
        return tape_to_dot(self, targets, sources)

    @contextlib.contextmanager
    def stop_recording(self) -> Iterator[None]:
        """Within this block, calls on this tape's tracers are computed but not recorded."""
        tape = self._require_tape()
        previous = tape.recording
        tape.recording = False
        try:
            yield
        finally:
            tape.recording = previous

    def reset(self) -> None:
        """Forget everything recorded; watched values must be watched again."""
        self._tape = Tape(self.persistent)
        self._watched = []

    def _consume(self) -> Tape:
        tape = self._require_tape()
        if tape.consumed:
            raise TapeError(
                "a non-persistent GradientTape answers one request; it already answered. "
                "Use tg.GradientTape(persistent=True) to ask for several gradients."
            )
        if not self.persistent:
            tape.consumed = True
        return tape

    # ------------------------------------------------------------ requests
    def gradient(
        self,
        target: Any,
        sources: Any,
        output_gradients: Any = None,
        unconnected_gradients: str = "none",
    ) -> Any:
        """The gradient of ``sum(target)`` (weighted by ``output_gradients``) w.r.t. ``sources``.

        Parameters
        ----------
        target : array or nested structure of arrays
            Values computed on this tape.  With several targets, the gradient is
            of the sum of all of them.  A wrapper of a tracer (an xarray
            ``DataArray`` or ``Dataset``, a pint ``Quantity``) is read through.
        sources : array or nested structure of arrays
            Watched values (or values computed from them).
        output_gradients : same structure as ``target``, optional
            Weights: the result is ``d(sum_i sum(output_gradients[i] * target[i])) / d source``,
            a vector-Jacobian product.  Defaults to ones.
        unconnected_gradients : {"none", "zero"}
            What a source that ``target`` does not depend on gets.

        Returns
        -------
        object
            One gradient per source, shaped like it, in the structure of ``sources``.
        """
        tape = self._consume()
        unconnected = check_unconnected(unconnected_gradients)
        return structured_gradient(tape, target, sources, output_gradients, (), unconnected)

    def jacobian(
        self,
        target: Any,
        sources: Any,
        unconnected_gradients: str = "none",
        chunk_size: Optional[int] = None,
        sparse: bool = False,
    ) -> Any:
        """Every derivative: ``target.shape + source.shape`` for each source.

        Computed in one backward sweep that carries all output basis vectors at
        once (``chunk_size`` of them at a time, to bound memory).  With
        ``sparse=True`` each result is a ``scipy.sparse.csr_array`` of shape
        ``(target.size, source.size)`` (see :func:`tapegrad.jacobian`).
        """
        tape = self._consume()
        unconnected = check_unconnected(unconnected_gradients)
        target = read_target(target, "the target")
        xs, structure = flatten(sources)
        if sparse:
            return unflatten(structure, sparse_jacobian_request(tape, target, xs, chunk_size))
        results = jacobian_request(tape, target, xs, unconnected, chunk_size)
        return unflatten(structure, fresh_results(results))

    def batch_jacobian(
        self,
        target: Any,
        source: Any,
        unconnected_gradients: str = "none",
        chunk_size: Optional[int] = None,
    ) -> Any:
        """Per-example Jacobians: ``target[b]`` w.r.t. ``source[b]`` for each batch row ``b``.

        Assumes rows are independent (row ``b`` of the target depends only on
        row ``b`` of the source), as ``tf.GradientTape.batch_jacobian`` does.
        Returns an array of shape ``(B,) + target.shape[1:] + source.shape[1:]``.
        """
        tape = self._consume()
        unconnected = check_unconnected(unconnected_gradients)
        target = read_target(target, "the target")
        result = batch_jacobian_request(tape, target, source, unconnected, chunk_size)
        return fresh_results([result])[0]
