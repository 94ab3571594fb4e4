"""A corpus of genai_config.json documents for the onnxruntime-genai 0.18.0 differential test.

Seeds are real configs (the committed builder fixtures, and a few hand-made ones that exercise
sections the fixtures lack: mtp, state groups, runtime profiles, engine, speculative, pipeline).
Each seed is mutated systematically: an unknown key at every object, every value replaced by
every JSON kind and by odd values (0, -1, fractions, int32/int64 edges, traversing paths, empty
strings), every key deleted, and a set of hand-written edge cases. ``og_verdict`` asks the
installed ``og.Config``; the test compares it with q38's parser case by case.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["OgProbe", "corpus", "mutations", "seed_configs"]

Path_ = tuple[str | int, ...]

_E = {"minimum_total_device_memory_bytes": 1}


def _hand_seeds() -> list[tuple[str, dict[str, Any]]]:
    """Configs that exercise sections the builder fixtures do not all carry."""
    base: dict[str, Any] = {
        "model": {
            "type": "qwen3_5_moe_text", "context_length": 256, "vocab_size": 512, "bos_token_id": 1,
            "eos_token_id": [2, 3], "pad_token_id": 0,
            "decoder": {
                "filename": "model.onnx", "head_size": 16, "hidden_size": 64, "num_attention_heads": 4,
                "num_hidden_layers": 4, "num_key_value_heads": 2, "state_update_capacity": 4, "conv_cache_size": 3,
                "session_options": {
                    "log_id": "onnxruntime-genai", "intra_op_num_threads": 2,
                    "graph_optimization_level": "ORT_ENABLE_ALL", "enable_cpu_mem_arena": True,
                    "ep.cuda.fpa_intb_gemm": "1",
                    "provider_options": [{"cuda": {"enable_cuda_graph": "0",
                                                   "device_filtering_options": {"hardware_device_type": "gpu"}}}],
                },
                "inputs": {"input_ids": "input_ids", "past_key_names": "past_key_values.%d.key",
                           "past_value_names": "past_key_values.%d.value", "past_conv_names": "past.%d.conv",
                           "past_recurrent_names": "past.%d.recurrent", "block_table": "block_table"},
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                            "present_value_names": "present.%d.value", "present_conv_names": "present.%d.conv",
                            "present_recurrent_names": "present.%d.recurrent", "hidden_states": "hidden_states"},
                "state_groups": [
                    {"kind": "paged_kv", "layer_ids": [3]},
                    {"kind": "fixed_conv", "layer_ids": [0, 1, 2], "state_update": {"capacity": 4}},
                    {"kind": "fixed_recurrent", "layer_ids": [0, 1, 2],
                     "state_update": {"capacity": 4, "key_head_count": 2}},
                ],
                "shared_initializers": [{"name": "w", "data_file": "model.onnx.data", "offset": "0",
                                         "length": "64", "data_type": 10, "shape": [4, 8]}],
                "sliding_window": {"window_size": 8, "slide_key_value_cache": False, "layers": [3]},
                "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
            },
            "mtp": {
                "enabled": True, "filename": "mtp.onnx", "num_hidden_layers": 1, "num_key_value_heads": 2,
                "head_size": 16, "main_hidden_states": "hidden_states",
                "inputs": {"input_ids": "input_ids", "hidden_states": "hidden_states",
                           "past_key_names": "past_key_values.%d.key"},
                "outputs": {"logits": "logits", "hidden_states": "hidden_states_out"},
                "session_options": {"log_id": "mtp", "provider_options": []},
                "shared_initializers": [{"name": "w", "data_file": "model.onnx.data", "offset": "0",
                                         "length": "64", "data_type": 10, "shape": [4, 8]}],
            },
        },
        "search": {"max_length": 256, "do_sample": False, "top_p": 1.0, "chunk_size": 64},
        "engine": {"dynamic_batching": {"block_size": 16, "max_batch_size": 4, "gpu_utilization_factor": 0.6,
                                        "prefix_caching": False}},
        "speculative": {"max_draft_tokens": 4, "ngram_size": 0},
        "runtime_profiles": [
            {"id": "small", "eligibility": {"minimum_total_device_memory_bytes": 1,
                                            "maximum_total_device_memory_bytes": 1000},
             "overlay": {"model": {"decoder": {"filename": "small.onnx"}}, "search": {"chunk_size": 32}}},
            {"id": "big", "eligibility": {"minimum_total_device_memory_bytes": 1001, "is_integrated": False},
             "overlay": {"engine": {"dynamic_batching": {"num_blocks": 64}}, "speculative": {"max_draft_tokens": 6}}},
        ],
    }  # fmt: skip
    pipeline = {
        "model": {
            "type": "decoder-pipeline", "context_length": 64, "vocab_size": 32,
            "decoder": {"pipeline": [{"body": {"filename": "body.onnx", "run_on_prompt": True,
                                               "inputs": ["input_ids"], "outputs": ["hidden_states"],
                                               "session_options": {"log_id": "b"}}},
                                     {"head": {"filename": "head.onnx", "is_lm_head": True,
                                               "output_names_forwarder": {"a": "b"}}}]},
            "vision": {"filename": "vision.onnx", "spatial_merge_size": 2, "inputs": {"pixel_values": "pv"},
                       "pipeline": {"patch": {"filename": "p.onnx", "run_on_cpu": True}}},
            "embedding": {"filename": "embed.onnx", "outputs": {"inputs_embeds": "e"}},
        },
        "weights_pool": "ignored scalar",
    }  # fmt: skip
    drafter = {  # every key of a block drafter (model.dflash2 / model.dspark, one element in 0.18.0)
        "filename": "draft.onnx", "main_aux_hidden_states": "aux", "head_size": 16, "num_hidden_layers": 1,
        "num_key_value_heads": 2, "num_draft_tokens": 4, "selector_top_k": 2, "block_size": 4,
        "mask_token_id": 5, "sliding_window": 8, "independent_sampling": False, "sampled_proposal": "lattice",
        "sampling_min_p": 0.25, "sampling_top_p": 0.5, "sampling_temperature": 0.7, "aux_hidden_state_layers": [1, 2],
        "session_options": {"log_id": "draft"}, "run_options": {"log_tag": "draft"},
        "inputs": {k: k for k in ("input_ids", "inputs_embeds", "aux_hidden_states", "past_key_names",
                                  "past_value_names", "past_key_scale_names", "past_value_scale_names",
                                  "block_table", "cumulative_sequence_lengths", "past_sequence_lengths",
                                  "attention_metadata", "block_row_index", "q_row_map", "qkv_row_map")},
        "outputs": {k: k for k in ("candidate_ids", "scores", "present_key_names", "present_value_names",
                                   "present_key_scale_names", "present_value_scale_names")},
        "shared_initializers": [{"name": "w", "data_file": "model.onnx.data", "offset": "0", "length": "64",
                                 "data_type": 10, "shape": [4, 8]}],
    }
    def with_drafter(key: str, **values: Any) -> dict[str, Any]:
        return {"model": {"type": "qwen3_5_moe_text", "context_length": 64, "vocab_size": 32,
                          "decoder": {"filename": "model.onnx"}, key: {**drafter, **values}}}

    # The full seed in two halves of about equal size (its mutations are judged in ~2 s each, so
    # neither is a slow test and mutation runs, which leave slow tests out, judge with both).
    graphs = copy.deepcopy(base)
    for root in ("search", "engine", "speculative", "runtime_profiles"):
        del graphs[root]
    roots = copy.deepcopy(base)
    roots["model"] = {k: v for k, v in base["model"].items() if k not in ("decoder", "mtp")}
    roots["model"]["decoder"] = {"filename": "model.onnx"}
    return [("hand/graphs", graphs), ("hand/roots", roots), ("hand/pipeline", pipeline), ("hand/dflash2", with_drafter("dflash2")),
            ("hand/dspark", with_drafter("dspark", independent_sampling=True, sampled_proposal="independent"))]


def seed_configs(fixture_root: Path | None = None, extra_roots: tuple[Path, ...] = ()) -> list[tuple[str, dict[str, Any]]]:
    """(name, document) for every committed fixture config, extra export roots, and hand seeds."""
    seeds: list[tuple[str, dict[str, Any]]] = []
    for root in [p for p in (fixture_root, *extra_roots) if p is not None and p.is_dir()]:
        for config in sorted(root.rglob("genai_config.json")):
            seeds.append((str(config.parent.relative_to(root)), json.loads(config.read_text(encoding="utf-8"))))
    return seeds + _hand_seeds()


def _leaves(doc: Any, path: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    yield path, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _leaves(v, (*path, i))


def _set(doc: Any, path: Path_, value: Any) -> Any:
    out = copy.deepcopy(doc)
    cur = out
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    return out


def _delete(doc: Any, path: Path_) -> Any:
    out = copy.deepcopy(doc)
    cur = out
    for k in path[:-1]:
        cur = cur[k]
    del cur[path[-1]]
    return out


_KINDS: tuple[Any, ...] = ("s", 1, 1.5, True, None, {}, [], 0, -1, 17, 2**31, 2**40, 2**63, "", "../x", "/abs", "a\\..\\b", "é")


def _name(path: Path_) -> str:
    return ".".join(str(p) for p in path) or "<root>"


def mutations(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(description, mutated document) for one seed."""
    yield "seed", doc
    for path, value in list(_leaves(doc)):
        if isinstance(value, dict):
            for probe in (1, "x", {}, []):
                yield f"unknown key under {_name(path)} = {probe!r}", _set(doc, (*path, "q38_unknown_key"), probe) if path else {**doc, "q38_unknown_key": probe}
            if path:
                yield f"empty object at {_name(path)}", _set(doc, path, {})
        if not path:
            continue
        for probe in _KINDS:
            if probe != value or type(probe) is not type(value):
                yield f"{_name(path)} = {json.dumps(probe, ensure_ascii=False)}", _set(doc, path, probe)
        if isinstance(value, list):
            yield f"{_name(path)} = []", _set(doc, path, [])
            if value:
                yield f"{_name(path)} duplicated element", _set(doc, path, [*value, value[0]])
        if isinstance(path[-1], str):
            yield f"delete {_name(path)}", _delete(doc, path)


def corpus(seeds: list[tuple[str, dict[str, Any]]]) -> Iterator[tuple[str, dict[str, Any]]]:
    seen: set[str] = set()
    for name, doc in seeds:
        for what, mutated in mutations(doc):
            text = json.dumps(mutated, sort_keys=True, ensure_ascii=False)
            if text in seen:
                continue
            seen.add(text)
            yield f"{name}: {what}", mutated


class OgProbe:
    """``og.Config(dir)`` on a document: None (accepted) or GenAI's error text."""

    def __init__(self, workdir: Path) -> None:
        import onnxruntime_genai as og

        self._og = og
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.file = self.dir / "genai_config.json"

    def verdict(self, doc: Any) -> str | None:
        text = json.dumps(doc, ensure_ascii=False)
        tmp = self.dir / f".tmp-{os.getpid()}"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, self.file)
        try:
            self._og.Config(str(self.dir))
        except Exception as exc:  # og raises RuntimeError for every config problem
            return " ".join(str(exc).split())
        return None
