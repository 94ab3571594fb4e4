"""Shared machinery of the q38 rewrite passes: outcomes, guards as data, naming, graph surgery.

Every rewrite is an :class:`onnx_ir.passes.InPlacePass` subclass of :class:`RewritePass`. A pass
walks the nodes of the top-level graph (nodes are held by identity; names are never used as keys),
asks its ``match`` for each anchor node, and either rewrites the match or records a
:class:`Outcome` whose ``reason`` says why it declined. Declines are data, never exceptions.

Invariants every pass keeps (checked by ``requires``/``ensures``):

* topological order, including values captured by If/Loop/Scan subgraphs (nested);
* value names are unique across the model, subgraphs included, and new names never collide;
* a value still used anywhere (a subgraph capture counts as a use) is never removed;
* ``com.microsoft`` is imported whenever a contrib node is present.

Patterns inside subgraphs (If/Loop/Scan bodies) are **declined, not rewritten**: every candidate a
pass finds there is reported with the reason :data:`SUBGRAPH_REASON`. The exporter emits none of
its patterns inside control flow, and a rewrite there would have to place new initializers per
scope and re-prove privacy against the enclosing graph's captures for no gain; declining keeps
every pass's proof obligations to one graph while ``--explain`` still shows what was skipped.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np
import onnx_ir as ir

from q38._ops import MS_DOMAIN, MS_OPSET
from q38.optimize.graph_checks import NameTable, check_topological, invariant_problem, iter_graphs
from q38.optimize.graph_order import NodeOrder, remove_dead
from q38.optimize.target_kernels import TargetKernels, active_kernels
from q38.ort_kernels import cpu_kernels, dtype_name

if TYPE_CHECKING:  # the kernel table (and its onnxruntime probe) is imported by --target cpu only
    from q38.ort_kernels import CpuKernels

__all__ = [
    "SUBGRAPH_REASON",
    "UNRECOGNISED_REASON",
    "Decline",
    "Outcome",
    "Produced",
    "RewriteContext",
    "RewritePass",
    "Target",
    "TensorReader",
    "captured_by_subgraph",
    "check_private",
    "check_topological",
    "const_array",
    "const_ints",
    "const_scalar",
    "default_reader",
    "ensure_ms_opset",
    "first_dtype",
    "iter_graphs",
    "replace_value",
]

_LOG = logging.getLogger(__name__)

Target = Literal["cuda", "cpu"]
SUBGRAPH_REASON = "inside a subgraph (only the top-level graph is rewritten)"
# Recorded for an anchor a pass neither matched nor declined; the tests require none.
UNRECOGNISED_REASON = "anchor not recognised by the pass (no specific reason)"
TensorReader = Callable[[ir.Value], np.ndarray]


@dataclasses.dataclass(frozen=True)
class Decline:
    """A guard's verdict: this candidate is not rewritten, and why."""

    reason: str


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a pass did with one candidate (``--explain`` prints these).

    ``graph``: the package-relative file of the graph the candidate is in, set by the package
    driver (the same node name occurs in the target, head and draft graphs); empty for one model.
    """

    pass_name: str
    anchor: str
    applied: bool
    reason: str = ""
    graph: str = ""

    def line(self) -> str:
        """The outcome as one log line: [graph,] pass, anchor, then ``fused`` or ``declined: <reason>``."""
        verdict = "fused" if self.applied else f"declined: {self.reason}"
        where = f"{self.graph}: " if self.graph else ""
        return f"{where}{self.pass_name}: {self.anchor}: {verdict}"


@dataclasses.dataclass(frozen=True)
class Produced:
    """A node a rewrite would leave in the graph (new, or changed): op, domain, compute dtype.

    ``--target cpu`` declines the rewrite unless the installed onnxruntime has a CPU kernel for
    every one of them at that dtype (``dtype=None``: the graph does not say; any dtype counts).
    """

    op: str
    domain: str
    dtype: ir.DataType | None


def first_dtype(*values: ir.Value | None) -> ir.DataType | None:
    """The dtype of the first typed value among ``values``; None when none is typed.

    A rewritten producer may have left its output untyped; a value_info with elem_type 0
    declares ``UNDEFINED``, which says no more than no type, so it is skipped too.
    """
    return next((v.dtype for v in values if v is not None and v.dtype not in (None, ir.DataType.UNDEFINED)), None)


def default_reader(value: ir.Value) -> np.ndarray:
    """Read an in-memory (or onnx-ir external) constant; package code passes its own reader."""
    tensor = value.const_value
    if tensor is None:
        raise ValueError(f"value {value.name!r} has no constant")
    return tensor.numpy()


def captured_by_subgraph(value: ir.Value) -> bool:
    """True when a node of a subgraph (at any depth) reads ``value`` from an enclosing scope."""
    home = value.graph
    return any(use.node.graph is not home for use in value.uses())


def _is_output_of(value: ir.Value, graph: ir.Graph) -> bool:
    # ``in`` on the outputs list is a C-level identity scan (ir.Value defines no __eq__); a Python
    # loop over them per replaced output grew with layers x outputs.
    return value.is_graph_output() and value in graph.outputs


def check_private(
    intermediates: Iterable[ir.Value], matched: Sequence[ir.Node], graph: ir.Graph
) -> Decline | None:
    """Every intermediate must be read only by matched nodes (no escape, no subgraph capture)."""
    matched_ids = {id(n) for n in matched}
    for value in intermediates:
        if captured_by_subgraph(value):
            return Decline(f"intermediate {value.name!r} is captured by a subgraph")
        if _is_output_of(value, graph):
            return Decline(f"intermediate {value.name!r} is a graph output")
        for use in value.uses():
            if id(use.node) not in matched_ids:
                return Decline(
                    f"intermediate {value.name!r} has another consumer "
                    f"({use.node.op_type} {use.node.name!r})"
                )
    return None


def const_array(value: ir.Value | None, reader: TensorReader) -> np.ndarray | None:
    """The constant behind ``value`` (an initializer or a Constant node), or None."""
    if value is None:
        return None
    if value.const_value is not None and value.is_initializer():
        return reader(value)
    node = value.producer()
    if node is not None and node.op_type == "Constant" and node.domain == "":
        attr = node.attributes.get("value")
        if attr is not None and isinstance(attr, ir.Attr) and attr.type == ir.AttributeType.TENSOR:
            return attr.as_tensor().numpy()
        for key in ("value_int", "value_float"):
            attr = node.attributes.get(key)
            if isinstance(attr, ir.Attr):
                return np.asarray(attr.value)
        for key in ("value_ints", "value_floats"):
            attr = node.attributes.get(key)
            if isinstance(attr, ir.Attr):
                return np.asarray(list(attr.value))
    if value.const_value is not None:
        return reader(value)
    return None


def const_ints(value: ir.Value | None, reader: TensorReader) -> list[int] | None:
    """An integer constant's values flattened (None: not a constant, or not an integer tensor)."""
    arr = const_array(value, reader)
    if arr is None or arr.dtype.kind not in "iu":
        return None
    return [int(x) for x in arr.reshape(-1)]


