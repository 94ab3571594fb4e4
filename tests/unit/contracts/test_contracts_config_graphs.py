"""Config <-> graph consistency (CFG-GRAPH-001..003) and opset sanity, through `q38 check`.

Invariants guarded:
- CFG-GRAPH-001: synth's cpu variant declares exactly the state its graph has (no indexer key:
  the cpu variant has no indexer); indexer state names added to its config are a warning naming
  both patterns; a graph state input no declared pattern names (the config's
  ``past_conv_names`` dropped) is an error naming the input; the real builder exports pass.
- CFG-GRAPH-002: an expert profile of the wrong layer count or expert count is an error naming
  both counts (and the node); one row per QMoE node or per decoder layer, with the right expert
  count, passes. In a layered package the profile is read next to target/genai_config.json (not
  at the package root).
- The offload popularity file of the decoder's session options (config_entries or a dotted key) is
  a profile too; a config_entries that is not an object does not stop the check.
- PKG-LIB-001: every library is judged, also after one CFG-LIB-001 refused (absolute, escaping):
  a missing one and a directory are each named.
- CFG-GRAPH-003: a multidraft role naming the wrong sN graph (rows of input_ids / position_ids,
  q38.verify_rows) is an error; the built multidraft package passes.
- Opset sanity (issue 13.8): imports of version 0, 10000 and of an unknown domain make `q38 check`
  exit 1 with ORT-OPSET-001 / ORT-OPSET-002.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from contracts.runner import check_package
from q38.cli import main
from q38.package.profile import ExpertProfile, encode_profile

_REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "pkg"
    shutil.copytree(src, dst, symlinks=True)
    return dst


def _edit_config(pkg: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    path = pkg / "genai_config.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _rows(pkg: Path, rule_id: str) -> list[tuple[str, str, str]]:
    return [(v.severity, v.graph, v.message) for v in check_package(pkg, ort_version="1.32.0").violations if v.rule_id == rule_id]


def test_declared_state_names_the_graph_lacks_are_flagged(tiny_cpu_package: Path, tmp_path: Path) -> None:
    assert _rows(tiny_cpu_package, "CFG-GRAPH-001") == []  # synth declares only the state it writes (issue 17)
    pkg = _copy(tiny_cpu_package, tmp_path)

    def declare_indexer(d: dict[str, Any]) -> None:
        d["model"]["decoder"]["inputs"]["past_indexer_names"] = "past.%d.indexer_key"
        d["model"]["decoder"]["outputs"]["present_indexer_names"] = "present.%d.indexer_key"

    _edit_config(pkg, declare_indexer)
    assert _rows(pkg, "CFG-GRAPH-001") == [
        ("warning", "target", "model.decoder.inputs.past_indexer_names: 'past.%d.indexer_key' names no input of the target graph"),
        ("warning", "target", "model.decoder.outputs.present_indexer_names: 'present.%d.indexer_key' names no output of the target graph"),
    ]


def test_graph_state_no_declared_name_covers_is_an_error(tiny_cpu_package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pkg = _copy(tiny_cpu_package, tmp_path)
    _edit_config(pkg, lambda d: d["model"]["decoder"]["inputs"].pop("past_conv_names"))
    errors = [m for s, g, m in _rows(pkg, "CFG-GRAPH-001") if s == "error"]
    layers = [f"past.{i}.conv" for i in (0, 1, 2, 4, 5, 6)]
    assert errors == [f"input {n!r} of the target graph matches no state name model.decoder.inputs declares: the runtime "
                      "cannot bind it" for n in layers]  # fmt: skip
    assert main(["check", str(pkg), "--ort-version", "1.32.0"]) == 1
    assert "CFG-GRAPH-001" in capsys.readouterr().out


@pytest.mark.parametrize("export", ["int4-cpu", "int4-cpu-mtp", "fp16-cuda-paged", "fp16-cuda-gdn", "int4-cuda-prepacked"])
def test_real_exports_declare_exactly_their_state(export: str) -> None:
    if not (_REAL / export).is_dir():
        pytest.skip("no real fixture")
    assert _rows(_REAL / export, "CFG-GRAPH-001") == []


def _qmoe_nodes(pkg: Path) -> list[onnx.NodeProto]:
    model = onnx.load(pkg / "model.onnx", load_external_data=False)
    return [n for n in model.graph.node if n.op_type == "QMoE"]


@pytest.mark.parametrize(("layers", "experts", "problem"), [
    ("all", 8, None), ("decoder", 8, None), ("all", 4, "experts"), ("one more", 8, "layers"), (1, 8, "layers"),
])  # fmt: skip
def test_expert_profile_dims_match_the_qmoe_nodes(layers: Any, experts: int, problem: str | None, tiny_cpu_package: Path,
                                                  tmp_path: Path) -> None:  # fmt: skip
    pkg = _copy(tiny_cpu_package, tmp_path)
    nodes = _qmoe_nodes(pkg)
    decoder = [n for n in nodes if not n.name.startswith("/mtp/")]
    count = {"all": len(nodes), "decoder": len(decoder), "one more": len(nodes) + 1}.get(layers, layers)
    (pkg / "expert-profile.bin").write_bytes(encode_profile(ExpertProfile(np.ones((count, experts), np.uint64))))
    _edit_config(pkg, lambda d: d["model"]["qwen38_graph"].update({"expert_profile": "expert-profile.bin"}))
    found = _rows(pkg, "CFG-GRAPH-002")
    if problem is None:
        assert found == []
    elif problem == "layers":
        assert found == [("error", "target", (f"model.qwen38_graph.expert_profile: the profile has {count} layers, but the "
                                             f"target graph has {len(nodes)} QMoE nodes ({len(decoder)} decoder layers)"))]  # fmt: skip
    else:
        assert found == [("error", "target", (f"model.qwen38_graph.expert_profile: the profile has {experts} experts per "
                                             f"layer, but QMoE node {nodes[0].name!r} has 8"))]  # fmt: skip


@pytest.fixture(scope="module")
def multidraft_package(tiny_bundles: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("multi") / "pkg"
    args = ["build", str(out), "--target", str(tiny_bundles / "target"), "--head", str(tiny_bundles / "head"),
            "--prefill", str(tiny_bundles / "prefill"), "--multidraft"]  # fmt: skip
    assert main(args) == 0
    return out


def test_multidraft_graphs_verify_the_rows_their_role_says(multidraft_package: Path, tmp_path: Path) -> None:
    assert _rows(multidraft_package, "CFG-GRAPH-003") == []
    pkg = _copy(multidraft_package, tmp_path)
    _edit_config(pkg, lambda d: d["model"]["qwen38_graph"]["multidraft"].update({"s2": "model_s3.onnx", "s3": "model_s2.onnx"}))
    found = _rows(pkg, "CFG-GRAPH-003")
    assert ("error", "s2", "model.qwen38_graph.multidraft.s2: input_ids of s2 has 3 rows, the role verifies 2") in found
    assert ("error", "s3", "model.qwen38_graph.multidraft.s3: q38.verify_rows of s3 is '2', the role verifies 3") in found


def _opsets(pkg: Path, opsets: list[tuple[str, int]]) -> None:
    model = onnx.load(pkg / "model.onnx", load_external_data=False)
    for domain, version in opsets:
        for opset in model.opset_import:
            if opset.domain == domain:
                opset.version = version
                break
        else:
            model.opset_import.append(onnx.helper.make_opsetid(domain, version))
    (pkg / "model.onnx").write_bytes(model.SerializeToString())


@pytest.mark.parametrize(("opsets", "rule_id"), [
    ([("", 0)], "ORT-OPSET-001"), ([("", 10000)], "ORT-OPSET-001"), ([("com.microsoft", 0)], "ORT-OPSET-001"),
    ([("com.microsoft", 2)], "ORT-OPSET-001"),
])  # fmt: skip
def test_opset_imports_outside_what_onnxruntime_supports_fail_check(opsets: list[tuple[str, int]], rule_id: str,
                                                                    tiny_cpu_package: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    pkg = _copy(tiny_cpu_package, tmp_path)
    _opsets(pkg, opsets)
    assert main(["check", str(pkg), "--ort-version", "1.32.0"]) == 1
    out = capsys.readouterr().out
    assert rule_id in out and "Traceback" not in out


def test_an_unused_import_of_an_unknown_domain_warns_as_onnxruntime_loads_it(tiny_cpu_package: Path, tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    # that onnxruntime loads such a graph: test_contracts_schema_differential (a real session, each version)
    pkg = _copy(tiny_cpu_package, tmp_path)
    _opsets(pkg, [("com.evil", 1)])
    assert main(["check", str(pkg), "--ort-version", "1.32.0", "--format", "json"]) == 0
    found = [(r["rule_id"], r["severity"]) for r in json.loads(capsys.readouterr().out)["violations"]]
    assert ("ORT-OPSET-002", "warning") in found
    assert all(severity == "warning" for _rule, severity in found)


def test_each_library_is_judged_after_one_the_config_check_refused(tiny_cpu_package: Path, tmp_path: Path) -> None:
    """CFG-LIB-001 refuses an absolute / escaping library path; PKG-LIB-001 still looks at the next ones."""
    pkg = _copy(tiny_cpu_package, tmp_path)
    (pkg / "libs" / "dir.so").mkdir()
    libraries = {"a": "/opt/elsewhere/lib.so", "b": "../up.so", "c": "libs/missing.so", "d": "libs/dir.so"}
    _edit_config(pkg, lambda d: d["model"]["qwen38_graph"].update({"libraries": libraries}))
    violations = check_package(pkg, ort_version="1.32.0").violations
    assert sorted(v.message.partition(":")[0] for v in violations if v.rule_id == "CFG-LIB-001") == [
        "model.qwen38_graph.libraries.a", "model.qwen38_graph.libraries.b"]
    assert [v.message for v in violations if v.rule_id == "PKG-LIB-001"] == [
        "model.qwen38_graph.libraries.c: library 'libs/missing.so' does not exist in the package",
        "model.qwen38_graph.libraries.d: library 'libs/dir.so' is not a regular file",
    ]


def test_a_layered_package_reads_its_profile_next_to_the_config(tmp_path: Path) -> None:
    """A layered package's config is target/genai_config.json: its expert_profile is target/<file>."""
    from q38.synth import synthesize

    pkg = synthesize(tmp_path / "pkg", preset="tiny", variant="cpu", layout="layered")
    nodes = _qmoe_nodes(pkg / "target")
    (pkg / "target" / "expert-profile.bin").write_bytes(encode_profile(ExpertProfile(np.ones((1, 8), np.uint64))))
    (pkg / "expert-profile.bin").write_bytes(encode_profile(ExpertProfile(np.ones((len(nodes), 8), np.uint64))))
    path = pkg / "target" / "genai_config.json"
    data = json.loads(path.read_text())
    data["model"]["qwen38_graph"]["expert_profile"] = "expert-profile.bin"
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    decoder = [n for n in nodes if not n.name.startswith("/mtp/")]
    assert _rows(pkg, "CFG-GRAPH-002") == [("error", "target", (
        f"model.qwen38_graph.expert_profile: the profile has 1 layers, but the target graph has {len(nodes)} QMoE nodes "
        f"({len(decoder)} decoder layers)"))]  # fmt: skip


