"""The simulated fleet's actions on one machine through its cloud: a host repair and a reboot
(``SimCloudBackend.repair_node`` / ``reboot_node`` delegate here).

Design: docs/design/simulated-fleet.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from gpufleet.backends.base import EnsureAction, Ensured, NodeInfo, ResourceStatus
from gpufleet.backends.sim.cloud_table import CloudTable
from gpufleet.domain.faults import REBOOT_CLEARS, Fault, FaultError, parse_fault
from gpufleet.errors import BackendError

ACTIONS = ("repair", "reboot")


def repair(cloud: CloudTable, node: NodeInfo, dry_run: bool) -> Ensured:
    """Move ``node``'s machine to a healthy host (see the module)."""
    return _act(cloud, node, dry_run, "repair", lambda fault: True)


def reboot(cloud: CloudTable, node: NodeInfo, dry_run: bool) -> Ensured:
    """Reboot ``node``'s machine, which resets every GPU (see the module)."""
    return _act(cloud, node, dry_run, "reboot", lambda fault: fault.kind in REBOOT_CLEARS)


def busy_until(cloud: CloudTable) -> dict[str, float]:
    """Node -> when the last repair or reboot of its machine ends (``ready_at``)."""
    with cloud.state.read() as conn:
        rows = conn.execute(
            "SELECT name, body FROM cloud WHERE cluster=? AND kind IN (?, ?)",
            (cloud.cluster.name, *ACTIONS),
        ).fetchall()
    out: dict[str, float] = {}
    for row in rows:
        ready_at = json.loads(row["body"])["ready_at"]
        out[row["name"]] = max(ready_at, out.get(row["name"], ready_at))
    return out


def _act(
    cloud: CloudTable,
    node: NodeInfo,
    dry_run: bool,
    kind: str,
    clears: Callable[[Fault], bool],
) -> Ensured:
    cloud._api_call(f"{kind} node")
    name = _machine(cloud, node, kind)
    url = cloud.url(kind, name)
    now = cloud.state.clock.time()
    ready_at = _until(cloud, kind, name)
    if ready_at is not None and now < ready_at:
        return Ensured(
            kind,
            node.name,
            EnsureAction.FOUND,
            ResourceStatus.UPDATING,
            (),
            url,
            {"ready_at": ready_at},
        )
    repaired_at = _until(cloud, "repair", name)
    if kind == "reboot" and repaired_at is not None and now < repaired_at:
        raise BackendError(
            f"sim {cloud.cluster.name}: node {name!r} is being repaired (until {repaired_at:.0f} "
            "on the sim's clock): the repair settles what a reboot would; retest it after"
        )
    if dry_run:
        return Ensured(
            kind, node.name, EnsureAction.WOULD_CREATE, ResourceStatus.ABSENT, console_url=url
        )
    with cloud.state.tx() as conn:
        named = [
            (fault, scope, parsed)
            for fault, scope in conn.execute(
                "SELECT fault, scope FROM faults WHERE cluster=?", (cloud.cluster.name,)
            )
            if (parsed := _parsed(fault)) is not None and parsed.node == name
        ]
        cleared = {f for f, scope, parsed in named if scope != "sticky" and clears(parsed)}
        kept = {f for f, scope, parsed in named if not (scope != "sticky" and clears(parsed))}
        conn.executemany(
            "DELETE FROM faults WHERE cluster=? AND scope!='sticky' AND fault=?",
            [(cloud.cluster.name, fault) for fault in cleared],
        )
        conn.execute(
            "DELETE FROM cloud WHERE cluster=? AND kind=? AND name=?",
            (cloud.cluster.name, kind, name),
        )
        cloud.insert(conn, kind, name, {"node": name})
        conn.execute(
            "UPDATE nodes SET ready=0, ready_since=? WHERE cluster=? AND name=? AND ready=1",
            (now, cloud.cluster.name, name),
        )
    detail = {"cleared": sorted(cleared), "kept": sorted(kept)}
    return Ensured(kind, node.name, EnsureAction.CREATED, ResourceStatus.UPDATING, (), url, detail)


def _machine(cloud: CloudTable, node: NodeInfo, kind: str) -> str:
    """The sim node behind ``node`` (``sim://CLUSTER/NODE``); a node of no machine of this
    cluster is refused, one that does not exist is a clear error."""
    prefix = f"sim://{cloud.cluster.name}/"
    if not (node.provider_id or "").startswith(prefix) or node.provider_id == prefix:
        raise BackendError(
            f"node {node.name!r} has providerID {node.provider_id!r}, not a machine of sim "
            f"cluster {cloud.cluster.name!r} ({prefix}NODE): refusing to {kind} it"
        )
    name = (node.provider_id or "")[len(prefix) :]  # it starts with prefix: checked above
    with cloud.state.read() as conn:
        if not conn.execute(
            "SELECT 1 FROM nodes WHERE cluster=? AND name=?", (cloud.cluster.name, name)
        ).fetchone():
            raise BackendError(
                f"sim {cloud.cluster.name}: node {name!r} does not exist (list the nodes again)"
            )
    return name


def _until(cloud: CloudTable, kind: str, name: str) -> float | None:
    """When the last ``kind`` action on node ``name`` ends, if there was one."""
    body = cloud.row(kind, name)
    return None if body is None else body["ready_at"]


def _parsed(fault: str) -> Fault | None:
    """The fault as stored, read (None for one the grammar cannot read: it names no node)."""
    try:
        return parse_fault(fault)
    except FaultError:
        return None
