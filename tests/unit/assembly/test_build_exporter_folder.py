"""``q38 build`` with an exporter's output folder as the target bundle.

An exporter (the onnxruntime-genai builder) writes its own ``genai_config.json`` (genai surface)
beside graphs whose KV cache's last dim is the symbol ``kv_cache_dim`` and that may have no
``hidden_states`` output. Invariants guarded:
* the build reads the dimensions from the upstream config where the graph leaves them symbolic
  (head_size, hidden_size), from the graph where it has them, and the built v12b config carries
  them (plus context length, eos, search keys the v12b surface knows); the output passes check;
* without the upstream config the build refuses in one line naming the symbolic dimension;
* an upstream config that contradicts the graph is refused naming both values;
* the exporter folder is byte-identical afterwards (and nothing is left next to the output);
* a decoder input / output binding the v12b surface has no key for is refused in one line naming
  the key, the graph name and how many more there are;
* bos / pad token ids and the decoder's log_id are carried (defaults 1, 0, "q38" where absent),
  and a decoder without session_options builds;
* what the built package will not name (graph sections besides the decoder, runtime profiles) is
  one warning listing exactly those; a decoder-only config warns of nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


# --------------------------------------------------------------------------- what the upstream config supplies
_NO_BINDING = "the v12b surface has no binding for"
_NOT_NAMED = "the v12b surface has no "


def _built(out: Path) -> dict[str, Any]:
    return json.loads((out / "target" / "genai_config.json").read_text())


def _build_edited(
    exporter_folder: Path, head_bundle: Path, tmp_path: Path, edit: Callable[[dict[str, Any]], None]
) -> tuple[int, Path]:
    folder = copy_package(exporter_folder, tmp_path / "export")
    edit_genai_config(folder, edit)
    out = tmp_path / "out"
    return _build(folder, head_bundle, out), folder


def _not_named_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "q38.assembly.configure" and r.levelno == logging.WARNING and _NOT_NAMED in r.getMessage()]  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "first", "suffix"),
    [
        ({"block_table": "paged_blocks"}, ("block_table", "paged_blocks"), ""),
        ({"block_table": "paged_blocks", "attention_metadata": "attn_meta"}, ("attention_metadata", "attn_meta"),
         " (nor 1 more)"),
        ({"cumulative_sequence_lengths": "cu_seqlens", "block_table": "paged_blocks", "attention_metadata": "attn_meta"},
         ("attention_metadata", "attn_meta"), " (nor 2 more)"),
    ],
    ids=["one", "two", "three"],
)  # fmt: skip
def test_a_decoder_input_the_v12b_surface_cannot_bind_is_refused_naming_it(
    exporter_folder: Path, head_bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    extra: dict[str, str], first: tuple[str, str], suffix: str,
) -> None:  # fmt: skip
    rc, folder = _build_edited(exporter_folder, head_bundle, tmp_path,
                               lambda d: d["model"]["decoder"]["inputs"].update(extra))  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2
    key, graph_name = first
    line = (
        f"{folder / 'genai_config.json'}: model.decoder.inputs.{key}: {_NO_BINDING} graph input '{graph_name}'"
        f"{suffix}; build from an export without it (e.g. not paged)\n"
    )
    assert err.endswith(line), err
    assert err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_a_decoder_output_the_v12b_surface_cannot_bind_is_refused_naming_it(
    exporter_folder: Path, head_bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, folder = _build_edited(exporter_folder, head_bundle, tmp_path,
                               lambda d: d["model"]["decoder"]["outputs"].update({"output_cross_qk_names": "qk.%d"}))  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2
    assert err.endswith(
        f"{folder / 'genai_config.json'}: model.decoder.outputs.output_cross_qk_names: {_NO_BINDING} graph output "
        "'qk.%d'; build from an export without it (e.g. not paged)\n"
    ), err


def test_an_upstream_num_attention_heads_contradicting_the_attention_nodes_is_refused(
    exporter_folder: Path, head_bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    heads = json.loads((exporter_folder / "genai_config.json").read_text())["model"]["decoder"]["num_attention_heads"]
    rc, _ = _build_edited(exporter_folder, head_bundle, tmp_path,
                          lambda d: d["model"]["decoder"].update({"num_attention_heads": heads * 2}))  # fmt: skip
    assert rc == 2
    err = capsys.readouterr().err
    assert f"genai_config.json says num_attention_heads {heads * 2}, the attention nodes' num_heads attribute says {heads}" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("bos", "pad"), [(5, 3), (0, 7), (None, None)], ids=["given", "zero-bos", "absent"])
def test_upstream_token_ids_are_carried_and_absent_ones_default(
    exporter_folder: Path, head_bundle: Path, tmp_path: Path, bos: int | None, pad: int | None
) -> None:
    def edit(data: dict) -> None:  # type: ignore[type-arg]
        for key, value in (("bos_token_id", bos), ("pad_token_id", pad)):
            if value is None:
                data["model"].pop(key, None)
            else:
                data["model"][key] = value

    rc, _ = _build_edited(exporter_folder, head_bundle, tmp_path, edit)
    assert rc == 0
    model = _built(tmp_path / "out")["model"]
    assert model["bos_token_id"] == (1 if bos is None else bos)
    assert model["pad_token_id"] == (0 if pad is None else pad)


@pytest.mark.parametrize(("log_id", "expected"), [("myrun", "myrun"), (None, "q38")], ids=["given", "absent"])
def test_the_upstream_decoder_log_id_is_carried_else_q38(
    exporter_folder: Path, head_bundle: Path, tmp_path: Path, log_id: str | None, expected: str
) -> None:
    def edit(data: dict) -> None:  # type: ignore[type-arg]
        so = data["model"]["decoder"].setdefault("session_options", {})
        so.pop("log_id", None)
        if log_id is not None:
            so["log_id"] = log_id
        so["session.disable_prepacking"] = "1"

    rc, _ = _build_edited(exporter_folder, head_bundle, tmp_path, edit)
    assert rc == 0
    so = _built(tmp_path / "out")["model"]["decoder"]["session_options"]
    assert so["log_id"] == expected
    assert so["session.disable_prepacking"] == "1"


def test_an_upstream_decoder_without_session_options_builds_with_the_q38_log_id(
    exporter_folder: Path, head_bundle: Path, tmp_path: Path
) -> None:
    rc, _ = _build_edited(exporter_folder, head_bundle, tmp_path,
                          lambda d: d["model"]["decoder"].pop("session_options", None))  # fmt: skip
    assert rc == 0
    assert _built(tmp_path / "out")["model"]["decoder"]["session_options"] == {"log_id": "q38"}
    assert main(["check", str(tmp_path / "out")]) == 0


def test_a_decoder_only_upstream_config_warns_of_nothing_left_out(
    exporter_folder: Path, head_bundle: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    upstream = json.loads((exporter_folder / "genai_config.json").read_text())
    assert set(upstream["model"]) & {"mtp", "engram"} == set() and "runtime_profiles" not in upstream
    caplog.set_level(logging.WARNING)
    assert _build(exporter_folder, head_bundle, tmp_path / "out") == 0
    assert _not_named_warnings(caplog) == []


def test_runtime_profiles_the_v12b_package_does_not_name_are_warned_of(
    exporter_folder: Path, head_bundle: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    profiles = [
        {"id": "small", "eligibility": {"minimum_total_device_memory_bytes": 1, "maximum_total_device_memory_bytes": 1000},
         "overlay": {"search": {"chunk_size": 8}}},
        {"id": "large", "eligibility": {"minimum_total_device_memory_bytes": 1001}, "overlay": {"search": {"chunk_size": 64}}},
    ]  # fmt: skip
    caplog.set_level(logging.WARNING)
    rc, folder = _build_edited(exporter_folder, head_bundle, tmp_path,
                               lambda d: d.update({"runtime_profiles": profiles}))  # fmt: skip
    assert rc == 0
    assert _not_named_warnings(caplog) == [
        (f"{folder / 'genai_config.json'}: {_NOT_NAMED}runtime_profiles (2): the built package runs the decoder "
         "without it")
    ]
    assert "runtime_profiles" not in _built(tmp_path / "out")


_PROFILE = {"id": "a", "eligibility": {"minimum_total_device_memory_bytes": 1}, "overlay": {"search": {"chunk_size": 8}}}


def test_graph_sections_besides_the_decoder_are_warned_of(
    head_bundle: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    real = FIXTURES / "int4-cpu-mtp"
    if not real.is_dir():
        pytest.skip("the committed int4-cpu-mtp fixture is absent")
    caplog.set_level(logging.WARNING)
    rc, folder = _build_edited(real, head_bundle, tmp_path, lambda d: d.update({"runtime_profiles": [_PROFILE]}))
    assert rc == 0
    assert _not_named_warnings(caplog) == [
        (f"{folder / 'genai_config.json'}: {_NOT_NAMED}model.mtp (mtp.onnx), runtime_profiles (1): the built "
         "package runs the decoder without it")
    ]
    assert "mtp" not in _built(tmp_path / "out")["model"]


@pytest.mark.parametrize(
    ("key", "value", "fits"),
    [
        ("do_sample", True, True), ("do_sample", 1, False), ("do_sample", 0.0, False),
        ("top_k", True, False), ("top_k", 7, True), ("top_k", 7.5, False),
        ("top_p", False, False), ("top_p", 1, True), ("top_p", 0.5, True),
        ("no_repeat_ngram_size", 3, False),
    ],
)  # fmt: skip
def test_only_search_values_of_the_v12b_type_are_carried(key: str, value: object, fits: bool) -> None:
    """The genai schema already refuses a bool for a number (and the reverse); the v12b filter
    holds on its own, bools being ints in Python."""
    from q38.assembly.configure import _search_value_ok

    assert _search_value_ok(key, value) is fits
