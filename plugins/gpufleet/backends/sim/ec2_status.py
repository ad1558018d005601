"""EC2's ``DescribeInstanceStatus`` for the sim's EKS-shaped clusters: each node is an instance
(its id derived from the node: ``i-`` and 17 hex digits), running while its node exists, ``ok``
unless an ``instance-status`` action impaired a check, with the scheduled events the
``maintenance`` action announced (``node_actions``; rows in ``sim_ec2_status``). The answer is
built in the API's own shape (as boto3 returns it) and read by the same
``backends.ec2_answers.instance_status_of`` as EC2's: moto, the AWS emulator the EKS
backend is tested on, reports no scheduled events.

Design: docs/events.md.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from gpufleet.backends.base import INSTANCE_STATUS_BATCH
from gpufleet.backends.ec2_answers import instance_status_of
from gpufleet.backends.sim.base import SimBackendBase
from gpufleet.domain.events import InstanceStatus
from gpufleet.errors import BackendError

ZONE_SUFFIX = "a"  # the sim's instances all sit in the cluster location's zone "a"


def sim_instance_id(cluster: str, node: str) -> str:
    return "i-" + hashlib.sha256(f"{cluster}/{node}".encode()).hexdigest()[:17]


def _check(status: str, since: float | None) -> dict[str, Any]:
    detail: dict[str, Any] = {
        "Name": "reachability",
        "Status": "failed" if status == "impaired" else "passed",
    }
    if status == "impaired" and since is not None:
        detail["ImpairedSince"] = datetime.fromtimestamp(since, UTC)
    return {"Status": status, "Details": [detail]}


class SimInstanceStatus(SimBackendBase):
    """``InstanceStatusSource`` of one EKS-shaped sim cluster."""

    def instance_statuses(self, provider_ids: Sequence[str]) -> dict[str, InstanceStatus]:
        if len(provider_ids) > INSTANCE_STATUS_BATCH:
            raise BackendError(
                f"at most {INSTANCE_STATUS_BATCH} instances per DescribeInstanceStatus request"
            )
        self._api_call("ec2:DescribeInstanceStatus")
        prefix = f"sim://{self.cluster.name}/"
        nodes = {p[len(prefix) :]: p for p in provider_ids if p.startswith(prefix)}
        with self.state.read() as conn:
            exists = {
                r["name"]
                for r in conn.execute(
                    "SELECT name FROM nodes WHERE cluster=?", (self.cluster.name,)
                )
            }
            rows = {
                r["node"]: r
                for r in conn.execute(
                    "SELECT * FROM sim_ec2_status WHERE cluster=?", (self.cluster.name,)
                )
            }
        out: dict[str, InstanceStatus] = {}
        for node, provider_id in sorted(nodes.items()):
            if node not in exists:
                continue  # its instance was terminated (replaced): not reported
            out[provider_id] = instance_status_of(self._item(node, rows.get(node)))
        return out

    def _item(self, node: str, row: Any) -> dict[str, Any]:
        """The node's instance as one ``InstanceStatuses`` item."""
        item: dict[str, Any] = {
            "InstanceId": sim_instance_id(self.cluster.name, node),
            "AvailabilityZone": f"{self.cluster.location}{ZONE_SUFFIX}",
            "InstanceState": {"Code": 16, "Name": "running"},
            "InstanceStatus": _check("ok", None),
            "SystemStatus": _check("ok", None),
        }
        if row is None:
            return item
        item["InstanceStatus"] = _check(row["instance_status"], row["instance_since"])
        item["SystemStatus"] = _check(row["system_status"], row["system_since"])
        events = [
            {
                "InstanceEventId": e["id"],
                "Code": e["code"],
                "Description": e["description"],
                "NotBefore": datetime.fromtimestamp(e["not_before"], UTC),
                "NotAfter": datetime.fromtimestamp(e["not_after"], UTC),
            }
            for e in json.loads(row["events"] or "[]")
        ]
        if events:
            item["Events"] = events
        return item
