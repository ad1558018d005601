"""``PodInfo.init_seconds`` from a real API's pods (kmock's KubernetesEmulator over HTTP, the
official client): each init container run as a step (not a native sidecar, ``restartPolicy:
Always``) once terminated, its ``finishedAt - startedAt``, in the order ``spec.initContainers``
runs them, whatever order the statuses come in."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from gpufleet.backends.kube.cluster import KubeClusterBackend
from tests.support.kube_emulator import KubeEmulator

CONN_ID = "kmock_init_seconds"
NS = "gpufleet-validation"
STEPS = {"steps": "yes"}


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator(conn_id=CONN_ID, namespace=NS) as emulator:
        yield emulator


def terminated(name: str, start: str, end: str, exit_code: int = 0) -> dict:
    return {
        "name": name,
        "state": {"terminated": {"startedAt": start, "finishedAt": end, "exitCode": exit_code}},
    }


def running(name: str, start: str) -> dict:
    return {"name": name, "state": {"running": {"startedAt": start}}}


def pair_pod(kube: KubeEmulator, name: str, init_statuses: list[dict]) -> None:
    """A pair pod as the manifests render it: the GPU health and fio steps, then the NCCL log
    sidecar (a native sidecar), then nccl-tests; its init containers' statuses as given."""
    spec = {
        "nodeName": f"node-{name}",
        "initContainers": [
            {"name": "gpu-health", "image": "dcgm"},
            {"name": "fio", "image": "fio"},
            {"name": "nccl-log", "image": "busybox", "restartPolicy": "Always"},
        ],
        "containers": [{"name": "nccl-tests", "image": "nccl"}],
    }
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": STEPS},
        "spec": spec,
    }
    kube.core.create_namespaced_pod(NS, body)
    kube.patch_status(
        "v1/pods", NS, name, {"phase": "Running", "initContainerStatuses": init_statuses}
    )


def test_each_step_s_seconds_in_the_order_it_ran_and_never_the_sidecar(kube):
    kube.reset()
    sidecar = running("nccl-log", "2026-11-30T02:00:41Z")
    pair_pod(
        kube,
        "done",
        [  # the statuses in another order than the spec's
            terminated("fio", "2026-11-30T02:00:34Z", "2026-11-30T02:00:41.500Z"),
            sidecar,
            terminated("gpu-health", "2026-11-30T02:00:01Z", "2026-11-30T02:00:34Z"),
        ],
    )
    # fio still running: only the health step has ended
    pair_pod(
        kube,
        "mid",
        [
            terminated("gpu-health", "2026-11-30T02:00:01Z", "2026-11-30T02:00:34Z"),
            running("fio", "2026-11-30T02:00:34Z"),
        ],
    )
    # a step that failed ran too; one whose time is unreadable is left out; the sidecar
    # stopped after the main container: still no step
    pair_pod(
        kube,
        "odd",
        [
            terminated("gpu-health", "yesterday", "2026-11-30T02:00:34Z"),
            terminated("fio", "2026-11-30T02:00:34Z", "2026-11-30T02:00:35Z", exit_code=1),
            terminated("nccl-log", "2026-11-30T02:00:35Z", "2026-11-30T02:01:35Z"),
        ],
    )
    pair_pod(kube, "pending", [])
    backend = KubeClusterBackend(conn_id=CONN_ID)
    pods = {p.name: p for p in backend.list_pods(NS, "steps=yes")}
    done = pods["done"]
    assert list(done.init_seconds.items()) == [("gpu-health", 33.0), ("fio", 7.5)]
    assert done.started_at == datetime(2026, 11, 30, 2, 0, 1, tzinfo=UTC)  # the first step's
    assert pods["mid"].init_seconds == {"gpu-health": 33.0}
    assert pods["odd"].init_seconds == {"fio": 1.0}
    assert pods["pending"].init_seconds == {}


def test_a_pod_without_steps_has_none(kube):
    kube.reset()
    kube.seed_pod("plain", NS, node="node-a", labels=STEPS, phase="Succeeded")
    kube.patch_status(
        "v1/pods",
        NS,
        "plain",
        {"containerStatuses": [terminated("main", "2026-11-30T02:00:02Z", "2026-11-30T02:01:00Z")]},
    )
    (pod,) = KubeClusterBackend(conn_id=CONN_ID).list_pods(NS, "steps=yes")
    assert pod.init_seconds == {} and pod.run_seconds == 58.0
