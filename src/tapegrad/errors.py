"""The exception types tapegrad raises.

Every error says what went wrong *and* what to do instead, because the
alternative to a clear error in an autodiff library is a silently wrong
derivative.
"""

from __future__ import annotations

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
