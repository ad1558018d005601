"""region_onboarding end to end on EKS: the catalog's EKS example region onboarded with
``dag.test()`` through boto3 against moto in server mode (behind the AWS fake's front, which
serves the Capacity Block and access entries moto lacks), with kmock as the cluster.

The cluster is reached as a new one is: the catalog names no Kubernetes connection, so the
backend creates an access entry for the caller and signs a token; the fake reports kmock's
URL as the cluster endpoint. ``CloudNodeController`` plays EKS's node controller: when the node
group is created, its nodes register in kmock with the labels and taints the create carried.

``validate`` is off: the validation workloads need pods that run and write NCCL logs, which
kmock (no scheduler, no kubelet) cannot do; the sim end-to-end tests cover validation.
Assertions read what the fakes RECEIVED and what kmock STORED, not what the backend says.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.aws_fake import AwsFake
from tests.support.cloud_cluster import EKS_POOL_LABEL, attach_eks, tolerates, write_catalog
from tests.support.fleet import run_dag, task_states
from tests.support.kube_emulator import KubeEmulator

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "include/fleet-examples/eks-p5.yaml"
REGION, CLUSTER, POOL, FS = "us-east-1", "train-use1", "p5-cb-1", "fsx-use1"
BLOCK = "cr-0123456789abcdef0"
NAMESPACE = "ml-team-a"
UNVALIDATED_KEY = "gpufleet.io/unvalidated"
UNVALIDATED = {"key": UNVALIDATED_KEY, "value": "true", "effect": "NoSchedule"}
KUEUE = "kueue.x-k8s.io/v1beta1"
LT_DATA = "LaunchTemplateData."


@pytest.fixture(scope="module")
def kube():
    with KubeEmulator(conn_id="kmock_onboarding_eks") as emulator:
        yield emulator


@pytest.fixture(scope="module")
def aws_server():
    with AwsFake() as fake:
        yield fake


@pytest.fixture
def aws(airflow_db, fleet_state, tmp_path, monkeypatch, kube, aws_server):
    """The example region as the only catalog region, boto3 at a reset AWS fake whose
    cluster answers at kmock, the Capacity Block seeded, controllers from the bundled copies."""
    kube.reset()
    aws_server.reset()
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    for key, value in aws_server.environ().items():
        monkeypatch.setenv(key, value)
    write_catalog(EXAMPLE, tmp_path / "catalog")
    monkeypatch.setenv("GPUFLEET_CATALOG_DIR", str(tmp_path / "catalog"))
    monkeypatch.setenv("GPUFLEET_ADDONS_DIR", str(ROOT / "include/addons"))
    aws_server.add_capacity_reservation(BLOCK, "p5.48xlarge", 8, "us-east-1a")
    aws_server.set_cluster_endpoint(CLUSTER, kube.url)
    # as real EKS: the cluster and the node group report CREATING first (the DAG defers)
    aws_server.cluster_describes_until_active = 1
    aws_server.nodegroup_describes_until_active = 1
    return aws_server


def onboard(**conf):
    dr = run_dag("region_onboarding", {"region": REGION, "validate": False, **conf})
    return dr, task_states(dr)


def region_state():
    from gpufleet.store import Ledger

    return Ledger().region_state(REGION)


def actions(run_id: str) -> dict[tuple[str, str], str]:
    """(kind, name) -> what the run's report says it did (created, found, would_create ...)."""
    from gpufleet.store import Ledger

    done = Ledger().onboarding_actions(REGION, run_id)
    return {(a["kind"], a["name"]): a["action"] for a in done}


