"""No two modules of ``plugins/gpufleet`` import each other, directly or round a longer circle.

The graph is grimp's (the engine of import-linter, run by ``make lint``): every import statement
of the package is an edge, at module level, inside a function (a "lazy" import) or under
``if TYPE_CHECKING:`` alike, since each says the two modules know each other's names. A cycle
is a strongly connected component of more than one module; the test names each with the import
lines that close it. A shared name belongs in the module that owns its concept (or a small
module of its own) that both import, never in one of the two.

grimp runs in a child process on a given ``plugins`` folder, so a scratch copy with a planted
cycle can be read (in this process ``gpufleet`` is already imported from the real tree).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_GRAPH = """
import json, sys
sys.path.insert(0, sys.argv[1])
import grimp

graph = grimp.build_graph("gpufleet", cache_dir=None)
edges = {}
for importer in sorted(graph.modules):
    for imported in sorted(graph.find_modules_directly_imported_by(importer)):
        lines = [
            f"{d['line_number']}: {d['line_contents']}"
            for d in graph.get_import_details(importer=importer, imported=imported)
        ]
        edges.setdefault(importer, {})[imported] = lines
print(json.dumps(edges))
"""


def _edges(plugins: Path) -> dict[str, dict[str, list[str]]]:
    """Importer -> imported -> the import lines, for every module of ``plugins/gpufleet``."""
    done = subprocess.run(
        [sys.executable, "-c", _GRAPH, str(plugins)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _cycles(edges: dict[str, dict[str, list[str]]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative so a deep package cannot exhaust the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    nodes = sorted(set(edges) | {m for targets in edges.values() for m in targets})
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, {}))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def _described(cycle: frozenset[str], edges: dict[str, dict[str, list[str]]]) -> str:
    lines = [f"{len(cycle)} modules import each other: {', '.join(sorted(cycle))}"]
    for importer in sorted(cycle):
        for imported, at in sorted(edges.get(importer, {}).items()):
            if imported in cycle:
                lines.append(f"  {importer} -> {imported} ({'; '.join(at)})")
    return "\n".join(lines)


def test_no_modules_of_gpufleet_import_each_other():
    edges = _edges(ROOT / "plugins")
    cycles = [_described(c, edges) for c in _cycles(edges)]
    assert not cycles, (
        "import cycles in plugins/gpufleet (move the shared names into the module that owns "
        "the concept, or a small module both import):\n" + "\n".join(cycles)
    )


@pytest.mark.parametrize(
    ("module", "line", "cycle"),
    [
        # two modules importing each other at module level: the shared base back to a table
        (
            "gpufleet.store.schema_base",
            "from gpufleet.store import schema_regions  # noqa",
            {"gpufleet.store.schema_base", "gpufleet.store.schema_regions"},
        ),
        # a lazy (function-level) import counts as much as one at the top
        (
            "gpufleet.backends.sim.seeds",
            "def _planted():\n    from gpufleet.backends.sim import programs  # noqa\n",
            {
                "gpufleet.backends.sim.seeds",
                "gpufleet.backends.sim.programs",
                "gpufleet.backends.sim.gpu_health",
            },
        ),
        # so does one made only for type hints
        (
            "gpufleet.backends.ensured",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from gpufleet.backends.base import Ensured as _E  # noqa\n",
            {
                "gpufleet.backends.base",
                "gpufleet.backends.ensured",
            },
        ),
    ],
)
def test_a_planted_cycle_is_named(tmp_path: Path, module: str, line: str, cycle: set[str]):
    plugins = tmp_path / "plugins"
    shutil.copytree(
        ROOT / "plugins" / "gpufleet",
        plugins / "gpufleet",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    path = plugins / Path(*module.split(".")).with_suffix(".py")
    text = path.read_text()
    head, sep, tail = text.partition("from __future__ import annotations\n")
    assert sep, f"{path} has no __future__ import to plant after"
    path.write_text(head + sep + line + "\n" + tail)

    cycles = _cycles(_edges(plugins))

    assert any(cycle <= c for c in cycles), cycles
