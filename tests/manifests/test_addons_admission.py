"""Admission-time plumbing: the MutatingAdmissionPolicy is generated from the launch's plumbing
rules, and a bare pod mutated by it carries, field by field, the same plumbing as a pod the
launch renders on that pool.

The policy's CEL is evaluated with cel-python (``celpy``): its ``matchConditions`` decide which
pods opt in, and its ``Object{...}`` apply configuration is built by evaluating the expression.
cel-python has no Kubernetes type provider, so ``Object`` and its nested type names are bound
to a stand-in whose construction yields the plain map (what the API server's type-checked
construction yields as an apply configuration); the result is merged into the pod the way
server-side apply merges a Pod: ``containers``, ``initContainers``, ``volumes`` and ``env`` by
``name``, ``volumeMounts`` by ``mountPath``, maps key by key.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.plumbing import inspect_pod, nccl_log_sidecar, pod_plumbing
from gpufleet.domain.workloads import workload_pod_templates
from gpufleet.manifests.addons import (
    MAIN_CONTAINER_CEL,
    PLUMBING_LABEL,
    admission_api_version,
    plumbing_apply_configuration,
    render_admission_plumbing,
)
from gpufleet.manifests.labels import pvc_name
from gpufleet.manifests.training import render_training_job
from tests.manifests.manifest_helpers import env_of, training_spec
from tests.support.schemas import validate_manifest

celpy = pytest.importorskip("celpy")
celtypes = pytest.importorskip("celpy.celtypes")

_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
}


class _ObjectType(celtypes.MapType):
    """Stand-in for Kubernetes' ``Object`` type tree: selecting a field names a nested type;
    constructing one yields its fields as a map."""

    def __init__(self, path: str = "Object") -> None:
        super().__init__({})
        self.path = path

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: Any) -> _ObjectType:
        return _ObjectType(f"{self.path}.{key}")

    def get(self, key: Any, default: Any = None) -> _ObjectType:
        return self[key]

    def __call__(self, fields: Any = None) -> Any:
        return celtypes.MapType(fields or {})


def _py(value: Any) -> Any:
    if isinstance(value, celtypes.MapType):
        return {str(k): _py(v) for k, v in value.items()}
    if isinstance(value, celtypes.ListType):
        return [_py(v) for v in value]
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.IntType):
        return int(value)
    if isinstance(value, celtypes.StringType):
        return str(value)
    raise TypeError(f"unexpected CEL value {value!r}")


def evaluate(expression: str, pod: dict[str, Any]) -> Any:
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    result = program.evaluate({"object": celpy.json_to_cel(pod), "Object": _ObjectType()})
    if isinstance(result, Exception):
        raise result
    return _py(result)


def apply_merge(target: Any, patch: Any, field: str = "") -> Any:
    """Server-side apply's merge of ``patch`` into ``target`` for the Pod fields we touch."""
    if isinstance(patch, dict) and isinstance(target, dict):
        out = dict(target)
        for key, value in patch.items():
            out[key] = apply_merge(target.get(key), value, key) if key in target else value
        return out
    if isinstance(patch, list) and field in _MERGE_KEYS and isinstance(target, list):
        key = _MERGE_KEYS[field]
        out = list(target)
        index = {item.get(key): i for i, item in enumerate(out)}
        for item in patch:
            if item.get(key) in index:
                out[index[item[key]]] = apply_merge(out[index[item[key]]], item, field)
            else:
                out.append(item)
        return out
    return patch


def admit(policy: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
    """The pod after ``policy`` (unchanged if a match condition is false)."""
    for condition in policy["spec"]["matchConditions"]:
        if evaluate(condition["expression"], pod) is not True:
            return pod
    for mutation in policy["spec"]["mutations"]:
        assert mutation["patchType"] == "ApplyConfiguration"
        pod = apply_merge(pod, evaluate(mutation["applyConfiguration"]["expression"], pod))
    return pod


def bare_pod(namespace: str, pool: str | None, **container: Any) -> dict[str, Any]:
    labels = {PLUMBING_LABEL: pool} if pool else {"app": "notebook"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bare", "namespace": namespace, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "main", "image": "registry.example.com/train:1", **container},
                {"name": "helper", "image": "busybox:1.37"},
            ],
        },
    }


def policy_of(ref: PoolRef, version: str = "1.36") -> dict[str, Any]:
    objects, _ = render_admission_plumbing(
        ref.cluster, server_version=version, namespaces=ref.cluster.namespaces
    )
    (policy,) = [
        o
        for o in objects
        if o["kind"] == "MutatingAdmissionPolicy"
        and o["metadata"]["labels"]["gpufleet.io/pool"] == ref.pool.name
    ]
    return policy


def launched_pod(ref: PoolRef, namespace: str) -> dict[str, Any]:
    spec = training_spec(namespace=namespace, nodes=1, gpus_per_node=ref.pool.gpu.count, env={})
    ((_, _, template),) = workload_pod_templates(render_training_job(ref, spec))
    return template


