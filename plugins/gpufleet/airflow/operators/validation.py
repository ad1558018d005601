"""Operators for nightly validation: one pool's fabric, one pool's filesystem.

A validation that cannot finish records an ``error`` verdict for its pool and kind, in one
place (``_WorkloadDeferring._cannot_finish``): any exception while planning, submitting,
collecting or judging (a backend that stays unreachable after its retries, a pod missing its
log container, a corrupt simulator database, a bug), and a workload that could not be watched
or did not finish in time. The pool then stops counting as validated at once (the gate
refuses it, saying why); the task fails as before and Airflow's retries apply, each failed
attempt recording its error and a later success superseding it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from gpufleet.airflow.assets import POOL_VALIDATED
from gpufleet.airflow.operators.common import catalog, ledger, poll_interval
from gpufleet.airflow.triggers import WorkloadTrigger
from gpufleet.domain.validation_kinds import ValidationKind

_log = logging.getLogger(__name__)


WHEN_BUSY = ("wait", "skip")  # another run validating the pool: wait for it, or skip the pool
BUSY_WAIT_S = 60.0  # how often a waiting validation looks at the pool's lock again


class _WorkloadDeferring(BaseOperator):
    """Submit a workload through a service, defer until it is done, resume in
    ``execute_complete``. ``ledger_conn_id`` names the ledger's Airflow connection (default
    ``gpufleet_ledger``).

    The WorkloadTrigger's event: ``done`` goes on to the verdict; ``error`` (the workload could
    not be watched) and ``timeout`` (not done within ``timeout_s``) raise AirflowException, so
    the task's retries take over (the services name workloads by run: a retry finds the same
    workload). Whatever stops a validation before its verdict is recorded as an ``error``
    verdict first (``_cannot_finish``). A failed verdict raises AirflowFailException.

    One run validates a pool's kind at a time (``services.validation.validation_lock``): the
    task holds the pool's lock from its first round to its verdict (renewed at each round,
    released with the verdict or the error). When another live run holds it, ``when_busy``
    says what to do: ``wait`` (an onboarding's or a transition's own validation: look again
    every minute, deferred) or ``skip`` (a nightly: the other run's verdict stands for the
    pool tonight; the task is skipped, naming that run, and records nothing)."""

    template_fields: Sequence[str] = ("cluster", "node_pool")
    ui_color = "#d8f3dc"
    kind = ""  # the ledger's validation kind (a ValidationKind): fabric | storage

    def __init__(
        self,
        *,
        cluster: str,
        node_pool: str,
        timeout_s: float = 3600.0,
        ledger_conn_id: str | None = None,
        when_busy: str = "wait",
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        if when_busy not in WHEN_BUSY:
            raise ValueError(f"when_busy must be one of {', '.join(WHEN_BUSY)}, not {when_busy!r}")
        self.cluster = cluster
        self.node_pool = node_pool  # ``pool`` is Airflow's own (worker slots)
        self.timeout_s = timeout_s
        self.ledger_conn_id = ledger_conn_id
        self.when_busy = when_busy

    def _ref(self):
        return catalog().pool(self.cluster, self.node_pool)

    def _defer_on(self, state: Any) -> None:
        """Hand ``state`` (a service's state with a ``workload`` in flight) to the trigger."""
        wl = state.workload
        fleet = catalog()
        ref = fleet.pool(self.cluster, self.node_pool)
        self.defer(
            trigger=WorkloadTrigger(
                cluster=self.cluster,
                kind=wl.kind,
                name=wl.name,
                namespace=wl.namespace,
                until="done",
                poll_interval=poll_interval(ref.cluster, sum(1 for _ in fleet.pools())),
                # a GPU health round at a deep dcgmi diag level needs its own deadline
                timeout=max(self.timeout_s, getattr(state, "min_timeout_s", lambda: 0.0)()),
                carry=state.to_dict(),
            ),
            method_name="execute_complete",
        )

    def _numbers(self) -> dict[str, Any]:
        """The operator's numeric settings, checked before anything is done or recorded."""
        return {}

    def execute(self, context):
        """Hold the pool's lock, plan and submit the first round; defer on its workload, or
        judge at once."""
        self._numbers()  # bad input fails the task before anything is submitted or recorded
        with self._cannot_finish(context):
            busy = self._hold(context)
        if busy is not None:
            self._when_busy(busy)
        with self._cannot_finish(context):
            svc = self._service(context)
            state = svc.begin(context["run_id"])
            if state.workload is not None:
                self._defer_on(state)
            summary = svc.finish(state)
        self._release(context)
        return self._outcome(context, summary)

    def execute_after_wait(self, context, event: dict[str, Any] | None = None):
        """Back from waiting on another run's validation of the pool: try again."""
        return self.execute(context)

    def _hold(self, context) -> str | None:
        """Hold (or renew) the pool's validation lock: None when this run holds it."""
        from gpufleet.airflow.operators.runs import run_liveness
        from gpufleet.services.validation import validation_lock

        return validation_lock.hold(
            ledger(self.ledger_conn_id),
            self.cluster,
            self.node_pool,
            self.kind,
            self.dag_id,
            context["run_id"],
            lambda dag_id, run_id: run_liveness(context, dag_id, run_id),
        )

    def _renew(self, context) -> None:
        """Between rounds: renew the lease; a run that lost it stops (an error verdict)."""
        busy = self._hold(context)
        if busy is not None:
            raise AirflowException(busy)

    def _release(self, context) -> None:
        from gpufleet.services.validation import validation_lock

        validation_lock.release(
            ledger(self.ledger_conn_id), self.cluster, self.node_pool, self.kind, context["run_id"]
        )

    def _when_busy(self, why: str) -> None:
        from airflow.sdk.exceptions import AirflowSkipException

        from gpufleet.airflow.triggers import WaitTrigger

        if self.when_busy == "skip":
            self.log.warning("skipped: %s", why)
            raise AirflowSkipException(why)
        self.log.info("waiting %.0f s: %s", BUSY_WAIT_S, why)
        self.defer(trigger=WaitTrigger(BUSY_WAIT_S), method_name="execute_after_wait")

    @contextmanager
    def _cannot_finish(self, context, carry: dict[str, Any] | None = None) -> Iterator[None]:
        """Record an ``error`` verdict for this pool and kind when the block raises, then
        re-raise. Deferring (TaskDeferred, a BaseException) passes through untouched."""
        try:
            yield
        except Exception as exc:
            with suppress(Exception):  # the next try (a retry of this run) takes it again
                self._release(context)
            reason = f"{self.kind} validation could not finish: {type(exc).__name__}: {exc}"
            started = (carry or {}).get("started_at")
            try:
                ledger(self.ledger_conn_id).record_validation_error(
                    context["run_id"],
                    self.cluster,
                    self.node_pool,
                    self.kind,
                    reason,
                    started_at=datetime.fromisoformat(started) if started else None,
                )
            except Exception as record_exc:  # noqa: BLE001 - the original error is raised
                _log.error("%s; recording it failed too: %s", reason, record_exc)
            else:
                _log.error("%s/%s: %s (recorded)", self.cluster, self.node_pool, reason)
            raise

    @staticmethod
    def _check_event(event: dict[str, Any]) -> None:
        if event.get("status") == "error":
            raise AirflowException(f"watching {event.get('name')}: {event.get('message')}")
        if event.get("status") == "timeout":
            raise AirflowException(
                f"{event.get('kind')} {event.get('name')}: {event.get('message')}"
            )


class FabricValidationOperator(_WorkloadDeferring):
    """Validate one node pool's RDMA fabric with 2-node NCCL all-reduce pairs.

    Pass 1 covers every idle node; failed pairs are localized against known-good nodes in
    further rounds; bad nodes are quarantined (unless more than ``max_quarantine_share`` of
    the pool would be: then the pool is degraded and a human is paged). Fails the task when
    the pool does not pass, after recording everything in the ledger.
    """

    kind = ValidationKind.FABRIC
    template_fields: Sequence[str] = (
        "cluster",
        "node_pool",
        "max_quarantine_share",
        "tolerance",
        "max_repairs",
    )

    def __init__(
        self,
        *,
        max_quarantine_share: float = 0.2,
        tolerance: float | None = None,
        max_repairs: Any = 2,
        pool_check: bool = False,
        full_test_host: str | None = None,
        **kwargs: Any,
    ):
        """``pool_check``: this run validates the pool's storage too; its pool check runs in
        pass 1's pods (``services.validation.steps``; the nightly's targets set it).
        ``full_test_host``: the pool whose storage task runs the filesystem's full test
        tonight (``scope.full_test_hosts``); any other pool checks its own clients and never
        takes the full test (it has no storage task to run it). None: this pool's storage task
        may take it (a run mapping one per pool)."""
        super().__init__(**kwargs)
        self.max_quarantine_share = max_quarantine_share
        self.tolerance = tolerance
        self.max_repairs = max_repairs
        self.pool_check = pool_check
        self.full_test_host = full_test_host

    def _numbers(self) -> dict[str, Any]:
        """``max_quarantine_share``, ``tolerance`` (None: the baseline's) and ``max_repairs`` as
        finite numbers: NaN passes every bound and Infinity every cap, so either fails the task
        for good, naming the field (``domain.inputs.finite``)."""
        from gpufleet.domain.inputs import InvalidValue, finite

        try:
            tolerance = self.tolerance
            return {
                "max_quarantine_share": finite(self.max_quarantine_share, "max_quarantine_share"),
                "tolerance": None
                if tolerance in (None, "", "None")
                else finite(tolerance, "tolerance"),
                "max_repairs": int(finite(self.max_repairs, "max_repairs")),
            }
        except InvalidValue as exc:
            raise AirflowFailException(
                f"{self.cluster}/{self.node_pool} fabric validation: {exc}"
            ) from None

    def _service(self, context=None):
        """The pool's fabric validation; given the run's ``context`` and ``pool_check``, it
        runs the pool's storage check in pass 1's pods unless the filesystem's full test is
        this pool's tonight (``full_test.pool_check_duty``; only its host's, when the run
        names one: ``full_test.pool_check_reason`` for the others)."""
        from gpufleet.services.validation.fabric import FabricValidation
        from gpufleet.services.validation.full_test import pool_check_duty, pool_check_reason

        ref, book = self._ref(), ledger(self.ledger_conn_id)
        duty = None
        if context is not None and self.pool_check:
            host = self.full_test_host
            if host in (None, self.node_pool):
                duty = _full_test_claim(context, self.dag_id, book, ref, pool_check_duty)
            else:
                duty = lambda run_id: pool_check_reason(book, ref, host)  # noqa: E731
        return FabricValidation(ref, book, pool_check=duty, **self._numbers())

    def execute_complete(self, context, event: dict[str, Any]):
        from gpufleet.services.validation.fabric import FabricState

        self._numbers()
        with self._cannot_finish(context, event.get("carry")):
            self._check_event(event)
            self._renew(context)
            svc = self._service()
            state = svc.collect(FabricState.from_dict(event["carry"]))
            self._wait_for_recheck(svc, state)
            if state.workload is not None:
                self.log.info("pass 1" if state.round == 0 else f"localizing: round {state.round}")
                self._defer_on(state)
            summary = svc.finish(state)
        self._release(context)
        return self._outcome(context, summary)

    def _wait_for_recheck(self, svc, state) -> None:
        """A GPU health round that will check again nodes DCGM found in use, not yet due
        (``state.health_recheck_at``, on the cluster's clock): wait, then ``execute_recheck``."""
        from gpufleet.airflow.triggers import WaitTrigger
        from gpufleet.services.nodes.drain import backend_clock

        if state.workload is not None or state.health_recheck_at is None:
            return
        left = max(0.0, state.health_recheck_at - backend_clock(svc.backend).time())
        self.log.info("GPU health: checking again in %.0f s the nodes DCGM found in use", left)
        self.defer(
            trigger=WaitTrigger(left),
            method_name="execute_recheck",
            kwargs={"carry": state.to_dict()},
        )

    def execute_recheck(self, context, event: dict[str, Any] | None = None, carry=None):
        """Back from waiting for a GPU health recheck: submit it (``FabricValidation.recheck``)."""
        from gpufleet.services.validation.fabric import FabricState

        self._numbers()
        with self._cannot_finish(context, carry):
            self._renew(context)
            svc = self._service()
            state = svc.recheck(FabricState.from_dict(carry or {}))
            self._wait_for_recheck(svc, state)
            if state.workload is not None:
                self._defer_on(state)
            summary = svc.finish(state)
        self._release(context)
        return self._outcome(context, summary)

    def _outcome(self, context, summary) -> dict[str, Any]:
        """The recorded verdict: fail the task for good when the pool did not pass."""
        for reason in summary.reasons:
            self.log.info("%s/%s: %s", self.cluster, self.node_pool, reason)
        if not summary.passed:
            raise AirflowFailException(
                f"{self.cluster}/{self.node_pool} failed fabric validation"
                f"{' (paging: fabric problem)' if summary.page else ''}: "
                + "; ".join(summary.reasons[:4])
            )
        if not summary.skipped and POOL_VALIDATED in (self.outlets or ()):
            context["outlet_events"][POOL_VALIDATED].extra = {
                "cluster": self.cluster,
                "pool": self.node_pool,
                "transport": summary.transport,
                "busbw_gbps": summary.busbw_gbps,
                "run_id": context["run_id"],
            }
        return summary.to_dict()


class StorageValidationOperator(_WorkloadDeferring):
    """Validate the Lustre filesystem a pool mounts: fio read and write throughput against
    ``tolerance x tier x capacity``."""

    kind = ValidationKind.STORAGE

    def __init__(self, *, pool_check_in_fabric: bool = False, **kwargs: Any):
        """``pool_check_in_fabric``: this run's fabric validation of the pool runs its pool
        check in its pairs' pods; this task then runs only the filesystem's full test, when it
        is this pool's tonight (the nightly's targets set it)."""
        super().__init__(**kwargs)
        self.pool_check_in_fabric = pool_check_in_fabric

    def _service(self, context=None):
        """The pool's storage validation; given the run's ``context``, it claims the
        filesystem's full test for this run when no pool ran it tonight (else it checks the
        pool's own clients, or leaves that to the fabric's pods)."""
        from gpufleet.services.validation.full_test import claim_full_test
        from gpufleet.services.validation.storage import StorageValidation

        ref, book = self._ref(), ledger(self.ledger_conn_id)
        claim = None
        if context is not None:
            claim = _full_test_claim(context, self.dag_id, book, ref, claim_full_test)
        return StorageValidation(
            ref, book, claim=claim, pool_check_in_fabric=self.pool_check_in_fabric
        )

    def _release(self, context) -> None:
        """The pool's lock, and the filesystem's full-test lock should this run hold it."""
        from gpufleet.services.validation.full_test import release_full_test

        super()._release(context)
        release_full_test(ledger(self.ledger_conn_id), self._ref(), context["run_id"])

    def execute_complete(self, context, event: dict[str, Any]):
        from gpufleet.services.validation.storage import StorageState

        with self._cannot_finish(context, event.get("carry")):
            self._check_event(event)
            self._renew(context)
            summary = self._service().finish(StorageState.from_dict(event["carry"]))
        self._release(context)
        return self._outcome(context, summary)

    def _outcome(self, context, summary) -> dict[str, Any]:
        """The recorded verdict: fail the task for good when the filesystem did not pass."""
        if not summary.passed:
            raise AirflowFailException(
                f"{self.cluster}/{self.node_pool} storage validation failed: "
                + "; ".join(summary.reasons)
            )
        self.log.info("%s/%s storage: %s", self.cluster, self.node_pool, "; ".join(summary.reasons))
        return summary.to_dict()


def _full_test_claim(context, dag_id: str, book, ref, rule) -> Any:
    """``rule`` (``full_test.claim_full_test`` or ``pool_check_duty``) for this run, as the
    services call it: given the run id, why the filesystem's full test is not this pool's
    tonight, or None when it is."""
    from gpufleet.airflow.operators.runs import run_liveness

    def claim(run_id: str) -> str | None:
        alive = lambda dag, rid: run_liveness(context, dag, rid)  # noqa: E731
        return rule(book, ref, dag_id, run_id, alive)

    return claim
