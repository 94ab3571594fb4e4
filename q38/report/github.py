"""``q38 check --format github``: GitHub Actions workflow commands, one line per active result.

``::error file=PATH,title=RULE-ID::message`` (``::warning`` for a warning), in the grammar of
GitHub's "Workflow commands for GitHub Actions": the message escapes ``%``, CR and LF as
``%25``, ``%0D``, ``%0A``; property values escape also ``:`` and ``,`` (``%3A``, ``%2C``). The
message names the graph and node (or config key) since an ``.onnx`` file has no line to point
at. Suppressed results are not annotated; a failed ``--ort`` session is an ``::error``. A clean
package gets one ``::notice`` summary line (the check ran, and by which rules), never silence.
"""

from __future__ import annotations

from q38.report.locations import locate, package_prefix
from q38.report.results import CheckResults

__all__ = ["escape_data", "escape_property", "render_github"]


def escape_data(text: str) -> str:
    """A workflow command's message, escaped as GitHub's toolkit (``escapeData``) does."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value, escaped as GitHub's toolkit (``escapeProperty``)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render_github(results: CheckResults) -> str:
    """The annotation lines, newline-ended; a single ``::notice`` summary when there is none."""
    report = results.report
    prefix = package_prefix(report.package)
    lines = []
    for r in results.active:
        v = r.violation
        where = locate(report, v)
        at = f"{v.graph} node {v.node}: " if v.node and v.graph else f"{where.logical}: " if where.logical else ""
        if where.logical and v.message.startswith(where.logical):
            at = ""  # the message names its key path already
        props = f"file={escape_property(prefix + where.file)},title={escape_property(v.rule_id)}"
        lines.append(f"::{r.level} {props}::{escape_data(at + v.message)}")
    for s in report.sessions:
        if s.status == "failed":
            lines.append(f"::error title=session {escape_property(s.graph)}::{escape_data(s.message or 'failed')}")
    if not lines:
        # A clean package still says so in the job log: that the check ran, on what, by which rules.
        opened = sum(s.status == "ok" for s in report.sessions)
        skipped = sum(s.status == "skipped" for s in report.sessions)
        sessions = f"; ORT sessions: {opened} ok, {skipped} SKIPPED" if results.ort_sessions else ""
        summary = (f"{report.package}: {'OK' if results.ok else 'FAIL'}: 0 error(s), 0 warning(s); "
                   f"{len(report.rules_checked)} rules of onnxruntime {report.ort_version}{sessions}")
        level = "notice" if results.ok else "error"
        lines.append(f"::{level} title=q38 check::{escape_data(summary)}")
    return "".join(line + "\n" for line in lines)
