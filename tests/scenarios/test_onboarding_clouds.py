"""region_onboarding end to end on each cloud backend (GKE: the strict GCP fake; EKS: moto
behind the AWS fake), written once: the backend's example region onboarded with ``dag.test()``
through the real client libraries, kmock as the cluster the DAG creates, the backend's node
controller registering a created pool's nodes (``tests/scenarios/conftest.py``). What is the
provider's own (what a create call carried, its add-on objects, its volume handles) is checked
by the adapter (``tests/scenarios/gke.py``, ``eks.py``) where the scenario reaches it.

``validate`` is off: the validation workloads need pods that run and write NCCL logs, which
kmock (no scheduler, no kubelet) cannot do; the sim end-to-end tests cover validation.
Assertions read what the fakes RECEIVED and what kmock STORED, not what the backend says.
"""

from __future__ import annotations

import pytest

from tests.scenarios.clouds import KUEUE, NAMESPACE, UNVALIDATED, CloudUnderTest
from tests.support.cloud_cluster import tolerates
from tests.support.fleet import run_dag, task_states

pytestmark = [pytest.mark.slow]


def onboard(cloud: CloudUnderTest, **conf):
    dr = run_dag("region_onboarding", {"region": cloud.region, "validate": False, **conf})
    return dr, task_states(dr)


def region_state(cloud: CloudUnderTest):
    from gpufleet.store import Ledger

    return Ledger().region_state(cloud.region)


def actions(cloud: CloudUnderTest, run_id: str) -> dict[tuple[str, str], str]:
    """(kind, name) -> what the run's report says it did (created, found, would_create ...)."""
    from gpufleet.store import Ledger

    done = Ledger().onboarding_actions(cloud.region, run_id)
    return {(a["kind"], a["name"]): a["action"] for a in done}


def test_region_onboards_then_a_rerun_writes_nothing(onboarding_cloud):
    cloud = onboarding_cloud
    kube, nodes, pool, fs = cloud.kube, cloud.nodes, cloud.pool, cloud.filesystem

    dr, states = onboard(cloud)
    assert str(dr.state) == "success", states
    assert cloud.callback_errors() == [] and nodes.errors == []
    cloud.assert_onboarding_sent()

    # the nodes the pool registered keep the taint; the region is not ready (validate=false)
    assert len(nodes.nodes[pool]) == cloud.pool_size
    for name in nodes.nodes[pool]:
        node = nodes.node(name)
        assert node["metadata"]["labels"][cloud.pool_label] == pool
        assert UNVALIDATED in node["spec"]["taints"]
    assert states["validate_fabric"] == "skipped" and states["announce_ready"] == "skipped"
    assert region_state(cloud)["state"] == "onboarding"

    # the add-ons kmock holds: Kueue flavor and queues, the filesystem's volume per namespace,
    # the node add-ons, the provider's own objects
    stored = set(kube.stored_keys())
    flavor = kube.stored(f"{KUEUE}/resourceflavors", None, f"gpufleet-{pool}")
    assert flavor, sorted(stored)
    assert flavor["spec"]["nodeLabels"] == {cloud.pool_label: pool}  # pins to the pool's nodes
    queue = kube.stored(f"{KUEUE}/clusterqueues", None, f"gpufleet-{pool}")
    flavors = queue["spec"]["resourceGroups"][0]["flavors"]
    assert [f["name"] for f in flavors] == [f"gpufleet-{pool}"]
    assert kube.exists(f"{KUEUE}/localqueues", NAMESPACE, f"{pool}-queue")
    # one static PV per training namespace (its directory) and one for the validation
    # namespace (the whole filesystem), each bound to its namespace's ReadWriteMany PVC
    handles = {}
    for ns, sub_dir in ((NAMESPACE, NAMESPACE), ("gpufleet-validation", None)):
        pv = kube.stored("v1/persistentvolumes", None, f"{fs}-{ns}")
        pvc = kube.stored("v1/persistentvolumeclaims", ns, f"{fs}-pvc")
        assert pv and pvc, sorted(stored)
        assert pv["spec"]["csi"]["driver"] == cloud.csi_driver
        assert pv["spec"]["csi"]["volumeAttributes"].get(cloud.subdir_attribute) == sub_dir
        assert pv["spec"]["claimRef"] == {"namespace": ns, "name": f"{fs}-pvc"}
        assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
        assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
        handles[ns] = pv["spec"]["csi"]["volumeHandle"]
    # the node add-ons run on the new nodes although they are tainted unvalidated: validation
    # needs them (the NCCL net plugin, the EFA devices advertised)
    for name in cloud.node_daemonsets:
        ds = kube.stored("apps/v1/daemonsets", "kube-system", name)
        assert ds, sorted(stored)
        assert tolerates(ds["spec"]["template"]["spec"].get("tolerations"), UNVALIDATED), name
    cloud.assert_addons_stored(stored)
    crds = "apiextensions.k8s.io/v1/customresourcedefinitions"
    assert kube.exists(crds, None, "clusterqueues.kueue.x-k8s.io")  # the pinned Kueue release
    assert kube.exists(crds, None, "jobsets.jobset.x-k8s.io")

    # a second run: the cloud sees only reads, kmock no create or patch
    cloud.clear_log()
    nodes.mark()
    again, states = onboard(cloud)
    assert str(again.state) == "success", states
    assert cloud.writes() == [] and cloud.requests()
    cloud.assert_rerun_reads_only()
    assert nodes.writes() == [] and nodes.requests()
    assert len(nodes.nodes[pool]) == cloud.pool_size  # no second pool
    assert set(actions(cloud, again.run_id).values()) == {"found"}
    assert region_state(cloud)["state"] == "onboarding"

    # the volume handles name the filesystem the DAG created; checked last so the rerun above
    # is checked whatever this says
    cloud.assert_volume_handles(handles)


def test_dry_run_sends_no_write(onboarding_cloud):
    cloud = onboarding_cloud
    nodes = cloud.nodes
    nodes.mark()
    dr, states = onboard(cloud, dry_run=True)
    assert str(dr.state) == "success", states
    assert cloud.writes() == [] and cloud.requests()
    assert nodes.writes() == [] and nodes.nodes == {}
    assert region_state(cloud) is None
    plan = actions(cloud, dr.run_id)
    assert plan[("node_pool", cloud.pool)] == plan[("filesystem", cloud.filesystem)]
    assert plan[("node_pool", cloud.pool)] == "would_create"
