"""Hostile inputs, round two (issue 13): one registry of cases, by class, each a directory.

Every case is a directory ``DIR/<name>/`` holding ``pkg/`` (a tiny synthetic package, flat or
layered, or the source bundles ``target/ head/ prefill/ libs/``) with one deliberate defect, and
sometimes files beside it (``outside/``, a FIFO given on the command line). The classes are the
issue's:

* ``special``: a FIFO, socket or device where a file belongs, at every depth (layered
  sub-packages, data files, unnamed files) and on the command line (``--expert-profile``,
  ``--lib-NAME``): no command may block on it or read it;
* ``size``: a file larger than its kind's limit (config, pool, manifest, profile);
* ``json``: what strict JSON refuses (NaN / Infinity, ``1e400``, 5,000-digit integers, duplicate
  keys, unpaired surrogates) and over-long integers in pool lines and graph protobufs (a NUL in a
  config string is not refused: it is read up to the NUL, as onnxruntime reads it, issue 24:
  ``tests/unit/package/test_config_nul.py``);
* ``message``: multi-megabyte values quoted in an error: one short line, whatever the value;
* ``path``: every path field of the config (decoder, overlays, popularity file, expert profile,
  multidraft, head libraries): relative, inside after links, a regular file;
* ``oserror``: EACCES (with CAP_DAC_OVERRIDE dropped, so root meets it too), ENAMETOOLONG, ELOOP,
  EISDIR, ENOTDIR: one user-error line with the path and the errno text;
* ``value``: flags whose values a writing command would otherwise write (a ``--lib-NAME`` with a
  newline, CUDA option values outside their type, 65-bit and 5,000-digit byte budgets);
* ``contract``: what ``q38 check`` must report as a violation (opset imports of version 0 or
  10000, an expert profile whose dims do not match the QMoE nodes); each names its rule.

Most classes run on q38's own packages (flat, layered, bundles) and again on a real
onnxruntime-genai builder export (``base="genai"``, ``tests/fixtures/real/int4-cpu``).

``tests/unit/corpus/test_hostile.py`` runs every (case, command) as a real child process and
checks the acceptance of issue 13 on it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx
from support.genai_packages import FIXTURES

Mutator = Callable[[Path], None]
PACKAGE_COMMANDS = ("check", "optimize", "offload", "export-genai")
WRITING_COMMANDS = ("optimize", "offload", "export-genai")
CLASSES = ("special", "size", "json", "message", "path", "oserror", "value", "contract")
MiB = 1 << 20


@dataclass(frozen=True)
class Case:
    name: str
    klass: str
    expect: str  # regex the one stderr line (or check's error rows) must match, case-insensitive
    mutate: Mutator  # called with the case directory; ``pkg/`` is already there
    base: str = "flat"  # flat | layered | profiled | bundles | genai
    commands: tuple[str, ...] = PACKAGE_COMMANDS
    extra: tuple[str, ...] = ()  # more argv; "{case}" is the case directory
    pkg: str = "pkg"  # the package / bundle path argv names, relative to the case directory
    out: str = "out"  # the output path, relative to the run's work directory
    drop_dac: bool = False  # run without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH
    rule: str | None = None  # the q38 check rule the case needs (an expected failure until it is registered)


CASES: list[Case] = []


def case(name: str, klass: str, expect: str, **kw: object) -> Callable[[Mutator], Mutator]:
    assert klass in CLASSES, klass

    def deco(fn: Mutator) -> Mutator:
        CASES.append(Case(name, klass, expect, fn, **kw))  # type: ignore[arg-type]
        return fn

    return deco


# ------------------------------------------------------------------------------------- helpers
def edit_json(path: Path, fn: Callable[[dict], None]) -> None:  # type: ignore[type-arg]
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def config(c: Path) -> Path:
    return c / "pkg" / "genai_config.json" if (c / "pkg" / "genai_config.json").exists() else c / "pkg" / "target" / "genai_config.json"


def edit_config(c: Path, fn: Callable[[dict], None]) -> None:  # type: ignore[type-arg]
    edit_json(config(c), fn)


def replace_text(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def fifo(path: Path) -> None:
    if os.path.lexists(path):
        path.unlink()
    os.mkfifo(path)


def unix_socket(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
    finally:
        sock.close()  # the socket file stays


def char_device(path: Path) -> None:
    """A character device node like /dev/null (1, 3) at ``path`` (root only)."""
    path.unlink()
    os.mknod(path, stat.S_IFCHR | 0o644, os.makedev(1, 3))


def sparse(path: Path, size: int) -> None:
    """``path`` grown to ``size`` bytes without writing them (a hole)."""
    with open(path, "ab") as fh:
        fh.truncate(size)


def pool_line(pkg: Path, fn: Callable[[list[str]], list[str]], pool: str = "weights_pool.txt") -> None:
    path = pkg / pool
    lines = path.read_text().split("\n")
    for i, line in enumerate(lines):
        if line and not line.startswith("#"):
            lines[i] = " ".join(fn(line.split(" ")))
            break
    path.write_text("\n".join(lines))


def set_external(path: Path, **kv: str) -> None:
    model = onnx.load(str(path), load_external_data=False)
    tensor = next(t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL)
    entries = {e.key: e.value for e in tensor.external_data}
    entries.update(kv)
    del tensor.external_data[:]
    for key, value in entries.items():
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    path.write_bytes(model.SerializeToString())


def profiles(*overlays: dict) -> list[dict]:  # type: ignore[type-arg]
    out = []
    for i, overlay in enumerate(overlays):
        out.append({
            "id": f"p{i}",
            "eligibility": {"minimum_total_device_memory_bytes": i * 2**34, "maximum_total_device_memory_bytes": i * 2**34 + 2**33},
            "overlay": {"model": {"decoder": overlay}},
        })  # fmt: skip
    return out


def strp(layers: int = 8, experts: int = 8) -> bytes:
    header = struct.pack("<4sHHII", b"STRP", 1, 0, layers, experts)
    return header + b"".join(struct.pack("<Q", (i * 7919) % 1000) for i in range(layers * experts))


_LIB = "{case}/pkg/libs/qsa/libcustom_ops.so"


# ------------------------------------------------------------------------- special files
@case("special_fifo_head_pool", "special", r"head/weights_pool\.txt.*FIFO", base="layered")
def _(c: Path) -> None:
    fifo(c / "pkg" / "head" / "weights_pool.txt")


@case("special_fifo_head_manifest", "special", r"head/package_manifest\.json.*FIFO", base="layered")
def _(c: Path) -> None:
    fifo(c / "pkg" / "head" / "package_manifest.json")


@case("special_fifo_target_config", "special", r"target/genai_config\.json.*FIFO", base="layered")
def _(c: Path) -> None:
    fifo(c / "pkg" / "target" / "genai_config.json")


@case("special_fifo_expert_profile", "special", r"expert-profile\.bin.*FIFO", base="profiled")
def _(c: Path) -> None:
    fifo(c / "pkg" / "expert-profile.bin")


@case("special_fifo_prefill_graph", "special", r"prefill\.onnx.*FIFO")
def _(c: Path) -> None:
    fifo(c / "pkg" / "prefill.onnx")


@case("special_fifo_head_data", "special", r"head_r2\.onnx\.data.*FIFO")
def _(c: Path) -> None:
    fifo(c / "pkg" / "head_r2.onnx.data")


@case("special_socket_unnamed", "special", r"libs/ctl\.sock.*socket")
def _(c: Path) -> None:
    unix_socket(c / "pkg" / "libs" / "ctl.sock")


@case("special_char_device_pool", "special", r"weights_pool\.txt.*character device")
def _(c: Path) -> None:
    char_device(c / "pkg" / "weights_pool.txt")


@case("special_cli_profile_fifo", "special", r"--expert-profile .*prof\.fifo.*FIFO", commands=("offload",),
      extra=("--expert-profile", "{case}/prof.fifo"))
def _(c: Path) -> None:
    fifo(c / "prof.fifo")


@case("special_cli_profile_dev_zero", "special", r"--expert-profile /dev/zero.*character device", commands=("offload",),
      extra=("--expert-profile", "/dev/zero"))
def _(c: Path) -> None:
    pass


@case("special_cli_profile_link_to_dev_zero", "special", r"--expert-profile .*zero\.bin.*character device",
      commands=("offload",), extra=("--expert-profile", "{case}/zero.bin"))
def _(c: Path) -> None:
    os.symlink("/dev/zero", c / "zero.bin")


@case("special_bundle_lib_fifo", "special", r"--lib-qsa .*lib\.fifo.*(FIFO|not a (regular )?file)", base="bundles",
      commands=("build",), extra=("--lib-qsa", "{case}/lib.fifo"))
def _(c: Path) -> None:
    fifo(c / "lib.fifo")


@case("special_bundle_lib_dev_zero", "special", r"--lib-qsa /dev/zero.*(character device|not a (regular )?file)",
      base="bundles", commands=("build",), extra=("--lib-qsa", "/dev/zero"))
def _(c: Path) -> None:
    pass


@case("special_bundle_data_fifo", "special", r"model\.onnx\.data.*(FIFO|not a regular file)", base="bundles",
      commands=("build",), extra=("--lib-qsa", _LIB))
def _(c: Path) -> None:
    fifo(c / "pkg" / "target" / "model.onnx.data")


@case("special_bundle_asset_fifo", "special", r"assets(\.v1)?/pipe: (is a FIFO|not a regular file)", base="bundles",
      commands=("build",), extra=("--lib-qsa", _LIB))
def _(c: Path) -> None:
    fifo(c / "pkg" / "target" / "assets" / "pipe")


# ------------------------------------------------------------------------------ size limits
@case("size_config_5mib", "size", r"genai_config\.json.*larger than the 4 MiB limit")
def _(c: Path) -> None:
    path = config(c)
    path.write_text(path.read_text() + " " * (5 * MiB))


@case("size_pool_17mib", "size", r"weights_pool\.txt.*larger than the 16 MiB limit")
def _(c: Path) -> None:
    sparse(c / "pkg" / "weights_pool.txt", 17 * MiB)


@case("size_head_manifest_17mib", "size", r"head/package_manifest\.json.*larger than the 16 MiB limit", base="layered")
def _(c: Path) -> None:
    sparse(c / "pkg" / "head" / "package_manifest.json", 17 * MiB)


@case("size_profile_17mib", "size", r"expert-profile\.bin.*larger than the 16 MiB limit", base="profiled")
def _(c: Path) -> None:
    sparse(c / "pkg" / "expert-profile.bin", 17 * MiB)


@case("size_cli_profile_17mib", "size", r"--expert-profile .*big\.bin.*larger than the 16 MiB limit",
      commands=("offload",), extra=("--expert-profile", "{case}/big.bin"))
def _(c: Path) -> None:
    (c / "big.bin").write_bytes(strp())
    sparse(c / "big.bin", 17 * MiB)


# ------------------------------------------------------------------------------ strict JSON
@case("json_5000_digit_vocab_size", "json", r"model\.vocab_size: integer '7777.*\(5000 chars\) does not fit in 64 bits")
def _(c: Path) -> None:
    replace_text(config(c), '"vocab_size": 512', '"vocab_size": ' + "7" * 5000)


@case("json_5000_digit_negative_top_k", "json", r"search\.top_k: integer '-999.*does not fit in 64 bits")
def _(c: Path) -> None:
    replace_text(config(c), '"max_length": 4096', '"max_length": 4096, "top_k": -' + "9" * 5000)


@case("json_65_bit_eligibility", "json", r"runtime_profiles\[0\]\.eligibility\.minimum_total_device_memory_bytes.*64 bits")
def _(c: Path) -> None:
    edit_config(c, lambda d: d.__setitem__("runtime_profiles", profiles({"filename": "model.onnx"})))
    replace_text(config(c), '"minimum_total_device_memory_bytes": 0', '"minimum_total_device_memory_bytes": 36893488147419103232')


@case("json_5000_digit_manifest", "json", r"package_manifest\.json: router_weights_cleared: integer.*64 bits")
def _(c: Path) -> None:
    replace_text(c / "pkg" / "package_manifest.json", '"router_weights_cleared": 0', '"router_weights_cleared": ' + "1" * 5000)


@case("json_nan_top_p", "json", r"search\.top_p: NaN is not valid JSON")
def _(c: Path) -> None:
    replace_text(config(c), '"max_length": 4096', '"max_length": 4096, "top_p": NaN')


@case("json_infinity_temperature", "json", r"search\.temperature: -Infinity is not valid JSON")
def _(c: Path) -> None:
    replace_text(config(c), '"max_length": 4096', '"max_length": 4096, "temperature": -Infinity')


@case("json_1e400_repetition_penalty", "json", r"search\.repetition_penalty: number '1e400' is out of range")
def _(c: Path) -> None:
    replace_text(config(c), '"max_length": 4096', '"max_length": 4096, "repetition_penalty": 1e400')


@case("json_nan_in_layered_head_manifest", "json", r"head/package_manifest\.json: extra\.score: NaN", base="layered")
def _(c: Path) -> None:
    replace_text(c / "pkg" / "head" / "package_manifest.json", '"extra": {}', '"extra": {"score": NaN}')


@case("json_duplicate_filename", "json", r"model\.decoder\.filename: duplicate key 'filename'")
def _(c: Path) -> None:
    replace_text(config(c), '"filename": "model.onnx",', '"filename": "../../etc/passwd", "filename": "model.onnx",')


@case("json_duplicate_top_level_search", "json", r"genai_config\.json: search: duplicate key 'search'")
def _(c: Path) -> None:
    path = config(c)
    text = path.read_text().rstrip()
    assert text.endswith("}")
    path.write_text(text[:-1] + ', "search": {"max_length": 8}}\n')


@case("json_duplicate_manifest_key", "json", r"package_manifest\.json: command: duplicate key 'command'")
def _(c: Path) -> None:
    replace_text(c / "pkg" / "package_manifest.json", '"command": "synth",', '"command": "synth", "command": "build",')


@case("json_surrogate_in_target_filename", "json", r"target\.filename: string contains an unpaired UTF-16 surrogate")
def _(c: Path) -> None:
    replace_text(config(c), '"target": {\n        "filename": "model.onnx"', '"target": {\n        "filename": "\\udc80model.onnx"')


@case("json_5000_digit_external_offset", "json", r"model\.onnx.*offset '9999.*not a non-negative int64")
def _(c: Path) -> None:
    set_external(c / "pkg" / "model.onnx", offset="9" * 5000)


@case("json_5000_digit_pool_offset", "json", r"weights_pool\.txt:3: offset '1111.*\(5000 chars\) does not fit in int64")
def _(c: Path) -> None:
    pool_line(c / "pkg", lambda f: [f[0], f[1], "1" * 5000, *f[3:]])


# --------------------------------------------------------------------------- bounded messages
@case("message_3mib_model_type", "message", r"model\.type: expected 'qwen38_flash_graph', got 'xxx.*\(3145728 chars\)")
def _(c: Path) -> None:
    edit_config(c, lambda d: d["model"].__setitem__("type", "x" * (3 * MiB)))


@case("message_3mib_unknown_key", "message", r"model\.kkkk.*\(3145734 chars\): unknown key")
def _(c: Path) -> None:
    edit_config(c, lambda d: d["model"].__setitem__("k" * (3 * MiB), 1))


@case("message_10mib_pool_dtype", "message", r"weights_pool\.txt:3: unknown dtype 'ddd.*\(10485760 chars\)")
def _(c: Path) -> None:
    pool_line(c / "pkg", lambda f: [*f[:4], "d" * (10 * MiB), *f[5:]])


@case("message_10mib_pool_id", "message", r"weights_pool\.txt:3: invalid pool id '.*\(10485760 chars\)")
def _(c: Path) -> None:
    pool_line(c / "pkg", lambda f: ["!" * (10 * MiB), *f[1:]])


@case("message_3mib_placement", "message", r"weights_pool\.txt:3: unknown placement 'ggg.*\(3145728 chars\)")
def _(c: Path) -> None:
    pool_line(c / "pkg", lambda f: [*f[:6], "g" * (3 * MiB), *f[7:]])


@case("message_1mib_duplicate_profile_id", "message", r"runtime_profiles\[1\]\.id.*duplicate runtime profile id 'iii")
def _(c: Path) -> None:
    def fn(d: dict) -> None:  # type: ignore[type-arg]
        ps = profiles({"filename": "model.onnx"}, {"filename": "model.onnx"})
        for p in ps:
            p["id"] = "i" * (3 * MiB // 2)
        d["runtime_profiles"] = ps

    edit_config(c, fn)


@case("message_1mib_manifest_version", "message", r"package_manifest\.json: manifest_version: expected 1, got 'vvv.*\(1048576 chars\)")
def _(c: Path) -> None:
    edit_json(c / "pkg" / "package_manifest.json", lambda d: d.__setitem__("manifest_version", "v" * MiB))


@case("message_1mib_node_name", "message", r"model\.onnx: node 'nnn.*\(1048576 chars\) input 'does_not_exist'")
def _(c: Path) -> None:
    path = c / "pkg" / "model.onnx"
    model = onnx.load(str(path), load_external_data=False)
    node = next(n for n in model.graph.node if n.op_type == "MatMul")
    node.name = "n" * MiB
    node.input[0] = "does_not_exist"
    path.write_bytes(model.SerializeToString())


# -------------------------------------------------------------------------------- path fields
@case("path_decoder_filename_dotdot", "path", r"model\.decoder\.filename: path '\.\./outside/model\.onnx' escapes")
def _(c: Path) -> None:
    (c / "outside").mkdir()
    shutil.copyfile(c / "pkg" / "model.onnx", c / "outside" / "model.onnx")
    edit_config(c, lambda d: d["model"]["decoder"].__setitem__("filename", "../outside/model.onnx"))


@case("path_overlay_etc_passwd", "path", r"runtime_profiles\[0\]\.overlay\.model\.decoder\.filename: absolute path '/etc/passwd'")
def _(c: Path) -> None:
    edit_config(c, lambda d: d.__setitem__("runtime_profiles", profiles({"filename": "/etc/passwd"})))


@case("path_overlay_symlink_out", "path", r"evil\.onnx' resolves to .*outside the package")
def _(c: Path) -> None:
    (c / "outside").mkdir()
    shutil.copyfile(c / "pkg" / "model.onnx", c / "outside" / "evil.onnx")
    os.symlink("../outside/evil.onnx", c / "pkg" / "evil.onnx")
    edit_config(c, lambda d: d.__setitem__("runtime_profiles", profiles({"filename": "model.onnx"}, {"filename": "evil.onnx"})))


@case("path_overlay_fifo", "path", r"(overlay\.model\.decoder\.filename|s9\.onnx).*FIFO")
def _(c: Path) -> None:
    os.mkfifo(c / "pkg" / "s9.onnx")
    edit_config(c, lambda d: d.__setitem__("runtime_profiles", profiles({"filename": "s9.onnx"})))


@case("path_popularity_file_absolute", "path", r"session\.moe\.offload\.popularity_file: absolute path '/etc/passwd'")
def _(c: Path) -> None:
    edit_config(c, lambda d: d["model"]["decoder"]["session_options"].__setitem__("session.moe.offload.popularity_file", "/etc/passwd"))


@case("path_expert_profile_dotdot", "path", r"expert_profile: path '\.\./expert-profile\.bin' escapes")
def _(c: Path) -> None:
    (c / "expert-profile.bin").write_bytes(strp())
    edit_config(c, lambda d: d["model"]["qwen38_graph"].__setitem__("expert_profile", "../expert-profile.bin"))


@case("path_multidraft_missing", "path", r"multidraft\.s2: 'model_s2\.onnx' does not exist")
def _(c: Path) -> None:
    edit_config(c, lambda d: d["model"]["qwen38_graph"].__setitem__("multidraft", {"s2": "model_s2.onnx"}))


@case("path_head_custom_ops_dotdot", "path", r"head_r2\.session_options\.custom_ops_library: path '\.\./lib\.so' escapes")
def _(c: Path) -> None:
    edit_config(c, lambda d: d["model"]["qwen38_graph"]["fold"]["head_r2"]["session_options"].__setitem__("custom_ops_library", "../lib.so"))


@case("path_decoder_filename_directory", "path", r"model\.decoder\.filename: 'libs' is a directory")
def _(c: Path) -> None:
    edit_config(c, lambda d: d["model"]["decoder"].__setitem__("filename", "libs"))


@case("path_decoder_filename_symlink_loop", "path", r"(model\.decoder\.filename|loop\.onnx).*symlink loop")
def _(c: Path) -> None:
    os.symlink("loop.onnx", c / "pkg" / "loop.onnx")
    edit_config(c, lambda d: d["model"]["decoder"].__setitem__("filename", "loop.onnx"))


@case("path_pool_data_link_to_dev_zero", "path", r"zero\.data.*(outside|escapes) the package")
def _(c: Path) -> None:
    os.symlink("/dev/zero", c / "pkg" / "zero.data")
    pool_line(c / "pkg", lambda f: [f[0], "zero.data", *f[2:]])


@case("path_layered_head_filename_absolute", "path", r"fold\.head_r2\.filename: absolute path '/etc/hostname'", base="layered")
def _(c: Path) -> None:
    edit_config(c, lambda d: d["model"]["qwen38_graph"]["fold"]["head_r2"].__setitem__("filename", "/etc/hostname"))


# ------------------------------------------------------------------------------------ OSErrors
def _chmod0(rel: str) -> Mutator:
    def fn(c: Path) -> None:
        os.chmod(c / rel, 0)

    return fn


case("oserror_eacces_config", "oserror", r"genai_config\.json: permission denied", drop_dac=True)(_chmod0("pkg/genai_config.json"))
case("oserror_eacces_pool", "oserror", r"weights_pool\.txt: permission denied", drop_dac=True)(_chmod0("pkg/weights_pool.txt"))
case("oserror_eacces_head_graph", "oserror", r"head_r2\.onnx: permission denied", drop_dac=True)(_chmod0("pkg/head_r2.onnx"))
case("oserror_eacces_directory", "oserror", r"libs: unreadable directory: permission denied", drop_dac=True)(_chmod0("pkg/libs"))
case("oserror_eacces_head_manifest", "oserror", r"head/package_manifest\.json: permission denied", base="layered",
     drop_dac=True)(_chmod0("pkg/head/package_manifest.json"))
case("oserror_eacces_weights_read", "oserror", r"model\.onnx\.data.*permission denied", drop_dac=True,
     commands=("optimize", "offload"))(_chmod0("pkg/model.onnx.data"))
case("oserror_eacces_bundle_data", "oserror", r"target/model\.onnx\.data: permission denied", base="bundles",
     commands=("build",), extra=("--lib-qsa", _LIB), drop_dac=True)(_chmod0("pkg/target/model.onnx.data"))
case("oserror_eacces_bundle_library", "oserror", r"(libcustom_ops\.so.*permission denied|permission denied.*libcustom_ops\.so)", base="bundles",
     commands=("build",), extra=("--lib-qsa", _LIB), drop_dac=True)(_chmod0("pkg/libs/qsa/libcustom_ops.so.1"))


@case("oserror_eacces_cli_profile", "oserror", r"--expert-profile .*prof\.bin: permission denied", commands=("offload",),
      extra=("--expert-profile", "{case}/prof.bin"), drop_dac=True)
def _(c: Path) -> None:
    (c / "prof.bin").write_bytes(strp())
    os.chmod(c / "prof.bin", 0)


@case("oserror_eacces_output_parent", "oserror", r"(staging directory|output).*permission denied", commands=WRITING_COMMANDS,
      out="ro/out", drop_dac=True)
def _(c: Path) -> None:
    pass  # the test makes the work directory's ro/ read-only (see test_hostile.RO_DIR)


_LONG = "n" * 300


@case("oserror_enametoolong_package", "oserror", r"file name too long", pkg=f"{_LONG}/pkg")
def _(c: Path) -> None:
    pass  # a 300-byte path component: no file system can hold it (NAME_MAX is 255)


@case("oserror_enametoolong_output", "oserror", r"file name too long", commands=WRITING_COMMANDS, out=_LONG)
def _(c: Path) -> None:
    pass


@case("oserror_enametoolong_cli_profile", "oserror", r"--expert-profile .*: file name too long", commands=("offload",),
      extra=("--expert-profile", "{case}/" + _LONG))
def _(c: Path) -> None:
    pass


@case("oserror_eloop_package", "oserror", r"(symlink loop|no such package|not a (package )?directory)", pkg="loop")
def _(c: Path) -> None:
    os.symlink("loop", c / "loop")


@case("oserror_eloop_cli_profile", "oserror", r"--expert-profile .*loop\.bin: is a symlink loop", commands=("offload",),
      extra=("--expert-profile", "{case}/loop.bin"))
def _(c: Path) -> None:
    os.symlink("loop.bin", c / "loop.bin")


@case("oserror_eisdir_cli_profile", "oserror", r"--expert-profile .*adir: is a directory", commands=("offload",),
      extra=("--expert-profile", "{case}/adir"))
def _(c: Path) -> None:
    (c / "adir").mkdir()


@case("oserror_enotdir_package", "oserror", r"(not a (package )?directory|no such package)", pkg="file.txt/pkg")
def _(c: Path) -> None:
    (c / "file.txt").write_text("a file, not a directory\n")


# ------------------------------------------------------- the builder's packages (genai surface)
# The same classes on a real onnxruntime-genai builder export (tests/fixtures/real/int4-cpu): its
# genai_config.json names the decoder in model.decoder.filename, its search block holds top_p.
GENAI = ("check", "optimize", "export-genai")


@case("genai_fifo_model_data", "special", r"model\.onnx\.data.*FIFO", base="genai", commands=GENAI)
def _(c: Path) -> None:
    fifo(c / "pkg" / "model.onnx.data")


@case("genai_fifo_tokenizer", "special", r"tokenizer\.json.*FIFO", base="genai", commands=GENAI)
def _(c: Path) -> None:
    fifo(c / "pkg" / "tokenizer.json")


@case("genai_fifo_config", "special", r"genai_config\.json.*FIFO", base="genai", commands=GENAI)
def _(c: Path) -> None:
    fifo(c / "pkg" / "genai_config.json")


@case("genai_decoder_link_to_dev_zero", "special", r"model\.onnx.*(outside the package|escapes|character device)",
      base="genai", commands=GENAI)
def _(c: Path) -> None:
    (c / "pkg" / "model.onnx").unlink()
    os.symlink("/dev/zero", c / "pkg" / "model.onnx")


@case("genai_size_config_5mib", "size", r"genai_config\.json.*larger than the 4 MiB limit", base="genai", commands=GENAI)
def _(c: Path) -> None:
    path = config(c)
    path.write_text(path.read_text() + " " * (5 * MiB))


@case("genai_nan_top_p", "json", r"search\.top_p: NaN is not valid JSON", base="genai", commands=GENAI)
def _(c: Path) -> None:
    edit_config(c, lambda d: d["search"].__setitem__("top_p", "@NAN@"))
    replace_text(config(c), '"@NAN@"', "NaN")


@case("genai_1e400_repetition_penalty", "json", r"search\.repetition_penalty: number '1e400' is out of range",
      base="genai", commands=GENAI)
def _(c: Path) -> None:
    edit_config(c, lambda d: d["search"].__setitem__("repetition_penalty", "@BIG@"))
    replace_text(config(c), '"@BIG@"', "1e400")


@case("genai_duplicate_filename", "json", r"model\.decoder\.filename: duplicate key 'filename'", base="genai", commands=GENAI)
def _(c: Path) -> None:
    replace_text(config(c), '"filename": "model.onnx"', '"filename": "../../etc/passwd", "filename": "model.onnx"')


@case("genai_5000_digit_context_length", "json", r"model\.context_length: integer '5555.*\(5000 chars\) does not fit in 64 bits",
      base="genai", commands=GENAI)
def _(c: Path) -> None:
    edit_config(c, lambda d: d["model"].__setitem__("context_length", "@N@"))
    replace_text(config(c), '"@N@"', "5" * 5000)


@case("genai_3mib_model_type", "message", r"model\.type.*'qqq.*\(3145728 chars\)", base="genai", commands=GENAI)
def _(c: Path) -> None:
    edit_config(c, lambda d: d["model"].__setitem__("type", "q" * (3 * MiB)))


@case("genai_3mib_unknown_key", "message", r"model\.kkkk.*(unknown key|\(3145734 chars\))", base="genai", commands=GENAI)
def _(c: Path) -> None:
    edit_config(c, lambda d: d["model"].__setitem__("k" * (3 * MiB), 1))


@case("genai_decoder_filename_dotdot", "path", r"model\.decoder\.filename.*'\.\./outside/model\.onnx'", base="genai",
      commands=GENAI)
def _(c: Path) -> None:
    (c / "outside").mkdir()
    shutil.copyfile(c / "pkg" / "model.onnx", c / "outside" / "model.onnx")
    edit_config(c, lambda d: d["model"]["decoder"].__setitem__("filename", "../outside/model.onnx"))


@case("genai_decoder_filename_absolute", "path", r"model\.decoder\.filename.*'/etc/passwd'", base="genai", commands=GENAI)
def _(c: Path) -> None:
    edit_config(c, lambda d: d["model"]["decoder"].__setitem__("filename", "/etc/passwd"))


@case("genai_custom_ops_dotdot", "path", r"model\.decoder\.session_options\.custom_ops_library: path '\.\./libx\.so' escapes",
      base="genai", commands=GENAI)
def _(c: Path) -> None:
    (c / "libx.so").write_bytes(b"\x7fELF outside\n")
    edit_config(c, lambda d: d["model"]["decoder"]["session_options"].__setitem__("custom_ops_library", "../libx.so"))


@case("genai_decoder_symlink_out", "path", r"model\.onnx.*outside the package", base="genai", commands=GENAI)
def _(c: Path) -> None:
    (c / "outside").mkdir()
    shutil.move(c / "pkg" / "model.onnx", c / "outside" / "model.onnx")
    os.symlink("../outside/model.onnx", c / "pkg" / "model.onnx")


case("genai_eacces_config", "oserror", r"genai_config\.json: permission denied", base="genai", commands=GENAI,
     drop_dac=True)(_chmod0("pkg/genai_config.json"))
case("genai_eacces_model_data", "oserror", r"model\.onnx\.data.*permission denied", base="genai",
     commands=("optimize", "export-genai"), drop_dac=True)(_chmod0("pkg/model.onnx.data"))
case("genai_eacces_tokenizer", "oserror", r"tokenizer\.json.*permission denied", base="genai",
     commands=("optimize", "export-genai"), drop_dac=True)(_chmod0("pkg/tokenizer.json"))


# ------------------------------------------------- values a writing command would pass through
@case("value_lib_name_newline", "value", r"--lib-'qsa\\nx': invalid library name", base="bundles", commands=("build",),
      extra=("--lib-qsa\nx", _LIB))
def _(c: Path) -> None:
    pass


@case("value_cuda_size_t_overflow", "value", r"gpu_mem_limit='99999999999999999999999': out of range for size_t",
      base="bundles", commands=("build",),
      extra=("--lib-qsa", _LIB, "--provider", "cuda", "--cuda-option", "gpu_mem_limit=99999999999999999999999"))
def _(c: Path) -> None:
    pass


@case("value_cuda_int_overflow", "value", r"device_id='2147483648': out of range for int", base="bundles",
      commands=("build",), extra=("--lib-qsa", _LIB, "--provider", "cuda", "--cuda-option", "device_id=2147483648"))
def _(c: Path) -> None:
    pass


@case("value_cuda_bool", "value", r"do_copy_in_default_stream='maybe': expected 0/1/true/false", base="bundles",
      commands=("build",),
      extra=("--lib-qsa", _LIB, "--provider", "cuda", "--cuda-option", "do_copy_in_default_stream=maybe"))
def _(c: Path) -> None:
    pass


@case("value_cuda_enum", "value", r"arena_extend_strategy='kAll': expected one of kNextPowerOfTwo", base="bundles",
      commands=("build",), extra=("--lib-qsa", _LIB, "--provider", "cuda", "--cuda-option", "arena_extend_strategy=kAll"))
def _(c: Path) -> None:
    pass


@case("value_offload_65_bit_budget", "value", r"--device-expert-bytes 36893488147419103232: expected an integer in \[0, 2\^64-1\]",
      commands=("offload",), extra=("--device-expert-bytes", "36893488147419103232"))
def _(c: Path) -> None:
    pass


@case("value_offload_5000_digit_budget", "value", r"--host-expert-bytes: expected a non-negative decimal integer, got '999",
      commands=("offload",), extra=("--host-expert-bytes", "9" * 5000))
def _(c: Path) -> None:
    pass


# ---------------------------------------- q38 check on opsets and expert profiles (13.8, contracts)
def _opset(rel: str, version: int) -> Mutator:
    def fn(c: Path) -> None:
        path = c / "pkg" / rel
        model = onnx.load(str(path), load_external_data=False)
        for entry in model.opset_import:
            if entry.domain in ("", "ai.onnx"):
                entry.version = version
        path.write_bytes(model.SerializeToString())

    return fn


_OPSET = "ORT-OPSET-001"
case("contract_opset_0", "contract", r"ORT-OPSET-001.*version 0", commands=("check",), rule=_OPSET)(_opset("model.onnx", 0))
case("contract_opset_10000", "contract", r"ORT-OPSET-001.*10000", commands=("check",), rule=_OPSET)(_opset("model.onnx", 10000))
case("contract_genai_opset_0", "contract", r"ORT-OPSET-001.*version 0", base="genai", commands=("check",),
     rule=_OPSET)(_opset("model.onnx", 0))
case("contract_genai_opset_10000", "contract", r"ORT-OPSET-001.*10000", base="genai", commands=("check",),
     rule=_OPSET)(_opset("model.onnx", 10000))


@case("contract_profile_layers", "contract", r"CFG-GRAPH-002", base="profiled", commands=("check",), rule="CFG-GRAPH-002")
def _(c: Path) -> None:
    (c / "pkg" / "expert-profile.bin").write_bytes(strp(layers=3))


@case("contract_profile_experts", "contract", r"CFG-GRAPH-002", base="profiled", commands=("check",), rule="CFG-GRAPH-002")
def _(c: Path) -> None:
    (c / "pkg" / "expert-profile.bin").write_bytes(strp(experts=5))


# ------------------------------------------------------------------------------------ building
def _base_trees(work: Path) -> dict[str, Path]:
    from q38.synth import synthesize

    trees = {
        "flat": synthesize(work / "flat", preset="tiny", variant="cpu", seed=0),
        "layered": synthesize(work / "layered", preset="tiny", variant="cpu", seed=0, layout="layered"),
        "bundles": synthesize(work / "bundles", preset="tiny", variant="cpu", seed=0, bundles=True),
    }
    profiled = work / "profiled"
    shutil.copytree(trees["flat"], profiled, symlinks=True)
    (profiled / "expert-profile.bin").write_bytes(strp())
    edit_json(profiled / "genai_config.json", lambda d: d["model"]["qwen38_graph"].__setitem__("expert_profile", "expert-profile.bin"))
    trees["profiled"] = profiled
    trees["genai"] = work / "genai"  # a real onnxruntime-genai builder export (committed fixture)
    shutil.copytree(FIXTURES / "int4-cpu", trees["genai"], symlinks=True)
    return trees


def make_cases(dest: Path) -> dict[str, Path]:
    """Write every case under ``dest`` (which must not exist); returns name -> case directory."""
    dest.mkdir()
    (dest / ".base").mkdir()
    trees = _base_trees(dest / ".base")
    out = {}
    for c in CASES:
        cdir = dest / c.name
        cdir.mkdir()
        shutil.copytree(trees[c.base], cdir / "pkg", symlinks=True)
        c.mutate(cdir)
        out[c.name] = cdir
    return out
