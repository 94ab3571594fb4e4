"""One accepted and one rejected input for every contract rule id (tests/unit/contracts/test_rule_coverage.py).

A case names the surface input its rule reads: session config entries, an (env, entries) pair
for environment rules, a (model, entries) pair for graph rules (evaluated directly on the rule,
so cuda-only and run-time rules are exercised too), a config document edit, or a package edit
(run through ``check_package``). The accepted input differs from the rejected one in the one
thing the rule is about.

The data rules (session config, environment, config document) and most graph rules declare their
passing and violating inputs themselves (``Rule.examples``, in their family module; a graph
rule's models are ONNX text, ``GraphExamples``): their cases are read from the declarations
(:func:`_declared_cases`). Built here, from the test kits, are the package rules' inputs and the
graph cases that cannot reasonably be written as text:

- ``OFFLOAD-NODE-001``, ``OFFLOAD-TAIL-001`` and the ids of the offload node checks
  (``OFFLOAD-NODE-C01`` .. ``C18``, ``-MOE``, ``-PACKED``, ``-SHARED``): the passing input is an
  offload-eligible QMoE (``offload_node_kit``), whose expert banks must be constant initializers
  with hidden and inter sizes multiples of 64 (24 KiB of int4 weights at E=4, H=I=64), too large
  to write out as text; the violating inputs are the rows of ``support.offload_node_cases``,
  which the GPU suite shares.
- ``ORT-KERNEL-002``: it fires only from a CUDA kernel dump (source-derived facts report nothing),
  so its case writes a stand-in dump and names it in ``Q38_CUDA_KERNELS`` (``env``).
"""
from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as oh
from support.offload_node_kit import offload_model

from contracts._rule import GraphExample, GraphExamples

__all__ = ["CASES", "RuleCase"]

_P = "session.moe.offload."


@dataclass(frozen=True)
class RuleCase:
    """``kind``: session | environment | graph | config | package; ``accepted`` / ``rejected``
    build the input (environment: an ``(env, entries)`` pair)."""

    rule_id: str
    kind: str
    accepted: Callable[..., Any]
    rejected: Callable[..., Any]
    version: str = "1.32.0"
    base: str = "v12b"  # package cases: the tiny cpu package, "faithful", "genai" (a real export), "multidraft"
    reports: str = ""  # the id its violations carry when it is not the rule's (per-check ids)
    env: Callable[[], dict[str, str]] | None = None  # environment the rule reads (set around both cases)

    @property
    def reported(self) -> str:
        return self.reports or self.rule_id


def _graph(model: onnx.ModelProto | bytes, entries: dict[str, str] | None = None) -> tuple[onnx.ModelProto, dict[str, str]]:
    proto = onnx.load_from_string(model) if isinstance(model, bytes) else model
    return proto, dict(entries or {})


def _cuda_facts_env() -> dict[str, str]:
    """``Q38_CUDA_KERNELS`` naming a stand-in for the GPU run's CUDA dump of 1.32.0: the release's real
    CPU registrations minus Relu (the format the GPU suite writes; no CUDA dump is committed yet)."""
    import tempfile

    from contracts.cuda_kernels import ENV_VAR

    dump = json.loads((Path(__file__).resolve().parents[2] / "contracts" / "schemas" / "ort-1.32.0.json").read_text())
    kernels = [e for e in dump["cpu_kernels"] if (e["domain"], e["name"]) != ("", "Relu")]
    path = Path(tempfile.mkdtemp(prefix="q38-cuda-facts-")) / "cuda-kernels-1.32.0.json"
    path.write_text(json.dumps({"ort_version": "1.32.0", "kernels": kernels}))
    return {ENV_VAR: str(path)}


