"""The converter's adapter over the contracts' offload rules (:mod:`q38.offload.eligibility`).

Invariants guarded:
- the contracts answer (node name, reason) pairs; the converter gets the model's own node objects
  with ORT's reason (None: offloaded), in the rules' order;
- the remedy a refusal offers reads the node's own quant_type: re-exporting prepacked is only offered
  to int experts.
"""

from __future__ import annotations

from pathlib import Path

import onnx_ir as ir

from contracts.offload_nodes import offload_eligibility
from q38.offload.eligibility import contracts_eligibility, refusal_hint
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


def test_the_re_export_prepacked_remedy_is_only_offered_to_int_experts() -> None:
    """The prepacked re-export remedy fits int4 experts only: an nvfp4 node given the int-combination reason
    (possible under a caller's own ``eligibility`` check) is offered --offload-mode auto, while the same
    node with quant_type 'int' is told to re-export with qmoe_weights_prepacked=1."""
    reason = "quant_type='int' offload requires (bits=4, weights_prepacked=1, block_size=32)"

    def node(quant: str) -> ir.Node:
        attrs = [ir.AttrString("quant_type", quant), ir.AttrInt64("expert_weight_bits", 4),
                 ir.AttrInt64("weights_prepacked", 0)]
        return ir.Node("com.microsoft", "QMoE", [], attrs, name="/model/layers.0/moe/QMoE")

    assert refusal_hint(node("nvfp4"), reason) == "--offload-mode auto keeps it on the GPU"
    assert refusal_hint(node("int"), reason) == (
        "re-export with --extra_options qmoe_weights_prepacked=1, or use --offload-mode auto"
    )
