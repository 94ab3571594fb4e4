"""The unit tests' shared, session-scoped synthetic packages (tests/support/synth_packages.py).

The trees are SHARED: consumers must treat them as read-only and copy them
(``shutil.copytree(src, tmp_path / "pkg", symlinks=True)``) before modifying anything.
"""

from __future__ import annotations

from support.synth_packages import (  # noqa: F401 (fixtures)
    full_builder_cpu_package,
    full_cpu_package,
    tiny_builder_cpu_package,
    tiny_builder_faithful_package,
    tiny_bundles,
    tiny_cpu_package,
    tiny_faithful_package,
)