def _unary(op: str) -> onnx.ModelProto:
    graph = oh.make_graph([oh.make_node(op, ["x"], ["y"], name=op.lower())], "g",
                          [oh.make_tensor_value_info("x", TP.FLOAT, [2])], [oh.make_tensor_value_info("y", TP.FLOAT, [2])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


def _max(elem: int) -> onnx.ModelProto:
    """Max(a, b) of ``elem`` at opset 21 (the CPU Max kernel lists no int16)."""
    graph = oh.make_graph([oh.make_node("Max", ["a", "b"], ["y"], name="max")], "g",
                          [oh.make_tensor_value_info(n, elem, [2]) for n in ("a", "b")],
                          [oh.make_tensor_value_info("y", elem, [2])])  # fmt: skip
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


_GRAPH_CASES: list[RuleCase] = [
    RuleCase("OFFLOAD-NODE-001", "graph", lambda: _graph(offload_model("int4"), {_P + "mode": "required"}),
             lambda: _graph(offload_model("int4", slots={14: (TP.FLOAT16, [2, 4])}), {_P + "mode": "required"}),
             reports="OFFLOAD-NODE-C08"),
    RuleCase("OFFLOAD-TAIL-001", "graph",
             lambda: _graph(offload_model("int4"), {_P + "mode": "auto", _P + "tail_substitution_min_rank": "1", _P + "tail_substitution_threshold": "0.5"}),
             lambda: _graph(offload_model("int4"), {_P + "mode": "auto", _P + "tail_substitution_min_rank": "2", _P + "tail_substitution_threshold": "0.5"})),
    RuleCase("ORT-KERNEL-002", "graph", lambda: _graph(_unary("Relu")), lambda: _graph(_max(TP.INT16)),
             env=_cuda_facts_env),
]  # fmt: skip


def _node_check_cases() -> list[RuleCase]:
    """The ids OFFLOAD-NODE-001 reports: a valid node of the row's format vs its first negative
    (support.offload_node_cases), and a MoEPacked node next to a valid QMoE."""
    from support.offload_node_cases import NEGATIVES

    required = {_P + "mode": "required"}
    cases: dict[str, RuleCase] = {}
    for _case, fmt, kwargs, rule_id, _reason in NEGATIVES:
        if rule_id not in cases:
            cases[rule_id] = RuleCase(rule_id, "graph", lambda f=fmt: _graph(offload_model(f), required),
                                      lambda f=fmt, k=kwargs: _graph(offload_model(f, **k), required))  # fmt: skip
    cases["OFFLOAD-NODE-PACKED"] = RuleCase("OFFLOAD-NODE-PACKED", "graph", lambda: _graph(offload_model("int4"), required),
                                            lambda: _graph(offload_model("int4", op_type="MoEPacked"), required))  # fmt: skip
    return list(cases.values())


def merge_patch(doc: Any, patch: Any) -> Any:
    """``doc`` with the JSON merge patch ``patch`` applied (RFC 7386; ``doc`` is not modified)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


_KIND = {"session-config": "session", "environment": "environment", "genai-config": "config"}


def _declared_cases() -> list[RuleCase]:
    """The cases of the rules that declare their examples (``Rule.examples``), one per id.

    Config examples are merge patches of the tiny package's config (the test passes the document).
    """
    from contracts.runner import ALL_RULES

    cases: dict[str, RuleCase] = {}
    for rule in ALL_RULES:
        ex = rule.examples
        if ex is None or rule.rule_id in cases:
            continue
        if isinstance(ex, GraphExamples):
            cases[rule.rule_id] = RuleCase(rule.rule_id, "graph", lambda p=ex.passing: _parsed(p),
                                           lambda v=ex.violating: _parsed(v), version=ex.ort_version)  # fmt: skip
        elif rule.kind == "genai-config":
            cases[rule.rule_id] = RuleCase(rule.rule_id, "config", lambda doc, p=ex.passing: merge_patch(doc, p),
                                           lambda doc, p=ex.violating: merge_patch(doc, p))  # fmt: skip
        else:
            cases[rule.rule_id] = RuleCase(rule.rule_id, _KIND[rule.kind], lambda p=ex.passing: p, lambda p=ex.violating: p)
    return list(cases.values())


def _parsed(example: GraphExample) -> tuple[onnx.ModelProto, dict[str, str]]:
    """A declared graph example as the (model, entries) pair a graph case gives."""
    return example.parse(), dict(example.entries)


def _graph_section(doc: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = doc["model"]["qwen38_graph"]
    return found


def _write_config(pkg: Path, fn: Callable[[dict[str, Any]], None]) -> None:
    path = pkg / "genai_config.json"
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def _noop(pkg: Path) -> None:
    del pkg


def _swap_drafts(pkg: Path) -> None:
    _write_config(pkg, lambda d: _graph_section(d)["multidraft"].update({"s2": "model_s3.onnx", "s3": "model_s2.onnx"}))


def _package_cases() -> list[RuleCase]:
    import os

    def truncate(pkg: Path) -> None:
        with open(pkg / "model.onnx.data", "r+b") as f:
            f.truncate(16)

    def escaping_data(pkg: Path) -> None:
        outside = pkg.parent / "outside.data"
        os.replace(pkg / "model.onnx.data", outside)
        os.symlink(outside, pkg / "model.onnx.data")

    def escaping_link(pkg: Path) -> None:
        os.symlink("/etc/hostname", pkg / "stray-link")

    def hard_link(pkg: Path) -> None:
        os.link(pkg / "model.onnx.data", pkg.parent / "second-name.data")

    def unreadable_data(pkg: Path) -> None:
        os.chmod(pkg / "model.onnx.data", 0o200)  # the owner may write it, not read it

    def research_key(pkg: Path) -> None:
        _write_config(pkg, lambda d: d["model"]["decoder"].update({"ple_token_pad_id": 0}))

    def no_tokenizer(pkg: Path) -> None:
        os.unlink(pkg / "tokenizer.json")  # og.Tokenizer: "Invalid file: PKG/tokenizer.json"

    def token_ids_only(pkg: Path) -> None:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            os.unlink(pkg / name)  # no tokenizer at all, as q38 export-genai writes

    def missing_library(pkg: Path) -> None:
        _write_config(pkg, lambda d: _graph_section(d).update({"libraries": {"x": "libs/missing.so"}}))

    def absolute_profile(pkg: Path) -> None:
        _write_config(pkg, lambda d: _graph_section(d).update({"expert_profile": "/etc/hostname"}))

    def linked_profile(pkg: Path) -> None:
        os.symlink("/etc/hostname", pkg / "expert-profile.bin")
        _write_config(pkg, lambda d: _graph_section(d).update({"expert_profile": "expert-profile.bin"}))

    def directory_profile(pkg: Path) -> None:
        (pkg / "expert-profile.bin").mkdir()
        _write_config(pkg, lambda d: _graph_section(d).update({"expert_profile": "expert-profile.bin"}))

    def fifo(pkg: Path) -> None:
        os.mkfifo(pkg / "stray.fifo")

    def shared_range(pkg: Path) -> None:
        _write_config(pkg, lambda d: d["model"]["decoder"]["shared_initializers"][0].update({"offset": "999999999"}))

    def shared_shape(pkg: Path) -> None:
        _write_config(pkg, lambda d: d["model"]["decoder"]["shared_initializers"][0].update({"shape": [512, 65]}))

    def no_ir_version(pkg: Path) -> None:
        model = onnx.load(pkg / "model.onnx", load_external_data=False)
        model.ClearField("ir_version")
        onnx.save(model, pkg / "model.onnx")

    def unknown_data_key(pkg: Path) -> None:
        model = onnx.load(pkg / "model.onnx", load_external_data=False)
        tensor = next(t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL)
        tensor.external_data.add(key="basepath", value=".")
        onnx.save(model, pkg / "model.onnx")

    def undeclared_state(pkg: Path) -> None:
        _write_config(pkg, lambda d: d["model"]["decoder"]["inputs"].pop("past_conv_names"))

    def profile(rows: int) -> Callable[[Path], None]:
        def write(pkg: Path) -> None:
            from q38.package.profile import ExpertProfile, encode_profile

            (pkg / "expert-profile.bin").write_bytes(encode_profile(ExpertProfile(np.ones((rows, 8), np.uint64))))
            _write_config(pkg, lambda d: _graph_section(d).update({"expert_profile": "expert-profile.bin"}))

        return write

    def runtime_profile(device: int, host: int | None = None) -> Callable[[Path], None]:
        def write(pkg: Path) -> None:
            eligibility: dict[str, int] = {"minimum_total_device_memory_bytes": device}
            if host is not None:
                eligibility["maximum_effective_host_memory_bytes"] = host
            profile = {"id": "p", "eligibility": eligibility, "overlay": {"model": {"decoder": {"filename": "model.onnx"}}}}
            _write_config(pkg, lambda d: d.update({"runtime_profiles": [profile]}))

        return write

    return [
        RuleCase("PKG-FIT-001", "package", runtime_profile(1 << 30), runtime_profile(1 << 20)),
        # host bytes: the tiny package's dense weights are all device-placed, so only the experts'
        # host share counts: 0 bytes without offload entries; a maximum of 0 passes, and a pool
        # entry made host_mapped (64 KiB of embedding) goes over it
        RuleCase("PKG-FIT-002", "package", runtime_profile(1 << 30, 0), _host_over(runtime_profile(1 << 30, 0))),
        RuleCase("CFG-GRAPH-001", "package", _noop, undeclared_state, base="faithful"),
        RuleCase("CFG-GRAPH-002", "package", profile(9), profile(3)),
        RuleCase("CFG-GRAPH-003", "package", _noop, _swap_drafts, base="multidraft"),
        RuleCase("PKG-GRAPH-001", "package", _noop, truncate),
        RuleCase("ORT-MODEL-002", "package", _noop, no_ir_version),
        RuleCase("ORT-MODEL-004", "package", _noop, unknown_data_key),
        RuleCase("PKG-EXTDATA-001", "package", _noop, escaping_data),
        RuleCase("PKG-SYMLINK-001", "package", _noop, escaping_link),
        RuleCase("PKG-HARDLINK-001", "package", _noop, hard_link),
        RuleCase("PKG-LIB-001", "package", _noop, missing_library),
        RuleCase("PKG-READ-001", "package", _noop, unreadable_data),
        RuleCase("PATH-FIELD-001", "package", _noop, absolute_profile),
        RuleCase("PATH-FIELD-002", "package", _noop, linked_profile),
        RuleCase("PATH-FIELD-003", "package", _noop, directory_profile),
        RuleCase("PATH-SPECIAL-001", "package", _noop, fifo),
        RuleCase("PATH-FIELD-004", "package", _noop, shared_range, base="genai"),
        RuleCase("PKG-SHARED-001", "package", _noop, shared_shape, base="genai"),
        RuleCase("PKG-TOKENIZER-001", "package", _noop, no_tokenizer, base="genai"),
        RuleCase("PKG-TOKENIZER-002", "package", _noop, token_ids_only, base="genai"),
        # a Qwen3.8 research-builder key: q38 reads the config, onnxruntime-genai 0.18.0 would not
        RuleCase("CFG-SURFACE-002", "package", _noop, research_key, base="genai"),
    ]


def host_map_first_pool_entry(pkg: Path) -> None:
    """The pool's first entry made host_mapped (its bytes leave the device for the host)."""
    pool = pkg / "weights_pool.txt"
    lines = pool.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    fields = lines[index].split(" ")
    fields[6] = "host_mapped"
    lines[index] = " ".join(fields)
    pool.write_text("\n".join(lines) + "\n")


def _host_over(first: Callable[[Path], None]) -> Callable[[Path], None]:
    """``first``, then :func:`host_map_first_pool_entry`."""

    def write(pkg: Path) -> None:
        first(pkg)
        host_map_first_pool_entry(pkg)

    return write


def _all_cases() -> dict[str, RuleCase]:
    cases: dict[str, RuleCase] = {}
    for case in [*_declared_cases(), *_GRAPH_CASES, *_node_check_cases(), *_package_cases()]:
        if case.rule_id in cases:
            raise ValueError(f"{case.rule_id}: two cases (declared examples and a case here?)")
        cases[case.rule_id] = case
    return cases


CASES: dict[str, RuleCase] = _all_cases()
