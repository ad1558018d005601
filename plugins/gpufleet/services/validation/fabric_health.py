"""One pool's fabric validation, its GPU health part: the part of ``fabric.FabricValidation``
(a mixin: it reads the validation's ``ref``, ``ledger``, ``backend``, ``health`` and
``_start_pass1``) that rests a node's level 1 on a healthy exporter reading, owes a new node
its burn-in, reads the checks that ran in the pairs' pods (``steps``), rechecks the nodes DCGM
found in use, and records a check that never ran.

Design: docs/design/gpu-health.md#one-pod-per-node.
"""

from __future__ import annotations

import logging
from datetime import date, datetime
from typing import TYPE_CHECKING

from gpufleet.domain.health import HealthAction
from gpufleet.domain.health.retry import Try, plan_rechecks, retried
from gpufleet.domain.health.tiers import next_level1
from gpufleet.services.common.collect import PairRead, Workload
from gpufleet.services.nodes.drain import backend_clock
from gpufleet.services.validation.fabric_state import FabricState, FabricSummary
from gpufleet.services.validation.fabric_verdict import FabricVerdict
from gpufleet.services.validation.health import (
    NodeHealth,
    burned_in,
    could_not_run,
    health_deadline,
    log_findings,
)
from gpufleet.services.validation.steps import merge_check, read_steps, record_pool_check

if TYPE_CHECKING:
    from gpufleet.services.validation.health import GpuHealthCheck

log = logging.getLogger(__name__)


class FabricHealth(FabricVerdict):
    """The GPU health half of ``FabricValidation``."""

    health: GpuHealthCheck | None

    if TYPE_CHECKING:

        def _start_pass1(self, state: FabricState) -> FabricState: ...

    def _rested(self, rest: list[str], passive: dict[str, NodeHealth], night: date) -> set[str]:
        """The nodes of ``rest`` (level 1 not due tonight) whose dcgm-exporter reads healthy:
        their level 1 rests. Every other one (a finding, a page that could not be read, no
        exporter) is checked at level 1 tonight: unknown is never healthy."""
        every = self.ref.pool.level1_every_nights
        rested = set()
        for node in rest:
            health = passive.get(node)
            if health is not None and health.action == HealthAction.HEALTHY.value:
                health.notes.append(
                    f"dcgmi diag level 1 rests tonight (once in {every} nights; next on "
                    f"{next_level1(node, night, every):%Y-%m-%d}): its dcgm-exporter reads healthy"
                )
                health.rested = True
                rested.add(node)
        if rest:
            log.info(
                "%s: level 1 rests tonight on %d of %d idle nodes not due (exporter healthy); "
                "%d checked anyway",
                self.ref.key,
                len(rested),
                len(rest),
                len(rest) - len(rested),
            )
        return rested

    def _owed_burn_in(self, new: list[str]) -> list[str]:
        """Of the ``new`` nodes (still tainted ``unvalidated``), those a burn-in is owed: all of
        them, or with the pool's ``burn_in``, those not burnt in yet."""
        if not new or not self.ref.pool.burn_in:
            return new
        done = burned_in(self.ledger, self.ref.cluster.name, self.ref.pool.name)
        return [n for n in new if n not in done]

    @staticmethod
    def _rank(state: FabricState) -> dict[str, int] | None:
        """Pass 1's pairing rank: the nodes' GPU health levels when the checks run in the
        pairs' pods (nodes of one level pair together), else none."""
        return state.health_levels if state.gang else None

    @staticmethod
    def _owed(state: FabricState) -> dict[str, int]:
        """The nodes whose GPU health check runs in their pair's pods and was not read yet."""
        if not state.gang:
            return {}
        return {n: lvl for n, lvl in state.health_levels.items() if n not in state.health}

    def finish(self, state: FabricState) -> FabricSummary:
        """As ``FabricVerdict.finish``, a node whose check was to run in its pair's pods and
        never did (it was never paired) first recorded as a check that could not run."""
        for node, level in self._owed(state).items():
            state.health[node] = could_not_run(
                level, "it was not paired tonight: its check runs in its pair's pod"
            ).to_dict()
        return super().finish(state)

    def _take_steps(self, state: FabricState, wl: Workload, reads: list[PairRead]) -> float:
        """Read the round's steps (``steps``): each node's GPU health check into the state (a
        second check on a node adds to its first, ``merge_check``), and the pool check's fio
        recorded as the pool's storage row. Returns the GPU-seconds the steps held."""
        if not wl.levels and wl.pool_check is None:
            return 0.0
        steps = read_steps(self.backend, self.ref, wl, reads)
        for node, check in steps.health.items():
            state.health[node] = merge_check(state.health.get(node), check).to_dict()
        log_findings(self.ref, steps.health)
        # a node DCGM found in use is checked again once the pairs are done (``recheck``)
        self._note_in_use(state, {n: NodeHealth.from_dict(state.health[n]) for n in steps.health})
        if wl.pool_check is not None:
            record_pool_check(
                self.ledger,
                self.ref,
                steps,
                run_id=state.run_id,
                started_at=datetime.fromisoformat(state.started_at),
                cost_nodes=len(state.idle),
                full_test=state.pool_check,
            )
        return steps.gpu_seconds

    def _note_in_use(self, state: FabricState, checks: dict[str, NodeHealth]) -> None:
        """Each node of the round just read that DCGM found in use: its first and latest try
        (the round's submission time); a node whose check ran, or could not run otherwise, is
        no longer retried."""
        started = state.health_submitted_at
        if started is None:  # a state saved before in-use retries existed: none
            return
        for node, check in checks.items():
            if check.could_not_run and retried(check.codes):
                first = state.health_in_use.get(node, [started])[0]
                state.health_in_use[node] = [first, started]
            else:
                state.health_in_use.pop(node, None)

    def recheck(self, state: FabricState) -> FabricState:
        """The health round's next step (``domain.health.retry``): check again now the nodes
        DCGM found in use whose recheck is due (10 s after their latest try, within 300 s of
        the first), or wait (``health_recheck_at``, no workload: the caller waits until then
        and calls again), or, nothing left to recheck, start pass 1 (when the checks ran in the
        pairs' pods, the pairs are done: the validation ends). A node past the bound stays
        ``could_not_run`` saying DCGM found its GPUs in use that long."""
        clock = backend_clock(self.backend)
        tries = {n: Try(first, latest) for n, (first, latest) in state.health_in_use.items()}
        plan = plan_rechecks(tries, clock.time())
        for node, why in plan.gave_up.items():
            check = state.health[node]
            check["notes"] = [*check.get("notes", []), f"the last try: {check['reason']}"]
            check["reason"] = why
            state.health_in_use.pop(node)
        state.health_recheck_at = None
        if plan.due:
            assert self.health is not None, "a recheck needs the health check"
            levels = {n: state.health_levels[n] for n in plan.due}
            run_id = f"{state.run_id}-recheck{int(clock.time())}"
            state.health_deadline_s = health_deadline(levels, self.ref.dcgm_limits)
            state.workload = self.health.submit(levels, run_id)
            state.health_submitted_at = clock.time()
            state.phase = "health"  # after pairs whose pods checked the nodes, too
            return state
        if plan.waiting:
            state.workload = None
            state.health_recheck_at = plan.next_at
            return state
        if state.gang:  # the checks ran in the pairs' pods: the pairs are done already
            state.phase, state.workload = "fabric", None
            return state
        return self._start_pass1(state)
