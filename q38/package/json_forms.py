"""Keep the JSON form a config value had in its source when a rewrite leaves its meaning alone.

A config read into records and written back comes out in the records' canonical form:
``"eos_token_id": 2`` becomes ``[2]``, an absent ``provider_options`` becomes ``[]``. Both mean
the same to onnxruntime-genai, but a converter that changes two session options must not
rewrite keys it was not asked to touch (a reviewer diffing the configs sees only what it
converted). :func:`keep_source_forms` is a three-way merge over JSON values:

- ``source``: the document as it was read (its forms are the ones to keep);
- ``base``: the canonical form of ``source`` (what the records write back unchanged);
- ``new``: the canonical form after the rewrite.

Where ``new`` equals ``base`` the rewrite did not touch the value, so the source's form is kept;
where it differs, the rewrite's value is written (objects and equal-length arrays are merged
member by member, so one changed key of an object keeps its siblings' forms). A key the records
invent on write (``base`` has it, ``source`` lacks it) stays absent unless the rewrite changed it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["keep_source_forms"]

_ABSENT: Final = object()


def keep_source_forms(source: Any, base: Any, new: Any) -> Any:
    """``new`` with every value the rewrite left unchanged written in its ``source`` form.

    Args:
        source: the JSON value as read from the file.
        base: the canonical (record) form of ``source``.
        new: the canonical form after the rewrite.

    Returns:
        A JSON value meaning what ``new`` means; equal to ``source`` where ``new == base``.

    """
    if new == base:
        return source
    if isinstance(new, Mapping) and isinstance(base, Mapping) and isinstance(source, Mapping):
        out: dict[str, Any] = {}
        for key, value in source.items():  # the source's keys first, in its order
            if key in new:
                old = base.get(key, _ABSENT)
                out[key] = new[key] if old is _ABSENT else keep_source_forms(value, old, new[key])
            elif key not in base:
                out[key] = value  # the records do not carry it, and the rewrite did not remove it
        for key, value in new.items():
            if key in source:
                continue
            if key not in base or base[key] != value:
                out[key] = value  # added or changed by the rewrite
        return out
    if (
        isinstance(new, list)
        and isinstance(base, list)
        and isinstance(source, list)
        and len(new) == len(base) == len(source)
    ):
        return [keep_source_forms(s, b, n) for s, b, n in zip(source, base, new, strict=True)]
    return new