def test_eks_region_onboards_then_a_rerun_writes_nothing(aws, kube):
    nodes = attach_eks(aws, kube)

    dr, states = onboard()
    assert str(dr.state) == "success", states
    assert aws.callback_errors == [] and nodes.errors == []

    # the node group on the Capacity Block, through a launch template with 32 EFA interfaces
    (group,) = aws.sent("CreateNodegroup")
    assert group["capacityType"] == "CAPACITY_BLOCK"
    assert group["taints"] == [{"key": UNVALIDATED_KEY, "value": "true", "effect": "NO_SCHEDULE"}]
    assert group["labels"] == {"gpufleet.io/pool": POOL}
    (template,) = aws.sent("CreateLaunchTemplate")
    target = LT_DATA + "CapacityReservationSpecification.CapacityReservationTarget."
    assert template[target + "CapacityReservationId"] == BLOCK
    assert template[LT_DATA + "InstanceMarketOptions.MarketType"] == "capacity-block"
    efa = [
        k
        for k, v in template.items()
        if k.startswith(LT_DATA + "NetworkInterface.") and k.endswith(".InterfaceType")
        if v == "efa"
    ]
    assert len(efa) == 32
    assert group["launchTemplate"]["id"] == launch_template_id(template["LaunchTemplateName"])
    # FSx for Lustre PERSISTENT_2 at the catalog's per-unit throughput
    (fsx,) = aws.sent("CreateFileSystem")
    assert fsx["FileSystemType"] == "LUSTRE" and fsx["StorageCapacity"] == 38400
    assert fsx["LustreConfiguration"] == {
        "DeploymentType": "PERSISTENT_2",
        "PerUnitStorageThroughput": 250,
    }
    # the cluster was reached with an access entry the backend created, not a connection
    assert len(aws.sent("CreateAccessEntry")) == 1

    # the nodes the group registered keep the taint; the region is not ready (validate=false)
    assert len(nodes.nodes[POOL]) == 8
    for name in nodes.nodes[POOL]:
        node = nodes.node(name)
        assert node["metadata"]["labels"][EKS_POOL_LABEL] == POOL
        assert UNVALIDATED in node["spec"]["taints"]
    assert states["validate_fabric"] == "skipped" and states["announce_ready"] == "skipped"
    assert region_state()["state"] == "onboarding"

    # the add-ons kmock holds: Kueue flavor and queues, the FSx volume per namespace, the EFA
    # and NVIDIA device plugins, the FSx CSI driver
    stored = set(kube.stored_keys())
    flavor = kube.stored(f"{KUEUE}/resourceflavors", None, f"gpufleet-{POOL}")
    assert flavor, sorted(stored)
    assert flavor["spec"]["nodeLabels"] == {EKS_POOL_LABEL: POOL}
    queue = kube.stored(f"{KUEUE}/clusterqueues", None, f"gpufleet-{POOL}")
    assert [f["name"] for f in queue["spec"]["resourceGroups"][0]["flavors"]] == [
        f"gpufleet-{POOL}"
    ]
    assert kube.exists(f"{KUEUE}/localqueues", NAMESPACE, f"{POOL}-queue")
    fs_id = fsx_id(aws)
    for ns, sub_dir in ((NAMESPACE, NAMESPACE), ("gpufleet-validation", None)):
        pv = kube.stored("v1/persistentvolumes", None, f"{FS}-{ns}")
        pvc = kube.stored("v1/persistentvolumeclaims", ns, f"{FS}-pvc")
        assert pv and pvc, sorted(stored)
        csi = pv["spec"]["csi"]
        assert csi["driver"] == "fsx.csi.aws.com"
        assert csi["volumeHandle"].split(":")[0] == fs_id  # the file system the DAG created
        assert csi["volumeAttributes"].get("subdir") == sub_dir
        assert pv["spec"]["claimRef"] == {"namespace": ns, "name": f"{FS}-pvc"}
        assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
        assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    # the node add-ons run on the new nodes although they are tainted unvalidated: the EFA
    # devices must be advertised for validation to use them
    for name in ("aws-efa-k8s-device-plugin", "nvidia-device-plugin-daemonset", "fsx-csi-node"):
        ds = kube.stored("apps/v1/daemonsets", "kube-system", name)
        assert ds, sorted(stored)
        assert tolerates(ds["spec"]["template"]["spec"].get("tolerations"), UNVALIDATED), name
    assert kube.exists("storage.k8s.io/v1/csidrivers", None, "fsx.csi.aws.com")
    crds = "apiextensions.k8s.io/v1/customresourcedefinitions"
    assert kube.exists(crds, None, "clusterqueues.kueue.x-k8s.io")  # the pinned Kueue release
    assert kube.exists(crds, None, "jobsets.jobset.x-k8s.io")

    # a second run: the cloud sees only reads, kmock no create or patch
    aws.clear_log()
    nodes.mark()
    again, states = onboard()
    assert str(again.state) == "success", states
    assert aws.writes() == [] and aws.requests
    assert all(a.startswith(("Describe", "List", "Get")) for a in aws.actions())
    assert nodes.writes() == [] and nodes.requests()
    assert len(nodes.nodes[POOL]) == 8  # no second node group
    assert set(actions(again.run_id).values()) == {"found"}
    assert region_state()["state"] == "onboarding"


def launch_template_id(name: str) -> str:
    import boto3

    ec2 = boto3.client("ec2")
    (found,) = ec2.describe_launch_templates(LaunchTemplateNames=[name])["LaunchTemplates"]
    return found["LaunchTemplateId"]


def fsx_id(aws: AwsFake) -> str:
    (fs_id,) = aws.filesystems
    return fs_id


def test_eks_dry_run_sends_no_write(aws, kube):
    nodes = attach_eks(aws, kube)
    nodes.mark()
    dr, states = onboard(dry_run=True)
    assert str(dr.state) == "success", states
    assert aws.writes() == [] and aws.requests
    assert nodes.writes() == [] and nodes.nodes == {}
    assert region_state() is None
    plan = actions(dr.run_id)
    assert plan[("node_pool", POOL)] == plan[("filesystem", FS)] == "would_create"
