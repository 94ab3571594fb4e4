"""CUDA Graph decode only where ORT allows it: fixed shapes, fixed addresses, inputs updated in place.

ORT's CUDA Graph (``enable_cuda_graph=1``; docs "CUDA Execution Provider -> Using CUDA Graphs")
captures the first runs and then replays the same kernels on the same device addresses:

* every node of the graph must be on the CUDA EP (a session with nodes on the CPU EP refuses
  capture at creation);
* input and output shapes must not change between runs, and inputs and outputs are bound once
  through IOBinding to OrtValues that stay where they are; new input data goes into the bound
  buffers with ``OrtValue.update_inplace``;
* several graphs of one session are told apart by the run option ``gpu_graph_id`` (-1: no capture).

A decode whose KV cache grows by concatenation (the synthetic packages' ``past_*`` inputs have a
symbolic past length) changes the shape and the address of its state every step: replaying such a
capture reads freed arena memory and can leave a sticky CUDA error that fails every later test. So
:func:`plan` refuses it ("not attempted", with the reason) and :class:`FixedStateDecode` -- the only
loop that may run a CUDA Graph session -- checks before every replay that no bound buffer moved or
changed shape.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np

GRAPH_ID_KEY: Final = "gpu_graph_id"
BATCH_DIMS: Final = frozenset({"B", "batch", "batch_size"})


class GraphRefused(RuntimeError):
    """A decode loop that ORT's CUDA Graph must not capture; the message says why."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """Whether a CUDA Graph decode may be attempted for a session, and why (not)."""

    ok: bool
    reason: str

    def record(self) -> dict[str, str]:
        return {"status": "eligible" if self.ok else "not attempted", "reason": self.reason}


def growing_state(inputs: Sequence[Any]) -> list[str]:
    """The ``past*`` inputs whose shape has a symbolic dim other than the batch: state that grows."""
    out = []
    for meta in inputs:
        if not str(meta.name).startswith("past"):
            continue
        dims = [d for d in meta.shape if not isinstance(d, int) and d not in BATCH_DIMS]
        if dims:
            out.append(f"{meta.name}{list(meta.shape)}")
    return out


def plan(sess: Any, cpu_nodes: Sequence[str] = ()) -> Plan:
    """May a CUDA Graph decode be captured for ``sess``? Not when a past input grows, nor when ORT
    placed nodes on the CPU EP (``cpu_nodes``, from the recorded assignment)."""
    grows = growing_state(sess.get_inputs())
    if grows:
        shown = ", ".join(grows[:3]) + (f" and {len(grows) - 3} more" if len(grows) > 3 else "")
        return Plan(False, f"{len(grows)} state input(s) grow with the sequence ({shown}): the KV cache is "
                           "concatenated every step, so shapes and addresses move; ORT's CUDA Graph replays "
                           "fixed shapes at fixed addresses (needs a preallocated, buffer-shared cache)")
    if cpu_nodes:
        return Plan(False, f"{len(cpu_nodes)} node(s) on the CPU EP ({', '.join(cpu_nodes[:3])}): ORT captures a "
                           "CUDA Graph only when every node runs on the CUDA EP")
    return Plan(True, "fixed-shape state: captured with gpu_graph_id, inputs updated in place")


class FixedStateDecode:
    """A decode loop a CUDA Graph may capture: every input and output bound once to a preallocated
    OrtValue; each ``past*`` input shares its buffer with its ``present*`` output (updated in place
    by the model); the token and position go in with ``update_inplace``; run option
    ``gpu_graph_id``. Raises :class:`GraphRefused` when the session's state grows, or when a bound
    buffer would move or change shape between steps (never a replay over moving buffers)."""

    def __init__(self, ort: Any, sess: Any, *, device: str, feeds: Mapping[str, np.ndarray],
                 present_of: Mapping[str, str], graph_id: int = 1, cpu_nodes: Sequence[str] = ()) -> None:
        verdict = plan(sess, cpu_nodes)
        if not verdict.ok:
            raise GraphRefused(verdict.reason)
        self.sess = sess
        self.binding = sess.io_binding()
        self.values: dict[str, Any] = {}
        for name, array in feeds.items():
            value = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array), device, 0)
            self.values[name] = value
            self.binding.bind_ortvalue_input(name, value)
        shared = {present_of[p]: p for p in feeds if p.startswith("past")}
        for meta in sess.get_outputs():
            if meta.name in shared:  # the model writes the new state into the past buffer
                self.binding.bind_ortvalue_output(meta.name, self.values[shared[meta.name]])
                continue
            shape = [d if isinstance(d, int) else 1 for d in meta.shape]
            dtype = _NP.get(meta.type, np.float32)
            value = ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, device, 0)
            self.values[meta.name] = value
            self.binding.bind_ortvalue_output(meta.name, value)
        self.layout = self._layout()
        self.run_options = ort.RunOptions()
        self.run_options.add_run_config_entry(GRAPH_ID_KEY, str(graph_id))

    def _layout(self) -> dict[str, tuple[int, tuple[int, ...]]]:
        return {name: (int(v.data_ptr()), tuple(v.shape())) for name, v in self.values.items()}

    def step(self, updates: Mapping[str, np.ndarray]) -> Any:
        """One replay: ``updates`` (token, position, ...) copied into their bound buffers in place."""
        for name, array in updates.items():
            value = self.values[name]
            if tuple(array.shape) != tuple(value.shape()):
                raise GraphRefused(f"{name}: shape {tuple(array.shape)} differs from the captured "
                                   f"{tuple(value.shape())}; a CUDA Graph replays fixed shapes")
            value.update_inplace(np.ascontiguousarray(array))
        if self._layout() != self.layout:
            raise GraphRefused("a bound buffer moved or changed shape since the capture")
        self.sess.run_with_iobinding(self.binding, self.run_options)
        return self.values


_NP: Final = {"tensor(float16)": np.float16, "tensor(float)": np.float32, "tensor(int64)": np.int64,
              "tensor(int32)": np.int32, "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}
