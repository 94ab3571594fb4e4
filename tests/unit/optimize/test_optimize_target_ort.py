"""``q38 optimize --target-ort`` emits only ops the targeted release has a kernel for (issue 28).

Invariants guarded: for --target cuda --target-ort 1.31.1 no RMSNormRotary / HyperConnectionLowRankMix
node is written (1.31.1 has no schema for them) and --explain names the release and the op, while
1.32.0 fuses them; for --target cpu --target-ort 1.31.1 every com.microsoft op the passes add is one
of 1.31.1's committed CPU kernels; an unknown release is one error line, exit 2, nothing written; a CUDA table read from a release's
schemas answers yes for every standard (default-domain) op, schema or not, and only from the
schemas (a CUDA fact file or a CPU dump is taken at its word).
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from q38.cli import main
from q38.optimize.target_kernels import TargetKernels, for_target


def _ops(path: Path) -> set[str]:
    return {n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node}


def test_cuda_1_31_1_never_emits_ops_it_has_no_schema_for(tiny_cpu_package: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    assert main(["optimize", str(tiny_cpu_package), str(old), "--target", "cuda", "--target-ort", "1.31.1",
                 "--explain"]) == 0
    explained = capsys.readouterr().out
    assert "no CUDA kernel for RMSNormRotary in onnxruntime 1.31.1 (target cuda, --target-ort" in explained
    assert "no CUDA kernel for HyperConnectionLowRankMix in onnxruntime 1.31.1" in explained
    assert main(["optimize", str(tiny_cpu_package), str(new), "--target", "cuda", "--target-ort", "1.32.0"]) == 0
    assert not {"RMSNormRotary", "HyperConnectionLowRankMix"} & _ops(old / "model.onnx")
    assert {"RMSNormRotary", "HyperConnectionLowRankMix"} <= _ops(new / "model.onnx")


def test_cpu_1_31_1_keeps_to_its_cpu_kernels(tiny_cpu_package: Path, tmp_path: Path) -> None:
    out = tmp_path / "cpu"
    assert main(["optimize", str(tiny_cpu_package), str(out), "--target", "cpu", "--target-ort", "1.31.1"]) == 0
    kernels = for_target("1.31.1", "cpu")
    def ms_ops(path: Path) -> set[str]:
        return {n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node
                if n.domain == "com.microsoft"}

    ms = ms_ops(out / "model.onnx") - ms_ops(tiny_cpu_package / "model.onnx")  # what the passes produced
    assert all(kernels.has(op) for op in ms), sorted(op for op in ms if not kernels.has(op))
    assert len(onnx.load(str(out / "model.onnx"), load_external_data=False).graph.node) != len(
        onnx.load(str(tiny_cpu_package / "model.onnx"), load_external_data=False).graph.node)  # it rewrote
    assert not kernels.has("GatedDeltaNet") and for_target("1.32.0", "cpu").has("GatedDeltaNet")


def test_unknown_release_is_one_line(tiny_cpu_package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # refused while the command line is read (argparse's exit 2), before anything runs
    with pytest.raises(SystemExit) as exited:
        main(["optimize", str(tiny_cpu_package), str(tmp_path / "x"), "--target-ort", "9.9.9"])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == "q38 optimize: error: --target-ort 9.9.9: unknown onnxruntime version (known: 1.31.1, 1.32.0)"
    assert not (tmp_path / "x").exists()


def test_a_cuda_table_from_schemas_takes_every_standard_op_and_no_unlisted_contrib_op() -> None:
    """The schemas say nothing about CUDA coverage of standard ops, so a CUDA table built from them
    has every default-domain op (spelled "" or "ai.onnx", any dtype), even one its dump does not
    list; a com.microsoft op it does not list is missing. A fact-file CUDA table and a CPU table
    are taken at their word for standard ops too."""
    schemas = TargetKernels("1.31.1", "cuda", {("com.microsoft", "GroupQueryAttention"): None},
                            "schemas of ort-1.31.1.json (CUDA kernels not yet probed)")
    assert schemas.has("MatMul", "") and schemas.has("Split", "ai.onnx", "float16")
    assert schemas.has("GroupQueryAttention") and not schemas.has("RMSNormRotary")
    real = for_target("1.31.1", "cuda")
    assert real.source.startswith("schemas") and ("", "NoSuchStandardOp") not in real.ops
    assert real.has("NoSuchStandardOp", "") and not real.has("NoSuchStandardOp")
    for ep, source in (("cuda", "cuda-kernels-1.31.1.json"), ("cpu", "ort-1.31.1.json cpu_kernels")):
        facts = TargetKernels("1.31.1", ep, {("", "Gather"): None}, source)
        assert facts.has("Gather", "") and not facts.has("MatMul", ""), (ep, source)


def test_a_cuda_fact_file_gives_a_cuda_table_taken_at_its_word(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a CUDA kernel dump of the release ($Q38_CUDA_KERNELS), ``for_target(v, "cuda")`` is a
    table of the ``cuda`` EP read from that file (its source is the file's name): an op it lists
    is there, a standard op it does not list is not."""
    import json

    from contracts.cuda_kernels import ENV_VAR

    dump = tmp_path / "cuda-kernels-1.31.1.json"
    dump.write_text(json.dumps({"ort_version": "1.31.1", "kernels": [
        {"domain": "com.microsoft", "name": "RMSNormRotary", "kernels": [[1, 2147483647, {}]]}]}))
    monkeypatch.setenv(ENV_VAR, str(dump))
    table = for_target("1.31.1", "cuda")
    assert (table.ort_version, table.ep, table.source) == ("1.31.1", "cuda", "cuda-kernels-1.31.1.json")
    assert table.has("RMSNormRotary", dtype="float16") and not table.has("MatMul", "")


