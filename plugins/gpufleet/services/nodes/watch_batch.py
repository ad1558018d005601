"""What a cluster's watcher hands the response: a batch of node changes and node events, as
JSON-able values (an asset event's ``extra``), coalesced per node (design: docs/events.md)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpufleet.backends.base import NodeInfo, WatchEvent
from gpufleet.domain.events import Change, NodeEvent, later_version, version_after
from gpufleet.domain.signals import MAINTENANCE_LABEL, PREDICTION_LABELS
from gpufleet.domain.workloads import PENDING_KEYS

# the labels the response reads (the rest of a node's labels never leave the watcher)
WATCHED_LABELS = (*PREDICTION_LABELS, MAINTENANCE_LABEL)
MAX_EVENTS = 500  # per batch: a storm's further events of a node are counted, not listed


def node_fields(node: NodeInfo, version: str) -> dict[str, Any]:
    """A node as the response reads it (what ``gf_watched_nodes`` keeps)."""
    return {
        "pool": node.pool,
        "uid": node.uid,
        "boot_id": node.boot_id,
        "provider_id": node.provider_id,
        "unschedulable": node.unschedulable,
        "ready": node.ready,
        # the value of its validation-pending taint ("" without one; None: not tainted): what
        # the NotReady hold reads (``domain.signals``); not kept in the ledger
        "pending": next((t.value or "" for t in node.taints if t.key in PENDING_KEYS), None),
        "conditions": [
            {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message}
            for c in node.conditions
        ],
        "labels": {k: node.labels[k] for k in WATCHED_LABELS if k in node.labels},
        "version": version,
    }


def event_fields(event: NodeEvent, version: str) -> dict[str, Any]:
    return {
        "uid": event.uid,
        "node": event.node,
        "reason": event.reason,
        "message": event.message,
        "type": event.type,
        "source": event.source,
        "count": event.count,
        "last_seen": event.last_seen.isoformat() if event.last_seen else None,
        "version": version,
    }


@dataclass
class Batch:
    """One cluster's changes since the last batch: ``nodes`` the latest state of each node that
    changed (None: deleted), ``events`` the node events (one per event uid, the latest count),
    ``relist``: ``nodes`` is the whole cluster (a first list, or a relist after 410 Gone):
    a node the ledger knows that is not in it is gone. ``nodes_version``/``events_version``:
    where each stream stands once this batch is handled (what the response acknowledges)."""

    cluster: str
    nodes: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    events: dict[str, dict[str, Any]] = field(default_factory=dict)
    relist: bool = False
    nodes_version: str | None = None
    events_version: str | None = None
    dropped_events: int = 0  # past MAX_EVENTS: counted, not kept
    # where each stream stood when the batch began (the watcher's position): the response
    # acknowledges a stream only when this follows on from what it acknowledged before, so a
    # batch whose run failed for good is handed over again (None: no gap possible, a list)
    nodes_from: str | None = None
    events_from: str | None = None
    # what the watcher read at an interval (docs/events.md), a whole snapshot each time: every
    # node whose dcgm-exporter reading is not healthy (``services.nodes.readings``), every
    # node whose EC2 instance status says something, and the snapshot's version (the time it
    # was read, in ms: what the response acknowledges as stream ``readings``); None: none read
    exporters: dict[str, dict[str, Any]] = field(default_factory=dict)
    instances: dict[str, dict[str, Any]] = field(default_factory=dict)
    readings_version: str | None = None

    def follows(self, stream: str, acked: str | None) -> bool:
        """Whether this batch follows on from ``acked`` (the stream's acknowledged version):
        it began at or before it, or it is a list (``*_from`` None), or nothing was
        acknowledged yet. A readings snapshot is whole: it always follows."""
        if stream == "readings":
            return True
        began = self.nodes_from if stream == "nodes" else self.events_from
        return began is None or acked is None or not version_after(began, acked)

    def __bool__(self) -> bool:
        return bool(self.nodes or self.events or self.relist or self.readings_version)

    # --- building (the watcher) ----------------------------------------------------------------

    def listed(self, nodes: Iterable[NodeInfo], version: str) -> None:
        """A full list: the batch becomes a relist at ``version``."""
        self.nodes = {n.name: node_fields(n, version) for n in nodes}
        self.relist = True
        self.nodes_version = version
        self.nodes_from = None  # the whole cluster: nothing before it is needed

    def add(self, change: WatchEvent) -> None:
        """One watch event: a node's latest state replaces the earlier ones of this batch
        (a burst of changes is one), an event is kept by uid (its latest count)."""
        if change.node is not None:
            name = change.node.name
            self.nodes[name] = (
                None
                if change.change is Change.DELETED
                else node_fields(change.node, change.version)
            )
            self.nodes_version = later_version(self.nodes_version, change.version)
        elif change.event is not None:
            ev = change.event
            if ev.uid not in self.events and len(self.events) >= MAX_EVENTS:
                self.dropped_events += 1
            else:
                self.events[ev.uid] = event_fields(ev, change.version)
            self.events_version = later_version(self.events_version, change.version)
        elif change.change is Change.BOOKMARK:
            pass  # the caller knows which stream it watched: ``reached``

    def read(
        self,
        exporters: dict[str, dict[str, Any]],
        instances: dict[str, dict[str, Any]],
        version: str,
    ) -> None:
        """A snapshot of the interval readings (it replaces an earlier one of this batch)."""
        self.exporters, self.instances = dict(exporters), dict(instances)
        self.readings_version = version

    def reached(self, stream: str, version: str) -> None:
        """A bookmark: ``stream`` (nodes | events) has reached ``version``."""
        if stream == "nodes":
            self.nodes_version = later_version(self.nodes_version, version)
        else:
            self.events_version = later_version(self.events_version, version)

    def merge(self, later: Batch) -> Batch:
        """This batch followed by ``later`` (several asset events handled by one run)."""
        nodes = dict(later.nodes) if later.relist else {**self.nodes, **later.nodes}
        return Batch(
            cluster=self.cluster,
            nodes=nodes,
            events={**self.events, **later.events},
            relist=self.relist or later.relist,
            nodes_version=later_version(self.nodes_version, later.nodes_version),
            events_version=later_version(self.events_version, later.events_version),
            dropped_events=self.dropped_events + later.dropped_events,
            nodes_from=None if later.relist else self.nodes_from,
            events_from=self.events_from,
            # a snapshot is whole: the later one stands
            exporters=dict(later.exporters if later.readings_version else self.exporters),
            instances=dict(later.instances if later.readings_version else self.instances),
            readings_version=later_version(self.readings_version, later.readings_version),
        )

    # --- the wire ------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "nodes": self.nodes,
            "events": self.events,
            "relist": self.relist,
            "nodes_version": self.nodes_version,
            "events_version": self.events_version,
            "dropped_events": self.dropped_events,
            "nodes_from": self.nodes_from,
            "events_from": self.events_from,
            "exporters": self.exporters,
            "instances": self.instances,
            "readings_version": self.readings_version,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Batch:
        """A batch from the wire; refuses what is not one (a person's hand-made conf)."""
        if not isinstance(data, dict) or not isinstance(data.get("cluster"), str):
            raise ValueError("a node event batch needs a 'cluster' name")
        nodes = data.get("nodes") or {}
        events = data.get("events") or {}
        if not isinstance(nodes, dict) or not isinstance(events, dict):
            raise ValueError("a node event batch's 'nodes' and 'events' are objects")
        for name, fields in nodes.items():
            if fields is not None and not isinstance(fields.get("version"), str):
                raise ValueError(f"node {name!r} in the batch has no 'version'")
        exporters = data.get("exporters") or {}
        instances = data.get("instances") or {}
        if not isinstance(exporters, dict) or not isinstance(instances, dict):
            raise ValueError("a node event batch's 'exporters' and 'instances' are objects")
        return cls(
            cluster=data["cluster"],
            nodes=dict(nodes),
            events=dict(events),
            relist=bool(data.get("relist")),
            nodes_version=data.get("nodes_version"),
            events_version=data.get("events_version"),
            dropped_events=int(data.get("dropped_events") or 0),
            nodes_from=data.get("nodes_from"),
            events_from=data.get("events_from"),
            exporters=dict(exporters),
            instances=dict(instances),
            readings_version=data.get("readings_version"),
        )
