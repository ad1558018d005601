"""A repair that would take a pool below its floor (``min_serving_nodes``) waits for a person
(docs/remediation.md#approvals), on the simulated fleet night after night through the real
services (``tests.support.fleet.lifecycle_night``), then what the answer leads to
(``services.nodes.approvals.settle_approvals``, the ``remediation_approvals`` DAG's last task)."""

from __future__ import annotations

import pytest
import yaml

from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.services.nodes.approvals import settle_approvals
from gpufleet.store import Ledger
from tests.support.fleet import ROOT, lifecycle_night

CLUSTER, POOL = "a3u-sim", "h200-a"  # 6 nodes
BAD = f"{CLUSTER}-{POOL}-3"


def state(node: str = BAD) -> str | None:
    row = Ledger().node_state(CLUSTER, node)
    return row["state"] if row else None


def repairs(node: str = BAD) -> list[str]:
    return [
        e["evidence"]["rung"]
        for e in Ledger().node_history(CLUSTER, node)
        if e["to_state"] == "repairing"
    ]


def requests() -> list[dict]:
    return Ledger().approvals(kind="repair_below_floor")


@pytest.fixture
def floor(fleet_state, tmp_path, monkeypatch):
    """h200-a's floor at its 6 nodes: repairing any one takes it below."""
    data = yaml.safe_load((ROOT / "include" / "fleet" / "sim.yaml").read_text())
    data["regions"][0]["clusters"][0]["node_pools"][0]["min_serving_nodes"] = 6
    (tmp_path / "sim.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setenv("GPUFLEET_CATALOG_DIR", str(tmp_path))
    assert load_catalog().pool(CLUSTER, POOL).pool.min_serving_nodes == 6


def failed_retests(nights: range) -> None:
    SimState().inject(CLUSTER, POOL, f"xid:{BAD}:79")  # NVIDIA: reboot
    for n in nights:
        lifecycle_night(CLUSTER, POOL, n)


def test_a_repair_below_the_floor_waits_for_a_persons_approval(floor):
    failed_retests(range(1, 4))  # quarantined, then two failed retests
    assert state() == "retesting" and repairs() == []  # kept out, never drained nor rebooted
    (request,) = requests()  # asked once, though it failed twice
    assert (request["key"], request["state"]) == (f"{CLUSTER}/{POOL}/{BAD}", "pending")
    assert "below the pool's floor of 6" in request["subject"]
    assert "waits for a person's approval" in Ledger().node_state(CLUSTER, BAD)["reason"]

    Ledger().answer_approval(request["id"], ["Approve"], "alice")
    settled = settle_approvals(Ledger(), load_catalog(), "approvals-1")
    assert settled.notes[0].endswith(
        "sent to repair (draining): the next remediation pass drains and repairs it"
    )
    assert state() == "draining"
    lifecycle_night(CLUSTER, POOL, 4)
    assert repairs() == ["reboot"]
    done = Ledger().approval(request["id"])
    assert (done["state"], done["answered_by"]) == ("done", "alice")
    assert settle_approvals(Ledger(), load_catalog(), "approvals-2").notes == []  # acted once


def test_a_rejected_or_unanswered_repair_leaves_the_node_out_and_is_not_asked_again(floor):
    failed_retests(range(1, 3))
    (request,) = requests()
    Ledger().answer_approval(request["id"], ["Reject"], None)  # nobody answered: the default
    settled = settle_approvals(Ledger(), load_catalog(), "approvals-1")
    assert "nobody answered" in settled.notes[0] and "stays out of service" in settled.notes[0]
    lifecycle_night(CLUSTER, POOL, 3)  # fails its retest again, within the ladder's window
    assert state() == "retesting" and repairs() == []
    assert [r["id"] for r in requests()] == [request["id"]]  # not asked again
    assert Ledger().approval(request["id"])["outcome"].startswith("not repaired")


def test_without_a_floor_the_repair_does_not_wait(fleet_state):
    failed_retests(range(1, 3))
    assert repairs() == ["reboot"] and requests() == []
