"""The rule and violation records shared by every contract module.

A :class:`Rule` mirrors one check that onnxruntime (or a package consumer) performs. It names
where the check is enforced (``cpu-session``: the CPU wheel rejects the session; ``cuda-only``:
only a node assigned to the CUDA EP triggers it; ``run-time``: checked when the model runs), the
ORT versions it exists in, and its source (a section of ``ort-contract-rules.md`` /
``ort-cpu-capabilities.md`` or an ORT source file). ``check`` is pure: it reads its arguments and
at most ``os.stat``/``os.lstat``, and returns :class:`Violation` records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

from contracts._graph import ModelLike

__all__ = [
    "REFERENCE_ORT_VERSION",
    "Enforced",
    "Ep",
    "ModelCheck",
    "OrtVersions",
    "Rule",
    "RuleKind",
    "Severity",
    "Violation",
    "parse_version",
]

Enforced = Literal["cpu-session", "cuda-only", "run-time"]
Severity = Literal["error", "warning"]
# Which EP assignment a rule concerns: schema rules reject on any EP; kernel rules only where the
# node runs ("cpu": the CPU kernel constructor; "cuda": the CUDA kernel / offload checker).
Ep = Literal["any", "cpu", "cuda"]
# What a rule's check takes:
#   session-config: (entries: Mapping[str, str])
#   graph:          (model: onnx_ir.Model, entries: Mapping[str, str])
#   genai-config:   (config: Mapping[str, Any])
#   package:        (view: contracts.package_layout.PackageView)
#   environment:    (env: Mapping[str, str], entries: Mapping[str, str]): the process environment
#                   ORT reads at session creation, next to a session's config entries
RuleKind = Literal["session-config", "graph", "genai-config", "package", "environment"]

# The onnxruntime release the contracts mirror by default (ort-contract-rules.md): written once, here;
# compare it (and any version) through :func:`parse_version`, never as strings.
REFERENCE_ORT_VERSION: Final = "1.32.0"


def parse_version(version: str) -> tuple[int, ...]:
    """``"1.32.0"`` -> ``(1, 32, 0)``; local/dev suffixes (``1.32.0+cu12``, ``1.33.0.dev1``) dropped."""
    parts: list[int] = []
    for piece in version.split("+")[0].split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if len(parts) == 3:
            break
    while len(parts) < 3:
        parts.append(0)
    return tuple(parts)


@dataclass(frozen=True)
class OrtVersions:
    """The onnxruntime versions a rule exists in: ``since`` inclusive, ``until`` exclusive."""

    since: str | None = None
    until: str | None = None

    def applies(self, version: str) -> bool:
        """Whether ``version`` lies in ``[since, until)`` (compared numerically, never as strings)."""
        v = parse_version(version)
        if self.since is not None and v < parse_version(self.since):
            return False
        return not (self.until is not None and v >= parse_version(self.until))


@dataclass(frozen=True)
class Violation:
    """One broken rule: where (graph, node) and ORT's own wording where ORT has one."""

    rule_id: str
    message: str
    graph: str = ""
    node: str = ""
    severity: Severity = "error"
    # How many violations of the same root cause (one missing or unreadable file) this one stands
    # for besides itself (contracts.root_cause); 0 for an ordinary violation.
    folded: int = 0

    def at(self, *, graph: str) -> Violation:
        """The same violation attributed to ``graph``."""
        return Violation(self.rule_id, self.message, graph, self.node, self.severity, self.folded)

    def to_dict(self) -> dict[str, Any]:
        """The violation as the flat JSON record reports print.

        All five fields as strings, and ``folded`` (an int) when it stands for folded dependents.
        """
        doc: dict[str, Any] = {
            "rule_id": self.rule_id,
            "graph": self.graph,
            "node": self.node,
            "severity": self.severity,
            "message": self.message,
        }
        if self.folded:
            doc["folded"] = self.folded
        return doc


# A graph rule's check (kind "graph"): the model and the session's config entries.
ModelCheck: TypeAlias = Callable[[ModelLike, Mapping[str, str]], list[Violation]]


@dataclass(frozen=True)
class Rule:
    """One contract rule (see the module docstring)."""

    rule_id: str
    summary: str
    source: str
    enforced: Enforced
    kind: RuleKind
    check: Callable[..., list[Violation]] = field(compare=False, repr=False)
    ort_versions: OrtVersions = OrtVersions()
    ep: Ep = "any"
    # The id of the rule whose check reports this id ("" for a rule that runs itself): one check
    # (e.g. OFFLOAD-NODE-001, ORT's offload planner) may report a per-check id for each of its
    # checks; each such id has its own record, for its catalogue entry, and the runner runs only
    # the parent (the record's ``check`` keeps the parent's results of its own id).
    part_of: str = ""

    def applies(self, version: str) -> bool:
        """Whether onnxruntime ``version`` has this rule (non-ORT rules apply to every version)."""
        return self.ort_versions.applies(version)

    def __call__(self, *args: object) -> list[Violation]:
        return self.check(*args)
