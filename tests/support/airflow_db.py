"""Airflow's migrated metadata DB (SQLite), made once per test run and copied by whoever needs
one: each worker's own Airflow home (``tests/conftest.py``'s ``airflow_db``) and the browser
tests' api-server (``tests/browser/conftest.py``). An ``airflow db migrate`` costs about 4
CPU-s; the first process that asks migrates it under a lock, in the folder the run's controller
named (``GPUFLEET_TEST_MIGRATED_HOME``, inherited by the workers it starts)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

MIGRATED_HOME_ENV = "GPUFLEET_TEST_MIGRATED_HOME"


def venv_airflow() -> str:
    return str(Path(sys.executable).parent / "airflow")


def migrated_db() -> Path:
    """The run's migrated metadata DB, made by the first process that asks."""
    template = Path(os.environ[MIGRATED_HOME_ENV])
    template.mkdir(parents=True, exist_ok=True)
    with open(template / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (template / "done").exists():
            env = os.environ | {
                "AIRFLOW_HOME": str(template),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{template}/airflow.db",
            }
            proc = subprocess.run(
                [venv_airflow(), "db", "migrate"], capture_output=True, text=True, env=env
            )
            assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
            (template / "done").touch()
    return template / "airflow.db"


def copy_migrated_db(to: Path) -> None:
    """A copy of the run's migrated metadata DB at ``to``."""
    shutil.copyfile(migrated_db(), to)
