"""``q38 diff A B``: a semantic diff of two packages on their canonical forms.

Invariants guarded:
* a package against itself or a copy: exit 0, one line; two packages that differ in one
  attribute: exit 1, the node and attribute named, at most 20 lines; unreadable input: exit 2
  with one line (no traceback);
* every kind of difference is one line under its file: config key paths, pool entry fields,
  manifest fields (q38 version and graph hashes masked), nodes added / removed / changed
  (attribute, input, output, domain, op), initializers (digest, dtype, shape), opset imports,
  graph inputs, files added / removed / rewritten;
* ``--json`` carries the same differences as data, and a summary per graph;
* the report leads with a summary line per graph, then the graphs' node, initializer and I/O
  changes; ``value_info`` lines only with ``--value-info`` (else a count): on the demo's built
  vs optimized tiny package, the summary and the first node change are within the first 40
  lines (issue 37.4);
* weights are not read where the same file or a valid manifest digest decides, and are read
  (streamed) where a data file changed after its manifest.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import onnx
import pytest

import q38.canonical.digests as digests
from q38.cli import main
from q38.diff import diff_packages


@pytest.fixture
def pair(tiny_cpu_package: Path, tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(tiny_cpu_package, a, symlinks=True)
    shutil.copytree(tiny_cpu_package, b, symlinks=True)
    return a, b


def _edit_graph(pkg: Path, edit, name: str = "model.onnx") -> None:
    path = pkg / name
    model = onnx.load(os.fspath(path), load_external_data=False)
    edit(model)
    path.write_bytes(model.SerializeToString())


def _node(model: onnx.ModelProto, op: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.op_type == op)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], str]:
    code = main(["diff", *args])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def test_a_package_and_its_copy_are_the_same(pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b = pair
    code, lines, err = _cli(capsys, str(a), str(b))
    assert (code, err) == (0, "")
    assert lines == [f"q38 diff: {a} and {b} are the same (10 files compared)"]
    assert _cli(capsys, str(a), str(a))[0] == 0


def test_one_changed_attribute_is_named_in_a_short_report(pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b = pair

    def edit(m: onnx.ModelProto) -> None:
        attr = next(x for x in _node(m, "BranchwiseRMSNorm").attribute if x.name == "epsilon")
        attr.f = 1e-5

    _edit_graph(b, edit)
    code, lines, _ = _cli(capsys, str(a), str(b))
    assert code == 1
    assert len(lines) <= 20
    assert lines == [
        f"q38 diff: 1 difference(s) in 1 file(s) between {a} (-) and {b} (+)",
        "model.onnx (target): nodes ~1",
        "model.onnx (target)",
        (
            '  ~ node "/model/layers.0/attn_hc/BranchwiseRMSNorm" (com.microsoft::BranchwiseRMSNorm) '
            "attribute epsilon: 1e-06 -> 1e-05"
        ),
    ]
    code, out, _ = _cli(capsys, "--json", str(a), str(b))
    doc = json.loads("\n".join(out))
    assert code == 1 and doc["same"] is False
    assert doc["differences"] == [{
        "file": "model.onnx", "change": "changed", "section": "node", "field": "attribute",
        "attribute": "epsilon", "node": "/model/layers.0/attn_hc/BranchwiseRMSNorm",
        "op": "BranchwiseRMSNorm", "domain": "com.microsoft", "a": 1e-06, "b": 1e-05,
        "where": 'node "/model/layers.0/attn_hc/BranchwiseRMSNorm" (com.microsoft::BranchwiseRMSNorm) attribute epsilon',
    }]


def test_node_changes_are_named_by_kind(pair: tuple[Path, Path]) -> None:
    a, b = pair

    def edit(m: onnx.ModelProto) -> None:
        gather = _node(m, "Gather")
        gather.input[1] = "position_ids"  # input changed
        softmax = next(n for n in m.graph.node if n.op_type == "Softmax")
        softmax.output[0] = softmax.output[0] + "_renamed"  # output changed
        rms = _node(m, "BranchwiseRMSNorm")
        rms.domain = "com.example"  # domain changed
        del rms.attribute[:]  # attributes removed
        m.graph.node.append(onnx.helper.make_node("Identity", ["logits"], ["logits_copy"], name="/extra"))
        m.graph.node.remove(next(n for n in m.graph.node if n.op_type == "Tile"))
        m.opset_import.append(onnx.helper.make_opsetid("ai.onnx.ml", 3))
        m.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "seq"

    _edit_graph(b, edit)
    lines = diff_packages(a, b).lines()
    body = "\n".join(lines)
    assert 'node "/model/embed_tokens/Gather" (Gather) input[1]: "input_ids" -> "position_ids"' in body
    assert "output[0]:" in body and '_renamed"' in body
    assert 'node "/model/layers.0/attn_hc/BranchwiseRMSNorm" (com.microsoft::BranchwiseRMSNorm) domain: "com.microsoft" -> "com.example"' in body
    assert 'BranchwiseRMSNorm) attribute epsilon: 1e-06' in body
    assert '  + node "/extra" (Identity): ["logits"] -> ["logits_copy"]' in lines
    assert '  - node "/model/hyper_connection/Tile" (Tile): ' in body
    assert '  + opset_import "ai.onnx.ml": 3' in lines
    assert '  ~ input "input_ids" shape: ["batch_size","sequence_length"] -> ["batch_size","seq"]' in lines
    assert all(line.startswith(("q38 diff:", "model.onnx", "  ")) for line in lines)


def test_weights_pool_config_manifest_and_files(pair: tuple[Path, Path]) -> None:
    a, b = pair
    cfg = json.loads((b / "genai_config.json").read_text())
    cfg["model"]["context_length"] = 8192
    cfg["model"]["decoder"]["session_options"]["log_id"] = "other"
    (b / "genai_config.json").write_text(json.dumps(cfg))
    pool = (b / "weights_pool.txt").read_text().splitlines()
    first = next(i for i, line in enumerate(pool) if not line.startswith("#"))
    pool[first] = pool[first].replace(" device ", " cpu_mmap ")
    (b / "weights_pool.txt").write_text("\n".join(pool) + "\n")
    man = json.loads((b / "package_manifest.json").read_text())
    man["q38_version"] = "9.9.9"  # volatile: masked
    man["notes"] = ["edited"]
    (b / "package_manifest.json").write_text(json.dumps(man))
    (b / "README.txt").write_text("new")
    (b / "libs" / "libcustom_ops.so").write_bytes(b"\x7fELF other bytes")
    lines = diff_packages(a, b).lines()
    pool_id = pool[first].split()[0]
    assert "genai_config.json" in lines and "weights_pool.txt" in lines and "package_manifest.json" in lines
    assert "  ~ model.context_length: 4096 -> 8192" in lines
    assert '  ~ model.decoder.session_options.log_id: "q38" -> "other"' in lines
    assert f'  ~ entry {pool_id} placement: "device" -> "cpu_mmap"' in lines
    assert any(line.startswith('  ~ notes[0]: "preset=tiny') and line.endswith('-> "edited"') for line in lines)
    assert not any("q38_version" in line for line in lines)
    assert "  + README.txt: file" in lines
    assert any(line.startswith("  ~ libs/libcustom_ops.so ") for line in lines)


def test_changed_weight_bytes_are_an_initializer_digest_difference(pair: tuple[Path, Path]) -> None:
    a, b = pair
    data = b / "model.onnx.data"
    raw = bytearray(data.read_bytes())
    raw[0] ^= 0xFF  # the first tensor (embeddings at offset 0); mtime moves past the manifest
    data.write_bytes(bytes(raw))
    result = diff_packages(a, b)
    lines = result.lines()
    inits = [(d.file, d.where) for d in result.differences if d.facts.get("section") == "initializer"]
    # The embedding is shared by the three graphs: one line under each.
    assert inits == [(g, 'initializer "model.embed_tokens.weight" sha256')
                     for g in ("head_r2.onnx", "model.onnx", "prefill.onnx")]
    assert len(lines) == 10  # headline, a summary per graph, then per graph its name and the one initializer line


def test_no_weight_byte_is_read_where_the_file_or_a_valid_manifest_decides(
    pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = pair

    def no_reads(*args: object) -> str:
        raise AssertionError(f"weight bytes read: {args}")

    monkeypatch.setattr(digests, "sha256_range", no_reads)
    assert diff_packages(a, a).same  # the same files
    assert diff_packages(a, b).same  # copies the manifests vouch for (mtimes kept by copytree)
    os.utime(b / "model.onnx.data")  # newer than its manifest: the record no longer vouches
    with pytest.raises(AssertionError, match="weight bytes read"):
        diff_packages(a, b)


def _record_identity(pkg: Path, mtime_ns: int, *, recorded_mtime_ns: int | None = None) -> None:
    """Sets model.onnx.data's mtime and records its identity in the manifest as a copy would."""
    data, manifest = pkg / "model.onnx.data", pkg / "package_manifest.json"
    doc = json.loads(manifest.read_text())
    os.utime(data, ns=(mtime_ns, mtime_ns))
    st = data.stat()
    doc["files"]["model.onnx.data"] = {
        "link_mode": "copy", "sha256": doc["files"]["model.onnx.data"]["sha256"],
        "identity": {"st_dev": st.st_dev, "st_ino": st.st_ino, "size": st.st_size,
                     "mtime_ns": mtime_ns if recorded_mtime_ns is None else recorded_mtime_ns},
    }
    manifest.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def test_a_recorded_identity_decides_whether_the_manifest_digest_still_holds(
    pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = pair

    def no_reads(*args: object) -> str:
        raise AssertionError(f"weight bytes read: {args}")

    monkeypatch.setattr(digests, "sha256_range", no_reads)
    now = (a / "package_manifest.json").stat().st_mtime_ns
    later = now + 100 * 10**9  # newer than the manifest: without an identity it would be hashed
    for pkg in (a, b):
        _record_identity(pkg, later)
    assert diff_packages(a, b).same  # identities match (inode and device differ: masked, not compared)
    earlier = now - 100 * 10**9  # older than the manifest, but not the mtime the identity records
    _record_identity(b, earlier, recorded_mtime_ns=earlier + 1)
    with pytest.raises(AssertionError, match="weight bytes read"):
        diff_packages(a, b)


def test_digests_are_streamed_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib

    path = tmp_path / "blob"
    path.write_bytes(bytes(range(256)) * 100)
    reads: list[int] = []
    real = os.pread
    monkeypatch.setattr(digests, "CHUNK", 1000)
    monkeypatch.setattr(digests.os, "pread", lambda fd, n, off: reads.append(n) or real(fd, n, off))
    assert digests.sha256_range(path, 56, 20000) == hashlib.sha256(path.read_bytes()[56:20056]).hexdigest()
    assert max(reads) == 1000 and len(reads) == 20


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("missing", "no such package directory"),
        ("not_a_package", "not a package (no genai_config.json"),
        ("bad_json", "genai_config.json: invalid JSON at line 1"),
        ("truncated_graph", "model.onnx: not a valid ONNX model"),
        ("escaping_data", "model.onnx: external data '../outside.data': path '../outside.data' escapes the package"),
        ("bad_pool", "weights_pool.txt:3:"),
    ],
)
def test_unreadable_input_is_one_line_and_exit_2(
    pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str], damage: str, message: str
) -> None:
    a, b = pair
    if damage == "missing":
        shutil.rmtree(b)
    elif damage == "not_a_package":
        (b / "genai_config.json").unlink()
    elif damage == "bad_json":
        (b / "genai_config.json").write_text("{")
    elif damage == "truncated_graph":
        (b / "model.onnx").write_bytes((b / "model.onnx").read_bytes()[:100])
    elif damage == "escaping_data":
        outside = b.parent / "outside.data"
        shutil.copy(b / "model.onnx.data", outside)

        def edit(m: onnx.ModelProto) -> None:
            for t in m.graph.initializer:
                for e in t.external_data:
                    if e.key == "location":
                        e.value = "../outside.data"

        _edit_graph(b, edit)
    elif damage == "bad_pool":
        with open(b / "weights_pool.txt", "a") as fh:
            fh.write("broken line\n")
        lines = (b / "weights_pool.txt").read_text().splitlines()
        (b / "weights_pool.txt").write_text("\n".join([*lines[:2], "broken line", *lines[2:-1]]) + "\n")
    code, out, err = _cli(capsys, str(a), str(b))
    assert code == 2 and out == []
    assert err.count("\n") == 1 and err.startswith("q38 diff: error: ") and message in err, err


REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"


@pytest.mark.skipif(not (REAL / "int4-cpu").is_dir(), reason="real builder fixtures not present")
def test_builder_packages_of_the_genai_surface_diff_too(capsys: pytest.CaptureFixture[str]) -> None:
    a, b = REAL / "int4-cpu", REAL / "int4-cpu-mtp"
    assert _cli(capsys, str(a), str(a))[0] == 0
    code, lines, _ = _cli(capsys, str(a), str(b))
    assert code == 1
    assert "model.onnx (decoder)" in lines and "  + mtp.onnx: file" in lines
    assert '  + model.decoder.outputs.hidden_states: "hidden_states"' in lines
    assert any(line.startswith('  + output "hidden_states": ') for line in lines)


@pytest.fixture
def built_and_optimized(tiny_bundles: Path, tmp_path: Path) -> tuple[Path, Path]:
    """What the demo builds and optimizes (tiny preset, cpu variant), by the same commands."""
    built, optimized = tmp_path / "built", tmp_path / "optimized"
    assert main(["build", str(built), "--target", str(tiny_bundles / "target"), "--head", str(tiny_bundles / "head"),
                 "--prefill", str(tiny_bundles / "prefill"), "--provider", "cpu", "--json"]) == 0  # fmt: skip
    assert main(["optimize", str(built), str(optimized), "--json"]) == 0
    return built, optimized


