"""``q38 offload`` on the command line.

Invariants guarded:
- every legacy flag of the QMoEOffload-operator tool is refused with its reason: exit 2, one
  stderr line naming the flag, nothing written (also when it comes with a value or after OUT);
- ``q38 offload --help`` lists the options and hides the legacy flags;
- a successful run exits 0 and ``--json`` prints the report; a refusal is one line, exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from q38.cli import main
from q38.offload.legacy import LEGACY_FLAGS

# SPEC §5.3, written here (not read from the code): the old QMoEOffload-operator tool's flags.
SPEC_LEGACY_FLAGS = (
    "--migrate-shared-onnx", "--out-onnx", "--strip-phase", "--strip-stats", "--target-spare-slots",
    "--dense-offload-qmoe", "--dense-stream-min-rows", "--dense-stream-wave",
)  # fmt: skip


def test_the_code_refuses_exactly_the_specified_flags() -> None:
    assert sorted(LEGACY_FLAGS) == sorted(SPEC_LEGACY_FLAGS)


@pytest.mark.parametrize("flag", SPEC_LEGACY_FLAGS)
@pytest.mark.parametrize("with_value", [False, True])
def test_legacy_flags_rejected_with_reason(flag: str, with_value: bool, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["offload", str(tmp_path / "out"), "--from-package", str(tmp_path / "src"), flag]
    if with_value:
        argv.append("7")
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"q38 offload: error: {flag} is a flag of the old QMoEOffload-operator tool and is not supported: ")
    assert err.rstrip().endswith("(ORT offloads com.microsoft::QMoE nodes via session.moe.offload.*)")
    assert not (tmp_path / "out").exists()


def test_help_lists_options_not_legacy(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["offload", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for option in ("--from-package", "--offload-mode", "--offload-placement", "--cpu-execution",
                   "--device-expert-bytes", "--host-expert-bytes", "--expert-profile", "--target-resident-slots",
                   "--total-resident-slots", "--uniform-profile-slots", "--min-slots-per-layer",
                   "--mtp-moe-placement"):
        assert option in out
    assert not [f for f in SPEC_LEGACY_FLAGS if f in out]


def test_cli_converts_and_prints_json(tiny_cpu_package: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(["offload", str(out), "--from-package", str(tiny_cpu_package), "--offload-mode", "auto",
                 "--cpu-execution", "--target-resident-slots", "3", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["router_weights_cleared"] == 17
    assert report["resident_slots"]["/model/layers.0/moe/QMoE"] == 3
    assert (out / "model_s4.onnx").is_file()


def test_cli_refusal_is_one_line(tiny_cpu_package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["offload", str(tmp_path / "out"), "--from-package", str(tiny_cpu_package),
                 "--target-resident-slots", "9"])
    assert code == 2
    err = capsys.readouterr().err
    assert err == "q38 offload: error: --target-resident-slots 9: offloaded QMoE node #0 has only 8 experts\n"
    assert not (tmp_path / "out").exists()
