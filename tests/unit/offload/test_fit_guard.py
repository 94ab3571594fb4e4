"""``q38 offload`` refuses runtime profiles that cannot fit their tier, before writing (issue 29).

Invariants guarded:
- a context long enough that the decoder state overflows some of the four 20-34 GiB profiles is an
  OffloadError naming the first unfit profile (PKG-FIT-001, its context) and counting the others;
- nothing is written (no OUT, no staging directory).

The tiny package's two GQA layers hold 256 bytes of KV per token: ``k << 22`` tokens are ``k`` GiB
of state, over the 20 GiB profile for k = 22, over 20 and 24 GiB for 26, over 20, 24, 28 GiB for 30.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from q38.errors import OffloadError
from q38.offload.convert import convert_package
from q38.offload.options import OffloadOptions


def _with_context(src: Path, tokens: int) -> Path:
    """``src`` with its context length and KV capacity set to ``tokens`` (its state grows with them)."""
    path = src / "genai_config.json"
    doc = json.loads(path.read_text())
    doc["model"]["context_length"] = tokens
    doc["model"]["qwen38_graph"]["kv_capacity"] = tokens
    path.write_text(json.dumps(doc))
    return src

@pytest.mark.parametrize(("gib", "more"), [(22, ""), (26, " (and 1 more)"), (30, " (and 2 more)")])
def test_unfit_profiles_are_refused_naming_the_first_and_counting_the_rest(
    gib: int, more: str, tiny_cpu_package: Path, editable_copy: Callable[[Path], Path], tmp_path: Path
) -> None:
    """A conversion whose planned profiles overflow their device budget is refused in one message: the
    first violation in full, then how many more profiles are unfit (none said for a single one)."""
    tokens = gib << 22
    src = _with_context(editable_copy(tiny_cpu_package), tokens)
    out = tmp_path / "out"
    with pytest.raises(OffloadError) as info:
        convert_package(src, out, OffloadOptions(target_resident_slots=2))
    message = str(info.value)
    assert message.startswith(f"PKG-FIT-001: runtime_profiles '20gib-to-24gib' at context {tokens}: device bytes ")
    assert "exceed its budget 21474836480 bytes (20.00 GiB)" in message
    assert message.endswith(f"tokens{more}; nothing written")
    assert message.count(" more)") == (1 if more else 0)
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")], "staging left behind"


def test_dense_weights_the_planned_pool_host_maps_do_not_count_against_the_device_budget(
    tiny_cpu_package: Path, editable_copy: Callable[[Path], Path], tmp_path: Path
) -> None:
    """The fit check reads the planned pool, not the source's: its host_mapped embedding, lm_head and
    hc_gate (133120 bytes, all ``device`` in the source pool) leave room for 520 more tokens of state, so
    a context that fits the 20 GiB profile only with them off the device converts."""
    tokens = 83_880_133  # 20 GiB profile: 65624 bytes spare with them host-mapped, 67496 over with them on device
    src = _with_context(editable_copy(tiny_cpu_package), tokens)
    out = tmp_path / "out"
    convert_package(src, out, OffloadOptions(target_resident_slots=2))
    written = json.loads((out / "genai_config.json").read_text())
    assert written["runtime_profiles"][0]["id"] == "20gib-to-24gib"
    pool = [line.split() for line in (out / "weights_pool.txt").read_text().splitlines() if not line.startswith("#")]
    dense = {row[7].split(",")[0]: row[6] for row in pool if "embed_tokens" in row[7] or "lm_head" in row[7]}
    assert dense == {"target:lm_head.weight": "host_mapped", "target:model.embed_tokens.weight": "host_mapped"}
