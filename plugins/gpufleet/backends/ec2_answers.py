"""EC2's ``DescribeInstanceStatus`` answer, as boto3 returns it (or as JSON carries it), read into
the domain's ``InstanceStatus``: what the EKS backend (``backends.eks.instance_status``) and the
sim's EKS-shaped clusters (``backends.sim.ec2_status``) both hand the event path.

Design: docs/events.md; the shapes AWS documents: tests/data/events/ec2/.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from gpufleet.domain.events import InstanceStatus, ScheduledEvent


def _time(value: Any) -> datetime | None:
    """A timestamp as boto3 gives it (a datetime) or as JSON carries it (ISO 8601)."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _check(summary: Any) -> tuple[str, datetime | None]:
    """A status check summary (``InstanceStatusSummary``): its status, and when its failed
    detail began (``ImpairedSince``)."""
    if not isinstance(summary, Mapping):
        return "", None
    since = None
    for detail in summary.get("Details") or ():
        if isinstance(detail, Mapping) and detail.get("ImpairedSince"):
            since = _time(detail["ImpairedSince"])
    return str(summary.get("Status") or ""), since


def instance_status_of(item: Mapping[str, Any]) -> InstanceStatus:
    """One ``InstanceStatuses`` item of a ``DescribeInstanceStatus`` answer."""
    instance, instance_since = _check(item.get("InstanceStatus"))
    system, system_since = _check(item.get("SystemStatus"))
    state = item.get("InstanceState") or {}
    return InstanceStatus(
        instance_id=str(item.get("InstanceId") or ""),
        state=str(state.get("Name") or "") if isinstance(state, Mapping) else "",
        instance_status=instance,
        system_status=system,
        instance_impaired_since=instance_since,
        system_impaired_since=system_since,
        zone=str(item.get("AvailabilityZone") or ""),
        events=tuple(
            ScheduledEvent(
                code=str(e.get("Code") or ""),
                description=str(e.get("Description") or ""),
                event_id=str(e.get("InstanceEventId") or ""),
                not_before=_time(e.get("NotBefore")),
                not_after=_time(e.get("NotAfter")),
                not_before_deadline=_time(e.get("NotBeforeDeadline")),
            )
            for e in item.get("Events") or ()
            if isinstance(e, Mapping)
        ),
    )
