"""Which ``dcgmi diag`` run level a node gets tonight (issue 20's tiers). Pure: no I/O.

NVIDIA's guidance for ``dcgmi diag -r N`` (DCGM's user guide, "Run Levels"): level 1 takes
seconds (deployment checks: readiness), level 2 about two minutes (after a failure), level 3
about fifteen minutes (deeper: stress, power, memory bandwidth), level 4 one and a half to two
hours (burn-in). gpufleet runs:

- level 1 on every idle node each night;
- level 2 on a node out of service that is retested (after any failure, and before a repaired
  node is released: a retest is the only way back into service);
- level 3 once a week per node, on the node's own day of the week (:func:`weekly_day`, a
  stable hash of its name), so that a pool's level-3 cost spreads over the week instead of
  landing on one night; a node whose day it is and that is retested gets level 3 (it includes
  level 2's tests);
- level 4 (burn-in) on a new node, one still tainted ``gpufleet.io/unvalidated`` (onboarding, a
  transition's new pool), when the pool's catalog entry sets ``burn_in: true`` (default false:
  a new node gets level 1, or its weekly level 3): at its first check, and at each one while it
  stays new (its pool's verdict has not released it yet). A retested node gets its retest's
  level: it has had its first check.
"""

from __future__ import annotations

import hashlib
from datetime import date

__all__ = [
    "BURN_IN_LEVEL",
    "DIAG_LEVELS",
    "NIGHTLY_LEVEL",
    "RETEST_LEVEL",
    "WEEKLY_LEVEL",
    "diag_level",
    "weekly_day",
]

DIAG_LEVELS = (1, 2, 3, 4)
NIGHTLY_LEVEL = 1
RETEST_LEVEL = 2
WEEKLY_LEVEL = 3
BURN_IN_LEVEL = 4


def weekly_day(node: str) -> int:
    """The day of the week (Monday 0 ... Sunday 6) ``node`` gets its weekly level 3: the same
    every week, spread evenly over a pool's nodes by a hash of the name."""
    if not isinstance(node, str) or not node:
        raise ValueError(f"a node name is needed to place its weekly diagnostic, got {node!r}")
    return int(hashlib.sha256(node.encode()).hexdigest()[:8], 16) % 7


def diag_level(
    node: str, night: date, *, retest: bool, new: bool = False, burn_in: bool = False
) -> int:
    """The ``dcgmi diag`` run level ``node`` gets on ``night`` (a date: the night's UTC day).
    ``new``: the node still carries the ``unvalidated`` taint; ``burn_in``: its pool's catalog
    asks for level 4 at a new node's first check (a retest is never a first check)."""
    weekly = weekly_day(node) == night.weekday()
    if new and burn_in and not retest:
        return BURN_IN_LEVEL
    level = RETEST_LEVEL if retest else NIGHTLY_LEVEL
    return max(level, WEEKLY_LEVEL) if weekly else level
