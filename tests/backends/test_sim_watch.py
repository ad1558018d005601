"""The sim's list-then-watch of nodes and node Events, and what happens to its nodes between
nights (``backends/sim/watch_log.py``, ``node_actions.py``, ``events_schedule.py``).

Every node change (a patch of labels, taints or cordon, readiness, a reboot's new boot id, a
node added or deleted) lands in the change log with a growing resource version; a watch
returns the changes after its version, then a BOOKMARK at the newest one; a version the log
no longer keeps is refused (WatchExpired, the API's 410) and a relist recovers. The node
actions write what the real components write: the shapes of tests/data/events/ (their
sidecars name the sources), read back through the kube backend's conversion.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from gpufleet.backends import cluster_backend
from gpufleet.backends.base import Taint, WatchExpired
from gpufleet.backends.kube.node_objects import node_event, node_info
from gpufleet.backends.sim import watch_log
from gpufleet.backends.sim.cluster import SimClusterBackend
from gpufleet.backends.sim.events_schedule import time_of_day
from gpufleet.backends.sim.node_actions import (
    GKE_MAINTENANCE_LABEL,
    GKE_PREDICTION_LABEL,
    NTH_MAINTENANCE_TAINT,
    REPLACE_BOOT_S,
)
from gpufleet.backends.sim.state import SimState
from gpufleet.cli import main as gpufleet_cli
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.events import Change
from gpufleet.domain.workloads import GPU_TAINT_KEY, POOL_LABEL, UNVALIDATED_KEY
from gpufleet.errors import BackendError
from gpufleet.parsing.health import parse_xid_lines

GKE, EKS = "a3u-sim", "p5-sim"  # the catalog's sim clusters mimicking GKE and EKS
POOLS = {GKE: "h200-a", EKS: "h100-a"}
DATA = Path(__file__).resolve().parents[1] / "data" / "events"


def node_name(cluster: str, i: int) -> str:
    return f"{cluster}-{POOLS[cluster]}-{i}"


@pytest.fixture
def sim(fleet_state):
    """The GKE-shaped sim cluster's backend (without the retry wrapper: the node actions are
    the sim's own), its clock frozen."""
    return SimClusterBackend(load_catalog().cluster(GKE))


def backend(cluster: str) -> SimClusterBackend:
    return SimClusterBackend(load_catalog().cluster(cluster))


def changes(sim: SimClusterBackend, since: str, node: str | None = None):
    """The node changes after ``since`` (without the closing bookmark), of one node or all."""
    seen = sim.watch_nodes(since, 0)
    assert seen[-1].change is Change.BOOKMARK
    return [c for c in seen[:-1] if node is None or c.node.name == node]


def expected(name: str) -> dict:
    return yaml.safe_load((DATA / f"{name}.yaml").read_text())["expect"]


# --- list, watch, bookmark ---------------------------------------------------------------------


def test_a_watch_sees_every_node_change_in_order_with_growing_versions(sim):
    node = node_name(GKE, 1)
    nodes, version = sim.list_nodes_versioned()
    before = next(n for n in nodes if n.name == node)
    assert before.uid and before.boot_id and before.created_at is not None
    assert before.condition("Ready").status == "True"

    sim.set_unschedulable(node, True)
    sim.add_taint(node, Taint("example.com/x", "1", "NoSchedule"))
    sim.set_labels(node, {"example.com/y": "2"})
    sim.remove_taint(node, "example.com/absent")  # no change: no entry

    seen = changes(sim, version, node)
    assert [c.change for c in seen] == [Change.MODIFIED] * 3
    versions = [int(c.version) for c in seen]
    assert versions == sorted(set(versions)) and versions[0] > int(version)
    assert seen[0].node.unschedulable
    assert all(t.key != "example.com/x" for t in seen[0].node.taints)
    assert any(t.key == "example.com/x" for t in seen[1].node.taints)
    assert seen[2].node.labels["example.com/y"] == "2"
    assert {c.node.uid for c in seen} == {before.uid}  # the same node object


def test_a_watch_with_no_change_is_one_bookmark_at_the_newest_version(sim):
    _, version = sim.list_nodes_versioned()
    assert sim.watch_nodes(version, 30) == sim.watch_nodes(version, 30)
    (only,) = sim.watch_nodes(version, 30)
    assert only.change is Change.BOOKMARK and only.version == version and only.node is None
    sim.set_labels(node_name(GKE, 0), {"example.com/z": "1"})
    *_, bookmark = sim.watch_nodes(version, 30)
    assert int(bookmark.version) > int(version)  # the bookmark moved with the change
    assert [c.change for c in sim.watch_nodes(bookmark.version, 30)] == [Change.BOOKMARK]


