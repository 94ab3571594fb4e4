"""The q38 error hierarchy.

Every user-facing failure is a :class:`Q38Error`. The CLI prints ``str(error)`` as one
line and exits 2, so messages must name what is at fault (file, node, rule, flag) and
fit on one line. Internal invariants use :class:`InternalError`.
"""

from __future__ import annotations

__all__ = [
    "BuildError",
    "ConfigError",
    "ExportError",
    "FlagError",
    "GraphError",
    "InternalError",
    "OffloadError",
    "OptimizeError",
    "PackageError",
    "PoolError",
    "ProfileError",
    "Q38Error",
    "UnsafePathError",
]


class Q38Error(Exception):
    """A user error: bad flag, unreadable or malformed input, unconvertible package."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        # One line, always: newlines in a wrapped library message would break the CLI contract.
        super().__init__(" ".join(str(message).split()))


class FlagError(Q38Error):
    """A command-line flag or its value is invalid."""


class PackageError(Q38Error):
    """A package directory or one of its files cannot be read or is malformed."""


class ConfigError(PackageError):
    """genai_config.json does not match the config surface."""


class PoolError(PackageError):
    """weights_pool.txt is malformed."""


class ProfileError(PackageError):
    """expert-profile.bin (STRP v1) is malformed."""


class GraphError(PackageError):
    """An ONNX graph is unreadable, malformed, or its external data is unsafe."""


class UnsafePathError(PackageError):
    """A path escapes the package directory or crosses an unsafe link."""


class BuildError(Q38Error):
    """``q38 build`` refused its inputs."""


class ExportError(Q38Error):
    """``q38 export-genai`` refused its input."""


class OptimizeError(Q38Error):
    """``q38 optimize`` refused its inputs."""


class OffloadError(Q38Error):
    """``q38 offload`` refused its inputs."""


class InternalError(RuntimeError):
    """A q38 bug: an invariant that should hold regardless of user input."""
