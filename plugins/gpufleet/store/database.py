"""Where the ledger lives: the Airflow connection id, connection -> SQLAlchemy URL, and one
cached engine per URL (SQLite gets WAL and a busy timeout: many task processes share the file)."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import threading
import time
from typing import Any
from urllib.parse import quote

from sqlalchemy import Engine, create_engine, event

from gpufleet.config.paths import state_dir
from gpufleet.errors import LedgerError

# The Airflow connection naming the ledger database (operators resolve it; without it the
# ledger is a SQLite file in the state folder). The one definition of this id.
LEDGER_CONN_ID = "gpufleet_ledger"

_engines: dict[str, Engine] = {}
_lock = threading.Lock()


def connection_to_url(conn: Any) -> str:
    """An Airflow Connection (or anything with its attributes) as an SQLAlchemy URL."""
    conn_type = (getattr(conn, "conn_type", None) or "").lower()
    extra = getattr(conn, "extra_dejson", None) or {}
    if extra.get("sqlalchemy_url"):
        return extra["sqlalchemy_url"]
    if conn_type in ("sqlite",):
        path = getattr(conn, "host", None) or getattr(conn, "schema", None)
        if not path:
            raise LedgerError("the ledger connection is sqlite but names no file (put it in host)")
        return f"sqlite:///{path}"
    if conn_type in ("postgres", "postgresql"):
        login = quote(conn.login or "", safe="")
        auth = login + (f":{quote(conn.password, safe='')}" if conn.password else "")
        host = conn.host or "localhost"
        port = f":{conn.port}" if conn.port else ""
        return f"postgresql+psycopg2://{auth}{'@' if auth else ''}{host}{port}/{conn.schema or ''}"
    raise LedgerError(
        f"the ledger connection has type {conn_type!r}: use postgres or sqlite "
        "(or set extra.sqlalchemy_url)"
    )


def display_url(url: Any) -> str:
    """A database URL as shown to a person: no user name, no password (both are credentials).
    ``url`` is a string or a SQLAlchemy URL; raises ``ValueError`` when it cannot be parsed."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception as exc:  # noqa: BLE001 - sqlalchemy raises ArgumentError and others
        raise ValueError(str(exc)) from None
    # URL.set() ignores None, so replace the fields of the (named-tuple) URL itself
    return parsed._replace(username=None, password=None).render_as_string(hide_password=False)


def normalise_url(url: str) -> str:
    if url.startswith("postgres://"):
        return "postgresql+psycopg2://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        return "postgresql+psycopg2://" + url[len("postgresql://") :]
    return url


def default_ledger_url() -> str:
    """``GPUFLEET_LEDGER_URL``, else ``AIRFLOW_CONN_GPUFLEET_LEDGER``, else a local SQLite file."""
    url = os.environ.get("GPUFLEET_LEDGER_URL")
    if url:
        return normalise_url(url)
    env = os.environ.get(f"AIRFLOW_CONN_{LEDGER_CONN_ID.upper()}")
    if env:
        env = env.strip()
        if env.startswith("{"):
            data = json.loads(env)

            class _C:  # the JSON form of an Airflow connection
                conn_type = data.get("conn_type")
                host = data.get("host")
                login = data.get("login")
                password = data.get("password")
                schema = data.get("schema")
                port = data.get("port")
                extra_dejson = data.get("extra") or {}

            return connection_to_url(_C)
        return normalise_url(env)
    folder = state_dir()
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'ledger.db'}"


def _use_wal(cur: Any, patience_s: float = 60.0) -> None:
    """Put the SQLite file in WAL mode (a property of the file, so the first process to manage
    it settles it for all). Switching needs a moment alone with the file, and SQLite answers
    "database is locked" at once, without its busy handler, when processes opening a new
    ledger together collide on it: check first, and retry the switch with a short backoff."""
    deadline = time.monotonic() + patience_s
    delay = 0.01
    while True:
        try:
            if str(cur.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
                return
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() > deadline:
                raise
            time.sleep(delay + random.random() * delay)
            delay = min(delay * 2, 0.5)


def engine_for(url: str) -> Engine:
    """The engine for ``url``, created once per process."""
    with _lock:
        engine = _engines.get(url)
        if engine is None:
            if url.startswith("sqlite"):
                engine = create_engine(url, connect_args={"timeout": 60})

                @event.listens_for(engine, "connect")
                def _pragmas(dbapi_conn, _record):  # many task processes share the file
                    cur = dbapi_conn.cursor()
                    cur.execute("PRAGMA busy_timeout=60000")
                    cur.execute("PRAGMA foreign_keys=ON")
                    _use_wal(cur)
                    cur.close()
            else:
                engine = create_engine(url, pool_pre_ping=True, pool_size=2, max_overflow=2)
            _engines[url] = engine
        return engine
