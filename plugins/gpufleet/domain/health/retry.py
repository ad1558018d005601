"""Which nodes a health round checks again, and when: a check that could not run
because DCGM found the GPUs in use is retried within a bound. Pure: no I/O, no clock of its own
(``now`` is handed in, a UNIX time on the caller's injected clock).

NVSentinel's numbers (its PR #1364, in FACTS.md "Events, re-admission"): ``DCGM_ST_IN_USE`` is
retried every :data:`RETRY_EVERY_S` (10 s) for up to :data:`RETRY_FOR_S` (300 s) from the first
try, then reported non-fatal. gpufleet does the same: a node whose latest check is
``could_not_run`` with the code ``DCGM_ST_IN_USE`` is due again 10 s after its latest try
started, as long as that is within 300 s of its first try; after that it stays
``could_not_run`` with the reason :data:`GAVE_UP` (never a failure: the GPUs were busy, not
broken). Any other ``could_not_run`` (a timeout, a cut-off output, DCGM's internal error) is not
retried within the round: a check at the same level would hit the same limit; the next night
checks it again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "GAVE_UP",
    "IN_USE",
    "RETRY_EVERY_S",
    "RETRY_FOR_S",
    "Rechecks",
    "Try",
    "plan_rechecks",
    "retried",
]

IN_USE = "DCGM_ST_IN_USE"
RETRY_EVERY_S = 10.0
RETRY_FOR_S = 300.0
GAVE_UP = f"DCGM said the GPUs were in use for {RETRY_FOR_S:.0f} s"


@dataclass(frozen=True)
class Try:
    """A node's tries of its check while DCGM found it in use: when the first and the latest
    started (UNIX times on the round's clock)."""

    first: float
    latest: float


@dataclass(frozen=True)
class Rechecks:
    """What a round does next at ``now``: ``due`` (check these again now), ``waiting`` (node ->
    when its next try is due), ``gave_up`` (node -> the reason it stays ``could_not_run``)."""

    due: tuple[str, ...] = ()
    waiting: Mapping[str, float] = field(default_factory=dict)
    gave_up: Mapping[str, str] = field(default_factory=dict)

    @property
    def next_at(self) -> float | None:
        """When the earliest waiting node is due (None: nothing waits)."""
        return min(self.waiting.values()) if self.waiting else None


def retried(codes: Iterable[str]) -> bool:
    """Whether a ``could_not_run`` with these tool status codes is checked again in the round
    (``DCGM_ST_IN_USE`` only)."""
    return IN_USE in set(codes)


def plan_rechecks(tries: Mapping[str, Try], now: float) -> Rechecks:
    """For each node whose latest check DCGM found in use (``tries``), whether its next try is
    due at ``now`` (10 s after its latest try started), later (when), or past the bound (its
    next try would start more than 300 s after its first): given up, with :data:`GAVE_UP`."""
    due: list[str] = []
    waiting: dict[str, float] = {}
    gave_up: dict[str, str] = {}
    for node, t in sorted(tries.items()):
        at = t.latest + RETRY_EVERY_S
        if at - t.first > RETRY_FOR_S:
            gave_up[node] = GAVE_UP
        elif at <= now:
            due.append(node)
        else:
            waiting[node] = at
    return Rechecks(tuple(due), waiting, gave_up)
