"""One pool's fabric verdict: the part of ``fabric.FabricValidation`` that judges the pool once
its rounds are over (a mixin: it reads the validation's ``ref``, ``ledger``, ``backend``,
``lifecycle``, settings and ``_localizer``), quarantines the localized nodes, records the health,
fabric and per-scope rows and the pool's state, and releases new nodes that passed."""

from __future__ import annotations

import logging
import statistics
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gpufleet.backends import cloud_backend
from gpufleet.domain.nccl_init import pair_alarms
from gpufleet.domain.validation_kinds import ValidationKind
from gpufleet.domain.verdicts import PairVerdict, judge_pool
from gpufleet.services.common.collect import cost_details
from gpufleet.services.common.snapshots import snapshot_pool
from gpufleet.services.validation.fabric_state import FabricState, FabricSummary
from gpufleet.services.validation.health import NodeHealth, health_reason, record_health
from gpufleet.services.validation.new_nodes import release_new_nodes
from gpufleet.services.validation.topology import apply_scopes, provider_view, read_pass1

if TYPE_CHECKING:
    from gpufleet.backends.base import ClusterBackend
    from gpufleet.domain.baselines import Baseline
    from gpufleet.domain.fleet import PoolRef
    from gpufleet.domain.pairing import Localizer
    from gpufleet.services.nodes.lifecycle import NodeLifecycle
    from gpufleet.store import Ledger

log = logging.getLogger(__name__)


