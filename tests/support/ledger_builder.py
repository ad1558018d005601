"""Nights written into a ledger the way the validations write them, for the read paths' tests
(pages, ``/metrics``, ``gpufleet status``, the report): which pools a run validated, each
pool's verdicts (fabric, storage, health), its state, its quarantined nodes and the node
snapshot each validation leaves.

    night = LedgerBuilder(ledger).night("night-1", started_at=now - timedelta(minutes=20))
    night.pool("a3u-sim", "h200-a").fabric(True, transport="gib", busbw_gbps=351.5).state(
        "validated", "every pair passed"
    )
    night.pool("a3u-sim", "h200-b").fabric(False, transport="socket").quarantine(
        "a3u-sim-h200-b-3", "NIC down"
    )
    night.nodes()  # each pool's node snapshot, as its validation leaves it

Every call writes at once, in the order the test makes it, through the ledger's own writers
(``Ledger.record_validation``, ``Ledger.set_pool_state``, ``ledger_helpers.quarantine``) and
returns the builder, so calls chain. A verdict's figures are the ledger's own column names
(``busbw_gbps``, ``read_mb_s``, ``details``, ``pairs``, ...), passed through unchanged: the
builder fills in only what the night already says (run id, cluster, pool, kind, times).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpufleet.store import Ledger
from tests.support.ledger_helpers import quarantine


class LedgerBuilder:
    """Nights (and what is not a night's: gate decisions) written into ``ledger``."""

    def __init__(self, ledger: Ledger | None = None) -> None:
        self.ledger = ledger if ledger is not None else Ledger()

    def night(
        self,
        run_id: str,
        *,
        started_at: datetime | None = None,
        finished_at: datetime | None = None,
    ) -> Night:
        """One run's validations: each starts at ``started_at`` (default now) and finishes at
        ``finished_at`` (default: when it is written, as the ledger records it)."""
        return Night(self.ledger, run_id, started_at or datetime.now(UTC), finished_at)

    def gate_decision(self, **decision: Any) -> LedgerBuilder:
        """``Ledger.record_gate_decision`` as is."""
        self.ledger.record_gate_decision(**decision)
        return self


@dataclass
class Night:
    ledger: Ledger
    run_id: str
    started_at: datetime
    finished_at: datetime | None = None
    pools: dict[tuple[str, str], PoolNight] = field(default_factory=dict)

    def pool(self, cluster: str, pool: str) -> PoolNight:
        """The pool's part of this night (the same object each time it is asked for)."""
        key = (cluster, pool)
        if key not in self.pools:
            self.pools[key] = PoolNight(self, cluster, pool)
        return self.pools[key]

    def nodes(self) -> Night:
        """Each pool's node snapshot from the sim, as this night's validations leave it (the
        read paths read nodes from the ledger only), in the order the pools were named."""
        from tests.support.fleet import snapshot

        for cluster, pool in self.pools:
            snapshot(cluster, pool, run_id=self.run_id)
        return self


@dataclass
class PoolNight:
    night: Night
    cluster: str
    pool: str
    validation_ids: list[int] = field(default_factory=list)

    def verdict(self, kind: str, passed: bool, **fields: Any) -> PoolNight:
        """One ``kind`` verdict of this pool in this night; ``fields`` are
        ``Ledger.record_validation``'s (``started_at``/``finished_at`` override the night's)."""
        times = {"started_at": self.night.started_at, "finished_at": self.night.finished_at}
        vid = self.night.ledger.record_validation(
            **{**times, **fields},
            run_id=self.night.run_id,
            cluster=self.cluster,
            pool=self.pool,
            kind=kind,
            passed=passed,
        )
        self.validation_ids.append(vid)
        return self

    def fabric(self, passed: bool, **fields: Any) -> PoolNight:
        return self.verdict("fabric", passed, **fields)

    def storage(self, passed: bool, **fields: Any) -> PoolNight:
        return self.verdict("storage", passed, **fields)

    def health(self, passed: bool, **fields: Any) -> PoolNight:
        return self.verdict("health", passed, **fields)

    def state(self, state: str, reason: str | None = None, run_id: str | None = None) -> PoolNight:
        """The pool's lifecycle state as this night (or ``run_id``) leaves it."""
        self.night.ledger.set_pool_state(
            self.cluster, self.pool, state, reason, run_id or self.night.run_id
        )
        return self

    def quarantine(self, node: str, reason: str, run_id: str | None = None) -> PoolNight:
        """``node`` quarantined by this night (or by ``run_id``)."""
        quarantine(
            self.night.ledger, self.cluster, self.pool, node, reason, run_id or self.night.run_id
        )
        return self

    def nodes(self, run_id: str | None = None) -> PoolNight:
        """This pool's node snapshot (see ``Night.nodes``)."""
        from tests.support.fleet import snapshot

        snapshot(self.cluster, self.pool, run_id=run_id or self.night.run_id)
        return self
