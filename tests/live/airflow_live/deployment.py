"""The running Airflow (``LiveAirflow``): its components as process groups, the REST calls the
harness itself needs, and its teardown."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from tests.live.airflow_live.common import PLUGINS_DIR, WORKERS, LiveAirflowError, tail, venv_bin
from tests.live.airflow_live.databases import pg_admin
from tests.live.airflow_live.services import forget_queue


@dataclass
class LiveAirflow:
    """A running Airflow. ``url`` is the api-server; log in as ``username``/``password``."""

    home: Path
    url: str
    port: int
    username: str
    password: str
    viewer_password: str
    env: dict[str, str]
    dags_folder: Path
    backend: str  # "postgresql" or "sqlite"
    database: str  # database name (postgresql) or file path (sqlite)
    executor: str = "LocalExecutor"  # or "CeleryExecutor"
    queue: str | None = None  # the Celery queue of this Airflow's workers
    ledger_database: str | None = None  # the gpufleet ledger's own PostgreSQL database
    worker_concurrency: int = 2  # task processes per Celery worker
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    startup: dict[str, float] = field(default_factory=dict)  # seconds from the start to each step
    _token: str | None = None

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    def component_log(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def cli_env(self, **extra: str) -> dict[str, str]:
        """Environment for the ``gpufleet`` CLI aimed at this Airflow."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_AIRFLOW_")}
        env.update(
            GPUFLEET_AIRFLOW_URL=self.url,
            GPUFLEET_AIRFLOW_USER=self.username,
            GPUFLEET_AIRFLOW_PASSWORD=self.password,
            PYTHONPATH=os.pathsep.join(filter(None, [str(PLUGINS_DIR), env.get("PYTHONPATH")])),
        )
        env.update(extra)
        return env

    # the REST calls the harness itself needs (tests use gpufleet.cli.airflow_api)
    def token(self) -> str:
        if not self._token:
            response = requests.post(
                f"{self.url}/auth/token",
                json={"username": self.username, "password": self.password},
                timeout=30,
            )
            response.raise_for_status()
            self._token = response.json()["access_token"]
        return self._token

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.token()}"}
        kwargs.setdefault("timeout", 30)
        return requests.request(method, f"{self.url}{path}", headers=headers, **kwargs)

    def health(self) -> dict[str, Any]:
        return requests.get(f"{self.url}/api/v2/monitor/health", timeout=5).json()

    def dag_ids(self) -> list[str]:
        response = self.request("GET", "/api/v2/dags", params={"limit": 1000})
        response.raise_for_status()
        return [d["dag_id"] for d in response.json()["dags"]]

    def unpause(self, dag_id: str) -> None:
        response = self.request("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": False})
        response.raise_for_status()

    def import_errors(self) -> list[dict[str, Any]]:
        response = self.request("GET", "/api/v2/importErrors")
        response.raise_for_status()
        return response.json().get("import_errors", [])

    def check_alive(self) -> None:
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                raise LiveAirflowError(
                    f"airflow {name} exited with {proc.returncode}:\n{self.log_tails()}"
                )

    def log_tails(self, lines: int = 40) -> str:
        parts = []
        for log in sorted(self.log_dir.glob("*.log")):
            parts.append(f"----- {log} (last {lines} lines) -----\n{tail(log, lines)}")
        return "\n".join(parts)

    def component_args(self, name: str) -> list[str]:
        """The ``airflow`` command line of one component."""
        if name == "api-server":
            return [name, "--port", str(self.port), "--host", "127.0.0.1"]
        if name in WORKERS:
            return [
                "celery",
                "worker",
                "--queues",
                str(self.queue),
                "--concurrency",
                str(self.worker_concurrency),
                "--celery-hostname",
                # this deployment's own node name: what a killed worker leaves in Redis (its
                # remote-control binding) is found by it and removed (``forget_queue``)
                f"{name}.{self.queue}@%h",
                "--skip-serve-logs",
                "--without-gossip",
                "--without-mingle",
            ]
        return [name]

    def start_component(self, name: str) -> subprocess.Popen:
        """Start one component as its own process group (killed as one), its output appended
        to ``logs/<name>.log``."""
        with self.component_log(name).open("ab") as out:
            proc = subprocess.Popen(
                [str(venv_bin() / "airflow"), *self.component_args(name)],
                env=self.env,
                cwd=self.home,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.processes[name] = proc
        return proc

    def kill_component(self, name: str) -> None:
        """SIGKILL a component's process group and every process descended from it (task
        processes that started sessions of their own too), as a machine that dies would, and
        wait for its leader; it is no longer one of ``processes``."""
        proc = self.processes.pop(name)
        doomed = descendants(proc.pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def component_holding(self, pid: int) -> str | None:
        """The component that process ``pid`` (a task's) descends from, if any (a task process
        may start a session of its own, so its process group alone does not tell)."""
        leaders = {p.pid: n for n, p in self.processes.items()}
        while pid and pid > 1:
            if pid in leaders:
                return leaders[pid]
            pid = _parent(pid)
        return None

    def wait_workers_ready(self, timeout: float) -> None:
        """Until every Celery worker's log says it is ready to take tasks."""
        deadline = time.monotonic() + timeout
        pending = [n for n in WORKERS if n in self.processes]
        while pending and time.monotonic() < deadline:
            self.check_alive()
            pending = [n for n in pending if " ready." not in tail(self.component_log(n), 400)]
            if pending:
                time.sleep(0.5)
        if pending:
            raise LiveAirflowError(f"Celery workers not ready: {pending}\n{self.log_tails()}")

    def stop(self, keep: bool = False) -> None:
        """Kill the components, drop the database, remove the home.

        ``keep`` keeps the home (logs, config); ``GPUFLEET_LIVE_KEEP=1`` keeps the database too.
        Every component's process group and every process descended from one (task processes
        in sessions of their own too) is SIGKILLed at once: a throwaway Airflow needs no
        graceful exit, its logs are written as they go, and SIGTERM cost 5 s of every teardown
        (the triggerer takes ~11 s to honour it in 3.3.2, Celery's warm shutdown waits for its
        tasks). What a killed worker leaves in Redis goes with its queue (``forget_queue``).
        """
        doomed = [pid for proc in self.processes.values() for pid in descendants(proc.pid)]
        for proc in self.processes.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for proc in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        keep_all = os.environ.get("GPUFLEET_LIVE_KEEP") == "1"
        if self.backend == "postgresql" and not keep_all:
            for database in filter(None, (self.database, self.ledger_database)):
                pg_admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        if self.queue:
            forget_queue(self.queue)
        if not (keep or keep_all):
            shutil.rmtree(self.home, ignore_errors=True)


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def descendants(root: int) -> list[int]:
    """Every live process descended from ``root`` (from /proc)."""
    parents = {int(p): _parent(int(p)) for p in os.listdir("/proc") if p.isdigit()}
    found, frontier = [], {root}
    while frontier:
        children = {pid for pid, parent in parents.items() if parent in frontier}
        found.extend(sorted(children))
        frontier = children
    return found