def const_scalar(value: ir.Value | None, reader: TensorReader) -> float | None:
    """A one-element constant's value as a float (None: not a constant, or more than one element)."""
    arr = const_array(value, reader)
    if arr is None or arr.size != 1:
        return None
    return float(np.asarray(arr, dtype=np.float64).reshape(-1)[0])


def ensure_ms_opset(model: ir.Model) -> None:
    """Import com.microsoft (model and any function) when a contrib node is present."""
    if MS_DOMAIN in model.opset_imports:
        return
    for graph in iter_graphs(model.graph):
        if any(node.domain == MS_DOMAIN for node in graph):
            model.opset_imports[MS_DOMAIN] = MS_OPSET
            model.graph.opset_imports[MS_DOMAIN] = MS_OPSET
            return


class RewriteContext:
    """Per-call state of a pass: collision-free names, node positions, the weight reader, caches, provenance."""

    def __init__(
        self,
        model: ir.Model,
        reader: TensorReader,
        provenance: dict[str, list[str]],
        *,
        pass_name: str = "",
        origins: dict[str, str] | None = None,
        names: NameTable | None = None,
        graph: ir.Graph | None = None,
    ):
        self.model = model
        self.graph = graph if graph is not None else model.graph
        self.reader = reader
        self.provenance = provenance
        self.pass_name = pass_name
        self.origins: dict[str, str] = origins if origins is not None else {}
        self.names = names if names is not None else NameTable(model)
        self.order = NodeOrder(self.graph)
        # Keyed by the identity of the source values, so shared weights stay shared.
        self.cache: dict[tuple[object, ...], ir.Value] = {}
        self.orphan_candidates: list[ir.Value] = []
        self.inserted: list[ir.Node] = []

    def value_name(self, base: str) -> str:
        """A value name built from ``base`` that no value, initializer or subgraph of the model uses yet."""
        return self.names.fresh_value(base)

    def node_name(self, base: str) -> str:
        """A node name built from ``base`` that no node of the model uses yet."""
        return self.names.fresh_node(base)

    def insert(self, new_nodes: Sequence[ir.Node], *, inputs: Iterable[ir.Value | None],
               matched: Sequence[ir.Node]) -> None:
        """Insert ``new_nodes`` where their inputs exist and before the readers of what they replace."""
        self.order.insert(new_nodes, inputs=inputs, matched=matched)
        self.inserted.extend(new_nodes)

    def add_initializer(self, base: str, array: np.ndarray, sources: Sequence[ir.Value]) -> ir.Value:
        """Register a new initializer (fresh name) and record where its bytes came from."""
        name = self.value_name(base)
        # ir.Tensor directly: ir.tensor() would first test the array against runtime-checkable
        # protocols (~0.2 ms a call, a tenth of the whole rewrite), then construct the same Tensor.
        tensor = ir.Tensor(array, name=name)
        value = ir.Value(name=name, shape=ir.Shape(array.shape), type=ir.TensorType(tensor.dtype))
        value.const_value = tensor
        self.graph.register_initializer(value)
        if sources:
            self.provenance[name] = [s.name or "" for s in sources]
            self.origins[name] = self.pass_name
        self.orphan_candidates.extend(sources)
        return value

    def remove_dead(self, candidates: Sequence[ir.Node]) -> None:
        """Remove dead matched nodes; their constant inputs become orphan candidates."""
        for node in candidates:
            self.orphan_candidates.extend(v for v in node.inputs if v is not None and v.is_initializer())
        remove_dead(self.graph, candidates, self.order)
        self.order.verify(self.inserted)
        self.inserted.clear()

    def drop_orphans(self) -> None:
        """Remove source initializers no longer read anywhere (a subgraph capture is a read)."""
        for value in self.orphan_candidates:
            if (
                value.name is not None
                and value.is_initializer()
                and not value.uses()
                and not value.is_graph_input()
                and not value.is_graph_output()
                and value.name in self.graph.initializers
                and self.graph.initializers[value.name] is value
            ):
                del self.graph.initializers[value.name]
        self.orphan_candidates.clear()


