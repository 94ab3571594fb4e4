"""The converter's adapter over the contracts' offload rules (:mod:`q38.offload.eligibility`).

Invariant guarded: the contracts answer (node name, reason) pairs; the converter gets the model's own
node objects with ORT's reason (None: offloaded), in the rules' order.
"""

from __future__ import annotations

from pathlib import Path

from contracts.offload_nodes import offload_eligibility
from q38.offload.eligibility import contracts_eligibility
from q38.package import open_package


def test_verdicts_are_the_models_own_nodes_with_the_contracts_reasons(tiny_cpu_package: Path) -> None:
    """Every candidate the rules judge comes back as that node of the model (not a copy, not a name),
    with the rules' reason, in their order; the tiny package's int4 QMoE nodes are all offloaded."""
    model = open_package(tiny_cpu_package).load("target")
    verdicts = contracts_eligibility(model, "auto")
    assert [(node.name, reason) for node, reason in verdicts] == offload_eligibility(model, "auto")
    nodes = {id(n) for n in model.graph}
    assert verdicts and all(id(node) in nodes and node.op_type == "QMoE" for node, _ in verdicts)
    assert contracts_eligibility(model, "disabled") == []
