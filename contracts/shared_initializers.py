"""Shared-initializer rules of genai packages: ``shared_initializers`` entries resolve.

Source: onnxruntime-genai 0.18.0 ``builders/mtp.py`` (``make_shared_initializer_config``,
``share_initializers``) and docs/package-format.md (genai surface). GenAI loads each listed
range once and gives it to every session that names it, so a dangling entry (no such
initializer in one of the graphs), a dtype or shape mismatch, or a byte range outside (or
different from the graph's own reference into) the data file breaks the package. The check reads
the graphs' metadata and ``stat``s the data files; it reads no weight bytes.
"""

from __future__ import annotations

from contracts._rule import Rule, RuleDoc, Violation
from contracts.package_layout import PackageView

__all__ = ["RULES", "check_shared_initializers"]

_SRC = "onnxruntime-genai 0.18.0 builders/mtp.py; docs/package-format.md (genai surface)"


def _check(view: PackageView) -> list[Violation]:
    # deferred: pulls in numpy (q38.package.profile)
    from q38.package.genai.shared_initializers import shared_initializer_problems

    config = view.extra.get("genai_config")
    if config is None:
        return []
    sections = {role: s.shared_initializers for role, s in config.graph_sections.items() if s.shared_initializers}
    if not sections:
        return []
    models = view.extra.get("models", {})
    sharing = {role: models.get(role) for role in ["decoder", *(r for r in sections if r != "decoder")]}
    return [
        Violation("PKG-SHARED-001", f"{path}: {problem}", graph=path.split(".")[1])
        for path, problem in shared_initializer_problems(view.root, sections, sharing, files=False)
    ]


FAMILY = "layout"
"""The rule family of this module's rules (``q38 rules --family``)."""

RULES: tuple[Rule, ...] = (
    Rule("PKG-SHARED-001", "every shared_initializers entry names an initializer of the same dtype "
         "and shape in each sharing graph, at the same in-range bytes of its data file", _SRC,
         "run-time", "package", _check, family=FAMILY, doc=RuleDoc(
        "onnxruntime-genai 0.18.0 shares initializers between graphs (builders/mtp.py): each "
        "shared_initializers entry must name an initializer of the same dtype and shape in every "
        "sharing graph, stored at the same in-range bytes of its data file.",
        "shared_initializers: embed_tokens shared by decoder and mtp, but mtp's has shape [V, 512] vs [V, 1024]",
        "Regenerate the sharing graph so the initializer matches, or drop it from shared_initializers.",
    )),
)  # fmt: skip


def check_shared_initializers(view: PackageView) -> list[Violation]:
    """Every shared-initializer violation of a genai package (none for v12b packages)."""
    found: list[Violation] = []
    for rule in RULES:
        found.extend(rule.check_package(view))
    return found
