"""The remediation ladder, the blast-radius breakers and the behaviour profiles on the simulated
fleet, night after night, through the real services (``tests.support.fleet.lifecycle_night``:
the fabric validation with its GPU health check and retests, then the remediation pass).
Each test fails when its rule is broken (docs/remediation.md)."""

from __future__ import annotations

import pytest
import yaml

from gpufleet.backends import cluster_backend
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.nodes import NodeState
from gpufleet.services.nodes.lifecycle import NodeLifecycle
from gpufleet.store import Ledger
from tests.support.fleet import ROOT, lifecycle_night

CLUSTER, POOL = "a3u-sim", "h200-a"
BAD = f"{CLUSTER}-{POOL}-3"


def state(node: str) -> str | None:
    row = Ledger().node_state(CLUSTER, node)
    return row["state"] if row else None


def rungs(node: str) -> list[str]:
    """The rungs the node was given, in order (its moves to ``repairing``)."""
    history = Ledger().node_history(CLUSTER, node)
    return [e["evidence"]["rung"] for e in history if e["to_state"] == "repairing"]


def reboots(node: str) -> int:
    history = Ledger().node_history(CLUSTER, node)
    return sum(
        1 for e in history if e["to_state"] == "repairing" and e["evidence"]["kind"] == "reboot"
    )


def nodes(pool: str = POOL) -> dict:
    return {n.name: n for n in cluster_backend(load_catalog().cluster(CLUSTER)).list_nodes(pool)}


@pytest.fixture
def catalog(fleet_state, tmp_path, monkeypatch):
    """A writable copy of the shipped sim catalog: ``edit(fn)`` changes its data."""

    def edit(change) -> None:
        data = yaml.safe_load((ROOT / "include" / "fleet" / "sim.yaml").read_text())
        change(data)
        folder = tmp_path / "catalog"
        folder.mkdir(exist_ok=True)
        (folder / "sim.yaml").write_text(yaml.safe_dump(data))
        monkeypatch.setenv("GPUFLEET_CATALOG_DIR", str(folder))

    return edit


def _pool(data: dict) -> dict:
    return data["regions"][0]["clusters"][0]["node_pools"][0]


def test_three_incidents_in_a_week_reach_a_person_after_at_most_two_reboots(fleet_state):
    """Xid 79 (NVIDIA: reboot) comes back after each fix: the first incident is rebooted, the
    second climbs to the provider's repair, the third goes to a person with NVIDIA's words;
    never a third reboot."""
    night = 0
    for _ in range(3):
        SimState().inject(CLUSTER, POOL, f"xid:{BAD}:79")
        for _ in range(3):  # quarantine; retest, drain and act (or hand over); retest again
            night += 1
            lifecycle_night(CLUSTER, POOL, night)
            if state(BAD) in (NodeState.RELEASED, NodeState.NEEDS_HUMAN):
                break
    assert state(BAD) == NodeState.NEEDS_HUMAN
    assert rungs(BAD) == ["reboot", "repair"]
    assert reboots(BAD) <= 2
    row = Ledger().node_state(CLUSTER, BAD)
    assert "Xid 79" in row["reason"] and "remediation ladder" in row["reason"]


@pytest.fixture
def ten_nodes(catalog):
    """h200-a at 10 nodes (its reservation too): 3 bad nodes are 30% of the pool."""

    def change(data):
        data["regions"][0]["reservations"][0]["count"] = 10
        _pool(data)["nodes"] = 10

    catalog(change)


