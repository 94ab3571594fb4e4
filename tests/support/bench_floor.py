"""The optimize-family benchmarks' floor: what any tool that rewrites a package's graphs must do.

One child script, run with ``python -c SCRIPT SRC OUT``: load and save every ``.onnx`` file with
onnx-ir and place every other file (``copy``: ``shutil.copy2``; ``link``: a hard link). Both the
optimize benchmark (copies) and the gated-command benchmark (hard links, as those commands ran)
measure against it, so the two floors cannot drift apart.
"""

from __future__ import annotations

import textwrap

__all__ = ["floor_script"]

_PLACE = {"copy": "shutil.copy2(path, out / rel)", "link": "os.link(path, out / rel)"}


def floor_script(place: str, *, start: str = "") -> str:
    """The floor's child script, placing non-graph files by ``place``, after ``start`` (start-up code)."""
    return start + textwrap.dedent(f"""
        import os, shutil, sys, onnx_ir as ir
        from pathlib import Path
        src, out = Path(sys.argv[1]), Path(sys.argv[2])
        out.mkdir()
        for path in sorted(src.rglob("*")):
            rel = path.relative_to(src)
            if path.is_dir():
                (out / rel).mkdir(exist_ok=True)
            elif path.suffix == ".onnx":
                ir.save(ir.load(path), out / rel)
            else:
                {_PLACE[place]}
    """)