def test_resuming_from_each_bookmark_misses_nothing_and_repeats_nothing(sim):
    _, start = sim.list_nodes_versioned()
    version, resumed = start, []
    for i in range(4):
        sim.set_labels(node_name(GKE, i), {"example.com/round": str(i)})
        *seen, bookmark = sim.watch_nodes(version, 0)
        resumed += seen
        version = bookmark.version
    assert [c.version for c in resumed] == [c.version for c in changes(sim, start)]
    assert len(resumed) == 4


def test_a_version_the_log_no_longer_keeps_is_expired_and_a_relist_recovers(sim):
    """The 410 rule: compacted history is refused, never silently skipped."""
    _, old = sim.list_nodes_versioned()
    with sim.state.tx() as conn:
        watch_log.set_keep(conn, 3)
    for i in range(5):
        sim.set_labels(node_name(GKE, 0), {"example.com/n": str(i)})
    with pytest.raises(WatchExpired, match="too old"):
        sim.watch_nodes(old, 0)
    with pytest.raises(WatchExpired):
        sim.watch_node_events(old, 0)
    nodes, fresh = sim.list_nodes_versioned()  # relist: the state, and a version to go on from
    assert nodes[0].labels["example.com/n"] == "4"
    assert [c.change for c in sim.watch_nodes(fresh, 0)] == [Change.BOOKMARK]
    recent = changes(sim, str(int(fresh) - 2))  # the last two changes are still kept
    assert [c.node.labels["example.com/n"] for c in recent] == ["3", "4"]


def test_a_reset_expires_every_version_from_before_it(sim):
    _, version = sim.list_nodes_versioned()
    sim.set_labels(node_name(GKE, 0), {"example.com/a": "1"})
    SimState().reset()
    with pytest.raises(WatchExpired):
        sim.watch_nodes(version, 0)
    nodes, fresh = backend(GKE).list_nodes_versioned()
    assert int(fresh) > int(version) and "example.com/a" not in nodes[0].labels


def test_a_version_that_is_not_one_is_refused(sim):
    with pytest.raises(BackendError, match="not one this sim handed out"):
        sim.watch_nodes("abc", 0)


def test_the_retrying_backend_passes_the_watch_through(fleet_state):
    kube = cluster_backend(load_catalog().cluster(GKE))
    nodes, version = kube.list_nodes_versioned()
    assert nodes and [c.change for c in kube.watch_nodes(version, 0)] == [Change.BOOKMARK]
    assert kube.list_node_events(None) == ([], version)


# --- reboot, replace, add ----------------------------------------------------------------------


def test_a_reboot_reads_not_ready_then_ready_with_a_new_boot_id(sim):
    node = node_name(GKE, 2)
    nodes, version = sim.list_nodes_versioned()
    boot = next(n for n in nodes if n.name == node).boot_id
    sim.reboot(node)
    sim.state.clock.advance(600)
    seen = changes(sim, version, node)
    assert [(c.node.ready, c.node.boot_id == boot) for c in seen] == [(False, True), (True, False)]
    down, up = (c.node.condition("Ready") for c in seen)
    assert down.status == "False" and up.status == "True" and up.since > down.since


def test_a_replaced_node_goes_and_a_new_name_comes_up_tainted_in_the_same_pool(sim):
    old = node_name(GKE, 3)
    SimState().inject(GKE, POOLS[GKE], f"xid:{old}:79")
    nodes, version = sim.list_nodes_versioned()
    before = next(n for n in nodes if n.name == old)
    done = sim.replace(old)
    new = done["new"]
    assert new != old and new not in {n.name for n in nodes}
    gone, added = changes(sim, version)
    assert (gone.change, gone.node.name, gone.node.uid) == (Change.DELETED, old, before.uid)
    assert (added.change, added.node.name) == (Change.ADDED, new)
    assert added.node.pool == POOLS[GKE] and added.node.labels[POOL_LABEL] == POOLS[GKE]
    assert {t.key for t in added.node.taints} == {GPU_TAINT_KEY, UNVALIDATED_KEY}
    assert not added.node.ready and added.node.uid != before.uid
    assert not [f for f in SimState().faults(cluster=GKE) if f.fault.node == old]
    sim.state.clock.advance(REPLACE_BOOT_S - 1)
    assert not next(n for n in sim.list_nodes() if n.name == new).ready
    sim.state.clock.advance(1)
    (up,) = changes(sim, added.version, new)
    assert up.node.ready and up.node.boot_id == added.node.boot_id  # booted once, not rebooted


