"""List-then-watch of nodes and node Events through the Kubernetes backend
(``backends/kube/watch.py``, ``node_objects.py``) against kmock's emulator over HTTP.

The official client's ``Watch`` streams from the emulator, which numbers every change, stamps
the stored objects and serves a watch from its change log as the API server does from its
watch cache (``tests/support/kube_emulator.py``): the changes after ``resourceVersion``, a
BOOKMARK, and ``410 Gone`` (an ERROR event, or the HTTP status) for a compacted version.
Real condition and Event shapes (tests/data/events/, each with the source it came from) are
read through the backend's own conversion, both directly and after a round trip through the
emulator.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from gpufleet.backends.base import WatchExpired
from gpufleet.backends.kube.cluster import KubeClusterBackend
from gpufleet.backends.kube.errors import KubeGone
from gpufleet.backends.kube.node_objects import node_event, node_info
from gpufleet.domain.events import Change
from gpufleet.domain.workloads import GKE_POOL_LABEL, POOL_LABEL
from tests.support.kube_emulator import KubeEmulator

CONN_ID = "kmock_kube_watch"
DATA = Path(__file__).resolve().parents[1] / "data" / "events"
SAMPLES = sorted(p.stem for p in DATA.glob("*.json"))
POOL_KEYS = (POOL_LABEL, GKE_POOL_LABEL, "eks.amazonaws.com/nodegroup")


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator(conn_id=CONN_ID) as emulator:
        yield emulator


@pytest.fixture
def backend(kube: KubeEmulator) -> KubeClusterBackend:
    kube.reset()
    return KubeClusterBackend(conn_id=CONN_ID, pool_label_keys=POOL_KEYS)


def sample(name: str) -> tuple[dict, dict]:
    """A real object of tests/data/events/ and its sidecar (source, note, expect)."""
    obj = json.loads((DATA / f"{name}.json").read_text())
    return obj, yaml.safe_load((DATA / f"{name}.yaml").read_text())


def seed_sample_node(kube: KubeEmulator, obj: dict) -> None:
    """Register the sample's node as its kubelet would: the object, then its status."""
    body = {k: v for k, v in obj.items() if k != "status"}
    body["metadata"] = {k: obj["metadata"][k] for k in ("name", "labels")}
    kube.core.create_node(body)
    kube.patch_status("v1/nodes", None, obj["metadata"]["name"], obj["status"])


def check_expected(got, expect: dict) -> None:
    """The fields a sidecar's ``expect`` names, on a converted NodeInfo or NodeEvent."""
    for key, value in expect.items():
        if key == "condition":
            condition = got.condition(value["type"])
            assert condition is not None, value
            assert (condition.status, condition.reason) == (value["status"], value["reason"])
        elif key == "label":
            for label, text in value.items():
                assert got.labels[label] == text
        elif key == "last_seen":
            assert got.last_seen == datetime.fromisoformat(value)
        else:
            assert getattr(got, key) == value, key


# --- the real shapes, through the backend's conversion -------------------------------------------


def test_every_sample_names_its_source():
    assert SAMPLES, "tests/data/events/ holds no samples"
    for name in SAMPLES:
        _, meta = sample(name)
        assert str(meta["source"]).startswith("https://"), name
        assert meta["kind"] in ("Node", "Event") and meta["expect"], name


@pytest.mark.parametrize("name", SAMPLES)
def test_a_real_object_reads_as_its_source_says(name):
    obj, meta = sample(name)
    if meta["kind"] == "Node":
        got = node_info(obj, POOL_KEYS)
        assert got.uid == obj["metadata"]["uid"]
        assert got.created_at is not None and got.boot_id == obj["status"]["nodeInfo"]["bootID"]
    else:
        got = node_event(obj)
        assert got is not None
    check_expected(got, meta["expect"])


