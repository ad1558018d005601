"""One way to find the ledger (issue 16, finding 10): the UI pages, /metrics and the CLI read
the ledger the Airflow connection ``gpufleet_ledger`` names wherever Airflow keeps it (here in
its metadata DB, not the environment), as tasks do; a configured ledger that cannot be reached
is an error in each, never a silent empty SQLite file."""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing

import pytest
from sqlalchemy.engine import make_url

from gpufleet.errors import LedgerError
from gpufleet.store import LEDGER_CONN_ID, Ledger
from tests.store.test_ledger import ledger_url  # noqa: F401 - fixture (SQLite and PostgreSQL)

PASSWORD = "pw-s3cret"


@pytest.fixture
def metastore_connection(airflow_db, monkeypatch):
    """Store ``gpufleet_ledger`` in Airflow's metadata DB (removed afterwards). The CLI asks an
    ``airflow`` process, configured by the environment: point it at the metadata DB and Fernet
    key this process writes with, whatever earlier tests in this worker left in ``os.environ``."""
    from airflow import settings
    from airflow.configuration import conf
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", str(settings.SQL_ALCHEMY_CONN))
    monkeypatch.setenv("AIRFLOW_HOME", str(settings.AIRFLOW_HOME))
    fernet = conf.get("core", "fernet_key", fallback="")
    if fernet:
        monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", fernet)
    for name in ("_AIRFLOW_PROCESS_CONTEXT", "AIRFLOW__SECRETS__BACKEND", "GPUFLEET_LEDGER_URL"):
        monkeypatch.delenv(name, raising=False)

    for name in [n for n in os.environ if n.startswith("AIRFLOW_CTX_")]:
        monkeypatch.delenv(name)  # left behind by an earlier dag.test() in this worker
    # A pooled connection may still hold a metadata DB file an earlier test replaced: write
    # through a fresh one, to the file the ``airflow`` subprocess will open.
    settings.Session.remove()
    settings.engine.dispose()
    url = make_url(str(settings.SQL_ALCHEMY_CONN))
    database = url.database if url.get_backend_name() == "sqlite" else None

    def put(**fields):
        with create_session() as session:
            session.query(Connection).filter(Connection.conn_id == LEDGER_CONN_ID).delete()
            session.add(Connection(conn_id=LEDGER_CONN_ID, **fields))
        if database:  # SQLite: the row is in the file on disk, as a new process sees it
            with closing(sqlite3.connect(database)) as raw:
                found = raw.execute(
                    "SELECT count(*) FROM connection WHERE conn_id = ?", (LEDGER_CONN_ID,)
                ).fetchone()[0]
            assert found == 1, f"the connection did not reach {database}"

    yield put
    with create_session() as session:
        session.query(Connection).filter(Connection.conn_id == LEDGER_CONN_ID).delete()


def _ui_ledger():
    from gpufleet.airflow.ui.app import _default_ledger

    return _default_ledger()


def _metrics_ledger():
    from gpufleet.airflow.ui.metrics import _default_ledger

    return _default_ledger()


def _cli_ledger():
    from gpufleet.cli.fleet_state import open_ledger

    return open_ledger()


def _task_ledger():
    from gpufleet.airflow.operators.common import ledger

    return ledger()


ENTRY_POINTS = {"ui": _ui_ledger, "metrics": _metrics_ledger, "cli": _cli_ledger}
# every entry point that opens the ledger, tasks included: none of them creates a configured one
OPENERS = {**ENTRY_POINTS, "task": _task_ledger}


def test_every_entry_point_reads_the_ledger_the_metastore_connection_names(
    metastore_connection, fleet_state, tmp_path
):
    path = tmp_path / "fleet-ledger.db"
    Ledger(f"sqlite:///{path}").set_pool_state("a3u-sim", "h200-a", "validated", "seeded row")
    metastore_connection(conn_type="sqlite", host=str(path))
    for name, open_ in ENTRY_POINTS.items():
        ledger = open_()
        row = ledger.pool_state("a3u-sim", "h200-a")
        assert ledger.url == f"sqlite:///{path}", name
        assert row and row["reason"] == "seeded row", name
    assert not (fleet_state / "ledger.db").exists()  # no empty default was made


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_an_unreachable_configured_ledger_is_an_error(metastore_connection, fleet_state, entry):
    metastore_connection(
        conn_type="postgres",
        host="127.0.0.1",
        port=1,
        login="fleet",
        password=PASSWORD,
        schema="ledger",
    )
    with pytest.raises(LedgerError) as err:
        ENTRY_POINTS[entry]()
    message = str(err.value)
    assert LEDGER_CONN_ID in message and "127.0.0.1:1/ledger" in message
    assert PASSWORD not in message and "fleet@" not in message
    assert not (fleet_state / "ledger.db").exists()


