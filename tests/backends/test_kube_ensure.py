"""What region onboarding needs of the real-cluster backend, against kmock over HTTP.

``ensure_object`` (read-compare-patch: created / unchanged / updated, and a second run sends
no write) per kind family, ``server_version``, and a backend built from a kube config dict with
a bearer token (``ClusterCredentials.kube_config``), as for a cluster the DAG just created.
Assertions read the requests the emulator saw and the objects it stored.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import kmock
import pytest

from gpufleet.backends.base import ClusterCredentials
from gpufleet.backends.kube.cluster import KubeClusterBackend
from gpufleet.backends.kube.errors import KubeApiError
from gpufleet.errors import BackendError, TransientBackendError
from tests.support.kube_emulator import KubeEmulator

CONN_ID = "kmock_kube_ensure"
NS = "gpufleet-system"
MERGE_PATCH = "application/merge-patch+json"
ADMISSION_BETA = "admissionregistration.k8s.io/v1beta1"

# What /version answers (the test's reaction reads this, so a test can change it).
VERSION: dict[str, Any] = {}


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator(conn_id=CONN_ID, namespace=NS) as emulator:

        def setup() -> None:
            handler = emulator.handler
            assert handler is not None
            # kmock 0.8 bundles admissionregistration v1 only: the beta policy kinds are added
            for plural, kind in (
                ("mutatingadmissionpolicies", "MutatingAdmissionPolicy"),
                ("mutatingadmissionpolicybindings", "MutatingAdmissionPolicyBinding"),
            ):
                handler.resources[f"{ADMISSION_BETA}/{plural}"] = kmock.ResourceInfo(
                    kind=kind,
                    namespaced=False,
                    singular=kind.lower(),
                    verbs={"create", "delete", "get", "list", "patch", "update", "watch"},
                )
            handler["get /version"] << (lambda request: VERSION or None)

        emulator.call(setup)
        yield emulator


@pytest.fixture
def backend(kube: KubeEmulator) -> KubeClusterBackend:
    kube.reset()
    VERSION.clear()
    return KubeClusterBackend(conn_id=CONN_ID)


def calls(kube: KubeEmulator) -> list[tuple[str, str]]:
    out = [(r.method, r.url.path) for r in kube.requests()]
    kube.reset_requests()
    return out


def writes(kube: KubeEmulator) -> list[tuple[str, str]]:
    return [(m, p) for m, p in calls(kube) if m != "GET"]


# One manifest per kind family onboarding applies, where the emulator stores it, and one field
# to change: (manifest, "group/version/plural", namespace, change).
def _cases() -> list[tuple[dict[str, Any], str, str | None, Any]]:
    def set_path(*path: str, value: Any) -> Any:
        def change(manifest: dict[str, Any]) -> None:
            node = manifest
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value

        return change

    container = {"name": "installer", "image": "us-docker.pkg.dev/gib/nccl-plugin-gib:v1.0.6"}
    return [
        (
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "nccl-env", "labels": {"app": "gpufleet"}},
                "data": {"NCCL_NET": "gIB"},
            },
            "v1/configmaps",
            NS,
            set_path("data", "NCCL_NET", value="IB"),
        ),
        (
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
            "v1/namespaces",
            None,
            set_path("metadata", "labels", value={"gpufleet.io/training": "true"}),
        ),
        (
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": "lustre-team-a"},
                "spec": {
                    "capacity": {"storage": "18000Gi"},
                    "accessModes": ["ReadWriteMany"],
                    "csi": {"driver": "lustre.csi.storage.gke.io", "volumeHandle": "p/z/l"},
                },
            },
            "v1/persistentvolumes",
            None,
            set_path("spec", "capacity", "storage", value="36000Gi"),
        ),
        (
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "nccl-rdma-installer", "namespace": "kube-system"},
                "spec": {
                    "selector": {"matchLabels": {"name": "nccl-rdma-installer"}},
                    "template": {
                        "metadata": {"labels": {"name": "nccl-rdma-installer"}},
                        "spec": {"containers": [container], "hostNetwork": True},
                    },
                },
            },
            "apps/v1/daemonsets",
            "kube-system",
            set_path(
                "spec", "template", "spec", "containers", 0, "image", value="nccl-plugin-gib:v1.1"
            ),
        ),
        (
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "kueue-batch-user"},
                "rules": [
                    {
                        "apiGroups": ["kueue.x-k8s.io"],
                        "resources": ["localqueues"],
                        "verbs": ["get"],
                    }
                ],
            },
            "rbac.authorization.k8s.io/v1/clusterroles",
            None,
            set_path("rules", 0, "verbs", value=["get", "list"]),
        ),
        (
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "leader-election"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "le"},
                "subjects": [{"kind": "ServiceAccount", "name": "kueue", "namespace": NS}],
            },
            "rbac.authorization.k8s.io/v1/rolebindings",
            NS,
            set_path("subjects", 0, "name", value="kueue-controller"),
        ),
        (
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": "jobsets.jobset.x-k8s.io"},
                "spec": {
                    "group": "jobset.x-k8s.io",
                    "names": {"kind": "JobSet", "plural": "jobsets"},
                    "scope": "Namespaced",
                    "versions": [{"name": "v1alpha2", "served": True, "storage": True}],
                },
            },
            "apiextensions.k8s.io/v1/customresourcedefinitions",
            None,
            set_path("spec", "versions", 0, "served", value=False),
        ),
        (
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": "kueue-mutating"},
                "webhooks": [
                    {
                        "name": "mjobset.kb.io",
                        "clientConfig": {"service": {"name": "kueue-webhook", "namespace": NS}},
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                    }
                ],
            },
            "admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
            None,
            set_path("webhooks", 0, "sideEffects", value="NoneOnDryRun"),
        ),
        (
            {
                "apiVersion": ADMISSION_BETA,
                "kind": "MutatingAdmissionPolicy",
                "metadata": {"name": "gpufleet-plumbing"},
                "spec": {
                    "failurePolicy": "Fail",
                    "reinvocationPolicy": "IfNeeded",
                    "mutations": [{"patchType": "ApplyConfiguration"}],
                },
            },
            f"{ADMISSION_BETA}/mutatingadmissionpolicies",
            None,
            set_path("spec", "failurePolicy", value="Ignore"),
        ),
        (
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "ResourceFlavor",
                "metadata": {"name": "pool-a"},
                "spec": {"nodeLabels": {"gpufleet.io/pool": "pool-a"}},
            },
            "kueue.x-k8s.io/v1beta1/resourceflavors",
            None,
            set_path("spec", "nodeLabels", "gpufleet.io/pool", value="pool-b"),
        ),
        (
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "LocalQueue",
                "metadata": {"name": "pool-a", "namespace": "team-a"},
                "spec": {"clusterQueue": "pool-a"},
            },
            "kueue.x-k8s.io/v1beta1/localqueues",
            "team-a",
            set_path("spec", "clusterQueue", value="pool-b"),
        ),
    ]


CASES = _cases()


@pytest.mark.parametrize(
    ("manifest", "resource", "namespace", "change"), CASES, ids=[c[0]["kind"] for c in CASES]
)
def test_ensure_object_creates_then_leaves_then_updates(
    kube: KubeEmulator,
    backend: KubeClusterBackend,
    manifest: dict[str, Any],
    resource: str,
    namespace: str | None,
    change: Any,
) -> None:
    name = manifest["metadata"]["name"]
    ns_path = f"/namespaces/{namespace}" if namespace else ""
    prefix = "/api/v1" if resource.startswith("v1/") else f"/apis/{resource.rpartition('/')[0]}"
    collection = f"{prefix}{ns_path}/{resource.rpartition('/')[2]}"

    assert backend.ensure_object(copy.deepcopy(manifest)) == "created"
    assert calls(kube) == [("GET", f"{collection}/{name}"), ("POST", collection)]
    stored = kube.stored(resource, namespace, name)
    assert stored["kind"] == manifest["kind"]
    for key in set(manifest) - {"apiVersion", "kind", "metadata"}:
        assert stored[key] == manifest[key]

    # a second run reads and writes nothing
    assert backend.ensure_object(copy.deepcopy(manifest)) == "unchanged"
    assert calls(kube) == [("GET", f"{collection}/{name}")]

    changed = copy.deepcopy(manifest)
    change(changed)
    assert backend.ensure_object(copy.deepcopy(changed)) == "updated"
    requests = kube.requests()
    assert [(r.method, r.url.path) for r in requests] == [
        ("GET", f"{collection}/{name}"),
        ("PATCH", f"{collection}/{name}"),
    ]
    assert requests[1].headers["Content-Type"] == MERGE_PATCH
    assert "status" not in json.loads(requests[1].body)
    kube.reset_requests()
    stored = kube.stored(resource, namespace, name)
    for key in set(changed) - {"apiVersion", "kind", "metadata"}:
        assert stored[key] == changed[key]
    assert (stored["metadata"].get("labels") or {}) == (changed["metadata"].get("labels") or {})

    assert backend.ensure_object(copy.deepcopy(changed)) == "unchanged"
    assert writes(kube) == []


def test_what_the_server_adds_is_not_a_difference(
    kube: KubeEmulator, backend: KubeClusterBackend
) -> None:
    manifest = CASES[3][0]  # the DaemonSet
    assert backend.ensure_object(copy.deepcopy(manifest)) == "created"
    key = (kmock.resource("apps/v1/daemonsets"), "kube-system", "nccl-rdma-installer")
    # what an API server and its controllers add: identity, defaults inside list items,
    # other labels and annotations, status
    server_side = {
        "metadata": {
            "uid": "0b5e",
            "resourceVersion": "42",
            "generation": 1,
            "labels": {"addonmanager.kubernetes.io/mode": "Reconcile"},
            "annotations": {"deprecated.daemonset.template.generation": "1"},
        },
        "spec": {"revisionHistoryLimit": 10, "updateStrategy": {"type": "RollingUpdate"}},
        "status": {"numberReady": 3},
    }
    kube.call(lambda: kube.handler.objects[key].patch(server_side))
    stored = kube.stored("apps/v1/daemonsets", "kube-system", "nccl-rdma-installer")
    containers = stored["spec"]["template"]["spec"]["containers"]
    containers[0].update(imagePullPolicy="IfNotPresent", terminationMessagePath="/dev/x")
    kube.call(
        lambda: kube.handler.objects[key].patch(
            {"spec": {"template": {"spec": {"containers": containers, "tolerations": None}}}}
        )
    )
    kube.reset_requests()

    with_empty = copy.deepcopy(manifest)
    with_empty["spec"]["template"]["spec"]["tolerations"] = []  # the server drops empty lists
    assert backend.ensure_object(with_empty) == "unchanged"
    assert backend.ensure_object(copy.deepcopy(manifest)) == "unchanged"
    assert writes(kube) == []


def test_labels_and_annotations_converge_and_a_null_label_is_removed(
    kube: KubeEmulator, backend: KubeClusterBackend
) -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "kueue", "labels": {"a": "1", "old": "x"}},
    }
    assert backend.ensure_object(copy.deepcopy(manifest)) == "created"
    manifest["metadata"]["labels"] = {"a": "1", "old": None}
    manifest["metadata"]["annotations"] = {"gpufleet.io/owner": "onboarding"}
    assert backend.ensure_object(copy.deepcopy(manifest)) == "updated"
    stored = kube.stored("v1/serviceaccounts", NS, "kueue")["metadata"]
    assert stored["labels"] == {"a": "1"}
    assert stored["annotations"] == {"gpufleet.io/owner": "onboarding"}
    kube.reset_requests()
    assert backend.ensure_object(copy.deepcopy(manifest)) == "unchanged"
    assert writes(kube) == []


def test_a_secret_string_data_is_compared_as_what_the_server_stores(
    kube: KubeEmulator, backend: KubeClusterBackend
) -> None:
    # An API server stores stringData base64-encoded in data, and never stores stringData.
    kube.core.create_namespaced_secret(
        NS,
        {"metadata": {"name": "webhook-cert"}, "data": {"token": "czNjcjN0"}, "type": "Opaque"},
    )
    kube.reset_requests()
    manifest = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "webhook-cert"},
        "stringData": {"token": "s3cr3t"},
    }
    assert backend.ensure_object(copy.deepcopy(manifest)) == "unchanged"
    manifest["stringData"]["token"] = "rotated"
    assert backend.ensure_object(copy.deepcopy(manifest)) == "updated"
    assert [m for m, _ in writes(kube)] == ["PATCH"]


def test_a_create_that_conflicts_reads_again_and_compares(
    kube: KubeEmulator, backend: KubeClusterBackend
) -> None:
    # Someone created the object between our read and our create: the 404 is injected while
    # the object exists, so the create gets the API server's own 409.
    manifest = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "pool-a"},
        "spec": {"namespaceSelector": {}, "cohort": "fleet"},
    }
    backend.apply(copy.deepcopy(manifest))
    kube.reset_requests()
    path = "/apis/kueue.x-k8s.io/v1beta1/clusterqueues"
    with kube.fail("GET", f"{path}/pool-a$", 404, times=1):
        assert backend.ensure_object(copy.deepcopy(manifest)) == "unchanged"
    assert calls(kube) == [("GET", f"{path}/pool-a"), ("POST", path), ("GET", f"{path}/pool-a")]

    manifest["spec"]["cohort"] = "other"
    with kube.fail("GET", f"{path}/pool-a$", 404, times=1):
        assert backend.ensure_object(copy.deepcopy(manifest)) == "updated"
    assert [m for m, _ in calls(kube)] == ["GET", "POST", "GET", "PATCH"]
    assert kube.stored("kueue.x-k8s.io/v1beta1/clusterqueues", None, "pool-a")["spec"] == {
        "namespaceSelector": {},
        "cohort": "other",
    }

    # a 409 and then nothing there: gone again, a retry will create it
    with (
        kube.fail("POST", f"{path}$", 409, times=1),
        pytest.raises(TransientBackendError, match="gone"),
    ):
        backend.ensure_object({**manifest, "metadata": {"name": "ghost"}})


def test_an_immutable_field_says_what_differs_and_what_to_do(
    kube: KubeEmulator, backend: KubeClusterBackend
) -> None:
    manifest = CASES[5][0]  # the RoleBinding: roleRef cannot change
    backend.ensure_object(copy.deepcopy(manifest))
    changed = copy.deepcopy(manifest)
    changed["roleRef"]["name"] = "other"
    message = "RoleBinding.rbac.authorization.k8s.io is invalid: roleRef: cannot change roleRef"
    with (
        kube.fail("PATCH", "/rolebindings/", 422, reason="Invalid", message=message),
        pytest.raises(KubeApiError) as err,
    ):
        backend.ensure_object(changed)
    assert err.value.status == 422 and not isinstance(err.value, TransientBackendError)
    assert "roleRef.name" in str(err.value) and "delete" in str(err.value)


def test_kinds_are_refused_or_routed_by_api_version(
    kube: KubeEmulator, backend: KubeClusterBackend
) -> None:
    with pytest.raises(BackendError, match="'Frobnicator'"):
        backend.ensure_object(
            {"apiVersion": "v1", "kind": "Frobnicator", "metadata": {"name": "x"}}
        )
    with pytest.raises(BackendError, match="apps/v1"):
        backend.ensure_object(
            {"apiVersion": "apps/v2", "kind": "DaemonSet", "metadata": {"name": "x"}}
        )
    with pytest.raises(BackendError, match=r"v1beta1 or .*/v1\b"):
        backend.ensure_object(
            {"apiVersion": "batch/v1", "kind": "MutatingAdmissionPolicy", "metadata": {"name": "x"}}
        )
    assert kube.requests() == []

    # the GA admission policy goes to v1, and delete can name that version
    kube.call(
        lambda: kube.handler.resources.__setitem__(
            "admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings",
            kmock.ResourceInfo(
                kind="MutatingAdmissionPolicyBinding",
                namespaced=False,
                singular="mutatingadmissionpolicybinding",
                verbs={"create", "delete", "get", "patch"},
            ),
        )
    )
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": "gpufleet-plumbing"},
        "spec": {"policyName": "gpufleet-plumbing"},
    }
    assert backend.ensure_object(binding) == "created"
    res = "admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings"
    assert kube.exists(res, None, "gpufleet-plumbing")
    assert backend.delete(
        "MutatingAdmissionPolicyBinding",
        "gpufleet-plumbing",
        api_version="admissionregistration.k8s.io/v1",
    )
    assert not kube.exists(res, None, "gpufleet-plumbing")


# ---- server version ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"major": "1", "minor": "33", "gitVersion": "v1.33.2"}, "1.33"),
        ({"major": "1", "minor": "28+", "gitVersion": "v1.28.15-gke.1020000"}, "1.28"),
        ({"major": "1", "minor": "30+"}, "1.30"),
        ({"major": "", "minor": "", "gitVersion": "v1.35.1-eks-4f1f2e4"}, "1.35"),
    ],
)
def test_server_version(
    kube: KubeEmulator, backend: KubeClusterBackend, answer: dict, expected: str
) -> None:
    VERSION.update(answer)
    assert backend.server_version() == expected
    assert calls(kube) == [("GET", "/version")]


def test_server_version_without_a_version_is_a_clear_error(
    kube: KubeEmulator, backend: KubeClusterBackend
) -> None:
    VERSION.update({"major": "", "minor": "", "platform": "linux/amd64"})
    with pytest.raises(BackendError, match=f"/version.*{CONN_ID}|{CONN_ID}.*/version"):
        backend.server_version()


def test_server_version_of_an_unreachable_cluster(kube: KubeEmulator) -> None:
    credentials = ClusterCredentials(server="http://127.0.0.1:9", token="t")  # refused
    backend = KubeClusterBackend.from_kube_config(credentials.kube_config("gone"))
    with pytest.raises(BackendError, match="version") as err:
        backend.server_version()
    assert isinstance(err.value, TransientBackendError)  # the retry rule retries it
    assert "cannot reach" in str(err.value) and "'gone'" in str(err.value)


# ---- a backend from a kube config dict -----------------------------------------------------


def test_a_backend_from_cloud_credentials_sends_the_bearer_token(
    kube: KubeEmulator, backend: KubeClusterBackend
) -> None:
    from kubernetes import client

    default_before = client.Configuration.get_default_copy()
    credentials = ClusterCredentials(server=kube.url, token="ya29.onboarding-token")
    from_cloud = KubeClusterBackend.from_kube_config(
        credentials.kube_config("gke-a3-ultra"), pool_label_keys=("cloud.google.com/gke-nodepool",)
    )
    assert from_cloud.conn_id is None
    assert "gke-a3-ultra" in repr(from_cloud)
    kube.seed_node("n-1", "pool-a", pool_label="cloud.google.com/gke-nodepool")
    kube.reset_requests()

    assert from_cloud.server_version() == "1.26"  # kmock's own /version
    assert [n.pool for n in from_cloud.list_nodes("pool-a")] == ["pool-a"]
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}
    assert from_cloud.ensure_object(cm) == "created"
    assert kube.exists("v1/configmaps", "default", "c")  # no namespace in the context
    assert from_cloud.delete("ConfigMap", "c") is True

    requests = kube.requests()
    assert len(requests) >= 6
    assert {r.headers.get("Authorization") for r in requests} == {"Bearer ya29.onboarding-token"}
    # the same client plumbing as a connection's: urllib3 retries off; and the kube config
    # went into a Configuration of its own, not the process-wide default
    assert from_cloud.api_client.configuration.retries is False
    default_after = client.Configuration.get_default_copy()
    assert default_after.host == default_before.host
    assert default_after.api_key == default_before.api_key


def test_a_kube_config_context_namespace_is_the_default_namespace(kube: KubeEmulator) -> None:
    kube.reset()
    config = ClusterCredentials(server=kube.url, token="t").kube_config("c1")
    config["contexts"][0]["context"]["namespace"] = "team-a"
    backend = KubeClusterBackend(kube_config=config)
    assert (
        backend.ensure_object({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
        == "created"
    )
    assert kube.exists("v1/configmaps", "team-a", "x")


def test_a_broken_kube_config_is_a_clear_error(kube: KubeEmulator) -> None:
    backend = KubeClusterBackend.from_kube_config({"apiVersion": "v1", "kind": "Config"})
    with pytest.raises(BackendError, match="kube config") as err:
        backend.server_version()
    assert not isinstance(err.value, TransientBackendError)
