"""The nightly by topology scope (issue 19 item 2), on the simulated fleet through the real
services, night after night with the node lifecycle: pass 1 pairs inside each sub-block and
across them, a bad sub-block uplink is told from a bad node and taken out as a unit (never
drained or repaired for it), retested with its rack and released when it crosses fine again; a
slow block fails and pages the pool without taking anything out."""

from __future__ import annotations

import pytest
import yaml

from gpufleet.backends.sim.cloud import SimCloudBackend
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.topology import ACROSS, ACROSS_BLOCKS, INSIDE
from gpufleet.services.nodes.approvals import settle_approvals
from gpufleet.store import Ledger
from tests.support.fleet import ROOT, lifecycle_night, validate

CLUSTER = "a3u-sim"
RACKED = "h200-a"  # 12 nodes in block-1: sub-blocks block-1-sb1, -sb2, -sb3 of 4
BLOCKS = "h200-b"  # 16 nodes, no block named: res-a3u-b-b1 and -b2, two sub-blocks of 4 each
SB2 = [f"{CLUSTER}-{RACKED}-{i}" for i in range(4, 8)]


@pytest.fixture
def twelve_node_pools(fleet_state, tmp_path, monkeypatch):
    data = yaml.safe_load((ROOT / "include" / "fleet" / "sim.yaml").read_text())
    region = data["regions"][0]
    for reservation, pool, nodes in zip(
        region["reservations"][:2], region["clusters"][0]["node_pools"][:2], (12, 16), strict=True
    ):
        reservation["count"] = pool["nodes"] = nodes
        # every node's GPU health each night, so pass 1 pairs by scope and name alone (the
        # rotation pairs the nodes due tonight together: its own tests)
        pool["level1_every_nights"] = 1
    (tmp_path / "sim.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setenv("GPUFLEET_CATALOG_DIR", str(tmp_path))
    return tmp_path


def states(pool: str) -> dict[str, str]:
    return {r["node"]: r["state"] for r in Ledger().node_states(CLUSTER, pool, None)}


def fabric(pool: str, run_id: str) -> dict:
    row = Ledger().latest_validation(CLUSTER, pool, "fabric")
    assert row["run_id"] == run_id
    return row


def test_pass_1_covers_every_scope_at_a_flat_plans_cost(twelve_node_pools):
    night = lifecycle_night(CLUSTER, RACKED, 1)
    assert night["summary"]["passed"]
    row = fabric(RACKED, "night-1")
    pass1 = [p for p in Ledger().pairs(row["id"]) if p["pass_no"] == 1]
    assert len(pass1) == 6  # 12 nodes, each in one pair
    assert row["details"]["scopes"] == {
        INSIDE: {"pairs": 3, "failed": 0},
        ACROSS: {"pairs": 3, "failed": 0},  # each sub-block's uplink crossed twice in a ring
    }
    assert row["details"]["bad_subblocks"] == {} and row["details"]["slow_blocks"] == {}


def test_a_bad_uplink_takes_its_sub_block_out_as_a_unit_and_back_when_it_heals(
    twelve_node_pools,
):
    sim = SimState()
    sim.inject(CLUSTER, RACKED, "subblock-down:block-1-sb2", scope="rack")
    first = lifecycle_night(CLUSTER, RACKED, 1)
    summary = first["summary"]
    assert summary["passed"], summary["reasons"]
    assert summary["quarantined"] == []  # no node blamed for the rack
    assert states(RACKED) == {n: "quarantined" for n in SB2}
    row = fabric(RACKED, "night-1")
    assert list(row["details"]["bad_subblocks"]) == ["block-1/block-1-sb2"]
    assert row["details"]["scopes"][ACROSS]["failed"] == 2
    assert any(
        r.startswith("sub-block block-1/block-1-sb2 taken out as a unit") for r in row["reasons"]
    )
    evidence = Ledger().node_state(CLUSTER, SB2[0])["evidence"]
    assert evidence["subblock"] == "block-1/block-1-sb2"
    # not reported to the provider (it disrupts every VM on the rack) until a person approves
    (request,) = Ledger().approvals(kind="report_subblock")
    assert (request["key"], request["state"]) == (
        f"{CLUSTER}/{RACKED}/block-1/block-1-sb2",
        "pending",
    )
    assert (
        "sub-block block-1/block-1-sb2 not reported to the provider: it disrupts every VM on the "
        f"rack, so it waits for a person's approval (request #{request['id']})"
    ) in row["reasons"]
    cloud = SimCloudBackend(load_catalog().cluster(CLUSTER))
    assert cloud.subblock_reports(RACKED) == []
    view = {h["key"]: h["status"] for h in row["details"]["provider_subblocks"]}  # its own view
    assert view == {
        "block-1/block-1-sb1": "HEALTHY",
        "block-1/block-1-sb2": "DEGRADED",
        "block-1/block-1-sb3": "HEALTHY",
    }
    # approved (as the remediation_approvals DAG's approval task records it): reported once
    Ledger().answer_approval(request["id"], ["Approve"], "alice")
    settled = settle_approvals(Ledger(), load_catalog(), "approvals-1")
    assert settled.notes == [
        f"#{request['id']} report_subblock {request['key']} (approved by alice at "
        f"{Ledger().approval(request['id'])['answered_at']:%Y-%m-%d %H:%M} UTC): reported to "
        "the provider (created)"
    ]
    assert [r["key"] for r in cloud.subblock_reports(RACKED)] == ["block-1/block-1-sb2"]
    assert settle_approvals(Ledger(), load_catalog(), "approvals-2").notes == []  # done once
    assert Ledger().approval(request["id"])["state"] == "done"

    second = lifecycle_night(CLUSTER, RACKED, 2)  # still down: kept out, never drained
    assert states(RACKED) == {n: "retesting" for n in SB2}
    assert second["remediation"].repairs_started == []
    assert all("kept out" in Ledger().node_state(CLUSTER, n)["reason"] for n in SB2)

    sim.clear(scope="rack")  # the uplink is fixed
    lifecycle_night(CLUSTER, RACKED, 3)
    assert set(states(RACKED).values()) == {"released"}
    for node in SB2:
        moves = [e["to_state"] for e in Ledger().node_history(CLUSTER, node)]
        assert moves == ["quarantined", "retesting", "retesting", "released"]


def test_a_bad_node_inside_a_sub_block_is_the_nodes_not_the_racks(twelve_node_pools):
    bad = SB2[1]
    SimState().inject(CLUSTER, RACKED, f"bad-node:{bad}:nic", scope="node")
    night = lifecycle_night(CLUSTER, RACKED, 1)
    assert night["summary"]["quarantined"] == [bad]
    assert states(RACKED) == {bad: "quarantined"}
    assert fabric(RACKED, "night-1")["details"]["bad_subblocks"] == {}


def test_a_slow_block_fails_and_pages_the_pool_taking_nothing_out(twelve_node_pools):
    """Two blocks of two sub-blocks: every pair between them fails while each block's own
    crossings pass. With two blocks the pairs cannot say which spine is at fault (a block of
    one sub-block would read as that sub-block's uplink): nothing is taken out, a person is
    paged."""
    SimState().inject(CLUSTER, BLOCKS, "block-slow:res-a3u-b-b2", scope="block")
    night = lifecycle_night(CLUSTER, BLOCKS, 1)
    summary = night["summary"]
    assert not summary["passed"] and summary["page"] and summary["state"] == "degraded"
    assert states(BLOCKS) == {}
    row = fabric(BLOCKS, "night-1")
    assert row["details"]["scopes"][ACROSS_BLOCKS]["failed"] >= 1
    assert list(row["details"]["slow_blocks"]) == ["res-a3u-b-b1+res-a3u-b-b2"]
    assert any("a job across blocks would run slow" in r for r in summary["reasons"])


def test_a_bad_node_and_a_bad_uplink_the_same_night_blame_no_good_node(twelve_node_pools):
    """A bad node in a pair crossing into the bad sub-block's neighbour leaves the scopes
    unsure that night (a neighbour's crossing failed too): the bad node alone is taken out, no
    good node with it, and the next night, the node out, the rack is found and taken out."""
    bad = f"{CLUSTER}-{RACKED}-1"
    sim = SimState()
    sim.inject(CLUSTER, RACKED, "subblock-down:block-1-sb2", scope="rack")
    sim.inject(CLUSTER, RACKED, f"bad-node:{bad}:nic", scope="node")
    first = lifecycle_night(CLUSTER, RACKED, 1)
    assert first["summary"]["quarantined"] == [bad]
    assert states(RACKED) == {bad: "quarantined"}
    lifecycle_night(CLUSTER, RACKED, 2)
    assert {n: s for n, s in states(RACKED).items() if n != bad} == {n: "quarantined" for n in SB2}
    assert list(fabric(RACKED, "night-2")["details"]["bad_subblocks"]) == ["block-1/block-1-sb2"]


def test_a_retested_node_is_never_partnered_across_a_bad_uplink(twelve_node_pools):
    """Night 1 quarantines a bad node; its fault is fixed, and the first rack goes down (its
    nodes come first among known-good partners by name). Night 2 retests the node against
    partners that are not in the bad sub-block (a pair crossing the bad uplink would fail it
    for the rack's fault): it is released, the rack taken out."""
    bad = f"{CLUSTER}-{RACKED}-9"
    sb1 = [f"{CLUSTER}-{RACKED}-{i}" for i in range(4)]
    sim = SimState()
    sim.inject(CLUSTER, RACKED, f"bad-node:{bad}:nic", scope="node")
    lifecycle_night(CLUSTER, RACKED, 1)
    assert states(RACKED) == {bad: "quarantined"}
    sim.clear(scope="node")
    sim.inject(CLUSTER, RACKED, "subblock-down:block-1-sb1", scope="rack")
    lifecycle_night(CLUSTER, RACKED, 2)
    row = fabric(RACKED, "night-2")
    partners = [{p["node_a"], p["node_b"]} for p in Ledger().pairs(row["id"]) if p["pass_no"] == 2]
    assert partners and all(not pair & set(sb1) for pair in partners)
    assert states(RACKED)[bad] == "released"
    assert {n: s for n, s in states(RACKED).items() if n != bad} == {n: "quarantined" for n in sb1}


def test_a_bad_rack_a_job_runs_on_is_not_reported_until_the_job_is_gone(twelve_node_pools):
    """GKE's reportFaulty disrupts every VM of the sub-block at once: a rack with a job on it
    is taken out (NoSchedule: the job runs on) but not reported yet."""
    from gpufleet.backends import cluster_backend
    from gpufleet.manifests.training import TrainingJobSpec, render_training_job

    ref = load_catalog().pool(CLUSTER, RACKED)
    backend = cluster_backend(ref.cluster)
    spec = TrainingJobSpec(
        name="busy-job",
        namespace="ml",
        image="example/train:1",
        command=["torchrun", "t.py"],
        nodes=2,
        gpus_per_node=8,
    )
    backend.apply(render_training_job(ref, spec))
    busy = sorted(n.name for n in backend.list_nodes(RACKED) if n.workloads)
    rack = {
        n.labels["cloud.google.com/gce-topology-subblock"]
        for n in backend.list_nodes(RACKED)
        if n.name == busy[0]
    }.pop()
    SimState().inject(CLUSTER, RACKED, f"subblock-down:{rack}", scope="rack")
    lifecycle_night(CLUSTER, RACKED, 1)
    row = fabric(RACKED, "night-1")
    assert list(row["details"]["bad_subblocks"]) == [f"block-1/{rack}"]
    (request,) = Ledger().approvals(kind="report_subblock")
    Ledger().answer_approval(request["id"], ["Approve"], "alice")
    settled = settle_approvals(Ledger(), load_catalog(), "approvals-1")
    assert settled.notes[0].endswith("waits: jobs run on the sub-block"), settled.notes
    assert Ledger().approval(request["id"])["state"] == "approved"  # a later pass reports it
    assert SimCloudBackend(ref.cluster).subblock_reports(RACKED) == []


def test_the_pool_page_shows_each_rack_ours_beside_the_providers(twelve_node_pools):
    """Read from the fabric row only: our verdict per sub-block and the provider's status."""
    from gpufleet.airflow.ui.pages import pool_page
    from gpufleet.services.views.pool import pool_view

    SimState().inject(CLUSTER, RACKED, "subblock-down:block-1-sb2", scope="rack")
    lifecycle_night(CLUSTER, RACKED, 1)
    view = pool_view(load_catalog(), Ledger(), CLUSTER, RACKED)
    racks = {s["key"]: (s["ours"] is not None, s["status"]) for s in view["racks"]["subblocks"]}
    assert racks == {
        "block-1/block-1-sb1": (False, "HEALTHY"),
        "block-1/block-1-sb2": (True, "DEGRADED"),
        "block-1/block-1-sb3": (False, "HEALTHY"),
    }
    html = pool_page(view)
    assert 'data-subblock="block-1/block-1-sb2" data-ours="bad" data-provider="DEGRADED"' in html
    assert 'data-subblock="block-1/block-1-sb1" data-ours="ok" data-provider="HEALTHY"' in html
    assert "cross-subblock 3 pair(s), 2 failed" in html


def test_a_bad_sub_blocks_new_nodes_keep_the_unvalidated_taint_when_their_pool_passes(
    twelve_node_pools,
):
    """New nodes come up tainted ``unvalidated``; one sub-block's uplink is down. The pool's
    verdict passes (fabric and storage) on the nodes in service: those lose the taint, while
    the sub-block taken out as a unit keeps it: its nodes were judged apart from the pass (its
    pairs crossing the bad uplink failed; no pair of theirs proved them), so they are not
    ``passed_nodes`` (``fabric_verdict``; released by ``new_nodes.release_new_nodes``). Once the
    uplink is fixed and the rack back in service, a passing run releases them too."""
    from gpufleet.backends import cluster_backend
    from gpufleet.backends.base import Taint
    from gpufleet.domain.workloads import UNVALIDATED_KEY

    ref = load_catalog().pool(CLUSTER, RACKED)
    assert ref.filesystem  # the pool's verdict is fabric and storage
    kube = cluster_backend(ref.cluster)
    names = sorted(n.name for n in kube.list_nodes(RACKED))
    for name in names:
        kube.add_taint(name, Taint(UNVALIDATED_KEY, "true", "NoSchedule"))
    SimState().inject(CLUSTER, RACKED, "subblock-down:block-1-sb2", scope="rack")

    summary = validate(CLUSTER, RACKED, run_id="onb-1")
    assert summary["passed"] and summary["storage"]["passed"], summary["reasons"]
    assert states(RACKED) == {n: "quarantined" for n in SB2}
    tainted = sorted(n.name for n in kube.list_nodes(RACKED) if n.unvalidated)
    assert tainted == SB2
    row = fabric(RACKED, "onb-1")
    assert list(row["details"]["bad_subblocks"]) == ["block-1/block-1-sb2"]
    assert row["details"]["passed_nodes"] == [n for n in names if n not in SB2]

    SimState().clear(scope="rack")  # the uplink is fixed: the rack is retested and back in
    validate(CLUSTER, RACKED, run_id="night-2")
    assert states(RACKED) == {n: "released" for n in SB2}
    validate(CLUSTER, RACKED, run_id="night-3")  # its nodes in the pool's pairs, passing
    assert not [n.name for n in kube.list_nodes(RACKED) if n.unvalidated]
