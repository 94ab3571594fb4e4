"""``q38 check --format json`` (and ``--json``): the report's own JSON, every result kept.

The shape of :meth:`contracts.runner.CheckReport.to_dict`, with ``ok`` the exit decision,
``violations`` the active results (severity as reported: ``--warnings-as-errors`` promotes
warnings) and ``suppressed`` the results ``--ignore`` / ``--select`` / the baseline hold back,
each with its ``suppression`` reason.
"""

from __future__ import annotations

import json

from q38.report.results import CheckResults

__all__ = ["render_json"]


def render_json(results: CheckResults) -> str:
    """The JSON document, indented, keys sorted, newline-ended."""
    doc = results.report.to_dict()
    doc["ok"] = results.ok
    doc["violations"] = [r.to_dict() for r in results.active]
    doc["suppressed"] = [r.to_dict() for r in results.suppressed]
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"
