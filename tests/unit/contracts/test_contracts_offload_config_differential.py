"""Differential tests: the offload session-config contract against a real onnxruntime session.

Invariants guarded:
- For every value of the acceptance matrix in ort-cpu-capabilities.md §4.1/§4.2 (and values generated
  by hypothesis), the contract's verdict equals the installed onnxruntime's verdict, on an
  Identity-only model and on a tiny QMoE model (with mode=required), and ORT's error text contains
  the contract's message.
- The expected verdict of each table row comes from the documented 1.32.0 result when the rule's
  version range covers the installed ORT, and "accepted" otherwise (1.31.1 validates nothing).
- The environment fallbacks agree with onnxruntime, through ``check_offload_environment`` and the
  runner's ``check_environment`` alike.
- A disagreement fails; nothing is skipped.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.contracts_testkit import (
    ORT_VERSION,
    assert_agrees,
    identity_model,
    ort_error,
    qmoe_model,
)

from contracts.offload_config import OFFLOAD_KEYS, SESSION_RULES, check_offload_config

pytestmark = pytest.mark.differential

_P = "session.moe.offload."
_ENFORCED = all(rule.applies(ORT_VERSION) for rule in SESSION_RULES)
_UNITS = ["1GiB", "1GB", "1G", "1g", "512MiB", "512MB", "512M", "64KiB", "64K", "1TiB", "1.5GiB",
          "1.5", "-1", "-1GiB", "abc", "", " 1024", "1024 ", "1e9", "0x100", "18446744073709551616",
          "1 GiB", "1gib", "1Gb", "1B"]  # fmt: skip
_BOOLS_BAD = ["true", "false", "True", "yes", "no", "on", "off", "2", "-1", "", "bogus"]
_INTS_BAD = ["-1", "1.5", "abc", "", "4294967296", "9223372036854775808"]
_PATHS = ["/nonexistent/q38/x", "", "relative/path", "/tmp"]

# key -> (accepted, rejected), ort-cpu-capabilities.md §4.1 plus the "also accepted" line
MATRIX: dict[str, tuple[list[str], list[str]]] = {
    "mode": (["disabled", "auto", "required", "on", "off", "0", "1", "REQUIRED", "Auto"],
             ["enabled", "true", "false", " required", "required ", "none", "", "bogus"]),
    "placement": (["static", "adaptive", "STATIC", "Adaptive"], ["auto", "dynamic", "lru", "", "bogus"]),
    "cpu_execution": (["0", "1", "auto", "enabled", "disabled", "Enabled", "AUTO"],
                      ["true", "false", "True", "yes", "no", "on", "off", "2", "-1", "", "bogus"]),
    "allow_file_backing": (["0", "1", "true", "false", "True"],
                           ["yes", "no", "on", "off", "2", "-1", "", "bogus"]),
    "skip_tail_cold_only": (["0", "1"], _BOOLS_BAD),
    "skip_zero_cold_doorbell": (["0", "1"], _BOOLS_BAD),
    "gpu_budget_bytes": (["0", "1", "1024", "1073741824", "18446744073709551615",
                          "9223372036854775808", "auto", "AUTO"], _UNITS),
    "device_expert_bytes": (["0", "1", "1024", "1073741824", "18446744073709551615",
                             "9223372036854775808", "auto"], _UNITS),
    "device_working_bytes": (["1024"], ["1GiB", "abc", "-1", "0", "auto"]),
    "host_expert_bytes": (["1024", "0", "auto"], ["1GiB", "abc", "-1"]),
    "host_working_bytes": (["1024"], ["1GiB", "abc", "-1", "0", "auto"]),
    "pinned_bytes": (["1024", "0", "auto"], ["1GiB", "abc", "-1"]),
    "reserve_device_bytes": (["1024", "0", "auto"], ["1GiB", "abc", "-1"]),
    "gpu_device_mem_limit": (["1024", "0"], ["1GiB", "abc", "-1", "auto"]),
    "async_max_tokens": (["0", "1", "8", "64", "-0"], [*_INTS_BAD, "auto"]),
    "cpu_threads": (["0", "1", "8", "64", "-0"], [*_INTS_BAD, "auto"]),
    "prefill_wave_experts": (["1", "8", "64"], ["0", *_INTS_BAD, "auto"]),
    "tail_substitution_min_rank": (["0", "1", "8", "64"], _INTS_BAD),
    "min_expert_weight": (["0", "0.5", "1", "1e-3", ".5", "5e-1", "0x1p-1", "-0.0", "-0", "-00", "-0e5", "+0", "+.5"],
                          ["1.5", "-0.1", "abc", "", "nan", "inf", "2", "1.0000001", "-1e-30"]),
    "tail_substitution_threshold": (["0", "0.5", "1", "1.5", "1e-3", "2", "-0", "-00", "-0e5", "-0.0"],
                                    ["-0.1", "abc", "", "nan", "inf", "1e300", "0x10", "+0", "-1", "-1.5", "-.5"]),
    "budget_group": (["g0", "", "a b", "x" * 300], []),
    "popularity_file": (_PATHS, []),
    "derived_cache_dir": (_PATHS, []),
    "source_root": (_PATHS, []),
    "node_overrides": ([
        "moe0:max_resident_slots=2", "moe0:device_expert_bytes=1024",
        "moe0:max_resident_slots=2,device_expert_bytes=1024", "moe0:max_resident_slots=0",
        "other_node:max_resident_slots=2", "moe0:max_resident_slots=2;moe0:max_resident_slots=3",
        "moe0:max_resident_slots=2;", ";", "", " moe0:max_resident_slots=2",
        "moe0:max_resident_slots=2 , device_expert_bytes=1024",
        "moe0:max_resident_slots=2,max_resident_slots=3", "moe0:max_resident_slots=4,device_expert_bytes=0",
        "a:max_resident_slots=1;b:device_expert_bytes=2", "moe0 :max_resident_slots=1",
        "moe0:max_resident_slots=1;;b:max_resident_slots=2",
        # C isspace (space, \t \n \v \f \r) is trimmed around keys and values; \x1c / NBSP are not
        "moe0:\tmax_resident_slots=2", "moe0:max_resident_slots\v=2", "moe0:max_resident_slots=\f2\r"], [
        "moe0:\x1cmax_resident_slots=2", "moe0:max_resident_slots\x1c=2", "moe0:\u00a0max_resident_slots=2",
        "moe0:max_resident_slots=\x1c2", "moe0:max_resident_slots=2\u00a0",
        "moe0:device_expert_bytes=1GiB", "moe0:max_resident_slots=-1", "moe0:max_resident_slots=abc",
        "moe0:bogus=1", "moe0:tail_substitution_min_rank=1", "moe0", "moe0:", ":max_resident_slots=2",
        "moe0=max_resident_slots:2", "moe0:device_expert_bytes=auto",
        "moe0:max_resident_slots=99999999999"]),
}  # fmt: skip

# ort-cpu-capabilities.md §4.2: whole configs -> accepted?
EXTRAS: list[tuple[dict[str, str], bool]] = [
    ({_P + "tail_substitution_min_rank": "8", _P + "tail_substitution_threshold": "0.5"}, True),
    ({_P + "tail_substitution_min_rank": "2", _P + "tail_substitution_threshold": "0.5", _P + "mode": "required"}, True),
    ({_P + "mode": "required", _P + "placement": "adaptive", _P + "popularity_file": "/nonexistent/p.bin"}, True),
    ({_P + "mode": "required", _P + "derived_cache_dir": "/nonexistent/d", _P + "allow_file_backing": "1"}, True),
    ({_P + "mode": "auto", _P + "cpu_execution": "enabled", _P + "gpu_budget_bytes": "0"}, True),
    ({"moe.cpu_offload.enable": "1"}, False),
    ({"moe.cpu_offload.enable": "1", _P + "mode": "required"}, False),
    ({"moe.cpu_offload.bogus": "1"}, False),
    ({"moe.offload.mode": "required"}, True),
    ({"session.moe.offload": "1"}, True),
    ({_P: "1"}, False),
    ({"session.moe.bogus": "1"}, True),
    ({"Session.Moe.Offload.Mode": "required"}, True),
    ({_P + "MODE": "required"}, False),
    ({_P + "bogus": "1"}, False),
    ({"session.moe_cpu_offload_experts": "4"}, True),
    ({"ep.cuda.moe_packed_gpu_experts": "bogus"}, False),
    ({"ep.cuda.moe_packed_gpu_experts": "8"}, True),
    *[({"ep.cuda.moe_packed_gpu_experts": v}, ok) for v, ok in (("0", True), ("-0", True), ("+3", False), (" 7 ", True),
      ("2147483647", True), ("2147483648", False), ("-1", False), ("", True), ("1.5", False), ("0x8", False))],
    ({_P + "mode": "required", _P + "cpu_execution": "1", _P + "placement": "adaptive", _P + "gpu_budget_bytes": "1GiB"}, False),
    ({_P + "mode": "disabled", _P + "gpu_budget_bytes": "abc"}, False),
    ({_P + "mode": "disabled", _P + "bogus": "1"}, False),
    ({_P + "device_expert_bytes": "1024", _P + "gpu_budget_bytes": "1024"}, True),
    ({_P + "device_expert_bytes": "auto", _P + "gpu_budget_bytes": "AUTO"}, True),
    ({_P + "device_expert_bytes": "1024", _P + "gpu_budget_bytes": "2048"}, False),
    ({_P + "device_expert_bytes": "auto", _P + "gpu_budget_bytes": "1024"}, False),
    ({_P + "device_expert_bytes": "01", _P + "gpu_budget_bytes": "1"}, True),
]  # fmt: skip

ROWS = [(key, value, True) for key, (ok, _bad) in MATRIX.items() for value in ok] + [
    (key, value, False) for key, (_ok, bad) in MATRIX.items() for value in bad
]


def test_the_matrix_covers_every_offload_key_and_about_300_values() -> None:
    assert set(MATRIX) == set(OFFLOAD_KEYS)
    assert len(OFFLOAD_KEYS) == 25
    assert len(ROWS) + len(EXTRAS) >= 300


def _documented(accepted_on_1_32: bool) -> bool:
    return accepted_on_1_32 or not _ENFORCED


@pytest.mark.parametrize(("key", "value", "accepted"), ROWS, ids=[f"{k}={v!r}"[:60] for k, v, _ in ROWS])
def test_offload_value_verdict_matches_onnxruntime(key: str, value: str, accepted: bool) -> None:
    entries = {_P + key: value}
    violations = check_offload_config(entries, ort_version=ORT_VERSION)
    assert (not violations) == _documented(accepted), violations
    assert_agrees(violations, ort_error(identity_model(), entries), context="identity")
    if key != "mode":  # second context: a QMoE model with mode=required
        with_mode = {**entries, _P + "mode": "required"}
        violations = check_offload_config(with_mode, ort_version=ORT_VERSION)
        assert_agrees(violations, ort_error(qmoe_model(), with_mode), context="qmoe+required")


@pytest.mark.parametrize(("entries", "accepted"), EXTRAS, ids=[str(i) for i in range(len(EXTRAS))])
def test_offload_extra_config_verdict_matches_onnxruntime(entries: dict[str, str], accepted: bool) -> None:
    violations = check_offload_config(entries, ort_version=ORT_VERSION)
    assert (not violations) == _documented(accepted), violations
    assert_agrees(violations, ort_error(identity_model(), entries), context="identity")
    assert_agrees(violations, ort_error(qmoe_model(), entries), context="qmoe")


_ALPHABET = st.sampled_from(list("0123456789") * 4 + list("-+.eExXpPaAuUtToO ;:,=_\t") + ["auto", "inf", "nan", "max_resident_slots", "device_expert_bytes", "moe0"])
_TEXT = st.lists(_ALPHABET, max_size=8).map("".join)
_NUMERIC = st.one_of(
    st.integers(min_value=-(2**65), max_value=2**65).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.floats(min_value=-2, max_value=2).map(lambda f: f"{f:.3e}"),
)


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(value=st.one_of(_TEXT, _NUMERIC))
@pytest.mark.parametrize("key", sorted(OFFLOAD_KEYS))
def test_generated_offload_values_agree_with_onnxruntime(key: str, value: str) -> None:
    entries = {_P + key: value}
    violations = check_offload_config(entries, ort_version=ORT_VERSION)
    assert_agrees(violations, ort_error(identity_model(), entries), context=f"{key}={value!r}")


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    suffix=st.one_of(st.sampled_from(sorted(OFFLOAD_KEYS)), st.text("abcdemo_.XY", max_size=12)),
    prefix=st.sampled_from([_P, "moe.cpu_offload.", "session.moe.", "ep.cuda.moe_packed_gpu_experts"]),
    value=st.sampled_from(["1", "auto", "required", "", " 7", "x"]),
)


def test_generated_keys_agree_with_onnxruntime(prefix: str, suffix: str, value: str) -> None:
    key = prefix if prefix.startswith("ep.") else prefix + suffix
    entries = {key: value}
    violations = check_offload_config(entries, ort_version=ORT_VERSION)
    assert_agrees(violations, ort_error(identity_model(), entries), context=f"{key}={value!r}")


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(a=st.sampled_from(["auto", "AUTO", "0", "00", "1024", "01024", "2048", "x"]),
       b=st.sampled_from(["auto", "Auto", "0", "1024", "2048", "18446744073709551615"]))  # fmt: skip


def test_generated_alias_pairs_agree_with_onnxruntime(a: str, b: str) -> None:
    entries = {_P + "device_expert_bytes": a, _P + "gpu_budget_bytes": b}
    violations = check_offload_config(entries, ort_version=ORT_VERSION)
    assert_agrees(violations, ort_error(identity_model(), entries), context=str(entries))


_ENV_CASES = [
    # (variable, value, session entries): the verdict and the text are onnxruntime's
    *[("ORT_MOE_PACKED_GPU_EXPERTS", v, {}) for v in ("abc", "4", "0", "-1", "", " 5", "2147483647", "2147483648", "0x10")],
    *[("ORT_QMOE_MIN_EXPERT_WEIGHT", v, {}) for v in ("abc", "0.1", "2", "", "-0", "1.0000001", "nan")],
    ("ORT_MOE_PACKED_GPU_EXPERTS", "abc", {"ep.cuda.moe_packed_gpu_experts": "8"}),
    ("ORT_MOE_PACKED_GPU_EXPERTS", "abc", {"ep.cuda.moe_packed_gpu_experts": ""}),
    ("ORT_MOE_PACKED_GPU_EXPERTS", "abc", {"ep.cuda.moe_packed_gpu_experts\0x": "8"}),
    ("ORT_QMOE_MIN_EXPERT_WEIGHT", "abc", {_P + "min_expert_weight": "0.1"}),
    ("ORT_QMOE_MIN_EXPERT_WEIGHT", "abc", {_P + "mode": "disabled"}),
    ("ORT_QMOE_MIN_EXPERT_WEIGHT", "2", {_P + "min_expert_weight\0": "0.5"}),
]  # fmt: skip


@pytest.mark.parametrize(("variable", "value", "entries"), _ENV_CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(_ENV_CASES)])
def test_environment_fallbacks_agree_with_onnxruntime(variable: str, value: str, entries: dict[str, str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from contracts.offload_config import check_offload_environment
    from contracts.runner import check_environment

    monkeypatch.setenv(variable, value)  # ORT reads both variables at every session creation
    found = check_offload_environment({variable: value}, entries=entries, ort_version=ORT_VERSION)
    assert {v.rule_id for v in found} <= {"OFFLOAD-ENV-001", "OFFLOAD-ENV-002"}
    assert_agrees(found, ort_error(identity_model(), entries), context=f"{variable}={value!r} {entries}")
    # the runner's environment surface runs these rules, on the installed version by default
    assert check_environment({variable: value}, entries=entries, ort_version=ORT_VERSION) == found
    assert check_environment({variable: value}, entries=entries) == found


_V132 = ORT_VERSION >= "1.32"

_OVERRIDES = "session.moe.offload.node_overrides"


@pytest.mark.parametrize(("value", "accepted"), [
    ("moe0:max_resident_slots=2,", True),
    ("moe0:max_resident_slots=2, ", True),
    ("moe0:max_resident_slots=2 ,", True),
    ("moe0:max_resident_slots=2,device_expert_bytes=1,", True),
    ("moe0:max_resident_slots=2,;b:max_resident_slots=1,", True),
    (",moe0:max_resident_slots=2", True),
    ("moe0:max_resident_slots=2,,", False),
    ("moe0:,", False),
    ("moe0: ,", False),
    ("moe0:,max_resident_slots=2", False),
])  # fmt: skip


def test_node_overrides_tolerate_exactly_one_trailing_comma(value: str, accepted: bool) -> None:
    violations = check_offload_config({_OVERRIDES: value}, ort_version="1.32.0")
    assert (not violations) == accepted, violations
    if _V132:
        assert_agrees(violations, ort_error(identity_model(), {_OVERRIDES: value}), context=value)
