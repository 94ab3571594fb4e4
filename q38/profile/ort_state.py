"""ORT's MoE expert-counter state file <-> STRP v1 profiles (``q38 profile --ort-state / --from-ort-state``).

onnxruntime 1.32.0 counts expert use itself when ``session.enable_moe_expert_counting=1`` and
starts from a state file named by ``session.moe_expert_counter_state_file`` (read when the
session is created; probed against the installed wheel, docs/offload.md "ORT expert state"):

    moe_expert_state 1
    main 46 QMoE 0 12

one record per (node, expert): the graph scope (``main``), the node's index in the *optimized*
graph, its op type, the expert index and a non-negative counter. Anything else is refused by ORT
(``Malformed`` / ``Invalid expert counter record``, ``Unknown MoE counter node``, ``MoE counter
type or expert index mismatch``, ``Duplicate expert counter``). The node indices are those of the
graph as ORT optimizes it at the default level (``ORT_ENABLE_ALL``) on the CPU: q38 learns them by
running one step of the graph with counting and statistics on
(``session.enable_moe_expert_statistics=1``) and reading ORT's ``RecordUsage`` INFO log lines
(``moe_expert_counters {"node_name": ..., "node_index": ...}``); a state file from a run at
another optimization level names other nodes and is refused.

Counters: q38 writes its measured selection counts as the counters (ORT takes any non-negative
value as the starting score); reading, integral counters are the counts, and fractional ones
(ORT's decayed scores) are scaled by :data:`SCALE` and rounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np

from q38.errors import ProfileError, clip
from q38.package.memory import graph_memory, load_graph_header, read_package_facts

if TYPE_CHECKING:
    import onnxruntime as ort

__all__ = ["HEADER", "SCALE", "OrtNode", "encode_state", "ort_qmoe_nodes", "parse_state", "state_to_counts"]

HEADER: Final = "moe_expert_state 1"
SCALE: Final = 1_000_000
_RECORD: Final = re.compile(r"^(\S+) (\d+) (\S+) (\d+) (\S+)$")
_LOG: Final = re.compile(r"moe_expert_counters (\{.*\})")


@dataclass(frozen=True)
class OrtNode:
    """A QMoE node as ORT's counter knows it."""

    scope: str
    index: int
    op: str
    name: str


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Redirect file descriptor 2 (where ORT's C++ logger writes) to ``path`` for the block."""
    saved = os.dup(2)
    with open(path, "wb") as fh:
        os.dup2(fh.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _feeds(session: ort.InferenceSession, head_size: int) -> dict[str, np.ndarray]:
    dtypes = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float16)": np.float16,
              "tensor(float)": np.float32, "tensor(bfloat16)": np.float16}  # fmt: skip
    feeds = {}
    for inp in session.get_inputs():
        shape = []
        for d in inp.shape:
            if isinstance(d, int):
                shape.append(d)
            elif "past" in d:
                shape.append(0)
            elif d == "kv_cache_dim":
                shape.append(head_size)
            else:
                shape.append(1)
        dtype = dtypes.get(inp.type)
        if dtype is None:
            raise ProfileError(f"input {inp.name!r} of type {inp.type}: cannot feed it to learn ORT's node indices")
        feeds[inp.name] = np.ones(shape, dtype) if inp.name in ("attention_mask",) else np.zeros(shape, dtype)
    return feeds


def ort_qmoe_nodes(graph: Path, *, head_size: int = 0) -> list[OrtNode]:
    """The QMoE nodes of ``graph`` with their optimized-graph indices, from one counted CPU step."""
    import onnxruntime as ort  # deferred: heavy; only the counted CPU step needs it

    options = ort.SessionOptions()
    options.log_severity_level = 1  # INFO: RecordUsage's lines
    options.add_session_config_entry("session.enable_moe_expert_counting", "1")
    options.add_session_config_entry("session.enable_moe_expert_statistics", "1")  # RecordUsage logs (probed)
    run = ort.RunOptions()
    run.log_severity_level = 1
    with tempfile.TemporaryDirectory(prefix="q38-ort-state-") as tmp:
        log = Path(tmp) / "ort.log"
        try:
            with _stderr_to(log):
                session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
                session.run(None, _feeds(session, head_size), run)
                del session
        except ProfileError:
            raise
        except Exception as exc:
            raise ProfileError(f"{graph}: onnxruntime cannot run it to learn its node indices: "
                               f"{clip(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, 300)}") from None  # fmt: skip
        text = log.read_text(errors="replace")
    nodes: dict[int, OrtNode] = {}
    for match in _LOG.finditer(text):
        try:
            rec = json.loads(match.group(1))
        except ValueError:
            continue
        node = OrtNode(str(rec.get("graph_scope", "main")), int(rec["node_index"]), str(rec["node_type"]),
                       str(rec["node_name"]))  # fmt: skip
        nodes.setdefault(node.index, node)
    return sorted(nodes.values(), key=lambda n: n.index)


