"""Config <-> graph consistency: what the config says about a graph is what the graph holds.

* ``CFG-GRAPH-001``: the decoder's per-layer state names (``model.decoder.inputs`` /
  ``outputs`` entries with ``%d``: ``past.%d.conv``, ``present.%d.indexer_key``, ...) against the
  decoder graph. A graph state input or output (``past...`` / ``present...``) no declared pattern
  names is an error: the runtime cannot feed or read it. A declared pattern no graph value
  matches (the cpu variant declaring indexer state its graph does not have) is a warning: a
  stale name the runtime never binds.
* ``CFG-GRAPH-002``: the expert profile a package names (``qwen38_graph.expert_profile``, or a
  ``session.moe.offload.popularity_file`` of a graph's session) has one row per QMoE node of the
  graph it is applied to (every node, or the decoder layers without ``/mtp/`` drafts, as
  ``q38 offload`` reads it) and one column per expert of each of them.
* ``CFG-GRAPH-003``: each multi-draft verify graph ``sN`` of ``qwen38_graph.multidraft`` verifies
  N rows: the sequence dim of ``input_ids`` and ``position_ids`` (the last one, also for MRoPE
  ``[3, B, S]``) is N, its ``q38.verify_rows`` metadata says N, and it takes the target's inputs.

The rules read the package view's ``extra``: ``document`` (the raw config), ``config_dir`` and
``graph_models`` (label -> onnx_ir model of every graph that loaded).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import onnx_ir as ir

from contracts._graph import input_at
from contracts._rule import Rule, RuleDoc, Violation
from contracts.package_layout import PackageView
from contracts.shapes import shapes_of
from q38._ops import MS_DOMAIN, QMOE
from q38.errors import Q38Error
from q38.package.io.paths import resolve_inside
from q38.package.profile import read_profile

__all__ = ["RULES", "state_patterns"]

_SRC = "docs/package-format.md; q38/offload/convert.py (profile rows); q38/offload/multidraft.py"
_STATE = re.compile(r"^(past|present)[._].*\d")  # a per-layer state name carries its layer index
_DECODER_ROLES = ("target", "decoder")
_POPULARITY = "session.moe.offload.popularity_file"


def state_patterns(section: Mapping[str, Any]) -> dict[str, re.Pattern[str]]:
    """``{key: regex}`` of the per-layer name patterns (values holding ``%d``) of a names section."""
    out = {}
    for key, value in section.items():
        if isinstance(value, str) and "%d" in value:
            out[key] = re.compile(re.escape(value).replace("%d", r"\d+") + r"\Z")
    return out


def _decoder(view: PackageView) -> tuple[str, ir.Model, Mapping[str, Any]] | None:
    models = view.extra.get("graph_models") or {}
    document = view.extra.get("document") or {}
    model_section = document.get("model") if isinstance(document, Mapping) else None
    decoder = model_section.get("decoder") if isinstance(model_section, Mapping) else None
    for role in _DECODER_ROLES:
        if role in models and isinstance(decoder, Mapping):
            return role, models[role], decoder
    return None


def _check_state_names(view: PackageView) -> list[Violation]:
    found = _decoder(view)
    if found is None:
        return []
    role, model, decoder = found
    out: list[Violation] = []
    for side, values in (("inputs", model.graph.inputs), ("outputs", model.graph.outputs)):
        section = decoder.get(side)
        if not isinstance(section, Mapping):
            continue
        patterns = state_patterns(section)
        declared = {v for v in section.values() if isinstance(v, str)}
        names = [v.name for v in values if v.name]
        for key, pattern in sorted(patterns.items()):
            if not any(pattern.match(n) for n in names):
                out.append(Violation("CFG-GRAPH-001", f"model.decoder.{side}.{key}: {section[key]!r} names no "
                                     f"{side[:-1]} of the {role} graph", graph=role, severity="warning"))  # fmt: skip
        for name in names:
            if _STATE.match(name) and name not in declared and not any(p.match(name) for p in patterns.values()):
                out.append(Violation("CFG-GRAPH-001", f"{side[:-1]} {name!r} of the {role} graph matches no state name "
                                     f"model.decoder.{side} declares: the runtime cannot bind it", graph=role))  # fmt: skip
    return out


def _profile_paths(view: PackageView) -> Iterable[tuple[str, str, str]]:
    """(JSON path, relative file, graph role it applies to) of every profile the config names."""
    document = view.extra.get("document") or {}
    model_section = document.get("model") if isinstance(document, Mapping) else None
    if not isinstance(model_section, Mapping):
        return
    graph = model_section.get("qwen38_graph")
    if isinstance(graph, Mapping) and isinstance(graph.get("expert_profile"), str):
        yield "model.qwen38_graph.expert_profile", graph["expert_profile"], "target"
    decoder = model_section.get("decoder")
    options = decoder.get("session_options") if isinstance(decoder, Mapping) else None
    if isinstance(options, Mapping):
        entries = dict(options.get("config_entries") or {}) if isinstance(options.get("config_entries"), Mapping) else {}
        entries.update({k: v for k, v in options.items() if isinstance(k, str) and "." in k})
        value = entries.get(_POPULARITY)
        if isinstance(value, str) and value:
            role = "target" if "target" in (view.extra.get("graph_models") or {}) else "decoder"
            yield f"model.decoder.session_options.{_POPULARITY}", value, role


_CHAINED_DRAFT = re.compile(r"/mtp/[1-9][0-9]*/")


def _experts(node: ir.Node, model: ir.Model) -> int | None:
    return shapes_of(model).dim(input_at(node, 2), 0)


def _check_profile(view: PackageView) -> list[Violation]:
    models = view.extra.get("graph_models") or {}
    config_dir = Path(view.extra.get("config_dir") or view.root)
    out: list[Violation] = []
    seen: set[str] = set()
    for where, rel, role in _profile_paths(view):
        model = models.get(role)
        if model is None or rel in seen:
            continue
        seen.add(rel)
        try:
            path = resolve_inside(view.root, (config_dir / rel).relative_to(view.root).as_posix(), what=where)
            profile = read_profile(Path(path), what=where)
        except (Q38Error, OSError, ValueError):
            continue  # PATH-FIELD-00x / the surface reader name an unreadable or unsafe file
        # A profile row per expert bank (q38.offload.rows' sites): chained drafts (/mtp/1/, /mtp/2/
        # of the verify graphs) are copies of /mtp/0/ sharing its bank, so they have no row.
        nodes = [n for n in model.graph.all_nodes()
                 if n.domain == MS_DOMAIN and n.op_type == QMOE and not _CHAINED_DRAFT.match(n.name or "")]  # fmt: skip
        layers = [n for n in nodes if not (n.name or "").startswith("/mtp/")]
        if profile.num_layers not in {len(nodes), len(layers)}:
            out.append(Violation("CFG-GRAPH-002", f"{where}: the profile has {profile.num_layers} layers, but the {role} "
                                 f"graph has {len(nodes)} QMoE nodes ({len(layers)} decoder layers)", graph=role))  # fmt: skip
            continue
        covered = nodes if profile.num_layers == len(nodes) else layers
        for node in covered:
            experts = _experts(node, model)
            if experts is not None and experts != profile.num_experts:
                out.append(Violation("CFG-GRAPH-002", f"{where}: the profile has {profile.num_experts} experts per layer, "
                                     f"but QMoE node {node.name!r} has {experts}", graph=role, node=node.name or ""))  # fmt: skip
                break
    return out


def _rows(value: ir.Value | None, model: ir.Model) -> int | None:
    return shapes_of(model).dim(value, -1)


def _check_multidraft(view: PackageView) -> list[Violation]:
    document = view.extra.get("document") or {}
    models = view.extra.get("graph_models") or {}
    model_section = document.get("model") if isinstance(document, Mapping) else None
    graph = model_section.get("qwen38_graph") if isinstance(model_section, Mapping) else None
    multidraft = graph.get("multidraft") if isinstance(graph, Mapping) else None
    if not isinstance(multidraft, Mapping):
        return []
    target = models.get("target")
    out: list[Violation] = []
    for role in sorted(multidraft):
        model = models.get(role)
        match = re.fullmatch(r"s(\d+)", role)
        if model is None or match is None:
            continue
        rows = int(match.group(1))
        where = f"model.qwen38_graph.multidraft.{role}"
        inputs = {v.name: v for v in model.graph.inputs}
        for name in ("input_ids", "position_ids"):
            got = _rows(inputs.get(name), model)
            if name in inputs and got is not None and got != rows:
                out.append(Violation("CFG-GRAPH-003", f"{where}: {name} of {role} has {got} rows, the role verifies {rows}",
                                     graph=role))  # fmt: skip
        meta = model.metadata_props.get("q38.verify_rows")
        if meta is not None and meta != str(rows):
            out.append(Violation("CFG-GRAPH-003", f"{where}: q38.verify_rows of {role} is {meta!r}, the role verifies {rows}",
                                 graph=role))  # fmt: skip
        if target is not None:
            missing = sorted(v.name for v in target.graph.inputs if v.name not in inputs)
            if missing:
                out.append(Violation("CFG-GRAPH-003", f"{where}: {role} lacks the target's inputs {missing[:4]}"
                                     + (f" (+{len(missing) - 4})" if len(missing) > 4 else ""), graph=role))  # fmt: skip
    return out


FAMILY = "config-graphs"
"""The rule family of this module's rules (``q38 rules --family``)."""

