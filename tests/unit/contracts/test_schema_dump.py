"""The committed schema dumps are onnxruntime's own registry, and the registry reader resolves as ORT.

Invariants guarded:
- The installed wheel's schemas, opset limits and CPU kernels, rendered canonically, are byte for
  byte the committed dump of its version (regenerate with ``python -m contracts.schema_dump``);
  ``--check`` says so with exit 0 and says DIFFERS (exit 1) for a stale dump.
- Both supported versions (1.31.1, 1.32.0) have a dump, and a version without one mirrors the
  newest dump that is not newer.
- Resolution follows ORT: the highest since_version <= the import; nothing above the domain's
  registered range; the ai.onnx alias; a missing import resolves at the latest version.
- The CUDA build's published schema text (docs/reference/ort-1.32.0-contrib-schemas.txt, 19 ops)
  differs from the CPU wheel's registry exactly where ``CUDA_SCHEMA_DIFFERENCES`` says: nowhere
  (every slot, type, option, attribute and required flag agrees).
- ``--help`` names the command as it is run (``python -m contracts.schema_dump``) and its purpose;
  an unknown option is a one-line usage error, exit 2.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from support.contracts_testkit import ORT_VERSION

from contracts import schema_dump
from contracts.schema_registry import CUDA_SCHEMA_DIFFERENCES, available_versions, registry_for

_DOCS = Path(__file__).resolve().parents[3] / "docs" / "reference" / "ort-1.32.0-contrib-schemas.txt"


@pytest.fixture(scope="module")
def installed_dump() -> dict:
    return schema_dump.dump_installed()


def test_the_installed_wheel_matches_the_committed_dump_of_its_version(installed_dump: dict) -> None:
    assert installed_dump["ort_version"] == ORT_VERSION.split("+")[0]
    path = schema_dump.dump_path(installed_dump["ort_version"])
    assert path.is_file(), f"no committed dump for onnxruntime {ORT_VERSION}: run python -m contracts.schema_dump"
    assert schema_dump.render(installed_dump) == path.read_text(encoding="utf-8"), (
        f"{path.name} differs from the installed onnxruntime's registry: regenerate it"
    )


def test_check_mode_reports_a_stale_dump(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    version = ORT_VERSION.split("+")[0]
    stale = schema_dump.dump_path(version).read_text(encoding="utf-8").replace('"deprecated":false', '"deprecated":true', 1)
    schema_dump.dump_path(version, tmp_path).write_text(stale, encoding="utf-8")
    assert schema_dump.main(["--check", "--out", str(tmp_path)]) == 1
    stale_path = schema_dump.dump_path(version, tmp_path)
    assert capsys.readouterr().out == f"{stale_path}: DIFFERS from the installed onnxruntime\n"
    assert schema_dump.main(["--check"]) == 0
    assert "up to date" in capsys.readouterr().out
    missing = tmp_path / "none"  # no dump at all differs too
    assert schema_dump.main(["--check", "--out", str(missing)]) == 1
    differs = f"{schema_dump.dump_path(version, missing)}: DIFFERS from the installed onnxruntime\n"
    assert capsys.readouterr().out == differs
    assert not missing.exists()  # --check writes nothing


def test_both_supported_versions_have_a_dump_with_what_the_rules_read() -> None:
    assert {"1.31.1", "1.32.0"} <= set(available_versions())
    new, old = registry_for("1.32.0"), registry_for("1.31.1")
    assert (new.ort_version, old.ort_version) == ("1.32.0", "1.31.1")
    assert new.opset_max[""] == 28 and old.opset_max[""] == 26 and new.opset_max["com.microsoft"] == 1
    assert old.onnx_registry_max == 27  # 1.31.1 resolves ai.onnx 27 but refuses an import of 27
    # ops 1.31.1 lacks (ort-cpu-capabilities.md §7)
    for op in ("HyperConnectionLowRankMix", "RMSNormRotary", "PackedSparseAttentionIndexerMerge"):
        assert new.has_op("com.microsoft", op) and not old.has_op("com.microsoft", op)
    # 1.31.1 has no GatedDeltaNet CPU kernel; 1.32.0 has fp32/fp16/bf16 ones
    assert old.cpu_kernels("com.microsoft", "GatedDeltaNet") == ()
    assert {t for _a, _b, types in new.cpu_kernels("com.microsoft", "GatedDeltaNet") for t in types["T"]} == {
        "tensor(float)", "tensor(float16)", "tensor(bfloat16)"}
    assert registry_for("1.33.5").ort_version == "1.32.0" and registry_for("1.20.0").ort_version == "1.31.1"


def test_resolution_follows_onnxruntime() -> None:
    reg = registry_for("1.32.0")
    assert reg.resolve("", "Softmax", 21).since == 13
    assert reg.resolve("ai.onnx", "Softmax", 12).since == 11
    assert reg.resolve("", "Softmax", 0) is None
    assert reg.resolve("", "Identity", 29) is None  # above the domain's registered range
    assert reg.resolve("", "Gelu", 19) is None and reg.resolve("", "Gelu", 20).since == 20
    assert reg.resolve("com.microsoft", "QMoE", 1).attributes["k"] == ("INT", False, 1)
    assert reg.resolve("com.microsoft", "Bogus", 1) is None
    assert reg.default_version("com.microsoft") == 1 and reg.default_version("x.custom") is None
    assert "qwen.fold" not in reg.domains and "ai.onnx.training" in reg.domains


def _docs_schemas() -> dict[str, dict[str, object]]:
    """Per op of the CUDA build's schema text: attributes (type, required), inputs and outputs
    (name, type, option), type constraints."""
    text = _DOCS.read_text(encoding="utf-8")
    found: dict[str, dict[str, object]] = {}
    formal = re.compile(r"^   \d+ (\w+) (\S+) FormalParameterOption\.(\w+)", re.M)
    for block in re.split(r"^### ", text, flags=re.M)[1:]:
        name = block.split()[0]
        ins, _, rest = block.partition("INPUTS:")[2].partition("OUTPUTS:")
        outs = rest.split("TYPES:")[0]
        types = re.search(r"^TYPES: (\[.*\])$", block, flags=re.M)
        found[name] = {
            "attributes": {n: (t, bool(r)) for n, t, r in re.findall(r"^   (\w+) AttrType\.(\w+)( required)?", block, flags=re.M)},
            "inputs": [(n, t, o.lower()) for n, t, o in formal.findall(ins)],
            "outputs": [(n, t, o.lower()) for n, t, o in formal.findall(outs)],
            "types": {k: sorted(v) for k, v in ast.literal_eval(types.group(1))} if types else {},
        }
    return found


def test_the_cuda_schema_text_agrees_with_the_cpu_registry_the_rules_follow() -> None:
    reg = registry_for("1.32.0")
    docs = _docs_schemas()
    assert len(docs) == 19
    differing = set()
    for name, cuda in docs.items():
        schema = reg.resolve("com.microsoft", name, 1)
        assert schema is not None, name
        cpu = {
            "attributes": {k: (v[0], v[1]) for k, v in schema.attributes.items()},
            "inputs": [(p.name, p.type_str, p.option) for p in schema.inputs],
            "outputs": [(p.name, p.type_str, p.option) for p in schema.outputs],
            "types": {k: sorted(v) for k, v in schema.type_constraints.items()},
        }
        assert cuda["inputs"], name  # the parse found the slots
        if cpu != cuda:
            differing.add(name)
    assert differing == {op for op, _what in CUDA_SCHEMA_DIFFERENCES} == set()


def test_a_local_build_version_names_its_release(monkeypatch: pytest.MonkeyPatch) -> None:
    import onnxruntime

    monkeypatch.setattr(onnxruntime, "__version__", f"{ORT_VERSION.split('+')[0]}+cu126")
    assert schema_dump.dump_installed()["ort_version"] == ORT_VERSION.split("+")[0]


def test_regenerating_writes_the_canonical_dump(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "new" / "schemas"  # its parent is made too
    assert schema_dump.main(["--out", str(out)]) == 0
    version = ORT_VERSION.split("+")[0]
    written = schema_dump.dump_path(version, out)
    assert written.read_text(encoding="utf-8") == schema_dump.dump_path(version).read_text(encoding="utf-8")
    count = len(schema_dump.dump_installed()["schemas"])
    assert capsys.readouterr().out == f"wrote {written} ({count} schemas)\n"
    written.write_text("stale", encoding="utf-8")
    assert schema_dump.main(["--out", str(out)]) == 0  # an existing directory: the dump is replaced
    assert written.read_text(encoding="utf-8") == schema_dump.dump_path(version).read_text(encoding="utf-8")


def test_cpu_kernel_rows_are_ordered_by_range_then_types() -> None:
    """Canonical order: per (domain, op), by (since, end, types); other providers dropped."""
    from types import SimpleNamespace as K

    def kernel(op: str, since: int, end: int, types: dict[str, list[str]], provider: str = "CPUExecutionProvider") -> K:
        return K(provider=provider, version_range=(since, end), type_constraints=types, domain="", op_name=op)

    top = 2147483647
    state = K(get_all_opkernel_def=lambda: [
        kernel("Add", 14, top, {"T": ["tensor(bfloat16)"]}), kernel("Add", 7, top, {"T": ["tensor(float)"]}),
        kernel("Add", 7, 12, {"T": ["tensor(double)"]}), kernel("Abs", 6, top, {"T": ["tensor(float)"]}),
        kernel("Add", 7, top, {"T": ["tensor(bool)"]}), kernel("Add", 1, 6, {"T": ["tensor(float)"]}, "CUDAExecutionProvider"),
    ])  # fmt: skip
    assert schema_dump._cpu_kernels(state) == [
        {"domain": "", "name": "Abs", "kernels": [[6, top, {"T": ["tensor(float)"]}]]},
        {"domain": "", "name": "Add", "kernels": [[7, 12, {"T": ["tensor(double)"]}], [7, top, {"T": ["tensor(bool)"]}],
                                                  [7, top, {"T": ["tensor(float)"]}], [14, top, {"T": ["tensor(bfloat16)"]}]]},
    ]  # fmt: skip


def test_help_names_the_module_command_and_says_what_it_writes(capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as done:
        schema_dump.main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m contracts.schema_dump [-h] [--out OUT] [--check]\n\n"
                          "Write the canonical operator-schema dump of the installed onnxruntime wheel.\n")  # fmt: skip
    options = " ".join(out.split())
    assert "--out OUT directory of the dumps (default: contracts/schemas)" in options
    assert "--check compare with the committed dump instead of writing" in options
    with pytest.raises(SystemExit) as done:
        schema_dump.main(["--bogus"])
    assert done.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == "python -m contracts.schema_dump: error: unrecognized arguments: --bogus"
