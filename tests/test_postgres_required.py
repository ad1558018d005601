"""In CI a missing PostgreSQL fails the run; elsewhere its tests skip and say why.

The PostgreSQL tests of the ledger and of the secrets checks run in a child pytest whose one
check (tests/support/postgres.py) is pointed at a closed port: with ``CI=true`` every one of
them fails naming the cause, without it every one is skipped saying so. The live Airflow's own
probe (a DSN, with a SQLite fallback for laptops) follows the same rule.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import postgres

ROOT = Path(__file__).resolve().parents[1]
PG_FILES = ["tests/store/test_ledger.py", "tests/test_secrets.py"]


def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_pytest(ci: str | None) -> subprocess.CompletedProcess:
    """The PostgreSQL tests of ``PG_FILES`` (``-m postgres``), the check on a closed port."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env[postgres.PORT_ENV] = str(closed_port())
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0"]
        + ["-m", "postgres", "-k", "not dag_run", *PG_FILES],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _summary(proc: subprocess.CompletedProcess) -> tuple[str, list[str]]:
    lines = proc.stdout.strip().splitlines()
    counts = next((line for line in reversed(lines) if " in " in line), "")
    return counts, lines


def test_under_ci_a_missing_postgres_fails_every_postgres_test():
    proc = child_pytest(ci="true")
    counts, lines = _summary(proc)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "skipped" not in counts and "passed" not in counts and " error" in counts, counts
    errors = [line for line in lines if line.startswith("ERROR tests/")]
    assert {line.split("::")[0] for line in errors} == {f"ERROR {f}" for f in PG_FILES}, errors
    assert all(postgres.MISSING_IN_CI in line for line in errors), errors
    assert "PostgreSQL does not answer at 127.0.0.1:" in proc.stdout


def test_outside_ci_a_missing_postgres_skips_every_postgres_test_saying_why():
    proc = child_pytest(ci=None)
    counts, lines = _summary(proc)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert " skipped" in counts and "passed" not in counts and "error" not in counts, counts
    skipped = [line for line in lines if line.startswith("SKIPPED")]
    assert skipped and all("does not answer at 127.0.0.1:" in line for line in skipped), skipped
    assert all("with CI=true this fails" in line for line in skipped), skipped


def _verdict(call) -> tuple[type, str]:
    """What ``call`` raised, failure or skip (a skip escaping a test would skip it, not fail)."""
    try:
        call()
    except (pytest.fail.Exception, pytest.skip.Exception) as exc:
        return type(exc), str(exc)
    raise AssertionError("neither failed nor skipped")


@pytest.mark.parametrize("value", ["true", "TRUE", "1", "yes"])
def test_ci_true_in_any_spelling_fails(monkeypatch, value):
    monkeypatch.setenv("CI", value)
    kind, message = _verdict(lambda: postgres.missing("gone"))
    assert kind is pytest.fail.Exception, message
    assert message.startswith("CI=true and PostgreSQL is missing: gone. CI machines run"), message


@pytest.mark.parametrize("value", [None, "", "false", "0"])
def test_without_ci_it_skips(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    kind, message = _verdict(lambda: postgres.missing("gone"))
    assert kind is pytest.skip.Exception, message
    assert message == "gone (skipped outside CI; with CI=true this fails)"


def test_the_check_knocks_on_the_port_it_names(monkeypatch):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        monkeypatch.setenv(postgres.PORT_ENV, str(listener.getsockname()[1]))
        assert postgres.postgres_up()
    monkeypatch.setenv(postgres.PORT_ENV, str(closed_port()))
    assert not postgres.postgres_up()
    monkeypatch.delenv(postgres.PORT_ENV)
    assert postgres.port() == 5432


def test_the_live_airflow_falls_back_to_sqlite_only_outside_ci(monkeypatch):
    from tests.live.airflow_live import services as airflow_live

    dsn = f"host=127.0.0.1 port={closed_port()} user=postgres dbname=postgres connect_timeout=2"
    monkeypatch.setenv("GPUFLEET_LIVE_PG", dsn)
    monkeypatch.delenv("GPUFLEET_LIVE_DB", raising=False)
    monkeypatch.setattr(airflow_live, "venv_has_postgres_drivers", lambda: True)
    monkeypatch.delenv("CI", raising=False)
    assert airflow_live.postgres_available() is False  # a laptop: SQLite
    monkeypatch.setenv("CI", "true")
    kind, message = _verdict(airflow_live.postgres_available)
    assert kind is pytest.fail.Exception and postgres.MISSING_IN_CI in message, message
    monkeypatch.setenv("GPUFLEET_LIVE_DB", "sqlite")  # asked for by name: not a missing server
    assert airflow_live.postgres_available() is False
