"""One pool's GPU health check: the round the nightly runs before its fabric pairs.

Design: docs/design/gpu-health.md.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import date, datetime
from typing import Any

from gpufleet.backends.base import ClusterBackend
from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.gate import LEFT_IN_SERVICE
from gpufleet.domain.health import (
    HealthAction,
    HealthVerdict,
    counts_as_burn_in,
    decide_health,
)
from gpufleet.domain.health.tiers import (
    BURN_IN_LEVEL,
    WEEKLY_LEVEL,
    DcgmLimits,
    diag_timeout,
    plan_diag,
)
from gpufleet.domain.stages import diag_stage
from gpufleet.domain.validation_kinds import ValidationKind
from gpufleet.domain.workloads import workload_selector
from gpufleet.errors import ParseError
from gpufleet.manifests.gpu_health import HEALTH_CONTAINER, job_deadline, render_gpu_health
from gpufleet.parsing.health import parse_node_health
from gpufleet.services.common.collect import (
    Workload,
    cost_details,
    gpu_seconds,
    image_pulls,
    stage_details,
    stage_seconds,
)
from gpufleet.store import Ledger

log = logging.getLogger(__name__)

HEALTH_ROUND = "health"  # the run id suffix of the check's workload (``<run id>-health``)


@dataclass
class NodeHealth:
    """One node's check: its ``dcgmi diag`` level, the action (None: not checked, in ledger
    rows from before the ``could_not_run`` verdict and in a passive read that found nothing to
    read), the reason of the most severe finding (or why it could not run), the notes, the
    GPU-seconds its pod held, its ``verdict`` (``domain.health.HealthVerdict``), the tools' status
    codes of what could not run (``codes``: ``DCGM_ST_IN_USE``...), and whether it counts as the
    node's burn-in."""

    level: int
    action: str | None
    reason: str
    notes: list[str] = field(default_factory=list)
    gpu_seconds: float = 0.0
    verdict: str | None = None
    codes: list[str] = field(default_factory=list)
    burn_in: bool = False
    # seconds per stage of its pod (``domain.stages``; its work is ``diag_r<level>``), a
    # recheck's added to the first try's
    stages: dict[str, float] = field(default_factory=dict)
    # an idle node whose level 1 rested tonight (``tiers.resting``) on a healthy passive read:
    # covered by the night's tier at no GPU cost
    rested: bool = False

    @property
    def failed(self) -> bool:
        """Checked, and NVIDIA's tools call for an action (a check that could not run is no
        failure: nothing is done to the node on its account)."""
        return self.action not in (
            None,
            HealthAction.HEALTHY.value,
            HealthAction.COULD_NOT_RUN.value,
        )

    @property
    def could_not_run(self) -> bool:
        return self.action == HealthAction.COULD_NOT_RUN.value

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeHealth:
        return cls(**data)


def could_not_run(level: int, why: str, codes: Iterable[str] = ()) -> NodeHealth:
    """A node's check that could not run, and why."""
    return NodeHealth(
        level,
        HealthAction.COULD_NOT_RUN.value,
        why,
        verdict=HealthVerdict.COULD_NOT_RUN.value,
        codes=sorted(set(codes)),
    )


def plan_levels(
    idle: Iterable[str],
    retest: Iterable[str],
    night: date,
    *,
    new: Iterable[str] = (),
    burn_in: bool = False,
    limits: DcgmLimits | None = None,
    pool: str | None = None,
) -> dict[str, int]:
    """Each node's ``dcgmi diag`` level tonight: idle nodes level 1, retested nodes level 2,
    either level 3 on its weekly day, and with ``burn_in`` (the pool's catalog asks) an idle
    node that is ``new`` (still tainted ``unvalidated``) level 4 (``tiers.plan_diag``), each
    capped at the highest level of the pool's GPU model (``limits``: ``PoolRef.dcgm_limits``;
    a B200's dcgmi diag -r 2 hangs), the weekly night ``pool``'s (``tiers.weekly_day``); a
    capped node's reason is logged."""
    fresh = set(new)
    plans = {
        node: plan_diag(
            node,
            night,
            retest=False,
            new=node in fresh,
            burn_in=burn_in,
            limits=limits,
            pool=pool,
        )
        for node in idle
    }
    plans.update(
        {node: plan_diag(node, night, retest=True, limits=limits, pool=pool) for node in retest}
    )
    for node, plan in plans.items():
        if plan.capped:
            log.info("%s: %s", node, plan.reason)
    return {node: plan.level for node, plan in plans.items()}


