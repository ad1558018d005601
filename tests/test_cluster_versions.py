"""v17: each cluster's ledger version (``gf_cluster_versions``) moves with every write a
fleet-wide read depends on, whoever writes it, and with nothing else: what the api-server's
fleet cache (``services.views.fleet_cache``) trusts to re-read only the clusters that changed."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import text

from gpufleet.store import Ledger
from gpufleet.store.schema_versions import FLEET
from tests.store.test_ledger import ledger_url  # noqa: F401  (fixture: SQLite and PostgreSQL)
from tests.support.ledger_helpers import quarantine, start_transition

NOW = datetime(2026, 12, 3, 2, 0, tzinfo=UTC)
COUNTS = {"nodes": 2, "ready": 2, "free": 2, "quarantined": 0, "busy": 0}


def test_each_write_moves_its_clusters_version_and_only_its(ledger_url):  # noqa: F811
    ledger = Ledger(ledger_url)
    at = NOW.replace(tzinfo=None) if ledger_url.startswith("sqlite") else NOW
    seen = ledger.cluster_versions()

    def moved() -> set[str]:
        nonlocal seen
        now = ledger.cluster_versions()
        out = {c for c in set(now) | set(seen) if now.get(c, 0) != seen.get(c, 0)}
        assert all(now.get(c, 0) > seen.get(c, 0) for c in out)  # versions only grow
        seen = now
        return out

    def sql(statement: str, **params) -> None:
        with ledger.engine.begin() as conn:
            conn.execute(text(statement), params)

    vid = ledger.record_validation(
        run_id="r1", cluster="c", pool="p", kind="fabric", passed=True, started_at=NOW,
        finished_at=NOW,
    )  # fmt: skip
    assert moved() == {"c"}
    ledger.set_pool_state("d", "p", "validated")
    assert moved() == {"d"}
    quarantine(ledger, "c", "p", "n1", "bad link", run_id="r1")  # node state + event
    assert moved() == {"c"}
    ledger.record_node_snapshot("e", "p", COUNTS, [], source="fabric", run_id="r1")
    assert moved() == {"e"}
    tid = start_transition(ledger, "c", "p", "p2", "r2")
    assert moved() == {"c"}
    assert ledger.heartbeat_transition(tid, "r2", "reservation_transition", NOW)
    assert moved() == set()  # a lease's heartbeat changes nothing a page shows
    ledger.update_transition(tid, step="drain")
    assert moved() == {"c"}
    ledger.set_region_state("us-central1", "onboarding")
    assert moved() == {FLEET}
    # rows written, moved and deleted by hand (a migration, an operator's fix)
    sql("UPDATE gf_validations SET cluster = 'f' WHERE id = :id", id=vid)
    assert moved() == {"c", "f"}
    sql("UPDATE gf_node_states SET reason = 'by hand' WHERE node = 'n1'")
    assert moved() == {"c"}
    sql("DELETE FROM gf_node_snapshots WHERE cluster = 'e'")
    assert moved() == {"e"}
    sql(
        "INSERT INTO gf_pool_state (cluster, pool, state, updated_at) VALUES ('g', 'p', "
        "'validated', :at)",
        at=at,
    )
    assert moved() == {"g"}
    # writes no fleet read depends on move nothing
    ledger.record_onboarding_action(
        "us-central1", "r3", "preflight", {"kind": "network", "name": "n", "action": "exists"}
    )
    assert moved() == set()


def test_a_write_rolled_back_moves_nothing(ledger_url):  # noqa: F811
    """The version moves in the writer's own transaction: a reader never sees a version whose
    rows it cannot see, and a write that never commits leaves the version as it was."""
    ledger = Ledger(ledger_url)
    ledger.set_pool_state("c", "p", "validated")
    before = ledger.cluster_versions()
    conn = ledger.engine.connect()
    trans = conn.begin()
    conn.execute(text("UPDATE gf_pool_state SET state = 'drifting' WHERE cluster = 'c'"))
    assert ledger.cluster_versions() == before  # another connection: not committed yet
    trans.rollback()
    conn.close()
    assert ledger.cluster_versions() == before
