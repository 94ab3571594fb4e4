"""The ``--json`` form of a conversion's report (``OffloadReport.to_dict``).

Invariant guarded: every field appears once under its own name; kept-resident nodes are
``{node, reason}`` objects (not bare pairs), hit rates one object per tier.
"""

from __future__ import annotations

import json

from q38.offload.report import OffloadReport


def test_to_dict_gives_kept_nodes_as_node_and_reason_objects() -> None:
    """``q38 offload --json`` consumers read ``kept_resident[i]["node"]`` / ``["reason"]``: the key
    keeps the field's name and its pairs become objects."""
    report = OffloadReport(out="out", surface="v12b", layout="flat", router_weights_cleared=3, offloaded=["a"],
                           kept_resident=[("b", "fp8"), ("", "bits")], resident_slots={"a": 2},
                           graphs={"s2": "model_s2.onnx"}, pool={"moved": 1}, notes=["n"])
    assert json.loads(json.dumps(report.to_dict())) == {
        "out": "out", "surface": "v12b", "layout": "flat", "router_weights_cleared": 3, "offloaded": ["a"],
        "kept_resident": [{"node": "b", "reason": "fp8"}, {"node": "", "reason": "bits"}],
        "resident_slots": {"a": 2}, "graphs": {"s2": "model_s2.onnx"}, "pool": {"moved": 1},
        "hit_rates": [], "notes": ["n"],
    }
