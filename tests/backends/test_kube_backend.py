"""Contract tests of KubeClusterBackend against kmock's KubernetesEmulator over HTTP.

The backend goes through the real chain: Airflow connection from the environment ->
KubernetesHook -> official kubernetes client -> HTTP -> emulator. Assertions read what the
emulator stored (``kube.stored``), never what the backend says it did.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from gpufleet.backends.base import ClusterBackend, Taint
from gpufleet.backends.kube.cluster import (
    KINDS,
    KubeApiError,
    KubeClusterBackend,
    KubeConflict,
    KubeNotFound,
    KubeTooManyRequests,
    TransientKubeApiError,
)
from gpufleet.backends.kube.nodes import TAINT_PATCH_ATTEMPTS
from gpufleet.domain.workloads import (
    GKE_POOL_LABEL,
    POOL_LABEL,
    QUARANTINE_KEY,
    QUARANTINE_LABEL,
    WORKLOAD_LABEL,
)
from gpufleet.errors import BackendError, TransientBackendError
from tests.support.kube_emulator import KubeEmulator

CONN_ID = "kmock_kube_backend"
NS = "training"
JOBSET = "jobset.sigs.k8s.io/jobset-name"


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator(conn_id=CONN_ID, namespace=NS) as emulator:
        yield emulator


@pytest.fixture
def backend(kube: KubeEmulator) -> KubeClusterBackend:
    kube.reset()
    return KubeClusterBackend(conn_id=CONN_ID, pool_label_keys=(POOL_LABEL, GKE_POOL_LABEL))


def jobset(name: str, *, replicas: int = 2, parallelism: int = 1, **spec: object) -> dict:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "pool-a-queue"}},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "parallelism": parallelism,
                            "completions": parallelism,
                            "template": {"spec": {"containers": [{"name": "t", "image": "x"}]}},
                        }
                    },
                }
            ],
            **spec,
        },
    }


def job(name: str, parallelism: int = 1) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "nccl", "image": "nccl-tests"}],
                }
            },
        },
    }


def list_requests(kube: KubeEmulator, plural: str) -> list:
    return [
        r
        for r in kube.requests()
        if r.method == "GET"
        and r.resource is not None
        and r.resource.plural == plural
        and not r.name
    ]


# ---- wiring --------------------------------------------------------------------------------


def test_backend_satisfies_the_protocol_and_uses_the_airflow_connection(
    kube: KubeEmulator, backend: KubeClusterBackend
) -> None:
    assert isinstance(backend, ClusterBackend)
    assert backend.hook.conn_id == CONN_ID
    assert backend.hook.api_client.configuration.host == kube.url
    assert backend.default_namespace == NS  # the connection's namespace extra
    assert backend.list_nodes() == []
    assert [r.url.path for r in kube.requests()] == ["/api/v1/nodes"]


def test_missing_connection_is_a_clear_backend_error(kube: KubeEmulator) -> None:
    backend = KubeClusterBackend(conn_id="no_such_kube_conn")
    with pytest.raises(BackendError, match="no_such_kube_conn") as err:
        backend.list_nodes()
    assert not isinstance(err.value, TransientBackendError)


# ---- apply / delete ------------------------------------------------------------------------


def test_apply_is_idempotent(kube: KubeEmulator, backend: KubeClusterBackend) -> None:
    first = backend.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "nccl-env"},
            "data": {"A": "1"},
        }
    )
    again = backend.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "nccl-env"},
            "data": {"A": "2"},
        }
    )

    assert first["data"] == {"A": "1"}
    assert again["data"] == {"A": "1"}  # the existing object, left as is
    assert again["metadata"]["namespace"] == NS
    assert kube.stored_keys() == [("v1/configmaps", NS, "nccl-env")]
    assert kube.stored("v1/configmaps", NS, "nccl-env")["data"] == {"A": "1"}
    methods = [(r.method, r.url.path) for r in kube.requests()]
    assert methods == [
        ("POST", f"/api/v1/namespaces/{NS}/configmaps"),
        ("POST", f"/api/v1/namespaces/{NS}/configmaps"),  # 409
        ("GET", f"/api/v1/namespaces/{NS}/configmaps/nccl-env"),
    ]


@pytest.mark.parametrize(
    ("manifest", "resource", "namespace"),
    [
        (jobset("train-a"), "jobset.x-k8s.io/v1alpha2/jobsets", NS),
        (job("nccl-pair-0"), "batch/v1/jobs", NS),
        (
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "LocalQueue",
                "metadata": {"name": "pool-a-queue", "namespace": "team-a"},
                "spec": {"clusterQueue": "pool-a"},
            },
            "kueue.x-k8s.io/v1beta1/localqueues",
            "team-a",
        ),
        (
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "ClusterQueue",
                "metadata": {"name": "pool-a"},
                "spec": {"namespaceSelector": {}},
            },
            "kueue.x-k8s.io/v1beta1/clusterqueues",
            None,
        ),
        (
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "ResourceFlavor",
                # a namespace on a cluster-scoped kind is dropped, not used in the path
                "metadata": {"name": "pool-a", "namespace": "ignored"},
                "spec": {"nodeLabels": {POOL_LABEL: "pool-a"}},
            },
            "kueue.x-k8s.io/v1beta1/resourceflavors",
            None,
        ),
        (
            {
                "apiVersion": "networking.gke.io/v1",
                "kind": "Network",
                "metadata": {"name": "rdma-0"},
                "spec": {"type": "Device", "parametersRef": {"name": "rdma-0"}},
            },
            "networking.gke.io/v1/networks",
            None,
        ),
        (
            {
                "apiVersion": "networking.gke.io/v1",
                "kind": "GKENetworkParamSet",
                "metadata": {"name": "rdma-0"},
                "spec": {"vpc": "rdma-net", "vpcSubnet": "rdma-sub-0", "deviceMode": "RDMA"},
            },
            "networking.gke.io/v1/gkenetworkparamsets",
            None,
        ),
        (
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
            "v1/namespaces",
            None,
        ),
        (
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": "lustre-pv"},
                "spec": {"capacity": {"storage": "18000Gi"}},
            },
            "v1/persistentvolumes",
            None,
        ),
        (
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "lustre-pvc"},
                "spec": {"volumeName": "lustre-pv"},
            },
            "v1/persistentvolumeclaims",
            NS,
        ),
    ],
    ids=lambda v: v["kind"] if isinstance(v, dict) else None,
)
def test_apply_stores_each_kind_at_its_group_version_plural_and_scope(
    kube: KubeEmulator,
    backend: KubeClusterBackend,
    manifest: dict,
    resource: str,
    namespace: str | None,
) -> None:
    name = manifest["metadata"]["name"]
    returned = backend.apply(manifest)

    assert returned["metadata"]["name"] == name
    assert returned["kind"] == manifest["kind"]
    assert kube.stored_keys() == [(resource, namespace, name)]
    stored = kube.stored(resource, namespace, name)
    assert stored["kind"] == manifest["kind"]
    assert stored.get("spec") == manifest.get("spec")
    assert stored["metadata"].get("namespace") == namespace
    # once more: nothing new is stored
    assert backend.apply(manifest)["metadata"]["name"] == name
    assert len(kube.stored_keys()) == 1


def test_apply_refuses_unknown_kinds_and_wrong_api_versions_before_any_call(
    kube: KubeEmulator, backend: KubeClusterBackend
) -> None:
    with pytest.raises(BackendError, match="'Frobnicator'") as err:
        backend.apply(
            {"apiVersion": "example.com/v1", "kind": "Frobnicator", "metadata": {"name": "x"}}
        )
    assert "JobSet" in str(err.value)  # says what is supported
    with pytest.raises(BackendError, match="batch/v1"):
        backend.apply({"apiVersion": "batch/v2", "kind": "Job", "metadata": {"name": "x"}})
    with pytest.raises(BackendError, match=r"metadata\.name"):
        backend.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})
    assert kube.requests() == []


def test_apply_follows_the_manifest_version_of_a_custom_group(
    kube: KubeEmulator, backend: KubeClusterBackend
) -> None:
    backend.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "q"},
            "spec": {"clusterQueue": "cq"},
        }
    )
    assert kube.stored_keys() == [("kueue.x-k8s.io/v1beta2/localqueues", NS, "q")]


def test_delete_uses_foreground_propagation_for_workloads(
    kube: KubeEmulator, backend: KubeClusterBackend
) -> None:
    backend.apply(jobset("train-del"))
    backend.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}})

    assert backend.delete("JobSet", "train-del", NS) is True
    assert backend.delete("ConfigMap", "cm") is True  # default namespace from the connection
    assert kube.stored_keys() == []
    deletes = [r for r in kube.requests() if r.method == "DELETE"]
    assert [r.url.path for r in deletes] == [
        f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets/train-del",
        f"/api/v1/namespaces/{NS}/configmaps/cm",
    ]
    assert [json.loads(r.body)["propagationPolicy"] for r in deletes] == [
        "Foreground",
        "Background",
    ]
    assert backend.delete("JobSet", "train-del", NS) is False


# ---- nodes ---------------------------------------------------------------------------------


def seed_pool_a(kube: KubeEmulator) -> None:
    kube.seed_node("a-1", "pool-a")
    kube.seed_node(
        "a-2", "pool-a", taints=[{"key": "example.com/maintenance", "effect": "NoSchedule"}]
    )
    kube.seed_node("a-3", "pool-a", unschedulable=True)
    kube.seed_node("a-4", "pool-a", pool_label=GKE_POOL_LABEL, ready=False)
    # the gpufleet label wins over the native one: this node belongs to pool-b
    kube.seed_node("b-1", "pool-b", labels={GKE_POOL_LABEL: "pool-a"})
    kube.seed_node("cpu-1")

    kube.seed_pod("train-w-0", node="a-1", labels={JOBSET: "train", WORKLOAD_LABEL: "training"})
    kube.seed_pod("train-w-1", node="a-1", labels={JOBSET: "train"})
    kube.seed_pod("legacy-0", "other-ns", node="a-1", labels={"job-name": "legacy"})
    kube.seed_pod("nccl-0", node="a-2", labels={"job-name": "nccl", WORKLOAD_LABEL: "validation"})
    kube.seed_pod("queued-0", node="a-3", labels={JOBSET: "queued"}, phase="Pending")
    kube.seed_pod("done-0", node="a-3", labels={JOBSET: "done"}, phase="Succeeded")
    kube.seed_pod("ds-nccl-installer", "kube-system", node="a-4", labels={"app": "installer"})


def test_list_nodes_by_pool(kube: KubeEmulator, backend: KubeClusterBackend) -> None:
    seed_pool_a(kube)
    kube.reset_requests()

    nodes = {n.name: n for n in backend.list_nodes("pool-a")}

    assert sorted(nodes) == ["a-1", "a-2", "a-3", "a-4"]
    assert {n.pool for n in nodes.values()} == {"pool-a"}
    assert nodes["a-1"].ready and nodes["a-1"].schedulable and not nodes["a-1"].idle
    assert nodes["a-1"].workloads == ("legacy", "train")
    assert nodes["a-2"].taints == (Taint("example.com/maintenance", None, "NoSchedule"),)
    assert nodes["a-2"].workloads == ()  # validation pods do not make a node busy
    assert not nodes["a-2"].schedulable
    # a pod bound and still starting takes the node's GPUs; a finished one does not
    assert nodes["a-3"].unschedulable and nodes["a-3"].workloads == ("queued",)
    assert not nodes["a-4"].ready and nodes["a-4"].workloads == ()  # DaemonSet pod
    assert nodes["a-4"].labels[GKE_POOL_LABEL] == "pool-a"

    # one labelled node list per pool label key, one pod list for all nodes
    node_lists = list_requests(kube, "nodes")
    assert [r.params["labelSelector"] for r in node_lists] == [
        f"{POOL_LABEL}=pool-a",
        f"{GKE_POOL_LABEL}=pool-a",
    ]
    (pod_list,) = list_requests(kube, "pods")
    assert pod_list.url.path == "/api/v1/pods"
    assert pod_list.params["fieldSelector"] == "status.phase!=Succeeded,status.phase!=Failed"
    assert pod_list.params["labelSelector"] == f"{WORKLOAD_LABEL}!=validation"


def test_list_nodes_without_pool_lists_everything(
    kube: KubeEmulator, backend: KubeClusterBackend
) -> None:
    seed_pool_a(kube)
    nodes = {n.name: n for n in backend.list_nodes()}
    assert sorted(nodes) == ["a-1", "a-2", "a-3", "a-4", "b-1", "cpu-1"]
    assert nodes["b-1"].pool == "pool-b"
    assert nodes["cpu-1"].pool is None and nodes["cpu-1"].idle
    assert backend.list_nodes("pool-b") == [nodes["b-1"]]
    assert backend.list_nodes("pool-none") == []


def test_quarantine_flow(kube: KubeEmulator, backend: KubeClusterBackend) -> None:
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    kube.seed_node("a-1", "pool-a", taints=[gpu_taint])

    backend.add_taint("a-1", Taint(QUARANTINE_KEY, "nccl-busbw-low", "NoSchedule"))
    backend.set_labels("a-1", {QUARANTINE_LABEL: "true"})

    node = kube.stored("v1/nodes", None, "a-1")
    assert node["spec"]["taints"] == [
        gpu_taint,
        {"key": QUARANTINE_KEY, "value": "nccl-busbw-low", "effect": "NoSchedule"},
    ]
    assert node["metadata"]["labels"][QUARANTINE_LABEL] == "true"
    assert node["metadata"]["labels"][POOL_LABEL] == "pool-a"  # other labels untouched
    (info,) = backend.list_nodes("pool-a")
    assert info.quarantined and not info.schedulable

    # same key and effect: replaced, not duplicated; another effect is a different taint
    backend.add_taint("a-1", Taint(QUARANTINE_KEY, "transport-socket", "NoSchedule"))
    backend.add_taint("a-1", Taint(QUARANTINE_KEY, None, "NoExecute"))
    taints = kube.stored("v1/nodes", None, "a-1")["spec"]["taints"]
    assert taints == [
        gpu_taint,
        {"key": QUARANTINE_KEY, "value": "transport-socket", "effect": "NoSchedule"},
        {"key": QUARANTINE_KEY, "effect": "NoExecute"},
    ]

    backend.remove_taint("a-1", QUARANTINE_KEY)
    backend.set_labels("a-1", {QUARANTINE_LABEL: None})

    node = kube.stored("v1/nodes", None, "a-1")
    assert node["spec"]["taints"] == [gpu_taint]
    assert QUARANTINE_LABEL not in node["metadata"]["labels"]
    assert POOL_LABEL in node["metadata"]["labels"]
    (info,) = backend.list_nodes("pool-a")
    assert not info.quarantined


def test_taint_changes_that_change_nothing_make_no_patch(
    kube: KubeEmulator, backend: KubeClusterBackend
) -> None:
    taints = [
        {"key": QUARANTINE_KEY, "value": "x", "effect": "NoSchedule"},
        {"key": "example.com/maintenance", "effect": "NoExecute"},
    ]
    kube.seed_node("a-1", "pool-a", taints=taints)
    kube.reset_requests()
    backend.add_taint("a-1", Taint(QUARANTINE_KEY, "x", "NoSchedule"))
    backend.remove_taint("a-1", "not-there")
    assert [r.method for r in kube.requests()] == ["GET", "GET"]  # reads, no patch
    assert kube.stored("v1/nodes", None, "a-1")["spec"]["taints"] == taints


def test_a_taint_patch_that_conflicts_is_read_and_patched_again(
    kube: KubeEmulator, backend: KubeClusterBackend
) -> None:
    # Someone changed the node between our read and our patch (409): read again, patch again.
    kube.seed_node("a-1", "pool-a")
    kube.reset_requests()
    with kube.fail("PATCH", "/nodes/a-1$", 409, times=1) as clash:
        backend.add_taint("a-1", Taint(QUARANTINE_KEY, "x", "NoSchedule"))
    assert clash.hits == 1
    assert [r.method for r in kube.requests()] == ["GET", "PATCH", "GET", "PATCH"]
    assert [t["key"] for t in kube.stored("v1/nodes", None, "a-1")["spec"]["taints"]] == [
        QUARANTINE_KEY
    ]

    kube.reset_requests()
    with kube.fail("PATCH", "/nodes/a-1$", 409), pytest.raises(KubeConflict):
        backend.remove_taint("a-1", QUARANTINE_KEY)  # a clash every time: give up, say so
    assert [r.method for r in kube.requests()].count("PATCH") == TAINT_PATCH_ATTEMPTS
    assert kube.stored("v1/nodes", None, "a-1")["spec"]["taints"]  # still there


def test_cordon_and_uncordon(kube: KubeEmulator, backend: KubeClusterBackend) -> None:
    kube.seed_node("a-1", "pool-a")

    backend.set_unschedulable("a-1", True)
    assert kube.stored("v1/nodes", None, "a-1")["spec"]["unschedulable"] is True
    assert backend.list_nodes("pool-a")[0].unschedulable

    backend.set_unschedulable("a-1", False)
    assert not kube.stored("v1/nodes", None, "a-1")["spec"].get("unschedulable")
    assert backend.list_nodes("pool-a")[0].schedulable


def test_node_changes_on_a_missing_node_name_the_node(
    kube: KubeEmulator, backend: KubeClusterBackend
) -> None:
    with pytest.raises(BackendError, match="node ghost") as err:
        backend.add_taint("ghost", Taint(QUARANTINE_KEY, "x", "NoSchedule"))
    assert "404" in str(err.value) and not isinstance(err.value, TransientBackendError)
    with pytest.raises(BackendError, match="cordon on node ghost"):
        backend.set_unschedulable("ghost", True)


# ---- pods ----------------------------------------------------------------------------------


def test_list_pods_by_selector_and_namespace(
    kube: KubeEmulator, backend: KubeClusterBackend
) -> None:
    kube.seed_pod("w-0", node="a-1", labels={JOBSET: "train"})
    kube.seed_pod("w-1", labels={JOBSET: "train"}, phase="Pending", message="0/4 nodes free")
    kube.seed_pod("x-0", "elsewhere", node="a-2", labels={JOBSET: "train"})
    kube.seed_pod("other", labels={JOBSET: "other"})

    pods = backend.list_pods(NS, f"{JOBSET}=train")
    assert [(p.name, p.node, p.phase) for p in pods] == [
        ("w-0", "a-1", "Running"),
        ("w-1", None, "Pending"),
    ]
    assert pods[0].labels == {JOBSET: "train"}
    assert pods[1].message == "0/4 nodes free"
    everywhere = backend.list_pods(None, f"{JOBSET}=train")
    assert [p.name for p in everywhere] == ["w-0", "w-1", "x-0"]


def test_evict(kube: KubeEmulator, backend: KubeClusterBackend) -> None:
    kube.seed_pod("w-0", node="a-1")
    kube.seed_pod("guarded", node="a-1")
    kube.block_eviction("guarded")

    assert backend.evict("w-0", NS) is True
    assert not kube.exists("v1/pods", NS, "w-0")

    assert backend.evict("guarded", NS) is False  # a PDB says not now
    assert kube.exists("v1/pods", NS, "guarded")

    assert backend.evict("w-0", NS) is True  # already gone: the goal is met

    (eviction, *_) = [r for r in kube.requests() if r.subresource == "eviction"]
    assert eviction.url.path == f"/api/v1/namespaces/{NS}/pods/w-0/eviction"
    assert eviction.data["kind"] == "Eviction"
    assert eviction.data["apiVersion"] == "policy/v1"


def test_pod_logs_arrive_as_text(kube: KubeEmulator, backend: KubeClusterBackend) -> None:
    nccl = (
        "node-a-1:12:12 [0] NCCL INFO Using network IB\n"
        "node-a-1:12:40 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA\n"
        "# Avg bus bandwidth    : 354.9 \n"
        "naïve ✓\n"
    )
    kube.seed_pod("w-0", node="a-1")
    kube.set_pod_log("w-0", nccl)
    kube.set_pod_log("w-0", '{"busbw": 355.1}', container="nccl-log")
    kube.seed_pod("json-only")
    kube.set_pod_log("json-only", "42")

    assert backend.pod_logs("w-0", NS) == nccl
    # a sidecar's log that happens to be JSON comes back verbatim, not parsed and re-printed
    assert backend.pod_logs("w-0", NS, container="nccl-log") == '{"busbw": 355.1}'
    assert backend.pod_logs("json-only", NS) == "42"
    log_request = [r for r in kube.requests() if r.subresource == "log"][1]
    assert log_request.params["container"] == "nccl-log"

    with pytest.raises(BackendError, match=f"logs of pod {NS}/ghost.*404"):
        backend.pod_logs("ghost", NS)


# ---- workload status -----------------------------------------------------------------------

JOBSETS = "jobset.x-k8s.io/v1alpha2/jobsets"


def test_jobset_status_transitions(kube: KubeEmulator, backend: KubeClusterBackend) -> None:
    backend.apply(jobset("train", replicas=2))

    status = backend.workload_status("JobSet", "train", NS)
    assert (status.phase, status.pods, status.done) == ("Pending", (), False)

    kube.seed_pod("train-workers-0-0", node="a-1", labels={JOBSET: "train"})
    kube.seed_pod("train-workers-1-0", labels={JOBSET: "train"}, phase="Pending")
    status = backend.workload_status("JobSet", "train", NS)
    assert status.phase == "Pending"
    assert "1/2 pods running" in status.message

    kube.seed_pod("train-w-x", node="a-9", labels={JOBSET: "someone-else"})
    kube.set_pod_phase("train-workers-1-0", NS, "Running")
    status = backend.workload_status("JobSet", "train", NS)
    assert status.phase == "Running"
    assert [p.name for p in status.pods] == ["train-workers-0-0", "train-workers-1-0"]

    kube.patch_status(
        JOBSETS,
        NS,
        "train",
        {"conditions": [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted"}]},
    )
    status = backend.workload_status("JobSet", "train", NS)
    assert (status.phase, status.done) == ("Succeeded", True)

    backend.apply(jobset("broken"))
    kube.patch_status(
        JOBSETS,
        NS,
        "broken",
        {
            "conditions": [
                {"type": "Completed", "status": "False"},
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "FailedJobs",
                    "message": "jobset failed due to reaching max restarts",
                },
            ]
        },
    )
    status = backend.workload_status("JobSet", "broken", NS)
    assert status.phase == "Failed"
    assert "max restarts" in status.message

    assert backend.delete("JobSet", "train", NS)
    status = backend.workload_status("JobSet", "train", NS)
    assert (status.phase, status.done) == ("NotFound", True)


def test_jobset_waits_for_kueue_admission(kube: KubeEmulator, backend: KubeClusterBackend) -> None:
    backend.apply(jobset("gated", replicas=1, suspend=True))
    status = backend.workload_status("JobSet", "gated", NS)
    assert status.phase == "Pending"
    assert "admission" in status.message

    # Kueue admits by unsuspending; the pods follow
    kube.call(
        lambda: kube.handler.objects[JOBSETS, NS, "gated"].patch({"spec": {"suspend": False}})
    )
    assert backend.workload_status("JobSet", "gated", NS).phase == "Admitted"
    kube.seed_pod("gated-workers-0-0", node="a-1", labels={JOBSET: "gated"})
    assert backend.workload_status("JobSet", "gated", NS).phase == "Running"


def test_job_status(kube: KubeEmulator, backend: KubeClusterBackend) -> None:
    backend.apply(job("nccl-pair", parallelism=2))
    assert backend.workload_status("Job", "nccl-pair", NS).phase == "Pending"

    labels = {"batch.kubernetes.io/job-name": "nccl-pair", "job-name": "nccl-pair"}
    kube.seed_pod("nccl-pair-0", node="a-1", labels=labels)
    kube.seed_pod("nccl-pair-1", node="a-2", labels=labels)
    assert backend.workload_status("Job", "nccl-pair", NS).phase == "Running"

    kube.patch_status(
        "batch/v1/jobs", NS, "nccl-pair", {"conditions": [{"type": "Complete", "status": "True"}]}
    )
    assert backend.workload_status("Job", "nccl-pair", NS).phase == "Succeeded"

    # clusters before 1.27 label job pods with job-name only
    backend.apply(job("old", parallelism=1))
    kube.seed_pod("old-0", node="a-3", labels={"job-name": "old"})
    status = backend.workload_status("Job", "old", NS)
    assert status.phase == "Running" and [p.name for p in status.pods] == ["old-0"]

    kube.patch_status(
        "batch/v1/jobs",
        NS,
        "old",
        {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]},
    )
    assert backend.workload_status("Job", "old", NS).phase == "Failed"

    with pytest.raises(BackendError, match="Job and JobSet"):
        backend.workload_status("Pod", "old-0", NS)


# ---- errors --------------------------------------------------------------------------------


def test_server_errors_are_transient_and_say_what_failed(
    kube: KubeEmulator, backend: KubeClusterBackend
) -> None:
    kube.seed_node("a-1", "pool-a")
    with kube.fail("GET", r"^/api/v1/nodes$", 503), pytest.raises(TransientBackendError) as err:
        backend.list_nodes("pool-a")
    message = str(err.value)
    assert "list nodes" in message and "gpufleet.io/pool=pool-a" in message
    assert "503" in message and "ServiceUnavailable" in message

    with kube.fail("POST", "/jobsets$", 429), pytest.raises(TransientBackendError, match="429"):
        backend.apply(jobset("throttled"))
    assert not kube.exists(JOBSETS, NS, "throttled")  # the failed create stored nothing

    with kube.fail("PATCH", "/nodes/a-1$", 500), pytest.raises(TransientBackendError, match="a-1"):
        backend.set_unschedulable("a-1", True)
    assert not kube.stored("v1/nodes", None, "a-1")["spec"].get("unschedulable")


@pytest.mark.parametrize(
    ("status", "error_type"),
    [
        (400, KubeApiError),
        (403, KubeApiError),
        (404, KubeNotFound),
        (409, KubeConflict),
        (422, KubeApiError),
        (429, KubeTooManyRequests),
        (500, TransientKubeApiError),
        (502, TransientKubeApiError),
        (503, TransientKubeApiError),
        (504, TransientKubeApiError),
    ],
)
def test_each_status_becomes_one_error_type(
    kube: KubeEmulator, backend: KubeClusterBackend, status: int, error_type: type
) -> None:
    kube.seed_node("a-1", "pool-a")
    with kube.fail("PATCH", "/nodes/a-1$", status), pytest.raises(KubeApiError) as err:
        backend.set_unschedulable("a-1", True)  # no status is handled here: each surfaces
    assert type(err.value) is error_type
    assert err.value.status == status
    # transient exactly when the retry rule says so: 429 and 5xx, never a 409
    assert isinstance(err.value, TransientBackendError) == (status == 429 or status >= 500)


def test_client_errors_are_not_transient(kube: KubeEmulator, backend: KubeClusterBackend) -> None:
    denied = kube.fail("*", "/configmaps", 403, reason="Forbidden", message="RBAC: access denied")
    with denied, pytest.raises(BackendError) as err:
        backend.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}})
    assert not isinstance(err.value, TransientBackendError)
    message = str(err.value)
    assert f"create ConfigMap {NS}/cm" in message
    assert "403 Forbidden: RBAC: access denied" in message
    assert CONN_ID in message  # where to look


def test_unreachable_cluster_is_transient(
    kube: KubeEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = dict(kube.connection())
    config = kube.kube_config()
    config["clusters"][0]["cluster"]["server"] = "http://127.0.0.1:9"  # discard port: refused
    dead["extra"] = {"kube_config": config}
    monkeypatch.setenv("AIRFLOW_CONN_KMOCK_DEAD", json.dumps(dead))
    backend = KubeClusterBackend(conn_id="kmock_dead")
    with pytest.raises(TransientBackendError, match="cannot reach"):
        backend.list_nodes()


def test_kind_table_covers_what_gpufleet_creates() -> None:
    assert {
        "Namespace",
        "ConfigMap",
        "PersistentVolume",
        "PersistentVolumeClaim",
        "Pod",
        "Job",
        "JobSet",
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
        "Network",
        "GKENetworkParamSet",
    } <= set(KINDS)