def test_an_event_about_something_else_is_not_a_node_event():
    obj, _ = sample("npd_task_hung_event")
    pod = {**obj, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"}}
    assert node_event(pod) is None


@pytest.mark.parametrize("name", [s for s in SAMPLES if sample(s)[1]["kind"] == "Node"])
def test_a_real_node_reads_the_same_after_the_api(backend, kube, name):
    obj, meta = sample(name)
    seed_sample_node(kube, obj)
    (got,), version = backend.list_nodes_versioned()
    check_expected(got, meta["expect"])
    assert got.uid and got.uid != obj["metadata"]["uid"]  # the server's, not the sample's
    assert int(version) >= 2  # created, then its status


def test_real_node_events_are_listed_and_watched_and_others_are_not(backend, kube):
    _, start = backend.list_node_events(None)
    names = [s for s in SAMPLES if sample(s)[1]["kind"] == "Event" and "v1" not in s]
    for name in names:
        kube.seed_event(sample(name)[0])
    pod_event, _ = sample("npd_task_hung_event")
    kube.seed_event(
        {
            **pod_event,
            "metadata": {"name": "pod-event"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        }
    )
    listed, version = backend.list_node_events(None)
    assert sorted(e.reason for e in listed) == sorted(
        sample(n)[1]["expect"]["reason"] for n in names
    )
    for name in names:
        event = next(e for e in listed if e.reason == sample(name)[1]["expect"]["reason"])
        check_expected(event, sample(name)[1]["expect"])
    *watched, bookmark = backend.watch_node_events(start, 5)
    assert [w.change for w in watched] == [Change.ADDED] * len(names)
    assert sorted(w.event.uid for w in watched) == sorted(e.uid for e in listed)
    assert (bookmark.change, bookmark.version) == (Change.BOOKMARK, version)
    newer, _ = backend.list_node_events(watched[-1].version)
    assert newer == []  # nothing about a node changed after the last one


# --- list, watch, bookmark, 410 ------------------------------------------------------------------


def test_a_watch_from_the_lists_version_sees_each_change_in_order(backend, kube):
    kube.seed_node("n1", "pool-a")
    nodes, version = backend.list_nodes_versioned()
    assert [n.name for n in nodes] == ["n1"] and nodes[0].uid and nodes[0].created_at
    kube.core.patch_node("n1", {"spec": {"unschedulable": True}})
    kube.patch_status("v1/nodes", None, "n1", {"nodeInfo": {"bootID": "boot-2"}})
    kube.seed_node("n2", "pool-a")
    kube.core.delete_node("n1")
    *seen, bookmark = backend.watch_nodes(version, 5)
    assert [(c.change, c.node.name) for c in seen] == [
        (Change.MODIFIED, "n1"),
        (Change.MODIFIED, "n1"),
        (Change.ADDED, "n2"),
        (Change.MODIFIED, "n2"),  # its status: Ready
        (Change.DELETED, "n1"),
    ]
    assert seen[0].node.unschedulable and seen[1].node.boot_id == "boot-2"
    assert seen[-1].node.uid == nodes[0].uid  # DELETED carries the last state known
    versions = [int(c.version) for c in seen]
    assert versions == sorted(versions) and versions[0] > int(version)
    assert (bookmark.change, bookmark.version) == (Change.BOOKMARK, seen[-1].version)
    assert bookmark.version == kube.resource_version


def test_a_watch_with_no_change_is_one_bookmark_at_its_version(backend, kube):
    kube.seed_node("n1", "pool-a")
    _, version = backend.list_nodes_versioned()
    (only,) = backend.watch_nodes(version, 5)
    assert (only.change, only.version, only.node) == (Change.BOOKMARK, version, None)


def test_a_compacted_version_is_expired_and_a_relist_recovers(backend, kube):
    """The 410 rule: the stream's ERROR event with code 410 is WatchExpired."""
    kube.seed_node("n1", "pool-a")
    _, old = backend.list_nodes_versioned()
    kube.core.patch_node("n1", {"metadata": {"labels": {"example.com/a": "1"}}})
    kube.compact(0)
    with pytest.raises(WatchExpired) as expired:
        backend.watch_nodes(old, 5)
    assert isinstance(expired.value, KubeGone) and "410" in str(expired.value)
    with pytest.raises(WatchExpired):
        backend.watch_node_events(old, 5)
    nodes, fresh = backend.list_nodes_versioned()
    assert nodes[0].labels["example.com/a"] == "1"
    assert [c.change for c in backend.watch_nodes(fresh, 5)] == [Change.BOOKMARK]


def test_an_http_410_is_expired_too(backend, kube):
    kube.seed_node("n1", "pool-a")
    _, version = backend.list_nodes_versioned()
    nodes_gone = kube.fail("GET", r"^/api/v1/nodes$", 410, reason="Expired", times=1)
    with nodes_gone, pytest.raises(WatchExpired):
        backend.watch_nodes(version, 5)
    events_gone = kube.fail("GET", r"^/api/v1/events$", 410, reason="Expired", times=1)
    with events_gone, pytest.raises(WatchExpired):
        backend.list_node_events(version)
    assert backend.watch_nodes(version, 5)[-1].version == version


def test_the_backend_asks_for_bookmarks_and_a_server_side_timeout(backend, kube):
    kube.seed_node("n1", "pool-a")
    _, version = backend.list_nodes_versioned()
    kube.reset_requests()
    backend.watch_nodes(version, 2.5)
    (request,) = [r for r in kube.requests() if r.params.get("watch")]
    assert request.params["resourceVersion"] == version
    assert request.params["allowWatchBookmarks"].lower() == "true"
    assert request.params["timeoutSeconds"] == "3"  # whole seconds, rounded up