def test_a_kernel_table_answers_per_dtype_as_its_kernels_say() -> None:
    """A kernel lists the tensor types it takes: ``has`` with a dtype (any spelling) is yes when
    one of the op's kernels takes it, or takes any type (no constraint), or when the op's facts
    are op-level (None); the CPU EP also runs float16 on a float kernel, CUDA does not. The
    default domain is spelled "" or "ai.onnx"; the default domain of ``has`` is com.microsoft."""
    from onnx import TensorProto

    ops = {("com.microsoft", "FloatOnly"): (frozenset({"tensor(float)"}),),
           ("com.microsoft", "Two"): (frozenset({"tensor(int8)"}), frozenset({"tensor(bfloat16)", "tensor(int32)"})),
           ("com.microsoft", "AnyType"): (frozenset({"tensor(int8)"}), frozenset()),
           ("com.microsoft", "OpLevel"): None,
           ("", "Relu"): (frozenset({"tensor(double)"}),)}  # fmt: skip
    cpu = TargetKernels("1.31.1", "cpu", ops, "ort-1.31.1.json cpu_kernels")
    cuda = TargetKernels("1.31.1", "cuda", ops, "cuda-kernels-1.31.1.json")
    for table in (cpu, cuda):
        assert table.has("FloatOnly", dtype="float") and table.has("FloatOnly", dtype=TensorProto.FLOAT)
        assert not table.has("FloatOnly", dtype="int8") and not table.has("FloatOnly", "", "float")
        assert table.has("Two", dtype="tensor(int32)") and table.has("Two", dtype="bfloat16")
        assert not table.has("Two", dtype="float")
        assert table.has("AnyType", dtype="float16") and table.has("OpLevel", dtype="float16")
        assert table.has("Relu", "ai.onnx", "double") and table.has("Relu", "", "float64")
        assert not table.has("Relu", "ai.onnx", "float") and not table.has("Relu", dtype="double")
    assert cpu.has("FloatOnly", dtype="float16") and not cuda.has("FloatOnly", dtype="float16")
    assert not cpu.has("Two", dtype="float16")


@pytest.mark.parametrize("version", ["1.31.1", "1.32.0"])
def test_a_cpu_table_has_every_op_and_type_of_the_release_dump(version: str) -> None:
    """``for_target(v, "cpu")`` is the dump's cpu_kernels: each listed (domain, op) answers yes for
    every tensor type one of its kernels names (sequence types aside: no produced node is one),
    and its source names the dump."""
    import json

    from contracts.schema_dump import dump_path

    dump = json.loads(dump_path(version).read_text(encoding="utf-8"))
    table = for_target(version, "cpu")
    assert (table.ort_version, table.ep, table.source) == (version, "cpu", f"ort-{version}.json cpu_kernels")
    assert len(table.ops) == len(dump["cpu_kernels"])
    for entry in dump["cpu_kernels"]:
        for _, _, constraints in entry["kernels"]:
            for types in constraints.values():
                for t in (t for t in types if t.startswith("tensor(")):
                    assert table.has(entry["name"], entry["domain"], t), (entry["name"], t)
