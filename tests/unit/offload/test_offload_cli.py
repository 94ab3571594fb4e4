"""``q38 offload`` on the command line.

Invariants guarded:
- every legacy flag of the QMoEOffload-operator tool is refused with its reason: exit 2, one
  stderr line naming the flag, nothing written (also when it comes with a value or after OUT);
- ``q38 offload --help`` lists the options and hides the legacy flags;
- a successful run exits 0 and ``--json`` prints the report; a refusal is one line, exit 2;
- the ``--offload-mode required`` refusal of the real int4-cpu fixture keeps what the user needs
  whole (node, remedy, the combination its bit width needs and what the node has) within the
  line limit; a long path gives way, never the middle of the reason (issue 37.5);
- ``--expert-profile`` without a slot count says the rate is not predicted and why (no row of
  ``n/a`` per node, no "0 of 0"); with ``--total-resident-slots 16`` the slot line counts the
  offloaded nodes the hit-rate rows list, its slots are theirs, and the chained drafts' own caps
  are shown apart, and ``check`` of that output passes (no CFG-GRAPH-002: docs/offload.md)
  (issue 37.5).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import onnx_ir as ir
import pytest

from q38.cli import main
from q38.errors import LINE_LIMIT
from q38.offload.eligibility import required_refusal
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


_REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"


@pytest.mark.skipif(not (_REAL / "int4-cpu").is_dir(), reason="real builder fixtures not present")
def test_the_int4_refusal_keeps_what_the_user_needs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["offload", str(tmp_path / "out"), "--from-package", str(_REAL / "int4-cpu")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) <= LINE_LIMIT + 1
    assert "message cut" not in err and "chars)" not in err
    assert "QMoE node '/model/layers.0/moe/QMoE' would not be offloaded" in err
    assert "re-export with --extra_options qmoe_weights_prepacked=1, or use --offload-mode auto" in err
    assert err.rstrip().endswith("quant_type='int' offload requires (bits=4, weights_prepacked=1, block_size=32) "
                                 "for 4-bit experts; the node has weights_prepacked unset, block_size=32")  # fmt: skip
    assert "int4-cpu/model.onnx: QMoE node" in err
    assert not (tmp_path / "out").exists()


def test_a_long_path_gives_way_to_the_reason() -> None:
    node = ir.Node("com.microsoft", "QMoE", [], attributes=[ir.AttrInt64("expert_weight_bits", 4)], name="/m/QMoE")
    reason = ("quant_type='int' offload requires (bits=4, weights_prepacked=1, block_size=32), (bits=3, "
              "weights_prepacked=0, block_size in {32,64,128}), or (bits=2, weights_prepacked=1, block_size in {32,64,128})")  # fmt: skip
    plain = ir.Node("com.microsoft", "QMoE", [], attributes=[ir.AttrInt64("expert_weight_bits", 8)], name="/m/QMoE")
    assert str(required_refusal("pkg/model.onnx", plain, reason)).endswith(reason)  # it fits: ORT's words, whole
    where = "/" + "/".join(["d" * 20] * 12) + "/pkg/model.onnx"
    text = str(required_refusal(where, node, reason))
    assert len("q38 offload: error: " + text) <= LINE_LIMIT
    assert text.startswith(".../pkg/model.onnx: QMoE node '/m/QMoE' would not be offloaded")
    assert text.endswith("(bits=4, weights_prepacked=1, block_size=32) for 4-bit experts; "
                         "the node has weights_prepacked unset, block_size unset")  # fmt: skip
    other = str(required_refusal(where, node, "use_sparse_mixer=1 is not supported by the QMoE offload backend"))
    assert other.startswith(".../pkg/model.onnx: QMoE node") and other.endswith("use_sparse_mixer=1 is not supported by the QMoE offload backend")


def _profile(path: Path, rows: int = 9, experts: int = 8) -> Path:
    import numpy as np

    from q38.package import encode_profile
    from q38.package.profile import ExpertProfile

    counts = np.random.default_rng(0).integers(0, 100, size=(rows, experts)).astype(np.uint64)
    path.write_bytes(encode_profile(ExpertProfile(counts)))
    return path


def test_a_profile_without_a_slot_count_says_the_rate_is_not_predicted(
    tiny_cpu_package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = _profile(tmp_path / "p.bin")
    argv = ["offload", str(tmp_path / "out"), "--from-package", str(tiny_cpu_package), "--offload-mode", "auto",
            "--expert-profile", str(profile)]  # fmt: skip
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "n/a" not in "\n".join(lines) and "0 of 0" not in "\n".join(lines)
    (rate,) = [line for line in lines if "expected hit rate" in line]
    assert "not predicted: no resident-slot count was given" in rate and "over 9 nodes" in rate
    assert len(lines) == 2  # the head line and the rate: no row per uncapped node


def test_total_resident_slots_counts_agree(tiny_cpu_package: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    profile = _profile(tmp_path / "p.bin")
    argv = ["offload", str(tmp_path / "out"), "--from-package", str(tiny_cpu_package), "--offload-mode", "auto",
            "--expert-profile", str(profile), "--total-resident-slots", "16"]  # fmt: skip
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    offloaded = int(re.search(r": (\d+) QMoE nodes offloaded", lines[0]).group(1))  # type: ignore[union-attr]
    (slots,) = [line for line in lines if "resident slots:" in line]
    assert slots.startswith(f"  resident slots: 16 over the {offloaded} offloaded nodes; chained drafts ")
    assert "/mtp/1/moe/QMoE, /mtp/2/moe/QMoE of the verify graphs share /mtp/0/'s experts: 0 each" in slots
    rows = [line for line in lines if re.match(r"    \S+: +[\d.]+%  resident \d+  \(offloaded\)", line)]
    assert len(rows) == offloaded == 9
    assert sum(int(re.search(r"resident (\d+)", r).group(1)) for r in rows) == 16  # type: ignore[union-attr]
    # docs/offload.md: check agrees that the chained drafts have no profile row (no CFG-GRAPH-002)
    assert main(["check", str(tmp_path / "out")]) == 0
