"""``q38 profile``: expert-selection counts over a workload, on both surfaces and the real
fixtures, and the hit rates ``q38 offload`` reports from them.

Invariants guarded:
- the profile is valid STRP v1, one row per QMoE node (decoder layers, then the MTP where it
  runs: inside the v12b target, or mtp.onnx), each row summing to rows processed x k;
- the counts equal an independent count (onnx-level taps, the test's own decode loop);
- the same package, prompts and seed give a byte-identical file; another seed another one;
- a package whose QMoE cannot run on the CPU (FP8 experts) is refused in one line naming the
  node, and one whose other ops have no CPU kernel names that node; nothing is written;
- Ctrl-C (KeyboardInterrupt) while writing leaves neither the output nor a temporary file;
- with routers skewed on purpose, the profiled plan's reported hit rate beats the uniform
  plan's, and equals the share of an independent re-run's selections on the plan's resident
  experts; ``q38 profile --plan`` prints the same figure offload records in its manifest.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from support.genai_packages import real_package_dirs
from support.profile_kit import independent_selections, skew_routers

from q38.cli import main
from q38.offload.hitrate import resident_experts
from q38.package import read_profile
from q38.profile.run import profile_package
from q38.profile.workload import Workload, synthetic_prompts

PROMPTS = ((5, 6, 7, 8), (100, 3, 77, 21, 9), (400, 401))


def _profile_cli(pkg: Path, out: Path, *extra: str) -> int:
    return main(["profile", str(pkg), "-o", str(out), *extra])


def test_research_counts_match_an_independent_count(tiny_cpu_package: Path, tmp_path: Path) -> None:
    run = profile_package(tiny_cpu_package, Workload(PROMPTS, 5, "test"))
    assert [s.name for s in run.sites] == [f"/model/layers.{i}/moe/QMoE" for i in range(8)] + ["/mtp/0/moe/QMoE"]
    rows = sum(len(p) + 5 - 1 for p in PROMPTS)
    assert run.rows_processed == {"model.onnx": rows} and run.generated == 15
    assert run.counts.sum(axis=1).tolist() == [rows * 2] * 9
    picked = independent_selections(tiny_cpu_package / "model.onnx", PROMPTS, 5)
    for row, steps in zip(run.counts, picked):
        assert row.tolist() == np.bincount(np.concatenate(steps).reshape(-1), minlength=8).tolist()


def test_builder_counts_the_mtp_graph_too(tiny_builder_cpu_package: Path) -> None:
    run = profile_package(tiny_builder_cpu_package, Workload(PROMPTS, 4, "test"))
    assert [(s.graph, s.name) for s in run.sites][-2:] == [("model.onnx", "/model/layers.7/moe/QMoE"),
                                                           ("mtp.onnx", "/model/layers.0/moe/QMoE")]
    rows = sum(len(p) + 3 for p in PROMPTS)
    assert run.rows_processed == {"model.onnx": rows, "mtp.onnx": rows}
    assert run.counts.sum(axis=1).tolist() == [2 * rows] * 9
    picked = independent_selections(tiny_builder_cpu_package / "model.onnx", PROMPTS, 4)
    for row, steps in zip(run.counts[:8], picked):
        assert row.tolist() == np.bincount(np.concatenate(steps).reshape(-1), minlength=8).tolist()


@pytest.mark.parametrize("src", [p for p in real_package_dirs() if "cpu" in p.name], ids=lambda p: p.name)
def test_real_cpu_fixtures_profile(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "p.bin"
    assert _profile_cli(src, out, "--prompt-count", "2", "--prompt-length", "4", "--tokens", "3") == 0
    profile = read_profile(out)
    run = profile_package(src, Workload(synthetic_prompts(2, 4, 512, 0), 3, "test"))
    assert profile.counts.tolist() == run.counts.tolist()
    assert profile.counts.sum(axis=1).tolist() == [2 * 12] * profile.num_layers  # 2 x (4 + 2) rows, k = 2
    assert profile.num_layers == 4 + (src / "mtp.onnx").is_file()


def test_deterministic_per_seed(tiny_builder_cpu_package: Path, tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.bin", tmp_path / "b.bin", tmp_path / "c.bin"
    for path, seed in ((a, "3"), (b, "3"), (c, "4")):
        assert _profile_cli(tiny_builder_cpu_package, path, "--prompt-count", "2", "--tokens", "3", "--seed", seed) == 0
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_prompt_file_of_token_ids(tiny_cpu_package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("5 6 7 8\n\n100,3,77,21,9\n400 401\n")
    out = tmp_path / "p.bin"
    assert _profile_cli(tiny_cpu_package, out, "--prompts", str(prompts), "--tokens", "5", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["profile"]["prompts"] == 3 and doc["profile"]["generated_tokens"] == 15
    want = profile_package(tiny_cpu_package, Workload(PROMPTS, 5, "test")).counts
    assert read_profile(out).counts.tolist() == want.tolist()
    assert [layer["counts"] for layer in doc["profile"]["layers"]] == want.tolist()


def test_text_prompts_without_a_tokenizer_are_refused(tiny_cpu_package: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("5 6 7\nhello world\n")
    assert _profile_cli(tiny_cpu_package, tmp_path / "p.bin", "--prompts", str(prompts)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"--prompts {prompts}:2: 'hello world' is not a line of token ids, and " in err
    assert not (tmp_path / "p.bin").exists()


def test_qmoe_without_a_cpu_kernel_is_refused_by_name(tiny_builder_faithful_package: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src"
    shutil.copytree(tiny_builder_faithful_package, src)
    assert _profile_cli(src, tmp_path / "p.bin") == 2
    err = capsys.readouterr().err
    assert err == (f"q38 profile: error: {src / 'mtp.onnx'}: QMoE node '/model/layers.0/moe/QMoE' cannot run on the "
                   "CPU: its expert weights are float8e4m3fn (the CPU QMoE kernel takes uint8 only)\n")
    assert not list(tmp_path.glob("*.bin")) and not list(tmp_path.glob(".p.bin*"))


def test_other_ops_without_cpu_kernel_are_named(tiny_faithful_package: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert _profile_cli(tiny_faithful_package, tmp_path / "p.bin") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"q38 profile: error: {tiny_faithful_package / 'model.onnx'}: node '")
    assert "has no CPU kernel in onnxruntime" in err and err.count("\n") == 1


def test_interrupt_while_writing_leaves_nothing(tiny_cpu_package: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from q38.commands import profile as command

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        command._write_new(tmp_path / "p.bin", b"STRP")
    assert list(tmp_path.iterdir()) == []


def _skewed(src: Path, dest: Path) -> Path:
    """Even QMoE nodes route nearly every token to experts 6 and 7; odd ones are left as they are."""
    shutil.copytree(src, dest)
    bias = np.zeros(8, np.float32)
    bias[6:] = 30.0
    assert skew_routers(dest / "model.onnx", lambda i, _name: bias if i % 2 == 0 else None) == 5
    return dest


@pytest.mark.slow
def test_skewed_routers_profiled_plan_beats_uniform_and_matches_a_rerun(
        tiny_cpu_package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _skewed(tiny_cpu_package, tmp_path / "skewed")
    prompts = synthetic_prompts(4, 6, 512, 11)
    lines = tmp_path / "prompts.txt"
    lines.write_text("".join(" ".join(map(str, p)) + "\n" for p in prompts))
    profile = tmp_path / "p.bin"
    assert _profile_cli(src, profile, "--prompts", str(lines), "--tokens", "6") == 0
    counts = read_profile(profile).counts
    assert counts[0, 6:].sum() == counts[0].sum()  # the skew took: layer 0 only uses experts 6 and 7
    total = 3 * 9
    reports = {}
    for mode, extra in (("profiled", []), ("uniform", ["--uniform-profile-slots"])):
        capsys.readouterr()
        assert main(["offload", str(tmp_path / mode), "--from-package", str(src), "--offload-mode", "auto",
                     "--expert-profile", str(profile), "--total-resident-slots", str(total), "--json", *extra]) == 0
        reports[mode] = json.loads(capsys.readouterr().out)
    profiled, uniform = reports["profiled"]["hit_rates"][0], reports["uniform"]["hit_rates"][0]
    assert profiled["share"] > uniform["share"]
    assert [h["resident"] for h in uniform["layers"]] == [3] * 9
    assert sum(h["resident"] for h in profiled["layers"]) == total
    assert profiled["layers"][0]["resident"] == 2 and profiled["layers"][0]["share"] == 1.0
    # The independent count: re-run the workload, count selections on the plan's resident experts.
    picked = independent_selections(src / "model.onnx", prompts, 6)
    hits = selections = 0
    for layer, steps in zip(profiled["layers"], picked):
        resident = set(resident_experts(counts[layer["row"]], layer["resident"]).tolist())
        chosen = np.concatenate(steps).reshape(-1)
        hits += int(np.isin(chosen, list(resident)).sum())
        selections += chosen.size
    assert (hits, selections) == (profiled["hits"], profiled["selections"])
    manifest = json.loads((tmp_path / "profiled" / "package_manifest.json").read_text())
    assert manifest["extra"]["hit_rates"] == reports["profiled"]["hit_rates"]
    capsys.readouterr()
    assert main(["profile", str(src), "--plan", "--expert-profile", str(profile), "--total-resident-slots",
                 str(total), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert plan["hit_rates"] == reports["profiled"]["hit_rates"]
    # The chain ends in a package q38 check accepts: the verify graphs' chained drafts share
    # /mtp/0/'s expert bank and have no profile row of their own (CFG-GRAPH-002 counts banks).
    capsys.readouterr()
    assert main(["check", str(tmp_path / "profiled"), "--ort-version", "1.32.0"]) == 0, capsys.readouterr().out
