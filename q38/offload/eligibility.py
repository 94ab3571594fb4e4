"""Which QMoE nodes ORT would offload: a thin adapter over ``contracts`` (never a second copy).

The rules (ort-contract-rules.md §1B-§1E, mirrored in ``contracts/``) answer, per candidate node,
``None`` (offloaded) or ORT's reason string. The converter only asks through
:data:`EligibilityCheck`, so tests can inject a checker and the contracts module stays the one source.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import onnx_ir as ir

from q38.errors import LINE_LIMIT, OffloadError, clip, quote

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


_PREFIX = "q38 offload: error: "
_INT_COMBOS = re.compile(r"\(bits=(\d+), ([^()]*)\)")
_INT_REASON = "quant_type='int' offload requires "


def _node_reason(node: ir.Node, reason: str) -> str:
    """ORT's int-combination reason cut to what ``node`` needs: the combination of its bit width.

    ``quant_type='int' offload requires (bits=4, ...), (bits=3, ...), or (bits=2, ...)`` becomes
    ``... requires (bits=4, weights_prepacked=1, block_size=32) for 4-bit experts; the node has
    weights_prepacked unset, block_size=32``. Any other reason (or a bit width ORT lists no
    combination for) is returned whole.
    """
    if not reason.startswith(_INT_REASON):
        return reason
    attrs = node.attributes
    bits = attrs["expert_weight_bits"].value if "expert_weight_bits" in attrs else 8
    combo = next((rest for b, rest in _INT_COMBOS.findall(reason) if int(b) == bits), None)
    if combo is None:
        return reason
    has = ", ".join(f"{key}={attrs[key].value}" if key in attrs else f"{key} unset" for key in ("weights_prepacked", "block_size"))
    return f"{_INT_REASON}(bits={bits}, {combo}) for {bits}-bit experts; the node has {has}"


_PATH = re.compile(r"/[^\s()]+/([^/\s()]+/[^/\s()]+)")


def _short_paths(where: str) -> str:
    """Every path in ``where`` shown by its last two components (``.../int4-cpu/model.onnx``), escaped."""
    return clip(_PATH.sub(lambda m: ".../" + m.group(1), where))


def _cut_at_end(text: str, room: int) -> str:
    """``text`` within ``room`` characters, cut at its end (at a comma when there is one), never inside."""
    if len(text) <= room:
        return text
    more = f"... ({len(text)} chars)"
    head = text[: max(0, room - len(more))]
    if ", " in head:
        head = head[: head.rindex(", ")]
    return head + more


def required_refusal(where: str, node: ir.Node, reason: str) -> OffloadError:
    """The one-line ``--offload-mode required`` refusal: graph, node, what to do, ORT's reason.

    Every part the user acts on stays whole: the node, the remedy and the reason. When the line
    would pass LINE_LIMIT (with the ``q38 offload: error:`` prefix), what gives way is, in turn:
    the reason's combinations for other bit widths than the node's, the graph path's middle (its
    file name is kept), and last the reason's tail -- never a cut inside what the user needs.
    """
    def line(shown_where: str, shown_reason: str) -> str:
        return (f"{shown_where}: QMoE node {quote(node.name)} would not be offloaded by onnxruntime "
                f"(--offload-mode required; {refusal_hint(node, reason)}): {shown_reason}")  # fmt: skip

    room = LINE_LIMIT - len(_PREFIX)
    text = line(where, reason)
    if len(text) <= room:
        return OffloadError(text)
    short = _node_reason(node, reason)
    fixed = len(line("", short))
    if len(where) + fixed > room:
        where = _short_paths(where)
    return OffloadError(line(where, _cut_at_end(short, room - len(line(where, "")))))


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
