"""ORT's MoE expert-counter state file (issue 29), against the installed onnxruntime's own loader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from q38.cli import main
from q38.errors import ProfileError
from q38.package.profile import read_profile
from q38.profile.ort_state import decoder_nodes, parse_state, state_to_counts


def _ort_loads(graph: Path, state: Path) -> str | None:
    """None if a real session starts from ``state``; else ORT's message."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.enable_moe_expert_counting", "1")
    options.add_session_config_entry("session.moe_expert_counter_state_file", str(state))
    try:
        ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        return str(exc)
    return None


@pytest.fixture(scope="module")
def written(tiny_cpu_package: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ort_state")
    assert main(["profile", str(tiny_cpu_package), "-o", str(out / "p.bin"), "--prompt-count", "2", "--tokens", "4",
                 "--ort-state", str(out / "state.txt")]) == 0  # fmt: skip
    return out


def test_our_state_file_loads_in_a_real_session_and_converts_back_exactly(written: Path, tiny_cpu_package: Path) -> None:
    state = written / "state.txt"
    assert state.read_text().splitlines()[0] == "moe_expert_state 1"
    assert _ort_loads(tiny_cpu_package / "model.onnx", state) is None
    back = written / "back.bin"
    assert main(["profile", str(tiny_cpu_package), "--from-ort-state", str(state), "-o", str(back)]) == 0
    assert back.read_bytes() == (written / "p.bin").read_bytes()
    assert read_profile(back).counts.sum() > 0


def test_node_indices_are_orts_own(tiny_cpu_package: Path, tmp_path: Path) -> None:
    nodes, experts = decoder_nodes(tiny_cpu_package)
    assert experts == 8 and len(nodes) == 9
    assert [n.index for n in nodes] == sorted(n.index for n in nodes)
    for node in nodes[:2]:  # the index ORT accepts, and the next one it refuses
        ok, bad = tmp_path / "ok.txt", tmp_path / "bad.txt"
        ok.write_text(f"moe_expert_state 1\nmain {node.index} QMoE 0 3\n")
        bad.write_text(f"moe_expert_state 1\nmain {node.index + 1} QMoE 0 3\n")
        assert _ort_loads(tiny_cpu_package / "model.onnx", ok) is None
        assert "Unknown MoE counter node" in str(_ort_loads(tiny_cpu_package / "model.onnx", bad))


@pytest.mark.parametrize(
    "text",
    [
        "moe_expert_state 2\n",
        "moe_expert_state 1\n46 QMoE 0 0.5\n",
        "moe_expert_state 1\nmain 46 QMoE 0 0.5 extra\n",
        "moe_expert_state 1\nmain 46 QMoE 0 -1\n",
        "moe_expert_state 1\nmain 46 QMoE 0 0.5\nmain 46 QMoE 0 0.5\n",
        "moe_expert_state 1\nmain 46 QMoE 0 0.5\n",
        "moe_expert_state 1\nmain 46 QMoE 0 7\nmain 46 QMoE 1 2.5\n",
    ],
)
def test_parser_agrees_with_orts_loader_on_the_record_syntax(text: str, tiny_cpu_package: Path, tmp_path: Path) -> None:
    nodes, experts = decoder_nodes(tiny_cpu_package)
    text = text.replace(" 46 ", f" {nodes[0].index} ")
    path = tmp_path / "s.txt"
    path.write_text(text)
    ort_error = _ort_loads(tiny_cpu_package / "model.onnx", path)
    try:
        state_to_counts(parse_state(text, source="s"), nodes, experts, source="s")
        ours = None
    except ProfileError as exc:
        ours = str(exc)
    assert (ours is None) == (ort_error is None), (ours, ort_error)


def test_fractional_counters_scale(tiny_cpu_package: Path) -> None:
    nodes, experts = decoder_nodes(tiny_cpu_package)
    state = parse_state(f"moe_expert_state 1\nmain {nodes[1].index} QMoE 2 0.25\n", source="s")
    counts = state_to_counts(state, nodes, experts, source="s")
    assert counts[1, 2] == 250_000 and int(np.count_nonzero(counts)) == 1


def test_a_state_of_another_graph_is_one_line_exit_2(written: Path, tiny_cpu_package: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    bad = tmp_path / "s.txt"
    bad.write_text("moe_expert_state 1\nmain 999999 QMoE 0 1\n")
    out = tmp_path / "p.bin"
    assert main(["profile", str(tiny_cpu_package), "--from-ort-state", str(bad), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "node 999999" in err and "optimization level" in err
    assert not out.exists()
