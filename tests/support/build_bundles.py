"""Small source bundles (builders; fixtures in conftest.py) for ``q38 build`` tests, written with onnx protos (float32, ORT-runnable).

Layout of ``bundles`` (a dict of paths):
- target/model.onnx + model.onnx.data: W_lm, proj, w_norm, cos_cache, sin_cache, eps (last,
  written WITHOUT a length field: read to EOF); extras/ dir, extras_link -> extras (dir symlink),
  readme.link -> extras/readme.txt (file symlink);
- head/head_r2.onnx: W_lm in head/model.onnx.data (a HARD LINK of the target's data, same
  offset), proj in head_r2.onnx.data (same NAME as the target's proj, different bytes), a BF16
  norm weight inline in int32_data;
- prefill/prefill.onnx: W_lm in prefill.onnx.data at another offset (a byte COPY), bias.
- libs_a/libcustom_ops.so -> libcustom_ops.so.1 (relative symlink); libs_b/libcustom_ops.so.

"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper

from q38.package.io.elf import shared_object_header

LIB_A_BYTES = shared_object_header() + b"qsa custom ops v1"
"""The bytes of the bundles' qsa placeholder library (a shared-object header, then a note)."""

F = TensorProto.FLOAT
RNG = np.random.default_rng(38)
W_LM = RNG.standard_normal((64, 32)).astype(np.float32)
PROJ_T = RNG.standard_normal((64, 64)).astype(np.float32)
PROJ_H = RNG.standard_normal((64, 64)).astype(np.float32)
W_NORM = (1 + 0.1 * RNG.standard_normal(16)).astype(np.float32)
W_NORM_H = (1 + 0.1 * RNG.standard_normal(16)).astype(ml_dtypes.bfloat16)
BIAS = RNG.standard_normal(32).astype(np.float32)
EPS = np.array(1e-6, dtype=np.float32)
_pos = np.arange(32)[:, None] * (10000.0 ** (-np.arange(8) / 8))[None, :]
COS = np.cos(_pos).astype(np.float32)
SIN = np.sin(_pos).astype(np.float32)


def _ext(name: str, arr: np.ndarray, location: str, offset: int, *, length: bool = True) -> TensorProto:
    t = TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(arr.dtype), dims=arr.shape)
    t.data_location = TensorProto.EXTERNAL
    entries = [("location", location), ("offset", str(offset))]
    if length:
        entries.append(("length", str(arr.nbytes)))
    for k, v in entries:
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


def _const(name: str, values: list[int]) -> TensorProto:
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


def _norm_rotary(x: str, prefix: str, w: str, eps: str, rotary: bool) -> list[onnx.NodeProto]:
    p = prefix
    nodes = [
        helper.make_node("Reshape", [x, "shape4"], [f"{p}r"]),
        helper.make_node("Mul", [f"{p}r", f"{p}r"], [f"{p}sq"]),
        helper.make_node("ReduceMean", [f"{p}sq", "axes_last"], [f"{p}ms"], keepdims=1),
        helper.make_node("Add", [f"{p}ms", eps], [f"{p}ve"]),
        helper.make_node("Sqrt", [f"{p}ve"], [f"{p}rs"]),
        helper.make_node("Div", [f"{p}r", f"{p}rs"], [f"{p}n"]),
        helper.make_node("Mul", [f"{p}n", w], [f"{p}nw"]),
    ]
    if not rotary:
        return [*nodes, helper.make_node("Reshape", [f"{p}nw", "shape3"], [f"{p}out"])]
    return [
        *nodes,
        helper.make_node("Gather", ["cos_cache", "position_ids"], [f"{p}cg"]),
        helper.make_node("Unsqueeze", [f"{p}cg", "axes2"], [f"{p}c"]),
        helper.make_node("Gather", ["sin_cache", "position_ids"], [f"{p}sg"]),
        helper.make_node("Unsqueeze", [f"{p}sg", "axes2"], [f"{p}s"]),
        helper.make_node("Slice", [f"{p}nw", "s0", "s8", "axes_last"], [f"{p}x1"]),
        helper.make_node("Slice", [f"{p}nw", "s8", "s16", "axes_last"], [f"{p}x2"]),
        helper.make_node("Mul", [f"{p}x1", f"{p}c"], [f"{p}a"]),
        helper.make_node("Mul", [f"{p}x2", f"{p}s"], [f"{p}b"]),
        helper.make_node("Sub", [f"{p}a", f"{p}b"], [f"{p}o1"]),
        helper.make_node("Mul", [f"{p}x2", f"{p}c"], [f"{p}d"]),
        helper.make_node("Mul", [f"{p}x1", f"{p}s"], [f"{p}e"]),
        helper.make_node("Add", [f"{p}d", f"{p}e"], [f"{p}o2"]),
        helper.make_node("Concat", [f"{p}o1", f"{p}o2"], [f"{p}y"], axis=-1),
        helper.make_node("Reshape", [f"{p}y", "shape3"], [f"{p}out"]),
    ]


def _small_consts() -> list[TensorProto]:
    return [
        _const("shape4", [0, 0, 4, 16]), _const("shape3", [0, 0, 64]), _const("axes_last", [-1]),
        _const("axes2", [2]), _const("s0", [0]), _const("s8", [8]), _const("s16", [16]),
    ]


