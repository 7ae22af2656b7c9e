"""The exception types tapegrad raises.

Every error says what went wrong *and* what to do instead, because the
alternative to a clear error in an autodiff library is a silently wrong
derivative.
"""

from __future__ import annotations

from typing import Optional

__all__ = [
    "TapegradError",
    "UnsupportedFunctionError",
    "GradientDroppedError",
    "NonDifferentiableArgumentError",
    "TapeError",
]


class TapegradError(Exception):
    """Base class of every error raised by tapegrad."""


class UnsupportedFunctionError(TapegradError, TypeError):
    """A NumPy function was called on a tracer and tapegrad has no rule for it."""

    def __init__(self, name: str, detail: str = "") -> None:
        message = (
            f"tapegrad cannot differentiate {name}: it has no derivative rule. "
            f"Register one with tapegrad.defvjp({name}, ...), mark it constant with "
            f"tapegrad.defconstant({name}) if its output carries no gradient, or call it "
            "on tapegrad.stop_gradient(x) to treat the input as a constant."
        )
        if detail:
            message += " " + detail
        super().__init__(message)
        self.name = name


class GradientDroppedError(TapegradError, TypeError):
    """An operation would turn a tracer into a plain value and lose its gradient."""


class NonDifferentiableArgumentError(TapegradError, TypeError):
    """A traced value reached an argument that has no derivative rule."""


class TapeError(TapegradError, RuntimeError):
    """A gradient was requested from a tape in a way the tape cannot answer."""


def element_store_error(exc: BaseException) -> Optional[GradientDroppedError]:
    """The tapegrad error to raise instead of ``exc`` when ``exc`` hides one, else ``None``.

    ``plain[i] = x`` (and ``plain[i] += x``) with a traced ``x`` makes NumPy convert
    ``x`` with ``float()``, which raises :class:`GradientDroppedError`; but NumPy
    replaces any error of an object that supports indexing by
    ``ValueError: setting an array element with a sequence``, keeping ours only
    as the cause.  Entry points that run user code call this to put the
    tapegrad error first.
    """
    if (
        type(exc) is ValueError
        and isinstance(exc.__cause__, GradientDroppedError)
        and "array element with a sequence" in str(exc)
    ):
        return GradientDroppedError(
            "storing a traced value into an element of a plain ndarray (out[i] = v or out[i] += v) "
            "would silently drop its gradient. Preallocate a traced array instead, "
            "out = np.zeros_like(x) or np.zeros(n) called inside the differentiated function "
            "(writes into them are recorded), or collect the pieces in a "
            "list and np.stack them. If you really want a constant, store "
            "tapegrad.stop_gradient(v)."
        )
    return None
