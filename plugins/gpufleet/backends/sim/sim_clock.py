"""The simulated fleet's clock (``SimClock``): the one time the sim's delays, fault leases,
pods, cloud creates and repairs run on, kept in the state file's ``meta`` table so every
Airflow task process sees the same simulated time. (``run_times`` is another thing: how long
each simulated program would run on a real cluster.)
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Protocol

CLOCK_KEY = "clock:offset"  # the meta row holding how far the sim clock is ahead (seconds)
FROZEN_KEY = "clock:frozen"  # the meta row holding the UNIX time a frozen sim clock stands at


class ClockStore(Protocol):
    """Where a ``SimClock`` keeps its time: a store with a ``meta`` table (key, value) that opens
    a read connection and a write transaction (``state.SimState`` is one)."""

    def read(self) -> AbstractContextManager[sqlite3.Connection]: ...

    def tx(self) -> AbstractContextManager[sqlite3.Connection]: ...


class SimClock:
    """The simulated fleet's ``Clock`` (``gpufleet.domain.clock``), kept in the state file and
    so shared by every process that reads it: the system clock plus an offset, or, once
    ``freeze()`` was called (tests do), a time that moves only by ``advance``.

    ``advance(seconds)`` moves it forward for everyone; ``GPUFLEET_SIM_SPEED`` (how long the
    sim's delays take, ``programs.speed``) is then irrelevant to whoever advances past them.
    Methods taking ``conn`` read the clock on a connection already open."""

    def __init__(self, state: ClockStore):
        self.state = state

    def _read(self, conn: sqlite3.Connection | None) -> tuple[float | None, float]:
        """(the frozen time or None, the offset)."""
        if conn is None:
            with self.state.read() as own:
                return self._read(own)
        rows = dict(
            conn.execute("SELECT key, value FROM meta WHERE key IN (?, ?)", (CLOCK_KEY, FROZEN_KEY))
        )
        frozen = rows.get(FROZEN_KEY)
        return (float(frozen) if frozen is not None else None), float(rows.get(CLOCK_KEY, 0.0))

    def time(self, conn: sqlite3.Connection | None = None) -> float:
        frozen, offset = self._read(conn)
        return (time.time() if frozen is None else frozen) + offset

    def now(self, conn: sqlite3.Connection | None = None) -> datetime:
        return datetime.fromtimestamp(self.time(conn), UTC)

    def monotonic(self) -> float:
        frozen, offset = self._read(None)
        return (time.monotonic() if frozen is None else frozen) + offset

    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` of sim time pass: advanced at once while frozen (tests), else waited
        for on the system clock the sim follows."""
        frozen, _ = self._read(None)
        if frozen is None:
            time.sleep(max(seconds, 0.0))
        else:
            self.advance(max(seconds, 0.0))

    def advance(self, seconds: float) -> float:
        """Move the sim's time ``seconds`` forward (never back), for every process; the new
        time."""
        if not seconds >= 0:
            raise ValueError(f"the sim clock does not go back ({seconds} s)")
        with self.state.tx() as conn:
            frozen, offset = self._read(conn)
            key, value = (
                (CLOCK_KEY, offset + seconds) if frozen is None else (FROZEN_KEY, frozen + seconds)
            )
            conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, repr(value)))
            return self.time(conn)

    def freeze(self) -> float:
        """Stop the sim's time where it is: from now on only ``advance`` moves it; the time."""
        with self.state.tx() as conn:
            frozen, offset = self._read(conn)
            if frozen is None:
                conn.execute(
                    "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                    (FROZEN_KEY, repr(time.time() + offset)),
                )
                conn.execute("DELETE FROM meta WHERE key=?", (CLOCK_KEY,))
            return self.time(conn)

    def thaw(self) -> float:
        """Let a frozen sim clock run again with the system clock, from where it stands (no
        jump either way); the time. A running clock is left alone."""
        with self.state.tx() as conn:
            frozen, offset = self._read(conn)
            if frozen is not None:
                conn.execute("DELETE FROM meta WHERE key=?", (FROZEN_KEY,))
                conn.execute(
                    "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                    (CLOCK_KEY, repr(frozen + offset - time.time())),
                )
            return self.time(conn)
