"""Layered and folded packages: sharing, pools, config, QSA constants, ORT loading.

Invariants:
- folded: one copy of each shared tensor; head/prefill references point into model.onnx.data
  (by inode identity for the hard-linked head file, by content for the prefill copy);
- same-name but different-bytes weights (``proj``) stay distinct (negative control);
- sharing survives --copy and the EXDEV fallback (/dev/shm, a tmpfs);
- layered: OUT/target and OUT/head, each with its own config, pool and manifest;
- QSA constants are read from the graphs: external eps without a length field, BF16 in int32_data;
- every graph of the cpu package loads and runs in an onnxruntime CPU session.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from support.build_bundles import EPS, W_NORM_H
from support.filesystems import reflink_works

from q38.assembly import BuildRequest, LinkPolicy, build_package
from q38.package.v12b.config import read_config


def _refs(path: Path) -> dict[str, dict[str, str]]:
    m = onnx.load(os.fspath(path), load_external_data=False)
    return {t.name: {e.key: e.value for e in t.external_data} for t in m.graph.initializer if t.external_data}


def _build(b, out, **kw):
    return build_package(BuildRequest(out=out, target=b["target"], head=b["head"], prefill=b["prefill"], **kw))


@pytest.mark.parametrize("link", [LinkPolicy.AUTO, LinkPolicy.COPY])
def test_folded_shares_weights_by_identity_and_content(bundles, tmp_path, link):
    pkg = tmp_path / "pkg"
    _build(bundles, pkg, link=link)
    head, prefill = _refs(pkg / "head_r2.onnx"), _refs(pkg / "prefill.onnx")
    assert head["W_lm"] == {"location": "model.onnx.data", "offset": "0", "length": "8192"}
    assert prefill["W_lm"] == {"location": "model.onnx.data", "offset": "0", "length": "8192"}
    # negative control: same name, different bytes, stays in the head's own file
    assert head["proj"]["location"] == "head_r2.onnx.data"
    pool = (pkg / "weights_pool.txt").read_text().splitlines()
    assert pool[2:] == ["w0000 model.onnx.data 0 8192 float 64x32 device target:W_lm,head:W_lm,prefill:W_lm"]
    assert not (pkg / "head_r2.model.onnx.data").exists()
    assert sorted(p.name for p in pkg.glob("*.data")) == ["head_r2.onnx.data", "model.onnx.data", "prefill.onnx.data"]
    manifest = json.loads((pkg / "package_manifest.json").read_text())
    # auto: a clone where the filesystem shares blocks (XFS, btrfs), else a copy (ext4) - never a link
    expect = "reflink" if link is LinkPolicy.AUTO and reflink_works(bundles["target"], tmp_path) else "copy"
    rec = manifest["files"]["model.onnx.data"]
    assert rec["link_mode"] == expect
    st = os.stat(pkg / "model.onnx.data")
    assert st.st_nlink == 1 and not os.path.samefile(pkg / "model.onnx.data", bundles["target"] / "model.onnx.data")
    assert rec["identity"] == {"st_dev": st.st_dev, "st_ino": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    data = (bundles["target"] / "model.onnx.data").read_bytes()
    # without --digest neither a copy nor a clone is hashed: the identity records it
    assert "sha256" not in rec and (pkg / "model.onnx.data").read_bytes() == data


def test_sharing_survives_the_exdev_fallback_onto_tmpfs(bundles):
    if os.stat("/dev/shm").st_dev == os.stat(bundles["root"]).st_dev:
        pytest.skip("/dev/shm is on the same filesystem as the sources here")
    tmp = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        pkg = tmp / "pkg"
        _build(bundles, pkg, link=LinkPolicy.AUTO)
        manifest = json.loads((pkg / "package_manifest.json").read_text())
        modes = {v["link_mode"] for v in manifest["files"].values()}
        assert modes == {"copy", "symlink", "write"}  # every link attempt hit EXDEV
        assert _refs(pkg / "head_r2.onnx")["W_lm"]["location"] == "model.onnx.data"
        assert len((pkg / "weights_pool.txt").read_text().splitlines()) == 3
    finally:
        shutil.rmtree(tmp)


def test_folded_graphs_load_and_run_in_onnxruntime_cpu(bundles, tmp_path):
    pkg = tmp_path / "pkg"
    _build(bundles, pkg, link=LinkPolicy.COPY)
    x = np.random.default_rng(0).standard_normal((1, 2, 64)).astype(np.float32)
    feeds = {
        "model.onnx": {"x": x, "position_ids": np.array([[0, 1]]), "past_key_values.3.key": np.zeros((1, 2, 4, 16), np.float32)},
        "head_r2.onnx": {"hidden": x},
        "prefill.onnx": {"x": x},
    }
    for name, feed in feeds.items():
        sess = ort.InferenceSession(os.fspath(pkg / name), providers=["CPUExecutionProvider"])
        assert sess.run(None, feed)[0].shape == (1, 2, 32)


def test_layered_writes_two_packages_with_their_own_files(bundles, tmp_path):
    out = tmp_path / "out"
    res = _build(bundles, out, layout="layered")
    assert res.packages == [out / "target", out / "head"]
    for sub in ("target", "head"):
        for name in ("genai_config.json", "weights_pool.txt", "package_manifest.json"):
            assert (out / sub / name).is_file()
    assert (out / "target" / "prefill.onnx").is_file()
    assert (out / "head" / "model.onnx.data").is_file()  # the head's references stay valid
    assert _refs(out / "head" / "head_r2.onnx")["W_lm"]["location"] == "model.onnx.data"
    head_pool = (out / "head" / "weights_pool.txt").read_text().splitlines()
    assert head_pool[2:] == ["w0000 model.onnx.data 0 8192 float 64x32 device head:W_lm,target:W_lm"]
    assert read_config(out / "head" / "genai_config.json").model.decoder.filename == "head_r2.onnx"


def test_qsa_constants_are_read_from_the_packaged_graphs(bundles, tmp_path):
    pkg = tmp_path / "pkg"
    _build(bundles, pkg)
    qsa = json.loads((pkg / "package_manifest.json").read_text())["extra"]["qsa_constants"]
    # eps is external data WITHOUT a length field (read to EOF)
    assert qsa["target"]["epsilon"] == [float(EPS)]
    assert qsa["target"]["rotary_dim"] == [16] and qsa["target"]["rotary_positions"] == [32]
    assert {v["kind"] for v in qsa["target"]["rotary_caches"].values()} == {"cos", "sin"}
    # BF16 norm weight stored inline in int32_data
    w = qsa["head"]["norm_weights"]["w_norm_h"]
    assert w["dtype"] == "bfloat16"
    assert w["sha256"] == hashlib.sha256(W_NORM_H.astype(ml_dtypes.bfloat16).tobytes()).hexdigest()
    assert qsa["head"]["epsilon"] == [float(np.float32(1e-5))]


def test_cuda_provider_options_are_decimal_strings(bundles, tmp_path):
    pkg = tmp_path / "pkg"
    _build(bundles, pkg, provider="cuda", cuda_options=("gpu_mem_limit=0x600000000", "enable_cuda_graph=true", "device_id=0"),
           libs=(("qsa", os.fspath(bundles["lib_a"])),))
    cfg = json.loads((pkg / "genai_config.json").read_text())
    so = cfg["model"]["decoder"]["session_options"]
    assert so["provider_options"] == [{"cuda": {"device_id": "0", "enable_cuda_graph": "1", "gpu_mem_limit": "25769803776"}}]
    assert so["custom_ops_library"] == "libs/libcustom_ops.so"
    assert cfg["model"]["qwen38_graph"]["libraries"] == {"qsa": "libs/libcustom_ops.so"}
    assert cfg["model"]["qwen38_graph"]["fold"]["head_r2"]["session_options"] == {  # always: the CUDA-graph defaults
        "provider_options": [{"cuda": {"enable_cuda_graph": "1"}}]
    }
