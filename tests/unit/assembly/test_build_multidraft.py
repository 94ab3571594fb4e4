"""`q38 build --multidraft / --offload-profiles`: the flat builder emits what `q38 offload` does.

Invariants: --multidraft adds model_s2/s3/s4.onnx and names them in the config, leaving
model.onnx the plain target; --offload-profiles also makes model.onnx a written copy of
model_s4.onnx, clears router_weights in every graph that runs under the offload options, adds
the four runtime profiles, and the package passes `q38 check`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import onnx
import pytest

from q38.cli import main
from q38.package import open_package


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _build(bundles: Path, out: Path, *flags: str) -> Path:
    args = ["build", str(out), "--target", str(bundles / "target"), "--head", str(bundles / "head"),
            "--prefill", str(bundles / "prefill"), *flags]
    assert main(args) == 0
    return out


def _router_inputs(path: Path) -> list[str]:
    model = onnx.load(str(path), load_external_data=False)
    return [n.input[14] for n in model.graph.node if n.op_type == "QMoE" and len(n.input) > 14 and n.input[14]]


def test_multidraft_adds_the_verify_graphs_and_keeps_the_target(tiny_bundles: Path, tmp_path: Path) -> None:
    plain = _build(tiny_bundles, tmp_path / "plain")
    multi = _build(tiny_bundles, tmp_path / "multi", "--multidraft")
    package = open_package(multi)
    assert package.config.model.qwen38_graph.multidraft == {"s2": "model_s2.onnx", "s3": "model_s3.onnx", "s4": "model_s4.onnx"}
    assert package.roles() == ["target", "head", "prefill", "s2", "s3", "s4"]
    assert _sha(multi / "model.onnx") == _sha(plain / "model.onnx")
    assert package.config.runtime_profiles == ()
    assert main(["check", str(multi)]) == 0


def test_offload_profiles_match_what_q38_offload_emits(tiny_bundles: Path, tmp_path: Path) -> None:
    out = _build(tiny_bundles, tmp_path / "prof", "--offload-profiles")
    package = open_package(out)
    assert len(package.config.runtime_profiles) == 4
    assert {p.overlay.decoder_filename for p in package.config.runtime_profiles} == {"model_s4.onnx"}
    for profile in package.config.runtime_profiles:  # each caps the CUDA arena at its own minimum
        assert profile.overlay.session_options is not None
        (cuda,) = profile.overlay.session_options.provider_options
        assert cuda.options["gpu_mem_limit"] == str(profile.eligibility.minimum_total_device_memory_bytes)
        assert cuda.options["arena_extend_strategy"] == "kSameAsRequested"
    assert (out / "model.onnx").read_bytes() == (out / "model_s4.onnx").read_bytes()
    assert (out / "model.onnx").stat().st_nlink == 1
    entries = package.config.model.decoder.session_options.config_entries
    assert entries["session.moe.offload.mode"] == "required"
    for name in ("model.onnx", "prefill.onnx", "model_s2.onnx", "model_s3.onnx", "model_s4.onnx"):
        assert _router_inputs(out / name) == [], name
    assert main(["check", str(out), "--ort"]) == 0


@pytest.mark.parametrize("flag", ["--multidraft", "--offload-profiles"])
def test_sources_are_untouched(tiny_bundles: Path, tmp_path: Path, flag: str) -> None:
    before = {p: _sha(p) for p in tiny_bundles.rglob("*") if p.is_file() and not p.is_symlink()}
    _build(tiny_bundles, tmp_path / "o", flag)
    assert {p: _sha(p) for p in before} == before


@pytest.mark.parametrize("flag", ["--multidraft", "--offload-profiles"])
def test_hardlinked_build_never_writes_through_to_the_source(tiny_bundles: Path, tmp_path: Path, flag: str) -> None:
    """--link hardlink shares the sources' inodes; rewriting model.onnx must replace the link, not write through it.

    The source tree is copied first (the session fixture is read-only); every source file's bytes
    and inode are recorded, and after the build each is the same file with the same bytes, and no
    file of the output that the build rewrote (--offload-profiles' model.onnx, a copy of model_s4)
    shares an inode with a source; with --multidraft model.onnx is the plain target, linked.
    """
    import shutil

    src = tmp_path / "src"
    shutil.copytree(tiny_bundles, src, symlinks=True)
    files = [p for p in src.rglob("*") if p.is_file() and not p.is_symlink()]
    before = {p: (p.stat().st_ino, _sha(p)) for p in files}
    out = _build(src, tmp_path / "o", flag, "--link", "hardlink")
    assert {p: (p.stat().st_ino, _sha(p)) for p in files} == before
    source_inodes = {ino for ino, _ in before.values()}
    rewritten = flag == "--offload-profiles"
    assert ((out / "model.onnx").stat().st_ino in source_inodes) is not rewritten
    assert any(p.stat().st_ino in source_inodes for p in out.rglob("*") if p.is_file()), "nothing was hard-linked"