def replace_value(old: ir.Value, new: ir.Value, graph: ir.Graph) -> None:
    """Point every reader of ``old`` (subgraph captures included) at ``new``.

    A graph output keeps its public name: ``new`` takes over the name and ``old`` is renamed.
    """
    if _is_output_of(old, graph):
        public = old.name
        old.name = f"{public}__replaced"
        new.name = public
        outputs = graph.outputs
        while old in outputs:  # every position it holds (an output may be listed twice)
            outputs[outputs.index(old)] = new
    old.replace_all_uses_with(new)


class RewritePass(ir.passes.InPlacePass):
    """Base of every q38 rewrite: candidate loop, target gating, outcomes and invariants.

    Subclasses set ``name`` (the manifest key), ``contrib_op`` (the operator the rewrite
    introduces, or None) and implement ``match`` and ``rewrite``.
    """

    name: ClassVar[str] = ""
    contrib_op: ClassVar[str | None] = None

    def __init__(
        self,
        *,
        target: Target = "cuda",
        reader: TensorReader | None = None,
        outcomes: list[Outcome] | None = None,
        provenance: dict[str, list[str]] | None = None,
        origins: dict[str, str] | None = None,
        names: NameTable | None = None,
        check_requires: bool = True,
        kernels: CpuKernels | None = None,
    ) -> None:
        super().__init__()
        self.target = target
        self.reader = reader or default_reader
        self.outcomes: list[Outcome] = outcomes if outcomes is not None else []
        self.provenance: dict[str, list[str]] = provenance if provenance is not None else {}
        self.origins: dict[str, str] = origins if origins is not None else {}
        # One name table for the passes of one pipeline run (None: built per model a call is given).
        self.names = names
        self._given_names = names
        self._names_model: ir.Model | None = None
        # False when the previous pass's ensures already proved this pass's requires.
        self.check_requires = check_requires
        # The CPU-kernel table ``--target cpu`` consults (None: the installed ORT's, probed once).
        self.kernels = kernels
        self.count = 0
        self.sorted = 0  # graph sorts this pass needed (0 for every exporter form)

    # -- to implement ---------------------------------------------------------------------------
    def anchors(self, graph: ir.Graph) -> list[ir.Node]:
        """The nodes a match may start from, in graph order (each pass says which op anchors its pattern)."""
        raise NotImplementedError

    def match(self, ctx: RewriteContext, node: ir.Node) -> object | Decline | None:
        """Return a match, a Decline with a reason, or None when ``node`` is no candidate."""
        raise NotImplementedError

    def rewrite(self, ctx: RewriteContext, match: object) -> None:
        """Replace the matched nodes with the fused node(s); every candidate gets an outcome."""
        raise NotImplementedError

    def produces(self, match: object) -> Sequence[Produced]:
        """The nodes the rewrite of ``match`` leaves in the graph (checked for ``--target cpu``)."""
        return (Produced(self.contrib_op, MS_DOMAIN, None),) if self.contrib_op else ()

    # -- machinery ------------------------------------------------------------------------------
    def requires(self, model: ir.Model) -> None:
        """Pre-condition: the model meets the optimizer's invariants before the pass (ValueError naming the break)."""
        if not self.check_requires:
            return
        problem = invariant_problem(model)
        if problem:
            raise ValueError(f"{self.name}: input {problem}")

    def ensures(self, model: ir.Model) -> None:
        """Post-condition: the invariants still hold after a pass that rewrote something (ValueError otherwise)."""
        if self.count == 0:
            # Nothing was rewritten (no node, value, initializer or import touched): the model is
            # the one this pass's requires, or the previous pass's ensures, already proved.
            return
        problem = invariant_problem(model)
        if problem:
            raise ValueError(f"{self.name}: output {problem}")
        if self.count and self.contrib_op and MS_DOMAIN not in model.opset_imports:
            raise ValueError(f"{self.name}: com.microsoft opset import missing")

    @staticmethod
    def describe(node: ir.Node, order: NodeOrder) -> str:
        """How an anchor is named in outcomes: its name, or its op type and position when it has none."""
        if node.name:
            return node.name
        return f"<unnamed {node.op_type} #{order.index(node)}>"

    def context(self, model: ir.Model, graph: ir.Graph | None = None) -> RewriteContext:
        """The rewrite context of one call: the model, tensor reader, provenance and one shared name table."""
        if self._given_names is None and self._names_model is not model:
            # A pass instance reused on another model builds that model's table: the first model's
            # names would let a fresh name collide with one the new model has (and its subgraphs
            # would be declined as the new model's). Two phases of one call share one table.
            self.names = NameTable(model)
            self._names_model = model
        elif self._given_names is None and self.names is not None:
            # Called on this model again: other passes may have named things since; the names
            # this table reserved (the model's earlier ones included) stay reserved.
            self.names.add_names_of(model)
        assert self.names is not None  # given, or built just above
        return RewriteContext(model, self.reader, self.provenance, pass_name=self.name,
                              origins=self.origins, names=self.names, graph=graph)

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        """Run the pass over the model's graph: match each live anchor, rewrite or record the decline reason."""
        graph = model.graph
        ctx = self.context(model)
        self.count = 0
        declined_before = sum(1 for o in self.outcomes if o.pass_name == self.name and not o.applied)
        for node in self.anchors(graph):
            if not ctx.order.alive(node):  # consumed by an earlier rewrite in this call
                continue
            anchor = self.describe(node, ctx.order)
            found = self.match(ctx, node)
            if found is None:  # a safety net: every pass declines its anchors with a reason
                found = Decline(UNRECOGNISED_REASON)
            if isinstance(found, Decline):
                self._record(anchor, False, found.reason)
                continue
            targeted = active_kernels()
            checked = self.target == "cpu" or targeted is not None
            missing = self._missing_cpu_kernel(found, targeted) if checked else None
            if missing is not None:
                self._record(anchor, False, missing)
                continue
            self.rewrite(ctx, found)
            self.count += 1
            self._record(anchor, True)
        ctx.order.flush()  # the dead matched nodes of every rewrite, in one removal
        self._decline_in_subgraphs(model, graph)
        if self.count:
            ctx.drop_orphans()
            if ctx.order.needs_sort:
                _LOG.debug("%s: a rewrite had no sorted place; sorting the graph once", self.name)
                graph.sort()
                self.sorted += 1
            if self.contrib_op is not None:
                ensure_ms_opset(model)
        declined = sum(1 for o in self.outcomes if o.pass_name == self.name and not o.applied) - declined_before
        _LOG.info("pass %s on graph %s: %d rewrite(s), %d candidate(s) declined", self.name,
                  graph.name or "(unnamed)", self.count, declined)
        return ir.passes.PassResult(model, modified=self.count > 0)

    def _missing_cpu_kernel(self, match: object, targeted: TargetKernels | None = None) -> str | None:
        """Why a session of the target could not run what the rewrite of ``match`` produces, or None.

        ``targeted``: the kernels of ``--target-ort``'s release on the target EP (else the
        installed onnxruntime's CPU kernels, for ``--target cpu``).
        """
        if self.kernels is None and targeted is not None:
            for node in self.produces(match):
                if not targeted.has(node.op, node.domain, node.dtype):
                    return (f"no {targeted.ep.upper()} kernel for {node.op} in onnxruntime {targeted.ort_version} "
                            f"(target {self.target}, --target-ort; {targeted.source})")
            return None
        kernels = self.kernels if self.kernels is not None else cpu_kernels()
        for node in self.produces(match):
            if kernels.has(node.op, node.domain, node.dtype):
                continue
            if node.dtype is not None and kernels.has(node.op, node.domain):
                return f"no CPU kernel for {node.op} for {dtype_name(node.dtype)} (target cpu)"
            return f"no CPU kernel for {node.op} (target cpu)"
        return None

    def _decline_in_subgraphs(self, model: ir.Model, graph: ir.Graph) -> None:
        """Report every candidate found inside a subgraph as declined (never rewritten)."""
        subgraphs = self.names.subgraphs if self.names is not None else [
            sub for sub in iter_graphs(graph) if sub is not graph]
        for sub in subgraphs:
            order = NodeOrder(sub)
            for node in self.anchors(sub):
                self._record(self.describe(node, order), False, SUBGRAPH_REASON)

    def _record(self, anchor: str, applied: bool, reason: str = "") -> None:
        outcome = Outcome(self.name, anchor, applied, reason)
        self.outcomes.append(outcome)
        _LOG.debug("%s", outcome.line())


