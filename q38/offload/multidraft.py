"""Multi-draft verify graphs: ``model_s2.onnx``, ``model_s3.onnx``, ``model_s4.onnx``.

``model_sN`` verifies N rows: the target decoder runs on N tokens and N-1 MTP drafts are chained
inside the graph. ``s2`` is the prepared target itself (its one MTP draft, ``/mtp/0/...``);
``s3``/``s4`` append drafts ``/mtp/1/...`` (and ``/mtp/2/...``), each a copy of draft 0 that

- shares every initializer with draft 0 (same external-data references: no weight bytes added);
- takes draft j's pre-norm hidden state where draft 0 takes the decoder's hidden (the *anchor*:
  the ``qwen.fold::FoldMid2`` output in the custom lineage, which therefore must be present);
- takes the embedding of ``ArgMax(mtp.{j}.logits)`` where draft 0 takes the embedding of the
  input tokens (an embedding ``Gather`` on ``input_ids``, inside or just outside the draft);
- adds the graph output ``mtp.{j+1}.logits``.

The sequence symbol (the last dim of ``input_ids``) becomes the static row count N in every graph
input and output where it appears (``position_ids [B, S]`` or MRoPE ``[3, B, S]``, ``logits``,
...); the graph carries ``q38.verify_rows = N`` and the places it bound (``q38.verify_dims``) in
its metadata. A decoder whose draft is its own graph gets the same binding and no draft
(:func:`verify_graph`). The source model is never mutated
(FunctionalPass: a shallow clone whose tensors are the source's, still lazy).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

import numpy as np
import onnx_ir as ir

from q38._ops import FOLD_MID2, QWEN_FOLD_DOMAIN
from q38.errors import GraphError

__all__ = [
    "DRAFT_ROWS",
    "VERIFY_DIMS_KEY",
    "VERIFY_ROWS_KEY",
    "MultiDraftPass",
    "build_multidraft",
    "find_draft",
    "grow_multidraft",
    "has_draft",
    "multidraft_filenames",
    "sequence_symbol",
    "verify_graph",
]

DRAFT_ROWS: Final = (2, 3, 4)
_DRAFT_PREFIX: Final = "/mtp/{j}/"
_NORM_OPS: Final = frozenset(
    {"SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization", "RMSNormalization",
     "LayerNormalization", "GatedRMSNorm"}
)
_TOKEN_INPUTS: Final = ("input_ids",)
_LEGACY_SYMBOL: Final = "sequence_length"
_LEGACY_ROW_INPUTS: Final = ("input_ids", "position_ids")


def multidraft_filenames() -> dict[str, str]:
    """``qwen38_graph.multidraft``: {"s2": "model_s2.onnx", ...}."""
    return {f"s{n}": f"model_s{n}.onnx" for n in DRAFT_ROWS}


@dataclass(frozen=True)
class Draft:
    """Draft 0 of a target graph, as the builder sees it."""

    nodes: tuple[ir.Node, ...]  # graph order
    anchor: ir.Value  # the decoder hidden draft 0 consumes
    hidden_out: ir.Value  # draft 0's own pre-norm hidden (chained into draft 1)
    logits: ir.Value  # mtp.0.logits
    embed_gathers: tuple[ir.Node, ...]  # Gather(table, input_ids) nodes feeding the draft
    repeats: int  # anchor width / draft hidden width (hyper-connection streams)


def _draft_nodes(graph: ir.Graph, j: int) -> list[ir.Node]:
    prefix = _DRAFT_PREFIX.format(j=j)
    return [n for n in graph if (n.name or "").startswith(prefix)]


def _is_token_gather(node: ir.Node | None) -> bool:
    if node is None or node.op_type != "Gather" or node.domain not in ("", "ai.onnx"):
        return False
    ids = node.inputs[1] if len(node.inputs) > 1 else None
    return ids is not None and ids.is_graph_input() and ids.name in _TOKEN_INPUTS


def find_draft(graph: ir.Graph, *, lineage: str, where: str) -> Draft:
    """Locate MTP draft 0 and its interface; :class:`GraphError` naming what is missing."""
    nodes = _draft_nodes(graph, 0)
    if not nodes:
        raise GraphError(f"{where}: no MTP draft (no node named /mtp/0/...): cannot build multi-draft graphs")
    if _draft_nodes(graph, 1):
        raise GraphError(f"{where}: already has chained drafts (/mtp/1/...); convert a single-draft target")
    inside = set(nodes)
    logits = next((v for v in graph.outputs if v.name == "mtp.0.logits"), None)
    if logits is None or logits.producer() not in inside:
        raise GraphError(f"{where}: graph output mtp.0.logits is missing or not produced by /mtp/0/")
    gathers: list[ir.Node] = []
    anchors: list[ir.Value] = []
    for node in nodes:
        for value in node.inputs:
            if value is None or value.producer() in inside:
                continue
            if value.is_initializer() or value.is_graph_input():
                continue
            producer = value.producer()
            if _is_token_gather(producer):
                assert producer is not None
                if producer not in gathers:
                    gathers.append(producer)
            elif value not in anchors:
                anchors.append(value)
    gathers.extend(n for n in nodes if _is_token_gather(n))
    if lineage == "custom":
        folds = [n for n in graph if n.domain == QWEN_FOLD_DOMAIN and n.op_type == FOLD_MID2]
        if not folds:
            raise GraphError(
                f"{where}: custom-lineage target has no {QWEN_FOLD_DOMAIN}::{FOLD_MID2} node "
                "(/fold/FoldMid2); the multi-draft builder chains the MTP drafts from its output"
            )
        fold_outputs = [v for v in anchors if v.producer() is folds[0]]
        if len(fold_outputs) != 1:
            raise GraphError(
                f"{where}: the MTP draft does not consume exactly one output of "
                f"{QWEN_FOLD_DOMAIN}::{FOLD_MID2} node {folds[0].name!r}"
            )
        anchor = fold_outputs[0]
    else:
        if len(anchors) != 1:
            names = ", ".join(repr(v.name) for v in anchors) or "none"
            raise GraphError(
                f"{where}: MTP draft /mtp/0/ must consume exactly one decoder hidden value, found {names}"
            )
        anchor = anchors[0]
    hidden = _pre_norm_hidden(logits, inside)
    return Draft(tuple(nodes), anchor, hidden, logits, tuple(gathers), _stream_repeats(hidden, anchor, where))


def _pre_norm_hidden(logits: ir.Value, inside: set[ir.Node]) -> ir.Value:
    """Walk back from the logits along data inputs to the draft's residual stream.

    That is the input of a fused normalization, or the output of the last residual ``Add``
    before the final norm.
    """
    value: ir.Value | None = logits
    while value is not None and value.producer() in inside:
        producer = value.producer()
        assert producer is not None
        if producer.op_type in _NORM_OPS and producer.inputs[0] is not None:
            return producer.inputs[0]
        if producer.op_type == "Add" and all(
            v is not None and not v.is_initializer() and v.const_value is None for v in producer.inputs
        ):
            return value
        value = next((v for v in producer.inputs if v is not None and not v.is_initializer()), None)
    raise GraphError(f"MTP draft: no residual stream found on the path to {logits.name!r}")


_SHAPE_KEEPING: Final = frozenset(
    {"Identity", "Cast", "Mul", "Div", "Add", "Sub", "BranchwiseRMSNorm", "SimplifiedLayerNormalization",
     "SkipSimplifiedLayerNormalization", "RMSNormalization", "LayerNormalization", "FoldMid2"}
)


def _width(value: ir.Value, depth: int = 6) -> int | None:
    """The last dim of ``value``: declared, else the K of a MatMul it feeds, else ``None``.

    The MatMul may be reached through shape-keeping ops.
    """
    if value.shape is not None and len(value.shape) and isinstance(value.shape[-1], int):
        return int(value.shape[-1])
    if depth == 0:
        return None
    for use in value.uses():
        node, index = use.node, use.idx
        if node.op_type == "MatMul" and index == 0:
            weight = node.inputs[1]
            if weight is not None and weight.shape is not None and len(weight.shape) == 2:
                dim = weight.shape[0]
                if isinstance(dim, int):
                    return int(dim)
        elif node.op_type in _SHAPE_KEEPING and index == 0:
            found = _width(node.outputs[0], depth - 1)
            if found is not None:
                return found
    # An optimizer's fused producers may leave no shape: an elementwise producer's output has
    # the width of its declared-shape inputs.
    producer = value.producer()
    if producer is not None and producer.op_type in _SHAPE_KEEPING:
        for operand in producer.inputs:
            if operand is not None and operand is not value:
                found = _width(operand, depth - 1)
                if found is not None and found > 1:
                    return found
    return None


def _stream_repeats(hidden: ir.Value, anchor: ir.Value, where: str) -> int:
    """How many times the draft hidden is tiled to take the anchor's place (1: same width)."""
    h, a = _width(hidden), _width(anchor)
    if h is None or a is None or a % h:
        raise GraphError(
            f"{where}: cannot chain MTP drafts: draft hidden {hidden.name!r} (width {h}) does not fit "
            f"the decoder hidden {anchor.name!r} (width {a})"
        )
    return a // h


