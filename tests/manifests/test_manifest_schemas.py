"""The validator bites: injected typos and bad values in rendered manifests are caught, with
their JSON paths, every one of them."""

from __future__ import annotations

import copy

import pytest

from gpufleet.domain.fleet import PoolRef
from gpufleet.manifests.addons import render_gke_networks, render_kueue_objects
from gpufleet.manifests.nccl_validation import render_nccl_validation
from gpufleet.manifests.storage_validation import PoolCheck, render_storage_validation
from tests.support.schemas import manifest_problems, validate_manifest

RUN_ID = "nightly-2025-06-01"
POD = ("spec", "replicatedJobs", 0, "template", "spec", "template", "spec")


def dig(obj, path):
    for part in path:
        obj = obj[part]
    return obj


@pytest.fixture
def jobset(ref: PoolRef) -> dict:
    return render_nccl_validation(ref, [("node-a", "node-b"), ("node-c", "node-d")], RUN_ID)


def test_rendered_manifests_have_no_problems(jobset: dict) -> None:
    assert manifest_problems(jobset) == []


def test_typo_in_a_jobset_field_is_caught(jobset: dict) -> None:
    bad = copy.deepcopy(jobset)
    bad["spec"]["network"]["enableDNSHostname"] = bad["spec"]["network"].pop("enableDNSHostnames")
    with pytest.raises(ValueError) as err:
        validate_manifest(bad)
    assert "spec.network: Additional properties are not allowed ('enableDNSHostname'" in str(
        err.value
    )


def test_typo_in_a_replicated_job_field_is_caught(jobset: dict) -> None:
    bad = copy.deepcopy(jobset)
    bad["spec"]["replicatedJobs"][1]["replica"] = bad["spec"]["replicatedJobs"][1].pop("replicas")
    problems = manifest_problems(bad)
    assert any(p.startswith("spec.replicatedJobs[1]: ") and "'replica'" in p for p in problems)


def test_typo_inside_the_job_template_is_caught_by_kubernetes_validate(jobset: dict) -> None:
    bad = copy.deepcopy(jobset)
    container = dig(bad, POD)["containers"][0]
    container["volumeMount"] = container.pop("volumeMounts")
    problems = manifest_problems(bad)
    path = "spec.replicatedJobs[0].template.spec.template.spec.containers[0]"
    assert any(p.startswith(path + ": ") and "'volumeMount'" in p for p in problems), problems


def test_missing_required_field_in_the_job_template_is_caught(jobset: dict) -> None:
    bad = copy.deepcopy(jobset)
    del dig(bad, POD)["containers"][0]["name"]
    problems = manifest_problems(bad)
    assert any("'name' is a required property" in p for p in problems), problems


@pytest.mark.parametrize("policy", ["Always", "Sometimes"])
def test_bad_restart_policy_in_a_jobset_pod_is_caught(jobset: dict, policy: str) -> None:
    bad = copy.deepcopy(jobset)
    dig(bad, POD)["restartPolicy"] = policy
    with pytest.raises(ValueError) as err:
        validate_manifest(bad)
    assert (
        f"spec.replicatedJobs[0].template.spec.template.spec.restartPolicy: '{policy}' is not "
        "one of Never, OnFailure" in str(err.value)
    )


def test_bad_restart_policy_in_a_job_is_caught(ref: PoolRef) -> None:
    job = render_storage_validation(ref, ["node-a"], RUN_ID)
    assert manifest_problems(job) == []
    job["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    assert manifest_problems(job) == [
        "spec.template.spec.restartPolicy: 'Always' is not one of Never, OnFailure (a Job's pods)"
    ]


def test_bad_enums_we_rely_on_are_caught(jobset: dict) -> None:
    bad = copy.deepcopy(jobset)
    bad["spec"]["replicatedJobs"][0]["template"]["spec"]["completionMode"] = "indexed"
    pod = dig(bad, POD)
    pod["tolerations"][0]["effect"] = "NoSchedul"
    pod["initContainers"][0]["restartPolicy"] = "OnFailure"
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms["nodeSelectorTerms"][0]["matchExpressions"][0]["operator"] = "in"
    problems = manifest_problems(bad)
    assert len(problems) == 4, problems
    assert any("completionMode: 'indexed' is not one of NonIndexed, Indexed" in p for p in problems)
    assert any("tolerations[0].effect: 'NoSchedul'" in p for p in problems)
    assert any("initContainers[0].restartPolicy: 'OnFailure'" in p for p in problems)
    assert any("matchExpressions[0].operator: 'in'" in p for p in problems)


def test_every_problem_is_listed_not_only_the_first(jobset: dict) -> None:
    bad = copy.deepcopy(jobset)
    bad["spec"]["failurePolicy"]["maxRestart"] = 0
    bad["spec"]["successPolicy"]["operator"] = "Most"
    dig(bad, POD)["restartPolicy"] = "Always"
    dig(bad, POD)["containers"][0]["imagePullPolicy"] = "Sometimes"
    bad["metadata"]["labels"]["gpufleet.io/run"] = "scheduled__2025:00"
    with pytest.raises(ValueError) as err:
        validate_manifest(bad)
    text = str(err.value)
    assert "(5 problems)" in text
    for fragment in (
        "spec.failurePolicy:",
        "spec.successPolicy.operator: 'Most' is not one of All, Any",
        "spec.template.spec.restartPolicy: 'Always'",
        "containers[0].imagePullPolicy: 'Sometimes'",
        "metadata.labels.gpufleet.io/run: label value",
    ):
        assert fragment in text