def test_the_autoscaler_adds_a_node_at_a_time_of_day(sim):
    now = sim.state.clock.time()
    at = time_of_day(now, datetime.fromtimestamp(now + 3600, UTC).strftime("%H:%M"))
    _, version = sim.list_nodes_versioned()
    assert sim.add_node("h200-b", at=at)["scheduled"] == at
    sim.state.clock.advance(at - now - 1)
    assert changes(sim, version) == []  # not yet
    sim.state.clock.advance(1)
    (added,) = changes(sim, version)
    assert added.change is Change.ADDED and added.node.pool == "h200-b"
    assert [r.fired_at is not None for r in sim.schedule()] == [True]
    assert changes(sim, added.version, added.node.name) == []  # fired once


# --- GPU faults, maintenance, prediction: the real shapes ---------------------------------------


@pytest.mark.parametrize(
    ("cluster", "condition_file", "event_file"),
    [
        (EKS, "eks_nma_xid79_condition", "eks_nma_xid13_warning_event"),
        (GKE, "nvsentinel_xid79_condition", "nvsentinel_xid13_event"),
    ],
)
def test_a_gpu_fault_is_reported_as_the_clusters_health_agent_reports_it(
    fleet_state, cluster, condition_file, event_file
):
    sim = backend(cluster)
    node = node_name(cluster, 1)
    _, version = sim.list_nodes_versioned()
    sim.gpu_fault(node, xid=79, gpu=3)  # fatal: a node condition
    sim.gpu_fault(node, xid=13, gpu=3)  # not fatal: an Event
    (changed,) = changes(sim, version, node)
    want = expected(condition_file)["condition"]
    got = changed.node.condition(want["type"])
    assert (got.type, got.status, got.reason) == (want["type"], want["status"], want["reason"])
    # the driver's own line, as the project's kernel-log parser reads it
    (xid,) = parse_xid_lines(got.message).events
    assert xid.code == 79 and xid.message.startswith("GPU has fallen off the bus.")
    *events, _ = sim.watch_node_events(version, 0)
    (event,) = [e.event for e in events]
    want = expected(event_file)
    assert (event.node, event.reason, event.type, event.source) == (
        node,
        want["reason"],
        want["type"],
        want["source"],
    )
    assert parse_xid_lines(event.message).codes == (13,)
    assert f"xid:{node}:79" in {f.fault.text for f in SimState().faults(cluster=cluster)}


def test_an_event_seen_again_is_the_same_event_counted_again(sim):
    node = node_name(GKE, 0)
    _, version = sim.list_nodes_versioned()
    sim.gpu_fault(node, xid=13)
    sim.state.clock.advance(60)
    sim.gpu_fault(node, xid=13)
    first, again, _ = sim.watch_node_events(version, 0)
    assert (first.change, again.change) == (Change.ADDED, Change.MODIFIED)
    assert first.event.uid == again.event.uid and again.event.count == 2
    assert (again.event.last_seen - first.event.last_seen).total_seconds() == 60
    listed, _ = sim.list_node_events(None)
    assert [(e.uid, e.count) for e in listed] == [(first.event.uid, 2)]
    assert sim.list_node_events(again.version)[0] == []  # nothing changed after it
    assert [e.count for e in sim.list_node_events(first.version)[0]] == [2]


def test_a_fault_at_a_time_of_the_day_fires_when_the_clock_passes_it(sim):
    node = node_name(GKE, 4)
    now = sim.state.clock.time()
    at = time_of_day(now, "10:00")
    assert 0 < at - now <= 86400 and datetime.fromtimestamp(at, UTC).hour == 10
    _, version = sim.list_nodes_versioned()
    sim.gpu_fault(node, xid=13, at=at)
    sim.state.clock.advance(at - now - 1)
    assert [c.change for c in sim.watch_node_events(version, 0)] == [Change.BOOKMARK]
    sim.state.clock.advance(301)  # read late: the event still says when it happened
    (fired, _) = sim.watch_node_events(version, 0)
    assert fired.event.last_seen == datetime.fromtimestamp(int(at), UTC)


@pytest.mark.parametrize("cluster", [GKE, EKS])
def test_maintenance_is_announced_as_the_provider_announces_it(fleet_state, cluster):
    sim = backend(cluster)
    node = node_name(cluster, 2)
    _, version = sim.list_nodes_versioned()
    start = sim.state.clock.time() + 86400
    sim.maintenance(node, start)
    (changed,) = changes(sim, version, node)
    if cluster == GKE:
        key = next(iter(expected("gke_scheduled_maintenance_node")["label"]))
        assert key == GKE_MAINTENANCE_LABEL
        assert int(changed.node.labels[key]) == int(start)
        return
    assert any(
        t.key == NTH_MAINTENANCE_TAINT and t.effect == "NoSchedule" for t in changed.node.taints
    )
    (event, _) = sim.watch_node_events(version, 0)
    want = expected("nth_scheduled_event")
    assert (event.event.reason, event.event.type, event.event.source) == (
        want["reason"],
        want["type"],
        want["source"],
    )
    real = json.loads((DATA / "nth_scheduled_event.json").read_text())["message"]
    ec2_time = r"\d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT"
    sentence = re.compile(rf"^[a-z-]+ will occur between {ec2_time} and {ec2_time} because .+\n$")
    assert sentence.match(real) and sentence.match(event.event.message)
    when = datetime.fromtimestamp(start, UTC).strftime("%d %b %Y %H:%M:%S GMT")
    assert f"between {when} and" in event.event.message


