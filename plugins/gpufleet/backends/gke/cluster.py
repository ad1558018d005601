"""The GKE cluster: created with what the GPU fabric needs, refused when it lacks it.

Design: docs/design/cloud-backends.md.
"""

from __future__ import annotations

from gpufleet.backends.base import (
    ClusterCredentials,
    ClusterInfo,
    EnsureAction,
    Ensured,
    ResourceStatus,
)
from gpufleet.backends.gke.clients import Scope, call, console, get_or_none
from gpufleet.errors import BackendError

SYSTEM_POOL = "gpufleet-system"
SYSTEM_MACHINE_TYPE = "e2-standard-4"
SYSTEM_POOL_NODES = 2

_STATUS = {
    "PROVISIONING": ResourceStatus.CREATING,
    "RUNNING": ResourceStatus.READY,
    "RECONCILING": ResourceStatus.UPDATING,
    "STOPPING": ResourceStatus.DELETING,
    "ERROR": ResourceStatus.ERROR,
    "DEGRADED": ResourceStatus.ERROR,
}


def cluster_path(scope: Scope) -> str:
    return f"projects/{scope.project}/locations/{scope.zone}/clusters/{scope.cluster.name}"


def cluster_console(scope: Scope) -> str:
    return console(
        f"kubernetes/clusters/details/{scope.zone}/{scope.cluster.name}/details", scope.project
    )


def _status(raw: object) -> ResourceStatus:
    return _STATUS.get(getattr(raw, "name", str(raw)), ResourceStatus.ERROR)


def _read(scope: Scope):
    return get_or_none(
        f"read cluster {scope.cluster.name}",
        "container.clusters.get",
        scope.clients.container.get_cluster,
        name=cluster_path(scope),
    )


def _features(existing) -> dict[str, bool]:
    from google.cloud import container_v1

    net = existing.network_config
    return {
        "multi_networking": bool(net.enable_multi_networking),
        "dataplane_v2": net.datapath_provider == container_v1.DatapathProvider.ADVANCED_DATAPATH,
        "lustre_csi": bool(existing.addons_config.lustre_csi_driver_config.enabled),
    }


def lustre_enable_command(scope: Scope) -> str:
    return (
        f"gcloud container clusters update {scope.cluster.name} --location={scope.zone} "
        f"--project={scope.project} --update-addons=LustreCsiDriver=ENABLED"
    )


def ensure_cluster(scope: Scope, dry_run: bool) -> Ensured:
    cl = scope.cluster
    url = cluster_console(scope)
    existing = _read(scope)
    if existing is not None:
        features = _features(existing)
        missing = [
            label
            for key, label in (
                ("multi_networking", "multi-networking"),
                ("dataplane_v2", "Dataplane V2 (ADVANCED_DATAPATH)"),
            )
            if not features[key]
        ]
        if missing:
            raise BackendError(
                f"cluster {cl.name} in {scope.zone} exists without {' and '.join(missing)}, "
                "which the RDMA node pools need and which GKE lets you set only when a cluster "
                "is created: create a new cluster (another name in the catalog) or delete this "
                "one and run again"
            )
        diffs = []
        if not features["lustre_csi"]:
            diffs.append(
                "Managed Lustre CSI driver: catalog enabled, cloud disabled (enable it with: "
                f"{lustre_enable_command(scope)})"
            )
        network = existing.network or "default"
        if network != cl.network.primary_vpc:
            diffs.append(f"cluster network: catalog {cl.network.primary_vpc}, cloud {network}")
        version = existing.current_master_version or existing.initial_cluster_version
        if (
            cl.kubernetes_version
            and version
            and not (
                version == cl.kubernetes_version or version.startswith(cl.kubernetes_version + ".")
            )
        ):
            diffs.append(f"Kubernetes version: catalog {cl.kubernetes_version}, cloud {version}")
        return Ensured(
            "cluster",
            cl.name,
            EnsureAction.FOUND,
            _status(existing.status),
            tuple(diffs),
            url,
            {"features": features, "version": version},
        )
    if dry_run:
        return Ensured(
            "cluster", cl.name, EnsureAction.WOULD_CREATE, ResourceStatus.ABSENT, (), url, {}
        )
    op = call(
        f"create cluster {cl.name}",
        "container.clusters.create",
        scope.clients.container.create_cluster,
        parent=f"projects/{scope.project}/locations/{scope.zone}",
        cluster=_cluster_body(scope),
    )
    return Ensured(
        "cluster",
        cl.name,
        EnsureAction.CREATED,
        ResourceStatus.CREATING,
        (),
        url,
        {"operation": op.name},
    )


def _cluster_body(scope: Scope):
    from google.cloud import container_v1

    cl = scope.cluster
    body = container_v1.Cluster(
        name=cl.name,
        description="Created by gpufleet region_onboarding",
        network=cl.network.primary_vpc,
        ip_allocation_policy=container_v1.IPAllocationPolicy(use_ip_aliases=True),
        network_config=container_v1.NetworkConfig(
            enable_multi_networking=True,
            datapath_provider=container_v1.DatapathProvider.ADVANCED_DATAPATH,
        ),
        addons_config=container_v1.AddonsConfig(
            lustre_csi_driver_config=container_v1.LustreCsiDriverConfig(enabled=True)
        ),
        node_pools=[
            container_v1.NodePool(
                name=SYSTEM_POOL,
                initial_node_count=SYSTEM_POOL_NODES,
                config=container_v1.NodeConfig(
                    machine_type=SYSTEM_MACHINE_TYPE,
                    labels={"gpufleet.io/role": "system"},
                ),
            )
        ],
        resource_labels={"managed-by": "gpufleet"},
    )
    if cl.kubernetes_version:
        body.initial_cluster_version = cl.kubernetes_version
    return body


def get_cluster(scope: Scope) -> ClusterInfo:
    existing = _read(scope)
    if existing is None:
        return ClusterInfo(
            scope.cluster.name, ResourceStatus.ABSENT, console_url=cluster_console(scope)
        )
    return ClusterInfo(
        name=scope.cluster.name,
        status=_status(existing.status),
        endpoint=existing.endpoint or None,
        version=existing.current_master_version or None,
        features=_features(existing),
        console_url=cluster_console(scope),
    )


def cluster_credentials(scope: Scope) -> ClusterCredentials:
    existing = _read(scope)
    if existing is None or not existing.endpoint:
        state = "does not exist" if existing is None else "has no endpoint yet (still creating)"
        raise BackendError(
            f"cluster {scope.cluster.name} in {scope.zone} {state}: run region_onboarding to "
            "create it, or wait until get_cluster reports READY"
        )
    endpoint = existing.endpoint
    server = endpoint if "://" in endpoint else f"https://{endpoint}"
    token, expires_at = scope.clients.access_token()
    return ClusterCredentials(
        server=server,
        token=token,
        ca_data=existing.master_auth.cluster_ca_certificate or None,
        expires_at=expires_at,
    )
