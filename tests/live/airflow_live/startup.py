"""Bringing a throwaway Airflow up (``start_airflow``) and waiting until it is healthy and has
parsed every DAG file."""

from __future__ import annotations

import json
import secrets
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import requests

from tests.live.airflow_live.common import (
    COMPONENTS,
    PLUGINS_DIR,
    USERNAME,
    VIEWER,
    WORKERS,
    LiveAirflowError,
    free_port,
    run_step,
    venv_bin,
)
from tests.live.airflow_live.databases import create_migrated_postgres, pg_admin, pg_url
from tests.live.airflow_live.deployment import LiveAirflow
from tests.live.airflow_live.environment import airflow_env
from tests.live.airflow_live.preflight import check_plugins_folder
from tests.live.airflow_live.services import postgres_available, redis_available, redis_url


def start_airflow(
    dags_folder: Path | str,
    extra_env: Mapping[str, str] | None = None,
    startup_timeout: float = 180.0,
    unpause: bool = True,
    while_starting: Callable[[], object] | None = None,
    worker_concurrency: int = 2,
) -> LiveAirflow:
    """Bring up a throwaway Airflow serving ``dags_folder``; the caller must ``stop()`` it.
    ``while_starting`` is called once the components are started, before waiting for them
    (work of the caller's that need not wait: the components take 15 s and more to start);
    ``worker_concurrency``: task processes per Celery worker."""
    dags_folder = Path(dags_folder).resolve()
    airflow = venv_bin() / "airflow"
    if not airflow.exists():
        raise LiveAirflowError(f"{airflow} not found: create the virtualenv first")
    check_plugins_folder(
        Path((extra_env or {}).get("AIRFLOW__CORE__PLUGINS_FOLDER") or PLUGINS_DIR)
    )

    home = Path(tempfile.mkdtemp(prefix="gpufleet-live-"))
    (home / "logs").mkdir()
    port = free_port()
    password = secrets.token_urlsafe(16)
    viewer_password = secrets.token_urlsafe(16)
    passwords_file = home / "simple_auth_manager_passwords.json"
    passwords_file.write_text(
        json.dumps({USERNAME: password, VIEWER: viewer_password}) + "\n", encoding="utf-8"
    )

    celery: dict[str, str] | None = None
    began = time.monotonic()
    if postgres_available():
        backend = "postgresql"
        database = f"gpufleet_live_{secrets.token_hex(6)}"
        sql_alchemy_conn = pg_url(database)
        if redis_available():
            celery = {
                "broker": redis_url(),
                "results": "db+" + pg_url(database),
                "queue": database,
                "ledger": pg_url(f"{database}_ledger"),
            }
    else:
        backend = "sqlite"
        database = str(home / "airflow.db")  # absolute, as Airflow requires
        sql_alchemy_conn = f"sqlite:///{database}"

    env = airflow_env(home, dags_folder, sql_alchemy_conn, port, passwords_file, extra_env, celery)
    live = LiveAirflow(
        home=home,
        url=f"http://127.0.0.1:{port}",
        port=port,
        username=USERNAME,
        password=password,
        viewer_password=viewer_password,
        env=env,
        dags_folder=dags_folder,
        backend=backend,
        database=database,
        executor="CeleryExecutor" if celery else "LocalExecutor",
        queue=celery["queue"] if celery else None,
        ledger_database=f"{database}_ledger" if celery else None,
        worker_concurrency=worker_concurrency,
    )
    try:
        if backend == "postgresql":
            made = create_migrated_postgres(database, env, live.log_dir, airflow)
            if celery:
                pg_admin(f'CREATE DATABASE "{database}_ledger"')
        else:
            made = "migrated"
            run_step("db-migrate", [str(airflow), "db", "migrate"], env, live.log_dir, 300)
        live.startup[f"database {made}"] = time.monotonic() - began
        # no ``airflow dags reserialize``: the DAG processor's first pass writes the same
        # DAGs while the api-server starts (waited for below), and a reserialize is ~6 s more
        for name in (*COMPONENTS, *(WORKERS if celery else ())):
            live.start_component(name)
        if while_starting:
            while_starting()
        dags = _wait_ready(live, startup_timeout)
        live.startup["healthy, DAGs parsed"] = time.monotonic() - began
        live.wait_workers_ready(startup_timeout)
        live.startup["workers ready"] = time.monotonic() - began
        # unpaused only now: a task started before the api-server answers could spend its
        # execution API retries on a server still starting
        if unpause:
            for dag in dags:
                if dag["is_paused"]:
                    live.unpause(dag["dag_id"])
    except BaseException:
        live.stop(keep=True)
        print(
            f"live Airflow failed to start; kept {home}\n{live.log_tails()}",
            file=sys.stderr,
        )
        raise
    return live


def dag_files(dags_folder: Path) -> list[str]:
    """The files of ``dags_folder`` the DAG processor parses (relative paths): Python files
    passing Airflow's safe-mode check (the text holds "airflow" and "dag" or "asset"). An
    ``.airflowignore`` is not read: the harness's DAG folders have none."""
    found = []
    for path in sorted(dags_folder.rglob("*.py")):
        try:
            text = path.read_bytes().lower()
        except OSError:
            continue
        if b"airflow" in text and (b"dag" in text or b"asset" in text):
            found.append(str(path.relative_to(dags_folder)))
    return found


def _parsed(live: LiveAirflow, expected: set[str]) -> tuple[list[dict[str, Any]], set[str]]:
    """The DAGs (``GET /api/v2/dags``), and which of the ``expected`` files have neither a DAG
    there nor an import error."""
    response = live.request("GET", "/api/v2/dags", params={"limit": 1000})
    response.raise_for_status()
    dags = response.json()["dags"]
    parsed = {d["relative_fileloc"] for d in dags}
    parsed |= {e["filename"] for e in live.import_errors()}
    return dags, expected - parsed


def _wait_ready(live: LiveAirflow, timeout: float) -> list[dict[str, Any]]:
    """Until the api-server answers and reports every component healthy, and every DAG file
    (``dag_files``) has its DAGs in the API or an import error; the DAGs."""
    expected = set(dag_files(live.dags_folder))
    deadline = time.monotonic() + timeout
    last: Any = "no answer"
    while time.monotonic() < deadline:
        live.check_alive()
        try:
            health = live.health()
        except (requests.RequestException, ValueError) as exc:
            last = exc
        else:
            last = health
            statuses = {name: (part or {}).get("status") for name, part in health.items()}
            if statuses and all(status == "healthy" for status in statuses.values()):
                dags, missing = _parsed(live, expected)
                if not missing:
                    return dags
                last = f"healthy; the DAG processor has not parsed {sorted(missing)} yet"
        time.sleep(0.5)
    raise LiveAirflowError(
        f"Airflow at {live.url} not ready after {timeout:g}s (last: {last}; a file that "
        f"defines no DAG but names airflow and dag is never parsed):\n{live.log_tails()}"
    )
