"""Approval tasks (docs/remediation.md#approvals): Airflow's human-in-the-loop
``ApprovalOperator`` (standard provider; on Airflow 3.3 the task waits in ``awaiting_input``,
answered from the UI's Required Actions or ``PATCH .../hitlDetails``, e.g. ``gpufleet approve``)
with its request in the gpufleet ledger (``gf_approvals``).

- The request is asked once: a task finds it in the ledger (``request``), records itself as the
  task asking it, and waits; one answered before (by another run's task) is not asked again, the
  recorded answer stands.
- The answer is recorded with who (the Airflow user the UI or the API call named) and when;
  when nobody answers within ``timeout_hours`` the default is ``Reject``, recorded as
  ``timed_out`` by ``timeout``: the safe default keeps capacity in service.
- ``ApprovalOperator`` skips its downstream tasks on a reject; these never do (the run's watcher
  is downstream of every task): ``RetireApprovalOperator`` fails the run naming the answer (the
  old pool is kept), ``LedgerApprovalOperator`` returns it and the settle task after it acts
  on the ledger's answers (``services.nodes.approvals``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator, HITLOperator
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from gpufleet.airflow.operators.common import catalog, ledger
from gpufleet.airflow.params import param

DEFAULT_TIMEOUT_HOURS = 24.0
MAX_TIMEOUT_HOURS = 24.0 * 30
APPROVED = ("approved", "done")
ANSWER_WITH = (
    "Answer in the UI (Required Actions), or through the REST API: `gpufleet approve "
    "{dag_id} {run_id} {task_id}{map_index} [--reject]` (docs/ci-trigger.md)."
)


def approval_timeout_param(title: str, description: str, **schema: Any) -> Any:
    """The ``approval_timeout_hours`` Param of a DAG with an approval task: hours, in
    (0, ``MAX_TIMEOUT_HOURS``], default ``DEFAULT_TIMEOUT_HOURS`` (``timeout_of`` reads it)."""
    return param(
        DEFAULT_TIMEOUT_HOURS,
        type="number",
        exclusiveMinimum=0,
        maximum=MAX_TIMEOUT_HOURS,
        title=title,
        description=description,
        **schema,
    )


def _when(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def timeout_of(hours: Any) -> timedelta:
    """The response timeout of ``hours`` (a Param's value: a finite number, 0 < h <= 720)."""
    from gpufleet.domain.inputs import finite

    value = float(finite(hours, "approval_timeout_hours"))
    if not 0 < value <= MAX_TIMEOUT_HOURS:
        raise AirflowFailException(
            f"approval_timeout_hours {value:g} is not in (0, {MAX_TIMEOUT_HOURS:g}]"
        )
    return timedelta(hours=value)


class LedgerApprovalOperator(ApprovalOperator):
    """Ask a person to approve the ledger's request ``approval_id`` (templated: mapped over the
    open requests); the answer is recorded in the ledger and returned, nothing skipped."""

    template_fields: Sequence[str] = (
        *ApprovalOperator.template_fields,
        "approval_id",
        "timeout_hours",
    )
    ui_color = "#efe4ff"

    def __init__(
        self,
        *,
        approval_id: Any = None,
        timeout_hours: Any = DEFAULT_TIMEOUT_HOURS,
        ledger_conn_id: str | None = None,
        subject: str = "Approve a destructive step?",
        **kwargs: Any,
    ):
        kwargs.setdefault("defaults", ApprovalOperator.REJECT)  # the safe default
        super().__init__(subject=subject, **kwargs)
        self.approval_id = approval_id
        self.timeout_hours = timeout_hours
        self.ledger_conn_id = ledger_conn_id

    # -- what to ask ---------------------------------------------------------------------------

    def request(self, context, led) -> dict[str, Any] | None:
        """The request this task asks (None: nothing to ask)."""
        if self.approval_id in (None, ""):
            return None
        row = led.approval(int(self.approval_id))
        if row is None:
            raise AirflowFailException(f"no approval request #{self.approval_id} in the ledger")
        return row

    def settled(self, context, row: dict[str, Any] | None) -> dict[str, Any]:
        """What the task returns once the request is answered (or was before)."""
        return summary(row)

    # -- Airflow -------------------------------------------------------------------------------

    def _timeout_hours(self, context) -> Any:
        return self.timeout_hours

    def execute(self, context):
        led = ledger(self.ledger_conn_id)
        row = self.request(context, led)
        if row is None or row["state"] != "pending":  # answered before: not asked again
            if row is not None:
                self.log.info("request #%s was answered before: %s", row["id"], describe(row))
            return self.settled(context, row)
        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)
        map_index = -1 if map_index is None else int(map_index)
        led.approval_asked_by(row["id"], ti.dag_id, ti.run_id, ti.task_id, map_index)
        self.subject = f"#{row['id']}: {row['subject']}"
        self.body = body(row, ti.dag_id, ti.run_id, ti.task_id, map_index)
        self.response_timeout = timeout_of(self._timeout_hours(context))
        self.log.info(
            "asking for approval #%s (%s %s); the default after %s is Reject",
            row["id"],
            row["kind"],
            row["key"],
            self.response_timeout,
        )
        return super().execute(context)

    def execute_complete(self, context, event: dict[str, Any]) -> Any:
        # HITLOperator's: validates the answer; ApprovalOperator's would skip the downstream
        # tasks on a reject, the watcher among them
        HITLOperator.execute_complete(self, context, event)
        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)
        led = ledger(self.ledger_conn_id)
        row = led.approval_asked_at(
            ti.dag_id, ti.run_id, ti.task_id, -1 if map_index is None else int(map_index)
        )
        if row is None:
            raise AirflowFailException("this task's approval request is not in the ledger")
        user = event.get("responded_by_user") or None
        by = str(user.get("name") or user.get("id")) if user else None
        row = led.answer_approval(
            row["id"], event.get("chosen_options") or [], by, _when(event.get("responded_at"))
        )
        self.log.info("request #%s: %s", row["id"], describe(row))
        return self.settled(context, row)


