"""The two protocols every backend implements, and the plain data they exchange.

``CloudBackend`` talks to a cloud's control plane (reservations, networks, clusters, node pools,
Lustre filesystems). ``ClusterBackend`` talks to one Kubernetes cluster (manifests, nodes,
workloads, logs). Operators hold names, never clients: services ask
``gpufleet.backends.cluster_backend``/``cloud_backend`` for the backends the catalog names.
Create operations are idempotent (``apply``, ``ensure_*``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from gpufleet.backends.ensured import EnsureAction as EnsureAction  # re-exported
from gpufleet.backends.ensured import Ensured, ObjectChange, ResourceStatus
from gpufleet.backends.topology_api import ProviderTopology
from gpufleet.domain.events import Change, InstanceStatus, NodeCondition, NodeEvent
from gpufleet.domain.workloads import GPU_TAINT_KEY, PENDING_KEYS, QUARANTINE_KEY
from gpufleet.errors import BackendError


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
    # The cloud's id of the machine (``spec.providerID``: ``gce://project/zone/instance``,
    # ``aws:///zone/i-...``): what a repair acts on.
    provider_id: str | None = None
    # ``status.conditions`` (Ready, the Node Problem Detector's, the GPU health monitors'), the
    # node object's ``metadata.uid`` (a node replaced under the same name has a new one),
    # ``status.nodeInfo.bootID`` (a new one: the machine rebooted) and when the node object was
    # created (``metadata.creationTimestamp``, UTC).
    conditions: tuple[NodeCondition, ...] = ()
    uid: str | None = None
    boot_id: str | None = None
    created_at: datetime | None = None

    def condition(self, type_: str) -> NodeCondition | None:
        """The node's condition of ``type_`` (``Ready``, ``AcceleratedHardwareReady``, ...)."""
        return next((c for c in self.conditions if c.type == type_), None)

    @property
    def quarantined(self) -> bool:
        return any(t.key == QUARANTINE_KEY for t in self.taints)

    @property
    def unvalidated(self) -> bool:
        """Awaiting validation: carries the taint new and returning nodes come up with
        (``gpufleet.io/validation-pending``, or its old name ``gpufleet.io/unvalidated``)."""
        return any(t.key in PENDING_KEYS for t in self.taints)

    def open_to(self, tolerated: tuple[str, ...]) -> bool:
        """Ready, not cordoned, and tainted NoSchedule/NoExecute only by the ``tolerated``
        keys: whether a pod tolerating those could land here."""
        blocking = any(
            t.effect in ("NoSchedule", "NoExecute") and t.key not in tolerated for t in self.taints
        )
        return self.ready and not self.unschedulable and not blocking

    @property
    def schedulable(self) -> bool:
        """Ready, not cordoned, not tainted NoSchedule/NoExecute (but for the GPU taint that
        GPU workloads tolerate)."""
        return self.open_to((GPU_TAINT_KEY,))

    @property
    def idle(self) -> bool:
        """Schedulable and running no training workload."""
        return self.schedulable and not self.workloads

    @property
    def free(self) -> bool:
        """Idle and not quarantined: a node a validation pair or a new job may take. The one
        definition of a free node (the gate, the launch and both validations count these)."""
        return self.idle and not self.quarantined

    @property
    def testable(self) -> bool:
        """A node validation may run on: free, or new and awaiting its first validation (Ready,
        not cordoned, running nothing, blocked only by the ``unvalidated`` taint, which
        validation pods tolerate). Jobs never get the latter: it is not ``free``."""
        if self.free:
            return True
        return (
            self.unvalidated and not self.workloads and self.open_to((GPU_TAINT_KEY, *PENDING_KEYS))
        )

    @property
    def retestable(self) -> bool:
        """A node out of service that its retest may run on: running nothing and blocked only
        by taints validation pods tolerate (GPU, unvalidated, quarantine)."""
        return not self.workloads and self.open_to((GPU_TAINT_KEY, *PENDING_KEYS, QUARANTINE_KEY))


