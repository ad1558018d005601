"""The provider's view of a GKE pool's racks, through compute_v1 over HTTP against the strict
fake: reservation blocks and sub-blocks with ``healthInfo``, keyed by ``physicalTopology`` (what
the nodes' ``gce-topology-*`` labels hold, not the API names), and
``reservationSubBlocks.reportFaulty`` with its exact path and body, as an ensure (a report under
way is found, ``dry_run`` sends nothing), refusing keys that are no sub-block of the pool's
reservation before any write, with Google's 503 retried by the retry rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.backends.base import CloudBackend, EnsureAction
from gpufleet.backends.gke import GkeCloudBackend
from gpufleet.backends.retry import RetryingCloudBackend, RetryPolicy
from gpufleet.backends.topology_api import DEGRADED, HEALTHY, UNKNOWN
from gpufleet.config.catalog import parse_catalog_file
from gpufleet.domain.fleet import ReservationRef
from gpufleet.domain.topology import GKE_BLOCK, GKE_SUBBLOCK, place_of
from gpufleet.errors import BackendError
from tests.support.gcp_fake import GcpFake

EXAMPLE = Path(__file__).resolve().parents[3] / "include/fleet-examples/gke-a3-ultra.yaml"
PROJECT, ZONE, POOL = "my-gcp-project", "us-central1-b", "a3u-pool-1"
RES, BLOCK, OTHER = (
    "a3u-reservation-1",
    "a3u-reservation-1-block-0001",
    "a3u-reservation-1-block-0002",
)
SB1, SB2, SB9 = (f"{BLOCK}-subblock-0001", f"{BLOCK}-subblock-0002", f"{OTHER}-subblock-0001")
# what the nodes' labels carry: the physical ids, not the API names
PHYS_BLOCK, PHYS_OTHER = "3e3056e23cf91a5c", "9a0b1c2d3e4f5a6b"
KEY1, KEY2, KEY9 = f"{PHYS_BLOCK}/5d2e9f10", f"{PHYS_BLOCK}/7c41aa02", f"{PHYS_OTHER}/0b8e7d66"
SUBS = f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/reservations/{RES}/reservationBlocks"
REPORT = f"{SUBS}/{BLOCK}/reservationSubBlocks/{SB2}/reportFaulty"
REASON = "pairs crossing the rack's uplink ran at 31% of baseline on 2 nights"


@pytest.fixture
def region():
    return parse_catalog_file(EXAMPLE)[0]


@pytest.fixture
def fake():
    with GcpFake(operation_polls=2) as fake:
        fake.add_reservation(PROJECT, ZONE, RES, "a3-ultragpu-8g", 24, blocks=[BLOCK, OTHER])
        fake.add_subblock(
            PROJECT, ZONE, RES, BLOCK, SB1, physical=tuple(KEY1.split("/")), hosts=8, in_use=8
        )
        fake.add_subblock(
            PROJECT, ZONE, RES, BLOCK, SB2, physical=tuple(KEY2.split("/")), hosts=8, degraded=2
        )
        fake.add_subblock(PROJECT, ZONE, RES, OTHER, SB9, physical=tuple(KEY9.split("/")), hosts=8)
        yield fake


def gke(region, fake, block: str | None = BLOCK) -> GkeCloudBackend:
    cluster = region.clusters[0]
    pool = cluster.node_pools[0].model_copy(
        update={"reservation": ReservationRef(name=RES, block=block)}
    )
    cluster = cluster.model_copy(update={"node_pools": (pool,)})
    region = region.model_copy(update={"clusters": (cluster,)})
    return GkeCloudBackend(cluster, region, endpoint=fake.url, poll_interval=0.001)


@pytest.fixture
def backend(region, fake) -> GkeCloudBackend:
    return gke(region, fake)


def test_health_of_the_pools_block_keyed_as_the_nodes_labels_key_it(backend, fake):
    assert isinstance(backend, CloudBackend)
    health = backend.subblock_health(POOL)
    assert [(h.key, h.status, h.hosts, h.healthy_hosts, h.degraded_hosts) for h in health] == [
        (KEY1, HEALTHY, 8, 8, 0),
        (KEY2, DEGRADED, 8, 6, 2),
    ]
    assert health[1].provider_name == (
        f"reservations/{RES}/reservationBlocks/{BLOCK}/reservationSubBlocks/{SB2}"
    )
    assert health[0].detail == {
        "reservation": RES,
        "zone": ZONE,
        "cluster": "us-central1-cluster-fake",
        "in_use": 8,
    }
    # a node of the degraded rack, as GKE labels it, is placed on the same key
    labels = {GKE_BLOCK: PHYS_BLOCK, GKE_SUBBLOCK: KEY2.split("/")[1]}
    assert place_of(labels).key == health[1].key
    # the catalog pins block-0001: that block is read (get), then its sub-blocks listed
    assert [(r.method, r.path) for r in fake.requests] == [
        ("GET", f"{SUBS}/{BLOCK}"),
        ("GET", f"{SUBS}/{BLOCK}/reservationSubBlocks"),
    ]


def test_a_pool_on_the_whole_reservation_lists_every_block(region, fake):
    health = gke(region, fake, block=None).subblock_health(POOL)
    assert [h.key for h in health] == sorted([KEY1, KEY2, KEY9])
    assert [(r.method, r.path) for r in fake.requests] == [
        ("GET", SUBS),
        ("GET", f"{SUBS}/{BLOCK}/reservationSubBlocks"),
        ("GET", f"{SUBS}/{OTHER}/reservationSubBlocks"),
    ]


def test_the_reservation_is_read_before_the_pool_exists(backend, fake):
    """Onboarding's preflight: the fake holds the reservation and no cluster or node pool; the
    read is the reservation's (its block, its sub-blocks), nothing of the pool's."""
    view = backend.reservation_health(POOL)
    assert (view.reservation, view.block, view.why, view.detail) == (
        RES,
        BLOCK,
        None,
        {"zone": ZONE},
    )
    assert [(h.key, h.status, h.healthy_hosts, h.degraded_hosts) for h in view.subblocks] == [
        (KEY1, HEALTHY, 8, 0),
        (KEY2, DEGRADED, 6, 2),
    ]
    assert list(view.subblocks) == backend.subblock_health(POOL)
    reads = [(r.method, r.path) for r in fake.requests]
    assert reads[:2] == [
        ("GET", f"{SUBS}/{BLOCK}"),
        ("GET", f"{SUBS}/{BLOCK}/reservationSubBlocks"),
    ]
    assert fake.writes() == [] and not [p for _, p in reads if "/clusters/" in p]


def test_a_subblock_without_health_is_unknown(region, fake):
    fake.add_subblock(
        PROJECT,
        ZONE,
        RES,
        BLOCK,
        f"{BLOCK}-subblock-0003",
        physical=(PHYS_BLOCK, "e1e1e1e1"),
        hosts=4,
        health_status="HEALTH_STATUS_UNSPECIFIED",
    )
    health = {h.key: h for h in gke(region, fake).subblock_health(POOL)}
    assert health[f"{PHYS_BLOCK}/e1e1e1e1"].status == UNKNOWN


def test_report_faulty_sends_the_subblock_its_path_and_body(backend, fake):
    done = backend.report_faulty_subblock(POOL, KEY2, REASON)
    assert (done.kind, done.name, done.action, done.status) == (
        "subblock_report",
        KEY2,
        EnsureAction.CREATED,
        "UPDATING",
    )
    assert done.detail["subblock"] == SB2 and done.detail["block"] == BLOCK
    assert done.detail["operation"].startswith("operation-")
    assert [(w.method, w.path) for w in fake.writes()] == [("POST", REPORT)]
    assert fake.writes()[0].body == {
        "disruptionSchedule": "IMMEDIATE",
        "failureComponent": "MULTIPLE_FAULTY_HOSTS",
        "faultReasons": [{"behavior": "PERFORMANCE", "description": REASON}],
    }
    assert [r["subblock"] for r in fake.subblock_reports()] == [SB2]
    # not waited on: a second call finds the report under way and sends nothing
    fake.clear_log()
    again = backend.report_faulty_subblock(POOL, KEY2, REASON)
    assert (again.action, again.detail["operation"]) == (
        EnsureAction.FOUND,
        done.detail["operation"],
    )
    assert fake.writes() == []


def test_a_report_under_way_is_found_and_nothing_is_sent(backend, fake):
    running = fake.begin_subblock_report(PROJECT, ZONE, RES, BLOCK, SB2)
    found = backend.report_faulty_subblock(POOL, KEY2, REASON)
    assert (found.action, found.status, found.detail["operation"]) == (
        EnsureAction.FOUND,
        "UPDATING",
        running,
    )
    assert fake.writes() == [] and fake.subblock_reports() == []
    # a report of another sub-block is not this one's
    assert backend.report_faulty_subblock(POOL, KEY1, REASON).action == EnsureAction.CREATED


def test_dry_run_sends_nothing(backend, fake):
    planned = backend.report_faulty_subblock(POOL, KEY2, REASON, dry_run=True)
    assert (planned.action, planned.status) == (EnsureAction.WOULD_CREATE, "ABSENT")
    assert planned.detail["subblock"] == SB2
    assert fake.writes() == [] and fake.subblock_reports() == []


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (KEY9, "is not a sub-block of reservation 'a3u-reservation-1' of pool 'a3u-pool-1'"),
        (f"{BLOCK}/{SB2}", "is not a sub-block of reservation"),  # API names are not the key
        (f"{PHYS_BLOCK}/ffffffff", "is not a sub-block of reservation"),
    ],
)
def test_keys_of_no_subblock_of_the_pools_reservation_are_refused(backend, fake, key, message):
    with pytest.raises(BackendError, match=message):
        backend.report_faulty_subblock(POOL, key, REASON)
    assert fake.writes() == []


def test_a_malformed_key_is_refused_before_any_call(backend, fake):
    with pytest.raises(BackendError, match="expected <block>/<sub-block>"):
        backend.report_faulty_subblock(POOL, "rack-7", REASON)
    assert fake.requests == []


def test_503_on_the_report_is_retried_and_reports_once(backend, fake):
    fake.inject_error(503, times=1, method="POST", path_contains="reportFaulty")
    waits: list[float] = []
    retrying = RetryingCloudBackend(backend, RetryPolicy(attempts=3, sleep=waits.append))
    done = retrying.report_faulty_subblock(POOL, KEY2, REASON)
    assert done.action == EnsureAction.CREATED and len(waits) == 1
    assert len(fake.subblock_reports()) == 1
    assert [h.key for h in retrying.subblock_health(POOL)] == [KEY1, KEY2]
    fake.inject_error(503, times=1, method="GET", path_contains="reservationSubBlocks")
    assert [h.key for h in retrying.reservation_health(POOL).subblocks] == [KEY1, KEY2]
    assert len(waits) == 2
