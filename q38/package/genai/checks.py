"""The checks onnxruntime-genai 0.18.0 runs on ``genai_config.json`` after parsing it.

``og.Config(dir)`` parses the document (:mod:`q38.package.genai.schema` mirrors that) and then
validates a few things across keys: ``model.context_length`` must be set, runtime profiles must
be well formed and disjoint, and the decoder's ``state_groups`` must name valid layers and
resolve their state bindings (``model.decoder.inputs`` / ``outputs`` templates) to distinct
names. Each check here was probed against the installed 0.18.0 wheel; the differential test
keeps the verdicts equal. Every failure is one :class:`ConfigError` line with its key path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

from q38.errors import ConfigError
from q38.package.config_schema import config_path

__all__ = ["check_document"]

# The state each group kind binds, with GenAI's default name templates (past input, present output).
_BINDINGS: Final = {
    "paged_kv": (
        ("key", "past_key_names", "past_key_values.%d.key", "present_key_names", "present.%d.key"),
        ("value", "past_value_names", "past_key_values.%d.value", "present_value_names", "present.%d.value"),
    ),
    "fixed_conv": (
        ("state", "past_conv_names", "past_key_values.%d.conv_state", "present_conv_names", "present.%d.conv_state"),
    ),
    "fixed_recurrent": (
        ("state", "past_recurrent_names", "past_key_values.%d.recurrent_state", "present_recurrent_names",
         "present.%d.recurrent_state"),
    ),
}  # fmt: skip
_FIXED: Final = ("fixed_conv", "fixed_recurrent")


def _obj(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _fail(source: str, path: str, message: str) -> ConfigError:
    return ConfigError(f"{source}: {path}: {message}")


def _context_length(doc: Mapping[str, Any], source: str) -> None:
    model = _obj(doc.get("model"))
    if not model.get("context_length"):
        raise _fail(source, "model.context_length", "must be set and > 0 (onnxruntime-genai requires it)")


def _template_ok(template: str) -> bool:
    return template.count("%") == 1 and template.count("%d") == 1


def _state_groups(doc: Mapping[str, Any], source: str) -> None:
    decoder = _obj(_obj(doc.get("model")).get("decoder"))
    if "state_groups" not in decoder:
        return
    groups: Sequence[Mapping[str, Any]] = decoder["state_groups"]
    base = "model.decoder.state_groups"
    if not groups:
        raise _fail(source, base, "must not be empty")
    layers = int(decoder.get("num_hidden_layers", 0))
    inputs, outputs = _obj(decoder.get("inputs")), _obj(decoder.get("outputs"))
    paged: set[int] = set()
    names: set[str] = set()
    updates: list[Mapping[str, Any] | None] = []
    for i, group in enumerate(groups):
        path = f"{base}[{i}]"
        kind = group.get("kind")
        if kind is None:
            raise _fail(source, path, "is missing kind")
        ids = [int(x) for x in group.get("layer_ids", [])]
        if not ids:
            raise _fail(source, path, f"({kind}) must contain at least one layer_id")
        seen: set[int] = set()
        for layer in ids:
            if not 0 <= layer < layers:
                raise _fail(source, path, f"({kind}) has layer_id {layer} outside [0, num_hidden_layers={layers})")
            if layer in seen:
                raise _fail(source, path, f"({kind}) contains duplicate layer_id {layer}")
            seen.add(layer)
            if kind == "paged_kv":
                if layer in paged:
                    raise _fail(source, path, f"(paged_kv) overlaps another paged_kv group at layer_id {layer}")
                paged.add(layer)
        update = group.get("state_update")
        if update is not None:
            if kind not in _FIXED:
                raise _fail(source, path, f"({kind}) only fixed state groups support state_update")
            if kind == "fixed_conv" and "key_head_count" in update:
                raise _fail(source, path, "(fixed_conv) fixed_conv state_update does not use key_head_count")
            if kind == "fixed_recurrent" and "key_head_count" not in update:
                raise _fail(source, path, "(fixed_recurrent) fixed_recurrent state_update requires key_head_count")
            if "capacity" not in update:
                raise _fail(source, path, f"({kind}) state_update capacity must be in [1, 8]")
            for key in ("state_update_capture_count", "state_update_active"):
                if "%" in str(inputs.get(key, "")):
                    raise _fail(source, path, f"({kind}) {key} must be a graph input name, not a template")
        if kind in _FIXED:
            updates.append(update)
        # A research builder kind (fixed_indexer, fixed_ple) binds names 0.18.0 has no defaults for:
        # 0.18.0 refuses the kind itself (kept as og_refusal), so there are no bindings of its to resolve.
        for binding, past_key, past_default, present_key, present_default in _BINDINGS.get(str(kind), ()):
            for template, side in ((inputs.get(past_key, past_default), "input"),
                                   (outputs.get(present_key, present_default), "output")):  # fmt: skip
                if not _template_ok(str(template)):
                    raise _fail(source, path, f"({kind}) binding {binding!r} has malformed {side} template "
                                              f"{template!r}; expected exactly one %d")  # fmt: skip
                for layer in ids:
                    name = str(template).replace("%d", str(layer))
                    if name in names:
                        raise _fail(source, path, f"({kind}) resolves more than one binding to {name!r}")
                    names.add(name)
    declared = [u for u in updates if u is not None]
    if declared:
        if len(declared) != len(updates):
            raise _fail(source, base, "all fixed state groups must declare state_update when any fixed group declares it")
        if len({u.get("capacity") for u in declared}) > 1:
            raise _fail(source, base, "all fixed state_update groups must use the same capacity")
        if len({u.get("enabled", True) for u in declared}) > 1:
            raise _fail(source, base, "all fixed state_update groups must use the same enabled setting")


def _span(eligibility: Mapping[str, Any], kind: str) -> tuple[float, float]:
    lo = eligibility.get(f"minimum_{kind}_device_memory_bytes", 0)
    hi = eligibility.get(f"maximum_{kind}_device_memory_bytes", math.inf)
    return float(lo), float(hi)


def _has_overlay_fields(overlay: Mapping[str, Any]) -> bool:
    def leaves(value: object) -> bool:
        if isinstance(value, Mapping):
            return any(leaves(v) for v in value.values())
        return True

    return leaves(overlay)


def _runtime_profiles(doc: Mapping[str, Any], source: str) -> None:
    profiles = doc.get("runtime_profiles")
    if not isinstance(profiles, list):
        return  # a top-level scalar is ignored by GenAI; anything else was refused while parsing
    seen: set[str] = set()
    spans: list[tuple[str, Mapping[str, Any]]] = []
    for i, profile in enumerate(profiles):
        path = f"runtime_profiles[{i}]"
        pid = profile.get("id", "")
        if not pid:
            raise _fail(source, f"{path}.id", "runtime profile id must not be empty")
        elig = _obj(profile.get("eligibility"))
        if "minimum_total_device_memory_bytes" not in elig:
            raise _fail(source, f"{path}.eligibility", f"runtime profile {pid!r} is missing minimum_total_device_memory_bytes")
        overlay = _obj(profile.get("overlay"))
        if not _has_overlay_fields(overlay):
            raise _fail(source, f"{path}.overlay", f"runtime profile {pid!r} does not contain any overlay fields")
        decoder = _obj(_obj(overlay.get("model")).get("decoder"))
        if "filename" in decoder:
            filename = decoder["filename"]
            problem = "must not be empty" if not filename else config_path(filename)
            if problem:
                raise _fail(source, f"{path}.overlay.model.decoder.filename", f"runtime profile {pid!r}: {problem}")
        for kind in ("total", "free"):
            lo, hi = _span(elig, kind)
            if hi < lo:
                raise _fail(source, f"{path}.eligibility",
                            f"runtime profile {pid!r} has maximum_{kind}_device_memory_bytes below its minimum")  # fmt: skip
        if pid in seen:
            raise _fail(source, f"{path}.id", f"duplicate runtime profile id {pid!r}")
        seen.add(pid)
        spans.append((pid, elig))
    for a in range(len(spans)):
        for b in range(a + 1, len(spans)):
            (pa, ea), (pb, eb) = spans[a], spans[b]
            ia, ib = ea.get("is_integrated"), eb.get("is_integrated")
            if ia is not None and ib is not None and ia != ib:
                continue
            if all(_span(ea, k)[0] <= _span(eb, k)[1] and _span(eb, k)[0] <= _span(ea, k)[1] for k in ("total", "free")):
                raise _fail(source, f"runtime_profiles[{b}].eligibility",
                            f"runtime profile eligibility ranges overlap: {pa!r} and {pb!r}")  # fmt: skip


def _block_drafters(doc: Mapping[str, Any], source: str) -> None:
    """GenAI 0.18.0's block-drafter rules: one drafter, and its sampling switches agree.

    It configures ``model.dflash2`` or ``model.dspark``, refusing the second as it reads it (even an
    empty one), and refuses a drafter whose ``independent_sampling`` disagrees with its
    ``sampled_proposal`` (true only with "independent").
    """
    model = _obj(doc.get("model"))
    present = [key for key in model if key in ("dflash2", "dspark")]
    if len(present) > 1:
        raise _fail(source, f"model.{present[1]}", "only one of model.dflash2 and model.dspark may be configured")
    for key in present:
        drafter = _obj(model[key])
        if "independent_sampling" in drafter and "sampled_proposal" in drafter \
                and drafter["independent_sampling"] != (drafter["sampled_proposal"] == "independent"):
            raise _fail(source, f"model.{key}.independent_sampling",
                        "conflicts with sampled_proposal; set only sampled_proposal")


def check_document(doc: Mapping[str, Any], *, source: str) -> None:
    """GenAI 0.18.0's checks after parsing (``doc`` already passed ``genai_surface.validate``)."""
    _context_length(doc, source)
    _block_drafters(doc, source)
    _runtime_profiles(doc, source)
    _state_groups(doc, source)
