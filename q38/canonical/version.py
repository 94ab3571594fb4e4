"""The format version of the canonical forms; bump it whenever any form's output changes."""

from __future__ import annotations

from typing import Final

VERSION: Final = 3
"""3: floats as the shortest text of their dtype, width-bounded layout, shared goldens."""
