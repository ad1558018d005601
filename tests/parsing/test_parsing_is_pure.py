"""The parsing layer stays pure: the one function that opens a file is the NCCL log reader.

The import contracts (pyproject.toml) keep clients and higher layers out of ``gpufleet.parsing``;
this test covers what they cannot see: no module but ``nccl_log/reader.py`` touches the file
system or the process, and nothing of ours is imported but ``gpufleet.errors`` and
``gpufleet.parsing`` itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

PARSING = Path(__file__).resolve().parents[2] / "plugins" / "gpufleet" / "parsing"
READER = PARSING / "nccl_log" / "reader.py"
IO_MODULES = {"os", "pathlib", "io", "shutil", "subprocess", "socket", "tempfile", "glob"}
IO_CALLS = {"open"}


def _imports(tree: ast.AST) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _io_uses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = [name for name in _imports(tree) if name.split(".")[0] in IO_MODULES]
    found += [
        f"{node.func.id}()"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in IO_CALLS
    ]
    return found


def test_only_the_nccl_log_reader_does_io():
    modules = sorted(PARSING.rglob("*.py"))
    assert READER in modules
    offenders = {
        str(path.relative_to(PARSING)): uses
        for path in modules
        if path != READER and (uses := _io_uses(path))
    }
    assert offenders == {}
    assert _io_uses(READER), "the reader opens the file: if it no longer does, update this test"


def test_imports_nothing_of_ours_but_errors_and_parsing():
    offenders: dict[str, list[str]] = {}
    for path in sorted(PARSING.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        ours = [
            name
            for name in _imports(tree)
            if name.split(".")[0] == "gpufleet"
            and name != "gpufleet.errors"
            and name != "gpufleet.parsing"
            and not name.startswith("gpufleet.parsing.")
        ]
        if ours:
            offenders[str(path.relative_to(PARSING))] = ours
    assert offenders == {}