def _rename(name: str | None, j: int) -> str | None:
    if name is None:
        return None
    new = name.replace("/mtp/0/", f"/mtp/{j}/")
    new = re.sub(r"(^|[./_])mtp\.0(?=[./_]|$)", rf"\1mtp.{j}", new)
    return new if new != name else f"{name}__d{j}"


def _clone_node(node: ir.Node, inputs: Iterable[ir.Value | None], j: int) -> ir.Node:
    attrs = [ir.Attr(a.name, a.type, a.value) for a in node.attributes.values()]
    clone = ir.Node(
        node.domain,
        node.op_type,
        list(inputs),
        attrs,
        overload=node.overload,
        num_outputs=len(node.outputs),
        version=node.version,
        name=_rename(node.name, j),
    )
    for old, new in zip(node.outputs, clone.outputs):
        new.name = _rename(old.name, j) if old.name else old.name  # an omitted output ("") stays omitted
        new.type = old.type
        new.shape = old.shape.copy() if old.shape is not None else None
    return clone


def _append_draft(graph: ir.Graph, draft: Draft, prev_hidden: ir.Value, prev_logits: ir.Value,
                  j: int) -> tuple[ir.Value, ir.Value]:
    """Append draft j (a copy of draft 0 chained onto draft j-1); return (hidden_out, logits)."""
    new_nodes: list[ir.Node] = []
    ids = ir.Node(
        "", "ArgMax", [prev_logits],
        [ir.AttrInt64("axis", -1), ir.AttrInt64("keepdims", 0)],
        name=f"/mtp/{j}/ArgMax", num_outputs=1,
    )
    ids.outputs[0].name = f"/mtp/{j}/draft_ids"
    ids.outputs[0].type = ir.TensorType(ir.DataType.INT64)
    new_nodes.append(ids)
    if draft.repeats != 1:
        reps = ir.Value(name=f"/mtp/{j}/streams/Tile/repeats",
                        const_value=ir.tensor(np.array([1, 1, draft.repeats], dtype=np.int64),
                                              name=f"/mtp/{j}/streams/Tile/repeats"))
        graph.register_initializer(reps)
        tile = ir.Node("", "Tile", [prev_hidden, reps], name=f"/mtp/{j}/streams/Tile", num_outputs=1)
        tile.outputs[0].name = f"/mtp/{j}/streams/output_0"
        tile.outputs[0].type = prev_hidden.type
        new_nodes.append(tile)
        prev_hidden = tile.outputs[0]
    mapping: dict[ir.Value, ir.Value] = {draft.anchor: prev_hidden}
    token_ids = [v for v in graph.inputs if v.name in _TOKEN_INPUTS]
    for tok in token_ids:
        mapping[tok] = ids.outputs[0]
    for gather in draft.embed_gathers:
        if gather in draft.nodes:
            continue  # cloned with the draft; its input_ids maps to the draft ids
        clone = _clone_node(gather, [gather.inputs[0], ids.outputs[0]], j)
        clone.name = f"/mtp/{j}/embed/Gather"
        clone.outputs[0].name = f"/mtp/{j}/embed/output_0"
        mapping[gather.outputs[0]] = clone.outputs[0]
        new_nodes.append(clone)
    for node in draft.nodes:
        clone = _clone_node(node, [mapping.get(v, v) if v is not None else None for v in node.inputs], j)
        mapping.update(zip(node.outputs, clone.outputs))
        new_nodes.append(clone)
    graph.extend(new_nodes)
    logits = mapping[draft.logits]
    logits.name = f"mtp.{j}.logits"
    outputs = list(graph.outputs)
    graph.outputs.insert(outputs.index(prev_logits) + 1, logits)  # next to the previous draft's
    return mapping[draft.hidden_out], logits


