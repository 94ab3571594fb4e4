"""The contracts are those of the installed onnxruntime: a package feature one version's schema
refuses is reported there and nowhere else.

q38's synthetic packages feed GatedDeltaNet fp16 gates (``decay``, ``beta``), which onnxruntime
1.32.0 types TG (float, fp16, bf16) and 1.31.1 types TS (float only). ``q38 check`` must name
every GatedDeltaNet node of every graph under 1.31.1 with the schema's own type error
(ORT-SCHEMA-002), and none under 1.32.0. The tests that need those packages to check clean skip
under 1.31.1 with ``needs_fp16_gates``; this one runs under both (``nox -s contracts``).
"""

from __future__ import annotations

from pathlib import Path

import onnx
from support.contracts_testkit import FP16_GATES

from contracts.runner import check_package


def test_fp16_gated_delta_net_gates_are_judged_by_the_installed_schema(tiny_cpu_package: Path) -> None:
    gdn = set()
    for path in tiny_cpu_package.glob("*.onnx"):
        graph = onnx.load(path, load_external_data=False).graph
        gdn |= {n.name for n in graph.node if n.op_type == "GatedDeltaNet"}
    assert gdn, "the synthetic package has GatedDeltaNet nodes"
    refused = [v for v in check_package(tiny_cpu_package).violations if v.rule_id == "ORT-SCHEMA-002"]
    if FP16_GATES:
        assert refused == []
        return
    assert {v.node for v in refused} == gdn
    assert all("Type Error: Type 'tensor(float16)' of input parameter" in v.message and "(GatedDeltaNet)" in v.message
               for v in refused), refused  # fmt: skip


def test_a_version_is_compared_by_its_release_numbers() -> None:
    """A rule's range compares (major, minor, patch): a fourth number and local or dev suffixes
    are dropped, a missing patch is 0."""
    from contracts._rule import parse_version

    for spelled in ("1.32.0", "1.32.0.1", "1.32.0+cu12", "1.32.0.dev1", "1.32"):
        assert parse_version(spelled) == (1, 32, 0), spelled
