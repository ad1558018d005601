"""The simulated cluster's nodes as the Kubernetes API shows them: labels, taints, cordons,
readiness, and the workloads running on each (a validation's pods do not make a node busy).

``SimNodes`` is the node half of ``SimClusterBackend`` (``cluster``), which adds objects,
pods and workloads; every call goes through ``_api_call`` (injected API errors, and the
cluster backend's refusal while the cluster does not exist).
"""

from __future__ import annotations

import json

from gpufleet.backends.base import NodeInfo, Taint
from gpufleet.backends.sim.base import SimBackendBase
from gpufleet.domain.workloads import WORKLOAD_LABEL
from gpufleet.errors import BackendError


class SimNodes(SimBackendBase):
    """Node reads and writes of a simulated cluster (a base of ``SimClusterBackend``)."""

    def list_nodes(self, pool: str | None = None) -> list[NodeInfo]:
        self._api_call("list nodes")
        return self.nodes(pool)

    def nodes(self, pool: str | None = None) -> list[NodeInfo]:
        """The nodes as they are, without injected API errors (for ``gpufleet sim show``)."""
        from gpufleet.backends.sim.cloud import SimCloudBackend

        SimCloudBackend(self.cluster, self.state).settle_nodes()
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
            NodeInfo(
                name=r["name"],
                pool=r["pool"],
                labels=json.loads(r["labels"]),
                taints=tuple(
                    Taint(t["key"], t.get("value"), t["effect"]) for t in json.loads(r["taints"])
                ),
                unschedulable=bool(r["unschedulable"]),
                ready=bool(r["ready"]),
                workloads=tuple(sorted(busy.get(r["name"], ()))),
                provider_id=f"sim://{self.cluster.name}/{r['name']}",
            )
            for r in rows
        ]

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
