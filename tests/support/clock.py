"""``ManualClock``: a ``gpufleet.domain.clock.Clock`` that moves only when a test says so, so
tests advance time instead of sleeping."""

from __future__ import annotations

from datetime import UTC, datetime


class ManualClock:
    """A clock that moves only when told (``advance``), for tests."""

    def __init__(self, start: float = 1_750_000_000.0):
        self._t = float(start)
        self.slept: list[float] = []  # each ``sleep`` asked for, in order

    def time(self) -> float:
        return self._t

    def now(self) -> datetime:
        return datetime.fromtimestamp(self._t, UTC)

    def monotonic(self) -> float:
        return self._t

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock does not go back ({seconds} s)")
        self._t += seconds

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(max(seconds, 0.0))
