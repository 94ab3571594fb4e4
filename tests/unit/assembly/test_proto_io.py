"""q38.assembly.proto_io.set_external: repointing a tensor at a new byte range.

Invariant guarded: the location, offset and length are replaced, a ``checksum`` of the old bytes
is dropped (it would no longer describe the range the tensor now names), and any other entry the
exporter wrote is kept, after the three placement entries.
"""

from __future__ import annotations

import onnx

from q38.assembly.proto_io import set_external


def _tensor(entries: list[tuple[str, str]]) -> onnx.TensorProto:
    t = onnx.TensorProto(name="w", data_type=onnx.TensorProto.FLOAT, dims=[4], data_location=onnx.TensorProto.EXTERNAL)
    for key, value in entries:
        e = t.external_data.add()
        e.key, e.value = key, value
    return t


def test_a_moved_tensor_loses_its_old_checksum_and_keeps_its_other_entries() -> None:
    t = _tensor([("location", "old.data"), ("checksum", "ab" * 20), ("offset", "0"), ("length", "16"), ("basepath", "x")])
    set_external(t, "model.onnx.data", 4096, 16)
    assert [(e.key, e.value) for e in t.external_data] == [
        ("location", "model.onnx.data"), ("offset", "4096"), ("length", "16"), ("basepath", "x")]


def test_a_length_left_unknown_is_not_written() -> None:
    t = _tensor([("location", "old.data"), ("offset", "8"), ("length", "16")])
    set_external(t, "pool.bin", 0, None)
    assert [(e.key, e.value) for e in t.external_data] == [("location", "pool.bin"), ("offset", "0")]
