"""Which QMoE nodes ORT would offload: a thin adapter over ``contracts`` (never a second copy).

The rules (ort-contract-rules.md §1B-§1E, mirrored in ``contracts/``) answer, per candidate node,
``None`` (offloaded) or ORT's reason string. The converter only asks through
:data:`EligibilityCheck`, so tests can inject a checker and the contracts module stays the one source.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx_ir as ir

from q38.errors import LINE_LIMIT, OffloadError, clip

__all__ = [
    "EligibilityCheck",
    "Verdict",
    "contracts_eligibility",
    "refusal_hint",
    "required_refusal",
    "resolve_eligibility",
    "split_verdicts",
]

Verdict = tuple[ir.Node, str | None]
EligibilityCheck = Callable[[ir.Model, str], Sequence[Verdict]]


def contracts_eligibility(model: ir.Model, mode: str) -> list[Verdict]:
    """Verdicts from ``contracts.offload_nodes.offload_eligibility`` for every candidate node of ``model``.

    The rules answer (node name, reason) pairs; each name is mapped back to the model's own node.
    """
    # function-level: the QMoE node rules load the schema registry, which ``q38 --help`` must not pay for
    # deferred: pulls in onnx (contracts._graph)
    from contracts.offload_nodes import offload_eligibility

    by_name = {n.name: n for n in ir.traversal.RecursiveGraphIterator(model.graph)}
    return [(by_name[name], reason) for name, reason in offload_eligibility(model, mode)]


def resolve_eligibility(custom: EligibilityCheck | None) -> EligibilityCheck:
    """The check a conversion uses: ``custom`` when given (tests, other rules), else the contracts' rules."""
    return custom if custom is not None else contracts_eligibility


def refusal_hint(node: ir.Node, reason: str) -> str:
    """What the user can do about a node ORT would not offload (appended to the refusal)."""
    attrs = node.attributes
    quant = attrs["quant_type"].value if "quant_type" in attrs else "int"
    prepacked = attrs["weights_prepacked"].value if "weights_prepacked" in attrs else -1
    bits = attrs["expert_weight_bits"].value if "expert_weight_bits" in attrs else 8
    if reason.startswith("quant_type='int' offload requires") and quant == "int" and bits == 4 and prepacked != 1:
        return "re-export with --extra_options qmoe_weights_prepacked=1, or use --offload-mode auto"
    if reason.startswith("unsupported quant_type="):
        return "only int and nvfp4 experts offload; --offload-mode auto keeps it on the GPU"
    return "--offload-mode auto keeps it on the GPU"


def required_refusal(where: str, node: ir.Node, reason: str) -> OffloadError:
    """The one-line ``--offload-mode required`` refusal: graph, node, what to do, ORT's reason.

    ORT's reason comes last and is the part cut to fit the line: its texts are long, and the
    head (graph, node, remedy) must survive.
    """
    head = (f"{where}: QMoE node {node.name!r} would not be offloaded by onnxruntime (--offload-mode required; "
            f"{refusal_hint(node, reason)}): ")  # fmt: skip
    # The whole line stays within LINE_LIMIT (with the "q38 offload: error: " prefix), so the
    # head -- graph, node, remedy -- is never what a cut removes: ORT's reason is cut first.
    room = max(40, LINE_LIMIT - len("q38 offload: error: ") - len(head) - 24)  # clip adds " (N chars)"
    return OffloadError(head + clip(reason, room))


def split_verdicts(
    check: EligibilityCheck, model: ir.Model, mode: str, where: str
) -> tuple[list[ir.Node], list[tuple[ir.Node, str]]]:
    """(offloaded nodes, [(kept node, reason)]) of one graph, by ``check``'s verdicts.

    Under ``required`` the first node ORT would not offload (graph order) raises instead,
    naming the graph file and the node.
    """
    offloaded: list[ir.Node] = []
    kept: list[tuple[ir.Node, str]] = []
    for node, reason in check(model, mode):
        if reason is None:
            offloaded.append(node)
        elif mode == "required":
            raise required_refusal(where, node, reason)
        else:
            kept.append((node, reason))
    return offloaded, kept
