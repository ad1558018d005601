"""Ledger rows as dicts for the fleet-wide reads (the readiness table, ``/metrics``), typed as
SQLAlchemy types them (each column's own result processor: aware timestamps, JSON, strict
booleans) without building SQLAlchemy's row objects: a read of thousands of rows spends most
of its time there otherwise."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

# What a read covers: every cluster (None), one cluster's name, or several clusters' names
Clusters = str | Collection[str] | None


def of_clusters(column: Any, clusters: str | Collection[str]) -> Any:
    """The condition that ``column`` names ``clusters``: one cluster's name, or any of several
    (one statement for a few clusters of many; none named: no row)."""
    if isinstance(clusters, str):
        return column == clusters
    return column.in_(list(clusters))


def typed_rows(result: Any, columns: Any, dialect: Any) -> list[dict[str, Any]]:
    """The rows of a driver-level ``result`` (``Connection.exec_driver_sql``) as dicts, each
    value through the result processor of the column of its name in ``columns`` (a table's
    ``.c`` or a select's ``selected_columns``). Closes the result."""
    described = result.cursor.description
    names = [d[0] for d in described]
    steps = []
    for i, (name, coltype) in enumerate((d[0], d[1]) for d in described):
        process = columns[name].type.dialect_impl(dialect).result_processor(dialect, coltype)
        if process is not None:
            steps.append((i, name, process))
    rows = result.cursor.fetchall()
    result.close()
    out = []
    for row in rows:
        record = dict(zip(names, row, strict=True))
        for i, name, process in steps:
            record[name] = process(row[i])
        out.append(record)
    return out


def select_dicts(conn: Any, statement: Any) -> list[dict[str, Any]]:
    """``[dict(row._mapping) for row in conn.execute(statement)]`` for a select, faster where it
    binds no parameters (its SQL is run as compiled and typed by ``typed_rows``)."""
    compiled = statement.compile(dialect=conn.dialect)
    if compiled.params:  # bound values: SQLAlchemy binds them (its own bind processors)
        return [dict(r._mapping) for r in conn.execute(statement)]
    result = conn.exec_driver_sql(str(compiled))
    return typed_rows(result, statement.selected_columns, conn.dialect)
