"""GPU health: NVIDIA's Xid catalog as data, and one action per node from the node's
own signals. Pure: no I/O; ``decide_health`` returns a ``HealthDecision``.

The rules, their order and NVIDIA's source for each: docs/design/gpu-health.md.
"""

from gpufleet.domain.health.catalog import (
    BURN_IN_TESTS,
    DCGM_ERROR_ACTIONS,
    RECOVERY_ACTIONS,
    XID_CATALOG,
    Finding,
    HealthAction,
    HealthDecision,
    HealthVerdict,
    XidEntry,
    repair_kind,
    verdict_of,
)
from gpufleet.domain.health.decide import burn_in_ran, counts_as_burn_in, decide_health
from gpufleet.domain.health.passive import PASSIVE, decide_passive

__all__ = [
    "BURN_IN_TESTS",
    "DCGM_ERROR_ACTIONS",
    "PASSIVE",
    "RECOVERY_ACTIONS",
    "XID_CATALOG",
    "Finding",
    "HealthAction",
    "HealthDecision",
    "HealthVerdict",
    "XidEntry",
    "burn_in_ran",
    "counts_as_burn_in",
    "decide_health",
    "decide_passive",
    "repair_kind",
    "verdict_of",
]
