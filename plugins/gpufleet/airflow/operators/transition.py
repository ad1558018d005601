"""Operators of the ``reservation_transition`` DAG: thin adapters over
``services.infrastructure.transition.ReservationTransition``.

Every task opens the transition (the cluster's lock, resumed by this run, its lease renewed:
a waiting step re-enters at least every ``LEASE_RENEW``), does its one step
(``TransitionStepOperator``), a rollback or an abandon, logs what happened, and defers on a
``WaitTrigger`` (``gpufleet.airflow.triggers``) while a step waits (new nodes Ready, a drain
batch, a soak): the state lives in the ledger, so a resumed run and a re-entered task pick up
where it stood. ``TransitionActionBranch`` follows the tasks of this run's ``action``: Airflow
skips the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from gpufleet.airflow.assets import POOL_RETIRED
from gpufleet.airflow.operators.common import (
    WatchedBranchMixIn,
    catalog,
    failed_tasks,
    ledger,
    poll_interval,
)
from gpufleet.airflow.operators.runs import run_liveness
from gpufleet.domain.validation_kinds import ValidationKind


def open_transition(  # noqa: PLR0913  the transition's facts, keyword-only
    context,
    *,
    cluster: str,
    old_pool: str,
    new_pool: str,
    action: str = "run",
    drain: Any = None,
    ledger_conn_id: str | None = None,
):
    """The cluster's transition as this run's task opens it: the lock taken or resumed, its
    lease renewed (``ReservationTransition.open``); a refusal fails the task for good."""
    from gpufleet.errors import GpufleetError
    from gpufleet.services.infrastructure.transition import ReservationTransition
    from gpufleet.services.nodes.drain import DrainSettings

    d = dict(drain or {})
    try:
        cat = catalog()
        settings = DrainSettings(
            batch_size=int(d.get("batch_size", 1)),
            soak_s=float(d.get("soak_minutes", 5)) * 60,
            timeout_s=float(d.get("timeout_hours", 4)) * 3600,
            on_timeout=str(d.get("on_timeout", "wait")),
            poll_s=poll_interval(cat.cluster(cluster)),
        )
        svc = ReservationTransition(
            cat,
            cluster,
            old_pool,
            new_pool,
            ledger(ledger_conn_id),
            context["run_id"],
            settings,
        )
        svc.open(
            action,
            lambda dag_id, run_id: run_liveness(context, dag_id, run_id),
            dag_id=context["dag"].dag_id,
        )
    except GpufleetError as exc:
        raise AirflowFailException(str(exc)) from None
    return svc


def retire_started(svc) -> bool:
    """Whether the transition's retire of the old pool started (recorded started or done)."""
    from gpufleet.domain.transition import Step

    return any(
        r["step"] == Step.OLD_POOL_RETIRED.value for r in svc.ledger.transition_steps(svc.tid)
    )


