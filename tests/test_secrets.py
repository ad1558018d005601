"""Secrets are never printed: one canary planted in every credential input appears in no output.

The canary goes into the ``gpufleet_alerts`` webhook URL (a Slack webhook URL is itself the
secret), the ``gpufleet_ledger`` connection's password, ``GPUFLEET_LEDGER_URL``,
``GPUFLEET_AIRFLOW_PASSWORD`` and the user info of ``gpufleet trigger --url``. Then the real
things that read them run (a nightly DAG run through ``dag.test()`` whose task fails so the
alert fires, ``gpufleet status``, ``gpufleet gate``, ``gpufleet trigger``) and every output is
searched: stdout/stderr, Airflow's task logs, the files under the state folder, every ledger row.

The ledger is a throwaway PostgreSQL database at 127.0.0.1:5432 (trust auth there ignores the
canary password); those tests skip when PostgreSQL does not answer, and fail under CI=true
(tests/support/postgres.py).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest
from sqlalchemy import MetaData, create_engine, select

from gpufleet.airflow.notifiers import FleetAlertNotifier
from tests.support.postgres import require_postgres

CANARY = "canary-7f3e9b2d"
GPUFLEET = str(Path(sys.executable).parent / "gpufleet")
ROOT = Path(__file__).resolve().parents[1]


def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(autouse=True)
def fresh_masker():
    """Airflow's secrets masker is process-wide: each test starts with nothing registered."""
    from airflow.sdk._shared.secrets_masker import reset_secrets_masker

    reset_secrets_masker()
    yield
    reset_secrets_masker()


@pytest.fixture
def webhook():
    """A local webhook that answers 500 to every alert; yields (base URL, requests received)."""
    received: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server API
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            received.append(self.path)
            self.send_response(500)
            self.end_headers()
            self.wfile.write(f"no such hook {self.path}".encode())

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", received
    server.shutdown()
    server.server_close()


def alerts_conn(url: str, **extra) -> str:
    """``AIRFLOW_CONN_GPUFLEET_ALERTS``: a Slack-style webhook whose path carries the canary."""
    return json.dumps(
        {
            "conn_type": "http",
            "password": f"{url}/services/T0/B0/{CANARY}",
            "extra": {"format": "slack", **extra},
        }
    )


@pytest.fixture
def pg_ledger():
    """A throwaway PostgreSQL ledger; yields its URL with the canary as the password."""
    require_postgres()  # skips without PostgreSQL; fails under CI=true
    import psycopg2

    name = f"gpufleet_canary_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(host="127.0.0.1", user="postgres", dbname="postgres")
    admin.autocommit = True
    admin.cursor().execute(f'CREATE DATABASE "{name}"')
    url = f"postgresql+psycopg2://postgres:{CANARY}@127.0.0.1:5432/{name}"
    try:
        yield url
    finally:
        from gpufleet.store import database as module

        for key in [k for k in module._engines if name in k]:
            module._engines.pop(key).dispose()
        admin.cursor().execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def ledger_dump(url: str) -> str:
    """Every row of every table of the ledger at ``url``, as text."""
    engine = create_engine(url)
    try:
        meta = MetaData()
        meta.reflect(engine)
        assert meta.tables, "the ledger has no tables: nothing ran against it"
        with engine.connect() as conn:
            return "\n".join(
                f"{name}: {row}"
                for name, table in sorted(meta.tables.items())
                for row in conn.execute(select(table)).all()
            )
    finally:
        engine.dispose()


def files_text(*folders: Path) -> dict[str, str]:
    """Every file under ``folders`` (bytes decoded leniently), by path. A file gone between
    the listing and its read is left out: SQLite's ``-shm``/``-wal`` files go with the last
    connection, which a child process of the run may close just then."""
    out = {}
    for folder in folders:
        for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
            try:
                out[str(path)] = path.read_bytes().decode("utf-8", "replace")
            except FileNotFoundError:
                continue
    return out


def assert_no_canary(**outputs: str) -> None:
    leaks = [name for name, text in outputs.items() if CANARY in text]
    assert not leaks, f"the canary secret appears in: {leaks}"


def gpufleet(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [GPUFLEET, *args], capture_output=True, text=True, env={**os.environ, **env}, timeout=120
    )


