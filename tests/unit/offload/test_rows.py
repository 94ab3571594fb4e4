"""``q38.offload.rows.qmoe_sites``: the QMoE nodes a profile's rows describe.

Invariants guarded:
- one site per QMoE node in graph order, carrying the graph file, the node name, the static
  expert count, the node's top-k (its ``k`` attribute; 1 when the node has none) and whether it
  is a draft's node (``draft_graph``, or a name under ``/mtp/``).
"""

from __future__ import annotations

from pathlib import Path

import onnx_ir as ir

from q38.offload.router import qmoe_nodes
from q38.offload.rows import Site, qmoe_sites
from q38.package.graphs import load_graph


def test_sites_carry_each_nodes_top_k_or_1_without_the_attribute(tiny_builder_cpu_package: Path) -> None:
    """Each site's k is its node's own ``k`` attribute (q38 profile checks selections = rows x k), 1 when absent."""
    src = tiny_builder_cpu_package
    decoder = load_graph(src / "model.onnx", root=src)
    first, second, *_ = qmoe_nodes(decoder.graph)
    first.attributes["k"] = ir.AttrInt64("k", 3)
    del second.attributes["k"]
    sites = qmoe_sites(decoder, "model.onnx")
    assert [s.k for s in sites] == [3, 1] + [2] * 6
    assert sites[0] == Site("model.onnx", "/model/layers.0/moe/QMoE", 8, 3, False)
    mtp = qmoe_sites(load_graph(src / "mtp.onnx", root=src), "mtp.onnx", draft_graph=True)
    assert mtp == [Site("mtp.onnx", "/model/layers.0/moe/QMoE", 8, 2, True)]
