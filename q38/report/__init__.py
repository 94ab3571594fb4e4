"""``q38 check``'s results where reviewers read them, with rule selection, suppression and baselines.

The formats: text, json, SARIF 2.1.0, GitHub workflow annotations and JUnit XML.

:mod:`q38.report.results` classifies a :class:`contracts.runner.CheckReport`'s violations once;
each format module renders those results (:func:`render` picks one by name).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from q38.report.results import CheckResults

__all__ = ["FORMATS", "render"]

FORMATS: tuple[str, ...] = ("text", "json", "sarif", "github", "junit")
"""The names ``q38 check --format`` accepts (text is the default)."""


def render(fmt: str, results: CheckResults) -> str:
    """``results`` (a :class:`q38.report.results.CheckResults`) in format ``fmt``, newline-ended."""
    if fmt == "text":
        # deferred: one per --format; pulls in onnx (contracts._graph)
        from q38.report.text import render_text as renderer
    elif fmt == "json":
        # deferred: one per --format; pulls in onnx (contracts._graph)
        from q38.report.jsonout import render_json as renderer
    elif fmt == "sarif":
        # deferred: one per --format; pulls in onnx (contracts._graph)
        from q38.report.sarif import render_sarif as renderer
    elif fmt == "github":
        # deferred: one per --format; pulls in onnx (contracts._graph)
        from q38.report.github import render_github as renderer
    elif fmt == "junit":
        # deferred: one per --format; pulls in onnx (contracts._graph)
        from q38.report.junit import render_junit as renderer
    else:
        raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    return renderer(results)
