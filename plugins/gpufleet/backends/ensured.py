"""What one ``ensure_*`` call of a backend found or did (``Ensured``): the result type of every
idempotent create, shared by the backend protocols (``base.CloudBackend``, whose
``ProviderTopology`` part, ``topology_api``, returns it too), with its vocabularies: its
``action`` is an ``EnsureAction``, its ``status`` a ``ResourceStatus``; ``ObjectChange`` is what
``ClusterBackend.ensure_object`` did. They are StrEnums: each member equals its string value, so
JSON, XCom and ledger rows hold the plain strings. ``base`` re-exports all four, so
``from gpufleet.backends.base import Ensured, ResourceStatus`` works.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class ResourceStatus(StrEnum):
    """A cloud resource's lifecycle, whatever the provider calls it (GKE RUNNING /
    PROVISIONING, EKS ACTIVE / CREATING, FSx AVAILABLE, Lustre ACTIVE / CREATING ...): backends
    normalise to these."""

    READY = "READY"
    CREATING = "CREATING"
    UPDATING = "UPDATING"
    DELETING = "DELETING"
    ERROR = "ERROR"
    ABSENT = "ABSENT"


class EnsureAction(StrEnum):
    """What an ``ensure_*`` call did: found it, created it (or started creating it), would
    create it (``dry_run``), or could not ask (the provider has no call for it)."""

    FOUND = "found"
    CREATED = "created"
    WOULD_CREATE = "would_create"
    UNSUPPORTED = "unsupported"  # the provider has no call for it: nothing was sent


class ObjectChange(StrEnum):
    """What ``ClusterBackend.ensure_object`` did to one Kubernetes object."""

    CREATED = "created"
    UNCHANGED = "unchanged"
    UPDATED = "updated"


@dataclass(frozen=True)
class Ensured:
    """What one ``ensure_*`` call found or did to one cloud resource.

    ``differences`` are sentences naming a field whose existing value differs from the catalog
    (``"machine type: catalog a3-ultragpu-8g, cloud a3-highgpu-8g"``): an ensure reports them
    and changes nothing. ``status`` is the resource's normalised status after the call: an
    operation that is still running leaves it ``CREATING`` (wait with ``get_*``).
    ``console_url`` links the resource in the provider's console.
    """

    kind: str  # network, subnet, firewall, cluster, node_pool, launch_template, filesystem, ...
    name: str
    action: EnsureAction
    status: ResourceStatus
    differences: tuple[str, ...] = ()
    console_url: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "differences": list(self.differences)}