class _TransitionTask(BaseOperator):
    template_fields: Sequence[str] = (
        "cluster",
        "old_pool",
        "new_pool",
        "action",
        "drain",
    )
    ui_color = "#fff1d6"

    def __init__(
        self,
        *,
        cluster: str,
        old_pool: str,
        new_pool: str,
        action: str = "run",
        drain: Any = None,
        ledger_conn_id: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.cluster = cluster
        self.old_pool = old_pool
        self.new_pool = new_pool
        self.action = action
        self.drain = drain  # {batch_size, soak_minutes, timeout_hours, on_timeout}
        self.ledger_conn_id = ledger_conn_id

    def _service(self, context):
        return open_transition(
            context,
            cluster=self.cluster,
            old_pool=self.old_pool,
            new_pool=self.new_pool,
            action=self.action,
            drain=self.drain,
            ledger_conn_id=self.ledger_conn_id,
        )

    def _log(self, outcome) -> None:
        from gpufleet.airflow.operators.step_report import report_step

        report_step(
            self.log,
            outcome,
            alert="reservation transition",
            where=f"{self.cluster} {outcome.step}",
        )

    @staticmethod
    def _call(what: str, fn, *args):
        """``fn(*args)``: a refusal or a drain timeout fails the task for good (retrying would
        not change them); a cloud or cluster error fails it for Airflow's retries."""
        from gpufleet.errors import GpufleetError
        from gpufleet.services.infrastructure.transition import TransitionRefused
        from gpufleet.services.nodes.drain import DrainTimeout

        try:
            return fn(*args)
        except (DrainTimeout, TransitionRefused) as exc:
            raise AirflowFailException(f"transition {what}: {exc}") from None
        except GpufleetError as exc:
            raise AirflowException(f"transition {what}: {exc}") from exc

    def _wait(self, outcome) -> None:
        from gpufleet.airflow.triggers import WaitTrigger
        from gpufleet.domain.leases import LEASE_RENEW

        wait = min(max(outcome.next_check_s, 0.1), LEASE_RENEW.total_seconds())
        self.defer(
            trigger=WaitTrigger(wait),
            method_name="execute_complete",
        )

    def execute_complete(self, context, event: Any = None):
        return self.execute(context)


class TransitionLockOperator(_TransitionTask):
    """Take (or resume) the cluster's transition lock; refuse a second transition naming the
    holder's run. Returns the transition and the step the run works on next."""

    def execute(self, context) -> dict[str, Any]:
        from gpufleet.airflow.operators.faults import sweep_ended_runs

        sweep_ended_runs(context)  # a killed run's sim faults must not reach this validation
        svc = self._service(context)
        nxt = svc.next_step()
        self.log.info(
            "transition %s: %s/%s -> %s, action %s, at %s, next %s",
            svc.tid,
            self.cluster,
            self.old_pool,
            self.new_pool,
            self.action,
            svc.current().value,
            nxt.value,
        )
        return {"transition_id": svc.tid, "current": svc.current().value, "next": nxt.value}


class TransitionActionBranch(BaseOperator, WatchedBranchMixIn):
    """After the lock: the branch of this run's ``action`` (``run``: the first forward step and
    ``new_pool_validated``, which runs whatever the validation did; ``rollback``; ``abandon``).
    The tasks of the other actions are skipped by Airflow, never by themselves."""

    template_fields: Sequence[str] = ("action",)
    inherits_from_skipmixin = True
    ui_color = "#fff1d6"

    def __init__(self, *, action: str, branches: dict[str, list[str]], **kwargs: Any):
        super().__init__(**kwargs)
        self.action = action
        self.branches = branches  # action -> the task ids it follows

    def execute(self, context):
        if self.action not in self.branches:
            raise AirflowFailException(
                f"action {self.action!r} is not one of {', '.join(self.branches)}"
            )
        return self.do_branch(context, self.branches[self.action])


class TransitionStepOperator(_TransitionTask):
    """One forward step (the ``action`` branch runs them for ``run`` only).
    ``new_pool_validated`` rolls the transition back and fails loudly when the new pool did
    not pass."""

    def __init__(self, *, step: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.step = step

    def execute(self, context):
        from gpufleet.domain.transition import Step

        if self.step == Step.NEW_POOL_VALIDATED.value:
            # a decision, not the run's failure: this task runs after a failed validation
            # (its input: it rolls back), and must not act when a step before it failed
            earlier = [t for t in failed_tasks(context) if not t.startswith("validate_")]
            if earlier:
                raise AirflowFailException(
                    f"not validated: {', '.join(earlier)} did not succeed; rerun to resume"
                )
        svc = self._service(context)
        approval = None
        if self.step == Step.OLD_POOL_RETIRED.value:
            approval = self._approved_retire(svc)
        outcome = self._call(self.step, svc.advance, Step(self.step))
        self._log(outcome)
        if approval is not None and outcome.done:
            svc.ledger.approval_done(
                approval["id"], f"{self.cluster}/{self.old_pool} retired by run {context['run_id']}"
            )
        if outcome.failed is not None:
            self._roll_back(context, svc, outcome.failed)
        if not outcome.done:
            self._wait(outcome)
        if self.step == Step.OLD_POOL_RETIRED.value and POOL_RETIRED in (self.outlets or ()):
            context["outlet_events"][POOL_RETIRED].extra = {
                "cluster": self.cluster,
                "pool": self.old_pool,
                "replaced_by": self.new_pool,
                "run_id": context["run_id"],
            }
        return outcome.to_dict()

    def _approved_retire(self, svc) -> dict[str, Any] | None:
        """The approved request that lets this retire run (``approve_retire`` asked it, see
        ``operators.approvals``); without one the old pool is not deleted and the task fails for
        good (a retire is never done on nobody's word)."""
        from gpufleet.domain.remediation import RETIRE_POOL

        key = f"{self.cluster}/{self.old_pool}"
        if retire_started(svc):  # approved before (a resumed retire, or a rerun after it)
            return None
        request = svc.ledger.open_approval(RETIRE_POOL, key)
        if request is None or request["state"] != "approved":
            raise AirflowFailException(
                f"the retire of {key} has no person's approval (approve_retire): "
                f"{self.old_pool} is kept; run again to ask for it"
            )
        return request

    def _roll_back(self, context, svc, why: str) -> None:
        outcome = self._call("rollback", svc.rollback)
        self._log(outcome)
        if not outcome.done:  # draining back: the rollback task of a rerun finishes it
            raise AirflowFailException(
                f"{self.cluster}/{self.new_pool} failed validation ({why}); the rollback is "
                "under way: run again with action=rollback to finish it"
            )
        raise AirflowFailException(
            f"{self.cluster}/{self.new_pool} failed validation: {why}. Rolled back: "
            f"{self.old_pool} keeps serving, {self.new_pool} was deleted"
        )


class TransitionRollbackOperator(_TransitionTask):
    """``action=rollback`` (the action branch's): return to the old pool (resumable; defers
    while draining back)."""

    def execute(self, context):
        outcome = self._call("rollback", self._service(context).rollback)
        self._log(outcome)
        if not outcome.done:
            self._wait(outcome)
        return outcome.to_dict()


class TransitionAbandonOperator(_TransitionTask):
    """``action=abandon`` (the action branch's): release the lock, leave everything as it is,
    and say what is left."""

    def execute(self, context):
        outcome = self._call("abandon", self._service(context).abandon)
        self._log(outcome)
        return outcome.to_dict()


class TransitionTargetsOperator(_TransitionTask):
    """The new pool as the validation tasks' mapping kwargs, unless this run does not validate
    (another action, or a resumed run past ``new_pool_validated``)."""

    def __init__(self, *, kind: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.kind = kind

    def execute(self, context) -> list[dict[str, str]]:
        from gpufleet.domain.transition import FORWARD, Step

        if self.action != "run":
            return []
        svc = self._service(context)
        if FORWARD.index(svc.next_step()) > FORWARD.index(Step.NEW_POOL_VALIDATED):
            self.log.info("%s: validated already (resumed run)", self.new_pool)
            return []
        if self.kind == ValidationKind.STORAGE and svc.new.filesystem is None:
            return []
        return [{"cluster": self.cluster, "node_pool": self.new_pool}]
