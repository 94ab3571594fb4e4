"""Resident-slot planning (q38.offload.slots).

Invariants guarded:
- every accepted request yields per-layer caps whose sum is exactly the requested total, each cap
  within [min_per_layer, E] (property test over random profiles, totals, floors, uniform mode);
- every request that cannot be met exactly is refused with a one-line FlagError naming the flag;
- the non-uniform plan keeps the most popular experts (greedy optimum of resident hits);
- the objective (the plan's expected hits: for each layer, the selections of its ``c`` most
  selected experts, as q38.offload.hitrate counts them) is maximal: no other split of the total
  that meets the floor and the expert counts hits more, by brute force over every split of
  small cases (up to 4 layers x 5 experts, with ties and zero rows);
- ``--target-resident-slots`` gives one cap per node and is refused above a node's expert count.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion

from q38.errors import ConfigError, FlagError, OffloadError, ProfileError
from q38.offload.convert import convert_package
from q38.offload.hitrate import LayerHit, hit_report, resident_experts
from q38.offload.options import OFFLOAD_PREFIX, OffloadOptions, parse_node_overrides
from q38.offload.profiles import build_runtime_profiles
from q38.offload.router import ClearRouterWeightsPass
from q38.offload.rows import ProfileRows, Site, match_profile, qmoe_sites
from q38.offload.slot_plan import check_emitted
from q38.offload.slots import plan_from_profile, uniform_caps
from q38.package import encode_profile, open_package
from q38.package.profile import ExpertProfile


@st.composite
def _requests(draw: st.DrawFn) -> tuple[np.ndarray, int, bool, int]:
    layers = draw(st.integers(1, 12))
    experts = draw(st.integers(1, 16))
    counts = np.array(
        draw(st.lists(st.integers(0, 1000), min_size=layers * experts, max_size=layers * experts)),
        dtype=np.uint64,
    ).reshape(layers, experts)
    total = draw(st.integers(0, layers * experts + 5))
    uniform = draw(st.booleans())
    floor = draw(st.integers(0, experts + 1))
    return counts, total, uniform, floor


def _feasible(layers: int, experts: int, total: int, uniform: bool, floor: int) -> bool:
    if floor > experts or total < layers * floor or total > layers * experts:
        return False
    return not uniform or total % layers == 0


@settings(max_examples=300, deadline=None)
@given(_requests())
def test_every_total_met_exactly_or_refused(req: tuple[np.ndarray, int, bool, int]) -> None:
    counts, total, uniform, floor = req
    layers, experts = counts.shape
    if not _feasible(layers, experts, total, uniform, floor):
        with pytest.raises(FlagError) as info:
            plan_from_profile(counts, total, uniform=uniform, min_per_layer=floor)
        assert "\n" not in str(info.value)
        assert "--" in str(info.value)  # names the flag
        return
    caps = plan_from_profile(counts, total, uniform=uniform, min_per_layer=floor)
    assert len(caps) == layers
    assert sum(caps) == total
    assert all(floor <= c <= experts for c in caps)
    if uniform:
        assert len(set(caps)) == 1


@settings(max_examples=200, deadline=None)
@given(_requests())
def test_plan_keeps_the_most_popular_experts(req: tuple[np.ndarray, int, bool, int]) -> None:
    counts, total, _uniform, _floor = req
    layers, experts = counts.shape
    if total > layers * experts:
        return
    caps = plan_from_profile(counts, total)
    ranked = -np.sort(-counts.astype(np.int64), axis=1)
    kept = sum(int(ranked[i, :c].sum()) for i, c in enumerate(caps))
    best = int(np.sort(ranked.reshape(-1))[::-1][:total].sum())
    assert kept == best


def _hits(counts: np.ndarray, caps: list[int] | tuple[int, ...]) -> int:
    """The objective: selections that land on resident experts, as the hit report counts them."""
    return sum(int(row[resident_experts(row, c)].sum()) for row, c in zip(counts, caps))


def _splits(layers: int, experts: int, total: int, floor: int) -> list[tuple[int, ...]]:
    import itertools

    return [c for c in itertools.product(range(floor, experts + 1), repeat=layers) if sum(c) == total]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.data())
def test_plan_is_optimal_by_brute_force(data: st.DataObject) -> None:
    layers = data.draw(st.integers(1, 4), label="layers")
    experts = data.draw(st.integers(1, 5), label="experts")
    values = st.integers(0, 6) if data.draw(st.booleans(), label="ties") else st.integers(0, 10_000)
    counts = np.array(data.draw(st.lists(values, min_size=layers * experts, max_size=layers * experts)),
                      dtype=np.uint64).reshape(layers, experts)
    floor = data.draw(st.integers(0, experts), label="floor")
    total = data.draw(st.integers(layers * floor, layers * experts), label="total")
    caps = plan_from_profile(counts, total, min_per_layer=floor)
    best = max(_splits(layers, experts, total, floor), key=lambda c: _hits(counts, c))
    assert sum(caps) == total and all(floor <= c <= experts for c in caps)
    assert _hits(counts, caps) == _hits(counts, best)


def test_brute_force_would_catch_a_worse_plan() -> None:
    """The oracle itself, on a hand-checked case: it scores what the hit report counts, and a worse split lower."""
    counts = np.array([[50, 40, 0, 0], [3, 2, 1, 0]], dtype=np.uint64)
    assert _hits(counts, plan_from_profile(counts, 4)) == 95  # [2, 2]: 50 + 40 + 3 + 2
    assert _hits(counts, plan_from_profile(counts, 4, uniform=True)) == 95
    assert _hits(counts, plan_from_profile(counts, 3)) == 93  # [2, 1]
    assert _hits(counts, [1, 2]) == 55
    assert max(_hits(counts, c) for c in _splits(2, 4, 3, 0)) == 93


def test_popular_layer_gets_more_slots() -> None:
    counts = np.array([[100, 90, 1, 1], [5, 4, 3, 2]], dtype=np.uint64)
    assert plan_from_profile(counts, 3) == [2, 1]
    assert plan_from_profile(counts, 4, min_per_layer=2) == [2, 2]
    assert plan_from_profile(counts, 4, uniform=True) == [2, 2]


@pytest.mark.parametrize(("layers", "experts", "total", "want"), [
    (4, 8, 10, [7, 1, 1, 1]),
    (3, 8, 10, [8, 1, 1]),
    (4, 8, 20, [8, 8, 3, 1]),
    (8, 8, 10, [3, 1, 1, 1, 1, 1, 1, 1]),
])
def test_tied_slots_go_to_the_lower_layer_first(layers: int, experts: int, total: int, want: list[int]) -> None:
    """Equal gains across layers are broken by layer order (documented tie rule), not by sort internals."""
    counts = np.ones((layers, experts), dtype=np.uint64)
    counts[:, 0] = 9  # one popular expert per layer, then ties across every layer
    assert plan_from_profile(counts, total) == want


@pytest.mark.parametrize(
    ("total", "kwargs"),
    [
        (9, {}),
        (3, {"uniform": True}),
        (3, {"min_per_layer": 2}),
        (4, {"min_per_layer": 5}),
        (-1, {}),
    ],
)
def test_refusals_name_the_flag(total: int, kwargs: dict[str, object], messages_snapshot: SnapshotAssertion) -> None:
    counts = np.ones((2, 4), dtype=np.uint64)
    with pytest.raises(FlagError) as info:
        plan_from_profile(counts, total, **kwargs)  # type: ignore[arg-type]
    assert messages_snapshot == str(info.value)


def test_uniform_caps() -> None:
    assert uniform_caps(3, [8, 8, 4]) == [3, 3, 3]
    assert uniform_caps(0, [8]) == [0]
    with pytest.raises(FlagError, match=r"^--target-resident-slots 5: offloaded QMoE node #1 has only 4 experts$"):
        uniform_caps(5, [8, 4])


def test_uniform_caps_refuses_a_negative_target_naming_flag_and_value(messages_snapshot: SnapshotAssertion) -> None:
    with pytest.raises(FlagError) as info:
        uniform_caps(-1, [8, 4])
    assert messages_snapshot == str(info.value)


S_GRAPHS = ("model_s2.onnx", "model_s3.onnx", "model_s4.onnx")


def _caps_of_graph(entries: dict[str, str], graph: Path) -> dict[str, int]:
    caps = parse_node_overrides(entries.get(OFFLOAD_PREFIX + "node_overrides", ""))
    nodes = [n.name for n in onnx.load(graph, load_external_data=False).graph.node if n.op_type == "QMoE"]
    return {n: caps[n] for n in nodes if n in caps}


@pytest.mark.parametrize(("rows", "total", "floor"), [(9, 40, 0), (8, 21, 1)])
def test_slot_totals_exact_in_every_graph_and_the_manifest(tiny_cpu_package: Path, tmp_path: Path, rows: int,
                                                           total: int, floor: int) -> None:
    counts = np.random.default_rng(rows).integers(0, 1000, size=(rows, 8)).astype(np.uint64)
    profile = tmp_path / "p.bin"
    profile.write_bytes(encode_profile(ExpertProfile(counts)))
    out = tmp_path / "out"
    convert_package(tiny_cpu_package, out, OffloadOptions(mode="auto", expert_profile=str(profile),
                                                          total_resident_slots=total, min_slots_per_layer=floor))
    cfg = open_package(out).config
    tiers = [cfg.model.decoder.session_options.config_entries]
    tiers += [p.overlay.session_options.config_entries for p in cfg.runtime_profiles if p.overlay.session_options]
    assert len(tiers) == 5
    for entries in tiers:
        for graph in (*S_GRAPHS, "model.onnx"):
            caps = _caps_of_graph(entries, out / graph)
            assert sum(caps.values()) == total, (graph, caps)
            assert all(c >= floor for n, c in caps.items() if n.startswith("/model/"))
    manifest = json.loads((out / "package_manifest.json").read_text())
    assert sum(manifest["resident_slots"].values()) == total
    s4 = _caps_of_graph(tiers[0], out / "model_s4.onnx")
    if rows == 9:  # the profile covers the draft: the chained copies share its bank, 0 slots of their own
        assert s4["/mtp/0/moe/QMoE"] >= 0 and s4["/mtp/1/moe/QMoE"] == s4["/mtp/2/moe/QMoE"] == 0
    else:  # a profile of the decoder layers only: the draft nodes are left uncapped, and said so
        assert not [n for n in s4 if n.startswith("/mtp/")]
        assert "no profile row (uncapped): model.onnx:/mtp/0/moe/QMoE" in manifest["notes"]


def test_check_emitted_names_a_problem_without_a_message(monkeypatch: pytest.MonkeyPatch, messages_snapshot: SnapshotAssertion) -> None:
    """A contract problem that is a plain value (no ``rule_id`` / ``message``) is named as it is."""
    import contracts.offload_config

    monkeypatch.setattr(contracts.offload_config, "check_offload_config", lambda entries: ["placement 'x' unknown"])
    with pytest.raises(OffloadError) as info:
        check_emitted({OFFLOAD_PREFIX + "placement": "x"})
    assert messages_snapshot == str(info.value)


def _rows(counts: list[list[int]], names: list[str]) -> ProfileRows:
    sites = tuple(Site("model.onnx", name, len(counts[0]), 2, False) for name in names)
    profile = ExpertProfile(np.asarray(counts, dtype=np.uint64))
    return ProfileRows(profile, sites, tuple(range(len(names))))


def test_hit_report_states_kept_offloaded_and_uncapped() -> None:
    rows = _rows([[3, 1, 0, 0], [5, 5, 0, 0], [2, 2, 2, 2]], ["/a", "/b", "/c"])
    report = hit_report("tier", rows, {("model.onnx", "/a"): 1}, [("model.onnx", "/b")])
    assert report.layers == (
        LayerHit("model.onnx", "/a", 0, "offloaded", 4, 1, 3),
        LayerHit("model.onnx", "/b", 1, "kept", 10, 4, 10),
        LayerHit("model.onnx", "/c", 2, "uncapped", 8, None, None),
    )
    assert report.uncapped == ["/c"]


def test_hit_report_lines_total_then_rows() -> None:
    rows = _rows([[3, 1, 0, 0], [2, 2, 2, 2]], ["/a", "/c"])
    report = hit_report("session_options", rows, {("model.onnx", "/a"): 1}, [])
    assert report.lines() == [
        "expected hit rate [session_options]: 75.0% (3 of 4 selections on resident experts; 1 uncapped node(s) left out)",
        "  model.onnx:/a:  75.0%  resident 1  (offloaded)",
        "  model.onnx:/c: n/a (uncapped)  resident -  (uncapped)",
    ]
    uncapped = hit_report("t", rows, {}, [])
    # no row capped (no slot count given): one line that says why there is no rate, not n/a per row
    (line,) = uncapped.lines()
    assert line.startswith("expected hit rate [t]: not predicted: no resident-slot count was given")
    assert "the profile, 12 selections over 2 nodes, is written as session.moe.offload.popularity_file" in line


def test_an_unnamed_qmoe_node_is_a_site_named_empty(tiny_cpu_package: Path) -> None:
    model = open_package(tiny_cpu_package).load("target")
    first = next(n for n in model.graph if n.op_type == "QMoE")
    first.name = ""
    sites = qmoe_sites(model, "model.onnx")
    assert sites[0].name == "" and sites[0].label == "model.onnx:"
    assert not sites[0].draft


def test_plan_caps_reads_each_sites_own_profile_row() -> None:
    """A covered site uses the profile row the match gave it (row 1 for /b), not row 0."""
    from q38.offload.slot_plan import plan_caps

    sites = (Site("model.onnx", "/a", 4, 2, False), Site("model.onnx", "/b", 4, 2, False))
    profile = ExpertProfile(np.asarray([[1, 1, 1, 1], [9, 9, 9, 9]], dtype=np.uint64))
    rows = ProfileRows(profile, sites, (0, 1))  # /a -> row 0, /b -> row 1 (the popular one)
    options = OffloadOptions(expert_profile="p.strp", total_resident_slots=4)
    plan = plan_caps(options, sites, {("model.onnx", "/a"), ("model.onnx", "/b")}, [], rows)
    assert plan.caps == {("model.onnx", "/a"): 0, ("model.onnx", "/b"): 4}
    assert plan.total == 4 and plan.notes == ()


def test_check_emitted_names_the_rule_of_the_first_violation(monkeypatch: pytest.MonkeyPatch, messages_snapshot: SnapshotAssertion) -> None:
    import contracts.offload_config
    from contracts._rule import Violation

    found = [Violation("CFG-TEST-1", "placement 'x' unknown"), Violation("CFG-TEST-2", "second")]
    monkeypatch.setattr(contracts.offload_config, "check_offload_config", lambda entries: found)
    with pytest.raises(OffloadError) as info:
        check_emitted({OFFLOAD_PREFIX + "placement": "x"})
    assert messages_snapshot == str(info.value)


def test_hit_report_as_json_carries_every_row_and_the_totals() -> None:
    """The manifest's ``hit_rates`` and ``--json``: totals, uncapped nodes and every row, shares
    rounded to 6 places (None where uncapped)."""
    rows = _rows([[2, 1, 0, 0], [2, 2, 2, 2]], ["/a", "/c"])
    report = hit_report("tier", rows, {("model.onnx", "/a"): 1}, [])
    assert report.to_dict() == {
        "tier": "tier", "selections": 3, "hits": 2, "share": 0.666667, "uncapped": ["/c"],
        "layers": [
            {"graph": "model.onnx", "node": "/a", "row": 0, "state": "offloaded", "selections": 3, "resident": 1,
             "hits": 2, "share": 0.666667},
            {"graph": "model.onnx", "node": "/c", "row": 1, "state": "uncapped", "selections": 8, "resident": None,
             "hits": None, "share": None},
        ],
    }  # fmt: skip


@pytest.mark.parametrize("options", [
    {"mode": "sometimes"},
    {"placement": "dynamic"},
    {"device_expert_bytes": -1},
    {"host_expert_bytes": 1 << 64},
    {"target_resident_slots": 2, "total_resident_slots": 8, "expert_profile": "p.bin"},
    {"total_resident_slots": 8},
    {"uniform_profile_slots": True},
    {"min_slots_per_layer": 1},
    {"mtp_moe_placement": "gpu"},
])  # fmt: skip
def test_each_offload_flag_combination_that_cannot_work_is_one_line_naming_the_flag(
    options: dict, messages_snapshot: SnapshotAssertion
) -> None:
    with pytest.raises(FlagError) as info:
        OffloadOptions(**options)
    assert messages_snapshot == str(info.value)


def test_the_router_pass_has_cleared_nothing_before_it_runs() -> None:
    assert ClearRouterWeightsPass().cleared == 0


def test_a_profile_matches_every_site_or_every_decoder_layer_with_the_same_expert_count(messages_snapshot: SnapshotAssertion) -> None:
    """Rows for every site, or for the decoder layers only (the MTP draft, of any width, then has
    none); a covered site of another expert count, or a layer count that fits neither, is refused."""
    layers = [Site("model.onnx", f"/l{i}", 4, 2, False) for i in range(2)]
    draft = Site("model.onnx", "/mtp/0", 8, 2, True)
    profile = ExpertProfile(np.ones((2, 4), dtype=np.uint64))
    assert match_profile(profile, [*layers, draft], source="p.bin").rows == (0, 1, None)
    with pytest.raises(ProfileError) as info:
        match_profile(profile, [layers[0], Site("model.onnx", "/l1", 6, 2, False), draft], source="p.bin")
    assert messages_snapshot == str(info.value)
    with pytest.raises(ProfileError) as info:
        match_profile(ExpertProfile(np.ones((5, 4), dtype=np.uint64)), [*layers, draft], source="p.bin")
    assert messages_snapshot == str(info.value)


def test_the_four_profiles_split_20_to_34_gib_and_an_empty_host_range_is_refused() -> None:
    """Inclusive, non-overlapping device ranges (the last ends at exactly 34 GiB), each capping its
    arena at the smallest device it admits; a negative or inverted host-memory range is refused."""
    gib = 1 << 30
    profiles = build_runtime_profiles({OFFLOAD_PREFIX + "mode": "auto"}, min_host_bytes=gib, max_host_bytes=2 * gib)
    spans = [(p.eligibility.minimum_total_device_memory_bytes, p.eligibility.maximum_total_device_memory_bytes)
             for p in profiles]  # fmt: skip
    assert spans == [(20 * gib, 24 * gib - 1), (24 * gib, 28 * gib - 1), (28 * gib, 32 * gib - 1), (32 * gib, 34 * gib)]
    assert [p.id for p in profiles] == ["20gib-to-24gib", "24gib-to-28gib", "28gib-to-32gib", "32gib-to-34gib"]
    for bad in ({"min_host_bytes": -1}, {"min_host_bytes": 2 * gib, "max_host_bytes": gib}):
        with pytest.raises(ConfigError, match=r"^runtime_profiles: effective host memory range \[.*\] is empty$"):
            build_runtime_profiles({}, **bad)  # type: ignore[arg-type]
    assert len(build_runtime_profiles({}, min_host_bytes=0)) == 4


@pytest.mark.parametrize("counts", [np.zeros((0, 4), dtype=np.uint64), np.zeros((2, 0), dtype=np.uint64),
                                    np.ones(4, dtype=np.uint64)])
def test_a_profile_matrix_that_is_not_a_non_empty_l_by_e_is_refused_naming_its_shape(counts: np.ndarray, messages_snapshot: SnapshotAssertion) -> None:
    """No layer, no expert, or not two-dimensional: refused naming the flag and the shape it got."""
    with pytest.raises(FlagError) as info:
        plan_from_profile(counts, 0)
    assert messages_snapshot == str(info.value)


def test_a_total_when_every_profiled_node_stays_resident_is_refused_naming_the_flag(tiny_builder_cpu_package: Path,
                                                                                    tmp_path: Path, messages_snapshot: SnapshotAssertion) -> None:
    """``auto`` keeps every builder QMoE node on the GPU, so a total has no offloaded node to
    spread over: refused in one line naming ``--total-resident-slots``, nothing written."""
    profile = tmp_path / "p.bin"
    profile.write_bytes(encode_profile(ExpertProfile(np.ones((9, 8), dtype=np.uint64))))
    with pytest.raises(OffloadError) as info:
        convert_package(tiny_builder_cpu_package, tmp_path / "out", OffloadOptions(
            mode="auto", expert_profile=str(profile), total_resident_slots=8))
    assert messages_snapshot == str(info.value)
    assert not (tmp_path / "out").exists()
