"""The one reader of a ``session_options`` block, in the semantics GenAI gives it when it makes ORT sessions.

Both surfaces' configs, the graph listing and ``q38 check`` read session options here, so they
agree on what ORT receives:

* the typed options GenAI sets on ``OrtSessionOptions`` (``log_id``, the thread counts, ...: the
  keys of :data:`q38.package.genai.schema.SESSION_OPTIONS`);
* ``provider_options``: one object per provider, merged by name in config order (GenAI's
  ``SetProviderOption`` keeps one entry per provider), string options only;
* every other key is GenAI's catch-all: a string value becomes a session config entry
  (``SessionOptions.add_session_config_entry``), and so do the strings of a ``config_entries``
  object. A non-string there is refused by GenAI; the config rules name it, this reader skips it.

The reader is tolerant (a non-object block is empty, a malformed provider entry is skipped): the
strict parsers validate first, and ``q38 check`` must list the graphs of a broken config too.
Other keys are kept as written (:attr:`SessionBlock.config_entries`), so an edited config writes
back what it read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from q38.package import config_schema as gs

__all__ = ["TYPED_KEYS", "Provider", "SessionBlock", "provider_names", "read_session_options", "session_entries", "session_options_document"]

# The typed options GenAI reads from a session_options block (the rest are config entries).
TYPED_KEYS: Final = tuple(k for k in gs.SESSION_OPTIONS.fields if k != "provider_options")

_PROVIDER_NAMES: Final = {
    "cpu": "CPU", "cuda": "cuda", "qnn": "QNN", "webgpu": "WebGPU", "dml": "DML", "openvino": "OpenVINO",
    "vitisai": "VitisAI", "ryzenai": "RyzenAI", "nvtensorrtrtx": "NvTensorRtRtx", "amdgpu": "AMDGPU",
}  # fmt: skip


@dataclass(frozen=True)
class Provider:
    """One execution provider of ``provider_options``; its options are strings, as GenAI 0.18.0 requires."""

    name: str
    options: dict[str, str] = field(default_factory=dict)
    device_filtering_options: dict[str, Any] = field(default_factory=dict)

    @property
    def canonical(self) -> str:
        """GenAI's ``NormalizeProviderName``: ``cpu`` -> ``CPU``, ``CUDAExecutionProvider`` -> ``cuda``."""
        low = self.name.lower().removesuffix("executionprovider") or self.name.lower()
        return _PROVIDER_NAMES.get(low, self.name)


@dataclass(frozen=True)
class SessionBlock:
    """A parsed ``session_options`` block: typed options, every other key as written, providers."""

    typed: dict[str, Any] = field(default_factory=dict)
    config_entries: dict[str, Any] = field(default_factory=dict)
    providers: tuple[Provider, ...] = ()

    @property
    def provider_names(self) -> tuple[str, ...]:
        """Canonical provider names in config order (empty: the CPU provider)."""
        return tuple(p.canonical for p in self.providers)

    @property
    def custom_ops_library(self) -> str | None:
        """The ``custom_ops_library`` GenAI registers before it makes the session, when it is a string."""
        lib = self.typed.get("custom_ops_library")
        return lib if isinstance(lib, str) else None

    @property
    def session_entries(self) -> dict[str, str]:
        """The session config entries ORT receives: string catch-all keys and a ``config_entries`` object's strings."""
        out: dict[str, str] = {}
        for key, value in self.config_entries.items():
            if key == "config_entries" and isinstance(value, Mapping):
                out.update({k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)})
            elif isinstance(value, str):
                out[key] = value
        return out


def read_session_options(raw: object) -> SessionBlock:
    """Parse one ``session_options`` block (a non-object is the empty block)."""
    block: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    typed = {k: v for k, v in block.items() if k in TYPED_KEYS}
    entries = {k: v for k, v in block.items() if k not in TYPED_KEYS and k != "provider_options"}
    providers: dict[str, Provider] = {}
    listed = block.get("provider_options")
    if isinstance(listed, list):
        for element in listed:
            for name, options in (element.items() if isinstance(element, Mapping) else ()):
                options = options if isinstance(options, Mapping) else {}
                prev = providers.get(name, Provider(str(name)))
                dfo = options.get("device_filtering_options")
                flat = {k: v for k, v in options.items() if isinstance(v, str)}  # a string dfo is an option
                providers[name] = Provider(
                    str(name),
                    {**prev.options, **flat},
                    {**prev.device_filtering_options, **(dfo if isinstance(dfo, Mapping) else {})},
                )
    elif "provider_options" in block:
        # A non-array "provider_options" is one more catch-all key to GenAI (a string one an entry).
        entries["provider_options"] = block["provider_options"]
    return SessionBlock(typed, entries, tuple(providers.values()))


def session_entries(raw: object) -> dict[str, str]:
    """The session config entries ORT receives from a ``session_options`` block (``{}`` for a non-object)."""
    return read_session_options(raw).session_entries


def provider_names(raw: object) -> tuple[str, ...]:
    """The canonical provider names a ``session_options`` block lists, in config order."""
    return read_session_options(raw).provider_names


def session_options_document(typed: Mapping[str, Any], entries: Mapping[str, Any],
                             providers: Sequence[tuple[str, Mapping[str, Any]]], *,
                             empty_providers: bool) -> dict[str, Any]:  # fmt: skip
    """The JSON block of a ``session_options``: typed options, then entries, then providers.

    The one writer of the block for both surfaces. ``providers``: (name, options) in config
    order; ``empty_providers``: write ``provider_options: []`` when there is none (the genai
    surface keeps the form its source had; v12b leaves the key out).
    """
    out: dict[str, Any] = {**typed, **entries}
    if providers or empty_providers:
        out["provider_options"] = [{name: dict(options)} for name, options in providers]
    return out
