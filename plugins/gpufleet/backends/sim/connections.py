"""Each thread's open SQLite connection to a sim state file, kept between calls.

Opening one (connect, the pragmas, reading the schema) costs about 100 times a small query, and
the sim answers every API call from a few. A connection is kept while the file and its
write-ahead log are the same files (device, inode): a state file replaced, or its log removed,
gets a new one. A forked child drops its parent's unclosed (a connection must not cross a
fork). ``SimState`` (``backends.sim.state``) opens its connections here, and asks whether this
thread already set a file's schema up (``set_up``, ``mark_set_up``).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

__all__ = ["connect", "mark_set_up", "set_up"]

KEEP = 8  # state files a thread keeps a connection to (tests make a state file each)


class _Connections(threading.local):
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.open: dict[str, tuple[tuple, sqlite3.Connection]] = {}
        # state file -> (its identity, its schema's version) when this thread last set it up
        self.ready: dict[str, tuple[tuple, int]] = {}

    def mine(self) -> _Connections:
        """This thread's, the parent's dropped in a forked child."""
        if self.pid != os.getpid():
            self.pid, self.open, self.ready = os.getpid(), {}, {}
        return self


_CONNECTIONS = _Connections()


def _identity(path: Path) -> tuple | None:
    """Which files ``path`` and its write-ahead log are (None: no state file yet)."""
    try:
        db = os.stat(path)
    except FileNotFoundError:
        return None
    try:
        wal = os.stat(f"{path}-wal")
        log: tuple = (wal.st_dev, wal.st_ino)
    except FileNotFoundError:
        log = ()
    return db.st_dev, db.st_ino, log


def _schema_stamp(path: Path, conn: sqlite3.Connection) -> tuple[tuple, int] | None:
    """The state file's identity and its schema's version (SQLite's ``schema_version``, which
    any table, column, index or trigger change moves)."""
    key = _identity(path)
    if key is None:
        return None
    return key, conn.execute("PRAGMA schema_version").fetchone()[0]


def connect(path: Path) -> sqlite3.Connection:
    """This thread's connection to the state file ``path`` (autocommit: each statement sees
    what other processes committed), opened once and kept."""
    cache, key = _CONNECTIONS.mine(), str(path)
    kept = cache.open.pop(key, None)
    if kept is not None:
        if kept[0] == _identity(path):
            cache.open[key] = kept
            return kept[1]
        kept[1].close()
    conn = sqlite3.connect(path, timeout=60, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA busy_timeout=60000")
    ident = _identity(path)  # the file and its log exist now
    if ident is not None:
        if len(cache.open) >= KEEP:
            cache.open.pop(next(iter(cache.open)))[1].close()
        cache.open[key] = (ident, conn)
    return conn


def set_up(path: Path, conn: sqlite3.Connection) -> bool:
    """Whether this thread set the state file's schema up, and no schema changed since (any
    process's: SQLite's ``schema_version``) nor the file was replaced."""
    stamp = _schema_stamp(path, conn)
    return stamp is not None and _CONNECTIONS.mine().ready.get(str(path)) == stamp


def mark_set_up(path: Path, conn: sqlite3.Connection) -> None:
    """Record that this thread just set the state file's schema up (``set_up``)."""
    stamp = _schema_stamp(path, conn)
    if stamp is not None:
        _CONNECTIONS.mine().ready[str(path)] = stamp
