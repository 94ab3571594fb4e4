"""``q38 fit`` (issue 29): exact weight bytes per file, state bytes against a real ORT session, the CLI.

The weight bytes are recomputed here without q38's code: each graph's initializers read with
``onnx.load(..., load_external_data=False)``, an external tensor's bytes its ``length`` entry
(checked against the data file's size) or, without one, numpy's item size times the element
count; an inline tensor's its raw bytes. The state bytes are the ``present.*`` outputs a real
onnxruntime CPU session of the cpu variant allocates at two context lengths.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import onnx
import pytest

from q38.cli import main
from q38.fit import fit_package, parse_gpu

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"
REAL_PACKAGES = sorted(p.name for p in REAL.iterdir() if (p / "genai_config.json").is_file())
_SUB_BYTE = {onnx.TensorProto.INT4, onnx.TensorProto.UINT4, onnx.TensorProto.FLOAT4E2M1}


def _independent_file_bytes(root: Path) -> dict[str, int]:
    """Bytes per file of every graph in ``root``: each external (file, offset) once, inline per graph."""
    seen: dict[tuple[str, int], int] = {}
    files: dict[str, int] = {}
    for graph_path in sorted(root.rglob("*.onnx")):
        model = onnx.load(str(graph_path), load_external_data=False)
        rel = graph_path.relative_to(root).as_posix()
        for init in model.graph.initializer:
            count = math.prod(init.dims)
            if init.data_type in _SUB_BYTE:
                shape_bytes = (count + 1) // 2
            else:
                shape_bytes = count * onnx.helper.tensor_dtype_to_np_dtype(init.data_type).itemsize
            if init.data_location == onnx.TensorProto.EXTERNAL:
                info = {e.key: e.value for e in init.external_data}
                data = graph_path.parent / info["location"]
                offset = int(info.get("offset", "0"))
                length = int(info["length"]) if "length" in info else shape_bytes
                assert offset + length <= data.stat().st_size, (rel, init.name)
                assert length == shape_bytes, (rel, init.name, length, shape_bytes)
                key = (os.path.relpath(data, root), offset)
                if key not in seen:
                    seen[key] = length
                    files[key[0]] = files.get(key[0], 0) + length
            else:
                inline = len(init.raw_data) if init.raw_data else onnx.numpy_helper.to_array(init).nbytes
                if init.data_type not in _SUB_BYTE:
                    assert inline == shape_bytes, (rel, init.name)
                files[rel] = files.get(rel, 0) + shape_bytes
    return files


@pytest.mark.parametrize("name", REAL_PACKAGES)
def test_weight_bytes_per_file_equal_an_independent_sum_real_fixtures(name: str) -> None:
    root = REAL / name
    report = fit_package(root)
    assert dict(report.base.files) == _independent_file_bytes(root)


@pytest.mark.parametrize("fixture", ["tiny_cpu_package", "full_cpu_package", "tiny_faithful_package",
                                     "full_builder_cpu_package"])  # fmt: skip
def test_weight_bytes_per_file_equal_an_independent_sum_synthetic(fixture: str, request: pytest.FixtureRequest) -> None:
    root = request.getfixturevalue(fixture)
    report = fit_package(root)
    assert dict(report.base.files) == _independent_file_bytes(root)
    # classes partition the bytes: every tensor is in exactly one class
    classed = sum(sum(p.values()) for p in report.base.weights.values()) + sum(e.total for e in report.base.experts)
    assert classed <= sum(report.base.files.values())
    assert report.base.experts and all(e.bytes_per_expert > 0 for e in report.base.experts)


def _present_bytes(model: Path, past: int, head_size: int) -> int:
    import onnxruntime as ort

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    dtypes = {"tensor(int64)": np.int64, "tensor(float16)": np.float16, "tensor(float)": np.float32,
              "tensor(int32)": np.int32}  # fmt: skip
    sizes = {"total_sequence_length": past + 1, "past_sequence_length": past, "sequence_length": 1,
             "kv_cache_dim": head_size}  # fmt: skip
    feeds = {}
    for inp in session.get_inputs():
        shape = [d if isinstance(d, int) else 1 if "batch" in d else sizes[d] for d in inp.shape]
        dtype = dtypes[inp.type]
        if inp.name == "position_ids":
            feeds[inp.name] = np.full(shape, past, dtype)
        elif inp.name in ("input_ids", "attention_mask"):
            feeds[inp.name] = np.ones(shape, dtype)
        else:
            feeds[inp.name] = np.zeros(shape, dtype)
    names = [o.name for o in session.get_outputs() if o.name.startswith("present")]
    return sum(a.nbytes for a in session.run(names, feeds))


@pytest.mark.parametrize("which", ["tiny_cpu_package", "int4-cpu", "int4-cpu-mtp"])
def test_state_bytes_equal_present_outputs_of_a_real_session(which: str, request: pytest.FixtureRequest) -> None:
    root = request.getfixturevalue(which) if which.endswith("_package") else REAL / which
    decoder = root / "model.onnx"
    head_size = json.loads((root / "genai_config.json").read_text())["model"]["decoder"]["head_size"]
    short, long = 8, 40
    real_short = _present_bytes(decoder, short - 1, head_size)
    real_long = _present_bytes(decoder, long - 1, head_size)
    report = fit_package(root, contexts=[short, long])
    rows = {r.context: r for r in report.rows}
    # the decoder's own state (an MTP graph's KV is added below the decoder's)
    decoder_state = {c: sum(s.nbytes(c) for s in _states(root, decoder, head_size)) for c in (short, long)}
    assert decoder_state[short] == real_short
    assert decoder_state[long] == real_long
    growth = (real_long - real_short) // (long - short)
    assert growth > 0
    assert rows[long].memory.state_total - rows[short].memory.state_total >= growth * (long - short)
    if which != "int4-cpu-mtp":
        assert rows[short].memory.state_total == real_short
        assert rows[long].memory.state_total == real_long
        assert rows[short].memory.fixed_state == real_short - growth * short


def _states(root: Path, decoder: Path, head_size: int) -> tuple:  # type: ignore[type-arg]
    from q38.package.memory import graph_memory

    return graph_memory(decoder, root, head_size=head_size).states


def test_mtp_graph_kv_is_counted_beside_the_decoder() -> None:
    root = REAL / "int4-cpu-mtp"
    report = fit_package(root, contexts=[64])
    head_size = 16
    decoder_only = sum(s.nbytes(64) for s in _states(root, root / "model.onnx", head_size))
    mtp = sum(s.nbytes(64) for s in _states(root, root / "mtp.onnx", head_size))
    assert mtp > 0
    assert report.rows[0].memory.state_total == decoder_only + mtp


def test_cli_text_json_and_plot(tiny_cpu_package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "fit.png"
    assert main(["fit", str(tiny_cpu_package), "--gpu", "24GiB", "--context", "4096,32k", "--plot", str(png)]) == 0
    text = capsys.readouterr().out
    assert "gpu 24GiB" in text and "fits" in text and "estimate (not exact" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["fit", str(tiny_cpu_package), "--json", "--context", "100", "--batch", "3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    row = doc["rows"][0]
    assert row["context"] == 100 and row["batch"] == 3 and row["verdict"] == "n/a"
    assert row["device"]["exact_total"] == row["device"]["weights"] + row["device"]["experts_resident"] + row["device"]["state"]
    assert row["estimate"]["total"] > 0 and row["estimate"]["total"] not in (row["device"]["exact_total"],)
    # batch scales the state exactly
    one = fit_package(tiny_cpu_package, contexts=[100]).rows[0].memory.state_total
    assert row["device"]["state"] == 3 * one


def test_cli_verdict_over_when_state_exceeds_the_gpu_exits_1(tiny_cpu_package: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    # An over budget is a failed fit: exit 1 after the report (docs/fit.md), in JSON and in text.
    assert main(["fit", str(tiny_cpu_package), "--gpu", "1MiB", "--json"]) == 1
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["verdict"] == "over" and row["headroom"] < 0
    assert main(["fit", str(tiny_cpu_package), "--gpu", "1MiB"]) == 1
    assert "over" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["24", "3090", "24.5"])
def test_cli_a_gpu_size_without_a_unit_is_refused_with_the_hint(value: str, tiny_cpu_package: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    # `--gpu 24` was a 24-byte device and `--gpu 3090` 3.0 KiB, both judged "over" with exit 0.
    assert main(["fit", str(tiny_cpu_package), "--gpu", value]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"q38 fit: error: --gpu {value!r} has no unit; give a number with a unit: 24GiB, 24GB, "
                            "512MiB or 4096B (GB = 10^9 bytes, GiB = 2^30), or a class (a10, a100-40gb, a100-80gb, "
                            "h100, h200, l4, l40s, rtx3090, rtx4080, rtx4090, rtx5090)\n")


@pytest.mark.parametrize(("value", "size"), [("24GiB", 24 << 30), ("24GB", 24 * 10**9), ("512MiB", 512 << 20),
                                             ("1.5GiB", 3 << 29), ("4096B", 4096), ("24G", 24 * 10**9), ("rtx4090", 24 << 30)])
def test_gpu_sizes_with_a_unit_and_classes_are_read(value: str, size: int) -> None:
    assert parse_gpu(value)[1] == size


@pytest.mark.parametrize("argv", [["--gpu", "24XB"], ["--context", "0"], ["--batch", "0"], ["--gpu", "h9000"]])
def test_cli_bad_flags_are_one_line_exit_2(argv: list[str], tiny_cpu_package: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    png = tmp_path / "x.png"
    try:
        code = main(["fit", str(tiny_cpu_package), *argv, "--plot", str(png)])
    except SystemExit as exc:  # argparse's own refusal
        code = int(exc.code or 0)
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("q38 fit: error:") and err.count("\n") == 1
    assert not png.exists()


def test_cli_refuses_an_existing_plot_and_a_missing_package(tiny_cpu_package: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    png = tmp_path / "x.png"
    png.write_bytes(b"keep")
    assert main(["fit", str(tiny_cpu_package), "--plot", str(png)]) == 2
    assert png.read_bytes() == b"keep"
    assert main(["fit", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert all(line.startswith("q38 fit: error:") for line in err) and len(err) == 2
