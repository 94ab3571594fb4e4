"""``python -m q38`` and the ``q38`` console script."""

from __future__ import annotations

import sys


def entry() -> int:
    """The console script: a Ctrl-C while the CLI itself is still being imported is one line too."""
    try:
        from q38.cli import main
    except KeyboardInterrupt:
        sys.stderr.write("q38: interrupted\n")
        return 130
    return main()


if __name__ == "__main__":
    sys.exit(entry())
