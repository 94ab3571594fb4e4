"""What counts as a shared library: an ELF shared object for this platform.

``q38 build --lib-NAME PATH`` copies PATH into the package's ``libs/``, where onnxruntime later
``dlopen``s it. A file that is not a shared object (a text file, ``/etc/passwd`` behind a
symlink, an executable, a library of the other word size) would be packaged as a "library" and
fail only at load time on the runtime machine. :func:`shared_object_problem` reads the 20-byte
ELF identification and type fields (nothing else) and says what is wrong, naming no path: the
caller names the file and the flag.
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path
from typing import Final

__all__ = ["ELF_MAGIC", "ET_DYN", "shared_object_header", "shared_object_problem"]

ELF_MAGIC: Final = b"\x7fELF"
ET_DYN: Final = 3
"""``e_type`` of a shared object (a ``.so``; position-independent executables share it)."""
_CLASS: Final = {1: "32-bit", 2: "64-bit"}
_DATA: Final = {1: "little", 2: "big"}
_TYPES: Final = {0: "ET_NONE", 1: "ET_REL (an object file)", 2: "ET_EXEC (an executable)", 3: "ET_DYN", 4: "ET_CORE (a core dump)"}


def _host_class() -> int:
    return 2 if sys.maxsize > 2**32 else 1


def shared_object_header(machine: int = 0) -> bytes:
    """The 64-byte ELF header of a shared object for this platform's word size and byte order.

    Placeholder libraries (synthetic packages, tests) start with it so that they pass
    :func:`shared_object_problem`; ``machine`` is the ``e_machine`` value (0: unspecified).
    """
    cls = _host_class()
    order = "<" if sys.byteorder == "little" else ">"
    ident = ELF_MAGIC + bytes([cls, 1 if sys.byteorder == "little" else 2, 1, 0]) + b"\0" * 8
    rest = struct.pack(f"{order}HHI", ET_DYN, machine, 1)
    header = ident + rest
    return header + b"\0" * (64 - len(header))


def shared_object_problem(path: Path | str) -> str | None:
    """None when ``path`` is an ELF shared object for this platform, else why not (one phrase).

    Checks the magic, the class (word size) and data encoding (byte order) against the running
    interpreter, and ``e_type == ET_DYN``. Raises OSError when the file cannot be opened or read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        head = os.read(fd, 20)
    finally:
        os.close(fd)
    if head[:4] != ELF_MAGIC:
        return "not an ELF shared object (no ELF magic)"
    if len(head) < 20:
        return "not an ELF shared object (truncated ELF header)"
    cls, data = head[4], head[5]
    if cls != _host_class():
        return f"an ELF file of class {_CLASS.get(cls, cls)}, this platform is {_CLASS[_host_class()]}"
    if _DATA.get(data) != sys.byteorder:
        return f"an ELF file of {_DATA.get(data, f'unknown ({data})')} byte order, this platform is {sys.byteorder}-endian"
    (e_type,) = struct.unpack("<H" if data == 1 else ">H", head[16:18])
    if e_type != ET_DYN:
        return f"an ELF file of type {_TYPES.get(e_type, e_type)}, not a shared object (ET_DYN)"
    return None
