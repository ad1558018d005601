"""The GKE reboot resets a node's VM (``instances.reset``) through compute_v1 over HTTP against
the strict fake: the exact path and an empty body, an "ensure" that finds a reset under way and
sends nothing, ``dry_run`` that sends nothing, provider ids of another cloud or project refused
before any call, a VM that is not RUNNING refused, and Google's errors mapped (503 transient)."""

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
OTHER = "gke-a3u-h200-a-1a2b3c4d-q9w8"
RESET = f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances/{VM}/reset"


def node(provider_id: str | None = f"gce://{PROJECT}/{ZONE}/{VM}", name: str = VM) -> NodeInfo:
    return NodeInfo(name, "h200-a", {}, (), True, True, provider_id=provider_id)


@pytest.fixture
def region():
    return parse_catalog_file(EXAMPLE)[0]


@pytest.fixture
def fake():
    with GcpFake(operation_polls=2) as fake:
        fake.add_instance(PROJECT, ZONE, VM)
        fake.add_instance(PROJECT, ZONE, OTHER)
        yield fake


@pytest.fixture
def backend(fake, region) -> GkeCloudBackend:
    return GkeCloudBackend(region.clusters[0], region, endpoint=fake.url, poll_interval=0.001)


def test_reboot_resets_the_vm_and_returns_while_it_runs(backend, fake):
    done = backend.reboot_node(node())
    assert (done.kind, done.name, done.action, done.status) == (
        "reboot",
        VM,
        EnsureAction.CREATED,
        "UPDATING",
    )
    assert done.detail["instance"] == VM and done.detail["zone"] == ZONE
    assert done.detail["operation"]
    assert done.console_url.endswith(f"/zones/{ZONE}/instances/{VM}?project={PROJECT}")
    assert [(r.method, r.path, r.body) for r in fake.writes()] == [("POST", RESET, None)]
    assert fake.reset_requests() == [{"project": PROJECT, "zone": ZONE, "instance": VM}]
    assert fake.host_reports() == []  # a reboot, not a repair: the VM keeps its host
    # not waited on: a second call finds the reset under way and sends nothing
    fake.clear_log()
    again = backend.reboot_node(node())
    assert (again.action, again.detail["operation"]) == (
        EnsureAction.FOUND,
        done.detail["operation"],
    )
    assert fake.writes() == []
    assert fake.resets(PROJECT, ZONE, OTHER) == 0


def test_a_reset_under_way_is_found_and_nothing_is_sent(backend, fake):
    running = fake.begin_reset(PROJECT, ZONE, VM)
    found = backend.reboot_node(node())
    assert (found.action, found.status, found.detail["operation"]) == (
        EnsureAction.FOUND,
        "UPDATING",
        running,
    )
    assert fake.writes() == [] and fake.reset_requests() == []


def test_another_vms_reset_or_a_host_report_is_not_this_reboot(backend, fake):
    fake.begin_reset(PROJECT, ZONE, OTHER)
    fake.begin_host_report(PROJECT, ZONE, VM)  # a repair's operation, not a reset
    assert backend.reboot_node(node()).action == EnsureAction.CREATED
    assert fake.reset_requests() == [{"project": PROJECT, "zone": ZONE, "instance": VM}]


def test_once_the_reset_is_done_a_new_reboot_is_sent(backend, fake):
    first = backend.reboot_node(node()).detail["operation"]
    for _ in range(2):  # the fake completes an operation on its second read
        requests.get(
            f"{fake.url}/compute/v1/projects/{PROJECT}/zones/{ZONE}/operations/{first}", timeout=5
        )
    assert fake.resets(PROJECT, ZONE, VM) == 1
    again = backend.reboot_node(node())
    assert again.action == EnsureAction.CREATED and again.detail["operation"] != first
    assert len(fake.reset_requests()) == 2


def test_dry_run_sends_nothing(backend, fake):
    planned = backend.reboot_node(node(), dry_run=True)
    assert (planned.kind, planned.action) == ("reboot", EnsureAction.WOULD_CREATE)
    assert fake.writes() == [] and fake.reset_requests() == []


@pytest.mark.parametrize(
    ("provider_id", "message"),
    [
        (None, "has no spec.providerID: cannot tell which VM to reboot"),
        ("aws:///us-east-1a/i-0123456789abcdef0", "not a Compute Engine VM"),
        (f"sim://a3u-sim/{VM}", "not a Compute Engine VM"),
        (f"gce://{PROJECT}/{ZONE}", "expected gce://PROJECT/ZONE/INSTANCE"),
        (f"gce://other-project/{ZONE}/{VM}", "refusing to reboot a VM of another project"),
    ],
)
def test_missing_or_foreign_provider_ids_are_refused_before_any_call(
    backend, fake, provider_id, message
):
    with pytest.raises(BackendError, match=message):
        backend.reboot_node(node(provider_id))
    assert fake.requests == []


def test_an_unknown_vm_is_a_clear_error_and_nothing_is_reset(backend, fake):
    with pytest.raises(BackendError, match="VM gke-a3u-gone does not exist"):
        backend.reboot_node(node(f"gce://{PROJECT}/{ZONE}/gke-a3u-gone"))
    assert fake.writes() == []


@pytest.mark.parametrize(
    ("status", "message"),
    [("REPAIRING", "its host is being repaired"), ("TERMINATED", "start it, or repair the node")],
)
def test_a_vm_that_is_not_running_is_refused_before_any_reset(backend, fake, status, message):
    fake.add_instance(PROJECT, ZONE, VM, status=status)
    with pytest.raises(BackendError, match=f"is {status}, not RUNNING.*{message}"):
        backend.reboot_node(node())
    assert fake.writes() == []


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        ("RUNNING", {"force": True}, "body of instances.reset must be empty"),
        ("TERMINATED", None, "is not ready (status TERMINATED)"),
    ],
)
def test_the_fake_refuses_what_the_api_refuses(fake, status, body, message):
    fake.add_instance(PROJECT, ZONE, VM, status=status)
    answer = requests.post(f"{fake.url}{RESET}", json=body, timeout=5)
    assert answer.status_code == 400
    assert message in answer.json()["error"]["message"]
    assert fake.reset_requests() == []


def test_503_is_transient_and_the_retry_rule_retries_it(backend, fake):
    fake.inject_error(503, times=1, method="POST", path_contains="/reset")
    with pytest.raises(TransientBackendError, match="503"):
        backend.reboot_node(node())
    assert fake.reset_requests() == []
    waits: list[float] = []
    fake.inject_error(503, times=1, method="POST", path_contains="/reset")
    retrying = RetryingCloudBackend(backend, RetryPolicy(attempts=3, sleep=waits.append))
    assert retrying.reboot_node(node()).action == EnsureAction.CREATED
    assert len(waits) == 1 and len(fake.reset_requests()) == 1
