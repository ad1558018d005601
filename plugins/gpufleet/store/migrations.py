"""Ledger schema upgrades through Alembic: ``ensure_schema`` creates a new ledger at the head
revision, or upgrades an older one, under a database lock.

The revisions ship in the package (``store/alembic/versions``, one per schema version:
revision ``0001`` .. ``0011`` is version 1 .. 11) with an ``env.py`` that takes the connection
from ``config.attributes["connection"]``; no ``alembic.ini`` is read. The ledger records its
revision in ``gf_alembic_version`` (never Airflow's ``alembic_version``, should the ledger
share Airflow's database). A ledger from before Alembic carries ``gf_schema_version`` instead:
it is stamped at the revision of its version, the old table dropped, then upgraded.

Also the DDL helpers the revisions share (``add_check``, ``replace_check``)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, inspect, text
from sqlalchemy.exc import DBAPIError

from gpufleet.errors import LedgerError
from gpufleet.store.schema import SCHEMA_VERSION, metadata

if TYPE_CHECKING:  # Alembic itself is imported only when a ledger needs it (~0.6 s)
    from alembic.config import Config
    from alembic.script import ScriptDirectory

SCRIPTS = Path(__file__).with_name("alembic")  # env.py, script.py.mako, versions/
VERSION_TABLE = "gf_alembic_version"
LEGACY_VERSION_TABLE = "gf_schema_version"  # the hand-written version table (versions 1..10)
LAST_LEGACY_VERSION = 10  # the last schema version a ledger could carry in that table
_PG_SCHEMA_LOCK = 7_263_541  # pg_advisory_xact_lock key held while the schema is prepared


def revision_of(version: int) -> str:
    """The Alembic revision id of schema version ``version`` (``10`` -> ``"0010"``)."""
    return f"{version:04d}"


def alembic_config(conn: Connection | None = None) -> Config:
    """Alembic's configuration, built in code: the package's scripts, ``conn`` to run on."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(SCRIPTS))
    config.attributes["connection"] = conn
    return config


@cache
def _scripts() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def head() -> str | None:
    """The newest revision this code knows (None: it knows none)."""
    return _scripts().get_current_head()


def current_revision(conn: Connection) -> str | None:
    """The revision ``gf_alembic_version`` records, None for a ledger Alembic never stamped."""
    from alembic.runtime.migration import MigrationContext

    context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def ensure_schema(engine: Engine) -> int:
    """Create the ledger at the head revision, or upgrade it there; safe from every process.

    Airflow starts many task processes at once, each opening the ledger: the schema is
    prepared under a database lock (SQLite: an immediate transaction, DDL included;
    PostgreSQL: a transaction-scoped advisory lock), so one process creates the tables while
    the others wait and then find them at head. A ledger already at head, what every task
    process but the first finds, is settled by one read, without the lock. Returns the schema
    version (``SCHEMA_VERSION``)."""
    if _at_head(engine):
        return SCHEMA_VERSION
    with engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        elif conn.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_SCHEMA_LOCK})")
        try:
            _prepare(conn)
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
    return SCHEMA_VERSION


def _at_head(engine: Engine) -> bool:
    """Whether the ledger records the head revision; False when it records another one or
    none (no version table yet: the read fails), which the locked path settles."""
    with engine.connect() as conn:
        try:
            current = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
        except DBAPIError:
            return False
    return current == revision_of(SCHEMA_VERSION)


def _prepare(conn: Connection) -> None:
    tables = set(inspect(conn).get_table_names())
    if VERSION_TABLE in tables:  # the common case, settled without importing Alembic
        current = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
        if current == revision_of(SCHEMA_VERSION):
            return
    from alembic import command
    from alembic.util import CommandError

    config = alembic_config(conn)
    if VERSION_TABLE not in tables and LEGACY_VERSION_TABLE in tables:
        _stamp_legacy(conn, config)
    elif VERSION_TABLE not in tables:  # a new ledger: today's tables, stamped at head
        metadata.create_all(conn, checkfirst=True)
        command.stamp(config, "head")
        return
    current = current_revision(conn)
    try:
        # alembic annotates get_revision's id as str; its revision map takes None (no row)
        _scripts().get_revision(current)  # type: ignore[arg-type]
    except CommandError as exc:  # a revision this code does not know: a newer gpufleet's
        raise _newer(current) from exc
    command.upgrade(config, "head")


