"""The sim's day of node events: what happens to which node at which simulated time (a GPU
falls off the bus at 10:00, a node reboots at 10:05, maintenance is announced at noon).

A row of ``sim_schedule`` names the cluster, the time on the sim's clock (``SimState.clock``),
the action (``node_actions.ACTIONS``), its node and arguments. Nothing runs in the background:
the rows whose time has come are fired, in time order and each once, whenever the cluster's
nodes are read (a list or a watch: ``SimNodeWatch.tick``), and each takes effect at its own
scheduled time (the Event's timestamp is the time it was due, not the time it was read), so a
test or a campaign advances the clock and reads.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from gpufleet.errors import GpufleetError

TABLE = "sim_schedule"
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    id INTEGER PRIMARY KEY AUTOINCREMENT, cluster TEXT NOT NULL, at REAL NOT NULL,
    action TEXT NOT NULL, node TEXT, args TEXT NOT NULL DEFAULT '{{}}', fired_at REAL);
CREATE INDEX IF NOT EXISTS {TABLE}_due ON {TABLE} (cluster, fired_at, at);
CREATE TABLE IF NOT EXISTS sim_ec2_status (
    cluster TEXT NOT NULL, node TEXT NOT NULL, instance_status TEXT NOT NULL DEFAULT 'ok',
    system_status TEXT NOT NULL DEFAULT 'ok', instance_since REAL, system_since REAL,
    events TEXT NOT NULL DEFAULT '[]', PRIMARY KEY (cluster, node));
"""
# ``sim_ec2_status``: what EC2's DescribeInstanceStatus says of an EKS-shaped sim cluster's
# nodes beyond "ok, no event" (``node_actions``' instance-status and maintenance actions write
# it; ``ec2_status.SimInstanceStatus`` reads it)

_TIME_OF_DAY = re.compile(r"^([01]?[0-9]|2[0-3]):([0-5][0-9])(?::([0-5][0-9]))?$")


@dataclass(frozen=True)
class Scheduled:
    """One row of the schedule."""

    id: int
    cluster: str
    at: float
    action: str
    node: str | None
    args: dict[str, Any]
    fired_at: float | None = None


def time_of_day(now: float, text: str) -> float:
    """The next moment (UTC, on the sim's clock, at or after ``now``) whose time of day is
    ``text`` (``HH:MM`` or ``HH:MM:SS``)."""
    match = _TIME_OF_DAY.fullmatch(text.strip())
    if match is None:
        raise GpufleetError(f"time of day {text!r} is not HH:MM or HH:MM:SS (24-hour, UTC)")
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    today = datetime.fromtimestamp(now, UTC).replace(
        hour=hours, minute=minutes, second=seconds, microsecond=0
    )
    moment = today if today.timestamp() >= now else today + timedelta(days=1)
    return moment.timestamp()


def add(
    conn: sqlite3.Connection,
    cluster: str,
    at: float,
    action: str,
    node: str | None,
    args: dict[str, Any] | None = None,
) -> int:
    """Schedule ``action`` on ``node`` at ``at``; the row's id."""
    cursor = conn.execute(
        f"INSERT INTO {TABLE} (cluster, at, action, node, args) VALUES (?, ?, ?, ?, ?)",
        (cluster, at, action, node, json.dumps(args or {}, sort_keys=True)),
    )
    return int(cursor.lastrowid or 0)


def _row(row: sqlite3.Row) -> Scheduled:
    return Scheduled(
        row["id"],
        row["cluster"],
        row["at"],
        row["action"],
        row["node"],
        json.loads(row["args"]),
        row["fired_at"],
    )


def any_due(conn: sqlite3.Connection, cluster: str, now: float) -> bool:
    row = conn.execute(
        f"SELECT 1 FROM {TABLE} WHERE cluster=? AND fired_at IS NULL AND at<=? LIMIT 1",
        (cluster, now),
    ).fetchone()
    return row is not None


def take_due(conn: sqlite3.Connection, cluster: str, now: float) -> list[Scheduled]:
    """The rows of ``cluster`` due by ``now`` and not fired yet, oldest first, marked fired
    (in the caller's transaction: two readers never fire one row twice)."""
    rows = conn.execute(
        f"SELECT * FROM {TABLE} WHERE cluster=? AND fired_at IS NULL AND at<=? ORDER BY at, id",
        (cluster, now),
    ).fetchall()
    conn.executemany(f"UPDATE {TABLE} SET fired_at=? WHERE id=?", [(now, r["id"]) for r in rows])
    return [_row(r) for r in rows]


def listed(conn: sqlite3.Connection, cluster: str | None = None) -> list[Scheduled]:
    """Every row (of one cluster), in time order."""
    rows = conn.execute(
        f"SELECT * FROM {TABLE} WHERE (? IS NULL OR cluster=?) ORDER BY at, id",
        (cluster, cluster),
    ).fetchall()
    return [_row(r) for r in rows]
