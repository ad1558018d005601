"""EC2's status checks and scheduled events of an EKS cluster's instances
(``ec2:DescribeInstanceStatus``), for the event path's interval round (docs/events.md).

One request per round of at most 100 instances (EC2's limit on explicit ids), with
``IncludeAllInstances`` (a stopped instance is reported too) and followed through its pages;
the instances are the nodes' own, from their ``spec.providerID`` (``aws:///ZONE/i-...``), so no
other instance of the account is read. An id EC2 no longer knows (a node's instance terminated
long ago) fails the whole request with ``InvalidInstanceID.NotFound``: the ids it names are
left out and the request sent once more.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpufleet.backends.base import INSTANCE_STATUS_BATCH
from gpufleet.backends.ec2_answers import instance_status_of
from gpufleet.backends.eks.clients import AwsApiError, AwsClients
from gpufleet.backends.eks.repair import PROVIDER_PREFIX
from gpufleet.domain.events import InstanceStatus
from gpufleet.errors import BackendError

_INSTANCE_ID = re.compile(r"\bi-[0-9a-f]{8,17}\b")


def instance_id(provider_id: str) -> str | None:
    """The instance id of an EKS node's ``spec.providerID`` (``aws:///ZONE/i-...``); None for
    another cloud's or a malformed one."""
    if not provider_id.startswith(PROVIDER_PREFIX):
        return None
    parts = provider_id[len(PROVIDER_PREFIX) :].split("/")
    if len(parts) != 2 or not _INSTANCE_ID.fullmatch(parts[1]):
        return None
    return parts[1]


class EksInstanceStatus:
    """``InstanceStatusSource`` of one EKS cluster's region."""

    def __init__(self, clients: AwsClients) -> None:
        self.clients = clients

    def instance_statuses(self, provider_ids: Sequence[str]) -> dict[str, InstanceStatus]:
        if len(provider_ids) > INSTANCE_STATUS_BATCH:
            raise BackendError(
                f"at most {INSTANCE_STATUS_BATCH} instances per DescribeInstanceStatus request, "
                f"not {len(provider_ids)}"
            )
        by_id = {i: p for p in provider_ids if (i := instance_id(p)) is not None}
        ids = sorted(by_id)
        out: dict[str, InstanceStatus] = {}
        for _ in range(2):  # once more without the ids EC2 no longer knows
            if not ids:
                return out
            try:
                items = self.clients.pages(
                    "ec2",
                    "describe_instance_status",
                    "InstanceStatuses",
                    f"read the status checks and scheduled events of {len(ids)} instance(s)",
                    InstanceIds=ids,
                    IncludeAllInstances=True,
                )
            except AwsApiError as exc:
                gone = set(_INSTANCE_ID.findall(str(exc))) & set(ids)
                if not exc.code.startswith("InvalidInstanceID") or not gone:
                    raise
                ids = [i for i in ids if i not in gone]
                continue
            for item in items:
                status = instance_status_of(item)
                if status.instance_id in by_id:
                    out[by_id[status.instance_id]] = status
            return out
        return out
