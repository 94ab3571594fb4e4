"""The decoder model types q38's genai surface opens are the ones the installed builder writes.

``q38.package.genai.config.BUILDER_MODEL_TYPES`` is checked against the installed
onnxruntime-genai wheel's own ``models/builder.py`` (read as source, never imported: it needs
torch): every ``model.type`` its ``create_model`` dispatch can write (the architecture's name
before ``For``, lower-cased, as ``builders/base.py`` derives it, unless the branch always
overrides it; every ``onnx_model.model_type = "..."``) is in the set, and the set holds nothing
else but the generic pipeline types and the research Qwen3.8 builder's ``qwen4_exp_text``.

Invariants guarded: a builder-written type q38 refused (or a stale entry) fails here; a package
of every listed type opens through ``open_any`` (the reader is type-agnostic), and a type outside
the set is refused naming it.
"""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

import pytest
from support.genai_packages import FIXTURES, copy_package

from q38.errors import PackageError
from q38.package.genai.config import BUILDER_MODEL_TYPES
from q38.package.surface import open_any

NOT_A_DECODER = {"whisper"}  # WhisperModel writes an encoder-decoder config of its own
NOT_FROM_THE_DISPATCH = {"decoder", "decoder-pipeline", "qwen4_exp_text"}


def _builder_source() -> str:
    spec = importlib.util.find_spec("onnxruntime_genai")
    if spec is None or spec.origin is None:
        pytest.skip("onnxruntime-genai is not installed")
    path = Path(spec.origin).parent / "models" / "builder.py"
    assert path.is_file(), f"{path}: the wheel ships its builder"
    return path.read_text(encoding="utf-8")


def _default_type(architecture: str) -> str:
    """``builders/base.py``: ``model_type[: model_type.find("For")].lower()``."""
    return (architecture[: architecture.find("For")] if "For" in architecture else architecture).lower()


def _assigned(stmt: ast.AST) -> set[str]:
    """The strings ``x.model_type = "..."`` (or ``= "a" if c else "b"``) assigns; empty if none."""
    if not (isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Attribute)
            and stmt.targets[0].attr == "model_type"):  # fmt: skip
        return set()
    values = [stmt.value.body, stmt.value.orelse] if isinstance(stmt.value, ast.IfExp) else [stmt.value]
    return {v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)}


def _always_assigns(body: list[ast.stmt]) -> bool:
    """Whether every path through ``body`` sets ``model_type`` (top level, or both arms of an if)."""
    return any(_assigned(s) or (isinstance(s, ast.If) and s.orelse and _always_assigns(s.body)
                                and _always_assigns(s.orelse)) for s in body)  # fmt: skip


def _architectures(test: ast.expr) -> list[str]:
    """The ``config.architectures[0] == "X"`` names a branch condition tests."""
    return [n.comparators[0].value for n in ast.walk(test) if isinstance(n, ast.Compare)
            and isinstance(n.left, ast.Subscript) and "architectures" in ast.unparse(n.left)
            and isinstance(n.comparators[0], ast.Constant)]  # fmt: skip


def builder_written_types(source: str) -> set[str]:
    tree = ast.parse(source)
    create = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "create_model")
    types: set[str] = set()
    for node in ast.walk(create):
        if not isinstance(node, ast.If) or not _architectures(node.test):
            continue
        for stmt in node.body:
            types |= {t for n in ast.walk(stmt) for t in _assigned(n)}
        if not _always_assigns(node.body):
            types |= {_default_type(a) for a in _architectures(node.test)}
    return types


def test_the_set_is_what_the_installed_builder_writes() -> None:
    written = builder_written_types(_builder_source())
    assert len(written) > 30, "the dispatch was found"
    assert written - NOT_A_DECODER - BUILDER_MODEL_TYPES == set(), "builder types q38 would refuse"
    assert BUILDER_MODEL_TYPES - written - NOT_FROM_THE_DISPATCH == set(), "listed types the builder never writes"


def test_the_derivation_sees_defaults_and_overrides() -> None:
    source = '''
def create_model(config, onnx_model=None):
    if config.architectures[0] == "FooForCausalLM":
        onnx_model = 1
    elif config.architectures[0] == "BarForConditionalGeneration" or config.architectures[0] == "BarModel":
        onnx_model.model_type = "bar"
    elif config.architectures[0] == "BazForConditionalGeneration":
        if not onnx_model.exclude_embeds:
            onnx_model.model_type = "baz_text"
    elif config.architectures[0] == "QuxForConditionalGeneration":
        if onnx_model.exclude_embeds:
            onnx_model.model_type = "qux"
        else:
            onnx_model.model_type = "qux_text"
    elif config.architectures[0] == "QuuxForConditionalGeneration":
        onnx_model.model_type = "quux" if onnx_model.exclude_embeds else "quux_text"
'''
    assert builder_written_types(source) == {"foo", "bar", "baz", "baz_text", "qux", "qux_text", "quux", "quux_text"}


@pytest.mark.parametrize("mtype", sorted(BUILDER_MODEL_TYPES))
def test_a_package_of_every_listed_type_opens(mtype: str, tmp_path: Path) -> None:
    pkg = copy_package(FIXTURES / "int4-cpu", tmp_path / "pkg")
    path = pkg / "genai_config.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["model"]["type"] = mtype
    path.write_text(json.dumps(doc), encoding="utf-8")
    opened = open_any(pkg)
    assert opened.surface == "genai" and [g.role for g in opened.graphs()] == ["decoder"]


def test_a_type_outside_the_set_is_refused_naming_it(tmp_path: Path) -> None:
    pkg = copy_package(FIXTURES / "int4-cpu", tmp_path / "pkg")
    path = pkg / "genai_config.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["model"]["type"] = "whisper"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(PackageError, match="'whisper'") as info:
        open_any(pkg)
    assert "\n" not in str(info.value)
