"""Reservation transition: bring up a new pool on another reservation, prove it, move the work,
retire the old pool — resumably and reversibly (``domain.transition`` is the state machine).

Design: docs/design/workflows.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from gpufleet.backends import cloud_backend, cluster_backend
from gpufleet.backends.base import CloudBackend, ClusterBackend, ResourceStatus
from gpufleet.domain.fleet import Catalog, PoolRef
from gpufleet.domain.onboarding import preflight_refusals
from gpufleet.domain.transition import (
    FORWARD,
    Step,
    can_abandon,
    can_roll_back,
    check_move,
    resume_point,
    rollback_actions,
)
from gpufleet.domain.validation_kinds import ValidationKind
from gpufleet.services.common.step_report import StepReport
from gpufleet.services.infrastructure.onboarding import UNVALIDATED_TAINT
from gpufleet.services.infrastructure.retire import PoolDeleteFailed, retire_progress
from gpufleet.services.infrastructure.transition_lock import (
    ACTIONS,
    TransitionLock,
    TransitionRefused,
)
from gpufleet.services.nodes.drain import Drain, DrainSettings
from gpufleet.store import Ledger

log = logging.getLogger(__name__)

__all__ = ["ACTIONS", "ReservationTransition", "TransitionRefused", "forward_steps"]

# Each call returns a ``StepReport``: ``done`` (the step completed), else ``next_check_s`` to
# call again; ``failed``: the new pool did not pass validation, and why.


class ReservationTransition(TransitionLock):
    """One transition of cluster ``cluster`` from pool ``old`` to pool ``new``, for one run."""

    def __init__(
        self,
        catalog: Catalog,
        cluster: str,
        old: str,
        new: str,
        ledger: Ledger,
        run_id: str,
        settings: DrainSettings | None = None,
        *,
        cloud: CloudBackend | None = None,
        kube: ClusterBackend | None = None,
    ):
        self.catalog = catalog
        self.old: PoolRef = catalog.pool(cluster, old)
        self.new: PoolRef = catalog.pool(cluster, new)
        self.cluster = self.old.cluster
        if old == new:
            raise TransitionRefused(f"old and new pool are both {old!r}: name two pools")
        if self.old.pool.planned:
            raise TransitionRefused(
                f"{self.old.key} is planned in the catalog: a transition moves work away from "
                "a pool in service"
            )
        self.ledger = ledger
        self.run_id = run_id
        self.settings = settings or DrainSettings()
        self._cloud = cloud
        self._kube = kube
        self.tid: int | None = None

    @property
    def cloud(self) -> CloudBackend:
        if self._cloud is None:
            self._cloud = cloud_backend(self.cluster)
        return self._cloud

    @property
    def kube(self) -> ClusterBackend:
        if self._kube is None:
            self._kube = cluster_backend(self.cluster)
        return self._kube

    # --- where it stands ----------------------------------------------------------------------

    def steps(self) -> tuple[list[Step], list[Step]]:
        """(completed, started) forward steps, in order, from the ledger."""
        completed, started = [], []
        for row in self.ledger.transition_steps(self._id()):
            if row["step"].startswith("rollback:"):
                continue
            step = Step(row["step"])
            started.append(step)
            if row["state"] == "done":
                completed.append(step)
        return completed, started

    def current(self) -> Step:
        row = self.ledger.transition(self._id()) or {}
        return Step(row.get("step") or Step.PLANNED.value)

    def next_step(self) -> Step:
        completed, _ = self.steps()
        return resume_point([Step.PLANNED, *completed])

    def _id(self) -> int:
        if self.tid is None:
            raise TransitionRefused("open() the transition first")
        return self.tid

    # --- forward ----------------------------------------------------------------------------

    def advance(self, target: Step) -> StepReport:
        """Do ``target``'s action unless it completed already; record it around the action."""
        completed, _ = self.steps()
        if target in completed:
            return StepReport(target.value, notes=[f"{target.value}: already done (resumed run)"])
        current = self.current()
        check_move(current, target)
        self.ledger.step_started(self._id(), target.value)
        outcome = self._actions()[target]()
        if outcome.done and outcome.failed is None:
            self.ledger.step_done(self._id(), target.value, outcome.detail)
            self.ledger.update_transition(self._id(), step=target.value)
        return outcome

    def _actions(self) -> dict[Step, Callable[[], StepReport]]:
        """Each forward step's action (``advance`` calls the one for its target)."""
        return {
            Step.PREFLIGHTED: self._preflighted,
            Step.NEW_POOL_CREATED: self._new_pool_created,
            Step.NEW_POOL_READY: self._new_pool_ready,
            Step.NEW_POOL_VALIDATED: self._new_pool_validated,
            Step.SCHEDULING_SWITCHED: self._scheduling_switched,
            Step.OLD_POOL_CORDONED: self._old_pool_cordoned,
            Step.OLD_POOL_DRAINED: self._old_pool_drained,
            Step.OLD_POOL_RETIRED: self._old_pool_retired,
            Step.DONE: self._done,
        }

    def _preflighted(self) -> StepReport:
        """The new reservation exists, holds the machine type and has room for the pool."""
        reservation = self.new.pool.reservation.name
        report = self.cloud.get_reservation(reservation)
        exists = self.cloud.get_node_pool(self.new.pool.name).status != ResourceStatus.ABSENT
        pool = self.new.pool.model_copy(update={"state": "active"})  # checked as if in service
        region = self.new.region.model_copy(
            update={"clusters": (self.cluster.model_copy(update={"node_pools": (pool,)}),)}
        )
        existing = {self.new.key} if exists else set()
        refusals = preflight_refusals(region, {reservation: report}, existing)
        if refusals:
            self.ledger.finish_transition(self._id(), "failed", Step.FAILED.value)
            raise TransitionRefused(
                f"{self.new.key}: preflight refused, nothing was created: "
                + "; ".join(str(r) for r in refusals)
            )
        return StepReport(
            Step.PREFLIGHTED.value,
            notes=[f"reservation {reservation}: {report.free} of {report.count} free"],
            detail={"free": report.free, "count": report.count, "zone": report.zone},
        )

    def _new_pool_created(self) -> StepReport:
        ensured = self.cloud.ensure_node_pool(self.new.pool.name, taints=(UNVALIDATED_TAINT,))
        self._ensure_queues(self.new, hold=True)  # nothing lands on it before validation
        return StepReport(
            Step.NEW_POOL_CREATED.value,
            notes=[f"{self.new.key}: {ensured.action} ({ensured.status})"],
            detail={"action": ensured.action, "console_url": ensured.console_url},
        )

    def _new_pool_ready(self) -> StepReport:
        info = self.cloud.get_node_pool(self.new.pool.name)
        nodes = self.kube.list_nodes(self.new.pool.name)
        waiting = sorted(n.name for n in nodes if not n.ready)
        if info.status != ResourceStatus.READY or waiting or len(nodes) < self.new.pool.nodes:
            return StepReport(
                Step.NEW_POOL_READY.value,
                done=False,
                next_check_s=self.settings.poll_s,
                notes=[
                    f"{self.new.key}: pool {info.status}, {len(nodes) - len(waiting)} of "
                    f"{self.new.pool.nodes} nodes Ready"
                ],
            )
        return StepReport(Step.NEW_POOL_READY.value, detail={"nodes": [n.name for n in nodes]})

    def _new_pool_validated(self) -> StepReport:
        """This run's validations of the new pool passed (the DAG ran them): else roll back."""
        from gpufleet.domain.verdicts import latest_per_check

        rows = [
            v
            for v in latest_per_check(self.ledger.validations_for_run(self.run_id))
            if v["cluster"] == self.cluster.name and v["pool"] == self.new.pool.name
        ]
        kinds = {v["kind"]: v for v in rows}
        needed = [ValidationKind.FABRIC] + ([ValidationKind.STORAGE] if self.new.filesystem else [])
        missing = [k for k in needed if k not in kinds]
        bad = [
            f"{k}: {kinds[k]['verdict']} ({'; '.join((kinds[k]['reasons'] or [])[:2])})"
            for k in needed
            if k in kinds and kinds[k]["verdict"] != "pass"
        ]
        if missing or bad:
            why = "; ".join(bad + [f"{k}: not validated in this run" for k in missing])
            return StepReport(Step.NEW_POOL_VALIDATED.value, failed=why)
        return StepReport(
            Step.NEW_POOL_VALIDATED.value,
            detail={k: {"validation_id": kinds[k]["id"]} for k in needed},
            notes=[f"{self.new.key} passed validation"],
        )

    def _scheduling_switched(self) -> StepReport:
        self._ensure_queues(self.new, hold=False)  # make before break
        self._ensure_queues(self.old, hold=True)
        return StepReport(
            Step.SCHEDULING_SWITCHED.value,
            notes=[f"Kueue admits on {self.new.pool.name}; {self.old.pool.name} holds"],
        )

    def _old_pool_cordoned(self) -> StepReport:
        nodes = self.kube.list_nodes(self.old.pool.name)
        for node in nodes:
            if not node.unschedulable:
                self.kube.set_unschedulable(node.name, True)
        return StepReport(Step.OLD_POOL_CORDONED.value, detail={"nodes": [n.name for n in nodes]})

    def _old_pool_drained(self) -> StepReport:
        return self._drain(self.old, Step.OLD_POOL_DRAINED.value)

    def _old_pool_retired(self) -> StepReport:
        """Delete the old pool; retired only once the cloud reports it gone (``retire``)."""
        step = Step.OLD_POOL_RETIRED.value
        row: dict[str, Any] = next(
            (r for r in self.ledger.transition_steps(self._id()) if r["step"] == step), {}
        )
        progress = retire_progress(self.cloud, self.old, row.get("detail") or {}, step)
        self.ledger.step_started(self._id(), step, progress.detail)
        if progress.failed:
            raise PoolDeleteFailed(progress.failed)
        if not progress.done:
            progress.wait(self.settings.poll_s)
            return progress
        self.ledger.set_pool_state(
            self.cluster.name,
            self.old.pool.name,
            "retired",
            f"retired by transition {self._id()} to {self.new.pool.name}",
            self.run_id,
        )
        progress.notes[-1] += "; retired"
        return progress

    def _done(self) -> StepReport:
        self.ledger.finish_transition(self._id(), "done", Step.DONE.value)
        return StepReport(Step.DONE.value, notes=[self.catalog_change()])

    # --- rollback and abandon ---------------------------------------------------------------

    def rollback(self) -> StepReport:
        """Undo what was done, new pool last (make before break); resumable like a step."""
        current = self.current()
        completed, started = self.steps()
        in_flight = next((s for s in started if s not in completed), None)
        if current is not Step.ROLLING_BACK:
            if not can_roll_back(current, in_flight):
                raise TransitionRefused(
                    f"{self.cluster.name}: cannot roll back at step {current.value}: the old "
                    "pool's deletion has started; finish the transition (action=run)"
                )
            self.ledger.step_done(self._id(), "rollback:from", {"from": current.value})
            self.ledger.update_transition(self._id(), step=Step.ROLLING_BACK.value)
        origin = self._rollback_origin()
        done = {
            row["step"].removeprefix("rollback:")
            for row in self.ledger.transition_steps(self._id())
            if row["step"].startswith("rollback:") and row["state"] == "done"
        }
        outcome = StepReport(Step.ROLLED_BACK.value)
        for action in rollback_actions(origin, in_flight):
            if action in done:
                continue
            self.ledger.step_started(self._id(), f"rollback:{action}")
            result = self._undo(action)
            outcome.absorb(result)
            if not result.done:
                outcome.wait(result.next_check_s)
                return outcome
            self.ledger.step_done(self._id(), f"rollback:{action}", result.detail)
        self.ledger.finish_transition(self._id(), "rolled_back", Step.ROLLED_BACK.value)
        outcome.notes.append(
            f"rolled back: {self.old.key} serves as before; {self.new.key} is gone"
        )
        return outcome

    def _rollback_origin(self) -> Step:
        for row in self.ledger.transition_steps(self._id()):
            if row["step"] == "rollback:from":
                return Step(row["detail"]["from"])
        return self.current()

    def _undo(self, action: str) -> StepReport:
        if action == "delete_new_pool":
            deleted = self.cloud.delete_node_pool(self.new.pool.name)
            return StepReport(action, notes=[f"{self.new.key}: {'deleted' if deleted else 'gone'}"])
        if action in ("hold_new_queue", "admit_old_queue"):
            self._ensure_queues(
                self.new if action == "hold_new_queue" else self.old,
                hold=action == "hold_new_queue",
            )
            return StepReport(action)
        if action in ("uncordon_old", "cordon_new"):
            ref = self.old if action == "uncordon_old" else self.new
            for node in self.kube.list_nodes(ref.pool.name):
                self.kube.set_unschedulable(node.name, action == "cordon_new")
            return StepReport(action)
        if action == "drain_new":
            return self._drain(self.new, "rollback:drain_new")
        raise TransitionRefused(f"unknown rollback action {action!r}")

    def abandon(self) -> StepReport:
        """Release the lock and leave everything as it is (named, for a person to finish)."""
        current = self.current()
        if not can_abandon(current):
            raise TransitionRefused(
                f"{self.cluster.name}: cannot abandon at step {current.value} (a rollback must "
                "finish: action=rollback)"
            )
        self.ledger.finish_transition(self._id(), "failed", Step.ABANDONED.value)
        return StepReport(
            Step.ABANDONED.value,
            notes=[
                f"abandoned at {current.value}: {self.old.key} and {self.new.key} are left as "
                "they are (check each pool's nodes, cordons and Kueue queues by hand)"
            ],
        )

    # --- shared ---------------------------------------------------------------------------------

    def _drain(self, ref: PoolRef, step: str) -> StepReport:
        rows = {r["step"]: r for r in self.ledger.transition_steps(self._id())}
        state = (rows.get(step) or {}).get("detail", {}).get("drain")
        progress = Drain(self.kube, ref.pool.name, self.settings).step(state)
        self.ledger.step_started(self._id(), step, {"drain": progress.state})
        return StepReport(
            step,
            done=progress.done,
            next_check_s=progress.next_check_s,
            notes=progress.notes
            + [f"evicted {p}" for p in progress.evicted]
            + (
                [f"waiting for training jobs: {', '.join(progress.waiting_jobs)}"]
                if progress.waiting_jobs
                else []
            ),
            alerts=progress.alerts,
            detail={"drain": progress.state},
        )

    def _ensure_queues(self, ref: PoolRef, *, hold: bool) -> None:
        """The pool's Kueue ResourceFlavor, ClusterQueue (held or admitting) and LocalQueues."""
        from gpufleet.manifests.addons.kueue import render_pool_queues

        for obj in render_pool_queues(ref, list(self.cluster.namespaces)):
            if obj["kind"] == "ClusterQueue":
                obj["spec"]["stopPolicy"] = "Hold" if hold else "None"
            self.kube.ensure_object(obj)

    def catalog_change(self) -> str:
        """The catalog edit to commit now that the transition is done."""
        source = self.catalog.sources.get(self.old.region.name, "the catalog")
        return (
            f"commit this catalog change in {source}: in cluster {self.cluster.name}, remove "
            f"node pool {self.old.pool.name!r} (retired) and drop `state: planned` from "
            f"{self.new.pool.name!r}"
        )


def forward_steps() -> tuple[Step, ...]:
    """The steps after ``planned``, in order (the DAG's tasks follow them)."""
    return FORWARD[1:]
