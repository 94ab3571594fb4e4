"""Refuse an offload whose runtime profiles cannot fit their tier, before anything is written (issue 29).

The planned config and pool placements are checked by ``contracts.profile_fit`` against the
source graphs: the verify graphs ``model_s2/s3/s4.onnx`` a profile selects are not written yet,
and they reference the target's initializers (the chained drafts share them), so the target
stands in for them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from q38.errors import OffloadError

if TYPE_CHECKING:
    from q38.package import Config, WeightsPool

__all__ = ["refuse_unfit_profiles"]


def refuse_unfit_profiles(src: Path, config: Config, pool: WeightsPool) -> None:
    """Raise :class:`OffloadError` naming the profile, tier and bytes over if a planned profile cannot fit.

    ``config``: the planned :class:`q38.package.Config`; ``pool``: the planned weights pool.
    """
    # deferred: pulls in onnx (contracts._graph)
    from contracts.profile_fit import profile_fit_violations
    from q38.package import config_to_dict  # deferred: pulls in numpy (q38.package.profile)
    from q38.package.memory import pool_placements  # deferred: pulls in numpy (q38.package.profile)
    from q38.package.surface import list_graphs  # deferred: pulls in numpy (q38.package.profile)

    document = config_to_dict(config)
    target = config.model.qwen38_graph.target
    for profile in document.get("runtime_profiles") or []:
        decoder = profile.get("overlay", {}).get("model", {}).get("decoder", {})
        if "filename" in decoder:
            decoder["filename"] = target  # not written yet: the target holds the same initializers
    config_dir = list_graphs(src).config_dir
    placements = pool_placements(src, config_dir, [(e.file, e.offset, str(e.placement)) for e in pool.entries])
    found = profile_fit_violations(src, document=document, placements=placements)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise OffloadError(f"{found[0].rule_id}: {found[0].message}{more}; nothing written")
