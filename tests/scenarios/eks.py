"""The EKS backend for the cloud scenarios: boto3 against moto in server mode, behind the AWS
fake's front (which serves the Capacity Blocks and access entries moto lacks), kmock as the
cluster (the fake reports kmock's URL as the endpoint; the catalog names no Kubernetes
connection, so the backend creates an access entry for the caller and signs a token).
``CloudNodeController`` plays EKS's node controller: when a node group is created, its nodes
register in kmock, Ready, with the labels and taints the create carried. The EKS-specific
checks (the Capacity Block behind a launch template with 32 EFA interfaces, FSx for Lustre,
the access entry) are here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpufleet.services.nodes.drain import DrainSettings
from tests.scenarios.clouds import UNVALIDATED_CLOUD, CloudUnderTest
from tests.support.aws_fake import AwsFake
from tests.support.cloud_cluster import EKS_POOL_LABEL, attach_eks, write_catalog
from tests.support.kube_emulator import KubeEmulator
from tests.support.transition_clouds import bring_up_old_pool, write_transition_catalog

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "include/fleet-examples/eks-p5.yaml"
ZONE, MACHINE = "us-east-1a", "p5.48xlarge"
BLOCK, NEW_BLOCK = "cr-0123456789abcdef0", "cr-0fedcba9876543210"
LT_DATA = "LaunchTemplateData."
LT_TARGET = LT_DATA + "CapacityReservationSpecification.CapacityReservationTarget."


def launch_template_id(name: str) -> str:
    import boto3

    ec2 = boto3.client("ec2")
    (found,) = ec2.describe_launch_templates(LaunchTemplateNames=[name])["LaunchTemplates"]
    return found["LaunchTemplateId"]


class EksCloud(CloudUnderTest):
    name = "eks"
    region, cluster, pool, filesystem = "us-east-1", "train-use1", "p5-cb-1", "fsx-use1"
    pool_size = 8
    pool_label = EKS_POOL_LABEL
    csi_driver = "fsx.csi.aws.com"
    subdir_attribute = "subdir"
    # the EFA devices must be advertised for validation to use them
    node_daemonsets = (
        "aws-efa-k8s-device-plugin",
        "nvidia-device-plugin-daemonset",
        "fsx-csi-node",
    )
    old, new = "p5-cb-1", "p5-cb-2"
    drain = DrainSettings(batch_size=4, soak_s=0, poll_s=0.05)  # two batches
    short_refusal = r"capacity short: .*need 8 machines.*3 free"
    delete_polls = 0  # moto deletes at once; the backend still waits one check

    # -- what the cloud received and holds ------------------------------------------------------
    def callback_errors(self) -> list[Any]:
        return self.fake.callback_errors

    def writes(self) -> list[Any]:
        return self.fake.writes()

    def requests(self) -> list[Any]:
        return self.fake.requests

    def deleted_pools(self) -> list[str]:
        return [p["nodegroupName"] for p in self.fake.sent("DeleteNodegroup")]

    def pool_creates(self) -> int:
        return len(self.fake.sent("CreateNodegroup"))

    def assert_delete_confirmed(self, pool: str) -> None:
        # the retire was decided on EKS's own report that the group is gone
        assert self.fake.actions("eks")[-1] == "DescribeNodegroup"
        import boto3

        groups = boto3.client("eks").list_nodegroups(clusterName=self.cluster)["nodegroups"]
        assert pool not in groups, groups

    # -- EKS-specific checks -------------------------------------------------------------------
    def assert_onboarding_sent(self) -> None:
        aws = self.fake
        # the node group on the Capacity Block, through a launch template with 32 EFA interfaces
        (group,) = aws.sent("CreateNodegroup")
        assert group["capacityType"] == "CAPACITY_BLOCK"
        assert group["taints"] == [UNVALIDATED_CLOUD]
        assert group["labels"] == {"gpufleet.io/pool": self.pool}
        (template,) = aws.sent("CreateLaunchTemplate")
        assert template[LT_TARGET + "CapacityReservationId"] == BLOCK
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

    def assert_addons_stored(self, stored: set[tuple[str, str | None, str]]) -> None:
        assert self.kube.exists("storage.k8s.io/v1/csidrivers", None, "fsx.csi.aws.com")

    def assert_rerun_reads_only(self) -> None:
        assert all(a.startswith(("Describe", "List", "Get")) for a in self.fake.actions())

    def assert_volume_handles(self, handles: dict[str, str]) -> None:
        (fs_id,) = self.fake.filesystems  # the file system the DAG created
        assert {ns: h.split(":")[0] for ns, h in handles.items()} == dict.fromkeys(handles, fs_id)

    def assert_new_pool_sent(self) -> None:
        # a node group of its own on its own launch template, which targets the NEW block
        (group,) = self.fake.sent("CreateNodegroup")
        assert group["nodegroupName"] == self.new and group["capacityType"] == "CAPACITY_BLOCK"
        assert group["taints"] == [UNVALIDATED_CLOUD]
        assert group["labels"] == {"gpufleet.io/pool": self.new}
        (template,) = self.fake.sent("CreateLaunchTemplate")
        assert template[LT_TARGET + "CapacityReservationId"] == NEW_BLOCK
        assert group["launchTemplate"]["id"] == launch_template_id(template["LaunchTemplateName"])

    def assert_reservation_read(self) -> None:
        assert "DescribeCapacityReservations" in self.fake.actions()


@contextmanager
def onboarding(
    tmp_path: Path, monkeypatch: Any, kube: KubeEmulator, aws: AwsFake
) -> Iterator[EksCloud]:
    """The example region as the only catalog region, boto3 at the emptied AWS fake (``aws``)
    whose cluster answers at kmock, the Capacity Block seeded, controllers from the bundled
    copies."""
    kube.reset()
    write_catalog(EXAMPLE, tmp_path / "catalog")
    monkeypatch.setenv("GPUFLEET_CATALOG_DIR", str(tmp_path / "catalog"))
    monkeypatch.setenv("GPUFLEET_ADDONS_DIR", str(ROOT / "include/addons"))
    aws.add_capacity_reservation(BLOCK, MACHINE, 8, ZONE)
    aws.set_cluster_endpoint(EksCloud.cluster, kube.url)
    # as real EKS: the cluster and the node group report CREATING first (the DAG defers)
    aws.cluster_describes_until_active = 1
    aws.nodegroup_describes_until_active = 1
    yield EksCloud(aws, kube, attach_eks(aws, kube))


@contextmanager
def transition(
    tmp_path: Path, monkeypatch: Any, kube: KubeEmulator, aws: AwsFake, short: bool = False
) -> Iterator[EksCloud]:
    """The example region with a second Capacity Block and a ``state: planned`` pool on it;
    the network, the cluster and the old node group brought up through the cloud backend.
    ``short``: the new Capacity Block has 3 of 8 instances available."""
    kube.reset()
    write_transition_catalog(
        EXAMPLE,
        tmp_path / "catalog",
        new_pool=EksCloud.new,
        reservation={"name": NEW_BLOCK, "machine_type": MACHINE, "count": 8, "zone": ZONE},
        pool_ref={"name": NEW_BLOCK},
    )
    monkeypatch.setenv("GPUFLEET_CATALOG_DIR", str(tmp_path / "catalog"))
    aws.add_capacity_reservation(BLOCK, MACHINE, 8, ZONE)
    aws.add_capacity_reservation(NEW_BLOCK, MACHINE, 8, ZONE, available=3 if short else 8)
    aws.set_cluster_endpoint(EksCloud.cluster, kube.url)
    aws.nodegroup_describes_until_active = 1  # as real EKS: CREATING first
    cloud = EksCloud(aws, kube, attach_eks(aws, kube))
    bring_up_old_pool(EksCloud.cluster, EksCloud.old)
    assert len(cloud.nodes.nodes[EksCloud.old]) == 8
    assert aws.callback_errors == [] == cloud.nodes.errors
    aws.clear_log()
    cloud.nodes.mark()
    yield cloud
