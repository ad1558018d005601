"""Test environment: a throwaway AIRFLOW_HOME (migrated once per session) and, per test, a
fresh gpufleet state folder (sim fleet + SQLite ledger), so tests never touch `make run`'s.

Set before anything imports Airflow: Airflow reads its configuration at import.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

import pytest

from tests.support.airflow_db import MIGRATED_HOME_ENV, copy_migrated_db
from tests.support.skips import BROWSER_SKIP

ROOT = Path(__file__).resolve().parents[1]
_HOME = Path(tempfile.mkdtemp(prefix="gpufleet-airflow-home-"))
os.environ.update(
    {
        "AIRFLOW_HOME": str(_HOME),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME}/airflow.db",
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        # a signing key as long as HS512 wants (64 bytes): the one Airflow generates when none
        # is set is 16, and PyJWT warns on every token (InsecureKeyLengthWarning)
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
        "GPUFLEET_STATE_DIR": str(_HOME / "gpufleet"),
    }
)
for var in (
    "GPUFLEET_LEDGER_URL",
    "AIRFLOW_CONN_GPUFLEET_LEDGER",
    "GPUFLEET_CATALOG_DIR",
    "GPUFLEET_INCLUDE_DIR",
    "AIRFLOW_CONN_GPUFLEET_ALERTS",
    "GPUFLEET_SIM_SPEED",  # the sim runs at the real pace; tests move its clock instead
):
    os.environ.pop(var, None)

# Airflow's migrated metadata DB, made once per test run and copied by each worker and the
# browser tests (``tests.support.airflow_db``). The run's controller (or the only process,
# without workers) owns it: its folder goes with the controller's home at the end, and the
# workers it starts inherit the path.
if "PYTEST_XDIST_WORKER" not in os.environ:
    os.environ[MIGRATED_HOME_ENV] = str(_HOME / "migrated")
_migrated = False


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """Airflow's metadata DB in this process's home: a copy of the run's migrated one."""
    global _migrated
    if not _migrated:
        copy_migrated_db(_HOME / "airflow.db")
        _migrated = True
    return _HOME


@pytest.fixture(scope="session")
def aws_server():
    """moto behind the AWS fake (``tests/support/aws_fake.py``), started once per test process
    when a test first asks for it; tests take ``aws``, which empties it."""
    from tests.support.aws_fake import AwsFake

    with AwsFake() as fake:
        yield fake


@pytest.fixture
def aws(aws_server, monkeypatch):
    """The AWS fake, emptied, with boto3 pointed at it (``AWS_ENDPOINT_URL``, test
    credentials, no profile)."""
    aws_server.reset()
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    for key, value in aws_server.environ().items():
        monkeypatch.setenv(key, value)
    return aws_server


@pytest.fixture
def fleet_state(tmp_path, monkeypatch) -> Path:
    """A fresh sim fleet and SQLite ledger for this test. The sim's clock is frozen: time
    passes only where something advances it (a trigger's sleep, ``tests.support.fleet``'s
    waits, a test's own ``advance``), never while a test waits."""
    from tests.support.fleet import frozen_sim_clock

    state = tmp_path / "gpufleet"
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(state))
    frozen_sim_clock()
    return state


@pytest.fixture
def level1_every_night(tmp_path, monkeypatch) -> Path:
    """The shipped sim catalog with every pool's ``level1_every_nights`` at 1: for tests of
    the GPU health check itself, where every idle node runs ``dcgmi diag`` each night (the
    rotation has its own tests: tests/services/validation/test_level1_rotation.py)."""
    return _catalog_copy(tmp_path, monkeypatch, "level1_every_nights")


@pytest.fixture
def full_test_every_night(tmp_path, monkeypatch) -> Path:
    """The shipped sim catalog with every filesystem's ``full_test_every_nights`` at 1 (it
    ships at 7): for tests of a night-after-night story where each night runs the full test
    (the cadence has its own tests: tests/services/validation/test_lustre_once.py)."""
    return _catalog_copy(tmp_path, monkeypatch, "full_test_every_nights")


def _catalog_copy(tmp_path, monkeypatch, field: str) -> Path:
    """The catalog in use (the shipped one, or another fixture's copy) with ``field`` at 1
    everywhere, as this test's catalog."""
    import os
    import re

    from gpufleet.config.paths import include_dir

    source = Path(os.environ.get("GPUFLEET_CATALOG_DIR") or include_dir() / "fleet")
    folder = tmp_path / f"catalog-{field}-1"
    folder.mkdir()
    for src in source.glob("*.yaml"):
        text = re.sub(rf"{field}: \d+", f"{field}: 1", src.read_text())
        (folder / src.name).write_text(text)
    monkeypatch.setenv("GPUFLEET_CATALOG_DIR", str(folder))
    return folder


@pytest.fixture(autouse=True)
def trigger_clock(monkeypatch):
    """Triggers poll and wait on the sim's clock, advanced instead of slept on
    (``tests.support.fleet.SimTriggerClock``); a test may install its own clock."""
    from gpufleet.airflow.triggers import PollingTrigger
    from tests.support.fleet import SimTriggerClock

    monkeypatch.setattr(PollingTrigger, "clock", SimTriggerClock())


def pytest_collection_modifyitems(config, items):
    """Files with end-to-end tests (``slow``) first, every file's tests kept together and in
    their order. ``make test`` hands files to its workers in this order (``--dist loadfile
    --no-loadscope-reorder``), so the long files start early instead of one of them running
    alone at the end while the other workers wait."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable: the rest keeps its order


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failure on SQLite's "disk I/O error" (seen once in CI on this worker's metadata DB, never
    reproduced) carries what would explain it: the metadata DB and its folder as the worker
    sees them, the disk's free space, and this process's open handles on the folder."""
    report = yield
    if report.failed and "disk I/O error" in str(report.longrepr):
        report.sections.append(("sqlite disk I/O error: the worker's state", _home_state()))
    return report


def _home_state() -> str:
    import shutil

    lines = [f"AIRFLOW_HOME {_HOME} exists: {_HOME.exists()}"]
    for path in sorted(_HOME.glob("airflow.db*")) if _HOME.exists() else []:
        st = path.stat()
        lines.append(f"{path.name}: {st.st_size} bytes, inode {st.st_ino}, links {st.st_nlink}")
    free = shutil.disk_usage(tempfile.gettempdir()).free
    lines.append(f"free in {tempfile.gettempdir()}: {free / 2**20:.0f} MiB")
    from tests.support.procfs import open_files_under

    lines += [f"open: {path}" for path in open_files_under(str(_HOME))]
    return "\n".join(lines)


def pytest_unconfigure(config):
    """After pytest's last line, so nobody misses it: only the browser tests were skipped, and
    why. Read from the reports the terminal received, so it holds with workers (xdist) too."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or hasattr(config, "workerinput"):
        return
    reasons, skipped = [], 0
    for report in reporter.stats.get("skipped", []):
        text = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
        if report.nodeid.startswith("tests/browser/") and BROWSER_SKIP in text:
            reasons.append(text.split(BROWSER_SKIP, 1)[1])
            skipped += 1
    if skipped:
        reporter.write_line(
            f"{BROWSER_SKIP}{reasons[0]}. Only the {skipped} browser tests (tests/browser) "
            "were skipped for it; every other test ran as usual.",
            yellow=True,
            bold=True,
        )


def pytest_sessionfinish(session, exitstatus):
    import shutil

    shutil.rmtree(_HOME, ignore_errors=True)