@pytest.mark.parametrize("version", ["1.34", "1.35.2-gke.1000", "v1.36.0", "1.37"])
def test_policy_and_binding_validate(ref: PoolRef, version: str) -> None:
    objects, note = render_admission_plumbing(
        ref.cluster, server_version=version, namespaces=ref.cluster.namespaces
    )
    assert len(objects) == 2 * len(ref.cluster.node_pools)
    for obj in objects:
        validate_manifest(obj)
    api = objects[0]["apiVersion"]
    if version.lstrip("v").startswith(("1.34", "1.35")):
        assert api == "admissionregistration.k8s.io/v1beta1"
        assert "feature gate" in note
    else:
        assert api == "admissionregistration.k8s.io/v1" and note is None
    binding = objects[1]
    assert binding["spec"]["policyName"] == objects[0]["metadata"]["name"]
    (expr,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert expr["values"] == list(ref.cluster.namespaces)


def test_below_1_34_nothing_and_why() -> None:
    api, note = admission_api_version("1.33", "cluster 'x'")
    assert api is None and "1.33" in note and "launch" in note
    with pytest.raises(ValueError, match="not a Kubernetes version"):
        admission_api_version("latest")


def test_only_pods_that_opt_in_for_this_pool_are_mutated(ref: PoolRef) -> None:
    policy = policy_of(ref)
    ns = ref.cluster.namespaces[0]
    for pod in (bare_pod(ns, None), bare_pod(ns, "some-other-pool")):
        assert admit(policy, pod) == pod
    assert admit(policy, bare_pod(ns, ref.pool.name)) != bare_pod(ns, ref.pool.name)


def test_mutated_bare_pod_carries_the_launch_plumbing_field_by_field(ref: PoolRef) -> None:
    cluster, pool = ref.cluster, ref.pool
    ns = cluster.namespaces[0]
    mutated = admit(
        policy_of(ref), bare_pod(ns, pool.name, env=[{"name": "NCCL_NET", "value": "Socket"}])
    )
    launched = launched_pod(ref, ns)
    plumbing = pod_plumbing(cluster, pool, pin_network=True)
    m_spec, l_spec = mutated["spec"], launched["spec"]
    m_main, l_main = m_spec["containers"][0], l_spec["containers"][0]

    # annotations: the GKE interface attachments (EKS has none)
    for key in plumbing.annotations:
        assert mutated["metadata"]["annotations"][key] == launched["metadata"]["annotations"][key]
    # placement on the pool
    assert m_spec["nodeSelector"] == l_spec["nodeSelector"]
    # volumes: every volume the launch adds, identical, and nothing else
    assert {v["name"]: v for v in m_spec["volumes"]} == {v["name"]: v for v in l_spec["volumes"]}
    # environment: every plumbing variable, same value; the pod's own NCCL_NET lost to the pin
    m_env, l_env = env_of(m_main), env_of(l_main)
    for name in plumbing.env:
        assert m_env[name] == l_env[name], name
    assert set(m_env) == set(plumbing.env)
    # mounts: same volume at the same path; the launch adds a per-job subPath under the
    # namespace's directory, a bare pod gets the namespace's directory itself
    m_mounts = {m["mountPath"]: m for m in m_main["volumeMounts"]}
    l_mounts = {m["mountPath"]: m for m in l_main["volumeMounts"]}
    assert set(m_mounts) == set(l_mounts)
    for path, mount in l_mounts.items():
        assert m_mounts[path] == {k: v for k, v in mount.items() if k != "subPath"}
    fs = ref.filesystem
    if fs is not None:
        # the namespace's PV is rooted at /<ns>: the launch's subPath is the job's directory
        assert "/" not in l_mounts[fs.mount_path]["subPath"]
        claims = {
            v["persistentVolumeClaim"]["claimName"]
            for v in m_spec["volumes"]
            if "persistentVolumeClaim" in v
        }
        assert claims == {pvc_name(fs)}
    # devices: limits and requests
    for kind in ("limits", "requests"):
        for resource, value in plumbing.limits.items():
            assert (
                m_main["resources"][kind][resource] == l_main["resources"][kind][resource] == value
            )
    # the nccl-log sidecar
    assert m_spec["initContainers"] == l_spec["initContainers"] == [nccl_log_sidecar()]
    # the second container is left alone
    assert m_spec["containers"][1] == {"name": "helper", "image": "busybox:1.37"}
    # and the node's and NCCL's reading of both pods agrees
    m_fabric, l_fabric = inspect_pod(cluster, pool, mutated), inspect_pod(cluster, pool, launched)
    assert m_fabric == l_fabric
    assert m_fabric.missing == ()


def test_the_mutation_is_idempotent(ref: PoolRef) -> None:
    policy = policy_of(ref, "1.34")
    once = admit(policy, bare_pod(ref.cluster.namespaces[-1], ref.pool.name))
    assert admit(policy, copy.deepcopy(once)) == once


def test_the_cel_is_generated_from_the_plumbing_rules(ref: PoolRef) -> None:
    """The expression evaluates to exactly ``plumbing_apply_configuration`` (the declared
    patch, with the main container's name filled in): no second copy of the rules."""
    fs = ref.filesystem
    declared = plumbing_apply_configuration(
        ref.cluster, ref.pool, lustre_mount=(pvc_name(fs), fs.mount_path) if fs else None
    )
    declared["spec"]["containers"][0]["name"] = "main"
    (mutation,) = policy_of(ref)["spec"]["mutations"]
    pod = bare_pod(ref.cluster.namespaces[0], ref.pool.name)
    assert evaluate(mutation["applyConfiguration"]["expression"], pod) == declared
    assert MAIN_CONTAINER_CEL in mutation["applyConfiguration"]["expression"]
