"""ELF checks of the custom-op libraries a package names: what ``shared_object_problem`` says.

Invariant: only an ELF shared object (ET_DYN) of this platform's word size and byte order passes;
anything else gets one phrase saying what the file is instead. Big-endian hosts are simulated by
patching ``sys.byteorder``, which the module reads at each call.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from q38.package.io.elf import ELF_MAGIC, ET_DYN, shared_object_header, shared_object_problem

_LITTLE = sys.byteorder == "little"
_HOST_DATA = 1 if _LITTLE else 2


def _header(cls: int = 2, data: int = _HOST_DATA, e_type: int = ET_DYN) -> bytes:
    order = "<" if data == 1 else ">"
    return ELF_MAGIC + bytes([cls, data, 1, 0]) + b"\0" * 8 + struct.pack(f"{order}HHI", e_type, 62, 1)


@pytest.mark.parametrize(("content", "problem"), [
    (b"#!/bin/sh\n" + b"\0" * 30, "not an ELF shared object (no ELF magic)"),
    (ELF_MAGIC + b"\2\1", "not an ELF shared object (truncated ELF header)"),
    (_header(cls=1), "an ELF file of class 32-bit, this platform is 64-bit"),
    (_header(cls=9), "an ELF file of class 9, this platform is 64-bit"),
    (_header(data=3 - _HOST_DATA), f"an ELF file of {'big' if _LITTLE else 'little'} byte order, this platform is {sys.byteorder}-endian"),
    (_header(data=7), f"an ELF file of unknown (7) byte order, this platform is {sys.byteorder}-endian"),
    (_header(e_type=2), "an ELF file of type ET_EXEC (an executable), not a shared object (ET_DYN)"),
    (_header(e_type=1), "an ELF file of type ET_REL (an object file), not a shared object (ET_DYN)"),
    (_header(e_type=0x0203), "an ELF file of type 515, not a shared object (ET_DYN)"),
    (_header(), None),
])  # fmt: skip
def test_only_a_shared_object_of_this_platform_passes(tmp_path: Path, content: bytes, problem: str | None) -> None:
    path = tmp_path / "lib.so"
    path.write_bytes(content + (b"\0" * 64 if len(content) >= 20 else b""))  # a header is followed by more
    assert shared_object_problem(path) == problem


def test_the_header_q38_writes_for_test_libraries_passes_and_a_real_one_does_too(tmp_path: Path) -> None:
    path = tmp_path / "libfake.so"
    path.write_bytes(shared_object_header())
    assert shared_object_problem(path) is None
    import onnxruntime.capi as capi

    real = next(Path(capi.__file__).parent.glob("onnxruntime_pybind11_state*.so"))
    assert shared_object_problem(real) is None


def test_the_header_q38_writes_is_the_64_byte_elf_header_padded_with_zeros() -> None:
    """Placeholder libraries start with exactly the 64-byte ELF64 header: its fields, then zeros only."""
    assert shared_object_header(machine=62) == _header() + b"\0" * 40


def test_the_header_q38_writes_by_default_leaves_the_machine_unspecified() -> None:
    """Without ``machine`` the header's ``e_machine`` is 0 (EM_NONE, "unspecified"), not some real architecture."""
    header = shared_object_header()
    assert header == shared_object_header(machine=0)
    assert struct.unpack("<H" if _LITTLE else ">H", header[18:20]) == (0,)


def test_on_a_big_endian_platform_the_header_q38_writes_is_big_endian_and_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a big-endian host (s390x; simulated via ``sys.byteorder``) placeholder libraries get an ELFDATA2MSB header."""
    monkeypatch.setattr(sys, "byteorder", "big")
    header = shared_object_header(machine=22)
    assert header == _header(data=2)[:18] + struct.pack(">HI", 22, 1) + b"\0" * 40
    path = tmp_path / "libfake.so"
    path.write_bytes(header)
    assert shared_object_problem(path) is None


def test_on_a_big_endian_platform_a_processor_specific_type_is_named_by_its_unsigned_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A big-endian ``e_type`` of 0xff00 (ET_LOPROC) is reported as 65280: ``e_type`` is an unsigned half-word."""
    monkeypatch.setattr(sys, "byteorder", "big")
    path = tmp_path / "lib.so"
    path.write_bytes(_header(data=2, e_type=0xFF00) + b"\0" * 44)
    assert shared_object_problem(path) == "an ELF file of type 65280, not a shared object (ET_DYN)"


def test_a_fifo_without_a_writer_is_answered_at_once_not_waited_on(tmp_path: Path) -> None:
    """A FIFO named as a library is opened non-blocking: the check answers "no ELF magic" instead of
    hanging until some process writes to it (run in a child so a hang fails by timeout)."""
    fifo = tmp_path / "lib.so"
    os.mkfifo(fifo)
    code = f"from q38.package.io.elf import shared_object_problem; print(shared_object_problem({str(fifo)!r}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20, check=False)
    assert (done.returncode, done.stdout) == (0, "not an ELF shared object (no ELF magic)\n"), done.stderr
