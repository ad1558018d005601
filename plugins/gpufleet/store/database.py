"""Where the ledger lives: the Airflow connection id, the one order in which every entry point
resolves it (``resolve_ledger_url``; Airflow's connection lookup is injected, the store imports
no Airflow), connection -> SQLAlchemy URL, and one cached engine per URL and process (SQLite
gets WAL and a busy timeout: many task processes share the file; a forked child opens its own
connections)."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable
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


# How an entry point looks up an Airflow connection by id: the connection (anything with its
# attributes), None when it is not defined; raises when the lookup itself fails.
ConnectionLookup = Callable[[str], Any]

DEFAULT_SOURCE = "nothing configured: the local default"


def resolve_ledger_url(
    find_connection: ConnectionLookup | None = None, conn_id: str = LEDGER_CONN_ID
) -> tuple[str, str]:
    """The one order in which every entry point (tasks, UI pages, /metrics, CLI) finds the
    ledger: ``GPUFLEET_LEDGER_URL``; else the Airflow connection ``conn_id`` as Airflow finds it
    (``find_connection``: environment, secrets backends, metadata DB; without one, only the
    ``AIRFLOW_CONN_...`` variable); else, only when nothing is configured, a SQLite file in
    the state folder. Returns ``(url, where it came from)``. A lookup that fails raises
    ``LedgerError``: a configured ledger that cannot be read is never replaced by the default."""
    url = os.environ.get("GPUFLEET_LEDGER_URL")
    if url:
        return normalise_url(url), "GPUFLEET_LEDGER_URL"
    source = f"the Airflow connection {conn_id}"
    if find_connection is not None:
        try:
            conn = find_connection(conn_id)
        except LedgerError:
            raise
        except Exception as exc:  # noqa: BLE001 - a secrets backend or metadata DB failing
            raise LedgerError(
                f"cannot look up {source} (the ledger's location): {type(exc).__name__}: "
                f"{str(exc)[:200]}; fix Airflow's connections or set GPUFLEET_LEDGER_URL"
            ) from None
        if conn is not None:
            return connection_to_url(conn), source
    if os.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}"):
        return _env_connection_url(conn_id), source
    return default_sqlite_url(), DEFAULT_SOURCE


INIT_COMMAND = "gpufleet ledger init"  # the one step that creates a ledger (docs/ui.md)


def sqlite_file(url: str) -> str | None:
    """The file a SQLite ledger URL names (SQLite's ``file:`` URI form read too); None for
    another database, an in-memory one, or a URL naming no file."""
    if not url.startswith("sqlite"):
        return None
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    path = parsed.database
    if path and parsed.query.get("uri") == "true" and path.startswith("file:"):
        path = path.removeprefix("file:").split("?", 1)[0]  # SQLite's URI filename
    return path if path and path != ":memory:" else None


def refuse_missing_file(url: str, source: str) -> None:
    """A configured SQLite ledger is opened, never created: only ``gpufleet ledger init``
    (``store.opening.init_ledger``) creates one. Opening a file that is not there would make
    an empty ledger (SQLite creates the file), and every entry point (tasks, UI, /metrics, CLI)
    would then show an empty fleet without a word: raise ``LedgerError`` naming where the
    location came from (the connection id) and the file, and what to do. The local default
    (nothing configured) is exempt: it is gpufleet's own file in its state folder."""
    if source == DEFAULT_SOURCE:
        return
    path = sqlite_file(url)
    if path and not os.path.exists(path):
        raise LedgerError(
            f"the ledger named by {source} ({display_url(url)}) does not exist: a configured "
            f"ledger is opened, never created; create it with `{INIT_COMMAND}` (with the "
            "configuration the DAGs run with), or point the connection at the ledger the "
            "DAGs write"
        )


def default_sqlite_url() -> str:
    """The local default ledger: ``ledger.db`` in the state folder (created if missing)."""
    folder = state_dir()
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'ledger.db'}"


def default_ledger_url() -> str:
    """``resolve_ledger_url`` without Airflow's lookup (environment variables only), for code
    outside Airflow's processes (benchmarks, tests); entry points go through ``LedgerHook``
    (``gpufleet.airflow.hooks``) or, in the CLI, ``gpufleet.cli.fleet_state.open_ledger``."""
    return resolve_ledger_url()[0]


def _env_connection_url(conn_id: str) -> str:
    """``AIRFLOW_CONN_<ID>`` (a URI or Airflow's JSON form) as an SQLAlchemy URL."""
    env = os.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}")
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
    return default_sqlite_url()


def _use_wal(cur: Any, patience_s: float = 60.0) -> None:
    """Put the SQLite file in WAL mode (a property of the file, so the first process to manage
    it settles it for all). Switching needs a moment alone with the file, and SQLite answers
    "database is locked" at once, without its busy handler, when processes opening a new
    ledger together collide on it: check first, and retry the switch with a short backoff until
    the backoffs add up to ``patience_s`` (counted, not read from a clock)."""
    waited = 0.0
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
            if waited > patience_s:
                raise
            pause = delay + random.random() * delay
            time.sleep(pause)
            waited += pause
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


def _forget_engines_after_fork() -> None:
    """In the child of a fork (Celery's prefork pool, multiprocessing's fork start, a runner that
    forks a warm interpreter): the engines' pooled connections are the parent's, and two
    processes on one socket or SQLite handle corrupt both. Each engine drops its pool without
    closing them (the parent keeps using them; ``Engine.dispose(close=False)``, SQLAlchemy's
    way for a forked child), so the child opens its own; the lock is new (another thread may
    have held it at the fork)."""
    global _lock
    _lock = threading.Lock()
    for engine in list(_engines.values()):
        engine.dispose(close=False)


os.register_at_fork(after_in_child=_forget_engines_after_fork)
