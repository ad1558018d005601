"""EC2's per-instance status checks and scheduled events (``DescribeInstanceStatus``) as the event
path reads them: which clusters have them (``instance_status_source``), with the retry rule.
The EKS backend asks EC2 (``backends.eks.instance_status``); the sim's EKS-shaped clusters
answer the same shape (``backends.sim.ec2_status``); both read an answer's items with
``backends.ec2_answers.instance_status_of``. A GKE cluster has no such source: a capability,
not an error.

Design: docs/events.md.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.backends.base import InstanceStatusSource
from gpufleet.backends.retry import RetryPolicy, retrying
from gpufleet.domain.events import InstanceStatus
from gpufleet.domain.fleet import Cluster

__all__ = ["InstanceStatusSource", "RetryingInstanceStatus", "instance_status_source"]


def instance_status_source(cluster: Cluster) -> InstanceStatusSource | None:
    """The cluster's instance status source, with the retry rule; None when its cloud has
    none (GKE, the sim's GKE-shaped clusters)."""
    inner: InstanceStatusSource
    if cluster.provider == "eks":
        from gpufleet.backends.eks.clients import AwsClients
        from gpufleet.backends.eks.instance_status import EksInstanceStatus

        inner = EksInstanceStatus(AwsClients(cluster.location, cluster.connections.cloud))
    elif cluster.provider == "sim" and cluster.shape == "eks":
        from gpufleet.backends.sim.ec2_status import SimInstanceStatus

        inner = SimInstanceStatus(cluster)
    else:
        return None
    return RetryingInstanceStatus(inner)


class RetryingInstanceStatus:
    """An ``InstanceStatusSource`` whose calls follow the retry rule."""

    def __init__(self, inner: InstanceStatusSource, policy: RetryPolicy | None = None) -> None:
        self.inner = inner
        self._retry = retrying(policy or RetryPolicy(), inner)

    def instance_statuses(self, provider_ids: Sequence[str]) -> dict[str, InstanceStatus]:
        return self._retry(self.inner.instance_statuses, provider_ids)
