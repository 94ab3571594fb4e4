"""Generate the hostile-input corpus: malformed packages, graphs and files (deterministic).

Usage: ``python tests/unit/corpus/make_corpus.py DIR`` (DIR must not exist). Every item is
``DIR/<name>/pkg`` (a package directory, or for ``bundles`` items the source bundles
``target/ head/ prefill/ libs/``), sometimes with a sibling ``DIR/<name>/outside/`` that a
symlink inside ``pkg`` points at. ``DIR/corpus.json`` lists every item:
``{name: {"kind": "package"|"bundles", "expect": REGEX, "build_args": [...]}}`` where ``expect``
must match the one stderr line of every command refusing the item (case-insensitive).

Nothing here is checked-in binary: every item is a synthetic ``tiny`` package (q38.synth, seed
0) with one deliberate defect. The base trees are built once and copied per item.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import onnx

Mutator = Callable[[Path], None]


@dataclass(frozen=True)
class Item:
    name: str
    kind: str  # "package" | "bundles"
    expect: str  # regex the refusal line must match
    mutate: Mutator
    build_args: tuple[str, ...] = ()  # extra `q38 build` args, paths relative to the item dir
    profile: bool = False  # start from the base package with an expert profile
    extra: dict[str, str] = field(default_factory=dict)


ITEMS: list[Item] = []


def item(name: str, expect: str, *, kind: str = "package", build_args: tuple[str, ...] = (), profile: bool = False) -> Callable[[Mutator], Mutator]:
    def deco(fn: Mutator) -> Mutator:
        ITEMS.append(Item(name, kind, expect, fn, build_args, profile))
        return fn

    return deco


# ------------------------------------------------------------------------------------- helpers
def _graph(path: Path) -> onnx.ModelProto:
    return onnx.load(str(path), load_external_data=False)


def _save(model: onnx.ModelProto, path: Path) -> None:
    path.write_bytes(model.SerializeToString())


def edit_graph(path: Path, fn: Callable[[onnx.ModelProto], None]) -> None:
    model = _graph(path)
    fn(model)
    _save(model, path)


def _first_external(model: onnx.ModelProto) -> onnx.TensorProto:
    return next(t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL)


def set_external(path: Path, **kv: str) -> None:
    def fn(model: onnx.ModelProto) -> None:
        tensor = _first_external(model)
        entries = {e.key: e.value for e in tensor.external_data}
        entries.update(kv)
        del tensor.external_data[:]
        for key, value in entries.items():
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value

    edit_graph(path, fn)


def edit_config(pkg: Path, fn: Callable[[dict], None]) -> None:  # type: ignore[type-arg]
    path = pkg / "genai_config.json"
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def graph_cfg(doc: dict) -> dict:  # type: ignore[type-arg]
    return doc["model"]["qwen38_graph"]  # type: ignore[no-any-return]


def edit_pool_line(pkg: Path, fn: Callable[[list[str]], list[str]]) -> None:
    """Rewrite the first entry line of weights_pool.txt (split into fields)."""
    path = pkg / "weights_pool.txt"
    lines = path.read_text().split("\n")
    for i, line in enumerate(lines):
        if line and not line.startswith("#"):
            lines[i] = " ".join(fn(line.split(" ")))
            break
    path.write_text("\n".join(lines))


def truncate(path: Path, size: int) -> None:
    data = path.read_bytes()
    path.unlink()  # the file may be a hard link shared with other items: never write through it
    path.write_bytes(data[:size])


def replace_with_dir(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "placeholder").write_text("a directory where a file belongs\n")


def replace_with_link(path: Path, target: str) -> None:
    path.unlink()
    os.symlink(target, path)


def profile_bytes(layers: int = 8, experts: int = 8, *, magic: bytes = b"STRP", version: int = 1, reserved: int = 0) -> bytes:
    header = struct.pack("<4sHHII", magic, version, reserved, layers, experts)
    return header + b"".join(struct.pack("<Q", (i * 7919) % 1000) for i in range(layers * experts))


# ------------------------------------------------------------------------------ graph protobuf
@item("graph_truncated_half", r"model\.onnx.*(not a valid ONNX|truncated|malformed)")
def _(pkg: Path) -> None:
    truncate(pkg / "model.onnx", (pkg / "model.onnx").stat().st_size // 2)


@item("graph_truncated_tail", r"model\.onnx.*(not a valid ONNX|truncated|malformed)")
def _(pkg: Path) -> None:
    truncate(pkg / "model.onnx", (pkg / "model.onnx").stat().st_size - 7)


@item("graph_empty_file", r"model\.onnx.*(not a valid ONNX|empty|no graph)")
def _(pkg: Path) -> None:
    truncate(pkg / "model.onnx", 0)


@item("graph_garbage_bytes", r"model\.onnx.*(not a valid ONNX|truncated|malformed)")
def _(pkg: Path) -> None:
    (pkg / "model.onnx").write_bytes(bytes((i * 131 + 7) % 256 for i in range(4096)))


@item("graph_is_directory", r"model\.onnx.*(directory|not a regular file)")
def _(pkg: Path) -> None:
    replace_with_dir(pkg / "model.onnx")


@item("graph_missing", r"model\.onnx.*(does not exist|missing)")
def _(pkg: Path) -> None:
    (pkg / "model.onnx").unlink()


@item("graph_symlink_to_etc", r"model\.onnx.*outside the package")
def _(pkg: Path) -> None:
    replace_with_link(pkg / "model.onnx", "/etc/passwd")


@item("graph_symlink_loop", r"model\.onnx.*symlink loop")
def _(pkg: Path) -> None:
    replace_with_link(pkg / "model.onnx", "model.onnx")


@item("head_truncated", r"head_r2\.onnx.*(not a valid ONNX|truncated|malformed)")
def _(pkg: Path) -> None:
    truncate(pkg / "head_r2.onnx", (pkg / "head_r2.onnx").stat().st_size // 3)


@item("prefill_truncated", r"prefill\.onnx.*(not a valid ONNX|truncated|malformed)")
def _(pkg: Path) -> None:
    truncate(pkg / "prefill.onnx", (pkg / "prefill.onnx").stat().st_size // 2)


@item("prefill_symlink_outside", r"prefill\.onnx.*(outside|escapes) the package")
def _(pkg: Path) -> None:
    outside = pkg.parent / "outside"
    outside.mkdir()
    shutil.copyfile(pkg / "prefill.onnx", outside / "prefill.onnx")
    replace_with_link(pkg / "prefill.onnx", "../outside/prefill.onnx")


# ---------------------------------------------------------------------------- external data
@item("ext_offset_past_eof", r"model\.onnx.*past the end")
def _(pkg: Path) -> None:
    set_external(pkg / "model.onnx", offset=str((pkg / "model.onnx.data").stat().st_size + 4096))


@item("ext_length_past_eof", r"model\.onnx.*(past the end|bytes)")
def _(pkg: Path) -> None:
    set_external(pkg / "model.onnx", offset="0", length=str((pkg / "model.onnx.data").stat().st_size * 2))


@item("ext_negative_offset", r"model\.onnx.*(negative|offset)")
def _(pkg: Path) -> None:
    set_external(pkg / "model.onnx", offset="-64")


@item("ext_negative_length", r"model\.onnx.*(negative|length)")
def _(pkg: Path) -> None:
    set_external(pkg / "model.onnx", length="-65536")


@item("ext_overflow_offset", r"model\.onnx.*(past the end|offset|overflow)")
def _(pkg: Path) -> None:
    set_external(pkg / "model.onnx", offset=str(2**70))


@item("ext_overflow_length", r"model\.onnx.*(past the end|length|overflow)")
def _(pkg: Path) -> None:
    set_external(pkg / "model.onnx", length=str(2**64 - 1))


@item("ext_nonnumeric_offset", r"model\.onnx.*(offset|not a valid ONNX|malformed)")
def _(pkg: Path) -> None:
    set_external(pkg / "model.onnx", offset="0x40")


@item("ext_location_dotdot", r"model\.onnx.*escapes the package")
def _(pkg: Path) -> None:
    set_external(pkg / "model.onnx", location="../outside/model.onnx.data")


@item("ext_location_absolute", r"(model\.onnx|model\.embed_tokens\.weight).*(absolute path|must be a relative path)")
def _(pkg: Path) -> None:
    set_external(pkg / "model.onnx", location="/etc/passwd")


@item("ext_location_symlink_to_etc", r"evil\.data.*outside the package")
def _(pkg: Path) -> None:
    os.symlink("/etc/passwd", pkg / "evil.data")
    set_external(pkg / "model.onnx", location="evil.data", offset="0", length="16")


@item("ext_location_symlink_loop", r"loop\.data.*symlink loop")
def _(pkg: Path) -> None:
    os.symlink("loop.data", pkg / "loop.data")
    set_external(pkg / "model.onnx", location="loop.data")


@item("ext_location_missing", r"(model\.onnx|model\.embed_tokens\.weight).*no_such\.data.*(does not exist|missing)")
def _(pkg: Path) -> None:
    set_external(pkg / "model.onnx", location="no_such.data")


@item("ext_location_directory", r"model\.onnx.*not a regular file")
def _(pkg: Path) -> None:
    set_external(pkg / "model.onnx", location="libs")


@item("ext_location_empty", r"(model\.onnx|model\.embed_tokens\.weight).*(invalid path|must be a relative path)")
def _(pkg: Path) -> None:
    set_external(pkg / "model.onnx", location="")


@item("ext_location_backslash", r"(model\.onnx|model\.embed_tokens\.weight).*(invalid character|must be a relative path)")
def _(pkg: Path) -> None:
    set_external(pkg / "model.onnx", location="..\\..\\etc\\passwd")


@item("ext_data_truncated", r"past the end of 'model\.onnx\.data'")
def _(pkg: Path) -> None:
    truncate(pkg / "model.onnx.data", (pkg / "model.onnx.data").stat().st_size // 2)


@item("ext_data_empty", r"past the end of 'model\.onnx\.data'")
def _(pkg: Path) -> None:
    truncate(pkg / "model.onnx.data", 0)


@item("ext_data_symlink_outside", r"model\.onnx.*outside the package")
def _(pkg: Path) -> None:
    outside = pkg.parent / "outside"
    outside.mkdir()
    shutil.copyfile(pkg / "model.onnx.data", outside / "model.onnx.data")
    replace_with_link(pkg / "model.onnx.data", "../outside/model.onnx.data")


@item("ext_length_mismatch", r"model\.onnx.*needs")
def _(pkg: Path) -> None:
    set_external(pkg / "model.onnx", length="100")


@item("head_ext_offset_past_eof", r"head_r2\.onnx.*past the end")
def _(pkg: Path) -> None:
    def fn(model: onnx.ModelProto) -> None:
        for t in model.graph.initializer:
            if t.data_location == onnx.TensorProto.EXTERNAL:
                for e in t.external_data:
                    if e.key == "offset":
                        e.value = str(10**9)

    edit_graph(pkg / "head_r2.onnx", fn)


# ---------------------------------------------------------------------------- graph structure
@item("dup_initializer", r"model\.onnx.*duplicate")
def _(pkg: Path) -> None:
    edit_graph(pkg / "model.onnx", lambda m: m.graph.initializer.append(m.graph.initializer[0]))


@item("dup_node_output", r"model\.onnx.*(duplicate|produced)")
def _(pkg: Path) -> None:
    def fn(model: onnx.ModelProto) -> None:
        nodes = model.graph.node
        # The second node now claims the first node's output as well: two producers of one value.
        nodes[1].output[0] = nodes[0].output[0]

    edit_graph(pkg / "model.onnx", fn)


@item("graph_cycle", r"model\.onnx.*(cycle|produced later)")
def _(pkg: Path) -> None:
    def fn(model: onnx.ModelProto) -> None:
        nodes = model.graph.node
        # The first node consumes the output of the last node, which depends on it: a cycle.
        nodes[0].input[0] = nodes[len(nodes) - 1].output[0]

    edit_graph(pkg / "model.onnx", fn)


@item("graph_self_loop", r"model\.onnx.*(cycle|produced later)")
def _(pkg: Path) -> None:
    def fn(model: onnx.ModelProto) -> None:
        node = next(n for n in model.graph.node if n.op_type == "Sigmoid")
        node.input[0] = node.output[0]

    edit_graph(pkg / "model.onnx", fn)


@item("node_missing_input", r"model\.onnx.*does_not_exist")
def _(pkg: Path) -> None:
    def fn(model: onnx.ModelProto) -> None:
        node = next(n for n in model.graph.node if n.op_type == "MatMul")
        node.input[0] = "does_not_exist"

    edit_graph(pkg / "model.onnx", fn)


@item("graph_output_unproduced", r"model\.onnx.*not produced")
def _(pkg: Path) -> None:
    edit_graph(pkg / "model.onnx", lambda m: m.graph.output.append(
        onnx.helper.make_tensor_value_info("ghost_output", onnx.TensorProto.FLOAT, [1])))


@item("dtype_undefined_initializer", r"model\.onnx.*(dtype|data type|not a valid ONNX|malformed)")
def _(pkg: Path) -> None:
    def fn(model: onnx.ModelProto) -> None:
        _first_external(model).data_type = onnx.TensorProto.UNDEFINED

    edit_graph(pkg / "model.onnx", fn)


@item("dtype_unknown_enum", r"model\.onnx.*(dtype|data type|not a valid ONNX|malformed)")
def _(pkg: Path) -> None:
    def fn(model: onnx.ModelProto) -> None:
        _first_external(model).data_type = 99

    edit_graph(pkg / "model.onnx", fn)


@item("dtype_string_external", r"model\.onnx.*(dtype|STRING|string|needs)")
def _(pkg: Path) -> None:
    def fn(model: onnx.ModelProto) -> None:
        _first_external(model).data_type = onnx.TensorProto.STRING

    edit_graph(pkg / "model.onnx", fn)


@item("dtype_wrong_for_length", r"model\.onnx.*needs")
def _(pkg: Path) -> None:
    def fn(model: onnx.ModelProto) -> None:
        _first_external(model).data_type = onnx.TensorProto.DOUBLE  # 4x the bytes the file holds

    edit_graph(pkg / "model.onnx", fn)


@item("negative_dim_initializer", r"model\.onnx.*(negative|dimension|needs|not a valid ONNX)")
def _(pkg: Path) -> None:
    def fn(model: onnx.ModelProto) -> None:
        _first_external(model).dims[0] = -512

    edit_graph(pkg / "model.onnx", fn)


@item("huge_dims_initializer", r"model\.onnx.*(needs|dimension|past the end)")
def _(pkg: Path) -> None:
    def fn(model: onnx.ModelProto) -> None:
        tensor = _first_external(model)
        tensor.dims[0] = 2**40
        tensor.dims[1] = 2**40

    edit_graph(pkg / "model.onnx", fn)


# ------------------------------------------------------------------------------------ config
@item("config_invalid_json", r"genai_config\.json.*(invalid|unreadable) JSON")
def _(pkg: Path) -> None:
    p = pkg / "genai_config.json"
    p.write_text(p.read_text()[:-40])


@item("config_empty", r"genai_config\.json.*(invalid|unreadable) JSON")
def _(pkg: Path) -> None:
    (pkg / "genai_config.json").write_text("")


@item("config_not_object", r"genai_config\.json.*expected (an|a JSON) object")
def _(pkg: Path) -> None:
    (pkg / "genai_config.json").write_text("[1, 2, 3]\n")


@item("config_not_utf8", r"genai_config\.json.*(unreadable|UTF-8|utf-8|decode)")
def _(pkg: Path) -> None:
    p = pkg / "genai_config.json"
    p.write_bytes(p.read_bytes().replace(b'"q38"', b'"q\xff\xfe8"', 1) if b'"q38"' in p.read_bytes() else b"\xff\xfe{}")


@item("config_deep_nesting", r"genai_config\.json.*(nested too deeply|invalid JSON)")
def _(pkg: Path) -> None:
    (pkg / "genai_config.json").write_text("[" * 100_000 + "]" * 100_000)


@item("config_unknown_top_key", r"genai_config\.json.*weights_pool.*unknown key")
def _(pkg: Path) -> None:
    edit_config(pkg, lambda d: d.__setitem__("weights_pool", {"file": "weights_pool.txt"}))


@item("config_unknown_nested_key", r"model\.decoder\.sliding_window.*unknown key")
def _(pkg: Path) -> None:
    edit_config(pkg, lambda d: d["model"]["decoder"].__setitem__("sliding_window", 128))


@item("config_wrong_type_vocab", r"model\.vocab_size.*expected an integer")
def _(pkg: Path) -> None:
    edit_config(pkg, lambda d: d["model"].__setitem__("vocab_size", "512"))


@item("config_huge_number", r"model\.context_length.*int64")
def _(pkg: Path) -> None:
    edit_config(pkg, lambda d: d["model"].__setitem__("context_length", 10**30))


@item("config_float_for_int", r"model\.decoder\.hidden_size.*expected an integer")
def _(pkg: Path) -> None:
    edit_config(pkg, lambda d: d["model"]["decoder"].__setitem__("hidden_size", 256.0))


@item("config_negative_int", r"model\.decoder\.num_hidden_layers.*must be >= 1")
def _(pkg: Path) -> None:
    edit_config(pkg, lambda d: d["model"]["decoder"].__setitem__("num_hidden_layers", -8))


@item("config_bool_for_int", r"model\.qwen38_graph\.kv_capacity.*expected an integer")
def _(pkg: Path) -> None:
    edit_config(pkg, lambda d: graph_cfg(d).__setitem__("kv_capacity", True))


@item("config_nan", r"search\.max_length.*NaN is not valid JSON")
def _(pkg: Path) -> None:
    p = pkg / "genai_config.json"
    p.write_text(p.read_text().replace('"max_length": 4096', '"max_length": NaN'))


@item("config_provider_number", r"provider_options.*enable_cuda_graph.*(expected a string|must be a string|string)")
def _(pkg: Path) -> None:
    edit_config(pkg, lambda d: d["model"]["decoder"]["session_options"]["provider_options"][0]["cuda"].__setitem__("enable_cuda_graph", 1))


@item("config_wrong_model_type", r"model\.type.*expected 'qwen38_flash_graph'")
def _(pkg: Path) -> None:
    edit_config(pkg, lambda d: d["model"].__setitem__("type", "qwen3_5_moe_text"))


@item("config_missing_decoder", r"model\.decoder.*required key is missing")
def _(pkg: Path) -> None:
    edit_config(pkg, lambda d: d["model"].pop("decoder"))


@item("config_prefill_chunk_too_big", r"prefill\.chunk.*exceeds kv_capacity")
def _(pkg: Path) -> None:
    edit_config(pkg, lambda d: graph_cfg(d)["prefill"].__setitem__("chunk", 10**6))


def _profiles(lo1: int, hi1: int, lo2: int, hi2: int, id2: str = "b") -> list[dict]:  # type: ignore[type-arg]
    def one(pid: str, lo: int, hi: int) -> dict:  # type: ignore[type-arg]
        return {"id": pid, "eligibility": {"minimum_total_device_memory_bytes": lo, "maximum_total_device_memory_bytes": hi},
                "overlay": {"model": {"decoder": {"filename": "model.onnx"}}}}

    return [one("a", lo1, hi1), one(id2, lo2, hi2)]


@item("config_profiles_overlap", r"runtime_profiles.*overlap")
def _(pkg: Path) -> None:
    edit_config(pkg, lambda d: d.__setitem__("runtime_profiles", _profiles(1 << 34, 1 << 35, 1 << 34, 1 << 36)))


@item("config_profiles_duplicate_id", r"runtime_profiles\[1\]\.id.*duplicate")
def _(pkg: Path) -> None:
    edit_config(pkg, lambda d: d.__setitem__("runtime_profiles", _profiles(1, 2, 3, 4, id2="a")))


@item("config_profile_wrong_type", r"runtime_profiles\[0\].*minimum_total_device_memory_bytes.*expected an integer")
def _(pkg: Path) -> None:
    def fn(d: dict) -> None:  # type: ignore[type-arg]
        profiles = _profiles(1, 2, 3, 4)
        profiles[0]["eligibility"]["minimum_total_device_memory_bytes"] = "1"
        d["runtime_profiles"] = profiles

    edit_config(pkg, fn)


@item("config_target_dotdot", r"target(\.filename| graph).*escapes the package")
def _(pkg: Path) -> None:
    edit_config(pkg, lambda d: graph_cfg(d)["target"].__setitem__("filename", "../outside/model.onnx"))


@item("config_target_absolute", r"target(\.filename| graph).*absolute path")
def _(pkg: Path) -> None:
    edit_config(pkg, lambda d: graph_cfg(d)["target"].__setitem__("filename", "/etc/passwd"))


@item("config_target_is_dir", r"target(\.filename| graph).*directory")
def _(pkg: Path) -> None:
    edit_config(pkg, lambda d: graph_cfg(d)["target"].__setitem__("filename", "libs"))


@item("config_head_missing_file", r"head_r9\.onnx.*(does not exist|missing)")
def _(pkg: Path) -> None:
    edit_config(pkg, lambda d: graph_cfg(d)["fold"]["head_r2"].__setitem__("filename", "head_r9.onnx"))


@item("config_pool_dotdot", r"weights_pool.*escapes the package")
def _(pkg: Path) -> None:
    edit_config(pkg, lambda d: graph_cfg(d).__setitem__("weights_pool", "../weights_pool.txt"))


@item("config_custom_ops_library_is_dir", r"custom_ops_library.*(directory|not a regular file)")
def _(pkg: Path) -> None:
    edit_config(pkg, lambda d: d["model"]["decoder"]["session_options"].__setitem__("custom_ops_library", "libs"))


@item("config_library_is_dir", r"(library 'plane'|libraries\.plane).*(directory|not a regular file)")
def _(pkg: Path) -> None:
    edit_config(pkg, lambda d: graph_cfg(d).__setitem__("libraries", {"plane": "libs"}))


@item("config_library_missing", r"(library 'plane'|libraries\.plane).*does not exist")
def _(pkg: Path) -> None:
    edit_config(pkg, lambda d: graph_cfg(d).__setitem__("libraries", {"plane": "libs/libqwen38_plane.so"}))


@item("config_library_symlink_to_etc", r"libqwen38_plane\.so.*outside the package")
def _(pkg: Path) -> None:
    os.symlink("/etc/ld.so.cache", pkg / "libs" / "libqwen38_plane.so")
    edit_config(pkg, lambda d: graph_cfg(d).__setitem__("libraries", {"plane": "libs/libqwen38_plane.so"}))


@item("config_library_symlink_loop", r"libqwen38_plane\.so.*(symlink loop|looping symlink)")
def _(pkg: Path) -> None:
    os.symlink("libqwen38_plane.so", pkg / "libs" / "libqwen38_plane.so")
    edit_config(pkg, lambda d: graph_cfg(d).__setitem__("libraries", {"plane": "libs/libqwen38_plane.so"}))


@item("config_is_directory", r"genai_config\.json.*(directory|unreadable)")
def _(pkg: Path) -> None:
    replace_with_dir(pkg / "genai_config.json")


@item("config_symlink_to_etc", r"genai_config\.json.*outside the package")
def _(pkg: Path) -> None:
    replace_with_link(pkg / "genai_config.json", "/etc/passwd")


@item("config_symlink_loop", r"genai_config\.json.*symlink loop")
def _(pkg: Path) -> None:
    replace_with_link(pkg / "genai_config.json", "genai_config.json")


@item("config_v12_unknown_legacy_key", r"qwen38_graph\.head_graph_v0.*unknown key")
def _(pkg: Path) -> None:
    def fn(d: dict) -> None:  # type: ignore[type-arg]
        d["model"]["type"] = "qwen38_flash"
        d["model"]["qwen38"] = {"head_graph_v0": "head_r2.onnx", "kv_capacity": 4096, "pool": "weights_pool.txt"}
        del d["model"]["qwen38_graph"]

    edit_config(pkg, fn)


# ------------------------------------------------------------------------------------- pool
@item("pool_too_few_fields", r"weights_pool\.txt:3:.*expected 'pool_id file")
def _(pkg: Path) -> None:
    edit_pool_line(pkg, lambda f: f[:4])


@item("pool_negative_offset", r"weights_pool\.txt:3:.*offset '-1'")
def _(pkg: Path) -> None:
    edit_pool_line(pkg, lambda f: [f[0], f[1], "-1", *f[3:]])


@item("pool_bad_length", r"weights_pool\.txt:3:.*length 'abc'")
def _(pkg: Path) -> None:
    edit_pool_line(pkg, lambda f: [*f[:3], "abc", *f[4:]])


@item("pool_huge_offset", r"weights_pool\.txt:3:.*int64")
def _(pkg: Path) -> None:
    edit_pool_line(pkg, lambda f: [f[0], f[1], str(2**64), *f[3:]])


@item("pool_unknown_dtype", r"weights_pool\.txt:3:.*unknown dtype 'float128'")
def _(pkg: Path) -> None:
    edit_pool_line(pkg, lambda f: [*f[:4], "float128", *f[5:]])


@item("pool_bad_shape", r"weights_pool\.txt:3:.*shape dimension")
def _(pkg: Path) -> None:
    edit_pool_line(pkg, lambda f: [*f[:5], "64xabc", *f[6:]])


@item("pool_unknown_placement", r"weights_pool\.txt:3:.*unknown placement 'gpu'")
def _(pkg: Path) -> None:
    edit_pool_line(pkg, lambda f: [*f[:6], "gpu", *f[7:]])


@item("pool_duplicate_id", r"weights_pool\.txt:.*duplicate pool id")
def _(pkg: Path) -> None:
    p = pkg / "weights_pool.txt"
    lines = p.read_text().splitlines()
    entry = next(line for line in lines if line and not line.startswith("#"))
    p.write_text("\n".join([*lines, entry]) + "\n")


@item("pool_file_dotdot", r"weights_pool\.txt:3:.*escapes the package")
def _(pkg: Path) -> None:
    edit_pool_line(pkg, lambda f: [f[0], "../outside/model.onnx.data", *f[2:]])


@item("pool_file_absolute", r"weights_pool\.txt:3:.*absolute path")
def _(pkg: Path) -> None:
    edit_pool_line(pkg, lambda f: [f[0], "/etc/passwd", *f[2:]])


@item("pool_file_missing", r"pool entry 'w0000'.*does not exist")
def _(pkg: Path) -> None:
    edit_pool_line(pkg, lambda f: [f[0], "model.onnx.missing", *f[2:]])


@item("pool_file_is_dir", r"pool entry 'w0000'.*directory")
def _(pkg: Path) -> None:
    edit_pool_line(pkg, lambda f: [f[0], "libs", *f[2:]])


@item("pool_file_symlink_to_etc", r"pool\.data.*(outside|escapes) the package")
def _(pkg: Path) -> None:
    os.symlink("/etc/passwd", pkg / "pool.data")
    edit_pool_line(pkg, lambda f: [f[0], "pool.data", *f[2:]])


@item("pool_length_mismatch", r"weights_pool\.txt:3:.*does not match")
def _(pkg: Path) -> None:
    edit_pool_line(pkg, lambda f: [*f[:3], "12", *f[4:]])


@item("pool_offset_past_eof", r"pool entry 'w0000'.*past the end")
def _(pkg: Path) -> None:
    edit_pool_line(pkg, lambda f: [f[0], f[1], str(10**12), *f[3:]])


@item("pool_bad_id", r"weights_pool\.txt:3:.*invalid pool id")
def _(pkg: Path) -> None:
    edit_pool_line(pkg, lambda f: ["w0000;rm", *f[1:]])


@item("pool_not_utf8", r"weights_pool\.txt.*UTF-8")
def _(pkg: Path) -> None:
    p = pkg / "weights_pool.txt"
    p.write_bytes(p.read_bytes() + b"w9999 model.onnx.data 0 2 uint8 2 device \xff\xfe\n")


@item("pool_missing", r"weights_pool.*does not exist")
def _(pkg: Path) -> None:
    (pkg / "weights_pool.txt").unlink()


@item("pool_symlink_loop", r"weights_pool\.txt.*(symlink loop|looping symlink)")
def _(pkg: Path) -> None:
    replace_with_link(pkg / "weights_pool.txt", "weights_pool.txt")


# ----------------------------------------------------------------------------------- profile
@item("profile_bad_magic", r"expert-profile\.bin.*bad magic", profile=True)
def _(pkg: Path) -> None:
    (pkg / "expert-profile.bin").write_bytes(profile_bytes(magic=b"PRTS"))


@item("profile_truncated_counts", r"expert-profile\.bin.*truncated counts", profile=True)
def _(pkg: Path) -> None:
    truncate(pkg / "expert-profile.bin", 16 + 8 * 10)


@item("profile_truncated_header", r"expert-profile\.bin.*truncated header", profile=True)
def _(pkg: Path) -> None:
    truncate(pkg / "expert-profile.bin", 11)


@item("profile_trailing_bytes", r"expert-profile\.bin.*trailing bytes", profile=True)
def _(pkg: Path) -> None:
    (pkg / "expert-profile.bin").write_bytes(profile_bytes() + b"\0" * 8)


@item("profile_bad_version", r"expert-profile\.bin.*unsupported STRP version", profile=True)
def _(pkg: Path) -> None:
    (pkg / "expert-profile.bin").write_bytes(profile_bytes(version=2))


@item("profile_zero_layers", r"expert-profile\.bin.*must be positive", profile=True)
def _(pkg: Path) -> None:
    (pkg / "expert-profile.bin").write_bytes(profile_bytes(layers=0))


@item("profile_huge_counts", r"expert-profile\.bin.*exceed the limit", profile=True)
def _(pkg: Path) -> None:
    (pkg / "expert-profile.bin").write_bytes(struct.pack("<4sHHII", b"STRP", 1, 0, 2**32 - 1, 2**32 - 1))


@item("profile_is_directory", r"expert_profile.*directory", profile=True)
def _(pkg: Path) -> None:
    replace_with_dir(pkg / "expert-profile.bin")


@item("profile_symlink_to_etc", r"expert-profile\.bin.*(outside|escapes) the package", profile=True)
def _(pkg: Path) -> None:
    replace_with_link(pkg / "expert-profile.bin", "/etc/passwd")


@item("profile_missing", r"expert_profile.*does not exist", profile=True)
def _(pkg: Path) -> None:
    (pkg / "expert-profile.bin").unlink()


# ---------------------------------------------------------------------------- manifest/layout
@item("manifest_invalid_json", r"package_manifest\.json")
def _(pkg: Path) -> None:
    (pkg / "package_manifest.json").write_text("{\"q38_version\": ")


@item("manifest_wrong_type", r"package_manifest\.json")
def _(pkg: Path) -> None:
    p = pkg / "package_manifest.json"
    doc = json.loads(p.read_text())
    doc["files"] = ["model.onnx"]
    p.write_text(json.dumps(doc))


@item("not_a_package", r"not a q38 package")
def _(pkg: Path) -> None:
    for child in pkg.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


@item("package_is_a_file", r"not a (package )?directory")
def _(pkg: Path) -> None:
    shutil.rmtree(pkg)
    pkg.write_text("not a package\n")


@item("package_symlink_loop", r"(symlink loop|no such package|not a (package )?directory)")
def _(pkg: Path) -> None:
    shutil.rmtree(pkg)
    os.symlink("pkg", pkg)


@item("layered_without_head", r"layered package without a head/ directory")
def _(pkg: Path) -> None:
    target = pkg.parent / "target.tmp"
    pkg.rename(target)
    pkg.mkdir()
    target.rename(pkg / "target")


# ----------------------------------------------------------------------------------- bundles
_LIB = "pkg/libs/qsa/libcustom_ops.so"


@item("bundle_target_graph_truncated", r"model\.onnx.*(not a valid ONNX|truncated|malformed)", kind="bundles")
def _(root: Path) -> None:
    truncate(root / "target" / "model.onnx", 1000)


@item("bundle_ext_offset_past_eof", r"model\.onnx.*(past|beyond) the end", kind="bundles")
def _(root: Path) -> None:
    set_external(root / "target" / "model.onnx", offset=str(10**9))


@item("bundle_ext_location_escapes", r"model\.onnx.*escapes", kind="bundles")
def _(root: Path) -> None:
    set_external(root / "target" / "model.onnx", location="../head/model.onnx.data")


@item("bundle_head_graph_missing", r"head", kind="bundles")
def _(root: Path) -> None:
    (root / "head" / "head_r2.onnx").unlink()


@item("bundle_target_data_symlink_to_etc", r"model\.onnx.*outside", kind="bundles")
def _(root: Path) -> None:
    replace_with_link(root / "target" / "model.onnx.data", "/etc/passwd")


@item("bundle_graph_cycle", r"model\.onnx.*(cycle|produced later)", kind="bundles")
def _(root: Path) -> None:
    def fn(model: onnx.ModelProto) -> None:
        nodes = model.graph.node
        nodes[0].input[0] = nodes[len(nodes) - 1].output[0]

    edit_graph(root / "target" / "model.onnx", fn)


@item("bundle_library_is_dir", r"--lib-qsa.*(directory|not a file)", kind="bundles", build_args=("--lib-qsa", "pkg/libs/qsa"))
def _(root: Path) -> None:
    pass


@item("bundle_library_missing", r"(lib|qsa).*(does not exist|missing|no such)", kind="bundles",
      build_args=("--lib-qsa", "pkg/libs/qsa/libmissing.so"))
def _(root: Path) -> None:
    pass


@item("bundle_library_symlink_loop", r"(lib|qsa).*(loop|symlink)", kind="bundles",
      build_args=("--lib-qsa", _LIB))
def _(root: Path) -> None:
    lib = root / "libs" / "qsa"
    (lib / "libcustom_ops.so").unlink()
    os.symlink("libcustom_ops.so", lib / "libcustom_ops.so")


# -------------------------------------------------------------------------------------- main
def _base_trees(work: Path) -> tuple[Path, Path, Path]:
    from q38.package import encode_profile
    from q38.package.profile import parse_profile
    from q38.synth import synthesize

    package = synthesize(work / "package", preset="tiny", variant="cpu", seed=0)
    bundles = synthesize(work / "bundles", preset="tiny", variant="cpu", seed=0, bundles=True)
    profiled = work / "profiled"
    shutil.copytree(package, profiled, symlinks=True)
    (profiled / "expert-profile.bin").write_bytes(encode_profile(parse_profile(profile_bytes())))
    edit_config(profiled, lambda d: graph_cfg(d).__setitem__("expert_profile", "expert-profile.bin"))
    return package, bundles, profiled


def _place(src: str, dst: str) -> None:
    """Hard-link the big weight file every item shares unchanged (mutators unlink before
    writing, see :func:`truncate`); copy everything else."""
    if os.path.basename(src) == "model.onnx.data":
        os.link(src, dst)
    else:
        shutil.copy2(src, dst)


def make_corpus(dest: Path) -> dict[str, dict[str, object]]:
    """Write every item under ``dest`` (which must not exist); returns the index."""
    dest = Path(dest)
    dest.mkdir(parents=False)
    work = dest / ".base"
    work.mkdir()
    package, bundles, profiled = _base_trees(work)
    index: dict[str, dict[str, object]] = {}
    names = [it.name for it in ITEMS]
    if len(set(names)) != len(names):
        raise SystemExit("duplicate corpus item names")
    for it in ITEMS:
        item_dir = dest / it.name
        item_dir.mkdir()
        base = bundles if it.kind == "bundles" else profiled if it.profile else package
        pkg = item_dir / "pkg"
        shutil.copytree(base, pkg, symlinks=True, copy_function=_place)
        it.mutate(pkg)
        index[it.name] = {"kind": it.kind, "expect": it.expect, "build_args": list(it.build_args)}
    shutil.rmtree(work)
    (dest / "corpus.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return index


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: make_corpus.py DIR", file=sys.stderr)
        return 2
    index = make_corpus(Path(argv[0]))
    print(f"wrote {len(index)} corpus items to {argv[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
