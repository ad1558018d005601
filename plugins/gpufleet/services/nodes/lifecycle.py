"""The node lifecycle: a node that left service is retested, drained, repaired and released —
or handed to a human (``domain.nodes`` is the state machine; the ledger keeps each node's state
and every move with its evidence).

- **Retest first** (``retest_candidates``/``record_retest``, called by the fabric validation):
  every quarantined or suspect node, and every node back from repair, that is Ready and runs
  nothing is tested against known-good partners in the next nightly. A pass releases it (the
  quarantine taint and label removed, its ledger state ``released``); a failure sends it to be
  drained and repaired, or, once ``max_repairs`` repairs failed, to ``needs_human`` (paged).
- **Drain and repair** (``services.nodes.remediation``): a node that failed its retest is drained
  and repaired through the cloud, within the pool's repair budget; the next nightly retests it.
- **By hand** (``mark``: ``gpufleet node quarantine|release``): a person's move, with their name
  and reason, the only way out of ``needs_human``.
- **Held back** (``services.nodes.safety``, docs/remediation.md): in a pool whose behaviour
  profile is ``observe``, or under the fleet's dry run, the machine's quarantine and suspect
  marks are recorded as "would have" and change nothing; a failed retest climbs the
  remediation ladder, and a node with no rung left goes to ``needs_human`` with NVIDIA's words.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from gpufleet.backends import cluster_backend
from gpufleet.backends.base import ClusterBackend, NodeInfo, Taint
from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.nodes import NodeState, after_retest
from gpufleet.domain.remediation import REPAIR_BELOW_FLOOR, Rung, below_floor
from gpufleet.domain.signals import stop_ahead
from gpufleet.domain.workloads import (
    QUARANTINE_KEY,
    QUARANTINE_LABEL,
)
from gpufleet.services.nodes.safety import RemediationGuard
from gpufleet.store import Ledger
from gpufleet.store.nodes import NodeMove

log = logging.getLogger(__name__)

# where a node is retested from (RETESTING: a retest that could not judge it is retried)
STOP_LOOKBACK = 100  # a node's newest signals read for an EC2 stop still ahead
RETEST_FROM = (
    NodeState.QUARANTINED,
    NodeState.SUSPECT,
    NodeState.REPAIRING,
    NodeState.RETESTING,
)


def _label_value(text: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in text)[:63].strip("-_.")
    return safe or "quarantined"


class NodeLifecycle:
    """The lifecycle moves of one pool's nodes, recorded in the ledger."""

    def __init__(
        self,
        ref: PoolRef,
        ledger: Ledger,
        backend: ClusterBackend | None = None,
        *,
        guard: RemediationGuard | None = None,
    ):
        self.ref = ref
        self.ledger = ledger
        self.backend = backend or cluster_backend(ref.cluster)
        self.guard = guard or RemediationGuard(ref, ledger)

    @property
    def _where(self) -> tuple[str, str]:
        return self.ref.cluster.name, self.ref.pool.name

    def rows(self, states=None) -> dict[str, dict[str, Any]]:
        cluster, pool = self._where
        return {r["node"]: r for r in self.ledger.node_states(cluster, pool, states)}

    def move(self, node: str, move: NodeMove) -> dict[str, Any]:
        """The one way a node's state is written: the move is judged by the state machine
        (``domain.nodes.check_move`` with the move's facts; a first move starts from
        ``released``) in the ledger's transaction and recorded with its event. A move the
        machine forbids raises ``NodeTransitionError`` and records nothing."""
        cluster, pool = self._where
        return self.ledger.move_node(cluster, pool, node, move)

    # --- retest -------------------------------------------------------------------------------

    def retest_candidates(self, nodes: list[NodeInfo], run_id: str) -> list[str]:
        """Nodes to retest against known-good partners in this validation (moved to
        ``retesting``): quarantined, suspect, and back from repair; Ready and idle."""
        waiting = self.rows([s.value for s in RETEST_FROM])
        out = []
        for node in nodes:
            row = waiting.get(node.name)
            if row is None:
                continue
            came_from = row["state"]
            if came_from == NodeState.REPAIRING.value and node.ready and node.unschedulable:
                # back from repair (Ready again): uncordon for its retest; the quarantine
                # taint still keeps every job off it
                self.backend.set_unschedulable(node.name, False)
                node = replace(node, unschedulable=False)
            if not node.retestable:
                continue
            if came_from != NodeState.RETESTING.value:
                self.move(
                    node.name,
                    NodeMove(
                        NodeState.RETESTING,
                        f"retest against known-good partners (was {came_from})",
                        evidence={"after_repair": came_from == NodeState.REPAIRING.value},
                        run_id=run_id,
                    ),
                )
            out.append(node.name)
        return sorted(out)

    def record_retest(
        self,
        node: str,
        outcome: str,
        evidence: dict[str, Any],
        run_id: str,
        max_repairs: int,
    ) -> NodeState:
        """A retest's outcome (``passed``, ``failed`` or ``unsure``): release, drain for repair,
        hand to a human, or back to quarantined when it could not be judged."""
        cluster, _ = self._where
        row = self.ledger.node_state(cluster, node) or {}
        if outcome == "unsure":  # stays retesting: the next night tries again
            check = evidence.get("health") or {}
            why = (
                f"its GPU health check could not run ({check.get('reason')})"
                if check.get("action") == "could_not_run"
                else "no known-good partner could test it"
            )
            self.move(
                node,
                NodeMove(
                    NodeState.RETESTING,
                    f"retest inconclusive: {why}; retried next night",
                    evidence={**(row.get("evidence") or {}), **evidence},
                    run_id=run_id,
                    stay=True,
                ),
            )
            return NodeState.RETESTING
        passed = outcome == "passed"
        after_repair = bool((row.get("evidence") or {}).get("after_repair"))
        failed_repairs = int(row.get("failed_repairs") or 0) + (
            1 if after_repair and not passed else 0
        )
        # (its failed repairs count what its own checks found, not the announced stop)
        stop = stop_ahead(self.ledger.node_signals(cluster, node, limit=STOP_LOOKBACK))
        if passed and stop is not None:  # healthy, but EC2 will stop it: replaced ahead of it
            passed = False
            evidence = {**evidence, "health": {"action": "repair", "reason": stop}}
        health = evidence.get("health") or {}
        needs_person = health.get("action") == "needs_human"
        target = after_retest(passed, failed_repairs, max_repairs, needs_person=needs_person)
        if target is NodeState.RELEASED:
            self.release(
                node, "passed its retest against known-good partners", evidence, run_id=run_id
            )
            return target
        ladder = self.guard.rung(node, health)  # the rung it would be given next
        if target is NodeState.DRAINING and ladder.rung is Rung.NEEDS_HUMAN:
            target = NodeState.NEEDS_HUMAN
            evidence = {**evidence, "ladder": ladder.reason}
        if stop is not None and target is NodeState.DRAINING:
            reason = f"{stop}: drained and repaired (replaced) ahead of it"
        elif needs_person:
            reason = f"failed its retest: {evidence.get('reason')}: a person must look at it"
        elif "ladder" in evidence and target is NodeState.NEEDS_HUMAN:
            reason = f"failed its retest; the remediation ladder is climbed: {ladder.reason}"
        elif target is NodeState.NEEDS_HUMAN:
            reason = f"failed its retest after {failed_repairs} repair(s): a person must look at it"
        elif health.get("action") in ("reset_gpu", "reboot"):
            reason = f"failed its retest: {evidence.get('reason')}: to be drained and rebooted"
        else:
            reason = "failed its retest: to be drained and repaired"
        if target is NodeState.DRAINING and self._repair_waits(node, reason, evidence, run_id):
            return NodeState.RETESTING
        self.move(
            node,
            NodeMove(
                target,
                reason,
                evidence=evidence,
                run_id=run_id,
                retest_passed=False,
                failed_repairs=failed_repairs,
            ),
        )
        return target

    def _repair_waits(self, node: str, reason: str, evidence: dict[str, Any], run_id: str) -> bool:
        """Whether the repair of ``node`` waits for a person: it would take the pool below its
        floor (``min_serving_nodes``; docs/remediation.md#approvals) and no approved request
        lets it. Then the node stays out (``retesting``, retested again next night) and one
        request is recorded for the ``remediation_approvals`` DAG to ask (not again while one
        is open, nor within the ladder's window once a person said no)."""
        cluster, pool = self._where
        repairing = [
            NodeState.DRAINING.value,
            NodeState.DRAINED.value,
            NodeState.REPAIRING.value,
            NodeState.NEEDS_HUMAN.value,
        ]
        out = [n for n in self.rows(repairing) if n != node]
        why = below_floor(self.ref.pool.nodes, len(out), self.ref.pool.min_serving_nodes)
        if why is None:
            return False
        key = f"{cluster}/{pool}/{node}"
        approved = self.ledger.open_approval(REPAIR_BELOW_FLOOR, key)
        if approved is not None and approved["state"] == "approved":
            self.ledger.approval_done(approved["id"], f"{node} sent to repair by run {run_id}")
            return False
        request, _ = self.ledger.request_approval(
            REPAIR_BELOW_FLOOR,
            key,
            f"Repair {node} of {cluster}/{pool}? {why}",
            requested_by=run_id,
            detail={"cluster": cluster, "pool": pool, "node": node, "why": why, "reason": reason},
            recheck_since=self.ledger.clock.now() - self.guard.policy.window,
        )
        row = self.ledger.node_state(cluster, node) or {}
        self.move(
            node,
            NodeMove(
                NodeState.RETESTING,
                f"{reason}; held: {why}: the repair waits for a person's approval "
                f"(request #{request['id']}, {request['state']}); kept out, retested next night",
                evidence={**(row.get("evidence") or {}), **evidence, "approval": request["id"]},
                run_id=run_id,
                stay=True,
            ),
        )
        return True

    def record_retests(
        self,
        retest: list[str],
        bad: dict[str, str],
        unsure: list[str],
        rows: list[dict[str, Any]],
        run_id: str,
        max_repairs: int,
        health: dict[str, dict[str, Any]] | None = None,
    ) -> dict[str, str]:
        """Each retested node's outcome (passed | failed | unsure) from the validation's pair
        rows and localization, recorded in its lifecycle with its pairs and its GPU health check
        (``health``: node -> ``NodeHealth.to_dict()``) as evidence. A node whose check failed
        has failed its retest (it is in ``bad``, with the check's reason)."""
        health = health or {}
        out: dict[str, str] = {}
        for node in retest:
            pairs = [
                {k: r[k] for k in ("node_a", "node_b", "passed", "transport", "busbw_gbps")}
                for r in rows
                if node in (r["node_a"], r["node_b"])
            ]
            if node in bad:
                outcome = "failed"
            elif node in unsure or not any(p["passed"] for p in pairs):
                outcome = "unsure"
            else:
                outcome = "passed"
            evidence: dict[str, Any] = {"pairs": pairs, "reason": bad.get(node)}
            if node in health:
                evidence["health"] = health[node]
            self.record_retest(node, outcome, evidence, run_id, max_repairs)
            out[node] = outcome
        return out

    def release(
        self,
        node: str,
        reason: str,
        evidence: dict[str, Any] | None = None,
        *,
        by: str | None = None,
        run_id: str | None = None,
    ) -> None:
        """Back in service: taint and label removed, the ledger row moved to ``released``."""
        self.move(
            node,
            NodeMove(
                NodeState.RELEASED,
                reason,
                evidence=evidence,
                by=by,
                run_id=run_id,
                retest_passed=True if by is None else None,
            ),
        )
        self.backend.remove_taint(node, QUARANTINE_KEY)
        self.backend.set_labels(node, {QUARANTINE_LABEL: None})
        self.backend.set_unschedulable(node, False)
        log.info("%s: released %s: %s", self.ref.key, node, reason)

    def quarantine(
        self,
        node: str,
        reason: str,
        evidence: dict[str, Any] | None = None,
        *,
        by: str | None = None,
        run_id: str | None = None,
    ) -> None:
        """Out of service: tainted NoSchedule, labelled, recorded (idempotent). The machine's
        quarantine (no ``by``) in an ``observe`` pool or under the dry run is recorded as "would
        have" and changes nothing."""
        cluster, _ = self._where
        row = self.ledger.node_state(cluster, node)
        if by is None and (row is None or row["state"] == NodeState.RELEASED.value):
            held = self.guard.held_back(node, "quarantine", run_id, detail=reason)
            if not held.proceed:
                log.info("%s: %s: %s", self.ref.key, node, held.reason)
                return
        if row is None or row["state"] != NodeState.QUARANTINED.value:
            self.move(
                node,
                NodeMove(NodeState.QUARANTINED, reason, evidence=evidence, by=by, run_id=run_id),
            )
        self.backend.add_taint(node, Taint(QUARANTINE_KEY, _label_value(reason), "NoSchedule"))
        self.backend.set_labels(node, {QUARANTINE_LABEL: "true"})

    def suspect(self, node: str, reason: str, evidence: dict[str, Any], run_id: str | None) -> None:
        """A node a running job found on the wrong transport: retested first next night."""
        cluster, _ = self._where
        row = self.ledger.node_state(cluster, node)
        if row is not None and row["state"] != NodeState.RELEASED.value:
            return  # already out of service or being handled
        if not self.guard.held_back(node, "suspect", run_id, detail=reason).proceed:
            return
        self.move(node, NodeMove(NodeState.SUSPECT, reason, evidence=evidence, run_id=run_id))
