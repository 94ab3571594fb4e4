"""genai_config.json rules: the qwen38 graph config surface (SPEC §4, docs/package-format.md).

The checks take the raw JSON document (a dict), so a broken config yields violations with rule ids
instead of the first parse error. ``CFG-SURFACE-001`` runs q38's strict parser
(``q38.package.parse_config``: unknown keys, types, v12 migration) and reports its message when
no more specific rule already explains the failure.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from contracts._rule import Examples, Rule, RuleDoc, Violation
from q38.errors import UnsafePathError

__all__ = ["RULES", "check_genai_config", "session_option_blocks"]

_SRC = "SPEC §4; docs/package-format.md (genai_config.json, config surface v12b)"


def _graph(config: Mapping[str, Any]) -> Mapping[str, Any]:
    model = config.get("model")
    if not isinstance(model, Mapping):
        return {}
    graph = model.get("qwen38_graph", model.get("qwen38"))
    return graph if isinstance(graph, Mapping) else {}


def session_option_blocks(config: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(JSON path, session_options object) for the decoder, the head and every profile overlay."""
    model = config.get("model")
    if isinstance(model, Mapping):
        decoder = model.get("decoder")
        if isinstance(decoder, Mapping) and isinstance(decoder.get("session_options"), Mapping):
            yield "model.decoder.session_options", decoder["session_options"]
    head = _graph(config).get("fold", {})
    head = head.get("head_r2", {}) if isinstance(head, Mapping) else {}
    if isinstance(head, Mapping) and isinstance(head.get("session_options"), Mapping):
        yield "model.qwen38_graph.fold.head_r2.session_options", head["session_options"]
    profiles = config.get("runtime_profiles", [])
    for i, profile in enumerate(profiles if isinstance(profiles, list) else []):
        try:
            so = profile["overlay"]["model"]["decoder"]["session_options"]
        except (KeyError, TypeError):
            continue
        if isinstance(so, Mapping):
            yield f"runtime_profiles[{i}].overlay.model.decoder.session_options", so


def _check_string_values(config: Mapping[str, Any]) -> list[Violation]:
    found = []
    for path, so in session_option_blocks(config):
        for key, value in so.items():
            if key == "provider_options" and isinstance(value, list):
                for i, entry in enumerate(value):
                    for ep, options in (entry.items() if isinstance(entry, Mapping) else ()):
                        for name, item in (options.items() if isinstance(options, Mapping) else ()):
                            if not isinstance(item, str):
                                found.append(Violation("CFG-VALUES-001", f"{path}.provider_options[{i}].{ep}.{name}: "
                                                       f"provider option values must be strings, got {item!r}"))  # fmt: skip
            elif key == "config_entries" and isinstance(value, Mapping):
                for name, item in value.items():
                    if not isinstance(item, str):
                        found.append(Violation("CFG-VALUES-001", f"{path}.config_entries.{name}: session "
                                               f"config values must be strings, got {item!r}"))  # fmt: skip
            elif "." in key and not isinstance(value, str):
                found.append(Violation("CFG-VALUES-001", f"{path}.{key}: session config values must be strings, got {value!r}"))
    return found


