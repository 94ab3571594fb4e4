"""Node positions that stay valid while a pass rewrites: placement without sorting, dead-node removal.

A rewrite inserts its replacement where every input is already produced and every reader of a
replaced value comes later, so the graph stays topologically sorted without a sort. Positions
come from one enumeration per pass call (:class:`NodeOrder`); inserts and removals never reorder
the nodes that were there, so the enumeration stays valid: an original node ``i`` has the key
``(i, LAST)`` and the ``c``-th node inserted before it has ``(i, c)``, which orders correctly
between node ``i - 1`` and node ``i``.

When no such place exists (a replacement whose inputs are produced after a reader of one of the
values it replaces), the order records it and the pass sorts its graph once at its end; the
passes here place every exporter form without that fallback.

Dead matched nodes leave the graph in one removal per pass call (:meth:`NodeOrder.flush`): each
``Graph.remove`` call costs O(graph outputs) besides its nodes (onnx-ir builds a set of the
outputs per call), so one call per rewrite made a pass O(rewrites x outputs) -- quadratic in
layers, since both grow with them. A node found dead is detached from its inputs at once (no
producer sees it as a reader any more) and is no longer alive to the pass: it is skipped as an
anchor and as a place to insert before.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import onnx_ir as ir

from q38.optimize.graph_checks import subgraphs_of

__all__ = ["NodeOrder", "remove_dead"]

_LAST = 1 << 62
Key = tuple[int, int]


class NodeOrder:
    """Positions of the nodes of one graph during one pass call."""

    def __init__(self, graph: ir.Graph) -> None:
        self.graph = graph
        self._nodes = list(graph)
        self._key: dict[ir.Node, Key] = {n: (i, _LAST) for i, n in enumerate(self._nodes)}
        self._inserted: dict[int, int] = {}
        self._owner: dict[ir.Graph, ir.Node] | None = None
        self._dead: dict[ir.Node, None] = {}  # found dead, detached, removed by flush()
        self.needs_sort = False

    def alive(self, node: ir.Node) -> bool:
        """``node`` is in this graph and was not found dead during this pass call."""
        return node.graph is self.graph and node not in self._dead

    def bury(self, dead: Iterable[ir.Node]) -> None:
        """Detach ``dead`` nodes from their inputs now; :meth:`flush` removes them from the graph."""
        for node in dead:
            if node in self._dead:
                continue
            self._dead[node] = None
            for i, value in enumerate(node.inputs):
                if value is not None:
                    node.replace_input_with(i, None)

    def flush(self) -> None:
        """Remove every node buried since the last flush, in one ``Graph.remove`` (checked: safe)."""
        if self._dead:
            self.graph.remove(list(self._dead), safe=True)
            self._dead.clear()

    def index(self, node: ir.Node) -> int:
        """The node's index in the graph as the pass call found it (-1 for a node it created)."""
        key = self._key.get(node)
        return key[0] if key is not None and key[1] == _LAST else -1

    def key(self, node: ir.Node) -> Key | None:
        """The position of ``node``, or of the node of this graph whose subgraph holds it."""
        key = self._key.get(node)
        if key is not None or node.graph is None or node.graph is self.graph:
            return key
        owner = self._owner_of(node.graph)
        return self._key.get(owner) if owner is not None else None

    def _owner_of(self, graph: ir.Graph) -> ir.Node | None:
        if self._owner is None or graph not in self._owner:  # built on first need, rebuilt for new subgraphs
            owner: dict[ir.Graph, ir.Node] = {}

            def claim(top: ir.Node, g: ir.Graph) -> None:
                owner[g] = top
                for node in g:
                    for sub in subgraphs_of(node):
                        claim(top, sub)

            for node in self.graph:
                for sub in subgraphs_of(node):
                    claim(node, sub)
            self._owner = owner
        return self._owner.get(graph)

    def _latest_input_key(self, inputs: Iterable[ir.Value | None]) -> Key:
        lo: Key = (-1, _LAST)
        for value in inputs:
            producer = value.producer() if value is not None else None
            key = self._key.get(producer) if producer is not None else None
            if key is not None and key > lo:
                lo = key
        return lo

    def _anchor_after(self, lo: Key, matched: Sequence[ir.Node]) -> ir.Node | None:
        """The earliest original node still in the graph that comes after ``lo``, preferring a matched one."""
        here = [n for n in matched if self.alive(n) and self._key.get(n, (-1, 0)) > lo
                and self._key[n][1] == _LAST]
        if here:
            return min(here, key=lambda n: self._key[n])
        start = lo[0] + 1 if lo[1] == _LAST else lo[0]
        for node in self._nodes[max(start, 0):]:
            if self.alive(node):
                return node
        return None

    def insert(self, new_nodes: Sequence[ir.Node], *, inputs: Iterable[ir.Value | None],
               matched: Sequence[ir.Node]) -> None:
        """Insert ``new_nodes`` (in order) after every producer of ``inputs``.

        The place is just before the earliest matched node that comes after those producers: the
        matched nodes produce the values the new nodes replace, so their readers come later.
        """
        lo = self._latest_input_key(inputs)
        anchor = self._anchor_after(lo, matched)
        if anchor is None:
            self.graph.extend(new_nodes)
            base = len(self._nodes)
        else:
            self.graph.insert_before(anchor, new_nodes)
            base = self._key[anchor][0]
        for node in new_nodes:
            count = self._inserted.get(base, 0)
            self._inserted[base] = count + 1
            self._key[node] = (base, count)

    def move(self, node: ir.Node, *, matched: Sequence[ir.Node]) -> None:
        """Move ``node`` (reads kept) to the earliest place after the producers of its inputs."""
        self.graph.remove(node, safe=False)
        del self._key[node]
        self.insert([node], inputs=node.inputs, matched=matched)

    def verify(self, nodes: Iterable[ir.Node]) -> None:
        """Record a needed sort when a reader of ``nodes``' outputs comes before them."""
        for node in nodes:
            mine = self._key.get(node)
            if mine is None:
                continue
            for out in node.outputs:
                for use in out.uses():
                    theirs = self.key(use.node)
                    if theirs is None or theirs <= mine:
                        self.needs_sort = True
                        return

    def before(self, a: ir.Node, b: ir.Node) -> bool:
        """Whether ``a`` runs before ``b`` in this graph; False when either has no position (removed)."""
        ka, kb = self.key(a), self.key(b)
        return ka is not None and kb is not None and ka < kb


def remove_dead(graph: ir.Graph, candidates: Sequence[ir.Node], order: NodeOrder | None = None) -> None:
    """Remove those of ``candidates`` whose outputs nobody outside them reads.

    Only the given nodes are considered: a rewrite removes what it matched (and shared producers
    such as rotary caches once their last reader is gone), never unrelated dead code. A read by a
    subgraph node (a capture) is a read. A graph output is never removed. With ``order`` (a pass
    call's) the dead nodes are buried there, removed at its :meth:`NodeOrder.flush`; without,
    removed now in one removal.
    """
    pending = [n for n in candidates if (order.alive(n) if order is not None else n.graph is graph)]
    dead: set[ir.Node] = set()
    changed = True
    while changed:
        changed = False
        for node in pending:
            if node in dead:
                continue
            if all(not out.is_graph_output() and all(use.node in dead for use in out.uses())
                   for out in node.outputs):
                dead.add(node)
                changed = True
    if not dead:
        return
    if order is None:
        graph.remove(dead, safe=True)
    else:
        order.bury(n for n in pending if n in dead)  # in candidate order: deterministic
