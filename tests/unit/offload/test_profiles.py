"""The session options ``q38 offload`` writes into a v12b config (``q38.offload.profiles``).

Invariant guarded: a session without a CUDA provider gains one carrying exactly the offload's
CUDA options (the decoder: CUDA-graph capture and ``kSameAsRequested``; the head: CUDA-graph
capture), so the converted package never runs a graph without them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from q38.offload.convert import convert_package
from q38.offload.options import OffloadOptions
from q38.offload.profiles import CUDA_OFFLOAD_PROVIDER_OPTIONS


def test_sessions_without_a_cuda_provider_gain_one_with_the_offload_options(
    tiny_cpu_package: Path, editable_copy: Callable[[Path], Path], tmp_path: Path
) -> None:
    """The decoder and the head of a source config without provider options get a CUDA provider
    holding the options the offload needs (not an empty one)."""
    src = editable_copy(tiny_cpu_package)
    doc = json.loads((src / "genai_config.json").read_text(encoding="utf-8"))
    del doc["model"]["decoder"]["session_options"]["provider_options"]
    del doc["model"]["qwen38_graph"]["fold"]["head_r2"]["session_options"]["provider_options"]
    (src / "genai_config.json").write_text(json.dumps(doc), encoding="utf-8")
    out = tmp_path / "out"
    convert_package(src, out, OffloadOptions(mode="auto"))
    model = json.loads((out / "genai_config.json").read_text(encoding="utf-8"))["model"]
    assert model["decoder"]["session_options"]["provider_options"] == [{"cuda": CUDA_OFFLOAD_PROVIDER_OPTIONS}]
    head = model["qwen38_graph"]["fold"]["head_r2"]["session_options"]
    assert head["provider_options"] == [{"cuda": {"enable_cuda_graph": "1"}}]
