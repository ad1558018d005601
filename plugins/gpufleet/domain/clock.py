"""The one notion of time the product reads: a ``Clock``.

Everything that measures time (the simulated fleet's delays and fault leases, a drain's soak
and timeout) asks a ``Clock`` instead of ``time.time()``, so tests advance time instead of
sleeping. ``SystemClock`` is the real one. The simulated fleet's clock
(``gpufleet.backends.sim.state.SimClock``) is the system clock plus an offset kept in the sim's
state file, so every Airflow task process sees the same simulated time; tests use an
in-memory one (``tests/support/clock.py``). (The triggers' poll loops have their own, async, clock:
``gpufleet.airflow.triggers.PollingTrigger.clock``.)
"""

from __future__ import annotations

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