def health_deadline(levels: Mapping[str, int], limits: DcgmLimits) -> int:
    """The health round's Job deadline: the longest of its nodes' (``job_deadline`` at each
    level's ``dcgmi diag`` timeout under ``limits``)."""
    return max(
        (job_deadline(level, diag_timeout(limits, level)) for level in set(levels.values())),
        default=0,
    )


def burned_in(ledger: Ledger, cluster: str, pool: str, nights: int = 60) -> set[str]:
    """The pool's nodes whose burn-in already ran and found them healthy: a level-4 check in
    one of the pool's last ``nights`` health rows whose verdict is ``pass`` and whose DCGM run
    shows the level-4 tests ran (``burn_in``, set by :func:`read_node`). A node that stays new
    (still tainted ``unvalidated``: its pool's verdict failed) gets level 4 at its first check
    only, not every night until the taint goes (6,300 s on every GPU of the node a night). A
    check that could not run, was degraded or failed never counts, nor does a row written
    before ``burn_in`` was recorded (it does not say whether the level-4 tests ran): the burn-in
    is owed."""
    out: set[str] = set()
    for row in ledger.validation_history(cluster, pool, ValidationKind.HEALTH, limit=nights):
        nodes = (row.get("details") or {}).get("nodes")
        for node, check in nodes.items() if isinstance(nodes, dict) else ():
            if not isinstance(check, dict):
                continue
            level = check.get("level")
            deep = isinstance(level, int) and not isinstance(level, bool) and level >= BURN_IN_LEVEL
            passed = check.get("action") == "healthy" and check.get("verdict") == "pass"
            if deep and passed and check.get("burn_in") is True:
                out.add(node)
    return out


def read_node(text: str, node: str, level: int) -> NodeHealth:
    """One pod's output into the node's check."""
    try:
        report = parse_node_health(text)
    except ParseError as e:
        return could_not_run(level, f"the output is not a health check's ({e})")
    if report.node not in (None, node):
        return could_not_run(level, f"the output names node {report.node}, not {node}")
    decision = decide_health(**report.signals())
    notes = list(decision.notes) + [f"not read: {p}" for p in report.problems]
    ran = report.level or level
    return NodeHealth(
        ran,
        decision.action.value,
        decision.reason,
        notes,
        verdict=decision.verdict.value,
        codes=sorted(decision.not_run_codes),
        burn_in=counts_as_burn_in(ran, decision, report.diag),
    )


class GpuHealthCheck:
    """The health round of one pool's validation."""

    def __init__(
        self,
        ref: PoolRef,
        backend: ClusterBackend,
        *,
        namespace: str,
        image: str | None = None,
    ):
        self.ref, self.backend, self.namespace, self.image = ref, backend, namespace, image

    def submit(self, levels: Mapping[str, int], run_id: str) -> Workload:
        kwargs: dict[str, Any] = {"namespace": self.namespace}
        if self.image:
            kwargs["image"] = self.image
        kwargs["limits"] = self.ref.dcgm_limits
        manifest = render_gpu_health(self.ref, levels, f"{run_id}-{HEALTH_ROUND}", **kwargs)
        self.backend.apply(manifest)
        meta = manifest["metadata"]
        log.info(
            "%s: GPU health check %s/%s on %d node(s): %s",
            self.ref.key,
            self.namespace,
            meta["name"],
            len(levels),
            ", ".join(f"{n} (level {lv})" for n, lv in levels.items()),
        )
        return Workload(
            kind=manifest["kind"],
            name=meta["name"],
            namespace=self.namespace,
            nodes=list(levels),
        )

    def collect(self, wl: Workload, levels: Mapping[str, int]) -> dict[str, NodeHealth]:
        """Each node's check; deletes the workload. A pod that never ran, or did not succeed
        (its deadline passed, it was evicted), is a check that could not run."""
        pods = self.backend.list_pods(wl.namespace, workload_selector(wl.kind, wl.name))
        by_node = {p.node: p for p in pods if p.node}
        out: dict[str, NodeHealth] = {}
        for node in wl.nodes:
            level = levels.get(node, 1)
            pod = by_node.get(node)
            if pod is None or pod.phase != "Succeeded":
                why = "its pod was never placed" if pod is None else f"its pod is {pod.phase}"
                if pod is not None and pod.message:
                    why += f" ({pod.message})"
                out[node] = could_not_run(level, why)
                continue
            text = self.backend.pod_logs(pod.name, wl.namespace, HEALTH_CONTAINER)
            out[node] = read_node(text, node, level)
        pulls = image_pulls(self.backend, wl.namespace)
        for node, check in out.items():
            if node in by_node:
                pod = by_node[node]
                check.gpu_seconds = gpu_seconds([pod], self.ref.pool.gpu.count)
                if pod.finished:  # the level the node was asked for is what its pod ran
                    work = diag_stage(levels.get(node, 1))
                    check.stages = stage_seconds(pod, work, None, pulls)
        self.backend.delete(wl.kind, wl.name, wl.namespace)
        log_findings(self.ref, out)
        return out


