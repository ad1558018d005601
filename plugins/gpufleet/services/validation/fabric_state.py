"""What one pool's fabric validation carries between rounds (``FabricState``, plain JSON for
the trigger) and hands back (``FabricSummary``, an XCom)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gpufleet.manifests.gpu_health import DEADLINE_SECONDS
from gpufleet.manifests.nccl_validation import NCCL_DEADLINE_SECONDS
from gpufleet.services.common.collect import Workload


@dataclass
class FabricState:
    """Where one pool's fabric validation stands between rounds. ``pass1``/``pass2``: pair
    rows (``PairVerdict.as_row``) as the ledger stores them; ``workload``: the round in flight;
    ``phase``: ``health`` while the GPU health check runs, then ``fabric``; ``health``: each
    checked node's ``NodeHealth.to_dict()``."""

    cluster: str
    pool: str
    run_id: str
    started_at: str  # ISO 8601, UTC
    pool_nodes: int
    idle: list[str]
    busy: list[str]
    quarantined_before: list[str]
    odd: list[str]
    round: int = 0
    retest: list[str] = field(default_factory=list)  # out-of-service nodes retested this run
    pass1: list[dict[str, Any]] = field(default_factory=list)
    pass2: list[dict[str, Any]] = field(default_factory=list)
    workload: Workload | None = None
    gpu_seconds: float = 0.0  # what the rounds so far held, from their pods' container times
    # where that went (domain.stages): GPU-seconds per stage over the rounds' pods, the seconds
    # they waited to be scheduled (no GPU held), each pair's launcher's seconds per stage
    stage_gpu_s: dict[str, float] = field(default_factory=dict)
    scheduled_s: float = 0.0
    pair_stages: list[dict[str, Any]] = field(default_factory=list)
    phase: str = "fabric"
    health_levels: dict[str, int] = field(default_factory=dict)
    # the health round's Job deadline at the pool's GPU model's dcgmi diag timeouts (0: none)
    health_deadline_s: float = 0.0
    health: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the health round's rechecks (domain.health.retry): when its latest round was submitted,
    # each node DCGM found in use -> [first try, latest try] (the backend's clock), and when
    # the next recheck is due while none is in flight (the operator waits until then)
    health_submitted_at: float | None = None
    health_in_use: dict[str, list[float]] = field(default_factory=dict)
    health_recheck_at: float | None = None
    # topology (services.validation.topology): every node's "block/sub-block" key (None: no
    # labels), the nodes out for their sub-block retested as a unit, pass 1's planned nodes
    places: dict[str, str | None] = field(default_factory=dict)
    units: list[str] = field(default_factory=list)
    pass1_nodes: list[str] = field(default_factory=list)
    # one pod per node (``steps``): the GPU health checks of ``health_levels`` run in the
    # pairs' pods; ``pool_check``: the storage pool check runs in pass 1's pods, and why it is
    # the pool's own tonight (None: no pool check here)
    gang: bool = False
    pool_check: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (a trigger's ``carry``)."""
        return asdict(self)

    def min_timeout_s(self) -> float:
        """The least time the round in flight may be waited for: the GPU health check's
        deadline at its highest ``dcgmi diag`` level (a level-4 burn-in runs up to 2 hours), or
        the longer Job deadline the pool's GPU model's timeouts gave it, with ten minutes to
        spare; for a round of pairs whose pods run the checks first (``gang``), the longest
        check's deadline and the pairs' own; 0 for a round of pairs alone."""
        if self.phase != "health" or not self.health_levels:
            # a round of pairs whose pods check GPU health first: that deadline and the pairs'
            return self.health_deadline_s + NCCL_DEADLINE_SECONDS + 600.0 if self.gang else 0.0
        level = DEADLINE_SECONDS[max(self.health_levels.values())]
        return max(float(level), self.health_deadline_s) + 600.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FabricState:
        return cls(**{**data, "workload": Workload.from_dict(data.get("workload"))})


@dataclass
class FabricSummary:
    """One pool's fabric result. ``skipped``: nothing was judged (every pair of idle nodes was
    busy) and the previous validation stands; ``state`` is then None."""

    cluster: str
    pool: str
    passed: bool
    state: str | None
    page: bool
    transport: str | None
    busbw_gbps: float | None
    quarantined: list[str]
    reasons: list[str]
    skipped: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (an XCom)."""
        return asdict(self)
