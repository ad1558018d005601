"""One pool's GPU health check (issue 20): the round the nightly runs before its fabric pairs.

A service: no Airflow imports. ``GpuHealthCheck.submit`` renders the check's JobSet
(``manifests.gpu_health``: one pod per node, holding its GPUs, each at its own ``dcgmi diag``
run level from ``domain.health.tiers``) and applies it; ``collect`` reads each pod's output
(``parsing.health.parse_node_health``) and decides one action per node
(``domain.health.decide_health``). Results are plain JSON (``NodeHealth.to_dict``), so they
travel in the fabric validation's state between rounds; ``health_row`` is the pool's ledger row
of kind ``health``.

A node whose pod never ran (evicted, never placed, the workload's deadline) or whose output
cannot be read as a health check's is *not checked* (``action`` None): nothing is done to it
on the check's account, and the reason is recorded. A node whose tools all failed to print is
checked, and ``decide_health`` hands it to a person (nothing to call it healthy on).
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
from gpufleet.domain.health import HealthAction, decide_health
from gpufleet.domain.health.tiers import BURN_IN_LEVEL, WEEKLY_LEVEL, diag_level
from gpufleet.domain.workloads import workload_selector
from gpufleet.errors import ParseError
from gpufleet.manifests.gpu_health import HEALTH_CONTAINER, render_gpu_health
from gpufleet.parsing.health import parse_node_health
from gpufleet.services.common.collect import Workload, cost_details, gpu_seconds
from gpufleet.store import Ledger

log = logging.getLogger(__name__)

HEALTH_ROUND = "health"  # the run id suffix of the check's workload (``<run id>-health``)


@dataclass
class NodeHealth:
    """One node's check: its ``dcgmi diag`` level, the action (None: not checked), the reason
    of the most severe finding (or why it was not checked), the notes, and the GPU-seconds its
    pod held."""

    level: int
    action: str | None
    reason: str
    notes: list[str] = field(default_factory=list)
    gpu_seconds: float = 0.0

    @property
    def failed(self) -> bool:
        """Checked, and NVIDIA's tools call for an action."""
        return self.action is not None and self.action != HealthAction.HEALTHY.value

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeHealth:
        return cls(**data)


def plan_levels(
    idle: Iterable[str],
    retest: Iterable[str],
    night: date,
    *,
    new: Iterable[str] = (),
    burn_in: bool = False,
) -> dict[str, int]:
    """Each node's ``dcgmi diag`` level tonight: idle nodes level 1, retested nodes level 2,
    either level 3 on its weekly day, and with ``burn_in`` (the pool's catalog asks) an idle
    node that is ``new`` (still tainted ``unvalidated``) level 4 (``tiers.diag_level``)."""
    fresh = set(new)
    levels = {
        node: diag_level(node, night, retest=False, new=node in fresh, burn_in=burn_in)
        for node in idle
    }
    levels.update({node: diag_level(node, night, retest=True) for node in retest})
    return levels


def burned_in(ledger: Any, cluster: str, pool: str, nights: int = 60) -> set[str]:
    """The pool's nodes whose burn-in already ran and found them healthy (a level-4 check in
    one of the pool's last ``nights`` health rows): a node that stays new (still tainted
    ``unvalidated``: its pool's verdict failed) gets level 4 at its first check only, not every
    night until the taint goes (6,300 s on every GPU of the node a night)."""
    out: set[str] = set()
    for row in ledger.validation_history(cluster, pool, "health", limit=nights):
        nodes = (row.get("details") or {}).get("nodes")
        for node, check in nodes.items() if isinstance(nodes, dict) else ():
            if not isinstance(check, dict):
                continue
            level = check.get("level")
            deep = isinstance(level, int) and not isinstance(level, bool)
            deep = deep and level >= BURN_IN_LEVEL
            if deep and check.get("action") == "healthy":
                out.add(node)
    return out


def read_node(text: str, node: str, level: int) -> NodeHealth:
    """One pod's output into the node's check."""
    try:
        report = parse_node_health(text)
    except ParseError as e:
        return NodeHealth(level, None, f"not checked: the output is not a health check's ({e})")
    if report.node not in (None, node):
        return NodeHealth(
            level, None, f"not checked: the output names node {report.node}, not {node}"
        )
    decision = decide_health(**report.signals())
    notes = list(decision.notes) + [f"not read: {p}" for p in report.problems]
    return NodeHealth(report.level or level, decision.action.value, decision.reason, notes)


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
        """Each node's check; deletes the workload."""
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
                out[node] = NodeHealth(level, None, f"not checked: {why}")
                continue
            text = self.backend.pod_logs(pod.name, wl.namespace, HEALTH_CONTAINER)
            out[node] = read_node(text, node, level)
        for node, check in out.items():
            if node in by_node:
                check.gpu_seconds = gpu_seconds([by_node[node]], self.ref.pool.gpu.count)
        self.backend.delete(wl.kind, wl.name, wl.namespace)
        for node, health in out.items():
            if health.action != HealthAction.HEALTHY.value:
                log.warning(
                    "%s: %s GPU health (level %d): %s - %s",
                    self.ref.key,
                    node,
                    health.level,
                    health.action or "not checked",
                    health.reason,
                )
        return out


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
        **health_row(checks, left_in_service),
    )


def health_row(
    checks: Mapping[str, NodeHealth], left_in_service: Iterable[str] = ()
) -> dict[str, Any]:
    """The pool's ledger row of kind ``health`` (``Ledger.record_validation``'s fields). As a
    fabric verdict does with its bad nodes, it passes when every node that failed its check was
    taken out of service (quarantined, or failed its retest), and fails when one was left in
    service (``left_in_service``: the quarantine cap held, a person is paged) or when no node
    could be checked at all; the reasons name each failed node and what became of it. Its cost
    (``cost_details``) is the night's tier, the level-1 and level-2 checks, over the nodes that
    ran them (a busy node read passively, level 0, holds nothing); the weekly level 3 is counted
    apart (``weekly_gpu_minutes``), as it runs on a
    seventh of the nodes a night."""
    levels: dict[str, int] = {}
    for h in checks.values():
        levels[str(h.level)] = levels.get(str(h.level), 0) + 1
    weekly = sum(h.gpu_seconds for h in checks.values() if h.level >= WEEKLY_LEVEL)
    active = [h for h in checks.values() if 0 < h.level < WEEKLY_LEVEL]  # level 0: passive
    nightly = sum(h.gpu_seconds for h in active)
    failed = {n: h for n, h in checks.items() if h.failed}
    left = set(left_in_service)
    checked = sum(1 for h in checks.values() if h.action is not None)
    reasons = [
        f"{n}: {h.action}: {h.reason}" + (f" {LEFT_IN_SERVICE}" if n in left else "")
        for n, h in sorted(failed.items())
    ]
    if not checked:
        reasons.append(f"none of the {len(checks)} node(s) could be checked")
    return {
        "kind": "health",
        "passed": checked > 0 and not left & set(failed),
        "nodes_tested": checked,
        "reasons": reasons,
        "details": {
            "levels": levels,
            "left_in_service": sorted(left & set(failed)),
            "nodes": {
                n: {"level": h.level, "action": h.action, "reasons": [h.reason], "notes": h.notes}
                for n, h in sorted(checks.items())
            },
            **cost_details(nightly, len(active)),
            "weekly_gpu_minutes": round(weekly / 60, 3),
        },
    }