def test_gkes_prediction_label_is_set_as_google_documents_it_and_only_on_gke(fleet_state):
    key = next(iter(expected("gke_health_prediction_node")["label"]))
    assert key == GKE_PREDICTION_LABEL
    sim = backend(GKE)
    node = node_name(GKE, 5)
    _, version = sim.list_nodes_versioned()
    sim.prediction(node, False)
    (changed,) = changes(sim, version, node)
    assert changed.node.labels[key] == "false"
    with pytest.raises(BackendError, match="GKE"):
        backend(EKS).prediction(node_name(EKS, 0), False)


def test_the_sims_objects_read_like_the_real_ones(fleet_state):
    """The sim renders its rows as the API's objects and reads them through the kube
    backend's conversion: a real object and the sim's agree field for field."""
    sim = backend(EKS)
    node = node_name(EKS, 0)
    sim.gpu_fault(node, xid=79)
    with sim.state.read() as conn:
        row = conn.execute("SELECT * FROM nodes WHERE name=?", (node,)).fetchone()
    rendered = watch_log.node_manifest(row, EKS)
    real = json.loads((DATA / "eks_nma_xid79_condition.json").read_text())
    assert set(rendered) == set(real) and set(rendered["status"]) >= {"conditions", "nodeInfo"}
    for condition in rendered["status"]["conditions"]:
        assert set(condition) <= set(real["status"]["conditions"][1]) | {"lastHeartbeatTime"}
    assert node_info(rendered, (POOL_LABEL,)) == sim.node_info(row)
    sim.gpu_fault(node, xid=13)
    with sim.state.read() as conn:
        event_row = conn.execute("SELECT * FROM node_events").fetchone()
    rendered_event = watch_log.event_manifest(event_row)
    real_event = json.loads((DATA / "eks_nma_xid13_warning_event.json").read_text())
    assert set(real_event) <= set(rendered_event) | {"reportingInstance"}
    assert node_event(rendered_event).reason == node_event(real_event).reason


def test_the_cli_raises_faults_and_schedules_node_events(fleet_state, capsys):
    node = node_name(GKE, 1)
    assert gpufleet_cli(["sim", "gpu-fault", "--node", node, "--xid", "79"]) == 0
    assert gpufleet_cli(["sim", "replace", "--node", node_name(GKE, 2), "--in", "600"]) == 0
    assert gpufleet_cli(["sim", "schedule", "--cluster", GKE]) == 0
    out = capsys.readouterr().out
    assert "gpu-fault: " + node in out and "scheduled: replace" in out and "(pending)" in out
    nodes, _ = backend(GKE).list_nodes_versioned()
    assert next(n for n in nodes if n.name == node).condition("SysLogsXIDError").status == "True"
    assert gpufleet_cli(["sim", "changes", "--cluster", GKE]) == 0
    assert "SysLogsXIDError=True" in capsys.readouterr().out
    assert gpufleet_cli(["sim", "reboot", "--node", "no-such-node"]) != 0


def test_an_older_state_file_is_upgraded_in_place(fleet_state):
    """A state file from before the change log (``make run`` keeps one) gains the columns, and
    its nodes an identity, once."""
    import sqlite3

    fleet_state.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(fleet_state / "sim.db") as conn:
        conn.execute("DROP TABLE IF EXISTS nodes")
        conn.execute(
            "CREATE TABLE nodes (cluster TEXT NOT NULL, name TEXT NOT NULL, pool TEXT NOT NULL, "
            "labels TEXT NOT NULL, taints TEXT NOT NULL, unschedulable INTEGER NOT NULL "
            "DEFAULT 0, ready INTEGER NOT NULL DEFAULT 1, PRIMARY KEY (cluster, name))"
        )
        conn.execute("INSERT INTO nodes VALUES ('c', 'n', 'p', '{}', '[]', 0, 1)")
    state = SimState()
    with state.read() as conn:
        first = dict(conn.execute("SELECT uid, boot_id, conditions FROM nodes").fetchone())
    assert first["uid"] and first["boot_id"] and first["conditions"] == "[]"
    SimState()
    with state.read() as conn:
        again = dict(conn.execute("SELECT uid, boot_id, conditions FROM nodes").fetchone())
    assert again == first
