"""Every path a package's config names, and the one contract each must meet.

A config names files in many places: the graphs (``model.decoder.filename``, the qwen38 graph's
target / head / prefill / multidraft files, a genai package's ``model.mtp.filename`` and
``model.engram.filename``), runtime-profile overlays (``overlay.model.decoder.filename``), the
weights pool, the expert profile, custom-op libraries (``custom_ops_library`` in every
session-options block, ``qwen38_graph.libraries``), the offload ``popularity_file`` config
entry, and the ``data_file`` of every ``shared_initializers`` entry. GenAI and ORT open each of
them relative to the config's directory, so each is a contract:

* relative, no ``..``, no NUL / backslash / invalid Unicode (:func:`q38.package.safe_relpath`);
* inside the package after resolving links (a symlink may not lead out, nor loop);
* it exists and is a regular file (not a directory, FIFO, device or socket).

:func:`path_fields` lists the fields of a config document (the raw JSON, so a broken config is
still enumerated), :func:`field_problem` says what is wrong with one, and
:func:`check_path_fields` is what every command that reads a package calls. ``contracts/path_fields.py``
reports the same problems as ``q38 check`` violations.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from q38.errors import UnsafePathError, quote
from q38.package.io.files import describe_mode, os_problem
from q38.package.io.paths import resolve_inside, safe_relpath

__all__ = [
    "GRAPH_SECTIONS",
    "PIPELINE_OWNERS",
    "POPULARITY_KEY",
    "PathField",
    "Problem",
    "check_path_fields",
    "field_problem",
    "path_fields",
    "shared_initializer_ranges",
]

POPULARITY_KEY: Final = "session.moe.offload.popularity_file"
# The genai config's graph sections (onnxruntime-genai 0.18.0 and the research builder): each may
# name a graph, shared_initializers and session options; decoder and vision may hold pipelines.
GRAPH_SECTIONS: Final = ("decoder", "mtp", "engram", "draft", "dflash2", "dspark", "encoder",
                         "vision", "embedding", "speech", "joiner", "vad")  # fmt: skip
PIPELINE_OWNERS: Final = ("decoder", "vision")
Kind = Literal["graph", "pool", "profile", "library", "data"]
# What is wrong with a field: its spelling, where its links lead, or what it names.
Category = Literal["syntax", "escape", "file"]


@dataclass(frozen=True)
class PathField:
    """One path a config names: JSON key path, value as written, kind, and the directory it is relative to."""

    key: str
    value: object
    kind: Kind
    base: Path


@dataclass(frozen=True)
class Problem:
    """What is wrong with one path field, by category (``syntax``, ``escape``, ``file``), as one line."""

    field: PathField
    category: Category
    message: str


def _obj(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _session_blocks(prefix: str, section: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    so = section.get("session_options")
    if isinstance(so, Mapping):
        yield f"{prefix}.session_options", so


def path_fields(doc: Mapping[str, Any], *, config_dir: Path, head_dir: Path | None = None) -> list[PathField]:
    """Every path field of the config document ``doc`` (raw JSON or ``config_to_dict``).

    Args:
        doc: the parsed ``genai_config.json``.
        config_dir: the directory holding the config (paths are relative to it).
        head_dir: a layered package's ``head/`` (the head graph's directory); default ``config_dir``.

    """
    head_dir = config_dir if head_dir is None else head_dir
    out: list[PathField] = []

    def add(key: str, value: object, kind: Kind, base: Path = config_dir) -> None:
        out.append(PathField(key, value, kind, base))

    model = _obj(doc.get("model"))
    blocks: list[tuple[str, Mapping[str, Any]]] = []

    def graph_section(prefix: str, sub: Mapping[str, Any]) -> None:
        if "filename" in sub:
            add(f"{prefix}.filename", sub["filename"], "graph")
        shared = sub.get("shared_initializers")
        for i, entry in enumerate(shared if isinstance(shared, list) else []):
            if isinstance(entry, Mapping) and "data_file" in entry:
                add(f"{prefix}.shared_initializers[{i}].data_file", entry["data_file"], "data")
        blocks.extend(_session_blocks(prefix, sub))

    for section in GRAPH_SECTIONS:
        sub = model.get(section)
        if not isinstance(sub, Mapping):
            continue
        graph_section(f"model.{section}", sub)
        pipeline = sub.get("pipeline") if section in PIPELINE_OWNERS else None
        stages = pipeline if isinstance(pipeline, list) else [pipeline] if isinstance(pipeline, Mapping) else []
        for i, stage in enumerate(stages):
            for stage_id, spec in sorted(_obj(stage).items()):
                if isinstance(spec, Mapping):
                    graph_section(f"model.{section}.pipeline[{i}].{stage_id}", spec)
    graph = _obj(model.get("qwen38_graph"))
    if "filename" in _obj(graph.get("target")):
        add("model.qwen38_graph.target.filename", graph["target"]["filename"], "graph")
    head = _obj(_obj(graph.get("fold")).get("head_r2"))
    if "filename" in head:
        add("model.qwen38_graph.fold.head_r2.filename", head["filename"], "graph", head_dir)
    blocks.extend(_session_blocks("model.qwen38_graph.fold.head_r2", head))
    if "filename" in _obj(graph.get("prefill")):
        add("model.qwen38_graph.prefill.filename", graph["prefill"]["filename"], "graph")
    for role, rel in sorted(_obj(graph.get("multidraft")).items()):
        add(f"model.qwen38_graph.multidraft.{role}", rel, "graph")
    if "weights_pool" in graph:
        add("model.qwen38_graph.weights_pool", graph["weights_pool"], "pool")
    if "expert_profile" in graph:
        add("model.qwen38_graph.expert_profile", graph["expert_profile"], "profile")
    for name, rel in sorted(_obj(graph.get("libraries")).items()):
        add(f"model.qwen38_graph.libraries.{name}", rel, "library")
    profiles = doc.get("runtime_profiles")
    for i, profile in enumerate(profiles if isinstance(profiles, list) else []):
        decoder = _obj(_obj(_obj(_obj(profile).get("overlay")).get("model")).get("decoder"))
        prefix = f"runtime_profiles[{i}].overlay.model.decoder"
        if "filename" in decoder:
            add(f"{prefix}.filename", decoder["filename"], "graph")
        blocks.extend(_session_blocks(prefix, decoder))
    for prefix, so in blocks:
        if "custom_ops_library" in so:
            add(f"{prefix}.custom_ops_library", so["custom_ops_library"], "library")
        if POPULARITY_KEY in so:
            add(f"{prefix}.{POPULARITY_KEY}", so[POPULARITY_KEY], "profile")
        entries = _obj(so.get("config_entries"))
        if POPULARITY_KEY in entries:
            add(f"{prefix}.config_entries.{POPULARITY_KEY}", entries[POPULARITY_KEY], "profile")
    return out


def field_problem(field: PathField, *, root: Path) -> Problem | None:
    """What is wrong with ``field`` in the package at ``root`` (None: it meets the contract)."""
    what = f"{field.key}"
    if not isinstance(field.value, str):
        return Problem(field, "syntax", f"{what}: expected a file name (a string), got {quote(field.value)}")
    try:
        rel = safe_relpath(field.value, what=what)
    except UnsafePathError as exc:
        return Problem(field, "syntax", str(exc))
    base = field.base
    try:
        prefix = base.relative_to(root).as_posix() if base != root else ""
    except ValueError:
        prefix = ""
        root = base
    try:
        named = resolve_inside(root, f"{prefix}/{rel}" if prefix else rel, what=what)
    except UnsafePathError as exc:
        category: Category = "file" if "does not exist" in str(exc) else "escape"
        return Problem(field, category, str(exc))
    try:
        st = os.stat(named)
    except OSError as exc:
        return Problem(field, "file", f"{what}: {quote(field.value)}: {os_problem(exc)}")
    if not stat.S_ISREG(st.st_mode):
        return Problem(field, "file", f"{what}: {quote(field.value)} is {describe_mode(st.st_mode)}, not a regular file")
    return None


def shared_initializer_ranges(doc: Mapping[str, Any], *, config_dir: Path) -> list[str]:
    """Messages for ``shared_initializers`` entries whose byte range is malformed or out of bounds.

    An ``offset`` / ``length`` that is not a decimal integer, or a range past the end of its
    (regular, contained) ``data_file``, gives one message.
    """
    found = []
    model = _obj(doc.get("model"))
    for section in GRAPH_SECTIONS:
        shared = _obj(model.get(section)).get("shared_initializers")
        for i, entry in enumerate(shared if isinstance(shared, list) else []):
            key = f"model.{section}.shared_initializers[{i}]"
            if not isinstance(entry, Mapping) or not isinstance(entry.get("data_file"), str):
                continue
            numbers = []
            for name in ("offset", "length"):
                text = entry.get(name)
                if not (isinstance(text, str) and text.isascii() and text.isdigit() and len(text) <= 19):
                    found.append(f"{key}.{name}: expected a non-negative decimal string, got {quote(text)}")
                    break
                numbers.append(int(text))
            else:
                try:
                    size = os.stat(config_dir / entry["data_file"]).st_size
                except (OSError, ValueError):
                    continue  # the path-field rules report the file itself
                offset, length = numbers
                if offset + length > size:
                    found.append(
                        f"{key}: bytes [{offset}, {offset + length}) lie past the end of "
                        f"{quote(entry['data_file'])} ({size} bytes)"
                    )
    return found


def check_path_fields(
    doc: Mapping[str, Any], *, root: Path, config_dir: Path, head_dir: Path | None = None, source: str
) -> None:
    """Raise one :class:`UnsafePathError` line for the first path field that breaks its contract.

    ``source`` (the config's path) starts the message.
    """
    for field in path_fields(doc, config_dir=config_dir, head_dir=head_dir):
        problem = field_problem(field, root=root)
        if problem is not None:
            raise UnsafePathError(f"{source}: {problem.message}")
    ranges = shared_initializer_ranges(doc, config_dir=config_dir)
    if ranges:
        raise UnsafePathError(f"{source}: {ranges[0]}")
