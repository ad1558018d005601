"""The sim's change log: what a Kubernetes watch of nodes and node Events would see.

Every change of a sim node (added, its labels, taints, cordon, readiness, conditions or boot id
changed, deleted) is appended to ``node_changes`` by SQLite triggers on the ``nodes`` table, so
no writer can forget it (the cloud's pool creates and repairs, the cluster's patches, a test's
own SQL). Every Event about a node is written through ``record_event``, which aggregates a
repeat as the API server does (same node, reason and message: one Event whose ``count`` grows,
a MODIFIED change) and appends the change in the same transaction.

A change's ``version`` is its row id: one counter for the whole state file, as etcd's revision
is for a cluster, handed out as strings (``"42"``). The log keeps the last ``keep`` changes per
cluster (``DEFAULT_KEEP``, or the ``watch:keep`` meta row: ``set_keep``); older ones are
compacted away and a watch from before them is refused (``WatchExpired``, the API's 410
Gone). ``SimState.reset`` raises the floor (``watch:floor``) past every version handed out, so a
watcher from before a reset relists too.

Each node change stores the node's row as it was after the change (before it, for a DELETED)
and is read back through the same rendering as a live node: ``node_manifest`` renders a node
row as the Kubernetes Node object (``status.conditions`` with the Ready condition the kubelet
would post, ``status.nodeInfo.bootID``, ``metadata.uid``/``creationTimestamp``) and
``event_manifest`` an Event row as a core/v1 Event; ``gpufleet.backends.kube.node_objects``
reads both, as it reads the real API's.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Mapping
from typing import Any

from gpufleet.backends.base import WatchExpired
from gpufleet.backends.kube.node_objects import format_time

DEFAULT_KEEP = 1000  # changes a watch can resume from, per cluster
KEEP_KEY = "watch:keep"
FLOOR_KEY = "watch:floor"  # every version up to this one is gone (a reset)


def compacted_key(cluster: str) -> str:
    return f"watch:compacted:{cluster}"


NODE_COLUMNS = {
    "uid": "TEXT",
    "boot_id": "TEXT",
    "created_at": "REAL",
    "conditions": "TEXT NOT NULL DEFAULT '[]'",  # the conditions but Ready, API-shaped
    "ready_since": "REAL",  # when ``ready`` last changed (the Ready condition's transition)
}

SCHEMA = """
CREATE TABLE IF NOT EXISTS node_changes (
    version INTEGER PRIMARY KEY AUTOINCREMENT, cluster TEXT NOT NULL, kind TEXT NOT NULL,
    change TEXT NOT NULL, name TEXT NOT NULL, body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS node_changes_by_cluster ON node_changes (cluster, version);
CREATE TABLE IF NOT EXISTS node_events (
    cluster TEXT NOT NULL, uid TEXT NOT NULL, name TEXT NOT NULL, node TEXT NOT NULL,
    reason TEXT NOT NULL, message TEXT NOT NULL, type TEXT NOT NULL, source TEXT NOT NULL,
    count INTEGER NOT NULL, first_seen REAL NOT NULL, last_seen REAL NOT NULL,
    version INTEGER NOT NULL, PRIMARY KEY (cluster, uid));
"""

_ROW = (
    "json_object('name', {r}.name, 'pool', {r}.pool, 'labels', {r}.labels, 'taints', "
    "{r}.taints, 'unschedulable', {r}.unschedulable, 'ready', {r}.ready, 'uid', {r}.uid, "
    "'boot_id', {r}.boot_id, 'created_at', {r}.created_at, 'conditions', {r}.conditions, "
    "'ready_since', {r}.ready_since)"
)
_CHANGED = " OR ".join(
    f"OLD.{c} IS NOT NEW.{c}"
    for c in ("pool", "labels", "taints", "unschedulable", "ready", "boot_id", "conditions", "uid")
)

TRIGGERS = f"""
CREATE TRIGGER IF NOT EXISTS node_added AFTER INSERT ON nodes BEGIN
    INSERT INTO node_changes (cluster, kind, change, name, body)
    VALUES (NEW.cluster, 'node', 'ADDED', NEW.name, {_ROW.format(r="NEW")});
END;
CREATE TRIGGER IF NOT EXISTS node_modified AFTER UPDATE ON nodes WHEN {_CHANGED} BEGIN
    INSERT INTO node_changes (cluster, kind, change, name, body)
    VALUES (NEW.cluster, 'node', 'MODIFIED', NEW.name, {_ROW.format(r="NEW")});
END;
CREATE TRIGGER IF NOT EXISTS node_deleted AFTER DELETE ON nodes BEGIN
    INSERT INTO node_changes (cluster, kind, change, name, body)
    VALUES (OLD.cluster, 'node', 'DELETED', OLD.name, {_ROW.format(r="OLD")});
END;
CREATE TRIGGER IF NOT EXISTS node_changes_compacted AFTER INSERT ON node_changes BEGIN
    INSERT OR REPLACE INTO meta (key, value)
    SELECT 'watch:compacted:' || NEW.cluster, version FROM node_changes
    WHERE cluster = NEW.cluster ORDER BY version DESC LIMIT 1
    OFFSET COALESCE((SELECT CAST(value AS INTEGER) FROM meta WHERE key = '{KEEP_KEY}'),
                    {DEFAULT_KEEP});
    DELETE FROM node_changes WHERE cluster = NEW.cluster AND version <= COALESCE(
        (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'watch:compacted:' || NEW.cluster),
        0);
END;
"""


def install(conn: sqlite3.Connection) -> None:
    """Create the log's tables and the triggers that fill it (idempotent); ``nodes`` gains
    the columns a watch reports (an older state file is upgraded in place)."""
    have = {r[1] for r in conn.execute("PRAGMA table_info(nodes)")}
    for column, kind in NODE_COLUMNS.items():
        if column not in have:
            conn.execute(f"ALTER TABLE nodes ADD COLUMN {column} {kind}")
    conn.executescript(SCHEMA + TRIGGERS)
    # nodes of an older state file get an identity once (their creation time stays unknown)
    if conn.execute("SELECT 1 FROM nodes WHERE uid IS NULL OR boot_id IS NULL LIMIT 1").fetchone():
        conn.execute(f"UPDATE nodes SET uid = {_UUID} WHERE uid IS NULL")
        conn.execute(f"UPDATE nodes SET boot_id = {_UUID} WHERE boot_id IS NULL")


_UUID = (  # a random UUID (version 4's layout) in SQL
    "lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || "
    "substr(hex(randomblob(2)), 2) || '-' || substr('89ab', 1 + abs(random()) % 4, 1) || "
    "substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6)))"
)


def set_keep(conn: sqlite3.Connection, keep: int) -> None:
    """Keep the last ``keep`` changes per cluster from the next change on."""
    if keep < 1:
        raise ValueError(f"the change log keeps at least one change, not {keep}")
    conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (KEEP_KEY, str(keep)))


def _meta_int(conn: sqlite3.Connection, key: str) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return int(row[0]) if row else 0


def newest_version(conn: sqlite3.Connection) -> int:
    """The newest version handed out (any cluster): what a list is "as of"."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name='node_changes'").fetchone()
    return max(int(row[0]) if row else 0, _meta_int(conn, FLOOR_KEY))


