"""Step a decoder-like graph token by token with its state carried.

The feeds ``q38 profile`` builds from the graph's own inputs, and the present -> past mapping
from the config's names.

Inputs a step feeds: ``input_ids [B, S]``; ``attention_mask [B, past + S]``; ``position_ids``
``[B, S]`` or MRoPE ``[3, B, S]`` (positions ``past .. past + S - 1``); ``past_sequence_length``
(int32 ``[1]``); ``hidden_states`` when the caller gives it (the MTP graph); and every state
input, zeros of length 0 at the start, then the matching present output of the previous step.
Any other input is refused by name: nothing is guessed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from q38.errors import ProfileError
from q38.profile.taps import TappedGraph

__all__ = ["StateNames", "Stepper"]

_DTYPES: Final = {
    "tensor(float16)": np.float16, "tensor(float)": np.float32, "tensor(double)": np.float64,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_,
}  # fmt: skip
_SCALARS: Final = frozenset({"input_ids", "attention_mask", "position_ids", "past_sequence_length"})


def _template(text: str) -> re.Pattern[str]:
    head, _, tail = text.partition("%d")
    return re.compile(f"^{re.escape(head)}([0-9]+){re.escape(tail)}$")


@dataclass(frozen=True)
class StateNames:
    """present name -> past name, from the config's ``inputs`` / ``outputs`` name templates.

    The templates pair by key: ``past_key_names`` <-> ``present_key_names``, ...
    """

    pairs: tuple[tuple[str, str], ...]  # (present template, past template)

    @classmethod
    def from_sections(cls, inputs: Mapping[str, object], outputs: Mapping[str, object]) -> StateNames:
        """Pair each ``past_*`` template of ``inputs`` holding ``%d`` with its ``present_*`` one in ``outputs``.

        Keys that are not such templates, or have no present partner, are skipped.
        """
        pairs = []
        for key, past in inputs.items():
            if not (isinstance(past, str) and key.startswith("past_") and "%d" in past):
                continue
            present = outputs.get("present_" + key.removeprefix("past_"))
            if isinstance(present, str) and "%d" in present:
                pairs.append((present, past))
        return cls(tuple(pairs))

    def past_of(self, present: str) -> str | None:
        """The past input fed by output ``present`` (same layer index), or None when no template matches."""
        for out_t, in_t in self.pairs:
            m = _template(out_t).match(present)
            if m:
                return in_t.replace("%d", m.group(1))
        return None


@dataclass
class Stepper:
    """One graph stepped with its state; :meth:`reset` before each prompt."""

    graph: TappedGraph
    names: StateNames
    dims: Mapping[str, int]  # symbolic dim -> value for the empty state (kv_cache_dim, ...)
    state: dict[str, np.ndarray] = field(default_factory=dict)
    past: int = 0

    def __post_init__(self) -> None:
        self._inputs = {i.name: i for i in self.graph.session.get_inputs()}
        ids = self._inputs.get("input_ids")
        if ids is None or len(ids.shape) != 2:
            shape = None if ids is None else ids.shape
            raise ProfileError(f"{self.graph.where}: input_ids {shape or 'is missing'}: q38 profile feeds "
                               "input_ids [batch, sequence] (a packed or verify-row graph cannot be stepped)")  # fmt: skip
        if isinstance(ids.shape[1], int):
            raise ProfileError(f"{self.graph.where}: input_ids has a static sequence dim {ids.shape[1]} (a verify "
                               "graph of q38 offload): profile the package before offload")  # fmt: skip
        self._state_inputs = [n for n in self._inputs if n not in _SCALARS and n != "hidden_states"]
        self._present_of = {}
        for out in self.graph.session.get_outputs():
            past = self.names.past_of(out.name)
            if past is not None and past in self._inputs:
                self._present_of[past] = out.name
        for name in self._state_inputs:
            if name not in self._present_of:
                raise ProfileError(f"{self.graph.where}: input {name!r} is neither a known input nor a state the "
                                   "config's name templates pair with an output: q38 profile cannot feed it")  # fmt: skip
        self.reset()

    def reset(self) -> None:
        """Start a new prompt: no past tokens, every state input zeros of length 0 in its sequence dims."""
        self.past = 0
        self.state = {name: self._empty(name) for name in self._state_inputs}

    def _empty(self, name: str) -> np.ndarray:
        arg = self._inputs[name]
        shape = []
        for dim in arg.shape:
            if isinstance(dim, int):
                shape.append(dim)
            elif dim in self.dims:
                shape.append(self.dims[dim])
            elif "batch" in str(dim):
                shape.append(1)
            elif "sequence" in str(dim) or "past" in str(dim):
                shape.append(0)
            else:
                raise ProfileError(f"{self.graph.where}: state input {name!r} has dim {dim!r}: q38 profile "
                                   "does not know its size for an empty state")  # fmt: skip
        if arg.type not in _DTYPES:
            raise ProfileError(f"{self.graph.where}: state input {name!r} is {arg.type}: not a type q38 profile feeds")
        return np.zeros(shape, dtype=_DTYPES[arg.type])

    def feeds(self, ids: np.ndarray, hidden: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The inputs of the next step for ``ids`` (see the module docstring), state included.

        ``hidden`` is required by a graph with a ``hidden_states`` input (ProfileError without it).
        """
        rows = ids.shape[1]
        positions = np.arange(self.past, self.past + rows, dtype=np.int64)[None]
        out: dict[str, np.ndarray] = {"input_ids": ids.astype(np.int64)}
        if "attention_mask" in self._inputs:
            out["attention_mask"] = np.ones((1, self.past + rows), np.int64)
        if "position_ids" in self._inputs:
            rank = len(self._inputs["position_ids"].shape)
            out["position_ids"] = positions if rank == 2 else np.broadcast_to(positions, (3, 1, rows)).copy()
        if "past_sequence_length" in self._inputs:
            out["past_sequence_length"] = np.array([self.past], np.int32)
        if "hidden_states" in self._inputs:
            if hidden is None:
                raise ProfileError(f"{self.graph.where}: input 'hidden_states' needs the decoder's hidden states")
            out["hidden_states"] = hidden
        out.update(self.state)
        return out

    def step(self, ids: np.ndarray, hidden: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Run ``ids`` ([1, S]) after what was run since :meth:`reset`; carry the presents."""
        result = self.graph.run(self.feeds(ids, hidden))
        self.state = {past: result[present] for past, present in self._present_of.items()}
        self.past += ids.shape[1]
        return result
