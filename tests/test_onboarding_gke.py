"""region_onboarding end to end on GKE: the catalog's GKE example region onboarded with
``dag.test()`` through the real Google client libraries (REST over HTTP) against the strict GCP
fake, with kmock as the cluster the DAG creates.

The cluster is reached as a new one is: the catalog names no Kubernetes connection, so the
backend takes the endpoint, CA and token from the cluster it created (the fake reports kmock's
URL as the endpoint). ``CloudNodeController`` plays GKE's node controller: when the node pool's
create operation completes, the pool's nodes register in kmock with what the create carried.

``validate`` is off: the validation workloads need pods that run and write NCCL logs, which
kmock (no scheduler, no kubelet) cannot do; the sim end-to-end tests cover validation.
Assertions read what the fakes RECEIVED and what kmock STORED, not what the backend says.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cloud_cluster import (
    GKE_POOL_LABEL,
    attach_gke,
    finish_compute_operations_at_once,
    tolerates,
    write_catalog,
)
from tests.support.fleet import run_dag, task_states
from tests.support.gcp_fake import GcpFake
from tests.support.kube_emulator import KubeEmulator

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "include/fleet-examples/gke-a3-ultra.yaml"
REGION, CLUSTER, POOL, FS = "us-central1", "train-usc1", "a3u-pool-1", "lustre-usc1"
PROJECT, ZONE = "my-gcp-project", "us-central1-b"
RES, BLOCK = "a3u-reservation-1", "a3u-reservation-1-block-0001"
NAMESPACE = "ml-team-a"
UNVALIDATED = {"key": "gpufleet.io/unvalidated", "value": "true", "effect": "NoSchedule"}
KUEUE = "kueue.x-k8s.io/v1beta1"


@pytest.fixture(scope="module")
def kube():
    with KubeEmulator(conn_id="kmock_onboarding_gke") as emulator:
        yield emulator


@pytest.fixture
def region_env(airflow_db, fleet_state, tmp_path, monkeypatch, kube):
    """The example region as the only catalog region, Google APIs at a fresh fake whose
    clusters answer at kmock, controllers from the bundled copies."""
    kube.reset()
    write_catalog(EXAMPLE, tmp_path / "catalog")
    monkeypatch.setenv("GPUFLEET_CATALOG_DIR", str(tmp_path / "catalog"))
    monkeypatch.setenv("GPUFLEET_ADDONS_DIR", str(ROOT / "include/addons"))
    with GcpFake(operation_polls=2) as fake:
        monkeypatch.setenv("GPUFLEET_GCP_ENDPOINT", fake.url)
        fake.add_reservation(PROJECT, ZONE, RES, "a3-ultragpu-8g", 16, blocks=[BLOCK])
        fake.set_cluster_endpoint(kube.url, ca_data="")
        finish_compute_operations_at_once(fake)
        yield fake


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


def test_gke_region_onboards_then_a_rerun_writes_nothing(region_env, kube):
    fake = region_env
    nodes = attach_gke(fake, kube)

    dr, states = onboard()
    assert str(dr.state) == "success", states
    assert fake.state.callback_errors == [] and nodes.errors == []

    # what the node pool create carried: the reservation's block, the gVNIC network and one
    # additional network per RDMA subnet, the unvalidated taint
    (pool_req,) = fake.bodies("POST", r"/nodePools$")
    config = pool_req["nodePool"]["config"]
    assert config["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": [f"{RES}/reservationBlocks/{BLOCK}"],
    }
    extra = pool_req["nodePool"]["networkConfig"]["additionalNodeNetworkConfigs"]
    assert extra == [{"network": "a3u-gvnic-sub", "subnetwork": "a3u-gvnic-sub"}] + [
        {"network": "a3u-rdma", "subnetwork": f"a3u-rdma-sub-{i}"} for i in range(8)
    ]
    assert config["taints"] == [{**UNVALIDATED, "effect": "NO_SCHEDULE"}]
    (cluster_req,) = fake.bodies("POST", r"/locations/us-central1-b/clusters$")
    assert cluster_req["cluster"]["networkConfig"]["enableMultiNetworking"] is True
    # Managed Lustre on the nodes' primary VPC (not the RDMA one), with the catalog's tier
    (fs_req,) = fake.bodies("POST", r"/instances$")
    assert fs_req["network"] == f"projects/{PROJECT}/global/networks/default"
    assert fs_req["perUnitStorageThroughput"] == "500"

    # the nodes the pool registered keep the taint; the region is not ready (validate=false)
    assert len(nodes.nodes[POOL]) == 16
    for name in nodes.nodes[POOL]:
        node = nodes.node(name)
        assert node["metadata"]["labels"][GKE_POOL_LABEL] == POOL
        assert UNVALIDATED in node["spec"]["taints"]
    assert states["validate_fabric"] == "skipped" and states["announce_ready"] == "skipped"
    assert region_state()["state"] == "onboarding"

    # the add-ons kmock holds: Kueue flavor and queues, the Lustre volume per namespace, the
    # per-NIC network objects, the NCCL gIB installer
    stored = set(kube.stored_keys())
    flavor = kube.stored(f"{KUEUE}/resourceflavors", None, f"gpufleet-{POOL}")
    assert flavor, sorted(stored)
    assert flavor["spec"]["nodeLabels"] == {GKE_POOL_LABEL: POOL}  # pins to the pool's nodes
    queue = kube.stored(f"{KUEUE}/clusterqueues", None, f"gpufleet-{POOL}")
    flavors = queue["spec"]["resourceGroups"][0]["flavors"]
    assert [f["name"] for f in flavors] == [f"gpufleet-{POOL}"]
    assert kube.exists(f"{KUEUE}/localqueues", NAMESPACE, f"{POOL}-queue")
    # one static PV per training namespace (its directory) and one for the validation
    # namespace (the whole instance), each bound to its namespace's ReadWriteMany PVC
    handles = {}
    for ns, sub_dir in ((NAMESPACE, NAMESPACE), ("gpufleet-validation", None)):
        pv = kube.stored("v1/persistentvolumes", None, f"{FS}-{ns}")
        pvc = kube.stored("v1/persistentvolumeclaims", ns, f"{FS}-pvc")
        assert pv and pvc, sorted(stored)
        assert pv["spec"]["csi"]["driver"] == "lustre.csi.storage.gke.io"
        assert pv["spec"]["csi"]["volumeAttributes"].get("subPath") == sub_dir
        assert pv["spec"]["claimRef"] == {"namespace": ns, "name": f"{FS}-pvc"}
        assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
        assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
        handles[ns] = pv["spec"]["csi"]["volumeHandle"]
    networks = {n for r, _, n in stored if r == "networking.gke.io/v1/networks"}
    params = {n for r, _, n in stored if r == "networking.gke.io/v1/gkenetworkparamsets"}
    assert len(networks) == 9 and len(params) == 9  # gVNIC + 8 RDMA NICs
    installer = kube.stored("apps/v1/daemonsets", "kube-system", "nccl-rdma-installer")
    assert installer, sorted(stored)
    # it must run on the new nodes although they are tainted unvalidated (validation needs it)
    assert tolerates(installer["spec"]["template"]["spec"].get("tolerations"), UNVALIDATED)
    crds = "apiextensions.k8s.io/v1/customresourcedefinitions"
    assert kube.exists(crds, None, "clusterqueues.kueue.x-k8s.io")  # the pinned Kueue release
    assert kube.exists(crds, None, "jobsets.jobset.x-k8s.io")

    # a second run: the cloud sees only reads, kmock no create or patch
    fake.clear_log()
    nodes.mark()
    again, states = onboard()
    assert str(again.state) == "success", states
    assert fake.writes() == [] and fake.requests
    assert nodes.writes() == [] and nodes.requests()
    assert len(nodes.nodes[POOL]) == 16  # no second pool
    assert set(actions(again.run_id).values()) == {"found"}
    assert region_state()["state"] == "onboarding"

    # the Managed Lustre CSI driver's static volume handle is <project>/<location>/<instance>
    # (the renderer's LustreVolumeSource contract), a directory's with ":<dir>"; checked last
    # so the rerun above is checked whatever this says
    assert handles == {
        NAMESPACE: f"{PROJECT}/{ZONE}/{FS}:{NAMESPACE}",
        "gpufleet-validation": f"{PROJECT}/{ZONE}/{FS}",
    }


def test_gke_dry_run_sends_no_write(region_env, kube):
    fake = region_env
    nodes = attach_gke(fake, kube)
    nodes.mark()
    dr, states = onboard(dry_run=True)
    assert str(dr.state) == "success", states
    assert fake.writes() == [] and fake.requests
    assert nodes.writes() == [] and nodes.nodes == {}
    assert region_state() is None
    plan = actions(dr.run_id)
    assert plan[("node_pool", POOL)] == plan[("filesystem", FS)] == "would_create"
