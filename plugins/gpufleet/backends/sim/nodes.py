"""The simulated cluster's nodes as the Kubernetes API shows them: labels, taints, cordons,
readiness, and the workloads running on each (a validation's pods do not make a node busy).

``SimNodes`` is the node half of ``SimClusterBackend`` (``cluster``), which adds objects,
pods and workloads; every call goes through ``_api_call`` (injected API errors, and the
cluster backend's refusal while the cluster does not exist). A node is read as the kube backend
reads a Node object (``watch_log.node_manifest`` renders the row as one), so its conditions,
uid, boot id and creation time follow the real API's shapes. ``list_nodes_versioned``,
``watch_nodes``, ``list_node_events`` and ``watch_node_events`` read the sim's change log
(``watch_log``); every read of the nodes first fires the scheduled node events that are due
(``node_actions``, ``events_schedule``) and settles nodes whose boot ended.
"""

from __future__ import annotations

import json
from dataclasses import replace

from gpufleet.backends.base import NodeInfo, Taint, WatchEvent
from gpufleet.backends.kube.node_objects import node_event, node_info
from gpufleet.backends.sim import watch_log
from gpufleet.backends.sim.node_actions import SimNodeActions
from gpufleet.backends.sim.watch_log import node_manifest
from gpufleet.domain.events import Change, NodeEvent
from gpufleet.domain.workloads import POOL_LABEL, WORKLOAD_LABEL
from gpufleet.errors import BackendError


