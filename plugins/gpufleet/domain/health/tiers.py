"""Which ``dcgmi diag`` run level a node gets tonight (its tier). Pure: no I/O.

The levels, the limits per GPU model and where each timeout comes from:
docs/design/gpu-health.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta
from types import MappingProxyType
from typing import Any

from gpufleet.domain.inputs import whole

__all__ = [
    "BURN_IN_LEVEL",
    "B_SERIES",
    "DEFAULT_DIAG_TIMEOUT_S",
    "DIAG_LEVELS",
    "KILL_AFTER_S",
    "MAX_LEVEL1_EVERY_NIGHTS",
    "MAX_DIAG_TIMEOUT_S",
    "NIGHTLY_LEVEL",
    "RETEST_LEVEL",
    "TOOL_TIMEOUT_S",
    "WEEKLY_LEVEL",
    "DcgmLimits",
    "DiagPlan",
    "default_limits",
    "diag_level",
    "diag_timeout",
    "level1_tonight",
    "next_level1",
    "plan_diag",
    "resting",
    "weekly_day",
]

DIAG_LEVELS = (1, 2, 3, 4)
NIGHTLY_LEVEL = 1
RETEST_LEVEL = 2
WEEKLY_LEVEL = 3
BURN_IN_LEVEL = 4
# dcgmi diag's hard timeout per level, seconds (the module's docstring says where each is from)
DEFAULT_DIAG_TIMEOUT_S: Mapping[int, int] = MappingProxyType({1: 120, 2: 900, 3: 2700, 4: 9000})
MAX_LEVEL1_EVERY_NIGHTS = 7  # the weekly level 3 runs level 1's tests too: a longer rotation
# would change nothing
MAX_DIAG_TIMEOUT_S = 6 * 3600  # a catalog's timeout above this is a typo (level 4: 2.25 h)
TOOL_TIMEOUT_S = 60  # nvidia-smi and dmesg, which answer in seconds
KILL_AFTER_S = 10  # timeout --kill-after: SIGKILL this long after the SIGTERM
# the GPU models whose dcgmi diag stops at level 1 unless the catalog says otherwise
B_SERIES = frozenset({"B200", "GB200", "B300", "GB300"})
_B_SERIES_WHY = (
    "dcgmi diag -r 2 hangs on B200/GB200 with DCGM 4.2.3 (NVIDIA/DCGM#247); Nebius turned "
    "levels 2-3 off on B-series (nebius/soperator#2081)"
)


def _level(value: object, what: str) -> int:
    if not whole(value, DIAG_LEVELS[0], DIAG_LEVELS[-1]):
        raise ValueError(f"{what} must be a dcgmi diag level: 1, 2, 3 or 4, not {value!r}")
    return value


@dataclass(frozen=True)
class DcgmLimits:
    """One GPU model's ``dcgmi diag`` limits: ``max_level``, the highest run level allowed;
    ``timeouts_s``, the hard timeout of each level in seconds (every level 1-4); ``why``, where
    the cap comes from (said in a capped level's reason)."""

    model: str
    max_level: int = BURN_IN_LEVEL
    timeouts_s: Mapping[int, int] = field(default_factory=lambda: DEFAULT_DIAG_TIMEOUT_S)
    why: str = ""

    def __post_init__(self) -> None:
        _level(self.max_level, f"GPU model {self.model!r}: the highest dcgmi diag level")
        if set(self.timeouts_s) != set(DIAG_LEVELS):
            raise ValueError(
                f"GPU model {self.model!r}: a dcgmi diag timeout is needed for each level 1-4, "
                f"got levels {sorted(self.timeouts_s)}"
            )
        for level, seconds in self.timeouts_s.items():
            if not whole(seconds, 1, MAX_DIAG_TIMEOUT_S):
                raise ValueError(
                    f"GPU model {self.model!r}: the level-{level} timeout must be a whole number "
                    f"of seconds from 1 to {MAX_DIAG_TIMEOUT_S}, not {seconds!r}"
                )
        object.__setattr__(self, "timeouts_s", MappingProxyType(dict(self.timeouts_s)))


def default_limits(model: str) -> DcgmLimits:
    """The built-in limits of ``model`` (case-insensitive): level 1 at most on the B-series
    (:data:`B_SERIES`), 4 elsewhere; the default timeouts."""
    if str(model).upper() in B_SERIES:
        return DcgmLimits(model, max_level=NIGHTLY_LEVEL, why=_B_SERIES_WHY)
    return DcgmLimits(model)


def diag_timeout(model: str | DcgmLimits, level: int) -> int:
    """The hard timeout (seconds) of ``dcgmi diag -r level`` on ``model`` (a GPU model's name,
    read with :func:`default_limits`, or its catalog :class:`DcgmLimits`)."""
    limits = model if isinstance(model, DcgmLimits) else default_limits(model)
    return limits.timeouts_s[_level(level, "the dcgmi diag level")]


@dataclass(frozen=True)
class DiagPlan:
    """The ``dcgmi diag`` run a node gets: its ``level`` (capped), the level its tier asked for
    (``wanted``), the hard ``timeout_s`` and why (``reason``)."""

    level: int
    wanted: int
    timeout_s: int
    reason: str

    @property
    def capped(self) -> bool:
        return self.level < self.wanted


def weekly_day(node: str, pool: str | None = None) -> int:
    """The day of the week (Monday 0 ... Sunday 6) ``node`` gets its weekly level 3: the same
    every week, spread evenly by a hash of the name: of its ``pool``'s key when given (every
    node of the pool on one night, pools spread over the week: the nightly runs each node's
    check in its pair's pods, and a pair's pods wait for the longer check, so a level 3 beside
    a level 1 would hold its partner's GPUs for a quarter of an hour), else of the node's."""
    return _spread(pool or node, "", 7)


def _spread(node: str, salt: str, buckets: int) -> int:
    """``node``'s bucket of ``buckets``: the same every time, spread evenly over a pool's
    nodes by a hash of the name (salted per use, so the weekly day and the rotation's night are
    independent)."""
    if not isinstance(node, str) or not node:
        raise ValueError(f"a node name is needed to place its diagnostic, got {node!r}")
    return int(hashlib.sha256(f"{salt}{node}".encode()).hexdigest()[:8], 16) % buckets


def level1_tonight(node: str, night: date, every: int) -> bool:
    """Whether ``night`` is ``node``'s night for its level-1 rotation of ``every`` nights
    (1: every night): each node once in ``every`` nights, on the same nights every cycle, a
    pool's nodes spread evenly over the cycle by a hash of the name."""
    if not whole(every, 1, MAX_LEVEL1_EVERY_NIGHTS):
        raise ValueError(
            f"level1_every_nights must be a whole number from 1 to {MAX_LEVEL1_EVERY_NIGHTS}, "
            f"not {every!r}"
        )
    return every == 1 or _spread(node, "level1:", every) == night.toordinal() % every


def next_level1(node: str, night: date, every: int) -> date:
    """The first night after ``night`` that is ``node``'s in its level-1 rotation of ``every``
    nights (:func:`level1_tonight`)."""
    following = night + timedelta(days=1)
    while not level1_tonight(node, following, every):
        following += timedelta(days=1)
    return following


def resting(
    nodes: Iterable[str],
    night: date,
    every: int,
    *,
    pending: Iterable[str] = (),
    pool: str | None = None,
) -> list[str]:
    """The idle ``nodes`` whose ``dcgmi diag`` may rest tonight: tonight is not their night of
    the level-1 rotation (:func:`level1_tonight`) nor their weekly level 3's, and they are not
    ``pending`` (new or back in service, awaiting validation: always checked, a burn-in
    included). ``pool``: the key whose weekly night theirs is (:func:`weekly_day`). Retested
    nodes are never passed here. The caller reads them passively instead
    and checks actively every one whose reading is not healthy: a rest never takes an unknown
    for healthy."""
    waiting = set(pending)
    return [
        node
        for node in nodes
        if node not in waiting
        and weekly_day(node, pool) != night.weekday()
        and not level1_tonight(node, night, every)
    ]


def plan_diag(
    node: str,
    night: date,
    *,
    retest: bool,
    new: bool = False,
    burn_in: bool = False,
    limits: DcgmLimits | None = None,
    pool: str | None = None,
) -> DiagPlan:
    """The ``dcgmi diag`` run ``node`` gets on ``night`` (a date: the night's UTC day).
    ``new``: the node still carries the ``unvalidated`` taint; ``burn_in``: its pool's catalog
    asks for level 4 at a new node's first check (a retest is never a first check); ``limits``:
    its GPU model's (None: no cap, the default timeouts); ``pool``: the key whose weekly night
    the node's is (:func:`weekly_day`). A level above the model's highest is capped to it, and
    the reason says what was capped and why."""
    weekly = weekly_day(node, pool) == night.weekday()
    if new and burn_in and not retest:
        wanted, why = BURN_IN_LEVEL, "burn-in of a new node"
    else:
        wanted, why = (RETEST_LEVEL, "retest") if retest else (NIGHTLY_LEVEL, "nightly")
        if weekly and wanted < WEEKLY_LEVEL:
            wanted, why = WEEKLY_LEVEL, f"weekly (its day: {night:%A}; else {why})"
    limits = limits or DcgmLimits("any")
    level = min(wanted, limits.max_level)
    reason = f"level {wanted}: {why}"
    if level < wanted:
        reason = (
            f"level {level}, capped from {reason}: {limits.model}'s highest dcgmi diag level is "
            f"{limits.max_level}" + (f" ({limits.why})" if limits.why else "")
        )
    timeout_s = limits.timeouts_s[level]
    return DiagPlan(level, wanted, timeout_s, f"{reason}; timeout {timeout_s} s")


def diag_level(node: str, night: date, **plan: Any) -> int:
    """The ``dcgmi diag`` run level ``node`` gets on ``night``: :func:`plan_diag`'s level (its
    keywords: ``retest``, ``new``, ``burn_in``, ``limits``, ``pool``; capped at
    ``limits.max_level``)."""
    return plan_diag(node, night, **plan).level
