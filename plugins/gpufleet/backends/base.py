"""The two protocols every backend implements, and the plain data they exchange.

``CloudBackend`` talks to a cloud's control plane (reservations, networks, clusters, node pools,
Lustre filesystems). ``ClusterBackend`` talks to one Kubernetes cluster (manifests, nodes,
workloads, logs). Operators hold names, never clients: services ask
``gpufleet.backends.cluster_backend``/``cloud_backend`` for the backends the catalog names.
Create operations are idempotent (``apply``, ``ensure_*``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from gpufleet.domain.workloads import GPU_TAINT_KEY, QUARANTINE_KEY


@dataclass(frozen=True)
class Taint:
    key: str
    value: str | None
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "effect": self.effect}
        if self.value is not None:
            out["value"] = self.value
        return out


@dataclass(frozen=True)
class NodeInfo:
    name: str
    pool: str | None
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    ready: bool
    workloads: tuple[str, ...] = ()  # names of non-validation workloads with pods on the node

    @property
    def quarantined(self) -> bool:
        return any(t.key == QUARANTINE_KEY for t in self.taints)

    @property
    def schedulable(self) -> bool:
        """Ready, not cordoned, not tainted NoSchedule/NoExecute (but for the GPU taint that
        GPU workloads tolerate)."""
        blocking = any(
            t.effect in ("NoSchedule", "NoExecute") and t.key != GPU_TAINT_KEY for t in self.taints
        )
        return self.ready and not self.unschedulable and not blocking

    @property
    def idle(self) -> bool:
        """Schedulable and running no training workload."""
        return self.schedulable and not self.workloads

    @property
    def free(self) -> bool:
        """Idle and not quarantined: a node a validation pair or a new job may take. The one
        definition of a free node (the gate, the launch and both validations count these)."""
        return self.idle and not self.quarantined


@dataclass(frozen=True)
class PodInfo:
    name: str
    node: str | None
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    labels: dict[str, str] = field(default_factory=dict)
    message: str | None = None


@dataclass(frozen=True)
class WorkloadStatus:
    """A submitted workload (Job or JobSet) as the cluster reports it."""

    kind: str
    name: str
    namespace: str
    # Pending (not admitted by Kueue, or pods not placed) | Admitted (unsuspended, pods
    # starting) | Running (every expected pod runs) | Succeeded | Failed | NotFound
    phase: str
    pods: tuple[PodInfo, ...] = ()
    message: str | None = None

    @property
    def done(self) -> bool:
        return self.phase in ("Succeeded", "Failed", "NotFound")


@runtime_checkable
class ClusterBackend(Protocol):
    """One Kubernetes cluster."""

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create the object, or leave it as is if one of that kind/name exists (idempotent)."""

    def delete(self, kind: str, name: str, namespace: str | None = None) -> bool:
        """Delete; True if something was deleted, False if it did not exist."""

    def list_nodes(self, pool: str | None = None) -> list[NodeInfo]: ...

    def set_unschedulable(self, node: str, unschedulable: bool) -> None:
        """Cordon (True) or uncordon (False)."""

    def add_taint(self, node: str, taint: Taint) -> None:
        """Add or replace (same key and effect) a taint."""

    def remove_taint(self, node: str, key: str) -> None:
        """Remove every taint with this key, whatever its effect."""

    def set_labels(self, node: str, labels: dict[str, str | None]) -> None:
        """Set labels; a None value removes the label."""

    def list_pods(self, namespace: str | None, selector: str) -> list[PodInfo]: ...

    def evict(self, pod: str, namespace: str) -> bool:
        """Evict through the Eviction API (respects PDBs); False when a PDB refuses for now,
        True when the pod is gone (including when it was already gone)."""

    def workload_status(self, kind: str, name: str, namespace: str) -> WorkloadStatus: ...

    def pod_logs(self, pod: str, namespace: str, container: str | None = None) -> str: ...


@dataclass(frozen=True)
class NodePoolInfo:
    name: str
    cluster: str
    machine_type: str
    node_count: int
    reservation: str | None
    status: str  # PROVISIONING | RUNNING | RECONCILING | STOPPING | ERROR | ABSENT


@dataclass(frozen=True)
class ReservationInfo:
    name: str
    machine_type: str
    count: int
    in_use: int

    @property
    def free(self) -> int:
        return max(self.count - self.in_use, 0)


@dataclass(frozen=True)
class FilesystemInfo:
    name: str
    capacity_tib: float
    throughput_mbps_per_tib: int
    status: str  # CREATING | ACTIVE | ... | ABSENT
    mount_name: str | None = None
    endpoint: str | None = None


@runtime_checkable
class CloudBackend(Protocol):
    """A cloud control plane, scoped to one cluster of the catalog."""

    def get_reservation(self, name: str) -> ReservationInfo: ...

    def ensure_network(self) -> dict[str, Any]:
        """The RDMA network and one subnet per NIC, as the catalog describes them."""

    def ensure_cluster(self) -> dict[str, Any]: ...

    def ensure_node_pool(self, pool: str) -> NodePoolInfo: ...

    def get_node_pool(self, pool: str) -> NodePoolInfo: ...

    def delete_node_pool(self, pool: str) -> bool: ...

    def ensure_filesystem(self, name: str) -> FilesystemInfo: ...

    def get_filesystem(self, name: str) -> FilesystemInfo: ...
