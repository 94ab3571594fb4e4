"""q38's genai_config parser against onnxruntime-genai 0.18.0's own ``og.Config``: same verdicts.

Invariants guarded:
* for every document of the corpus (every committed builder fixture's config, extra exports
  named by ``Q38_REAL_EXPORTS``, hand seeds with mtp / state groups / runtime profiles / engine /
  pipelines, and their systematic mutations: an unknown key under every object, every value
  replaced by every JSON kind and odd values, every key deleted, arrays emptied or grown), q38
  accepts exactly when ``og.Config(dir)`` of the installed wheel accepts;
* every q38 refusal is one line ``SOURCE: key.path: what`` naming the key path;
* at the text level q38 refuses what og refuses (``\\u`` escapes) and, deliberately, more:
  duplicate keys and trailing bytes after the document (og silently takes the last value / stops
  reading), listed here so that any other difference fails.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from support.genai_config_corpus import OgProbe, corpus, seed_configs

from q38.errors import ConfigError
from q38.package.genai.config import parse_genai_config, read_genai_config

pytestmark = pytest.mark.differential

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "real"
EXTRA = tuple(Path(p) for p in os.environ.get("Q38_REAL_EXPORTS", "").split(os.pathsep) if p)
SEEDS = seed_configs(FIXTURES, EXTRA)
_PATH_LINE = re.compile(r"^c: [A-Za-z_][\w.%-]*(\[\d+\][\w.%-]*)*: \S")


@pytest.fixture(scope="module")
def og(tmp_path_factory: pytest.TempPathFactory) -> OgProbe:
    pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai 0.18.0 is a test dependency")
    return OgProbe(tmp_path_factory.mktemp("og"))


def _q38(doc: Any) -> str | None:
    try:
        parse_genai_config(doc, source="c")
    except ConfigError as exc:
        return str(exc)
    return None


_SLOW_SEEDS = ("int4-cpu-mtp",)  # the most mutations: over ~5 s


@pytest.mark.parametrize(("name", "seed"), [pytest.param(name, seed, id=name, marks=[pytest.mark.slow] * (name in _SLOW_SEEDS))
                                            for name, seed in SEEDS])
def test_same_verdict_as_og_config_for_every_mutation(name: str, seed: dict[str, Any], og: OgProbe) -> None:
    cases = list(corpus([(name, seed)]))
    disagreements = []
    refused = 0
    for what, doc in cases:
        ours, theirs = _q38(doc), og.verdict(doc)
        if (ours is None) != (theirs is None):
            disagreements.append(f"{what}: q38={ours or 'accepts'} og={theirs or 'accepts'}")
        if ours is not None:
            refused += 1
            assert "\n" not in ours and _PATH_LINE.match(ours), f"{what}: {ours!r} does not name a key path"
    assert not disagreements, f"{len(disagreements)}/{len(cases)} disagree:\n" + "\n".join(disagreements[:20])
    assert len(cases) > 100 and 0 < refused < len(cases)
    assert og.verdict(seed) is None, "seeds are configs og accepts"


def test_corpus_covers_every_committed_fixture() -> None:
    names = {name for name, _ in SEEDS}
    for config in FIXTURES.rglob("genai_config.json"):
        assert str(config.parent.relative_to(FIXTURES)) in names


_TEXT_CASES = [
    # (text, og accepts, q38 accepts): og's JSON reader and q38's strict one
    ('{"model": {"context_length": 8, "type": "qwen3"}}', True, True),
    ('{"model": {"context_length": 8, "type": "\\u0071wen3"}}', False, False),
    ('{"model": {"context_length": 8, "type": "caf\u00e9"}}', True, True),
    ('{"model": {"context_length": 8, "type": "a\\\\u"}}', True, True),
    ('{"model": {"context_length": 8, "type": "qwen3",}}', False, False),
    ('{"model": {"context_length": NaN, "type": "qwen3"}}', False, False),
    # deliberate: q38 refuses what og silently resolves
    ('{"model": {"context_length": 8, "context_length": 9, "type": "qwen3"}}', True, False),
    ('{"model": {"context_length": 8, "type": "qwen3"}} trailing', True, False),
]


@pytest.mark.parametrize(("text", "og_ok", "q38_ok"), _TEXT_CASES)
def test_text_level_verdicts(text: str, og_ok: bool, q38_ok: bool, og: OgProbe, tmp_path: Path) -> None:
    og.file.write_text(text, encoding="utf-8")
    import onnxruntime_genai

    try:
        onnxruntime_genai.Config(str(og.dir))
        theirs = True
    except RuntimeError:
        theirs = False
    path = tmp_path / "genai_config.json"
    path.write_text(text, encoding="utf-8")
    try:
        read_genai_config(path)
        ours = True
    except ConfigError as exc:
        ours = False
        assert "\n" not in str(exc) and str(path) in str(exc)
    assert (theirs, ours) == (og_ok, q38_ok)


def test_og_probe_sees_a_refusal(og: OgProbe) -> None:
    """The probe is live: og refuses an unknown key and names it (so the verdicts above mean something)."""
    message = og.verdict({"model": {"context_length": 8, "q38_not_a_key": 1}})
    assert message is not None and 'Unknown value "q38_not_a_key"' in message
    assert json.dumps(_q38({"model": {"context_length": 8, "q38_not_a_key": 1}})).count("model.q38_not_a_key") == 1
