"""A real Airflow 3 for end-to-end tests: api-server, scheduler, dag-processor and triggerer.

``start_airflow(dags_folder)`` builds a throwaway ``AIRFLOW_HOME``, points it at a throwaway
PostgreSQL database when 127.0.0.1:5432 answers (dropped at teardown) or at a SQLite file
otherwise (under ``CI=true`` a PostgreSQL that refuses fails the test instead:
tests/support/postgres.py), migrates it (on PostgreSQL: copies a migrated template the first
session left on the server, ``TEMPLATE_PREFIX``), starts the four components from the
project's virtualenv as their own process groups and waits until ``/api/v2/monitor/health``
reports every component healthy and the DAG processor has parsed every DAG file.
``LiveAirflow.startup`` says where the start-up's seconds went.

The executor is the one the project ships (docker-compose.yaml): **CeleryExecutor** when
PostgreSQL and Redis (127.0.0.1:6379) both answer, with two ``airflow celery worker`` processes
(``worker-1``, ``worker-2``) on a queue of their own (several sessions may share one Redis), the
Celery results and the gpufleet ledger in PostgreSQL databases of their own; else
LocalExecutor (a laptop without them; under ``CI=true`` a Redis that does not answer fails the
test instead). ``LiveAirflow.executor`` says which. ``LiveAirflow.stop()`` kills the process
groups, drops the databases and removes the home unless asked to keep it (logs are under
``home/logs``).

Knobs (environment): ``GPUFLEET_LIVE_DB=sqlite`` forces SQLite; ``GPUFLEET_LIVE_PG`` is a libpq
DSN for the server holding the throwaway database (default
``host=127.0.0.1 port=5432 user=postgres dbname=postgres``); ``GPUFLEET_LIVE_VENV`` the
virtualenv whose ``bin/airflow`` runs (default ``<repo>/.venv``); ``GPUFLEET_LIVE_KEEP=1`` keeps
the home and database after teardown; ``GPUFLEET_LIVE_REDIS`` the broker (default
``redis://127.0.0.1:6379/0``; ``none`` forces LocalExecutor); ``GPUFLEET_LIVE_PLUGINS`` another
plugins folder (default ``<repo>/plugins``); ``GPUFLEET_LIVE_TEMPLATE=0`` migrates every
session's database instead of copying the template.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

REPO_ROOT = Path(__file__).resolve().parents[2]
PLUGINS_DIR = Path(os.environ.get("GPUFLEET_LIVE_PLUGINS") or REPO_ROOT / "plugins").resolve()
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
WORKERS = ("worker-1", "worker-2")  # CeleryExecutor only
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
USERNAME = "ci"
VIEWER = "viewer"  # a second user with the viewer role, for 403 checks
DEFAULT_PG_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=2"


class LiveAirflowError(RuntimeError):
    """The harness could not bring Airflow up (the message carries the log tails)."""


def venv_bin() -> Path:
    venv = os.environ.get("GPUFLEET_LIVE_VENV") or str(REPO_ROOT / ".venv")
    return Path(venv) / "bin"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"(no {path.name})"
    return "\n".join(text.splitlines()[-lines:])


# -- preflight -------------------------------------------------------------------------------

# Airflow's own walk of the plugins folder, ``find_path_from_directory``. Its module
# (airflow/_shared/module_loading/file_discovery.py, which needs only pathspec) is loaded from
# its file: importing it as ``airflow._shared...`` runs airflow/__init__.py first, about 2 s of
# a start-up spent before any component may start. An Airflow that moved it is imported whole.
_PLUGIN_FILES_PROBE = """
import importlib.util, json, os, sys
try:
    spec = importlib.util.find_spec("airflow")
    path = os.path.join(spec.submodule_search_locations[0], "_shared", "module_loading",
                        "file_discovery.py")
    module_spec = importlib.util.spec_from_file_location("_gpufleet_file_discovery", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    find_path_from_directory = module.find_path_from_directory
except Exception:
    from airflow._shared.module_loading import find_path_from_directory
print(json.dumps([str(p) for p in find_path_from_directory(sys.argv[1], ".airflowignore", "glob")]))
"""


def package_modules_loaded_as_plugins(plugins_dir: Path = PLUGINS_DIR) -> list[str]:
    """Files inside Python packages under ``plugins_dir`` that Airflow would exec as plugins.

    Airflow 3.3's plugin manager imports EVERY ``*.py`` under the plugins folder (recursively,
    minus ``.airflowignore``) as a top-level module named after the file's stem: a package's
    ``__main__.py`` becomes ``sys.modules["__main__"]`` and runs in every component, and each
    module runs twice. Packages such as ``gpufleet`` must be listed in ``plugins/.airflowignore``.
    """
    probe = subprocess.run(
        [str(venv_bin() / "python"), "-c", _PLUGIN_FILES_PROBE, str(plugins_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return []  # cannot tell with this Airflow; let it run
    files = [Path(p) for p in json.loads(probe.stdout.strip().splitlines()[-1])]
    return sorted(
        str(f.relative_to(plugins_dir))
        for f in files
        if f.suffix == ".py" and (f.parent / "__init__.py").exists()
    )


def check_plugins_folder(plugins_dir: Path) -> None:
    leaked = package_modules_loaded_as_plugins(plugins_dir)
    if leaked:
        shown = ", ".join(leaked[:5]) + (" ..." if len(leaked) > 5 else "")
        packages = sorted({Path(f).parts[0] for f in leaked})
        raise LiveAirflowError(
            f"Airflow would import package modules from {plugins_dir} as top-level plugins "
            f"({shown}); a package __main__.py would run in every component. Add "
            f"{plugins_dir / '.airflowignore'} listing {', '.join(p + '/' for p in packages)}"
        )


# -- databases -------------------------------------------------------------------------------


def _pg_dsn() -> str:
    return os.environ.get("GPUFLEET_LIVE_PG") or DEFAULT_PG_DSN


def venv_has_postgres_drivers() -> bool:
    """Airflow 3.3 needs psycopg2 (sync) AND asyncpg (its async engine) for PostgreSQL."""
    probe = subprocess.run(
        [str(venv_bin() / "python"), "-c", "import asyncpg, psycopg2"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


def postgres_available() -> bool:
    """True if the PostgreSQL server for throwaway databases answers and the drivers are there."""
    if os.environ.get("GPUFLEET_LIVE_DB", "").lower() == "sqlite":
        return False
    try:
        import psycopg2
    except ImportError:
        return False
    if not venv_has_postgres_drivers():
        print(
            "live Airflow: asyncpg missing from the virtualenv (Airflow 3.3 needs it for "
            "PostgreSQL); falling back to SQLite",
            file=sys.stderr,
        )
        return False
    try:
        conn = psycopg2.connect(_pg_dsn())
    except psycopg2.Error as exc:
        from tests.support.postgres import in_ci, missing

        if in_ci():  # CI machines run PostgreSQL: no quiet fallback to SQLite there
            missing(f"the live Airflow's PostgreSQL (GPUFLEET_LIVE_PG) refuses: {exc}".strip())
        return False
    conn.close()
    return True


def _redis_url() -> str:
    return os.environ.get("GPUFLEET_LIVE_REDIS") or DEFAULT_REDIS


def redis_available() -> bool:
    """True if the Celery broker answers a PING and the virtualenv has the Celery provider.
    Under ``CI=true`` a broker that does not answer fails the test (CI machines run Redis)."""
    url = _redis_url()
    if url.lower() == "none":
        return False
    # the provider installed (its metadata: importing it would import all of Airflow, ~3 s)
    probe = subprocess.run(
        [
            str(venv_bin() / "python"),
            "-c",
            "import importlib.metadata as m, redis; m.version('apache-airflow-providers-celery')",
        ],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        return False
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        from tests.support.postgres import in_ci

        if in_ci():
            import pytest

            pytest.fail(
                f"CI=true and Redis is missing: {url} does not answer ({exc}). CI machines run "
                "Redis at 127.0.0.1:6379 for the live CeleryExecutor test: start it",
                pytrace=False,
            )
        return False
    return True


def _forget_queue(queue: str) -> None:
    """Remove this deployment's queue from the shared Redis, with the messages a killed worker
    left unacknowledged for it (kombu keeps them in ``unacked``, keyed by delivery tag, each
    ``[message, exchange, routing key]``) and the remote-control bindings of its workers (a
    worker removes its own only when it exits gracefully; named ``<name>.<queue>@<host>``), so
    test runs leave the broker as they found it."""
    import redis

    with contextlib.suppress(redis.RedisError, ValueError):
        client = redis.Redis.from_url(_redis_url())
        client.delete(queue, f"_kombu.binding.{queue}")
        pidbox = "_kombu.binding.celery.pidbox"
        for member in client.smembers(pidbox):
            if f".{queue}@".encode() in member:
                client.srem(pidbox, member)
                client.delete(member.split(b"\x06\x16")[-1])  # its queue, if any
        for tag, raw in client.hgetall("unacked").items():
            entry = json.loads(raw)
            if isinstance(entry, list) and len(entry) == 3 and entry[2] == queue:
                client.hdel("unacked", tag)
                client.zrem("unacked_index", tag)


def _pg_admin(statement: str) -> None:
    import psycopg2

    conn = psycopg2.connect(_pg_dsn())
    try:
        conn.autocommit = True  # CREATE/DROP DATABASE cannot run in a transaction
        with conn.cursor() as cur:
            cur.execute(statement)
    finally:
        conn.close()


def _pg_url(dbname: str) -> str:
    """A SQLAlchemy URL for ``dbname`` on the server ``_pg_dsn()`` names."""
    import psycopg2.extensions

    params = psycopg2.extensions.parse_dsn(_pg_dsn())
    user = params.get("user", "postgres")
    password = params.get("password")
    auth = f"{user}:{password}" if password else user
    host = params.get("host", "127.0.0.1")
    port = params.get("port", "5432")
    return f"postgresql+psycopg2://{auth}@{host}:{port}/{dbname}"


# A migrated metadata DB is the same for every session on one Airflow: the first session
# migrates its database and keeps a copy on the server, ``gpufleet_live_template_<key>``; later
# ones copy it (CREATE DATABASE ... TEMPLATE, ~0.4 s) instead of ``airflow db migrate`` (4 s
# idle, 7 s on a busy 2-core machine). The key covers what migrating depends on: the versions
# of the virtualenv's apache-airflow* distributions and the log templates migrate records.
TEMPLATE_PREFIX = "gpufleet_live_template_"

_AIRFLOW_VERSIONS_PROBE = """
import importlib.metadata as m, json
names = {(d.metadata["Name"] or "").lower(): d.version for d in m.distributions()}
print(json.dumps(sorted((n, v) for n, v in names.items() if n.startswith("apache-airflow"))))
"""


def template_name(env: Mapping[str, str]) -> str | None:
    """The cached migrated database this session may copy (None: ``GPUFLEET_LIVE_TEMPLATE=0``
    or the versions could not be read)."""
    if os.environ.get("GPUFLEET_LIVE_TEMPLATE", "1") == "0":
        return None
    probe = subprocess.run(
        [str(venv_bin() / "python"), "-c", _AIRFLOW_VERSIONS_PROBE],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0 or "apache-airflow" not in probe.stdout:
        return None
    key = "\n".join(
        [
            probe.stdout.strip(),
            env.get("AIRFLOW__LOGGING__LOG_FILENAME_TEMPLATE", ""),
            env.get("AIRFLOW__ELASTICSEARCH__LOG_ID_TEMPLATE", ""),
        ]
    )
    return TEMPLATE_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:16]


def _create_migrated_postgres(
    database: str, env: Mapping[str, str], log_dir: Path, airflow: Path
) -> str:
    """Create ``database`` migrated: a copy of the cached template when there is one, else
    created empty and migrated (then cached). How it was made: "copied" or "migrated"."""
    import psycopg2

    template = template_name(env)
    if template:
        try:
            _pg_admin(f'CREATE DATABASE "{database}" TEMPLATE "{template}"')
            return "copied"
        except psycopg2.Error:
            pass  # none cached yet (or another session is making it): migrate
    _pg_admin(f'CREATE DATABASE "{database}"')
    _run_step("db-migrate", [str(airflow), "db", "migrate"], env, log_dir, 300)
    if template:
        # no connection to ``database`` is open (migrate exited); a session that made the
        # template first wins, the others' copies are dropped with their databases
        with contextlib.suppress(psycopg2.Error):
            _pg_admin(f'CREATE DATABASE "{template}" TEMPLATE "{database}"')
        _drop_stale_templates(keep=template)
    return "migrated"


def _drop_stale_templates(keep: str) -> None:
    """Drop the cached templates of other Airflow versions (best effort: one being copied
    right now stays; a lock wait gives up after a second)."""
    import psycopg2

    with contextlib.suppress(psycopg2.Error):
        conn = psycopg2.connect(_pg_dsn())
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT datname FROM pg_database WHERE datname LIKE %s AND datname <> %s",
                    (TEMPLATE_PREFIX.replace("_", r"\_") + "%", keep),
                )
                stale = [row[0] for row in cur.fetchall()]
                cur.execute("SET lock_timeout = '1s'")
                for name in stale:
                    with contextlib.suppress(psycopg2.Error):
                        cur.execute(f'DROP DATABASE IF EXISTS "{name}"')
        finally:
            conn.close()


# -- the running Airflow ---------------------------------------------------------------------


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
                # remote-control binding) is found by it and removed (``_forget_queue``)
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
        tasks). What a killed worker leaves in Redis goes with its queue (``_forget_queue``).
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
                _pg_admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        if self.queue:
            _forget_queue(self.queue)
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


def _run_step(
    name: str, args: list[str], env: Mapping[str, str], log_dir: Path, timeout: float
) -> None:
    log = log_dir / f"{name}.log"
    with log.open("ab") as out:
        result = subprocess.run(
            args, env=dict(env), stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False
        )
    if result.returncode != 0:
        raise LiveAirflowError(f"{' '.join(args)} failed ({result.returncode}):\n{tail(log, 60)}")


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
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
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
        sql_alchemy_conn = _pg_url(database)
        if redis_available():
            celery = {
                "broker": _redis_url(),
                "results": "db+" + _pg_url(database),
                "queue": database,
                "ledger": _pg_url(f"{database}_ledger"),
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
            made = _create_migrated_postgres(database, env, live.log_dir, airflow)
            if celery:
                _pg_admin(f'CREATE DATABASE "{database}_ledger"')
        else:
            made = "migrated"
            _run_step("db-migrate", [str(airflow), "db", "migrate"], env, live.log_dir, 300)
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
