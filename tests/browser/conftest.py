"""Browser tests: a real Chromium, driven by Playwright, against a live api-server.

The session fixture ``fleet_ui`` builds a throwaway Airflow (its own AIRFLOW_HOME, SQLite
metadata DB, sim fleet and ledger), runs two nights of the nightly DAG into it (seed_nights.py)
and serves it with ONE component, ``airflow api-server`` (no scheduler: nothing else may add
runs while the pages are read). The environment and the process handling come from the live
Airflow harness (tests/live/airflow_live/).

Without a browser the tests are skipped, and the end of the run says that only they were
skipped and why. ``GPUFLEET_CHROMIUM`` names the Chromium executable (default: ``chromium`` or
``chromium-browser`` on PATH); pointing it at a missing file shows the no-browser path.
Screenshots go to tests/browser/artifacts/ (git-ignored), kept after the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.live.airflow_live import (
    REPO_ROOT,
    USERNAME,
    VIEWER,
    LiveAirflow,
    LiveAirflowError,
    airflow_env,
    free_port,
    venv_bin,
)
from tests.support.airflow_db import copy_migrated_db
from tests.support.skips import BROWSER_SKIP

HERE = Path(__file__).resolve().parent
ARTIFACTS = HERE / "artifacts"
INSTALL_HINT = "apt-get install -y chromium"
# generous: on a loaded 2-core CI machine the UI's first render of a page takes 10 s and more
UI_TIMEOUT_MS = 60_000
_TIMINGS: list[str] = []  # where the fixture's time went, printed at the end


def chromium_executable() -> tuple[str | None, str]:
    """(path, "") of the Chromium to drive, or (None, why there is none)."""
    named = os.environ.get("GPUFLEET_CHROMIUM")
    if named:
        if os.path.isfile(named) and os.access(named, os.X_OK):
            return named, ""
        return None, f"GPUFLEET_CHROMIUM={named} is not an executable file"
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found, ""
    return None, f"no Chromium found on PATH ({INSTALL_HINT})"


def browser_skip_reason() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        return f"playwright is not importable ({exc}; pip install -c constraints.txt playwright)"
    return chromium_executable()[1] or None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    browser_items = [item for item in items if item.get_closest_marker("browser")]
    reason = browser_skip_reason() if browser_items else None
    if not reason:
        return
    for item in browser_items:  # tests/conftest.py says so at the very end
        item.add_marker(pytest.mark.skip(reason=f"{BROWSER_SKIP}{reason}"))


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    for line in _TIMINGS:
        terminalreporter.write_line(line)


@dataclass
class FleetUI:
    """The running api-server, who may log in, and what the two nights recorded."""

    live: LiveAirflow
    seed: dict
    chromium: str

    @property
    def url(self) -> str:
        return self.live.url

    @property
    def clean_run(self) -> str:
        return self.seed["nights"][0]["run_id"]

    @property
    def faulty_run(self) -> str:
        return self.seed["nights"][1]["run_id"]


def _seed_nights(env: dict[str, str], home: Path) -> dict:
    log = home / "seed-nights.log"  # not under logs/: its tail would drown the server's
    with log.open("w") as out:
        proc = subprocess.run(
            [str(venv_bin() / "python"), str(HERE / "seed_nights.py")],
            env={**env, "PYTHONPATH": os.pathsep.join([env["PYTHONPATH"], str(REPO_ROOT)])},
            cwd=REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=300,
            check=False,
        )
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("SEED ")]
    if proc.returncode != 0 or not lines:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise LiveAirflowError(f"seeding two nights failed ({proc.returncode}; {log}):\n{tail}")
    return json.loads(lines[-1][len("SEED ") :])


def _wait_answering(live: LiveAirflow, timeout: float = 120) -> None:
    """Until the api-server answers its health route (the other components never start)."""
    deadline = time.monotonic() + timeout
    last: object = "no answer"
    while time.monotonic() < deadline:
        live.check_alive()
        with contextlib.suppress(requests.RequestException, ValueError):
            health = live.health()
            last = health
            if (health.get("metadatabase") or {}).get("status") == "healthy":
                return
        time.sleep(0.5)
    raise LiveAirflowError(f"api-server at {live.url} not answering after {timeout:g}s: {last}")


@pytest.fixture(scope="module")
def fleet_ui(request: pytest.FixtureRequest) -> Iterator[FleetUI]:
    """A live api-server over a fresh Airflow holding a clean night and a fabric-down night."""
    chromium = chromium_executable()[0]  # present: pytest_collection_modifyitems checked
    home = Path(tempfile.mkdtemp(prefix="gpufleet-browser-"))
    (home / "logs").mkdir()
    port = free_port()
    password, viewer_password = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    passwords = home / "simple_auth_manager_passwords.json"
    passwords.write_text(json.dumps({USERNAME: password, VIEWER: viewer_password}))
    database = home / "airflow.db"
    fleet_env = {"GPUFLEET_STATE_DIR": str(home / "gpufleet")}
    env = airflow_env(home, REPO_ROOT / "dags", f"sqlite:///{database}", port, passwords, fleet_env)
    live = LiveAirflow(
        home=home,
        url=f"http://127.0.0.1:{port}",
        port=port,
        username=USERNAME,
        password=password,
        viewer_password=viewer_password,
        env=env,
        dags_folder=REPO_ROOT / "dags",
        backend="sqlite",
        database=str(database),
    )
    airflow = venv_bin() / "airflow"
    began = time.monotonic()
    try:
        copy_migrated_db(database)  # the run's migrated DB (tests.support.airflow_db)
        migrated = time.monotonic()
        # the server starts while the nights run: it reads the DB per request, and on two
        # cores its start-up overlaps the nights' waiting on the simulated workloads
        with live.component_log("api-server").open("ab") as out:
            live.processes["api-server"] = subprocess.Popen(
                [str(airflow), "api-server", "--port", str(port), "--host", "127.0.0.1"],
                env=env,
                cwd=home,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: stop() kills uvicorn with it
            )
        seed = _seed_nights(env, home)
        seeded = time.monotonic()
        _wait_answering(live)
        _TIMINGS.append(
            f"browser tests: metadata DB copied in {migrated - began:.0f}s, two nights in "
            f"{seeded - migrated:.0f}s, api-server {live.url} answering "
            f"{time.monotonic() - seeded:.0f}s later"
        )
    except BaseException:
        live.stop(keep=True)
        print(f"browser tests: Airflow failed to start; kept {home}\n{live.log_tails()}")
        raise
    yield FleetUI(live=live, seed=seed, chromium=str(chromium))
    failed = request.session.testsfailed > 0
    if failed:
        print(f"\nbrowser tests: kept {home}\n{live.log_tails()}")
    live.stop(keep=failed)


@pytest.fixture(scope="module")  # Playwright runs an event loop in this process: stop it after
def browser(fleet_ui: FleetUI):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=fleet_ui.chromium, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="module")
def logged_in(browser, fleet_ui: FleetUI):
    """A browser context logged in once through the login form, as the admin user."""
    context = browser.new_context(viewport={"width": 1280, "height": 800}, base_url=fleet_ui.url)
    context.set_default_timeout(UI_TIMEOUT_MS)
    tab = context.new_page()
    tab.goto("/auth/login/")
    tab.locator("input[name=username]").fill(fleet_ui.live.username)
    tab.locator("input[name=password]").fill(fleet_ui.live.password)
    tab.locator("input[name=password]").press("Enter")
    tab.wait_for_url(lambda url: "/auth/login" not in url)
    tab.close()
    yield context
    context.close()


@pytest.fixture
def page(logged_in):
    """A fresh tab in the logged-in context."""
    tab = logged_in.new_page()
    yield tab
    tab.close()


@pytest.fixture
def anonymous_page(browser, fleet_ui: FleetUI):
    """A fresh browser tab that never logged in."""
    context = browser.new_context(viewport={"width": 1280, "height": 800}, base_url=fleet_ui.url)
    context.set_default_timeout(UI_TIMEOUT_MS)
    yield context.new_page()
    context.close()
