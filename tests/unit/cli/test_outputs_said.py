"""Outputs are said, never silent or surprising (issue 37 item 5).

* every writing command ends with one line naming what it wrote (``q38 synth`` said nothing);
* ``check --output FILE`` never replaces a file unless ``--force`` (it overwrote silently), and
  ``--write-baseline`` says it wrote;
* ``check --format github`` prints a ``::notice`` for a clean package (it printed nothing);
* check's header says which catalogue rules it did not apply and why (``q38 rules`` lists 99,
  check said 97 with no word on the other two);
* ``optimize --explain`` names each candidate's graph (one node name showed up three times);
* ``check --ort`` says a note every session shares once, not on every session line.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from contracts.catalogue import catalogue
from contracts.runner import check_package
from q38.cli import main

NOT_APPLIED = ("(not applied: OFFLOAD-ENV-001, OFFLOAD-ENV-002: environment-variable rules, which judge the process "
               "that runs onnxruntime, not the package)")


def test_synth_says_what_it_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "pkg"
    assert main(["synth", str(out)]) == 0
    assert capsys.readouterr().out == f"q38 synth: wrote {out} (flat package: tiny preset, cpu variant, research exporter)\n"
    assert main(["synth", str(tmp_path / "b"), "--bundles", "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines()[-1] == (
        f"q38 synth: wrote {tmp_path / 'b'} (source bundles: tiny preset, cpu variant, research exporter)")


def test_check_output_never_replaces_a_file_unless_forced(tiny_cpu_package: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    report = tmp_path / "report.txt"
    report.write_text("keep")
    assert main(["check", str(tiny_cpu_package), "--output", str(report)]) == 2
    assert capsys.readouterr().err == (
        f"q38 check: error: --output {report}: exists (q38 never replaces a file; --force replaces it)\n")
    assert report.read_text() == "keep"
    assert main(["check", str(tiny_cpu_package), "--output", str(report), "--force"]) == 0
    assert capsys.readouterr().out == f"q38 check: wrote {report} (the text report: OK, 0 error(s))\n"
    assert report.read_text().splitlines()[-1].startswith("OK: 0 error(s)")
    assert main(["check", str(tiny_cpu_package), "--force"]) == 2
    assert capsys.readouterr().err == "q38 check: error: --force lets --output FILE replace a file; there is no --output\n"


def test_check_write_baseline_says_it_wrote(tiny_cpu_package: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    baseline = tmp_path / "baseline.json"
    assert main(["check", str(tiny_cpu_package), "--write-baseline", str(baseline)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"q38 check: wrote {baseline} (the baseline: 0 result(s) recorded)"
    assert baseline.is_file()


def test_github_format_gives_a_clean_package_a_notice(tiny_cpu_package: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tiny_cpu_package), "--format", "github"]) == 0
    rules = len(check_package(tiny_cpu_package).rules_checked)
    version = check_package(tiny_cpu_package).ort_version
    assert capsys.readouterr().out == (
        f"::notice title=q38 check::{tiny_cpu_package}: OK: 0 error(s), 0 warning(s); {rules} rules of "
        f"onnxruntime {version}\n")


def test_check_header_says_which_rules_it_did_not_apply_and_why(tiny_cpu_package: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    report = check_package(tiny_cpu_package, ort_version="1.32.0")  # the environment rules exist from 1.32.0
    assert main(["check", str(tiny_cpu_package), "--ort-version", "1.32.0"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header == (f"q38 check {tiny_cpu_package}: onnxruntime {report.ort_version}, "
                      f"{len(report.rules_checked)} rules applied {NOT_APPLIED}, graphs: target, head, prefill")
    # applied + not applied = what `q38 rules` lists
    assert len(report.rules_checked) + 2 == len(catalogue())


def test_optimize_explain_names_each_candidates_graph(tiny_cpu_package: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    assert main(["optimize", str(tiny_cpu_package), str(tmp_path / "out"), "--explain"]) == 0
    lines = capsys.readouterr().out.splitlines()
    explained, last = lines[:-1], lines[-1]
    assert explained and last.startswith(f"optimized {tiny_cpu_package} -> {tmp_path / 'out'}")
    graphs = {line.split(": ", 1)[0] for line in explained}
    assert graphs == {"model.onnx", "head_r2.onnx", "prefill.onnx"}
    # a node name the three graphs share is now three distinct lines
    assert len(set(explained)) == len(explained)


def test_fit_plot_and_export_end_with_the_wrote_line(tiny_cpu_package: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    png = tmp_path / "fit.png"
    assert main(["fit", str(tiny_cpu_package), "--plot", str(png)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"q38 fit: wrote {png} (the plot)"
    out = tmp_path / "genai"
    assert main(["export-genai", str(tiny_cpu_package), str(out)]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith(f"q38 export-genai: wrote {out} (") and last.endswith(f"exported from {tiny_cpu_package})")


def test_check_ort_says_a_shared_session_note_once(tiny_cpu_package: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has the CUDA EP: the config's cuda is not missing here")
    pkg = tmp_path / "pkg"
    shutil.copytree(tiny_cpu_package, pkg, symlinks=True)
    assert main(["check", str(pkg), "--ort"]) == 0
    lines = capsys.readouterr().out.splitlines()
    note = "CPU session: the config names cuda, which this onnxruntime lacks"
    assert [line for line in lines if note in line] == [f"sessions target, head, prefill: {note}"]
    assert [line for line in lines if line.startswith("session ")] == [
        "session target: ok", "session head: ok", "session prefill: ok"]


def test_profile_ends_with_every_file_it_wrote(tiny_cpu_package: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    strp, trace = tmp_path / "p.strp", tmp_path / "trace.json"
    assert main(["profile", str(tiny_cpu_package), "-o", str(strp), "--trace-out", str(trace), "--prompt-count", "1",
                 "--tokens", "1", "--prompt-length", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"q38 profile: wrote {strp}, {trace}"
    assert lines[0].startswith("q38 profile: measured: ") and strp.is_file() and trace.is_file()


def test_check_header_counts_the_rules_an_older_release_lacks(tiny_cpu_package: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    applied = len(check_package(tiny_cpu_package, ort_version="1.31.1").rules_checked)
    assert main(["check", str(tiny_cpu_package), "--ort-version", "1.31.1"]) in (0, 1)
    header = capsys.readouterr().out.splitlines()[0]
    absent = len(catalogue()) - applied  # no environment rule exists in 1.31.1
    assert header == (f"q38 check {tiny_cpu_package}: onnxruntime 1.31.1, {applied} rules applied ({absent} more in "
                      "q38 rules do not exist in onnxruntime 1.31.1), graphs: target, head, prefill")