@dataclass(frozen=True)
class PodInfo:
    name: str
    node: str | None
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    labels: dict[str, str] = field(default_factory=dict)
    message: str | None = None
    namespace: str | None = None
    # kind of the pod's controlling owner (``metadata.ownerReferences``): ``DaemonSet`` pods
    # stay on a drained node (their controller ignores cordons), ``Job``, ``ReplicaSet``, ...
    owner_kind: str | None = None
    # When the pod's containers ran (``status.containerStatuses[].state``, UTC): the first
    # container's start, and the last one's finish once every container has terminated. None
    # until then. What a validation's cost in GPU-minutes is measured from.
    started_at: datetime | None = None
    finished_at: datetime | None = None
    # The rest of the pod's life (domain.stages), each None when not reported: created
    # (``metadata.creationTimestamp``), bound to its node (``PodScheduled``'s
    # ``lastTransitionTime``: from then on its node's GPUs are counted to it), its main (first)
    # container's finish (``terminated.finishedAt``: what is left is teardown), and its image
    # pull in seconds (the kubelet's ``Pulled`` event; 0 when the image was present).
    created_at: datetime | None = None
    scheduled_at: datetime | None = None
    main_finished_at: datetime | None = None
    pull_seconds: float | None = None
    # Its init containers run as steps before the main container (every init container but a
    # native sidecar, ``restartPolicy: Always``, which runs beside it), in the order they ran:
    # name -> seconds it ran (``initContainerStatuses[].state.terminated``: ``finishedAt -
    # startedAt``), each once it has terminated. Empty when the pod has none or none ended.
    # The main container started after them: its own run is the rest up to ``main_finished_at``.
    init_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def run_seconds(self) -> float | None:
        """How long the pod's containers ran (None until they finished)."""
        if self.started_at is None or self.finished_at is None:
            return None
        return max((self.finished_at - self.started_at).total_seconds(), 0.0)

    @property
    def held_seconds(self) -> float | None:
        """How long the pod held its node: from being bound to it (its image pull and
        container start included) to its last container's finish; from its first container's
        start when the binding time is not reported. None until it finished."""
        if self.started_at is None or self.finished_at is None:
            return None
        bound = self.scheduled_at if self.scheduled_at is not None else self.started_at
        return max((self.finished_at - min(bound, self.started_at)).total_seconds(), 0.0)

    @property
    def finished(self) -> bool:
        """Succeeded or Failed: the pod holds nothing on its node any more."""
        return self.phase in ("Succeeded", "Failed")

    @property
    def daemonset(self) -> bool:
        """Run by a DaemonSet: a drain leaves it, as ``kubectl drain --ignore-daemonsets``."""
        return self.owner_kind == "DaemonSet"


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


@dataclass(frozen=True)
class WatchEvent:
    """One change a node or node-event watch saw, at resource version ``version``: ``node``
    for a Node change (DELETED carries the last state known), ``event`` for an Event change,
    neither for a BOOKMARK (the watch has reached ``version``; resume from it)."""

    change: Change
    version: str
    node: NodeInfo | None = None
    event: NodeEvent | None = None


class WatchExpired(BackendError):
    """The resource version a watch (or list) asked for is older than the server keeps (HTTP
    410 Gone, or a watch ``ERROR`` event with code 410): list again and watch from the list's
    version."""


