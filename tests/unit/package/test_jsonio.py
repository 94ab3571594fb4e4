"""Strict JSON (q38.package.io.jsonio): what it refuses, where it says so, and what it writes.

In-process and exact: each refusal names the key path and the reason, so a mutation that lets a
value through (the first duplicate wins, ``1e400`` read as ``inf``, a 21-digit integer) or that
drops the key path fails here, not only in the corpus's child processes.
"""

from __future__ import annotations

import functools
import json
import math

import pytest
from syrupy.assertion import SnapshotAssertion

from q38.errors import ExportError, PackageError
from q38.package.io.files import CONFIG_LIMIT
from q38.package.io.jsonio import INT_MAX, INT_MIN, MAX_DEPTH, dumps_json, loads_strict, read_json


def _refused(text: str | bytes, **kw: object) -> str:
    with pytest.raises(PackageError) as info:
        loads_strict(text, what="cfg.json", **kw)  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(("doc", "expected"), [
    ('{"search": {"top_p": NaN}}', "cfg.json: search.top_p: NaN is not valid JSON"),
    ('{"search": {"temperature": Infinity}}', "cfg.json: search.temperature: Infinity is not valid JSON"),
    ('{"a": [1, -Infinity]}', "cfg.json: a[1]: -Infinity is not valid JSON"),
    ('{"search": {"repetition_penalty": 1e400}}', "cfg.json: search.repetition_penalty: number '1e400' is out of range for a double"),
    ('{"m": {"vocab_size": 18446744073709551616}}', "cfg.json: m.vocab_size: integer '18446744073709551616' does not fit in 64 bits"),
    ('{"m": {"k": -9223372036854775809}}', "cfg.json: m.k: integer '-9223372036854775809' does not fit in 64 bits"),
    ('{"d": {"filename": "../../etc/passwd", "filename": "model.onnx"}}', "cfg.json: d.filename: duplicate key 'filename' (JSON keys must be unique)"),
    ('{"d": {"filename": "\\ud800\\u0000.onnx"}}', "cfg.json: d.filename: string contains an unpaired UTF-16 surrogate"),
    ('{"d": {"filename": "\\ud800.onnx"}}', "cfg.json: d.filename: string contains an unpaired UTF-16 surrogate"),
    ('{"d": {"a\\u0000b": 1, "a": 2}}', "cfg.json: d.a: duplicate key 'a' (JSON keys must be unique, read up to a NUL)"),
    ('{"d": {"\\ud800": 1}}', "cfg.json: d: key '\\ud800' contains an unpaired UTF-16 surrogate (not valid Unicode)"),
    ('{"runtime_profiles": [{"id": "a"}, {"id": "b", "id": "c"}]}', "cfg.json: runtime_profiles[1].id: duplicate key 'id'"),
    ('{"a": 1,}', "cfg.json: invalid JSON at line 1 column 9"),
    ("NaN", "cfg.json: (top level): NaN is not valid JSON"),
    ("1e400", "cfg.json: (top level): number '1e400' is out of range for a double"),
])  # fmt: skip
def test_loads_strict_names_the_key_path_and_the_reason(doc: str, expected: str) -> None:
    assert _refused(doc).startswith(expected)


def test_a_string_with_a_nul_is_read_up_to_it_with_a_warning_naming_the_key_path(caplog: pytest.LogCaptureFixture) -> None:
    """onnxruntime(-genai) reads config strings as C strings: the document is readable (issue 24)."""
    doc = '{"d": {"filename": "model.onnx\\u0000../../etc/passwd", "k\\u0000x": "v\\u0000", "n": "\\u0000\\ud800"}}'
    with caplog.at_level("WARNING", logger="q38.package.io.jsonio"):
        assert loads_strict(doc, what="cfg.json") == {"d": {"filename": "model.onnx", "k": "v", "n": ""}}
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4, lines
    assert "cfg.json: d.filename: string contains a NUL character; read up to it as onnxruntime does: 'model.onnx'" in lines
    assert "cfg.json: d: key 'k\\x00x' contains a NUL character; read up to it as onnxruntime does: 'k'" in lines
    assert "cfg.json: d.n: string contains a NUL character; read up to it as onnxruntime does: ''" in lines


def test_the_nul_warning_cuts_a_key_path_longer_than_200_characters(caplog: pytest.LogCaptureFixture) -> None:
    """The warning shows a key path of 201 characters cut to its head and tail with its length, as the refusals do."""
    keys = ["a" * 64, "b" * 64, "c" * 64, "d" * 6]
    path = ".".join(keys)
    assert len(path) == 201
    doc: object = "x\x00y"
    for key in reversed(keys):
        doc = {key: doc}
    with caplog.at_level("WARNING", logger="q38.package.io.jsonio"):
        loads_strict(json.dumps(doc), what="cfg.json")
    shown = f"{path[:97]}...{path[-97:]} (201 chars)"
    assert [r.getMessage() for r in caplog.records] == [
        f"cfg.json: {shown}: string contains a NUL character; read up to it as onnxruntime does: 'x'"
    ]