VERIFY_ROWS_KEY: Final = "q38.verify_rows"
VERIFY_DIMS_KEY: Final = "q38.verify_dims"


def has_draft(graph: ir.Graph) -> bool:
    """Whether the graph holds an MTP draft ``/mtp/0/...`` (many real exports have none)."""
    return bool(_draft_nodes(graph, 0))


def _graph_io(graph: ir.Graph) -> Iterator[ir.Value]:
    yield from graph.inputs
    yield from graph.outputs


def _restore_rows(model: ir.Model) -> None:
    """Undo :func:`_fix_rows` on a graph q38 emitted before, so it can be regenerated for other rows.

    Its ``q38.verify_dims`` metadata names every (value, dim) that was the sequence symbol.
    """
    record = model.metadata_props.get(VERIFY_DIMS_KEY)
    if not record and model.metadata_props.get(VERIFY_ROWS_KEY):
        # Written before q38.verify_dims existed: only input_ids / position_ids [B, S] were bound.
        record = f"{_LEGACY_SYMBOL}=" + ";".join(f"{name}:1" for name in _LEGACY_ROW_INPUTS)
    if not record:
        return
    symbol, _, places = record.partition("=")
    by_name = {v.name: v for v in _graph_io(model.graph)}
    for place in places.split(";") if places else ():
        name, _, index = place.rpartition(":")
        value = by_name.get(name)
        if value is None or value.shape is None or not index.isdigit() or int(index) >= len(value.shape):
            continue
        dims = list(value.shape.dims)
        dims[int(index)] = ir.SymbolicDim(symbol)
        value.shape = ir.Shape(dims)
    model.metadata_props.pop(VERIFY_DIMS_KEY, None)