def summary(row: dict[str, Any] | None) -> dict[str, Any]:
    if row is None:
        return {"approval_id": None, "state": None}
    return {
        "approval_id": row["id"],
        "kind": row["kind"],
        "key": row["key"],
        "state": row["state"],
        "answered_by": row["answered_by"],
        "answered_at": row["answered_at"].isoformat() if row["answered_at"] else None,
    }


def describe(row: dict[str, Any]) -> str:
    """``approved by alice at 2026-12-07 08:00 UTC``, ``timed out ...``."""
    if row["answered_at"] is None:
        return "not answered yet"
    at = f"{row['answered_at']:%Y-%m-%d %H:%M} UTC"
    if row["state"] == "timed_out":
        return f"nobody answered in time: the default ({row['answer']}) was taken at {at}"
    return f"{row['state'].replace('_', ' ')} by {row['answered_by']} at {at}"


def body(row: dict[str, Any], dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
    detail = row["detail"] or {}
    lines = [
        row["subject"],
        "",
        f"- request: #{row['id']} ({row['kind']} `{row['key']}`), asked by `{row['requested_by']}` "
        f"at {row['requested_at']:%Y-%m-%d %H:%M} UTC",
        *(f"- {k}: {v}" for k, v in sorted(detail.items())),
        "- if nobody answers in time: **Reject** (nothing is done; capacity stays in service)",
        "",
        ANSWER_WITH.format(
            dag_id=dag_id,
            run_id=run_id,
            task_id=task_id,
            map_index=f" --map-index {map_index}" if map_index >= 0 else "",
        ),
    ]
    return "\n".join(lines)


class RetireApprovalOperator(LedgerApprovalOperator):
    """``reservation_transition``'s ``approve_retire``: ask a person before the old pool is
    deleted. Approved: ``retire_old`` runs. Rejected, or nobody answered within
    ``approval_timeout_hours``: the task fails naming the answer, the old pool is kept (cordoned
    and drained, its reservation held), the lock stays with the transition: run again to ask
    again, or ``action=rollback`` to return to the old pool. A rerun after the retire started
    does not ask again."""

    template_fields: Sequence[str] = (
        *LedgerApprovalOperator.template_fields,
        "cluster",
        "old_pool",
        "new_pool",
    )

    def __init__(self, *, cluster: str, old_pool: str, new_pool: str, **kwargs: Any):
        kwargs.setdefault("subject", "Retire the old pool?")
        super().__init__(**kwargs)
        self.cluster = cluster
        self.old_pool = old_pool
        self.new_pool = new_pool

    def request(self, context, led) -> dict[str, Any] | None:
        from gpufleet.airflow.operators.transition import open_transition, retire_started
        from gpufleet.domain.remediation import RETIRE_POOL

        svc = open_transition(
            context,
            cluster=self.cluster,
            old_pool=self.old_pool,
            new_pool=self.new_pool,
            ledger_conn_id=self.ledger_conn_id,
        )
        if retire_started(svc):
            self.log.info("the retire of %s started before: not asked again", self.old_pool)
            return None
        key = f"{self.cluster}/{self.old_pool}"
        row, created = led.request_approval(
            RETIRE_POOL,
            key,
            f"Retire {key} (delete the node pool, release its reservation)? "
            f"Its work moved to {self.new_pool}; it is cordoned and drained",
            requested_by=context["run_id"],
            detail={
                "transition": svc.tid,
                "cluster": self.cluster,
                "old_pool": self.old_pool,
                "new_pool": self.new_pool,
            },
        )
        if not created and row["state"] == "pending":
            self.log.info("request #%s (asked by an earlier run) is asked again here", row["id"])
        return row

    def settled(self, context, row: dict[str, Any] | None) -> dict[str, Any]:
        if row is None or row["state"] in APPROVED:
            return summary(row)
        raise AirflowFailException(
            f"the retire of {self.cluster}/{self.old_pool} was not approved: {describe(row)} "
            f"(request #{row['id']}). {self.old_pool} is kept (cordoned, drained, its reservation "
            f"held) and {self.new_pool} serves; run again to ask again, or action=rollback to "
            "return to the old pool"
        )


class OpenApprovalsOperator(BaseOperator):
    """The pending requests to ask in this run, as the approval tasks' mapping kwargs
    (``[{"approval_id": 7}, ...]``, oldest first, at most ``limit``): not one another live run's
    task is asking already (each is asked once); ``kinds`` and ``ids`` narrow them."""

    template_fields: Sequence[str] = ("ids",)
    ui_color = "#efe4ff"

    def __init__(
        self,
        *,
        kinds: Sequence[str],
        ids: Any = None,
        limit: int = 64,
        ledger_conn_id: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.kinds = list(kinds)
        self.ids = ids
        self.limit = limit
        self.ledger_conn_id = ledger_conn_id

    def execute(self, context) -> list[dict[str, int]]:
        from gpufleet.airflow.operators.runs import run_liveness

        wanted = {int(i) for i in self.ids} if self.ids else None
        out: list[dict[str, int]] = []
        for row in reversed(ledger(self.ledger_conn_id).approvals(["pending"])):
            if row["kind"] not in self.kinds or (wanted is not None and row["id"] not in wanted):
                continue
            asking = row["dag_id"] and row["run_id"] and row["run_id"] != context["run_id"]
            if asking and run_liveness(context, row["dag_id"], row["run_id"]):
                self.log.info(
                    "#%s is being asked by %s %s", row["id"], row["dag_id"], row["run_id"]
                )
                continue
            out.append({"approval_id": row["id"]})
            if len(out) >= self.limit:
                break
        self.log.info("%d request(s) to ask", len(out))
        return out


class SettleApprovalsOperator(BaseOperator):
    """After the approval tasks (whatever they did): perform the approved requests and close the
    rejected and timed-out ones (``services.nodes.approvals.settle_approvals``); ``ids``
    (templated) narrows them to this run's."""

    template_fields: Sequence[str] = ("ids",)
    ui_color = "#efe4ff"

    def __init__(self, *, ids: Any = None, ledger_conn_id: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.ids = ids
        self.ledger_conn_id = ledger_conn_id

    def execute(self, context) -> dict[str, Any]:
        from gpufleet.airflow.operators.step_report import report_step
        from gpufleet.services.nodes.approvals import settle_approvals

        ids = None if self.ids is None else [int(i) for i in self.ids]
        result = settle_approvals(ledger(self.ledger_conn_id), catalog(), context["run_id"], ids)
        report_step(self.log, result, alert="approved step waiting", where="approvals")
        return result.to_dict()


class RequestBreakerResetOperator(BaseOperator):
    """``breaker_reset``'s first task: record the request to reset a tripped breaker (scope,
    key, why; who asked: the run's triggering user); refuses a breaker that is not tripped.
    Returns the request's id for the approval task."""

    template_fields: Sequence[str] = ("scope", "key", "reason")
    ui_color = "#efe4ff"

    def __init__(
        self,
        *,
        scope: str,
        key: str,
        reason: str,
        ledger_conn_id: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.scope = scope
        self.key = key
        self.reason = reason
        self.ledger_conn_id = ledger_conn_id

    def execute(self, context) -> int:
        from gpufleet.domain.remediation import BREAKER_RESET

        led = ledger(self.ledger_conn_id)
        tripped = led.tripped_breakers_of(self.scope, self.key)
        if not tripped:
            now = ", ".join(f"{r['scope']} {r['key']}" for r in led.tripped_breakers())
            raise AirflowFailException(
                f"the {self.scope} breaker {self.key} is not tripped (tripped: {now or 'none'})"
            )
        trip = tripped[0]
        asker = getattr(context.get("dag_run"), "triggering_user_name", None) or context["run_id"]
        row, created = led.request_approval(
            BREAKER_RESET,
            f"{self.scope}:{self.key}",
            f"Reset the {self.scope} breaker {self.key}? It tripped at "
            f"{trip['tripped_at']:%Y-%m-%d %H:%M} UTC: {trip['reason']}. Asked because: "
            f"{self.reason}",
            requested_by=str(asker),
            detail={"scope": self.scope, "key": self.key, "reason": self.reason},
        )
        self.log.info("request #%s (%s)", row["id"], "new" if created else "already open")
        return int(row["id"])
