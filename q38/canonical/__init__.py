"""Canonical forms of graphs and packages: what goldens store and ``q38 diff`` compares.

One description of "what a package is", independent of where it lives, which machine or q38
version wrote it and how protobuf serialized it: :func:`canonical_graph` (one ONNX graph),
:func:`canonical_package` (config, pool, manifest, file inventory), written for review by
:func:`dumps`. Bump :data:`VERSION` whenever the output of any of them changes.
"""

from __future__ import annotations

from q38.canonical.digests import TensorDigest, recorded_digests
from q38.canonical.graph import GRAPH_FORMAT, canonical_graph, load_proto
from q38.canonical.layout import WIDTH, dumps
from q38.canonical.normalize import MASK, Normalizer
from q38.canonical.package import PACKAGE_FORMAT, canonical_package, inventory, read_json_document
from q38.canonical.values import shortest_float
from q38.canonical.version import VERSION

__all__ = [
    "GRAPH_FORMAT",
    "MASK",
    "PACKAGE_FORMAT",
    "VERSION",
    "WIDTH",
    "Normalizer",
    "TensorDigest",
    "canonical_graph",
    "canonical_package",
    "dumps",
    "inventory",
    "load_proto",
    "read_json_document",
    "recorded_digests",
    "shortest_float",
]