def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def _write_data(path: Path, parts: list[tuple[int, np.ndarray]]) -> None:
    with open(path, "wb") as f:
        for offset, arr in parts:
            f.seek(offset)
            f.write(arr.tobytes())


def _vi(name: str, shape: list[int], dtype: int = F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def make_bundles(root: Path) -> dict[str, Path]:
    t, h, p = root / "target", root / "head", root / "prefill"
    for d in (t, h, p):
        d.mkdir(parents=True)
    # target: offsets W_LM 0, PROJ_T 8192, W_NORM 24576, COS 24640, SIN 25664, EPS 26688 (to EOF)
    offs = {"W_lm": 0, "proj": 8192, "w_norm": 24576, "cos_cache": 24640, "sin_cache": 25664, "eps": 26688}
    arrs = {"W_lm": W_LM, "proj": PROJ_T, "w_norm": W_NORM, "cos_cache": COS, "sin_cache": SIN, "eps": EPS}
    _write_data(t / "model.onnx.data", [(offs[k], arrs[k]) for k in offs])
    inits = [_ext(k, arrs[k], "model.onnx.data", offs[k], length=(k != "eps")) for k in offs]
    nodes = [
        helper.make_node("MatMul", ["x", "proj"], ["xp"]),
        *_norm_rotary("xp", "/model/layers.3/attn/q_norm/", "w_norm", "eps", rotary=True),
        helper.make_node("Identity", ["/model/layers.3/attn/q_norm/out"], ["hidden_states"]),
        helper.make_node("MatMul", ["hidden_states", "W_lm"], ["logits"]),
        helper.make_node("Identity", ["past_key_values.3.key"], ["present.3.key"]),
    ]
    model = _model(
        nodes,
        [_vi("x", [1, 2, 64]), helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, 2]),
         _vi("past_key_values.3.key", [1, 2, 4, 16])],
        [_vi("logits", [1, 2, 32]), _vi("hidden_states", [1, 2, 64]), _vi("present.3.key", [1, 2, 4, 16])],
        inits + _small_consts(),
    )
    onnx.save(model, t / "model.onnx")
    (t / "extras").mkdir()
    (t / "extras" / "readme.txt").write_text("bundle extra\n")
    os.symlink("extras", t / "extras_link")
    os.symlink("extras/readme.txt", t / "readme.link")

    # head: W_lm through a hard link of the target's data; its own proj (same name, other bytes)
    os.link(t / "model.onnx.data", h / "model.onnx.data")
    _write_data(h / "head_r2.onnx.data", [(0, PROJ_H)])
    wnh = TensorProto(name="w_norm_h", data_type=TensorProto.BFLOAT16, dims=[16])
    wnh.int32_data.extend(W_NORM_H.view(np.uint16).astype(np.int32).tolist())  # typed field, no raw_data
    h_inits = [
        _ext("W_lm", W_LM, "model.onnx.data", 0),
        _ext("proj", PROJ_H, "head_r2.onnx.data", 0),
        wnh,
        helper.make_tensor("eps_h", F, [], [1e-5]),
        *_small_consts(),
    ]
    h_nodes = [
        helper.make_node("MatMul", ["hidden", "proj"], ["hp"]),
        helper.make_node("Cast", ["w_norm_h"], ["w_norm_hf"], to=F),
        *_norm_rotary("hp", "/mtp/0/attn/q_norm/", "w_norm_hf", "eps_h", rotary=False),
        helper.make_node("MatMul", ["/mtp/0/attn/q_norm/out", "W_lm"], ["logits"]),
    ]
    onnx.save(_model(h_nodes, [_vi("hidden", [1, 2, 64])], [_vi("logits", [1, 2, 32])], h_inits), h / "head_r2.onnx")

    # prefill: a byte copy of W_lm at another offset, and its own bias
    _write_data(p / "prefill.onnx.data", [(64, W_LM), (64 + W_LM.nbytes, BIAS)])
    p_inits = [_ext("W_lm", W_LM, "prefill.onnx.data", 64), _ext("bias", BIAS, "prefill.onnx.data", 64 + W_LM.nbytes)]
    p_nodes = [helper.make_node("MatMul", ["x", "W_lm"], ["m"]), helper.make_node("Add", ["m", "bias"], ["logits"])]
    onnx.save(_model(p_nodes, [_vi("x", [1, 2, 64])], [_vi("logits", [1, 2, 32])], p_inits), p / "prefill.onnx")

    la, lb = root / "libs_a", root / "libs_b"
    la.mkdir()
    lb.mkdir()
    (la / "libcustom_ops.so.1").write_bytes(LIB_A_BYTES)
    os.symlink("libcustom_ops.so.1", la / "libcustom_ops.so")
    (lb / "libcustom_ops.so").write_bytes(shared_object_header() + b"hc custom ops")
    return {"root": root, "target": t, "head": h, "prefill": p, "lib_a": la / "libcustom_ops.so", "lib_b": lb / "libcustom_ops.so"}


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file's bytes and every symlink's text under root (links not followed)."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                out[rel] = "link:" + os.readlink(path)
            elif path.is_file():
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                out[rel] = "dir"
    return out


