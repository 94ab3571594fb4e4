"""``shared_initializers``: tensors two graphs of a genai package read from one byte range.

The builder folds the MTP graph's copy of a weight (the embedding, the lm_head) onto the
decoder's: both graphs' initializers point at ``model.onnx.data`` at the same offset, and both
``model.decoder.shared_initializers`` and ``model.mtp.shared_initializers`` list the tensor as
``{name, data_file, offset, length, data_type, shape}`` (``builders/mtp.py``). GenAI loads the
range once and hands it to both sessions, so an entry is only sound if

* its byte range is decimal, lies inside ``data_file`` (a regular file inside the package), and
  has exactly the size ``data_type`` x ``shape`` needs;
* every graph that shares weights has an initializer of that name, of that dtype and shape,
  whose external data (if any) is that same range of that same file.

:func:`shared_initializer_problems` returns each broken entry as (key path, message); it only
``stat``s files and reads graph metadata, never weight bytes.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

import onnx_ir as ir

from q38.errors import UnsafePathError, quote
from q38.package.genai.config import SharedInitializer
from q38.package.io.files import os_problem
from q38.package.io.paths import resolve_inside

__all__ = ["shared_initializer_problems"]


def _nbytes(data_type: int, shape: tuple[int, ...]) -> int | None:
    try:
        dtype = ir.DataType(data_type)
        bits = dtype.bitwidth
    except (ValueError, TypeError):
        return None
    count = 1
    for dim in shape:
        count *= dim
    return (count * bits + 7) // 8


def _initializer(model: ir.Model, name: str) -> ir.Value | None:
    return model.graph.initializers.get(name)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _file_problem(root: Path, path: str, entry: SharedInitializer) -> tuple[str | None, Path | None]:
    """(problem with the entry's byte range or data file, the data file when sound)."""
    span = entry.byte_range()
    if span is None:
        return f"offset {quote(entry.offset)} and length {quote(entry.length)} must be decimal byte counts", None
    offset, length = span
    try:
        data = resolve_inside(root, entry.data_file, what=f"{path}.data_file")
    except UnsafePathError as exc:
        return str(exc).split(": ", 1)[-1], None
    try:
        st = data.stat()
    except OSError as exc:
        return f"data_file {quote(entry.data_file)}: {os_problem(exc)}", None
    if not stat.S_ISREG(st.st_mode):
        return f"data_file {quote(entry.data_file)} is not a regular file", None
    if offset + length > st.st_size:
        return f"bytes [{offset}, {offset + length}) lie past the end of {quote(entry.data_file)} ({st.st_size} bytes)", None
    return None, data


def _check_entry(
    root: Path, path: str, entry: SharedInitializer, models: Mapping[str, ir.Model | None], *, files: bool
) -> str | None:
    if not entry.name:
        return "name is empty"
    problem, data = _file_problem(root, path, entry)
    if data is None:
        return problem if files else None  # else: the path-field rules (PATH-FIELD-00x) report it
    offset, length = entry.byte_range() or (0, 0)
    want = _nbytes(entry.data_type, entry.shape)
    if want is None:
        return f"data_type {entry.data_type} is not an ONNX tensor type with a fixed size"
    if want != length:
        return f"length {length} but data_type {entry.data_type} shape {list(entry.shape)} needs {want} bytes"
    for role, model in models.items():
        if model is None:
            continue
        value = _initializer(model, entry.name)
        if value is None or value.const_value is None:
            return f"no initializer {quote(entry.name)} in the {role} graph (dangling shared initializer)"
        tensor = value.const_value
        shape = tuple(int(d) for d in tensor.shape.numpy())
        if int(tensor.dtype) != entry.data_type or shape != entry.shape:
            return (
                f"the {role} graph's {quote(entry.name)} is {tensor.dtype.name} {list(shape)}, the entry says "
                f"data_type {entry.data_type} shape {list(entry.shape)}"
            )
        if isinstance(tensor, ir.ExternalTensor):
            graph_dir = Path(str(model.meta.get("q38.path", root / "x"))).parent
            same = _same_file(graph_dir / str(tensor.location), data) and int(tensor.offset or 0) == offset
            if not same or (tensor.length is not None and int(tensor.length) != length):
                return (
                    f"the {role} graph stores {quote(entry.name)} at {tensor.location}@{tensor.offset}, not at "
                    f"{entry.data_file}@{offset} (the shared range)"
                )
    return None


def shared_initializer_problems(
    root: Path,
    sections: Mapping[str, tuple[SharedInitializer, ...]],
    models: Mapping[str, ir.Model | None],
    *,
    files: bool = True,
) -> list[tuple[str, str]]:
    """(key path, problem) of every unsound ``shared_initializers`` entry.

    Args:
        root: the package directory (data files must stay inside it).
        sections: section role (``decoder``, ``mtp``) -> its entries.
        models: role -> loaded graph (None: it could not be loaded; the layout rules say why)
            for every graph that shares weights (the decoder and each section with entries).
        files: also report entries whose byte range or data file is unsound (``q38 check``
            leaves those to the path-field rules, so one fault is one violation).

    """
    problems = []
    for role, entries in sections.items():
        for i, entry in enumerate(entries):
            path = f"model.{role}.shared_initializers[{i}]"
            problem = _check_entry(root, path, entry, models, files=files)
            if problem:
                problems.append((path, problem))
    return problems
