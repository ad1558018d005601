"""The environment every component (and every task) of the deployment runs with
(``airflow_env``)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from tests.live.airflow_live.common import PLUGINS_DIR, USERNAME, VIEWER, venv_bin


def airflow_env(
    home: Path,
    dags_folder: Path,
    sql_alchemy_conn: str,
    port: int,
    passwords_file: Path,
    extra_env: Mapping[str, str] | None = None,
    celery: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment every component (and every task) runs with. It writes its bytecode
    caches as a deployment does, whatever the calling shell says (PYTHONDONTWRITEBYTECODE):
    without them every task process compiles gpufleet from source, a third of a validation
    task's CPU (docs/PERFORMANCE.md)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AIRFLOW")
        and k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")
    }
    bin_dir = venv_bin()
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "PATH": os.pathsep.join([str(bin_dir), env.get("PATH", "/usr/bin:/bin")]),
            "VIRTUAL_ENV": str(bin_dir.parent),
            "PYTHONPATH": str(PLUGINS_DIR),
            "PYTHONUNBUFFERED": "1",
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS_DIR),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sql_alchemy_conn,
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USERNAME}:admin,{VIEWER}:viewer",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords_file),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),  # HS512: 64 bytes
            "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            # a new DAG file is found within 5 s; each file is parsed once (its DAGs do not
            # change while a test runs): re-parsing the six files every 5 s took a sixth of a
            # core all session long. Callbacks (a heartbeat timeout's retry) are run at once
            # whatever the interval.
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__SCHEDULER__JOB_HEARTBEAT_SEC": "2",
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "60",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs" / "tasks"),
            # a task whose process died (its worker killed) is failed and retried soon: a
            # running task heartbeats every 2 s (default 5), so a live one misses four in a
            # row before the 10 s timeout declares it dead (was 20 s against beats every 5 s)
            "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "2",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "10",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "1",
            "AIRFLOW__GPUFLEET__RETRY_DELAY_SECONDS": "1",
            # the planner looks at the cluster runs it started every second
            "AIRFLOW__GPUFLEET__RUN_POLL_SECONDS": "1",
            # a restarted triggerer takes over the triggers of one that stopped heartbeating
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
        }
    )
    if celery:
        env.update(
            {
                "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
                # as deployed (docker-compose.yaml): each worker imports gpufleet once, before
                # it forks its task processes (gpufleet.airflow.preload)
                "AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS": "gpufleet.airflow.workers.CELERY_CONFIG",
                "AIRFLOW__CELERY__BROKER_URL": celery["broker"],
                "AIRFLOW__CELERY__RESULT_BACKEND": celery["results"],
                "AIRFLOW__OPERATORS__DEFAULT_QUEUE": celery["queue"],
                "GPUFLEET_LEDGER_URL": celery["ledger"],
            }
        )
    if extra_env:
        env.update(extra_env)
    return env
