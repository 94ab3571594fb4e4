"""How ``q38 offload`` places the source's data files: copies reuse the source manifest's digests.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from q38.offload.convert import convert_package
from q38.offload.options import OffloadOptions

S_GRAPHS = ("model_s2.onnx", "model_s3.onnx", "model_s4.onnx")


def _copies(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """Record (size, digest) of every copy the placement makes (digest: read through a buffer)."""
    import q38.package.io.links as links

    calls: list[tuple[int, bool]] = []
    real = links.copy_fd

    def spy(src: int, dst: int, size: int, *, digest: bool, **kw: object) -> object:
        calls.append((size, digest))
        return real(src, dst, size, digest=digest, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(links, "copy_fd", spy)
    return calls


def test_copies_reuse_the_source_digests_and_read_no_weight_byte(tiny_cpu_package: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The source manifest vouches for its files (a digest, and the file not modified after the
    manifest was written): their copies move by the kernel's copy path, never through a hashing
    buffer, and keep the source's digest. (Synth's records carry no identity and were never
    trusted: offload read and hashed every weight byte, its memory growing with the data file up
    to the 32 MiB copy ring.)"""
    from q38.package import LinkPolicy

    calls = _copies(monkeypatch)
    out = tmp_path / "out"
    convert_package(tiny_cpu_package, out, OffloadOptions(mode="auto"), link=LinkPolicy.COPY)
    data = (tiny_cpu_package / "model.onnx.data").stat().st_size
    assert (data, False) in calls and not [c for c in calls if c[1]]
    src = json.loads((tiny_cpu_package / "package_manifest.json").read_text())["files"]
    got = json.loads((out / "package_manifest.json").read_text())["files"]
    assert got["model.onnx.data"]["link_mode"] == "copy"
    assert got["model.onnx.data"]["sha256"] == src["model.onnx.data"]["sha256"]
    # What offload writes carries its identity too: the next command reuses those digests.
    for name in (*S_GRAPHS, "model.onnx", "mtp_experts.aligned.data"):
        if name in got:
            assert got[name]["identity"]["size"] == (out / name).stat().st_size, name


def test_a_data_file_rewritten_since_its_manifest_is_hashed_again(tiny_cpu_package: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from q38.package import LinkPolicy, Manifest, dumps_manifest, read_manifest, written_record

    src = tmp_path / "src"
    shutil.copytree(tiny_cpu_package, src, symlinks=True)
    manifest = read_manifest(src / "package_manifest.json")
    files = {rel: written_record(src / rel) for rel in manifest.files}
    (src / "package_manifest.json").write_text(dumps_manifest(Manifest(command="synth", files=files)))
    data = src / "model.onnx.data"
    with open(data, "r+b") as fh:  # one byte changed in place: same inode, same size
        fh.seek(100)
        byte = fh.read(1)
        fh.seek(100)
        fh.write(bytes([byte[0] ^ 0xFF]))
    st = data.stat()
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    calls = _copies(monkeypatch)
    out = tmp_path / "out"
    convert_package(src, out, OffloadOptions(mode="auto"), link=LinkPolicy.COPY)
    # the stale digest is not carried over: the copy is recorded by its identity alone
    assert (st.st_size, False) in calls
    rec = json.loads((out / "package_manifest.json").read_text())["files"]["model.onnx.data"]
    assert "sha256" not in rec and rec["identity"]["size"] == st.st_size
    calls.clear()
    convert_package(src, tmp_path / "digested", OffloadOptions(mode="auto"), link=LinkPolicy.COPY, digest=True)
    assert (st.st_size, True) in calls  # --digest: hashed in the copy pass, not trusted
    got = json.loads((tmp_path / "digested" / "package_manifest.json").read_text())["files"]["model.onnx.data"]["sha256"]
    assert got == hashlib.sha256(data.read_bytes()).hexdigest() != files["model.onnx.data"].sha256


def test_retarget_graph_points_only_the_moved_tensors_at_their_new_bytes(tmp_path: Path) -> None:
    """Each initializer whose (file, offset) moved now reads the new file and offset, with its own
    length, type, shape and base directory kept; the others are untouched; the count is returned."""
    import numpy as np
    import onnx_ir as ir

    from q38.offload.placement import retarget_graph

    data = np.arange(12, dtype=np.float32)
    (tmp_path / "old.bin").write_bytes(data.tobytes())
    (tmp_path / "new.bin").write_bytes(b"\0" * 64 + data[4:8].tobytes() + data[8:].tobytes())
    graph = ir.Graph([], [], nodes=[], name="g")
    for i, name in enumerate(["a", "b", "c"]):
        graph.register_initializer(ir.Value(name=name, const_value=ir.ExternalTensor(
            "old.bin", 16 * i, 16, ir.DataType.FLOAT, shape=ir.Shape([4]), name=name, base_dir=tmp_path)))  # fmt: skip
    model = ir.Model(graph, ir_version=10)
    assert retarget_graph(model, {}) == 0
    assert retarget_graph(model, {("old.bin", 16): ("new.bin", 64), ("old.bin", 32): ("new.bin", 80)}) == 2
    spans = {name: (v.const_value.location, v.const_value.offset) for name, v in graph.initializers.items()}
    assert spans == {"a": ("old.bin", 0), "b": ("new.bin", 64), "c": ("new.bin", 80)}
    for i, value in enumerate(graph.initializers.values()):
        np.testing.assert_array_equal(value.const_value.numpy(), data[4 * i:4 * i + 4])