class SimNodes(SimNodeActions):
    """Node reads and writes of a simulated cluster (a base of ``SimClusterBackend``), its
    list-then-watch of nodes and node Events (``watch_log``), and what happens to its nodes
    between nights (``node_actions``)."""

    def list_nodes(self, pool: str | None = None) -> list[NodeInfo]:
        self._api_call("list nodes")
        return self.nodes(pool)

    def nodes(self, pool: str | None = None) -> list[NodeInfo]:
        """The nodes as they are, without injected API errors (for ``gpufleet sim show``)."""
        self.settle()
        with self.state.read() as conn:
            now = self.state.clock.time(conn)
            rows = conn.execute(
                "SELECT * FROM nodes WHERE cluster=? AND (? IS NULL OR pool=?) ORDER BY name",
                (self.cluster.name, pool, pool),
            ).fetchall()
            busy: dict[str, set[str]] = {}
            for p in conn.execute(
                "SELECT node, workload, labels, start_at, end_at FROM pods WHERE cluster=? "
                "AND node IS NOT NULL",
                (self.cluster.name,),
            ):
                labels = json.loads(p["labels"])
                if labels.get(WORKLOAD_LABEL) == "validation":
                    continue
                if p["end_at"] is None or p["end_at"] > now:
                    busy.setdefault(p["node"], set()).add(p["workload"])
        return [
            replace(self.node_info(r), workloads=tuple(sorted(busy.get(r["name"], ()))))
            for r in rows
        ]

    def node_info(self, row) -> NodeInfo:
        """A node row (or a change log's snapshot of one) read as the kube backend reads a
        Node object (``watch_log.node_manifest`` renders it as one): labels, taints, cordon,
        conditions, uid, boot id, creation time. ``workloads`` stays empty."""
        return replace(
            node_info(node_manifest(row, self.cluster.name), (POOL_LABEL,)), pool=row["pool"]
        )

    # --- list-then-watch (``watch_log``): the sim's change log, as a watch cache ---------------

    def list_nodes_versioned(self) -> tuple[list[NodeInfo], str]:
        self._api_call("list nodes")
        self.settle()
        with self.state.read() as conn:
            rows = conn.execute(
                "SELECT * FROM nodes WHERE cluster=? ORDER BY name", (self.cluster.name,)
            ).fetchall()
            version = watch_log.newest_version(conn)
        return [self.node_info(r) for r in rows], str(version)

    def watch_nodes(self, since: str, timeout_s: float) -> list[WatchEvent]:
        """The node changes after ``since`` (at once: the sim's time is its clock, never
        waited on, so ``timeout_s`` bounds nothing), then a BOOKMARK at the newest version."""
        self._api_call("watch nodes")
        self.settle()
        with self.state.read() as conn:
            rows = watch_log.changes_after(conn, self.cluster.name, "node", since)
            newest = watch_log.newest_version(conn)
        out = [
            WatchEvent(
                Change(r["change"]), str(r["version"]), node=self.node_info(json.loads(r["body"]))
            )
            for r in rows
        ]
        out.append(WatchEvent(Change.BOOKMARK, str(max(newest, watch_log.parse_version(since)))))
        return out

    def list_node_events(self, since: str | None) -> tuple[list[NodeEvent], str]:
        """The Events about nodes (with ``since``: those changed after it), oldest first."""
        self._api_call("list events")
        self.settle()
        after = None if since is None else watch_log.parse_version(since)
        with self.state.read() as conn:
            rows = conn.execute(
                "SELECT * FROM node_events WHERE cluster=? AND (? IS NULL OR version>?) "
                "ORDER BY version",
                (self.cluster.name, after, after),
            ).fetchall()
            version = watch_log.newest_version(conn)
        events = [node_event(watch_log.event_manifest(r)) for r in rows]
        return [e for e in events if e is not None], str(version)

    def watch_node_events(self, since: str, timeout_s: float) -> list[WatchEvent]:
        """As ``watch_nodes``, for the Events about nodes."""
        self._api_call("watch events")
        self.settle()
        with self.state.read() as conn:
            rows = watch_log.changes_after(conn, self.cluster.name, "event", since)
            newest = watch_log.newest_version(conn)
        out = []
        for r in rows:
            event = node_event(watch_log.event_manifest(json.loads(r["body"])))
            if event is not None:
                out.append(WatchEvent(Change(r["change"]), str(r["version"]), event=event))
        out.append(WatchEvent(Change.BOOKMARK, str(max(newest, watch_log.parse_version(since)))))
        return out

    def settle(self) -> None:
        """What reading the nodes makes happen on the sim's clock: the scheduled node events
        that are due fire (``node_actions``), and nodes whose create, reboot or repair ended
        turn Ready (``SimCloudBackend.settle_nodes``)."""
        from gpufleet.backends.sim.cloud import SimCloudBackend

        self.fire_due()
        SimCloudBackend(self.cluster, self.state).settle_nodes()

    def _update_node(self, node: str, fn) -> None:
        with self.state.tx() as conn:
            row = conn.execute(
                "SELECT * FROM nodes WHERE cluster=? AND name=?", (self.cluster.name, node)
            ).fetchone()
            if row is None:
                raise BackendError(f"sim {self.cluster.name}: node {node!r} not found")
            labels, taints, unsched = fn(
                json.loads(row["labels"]), json.loads(row["taints"]), bool(row["unschedulable"])
            )
            conn.execute(
                "UPDATE nodes SET labels=?, taints=?, unschedulable=? WHERE cluster=? AND name=?",
                (json.dumps(labels), json.dumps(taints), int(unsched), self.cluster.name, node),
            )

    def set_unschedulable(self, node: str, unschedulable: bool) -> None:
        self._api_call("patch node")
        self._update_node(node, lambda lab, tnt, _u: (lab, tnt, unschedulable))

    def add_taint(self, node: str, taint: Taint) -> None:
        self._api_call("patch node")

        def fn(labels, taints, unsched):
            kept = [
                t for t in taints if not (t["key"] == taint.key and t["effect"] == taint.effect)
            ]
            return labels, [*kept, taint.as_dict()], unsched

        self._update_node(node, fn)

    def remove_taint(self, node: str, key: str) -> None:
        self._api_call("patch node")
        self._update_node(node, lambda lab, tnt, u: (lab, [t for t in tnt if t["key"] != key], u))

    def set_labels(self, node: str, labels: dict[str, str | None]) -> None:
        self._api_call("patch node")

        def fn(current, taints, unsched):
            for k, v in labels.items():
                if v is None:
                    current.pop(k, None)
                else:
                    current[k] = v
            return current, taints, unsched

        self._update_node(node, fn)
