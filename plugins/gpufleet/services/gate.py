"""Gather the gate's facts from the catalog, the ledger and the cluster; decide; record."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from gpufleet.backends import cluster_backend
from gpufleet.domain.fleet import Catalog
from gpufleet.domain.gate import DEFAULT_MAX_AGE, GateDecision, PoolFacts, ValidationFact, decide
from gpufleet.errors import GpufleetError
from gpufleet.store import Ledger

log = logging.getLogger(__name__)


@dataclass
class RecordedDecision(GateDecision):
    """A gate decision as the ledger holds it: ``decision_id`` is its row in the ledger (None
    when it could not be recorded, and then the decision is a refusal)."""

    decision_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (an XCom)."""
        return {
            "launch": self.launch,
            "reasons": list(self.reasons),
            "decision_id": self.decision_id,
        }


def _fact(row) -> ValidationFact | None:
    if row is None:
        return None
    return ValidationFact(row["passed"], row["finished_at"], row.get("transport"))


def gather_facts(
    catalog: Catalog, ledger: Ledger | None, cluster: str, pools: list[str]
) -> list[PoolFacts]:
    """One PoolFacts per requested pool; what cannot be read stays unknown (None)."""
    out: list[PoolFacts] = []
    try:
        cl = catalog.cluster(cluster)
    except GpufleetError:
        return [PoolFacts(key=f"{cluster}/{p}", known=False) for p in pools]
    backend = None
    nodes_error = None
    try:
        backend = cluster_backend(cl)
    except GpufleetError as exc:
        nodes_error = str(exc)
    transitions: list[dict] = []
    transitions_error = None
    if ledger is not None:  # one read for the cluster, not one per pool
        try:
            transitions = ledger.transitions_in_flight(cluster)
        except Exception as exc:  # noqa: BLE001 - an unreadable ledger refuses
            transitions_error = f"ledger: {exc}"
    for name in pools:
        key = f"{cluster}/{name}"
        try:
            ref = catalog.pool(cluster, name)
        except GpufleetError:
            out.append(PoolFacts(key=key, known=False))
            continue
        if ledger is None:
            out.append(PoolFacts(key=key, known=True, error="the ledger could not be read"))
            continue
        if transitions_error:
            out.append(PoolFacts(key=key, known=True, error=transitions_error))
            continue
        try:
            state = ledger.pool_state(cluster, name)
            fabric = _fact(ledger.latest_validation(cluster, name, "fabric"))
            storage = _fact(ledger.latest_validation(cluster, name, "storage"))
            in_flight = any(name in (t["to_pool"], t["from_pool"]) for t in transitions)
        except Exception as exc:  # noqa: BLE001 - an unreadable ledger refuses
            out.append(PoolFacts(key=key, known=True, error=f"ledger: {exc}"))
            continue
        free = None
        if backend is not None:
            try:
                free = sum(1 for n in backend.list_nodes(name) if n.free)
            except GpufleetError as exc:
                nodes_error = str(exc)
        out.append(
            PoolFacts(
                key=key,
                known=True,
                expected_transport=ref.pool.transport,
                state=state["state"] if state else None,
                fabric=fabric,
                has_filesystem=ref.filesystem is not None,
                storage=storage,
                transition_in_flight=in_flight,
                schedulable_nodes=free,
                error=None if free is not None else f"cannot list nodes: {nodes_error}",
            )
        )
    return out


def check_gate(
    catalog: Catalog,
    ledger_factory,
    cluster: str,
    pools: list[str],
    nodes: int,
    *,
    max_age: timedelta = DEFAULT_MAX_AGE,
    job: str | None = None,
    run_id: str | None = None,
    now: datetime | None = None,
    refusals: list[str] | None = None,
) -> RecordedDecision:
    """Decide and record. ``ledger_factory`` builds the Ledger (its failure refuses).

    ``refusals`` are problems the caller found before asking (a bad request): the decision is
    then a refusal with those reasons, recorded like any other, and no facts are gathered.
    A decision that could not be recorded refuses: a launch needs its recorded decision."""
    now = now or datetime.now(UTC)
    try:
        ledger = ledger_factory()
    except Exception as exc:  # noqa: BLE001
        log.error("ledger unreadable: %s", exc)
        ledger = None
    if refusals:
        decision = GateDecision(False, list(refusals))
    else:
        decision = decide(gather_facts(catalog, ledger, cluster, pools), nodes, now, max_age)
    if ledger is None:
        return RecordedDecision(False, decision.reasons, decision.schedulable_nodes)
    try:
        decision_id = ledger.record_gate_decision(
            cluster=cluster,
            pools=pools,
            nodes=nodes,
            launch=decision.launch,
            reasons=decision.reasons,
            job=job,
            run_id=run_id,
        )
    except Exception as exc:  # noqa: BLE001 - an unrecorded decision must not launch
        return RecordedDecision(
            False, [*decision.reasons, f"the decision could not be recorded: {exc}"]
        )
    return RecordedDecision(
        decision.launch, decision.reasons, decision.schedulable_nodes, decision_id
    )
