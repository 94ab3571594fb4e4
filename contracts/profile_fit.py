"""Runtime-profile fit: a profile's device parts must fit the smallest device it admits (issue 29).

A ``runtime_profiles`` entry selects a decoder and session options for devices of
``minimum_total_device_memory_bytes`` .. ``maximum_total_device_memory_bytes``. At the profile's
own context tier (its overlay's ``search.max_length``, else ``model.context_length``), the exact
device bytes of that configuration — device-placed weights, resident routed-expert slots, and the
decoder state (KV caches, indexer caches, recurrent and conv state) — must not exceed its device
budget (the minimum it admits, capped by the CUDA arena's ``gpu_mem_limit``); the host bytes
(host-placed weights, experts that stay on the host) must not exceed
``maximum_effective_host_memory_bytes`` where one is given. A profile that cannot fit is refused
on the device that selects it; GenAI has no way to know before it allocates. The numbers come
from :mod:`q38.package.memory` (shapes and dtypes; no weight byte read), as ``q38 fit`` prints
them; estimates (CUDA context, workspaces) are not part of this check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contracts._rule import Rule, RuleDoc, Violation
from contracts.package_layout import PackageView
from q38.errors import Q38Error

if TYPE_CHECKING:
    from q38.package.memory import MemoryBreakdown

__all__ = ["RULES", "check_profile_fit", "profile_fit_violations"]

_SRC = "SPEC §5.4; docs/fit.md (runtime profiles); onnxruntime-genai runtime_profiles eligibility"


def _size(n: int) -> str:
    return f"{n} bytes ({n / (1 << 30):.2f} GiB)"


def profile_fit_violations(
    root: Path | str,
    *,
    document: Mapping[str, Any] | None = None,
    placements: Mapping[tuple[str, int], str] | None = None,
) -> list[Violation]:
    """Every runtime profile of the package at ``root`` that cannot fit its tier, with the numbers.

    ``document`` / ``placements``: a planned config and pool placements not written yet.
    """
    # deferred: pulls in numpy (q38.package.profile)
    from q38.package.memory import profile_breakdowns, read_package_facts

    facts = read_package_facts(root, document=document, placements=placements)
    if not facts.profiles:
        return []
    found = []
    for profile, m in profile_breakdowns(facts):
        budget = profile.device_budget
        where = f"runtime_profiles {profile.id!r} at context {profile.context}"
        if m.device_total > budget:
            over = m.device_total - budget
            found.append(Violation(
                "PKG-FIT-001",
                f"{where}: device bytes {_size(m.device_total)} (weights {m.weights_device}, resident experts "
                f"{m.expert_device}, state {m.state_total}) exceed its budget {_size(budget)} by {over} bytes; "
                f"{_remedy(m, over, budget)}",
                graph=profile.decoder,
            ))  # fmt: skip
        if profile.max_host is not None and m.host_total > profile.max_host:
            over = m.host_total - profile.max_host
            found.append(Violation(
                "PKG-FIT-002",
                f"{where}: host bytes {_size(m.host_total)} exceed maximum_effective_host_memory_bytes "
                f"{profile.max_host} by {over} bytes; keep more experts resident or raise the maximum",
                graph=profile.decoder,
            ))  # fmt: skip
    return found


def _remedy(m: MemoryBreakdown, over: int, budget: int) -> str:
    """What to drop: resident slots (how many, of what size) and/or the largest tier that fits."""
    parts = []
    capped = [e for e in m.experts if e.resident]
    if m.offloaded and capped:
        per = max(e.bytes_per_expert for e in capped)
        slots = -(-over // per) if per else 0
        held = sum(e.resident or 0 for e in capped)  # every one is set (capped keeps truthy ones)
        if slots <= held:
            parts.append(f"drop at least {slots} resident slots ({per} bytes each, {held} planned)")
        else:
            parts.append(f"dropping all {held} resident slots frees {m.expert_device} bytes, not enough")
    growing = m.state_total - m.fixed_state
    if growing > 0 and m.context > 0:
        per_token = growing / m.context
        room = budget - (m.device_total - growing)
        tokens = int(room // per_token) if room > 0 else 0
        parts.append(f"or use a context tier of at most {tokens} tokens" if parts else
                     f"use a context tier of at most {tokens} tokens")  # fmt: skip
    return "; ".join(parts) if parts else "the weights alone exceed the budget: pick a larger device range"


def _check(view: PackageView) -> list[Violation]:
    try:
        return profile_fit_violations(view.root)
    except (Q38Error, OSError):  # an unreadable config or graph: the layout and config rules say why
        return []


def _only(rule_id: str) -> Callable[[PackageView], list[Violation]]:
    def check(view: PackageView) -> list[Violation]:
        return [v for v in _check(view) if v.rule_id == rule_id]

    return check


FAMILY = "fit"
"""The rule family of this module's rules (``q38 rules --family``)."""

RULES: tuple[Rule, ...] = (
    Rule("PKG-FIT-001", "a runtime profile's exact device bytes (device weights, resident expert slots, "
         "decoder state at its context tier) fit its device budget", _SRC, "run-time", "package",
         _only("PKG-FIT-001"), family=FAMILY, doc=RuleDoc(
        "A runtime profile is chosen for GPUs whose device memory covers what the decoder needs "
        "at that profile's context tier: the device-placed weights, the resident expert slots and "
        "the decoder state (KV caches, GDN recurrent and conv state, indexer caches) at the tier. "
        "Exact bytes from shapes and dtypes (q38 fit); a profile whose sum exceeds its budget "
        "fails when the session allocates (CUDA out of memory).",
        "runtime_profiles[0] for 20 GiB at 32K context whose resident slots alone take 19 GiB",
        "Lower the profile's resident slots (--total-resident-slots / --target-resident-slots) or "
        "its context tier, as the message says; q38 fit shows the breakdown.",
    )),
    Rule("PKG-FIT-002", "a runtime profile's host bytes fit its maximum_effective_host_memory_bytes", _SRC,
         "run-time", "package", _only("PKG-FIT-002"), family=FAMILY, doc=RuleDoc(
        "The experts that are not resident stay in host memory (cpu_mmap / host_mapped); a profile "
        "whose host bytes exceed its maximum_effective_host_memory_bytes selects a machine that "
        "cannot hold them.",
        "a profile with maximum_effective_host_memory_bytes 32 GiB and 60 GiB of host-placed experts",
        "Keep more experts resident, or raise maximum_effective_host_memory_bytes to what the "
        "package needs (q38 fit prints the host total).",
    )),
)  # fmt: skip


def check_profile_fit(view: PackageView) -> list[Violation]:
    """Every profile-fit violation of the package (none without runtime profiles), in one pass."""
    return _check(view)