def encode_state(nodes: Sequence[OrtNode], counts: np.ndarray) -> bytes:
    """ORT's state file for ``counts[row, expert]``, row i = ``nodes[i]``."""
    lines = [HEADER]
    for node, row in zip(nodes, counts, strict=True):
        for expert, value in enumerate(row):
            lines.append(f"{node.scope} {node.index} {node.op} {expert} {int(value)}")
    return ("\n".join(lines) + "\n").encode("ascii")


def parse_state(text: str, *, source: str) -> dict[tuple[str, int, str], dict[int, float]]:
    """(scope, node index, op) -> {expert: counter} of a state file, checked as ORT checks it."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != HEADER:
        raise ProfileError(f"{source}: expected the header {HEADER!r} (onnxruntime's MoE expert counter state)")
    out: dict[tuple[str, int, str], dict[int, float]] = {}
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        match = _RECORD.match(line.strip())
        if match is None:
            raise ProfileError(f"{source}: line {number}: malformed record (expected 'SCOPE NODE_INDEX OP EXPERT COUNTER')")
        scope, index, op, expert, counter = match.groups()
        try:
            value = float(counter)
        except ValueError:
            raise ProfileError(f"{source}: line {number}: counter {clip(counter, 40)!r} is not a number") from None
        if not np.isfinite(value) or value < 0:
            raise ProfileError(f"{source}: line {number}: counter must be finite and non-negative")
        row = out.setdefault((scope, int(index), op), {})
        if int(expert) in row:
            raise ProfileError(f"{source}: line {number}: duplicate counter for node {index} expert {expert}")
        row[int(expert)] = value
    return out


def state_to_counts(state: Mapping[tuple[str, int, str], Mapping[int, float]], nodes: Sequence[OrtNode],
                    experts: int, *, source: str) -> np.ndarray:  # fmt: skip
    """``counts[row, expert]`` of ``nodes`` (profile row order) from a parsed state; one line if they do not match."""
    known = {(n.scope, n.index, n.op): i for i, n in enumerate(nodes)}
    for key in state:
        if key not in known:
            raise ProfileError(f"{source}: node {key[1]} ({key[2]}, scope {key[0]}) is not a QMoE node of this package's "
                               f"optimized graph (indices {', '.join(str(n.index) for n in nodes)}); was it written "
                               "at another optimization level or for another package?")  # fmt: skip
    counts = np.zeros((len(nodes), experts), dtype=np.uint64)
    fractional = any(v != int(v) for row in state.values() for v in row.values())
    for key, row in state.items():
        for expert, value in row.items():
            if expert >= experts:
                raise ProfileError(f"{source}: node {key[1]}: expert {expert} outside 0..{experts - 1}")
            counts[known[key], expert] = round(value * SCALE) if fractional else int(value)
    return counts


def decoder_nodes(root: Path) -> tuple[list[OrtNode], int]:
    """The decoder's QMoE nodes in graph order (profile row order) with ORT's indices, and the expert count."""
    facts = read_package_facts(root)
    graph = facts.path(facts.decoder)
    order = [n.name for n in load_graph_header(graph).graph.node if n.op_type == "QMoE"]
    experts = {t.experts for t in graph_memory(graph, facts.root, state=False).tensors if t.kind == "routed_expert"}
    if not order or len(experts) != 1:
        raise ProfileError(f"{graph}: needs QMoE nodes of one expert count for an expert state file")
    by_name = {n.name: n for n in ort_qmoe_nodes(graph, head_size=facts.head_size)}
    missing = [name for name in order if name not in by_name]
    if missing:
        raise ProfileError(f"{graph}: onnxruntime reported no counter for QMoE node {missing[0]!r}")
    return [by_name[name] for name in order], experts.pop()
