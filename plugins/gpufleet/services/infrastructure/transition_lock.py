"""The reservation transition's lock: ``ReservationTransition.open`` (a mixin of it).

One transition per cluster: the ledger's running transition (a unique index) is the lock. A
second transition is refused naming the holder's run; the same pools are resumed, rolled back
or abandoned by a later run once the holder is dead: the lease sequence every lock follows
(``services.common.leases.keep_lease``: renewed by the holder each time one of its tasks opens
the transition, a holder whose lock was taken over refused, a dead holder's lock taken over by
compare-and-set, one winner of many), refused in the locks' one sentence. A
finished transition is not redone: a transition onto a pool a finished transition brought into
service is refused naming the run that finished it (the run itself, a retried task, finds its
transition done).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from gpufleet.domain.leases import LEASE_TTL, Liveness, refusal
from gpufleet.domain.transition import Step
from gpufleet.errors import GpufleetError
from gpufleet.services.common.leases import keep_lease

if TYPE_CHECKING:
    from gpufleet.domain.fleet import Cluster, PoolRef
    from gpufleet.services.nodes.drain import DrainSettings
    from gpufleet.store import Ledger

ACTIONS = ("run", "rollback", "abandon")


class TransitionRefused(GpufleetError):
    """The transition cannot start or go on (the lock is held, a pool is wrong, preflight)."""


class TransitionLock:
    """``open`` and its refusals; needs ``cluster``, ``old``, ``new``, ``ledger``, ``run_id``,
    ``settings`` and ``tid`` of ``ReservationTransition``."""

    cluster: Cluster
    old: PoolRef
    new: PoolRef
    ledger: Ledger
    run_id: str
    settings: DrainSettings
    tid: int | None

    def open(
        self,
        action: str,
        holder_alive: Liveness,
        *,
        dag_id: str = "reservation_transition",
        now: datetime | None = None,
        lease_ttl: timedelta = LEASE_TTL,
    ) -> dict[str, Any]:
        """Take the cluster's lock (a new transition for ``run``) or resume the one holding
        it; refuse a second transition, naming the holder's run, and a finished one, naming
        the run that finished it. ``holder_alive(dag_id, run_id)``: True, False, or None for
        a run this Airflow does not know (then the holder's lease decides). A dead holder's
        lock is taken over by compare-and-set: of many runs resuming at once, one wins and the
        others are refused naming it. This run, holding the lock, renews its lease (``now``:
        the injected clock)."""
        now = now or self.ledger.clock.now()
        if action not in ACTIONS:
            raise TransitionRefused(f"action {action!r} is not one of {', '.join(ACTIONS)}")
        name = self.cluster.name
        row: dict[str, Any] | None  # the transition's; None: none in flight (refused below)
        if action == "run":
            self._refuse_unplanned()
            row, created = self.ledger.open_transition(
                name,
                self.old.pool.name,
                self.new.pool.name,
                self.run_id,
                dag_id=dag_id,
                now=now,
                step=Step.PLANNED.value,
                params=self.settings.to_dict(),
            )
            if row.get("state") == "done":  # finished: by this run (a retried task) or not
                if row["run_id"] != self.run_id:
                    raise self._finished(row)
                self.tid = int(row["id"])
                return row
        else:
            row, created = self.ledger.running_transition(name), False
            if row is None:
                raise TransitionRefused(f"cluster {name} has no transition in flight to {action}")
        if not created:
            pools = (row["from_pool"], row["to_pool"])
            if pools != (self.old.pool.name, self.new.pool.name):
                raise TransitionRefused(
                    f"cluster {name} has a transition in flight ({pools[0]} -> {pools[1]}, "
                    f"run {row['run_id']}, at step {row['step'] or 'unknown'}): finish it "
                    "(action=run with those pools), roll it back or abandon it first"
                )
            held, now_held, lost = keep_lease(
                self.ledger.transition_lease(row["id"], dag_id),
                row,
                dag_id,
                self.run_id,
                holder_alive,
                now,
                lease_ttl,
            )
            if not held:
                holder = (now_held or {}).get("run_id") or "another run"
                raise self._held(pools, holder, taken=lost)
        self.tid = int(row["id"])
        return row

    def _held(self, pools: tuple[str, str], holder: str, taken: bool = False) -> TransitionRefused:
        return TransitionRefused(
            refusal(
                f"cluster {self.cluster.name}",
                f"transition {pools[0]} -> {pools[1]} is being run",
                holder,
                "; wait for it to end",
                lost=self.run_id if taken else None,
            )
        )

    def _refuse_unplanned(self) -> None:
        """The new pool must be planned, or the new pool of the transition in flight; one a
        finished transition brought into service is refused naming that transition's run."""
        finished = self.ledger.finished_into(self.cluster.name, self.new.pool.name)
        if finished is not None:
            if finished["run_id"] != self.run_id:
                raise self._finished(finished)
            return
        if self.new.pool.planned:
            return
        running = self.ledger.running_transition(self.cluster.name) or {}
        if running.get("to_pool") != self.new.pool.name:
            raise TransitionRefused(
                f"{self.new.key} is not planned in the catalog: declare the new pool with "
                "`state: planned` (same cluster, the new reservation) first"
            )

    def _finished(self, row: dict[str, Any]) -> TransitionRefused:
        return TransitionRefused(
            f"cluster {self.cluster.name}: {row['to_pool']} is in service already: transition "
            f"{row['from_pool']} -> {row['to_pool']} (id {row['id']}) was finished by run "
            f"{row['run_id']} at {row['finished_at']}; nothing was changed. To move again, "
            "declare a new planned pool and transition to it"
        )
