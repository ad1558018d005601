"""The real Kubernetes path of a nightly fabric validation, against kmock over HTTP.

The fabric service drives the kube backend (the official client through the cncf provider's
KubernetesHook); this test plays the cluster: for every JobSet the service submits it creates
the pods a JobSet controller would, and gives them the logs nccl-tests and NCCL would print
(real formats). What the service submitted, the taints and labels it set, and the verdicts it
drew from the logs it read are checked against what the emulator stored.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from gpufleet.backends.kube.cluster import KubeClusterBackend
from gpufleet.backends.retry import RetryingClusterBackend, RetryPolicy
from gpufleet.backends.sim.gpu_health import health_check_output
from gpufleet.backends.sim.output import LinkModel, nccl_info_log, nccl_tests_text
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.faults import parse_fault
from gpufleet.domain.health.tiers import diag_level
from gpufleet.domain.workloads import (
    GKE_POOL_LABEL,
    POOL_LABEL,
    QUARANTINE_KEY,
    workload_pod_templates,
)
from gpufleet.manifests.labels import VALIDATION_NAMESPACE as NAMESPACE
from gpufleet.services.validation.fabric import FabricState, FabricSummary, FabricValidation
from gpufleet.store import Ledger
from tests.support.fleet import ROOT
from tests.support.kube_emulator import KubeEmulator
from tests.support.schemas import validate_manifest

CONN_ID = "kmock_flow"
JOBSETS = "jobset.x-k8s.io/v1alpha2/jobsets"
POOL = "a3u-pool-1"
NODES = [f"gke-train-{i}" for i in range(6)]
BAD = "gke-train-3"


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator(conn_id=CONN_ID, namespace=NAMESPACE) as emulator:
        yield emulator


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def service(kube, fleet_state, sleeps):
    kube.reset()
    for name in NODES:
        kube.seed_node(
            name,
            POOL,
            pool_label=GKE_POOL_LABEL,
            taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        )
    ref = load_catalog(ROOT / "include" / "fleet-examples").pool("train-usc1", POOL)
    backend = RetryingClusterBackend(  # as gpufleet.backends.cluster_backend builds it
        KubeClusterBackend(conn_id=CONN_ID, pool_label_keys=(POOL_LABEL, GKE_POOL_LABEL)),
        RetryPolicy(sleep=sleeps.append),  # waits recorded, not slept
    )
    return FabricValidation(ref, Ledger(), backend)


def completed(kube: KubeEmulator, name: str) -> None:
    kube.patch_status(
        JOBSETS,
        NAMESPACE,
        name,
        {"conditions": [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted"}]},
    )


def seed_pod(kube, name, group, index, node, template, steps=()) -> str:
    """A finished pod of ``template`` on ``node``; ``steps``: its init containers that ran as
    steps (each 33 s, as the kubelet reports a terminated container)."""
    pod = f"{name}-{group}-0-{index}-x{index}"
    inits = template["spec"].get("initContainers") or []
    statuses = [
        {
            "name": step,
            "state": {
                "terminated": {
                    "startedAt": "2026-11-29T02:00:05Z",
                    "finishedAt": "2026-11-29T02:00:38Z",
                    "exitCode": 0,
                }
            },
        }
        for step in steps
    ]
    kube.seed_pod(
        pod,
        NAMESPACE,
        node=node,
        phase="Succeeded",
        labels={
            **template["metadata"]["labels"],
            "jobset.sigs.k8s.io/jobset-name": name,
            "jobset.sigs.k8s.io/replicatedjob-name": group,
            "batch.kubernetes.io/job-completion-index": str(index),
        },
        init_containers=[
            {k: c[k] for k in ("name", "image", "restartPolicy") if k in c} for c in inits
        ],
        init_statuses=statuses,
    )
    return pod


def diag_of(container: dict) -> int:
    """The ``dcgmi diag`` level a GPU health container runs."""
    return int(container["command"][-1].split("dcgmi diag -r ")[1].split()[0])


def run_health(kube, name, jobset, gpu_faults) -> list[tuple[str, int]]:
    """The GPU health check's pods: each prints its node's tools in the real shapes."""
    checked = []
    for group, count, template in workload_pod_templates(jobset):
        node = template["metadata"]["annotations"]["gpufleet.io/health-node"]
        level = diag_of(template["spec"]["containers"][0])
        assert count == 1
        pod = seed_pod(kube, name, group, 0, node, template)
        faults = [parse_fault(f) for f in gpu_faults.get(node, ())]
        text = health_check_output(node, faults, gpu_model="H200", gpus=8, diag_level=level)
        kube.set_pod_log(pod, text, NAMESPACE, container="gpu-health")
        checked.append((node, level))
    completed(kube, name)
    return checked


def run_jobset(
    kube: KubeEmulator, name: str, bad: set[str], gpu_faults=None, unfinished=frozenset()
) -> list:
    """Act as the JobSet controller and the kubelets: pods, logs, then Completed
    (``unfinished``: nodes whose GPU health step printed its output but has no terminated
    status: it was cut off)."""
    jobset = kube.stored(JOBSETS, NAMESPACE, name)
    assert jobset is not None, f"JobSet {name} was not submitted"
    validate_manifest(jobset)
    if name.startswith("health-"):
        return run_health(kube, name, jobset, gpu_faults or {})
    pairs = []
    for group, count, template in workload_pod_templates(jobset):
        a, b = template["metadata"]["annotations"]["gpufleet.io/pair-nodes"].split(",")
        affinity = template["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"][0]
        assert affinity["matchExpressions"][0]["values"] == [a, b]
        assert count == 2
        pairs.append((a, b))
        degraded = bool({a, b} & bad)
        link = LinkModel(355 * (0.42 if degraded else 1.0), 31.0)
        health = next(
            (c for c in template["spec"].get("initContainers") or () if c["name"] == "gpu-health"),
            None,
        )
        for index, node in enumerate((a, b)):
            steps = ["gpu-health"] if health and node not in unfinished else []
            pod = seed_pod(kube, name, group, index, node, template, steps)
            if health:  # the pod's GPU health step printed its node's tools first
                faults = [parse_fault(f) for f in (gpu_faults or {}).get(node, ())]
                text = health_check_output(
                    node, faults, gpu_model="H200", gpus=8, diag_level=diag_of(health)
                )
                kube.set_pod_log(pod, text, NAMESPACE, container="gpu-health")
            main = (
                nccl_tests_text(
                    collective="all_reduce",
                    hosts=[a, b],
                    gpus_per_node=8,
                    gpu_model="H200",
                    link=link,
                )
                if index == 0
                else "peer done\n"
            )
            kube.set_pod_log(pod, main, NAMESPACE)
            kube.set_pod_log(
                pod,
                nccl_info_log(
                    host=node, first_rank=8 * index, gpus_per_node=8, nranks=16, network="gIB"
                ),
                NAMESPACE,
                container="nccl-log",
            )
    completed(kube, name)
    return pairs


def drive(
    kube, service, bad: set[str], gpu_faults=None, unfinished=frozenset()
) -> tuple[FabricSummary, list[list]]:
    """The validation's rounds: pass 1 (the nodes' GPU health checks in its pods), then the
    localization rounds."""
    state = service.begin("scheduled__2026-11-29T02:00:00+00:00")
    rounds = []
    while state.workload:
        wl = state.workload
        rounds.append(run_jobset(kube, wl.name, bad, gpu_faults, unfinished))
        assert service.backend.workload_status("JobSet", wl.name, NAMESPACE).phase == "Succeeded"
        # the state crosses the trigger as plain JSON and back, as in Airflow
        state = service.collect(FabricState.from_dict(json.loads(json.dumps(state.to_dict()))))
        assert not kube.exists(JOBSETS, NAMESPACE, wl.name), "round JobSet not cleaned up"
    return service.finish(state), rounds


def test_healthy_pool_over_the_kubernetes_api(kube, service):
    before = datetime.now(UTC).date()
    summary, rounds = drive(kube, service, bad=set())
    nights = {before, datetime.now(UTC).date()}  # a real cluster's night is the system clock's
    assert summary.passed and summary.transport == "gib"
    # one round: the pairs, each node's GPU health checked in its pod first (one wait)
    assert rounds == [[(NODES[0], NODES[1]), (NODES[2], NODES[3]), (NODES[4], NODES[5])]]
    health = Ledger().latest_validation("train-usc1", POOL, "health")
    assert health["passed"] and health["nodes_tested"] == 6
    levels = {n: c["level"] for n, c in health["details"]["nodes"].items()}
    key = f"train-usc1/{POOL}"
    assert any(
        levels == {n: diag_level(n, d, retest=False, pool=key) for n in NODES} for d in nights
    )
    # the kubelet's step times: each check costs its step (33 s on 8 GPUs), not its pod
    assert {
        c["stages"]["diag_r" + str(c["level"])] for c in health["details"]["nodes"].values()
    } == {33.0}
    assert kube.exists("v1/namespaces", None, NAMESPACE)
    assert kube.exists("v1/secrets", NAMESPACE, "gpufleet-nccl-ssh")
    row = Ledger().latest_validation("train-usc1", POOL, "fabric")
    assert row["passed"] and row["nodes_tested"] == 6
    assert {p["transport"] for p in Ledger().pairs(row["id"])} == {"gib"}


def test_bad_node_is_localized_and_tainted_through_the_api(kube, service):
    summary, rounds = drive(kube, service, bad={BAD})
    assert summary.passed and summary.quarantined == [BAD]
    assert len(rounds) == 3  # pass 1 (with the GPU health checks), two against known-good nodes
    node = kube.stored("v1/nodes", None, BAD)
    taints = {t["key"]: t for t in node["spec"]["taints"]}
    assert taints[QUARANTINE_KEY]["effect"] == "NoSchedule"
    assert "bus-bandwidth" in taints[QUARANTINE_KEY]["value"]
    assert taints["nvidia.com/gpu"]["effect"] == "NoSchedule"  # other taints kept
    assert node["metadata"]["labels"]["gpufleet.io/quarantined"] == "true"
    for other in set(NODES) - {BAD}:
        assert QUARANTINE_KEY not in {
            t["key"] for t in kube.stored("v1/nodes", None, other)["spec"]["taints"]
        }
    assert [q["node"] for q in Ledger().quarantined("train-usc1")] == [BAD]


def test_a_throttled_api_server_does_not_fail_the_validation(kube, service, sleeps):
    # The API server throttles the first JobSet create and drops a node read: both are retried
    # under the retry rule (Retry-After honoured) and the night's verdict is unchanged.
    with (
        kube.fail("POST", "/jobsets$", 429, times=1, retry_after="3") as throttled,
        kube.fail("GET", r"^/api/v1/nodes$", 503, times=1) as failing,
    ):
        summary, _ = drive(kube, service, bad={BAD})
    assert throttled.hits == 1 and failing.hits == 1
    assert summary.passed and summary.quarantined == [BAD]
    assert 3.0 in sleeps and len(sleeps) == 2


def test_a_node_failing_its_gpu_health_check_is_tainted_through_the_api(kube, service):
    """An Xid 79 in a node's kernel log, read over the Kubernetes API from its pair pod's GPU
    health step: the node is quarantined with NVIDIA's action in its reason, its partner is not
    blamed, and the others validate."""
    summary, rounds = drive(kube, service, bad=set(), gpu_faults={BAD: [f"xid:{BAD}:79"]})
    assert summary.passed and summary.quarantined == [BAD]
    assert len(rounds) == 1  # its pair passed: its partner is good, nothing to localize
    taint = {t["key"]: t for t in kube.stored("v1/nodes", None, BAD)["spec"]["taints"]}
    assert taint[QUARANTINE_KEY]["effect"] == "NoSchedule"
    row = Ledger().latest_validation("train-usc1", POOL, "health")
    assert row["passed"] and row["reasons"][0].startswith(f"{BAD}: reboot: ")
    assert "Xid 79" in row["reasons"][0] and "RESTART_BM" in row["reasons"][0]
    state = Ledger().node_state("train-usc1", BAD)
    assert state["state"] == "quarantined" and state["evidence"]["health"]["action"] == "reboot"


def test_a_health_step_cut_off_could_not_run_unless_what_it_printed_shows_a_fault(kube, service):
    """A GPU health step with no terminated status (killed, the pod's deadline): what it
    printed may look healthy, and is not taken for it: the check could not run. A fault it
    printed before it was cut off is kept: the node is quarantined."""
    cut, faulty = NODES[1], NODES[4]
    summary, _ = drive(
        kube,
        service,
        bad=set(),
        gpu_faults={faulty: [f"xid:{faulty}:79"]},
        unfinished={cut, faulty},
    )
    assert summary.quarantined == [faulty]
    nodes = Ledger().latest_validation("train-usc1", POOL, "health")["details"]["nodes"]
    assert nodes[cut]["action"] == "could_not_run"
    assert "GPU health step did not finish" in nodes[cut]["reasons"][0]
    assert nodes[faulty]["action"] == "reboot"
