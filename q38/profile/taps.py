"""Router taps: a graph copy that also outputs every QMoE node's router logits, and its top-k rule.

The logits are the node's input 1, ``[tokens, E]``; the selection rule is applied to them here.

The copy is the package's graph with one ``Identity`` per QMoE node (``/q38/profile/router_i``,
output ``q38.profile.router.i``) added as a graph output; it is serialized to bytes and opened
with ``session.model_external_initializers_file_folder_path`` = the graph's directory, so the
session reads the package's own data files and nothing is written anywhere. No weight byte is
read into Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np
import onnx_ir as ir

from q38.errors import ProfileError, clip
from q38.offload.router import qmoe_nodes

if TYPE_CHECKING:
    import onnxruntime as ort

__all__ = ["TAP_PREFIX", "Tap", "TappedGraph", "select_experts", "tapped_graph"]

TAP_PREFIX: Final = "q38.profile.router."
_FOLDER_KEY: Final = "session.model_external_initializers_file_folder_path"


@dataclass(frozen=True)
class Tap:
    """One QMoE node's tap: the graph output carrying its router logits and its top-``k`` of ``experts``."""

    output: str  # the graph output carrying the router logits
    node: str
    k: int
    experts: int


@dataclass
class TappedGraph:
    """A session over the tapped copy of one graph."""

    where: str
    session: ort.InferenceSession
    taps: tuple[Tap, ...]

    @property
    def input_names(self) -> list[str]:
        """The inputs the session expects, in the graph's order."""
        return [i.name for i in self.session.get_inputs()]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run one step and return every output (taps included) by name; an ORT failure is one ProfileError line."""
        names = [o.name for o in self.session.get_outputs()]
        try:
            values = self.session.run(names, feeds)
        except Exception as exc:  # onnxruntime's Fail / InvalidArgument / RuntimeException
            raise ProfileError(f"{self.where}: onnxruntime run failed: {_first_line(exc)}") from None
        return dict(zip(names, values))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return clip(text.splitlines()[0] if text else type(exc).__name__, 300)


def _int_attr(node: ir.Node, name: str, default: int) -> int:
    attr = node.attributes.get(name)
    return int(attr.value) if attr is not None else default


def tapped_graph(model: ir.Model, graph_dir: Path, *, where: str, threads: int = 1) -> TappedGraph:
    """Tap ``model`` (owned by the caller: taps are added in place) and open a CPU session."""
    import onnxruntime as ort  # deferred: heavy; only the tapped session needs it

    taps = []
    graph = model.graph
    for index, node in enumerate(qmoe_nodes(graph)):
        logits = node.inputs[1] if len(node.inputs) > 1 else None
        if logits is None:
            raise ProfileError(f"{where}: QMoE node {node.name!r} has no router_probs input (slot 1)")
        tap = ir.Node("", "Identity", [logits], name=f"/q38/profile/router_{index}", num_outputs=1)
        tap.outputs[0].name = f"{TAP_PREFIX}{index}"
        tap.outputs[0].type = logits.type
        graph.append(tap)
        graph.outputs.append(tap.outputs[0])
        weights = node.inputs[2] if len(node.inputs) > 2 else None
        experts = weights.shape[0] if weights is not None and weights.shape is not None and weights.shape else None
        if not isinstance(experts, int):
            raise ProfileError(f"{where}: QMoE node {node.name!r}: fc1_experts_weights has no static expert count")
        taps.append(Tap(tap.outputs[0].name, node.name or "", _int_attr(node, "k", 1), experts))
    data = ir.serde.serialize_model(model).SerializeToString()
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = threads  # a fixed count: the same logits, bit for bit, every run
    options.inter_op_num_threads = 1
    options.add_session_config_entry(_FOLDER_KEY, str(graph_dir))
    try:
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ProfileError(f"{where}: onnxruntime cannot run it on the CPU: {_first_line(exc)}") from None
    return TappedGraph(where, session, tuple(taps))


def select_experts(logits: np.ndarray, k: int) -> np.ndarray:
    """The experts a QMoE node picks per token: ``[tokens, k]`` indices.

    The ``k`` largest router logits of each row of ``[tokens, E]``, ties to the lower index.
    """
    rows = np.asarray(logits, dtype=np.float32).reshape(-1, logits.shape[-1])
    order = np.argsort(-rows, axis=1, kind="stable")
    return order[:, :k]
