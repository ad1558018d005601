"""The GKE repair reports a node's host as faulty (``instances.reportHostAsFaulty``) through
compute_v1 over HTTP against the strict fake: the exact path and body, an "ensure" that finds a
report under way and sends nothing, ``dry_run`` that sends nothing, provider ids of another
cloud or project refused before any call, and Google's errors mapped (503 transient)."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from gpufleet.backends.base import EnsureAction, NodeInfo
from gpufleet.backends.gke import GkeCloudBackend
from gpufleet.backends.retry import RetryingCloudBackend, RetryPolicy
from gpufleet.config.catalog import parse_catalog_file
from gpufleet.errors import BackendError, TransientBackendError
from tests.support.gcp_fake import GcpFake

EXAMPLE = Path(__file__).resolve().parents[3] / "include/fleet-examples/gke-a3-ultra.yaml"
PROJECT, ZONE, VM = "my-gcp-project", "us-central1-b", "gke-a3u-h200-a-1a2b3c4d-x7k2"
REPORT = f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances/{VM}/reportHostAsFaulty"


def node(provider_id: str | None = f"gce://{PROJECT}/{ZONE}/{VM}") -> NodeInfo:
    return NodeInfo(VM, "h200-a", {}, (), True, True, provider_id=provider_id)


@pytest.fixture
def region():
    return parse_catalog_file(EXAMPLE)[0]


@pytest.fixture
def fake():
    with GcpFake(operation_polls=2) as fake:
        fake.add_instance(PROJECT, ZONE, VM)
        yield fake


@pytest.fixture
def backend(fake, region) -> GkeCloudBackend:
    return GkeCloudBackend(region.clusters[0], region, endpoint=fake.url, poll_interval=0.001)


def test_repair_reports_the_host_and_returns_while_it_runs(backend, fake):
    done = backend.repair_node(node())
    assert (done.kind, done.name, done.action, done.status) == (
        "repair",
        VM,
        EnsureAction.CREATED,
        "UPDATING",
    )
    assert done.detail["instance"] == VM and done.detail["zone"] == ZONE
    posts = [r for r in fake.writes()]
    assert [(r.method, r.path) for r in posts] == [("POST", REPORT)]
    assert posts[0].body == {
        "disruptionSchedule": "IMMEDIATE",
        "faultReasons": [
            {
                "behavior": "PERFORMANCE",
                "description": "gpufleet: fabric validation failed on this node and its retest",
            }
        ],
    }
    # not waited on (10-12 minutes in real life): a second call finds the report under way
    fake.clear_log()
    assert backend.repair_node(node()).action == EnsureAction.FOUND and fake.writes() == []


def test_a_report_under_way_is_found_and_nothing_is_sent(backend, fake):
    fake.begin_host_report(PROJECT, ZONE, VM)
    found = backend.repair_node(node())
    assert (found.action, found.status) == (EnsureAction.FOUND, "UPDATING")
    assert fake.writes() == [] and fake.host_reports() == []


def test_a_vm_in_repair_is_found(backend, fake):
    fake.add_instance(PROJECT, ZONE, VM, status="REPAIRING")
    assert backend.repair_node(node()).action == EnsureAction.FOUND
    assert fake.writes() == []


def test_dry_run_sends_nothing(backend, fake):
    planned = backend.repair_node(node(), dry_run=True)
    assert planned.action == EnsureAction.WOULD_CREATE
    assert fake.writes() == [] and fake.host_moves(PROJECT, ZONE, VM) == 0


@pytest.mark.parametrize(
    ("provider_id", "message"),
    [
        (None, "has no spec.providerID"),
        ("aws:///us-east-1a/i-0123456789abcdef0", "not a Compute Engine VM"),
        (f"sim://a3u-sim/{VM}", "not a Compute Engine VM"),
        (f"gce://{PROJECT}/{ZONE}", "expected gce://PROJECT/ZONE/INSTANCE"),
        (f"gce://other-project/{ZONE}/{VM}", "project 'other-project', not of the catalog"),
    ],
)
def test_missing_or_foreign_provider_ids_are_refused_before_any_call(
    backend, fake, provider_id, message
):
    with pytest.raises(BackendError, match=message):
        backend.repair_node(node(provider_id))
    assert fake.requests == []


def test_an_unknown_vm_is_a_clear_error_and_nothing_is_reported(backend, fake):
    gone = node(f"gce://{PROJECT}/{ZONE}/gke-a3u-gone")
    with pytest.raises(BackendError, match="VM gke-a3u-gone does not exist"):
        backend.repair_node(gone)
    assert fake.writes() == []


def test_a_vm_that_is_not_running_is_refused_by_the_api(backend, fake):
    fake.add_instance(PROJECT, ZONE, VM, status="TERMINATED")
    with pytest.raises(BackendError, match="only a RUNNING instance") as err:
        backend.repair_node(node())
    assert not isinstance(err.value, TransientBackendError)


def test_503_is_transient_and_the_retry_rule_retries_it(backend, fake):
    fake.inject_error(503, times=1, method="POST", path_contains="reportHostAsFaulty")
    with pytest.raises(TransientBackendError, match="503"):
        backend.repair_node(node())
    assert fake.host_reports() == []
    waits: list[float] = []
    fake.inject_error(503, times=1, method="POST", path_contains="reportHostAsFaulty")
    retrying = RetryingCloudBackend(backend, RetryPolicy(attempts=3, sleep=waits.append))
    assert retrying.repair_node(node()).action == EnsureAction.CREATED
    assert len(waits) == 1 and len(fake.host_reports()) == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"disruptionSchedule": "NOW"}, "Invalid value at 'disruptionSchedule'"),
        (
            {"disruptionSchedule": "IMMEDIATE", "faultReasons": [{"behavior": "SLOW"}]},
            "Invalid value at 'faultReasons[0].behavior'",
        ),
        ({"disruptionSchedule": "IMMEDIATE", "reason": "x"}, 'Unknown name "reason"'),
        ({"faultReasons": [{"behavior": "PERFORMANCE"}]}, "Only IMMEDIATE is supported"),
    ],
)
def test_the_fake_is_as_strict_as_the_discovery_document(fake, body, message):
    answer = requests.post(f"{fake.url}{REPORT}", json=body, timeout=5)
    assert answer.status_code == 400
    assert message in answer.json()["error"]["message"]
    assert fake.host_reports() == []