def log_findings(ref: PoolRef, checks: Mapping[str, NodeHealth]) -> None:
    """A warning for each node whose check did not find it healthy."""
    for node, health in checks.items():
        if health.action != HealthAction.HEALTHY.value:
            log.warning(
                "%s: %s GPU health (level %d): %s - %s",
                ref.key,
                node,
                health.level,
                health.verdict or health.action or "not checked",
                health.reason,
            )


def health_reason(health: NodeHealth) -> str:
    """The node's out-of-service reason for a failed check."""
    return f"health: {health.action}: {health.reason}"


def record_health(
    ledger: Ledger,
    ref: PoolRef,
    run_id: str,
    started_at: datetime,
    checks: Mapping[str, NodeHealth],
    left_in_service: Iterable[str] = (),
) -> int | None:
    """Record the pool's check as its ledger row of kind ``health`` (``health_row``); nothing
    when no node was checked."""
    if not checks:
        return None
    return ledger.record_validation(
        run_id=run_id,
        cluster=ref.cluster.name,
        pool=ref.pool.name,
        started_at=started_at,
        **health_row(checks, left_in_service, gpus=ref.pool.gpu.count),
    )


def health_row(
    checks: Mapping[str, NodeHealth], left_in_service: Iterable[str] = (), *, gpus: int = 8
) -> dict[str, Any]:
    """The pool's ledger row of kind ``health`` (``Ledger.record_validation``'s fields). As a
    fabric verdict does with its bad nodes, it passes when every node that failed its check was
    taken out of service (quarantined, or failed its retest), and fails when one was left in
    service (``left_in_service``: the quarantine cap held, a person is paged) or when no node's
    check could run at all; the reasons name each failed node and what became of it, and each
    node whose check could not run and why (``details.could_not_run``: those nodes, which the
    gate leaves out of the pool's count). Its cost (``cost_details``) is the night's tier, the
    level-1 and level-2 checks, over the nodes that ran them (a busy node read passively, level
    0, holds nothing); the weekly level 3 is counted apart (``weekly_gpu_minutes``), as it runs
    on a seventh of the nodes a night. The nodes it is counted over are those checked at level 1
    or 2 and the idle ones whose level 1 rested tonight (``NodeHealth.rested``: the rotation
    covers them at no cost). ``details.stages``: that cost per stage (``domain.stages``:
    launch, ``diag_r<N>`` per level, teardown) on ``gpus``-GPU nodes, and each node's stages."""
    levels: dict[str, int] = {}
    for h in checks.values():
        levels[str(h.level)] = levels.get(str(h.level), 0) + 1
    weekly = sum(h.gpu_seconds for h in checks.values() if h.level >= WEEKLY_LEVEL)
    active = [h for h in checks.values() if 0 < h.level < WEEKLY_LEVEL]  # level 0: passive
    nightly = sum(h.gpu_seconds for h in active)
    covered = len(active) + sum(1 for h in checks.values() if h.rested)
    failed = {n: h for n, h in checks.items() if h.failed}
    unrun = {n: h for n, h in checks.items() if h.could_not_run}
    left = set(left_in_service)
    checked = sum(1 for h in checks.values() if h.action is not None and not h.could_not_run)
    reasons = [
        f"{n}: {h.action}: {h.reason}" + (f" {LEFT_IN_SERVICE}" if n in left else "")
        for n, h in sorted(failed.items())
    ]
    reasons += [f"{n}: could not run: {h.reason}" for n, h in sorted(unrun.items())]
    if not checked:
        reasons.append(f"none of the {len(checks)} node(s) could be checked")
    return {
        "kind": ValidationKind.HEALTH,
        "passed": checked > 0 and not left & set(failed),
        "nodes_tested": checked,
        "reasons": reasons,
        "details": {
            "levels": levels,
            "left_in_service": sorted(left & set(failed)),
            "could_not_run": sorted(unrun),
            "nodes": {
                n: {
                    "level": h.level,
                    "action": h.action,
                    "verdict": h.verdict,
                    "reasons": [h.reason],
                    "notes": h.notes,
                    "codes": h.codes,
                    "burn_in": h.burn_in,
                    "stages": h.stages,
                    "rested": h.rested,
                }
                for n, h in sorted(checks.items())
            },
            **cost_details(nightly, covered),
            # the night's tier, as its cost: the levels below the weekly one
            "stages": stage_details((h.stages for h in active), gpus),
            "weekly_gpu_minutes": round(weekly / 60, 3),
        },
    }
