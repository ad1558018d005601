"""Fixtures for tests against a live Airflow (see airflow_live.py). Markers: ``slow``, ``live``."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from airflow_live import LiveAirflow, start_airflow, venv_bin  # noqa: E402

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


@pytest.fixture(scope="session")
def live_airflow(request: pytest.FixtureRequest) -> Iterator[Callable[..., LiveAirflow]]:
    """Factory: ``live_airflow(dags_folder=LIVE_DAGS, extra_env=None) -> LiveAirflow``.

    One Airflow per distinct (dags folder, extra env) for the whole session; all are stopped at
    the end. If any test failed, the component logs are kept and their tails printed.
    """
    if not (venv_bin() / "airflow").exists():
        pytest.skip(f"no Airflow at {venv_bin()}: create the virtualenv first")
    started: dict[tuple, LiveAirflow] = {}

    def factory(
        dags_folder: Path | str = LIVE_DAGS, extra_env: Mapping[str, str] | None = None
    ) -> LiveAirflow:
        key = (str(Path(dags_folder).resolve()), tuple(sorted((extra_env or {}).items())))
        if key not in started:
            began = time.monotonic()
            live = started[key] = start_airflow(dags_folder, extra_env=extra_env)
            _INFO.append(
                f"live Airflow {live.url} on {live.backend} ({live.database}), "
                f"dags {live.dags_folder}: up in {time.monotonic() - began:.1f}s"
            )
        return started[key]

    yield factory

    failed = request.session.testsfailed > 0
    keep = failed or os.environ.get("GPUFLEET_LIVE_KEEP") == "1"
    for live in started.values():
        if failed:
            _REPORTS.append(
                f"kept {live.home} ({live.backend}: {live.database})\n{live.log_tails()}"
            )
        live.stop(keep=keep)


@pytest.fixture(scope="session")
def live_fleet_dir(tmp_path_factory) -> Path:
    """The simulated fleet and ledger the session's live Airflow runs the repo's DAGs on."""
    return tmp_path_factory.mktemp("live-fleet")


@pytest.fixture(scope="session")
def airflow(live_airflow, live_fleet_dir, tmp_path_factory) -> LiveAirflow:
    """The session's one live Airflow: the repo's DAGs and the CI probe
    (``tests/live/dags``) in one DAGs folder, on the fleet in ``live_fleet_dir``."""
    dags = tmp_path_factory.mktemp("live-dags")
    for source in [*sorted(REPO_DAGS.glob("*.py")), *sorted(LIVE_DAGS.glob("*.py"))]:
        (dags / source.name).symlink_to(source)
    return live_airflow(dags, extra_env={"GPUFLEET_STATE_DIR": str(live_fleet_dir)})
