"""Gather the gate's facts from the catalog, the ledger and the cluster; decide; record.

Facts are read strictly (``gpufleet.domain.gate.read_*``): a value this code does not know makes
the pool's facts unreadable, naming the value. Any exception while deciding, ours or not (a
corrupt simulator database, say), is a refusal with its reason, recorded like any other."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from gpufleet.backends import cluster_backend
from gpufleet.domain.fleet import Catalog
from gpufleet.domain.gate import (
    DEFAULT_MAX_AGE,
    GateDecision,
    PoolFacts,
    PoolState,
    TransitionState,
    decide,
    read_enum,
    read_health,
    read_text,
    read_validation,
)
from gpufleet.domain.signals import newer_bad_signals
from gpufleet.domain.validation_kinds import ValidationKind
from gpufleet.errors import GpufleetError
from gpufleet.store import Ledger

log = logging.getLogger(__name__)

# the latest rows the gate reads per pool, in one statement: every kind, a pool's GPU health
# check too, whose failed nodes still in service it does not count
# (``domain.gate.unhealthy_in_service``)
GATE_KINDS = tuple(ValidationKind)


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
            "pool": self.pool,
        }


def _transition_refusal(name: str, transitions: list[dict]) -> str | None:
    """Why an unfinished transition refuses pool ``name``, or None (the usual rules apply).
    The new pool is refused until validated, the old one from the scheduling switch on, each
    naming the other (``domain.transition.gate_refusal``); a running transition whose step is
    not recorded refuses both. An unknown transition state or step: FactError."""
    from gpufleet.domain.transition import Step, gate_refusal

    for t in transitions:
        if name not in (t["to_pool"], t["from_pool"]):
            continue
        if (
            read_enum(TransitionState, t["state"], "transition state")
            is not TransitionState.RUNNING
        ):
            continue
        if t.get("step") is None:
            return "a reservation transition is in flight"
        step = read_enum(Step, t["step"], "transition step")
        role = "new" if name == t["to_pool"] else "old"
        reason = gate_refusal(step, role, t["to_pool"], t["from_pool"])
        if reason:
            return reason
    return None


@dataclass
class LedgerReads:
    """What the gate's facts read from the ledger for several clusters, read once for all of
    them (a fleet-wide page): transitions in flight by cluster, every pool state, and the
    latest validations (``GATE_KINDS``, GPU health among them) by cluster, then (pool, kind),
    in one statement whatever the history (``Ledger.latest_validations_by_cluster``)."""

    transitions: dict[str, list[dict]]
    states: dict[tuple[str, str], dict]
    latest: dict[str, dict[tuple[str, str], dict]]

    @classmethod
    def read(
        cls, ledger: Ledger, by_cluster: Mapping[str, list[str]], named: bool = False
    ) -> LedgerReads:
        """The rows of ``by_cluster``'s clusters, one statement per table: the transitions and
        pool states of every cluster, or of the clusters asked only (``named``: a few of
        many); the latest validations of those asked."""
        scope = list(by_cluster) if named else None
        transitions: dict[str, list[dict]] = {}
        for row in ledger.transitions_in_flight(scope):
            transitions.setdefault(row["cluster"], []).append(row)
        states = ledger.pool_states(scope)
        return cls(
            transitions=transitions,
            states={k: v for k, v in states.items() if k[0] in by_cluster},
            latest=ledger.latest_validations_by_cluster(by_cluster, GATE_KINDS),
        )


def gather_facts(  # noqa: C901  one fail-closed read per gate fact
    catalog: Catalog,
    ledger: Ledger | None,
    cluster: str,
    pools: list[str],
    nodes: list | None = None,
    nodes_error: str | None = None,
    free: Mapping[str, int | None] | None = None,
    reads: LedgerReads | None = None,
) -> list[PoolFacts]:
    """One PoolFacts per requested pool; what cannot be read stays unknown (None).

    The cluster's nodes are listed once for all the pools asked about. A caller that already
    listed them passes ``nodes`` (every node of this cluster) or why they could not be listed
    (``nodes_error``), and the cluster is not asked again. A reader that must not touch a
    cluster (the pages, ``/metrics``) passes ``free`` instead: each pool's free nodes as its
    ledger snapshot counted them (None: no snapshot yet: the count is unknown), and nothing is
    listed. ``reads``: the ledger rows, already read for many clusters (``LedgerReads``).

    Each pool's latest fabric, storage and GPU health rows come from one statement
    (``GATE_KINDS``). Listed nodes give each pool's free nodes by name too (``free_nodes``), so
    the gate leaves out those the latest health check failed; a snapshot's count cannot, and
    the gate leaves out the nodes the check says it left in service."""
    out: list[PoolFacts] = []
    try:
        cl = catalog.cluster(cluster)
    except GpufleetError:
        return [PoolFacts(key=f"{cluster}/{p}", known=False) for p in pools]
    if nodes is None and nodes_error is None and free is None:
        try:
            backend = cluster_backend(cl)
        except Exception as exc:  # noqa: BLE001 - an unreachable cluster refuses
            nodes_error = str(exc)
        else:
            try:
                nodes = backend.list_nodes(None)
            except Exception as exc:  # noqa: BLE001 - nodes that cannot be listed refuse
                nodes_error = f"{type(exc).__name__}: {exc}"
    by_pool: dict[str | None, list] | None = None
    if nodes is not None:
        by_pool = {}
        for node in nodes:
            by_pool.setdefault(node.pool, []).append(node)
    transitions: list[dict] = []
    states: dict[tuple[str, str], dict] = {}
    latest: dict[tuple[str, str], dict] = {}
    ledger_error = None
    if ledger is not None and reads is not None:
        transitions = reads.transitions.get(cluster, [])
        states, latest = reads.states, reads.latest.get(cluster, {})
    elif ledger is not None:  # reads for the cluster's pools at once, not one per pool
        try:
            transitions = ledger.transitions_in_flight(cluster)
            states = ledger.pool_states(cluster)
            latest = ledger.latest_validations(cluster, pools, GATE_KINDS)
        except Exception as exc:  # noqa: BLE001 - an unreadable ledger refuses
            ledger_error = f"ledger: {exc}"
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
        if ledger_error:
            out.append(PoolFacts(key=key, known=True, error=ledger_error))
            continue
        try:
            row = states.get((cluster, name))
            state = read_enum(PoolState, row["state"], "pool state") if row else None
            state_reason = read_text(row.get("reason"), "pool state reason") if row else None
            fabric = read_validation(latest.get((name, ValidationKind.FABRIC)), "fabric validation")
            storage = read_validation(
                latest.get((name, ValidationKind.STORAGE)), "storage validation"
            )
            health = read_health(latest.get((name, ValidationKind.HEALTH)), "GPU health check")
            transition_reason = _transition_refusal(name, transitions)
        except Exception as exc:  # noqa: BLE001 - an unreadable or unknown fact refuses
            out.append(PoolFacts(key=key, known=True, error=f"ledger: {exc}"))
            continue
        signalled: dict[str, str] = {}
        if reads is None:  # the gate: signals newer than the pool's validation leave nodes out
            try:
                bad = ledger.newest_bad_signals(cluster, pool=name)
                signalled = newer_bad_signals(fabric.finished_at if fabric else None, bad)
            except Exception as exc:  # noqa: BLE001 - unreadable signals refuse the pool
                out.append(PoolFacts(key=key, known=True, error=f"ledger: {exc}"))
                continue
        named = None  # the free nodes by name, when the cluster's nodes were listed
        if free is not None:
            free_nodes = free.get(name)
        elif by_pool is None:
            free_nodes = None
        else:
            named = frozenset(n.name for n in by_pool.get(name, ()) if n.free)
            free_nodes = len(named)
        out.append(
            PoolFacts(
                key=key,
                known=True,
                expected_transport=ref.pool.transport,
                state=state,
                state_reason=state_reason,
                block_on_drift=ref.pool.block_on_drift,
                fabric=fabric,
                has_filesystem=ref.filesystem is not None,
                storage=storage,
                transition_in_flight=transition_reason is not None,
                transition_reason=transition_reason,
                schedulable_nodes=free_nodes,
                health=health,
                free_nodes=named,
                signalled=signalled,
                # from snapshots, a pool never seen has no count: "unknown", not unreadable
                error=None
                if free_nodes is not None or free is not None
                else f"cannot list nodes: {nodes_error}",
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
) -> RecordedDecision:
    """Decide and record. ``ledger_factory`` builds the Ledger (its failure refuses). A bad
    request never gets here (``TrainingLaunch.gate`` refuses it first, recording nothing).
    A decision that could not be recorded refuses: a launch needs its recorded decision.
    ``now`` (the ages' reference): by default the ledger's clock."""
    try:
        ledger = ledger_factory()
    except Exception as exc:  # noqa: BLE001
        log.error("ledger unreadable: %s", exc)
        ledger = None
    if now is None:  # without a ledger no record is aged (every pool's facts are unreadable)
        now = ledger.clock.now() if ledger is not None else datetime.fromtimestamp(0, UTC)
    try:
        facts = gather_facts(catalog, ledger, cluster, pools)
        decision = decide(facts, nodes, now, max_age)
    except Exception as exc:  # noqa: BLE001 - whatever broke, the answer is a refusal
        log.error("the gate could not decide: %r", exc)
        decision = GateDecision(False, [f"the gate could not decide: {exc!r}"])
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
            pool=decision.pool if decision.launch else None,
        )
    except Exception as exc:  # noqa: BLE001 - an unrecorded decision must not launch
        return RecordedDecision(
            False, [*decision.reasons, f"the decision could not be recorded: {exc}"]
        )
    return RecordedDecision(
        decision.launch, decision.reasons, decision.schedulable_nodes, decision.pool, decision_id
    )