@runtime_checkable
class ClusterBackend(Protocol):
    """One Kubernetes cluster."""

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create the object, or leave it as is if one of that kind/name exists (idempotent)."""

    def ensure_object(self, manifest: dict[str, Any]) -> ObjectChange:
        """Converge one add-on object: create it when absent (``created``), leave it when what
        is stored already carries every field of ``manifest`` (``unchanged``), else merge-patch
        the manifest onto it (``updated``). Read-compare-patch: a second call sends no write."""

    def server_version(self) -> str:
        """The API server's ``major.minor`` (``"1.33"``)."""

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

    def pods_on_node(self, node: str) -> list[PodInfo]:
        """Every pod bound to ``node``, in any namespace, that has not finished (phase not
        Succeeded/Failed), with its namespace, labels and owner kind: what a drain evicts
        (``PodInfo.daemonset`` ones excepted)."""

    def evict(self, pod: str, namespace: str) -> bool:
        """Evict through the Eviction API (respects PDBs); False when a PDB refuses for now,
        True when the pod is gone (including when it was already gone)."""

    def workload_status(self, kind: str, name: str, namespace: str) -> WorkloadStatus: ...

    def pod_logs(self, pod: str, namespace: str, container: str | None = None) -> str: ...

    def gpu_metrics(self, node: str) -> str | None:
        """dcgm-exporter's ``/metrics`` text from its pod on ``node``; None: no exporter there."""

    def dcgm_exporters(self) -> dict[str, PodInfo]:
        """Every dcgm-exporter pod of the cluster, by its node (a running one first): one list
        for the whole cluster, what an interval scrape round starts from."""

    def exporter_metrics(self, pod: PodInfo) -> str:
        """The ``/metrics`` text of one dcgm-exporter pod (``dcgm_exporters``'); a
        BackendError when it cannot be read."""

    # --- list-then-watch (docs/events.md): bounded reads a trigger loops over ---------------

    def list_nodes_versioned(self) -> tuple[list[NodeInfo], str]:
        """Every node (``workloads`` not filled) and the list's resourceVersion: where a
        ``watch_nodes`` starts."""

    def watch_nodes(self, since: str, timeout_s: float) -> list[WatchEvent]:
        """The node changes after version ``since`` (waiting at most ``timeout_s`` for them),
        in order, ending with a BOOKMARK at the newest version seen. ``WatchExpired`` when
        ``since`` is older than the server keeps: list again."""

    def list_node_events(self, since: str | None) -> tuple[list[NodeEvent], str]:
        """The Events whose ``involvedObject.kind`` is Node (with ``since``: only those changed
        after that version; ``WatchExpired`` when it is too old) and the list's version."""

    def watch_node_events(self, since: str, timeout_s: float) -> list[WatchEvent]:
        """As ``watch_nodes``, for the Events about nodes (``WatchEvent.event``)."""


INSTANCE_STATUS_BATCH = 100  # instances per DescribeInstanceStatus request (EC2's limit)


@runtime_checkable
class InstanceStatusSource(Protocol):
    """A cloud's per-instance status checks and scheduled events (EC2's
    ``DescribeInstanceStatus``): a capability of EKS clusters (and the sim's EKS-shaped ones);
    a GKE cluster has none (``backends.instance_status.instance_status_source`` is None)."""

    def instance_statuses(self, provider_ids: Sequence[str]) -> dict[str, InstanceStatus]:
        """The status of the instances behind ``provider_ids`` (the nodes' ``spec.providerID``,
        at most ``INSTANCE_STATUS_BATCH``), by provider id: one request (its pages), whatever
        the instances' state. A provider id of no instance of this cloud is left out."""


@dataclass(frozen=True)
class NodePoolInfo:
    name: str
    cluster: str
    machine_type: str
    node_count: int
    reservation: str | None
    status: ResourceStatus
    console_url: str | None = None


@dataclass(frozen=True)
class PoolDeletion:
    """How a pool's deletion stands: DELETING (call again with ``operation``, the delete to
    wait on), ABSENT (gone) or ERROR (the cloud failed the delete: ``message``)."""

    pool: str
    status: ResourceStatus  # DELETING | ABSENT | ERROR
    operation: str | None = None
    requested: bool = False  # this call asked the cloud to delete it
    message: str | None = None
    console_url: str | None = None


@dataclass(frozen=True)
class ReservationInfo:
    """A capacity reservation as the cloud reports it. ``zone``/``blocks`` are None when the
    API does not report them (never guessed); ``kind`` is ``reservation`` (GCE),
    ``capacity-reservation`` or ``capacity-block`` (EC2)."""

    name: str
    machine_type: str
    count: int
    in_use: int
    zone: str | None = None
    blocks: tuple[str, ...] | None = None
    kind: str = "reservation"
    status: str = "active"

    @property
    def free(self) -> int:
        return max(self.count - self.in_use, 0)


@dataclass(frozen=True)
class FilesystemInfo:
    name: str
    capacity_tib: float
    throughput_mbps_per_tib: int
    status: ResourceStatus
    id: str | None = None  # the cloud's id (FSx ``fs-...``; Managed Lustre ``projects/P/...``)
    mount_name: str | None = None  # FSx mount name / Managed Lustre filesystem name
    endpoint: str | None = None  # the Lustre MGS address (``10.0.0.2@tcp``) or DNS name
    network: str | None = None  # the VPC the filesystem serves
    console_url: str | None = None
    csi_handle: str | None = None  # the CSI driver's volumeHandle for it (default: ``id``)


