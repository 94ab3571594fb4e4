"""``python -m q38``."""

from __future__ import annotations

import sys

from q38.cli import main

if __name__ == "__main__":
    sys.exit(main())
