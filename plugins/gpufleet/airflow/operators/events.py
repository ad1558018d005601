"""Operators of the event path (``node_health_response``; design: docs/events.md).

``NodeEventResponseOperator`` (``respond``) hands each cluster's node event batches to the
response service: the batches the cluster watchers emitted (the run's triggering asset events,
``extra["payload"]``) and any given by hand (the ``batches`` Param), merged per cluster in the
order they came. It returns the re-admission sessions the responses opened, for
``AdmissionSessionOperator`` to map over.

``AdmissionSessionOperator`` (``admission_session``) runs one pool's re-admission session:
it waits (deferred, on the injected clock) until the session's window closes, claims it (a
session another run claimed is skipped, naming that run), runs the pool's fabric validation
exactly as ``FabricValidationOperator`` does (waiting for another run's validation of the pool
rather than skipping it) and judges the session's nodes from that validation.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from gpufleet.airflow.operators.common import catalog, ledger
from gpufleet.airflow.operators.validation import FabricValidationOperator


def triggering_batches(context) -> list[dict[str, Any]]:
    """The batches the cluster watchers emitted for this run, oldest first: each triggering
    asset event's ``extra["payload"]`` (Airflow's ``submit_event``: ``{"from_trigger": True,
    "payload": ...}``). Asset events not from a watcher carry no batch and are left out."""
    found: list[tuple[datetime, int, dict[str, Any]]] = []
    events = context.get("triggering_asset_events") or {}
    for asset in events:
        for event in events[asset]:
            extra = getattr(event, "extra", None) or {}
            payload = extra.get("payload")
            if extra.get("from_trigger") and isinstance(payload, dict):
                when = getattr(event, "timestamp", None) or datetime.min.replace(tzinfo=UTC)
                found.append((when, len(found), payload))
    return [payload for _, _, payload in sorted(found, key=lambda f: (f[0], f[1]))]


def merge_by_cluster(payloads: Sequence[Any]) -> dict[str, Any]:
    """cluster -> one ``Batch``: each cluster's batches merged in order (``Batch.merge``). A
    payload that is not a batch is refused, naming it, before anything is done."""
    from gpufleet.services.nodes.watch_batch import Batch

    merged: dict[str, Batch] = {}
    for i, payload in enumerate(payloads):
        try:
            batch = Batch.from_dict(payload)
        except (ValueError, TypeError, AttributeError) as exc:
            raise AirflowFailException(f"node event batch {i + 1}: {exc}") from None
        merged[batch.cluster] = (
            merged[batch.cluster].merge(batch) if batch.cluster in merged else batch
        )
    return merged


class NodeEventResponseOperator(BaseOperator):
    """Respond to the node event batches of this run, one cluster at a time
    (``services.nodes.events.EventResponse``). ``batches``: batches given by hand (the DAG's
    ``batches`` Param), handled after the watchers' own; ``window_s``: the re-admission
    sessions' window (None: ``domain.admission.DEFAULT_WINDOW_S``, 5 minutes). Returns the
    sessions the responses opened (``[{"cluster", "node_pool", "session"}]``); every cluster's
    report is pushed as XCom ``reports``. A cluster whose response fails does not stop the
    others; the task fails after them (its retry handles the same batches again: the response
    is idempotent)."""

    template_fields: Sequence[str] = ("batches",)
    ui_color = "#ffe5d9"

    def __init__(
        self,
        *,
        batches: Any = None,
        window_s: float | None = None,
        ledger_conn_id: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.batches = batches
        self.window_s = window_s
        self.ledger_conn_id = ledger_conn_id

    def _given(self) -> list[Any]:
        given = self.batches
        if given in (None, "", "None"):
            return []
        if isinstance(given, str):
            import json

            try:
                given = json.loads(given)
            except ValueError as exc:
                raise AirflowFailException(f"batches: not JSON: {exc}") from None
        if not isinstance(given, list):
            raise AirflowFailException(f"batches must be a list of batches, not {given!r:.80}")
        return given

    def execute(self, context) -> list[dict[str, str]]:
        from gpufleet.domain.admission import DEFAULT_WINDOW_S
        from gpufleet.errors import GpufleetError
        from gpufleet.services.nodes.events import EventResponse

        watched, given = triggering_batches(context), self._given()
        merged = merge_by_cluster([*watched, *given])
        fleet = catalog()
        for name in merged:  # refused before any cluster is touched
            try:
                fleet.cluster(name)
            except GpufleetError as exc:
                raise AirflowFailException(f"node event batch for {name!r}: {exc}") from None
        self.log.info(
            "%d batch(es) from the watchers, %d given: clusters %s",
            len(watched),
            len(given),
            ", ".join(sorted(merged)) or "none",
        )
        window_s = DEFAULT_WINDOW_S if self.window_s is None else float(self.window_s)
        response = EventResponse(ledger(self.ledger_conn_id), fleet, window_s=window_s)
        sessions: dict[str, dict[str, str]] = {}
        reports: list[dict[str, Any]] = []
        failed: list[str] = []
        for name, batch in sorted(merged.items()):
            try:
                report = response.respond(batch, context["run_id"])
            except Exception as exc:  # noqa: BLE001 - the other clusters are still handled
                self.log.exception("%s: the response failed", name)
                failed.append(f"{name}: {type(exc).__name__}: {exc}")
                continue
            reports.append(report.to_dict())
            for node, why in sorted(report.quarantined.items()):
                self.log.warning("%s: quarantined %s: %s", name, node, why)
            for node, why in sorted(report.admitted.items()):
                self.log.info("%s: %s held validation-pending: %s", name, node, why)
            for node, why in sorted(report.held.items()):
                self.log.info("%s: %s held while NotReady: %s", name, node, why)
            for node in report.lifted:
                self.log.info("%s: %s back without a reboot: hold lifted", name, node)
            for node in report.forgotten:
                self.log.info("%s: %s is gone", name, node)
            for note in report.notes:
                self.log.info("%s: %s", name, note)
            for s in report.sessions:
                sessions.setdefault(s["session"], dict(s))
        context["ti"].xcom_push(key="reports", value=reports)
        if failed:
            raise AirflowException("the response failed for " + "; ".join(failed))
        return list(sessions.values())


class AdmissionSessionOperator(FabricValidationOperator):
    """One pool's re-admission session (``session``: its id in the ledger): wait until its
    window closes, claim it, validate the pool's fabric (with its GPU health round) as
    ``FabricValidationOperator`` does, then judge the session's nodes from that validation
    (``services.nodes.admission.AdmissionSessions``). Another run validating the pool is waited
    for, never skipped: the nodes stay pending until a session of theirs is judged. A pool that
    fails its validation fails the task after the judgement is recorded."""

    template_fields: Sequence[str] = (*FabricValidationOperator.template_fields, "session")
    ui_color = "#fde2e4"

    def __init__(self, *, session: str, **kwargs: Any):
        kwargs["when_busy"] = "wait"
        super().__init__(**kwargs)
        self.session = session

    def _sessions(self):
        from gpufleet.backends import cluster_backend
        from gpufleet.services.nodes.admission import AdmissionSessions

        ref = self._ref()
        return AdmissionSessions(ref, ledger(self.ledger_conn_id), cluster_backend(ref.cluster))

    def _row(self) -> dict[str, Any]:
        row = ledger(self.ledger_conn_id).session_row(self.session)
        if row is None:
            raise AirflowFailException(f"no re-admission session {self.session!r} in the ledger")
        if (row["cluster"], row["pool"]) != (self.cluster, self.node_pool):
            raise AirflowFailException(
                f"session {self.session!r} is {row['cluster']}/{row['pool']}'s, not "
                f"{self.cluster}/{self.node_pool}'s"
            )
        return row

    def execute(self, context):
        """Defer until the session's window closes (on the cluster's clock), then claim."""
        from datetime import timedelta

        from gpufleet.airflow.triggers import WaitTrigger
        from gpufleet.services.nodes.drain import backend_clock

        self._numbers()
        row = self._row()
        opened = row["opened_at"]
        if opened.tzinfo is None:
            opened = opened.replace(tzinfo=UTC)
        closes = opened + timedelta(seconds=float(row["window_s"]))
        left = (closes - backend_clock(self._sessions().backend).now()).total_seconds()
        if left > 0 and row["state"] == "open":
            self.log.info("session %s: its window closes in %.0f s", self.session, left)
            self.defer(trigger=WaitTrigger(left), method_name="execute_claim")
        return self.execute_claim(context)

    def execute_claim(self, context, event: dict[str, Any] | None = None):
        """Claim the session; then validate the pool (``FabricValidationOperator.execute``)."""
        run_id = context["run_id"]
        claimed = self._sessions().claim(self.session, run_id)
        if claimed is None:
            row = self._row()
            if not (row["state"] == "validating" and row.get("run_id") == run_id):
                holder = row.get("run_id") or "another run"
                raise AirflowSkipException(
                    f"session {self.session} is {row['state']} (run {holder}): not this run's"
                )
            self.log.info("session %s: this run's already (a retry): validating", self.session)
        else:
            self.log.info(
                "session %s claimed: %d node(s) pending: %s",
                self.session,
                len(claimed.nodes),
                ", ".join(sorted(claimed.nodes)),
            )
        return super().execute(context)

    def execute_after_wait(self, context, event: dict[str, Any] | None = None):
        """Back from waiting for another run's validation of the pool: validate (the session
        is this run's already)."""
        return super().execute(context)

    def _outcome(self, context, summary) -> dict[str, Any]:
        """Judge the session from the validation this run recorded, then the verdict as
        ``FabricValidationOperator`` gives it (a failed pool fails the task)."""
        from gpufleet.domain.validation_kinds import ValidationKind

        book = ledger(self.ledger_conn_id)
        rows = [
            r
            for r in book.validations_for_run(context["run_id"])
            if (r["cluster"], r["pool"], r["kind"])
            == (self.cluster, self.node_pool, ValidationKind.FABRIC)
        ]
        judgement = self._sessions().judge(
            self.session, context["run_id"], summary, rows[-1] if rows else None
        )
        for label, nodes in (
            ("released", judgement.released),
            ("quarantined", judgement.quarantined),
            ("carried to the next session", judgement.carried),
        ):
            for node, why in sorted(nodes.items()):
                self.log.info("session %s: %s %s: %s", self.session, node, label, why)
        verdict = super()._outcome(context, summary)
        return {
            **verdict,
            "session": self.session,
            "released": judgement.released,
            "quarantined_nodes": judgement.quarantined,
            "carried": judgement.carried,
        }
