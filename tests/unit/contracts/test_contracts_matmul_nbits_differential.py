"""MatMulNBits CPU kernel rules against a real onnxruntime (MNB-CPU-001 / MNB-CPU-002).

Invariants guarded:
- The constructor's refusals, in its order and with ORT's text: a negative K / N / bits /
  block_size (``narrowing_error``), bits outside {2, 4, 8}, on 1.32.0 8-bit weights with
  floating-point zero points (an initializer or a graph input alike), a block_size that is not a
  power of two >= 16 (1.31.1: not one of 16 .. 256).
- PrePack refuses an initializer B whose shape is not [N, ceil(K / block), ceil(block * bits / 8)];
  a B that is a graph input is not prepacked and the session is created.
- Whatever ORT accepts, the contract accepts (the int4 builder's form, K not a multiple of the
  block, accuracy levels, uint8 zero points for 8 bits).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh
from support.contracts_testkit import (
    MS,
    ORT_VERSION,
    _model,
    _vi,
    assert_agrees,
    graph_violations,
    ort_error,
)

pytestmark = pytest.mark.differential
_V132 = ORT_VERSION >= "1.32"


def _mnb(*, k: int = 64, n: int = 32, bits: int = 4, block: int = 32, b_shape: list[int] | None = None,
         zp: str | None = None, elem: int = TP.FLOAT, b_input: bool = False, **attrs: Any) -> onnx.ModelProto:  # fmt: skip
    """MatMulNBits(A [2, K], B, scales[, zero points]) named 'mnb'; ``zp``: 'u8', 'float' or 'float-input'."""
    blocks = -(-k // block) if block > 0 else 1
    shape = b_shape or [n, blocks, -(-(block * bits) // 8) if block > 0 else 1]
    scale_dtype = np.float32 if elem == TP.FLOAT else np.float16
    inits = [nh.from_array(np.ones(max(n, 1) * max(blocks, 1), scale_dtype), "S")]
    ins = [_vi("A", elem, [2, k])]
    if b_input:
        ins.append(_vi("B", TP.UINT8, shape))
    else:
        inits.append(nh.from_array(np.zeros(shape, np.uint8), "B"))
    names = ["A", "B", "S"]
    if zp == "u8":
        inits.append(nh.from_array(np.zeros(n * blocks, np.uint8), "ZP"))
    elif zp == "float":
        inits.append(nh.from_array(np.zeros(n * blocks, scale_dtype), "ZP"))
    elif zp == "float-input":
        ins.append(_vi("ZP", elem, [n * blocks]))
    if zp is not None:
        names.append("ZP")
    node = oh.make_node("MatMulNBits", names, ["Y"], name="mnb", domain=MS, K=k, N=n, bits=bits, block_size=block, **attrs)
    return _model([node], ins, [_vi("Y", elem, None)], inits)


_CTOR = "MNB-CPU-001"
_PACK = "MNB-CPU-002"
# (case, model, rule on 1.32.0, rule on 1.31.1): None = ORT creates the session.
CASES: list[tuple[str, Callable[[], onnx.ModelProto], str | None, str | None]] = [
    ("int4 block 32 (the builder's form)", lambda: _mnb(), None, None),
    ("int2", lambda: _mnb(bits=2), None, None),
    ("int8", lambda: _mnb(bits=8), None, None),
    ("fp16 int4 block 128", lambda: _mnb(elem=TP.FLOAT16, block=128), None, None),
    ("K not a multiple of the block", lambda: _mnb(k=60), None, None),
    ("accuracy_level 4", lambda: _mnb(accuracy_level=4), None, None),
    ("bits 3", lambda: _mnb(bits=3), _CTOR, _CTOR),
    ("bits 1", lambda: _mnb(bits=1), _CTOR, _CTOR),
    ("bits 16", lambda: _mnb(bits=16), _CTOR, _CTOR),
    ("bits 3 and block 8: bits first", lambda: _mnb(bits=3, block=8), _CTOR, _CTOR),
    ("block 8", lambda: _mnb(block=8), _CTOR, _CTOR),
    ("block 0", lambda: _mnb(block=0, b_shape=[32, 2, 16]), _CTOR, _CTOR),
    ("block 24", lambda: _mnb(block=24), _CTOR, _CTOR),
    ("block 48", lambda: _mnb(block=48), _CTOR, _CTOR),
    ("block 512 (1.32.0: any power of two)", lambda: _mnb(block=512, k=1024), None, _CTOR),
    ("block 1024", lambda: _mnb(block=1024, k=1024), None, _CTOR),
    ("2 bits, block 512 (1.32.0: at most 256 with 2 bits)", lambda: _mnb(bits=2, block=512, k=1024), _CTOR, _CTOR),
    ("2 bits, block 256", lambda: _mnb(bits=2, block=256, k=256), None, None),
    ("K -1", lambda: _mnb(k=-1, b_shape=[32, 2, 16]), _CTOR, _CTOR),
    ("N -1", lambda: _mnb(n=-1, b_shape=[32, 2, 16]), _CTOR, _CTOR),
    ("bits -4", lambda: _mnb(bits=-4, b_shape=[32, 2, 16]), _CTOR, _CTOR),
    ("block -32 with bits 3: narrowing first", lambda: _mnb(bits=3, block=-32, b_shape=[32, 2, 16]), _CTOR, _CTOR),
    ("8 bits, float zero points", lambda: _mnb(bits=8, zp="float"), _CTOR, None),
    ("8 bits, float16 zero points", lambda: _mnb(bits=8, zp="float", elem=TP.FLOAT16), _CTOR, None),
    ("8 bits, float zero points as a graph input", lambda: _mnb(bits=8, zp="float-input"), _CTOR, None),
    ("8 bits, float zero points and block 8: zero points first", lambda: _mnb(bits=8, zp="float", block=8), _CTOR, _CTOR),
    ("8 bits, uint8 zero points", lambda: _mnb(bits=8, zp="u8"), None, None),
    ("4 bits, float zero points", lambda: _mnb(bits=4, zp="float"), None, None),
    ("N 32, B rows 33", lambda: _mnb(b_shape=[33, 2, 16]), _PACK, _PACK),
    ("K 64, B blocks 3", lambda: _mnb(b_shape=[32, 3, 16]), _PACK, _PACK),
    ("B blob 15", lambda: _mnb(b_shape=[32, 2, 15]), _PACK, _PACK),
    ("B rank 2", lambda: _mnb(b_shape=[32, 32]), _PACK, _PACK),
    ("N 0", lambda: _mnb(n=0, b_shape=[32, 2, 16]), _PACK, _PACK),
    ("B a graph input of the wrong shape (not prepacked)", lambda: _mnb(b_shape=[33, 2, 16], b_input=True), None, None),
    ("bits 3 with a wrong B: constructor first", lambda: _mnb(bits=3, b_shape=[33, 2, 16]), _CTOR, _CTOR),
]  # fmt: skip


@pytest.mark.parametrize(("case", "build", "on_132", "on_131"), CASES, ids=[c[0] for c in CASES])
def test_matmul_nbits_kernel_rules_match_onnxruntime(case: str, build: Callable[[], onnx.ModelProto],
                                                     on_132: str | None, on_131: str | None) -> None:  # fmt: skip
    model = build()
    expected = on_132 if _V132 else on_131
    violations = graph_violations(model)
    errors = [v for v in violations if v.severity == "error"]
    assert sorted({v.rule_id for v in errors}) == ([] if expected is None else [expected]), errors
    assert_agrees(violations, ort_error(model), context=case)


def test_a_cuda_only_graph_gets_no_cpu_matmul_nbits_verdict() -> None:
    """The rules are the CPU kernel's: a graph judged for a CUDA session only is not refused by them."""
    found = graph_violations(_mnb(bits=3), eps=frozenset({"cuda"}))
    assert [v for v in found if v.rule_id.startswith("MNB-")] == []
