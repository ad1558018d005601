"""Drain and repair a pool's nodes that failed their retest: one non-blocking pass per pool,
after the nightly validation (``services.nodes.lifecycle`` has the lifecycle and the retest).

A node to repair is cordoned and emptied by the one drain (``services.nodes.drain``: ``Drain.once``,
the pass that never blocks; DaemonSet pods stay); training jobs on it, and pods a
PodDisruptionBudget keeps for now, are named in an alert with their launch run and waited for
(the next pass looks again), or the training pods are evicted when the policy says ``evict``.
A drained node is repaired through the cloud (``CloudBackend.repair_node``, keeping it in its
reservation), or rebooted (``CloudBackend.reboot_node``) when the GPU health check that failed
its retest asks for a GPU reset or a reboot (``domain.health.repair_kind``), at most
``repair_budget(pool nodes)`` at a time; the next nightly retests it.
A node handed to a person (``needs_human``) is paged once.

Before each drain and each rung it asks ``services.nodes.safety`` (docs/remediation.md): the
rung is the remediation ladder's (a GPU reset, done as a reboot of the drained node; a reboot,
at most ``max_reboots`` in the window; the provider's repair); the pool's behaviour profile and
the fleet's dry run hold an action back as "would have"; a tripped blast-radius breaker holds
it until a person resets the breaker. Nothing held back changes the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpufleet.backends import cloud_backend, cluster_backend
from gpufleet.backends.base import CloudBackend, ClusterBackend
from gpufleet.domain.fleet import Catalog, PoolRef
from gpufleet.domain.nodes import NodeState, may_start_repair
from gpufleet.domain.remediation import REBOOTS, Rung
from gpufleet.errors import GpufleetError
from gpufleet.services.common.snapshots import snapshot_pool
from gpufleet.services.common.step_report import StepReport
from gpufleet.services.nodes.drain import Drain, DrainSettings, NodeEmptying, job_name, pods_to_move
from gpufleet.services.nodes.lifecycle import NodeLifecycle
from gpufleet.services.nodes.safety import RemediationGuard
from gpufleet.store import Ledger
from gpufleet.store.nodes import NodeMove

DRAIN_POLICIES = ("wait", "evict")  # the drain's timeout policies that never block


@dataclass
class RemediationSettings:
    max_repairs: int = 2
    repair_share: float = 0.10
    drain: str = "wait"  # wait | evict

    def __post_init__(self) -> None:
        if self.drain not in DRAIN_POLICIES:
            raise GpufleetError(f"drain {self.drain!r} is not one of {', '.join(DRAIN_POLICIES)}")


@dataclass
class RemediationResult(StepReport):
    """One pass's report (alerts: nodes waiting for their jobs; pages: nodes that need a
    person); besides: the nodes whose repair it started, and the actions held back (node ->
    why: a behaviour profile, the dry run or a tripped breaker)."""

    repairs_started: list[str] = field(default_factory=list)
    held: dict[str, str] = field(default_factory=dict)


class NodeRemediation:
    """One pool's drain-and-repair pass: never blocks, each nightly advances it."""

    def __init__(
        self,
        ref: PoolRef,
        ledger: Ledger,
        settings: RemediationSettings | None = None,
        *,
        backend: ClusterBackend | None = None,
        cloud: CloudBackend | None = None,
        catalog: Catalog | None = None,
    ):
        self.ref = ref
        self.ledger = ledger
        self.settings = settings or RemediationSettings()
        self.backend = backend or cluster_backend(ref.cluster)
        self._cloud = cloud
        self.guard = RemediationGuard(ref, ledger, catalog)
        self.nodes = NodeLifecycle(ref, ledger, self.backend, guard=self.guard)

    @property
    def cloud(self) -> CloudBackend:
        if self._cloud is None:
            self._cloud = cloud_backend(self.ref.cluster)
        return self._cloud

    @property
    def drain(self) -> Drain:
        """The one drain, in its never-blocking pass: the timeout is over at once, so the
        policy (``wait``: name the jobs and look again next night; ``evict``) applies now."""
        settings = DrainSettings(timeout_s=0, on_timeout=self.settings.drain)
        return Drain(self.backend, self.ref.pool.name, settings)

    def step(self, run_id: str) -> RemediationResult:
        result = RemediationResult("remediation")
        infos = {n.name: n for n in self.backend.list_nodes(self.ref.pool.name)}
        draining = {
            n: r
            for n, r in self.nodes.rows([NodeState.DRAINING.value]).items()
            if n in infos and self._may(n, "drain", r, run_id, result)
        }
        for emptying in self.drain.once(list(draining)).values():
            health = (draining[emptying.node].get("evidence") or {}).get("health")
            self._drained(emptying, run_id, result, health)
        for node, row in self.nodes.rows([NodeState.REPAIRING.value]).items():
            if node not in infos:  # EKS: the node group replaced the instance; the new node
                # comes up tainted unvalidated and is validated as a new node
                self.nodes.move(
                    node,
                    NodeMove(
                        NodeState.RELEASED,
                        "replaced by the cloud: the machine is gone; its replacement is "
                        "validated as a new node",
                        evidence=row.get("evidence") or {},
                        run_id=run_id,
                        replaced=True,
                    ),
                )
                result.notes.append(f"{node}: replaced by the cloud")
        repairing = len(self.nodes.rows([NodeState.REPAIRING.value]))
        for node, row in self.nodes.rows([NodeState.DRAINED.value]).items():
            info = infos.get(node)
            if info is None:
                continue
            if not may_start_repair(repairing, len(infos), self.settings.repair_share):
                result.notes.append(f"{node}: drained, waiting for the repair budget")
                continue
            busy = pods_to_move(self.backend, node)
            if busy:
                result.notes.append(f"{node}: pods came back on it; draining again")
                self.nodes.move(node, NodeMove(NodeState.DRAINING, "pods came back", run_id=run_id))
                continue
            health = (row.get("evidence") or {}).get("health")
            step = self.guard.rung(node, health)
            if step.rung is Rung.NEEDS_HUMAN:  # the window moved since its retest: a person
                result.alerts.append(f"{self.ref.key}: {node} needs a person: {step.reason}")
                continue
            if not self._may(node, step.rung.value, row, run_id, result):
                continue
            # gpufleet resets a GPU by rebooting its drained node: the reset rung is a reboot
            what = "reboot" if step.rung in REBOOTS else "repair"
            ensured = (self.cloud.reboot_node if what == "reboot" else self.cloud.repair_node)(info)
            because = f": {health['action']} (GPU health: {health['reason']})" if health else ""
            rung = "" if step.rung.value == what else f" as the ladder's {step.rung} rung"
            self.nodes.move(
                node,
                NodeMove(
                    NodeState.REPAIRING,
                    f"{what} requested from the cloud ({ensured.action}){rung}{because}",
                    evidence={
                        "console_url": ensured.console_url,
                        "kind": what,
                        "rung": step.rung.value,
                        "ladder": step.reason,
                        **ensured.detail,
                    },
                    run_id=run_id,
                ),
            )
            repairing += 1
            result.repairs_started.append(node)
            result.notes.append(f"{node}: {what} requested ({ensured.action})")
        for node, row in self.nodes.rows([NodeState.NEEDS_HUMAN.value]).items():
            if row.get("evidence", {}).get("paged") is None:
                text = f"{self.ref.key}: {node} needs a person: {row['reason']}"
                result.pages.append(text)
                self.nodes.move(
                    node,
                    NodeMove(
                        NodeState.NEEDS_HUMAN,
                        row["reason"],
                        evidence={**(row.get("evidence") or {}), "paged": run_id},
                        run_id=run_id,
                        failed_repairs=row["failed_repairs"],
                        stay=True,
                    ),
                )
        snapshot_pool(self.ref, self.ledger, self.backend, source="remediation", run_id=run_id)
        return result

    def _may(
        self,
        node: str,
        action: str,
        row: dict[str, Any],
        run_id: str,
        result: RemediationResult,
    ) -> bool:
        """Whether ``action`` on ``node`` may run now: not when the pool's profile or the dry
        run holds it back ("would have", recorded once per node state), nor past a tripped
        breaker (held, alerted)."""
        decision = self.guard.held_back(node, action, run_id, once_since=row.get("since"))
        if decision.proceed:
            decision = self.guard.breakers(node, action, run_id)
            if not decision.proceed:
                result.alerts.append(f"{self.ref.key}: {node}: {action} held: {decision.reason}")
        if decision.proceed:
            return True
        result.held[node] = decision.reason or ""
        result.notes.append(f"{node}: {decision.reason}")
        return False

    def _drained(
        self,
        emptying: NodeEmptying,
        run_id: str,
        result: RemediationResult,
        health: dict[str, Any] | None = None,
    ) -> None:
        node = emptying.node
        for pod in emptying.refused:
            result.notes.append(f"{node}: eviction of {pod.name} refused for now (PDB)")
        if not emptying.emptied:
            jobs = sorted({job_name(p) for p in emptying.training + emptying.refused})
            runs = [self._launch_run(job) for job in jobs]
            named = ", ".join(
                f"{j} (launch run {r})" if r else j for j, r in zip(jobs, runs, strict=True)
            )
            result.alerts.append(
                f"{self.ref.key}: {node} must be repaired but training jobs run on it: {named};"
                f" waiting for them (drain policy {self.settings.drain})"
            )
            return
        self.nodes.move(  # the GPU health check that sent it here decides its repair
            node,
            NodeMove(
                NodeState.DRAINED,
                "drained: nothing left on it but DaemonSets",
                evidence={"health": health} if health else None,
                run_id=run_id,
            ),
        )
        result.notes.append(f"{node}: drained")

    def _launch_run(self, job: str) -> str | None:
        for launch in self.ledger.launches(limit=200):
            if launch["job"] == job and launch["cluster"] == self.ref.cluster.name:
                return launch["run_id"]
        return None
