"""The fleet catalog's types: regions -> clusters -> node pools and filesystems.

Pure domain code: pydantic models and the rules that tie their fields together, no files and
no I/O (``gpufleet.config.catalog`` reads the YAML into these types). Which backend a cluster
uses is data (``provider: gke | eks | sim``), as are the Airflow connection ids it talks through.
Names are DNS-1123 labels because they become Kubernetes object names and labels.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from gpufleet.domain.health.tiers import MAX_LEVEL1_EVERY_NIGHTS
from gpufleet.domain.inputs import Flag, shown
from gpufleet.domain.names import DNS1123_LABEL, DNS1123_SUBDOMAIN
from gpufleet.domain.remediation import Profile, RemediationPolicy
from gpufleet.errors import CatalogError

# Upper bounds on every size in the catalog. They are far above any real GPU fleet (a GKE node
# pool or an EKS node group holds at most a few thousand nodes; 8 GPUs and 8-16 RDMA NICs per
# node is today's largest shape) and exist to refuse typos (an extra zero, ``.inf``) before
# they reach the simulator or a cloud API.
MAX_POOL_NODES = 10_000
MAX_GPUS_PER_NODE = 64
MAX_RDMA_NICS = 64
MAX_RESERVATION_MACHINES = 100_000
MAX_CAPACITY_TIB = 100_000.0  # ~100 PiB
MAX_THROUGHPUT_MBPS_PER_TIB = 100_000
_MOUNT_PATH = re.compile(r"/[A-Za-z0-9._/-]*")  # fullmatch only


def _dns_label(value: str) -> str:
    if len(value) > 63 or not DNS1123_LABEL.fullmatch(value):
        raise ValueError(
            f"{shown(value)} is not a DNS-1123 label (lowercase letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters)"
        )
    return value


Name = Annotated[str, AfterValidator(_dns_label)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Gpu(_Model):
    model: str = Field(min_length=1, description="GPU model, e.g. H200")
    count: int = Field(gt=0, le=MAX_GPUS_PER_NODE, description="GPUs per node")


class ReservationRef(_Model):
    name: str
    block: str | None = None


class Reservation(_Model):
    """A capacity reservation (GCE reservation, EC2 Capacity Block) a node pool is pinned to."""

    name: Name
    machine_type: str
    count: int = Field(ge=0, le=MAX_RESERVATION_MACHINES, description="machines reserved")
    zone: str | None = None
    blocks: tuple[str, ...] = ()


class Subnet(_Model):
    name: Name
    cidr: str
    zone: str | None = Field(
        default=None, description="EKS: the subnet's availability zone (its reservation's zone)"
    )

    @field_validator("cidr")
    @classmethod
    def _cidr(cls, value: str) -> str:
        try:
            ipaddress.ip_network(value)
        except ValueError as exc:
            raise ValueError(f"{value!r} is not a CIDR block ({exc})") from None
        return value


class Network(_Model):
    """The RDMA network layout of a cluster: NIC count per node and the per-NIC subnets."""

    name: Name
    rdma_nics: int = Field(ge=0, le=MAX_RDMA_NICS)
    subnets: tuple[Subnet, ...] = ()
    gvnic: Subnet | None = Field(
        default=None,
        description="GKE: the extra gVNIC network GPU nodes need besides the RDMA NICs (a VPC "
        "named after this subnet, holding it)",
    )
    primary_vpc: str = Field(
        default="default",
        description="GKE: the VPC of the cluster and the nodes' first NIC; Managed Lustre is "
        "attached here, never to the RDMA network",
    )


def _every_nights(most: int, description: str) -> Any:
    """A catalog field for a check's cadence: once in that many nights, a whole number from 1
    (every night, the default) to ``most``; a bool, a string or a fraction is refused."""
    return Field(default=1, ge=1, le=most, strict=True, description=description)


# How many fio clients drive a Lustre filesystem's whole throughput tier, each a share of it:
# the nightly's full test runs that many; a pool's short check, fewer, held to their shares.
SATURATING_CLIENTS = 4
# A filesystem's full test stands this many hours (a night, with room for a run that starts a
# little earlier the next night), plus a day per further night of its cadence; at most weekly.
FULL_TEST_HOURS = 20
MAX_FULL_TEST_EVERY_NIGHTS = 7


class Filesystem(_Model):
    """A Lustre filesystem (GCP Managed Lustre or FSx for Lustre) serving a cluster's pools."""

    name: Name
    kind: Literal["managed-lustre", "fsx-lustre"]
    capacity_tib: float = Field(gt=0, le=MAX_CAPACITY_TIB, allow_inf_nan=False)
    throughput_mbps_per_tib: int = Field(
        gt=0, le=MAX_THROUGHPUT_MBPS_PER_TIB, description="per-TiB throughput tier, MB/s"
    )
    mount_path: str = "/mnt/lustre"
    tolerance: float = Field(default=0.9, gt=0, le=1, allow_inf_nan=False)
    full_test_every_nights: int = _every_nights(
        MAX_FULL_TEST_EVERY_NIGHTS,
        "the full throughput test (SATURATING_CLIENTS clients, the whole tier) once in this many "
        "nights (1: every night); every pool's own check runs every night regardless "
        "(docs/validation.md#storage-fio-on-the-lustre-filesystem)",
    )

    @field_validator("mount_path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        """An absolute path of letters, digits, '.', '_', '-' and '/' (the whole string: it
        becomes a volumeMount and a path in the storage check's script)."""
        if not value.startswith("/"):
            raise ValueError(f"mount_path {value!r} must be an absolute path")
        if not _MOUNT_PATH.fullmatch(value):
            raise ValueError(
                f"mount_path {shown(value)} may hold only letters, digits, '.', '_', '-' and '/'"
            )
        return value

    @property
    def expected_mb_s(self) -> float:
        """Aggregate throughput the tier promises: tier (MB/s per TiB) x capacity (TiB)."""
        return self.throughput_mbps_per_tib * self.capacity_tib

    @property
    def full_test_hours(self) -> int:
        """How long a full test stands, in hours: a night's 20 (a run a little earlier the
        next night still finds it old enough), plus a day for each further night of its
        ``full_test_every_nights``."""
        return FULL_TEST_HOURS + 24 * (self.full_test_every_nights - 1)


class NodePool(_Model):
    name: Name
    machine_type: str
    gpu: Gpu
    nodes: int = Field(gt=0, le=MAX_POOL_NODES)
    reservation: ReservationRef
    transport: Literal["gib", "ib", "roce", "ofi-efa", "tcpxo", "socket"]
    gdrdma: bool = Field(default=True, description="GPUDirect RDMA expected on this hardware")
    filesystem: str | None = None
    tolerance: float = Field(
        default=0.9, gt=0, le=1, allow_inf_nan=False, description="share of baseline busbw"
    )
    kueue_queue: Name | None = None
    state: Literal["active", "planned"] = Field(
        default="active",
        description="planned: a pool a reservation transition will create (not onboarding, "
        "not the nightly); it becomes active once the transition is done",
    )
    block_on_drift: bool = Field(
        default=False,
        description="true: the launch gate refuses the pool while it is drifting (its figures "
        "moving away from its own history while still passing); false: it launches and says so",
    )
    burn_in: Flag = Field(
        default=False,
        description="true: dcgmi diag level 4 (NVIDIA's burn-in, 1.5 to 2 hours) at the first "
        "GPU health check of a new node (one still tainted gpufleet.io/validation-pending)",
    )
    level1_every_nights: int = _every_nights(
        MAX_LEVEL1_EVERY_NIGHTS,
        "dcgmi diag level 1 on each idle node once in this many nights (1: every night); on its "
        "other nights a node's dcgm-exporter is read instead, and a node whose reading is not "
        "healthy (a fault, or nothing to read) is checked at level 1 anyway "
        "(docs/health.md#the-level-1-rotation)",
    )
    profile: Profile = Field(
        default="remediate",
        description="what the machine may do to this pool's failing nodes (docs/remediation.md): "
        "observe (record only), quarantine (quarantine and retest, never drain, reboot or "
        "repair), remediate (the whole ladder)",
    )
    min_serving_nodes: int = Field(
        default=0,
        ge=0,
        le=MAX_POOL_NODES,
        description="the pool's floor (docs/remediation.md#approvals): a repair that would "
        "leave fewer nodes outside the repair path waits for a person's approval (0: no floor)",
    )

    @property
    def planned(self) -> bool:
        return self.state == "planned"

    @property
    def queue_name(self) -> str:
        """The Kueue LocalQueue that admits jobs onto this pool."""
        return self.kueue_queue or f"{self.name}-queue"


class Connections(_Model):
    cloud: str | None = None
    kubernetes: str | None = None


class IamRoles(_Model):
    """EKS: the IAM roles the control plane and the node groups run as (ARNs)."""

    cluster_role_arn: str = Field(pattern=r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$")
    node_role_arn: str = Field(pattern=r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$")
    airflow_principal_arn: str | None = Field(
        default=None,
        description="The IAM principal Airflow runs as, given cluster access through an access "
        "entry (empty: the caller's identity)",
    )


class SimSettings(_Model):
    """How a ``provider: sim`` cluster behaves: whose plumbing it mimics and standing faults.

    ``preexisting``: the cluster and its pools exist from the start (true), or only once
    ``region_onboarding`` created them (false), as with a real cloud. ``dcgm_exporter``: its GPU
    nodes run NVIDIA's dcgm-exporter (true), whose metrics gpufleet reads passively from busy
    nodes, or no exporter (false), as on a cluster without the GPU operator's."""

    mimics: Literal["gke", "eks"]
    preexisting: bool = True
    dcgm_exporter: bool = True
    faults: dict[str, tuple[str, ...]] = Field(default_factory=dict)


class Cluster(_Model):
    name: Name
    provider: Literal["gke", "eks", "sim"]
    project: str | None = None
    account: str | None = None
    location: str
    connections: Connections = Connections()
    network: Network
    node_pools: tuple[NodePool, ...] = Field(min_length=1)
    filesystems: tuple[Filesystem, ...] = ()
    namespaces: tuple[Name, ...] = Field(
        default=(),
        description="Training namespaces: each gets the Lustre volume and Kueue LocalQueues; "
        "the launch refuses any other",
    )
    priority_classes: dict[Name, tuple[str, ...]] = Field(
        default_factory=dict,
        description="PriorityClasses a training launch may set, per training namespace (a "
        "namespace not listed: none may be set); never the cluster's own system-* classes",
    )
    kubernetes_version: str | None = Field(
        default=None,
        pattern=r"^1\.\d{1,3}$",
        description="Control-plane minor version to create the cluster at (empty: the "
        "provider's default)",
    )
    iam: IamRoles | None = None
    sim: SimSettings | None = None

    @model_validator(mode="after")
    def _provider_fields(self) -> Cluster:
        if self.provider == "gke" and not self.project:
            raise ValueError("a gke cluster needs 'project' (the GCP project id)")
        if self.provider == "eks" and not self.account:
            raise ValueError("an eks cluster needs 'account' (the AWS account id)")
        if self.provider == "eks" and self.iam is None:
            raise ValueError(
                "an eks cluster needs 'iam' (cluster_role_arn and node_role_arn) to be created"
            )
        if self.provider == "gke" and self.network.rdma_nics and self.network.gvnic is None:
            raise ValueError(
                "a gke cluster with RDMA NICs needs 'network.gvnic' (the extra gVNIC network "
                "A3 Ultra / A4 nodes attach besides the RDMA NICs)"
            )
        if self.provider == "sim" and self.sim is None:
            raise ValueError("a sim cluster needs a 'sim' section naming what it mimics (gke|eks)")
        if self.provider != "sim" and self.sim is not None:
            raise ValueError(
                f"'sim' settings are only allowed on provider sim, not {self.provider}"
            )
        return self

    @model_validator(mode="after")
    def _priority_classes(self) -> Cluster:
        """Each listed namespace is a training namespace, and each class a PriorityClass name
        a workload may take: never ``system-*``, the cluster's own (``system-node-critical``,
        ``system-cluster-critical``; Kubernetes reserves the prefix, kubernetes/kubernetes#59382),
        which would let a training job preempt the cluster's system pods."""
        for namespace, classes in self.priority_classes.items():
            if namespace not in self.namespaces:
                raise ValueError(
                    f"priority_classes: {namespace!r} is not one of the cluster's training "
                    f"namespaces ({', '.join(self.namespaces) or 'none'}): add it to "
                    "'namespaces' or remove it here"
                )
            for name in classes:
                if len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
                    raise ValueError(
                        f"priority_classes.{namespace}: {shown(name)} is not a PriorityClass "
                        "name (a DNS-1123 subdomain)"
                    )
                if name.startswith("system-"):
                    raise ValueError(
                        f"priority_classes.{namespace}: {name!r} is the cluster's own class for "
                        "its system pods; a training job may never take it"
                    )
        return self

    @property
    def active_pools(self) -> tuple[NodePool, ...]:
        """The pools in service or to be onboarded: all but ``planned`` ones."""
        return tuple(p for p in self.node_pools if not p.planned)

    @property
    def shape(self) -> str:
        """Whose plumbing the cluster uses: ``gke`` or ``eks`` (a sim cluster's ``mimics``)."""
        return self.sim.mimics if self.sim else self.provider

    def pool(self, name: str) -> NodePool:
        for pool in self.node_pools:
            if pool.name == name:
                return pool
        known = ", ".join(p.name for p in self.node_pools)
        raise CatalogError(f"cluster {self.name!r} has no node pool {name!r} (pools: {known})")

    def filesystem(self, name: str) -> Filesystem:
        for fs in self.filesystems:
            if fs.name == name:
                return fs
        raise CatalogError(f"cluster {self.name!r} has no filesystem {name!r}")


class Region(_Model):
    name: Name
    description: str | None = None
    reservations: tuple[Reservation, ...] = ()
    clusters: tuple[Cluster, ...] = Field(min_length=1)


def _whole(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be a whole number, not {shown(value)}")
    return value


class GpuModel(_Model):
    """One GPU model's ``dcgmi diag`` settings (the catalog's ``gpu_models``, keyed by the
    model's name as pools write it in ``gpu.model``, case-insensitive). Unset: the built-in
    defaults of ``gpufleet.domain.health.tiers.default_limits`` (level 1 at most on the
    B-series; the default timeout of each level)."""

    dcgm_max_level: int | None = Field(
        default=None,
        description="the highest dcgmi diag level the model's nodes get: a higher tier is "
        "capped to it (B200/GB200 hang at level 2 with DCGM 4.2.3: NVIDIA/DCGM#247)",
    )
    dcgm_timeout_s: dict[int, int] = Field(
        default_factory=dict,
        description="hard timeout of dcgmi diag per level, seconds (levels not given keep the "
        "default: 1: 120, 2: 900, 3: 2700, 4: 9000)",
    )

    @field_validator("dcgm_max_level", mode="before")
    @classmethod
    def _max_level(cls, value: Any) -> Any:
        if value is not None and (_whole(value, "dcgm_max_level") not in (1, 2, 3, 4)):
            raise ValueError(
                f"dcgm_max_level must be a dcgmi diag level: 1, 2, 3 or 4, not {value}"
            )
        return value

    @field_validator("dcgm_timeout_s", mode="before")
    @classmethod
    def _timeouts(cls, value: Any) -> Any:
        from gpufleet.domain.health.tiers import MAX_DIAG_TIMEOUT_S

        if not isinstance(value, dict):
            raise ValueError("dcgm_timeout_s must map a level to seconds, e.g. {2: 900}")
        for level, seconds in value.items():
            if _whole(level, "a dcgm_timeout_s level") not in (1, 2, 3, 4):
                raise ValueError(f"dcgm_timeout_s: {level} is not a dcgmi diag level (1-4)")
            if not 1 <= _whole(seconds, f"dcgm_timeout_s[{level}]") <= MAX_DIAG_TIMEOUT_S:
                raise ValueError(
                    f"dcgm_timeout_s[{level}]: {seconds} s is outside 1..{MAX_DIAG_TIMEOUT_S} s"
                )
        return value

    def limits(self, model: str) -> Any:
        """``model``'s :class:`~gpufleet.domain.health.tiers.DcgmLimits`: these settings over
        the built-in defaults."""
        from gpufleet.domain.health.tiers import DcgmLimits, default_limits

        base = default_limits(model)
        if self.dcgm_max_level is None and not self.dcgm_timeout_s:
            return base
        return DcgmLimits(
            model,
            max_level=self.dcgm_max_level or base.max_level,
            timeouts_s={**base.timeouts_s, **self.dcgm_timeout_s},
            why=base.why
            if self.dcgm_max_level in (None, base.max_level)
            else "the catalog's gpu_models",
        )


def _model_key(name: str) -> str:
    return name.strip().upper()


class CatalogFile(_Model):
    regions: tuple[Region, ...] = Field(min_length=1)
    gpu_models: dict[str, GpuModel] = Field(
        default_factory=dict,
        description="dcgmi diag settings per GPU model (the pools' gpu.model), e.g. "
        "{B200: {dcgm_max_level: 1}}",
    )
    remediation: RemediationPolicy | None = Field(
        default=None,
        description="the fleet's remediation ladder, breakers and dry run (docs/remediation.md); "
        "set in one catalog file at most (unset: the defaults)",
    )

    @field_validator("gpu_models")
    @classmethod
    def _one_spelling(cls, value: dict[str, GpuModel]) -> dict[str, GpuModel]:
        seen: dict[str, str] = {}
        for name in value:
            if not name.strip():
                raise ValueError("gpu_models: a GPU model needs a name, e.g. H200")
            if _model_key(name) in seen:
                raise ValueError(
                    f"gpu_models: {name!r} and {seen[_model_key(name)]!r} are the same model "
                    "(names are case-insensitive): keep one"
                )
            seen[_model_key(name)] = name
        return value


class PoolRef(_Model):
    """A fully resolved node pool with its cluster and region."""

    region: Region
    cluster: Cluster
    pool: NodePool
    # the pool's GPU model's dcgmi diag limits (``tiers.DcgmLimits``: the catalog's
    # ``gpu_models`` over the built-in defaults), set by the catalog that resolved the pool
    dcgm: Any = None

    @property
    def key(self) -> str:
        return f"{self.cluster.name}/{self.pool.name}"

    @property
    def dcgm_limits(self) -> Any:
        """The pool's GPU model's ``tiers.DcgmLimits``: the catalog's when it resolved this
        pool, else the built-in defaults of the model."""
        if self.dcgm is not None:
            return self.dcgm
        from gpufleet.domain.health.tiers import default_limits

        return default_limits(self.pool.gpu.model)

    @property
    def filesystem(self) -> Filesystem | None:
        return self.cluster.filesystem(self.pool.filesystem) if self.pool.filesystem else None

    @property
    def reservation(self) -> Reservation:
        for res in self.region.reservations:
            if res.name == self.pool.reservation.name:
                return res
        raise CatalogError(f"{self.key}: reservation {self.pool.reservation.name!r} missing")


class Catalog:
    """All regions of the fleet, with lookups that fail with the known names."""

    def __init__(
        self,
        regions: dict[str, Region],
        sources: dict[str, Any],
        gpu_models: dict[str, GpuModel] | None = None,
        remediation: RemediationPolicy | None = None,
    ):
        self.regions = regions
        self.remediation = remediation or RemediationPolicy()  # the fleet's (docs/remediation.md)
        self.sources = sources  # region name -> file it came from
        # GPU model (upper case) -> its dcgmi diag settings, from every file's gpu_models
        self.gpu_models = {_model_key(k): v for k, v in (gpu_models or {}).items()}
        self._limits: dict[str, Any] = {}  # model -> its DcgmLimits, built once per catalog
        self._pool_refs: dict[tuple[str, str], PoolRef] = {}  # (cluster, pool) -> its ref

    def dcgm_limits(self, model: str) -> Any:
        """``model``'s dcgmi diag limits (``tiers.DcgmLimits``): the catalog's ``gpu_models``
        entry over the built-in defaults, or the defaults. Built once per model: every pool the
        catalog resolves carries them."""
        from gpufleet.domain.health.tiers import default_limits

        limits = self._limits.get(model)
        if limits is None:
            entry = self.gpu_models.get(_model_key(model))
            limits = entry.limits(model) if entry else default_limits(model)
            self._limits[model] = limits
        return limits

    def _ref(self, region: Region, cluster: Cluster, pool: NodePool) -> PoolRef:
        return PoolRef(
            region=region, cluster=cluster, pool=pool, dcgm=self.dcgm_limits(pool.gpu.model)
        )

    @cached_property
    def clusters(self) -> dict[str, tuple[Region, Cluster]]:
        return {c.name: (r, c) for r in self.regions.values() for c in r.clusters}

    def region(self, name: str) -> Region:
        try:
            return self.regions[name]
        except KeyError:
            raise CatalogError(
                f"unknown region {name!r} (regions: {', '.join(sorted(self.regions))})"
            ) from None

    def cluster(self, name: str) -> Cluster:
        try:
            return self.clusters[name][1]
        except KeyError:
            raise CatalogError(
                f"unknown cluster {name!r} (clusters: {', '.join(sorted(self.clusters))})"
            ) from None

    @cached_property
    def _refs(self) -> tuple[PoolRef, ...]:
        """Every pool resolved once, in catalog order (the models are frozen): a fleet-wide
        read asks for thousands, several times."""
        return tuple(
            self._ref(region, cluster, pool)
            for region in self.regions.values()
            for cluster in region.clusters
            for pool in cluster.node_pools
        )

    def pool(self, cluster: str, pool: str) -> PoolRef:
        """The pool ``pool`` of ``cluster`` (the first of that name, as ``Cluster.pool``),
        resolved once per catalog. Only that one: a task process (forked with the catalog
        loaded) asks for its one pool, and resolving all 2,000 to find it took 8 % of a
        nightly worker's CPU."""
        key = (cluster, pool)
        ref = self._pool_refs.get(key)
        if ref is None:
            cl = self.cluster(cluster)  # CatalogError naming what is known
            ref = self._ref(self.clusters[cluster][0], cl, cl.pool(pool))
            self._pool_refs[key] = ref
        return ref

    def pools(
        self,
        regions: list[str] | None = None,
        clusters: list[str] | None = None,
        pools: list[str] | None = None,
    ) -> Iterator[PoolRef]:
        """Every pool, narrowed by region/cluster names and pool names or ``cluster/pool`` keys."""
        for name in regions or ():
            self.region(name)
        for name in clusters or ():
            self.cluster(name)
        wanted = set(pools or ())
        seen: set[str] = set()
        for ref in self._refs:
            if regions and ref.region.name not in regions:
                continue
            if clusters and ref.cluster.name not in clusters:
                continue
            if wanted:
                key = f"{ref.cluster.name}/{ref.pool.name}"
                if ref.pool.name not in wanted and key not in wanted:
                    continue
                seen.update({ref.pool.name, key})
            yield ref
        missing = wanted - seen
        if missing:
            raise CatalogError(
                f"no node pool matches {', '.join(sorted(missing))} within the chosen "
                "regions/clusters"
            )
