"""The rule and violation records shared by every contract module.

A :class:`Rule` mirrors one check that onnxruntime (or a package consumer) performs. It names
where the check is enforced (``cpu-session``: the CPU wheel rejects the session; ``cuda-only``:
only a node assigned to the CUDA EP triggers it; ``run-time``: checked when the model runs), the
ORT versions it exists in, and its source (a section of ``ort-contract-rules.md`` /
``ort-cpu-capabilities.md`` or an ORT source file). ``check`` is pure: it reads its arguments and
at most ``os.stat``/``os.lstat``, and returns :class:`Violation` records.

A rule is one declaration, in its family module: the record carries its family, its
documentation (:class:`RuleDoc`: what ORT does and the message it prints, a violating example,
the fix, the default severity) and a passing and a violating input: :class:`Examples` for the
rules whose input is data (session config, environment, config document), :class:`GraphExamples`
(models in ONNX text, with the session's config entries) for most graph rules. ``q38 rules``,
``q38 explain``, SARIF's rule metadata, ``docs/rules.md`` and the rule-coverage test read these
records (``contracts.catalogue``); nothing else lists a rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeAlias, cast

from contracts._graph import ModelLike

if TYPE_CHECKING:
    import onnx

    from contracts.package_view import PackageView

__all__ = [
    "REFERENCE_ORT_VERSION",
    "AnyCheck",
    "ConfigCheck",
    "ConfigPatch",
    "Enforced",
    "EnvironmentCheck",
    "EnvironmentInput",
    "Ep",
    "ExampleInput",
    "Examples",
    "GraphExample",
    "GraphExamples",
    "ModelCheck",
    "OrtVersions",
    "PackageCheck",
    "Rule",
    "RuleDoc",
    "RuleKind",
    "SessionCheck",
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


# The check of each kind of rule: what it reads, positionally.
class SessionCheck(Protocol):
    """A ``session-config`` rule's check: one session's config entries."""

    def __call__(self, entries: Mapping[str, str], /) -> list[Violation]: ...


class EnvironmentCheck(Protocol):
    """An ``environment`` rule's check: the process environment and the session's config entries."""

    def __call__(self, env: Mapping[str, str], entries: Mapping[str, str], /) -> list[Violation]: ...


class ConfigCheck(Protocol):
    """A ``genai-config`` rule's check: the config document as JSON values."""

    def __call__(self, config: Mapping[str, Any], /) -> list[Violation]: ...


class PackageCheck(Protocol):
    """A ``package`` rule's check: the package's files and graphs (``contracts.package_view``)."""

    def __call__(self, view: PackageView, /) -> list[Violation]: ...


# A graph rule's check (kind "graph"): the model and the session's config entries.
ModelCheck: TypeAlias = Callable[[ModelLike, Mapping[str, str]], list[Violation]]
AnyCheck: TypeAlias = SessionCheck | EnvironmentCheck | ConfigCheck | PackageCheck | ModelCheck
"""The check of a rule of any kind (the rule's ``kind`` says which)."""

# An example input of a data rule: session-config entries; (environment, entries); a config patch
# (JSON merge patch, RFC 7386: an object merged key by key into a valid config, ``None`` deletes).
EnvironmentInput: TypeAlias = tuple[Mapping[str, str], Mapping[str, str]]
ConfigPatch: TypeAlias = Mapping[str, Any]
ExampleInput: TypeAlias = Mapping[str, Any] | EnvironmentInput


@dataclass(frozen=True)
class RuleDoc:
    """What ORT does and the message it prints, a violating example, the fix, the default level.

    ``explanation`` says what onnxruntime (or the package consumer) checks and quotes the message
    it prints where it has one; ``example`` is a minimal violating input (an ONNX node in text
    form, a config fragment, a file layout); ``fix`` is what to change. ``severity`` is the rule's
    default level (a rule whose results are mostly errors may still report a warning case, e.g.
    ``OFFLOAD-NODE-001`` in ``auto`` mode).
    """

    explanation: str
    example: str
    fix: str
    severity: Severity = "error"


@dataclass(frozen=True)
class Examples:
    """A passing and a violating input of a data rule, evaluated by the rule-coverage test.

    By kind: ``session-config``: config entries; ``environment``: ``(env, entries)``;
    ``genai-config``: a :data:`ConfigPatch` of q38's tiny package's config. The violating input
    differs from the passing one in the one thing the rule is about.
    """

    passing: ExampleInput
    violating: ExampleInput