def test_the_integer_range_is_int64_and_uint64_inclusive() -> None:
    assert loads_strict(f'[{INT_MIN}, {INT_MAX}, 0, -1]', what="x") == [INT_MIN, INT_MAX, 0, -1]
    assert "does not fit in 64 bits" in _refused(f"[{INT_MAX + 1}]")
    assert "does not fit in 64 bits" in _refused(f"[{INT_MIN - 1}]")


def test_a_5000_digit_integer_is_refused_by_size_without_conversion() -> None:
    message = _refused('{"v": ' + "9" * 5000 + "}")
    assert message.startswith("cfg.json: v: integer '999")
    assert "(5000 chars)" in message and "does not fit in 64 bits" in message
    assert len(message) < 400


def test_a_duplicate_key_is_refused_whichever_value_comes_first() -> None:
    for doc in ('{"f": "model.onnx", "f": "../x"}', '{"f": "../x", "f": "model.onnx"}', '{"f": 1, "f": 1}'):
        assert _refused(doc) == "cfg.json: f: duplicate key 'f' (JSON keys must be unique)"


def test_an_odd_key_is_quoted_in_the_path() -> None:
    assert _refused('{"a b": {"c": NaN}}').startswith("cfg.json: ['a b'].c: NaN")


def test_nesting_is_bounded() -> None:
    ok = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    assert loads_strict(ok, what="x") is not None
    deep = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    refused = _refused(deep)
    assert refused.startswith("cfg.json: [0][0][0]") and refused.endswith(f": nested deeper than {MAX_DEPTH} levels")
    assert "nested too deeply" in _refused("[" * 100_000 + "]" * 100_000, limit=1 << 20)


def test_size_limit_and_encoding() -> None:
    assert _refused(b" " * 11 + b"{}", limit=10) == "cfg.json: 13 bytes is larger than the 10 bytes limit for this document"
    assert loads_strict(b" " * 8 + b"{}", what="x", limit=10) == {}
    assert _refused(b'{"a": "\xff"}') == "cfg.json: not UTF-8 text (byte 7)"


def test_read_json_reads_a_bounded_regular_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "genai_config.json"
    path.write_text('{"model": {"type": "x"}}')
    assert read_json(path, what="config") == {"model": {"type": "x"}}
    path.write_bytes(b" " * (CONFIG_LIMIT + 1))
    with pytest.raises(PackageError, match=r"larger than the 4 MiB limit"):
        read_json(path, what="config")
    # a caller's larger limit holds for the parse too (a 5 MiB document under an 8 MiB limit)
    path.write_text('{"a": "' + "x" * (5 << 20) + '"}')
    assert len(read_json(path, what="profile", limit=8 << 20)["a"]) == 5 << 20


@pytest.mark.parametrize(("obj", "expected"), [
    ({"search": {"top_p": math.nan}}, "out.json: search.top_p: nan cannot be written as JSON"),
    ({"search": {"temperature": math.inf}}, "out.json: search.temperature: inf cannot be written as JSON"),
    ({"p": [{"gpu_mem_limit": 10**23}]}, "out.json: p[0].gpu_mem_limit: integer 100000000000000000000000 does not fit in 64 bits"),
    ({"d": {"filename": "a\x00b"}}, "out.json: d.filename: string 'a\\x00b' contains a NUL character"),
    ({"d": {1: "x"}}, "out.json: d: key 1 is not a string"),
    ({"d": {"k\x00x": "v"}}, "out.json: d: key 'k\\x00x' contains a NUL character"),
    ({"d": {"x": {1, 2}}}, "out.json: d.x: a set cannot be written as JSON"),
    (functools.reduce(lambda inner, _: {"a": inner}, range(MAX_DEPTH + 1), dict[str, object]()),
     "out.json: " + ".".join(["a"] * MAX_DEPTH) + f": nested deeper than {MAX_DEPTH} levels"),
    (functools.reduce(lambda inner, _: [inner], range(MAX_DEPTH + 1), list[object]()),
     "out.json: " + "[0]" * MAX_DEPTH + f": nested deeper than {MAX_DEPTH} levels"),
])  # fmt: skip
def test_dumps_json_refuses_what_it_could_not_read_back(obj: object, expected: str) -> None:
    with pytest.raises(ExportError) as info:
        dumps_json(obj, what="out.json", error=ExportError)
    assert str(info.value).startswith(expected)


def test_dumps_json_without_a_name_calls_the_value_json_output(messages_snapshot: SnapshotAssertion) -> None:
    """A caller that names nothing gets a PackageError naming "JSON output" and the key path."""
    with pytest.raises(PackageError) as info:
        dumps_json({"a": math.nan})
    assert messages_snapshot == str(info.value)


def test_dumps_json_names_a_refused_top_level_value_as_the_top_level(messages_snapshot: SnapshotAssertion) -> None:
    """A value refused at the document root is named "(top level)", the words loads_strict uses."""
    with pytest.raises(PackageError) as info:
        dumps_json(math.nan, what="out.json")
    assert messages_snapshot == str(info.value)


def test_dumps_json_is_deterministic_and_round_trips() -> None:
    doc = {"b": [1, 2.5, None, True], "a": {"z": "\u00e9", "y": INT_MAX, "x": INT_MIN}}
    text = dumps_json(doc)
    assert text == json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=True) + "\n"
    assert text.index('"a"') < text.index('"b"') and text.isascii() and text.endswith("}\n")
    assert loads_strict(text, what="x") == doc
