"""``q38 build`` with an exporter's output folder as the target bundle.

An exporter (the onnxruntime-genai builder) writes its own ``genai_config.json`` (genai surface)
beside graphs whose KV cache's last dim is the symbol ``kv_cache_dim`` and that may have no
``hidden_states`` output. Invariants guarded:
* the build reads the dimensions from the upstream config where the graph leaves them symbolic
  (head_size, hidden_size), from the graph where it has them, and the built v12b config carries
  them (plus context length, eos, search keys the v12b surface knows); the output passes check;
* without the upstream config the build refuses in one line naming the symbolic dimension;
* an upstream config that contradicts the graph is refused naming both values;
* the exporter folder is byte-identical afterwards (and nothing is left next to the output).
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from support.fsnap import tree_snapshot
from support.genai_packages import FIXTURES, copy_package, edit_genai_config

from q38.cli import main


def _symbolic_kv(graph: Path) -> None:
    """Make every KV cache input/output's last dim the builder's symbol, as real exports have it."""
    model = onnx.load(graph, load_external_data=False)
    for value in [*model.graph.input, *model.graph.output]:
        if ".key" in value.name or ".value" in value.name:
            dim = value.type.tensor_type.shape.dim[-1]
            dim.Clear()
            dim.dim_param = "kv_cache_dim"
    graph.write_bytes(model.SerializeToString())


@pytest.fixture(scope="module")
def exporter_folder(tiny_cpu_package: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An exporter-like folder: genai_config.json (qwen3_5_moe_text), symbolic kv_cache_dim."""
    real = FIXTURES / "int4-cpu"
    if real.is_dir():
        return real
    out = tmp_path_factory.mktemp("exporter") / "export"
    assert main(["export-genai", str(tiny_cpu_package), str(out), "--link", "copy"]) == 0
    _symbolic_kv(out / "model.onnx")
    return out


@pytest.fixture(scope="module")
def head_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from q38.synth import synthesize

    return synthesize(tmp_path_factory.mktemp("b") / "bundles", preset="tiny", variant="cpu", bundles=True) / "head"


def _build(target: Path, head: Path, out: Path) -> int:
    return main(["build", str(out), "--target", str(target), "--head", str(head), "--layout", "layered", "--copy"])


def test_dimensions_come_from_the_upstream_config_where_the_graph_is_symbolic(
    exporter_folder: Path, head_bundle: Path, tmp_path: Path
) -> None:
    upstream = json.loads((exporter_folder / "genai_config.json").read_text())
    graph = onnx.load(exporter_folder / "model.onnx", load_external_data=False)
    kv = next(v for v in graph.graph.input if v.name.endswith(".key"))
    assert kv.type.tensor_type.shape.dim[-1].dim_param == "kv_cache_dim"
    before = tree_snapshot(exporter_folder)
    assert _build(exporter_folder, head_bundle, tmp_path / "out") == 0
    assert tree_snapshot(exporter_folder) == before
    built = json.loads((tmp_path / "out" / "target" / "genai_config.json").read_text())
    up, dec = upstream["model"], built["model"]["decoder"]
    for key in ("head_size", "hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers"):
        assert dec[key] == up["decoder"][key], key
    assert dec["num_key_value_heads"] == kv.type.tensor_type.shape.dim[1].dim_value
    assert built["model"]["type"] == "qwen38_flash_graph"
    assert built["model"]["context_length"] == up["context_length"] == built["model"]["qwen38_graph"]["kv_capacity"]
    eos = up["eos_token_id"]
    assert built["model"]["eos_token_id"] == (eos if isinstance(eos, list) else [eos])
    assert built["model"]["vocab_size"] == up["vocab_size"]
    assert dec["inputs"]["past_key_names"] == up["decoder"]["inputs"]["past_key_names"]
    assert set(built["search"]) <= {"max_length", "min_length", "do_sample", "top_k", "top_p", "temperature",
                                    "num_beams", "repetition_penalty", "chunk_size"}  # fmt: skip
    assert main(["check", str(tmp_path / "out")]) == 0


def test_without_the_upstream_config_a_symbolic_dimension_is_refused_in_one_line(
    exporter_folder: Path, head_bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = copy_package(exporter_folder, tmp_path / "export")
    (folder / "genai_config.json").unlink()
    work = tmp_path / "w"
    work.mkdir()
    assert _build(folder, head_bundle, work / "out") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "cannot derive " in err and "head_size (the graph's past_key_values.*.key input (last dim))" in err
    assert err.endswith("symbolic or missing in the graph, and the bundle has no genai_config.json giving them\n")
    assert list(work.iterdir()) == []


def test_an_upstream_config_contradicting_the_graph_is_refused(
    exporter_folder: Path, head_bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = copy_package(exporter_folder, tmp_path / "export")
    edit_genai_config(folder, lambda d: d["model"]["decoder"].update({"num_key_value_heads": 7}))
    assert _build(folder, head_bundle, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "genai_config.json says num_key_value_heads 7, the graph's past_key_values.*.key input (dim 1) says" in err
    assert not (tmp_path / "out").exists()


def test_upstream_search_values_of_every_type_are_carried(
    exporter_folder: Path, head_bundle: Path, tmp_path: Path
) -> None:
    """Every search key the v12b surface knows is carried with its value: int keys (max_length,
    top_k, ...), float keys given a float or an integer, and do_sample's boolean. (The upstream
    parser refuses a value of another type, naming the key.)"""
    folder = copy_package(exporter_folder, tmp_path / "export")
    search = {"max_length": 64, "min_length": 2, "top_k": 7, "num_beams": 1, "chunk_size": 8, "do_sample": True,
              "top_p": 0.9, "temperature": 1, "repetition_penalty": 1.25}

    def edit(data: dict) -> None:  # type: ignore[type-arg]
        data["search"] = dict(search)

    edit_genai_config(folder, edit)
    assert _build(folder, head_bundle, tmp_path / "out") == 0
    built = json.loads((tmp_path / "out" / "target" / "genai_config.json").read_text())["search"]
    assert {k: built.get(k) for k in search} == search
