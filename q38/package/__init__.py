"""The one place that reads and writes packages (see docs/package-format.md).

Two surfaces: q38's own v12b packages (``open_package``) and onnxruntime-genai builder packages
(``open_genai_package``); ``open_any`` opens either and lists its graphs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Final

from q38.package.graph_ref import GraphRef
from q38.package.interface import AnyPackage
from q38.package.io.hashing import FileIdentity, KnownDigests, sha256_file
from q38.package.io.links import LinkMode, LinkPolicy, Placed, Placer, copy_file, place, place_file
from q38.package.io.paths import is_inside, resolve_inside, safe_relpath
from q38.package.io.staging import StagedDirectory, check_destination, check_output_outside
from q38.package.manifest import (
    MANIFEST_FILENAME,
    FileRecord,
    Manifest,
    dumps_manifest,
    parse_manifest,
    read_manifest,
    written_record,
)
from q38.package.profile import (
    PROFILE_FILENAME,
    ExpertProfile,
    encode_profile,
    parse_profile,
    read_profile,
)
from q38.package.v12b.config import (
    CONFIG_FILENAME,
    Config,
    DecoderConfig,
    HeadGraph,
    ModelConfig,
    PrefillConfig,
    ProfileEligibility,
    ProfileOverlay,
    ProviderOptions,
    Qwen38Graph,
    RuntimeProfile,
    SessionOptions,
    config_to_dict,
    dumps_config,
    parse_config,
    read_config,
)
from q38.package.v12b.pool import (
    POOL_FILENAME,
    Placement,
    PoolEntry,
    WeightsPool,
    format_pool,
    parse_pool,
    read_pool,
)

if TYPE_CHECKING:
    from q38.package.genai.config import (
        GenaiConfig,
        dumps_genai_config,
        genai_config_to_dict,
        parse_genai_config,
        read_genai_config,
    )
    from q38.package.genai.package import GenaiPackage, open_genai_package
    from q38.package.graphs import (
        ExternalRef,
        all_graphs,
        external_refs,
        iter_tensors,
        load_graph,
        read_tensor,
        save_graph,
    )
    from q38.package.surface import SurfaceVisitor, detect_surface, open_any, require_surface, visit
    from q38.package.v12b.package import (
        GRAPH_ROLES,
        Package,
        PackageWriter,
        open_package,
        source_placer,
    )
    from q38.package.v12b.reader import V12bPackage

# The genai surface's schema and reader load on first use (PEP 562): a v12b command never pays
# for them (they were a tenth of a second of CPU at every start-up).
_LAZY: Final = {
    "GenaiConfig": "q38.package.genai.config",
    "dumps_genai_config": "q38.package.genai.config",
    "genai_config_to_dict": "q38.package.genai.config",
    "parse_genai_config": "q38.package.genai.config",
    "read_genai_config": "q38.package.genai.config",
    "GenaiPackage": "q38.package.genai.package",
    "open_genai_package": "q38.package.genai.package",
    # The graph readers (onnx_ir, and through it sympy and ml_dtypes: seconds of CPU) load on first
    # use too: `q38 fit` reads graphs with onnx alone (issue 29).
    "ExternalRef": "q38.package.graphs",
    "all_graphs": "q38.package.graphs",
    "external_refs": "q38.package.graphs",
    "iter_tensors": "q38.package.graphs",
    "load_graph": "q38.package.graphs",
    "read_tensor": "q38.package.graphs",
    "save_graph": "q38.package.graphs",
    "GRAPH_ROLES": "q38.package.v12b.package",
    "Package": "q38.package.v12b.package",
    "PackageWriter": "q38.package.v12b.package",
    "open_package": "q38.package.v12b.package",
    "source_placer": "q38.package.v12b.package",
    "V12bPackage": "q38.package.v12b.reader",
    "detect_surface": "q38.package.surface",
    "open_any": "q38.package.surface",
    "require_surface": "q38.package.surface",
    "SurfaceVisitor": "q38.package.surface",
    "visit": "q38.package.surface",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

__all__ = [
    "CONFIG_FILENAME",
    "GRAPH_ROLES",
    "MANIFEST_FILENAME",
    "POOL_FILENAME",
    "PROFILE_FILENAME",
    "AnyPackage",
    "Config",
    "DecoderConfig",
    "ExpertProfile",
    "ExternalRef",
    "FileIdentity",
    "FileRecord",
    "GenaiConfig",
    "GenaiPackage",
    "GraphRef",
    "HeadGraph",
    "KnownDigests",
    "LinkMode",
    "LinkPolicy",
    "Manifest",
    "ModelConfig",
    "Package",
    "PackageWriter",
    "Placed",
    "Placement",
    "Placer",
    "PoolEntry",
    "PrefillConfig",
    "ProfileEligibility",
    "ProfileOverlay",
    "ProviderOptions",
    "Qwen38Graph",
    "RuntimeProfile",
    "SessionOptions",
    "StagedDirectory",
    "SurfaceVisitor",
    "V12bPackage",
    "WeightsPool",
    "all_graphs",
    "check_destination",
    "check_output_outside",
    "config_to_dict",
    "copy_file",
    "detect_surface",
    "dumps_config",
    "dumps_genai_config",
    "dumps_manifest",
    "encode_profile",
    "external_refs",
    "format_pool",
    "genai_config_to_dict",
    "is_inside",
    "iter_tensors",
    "load_graph",
    "open_any",
    "open_genai_package",
    "open_package",
    "parse_config",
    "parse_genai_config",
    "parse_manifest",
    "parse_pool",
    "parse_profile",
    "place",
    "place_file",
    "read_config",
    "read_genai_config",
    "read_manifest",
    "read_pool",
    "read_profile",
    "read_tensor",
    "require_surface",
    "resolve_inside",
    "safe_relpath",
    "save_graph",
    "sha256_file",
    "source_placer",
    "visit",
    "written_record",
]
