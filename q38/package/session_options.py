"""The session options of a config block, read tolerantly (what ``q38 check`` and listings see).

One reader for every caller that must see a possibly broken block (the graph listing, ``q38 check``):
string ``config_entries`` and dotted top-level keys are the session config entries ORT receives
(``SessionOptions.add_session_config_entry``); provider names come in config order, ``cpu``
spelled ``CPU`` as GenAI does. Anything of the wrong type is ignored here: the config rules name it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["provider_names", "session_entries"]


def _obj(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def session_entries(so: object) -> dict[str, str]:
    """The string session config entries of a ``session_options`` block (``{}`` for a non-object)."""
    block = _obj(so)
    out = {k: v for k, v in _obj(block.get("config_entries")).items() if isinstance(v, str)}
    out.update({k: v for k, v in block.items() if "." in k and isinstance(v, str)})
    return out


def provider_names(so: object) -> tuple[str, ...]:
    """The provider names a ``session_options`` block's ``provider_options`` list, in order."""
    names = []
    for entry in _obj(so).get("provider_options") or []:
        for name in _obj(entry):
            names.append("CPU" if str(name).lower() == "cpu" else str(name))
    return tuple(names)