class FabricVerdict:
    """The verdict half of ``FabricValidation``."""

    # what it reads of the validation (set by ``FabricValidation.__init__``)
    ref: PoolRef
    ledger: Ledger
    backend: ClusterBackend
    lifecycle: NodeLifecycle
    max_quarantine_share: float
    max_repairs: int
    tolerance: float
    baseline: Baseline | None

    if TYPE_CHECKING:

        def _localizer(self, state: FabricState) -> Localizer: ...

        @staticmethod
        def _rank(state: FabricState) -> dict[str, int] | None: ...

    def finish(self, state: FabricState) -> FabricSummary:
        """Judge the pool, quarantine localized nodes, record everything, then the pool's node
        snapshot as the run leaves it. Returns a summary."""
        summary = self._judge_pool(state)
        snapshot_pool(self.ref, self.ledger, self.backend, source="fabric", run_id=state.run_id)
        return summary

    def _judge_pool(self, state: FabricState) -> FabricSummary:
        health = {n: NodeHealth.from_dict(h) for n, h in state.health.items()}
        started = datetime.fromisoformat(state.started_at)
        unhealthy = {n: health_reason(h) for n, h in health.items() if h.failed}
        # a check that could not run proves nothing either way: no retest passes on it, no new
        # node is released on it (health fails closed); nothing is done to the node on its account
        unrun = [n for n, h in health.items() if h.could_not_run]
        if len(state.idle) < 2 and not unhealthy:
            record_health(self.ledger, self.ref, state.run_id, started, health)
            return self._too_few_idle(state)
        pool = self.ref.pool
        scope = read_pass1(state.places, state.pass1_nodes, state.pass1, self._rank(state))
        apart = set(scope.out) | set(state.units)  # judged by scope (topology.apply_scopes)
        bad, inconclusive, untested = self._localizer(state).outcome()
        fabric_bad = dict(bad)
        bad.update(unhealthy)  # the GPU health check's: out of the pairs, failed their retest
        pass1 = [  # the nodes' pairs: those a scope explains are the scope's
            PairVerdict.from_row(r)
            for i, r in enumerate(state.pass1)
            if i not in scope.explained and not {r["node_a"], r["node_b"]} & apart
        ]
        rows = state.pass1 + state.pass2
        tested = sorted({n for r in rows for n in (r["node_a"], r["node_b"])} | set(unhealthy))
        retested = self.lifecycle.record_retests(
            [n for n in state.retest if n not in state.units],
            bad,
            inconclusive + untested + unrun,
            rows,
            state.run_id,
            self.max_repairs,
            health={n: h.to_dict() for n, h in health.items()},
        )
        verdict = judge_pool(  # the pool is judged on the nodes in service
            pool_nodes=state.pool_nodes,
            tested=[n for n in tested if n not in state.retest and n not in apart],
            pass1=pass1,
            bad={n: why for n, why in fabric_bad.items() if n not in state.retest},
            unhealthy={n: why for n, why in unhealthy.items() if n not in state.retest},
            inconclusive=[n for n in inconclusive if n not in state.retest],
            untested=[n for n in untested if n not in state.retest],
            max_quarantine_share=self.max_quarantine_share,
            expected_transport=pool.transport,
            already_out=[n for n in state.quarantined_before if retested.get(n) != "passed"],
        )
        for node, why in verdict.quarantine.items():
            self.quarantine(node, why, state.run_id, state.health.get(node))
        placed = any(state.places.values())  # the provider's view: pools with topology labels
        cloud = cloud_backend(self.ref.cluster) if placed else None
        verdict = apply_scopes(self.lifecycle, state, scope, verdict, cloud)
        verdict.reasons = [*verdict.reasons, *pair_alarms(rows)]  # NCCL init: notes
        left = set(unhealthy) - set(verdict.quarantine) - set(state.retest)  # past the cap
        record_health(self.ledger, self.ref, state.run_id, started, health, left)
        # new nodes that passed take work once the pool's whole verdict passes (release_new_nodes)
        passed = set(tested) - set(bad) - set(inconclusive) - set(untested) - set(unrun)
        transports = sorted({r["transport"] or "unknown" for r in rows})
        worst = next((t for t in transports if t != pool.transport), pool.transport)
        good_busbw = [
            r["busbw_gbps"]
            for r in state.pass1
            if r["busbw_gbps"] is not None and not {r["node_a"], r["node_b"]} & set(bad)
        ]
        lowest = min(good_busbw) if good_busbw else None
        latencies = [  # the pool's small-message latency tonight: what drift watches
            r["small_latency_us"]
            for r in state.pass1
            if r["passed"] and r["small_latency_us"] is not None
        ]
        self.ledger.record_validation(
            run_id=state.run_id,
            cluster=self.ref.cluster.name,
            pool=pool.name,
            kind=ValidationKind.FABRIC,
            passed=verdict.passed,
            expected_transport=pool.transport,
            transport=worst,
            busbw_gbps=lowest,
            baseline_gbps=self.baseline.busbw_gbps if self.baseline else None,
            nodes_tested=len(tested),
            reasons=verdict.reasons,
            details={
                "busy": state.busy,
                "quarantined": sorted(verdict.quarantine),
                "page": verdict.page,
                "transports": transports,
                "tolerance": self.tolerance,
                "small_latency_us": statistics.median(latencies) if latencies else None,
                **cost_details(state.gpu_seconds, len(tested)),
                "stages": {
                    "gpu_minutes": {k: round(v / 60, 3) for k, v in state.stage_gpu_s.items()},
                    "scheduled_s": round(state.scheduled_s, 3),
                    "pairs": state.pair_stages,
                },
                "passed_nodes": sorted(passed - apart) if verdict.passed else [],
                **scope.details(),
                "provider_subblocks": provider_view(cloud, pool.name) if cloud else None,
            },
            started_at=datetime.fromisoformat(state.started_at),
            pairs=rows,
        )
        self.ledger.set_pool_state(
            self.ref.cluster.name,
            pool.name,
            verdict.state,
            "; ".join(verdict.reasons[:3]),
            state.run_id,
        )
        release_new_nodes(self.ref, self.ledger, state.run_id, self.backend)
        return FabricSummary(
            cluster=self.ref.cluster.name,
            pool=pool.name,
            passed=verdict.passed,
            state=verdict.state,
            page=verdict.page,
            transport=worst,
            busbw_gbps=lowest,
            quarantined=sorted(verdict.quarantine),
            reasons=list(verdict.reasons),
        )

    def _too_few_idle(self, state: FabricState) -> FabricSummary:
        """Fewer than two idle nodes: nothing to pair. Busy nodes are covered by their jobs'
        own transport checks; a pool with no schedulable pair left is degraded."""
        pool = self.ref.pool
        summary = FabricSummary(
            cluster=self.ref.cluster.name,
            pool=pool.name,
            passed=False,
            state="degraded",
            page=True,
            transport=None,
            busbw_gbps=None,
            quarantined=[],
            reasons=[],
        )
        if state.busy:
            reason = (
                f"only {len(state.idle)} idle node(s): {len(state.busy)} run jobs "
                "(confirmed by their own transport checks); previous validation stands"
            )
            summary.passed, summary.skipped, summary.state, summary.page = True, True, None, False
            summary.reasons = [reason]
            return summary
        reason = (
            f"fewer than 2 schedulable nodes to pair ({len(state.idle)} idle, "
            f"{len(state.quarantined_before)} quarantined)"
        )
        self.ledger.record_validation(
            run_id=state.run_id,
            cluster=self.ref.cluster.name,
            pool=pool.name,
            kind=ValidationKind.FABRIC,
            passed=False,
            expected_transport=pool.transport,
            nodes_tested=0,
            reasons=[reason],
            started_at=datetime.fromisoformat(state.started_at),
        )
        self.ledger.set_pool_state(
            self.ref.cluster.name, pool.name, "degraded", reason, state.run_id
        )
        summary.reasons = [reason]
        return summary

    def quarantine(
        self,
        node: str,
        reason: str,
        run_id: str | None = None,
        health: dict[str, Any] | None = None,
    ) -> None:
        """Taint the node NoSchedule, label it and record it (idempotent), with its GPU health
        check as evidence when it had one (the action NVIDIA recommends follows it)."""
        evidence: dict[str, Any] = {"reason": reason}
        if health is not None:
            evidence["health"] = health
        self.lifecycle.quarantine(node, reason, evidence, run_id=run_id)
        log.warning("%s: quarantined %s: %s", self.ref.key, node, reason)
