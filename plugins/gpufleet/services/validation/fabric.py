"""Validate one node pool's fabric: the GPU health check, pass 1, localization rounds,
quarantine, ledger.

A service: it orchestrates backends and domain code and holds no Airflow imports, so the
operator stays a thin adapter that defers between rounds. Its state is a ``FabricState``,
handed to the trigger and back between rounds as ``to_dict()`` (plain JSON); its result is a
``FabricSummary``. A validation that cannot finish raises: the operator records that as an
``error`` verdict.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from gpufleet.backends import cluster_backend
from gpufleet.backends.base import ClusterBackend
from gpufleet.config.baselines import find_baseline
from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.health.tiers import resting
from gpufleet.domain.pairing import Localizer
from gpufleet.domain.plumbing import NCCL_LOG_CONTAINER
from gpufleet.domain.stages import Stage, add_stages, stage_gpu_seconds
from gpufleet.domain.verdicts import PairVerdict, judge_pair
from gpufleet.domain.workloads import workload_selector
from gpufleet.manifests.labels import VALIDATION_NAMESPACE
from gpufleet.services.common.collect import (
    PairRead,
    Workload,
    gpu_seconds,
    image_pulls,
    init_alarm_notes,
    read_pair,
)
from gpufleet.services.nodes.drain import backend_clock
from gpufleet.services.nodes.lifecycle import NodeLifecycle
from gpufleet.services.validation.fabric_health import FabricHealth
from gpufleet.services.validation.fabric_state import FabricState, FabricSummary
from gpufleet.services.validation.health import (
    GpuHealthCheck,
    NodeHealth,
    health_deadline,
    plan_levels,
)
from gpufleet.services.validation.passive import passive_checks
from gpufleet.services.validation.steps import pair_levels, pair_steps
from gpufleet.services.validation.storage import POOL_CHECK_GIB, POOL_CHECK_RUNTIME_S
from gpufleet.services.validation.topology import (
    OUT_FOR_A_UNIT,
    places_of,
    plan,
    read_pass1,
    unit_retests,
)
from gpufleet.store import Ledger

__all__ = ["FabricState", "FabricSummary", "FabricValidation"]

log = logging.getLogger(__name__)

COLLECTIVE = "all_reduce"


class FabricValidation(FabricHealth):
    """One pool's fabric validation as a sequence of rounds (pass 1, then pass-2 rounds)."""

    def __init__(  # noqa: PLR0913  keyword-only settings of one validation
        self,
        ref: PoolRef,
        ledger: Ledger,
        backend: ClusterBackend | None = None,
        *,
        max_quarantine_share: float = 0.2,
        tolerance: float | None = None,
        max_repairs: int = 2,
        namespace: str = VALIDATION_NAMESPACE,
        image: str | None = None,
        gpu_health: bool = True,
        health_image: str | None = None,
        pool_check: Callable[[str], str | None] | None = None,
    ):
        """``gpu_health``: check the GPU health of the pool's nodes (``health_image``: the
        DCGM image, else ``manifests.gpu_health.DEFAULT_DCGM_IMAGE``): in the pairs' pods
        (``steps``) when every node checked tonight runs one level and none is retested, else
        as a round of its own before the pairs. ``pool_check``: this run validates the pool's
        storage too and its pool check is to run in pass 1's pods: given the run id, why the
        check is the pool's own tonight (``full_test.pool_check_duty``), or None when the
        filesystem's full test is this pool's (its storage task runs it)."""
        self.ref = ref
        self.ledger = ledger
        self.backend = backend or cluster_backend(ref.cluster)
        self.max_quarantine_share = max_quarantine_share
        self.max_repairs = max_repairs
        self.lifecycle = NodeLifecycle(ref, ledger, self.backend)
        self.tolerance = tolerance if tolerance is not None else ref.pool.tolerance
        self.namespace = namespace
        self.image = image
        self.pool_check = pool_check
        self.health = (
            GpuHealthCheck(ref, self.backend, namespace=namespace, image=health_image)
            if gpu_health
            else None
        )
        self.baseline = find_baseline(
            ref.pool.gpu.model, ref.pool.gpu.count, 2, COLLECTIVE, ref.pool.transport
        )

    # --- rounds --------------------------------------------------------------------------------

    def begin(self, run_id: str) -> FabricState:
        """Check the GPU health of the pool's idle and retested nodes, or (no check) plan pass 1
        over the idle nodes, and submit it. Returns the state."""
        nodes = self.backend.list_nodes(self.ref.pool.name)
        waiting = self.lifecycle.rows(OUT_FOR_A_UNIT)  # before the retest moves drop the evidence
        # out-of-service nodes are retested first, each against known-good partners (a
        # sub-block's nodes together, in pass 1's plan by scope)
        retest = self.lifecycle.retest_candidates(nodes, run_id)
        idle = [n.name for n in nodes if n.testable and n.name not in retest]
        busy = [n.name for n in nodes if n.workloads]
        quarantined = [n.name for n in nodes if n.quarantined]
        state = FabricState(
            cluster=self.ref.cluster.name,
            pool=self.ref.pool.name,
            run_id=run_id,
            started_at=self.ledger.clock.now().isoformat(),
            pool_nodes=len(nodes),
            idle=idle,
            busy=busy,
            quarantined_before=quarantined,
            odd=list(retest),
            retest=retest,
            places=places_of(nodes),
            units=unit_retests(waiting, retest),
        )
        log.info(
            "%s: %d nodes, %d idle, %d running jobs (not disturbed), %d quarantined",
            self.ref.key,
            len(nodes),
            len(idle),
            len(busy),
            len(quarantined),
        )
        if self.pool_check is not None and self.ref.filesystem is not None and len(idle) >= 2:
            state.pool_check = self.pool_check(run_id)
        if self.health is None:
            return self._start_pass1(state)
        night = datetime.fromtimestamp(backend_clock(self.backend).time(), UTC).date()
        pending = [n.name for n in nodes if n.unvalidated]  # never rested
        new = self._owed_burn_in(pending) if idle else []
        # busy nodes, and idle ones whose level 1 rests tonight: what their dcgm-exporter serves
        rest = resting(
            idle, night, self.ref.pool.level1_every_nights, pending=pending, pool=self.ref.key
        )
        passive = passive_checks(self.backend, self.ref, busy + rest)
        rested = self._rested(rest, passive, night)
        state.health = {n: h.to_dict() for n, h in passive.items() if n not in rest or n in rested}
        checked = [n for n in idle if n not in rested]
        if checked or retest:
            state.health_levels = plan_levels(
                checked,
                retest,
                night,
                new=new,
                burn_in=self.ref.pool.burn_in,
                limits=self.ref.dcgm_limits,
                pool=self.ref.key,
            )
            if not retest and len(idle) >= 2 and len(set(state.health_levels.values())) == 1:
                state.gang = True  # in the pairs' pods: one level, so no pod waits for a longer one
                log.info(
                    "%s: GPU health (level %d) on %d node(s) in their pairs' pods",
                    self.ref.key,
                    next(iter(state.health_levels.values())),
                    len(checked),
                )
                return self._start_pass1(state)
            self._prepare_namespace()
            state.phase = "health"
            state.health_deadline_s = health_deadline(state.health_levels, self.ref.dcgm_limits)
            state.workload = self.health.submit(state.health_levels, run_id)
            state.health_submitted_at = backend_clock(self.backend).time()
            return state
        return self._start_pass1(state)

    def _start_pass1(self, state: FabricState) -> FabricState:
        """Pair the idle nodes (those whose GPU health failed tonight are left out, and so are
        retested nodes that failed it) and submit pass 1."""
        failed = {n for n, h in state.health.items() if NodeHealth.from_dict(h).failed}
        state.phase = "fabric"
        state.idle = [n for n in state.idle if n not in failed]
        state.units = [n for n in state.units if n not in failed]  # retested for their health
        state.pass1_nodes = state.idle + [n for n in state.units if n not in failed]
        scoped = plan(state.places, state.pass1_nodes, self._rank(state))
        pairs = list(scoped.pairs)
        state.odd = list(scoped.odd) + [
            n for n in state.retest if n not in failed and n not in state.units
        ]
        if pairs:
            self._prepare_namespace()
            state.workload = self._submit(state, pairs)
        else:
            state.workload = None
        return state

    def _prepare_namespace(self) -> None:
        """The validation namespace and the ssh Secret mpirun uses to reach a pair's second
        pod. Both are created once and left in place (apply is create-if-absent)."""
        from gpufleet.manifests.addons import render_ssh_secret

        self.backend.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
        )
        self.backend.apply(render_ssh_secret(self.namespace))

    def _submit(self, state: FabricState, pairs: list[tuple[str, str]]) -> Workload:
        from gpufleet.manifests.nccl_validation import render_nccl_validation
        from gpufleet.manifests.storage_validation import PoolCheck

        kwargs: dict[str, Any] = {"namespace": self.namespace, "collective": COLLECTIVE}
        if self.image:
            kwargs["image"] = self.image
        owed = self._owed(state)
        levels = pair_levels(pairs, owed) if owed else []
        state.health_deadline_s = 0.0
        if any(levels):
            limits = self.ref.dcgm_limits
            kwargs.update(health_levels=levels, dcgm_limits=limits)
            if self.health is not None and self.health.image:
                kwargs["health_image"] = self.health.image
            ran = {f"{i}": lvl for i, lvl in enumerate(levels) if lvl}
            state.health_deadline_s = health_deadline(ran, limits)
            state.health_submitted_at = backend_clock(self.backend).time()
        check = state.round == 0 and state.pool_check is not None
        if check:
            kwargs["pool_check"] = PoolCheck(0, POOL_CHECK_GIB, POOL_CHECK_RUNTIME_S)
        # one JobSet per round: the round is part of the run id the name is derived from
        round_id = f"{state.run_id}-r{state.round}"
        manifest = render_nccl_validation(self.ref, pairs, round_id, **kwargs)
        self.backend.apply(manifest)
        meta = manifest["metadata"]
        log.info(
            "%s: round %d submitted JobSet %s/%s with %d pairs: %s",
            self.ref.key,
            state.round,
            meta.get("namespace"),
            meta["name"],
            len(pairs),
            ", ".join("/".join(p) for p in pairs),
        )
        return Workload(
            kind=manifest["kind"],
            name=meta["name"],
            namespace=meta.get("namespace") or self.namespace,
            pairs=[list(p) for p in pairs],
            levels=levels if any(levels) else [],
            pool_check=0 if check else None,
        )

    def collect(self, state: FabricState) -> FabricState:
        """Read and judge the finished round; submit the next one if localization needs it."""
        wl = state.workload
        assert wl is not None, "collect() needs a round in flight"
        if state.phase == "health":
            assert self.health is not None, "a health round needs the health check"
            checks = self.health.collect(wl, state.health_levels)
            for node, check in checks.items():  # a recheck's pods hold the GPUs again
                before = state.health.get(node) or {}
                check.gpu_seconds += before.get("gpu_seconds", 0.0)
                add_stages(check.stages, before.get("stages") or {})
            state.health.update({n: h.to_dict() for n, h in checks.items()})
            self._note_in_use(state, checks)
            return self.recheck(state)
        reads = [read_pair(self.backend, wl, i, NCCL_LOG_CONTAINER) for i in range(len(wl.pairs))]
        steps = self._take_steps(state, wl, reads)
        verdicts = [
            self._verdict(read, (pair[0], pair[1]))
            for read, pair in zip(reads, wl.pairs, strict=True)
        ]
        pods = self.backend.list_pods(wl.namespace, workload_selector(wl.kind, wl.name))
        # the steps' time is their own rows' (health, storage): the pairs' is what is left
        state.gpu_seconds += gpu_seconds(pods, self.ref.pool.gpu.count) - steps
        self._note_stages(state, wl, reads)
        self.backend.delete(wl.kind, wl.name, wl.namespace)
        if state.round == 0:
            state.pass1 += [v.as_row(1) for v in verdicts]
        else:
            state.pass2 += [v.as_row(2) for v in verdicts]
        for v in verdicts:
            log.info(
                "%s round %d %s: %s - %s",
                self.ref.key,
                state.round,
                "/".join(v.nodes),
                "PASS" if v.passed else "FAIL",
                "; ".join(v.reasons),
            )
        localizer = self._localizer(state)
        state.round += 1
        next_pairs = localizer.next_round()
        state.workload = self._submit(state, next_pairs) if next_pairs else None
        if state.workload is None and state.health_in_use:  # the pairs are done: recheck those
            return self.recheck(state)
        return state

    def _note_stages(self, state: FabricState, wl: Workload, reads: list[PairRead]) -> None:
        """Add the round's pairs' stages (``domain.stages``) to the state: GPU-seconds per
        stage over every pod, and each pair's launcher's seconds per stage."""
        pulls = image_pulls(self.backend, wl.namespace)
        gpus = self.ref.pool.gpu.count
        for index, (read, pair) in enumerate(zip(reads, wl.pairs, strict=True)):
            steps = pair_steps(wl, index)
            own = set(steps.values())  # the steps' stages are their rows' (``_take_steps``)
            per_pod = [
                {k: v for k, v in pod.items() if k not in own} for pod in read.stages(pulls, steps)
            ]
            add_stages(state.stage_gpu_s, stage_gpu_seconds(per_pod, gpus))
            state.scheduled_s += sum(p.get(Stage.SCHEDULED, 0.0) for p in per_pod)
            if per_pod:
                state.pair_stages.append(
                    {"round": state.round, "nodes": list(pair), "stages": per_pod[0]}
                )

    def _judge(self, wl: Workload, index: int, nodes: tuple[str, str]) -> PairVerdict:
        return self._verdict(read_pair(self.backend, wl, index, NCCL_LOG_CONTAINER), nodes)

    def _verdict(self, read: PairRead, nodes: tuple[str, str]) -> PairVerdict:
        verdict = judge_pair(
            nodes,
            run=read.run,
            log=read.info,
            expected_transport=self.ref.pool.transport,
            expect_gdrdma=self.ref.pool.gdrdma,
            baseline=self.baseline,
            tolerance=self.tolerance,
            failure=read.failure,
        )
        # NCCL init alarms are notes after the verdict's reasons: they never fail the pair
        notes = tuple(init_alarm_notes(read.init))
        return replace(verdict, reasons=verdict.reasons + notes) if notes else verdict

    def _localizer(self, state: FabricState) -> Localizer:
        """Rebuild the localizer from the recorded rows (the state stays plain JSON). Nodes of
        a bad sub-block and a sub-block's retested unit are not localized one by one; a pass-1
        pair a scope explains is not its nodes' to answer for."""
        scope = read_pass1(state.places, state.pass1_nodes, state.pass1, self._rank(state))
        # a node its GPU health check failed is judged by it: its pair is its partner's to read
        unhealthy = {n for n, h in state.health.items() if NodeHealth.from_dict(h).failed}
        apart = set(scope.out) | set(state.units) | unhealthy
        loc = Localizer(
            nodes=[n for n in state.idle if n not in apart],
            odd=[n for n in state.odd if n not in apart],
        )
        for i, row in enumerate(state.pass1):
            pair = (row["node_a"], row["node_b"])
            ok = bool(row["passed"]) or i in scope.explained
            if not set(pair) & apart:
                loc.record_pass1(pair, ok)
                continue
            for node in set(pair) - apart:  # its partner is judged apart
                (loc.good if ok else loc.suspects).add(node)
        for row in state.pass2:
            loc.record(
                (row["node_a"], row["node_b"]),
                row["passed"],
                row["reasons"][0] if row["reasons"] else "",
            )
        return loc
