"""weights_pool.txt: exact round trips and one-line errors.

Invariants: format(parse(text)) == text for any valid text (comments, blank lines, empty pool);
parse(format(pool)) == pool; malformed lines name file:line and the field; placements are an enum.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion

from q38.errors import PoolError
from q38.package import Placement, PoolEntry, WeightsPool, format_pool, parse_pool, read_pool

TEXT = (
    "# q38 weights pool v1\n"
    "\n"
    "w0 model.onnx.data 0 512 float16 16x16 device target:a,head:a\n"
    "   \n"
    "# experts\n"
    "e.1 model.onnx.data 4096 - uint8 8x64x32 cpu_mmap target:/model/layers.0/moe with spaces\n"
    "s model.onnx.data 8 4 float scalar host_mapped\n"
)


def test_text_with_comments_and_blank_lines_round_trips_byte_for_byte() -> None:
    pool = parse_pool(TEXT)
    assert format_pool(pool) == TEXT
    assert [e.pool_id for e in pool.entries] == ["w0", "e.1", "s"]
    e1 = pool.by_id()["e.1"]
    assert (e1.length, e1.shape, e1.placement, e1.provenance) == (None, (8, 64, 32), Placement.CPU_MMAP, "target:/model/layers.0/moe with spaces")
    assert pool.by_id()["s"].shape == ()


@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n", "\n\n\n", "  \t# an indented comment\r\n"])
def test_empty_pools_round_trip(text: str) -> None:
    """Blank lines and comments (``#`` after any leading whitespace) are kept verbatim, never parsed."""
    pool = parse_pool(text)
    assert pool.entries == ()
    assert format_pool(pool) == text


def test_a_last_line_without_a_newline_is_still_an_entry() -> None:
    """Only an empty string after the final newline is dropped: a last entry with no line end is read."""
    pool = parse_pool("# header\nw0 model.onnx.data 0 4 float 1 device")
    assert [e.pool_id for e in pool.entries] == ["w0"]
    assert format_pool(pool) == "# header\nw0 model.onnx.data 0 4 float 1 device\n"


def test_replace_entries_keeps_comments_in_place() -> None:
    pool = parse_pool(TEXT)
    moved = pool.replace_entries(lambda e: None if e.pool_id == "s" else e)
    assert format_pool(moved) == TEXT.replace("s model.onnx.data 8 4 float scalar host_mapped\n", "")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("w0 model.onnx.data 0 512 float16", "expected 'pool_id file offset length dtype shape placement [provenance]', got 5 field(s)"),
        ("w0 model.onnx.data -1 512 float16 16x16 device", "offset '-1' is not a non-negative decimal integer"),
        ("w0 model.onnx.data 0 x float16 16x16 device", "length 'x' is not a non-negative decimal integer"),
        ("w0 model.onnx.data 0 99999999999999999999 float16 16x16 device", "does not fit in int64"),
        ("w0 model.onnx.data 0 512 float17 16x16 device", "unknown dtype 'float17'"),
        ("w0 model.onnx.data 0 512 float16 16xx16 device", "shape dimension '' is not a non-negative decimal integer"),
        ("w0 model.onnx.data 0 512 float16 16x16 gpu", "unknown placement 'gpu'"),
        ("w0 ../outside.bin 0 512 float16 16x16 device", "escapes the package directory"),
        ("w0 /etc/passwd 0 512 float16 16x16 device", "absolute path '/etc/passwd' is not allowed"),
        ("w0 model.onnx.data 0 500 float16 16x16 device", "length 500 does not match float16 shape 16x16 (512 bytes)"),
        ("w@0 model.onnx.data 0 512 float16 16x16 device", "invalid pool id 'w@0'"),
    ],
)
def test_malformed_lines_give_one_line_naming_file_and_line(line: str, message: str) -> None:
    with pytest.raises(PoolError) as info:
        parse_pool(f"# header\n{line}\n", source="pkg/weights_pool.txt")
    text = str(info.value)
    assert text.startswith("pkg/weights_pool.txt:2: ")
    assert message in text
    assert "\n" not in text


def test_duplicate_pool_ids_are_refused() -> None:
    with pytest.raises(PoolError, match=r":3: duplicate pool id 'a' \(first on line 1\)"):
        parse_pool("a f 0 4 float 1 device\nb f 0 4 float 1 device\na f 4 4 float 1 device\n")


_ids = st.from_regex(r"[A-Za-z0-9_.:/-]{1,12}", fullmatch=True)
_entry = st.builds(
    PoolEntry,
    pool_id=_ids,
    file=st.sampled_from(["model.onnx.data", "head_r2.onnx.data", "sub/x.bin"]),
    offset=st.integers(0, 2**40),
    length=st.none(),
    dtype=st.sampled_from(["float16", "uint8", "float", "bfloat16"]),
    shape=st.lists(st.integers(0, 4096), max_size=3).map(tuple),
    placement=st.sampled_from(list(Placement)),
    provenance=st.from_regex(r"([a-z]+:[A-Za-z0-9_./ ]{0,20})?", fullmatch=True).map(str.rstrip),
)


@given(st.lists(st.one_of(_entry, st.sampled_from(["", "# c", "#", "  "])), max_size=12))
def test_any_pool_round_trips(records: list) -> None:
    seen: set[str] = set()
    unique = []
    for r in records:
        if isinstance(r, PoolEntry):
            if r.pool_id in seen:
                continue
            seen.add(r.pool_id)
        unique.append(r)
    pool = WeightsPool(tuple(unique))
    assert parse_pool(format_pool(pool)) == pool


@pytest.mark.parametrize(("content", "problem"), [(None, "does not exist"), (b"w0 \xff\n", "not UTF-8 text (byte 3)")])
def test_a_pool_file_that_cannot_be_read_is_a_pool_error_naming_it(tmp_path: Path, content: bytes | None, problem: str) -> None:
    """A missing or non-UTF-8 pool file is refused as a PoolError (the pool's own error class,
    which callers catch as such) in one line naming the file."""
    path = tmp_path / "weights_pool.txt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(PoolError) as info:
        read_pool(path)
    assert type(info.value) is PoolError
    assert str(info.value).startswith(f"weights pool {path}")
    assert problem in str(info.value)


@pytest.mark.parametrize(("text", "value"), [
    ("00000000000000000001", 1),                      # 20 digits, one significant
    ("0" * 30 + "9223372036854775807", 2**63 - 1),    # int64's maximum behind 30 zeros
])  # fmt: skip
def test_an_offset_with_leading_zeros_is_read_by_its_value(text: str, value: int) -> None:
    """Leading zeros do not make a number bigger: a zero-padded offset that fits int64 is read (it was
    refused as "does not fit in int64" once its text passed 19 characters)."""
    (entry,) = parse_pool(f"w0 model.onnx.data {text} 2 float16 1 device\n", source="p").entries
    assert entry.offset == value


def test_an_offset_past_int64_is_refused_whatever_its_leading_zeros(messages_snapshot: SnapshotAssertion) -> None:
    """The bound is on the value: 2**63 behind zeros is still refused, in one line naming file and line."""
    with pytest.raises(PoolError) as info:
        parse_pool(f"w0 model.onnx.data {'0' * 5}9223372036854775808 2 float16 1 device\n", source="p")
    assert messages_snapshot == str(info.value)
