"""NumPy's own attributes behind a namespace module's own names (PEP 562 ``__getattr__``).

The standard names a small set of functions; code that looks functions up in an
array's namespace (xarray: ``xp.pad``, ``xp.einsum``, ``xp.gradient``) also
uses NumPy's others.  They are NumPy's functions themselves, with NumPy's
signatures: called on tracers they dispatch to tapegrad through NEP 13/18 like
any NumPy call, so there is still one rule table.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Tuple

__all__ = ["numpy_fallback"]


def numpy_fallback(source: Any, namespace: Dict[str, Any]) -> Tuple[Callable[[str], Any], Callable[[], list]]:
    """``__getattr__`` and ``__dir__`` for the module whose globals are ``namespace``.

    A public name the module does not define is looked up on ``source`` (``numpy``,
    ``numpy.linalg``, ``numpy.fft``) at each access; private and dunder names are
    not forwarded (``__path__``, ``__wrapped__`` and NumPy's private modules stay
    absent).
    """
    owner = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        if not name.startswith("_"):
            try:
                return getattr(source, name)
            except AttributeError:
                pass
        raise AttributeError(f"module {owner!r} has no attribute {name!r}")

    def __dir__() -> list:
        return sorted(set(namespace) | {n for n in dir(source) if not n.startswith("_")})

    return __getattr__, __dir__
