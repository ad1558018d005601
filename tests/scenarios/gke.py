"""The GKE backend for the cloud scenarios: the real Google client libraries (REST over HTTP)
against the strict GCP fake, kmock as the cluster the DAG creates (the fake reports kmock's URL
as the endpoint; the catalog names no Kubernetes connection, so the backend takes the endpoint,
CA and token from the cluster it created). ``CloudNodeController`` plays GKE's node controller:
when a node pool's create operation completes, its nodes register in kmock, Ready, with what
the create carried. The GKE-specific checks (the reservation block the pool consumes, the
additional node networks, Managed Lustre's network and tier, the CSI volume handle) are here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpufleet.services.nodes.drain import DrainSettings
from tests.scenarios.clouds import NAMESPACE, UNVALIDATED_CLOUD, CloudUnderTest
from tests.support.cloud_cluster import (
    GKE_POOL_LABEL,
    attach_gke,
    finish_compute_operations_at_once,
    write_catalog,
)
from tests.support.gcp_fake import GcpFake
from tests.support.kube_emulator import KubeEmulator
from tests.support.transition_clouds import bring_up_old_pool, write_transition_catalog

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "include/fleet-examples/gke-a3-ultra.yaml"
PROJECT, ZONE, MACHINE = "my-gcp-project", "us-central1-b", "a3-ultragpu-8g"
RES, BLOCK = "a3u-reservation-1", "a3u-reservation-1-block-0001"
NEW_RES, NEW_BLOCK = "a3u-reservation-2", "a3u-reservation-2-block-0001"


def reservation_affinity(res: str, block: str) -> dict[str, Any]:
    return {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": [f"{res}/reservationBlocks/{block}"],
    }


class GkeCloud(CloudUnderTest):
    name = "gke"
    region, cluster, pool, filesystem = "us-central1", "train-usc1", "a3u-pool-1", "lustre-usc1"
    pool_size = 16
    pool_label = GKE_POOL_LABEL
    csi_driver = "lustre.csi.storage.gke.io"
    subdir_attribute = "subPath"
    node_daemonsets = ("nccl-rdma-installer",)  # the NCCL gIB installer
    old, new = "a3u-pool-1", "a3u-pool-2"
    drain = DrainSettings(batch_size=8, soak_s=0, poll_s=0.05)
    short_refusal = r"capacity short: .*need 16 machines.*6 free"
    delete_polls = 1  # slow_pool_delete: GKE takes a while to delete a pool

    # -- what the cloud received and holds ------------------------------------------------------
    def callback_errors(self) -> list[Any]:
        return self.fake.state.callback_errors

    def writes(self) -> list[Any]:
        return self.fake.writes()

    def requests(self) -> list[Any]:
        return self.fake.requests

    def pool_path(self, pool: str) -> str:
        return f"/v1/projects/{PROJECT}/locations/{ZONE}/clusters/{self.cluster}/nodePools/{pool}"

    def deleted_pools(self) -> list[str]:
        prefix = self.pool_path("")
        return [
            r.path.removeprefix(prefix) if r.path.startswith(prefix) else r.path
            for r in self.fake.writes()
            if r.method == "DELETE"
        ]

    def pool_creates(self) -> int:
        return len(self.fake.bodies("POST", r"/nodePools$"))

    def holds_pool(self, pool: str) -> bool:
        return (PROJECT, ZONE, self.cluster, pool) in self.fake.state.pools

    def assert_delete_confirmed(self, pool: str) -> None:
        assert not self.holds_pool(pool)

    # -- GKE-specific checks -------------------------------------------------------------------
    def assert_onboarding_sent(self) -> None:
        fake = self.fake
        # the node pool create: the reservation's block, the gVNIC network and one additional
        # network per RDMA subnet, the unvalidated taint
        (pool_req,) = fake.bodies("POST", r"/nodePools$")
        config = pool_req["nodePool"]["config"]
        assert config["reservationAffinity"] == reservation_affinity(RES, BLOCK)
        extra = pool_req["nodePool"]["networkConfig"]["additionalNodeNetworkConfigs"]
        assert extra == [{"network": "a3u-gvnic-sub", "subnetwork": "a3u-gvnic-sub"}] + [
            {"network": "a3u-rdma", "subnetwork": f"a3u-rdma-sub-{i}"} for i in range(8)
        ]
        assert config["taints"] == [UNVALIDATED_CLOUD]
        (cluster_req,) = fake.bodies("POST", r"/locations/us-central1-b/clusters$")
        assert cluster_req["cluster"]["networkConfig"]["enableMultiNetworking"] is True
        # Managed Lustre on the nodes' primary VPC (not the RDMA one), with the catalog's tier
        (fs_req,) = fake.bodies("POST", r"/instances$")
        assert fs_req["network"] == f"projects/{PROJECT}/global/networks/default"
        assert fs_req["perUnitStorageThroughput"] == "500"

    def assert_addons_stored(self, stored: set[tuple[str, str | None, str]]) -> None:
        networks = {n for r, _, n in stored if r == "networking.gke.io/v1/networks"}
        params = {n for r, _, n in stored if r == "networking.gke.io/v1/gkenetworkparamsets"}
        assert len(networks) == 9 and len(params) == 9  # gVNIC + 8 RDMA NICs

    def assert_volume_handles(self, handles: dict[str, str]) -> None:
        # the Managed Lustre CSI driver's static volume handle is <project>/<location>/<instance>
        # (the renderer's LustreVolumeSource contract), a directory's with ":<dir>"
        fs = self.filesystem
        assert handles == {
            NAMESPACE: f"{PROJECT}/{ZONE}/{fs}:{NAMESPACE}",
            "gpufleet-validation": f"{PROJECT}/{ZONE}/{fs}",
        }

    def assert_new_pool_sent(self) -> None:
        (body,) = self.fake.bodies("POST", rf"/clusters/{self.cluster}/nodePools$")
        pool = body["nodePool"]
        assert pool["name"] == self.new and pool["initialNodeCount"] == 16
        assert pool["config"]["reservationAffinity"] == reservation_affinity(NEW_RES, NEW_BLOCK)
        assert pool["config"]["taints"] == [UNVALIDATED_CLOUD]

    def assert_reservation_read(self) -> None:
        assert any(
            r.method == "GET" and re.search(rf"/reservations/{NEW_RES}\b", r.path)
            for r in self.fake.requests
        ), [r.path for r in self.fake.requests]

    def slow_pool_delete(self, pool: str) -> None:
        self.fake.slow_node_pool_delete(pool, polls=4)


@contextmanager
def onboarding(tmp_path: Path, monkeypatch: Any, kube: KubeEmulator) -> Iterator[GkeCloud]:
    """The example region as the only catalog region, Google APIs at a fresh fake whose
    clusters answer at kmock, controllers from the bundled copies."""
    kube.reset()
    write_catalog(EXAMPLE, tmp_path / "catalog")
    monkeypatch.setenv("GPUFLEET_CATALOG_DIR", str(tmp_path / "catalog"))
    monkeypatch.setenv("GPUFLEET_ADDONS_DIR", str(ROOT / "include/addons"))
    with GcpFake(operation_polls=2) as fake:
        monkeypatch.setenv("GPUFLEET_GCP_ENDPOINT", fake.url)
        fake.add_reservation(PROJECT, ZONE, RES, MACHINE, 16, blocks=[BLOCK])
        fake.set_cluster_endpoint(kube.url, ca_data="")
        finish_compute_operations_at_once(fake)
        yield GkeCloud(fake, kube, attach_gke(fake, kube))


@contextmanager
def transition(
    tmp_path: Path, monkeypatch: Any, kube: KubeEmulator, short: bool = False
) -> Iterator[GkeCloud]:
    """The example region with a second reservation and a ``state: planned`` pool on it; the
    network, the cluster and the old pool brought up through the cloud backend. ``short``: the
    new reservation has 6 of 16 machines free (the pool needs 16)."""
    kube.reset()
    write_transition_catalog(
        EXAMPLE,
        tmp_path / "catalog",
        new_pool=GkeCloud.new,
        reservation={
            "name": NEW_RES,
            "machine_type": MACHINE,
            "count": 16,
            "zone": ZONE,
            "blocks": [NEW_BLOCK],
        },
        pool_ref={"name": NEW_RES, "block": NEW_BLOCK},
    )
    monkeypatch.setenv("GPUFLEET_CATALOG_DIR", str(tmp_path / "catalog"))
    with GcpFake(operation_polls=2) as fake:
        monkeypatch.setenv("GPUFLEET_GCP_ENDPOINT", fake.url)
        fake.add_reservation(PROJECT, ZONE, RES, MACHINE, 16, blocks=[BLOCK])
        in_use = 10 if short else 0
        fake.add_reservation(PROJECT, ZONE, NEW_RES, MACHINE, 16, in_use=in_use, blocks=[NEW_BLOCK])
        fake.set_cluster_endpoint(kube.url, ca_data="")
        finish_compute_operations_at_once(fake)
        cloud = GkeCloud(fake, kube, attach_gke(fake, kube))
        bring_up_old_pool(GkeCloud.cluster, GkeCloud.old)
        assert len(cloud.nodes.nodes[GkeCloud.old]) == 16
        fake.clear_log()
        cloud.nodes.mark()
        yield cloud
