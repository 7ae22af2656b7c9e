"""Make autoray-written code differentiable by tapegrad, unchanged.

`autoray <https://github.com/jcmgray/autoray>`_ dispatches ``autoray.do("sum", x)``
to the library that defined ``type(x)``.  A :class:`~tapegrad.Tracer` is an
ndarray stand-in that NumPy itself dispatches to tapegrad (NEP 13/18), so
the right backend for it is simply ``"numpy"``: ``do("tensordot", a, b)``
calls ``numpy.tensordot(a, b)``, which hands the call to the tracer.  That
also keeps autoray's NumPy conventions (``linalg.svd`` with
``full_matrices=False``, creation routines with ``like=``).  The one function
NumPy lacks is ``stop_gradient``; it is registered for the ``"numpy"``
backend as :func:`tapegrad.stop_gradient`, which returns plain arrays
unchanged and turns tracers into constants.

Design: ``import tapegrad`` never imports autoray.  :func:`register` is called
by :func:`tapegrad.host.prepare` when a derivative is first asked for after
autoray has been imported (a dictionary look-up in ``sys.modules`` per request
until then), so user code needs nothing but ``import autoray``.  If autoray is first imported *inside* a
function being differentiated, call :func:`register` yourself (it is
idempotent).
"""

from __future__ import annotations

from ..tracer import Tracer, stop_gradient

__all__ = ["register", "registered"]

#: Whether :func:`register` has run in this process.
registered = False


def register() -> None:
    """Register tapegrad's tracer with autoray (imports autoray; idempotent).

    After this, ``autoray.infer_backend(tracer) == "numpy"``,
    ``autoray.do(name, tracer, ...)`` calls the NumPy function, and
    ``autoray.do("stop_gradient", x)`` is :func:`tapegrad.stop_gradient`.
    """
    global registered
    if registered:
        return
    import autoray  # optional: imported only once the user has imported it

    autoray.register_backend(Tracer, "numpy")
    autoray.register_function("numpy", "stop_gradient", stop_gradient)
    registered = True
