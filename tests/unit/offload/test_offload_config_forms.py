"""``q38 offload`` changes only what it converts in ``genai_config.json`` (issue 27, item 1).

Invariants guarded:
- on every real builder export (tests/fixtures/real, plus ``Q38_REAL_EXPORTS``) that converts,
  every config value that is not an offload key keeps its JSON form byte for byte
  (``"eos_token_id": 0`` stays ``0``, never ``[0]``; no ``provider_options: []`` invented);
  the only additions are the offload keys: ``session.moe.offload.*`` entries, the CUDA
  provider's ``arena_extend_strategy``, and an MTP ``session_options`` that is the decoder's
  (GenAI's default for a graph without its own) plus its offload entries;
- the three-way merge behind it (:func:`q38.package.json_forms.keep_source_forms`) keeps the
  source's form where the rewrite left a value alone, writes the rewrite's value where it did
  not, and never resurrects a key the rewrite removed;
- a genai config parsed and written back unchanged is its source document.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from support.genai_packages import real_package_dirs

from q38.cli import main
from q38.package.genai.config import dumps_genai_config, genai_config_to_dict, parse_genai_config
from q38.package.json_forms import keep_source_forms

OFFLOAD_ENTRY = "session.moe.offload."


def _leaves(value: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], str]:
    """Key path -> the JSON text of every scalar / empty container under ``value``."""
    if isinstance(value, dict) and value:
        return {p: t for k, v in value.items() for p, t in _leaves(v, (*path, k)).items()}
    if isinstance(value, list) and value:
        return {p: t for i, v in enumerate(value) for p, t in _leaves(v, (*path, f"[{i}]")).items()}
    return {path: json.dumps(value, ensure_ascii=False)}


def _is_offload_key(path: tuple[str, ...]) -> bool:
    if "session_options" not in path:
        return False
    rest = path[path.index("session_options") + 1 :]
    if rest and rest[0].startswith(OFFLOAD_ENTRY):
        return True
    return len(rest) == 4 and rest[0] == "provider_options" and rest[2] == "cuda" and rest[3] == "arena_extend_strategy"


@pytest.mark.parametrize("src", real_package_dirs(), ids=lambda p: p.name)
def test_offload_keeps_every_other_config_value_in_its_json_form(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = main(["offload", str(out), "--from-package", str(src), "--offload-mode", "auto"])
    if code == 2:  # fp16 exports: plain MoE, nothing to convert (refused in one line, nothing written)
        assert "no com.microsoft::QMoE node to offload" in capsys.readouterr().err
        assert not out.exists()
        return
    assert code == 0
    before = json.loads((src / "genai_config.json").read_text(encoding="utf-8"))
    after = json.loads((out / "genai_config.json").read_text(encoding="utf-8"))
    old, new = _leaves(before), _leaves(after)
    kept = {p: t for p, t in old.items() if not _is_offload_key(p)}
    assert {p: new.get(p) for p in kept} == kept
    added = {p: t for p, t in new.items() if p not in old}
    inherited = {p: t for p, t in added.items() if p[:3] == ("model", "mtp", "session_options")}
    if inherited and "session_options" not in before["model"]["mtp"]:
        decoder = {p[3:]: t for p, t in new.items() if p[:3] == ("model", "decoder", "session_options")}
        assert {p[3:]: t for p, t in inherited.items()} == decoder  # the decoder's, as GenAI would run it
        added = {p: t for p, t in added.items() if p not in inherited}
    assert [p for p in added if not _is_offload_key(p)] == []
    assert any(_is_offload_key(p) for p in added)  # it did convert something


@pytest.mark.parametrize(
    ("source", "base", "new", "expected"),
    [
        ({"eos": 2}, {"eos": [2]}, {"eos": [2]}, {"eos": 2}),  # unchanged: the source's form
        ({"eos": 2}, {"eos": [2]}, {"eos": [2, 3]}, {"eos": [2, 3]}),  # changed: the rewrite's
        ({"so": {"a": "1"}}, {"so": {"a": "1", "p": []}}, {"so": {"a": "1", "p": []}}, {"so": {"a": "1"}}),
        ({"so": {"a": "1"}}, {"so": {"a": "1", "p": []}}, {"so": {"a": "1", "p": [], "x": "y"}},
         {"so": {"a": "1", "x": "y"}}),  # an added key; the invented one stays absent
        ({"so": {"a": "1"}}, {"so": {"a": "1", "p": []}}, {"so": {"a": "1", "p": [{"c": {}}]}},
         {"so": {"a": "1", "p": [{"c": {}}]}}),  # the invented key changed: written
        ({"a": 1, "b": 2}, {"a": 1, "b": 2}, {"a": 1}, {"a": 1}),  # removed by the rewrite
        ({"a": 1, "odd": {"k": 1.5}}, {"a": 1}, {"a": 2}, {"a": 2, "odd": {"k": 1.5}}),  # not in the records
        ([{"x": 1.0, "y": 1}], [{"x": 1, "y": 1}], [{"x": 1, "y": 2}], [{"x": 1.0, "y": 2}]),
        ([1, 2], [1, 2], [1, 2, 3], [1, 2, 3]),  # a longer list: the rewrite's
    ],
)  # fmt: skip
def test_keep_source_forms_merges_three_ways(source: Any, base: Any, new: Any, expected: Any) -> None:
    merged = keep_source_forms(source, base, new)
    assert json.dumps(merged) == json.dumps(expected)


def _builder_document() -> dict[str, Any]:
    real = sorted(real_package_dirs())[0]
    doc: dict[str, Any] = json.loads((real / "genai_config.json").read_text(encoding="utf-8"))
    doc["model"]["eos_token_id"] = 2
    doc["model"]["decoder"]["session_options"].pop("provider_options", None)
    return doc


def test_a_config_parsed_and_written_back_is_its_source_document() -> None:
    doc = _builder_document()
    cfg = parse_genai_config(doc)
    assert json.loads(dumps_genai_config(cfg)) == doc
    assert cfg.model.eos_token_id == (2,)
    written = genai_config_to_dict(cfg)
    written["model"]["eos_token_id"] = 7  # the caller's copy: the kept source is not edited
    assert genai_config_to_dict(cfg)["model"]["eos_token_id"] == 2


def test_a_changed_value_is_written_and_its_siblings_keep_their_form() -> None:
    doc = _builder_document()
    cfg = parse_genai_config(doc)
    model = dataclasses.replace(cfg.model, context_length=cfg.model.context_length * 2)
    out = json.loads(dumps_genai_config(dataclasses.replace(cfg, model=model)))
    assert out["model"]["context_length"] == doc["model"]["context_length"] * 2
    assert out["model"]["eos_token_id"] == 2
    assert "provider_options" not in out["model"]["decoder"]["session_options"]
