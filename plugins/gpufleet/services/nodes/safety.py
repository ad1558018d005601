"""What stands between a failing node and an automated action on it (docs/remediation.md): the
pool's behaviour profile and the fleet's dry run (held back: recorded as "would have"), the
blast-radius breakers at pool, cluster and fleet scope (held: recorded, a trip recorded once and
kept until a person resets it), and the remediation ladder (which rung a node is given). The
rules are ``domain.remediation``; this reads the ledger and the catalog for them and records
what they decided.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpufleet.domain.fleet import Catalog, PoolRef
from gpufleet.domain.remediation import (
    BreakerVerdict,
    LadderStep,
    RemediationPolicy,
    ScopeCount,
    held_back,
    judge_breakers,
    next_rung,
)
from gpufleet.store import Ledger

FLEET = "fleet"


def fleet_catalog() -> Catalog:
    from gpufleet.config.catalog import load_catalog

    return load_catalog()


@dataclass
class Decision:
    """Whether an action may run now; when not, why (already recorded in the ledger)."""

    proceed: bool
    reason: str | None = None
    kind: str | None = None  # would_have | held


class RemediationGuard:
    """The profile, dry run, breakers and ladder of one pool's nodes."""

    def __init__(self, ref: PoolRef, ledger: Ledger, catalog: Catalog | None = None):
        self.ref = ref
        self.ledger = ledger
        self._catalog = catalog

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = fleet_catalog()
        return self._catalog

    @property
    def policy(self) -> RemediationPolicy:
        return self.catalog.remediation

    @property
    def profile(self) -> str:
        return self.ref.pool.profile

    # --- profile and dry run ----------------------------------------------------------------

    def held_back(
        self,
        node: str,
        action: str,
        run_id: str | None,
        *,
        detail: str = "",
        once_since: datetime | None = None,
    ) -> Decision:
        """``action`` on ``node`` held back by the fleet's dry run or the pool's profile:
        recorded as "would have" (once per ``once_since``)."""
        why = held_back(action, self.profile, self.policy.dry_run)
        if why is None:
            return Decision(True)
        reason = f"would have: {action}{f' ({detail})' if detail else ''}: {why}"
        self.ledger.record_hold(
            self.ref.cluster.name,
            self.ref.pool.name,
            node,
            action,
            "would_have",
            reason,
            run_id=run_id,
            once_since=once_since,
        )
        return Decision(False, reason, "would_have")

    # --- breakers ---------------------------------------------------------------------------

    def _scopes(self) -> list[tuple[str, str, int, str | None]]:
        """(scope, key, its nodes in the catalog, the pool or None)."""
        cluster, pool = self.ref.cluster, self.ref.pool
        fleet_nodes = sum(r.pool.nodes for r in self.catalog.pools() if not r.pool.planned)
        return [
            ("pool", self.ref.key, pool.nodes, pool.name),
            ("cluster", cluster.name, sum(p.nodes for p in cluster.active_pools), None),
            ("fleet", FLEET, fleet_nodes, None),
        ]

    def counts(self) -> list[ScopeCount]:
        """Each scope's nodes out of service (their incident begun since the breaker's last
        reset) or acted on in the breaker window (and since its last reset)."""
        now = self.ledger.clock.now()
        window_start = now - self.policy.breaker_window
        rows = self.ledger.affected_nodes(window_start)
        out = []
        for scope, key, nodes, pool in self._scopes():
            reset = self.ledger.last_breaker_reset(scope, key)
            since = max(window_start, reset) if reset else window_start
            affected = sum(
                1
                for r in rows
                if _in_scope(r, scope, self.ref.cluster.name, pool)
                and (
                    (r["out"] and (reset is None or r["left_at"] is None or r["left_at"] > reset))
                    or (r["acted_at"] is not None and r["acted_at"] >= since)
                )
            )
            out.append(ScopeCount(scope, key, nodes, affected))
        return out

    def breakers(self, node: str, action: str, run_id: str | None) -> Decision:
        """Whether the breakers let ``action`` on ``node`` proceed; a new trip is recorded
        once, and the held action recorded once per trip."""
        tripped = {(r["scope"], r["key"]): r["reason"] for r in self.ledger.tripped_breakers()}
        verdict: BreakerVerdict = judge_breakers(self.counts(), self.policy, tripped)
        if verdict.proceed:
            return Decision(True)
        trip = verdict.trip
        assert trip is not None and verdict.reason is not None
        row = self.ledger.trip_breaker(
            trip.scope,
            trip.key,
            reason=trip.reason,
            affected=trip.affected,
            limit=trip.limit,
            run_id=run_id,
        )
        self.ledger.record_hold(
            self.ref.cluster.name,
            self.ref.pool.name,
            node,
            action,
            "held",
            verdict.reason,
            run_id=run_id,
            once_since=row["tripped_at"],
        )
        return Decision(False, verdict.reason, "held")

    # --- the ladder -------------------------------------------------------------------------

    def rung(self, node: str, health: dict[str, Any] | None) -> LadderStep:
        """The rung for ``node`` now, from its lifecycle history and the GPU health check that
        failed it (NVIDIA's action and words)."""
        health = health or {}
        events = self.ledger.node_history(self.ref.cluster.name, node)
        return next_rung(
            events,
            health.get("action"),
            self.ledger.clock.now(),
            self.policy,
            nvidia=health.get("reason"),
        )


def _in_scope(row: dict[str, Any], scope: str, cluster: str, pool: str | None) -> bool:
    if scope == "fleet":
        return True
    if scope == "cluster":
        return row["cluster"] == cluster
    return row["cluster"] == cluster and row["pool"] == pool