def test_jobset_name_too_long_for_its_pod_names_is_caught(jobset: dict) -> None:
    bad = copy.deepcopy(jobset)
    bad["metadata"]["name"] = "nccl-" + "x" * 45  # 50 characters
    problems = manifest_problems(bad)
    assert any("pod names generated for replicatedJob 'pair-0'" in p for p in problems)
    bad["metadata"]["name"] = "9-starts-with-a-digit"
    assert any("is not a DNS-1035 label" in p for p in manifest_problems(bad))


def test_jobset_policy_targets_must_exist(jobset: dict) -> None:
    bad = copy.deepcopy(jobset)
    bad["spec"]["successPolicy"]["targetReplicatedJobs"] = ["pair-0", "pair-9"]
    bad["spec"]["replicatedJobs"][1]["name"] = "pair-0"
    problems = manifest_problems(bad)
    assert "spec.successPolicy.targetReplicatedJobs[1]: no replicatedJob named 'pair-9'" in problems
    assert any("replicatedJob name 'pair-0' is repeated" in p for p in problems)


def test_kueue_and_gke_objects_are_checked_too(gke_ref: PoolRef) -> None:
    topology, flavor, cq, lq = render_kueue_objects(gke_ref)
    cq = copy.deepcopy(cq)
    cq["spec"]["resourceGroup"] = cq["spec"].pop("resourceGroups")
    assert any("'resourceGroup' was unexpected" in p for p in manifest_problems(cq))
    _, _, cq2, _ = render_kueue_objects(gke_ref)
    cq2["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "lots"
    cq2["metadata"]["namespace"] = "default"
    problems = manifest_problems(cq2)
    assert any("nominalQuota: 'lots': expected resource.Quantity" in p for p in problems)
    assert "metadata.namespace: ClusterQueue is cluster-scoped and takes no namespace" in problems
    cq3 = copy.deepcopy(render_kueue_objects(gke_ref)[2])
    cq3["spec"]["resourceGroups"][0]["coveredResources"].reverse()
    assert any("must list the coveredResources in order" in p for p in manifest_problems(cq3))
    param, network = render_gke_networks(gke_ref.cluster)[:2]
    param["spec"]["deviceMode"] = "Rdma"
    assert manifest_problems(param) == [
        "spec.deviceMode: 'Rdma' is not one of NetDevice, DPDK-VFIO, RDMA"
    ]
    network["spec"]["parametersRef"]["nmae"] = network["spec"]["parametersRef"].pop("name")
    problems = manifest_problems(network)
    assert any("'name' is a required property" in p for p in problems)
    assert any("'nmae' was unexpected" in p for p in problems)
    lq["spec"]["clusterQueue"] = "Not_A_Name"
    assert any(p.startswith("spec.clusterQueue: ") for p in manifest_problems(lq))
    assert manifest_problems(flavor) == [] and manifest_problems(topology) == []


def test_unknown_kinds_and_non_objects_are_refused() -> None:
    (problem,) = manifest_problems({"apiVersion": "acme.io/v1", "kind": "Gizmo", "metadata": {}})
    assert problem.startswith("kind: no schema for Gizmo (acme.io/v1)")
    assert manifest_problems(["not", "a", "manifest"]) == [
        "(root): a manifest is a mapping, not list"
    ]
    with pytest.raises(ValueError, match="apiVersion and kind"):
        validate_manifest({"metadata": {"name": "x"}})


def test_core_kinds_go_through_kubernetes_validate() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.37", "comand": ["true"]}]},
    }
    problems = manifest_problems(pod)
    assert problems == [
        "spec.containers[0]: Additional properties are not allowed ('comand' was unexpected) "
        "(unknown field: check the spelling)"
    ]
    pod["spec"]["containers"][0]["command"] = pod["spec"]["containers"][0].pop("comand")
    assert manifest_problems(pod) == []
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "gpufleet-validation"},
    }
    assert manifest_problems(namespace) == []


def test_pairs_with_the_health_and_storage_init_containers_validate(ref: PoolRef) -> None:
    jobset = render_nccl_validation(
        ref,
        [("node-a", "node-b"), ("node-c", "node-d")],
        RUN_ID,
        health_levels=[1, 3],
        pool_check=PoolCheck(pair=1, size_gib_per_node=4, runtime_seconds=60),
    )
    assert manifest_problems(jobset) == []
    pod = dig(jobset, POD[:2] + (1,) + POD[3:])
    assert [c["name"] for c in pod["initContainers"]] == ["gpu-health", "fio", "nccl-log"]
    bad = copy.deepcopy(jobset)
    pod = dig(bad, POD[:2] + (1,) + POD[3:])
    pod["initContainers"][1]["volumeMount"] = pod["initContainers"][1].pop("volumeMounts")
    pod["initContainers"][0]["securityContext"]["capabilities"]["add"] = "SYSLOG"
    problems = manifest_problems(bad)
    path = "spec.replicatedJobs[1].template.spec.template.spec.initContainers"
    assert any(p.startswith(f"{path}[1]: ") and "'volumeMount'" in p for p in problems), problems
    assert any(p.startswith(f"{path}[0].securityContext.capabilities.add") for p in problems), (
        problems
    )