def failure_context(error: str = "fabric down") -> dict:
    ti = SimpleNamespace(dag_id="nightly_fabric_validation", task_id="validate_fabric", map_index=0)
    return {"ti": ti, "run_id": "manual__canary", "exception": RuntimeError(error)}


# --- the alert notifier, in this process ---------------------------------------------------


@pytest.mark.parametrize("answer", ["500", "closed port"])
def test_a_failed_alert_delivery_logs_the_host_only(webhook, answer, monkeypatch, caplog, capfd):
    url, received = webhook
    if answer == "closed port":
        url = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("AIRFLOW_CONN_GPUFLEET_ALERTS", alerts_conn(url))
    FleetAlertNotifier(summary="nightly failed").notify(failure_context())
    if answer == "500":
        assert received == [f"/services/T0/B0/{CANARY}"]  # it was delivered, and refused
    out, err = capfd.readouterr()
    why = "HTTP 500 Internal Server Error" if answer == "500" else "Connection refused"
    assert f"could not deliver the alert to 127.0.0.1:{urlsplit(url).port}: " in caplog.text
    assert why in caplog.text
    assert_no_canary(log=caplog.text, stdout=out, stderr=err)


def test_webhook_user_info_is_never_shown(monkeypatch, caplog, capfd):
    port = closed_port()
    monkeypatch.setenv(
        "AIRFLOW_CONN_GPUFLEET_ALERTS",
        json.dumps({"conn_type": "http", "password": f"http://hook:{CANARY}@127.0.0.1:{port}/h"}),
    )
    FleetAlertNotifier(summary="s").notify(failure_context())
    out, err = capfd.readouterr()
    assert f"could not deliver the alert to 127.0.0.1:{port}" in caplog.text
    assert "hook@" not in caplog.text
    assert_no_canary(log=caplog.text, stdout=out, stderr=err)


def test_the_webhook_url_is_masked_by_airflow(webhook, monkeypatch):
    from airflow.sdk._shared.secrets_masker import redact

    url, _ = webhook
    monkeypatch.setenv("AIRFLOW_CONN_GPUFLEET_ALERTS", alerts_conn(url))
    FleetAlertNotifier(summary="s").notify(failure_context())
    # whatever else prints it (requests' own debug log, a traceback) goes through the masker
    assert CANARY not in redact(f"POST {url}/services/T0/B0/{CANARY} failed")


@pytest.mark.postgres
@pytest.mark.parametrize("given_as", ["GPUFLEET_LEDGER_URL", "connection", "sqlalchemy_url"])
def test_the_ledger_password_is_registered_with_airflows_masker(pg_ledger, given_as, monkeypatch):
    from airflow.sdk._shared.secrets_masker import redact

    from gpufleet.airflow.operators.common import ledger

    if given_as == "GPUFLEET_LEDGER_URL":
        monkeypatch.setenv("GPUFLEET_LEDGER_URL", pg_ledger)
    else:
        conn = {"conn_type": "postgres", "extra": {"sqlalchemy_url": pg_ledger}}
        if given_as == "connection":
            name = pg_ledger.rsplit("/", 1)[1]
            conn = {"conn_type": "postgres", "host": "127.0.0.1", "port": 5432}
            conn.update(login="postgres", password=CANARY, schema=name)
        monkeypatch.setenv("AIRFLOW_CONN_GPUFLEET_LEDGER", json.dumps(conn))
    assert ledger().launches() == []  # the ledger at that URL, reachable
    assert CANARY not in redact(f"connecting to {pg_ledger}")


# --- the CLI, as a person runs it ------------------------------------------------------------


