"""Ledger writes that only tests make, kept out of ``gpufleet.store.Ledger`` so the product has
one writer of node state (``services.nodes.lifecycle.NodeLifecycle``), one way to open a
transition (``Ledger.open_transition``) and one region-lock sequence
(``services.infrastructure.region_lock``). Each function takes the ledger it writes to and
does what the ``Ledger`` method of the same name did."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert

from gpufleet.store import Ledger
from gpufleet.store import schema as s
from gpufleet.store.nodes import NodeMove

# --- nodes: a quarantine and a release straight into the node lifecycle's tables -------------


def quarantine(
    ledger: Ledger, cluster: str, pool: str, node: str, reason: str, run_id: str | None = None
) -> bool:
    """Record a quarantine (the node's state ``quarantined``, the reason and run id as
    evidence); False if the node is already quarantined (idempotent)."""
    if any(q["node"] == node for q in ledger.quarantined(cluster)):
        return False
    evidence = {"reason": reason, "run_id": run_id}
    ledger.move_node(
        cluster,
        pool,
        node,
        NodeMove("quarantined", reason=reason, evidence=evidence, run_id=run_id),
    )
    return True


def release(
    ledger: Ledger, cluster: str, node: str, reason: str = "released", **facts: Any
) -> bool:
    """Back in service (the node's state ``released``); False if it was not out of service.
    ``facts`` are ``NodeMove``'s (who, the retest's result, ...)."""
    row = ledger.node_state(cluster, node)
    if row is None or row["state"] == "released":
        return False
    ledger.move_node(cluster, row["pool"], node, NodeMove("released", reason=reason, **facts))
    return True


# --- transitions ------------------------------------------------------------------------------


def start_transition(
    ledger: Ledger,
    cluster: str,
    from_pool: str,
    to_pool: str,
    run_id: str | None = None,
    *,
    step: str | None = None,
    params: dict[str, Any] | None = None,
) -> int:
    """A new running transition inserted as is (no holder, no heartbeat): it takes the
    cluster's lock, IntegrityError when another one runs."""
    with ledger.engine.begin() as conn:
        return int(
            conn.execute(
                insert(s.transitions).values(
                    cluster=cluster,
                    from_pool=from_pool,
                    to_pool=to_pool,
                    state="running",
                    run_id=run_id,
                    started_at=datetime.now(UTC),
                    step=step,
                    params=params,
                )
            ).inserted_primary_key[0]
        )


# --- the region's onboarding lock: ``LeaseLock`` calls on ``Ledger.region_lease`` -------------


def hold_region_lock(
    ledger: Ledger, region: str, dag_id: str, run_id: str, now: datetime | None = None
) -> dict[str, Any]:
    """``LeaseLock.hold`` of the region's lock."""
    return ledger.region_lease(region).hold(dag_id, run_id, now)


def heartbeat_region_lock(ledger: Ledger, region: str, run_id: str, now: datetime) -> bool:
    """``LeaseLock.heartbeat`` of the region's lock."""
    return ledger.region_lease(region).heartbeat(run_id, now)


def take_over_region_lock(
    ledger: Ledger,
    region: str,
    seen: dict[str, Any],
    dag_id: str,
    run_id: str,
    now: datetime | None = None,
) -> bool:
    """``LeaseLock.take_over`` of the region's lock (compare-and-set)."""
    return ledger.region_lease(region).take_over(seen, dag_id, run_id, now)


def unreachable_ledger_connection(password: str) -> dict:
    """An Airflow connection (``AIRFLOW_CONN_GPUFLEET_LEDGER`` JSON) naming a PostgreSQL
    ledger nothing answers for: port 1 refuses at once. ``password`` is what an answer must
    never show."""
    return {
        "conn_type": "postgres",
        "host": "127.0.0.1",
        "port": 1,
        "login": "fleetuser",
        "password": password,
        "schema": "ledger",
    }
