"""The one notion of time the product reads: a ``Clock``.

Everything that measures or records time asks a ``Clock`` instead of ``time.time()`` or
``datetime.now()``: the simulated fleet's delays and fault leases, a drain's soak and timeout,
the triggers' poll intervals, timeouts and waits, the ledger's timestamps and the ages read
from them. ``SystemClock`` (``SYSTEM_CLOCK``) is the real one, chosen by the entry points (the
operators, the CLI, the UI app) and injected from there: the ledger takes one at construction
(``Ledger(clock=...)``), the services read the ledger's or the backend's; ``store/`` and
``services/`` never read the wall clock themselves (``tests/architecture/test_clock.py``).

The simulated fleet's clock (``gpufleet.backends.sim.sim_clock.SimClock``) is the system clock
plus an offset kept in the sim's state file, so every Airflow task process sees the same
simulated time; tests use an in-memory one (``tests/support/clock.py``). The triggers' poll
loops run on the same clocks (``gpufleet.airflow.triggers.PollingTrigger.clock``): an event
loop waits through ``sleep_async``, which awaits the system clock and lets any other clock
sleep off the loop (a frozen test clock just advances).
"""

from __future__ import annotations

import asyncio
import time as _time
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """Where time comes from: ``time()`` a UNIX time, ``now()`` the same as an aware UTC
    datetime, ``monotonic()`` for measuring intervals; ``sleep(seconds)`` lets that much of
    this clock's time pass (a clock tests move only advances)."""

    def time(self) -> float: ...

    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The machine's clock."""

    def time(self) -> float:
        return _time.time()

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.time(), UTC)

    def monotonic(self) -> float:
        return _time.monotonic()

    def sleep(self, seconds: float) -> None:
        _time.sleep(max(seconds, 0.0))


SYSTEM_CLOCK = SystemClock()


async def sleep_async(clock: Clock, seconds: float) -> None:
    """Let ``seconds`` pass on ``clock`` without blocking the event loop: the system clock is
    awaited (``asyncio.sleep``); any other clock sleeps in a worker thread (a frozen sim clock
    or a test's clock advances at once, a running sim clock waits on the system clock)."""
    seconds = max(seconds, 0.0)
    if isinstance(clock, SystemClock):
        await asyncio.sleep(seconds)
    else:
        await asyncio.to_thread(clock.sleep, seconds)
