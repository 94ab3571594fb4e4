"""Checks of ``q38 build``'s inputs that run before anything is written.

Destinations (existing, dangling symlink, later-destination collision, nested in a source after
resolving links), libraries (distinct inputs with one basename, the reserved
``libqwen38_plane.so``, symlinks resolved) and the provider with its options.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from q38.errors import BuildError, FlagError, quote
from q38.package.io.elf import shared_object_problem
from q38.package.io.files import os_problem
from q38.package.io.paths import is_inside

__all__ = [
    "CUDA_OPTIONS",
    "RESERVED_LIBRARY",
    "Library",
    "check_destinations",
    "check_libraries",
    "check_provider",
]

RESERVED_LIBRARY: Final = "libqwen38_plane.so"
_LIB_NAME_RE: Final = re.compile(r"[A-Za-z0-9_.-]+")  # fullmatch: no newline, no '/', no '='
# The C types ORT's CUDA provider parses each option into: (lowest, highest) accepted value.
_INT_RANGES: Final = {"size_t": (0, (1 << 64) - 1), "int": (0, (1 << 31) - 1)}
# ORT CUDA execution provider options: kind is "size_t", "int", "bool" or a tuple of allowed strings.
CUDA_OPTIONS: Final[dict[str, object]] = {
    "device_id": "int",
    "gpu_mem_limit": "size_t",
    "arena_extend_strategy": ("kNextPowerOfTwo", "kSameAsRequested"),
    "cudnn_conv_algo_search": ("EXHAUSTIVE", "HEURISTIC", "DEFAULT"),
    "do_copy_in_default_stream": "bool",
    "cudnn_conv_use_max_workspace": "bool",
    "cudnn_conv1d_pad_to_nc1d": "bool",
    "enable_cuda_graph": "bool",
    "enable_skip_layer_norm_strict_mode": "bool",
    "use_tf32": "bool",
    "prefer_nhwc": "bool",
    "tunable_op_enable": "bool",
    "tunable_op_tuning_enable": "bool",
    "tunable_op_max_tuning_duration_ms": "int",
    "use_ep_level_unified_stream": "bool",
    "sdpa_kernel": "int",
    "fuse_conv_bias": "bool",
}


@dataclass(frozen=True)
class Library:
    """One ``--lib-NAME PATH``: ``real`` is the resolved file, ``basename`` the packaged name."""

    name: str
    given: Path
    real: Path
    basename: str
    in_bundle: bool = False  # the resolved file lies inside a source bundle (may be linked)


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def check_destinations(dests: list[Path], sources: list[Path]) -> None:
    """Refuse existing / dangling / colliding destinations and destinations inside a source."""
    real_sources = [(s, _real(s)) for s in sources]
    for dest in dests:
        if os.path.islink(dest) and not os.path.exists(dest):
            raise BuildError(f"{dest}: destination is a dangling symlink (refusing to write through it)")
        if os.path.lexists(dest):
            raise BuildError(f"{dest}: destination exists (refusing to overwrite)")
        parent = dest.parent
        real = _real(parent) / dest.name
        for given, src in real_sources:
            if real == src or is_inside(src, real):
                raise BuildError(f"{dest}: destination is inside the source {given} (after resolving links)")


def check_libraries(items: list[tuple[str, str]]) -> list[Library]:
    """Validate ``--lib-NAME PATH`` pairs; the same source named twice is kept once per name."""
    libs: dict[str, Library] = {}
    by_base: dict[str, Library] = {}
    for name, raw in items:
        flag = f"--lib-{name}"
        if not _LIB_NAME_RE.fullmatch(name):
            raise FlagError(f"--lib-{quote(name)}: invalid library name (letters, digits, '_', '.', '-')")
        given = Path(raw)
        basename = given.name
        real = _real(given)
        if RESERVED_LIBRARY in (basename, real.name):
            raise BuildError(f"{flag} {raw}: {RESERVED_LIBRARY} is reserved for the runtime plane")
        if not real.is_file():
            raise BuildError(f"{flag} {raw}: not a file (or a dangling symlink)")
        try:
            problem = shared_object_problem(real)
        except OSError as exc:
            raise BuildError(f"{flag} {raw}: cannot read it: {os_problem(exc)}") from None
        if problem is not None:
            shown = raw if str(real) == os.path.abspath(raw) else f"{raw} (-> {real})"
            raise BuildError(f"{flag} {shown}: {problem}; a library must be a shared object for this platform")
        lib = Library(name, given, real, basename)
        if name in libs and libs[name].real != real:
            raise FlagError(f"{flag}: given twice with different files ({libs[name].given}, {raw})")
        other = by_base.get(basename)
        if other is not None and not os.path.samefile(other.real, real):
            raise BuildError(
                f"{flag} {raw}: basename {basename!r} is also used by --lib-{other.name} "
                f"{other.given} (a different file); libs/ would hold only one"
            )
        libs.setdefault(name, lib)
        by_base.setdefault(basename, lib)
    return list(libs.values())


def _cuda_value(key: str, value: str) -> str:
    kind = CUDA_OPTIONS[key]
    flag = f"--cuda-option {key}={quote(value)}"
    if kind == "bool":
        word = value.lower()
        if word in ("1", "true"):
            return "1"
        if word in ("0", "false"):
            return "0"
        raise FlagError(f"{flag}: expected 0/1/true/false")
    if isinstance(kind, str) and kind in _INT_RANGES:
        low, high = _INT_RANGES[kind]
        if len(value) > 80:  # longer than any 64-bit literal (and than int()'s digit limit allows)
            raise FlagError(f"{flag}: out of range for {kind} (at most {high})")
        try:
            number = int(value.replace("_", ""), 0)
        except ValueError:
            raise FlagError(f"{flag}: expected an integer ({kind})") from None
        if number < 0:
            raise FlagError(f"{flag}: must not be negative")
        if not low <= number <= high:
            raise FlagError(f"{flag}: out of range for {kind} (at most {high})")
        return str(number)  # GenAI takes numeric provider options as decimal strings
    assert isinstance(kind, tuple)
    if value not in kind:
        raise FlagError(f"{flag}: expected one of {', '.join(kind)}")
    return value


def check_provider(provider: str, options: list[str]) -> dict[str, str]:
    """Return the normalized CUDA options (decimal strings); refuse options without ``cuda``."""
    if provider not in ("cuda", "cpu"):
        raise FlagError(f"--provider {provider}: expected cuda or cpu")
    if options and provider != "cuda":
        raise FlagError(f"--cuda-option needs --provider cuda (got --provider {provider})")
    out: dict[str, str] = {}
    for item in options:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise FlagError(f"--cuda-option {item}: expected KEY=VALUE")
        if key not in CUDA_OPTIONS:
            raise FlagError(f"--cuda-option {key}: unknown CUDA provider option")
        if key in out:
            raise FlagError(f"--cuda-option {key}: given twice")
        out[key] = _cuda_value(key, value)
    return out