def producer_of(value: ir.Value | None, *op_types: str, domain: str = "") -> ir.Node | None:
    """The producer of ``value`` when it is one of ``op_types`` in ``domain``."""
    if value is None:
        return None
    node = value.producer()
    if node is None or node.op_type not in op_types:
        return None
    if node.domain != domain:  # onnx_ir spells the default domain "" (it maps "ai.onnx" to "")
        return None
    return node


def attr_int(node: ir.Node, key: str, default: int | None = None) -> int | None:
    """Attribute ``key`` of ``node`` as an int, or ``default`` when the node does not set it."""
    attr = node.attributes.get(key)
    return int(attr.value) if isinstance(attr, ir.Attr) else default


def attr_float(node: ir.Node, key: str, default: float | None = None) -> float | None:
    """Attribute ``key`` of ``node`` as a float, or ``default`` when the node does not set it."""
    attr = node.attributes.get(key)
    return float(attr.value) if isinstance(attr, ir.Attr) else default


def attr_ints(node: ir.Node, key: str) -> list[int] | None:
    """Attribute ``key`` of ``node`` as a list of ints (None: not set)."""
    attr = node.attributes.get(key)
    return [int(x) for x in attr.value] if isinstance(attr, ir.Attr) else None


def inp(node: ir.Node, index: int) -> ir.Value | None:
    """Input ``index`` of ``node``; None when it is omitted or beyond the node's inputs."""
    return node.inputs[index] if index < len(node.inputs) else None


