"""The converter's adapter over the contracts' offload rules (:mod:`q38.offload.eligibility`).

Invariants guarded:
- the verdicts come back as (node of the model, ORT's reason or None) whatever form the rules answer
  in: (node name, reason) tuples, or objects with ``.node`` and an optional ``.reason``.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from q38.offload.eligibility import contracts_eligibility
from q38.package import open_package


def test_verdict_objects_give_their_node_and_reason(tiny_cpu_package: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rules answering with objects (``.node`` name, ``.reason`` or none) give (node, reason) verdicts, a
    missing reason meaning offloaded. Patched: the contracts answer tuples today, so the object form the
    adapter accepts is reachable only through a rules module that answers objects."""
    import contracts.offload_nodes

    model = open_package(tiny_cpu_package).load("target")
    answer = [SimpleNamespace(node="/model/layers.0/moe/QMoE", reason="kept for a test"),
              SimpleNamespace(node="/model/layers.1/moe/QMoE")]
    monkeypatch.setattr(contracts.offload_nodes, "offload_eligibility", lambda _model, _mode: answer)
    verdicts = contracts_eligibility(model, "auto")
    nodes = {n.name: n for n in model.graph}
    assert [(node.name, reason) for node, reason in verdicts] == [
        ("/model/layers.0/moe/QMoE", "kept for a test"), ("/model/layers.1/moe/QMoE", None)
    ]
    assert all(node is nodes[node.name] for node, _reason in verdicts)  # the model's own nodes
