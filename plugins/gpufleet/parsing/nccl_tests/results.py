"""What a nccl-tests run reports, as typed values: one :class:`NcclRun` per table.

Both formats (the text table and the ``-J`` JSON) are read into these types. Bandwidths are GB/s
(1e9 B/s) as nccl-tests prints them; times are microseconds. A field the output does not show is
``None``, never guessed.

Only figures that can be true are figures: a result line with a negative or non-finite number,
or a ``#wrong`` that is not a whole non-negative count, is an :class:`InvalidRow` -- never in
``rows``, so no maximum, mean or sum sees it -- and a run holding one is ``truncated`` (its rows
are not the whole table) with the reason in ``problems``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["InvalidRow", "NcclRun", "NcclTestsResult", "SizeRow"]


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
class InvalidRow:
    """A result line that cannot be true, refused: its size (when readable), why, and the line."""

    size_bytes: int | None
    reasons: tuple[str, ...]
    text: str


@dataclass(frozen=True, slots=True)
class NcclRun:
    """One invocation of one nccl-tests binary (one table).

    ``truncated``: the figures are not the whole run -- the footer is missing or unreadable, the
    JSON was cut short, or result lines were dropped (cut short, or refused into
    ``invalid_rows``). ``problems``: every reason the run cannot be taken at face value (the
    truncation, refused rows and values, sizes out of order); empty for a clean run. ``notes``:
    remarks that do not make the figures wrong (columns inferred, mixed GPU models, ...).
    """

    collective: str | None
    ranks: int | None
    gpu_model: str | None
    rows: tuple[SizeRow, ...]
    avg_busbw_gbps: float | None
    out_of_bounds: int | None
    truncated: bool
    notes: tuple[str, ...] = ()
    invalid_rows: tuple[InvalidRow, ...] = ()
    problems: tuple[str, ...] = ()

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
