"""What a cluster says about its nodes between nights, as plain values: node conditions,
Kubernetes Events about a node, and the changes a watch sees (docs/events.md).

Pure: no I/O. Backends fill these from the Kubernetes API (or the sim); the rules that turn them
into signals live in ``gpufleet.domain.signals``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any


@dataclass(frozen=True)
class NodeCondition:
    """One entry of a node's ``status.conditions``: ``Ready``, the Node Problem Detector's and
    the GPU health monitors' (``AcceleratedHardwareReady``, ``KernelDeadlock``, ...)."""

    type: str
    status: str  # True | False | Unknown
    reason: str = ""
    message: str = ""
    since: datetime | None = None  # lastTransitionTime


@dataclass(frozen=True)
class NodeEvent:
    """A Kubernetes Event whose ``involvedObject`` is a node (an Xid the driver logged, a
    reboot, a repair the cloud made): ``core/v1`` Event or ``events.k8s.io/v1`` alike."""

    uid: str
    node: str
    reason: str
    message: str
    type: str = "Warning"  # Normal | Warning
    source: str = ""  # reportingController / source.component
    count: int = 1
    last_seen: datetime | None = None


class Change(StrEnum):
    """What a watch reports (``type`` of a Kubernetes watch event)."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    BOOKMARK = "BOOKMARK"  # no object change: the version the watch has reached


def version_after(new: str, old: str | None) -> bool:
    """Whether resource version ``new`` is after ``old``: Kubernetes' versions are opaque
    strings, but etcd's (and the sim's) are integers, compared as such; opaque ones are taken
    as they come (a watch only moves forward)."""
    if old is None:
        return True
    try:
        return int(new) > int(old)
    except ValueError:
        return new != old


def later_version(a: str | None, b: str | None) -> str | None:
    """The later of two resource versions (``version_after``); None only when both are."""
    if a is None or b is None:
        return a or b
    return b if version_after(b, a) else a


# --- EC2's view of an instance (``DescribeInstanceStatus``): what the event path reads of it ---

# the scheduled event codes EC2 documents (``InstanceStatusEvent.code``)
EC2_EVENT_CODES = (
    "instance-reboot",
    "system-reboot",
    "system-maintenance",
    "instance-retirement",
    "instance-stop",
)


@dataclass(frozen=True)
class ScheduledEvent:
    """One scheduled event of an instance (``InstanceStatusEvent``). ``done``: EC2 keeps a
    completed or canceled event for a week, its description starting ``[Completed]`` or
    ``[Canceled]``: no longer ahead."""

    code: str
    description: str = ""
    event_id: str = ""
    not_before: datetime | None = None
    not_after: datetime | None = None
    not_before_deadline: datetime | None = None

    @property
    def done(self) -> bool:
        return self.description.lstrip().startswith(("[Completed]", "[Canceled]"))


@dataclass(frozen=True)
class InstanceStatus:
    """One EC2 instance as ``DescribeInstanceStatus`` (``IncludeAllInstances``) reports it:
    its state (``running``, ``stopped``, ...), the instance status check and the system status
    check (``ok``, ``impaired``, ``insufficient-data``, ``initializing``, ``not-applicable``),
    when each failed check began (``impairedSince``), and its scheduled events."""

    instance_id: str
    state: str = "running"
    instance_status: str = "ok"
    system_status: str = "ok"
    instance_impaired_since: datetime | None = None
    system_impaired_since: datetime | None = None
    events: tuple[ScheduledEvent, ...] = ()
    zone: str = ""


def iso_time(value: Any) -> datetime | None:
    """An ISO 8601 time as a batch's JSON carries it; None when absent or not one."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None
