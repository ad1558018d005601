"""``store/`` and ``services/`` never read the wall clock: time is injected.

Every time they record or compare comes from a ``gpufleet.domain.clock.Clock`` the entry point
chose (the operators, the CLI, the UI app: ``SYSTEM_CLOCK``; a test: a clock it advances): the
ledger's (``Ledger(clock=...)``), the backend's (the simulated fleet's), or an explicit
``now``. A read of the machine's clock below the entry points is a time no test can move, so
this scan refuses, in ``plugins/gpufleet/store`` and ``plugins/gpufleet/services``:

- ``datetime.now``, ``datetime.utcnow``, ``datetime.today`` and ``date.today`` (however
  ``datetime`` was imported or aliased), called or passed as a function;
- ``time.time``, ``time.monotonic``, ``time.perf_counter`` (and their ``_ns`` forms), the
  same, and importing them by name (``from time import monotonic``).

Not refused: ``datetime.fromtimestamp(clock.time(), UTC)``, arithmetic on given datetimes, and
``time.sleep`` (a wait, not a read).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "plugins" / "gpufleet"
SCANNED = [PACKAGE / "store", PACKAGE / "services"]

TIME_READS = {
    "time",
    "time_ns",
    "monotonic",
    "monotonic_ns",
    "perf_counter",
    "perf_counter_ns",
}
DATETIME_READS = {"now", "utcnow", "today"}  # on datetime.datetime
DATE_READS = {"today"}  # on datetime.date


class _Scan(ast.NodeVisitor):
    """The wall-clock reads of one module: ``(line, what)``."""

    def __init__(self) -> None:
        self.time_modules: set[str] = set()  # names bound to the ``time`` module
        self.datetime_modules: set[str] = set()  # ... to the ``datetime`` module
        self.datetime_classes: set[str] = set()  # ... to ``datetime.datetime``
        self.date_classes: set[str] = set()  # ... to ``datetime.date``
        self.found: list[tuple[int, str]] = []

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            bound = alias.asname or alias.name
            if alias.name == "time":
                self.time_modules.add(bound)
            elif alias.name == "datetime":
                self.datetime_modules.add(bound)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            bound = alias.asname or alias.name
            if node.module == "time" and alias.name in TIME_READS:
                self.found.append((node.lineno, f"from time import {alias.name}"))
            elif node.module == "datetime" and alias.name == "datetime":
                self.datetime_classes.add(bound)
            elif node.module == "datetime" and alias.name == "date":
                self.date_classes.add(bound)

    def _kind(self, node: ast.expr) -> str | None:
        """What ``node`` names: the time module, the datetime class or the date class."""
        if isinstance(node, ast.Name):
            if node.id in self.time_modules:
                return "time"
            if node.id in self.datetime_classes:
                return "datetime"
            if node.id in self.date_classes:
                return "date"
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in self.datetime_modules
            and node.attr in ("datetime", "date")
        ):
            return node.attr
        return None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        kind = self._kind(node.value)
        reads = {"time": TIME_READS, "datetime": DATETIME_READS, "date": DATE_READS}
        if kind is not None and node.attr in reads[kind]:
            self.found.append((node.lineno, f"{kind}.{node.attr}"))
        self.generic_visit(node)


def wall_clock_reads(source: str) -> list[tuple[int, str]]:
    """Where ``source`` reads the wall clock: ``(line, what)`` in order."""
    tree = ast.parse(source)
    scan = _Scan()
    for node in ast.walk(tree):  # the imports first, wherever they are (a function's own)
        if isinstance(node, ast.Import):
            scan.visit_Import(node)
        elif isinstance(node, ast.ImportFrom):
            scan.visit_ImportFrom(node)
    scan.visit(tree)
    return sorted(set(scan.found))


def _modules() -> list[Path]:
    return sorted(p for folder in SCANNED for p in folder.rglob("*.py"))


def test_store_and_services_read_no_wall_clock():
    modules = _modules()
    assert len(modules) > 40  # the scan sees the layers (a moved folder would pass it silently)
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in modules
        for line, what in wall_clock_reads(path.read_text())
    ]
    assert not found, (
        "store/ and services/ read the wall clock; take the time from the injected clock (the "
        "ledger's ``clock``, the backend's, or a ``now`` the caller passes):\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    "source",
    [
        "from datetime import UTC, datetime\nx = datetime.now(UTC)",
        "from datetime import datetime as dt\nx = dt.utcnow()",
        "import datetime\nx = datetime.datetime.now()",
        "import datetime as d\nx = d.date.today()",
        "from datetime import date\nx = date.today()",
        "import time\nx = time.time()",
        "import time as _time\nx = _time.monotonic()",
        "import time\nx = time.perf_counter_ns()",
        "import time\nstamp = time.time  # passed on, read later",
        "from time import monotonic",
        "def f():\n    import time\n    return time.time()",
    ],
)
def test_the_scan_finds_each_form_of_a_read(source):
    assert wall_clock_reads(source), source


@pytest.mark.parametrize(
    "source",
    [
        "from datetime import UTC, datetime\nx = datetime.fromtimestamp(clock.time(), UTC)",
        "x = self.clock.now()",
        "x = ledger.clock.now().isoformat()",
        "import time\ntime.sleep(1)",
        "from datetime import datetime\ndef f(now: datetime): return now.date()",
    ],
)
def test_the_scan_leaves_injected_time_alone(source):
    assert wall_clock_reads(source) == []
