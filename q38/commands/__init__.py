"""One module per subcommand.

Each module exposes ``register(subparsers)`` and ``run(args) -> int``. A command module imports
only the standard library at module level, so that ``q38 --help`` and ``q38 CMD --help`` work
where onnx, numpy and onnxruntime are not importable; ``run`` imports what it needs.
"""

from __future__ import annotations

# The order here is the order of `q38 --help`.
COMMAND_MODULES: tuple[str, ...] = (
    "synth",
    "build",
    "optimize",
    "offload",
    "profile",
    "fit",
    "check",
    "rules",
    "explain",
    "export_genai",
    "diff",
    "demo",
)
