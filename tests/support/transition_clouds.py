"""Helpers for reservation transition tests on the cloud fakes (GKE, EKS) with kmock as the
cluster: a catalog with a planned pool on a second reservation, the old pool brought up through
the real cloud backend, steps driven to completion, a validation the test plays, and reads of
what kmock stored.

The transition service is driven directly (as
``tests/services/infrastructure/test_transition_resume.py`` does on the sim): the DAG's tasks
are thin wrappers around these calls, and ``dag.test()`` on the sim covers the wiring. Here the
point is the cloud calls: what the fakes RECEIVED and what kmock STORED.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import yaml

from gpufleet.domain.transition import Step
from gpufleet.services.infrastructure.transition import ReservationTransition

T = TypeVar("T")
KUEUE = "kueue.x-k8s.io/v1beta1"


def write_transition_catalog(
    example: Path, folder: Path, *, new_pool: str, reservation: dict[str, Any], pool_ref: dict
) -> Path:
    """The example region with ``connections.kubernetes`` removed (the cluster is reached with
    the credentials the cloud backend obtains), a second reservation ``reservation`` declared
    in the region, and a copy of the cluster's pool named ``new_pool`` on it (``pool_ref``: the
    pool's ``reservation`` field) marked ``state: planned``, as a platform team declares it
    before a transition."""
    data = yaml.safe_load(Path(example).read_text())
    (region,) = data["regions"]
    (cluster,) = region["clusters"]
    (cluster.get("connections") or {}).pop("kubernetes", None)
    region["reservations"].append(reservation)
    (old,) = cluster["node_pools"]
    cluster["node_pools"].append(
        {**old, "name": new_pool, "state": "planned", "reservation": pool_ref}
    )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / Path(example).name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def wait_for(what: str, check: Callable[[], T], timeout: float = 30.0) -> T:
    """``check()`` until it returns something truthy; fails naming ``what`` after ``timeout``.
    No sleep between checks: the fakes move on as they are read (an operation completes on its
    n-th read, a created pool's nodes register as its create completes), not as time passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what} (last: {value!r})"


def bring_up_old_pool(cluster_name: str, old: str) -> None:
    """What onboarding left behind, through the real cloud backend: the network, the cluster
    and the old pool (in service: no unvalidated taint), waited on until READY (the fakes
    complete operations as they are read; the node controller registers the pool's nodes),
    then the old pool's Kueue flavor and queues in the cluster, as the add-ons step creates
    them."""
    from gpufleet.backends import cloud_backend, cluster_backend
    from gpufleet.backends.base import ResourceStatus
    from gpufleet.config.catalog import load_catalog
    from gpufleet.manifests.addons.kueue import render_pool_queues

    catalog = load_catalog()
    cluster = catalog.cluster(cluster_name)
    cloud = cloud_backend(cluster)
    cloud.ensure_network()
    cloud.ensure_cluster()
    wait_for("the cluster", lambda: cloud.get_cluster().status == ResourceStatus.READY)
    cloud.ensure_node_pool(old)
    wait_for(f"pool {old}", lambda: cloud.get_node_pool(old).status == ResourceStatus.READY)
    kube = cluster_backend(cluster)
    wait_for(f"pool {old}'s nodes", lambda: len(kube.list_nodes(old)) == cluster.pool(old).nodes)
    for obj in render_pool_queues(catalog.pool(cluster_name, old), list(cluster.namespaces)):
        kube.ensure_object(obj)


def drive(svc: ReservationTransition, step: Step, timeout: float = 30.0) -> None:
    """One forward step to completion, as its task (deferring in between) would: called again
    at once, as the fakes move on as they are read (the drain's soak is 0 here)."""
    deadline = time.monotonic() + timeout
    while True:
        outcome = svc.advance(step)
        if outcome.done:
            assert outcome.failed is None, outcome.failed
            return
        assert time.monotonic() < deadline, f"{step.value} never completed: {outcome.notes}"


def roll_back(svc: ReservationTransition, timeout: float = 30.0) -> Any:
    """``rollback()`` called until it completes (again at once, as ``drive``); returns the
    last outcome."""
    deadline = time.monotonic() + timeout
    while not (outcome := svc.rollback()).done:
        assert time.monotonic() < deadline, f"rollback never completed: {outcome.notes}"
    return outcome


def play_validation(svc: ReservationTransition) -> None:
    """Record a passing fabric (and, when the pool mounts a filesystem, storage) validation of
    the new pool for this run, as the DAG's validation tasks would. kmock has no scheduler or
    kubelet, so the validation pods cannot run here: the test plays the validation (the sim
    end-to-end tests run the real one) and the transition reads the verdict from the ledger."""
    now = datetime.now(UTC)
    pool = svc.new.pool
    common = {"run_id": svc.run_id, "cluster": svc.cluster.name, "pool": pool.name}
    svc.ledger.record_validation(
        **common,
        kind="fabric",
        passed=True,
        started_at=now,
        expected_transport=pool.transport,
        transport=pool.transport,
        nodes_tested=pool.nodes,
    )
    if svc.new.filesystem:
        svc.ledger.record_validation(**common, kind="storage", passed=True, started_at=now)


def stop_policies(kube: Any, *pools: str) -> dict[str, str | None]:
    """pool -> its Kueue ClusterQueue's ``spec.stopPolicy`` as kmock stored it (None: no
    queue; "unset" when the queue carries no stopPolicy, which Kueue reads as None)."""
    out: dict[str, str | None] = {}
    for pool in pools:
        queue = kube.stored(f"{KUEUE}/clusterqueues", None, f"gpufleet-{pool}")
        out[pool] = None if queue is None else queue["spec"].get("stopPolicy", "unset")
    return out


def cordoned(kube: Any, nodes: list[str]) -> list[bool]:
    """Each node's ``spec.unschedulable`` as kmock stored it."""
    return [
        bool((kube.stored("v1/nodes", None, n) or {}).get("spec", {}).get("unschedulable"))
        for n in nodes
    ]
