"""The pass machinery of the q38 rewrites: the run record, outcomes, the rewrite context, the pass base.

Every rewrite is an :class:`onnx_ir.passes.InPlacePass` subclass of :class:`RewritePass`, generic
over the type of its match. A pass walks the nodes of the top-level graph (nodes are held by
identity; names are never used as keys), asks its ``match`` for each anchor node, and either
rewrites the match or records an :class:`Outcome` whose ``reason`` says why it declined. Declines
are data, never exceptions. The questions a ``match`` asks of the graph (constants, producers,
attributes, privacy of intermediates) are the helpers of :mod:`q38.optimize.matching`.

What one optimize run gives all its passes (target, weight reader, the outcome and provenance
sinks, the shared name table, the kernel table) is one :class:`PassRun` record.

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
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, ClassVar, Generic, Literal, TypedDict, TypeVar, Unpack

import numpy as np
import onnx_ir as ir

from q38._ops import MS_DOMAIN, MS_OPSET
from q38.optimize.graph_checks import NameTable, check_topological, invariant_problem, iter_graphs
from q38.optimize.graph_order import NodeOrder, remove_dead
from q38.optimize.matching import Decline, TensorReader, const_array, default_reader, is_output_of
from q38.optimize.target_kernels import TargetKernels, active_kernels
from q38.ort_kernels import cpu_kernels, dtype_name

if TYPE_CHECKING:  # the kernel table (and its onnxruntime probe) is imported by --target cpu only
    from q38.ort_kernels import CpuKernels

__all__ = [
    "SUBGRAPH_REASON",
    "UNRECOGNISED_REASON",
    "Decline",
    "Outcome",
    "PassRun",
    "Produced",
    "RewriteContext",
    "RewritePass",
    "RunFields",
    "Target",
    "TensorReader",
    "check_topological",
    "const_array",
    "copy_type",
    "default_reader",
    "ensure_ms_opset",
    "iter_graphs",
    "replace_value",
]
# Decline, TensorReader, default_reader and const_array live in q38.optimize.matching, and
# check_topological and iter_graphs in q38.optimize.graph_checks; they stay importable from here,
# where callers and tests have always found them.

_LOG = logging.getLogger(__name__)

Target = Literal["cuda", "cpu"]
SUBGRAPH_REASON = "inside a subgraph (only the top-level graph is rewritten)"
# Recorded for an anchor a pass neither matched nor declined; the tests require none.
UNRECOGNISED_REASON = "anchor not recognised by the pass (no specific reason)"
M = TypeVar("M")  # the match type of a pass: what its ``match`` finds and its ``rewrite`` consumes


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


@dataclasses.dataclass(frozen=True)
class PassRun:
    """What one optimize run gives every pass it runs: one record instead of a keyword per item.

    ``target``: the runtime the output is for (``cpu`` declines a rewrite whose products have no
    CPU kernel). ``reader``: how a pass reads a weight's bytes (package code passes one that reads
    external data). ``outcomes``, ``provenance`` and ``origins`` are the run's sinks, shared by its
    passes: every candidate's outcome, and for each tensor a pass created the names of its source
    tensors and the pass that created it. ``names``: one name table for all passes of the run
    (None: each pass builds the table of the model it is given). ``kernels``: the CPU-kernel table
    ``target="cpu"`` consults (None: the installed onnxruntime's, probed once).

    The record is frozen; the sinks it holds are not (the passes append to them).
    """

    target: Target = "cuda"
    reader: TensorReader = default_reader
    outcomes: list[Outcome] = dataclasses.field(default_factory=list)
    provenance: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    origins: dict[str, str] = dataclasses.field(default_factory=dict)
    names: NameTable | None = None
    kernels: CpuKernels | None = None


class RunFields(TypedDict, total=False):
    """Fields of a :class:`PassRun` given by keyword, for a pass used on its own: ``Pass(target="cpu")``."""

    target: Target
    reader: TensorReader
    outcomes: list[Outcome]
    provenance: dict[str, list[str]]
    origins: dict[str, str]
    names: NameTable | None
    kernels: CpuKernels | None


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
    if is_output_of(old, graph):
        public = old.name
        old.name = f"{public}__replaced"
        new.name = public
        outputs = graph.outputs
        while old in outputs:  # every position it holds (an output may be listed twice)
            outputs[outputs.index(old)] = new
    old.replace_all_uses_with(new)


class RewritePass(ir.passes.InPlacePass, Generic[M]):
    """Base of every q38 rewrite: candidate loop, target gating, outcomes and invariants.

    Subclasses set ``name`` (the manifest key), ``contrib_op`` (the operator the rewrite
    introduces, or None) and implement ``anchors``, ``match`` and ``rewrite``; ``M`` is the type
    of their match (``class FusePass(RewritePass[_Match])``), so ``rewrite`` and ``produces``
    receive exactly what ``match`` found.

    ``run``: what the optimize run gives its passes (default: a run of this pass alone, on
    ``cuda``); ``fields`` replace fields of it, a shorthand for a pass used on its own
    (``FuseRMSNormRotaryPass(target="cpu")``). ``check_requires``: False when the previous pass's ``ensures`` already proved this pass's
    ``requires`` (the pipeline checks each pass boundary once).
    """

    name: ClassVar[str] = ""
    contrib_op: ClassVar[str | None] = None

    def __init__(
        self, run: PassRun | None = None, *, check_requires: bool = True, **fields: Unpack[RunFields]
    ) -> None:
        super().__init__()
        run = run if run is not None else PassRun()
        self.run = dataclasses.replace(run, **fields) if fields else run
        # The run's table (None: built per model a call is given).
        self.names = self.run.names
        self._names_model: ir.Model | None = None
        self.check_requires = check_requires
        self.count = 0
        self.sorted = 0  # graph sorts this pass needed (0 for every exporter form)

    @property
    def outcomes(self) -> list[Outcome]:
        """Every candidate's outcome, this pass's among them (the run's shared sink)."""
        return self.run.outcomes

    @property
    def provenance(self) -> dict[str, list[str]]:
        """For each tensor a pass of the run created, the names of its source tensors."""
        return self.run.provenance

    # -- to implement ---------------------------------------------------------------------------
    def anchors(self, graph: ir.Graph) -> list[ir.Node]:
        """The nodes a match may start from, in graph order (each pass says which op anchors its pattern)."""
        raise NotImplementedError

    def match(self, ctx: RewriteContext, node: ir.Node) -> M | Decline | None:
        """Return a match, a Decline with a reason, or None when ``node`` is no candidate."""
        raise NotImplementedError

    def rewrite(self, ctx: RewriteContext, match: M) -> None:
        """Replace the matched nodes with the fused node(s); every candidate gets an outcome."""
        raise NotImplementedError

    def produces(self, match: M) -> Sequence[Produced]:
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
        if self.run.names is None and self._names_model is not model:
            # A pass instance reused on another model builds that model's table: the first model's
            # names would let a fresh name collide with one the new model has (and its subgraphs
            # would be declined as the new model's). Two phases of one call share one table.
            self.names = NameTable(model)
            self._names_model = model
        elif self.run.names is None and self.names is not None:
            # Called on this model again: other passes may have named things since; the names
            # this table reserved (the model's earlier ones included) stay reserved.
            self.names.add_names_of(model)
        assert self.names is not None  # given, or built just above
        return RewriteContext(model, self.run.reader, self.run.provenance, pass_name=self.name,
                              origins=self.run.origins, names=self.names, graph=graph)

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
            checked = self.run.target == "cpu" or targeted is not None
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

    def _missing_cpu_kernel(self, match: M, targeted: TargetKernels | None = None) -> str | None:
        """Why a session of the target could not run what the rewrite of ``match`` produces, or None.

        ``targeted``: the kernels of ``--target-ort``'s release on the target EP (else the
        installed onnxruntime's CPU kernels, for ``--target cpu``).
        """
        if self.run.kernels is None and targeted is not None:
            for node in self.produces(match):
                if not targeted.has(node.op, node.domain, node.dtype):
                    return (f"no {targeted.ep.upper()} kernel for {node.op} in onnxruntime {targeted.ort_version} "
                            f"(target {self.run.target}, --target-ort; {targeted.source})")
            return None
        kernels = self.run.kernels if self.run.kernels is not None else cpu_kernels()
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


def copy_type(dst: ir.Value, src: ir.Value) -> None:
    """Give ``dst`` the type and shape of ``src`` where ``src`` knows them."""
    if src.type is not None and src.dtype is not None:
        dst.type = src.type
    if src.shape is not None:
        dst.shape = src.shape
