"""A minimal hand-built package (graphs sharing one data file) for package-model tests."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

from q38.package import (
    Config,
    DecoderConfig,
    HeadGraph,
    Manifest,
    ModelConfig,
    PackageWriter,
    Placement,
    PoolEntry,
    PrefillConfig,
    ProviderOptions,
    Qwen38Graph,
    SessionOptions,
    WeightsPool,
)


def _external(name: str, location: str, offset: int, array: np.ndarray) -> TensorProto:
    t = TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(array.dtype), dims=array.shape)
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(array.nbytes))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t


def write_matmul_graph(path: Path, *, weight: TensorProto, in_name: str = "x", out_name: str = "y") -> None:
    n = weight.dims[0]
    graph = helper.make_graph(
        [helper.make_node("MatMul", [in_name, weight.name], [out_name], name="/mm/MatMul")],
        "g",
        [helper.make_tensor_value_info(in_name, TensorProto.FLOAT, [1, n])],
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, [1, weight.dims[1]])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    path.write_bytes(model.SerializeToString())


WEIGHT = (np.arange(16 * 16, dtype=np.float32).reshape(16, 16) / 7.0).astype(np.float32)
HEAD_WEIGHT = (np.ones((16, 16), dtype=np.float32) * 0.5).astype(np.float32)


def mini_config(**graph_overrides: object) -> Config:
    graph = Qwen38Graph(
        target="model.onnx",
        head_r2=HeadGraph(
            "head_r2.onnx",
            SessionOptions(provider_options=(ProviderOptions("cuda", {"enable_cuda_graph": "1"}),)),
        ),
        prefill=PrefillConfig("prefill.onnx", 64),
        kv_capacity=256,
        weights_pool="weights_pool.txt",
        variant="cpu",
    )
    graph = dataclasses.replace(graph, **graph_overrides)  # type: ignore[arg-type]
    decoder = DecoderConfig(
        filename="model.onnx", hidden_size=16, num_attention_heads=4, num_key_value_heads=2,
        head_size=4, num_hidden_layers=1,
        session_options=SessionOptions(log_id="q38", config_entries={"session.moe.offload.mode": "auto"}),
        inputs={"input_ids": "x"}, outputs={"logits": "y"},
    )
    return Config(model=ModelConfig(decoder=decoder, qwen38_graph=graph, vocab_size=16, context_length=256))


def build_mini_package(dest: Path) -> Path:
    """model.onnx and prefill.onnx share model.onnx.data; head_r2.onnx has its own data."""
    with PackageWriter(dest) as w:
        (w.path / "model.onnx.data").write_bytes(WEIGHT.tobytes())
        (w.path / "head_r2.onnx.data").write_bytes(HEAD_WEIGHT.tobytes())
        write_matmul_graph(w.path / "model.onnx", weight=_external("w", "model.onnx.data", 0, WEIGHT))
        write_matmul_graph(w.path / "prefill.onnx", weight=_external("w", "model.onnx.data", 0, WEIGHT))
        write_matmul_graph(w.path / "head_r2.onnx", weight=_external("w", "head_r2.onnx.data", 0, HEAD_WEIGHT))
        w.write_config(mini_config())
        w.write_pool(
            WeightsPool.from_entries(
                [
                    PoolEntry("w0000", "model.onnx.data", 0, WEIGHT.nbytes, "float", (16, 16), Placement.DEVICE, "target:w,prefill:w"),
                    PoolEntry("w0001", "head_r2.onnx.data", 0, HEAD_WEIGHT.nbytes, "float", (16, 16), Placement.DEVICE, "head:w"),
                ]
            )
        )
        w.write_manifest(Manifest(command="test"))
    return dest


def build_layered_mini_package(root: Path) -> Path:
    """The mini package as ``root/target``, with its head graph and data copied into ``root/head``."""
    (root / "head").mkdir(parents=True)
    target = build_mini_package(root / "target")
    for name in ("head_r2.onnx", "head_r2.onnx.data"):
        shutil.copy(target / name, root / "head" / name)
    return root


__all__ = ["HEAD_WEIGHT", "WEIGHT", "build_layered_mini_package", "build_mini_package", "mini_config", "write_matmul_graph"]
