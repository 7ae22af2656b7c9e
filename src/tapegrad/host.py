"""What tapegrad does to the host process, in one place.

:func:`prepare` is called by every public entry point that starts recording
(``grad``, ``vjp``, ``jacobian``, ... and ``GradientTape``), never by a
constructor and never by ``import tapegrad``.  The first call:

* applies the allocator policy of :mod:`tapegrad.memory` (glibc keeps freed
  memory for reuse; ``TAPEGRAD_RETAIN_MEMORY=0`` or
  ``tapegrad.retain_freed_memory(False)`` opts out);
* registers tracers with autoray when autoray is already imported
  (:mod:`tapegrad.integrations.autoray`), so ``autoray.do`` dispatches them to
  NumPy.  autoray is checked again at later calls until it appears.

Each later call costs two flag checks.
"""

from __future__ import annotations

import sys

from . import memory
from .integrations import autoray

__all__ = ["prepare"]


def prepare() -> None:
    """Apply tapegrad's process-wide policies once (see the module docstring)."""
    if not memory._decided:
        memory.apply_default_policy()
    if not autoray.registered and "autoray" in sys.modules:
        autoray.register()
