"""``q38 diff``: semantic differences between two packages, built on their canonical forms."""

from __future__ import annotations

from q38.diff.graph import diff_graph, node_keys, node_label
from q38.diff.model import Difference
from q38.diff.package import PackageDiff, diff_packages
from q38.diff.tree import diff_tree

__all__ = ["Difference", "PackageDiff", "diff_graph", "diff_packages", "diff_tree", "node_keys", "node_label"]
