"""What a nccl-tests run reports, as typed values: one :class:`NcclRun` per table.

Both formats (the text table and the ``-J`` JSON) are read into these types. Bandwidths are GB/s
(1e9 B/s) as nccl-tests prints them; times are microseconds. A field the output does not show is
``None``, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NcclRun", "NcclTestsResult", "SizeRow"]


@dataclass(frozen=True, slots=True)
class SizeRow:
    """One message size of one run; ``oop_*`` is out-of-place, ``ip_*`` in-place. GB/s = 1e9 B/s."""

    size_bytes: int
    count: int | None
    dtype: str | None
    redop: str | None
    root: int | None
    oop_time_us: float | None
    oop_algbw_gbps: float | None
    oop_busbw_gbps: float | None
    oop_wrong: int | None
    ip_time_us: float | None
    ip_algbw_gbps: float | None
    ip_busbw_gbps: float | None
    ip_wrong: int | None

    @property
    def best_busbw_gbps(self) -> float | None:
        """The larger of the out-of-place and in-place bus bandwidth shown."""
        values = [v for v in (self.oop_busbw_gbps, self.ip_busbw_gbps) if v is not None]
        return max(values) if values else None

    @property
    def best_time_us(self) -> float | None:
        """The smaller of the out-of-place and in-place time shown."""
        values = [v for v in (self.oop_time_us, self.ip_time_us) if v is not None]
        return min(values) if values else None


@dataclass(frozen=True, slots=True)
class NcclRun:
    """One invocation of one nccl-tests binary (one table)."""

    collective: str | None
    ranks: int | None
    gpu_model: str | None
    rows: tuple[SizeRow, ...]
    avg_busbw_gbps: float | None
    out_of_bounds: int | None
    truncated: bool
    notes: tuple[str, ...] = ()

    @property
    def largest_size_bytes(self) -> int | None:
        return max((r.size_bytes for r in self.rows), default=None)

    @property
    def busbw_at_largest_gbps(self) -> float | None:
        """Best bus bandwidth at the largest message size (best over rows of that size)."""
        largest = self.largest_size_bytes
        if largest is None:
            return None
        values = [
            r.best_busbw_gbps
            for r in self.rows
            if r.size_bytes == largest and r.best_busbw_gbps is not None
        ]
        return max(values) if values else None

    @property
    def max_busbw_gbps(self) -> float | None:
        values = [r.best_busbw_gbps for r in self.rows if r.best_busbw_gbps is not None]
        return max(values) if values else None

    @property
    def wrong(self) -> int | None:
        """Wrong elements over all rows and both placements.

        ``None`` when no row reports a count (every ``#wrong`` is ``N/A``, i.e. ``-c 0``, or there
        are no rows); otherwise the sum of the counts shown (``N/A`` cells contribute nothing).
        """
        known = [w for r in self.rows for w in (r.oop_wrong, r.ip_wrong) if w is not None]
        return sum(known) if known else None

    def busbw_at_or_above(self, min_size_bytes: int) -> list[float]:
        """Best bus bandwidth of every row whose size is at least ``min_size_bytes``, in order."""
        return [
            r.best_busbw_gbps
            for r in self.rows
            if r.size_bytes >= min_size_bytes and r.best_busbw_gbps is not None
        ]

    def latency_up_to(self, max_size_bytes: int) -> list[tuple[int, float]]:
        """``(size, best time in us)`` of every row whose size is at most ``max_size_bytes``."""
        return [
            (r.size_bytes, r.best_time_us)
            for r in self.rows
            if r.size_bytes <= max_size_bytes and r.best_time_us is not None
        ]


@dataclass(frozen=True, slots=True)
class NcclTestsResult:
    """Every run found in one output, in the order they appear."""

    runs: tuple[NcclRun, ...]
