"""``python -m tapegrad``: see :mod:`tapegrad.cli`."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
