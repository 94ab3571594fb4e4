"""Hooks for the flat-package builder: ``q38 build --multidraft`` and ``--offload-profiles``.

The builder owns staging and writing; these functions only compute (no file I/O):

- :func:`emit_multidraft_graphs` — the S=2/3/4 verify graphs of a target model (new models,
  the target untouched), optionally with ``router_weights`` cleared first;
- :func:`offload_profiles_config` — a config with the four runtime profiles, the decoder offload
  session options, CUDA-graph capture and the ``kSameAsRequested`` arena options.
"""

from __future__ import annotations

import onnx_ir as ir

from q38.offload.multidraft import DRAFT_ROWS, build_multidraft, multidraft_filenames
from q38.offload.options import OffloadOptions, offload_config_entries
from q38.offload.profiles import apply_offload_config
from q38.offload.router import clear_router_weights
from q38.package import Config, config_to_dict, external_refs, parse_config

__all__ = ["emit_multidraft_graphs", "offload_profiles_config"]


def emit_multidraft_graphs(
    target: ir.Model, *, lineage: str, clear_router: bool = True, where: str = "model.onnx"
) -> tuple[dict[str, ir.Model], int]:
    """({"model_s2.onnx": ..., "model_s3.onnx": ..., "model_s4.onnx": ...}, router_weights cleared).

    ``model.onnx`` should then be written as a copy of ``model_s4.onnx``.
    """
    cleared = 0
    base = target
    if clear_router:
        base, cleared = clear_router_weights(target)
    names = multidraft_filenames()
    graphs = {
        names[f"s{rows}"]: build_multidraft(base, rows, lineage=lineage, where=where) for rows in DRAFT_ROWS
    }
    return graphs, cleared


def offload_profiles_config(
    cfg: Config,
    s4: ir.Model,
    options: OffloadOptions | None = None,
    caps: dict[str, int] | None = None,
) -> Config:
    """``cfg`` with runtime profiles selecting ``model_s4.onnx`` and the offload session options.

    The minimum effective host memory is the external bytes ``s4`` references (all of it is
    host-resident in an offload package). The result has been through the strict parser.
    """
    options = options or OffloadOptions()
    entries = offload_config_entries(options, caps or {})
    seen: dict[tuple[str, int], int] = {}
    for ref in external_refs(s4):
        seen[(ref.location, ref.offset)] = ref.nbytes
    out = apply_offload_config(
        cfg, entries, min_host_bytes=sum(seen.values()), multidraft=multidraft_filenames()
    )
    return parse_config(config_to_dict(out))