@pytest.mark.parametrize("entry", sorted(OPENERS))
def test_a_configured_ledger_file_that_does_not_exist_is_not_created(
    metastore_connection, fleet_state, tmp_path, entry
):
    """Tasks too (issue 31): the next scheduled task used to create the file, and from then on
    the UI, /metrics and the CLI read an empty fleet without a word."""
    missing = tmp_path / "typo" / "ledger.db"
    missing.parent.mkdir()
    metastore_connection(conn_type="sqlite", host=str(missing))
    with pytest.raises(LedgerError, match="does not exist") as err:
        OPENERS[entry]()
    message = str(err.value)
    assert LEDGER_CONN_ID in message and str(missing) in message
    assert "`gpufleet ledger init`" in message  # what to do
    assert not missing.exists()
    assert not (fleet_state / "ledger.db").exists()  # nor an empty default in its place


def test_ledger_init_creates_the_configured_ledger_once_and_every_entry_point_opens_it(
    metastore_connection, fleet_state, tmp_path, capsys
):
    """``gpufleet ledger init`` is the one step that creates a configured ledger: it finds it
    as the entry points do (here the metastore's connection), says what it did, and run again
    changes nothing and says so."""
    from gpufleet.cli import main

    path = tmp_path / "new" / "fleet-ledger.db"
    metastore_connection(conn_type="sqlite", host=str(path))
    assert main(["ledger", "init"]) == 0
    out = capsys.readouterr().out
    assert "created the ledger" in out and str(path) in out and LEDGER_CONN_ID in out
    assert path.exists()
    Ledger(f"sqlite:///{path}").set_pool_state("a3u-sim", "h200-a", "validated", "kept")
    assert main(["ledger", "init"]) == 0
    out = capsys.readouterr().out
    assert "nothing to do" in out and str(path) in out
    for name, open_ in OPENERS.items():
        assert open_().pool_state("a3u-sim", "h200-a")["reason"] == "kept", name
    assert not (fleet_state / "ledger.db").exists()


def test_ledger_init_refuses_an_unreachable_ledger_without_its_password(
    monkeypatch, fleet_state, capsys
):
    from gpufleet.cli import main

    monkeypatch.setenv(
        "GPUFLEET_LEDGER_URL", f"postgresql+psycopg2://fleet:{PASSWORD}@127.0.0.1:1/ledger"
    )
    assert main(["ledger", "init"]) == 2
    err = capsys.readouterr().err
    assert "127.0.0.1:1/ledger" in err and "GPUFLEET_LEDGER_URL" in err
    assert PASSWORD not in err and "fleet@" not in err


def test_open_refuses_a_missing_file_gives_an_empty_one_tables_and_create_makes_it(
    fleet_state, tmp_path
):
    """Opening prepares an existing ledger's schema (``ensure_schema``); ``create`` is the only
    way a configured file comes to be (``gpufleet ledger init`` and tests' fixtures)."""
    from gpufleet.store import open_ledger

    source = "GPUFLEET_LEDGER_URL"
    missing = f"sqlite:///{tmp_path / 'absent.db'}"
    with pytest.raises(LedgerError, match="does not exist"):
        open_ledger(missing, source)
    assert not (tmp_path / "absent.db").exists()
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()  # a file with no tables yet: given them on open
    assert open_ledger(f"sqlite:///{empty}", source).count("gf_validations") == 0
    made = open_ledger(f"sqlite:///{tmp_path / 'sub' / 'made.db'}", source, create=True)
    assert made.count("gf_validations") == 0 and (tmp_path / "sub" / "made.db").exists()


def test_nothing_configured_is_the_local_default(airflow_db, fleet_state):
    for name, open_ in ENTRY_POINTS.items():
        assert open_().url == f"sqlite:///{fleet_state / 'ledger.db'}", name


def test_init_ledger_creates_then_finds_it_on_sqlite_and_postgresql(ledger_url):  # noqa: F811
    """On a database server the database exists (its administrator made it) and init gives it
    the tables; a SQLite file is made. Either way, run again, it changes nothing."""
    from gpufleet.store import init_ledger

    first = init_ledger(ledger_url, "GPUFLEET_LEDGER_URL")
    assert first.action == "created", first
    Ledger(ledger_url).set_pool_state("a3u-sim", "h200-a", "validated", "kept")
    again = init_ledger(ledger_url, "GPUFLEET_LEDGER_URL")
    assert again.action == "ready" and "nothing to do" in again.text()
    assert "GPUFLEET_LEDGER_URL" in again.text() and "postgres@" not in again.text()
    assert Ledger(ledger_url).pool_state("a3u-sim", "h200-a")["reason"] == "kept"
