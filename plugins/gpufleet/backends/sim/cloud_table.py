"""The cloud table of one sim cluster: one JSON row per simulated cloud resource or action
(``kind`` ``cluster``, ``node_pool``, ``filesystem``, ``repair``, ``reboot``,
``subblock_report``), each with the ``ready_at`` (seconds on the sim's clock) when its create
or action ends: ``CREATE_S[kind]`` scaled by ``GPUFLEET_SIM_SPEED`` after it was written.

``SimCloudBackend`` (``cloud``) and the modules it delegates to (``machines``,
``provider_topology``) read and write the table through this base class, so none of them
imports another's internals.
"""

from __future__ import annotations

import json
from typing import Any

from gpufleet.backends.sim.base import SimBackendBase
from gpufleet.backends.sim.programs import speed
from gpufleet.errors import BackendError

CREATE_S = {
    "cluster": 2.0,
    "node_pool": 2.0,
    "filesystem": 2.0,
    "repair": 2.0,
    "reboot": 1.0,
    "subblock_report": 2.0,
}
SIM_CONSOLE = "sim://"


class CloudTable(SimBackendBase):
    """A sim backend that keeps its cloud resources in the state's ``cloud`` table."""

    def _reservation(self, name: str):
        for region in self.catalog.regions.values():
            for res in region.reservations:
                if res.name == name and any(c.name == self.cluster.name for c in region.clusters):
                    return res
        raise BackendError(f"sim {self.cluster.name}: reservation {name!r} not found")

    def reserved(self, name: str) -> int:
        """The machines reservation ``name`` holds, less those a ``capacity-short`` takes."""
        res = self._reservation(name)
        pools = [p for p in self.cluster.node_pools if p.reservation.name == name]
        short = max((self.faults(p.name).capacity_short or 0 for p in pools), default=0)
        return res.count // 2 if short == -1 else max(res.count - short, 0)

    def row(self, kind: str, name: str) -> dict[str, Any] | None:
        """The body of resource ``kind/name`` of this cluster, None when it has none."""
        with self.state.read() as conn:
            row = conn.execute(
                "SELECT body FROM cloud WHERE cluster=? AND kind=? AND name=?",
                (self.cluster.name, kind, name),
            ).fetchone()
        return json.loads(row["body"]) if row else None

    def insert(self, conn, kind: str, name: str, body: dict[str, Any]) -> None:
        """Write ``kind/name`` (unless it exists) in transaction ``conn``, ready
        ``CREATE_S[kind]`` x ``GPUFLEET_SIM_SPEED`` seconds from now on the sim's clock."""
        now = self.state.clock.time(conn)
        body = {**body, "ready_at": now + CREATE_S.get(kind, 0.0) * speed()}
        conn.execute(
            "INSERT OR IGNORE INTO cloud VALUES (?, ?, ?, ?)",
            (self.cluster.name, kind, name, json.dumps(body)),
        )

    def url(self, kind: str, name: str) -> str:
        """The sim console's link to ``kind/name`` (``sim://CLUSTER/KIND/NAME``)."""
        return f"{SIM_CONSOLE}{self.cluster.name}/{kind}/{name}"