def oldest_resumable(conn: sqlite3.Connection, cluster: str) -> int:
    """The oldest version a watch of ``cluster`` can resume from: every change after it is
    still in the log."""
    return max(_meta_int(conn, compacted_key(cluster)), _meta_int(conn, FLOOR_KEY))


def parse_version(since: str) -> int:
    text = str(since).strip()
    if not text.isdigit():
        from gpufleet.errors import BackendError

        raise BackendError(f"resource version {since!r} is not one this sim handed out")
    return int(text)


def changes_after(
    conn: sqlite3.Connection, cluster: str, kind: str, since: str
) -> list[sqlite3.Row]:
    """The ``kind`` (``node`` | ``event``) changes of ``cluster`` after version ``since``,
    oldest first; ``WatchExpired`` when some of them were compacted away."""
    after = parse_version(since)
    floor = oldest_resumable(conn, cluster)
    if after < floor:
        raise WatchExpired(
            f"sim {cluster}: resource version {after} is too old (the change log keeps the "
            f"changes after {floor}): list again and watch from the list's version"
        )
    return conn.execute(
        "SELECT * FROM node_changes WHERE cluster=? AND kind=? AND version>? ORDER BY version",
        (cluster, kind, after),
    ).fetchall()


def record_event(
    conn: sqlite3.Connection,
    cluster: str,
    node: str,
    *,
    reason: str,
    message: str,
    type_: str = "Warning",
    source: str,
    at: float,
) -> int:
    """Record an Event about ``node``; a repeat (same node, reason, message and source) is
    the same Event seen again (``count`` + 1, ``lastTimestamp`` moved). The change's
    version."""
    row = conn.execute(
        "SELECT uid, count FROM node_events WHERE cluster=? AND node=? AND reason=? AND "
        "message=? AND source=?",
        (cluster, node, reason, message, source),
    ).fetchone()
    if row is None:
        uid = str(uuid.uuid4())
        name = f"{node}.{uuid.uuid4().hex[:16]}"  # as client-go's recorder names Events
        conn.execute(
            "INSERT INTO node_events VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, 0)",
            (cluster, uid, name, node, reason, message, type_, source, at, at),
        )
        change = "ADDED"
    else:
        uid = row["uid"]
        conn.execute(
            "UPDATE node_events SET count=count+1, last_seen=? WHERE cluster=? AND uid=?",
            (at, cluster, uid),
        )
        change = "MODIFIED"
    event = conn.execute(
        "SELECT * FROM node_events WHERE cluster=? AND uid=?", (cluster, uid)
    ).fetchone()
    cursor = conn.execute(
        "INSERT INTO node_changes (cluster, kind, change, name, body) VALUES (?, 'event', ?, ?, ?)",
        (cluster, change, uid, json.dumps(dict(event))),
    )
    version = int(cursor.lastrowid or 0)
    conn.execute(
        "UPDATE node_events SET version=? WHERE cluster=? AND uid=?", (version, cluster, uid)
    )
    return version


