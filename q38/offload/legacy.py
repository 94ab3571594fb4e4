"""Flags of the old QMoEOffload-operator tool, refused with the reason (stdlib only).

The old tool replaced QMoE nodes by a ``QMoEOffload`` operator and rewrote shared ONNX files in
place. ORT 1.32.0 offloads standard ``com.microsoft::QMoE`` nodes through
``session.moe.offload.*`` session options instead, so none of these flags has a meaning any more.
"""

from __future__ import annotations

from typing import Final

__all__ = ["LEGACY_FLAGS", "legacy_flag_message"]

LEGACY_FLAGS: Final[dict[str, str]] = {
    "--migrate-shared-onnx": (
        "the converter never rewrites shared ONNX files; it writes a new package and leaves the "
        "source untouched"
    ),
    "--out-onnx": (
        "the output is a whole package directory (OUT); graphs are written as model_s2/s3/s4.onnx "
        "and model.onnx inside it"
    ),
    "--strip-phase": (
        "phase stripping belonged to the QMoEOffload operator; QMoE nodes are kept as they are"
    ),
    "--strip-stats": (
        "statistics stripping belonged to the QMoEOffload operator; QMoE nodes are kept as they are"
    ),
    "--target-spare-slots": (
        "spare slots are gone; use --target-resident-slots N or --expert-profile FILE with "
        "--total-resident-slots N"
    ),
    "--dense-offload-qmoe": (
        "dense QMoE offload is not an ORT 1.32.0 feature; set --offload-mode and "
        "--offload-placement instead"
    ),
    "--dense-stream-min-rows": (
        "dense streaming is not an ORT 1.32.0 feature; ORT plans expert streaming itself"
    ),
    "--dense-stream-wave": (
        "dense streaming is not an ORT 1.32.0 feature; ORT plans expert streaming itself"
    ),
}


def legacy_flag_message(flag: str) -> str:
    """The one-line refusal for a legacy flag."""
    return (
        f"{flag} is a flag of the old QMoEOffload-operator tool and is not supported: "
        f"{LEGACY_FLAGS[flag]} (ORT offloads com.microsoft::QMoE nodes via session.moe.offload.*)"
    )
