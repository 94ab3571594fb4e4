"""The installed onnxruntime's version without importing onnxruntime.

``import onnxruntime`` loads its native library (~0.8 s of CPU here, a quarter of a tiny
``q38 check``), while the contracts need only the version string unless ORT sessions are
created. The version is read from the metadata of the distribution that installed the
importable ``onnxruntime`` package (``onnxruntime``, ``onnxruntime-gpu``, ``ort-nightly`` ...:
the one whose RECORD lists the ``onnxruntime/__init__.py`` Python would import); where that
cannot be told, the module is imported and asked.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
from pathlib import Path

__all__ = ["installed_version"]


def installed_version(module: str = "onnxruntime") -> str | None:
    """``module.__version__`` of the importable ``module`` (None when it is not installed)."""
    loaded = sys.modules.get(module)
    if loaded is not None:
        return str(getattr(loaded, "__version__", "")) or None
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    origin = os.path.realpath(spec.origin)
    init = f"{module}/__init__.py"
    # The distribution's .dist-info sits next to the package (site-packages): look only there,
    # at the names that can install it (reading every installed distribution costs ~0.1 s).
    site = Path(spec.origin).parent.parent
    prefixes = (module.replace("_", "-"), "ort-")
    for info in sorted(site.glob("*.dist-info")):
        if not info.name.lower().replace("_", "-").startswith(prefixes):
            continue
        dist = importlib.metadata.PathDistribution(info)
        files = dist.files or []
        if any(str(f).replace(os.sep, "/") == init and os.path.realpath(str(dist.locate_file(f))) == origin for f in files):
            return str(dist.version)
    try:
        imported = importlib.import_module(module)
    except ImportError:
        return None
    return str(getattr(imported, "__version__", "")) or None
