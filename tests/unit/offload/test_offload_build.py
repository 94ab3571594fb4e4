"""``q38 build --offload-profiles``'s hook (:func:`q38.offload.build.offload_profiles_config`).

Invariants guarded:
- every runtime profile's minimum effective host memory is the external bytes the s4 graph
  references, each byte range counted once however many tensors share it.
"""

from __future__ import annotations

from pathlib import Path

import onnx_ir as ir

from q38.offload.build import offload_profiles_config
from q38.offload.options import OffloadOptions
from q38.package import open_package


def _external(name: str, offset: int, length: int) -> ir.Value:
    """An initializer whose bytes are ``length`` bytes at ``offset`` of ``model.onnx.data``."""
    tensor = ir.ExternalTensor("model.onnx.data", offset, length, ir.DataType.UINT8, shape=ir.Shape([length]),
                               name=name, base_dir="")
    return ir.Value(name=name, shape=ir.Shape([length]), type=ir.TensorType(ir.DataType.UINT8), const_value=tensor)


def test_profiles_require_the_host_memory_of_the_external_bytes_s4_references(tiny_cpu_package: Path) -> None:
    """An offload package keeps all referenced external bytes on the host: each profile's minimum effective
    host memory is their total (1024 + 512), a range shared by two tensors counted once."""
    inits = [_external("a", 0, 1024), _external("a_alias", 0, 1024), _external("b", 4096, 512)]
    s4 = ir.Model(ir.Graph([], [], nodes=[], initializers=inits, name="s4"), ir_version=10)
    out = offload_profiles_config(open_package(tiny_cpu_package).config, s4, OffloadOptions(mode="auto"))
    assert [p.eligibility.minimum_effective_host_memory_bytes for p in out.runtime_profiles] == [1536] * 4
