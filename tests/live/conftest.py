"""Fixtures for tests against a live Airflow (the harness: tests/live/airflow_live/). Markers:
``slow``, ``live``."""

from __future__ import annotations

import contextlib
import importlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.live.airflow_live import LiveAirflow, start_airflow, venv_bin

LIVE_DAGS = Path(__file__).resolve().parent / "dags"
REPO_DAGS = Path(__file__).resolve().parents[2] / "dags"

# printed in the terminal summary: what ran where, and log tails when a test failed
_INFO: list[str] = []
_REPORTS: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes more than a few seconds")
    config.addinivalue_line("markers", "live: starts a real Airflow (api-server, scheduler, ...)")


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    for line in _INFO:
        terminalreporter.write_line(line)
    for report in _REPORTS:
        terminalreporter.section("live Airflow logs")
        terminalreporter.write_line(report)


# Latency for the tests, beyond the harness's own settings (bench/nightly_scale.py measures
# the harness's deployment as it is):
_QUICKER = {
    # eight tasks at once (two workers of four, ``worker_concurrency``): the scheduled nightly's
    # mapped validations of two clusters run side by side, and the ci_probe runs beside them
    # (with four slots they queued behind each other)
    "AIRFLOW__CORE__PARALLELISM": "8",
    # an idle scheduler looks again after 0.25 s (default 1): a task whose upstream finished,
    # or whose trigger fired, is queued sooner (0.4 s a step on average; the nightly's cluster
    # run is ten steps in a row); an idle scheduler then takes ~10% of a core (was ~3%)
    "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.25",
}

# what the first live tests import: the CLI with its REST client (test_trigger_live.py runs it
# in this process) and Airflow (tests/conftest.py's trigger clock): 3 to 7 s on a busy 2-core
# machine
_IMPORT_AHEAD = (
    "gpufleet.cli",
    "gpufleet.cli.trigger_cmd",
    "gpufleet.cli.airflow_api",
    "gpufleet.airflow.triggers",
)


def _import_ahead() -> None:
    """Import ``_IMPORT_AHEAD`` while the live Airflow starts and this process only waits."""
    for name in _IMPORT_AHEAD:
        # one that fails raises again, with its own error, where a test imports it
        with contextlib.suppress(Exception):
            importlib.import_module(name)


@pytest.fixture(scope="session")
def live_fleet_dir(tmp_path_factory) -> Path:
    """The simulated fleet and ledger the live Airflow runs the repo's DAGs on."""
    return tmp_path_factory.mktemp("live-fleet")


@pytest.fixture(scope="module")
def airflow(
    request: pytest.FixtureRequest, live_fleet_dir, tmp_path_factory
) -> Iterator[LiveAirflow]:
    """The session's one live Airflow (api-server, scheduler, dag-processor, triggerer): the
    repo's DAGs and the CI probe (``tests/live/dags``) in one DAGs folder, on the fleet in
    ``live_fleet_dir``. Every live test is in one module (so one xdist worker starts it); it
    is stopped when that module ends, so its scheduler and DAG parsing do not share the two
    cores with the rest of the session. If a test failed, its logs are kept and their tails
    printed."""
    if not (venv_bin() / "airflow").exists():
        pytest.skip(f"no Airflow at {venv_bin()}: create the virtualenv first")
    dags = tmp_path_factory.mktemp("live-dags")
    for source in [*sorted(REPO_DAGS.glob("*.py")), *sorted(LIVE_DAGS.glob("*.py"))]:
        (dags / source.name).symlink_to(source)
    began = time.monotonic()
    live = start_airflow(
        dags,
        extra_env={"GPUFLEET_STATE_DIR": str(live_fleet_dir), **_QUICKER},
        while_starting=_import_ahead,
        worker_concurrency=4,
    )
    steps = ", ".join(f"{step} at {at:.1f}s" for step, at in live.startup.items())
    _INFO.append(
        f"live Airflow {live.url} on {live.backend} ({live.database}), "
        f"dags {live.dags_folder}: up in {time.monotonic() - began:.1f}s ({steps})"
    )
    failed_before = request.session.testsfailed
    yield live
    failed = request.session.testsfailed > failed_before
    if failed:
        _REPORTS.append(f"kept {live.home} ({live.backend}: {live.database})\n{live.log_tails()}")
    live.stop(keep=failed or os.environ.get("GPUFLEET_LIVE_KEEP") == "1")
