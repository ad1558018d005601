"""Node and Event objects as the API server returns them (plain JSON dicts), read into the
backend's values: ``NodeInfo`` (labels, taints, cordon, conditions, uid, boot id, creation
time) and ``NodeEvent`` (a ``core/v1`` Event or an ``events.k8s.io/v1`` one whose object is a
node). Pure functions: the kube backend reads what it lists and watches through them, and the
sim renders its nodes and events as these objects and reads them back the same way, so both
speak one dialect (tests/data/events/ holds real ones).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from gpufleet.backends.base import NodeInfo, Taint
from gpufleet.domain.events import NodeCondition, NodeEvent


def parse_time(value: Any) -> datetime | None:
    """An API timestamp (RFC 3339: ``2026-12-07T04:32:37Z``, ``...37.123456Z`` or with an
    offset) as an aware UTC datetime; None when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def format_time(at: float | datetime | None) -> str | None:
    """A UNIX time (or datetime) as the API writes timestamps (``...Z``, whole seconds)."""
    if at is None:
        return None
    moment = at if isinstance(at, datetime) else datetime.fromtimestamp(at, UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_conditions(status: dict[str, Any]) -> tuple[NodeCondition, ...]:
    """``status.conditions`` (entries without a type are skipped)."""
    return tuple(
        NodeCondition(
            type=str(c["type"]),
            status=str(c.get("status") or "Unknown"),
            reason=str(c.get("reason") or ""),
            message=str(c.get("message") or ""),
            since=parse_time(c.get("lastTransitionTime")),
        )
        for c in status.get("conditions") or ()
        if isinstance(c, dict) and c.get("type")
    )


def node_info(item: dict[str, Any], pool_label_keys: Iterable[str]) -> NodeInfo:
    """A Node object as ``NodeInfo``; its pool is the value of the first of
    ``pool_label_keys`` it carries. ``workloads`` stays empty (pods are another list)."""
    metadata = item.get("metadata") or {}
    labels = dict(metadata.get("labels") or {})
    spec = item.get("spec") or {}
    status = item.get("status") or {}
    pool = next((labels[k] for k in pool_label_keys if labels.get(k)), None)
    conditions = node_conditions(status)
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    taints = tuple(
        Taint(key=t["key"], value=t.get("value"), effect=t.get("effect", "NoSchedule"))
        for t in spec.get("taints") or ()
        if t.get("key")
    )
    return NodeInfo(
        name=metadata["name"],
        pool=pool,
        labels=labels,
        taints=taints,
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
        provider_id=spec.get("providerID"),
        conditions=conditions,
        uid=metadata.get("uid") or None,
        boot_id=(status.get("nodeInfo") or {}).get("bootID") or None,
        created_at=parse_time(metadata.get("creationTimestamp")),
    )


def involved_node(item: dict[str, Any]) -> str | None:
    """The node an Event is about (``involvedObject`` of core/v1, ``regarding`` of
    events.k8s.io/v1), or None when its object is not a Node."""
    ref = item.get("involvedObject") or item.get("regarding") or {}
    if ref.get("kind") != "Node" or not ref.get("name"):
        return None
    return str(ref["name"])


def node_event(item: dict[str, Any]) -> NodeEvent | None:
    """An Event about a node as ``NodeEvent`` (None for an Event about anything else).

    Both API groups: core/v1 (``message``, ``source.component`` or ``reportingComponent``,
    ``count``, ``lastTimestamp``) and events.k8s.io/v1 (``note``, ``reportingController``,
    ``deprecatedCount``/``series.count``, ``series.lastObservedTime``/``eventTime``). An
    aggregated Event keeps its uid while its count grows: that is one event seen again."""
    node = involved_node(item)
    if node is None:
        return None
    metadata = item.get("metadata") or {}
    series = item.get("series") or {}
    source = (
        item.get("reportingController")
        or item.get("reportingComponent")
        or (item.get("source") or {}).get("component")
        or ""
    )
    count = series.get("count") or item.get("count") or item.get("deprecatedCount") or 1
    last_seen = (
        parse_time(series.get("lastObservedTime"))
        or parse_time(item.get("lastTimestamp"))
        or parse_time(item.get("deprecatedLastTimestamp"))
        or parse_time(item.get("eventTime"))
        or parse_time(item.get("firstTimestamp"))
        or parse_time(metadata.get("creationTimestamp"))
    )
    return NodeEvent(
        uid=str(metadata.get("uid") or metadata.get("name") or ""),
        node=node,
        reason=str(item.get("reason") or ""),
        message=str(item.get("message") or item.get("note") or ""),
        type=str(item.get("type") or "Normal"),
        source=str(source),
        count=int(count),
        last_seen=last_seen,
    )
