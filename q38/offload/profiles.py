"""``runtime_profiles`` for offload packages, and the decoder's offload session options.

Four profiles split 20–34 GiB of total device memory into non-overlapping inclusive ranges
(20–24, 24–28, 28–32, 32–34 GiB). Every profile selects ``model_s4.onnx`` and overlays the decoder
``session_options`` with the ``session.moe.offload.*`` entries; eligibility also names the
effective host memory the offloaded package needs (routed experts ``cpu_mmap`` + dense weights
``host_mapped`` all live in host memory).

The base decoder session options gain CUDA-graph capture and the ``kSameAsRequested`` arena
strategy (CUDA provider options, decimal/enum strings as GenAI expects). Only keys of the qwen38
runtime's config surface (``q38.package.v12b.config``) are written: the result goes through the strict
parser before it is used.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Final

from q38.errors import ConfigError
from q38.package.v12b.config import (
    Config,
    ProfileEligibility,
    ProfileOverlay,
    ProviderOptions,
    RuntimeProfile,
    SessionOptions,
)

__all__ = [
    "CUDA_OFFLOAD_PROVIDER_OPTIONS",
    "PROFILE_RANGES_GIB",
    "PROFILE_TARGET",
    "apply_offload_config",
    "build_runtime_profiles",
    "check_prefill_chunk",
]

GIB: Final = 1 << 30
PROFILE_TARGET: Final = "model_s4.onnx"
# (id, minimum GiB, maximum GiB, maximum inclusive of the last byte of that GiB?)
PROFILE_RANGES_GIB: Final = ((20, 24), (24, 28), (28, 32), (32, 34))
CUDA_OFFLOAD_PROVIDER_OPTIONS: Final = {
    "enable_cuda_graph": "1",
    "arena_extend_strategy": "kSameAsRequested",
}


def build_runtime_profiles(
    offload_entries: Mapping[str, str],
    *,
    min_host_bytes: int,
    max_host_bytes: int | None = None,
    filename: str = PROFILE_TARGET,
) -> tuple[RuntimeProfile, ...]:
    """The four 20–34 GiB profiles; ranges are inclusive and never overlap.

    A range's maximum is one byte below the next range's minimum, except the last one, which ends
    at exactly 34 GiB.
    """
    if min_host_bytes < 0 or (max_host_bytes is not None and max_host_bytes < min_host_bytes):
        raise ConfigError(
            f"runtime_profiles: effective host memory range [{min_host_bytes}, {max_host_bytes}] is empty"
        )
    profiles = []
    last = len(PROFILE_RANGES_GIB) - 1
    for index, (lo, hi) in enumerate(PROFILE_RANGES_GIB):
        maximum = hi * GIB if index == last else hi * GIB - 1
        profiles.append(
            RuntimeProfile(
                id=f"{lo}gib-to-{hi}gib",
                eligibility=ProfileEligibility(
                    minimum_total_device_memory_bytes=lo * GIB,
                    maximum_total_device_memory_bytes=maximum,
                    minimum_effective_host_memory_bytes=min_host_bytes,
                    maximum_effective_host_memory_bytes=max_host_bytes,
                ),
                overlay=ProfileOverlay(
                    decoder_filename=filename,
                    session_options=SessionOptions(
                        config_entries=dict(offload_entries),
                        # The base options' gpu_mem_limit was sized for one device; each profile
                        # caps the arena at the smallest device memory it admits.
                        provider_options=(
                            ProviderOptions(
                                "cuda", {**CUDA_OFFLOAD_PROVIDER_OPTIONS, "gpu_mem_limit": str(lo * GIB)}
                            ),
                        ),
                    ),
                ),
            )
        )
    return tuple(profiles)


def _with_cuda_options(so: SessionOptions, extra: Mapping[str, str]) -> SessionOptions:
    providers = list(so.provider_options)
    for index, provider in enumerate(providers):
        if provider.name == "cuda":
            providers[index] = ProviderOptions("cuda", {**provider.options, **extra})
            break
    else:
        providers.insert(0, ProviderOptions("cuda", dict(extra)))
    return dataclasses.replace(so, provider_options=tuple(providers))


def check_prefill_chunk(cfg: Config, *, source: str) -> None:
    """``prefill.chunk`` must be positive and fit ``kv_capacity`` (checked before writing)."""
    graph = cfg.model.qwen38_graph
    if graph.prefill is not None and not 0 < graph.prefill.chunk <= graph.kv_capacity:
        raise ConfigError(
            f"{source}: model.qwen38_graph.prefill.chunk {graph.prefill.chunk} exceeds kv_capacity "
            f"{graph.kv_capacity}"
        )


def apply_offload_config(
    cfg: Config,
    offload_entries: Mapping[str, str],
    *,
    min_host_bytes: int,
    max_host_bytes: int | None = None,
    multidraft: Mapping[str, str] | None = None,
    expert_profile: str | None = None,
    source: str = "genai_config.json",
    decoder_file: str = PROFILE_TARGET,
) -> Config:
    """The converted config: offload entries, runtime profiles, multidraft graphs and expert profile.

    The decoder is model.onnx with the offload entries and CUDA graph + arena options; the four
    runtime profiles select ``decoder_file`` (``model_s4.onnx``, or the target itself when it
    has no MTP draft and so no verify graphs).

    Offload entries already present (an older conversion) are replaced, never merged.
    """
    check_prefill_chunk(cfg, source=source)
    model = cfg.model
    decoder = model.decoder
    so = decoder.session_options
    entries = {k: v for k, v in so.config_entries.items() if not k.startswith("session.moe.offload.")}
    entries.update(offload_entries)
    so = _with_cuda_options(
        dataclasses.replace(so, config_entries=dict(sorted(entries.items()))),
        CUDA_OFFLOAD_PROVIDER_OPTIONS,
    )
    graph = model.qwen38_graph
    head = graph.head_r2
    head = dataclasses.replace(
        head, session_options=_with_cuda_options(head.session_options, {"enable_cuda_graph": "1"})
    )
    graph = dataclasses.replace(
        graph,
        head_r2=head,
        multidraft=dict(multidraft) if multidraft is not None else dict(graph.multidraft),
        expert_profile=expert_profile if expert_profile is not None else graph.expert_profile,
    )
    model = dataclasses.replace(
        model,
        decoder=dataclasses.replace(decoder, session_options=so),
        qwen38_graph=graph,
    )
    profiles = build_runtime_profiles(
        offload_entries, min_host_bytes=min_host_bytes, max_host_bytes=max_host_bytes, filename=decoder_file
    )
    return dataclasses.replace(cfg, model=model, runtime_profiles=profiles)