RULES: tuple[Rule, ...] = (
    Rule("CFG-GRAPH-001", "the decoder's declared per-layer state names and its graph's state inputs / "
         "outputs match (undeclared state: error; a name matching nothing: warning)", _SRC, "run-time",
         "package", _check_state_names, family=FAMILY, doc=RuleDoc(
        "The decoder's declared per-layer state names (inputs / outputs templates in the config) "
        "must match its graph's state inputs and outputs; a graph state the config does not "
        "declare is an error, a declared name matching nothing a warning.",
        '"inputs": {"past_key_names": "past_key_%d"} with graph inputs past.%d.key',
        "Make the config's name templates match the graph's state input / output names.",
    )),
    Rule("CFG-GRAPH-002", "an expert profile has one row per QMoE node (or decoder layer) and one column "
         "per expert of the graph it applies to", _SRC, "run-time", "package", _check_profile, family=FAMILY, doc=RuleDoc(
        "An expert-popularity profile (STRP v1) has one row per QMoE node (or decoder layer) and "
        "one column per expert of the graph it applies to; other dimensions mis-assign resident "
        "slots.",
        "expert-profile.bin with 12 layers x 64 experts for a graph of 48 QMoE nodes x 128 experts",
        "Regenerate the profile for this graph (q38 profile) or point the config at the right one.",
    )),
    Rule("CFG-GRAPH-003", "each multidraft sN graph verifies N rows (input_ids / position_ids, "
         "q38.verify_rows) and takes the target's inputs", _SRC, "run-time", "package", _check_multidraft, family=FAMILY, doc=RuleDoc(
        "Each multi-draft sN graph verifies N rows (input_ids / position_ids width and the "
        "q38.verify_rows metadata) and takes the target graph's inputs.",
        "model_s3.onnx with input_ids [B, 2] (needs 3 rows)",
        "Regenerate the multi-draft graphs with q38 offload.",
    )),
)  # fmt: skip


def check_config_graphs(view: PackageView) -> list[Violation]:
    """Every config <-> graph violation of ``view``."""
    found: list[Violation] = []
    for rule in RULES:
        found.extend(rule.check_package(view))
    return found


__all__ += ["check_config_graphs"]