def _stamp_legacy(conn: Connection, config: Config) -> None:
    from alembic import command

    version = conn.execute(text(f"SELECT max(version) FROM {LEGACY_VERSION_TABLE}")).scalar()
    if version is None:  # an empty version table: at most the last version it ever named
        version = LAST_LEGACY_VERSION
    if version > LAST_LEGACY_VERSION:
        raise _newer(revision_of(version))
    command.stamp(config, revision_of(version))
    conn.execute(text(f"DROP TABLE {LEGACY_VERSION_TABLE}"))


def _newer(revision: str | None) -> LedgerError:
    return LedgerError(
        f"the ledger is at schema revision {revision}, newer than this gpufleet "
        f"({head()}): upgrade gpufleet before using this ledger"
    )


# --- DDL the revisions share -----------------------------------------------------------------


def _constraint_names(conn: Connection, table: str) -> set[str | None]:
    return {c["name"] for c in inspect(conn).get_check_constraints(table)}


def _abort_triggers(conn: Connection, table: str, name: str, expr: str) -> None:
    """SQLite: triggers named ``<name>_insert`` / ``_update`` refusing what ``expr`` refuses
    (``{c}`` before each column name), replacing any of that name."""
    for event in ("INSERT", "UPDATE"):
        conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}_{event.lower()}")
        conn.exec_driver_sql(
            f"CREATE TRIGGER {name}_{event.lower()} BEFORE {event} ON "
            f"{table} WHEN NOT ({expr.format(c='NEW.')}) BEGIN "
            f"SELECT RAISE(ABORT, 'CHECK constraint failed: {name}'); END"
        )


def add_check(conn: Connection, table: str, name: str, expr: str) -> None:
    """Give an existing ``table`` CHECK ``name`` (``expr``, ``{c}`` for the column prefix).
    PostgreSQL: ``NOT VALID`` (new rows are checked; old rows are refused by the readers'
    strict parsing instead). SQLite, which cannot add a CHECK to a table without rebuilding it
    (and a rebuild of a table other tables reference would cascade deletes into them): abort
    triggers on insert and update. A CHECK the table already has is left alone."""
    if name in _constraint_names(conn, table):
        return
    if conn.dialect.name == "sqlite":
        _abort_triggers(conn, table, name, expr)
        return
    conn.exec_driver_sql(
        f"ALTER TABLE {table} ADD CONSTRAINT {name} CHECK ({expr.format(c='')}) NOT VALID"
    )


def replace_check(conn: Connection, table: str, name: str, expr: str) -> None:
    """Make CHECK constraint ``name`` of ``table`` read ``expr`` (a ``state IN (...)`` list,
    ``{c}`` for the column prefix). PostgreSQL: dropped and re-added (``NOT VALID``: existing
    rows are not re-checked). SQLite, which cannot alter a constraint: the IN list is rewritten
    in the table's SQL (``PRAGMA writable_schema``, which SQLite documents as safe for a change
    that does not touch what is stored, such as loosening a CHECK); where ``add_check`` made
    it triggers, they are re-created."""
    if conn.dialect.name != "sqlite":
        conn.exec_driver_sql(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {name}")
        conn.exec_driver_sql(
            f"ALTER TABLE {table} ADD CONSTRAINT {name} CHECK ({expr.format(c='')}) NOT VALID"
        )
        return
    if name not in _constraint_names(conn, table):
        _abort_triggers(conn, table, name, expr)
        return
    sql = conn.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).scalar()
    assert sql is not None, f"{table} is not in sqlite_master"  # its constraints were just read
    start = sql.index(f"CONSTRAINT {name} CHECK (")
    end = sql.index(")", sql.index("IN (", start)) + 1
    new_sql = sql[:start] + f"CONSTRAINT {name} CHECK ({expr.format(c='')}" + sql[end:]
    version: int = conn.exec_driver_sql("PRAGMA schema_version").scalar_one()
    conn.exec_driver_sql("PRAGMA writable_schema = ON")
    conn.exec_driver_sql(
        "UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = ?", (new_sql, table)
    )
    conn.exec_driver_sql(f"PRAGMA schema_version = {version + 1}")
    conn.exec_driver_sql("PRAGMA writable_schema = OFF")