def test_a_30_percent_fault_trips_the_pool_breaker_and_no_action_passes_it(ten_nodes):
    """A roll-out fault hits 3 of 10 nodes at once (the event path quarantines each as its
    signal arrives): the pool breaker (max(2, 20%) = 2) trips, nothing is drained, rebooted or
    repaired night after night, until a person resets it (recorded: who, when, why)."""
    bad = [f"{CLUSTER}-{POOL}-{i}" for i in (1, 4, 7)]
    ref = load_catalog().pool(CLUSTER, POOL)
    lifecycle = NodeLifecycle(ref, Ledger())
    for node in bad:
        SimState().inject(CLUSTER, POOL, f"xid:{node}:79")
        lifecycle.quarantine(node, "GPU health: reboot: Xid 79", {"event": True}, run_id="events")
    for n in (1, 2, 3):
        result = lifecycle_night(CLUSTER, POOL, n)["remediation"]
        assert result.repairs_started == []
        assert all(state(node) == NodeState.DRAINING for node in bad)
        assert not any(nodes()[node].unschedulable for node in bad)  # not even cordoned
        assert set(result.held) == set(bad)
        assert all("pool breaker a3u-sim/h200-a" in why for why in result.held.values())
    tripped = Ledger().tripped_breakers()
    assert [(t["scope"], t["key"], t["affected"], t["limit_nodes"]) for t in tripped] == [
        ("pool", f"{CLUSTER}/{POOL}", 3, 2)
    ]
    holds = Ledger().remediation_holds(CLUSTER, kind="held")
    assert {h["node"] for h in holds} == set(bad) and {h["action"] for h in holds} == {"drain"}

    row = Ledger().reset_breaker("pool", f"{CLUSTER}/{POOL}", "alice", "driver rolled back")
    assert row["reset_by"] == "alice" and row["reset_at"] is not None
    assert Ledger().tripped_breakers() == []
    after = lifecycle_night(CLUSTER, POOL, 4)["remediation"]
    assert after.held == {}  # what was out before the reset no longer counts
    assert not any(state(node) == NodeState.DRAINING for node in bad)


def test_an_observe_pool_records_would_have_and_changes_nothing(catalog):
    catalog(lambda data: _pool(data).update(profile="observe"))
    SimState().inject(CLUSTER, POOL, f"xid:{BAD}:79")
    before = {n: (i.taints, i.labels, i.unschedulable) for n, i in nodes().items()}
    for n in (1, 2):
        lifecycle_night(CLUSTER, POOL, n)
    assert state(BAD) is None  # never taken out of service
    assert {n: (i.taints, i.labels, i.unschedulable) for n, i in nodes().items()} == before
    holds = Ledger().remediation_holds(CLUSTER, node=BAD)
    assert holds and {h["kind"] for h in holds} == {"would_have"}
    assert {h["action"] for h in holds} == {"quarantine"}
    assert "profile is observe" in holds[0]["reason"] and "Xid 79" in holds[0]["reason"]


def test_the_dry_run_records_would_have_and_changes_nothing(catalog):
    catalog(lambda data: data.update(remediation={"dry_run": True}))
    SimState().inject(CLUSTER, POOL, f"xid:{BAD}:79")
    before = {n: (i.taints, i.labels, i.unschedulable) for n, i in nodes().items()}
    lifecycle_night(CLUSTER, POOL, 1)
    assert state(BAD) is None
    assert {n: (i.taints, i.labels, i.unschedulable) for n, i in nodes().items()} == before
    holds = Ledger().remediation_holds(CLUSTER, node=BAD, kind="would_have")
    assert holds and "dry run" in holds[0]["reason"]


def test_a_quarantine_pool_quarantines_but_never_drains_or_reboots(catalog):
    catalog(lambda data: _pool(data).update(profile="quarantine"))
    SimState().inject(CLUSTER, POOL, f"xid:{BAD}:79")
    lifecycle_night(CLUSTER, POOL, 1)
    assert state(BAD) == NodeState.QUARANTINED
    for n in (2, 3):
        result = lifecycle_night(CLUSTER, POOL, n)["remediation"]
        assert result.repairs_started == [] and BAD in result.held
    assert state(BAD) == NodeState.DRAINING and not nodes()[BAD].unschedulable
    holds = Ledger().remediation_holds(CLUSTER, node=BAD, kind="would_have")
    assert [h["action"] for h in holds] == ["drain"]  # once, not once a night
