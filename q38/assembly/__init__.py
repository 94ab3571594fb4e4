"""Package assembly (``q38 build``): layered and folded packages from source bundles."""

from __future__ import annotations

from q38.assembly.assemble import BuildRequest, BuildResult, build_package
from q38.package.io.links import LinkPolicy, place_file

__all__ = ["BuildRequest", "BuildResult", "LinkPolicy", "build_package", "place_file"]
