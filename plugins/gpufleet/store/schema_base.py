"""What every ledger table module shares: the one ``metadata`` all tables are defined on, the
timezone-aware time column (``UTCDateTime``, ``timestamp``; no default: every write gives its
time, read from the ledger's clock), and ``kept_by_triggers`` for a table the database
maintains. ``schema`` and the table modules beside it (``schema_regions``, ``schema_snapshots``,
``schema_latest``, ``schema_versions``) import these from here; ``schema`` imports those modules
back so ``schema.metadata`` holds every table.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Column, DateTime, MetaData, Table, TypeDecorator, event

metadata = MetaData()


def kept_by_triggers(table: Table, triggers: dict[str, list[str]]):
    """A table the database keeps by triggers (``triggers``: dialect name -> statements):
    returns the function that creates them on a connection (a migration calls it), and has a
    new ledger's ``create_all`` call it once it created ``table``."""

    def keep(conn) -> None:
        for statement in triggers[conn.dialect.name]:
            conn.exec_driver_sql(statement)

    @event.listens_for(metadata, "after_create")
    def _after_create(target, conn, **kw) -> None:  # the tables this create_all created
        if table in kw.get("tables", ()):
            keep(conn)

    return keep


class UTCDateTime(TypeDecorator):
    """Timezone-aware UTC in and out, also on SQLite (which stores naive timestamps)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is not None and value.tzinfo is None:
            raise ValueError("the ledger stores aware datetimes only (use UTC)")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value, dialect):
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    def result_processor(self, dialect, coltype):
        parse = self.impl_instance.result_processor(dialect, coltype)

        def process(value):  # a value that is not a timestamp comes back as it is
            try:
                value = parse(value) if parse is not None else value
            except (TypeError, ValueError):
                return value
            if not isinstance(value, datetime):
                return value
            return self.process_result_value(value, dialect)

        return process


def timestamp(name: str, **kw) -> Column:
    """A time column: timezone-aware UTC in and out (``UTCDateTime``)."""
    return Column(name, UTCDateTime(), **kw)