def _profiles(config: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    raw = config.get("runtime_profiles", [])
    return [p for p in raw if isinstance(p, Mapping)] if isinstance(raw, list) else []


def _check_profile_ids(config: Mapping[str, Any]) -> list[Violation]:
    found, seen = [], set()
    for i, profile in enumerate(_profiles(config)):
        pid = profile.get("id")
        if not isinstance(pid, str) or not pid:
            found.append(Violation("CFG-PROFILE-001", f"runtime_profiles[{i}].id: must be a non-empty string"))
        elif pid in seen:
            found.append(Violation("CFG-PROFILE-001", f"runtime_profiles[{i}].id: duplicate runtime profile id {pid!r}"))
        seen.add(pid)
    return found


def _span(profile: Mapping[str, Any]) -> tuple[int, int] | None:
    e = profile.get("eligibility")
    if not isinstance(e, Mapping):
        return None
    lo = e.get("minimum_total_device_memory_bytes")
    hi = e.get("maximum_total_device_memory_bytes", 2**64)
    if not isinstance(lo, int) or not isinstance(hi, int):
        return None
    return lo, hi


def _check_profile_ranges(config: Mapping[str, Any]) -> list[Violation]:
    found = []
    spans = [(i, p.get("id"), _span(p)) for i, p in enumerate(_profiles(config))]
    for i, _pid, span in spans:
        if span is not None and span[1] < span[0]:
            found.append(Violation("CFG-PROFILE-002", f"runtime_profiles[{i}].eligibility: maximum_total_device_memory_bytes is below the minimum"))
    valid = [(i, pid, s) for i, pid, s in spans if s is not None and s[0] <= s[1]]
    for a in range(len(valid)):
        for b in range(a + 1, len(valid)):
            (i, pa, (lo_a, hi_a)), (j, pb, (lo_b, hi_b)) = valid[a], valid[b]
            if lo_a <= hi_b and lo_b <= hi_a:
                found.append(Violation("CFG-PROFILE-002", f"runtime_profiles[{j}].eligibility: runtime profile eligibility ranges overlap ({pa!r} and {pb!r})"))
    return found


def _check_prefill_chunk(config: Mapping[str, Any]) -> list[Violation]:
    graph = _graph(config)
    prefill = graph.get("prefill")
    kv = graph.get("kv_capacity")
    chunk = prefill.get("chunk") if isinstance(prefill, Mapping) else graph.get("prefill_chunk")
    for where, value in (("kv_capacity", kv), ("prefill.chunk", chunk)):
        if isinstance(value, bool):  # JSON true/false is a Python int: refuse it by name
            return [Violation("CFG-PREFILL-001", f"model.qwen38_graph.{where}: expected an integer, got {json.dumps(value)}")]
    if not isinstance(chunk, int) or not isinstance(kv, int):
        return []
    if chunk <= 0:
        return [Violation("CFG-PREFILL-001", f"model.qwen38_graph.prefill.chunk: must be positive, got {chunk}")]
    if chunk > kv:
        return [Violation("CFG-PREFILL-001", f"model.qwen38_graph.prefill.chunk: chunk {chunk} exceeds kv_capacity {kv}")]
    return []


def library_paths(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(JSON path, relative path) of every custom-op library the config names."""
    out = []
    for path, so in session_option_blocks(config):
        lib = so.get("custom_ops_library")
        if isinstance(lib, str):
            out.append((f"{path}.custom_ops_library", lib))
    libs = _graph(config).get("libraries", {})
    for name, rel in (libs.items() if isinstance(libs, Mapping) else ()):
        if isinstance(rel, str):
            out.append((f"model.qwen38_graph.libraries.{name}", rel))
    return out


def _check_library_paths(config: Mapping[str, Any]) -> list[Violation]:
    from q38.package import safe_relpath  # deferred: pulls in numpy (q38.package.profile)

    found = []
    for path, rel in library_paths(config):
        try:
            safe_relpath(rel, what=path)
        except UnsafePathError as exc:
            found.append(Violation("CFG-LIB-001", str(exc)))
    return found


def _check_surface(config: Mapping[str, Any]) -> list[Violation]:
    """q38's strict parser of the config's surface: v12b, or onnxruntime-genai 0.18.0's (genai).

    A genai config that only the Qwen3.8 research builder's keys keep 0.18.0 from loading is a
    warning (CFG-SURFACE-002): q38 reads it, released onnxruntime-genai would refuse it.
    """
    # deferred: pulls in numpy (q38.package.profile)
    from q38.package.surface import document_reader

    problem = document_reader(config).config_problem(config)
    if problem is None:
        return []
    severity, message = problem
    if severity == "warning":
        return [Violation("CFG-SURFACE-002", message, severity="warning")]
    return [Violation("CFG-SURFACE-001", message)]


def _only(rule_id: str) -> Callable[[Mapping[str, Any]], list[Violation]]:
    """The part of :func:`_check_surface` that rule record ``rule_id`` owns.

    One parse yields both ids, and ``check_genai_config`` runs that parse once; each record
    reports only its own id.
    """

    def check(config: Mapping[str, Any]) -> list[Violation]:
        return [v for v in _check_surface(config) if v.rule_id == rule_id]

    check.__name__ = f"_check_{rule_id.lower().replace('-', '_')}"
    return check


FAMILY = "config"
"""The rule family of this module's rules (``q38 rules --family``)."""

# Two runtime profiles with disjoint device-memory ranges (the config rules' examples).
_PROFILE_A = {"id": "a", "eligibility": {"minimum_total_device_memory_bytes": 10, "maximum_total_device_memory_bytes": 20},
              "overlay": {"model": {"decoder": {"filename": "model.onnx"}}}}  # fmt: skip
_PROFILE_B = {"id": "b", "eligibility": {"minimum_total_device_memory_bytes": 30},
              "overlay": {"model": {"decoder": {"filename": "model.onnx"}}}}  # fmt: skip

_SPECIFIC = (
    Rule("CFG-VALUES-001", "provider-option and session config values are strings", _SRC,
         "run-time", "genai-config", _check_string_values, examples=Examples({"model": {"decoder": {"session_options": {"session.x": "1"}}}},
                  {"model": {"decoder": {"session_options": {"session.x": 1}}}}),
         family=FAMILY, doc=RuleDoc(
        "onnxruntime-genai passes provider options and session config entries to ORT as strings; "
        "a number or boolean in genai_config.json is not accepted by upstream GenAI.",
        '"provider_options": [{"cuda": {"enable_cuda_graph": 1}}]',
        'Write the value as a decimal string: "enable_cuda_graph": "1".',
    )),
    Rule("CFG-PROFILE-001", "runtime profile ids are non-empty and unique", _SRC, "run-time",
         "genai-config", _check_profile_ids, examples=Examples({"runtime_profiles": [_PROFILE_A, _PROFILE_B]},
                  {"runtime_profiles": [_PROFILE_A, {**_PROFILE_B, "id": "a"}]}),
         family=FAMILY, doc=RuleDoc(
        "The Qwen3.8 graph runtime selects a runtime profile by id; an empty id or two profiles "
        "with one id make the selection ambiguous.",
        '"runtime_profiles": [{"id": "p24"}, {"id": "p24"}]',
        "Give every runtime profile a distinct, non-empty id.",
    )),
    Rule("CFG-PROFILE-002", "runtime profile device-memory ranges [min, max] do not overlap", _SRC,
         "run-time", "genai-config", _check_profile_ranges, examples=Examples({"runtime_profiles": [_PROFILE_A, _PROFILE_B]},
                  {"runtime_profiles": [_PROFILE_A, {**_PROFILE_B, "eligibility": {"minimum_total_device_memory_bytes": 15}}]}),
         family=FAMILY, doc=RuleDoc(
        "Runtime profiles are chosen by device memory: their [minimum, maximum] device-memory "
        "ranges must not overlap, or one GPU matches two profiles.",
        "profile a: [20 GiB, 28 GiB], profile b: [24 GiB, 34 GiB]",
        "Make the ranges disjoint (e.g. [20, 24) and [24, 34] GiB).",
    )),
    Rule("CFG-PREFILL-001", "0 < prefill.chunk <= kv_capacity", _SRC, "run-time", "genai-config",
         _check_prefill_chunk, examples=Examples({"model": {"qwen38_graph": {"prefill": {"chunk": 256}}}},
                  {"model": {"qwen38_graph": {"prefill": {"chunk": 0}}}}),
         family=FAMILY, doc=RuleDoc(
        "The prefill graph processes prompts in chunks: 0 < prefill.chunk <= kv_capacity, or the "
        "runtime cannot place a chunk in the KV cache.",
        '"prefill": {"chunk": 8192}  with kv_capacity 4096',
        "Choose a chunk between 1 and kv_capacity.",
    )),
    Rule("CFG-LIB-001", "custom-op library paths are relative and stay inside the package", _SRC,
         "run-time", "genai-config", _check_library_paths, examples=Examples({"model": {"qwen38_graph": {"libraries": {"x": "libs/x.so"}}}},
                  {"model": {"qwen38_graph": {"libraries": {"x": "/etc/x.so"}}}}),
         family=FAMILY, doc=RuleDoc(
        "Custom-op library paths in the config are loaded relative to the package; an absolute "
        "path or one that leaves the package ('..') loads a library the package does not carry.",
        '"custom_ops_library": "/usr/lib/libqwen38_plane.so"',
        "Ship the library in the package (libs/) and name it by a relative path.",
    )),
)  # fmt: skip
RULES: tuple[Rule, ...] = (
    *_SPECIFIC,
    Rule("CFG-SURFACE-001", "the config matches its strict surface: v12b, or what onnxruntime-genai "
         "0.18.0 accepts (genai; unknown keys rejected)", _SRC, "run-time", "genai-config",
         _only("CFG-SURFACE-001"), examples=Examples({},
                  {"model": {"qwen38_graph": {"bogus": 1}}}),
         family=FAMILY, doc=RuleDoc(
        "genai_config.json must match its strict surface: q38's v12b surface, or what "
        "onnxruntime-genai 0.18.0 accepts for builder packages; an unknown key, a wrong type or a "
        "missing required key is refused (the message names the key path).",
        '"model": {"decoder": {"sesion_options": {}}}  (misspelt key)',
        "Fix or remove the key the message names (docs/package-format.md lists the surface).",
    )),
    Rule("CFG-SURFACE-002", "a genai config carries no Qwen3.8 research-builder key that released "
         "onnxruntime-genai 0.18.0 refuses (a warning: q38 reads it)", _SRC + "; onnxruntime-genai "
         "0.18.0's config key table (q38/package/genai/schema.py mirrors it)", "run-time", "genai-config",
         _only("CFG-SURFACE-002"), family=FAMILY, doc=RuleDoc(
        "A builder (genai) package's config may carry the keys the Qwen3.8 research builder writes "
        "(model.engram, model.decoder.ple_token_pad_id, the past_indexer_* / past_ple_* input "
        "names, fixed_indexer / fixed_ple state groups, mtp.index_share). q38 reads them, but "
        "released onnxruntime-genai 0.18.0 parses genai_config.json strictly and refuses an "
        "unknown key when it loads the model (its config reader has no handler for the key); q38 "
        "mirrors that key table and reports the first such key as 'onnxruntime-genai 0.18.0 refuses this config: "
        "genai_config.json: KEY.PATH: unknown key'. A warning: the package is valid for the "
        "research runtime, not for released GenAI.",
        '"model": {"decoder": {"ple_token_pad_id": 0, ...}}  (a research-builder key)',
        "Ship the package to the research runtime only, or export it with the released builder "
        "(no research keys) when released onnxruntime-genai must load it; --ignore CFG-SURFACE-002 "
        "or a baseline records the expectation.",
        "warning",
    )),
)  # fmt: skip


def check_genai_config(config: Mapping[str, Any]) -> list[Violation]:
    """Every config-surface violation of the raw ``genai_config.json`` document ``config``."""
    if not isinstance(config, Mapping):  # the rules below walk an object; say what it is instead
        return [Violation("CFG-SURFACE-001", f"genai_config.json: expected an object, got {type(config).__name__}")]
    found: list[Violation] = []
    for rule in _SPECIFIC:
        found.extend(rule.check_config(config))
    if not found:
        found.extend(_check_surface(config))
    return found