# --- rendering: a row as the API object --------------------------------------------------------


def _json(value: Any, default: Any) -> Any:
    if value is None:
        return default
    return json.loads(value) if isinstance(value, str) else value


def node_manifest(row: Mapping[str, Any], cluster: str, version: int | None = None) -> dict:
    """A sim node row (or a logged snapshot of one) as the Node object the API would return.

    The Ready condition is the kubelet's (``KubeletReady`` / ``KubeletNotReady``, since
    ``ready_since``); the row's other conditions follow it as stored (the Node Problem
    Detector's, the GPU health monitors')."""
    ready = bool(row["ready"])
    ready_condition = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "kubelet is posting ready status"
        if ready
        else "container runtime status check may not have completed yet",
        "lastTransitionTime": format_time(row["ready_since"]),
    }
    conditions = [ready_condition, *_json(row["conditions"], [])]
    metadata: dict[str, Any] = {
        "name": row["name"],
        "labels": _json(row["labels"], {}),
        "uid": row["uid"],
        "creationTimestamp": format_time(row["created_at"]),
    }
    if version is not None:
        metadata["resourceVersion"] = str(version)
    spec: dict[str, Any] = {"providerID": f"sim://{cluster}/{row['name']}"}
    taints = _json(row["taints"], [])
    if taints:
        spec["taints"] = taints
    if row["unschedulable"]:
        spec["unschedulable"] = True
    status = {"conditions": conditions, "nodeInfo": {"bootID": row["boot_id"] or ""}}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }


def event_manifest(row: Mapping[str, Any]) -> dict:
    """A node Event row as the core/v1 Event the API would return (``default`` namespace,
    where the kubelet and node agents record node Events)."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": row["name"],
            "namespace": "default",
            "uid": row["uid"],
            "resourceVersion": str(row["version"]),
        },
        "involvedObject": {"kind": "Node", "name": row["node"], "apiVersion": "v1"},
        "reason": row["reason"],
        "message": row["message"],
        "type": row["type"],
        "source": {"component": row["source"], "host": row["node"]},
        "reportingComponent": row["source"],
        "count": row["count"],
        "firstTimestamp": format_time(row["first_seen"]),
        "lastTimestamp": format_time(row["last_seen"]),
    }