_POPULARITY = "session.moe.offload.popularity_file"


@pytest.mark.parametrize("form", ["config_entries", "dotted key", "dotted key, config_entries not an object"])
def test_a_popularity_file_in_the_session_options_is_checked_as_a_profile(form: str, tiny_cpu_package: Path,
                                                                          tmp_path: Path) -> None:  # fmt: skip
    """The offload popularity file the decoder's session options name (in config_entries, or as a
    dotted key of session_options itself) must have a row per QMoE node or decoder layer."""
    pkg = _copy(tiny_cpu_package, tmp_path)
    nodes = _qmoe_nodes(pkg)
    decoder = [n for n in nodes if not n.name.startswith("/mtp/")]
    (pkg / "expert-profile.bin").write_bytes(encode_profile(ExpertProfile(np.ones((1, 8), np.uint64))))

    def name_it(d: dict[str, Any]) -> None:
        options = d["model"]["decoder"]["session_options"]
        if form == "config_entries":
            options["config_entries"] = {_POPULARITY: "expert-profile.bin"}
        else:
            options[_POPULARITY] = "expert-profile.bin"
            if form != "dotted key":
                options["config_entries"] = ["not", "an", "object"]

    _edit_config(pkg, name_it)
    assert _rows(pkg, "CFG-GRAPH-002") == [("error", "target", (
        f"model.decoder.session_options.{_POPULARITY}: the profile has 1 layers, but the target graph has {len(nodes)} "
        f"QMoE nodes ({len(decoder)} decoder layers)"))]  # fmt: skip