@dataclass(frozen=True)
class GraphExample:
    """One input of a graph rule: a model in ONNX text and the session's config entries.

    ``model`` is the textual syntax of ``onnx.parser.parse_model`` (``<ir_version: 10, ...>``, the
    graph's signature, its initializers, its nodes; ``float[]`` declares a tensor of unknown
    shape, ``float`` a scalar); ``entries`` are the config entries the rule reads beside the model
    (none for most rules).
    """

    model: str
    entries: Mapping[str, str] = field(default_factory=dict)

    def parse(self) -> onnx.ModelProto:
        """The model, parsed from its text (``onnx.parser.parse_model``)."""
        from onnx import parser  # deferred: only the rule-coverage test parses examples

        return parser.parse_model(self.model)


@dataclass(frozen=True)
class GraphExamples:
    """A passing and a violating input of a graph rule, evaluated by the rule-coverage test.

    The two differ in the one thing the rule is about (an attribute, a shape, a config entry).
    ``ort_version`` is the onnxruntime version they are evaluated for (the rule's record that
    applies to it runs them).
    """

    passing: GraphExample
    violating: GraphExample
    ort_version: str = REFERENCE_ORT_VERSION

    @classmethod
    def edited(cls, passing: str, *edits: tuple[str, str], entries: Mapping[str, str] | None = None,
               ort_version: str = REFERENCE_ORT_VERSION) -> GraphExamples:  # fmt: skip
        """``passing``, and the violating model it becomes with each ``(old, new)`` edit applied.

        Both read the same config ``entries``. Raises ValueError when an ``old`` does not occur
        exactly once in the text it edits (an edit that silently did nothing).
        """
        violating = passing
        for old, new in edits:
            if violating.count(old) != 1:
                raise ValueError(f"the example edit {old!r} does not occur exactly once in {violating!r}")
            violating = violating.replace(old, new)
        same = dict(entries or {})
        return cls(GraphExample(passing, same), GraphExample(violating, same), ort_version)


@dataclass(frozen=True)
class Rule:
    """One contract rule, declared once in its family module (see the module docstring).

    ``family``: the family module's ``FAMILY``; ``doc``: its documentation; ``examples``: a
    passing and a violating input (:class:`Examples` for a data rule, :class:`GraphExamples` for a
    graph rule; package rules, and the graph rules whose inputs cannot be written as text, build
    theirs in ``tests/support/rule_cases.py``).
    """

    rule_id: str
    summary: str
    source: str
    enforced: Enforced
    kind: RuleKind
    check: AnyCheck = field(compare=False, repr=False)
    ort_versions: OrtVersions = OrtVersions()
    ep: Ep = "any"
    # The id of the rule whose check reports this id ("" for a rule that runs itself): one check
    # (e.g. OFFLOAD-NODE-001, ORT's offload planner) may report a per-check id for each of its
    # checks; each such id has its own record, for its catalogue entry, and the runner runs only
    # the parent (the record's ``check`` keeps the parent's results of its own id).
    part_of: str = ""
    family: str = field(kw_only=True)
    doc: RuleDoc = field(kw_only=True, compare=False, repr=False)
    examples: Examples | GraphExamples | None = field(default=None, kw_only=True, compare=False, repr=False)

    def applies(self, version: str) -> bool:
        """Whether onnxruntime ``version`` has this rule (non-ORT rules apply to every version)."""
        return self.ort_versions.applies(version)

    def check_session(self, entries: Mapping[str, str]) -> list[Violation]:
        """Run a ``session-config`` rule on one session's config entries."""
        self._expect("session-config")
        return cast(SessionCheck, self.check)(entries)

    def check_environment(self, env: Mapping[str, str], entries: Mapping[str, str]) -> list[Violation]:
        """Run an ``environment`` rule on the process environment and a session's entries."""
        self._expect("environment")
        return cast(EnvironmentCheck, self.check)(env, entries)

    def check_config(self, config: Mapping[str, Any]) -> list[Violation]:
        """Run a ``genai-config`` rule on a config document."""
        self._expect("genai-config")
        return cast(ConfigCheck, self.check)(config)

    def check_package(self, view: PackageView) -> list[Violation]:
        """Run a ``package`` rule on a package view."""
        self._expect("package")
        return cast(PackageCheck, self.check)(view)

    def check_graph(self, model: ModelLike, entries: Mapping[str, str]) -> list[Violation]:
        """Run a ``graph`` rule on a model and its session's config entries."""
        self._expect("graph")
        return cast(ModelCheck, self.check)(model, entries)

    def _expect(self, kind: RuleKind) -> None:
        if self.kind != kind:
            raise TypeError(f"{self.rule_id} is a {self.kind} rule, not a {kind} one")