def sequence_symbol(graph: ir.Graph, *, where: str) -> str:
    """The symbolic dim that counts the rows a step processes: the last dim of ``input_ids``.

    ``input_ids`` is ``[B, S]``; the symbol's position in ``position_ids`` may differ (MRoPE
    ``[3, B, S]``). A graph without a 2-D ``input_ids`` has no verify rows: GraphError.
    """
    ids = next((v for v in graph.inputs if v.name in _TOKEN_INPUTS), None)
    if ids is None or ids.shape is None or len(ids.shape) < 2:
        shape = None if ids is None or ids.shape is None else list(ids.shape)
        raise GraphError(
            f"{where}: input_ids {'is missing' if ids is None else f'has shape {shape}'}: verify graphs need "
            "input_ids [batch, sequence] (a packed 1-D input_ids has no verify rows)"
        )
    dim = ids.shape[-1]
    if isinstance(dim, int) or dim.value is None:
        raise GraphError(f"{where}: the sequence dim of input_ids is {dim!r}, not a named symbol: cannot set verify rows")
    return str(dim.value)


def _fix_rows(model: ir.Model, rows: int, symbol: str) -> None:
    """Bind the sequence symbol to ``rows`` in every graph input and output, wherever it sits.

    (``input_ids [B, S]``, ``position_ids [3, B, S]``, ``logits [B, S, V]``, ...); dims named
    otherwise (``total_sequence_length``, ``past_sequence_length``, state shapes) keep their names.
    The places are recorded in ``q38.verify_dims`` so a later conversion can undo it.
    """
    places: list[str] = []
    for value in _graph_io(model.graph):
        if value.shape is None:
            continue
        dims = list(value.shape.dims)
        hit = False
        for index, dim in enumerate(dims):
            if isinstance(dim, ir.SymbolicDim) and dim.value == symbol:
                dims[index] = rows
                places.append(f"{value.name}:{index}")
                hit = True
        if hit:
            value.shape = ir.Shape(dims)
    model.metadata_props[VERIFY_ROWS_KEY] = str(rows)
    model.metadata_props[VERIFY_DIMS_KEY] = f"{symbol}=" + ";".join(places)


