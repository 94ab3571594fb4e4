"""Whole-model walks of the optimizer: subgraph iteration, the pass invariants, the name table.

Each walk is O(nodes + values) and visits subgraphs (If/Loop/Scan bodies, nested). The pipeline
runs :func:`invariant_problem` once per pass boundary (the previous pass's ``ensures`` is the next
pass's ``requires``) and builds one :class:`NameTable` per model for all its passes; a pass run on
its own checks both ends itself (see :class:`q38.optimize._common.RewritePass`).
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx_ir as ir

__all__ = [
    "NameTable",
    "check_topological",
    "invariant_problem",
    "iter_graphs",
    "subgraphs_of",
]


_GRAPH = ir.AttributeType.GRAPH
_GRAPHS = ir.AttributeType.GRAPHS
_NONE: list[ir.Graph] = []


def subgraphs_of(node: ir.Node) -> list[ir.Graph]:
    """The graphs held by ``node``'s attributes (If branches, Loop/Scan bodies), not nested."""
    subs = _NONE
    # ``Attributes`` is a UserDict: its ``data`` dict iterates without the Mapping ABC's
    # per-key __getitem__ (this runs for every node of every invariant walk).
    for attr in node.attributes.data.values():
        kind = attr.type
        if (kind is not _GRAPH and kind is not _GRAPHS) or not isinstance(attr, ir.Attr):
            continue  # the common case: no graph attribute (a reference attribute holds no graph)
        if subs is _NONE:
            subs = []
        if kind is _GRAPH:
            subs.append(attr.as_graph())
        else:
            subs.extend(attr.as_graphs())
    return subs


def iter_graphs(graph: ir.Graph) -> Iterator[ir.Graph]:
    """The graph and every subgraph below it (If/Loop/Scan bodies, nested)."""
    yield graph
    for node in graph:
        for sub in subgraphs_of(node):
            yield from iter_graphs(sub)


def check_topological(graph: ir.Graph) -> str | None:
    """None when every value is defined before it is read (captured values included).

    Only node outputs are tracked: graph inputs and initializers have no producer, so a read of one
    is never out of order (and a subgraph's capture of an outer value is checked as the outer
    node's output it is).
    """
    defined: set[int] = set()

    def visit(g: ir.Graph) -> str | None:
        for node in g:
            for read in node.inputs:
                if read is not None and read.producer() is not None and id(read) not in defined:
                    return f"node {node.op_type} {node.name!r} reads {read.name!r} before it is produced"
            for sub in subgraphs_of(node):
                problem = visit(sub)
                if problem:
                    return problem
            for value in node.outputs:
                defined.add(id(value))
        return None

    return visit(graph)


def invariant_problem(model: ir.Model) -> str | None:
    """The first broken structural invariant of ``model``, or None.

    Topological order (captures included) and unique value names per scope; the com.microsoft
    import is checked by the pass that introduced contrib nodes.
    """
    dups: list[str] = []
    # Values hash by identity (ir.Value defines no __eq__/__hash__): the sets and the scope hold
    # the values themselves; one list of each graph's nodes serves both walks below.
    defined: set[ir.Value] = set()

    def visit(graph: ir.Graph, outer: dict[str, ir.Value]) -> str | None:
        # Names: one scope per graph, the enclosing scopes included (complete before any body).
        scope = dict(outer)
        bind = scope.setdefault
        nodes = list(graph)
        heads = (*graph.inputs, *graph.initializers.values())
        for value in heads:
            name = value.name
            if name and bind(name, value) is not value:
                dups.append(name)
        for node in nodes:
            for value in node.outputs:
                name = value.name
                if name and bind(name, value) is not value:
                    dups.append(name)
        # Order: a read (a body's capture included) must follow its producer.
        define = defined.add
        for value in heads:
            define(value)
        for node in nodes:
            for read in node.inputs:
                if read is not None and read not in defined and read.producer() is not None:
                    return (f"graph is not topologically sorted: node {node.op_type} {node.name!r} "
                            f"reads {read.name!r} before it is produced")
            for sub in subgraphs_of(node):
                problem = visit(sub, scope)
                if problem:
                    return problem
            for out in node.outputs:
                define(out)
        return None

    problem = visit(model.graph, {})
    if problem:
        return problem
    if dups:
        return f"duplicate value names: {dups[:5]}"
    return None


class NameTable:
    """Every value and node name of a model (subgraphs included), and fresh names not among them.

    Built once per model; every name a pass creates goes through :meth:`fresh_value` /
    :meth:`fresh_node`, so the table stays complete across the passes of one pipeline run.
    """

    def __init__(self, model: ir.Model) -> None:
        self.values: set[str] = set()
        self.nodes: set[str] = set()
        # The If/Loop/Scan bodies below the main graph, in walk order. No pass adds, removes or
        # rewrites a control-flow node (patterns inside bodies are declined), so the list holds
        # for every pass of the pipeline run that shares this table.
        self.subgraphs: list[ir.Graph] = []
        self.add_names_of(model)

    def add_names_of(self, model: ir.Model) -> None:
        """Add every name ``model`` uses now (a table kept across calls learns what others named).

        Names already in the table stay reserved, so a name the model once had is never handed out
        for a different tensor; the subgraph list is the model's as it is now.
        """
        self.subgraphs = []
        for graph in iter_graphs(model.graph):
            if graph is not model.graph:
                self.subgraphs.append(graph)
            for value in (*graph.inputs, *graph.outputs, *graph.initializers.values()):
                if value.name:
                    self.values.add(value.name)
            for node in graph:
                if node.name:
                    self.nodes.add(node.name)
                for used in (*node.inputs, *node.outputs):
                    if used is not None and used.name:
                        self.values.add(used.name)

    def fresh_value(self, base: str) -> str:
        """``base``, or ``base_N`` for the first N that no value of the model has; reserved at once."""
        return self._fresh(base, self.values)

    def fresh_node(self, base: str) -> str:
        """``base``, or ``base_N`` for the first N that no node of the model has; reserved at once."""
        return self._fresh(base, self.nodes)

    @staticmethod
    def _fresh(base: str, taken: set[str]) -> str:
        name, i = base, 1
        while name in taken:
            name = f"{base}_{i}"
            i += 1
        taken.add(name)
        return name