def test_the_change_leads_and_value_info_is_a_count_unless_asked(
    built_and_optimized: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    built, optimized = built_and_optimized
    capsys.readouterr()
    code, lines, _ = _cli(capsys, str(built), str(optimized))
    assert code == 1
    head = lines[:40]
    summaries = {line.split(" ")[0]: line for line in head[1:4]}
    assert set(summaries) == {"model.onnx", "prefill.onnx", "head_r2.onnx"}, head[:5]
    assert re.fullmatch(r"model\.onnx \(target\): nodes \+\d+ -\d+ ~\d+, initializers \+\d+ -\d+, value_info \+\d+",
                        summaries["model.onnx"])  # fmt: skip
    assert summaries["head_r2.onnx"].endswith("(shape annotations only)")
    assert any(line.startswith(("  ~ node ", "  + node ", "  - node ")) for line in head)
    assert not any(line.startswith("  + value_info ") for line in lines)
    counted = [line for line in lines if line.startswith("  value_info: +")]
    assert len(counted) == 3
    shown_vi = int(re.search(r"value_info \+(\d+)", summaries["model.onnx"]).group(1))  # type: ignore[union-attr]
    # every graph: nodes before initializers before value_info
    body = lines[lines.index("model.onnx (target)") + 1 :]
    body = body[: next(i for i, line in enumerate(body) if not line.startswith("  "))]
    kinds = ["value_info" if line.startswith("  value_info:") else line.split()[1] for line in body]
    assert kinds == sorted(kinds, key=["node", "initializer", "value_info"].index)
    assert f"  value_info: +{shown_vi} (shape annotations; q38 diff --value-info lists them)" in body

    _, listed, _ = _cli(capsys, "--value-info", str(built), str(optimized))
    assert sum(1 for line in listed if line.startswith("  + value_info ")) >= shown_vi > 0
    code, out, _ = _cli(capsys, "--json", str(built), str(optimized))
    doc = json.loads("\n".join(out))
    vi = [d for d in doc["differences"] if d["file"] == "model.onnx" and d["section"] == "value_info"]
    assert len(vi) == shown_vi
    (target,) = [g for g in doc["summary"] if g["file"] == "model.onnx"]
    assert target["role"] == "target" and target["value_info"]["added"] == shown_vi and target["nodes"]["removed"] > 0
