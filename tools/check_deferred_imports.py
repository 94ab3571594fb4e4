"""Fail on a function-level import in q38/ or contracts/ that does not say why it is deferred.

Issue 23: imports go at module level, except where deferring one keeps ``q38 --help`` (or an
importer of a light module) free of a heavy import, or where a runtime condition needs it. Each
import inside a ``def`` carries its reason as a ``# deferred: <reason>`` comment, on the import's
own line(s) or on the comment line just above it. Run by ``nox -s lint``:
``python tools/check_deferred_imports.py [ROOT]`` (ROOT: the repository, default this script's).
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

PACKAGES = ("q38", "contracts")
REASON = re.compile(r"#\s*deferred:\s*\S")


def _comments(source: str) -> dict[int, str]:
    """Line number -> the comment on that line (tokenize: a ``#`` inside a string is not one)."""
    out: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string
    return out


def _function_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement inside a function body (nested functions and classes included)."""
    seen: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in seen:
                    seen.add(id(node))
                    yield node


def missing_reasons(path: Path) -> list[tuple[int, str]]:
    """(line, statement) of each function-level import in ``path`` without a ``# deferred:`` reason."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    comments = _comments(source)
    out = []
    for node in _function_imports(ast.parse(source, filename=str(path))):
        end = node.end_lineno or node.lineno
        own = any(REASON.match(comments.get(n, "")) for n in range(node.lineno, end + 1))
        above = node.lineno >= 2 and lines[node.lineno - 2].lstrip().startswith("#") and bool(
            REASON.match(comments.get(node.lineno - 1, ""))
        )
        if not (own or above):
            out.append((node.lineno, ast.unparse(node)))
    return sorted(out)


def main(argv: list[str]) -> int:
    """Check every ``.py`` file under q38/ and contracts/; 1 (and the list on stderr) when any lacks a reason."""
    root = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent
    problems = []
    files = 0
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            files += 1
            for line, stmt in missing_reasons(path):
                problems.append(f"{path.relative_to(root).as_posix()}:{line}: {stmt}")
    if problems:
        sys.stderr.write(
            "function-level imports without a '# deferred: <reason>' comment (hoist them to module level,\n"
            "or say which heavy import or runtime condition the deferral is for):\n"
        )
        sys.stderr.write("".join(f"  {p}\n" for p in problems))
        sys.stderr.write(f"{len(problems)} function-level import(s) without a reason\n")
        return 1
    if files == 0:
        sys.stderr.write(f"{root}: no q38/ or contracts/ sources found\n")
        return 1
    sys.stdout.write(f"function-level imports: every one in {files} files says why it is deferred\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