def test_a_multidraft_graph_lacking_a_target_input_is_named(multidraft_package: Path, tmp_path: Path) -> None:
    """Each sN graph runs with the target's feeds: one that lacks a target input is CFG-GRAPH-003."""
    pkg = _copy(multidraft_package, tmp_path)
    target = onnx.load(pkg / "model.onnx", load_external_data=False)
    target.graph.input.append(onnx.helper.make_tensor_value_info("extra_in", onnx.TensorProto.FLOAT, [1]))
    (pkg / "model.onnx").write_bytes(target.SerializeToString())
    found = _rows(pkg, "CFG-GRAPH-003")
    assert found == [("error", role, f"model.qwen38_graph.multidraft.{role}: {role} lacks the target's inputs ['extra_in']")
                     for role in ("s2", "s3", "s4")]  # fmt: skip


@pytest.mark.parametrize("rows", ["all", "decoder"])
def test_a_profile_checks_the_mtp_bank_only_when_it_has_a_row_for_it(rows: str, tiny_cpu_package: Path,
                                                                     tmp_path: Path) -> None:  # fmt: skip
    """A profile with a row per QMoE node covers the /mtp/0/ bank, whose expert count must then match
    (named by node); a decoder-layers-only profile has no row for it and leaves it unjudged."""
    pkg = _copy(tiny_cpu_package, tmp_path)
    model = onnx.load(pkg / "model.onnx", load_external_data=False)
    mtp = next(n for n in model.graph.node if n.op_type == "QMoE" and n.name.startswith("/mtp/"))
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.zeros((4, 64, 64), np.uint8), "four_experts.fc1"))
    mtp.input[2] = "four_experts.fc1"
    (pkg / "model.onnx").write_bytes(model.SerializeToString())
    nodes = _qmoe_nodes(pkg)
    count = len(nodes) if rows == "all" else len([n for n in nodes if not n.name.startswith("/mtp/")])
    (pkg / "expert-profile.bin").write_bytes(encode_profile(ExpertProfile(np.ones((count, 8), np.uint64))))
    _edit_config(pkg, lambda d: d["model"]["qwen38_graph"].update({"expert_profile": "expert-profile.bin"}))
    found = [(v.graph, v.node, v.message) for v in check_package(pkg, ort_version="1.32.0").violations
             if v.rule_id == "CFG-GRAPH-002"]  # fmt: skip
    if rows == "decoder":
        assert found == []
    else:
        assert found == [("target", mtp.name, (f"model.qwen38_graph.expert_profile: the profile has 8 experts per layer, "
                                               f"but QMoE node {mtp.name!r} has 4"))]  # fmt: skip