@dataclass(frozen=True)
class ClusterInfo:
    """A Kubernetes control plane as the cloud reports it. ``features`` names the settings the
    fabric needs (GKE: ``multi_networking``, ``dataplane_v2``, ``lustre_csi``)."""

    name: str
    status: ResourceStatus
    endpoint: str | None = None
    version: str | None = None
    features: dict[str, bool] = field(default_factory=dict)
    console_url: str | None = None


@dataclass(frozen=True)
class ClusterCredentials:
    """How to reach a cluster the cloud backend knows: API server URL, CA bundle (base64 PEM,
    None for a plain-HTTP emulator) and a bearer token (GKE: an OAuth access token; EKS: a
    ``k8s-aws-v1.`` token). ``kube_config()`` is what ``KubernetesHook`` takes."""

    server: str
    token: str
    ca_data: str | None = None
    expires_at: float | None = None

    def kube_config(self, name: str) -> dict[str, Any]:
        cluster: dict[str, Any] = {"server": self.server}
        if self.ca_data:
            cluster["certificate-authority-data"] = self.ca_data
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": cluster}],
            "users": [{"name": name, "user": {"token": self.token}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
            "current-context": name,
        }


@runtime_checkable
class CloudBackend(ProviderTopology, Protocol):
    """A cloud control plane, scoped to one cluster of the catalog (with its provider's view
    of the pools' sub-blocks, ``topology_api.ProviderTopology``).

    Every ``ensure_*`` reads first and creates only what is missing; with ``dry_run`` it creates
    nothing and reports ``would_create``. It never changes an existing resource: differences
    from the catalog are reported in ``Ensured.differences``, and a difference that makes the
    resource unusable (a GKE cluster without multi-networking) raises ``BackendError`` naming it.
    Creates that take minutes return at once with status ``CREATING``: callers wait by polling
    ``get_cluster``/``get_node_pool``/``get_filesystem`` (triggers do).
    """

    def get_reservation(self, name: str) -> ReservationInfo: ...

    def ensure_network(self, dry_run: bool = False) -> list[Ensured]:
        """The RDMA network and one subnet per NIC (GKE: the zone's RoCE network profile, plus
        the extra gVNIC network; EKS: the VPC, the node subnet and the EFA security group)."""

    def ensure_cluster(self, dry_run: bool = False) -> Ensured: ...

    def get_cluster(self) -> ClusterInfo: ...

    def cluster_credentials(self) -> ClusterCredentials:
        """Credentials for the cluster's API server, obtained from the cloud (no Airflow
        Kubernetes connection needed). EKS also ensures Airflow's access entry."""

    def ensure_node_pool(
        self, pool: str, dry_run: bool = False, taints: tuple[Taint, ...] = ()
    ) -> Ensured:
        """The pool on its reservation; ``taints`` are set on its nodes at creation (new pools
        come up tainted ``gpufleet.io/validation-pending``); an existing pool keeps its taints."""

    def get_node_pool(self, pool: str) -> NodePoolInfo: ...

    def delete_node_pool(self, pool: str) -> bool: ...

    def ensure_node_pool_deleted(self, pool: str, operation: str | None = None) -> PoolDeletion:
        """Delete-if-present; given an earlier call's ``operation``, wait on that delete
        instead (never a second one while it runs); a failed delete is ERROR."""

    def ensure_filesystem(self, name: str, dry_run: bool = False) -> Ensured: ...

    def get_filesystem(self, name: str) -> FilesystemInfo: ...

    def repair_node(self, node: NodeInfo, dry_run: bool = False) -> Ensured:
        """Have the cloud repair the machine behind ``node`` while keeping it in its
        reservation (GKE: ``instances.reportHostAsFaulty``, which moves the VM to a healthy
        host; EKS: terminate the instance, which its node group replaces from the same capacity
        reservation or Capacity Block). Idempotent: a repair already under way is ``found``.
        Returns ``kind="repair"``, ``name=node.name``, ``action`` created|found|would_create."""

    def reboot_node(self, node: NodeInfo, dry_run: bool = False) -> Ensured:
        """Reboot the machine behind ``node``, which resets every GPU, keeping the machine (GKE:
        ``instances.reset``; EKS: ``ec2:RebootInstances``): NVIDIA's action for an Xid 79, and
        gpufleet's GPU reset (a pending row remap, a ``RESET_GPU`` Xid) of a drained node.
        Idempotent: a reboot already under way is ``found``; a machine being repaired or
        replaced is refused. Returns ``kind="reboot"``, otherwise as ``repair_node``."""
