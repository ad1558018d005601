"""The objects onboarding applies: Kueue queues that cover what training pods request, GKE
RDMA networks matching the interfaces pods attach, and the ssh Secret the pairs mount."""

from __future__ import annotations

import pytest

from gpufleet.domain import workloads as w
from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.plumbing import gke_interfaces
from gpufleet.manifests.addons import render_gke_networks, render_kueue_objects, render_ssh_secret
from gpufleet.manifests.labels import VALIDATION_NAMESPACE
from gpufleet.manifests.nccl_validation import render_nccl_validation
from gpufleet.manifests.training import render_training_job
from tests.manifests.manifest_helpers import RUN_ID, native_pool_label, training_spec
from tests.support.schemas import validate_manifest


def test_kueue_objects_pin_the_pool_and_quota_its_gpus(ref: PoolRef) -> None:
    objs = render_kueue_objects(ref, namespace="ml-team")
    for obj in objs:
        validate_manifest(obj)
    topology, flavor, cq, lq = objs  # every pool here is on machines with topology labels
    assert [o["kind"] for o in objs] == ["Topology", "ResourceFlavor", "ClusterQueue", "LocalQueue"]
    assert flavor["spec"]["nodeLabels"] == {native_pool_label(ref): ref.pool.name}
    assert flavor["spec"]["topologyName"] == topology["metadata"]["name"]
    (group,) = cq["spec"]["resourceGroups"]
    (quota,) = group["flavors"]
    assert quota["name"] == flavor["metadata"]["name"]
    quotas = {r["name"]: r["nominalQuota"] for r in quota["resources"]}
    assert quotas["nvidia.com/gpu"] == str(ref.pool.nodes * ref.pool.gpu.count)
    assert group["coveredResources"] == [r["name"] for r in quota["resources"]]
    # every resource a plumbed training pod requests is covered, or Kueue would refuse it
    obj = render_training_job(ref, training_spec(namespace="ml-team"))
    for _, _, template in w.workload_pod_templates(obj):
        for container in template["spec"]["containers"] + template["spec"]["initContainers"]:
            assert set(container["resources"].get("requests", {})) <= set(quotas)
    assert lq["metadata"] == {
        "name": ref.pool.queue_name,
        "namespace": "ml-team",
        "labels": lq["metadata"]["labels"],
    }
    assert lq["spec"]["clusterQueue"] == cq["metadata"]["name"]
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == lq["metadata"]["name"]


def test_gke_networks_match_the_interfaces_pods_attach(ref: PoolRef) -> None:
    if ref.cluster.shape != "gke":
        with pytest.raises(ValueError, match="gke"):
            render_gke_networks(ref.cluster)
        return
    objs = render_gke_networks(ref.cluster)
    for obj in objs:
        validate_manifest(obj)
    # the gVNIC network's pair (deviceMode NetDevice) comes first; the rest are the RDMA NICs
    gvnic = ref.cluster.network.gvnic
    params = [o for o in objs if o["kind"] == "GKENetworkParamSet"]
    assert params[0]["metadata"]["name"] == gvnic.name
    assert params[0]["spec"]["deviceMode"] == "NetDevice"
    params = params[1:]
    networks = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Network"}
    assert networks.pop(gvnic.name)["spec"]["parametersRef"]["name"] == gvnic.name
    assert len(params) == len(networks) == ref.cluster.network.rdma_nics
    for param in params:
        assert param["spec"]["deviceMode"] == "RDMA"
        assert param["spec"]["vpc"] == ref.cluster.network.name
        net = networks[param["metadata"]["name"]]
        assert net["spec"]["type"] == "Device"
        assert net["spec"]["parametersRef"] == {
            "group": "networking.gke.io",
            "kind": "GKENetworkParamSet",
            "name": param["metadata"]["name"],
        }
    attached = {nic["network"] for nic in gke_interfaces(ref.cluster)} - {"default", gvnic.name}
    assert attached == set(networks)


def test_ssh_secret_for_the_pairs(gke_ref: PoolRef) -> None:
    secret = render_ssh_secret()
    validate_manifest(secret)
    assert secret["type"] == "kubernetes.io/ssh-auth"
    assert secret["metadata"]["namespace"] == VALIDATION_NAMESPACE
    key = secret["stringData"]["ssh-privatekey"]
    assert key.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert render_ssh_secret()["stringData"]["ssh-privatekey"] != key  # fresh each time
    obj = render_nccl_validation(gke_ref, [("a", "b")], RUN_ID)
    ((_, _, template),) = w.workload_pod_templates(obj)
    secrets = [v["secret"]["secretName"] for v in template["spec"]["volumes"] if "secret" in v]
    assert secrets == [secret["metadata"]["name"]]