def verify_graph(model: ir.Model, rows: int, *, where: str) -> ir.Model:
    """``model`` (owned by the caller) turned *in place* into a graph verifying ``rows`` rows.

    Nothing else changes: the form for a decoder whose draft is its own graph (``mtp.onnx``).
    """
    if rows not in DRAFT_ROWS:
        raise GraphError(f"{where}: verify rows must be one of {DRAFT_ROWS}, got {rows}")
    _restore_rows(model)
    _fix_rows(model, rows, sequence_symbol(model.graph, where=where))
    return model


def build_multidraft(
    model: ir.Model, rows: int, *, lineage: str, where: str = "model.onnx", in_place: bool = False
) -> ir.Model:
    """A new model verifying ``rows`` rows with ``rows - 1`` chained drafts.

    ``model`` is untouched unless ``in_place`` (for a model the caller owns and no longer needs).
    """
    if rows not in DRAFT_ROWS:
        raise GraphError(f"{where}: verify rows must be one of {DRAFT_ROWS}, got {rows}")
    find_draft(model.graph, lineage=lineage, where=where)  # refuse before cloning
    out = model if in_place else model.clone()
    _restore_rows(out)
    symbol = sequence_symbol(out.graph, where=where)
    graph = out.graph
    draft = find_draft(graph, lineage=lineage, where=where)
    hidden, logits = draft.hidden_out, draft.logits
    for j in range(1, rows - 1):
        hidden, logits = _append_draft(graph, draft, hidden, logits, j)
    _fix_rows(out, rows, symbol)
    return out


def grow_multidraft(model: ir.Model, *, lineage: str, where: str = "model.onnx") -> Iterator[int]:
    """Turn ``model`` (owned by the caller) into s2, s3, s4 *in place*, yielding each row count.

    Each yield comes once the model is that graph: serialize it before resuming. No clone: the
    cheapest way to get all three graphs of a large target.
    """
    draft = find_draft(model.graph, lineage=lineage, where=where)
    _restore_rows(model)
    symbol = sequence_symbol(model.graph, where=where)
    hidden, logits = draft.hidden_out, draft.logits
    for rows in DRAFT_ROWS:
        _restore_rows(model)  # the new draft's values copy draft 0's shapes: symbolic again first
        if rows > 2:
            hidden, logits = _append_draft(model.graph, draft, hidden, logits, rows - 2)
        _fix_rows(model, rows, symbol)
        yield rows


class MultiDraftPass(ir.passes.FunctionalPass):
    """onnx-ir pass form of :func:`build_multidraft` (a new model; the input is untouched)."""

    def __init__(self, rows: int, *, lineage: str = "contrib") -> None:
        super().__init__()
        self.rows = rows
        self.lineage = lineage

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        """Build the ``rows``-row verify graph from a clone of ``model`` (always reported modified)."""
        return ir.passes.PassResult(build_multidraft(model, self.rows, lineage=self.lineage), modified=True)