def slice_args(node: ir.Node, reader: TensorReader) -> tuple[int, int, int] | None:
    """(start, end, axis) of a one-axis, unit-step ``Slice`` whose arguments are constants.

    None when it is not that: a dynamic argument, several axes or a step other than 1. Omitted
    ``axes`` are the leading axes and omitted ``steps`` are 1, as ONNX and ORT read them.
    """
    starts, ends = const_ints(inp(node, 1), reader), const_ints(inp(node, 2), reader)
    axes = const_ints(inp(node, 3), reader) if inp(node, 3) is not None else list(range(len(starts or [])))
    steps = const_ints(inp(node, 4), reader) if inp(node, 4) is not None else [1]
    if not starts or not ends or not axes or steps != [1] or len(starts) != 1 or len(axes) != 1:
        return None
    return starts[0], ends[0], axes[0]


def rank_of(value: ir.Value | None) -> int | None:
    """The declared rank of ``value`` (None: no value, or no shape declared)."""
    if value is None or value.shape is None:
        return None
    return len(value.shape)


def copy_type(dst: ir.Value, src: ir.Value) -> None:
    """Give ``dst`` the type and shape of ``src`` where ``src`` knows them."""
    if src.type is not None and src.dtype is not None:
        dst.type = src.type
    if src.shape is not None:
        dst.shape = src.shape