@pytest.mark.postgres
def test_status_and_gate_do_not_print_the_ledger_password(fleet_state, pg_ledger):
    from tests.support.fleet import validate

    env = {"GPUFLEET_LEDGER_URL": pg_ledger}
    status = gpufleet("status", **env)
    assert status.returncode == 0, status.stderr
    gate = gpufleet("gate", "--cluster", "a3u-sim", "--pool", "h200-a", "--nodes", "2", **env)
    assert gate.returncode != 0 and "a3u-sim/h200-a" in gate.stdout + gate.stderr
    os.environ["GPUFLEET_LEDGER_URL"] = pg_ledger
    try:
        validate("a3u-sim", "h200-a")
    finally:
        del os.environ["GPUFLEET_LEDGER_URL"]
    gate2 = gpufleet("gate", "--cluster", "a3u-sim", "--pool", "h200-a", "--nodes", "2", **env)
    assert gate2.returncode in (0, 1, 2)  # a decision or a refusal: the gate read the ledger
    unreachable = pg_ledger.replace("127.0.0.1:5432", f"127.0.0.1:{closed_port()}")
    down = gpufleet("status", GPUFLEET_LEDGER_URL=unreachable)
    assert down.returncode != 0 and "127.0.0.1" in down.stdout + down.stderr
    assert_no_canary(
        **{
            f"{name}.{stream}": getattr(proc, stream)
            for name, proc in {"status": status, "gate": gate, "gate2": gate2, "down": down}.items()
            for stream in ("stdout", "stderr")
        },
        ledger=ledger_dump(pg_ledger),
        **files_text(fleet_state),
    )


def test_trigger_does_not_print_url_user_info_or_the_password(fleet_state):
    port = closed_port()
    out = gpufleet(
        "trigger",
        "nightly_fabric_validation",
        "--url",
        f"http://ci:{CANARY}@127.0.0.1:{port}",
        "--http-timeout",
        "5",
        GPUFLEET_AIRFLOW_PASSWORD=CANARY,
    )
    assert out.returncode != 0 and f"127.0.0.1:{port}" in out.stderr + out.stdout
    assert "ci@" not in out.stdout + out.stderr
    assert_no_canary(stdout=out.stdout, stderr=out.stderr, **files_text(fleet_state))


# --- a DAG run whose task fails, through dag.test() ---------------------------------------------


RUN_DAG = """
import json, sys
from gpufleet.airflow.triggers import PollingTrigger
from tests.support.fleet import SimTriggerClock, run_dag, task_states
PollingTrigger.clock = SimTriggerClock()  # the test froze the sim's clock: triggers advance it
dr = run_dag(sys.argv[1], json.loads(sys.argv[2]))
print("RESULT " + json.dumps({"run_id": dr.run_id, "states": task_states(dr)}))
"""


@pytest.mark.slow
@pytest.mark.postgres
def test_a_failing_dag_run_leaks_the_canary_nowhere(airflow_db, fleet_state, pg_ledger, webhook):
    """dag.test() in its own process (so every byte it prints is captured): a nightly run whose
    fabric check fails, alerting through the canary webhook, on the canary-password ledger."""
    url, received = webhook
    conf = {"pools": ["a3u-sim/h200-b"], "mode": "fabric"}
    from gpufleet.backends.sim.state import SimState

    SimState().inject("a3u-sim", "h200-b", "fabric-down")  # as `gpufleet sim inject` does
    ledger_conn = {
        "conn_type": "postgres",
        "host": "127.0.0.1",
        "port": 5432,
        "login": "postgres",
        "password": CANARY,
        "schema": pg_ledger.rsplit("/", 1)[1],
    }
    env = {
        **os.environ,
        "AIRFLOW_CONN_GPUFLEET_ALERTS": alerts_conn(url),
        "AIRFLOW_CONN_GPUFLEET_LEDGER": json.dumps(ledger_conn),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins")]),
    }
    proc = subprocess.run(
        [sys.executable, "-c", RUN_DAG, "nightly_fabric_validation", json.dumps(conf)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    result = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert result, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = json.loads(result[len("RESULT ") :])
    assert run["states"]["validate_fabric[0]"] == "failed", run
    assert received, "the failing task did not alert through the webhook"
    # dag.test() runs each task in its process and writes the task logs to the console
    assert "could not deliver the alert to 127.0.0.1" in proc.stdout + proc.stderr
    reports = files_text(fleet_state)
    assert any("report" in name for name in reports), sorted(reports)
    dump = ledger_dump(pg_ledger)
    assert run["run_id"] in dump  # the run recorded its verdicts in this ledger
    assert_no_canary(
        stdout=proc.stdout,
        stderr=proc.stderr,
        ledger=dump,
        **files_text(airflow_db),  # task log files if any, and the metadata DB
        **reports,
    )
