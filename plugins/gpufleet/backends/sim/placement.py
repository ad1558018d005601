"""Placement in the simulated fleet: where a workload's pods go, and the pods it records.

Design: docs/design/simulated-fleet.md.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from gpufleet.backends.sim.programs import PodRun
from gpufleet.backends.sim.seeds import seed
from gpufleet.domain.kueue import PREFERRED_TOPOLOGY, REQUIRED_TOPOLOGY, topology_of_level
from gpufleet.domain.plumbing import GPU_RESOURCE
from gpufleet.domain.workloads import (
    COMPLETION_INDEX_LABEL,
    JOB_NAME_LABEL,
    JOBSET_NAME_LABEL,
    LEGACY_JOB_NAME_LABEL,
    REPLICATED_JOB_LABEL,
    avoided_nodes,
    pinned_nodes,
    workload_pod_templates,
)

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


@dataclass(frozen=True)
class Placement:
    group: str  # replicatedJob (JobSet) or Job name
    index: int  # completion index within the group
    template: dict[str, Any]
    node: str | None  # None: not placed (Pending)


def requests_gpu(template: dict[str, Any]) -> bool:
    return any(
        GPU_RESOURCE in ((c.get("resources") or {}).get("limits") or {})
        for c in (template.get("spec") or {}).get("containers") or ()
    )


def candidates(template: dict[str, Any], nodes: dict[str, Any], busy: set[str]) -> list[str]:
    """Nodes the pod template may run on, in the manifest's hostname order when pinned."""
    spec = template.get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    tolerated = {(t.get("key"), t.get("effect")) for t in spec.get("tolerations") or ()}
    hostnames = pinned_nodes(template)
    avoided = avoided_nodes(template)
    out = []
    for name, row in nodes.items():
        labels = json.loads(row["labels"])
        if any(labels.get(k) != v for k, v in selector.items()):
            continue
        if (hostnames is not None and name not in hostnames) or name in avoided:
            continue
        if not row["ready"] or row["unschedulable"] or name in busy:
            continue
        taints = json.loads(row["taints"])
        if any(
            t["effect"] in ("NoSchedule", "NoExecute")
            and (t["key"], t["effect"]) not in tolerated
            and (t["key"], None) not in tolerated
            for t in taints
        ):
            continue
        out.append(name)
    if hostnames is not None:  # keep the manifest's order (pair order)
        out.sort(key=hostnames.index)
    return out


def within_topology(
    template: dict[str, Any], free: list[str], nodes: dict[str, Any], count: int
) -> tuple[list[str], str | None]:
    """``free`` narrowed to one domain of the topology level the pod template asks for (none
    asked: all of it), and why nothing fits when a required level has no domain of ``count``
    free nodes. Of the domains that fit, the one with the fewest free nodes (ties by name)."""
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    required = annotations.get(REQUIRED_TOPOLOGY)
    level = required or annotations.get(PREFERRED_TOPOLOGY)
    if not level:
        return free, None
    topology = topology_of_level(level)
    if topology is None:
        return [], f"topology level {level} is not a level of the flavor's Topology"
    upward = topology.levels[: topology.levels.index(level) + 1][::-1]
    for lvl in [level] if required else upward:
        domains: dict[tuple[str, ...], list[str]] = {}
        for name in free:
            domain = topology.domain_of(lvl, json.loads(nodes[name]["labels"]))
            if domain is not None:
                domains.setdefault(domain, []).append(name)
        fits = sorted((len(m), d, m) for d, m in domains.items() if len(m) >= count)
        if fits:
            return fits[0][2], None
    if required:
        largest = max((len(m) for m in domains.values()), default=0)
        return [], (
            f"no {level} domain has {count} free nodes (the largest has {largest}; "
            f"{REQUIRED_TOPOLOGY})"
        )
    return free, None


def place(
    conn: sqlite3.Connection, cluster: str, body: dict[str, Any], now: float
) -> tuple[list[Placement], str | None]:
    """Place every pod of the Job or JobSet ``body``; the message says why some wait."""
    meta = body["metadata"]
    gang = QUEUE_LABEL in (meta.get("labels") or {})
    occupied = {
        r["node"]
        for r in conn.execute(
            "SELECT node FROM pods WHERE cluster=? AND node IS NOT NULL AND gpu=1 "
            "AND (end_at IS NULL OR end_at > ?)",
            (cluster, now),
        )
    }
    nodes = {r["name"]: r for r in conn.execute("SELECT * FROM nodes WHERE cluster=?", (cluster,))}
    plan: list[Placement] = []
    taken: set[str] = set()
    unplaced = 0
    why: list[str] = []
    for group, count, template in workload_pod_templates(body):
        held = occupied | taken if requests_gpu(template) else taken
        free, refusal = within_topology(template, candidates(template, nodes, held), nodes, count)
        why += [refusal] if refusal else []
        for index in range(count):
            node = free.pop(0) if free else None
            if node:
                taken.add(node)
            else:
                unplaced += 1
            plan.append(Placement(group, index, template, node))
    if not unplaced:
        return plan, None
    message = f"{unplaced} of {len(plan)} pods cannot be placed: " + (
        "; ".join(why) or "not enough schedulable, free nodes in the pool"
    )
    if gang:  # Kueue admits all or nothing: the workload waits, nothing runs
        message = f"waiting for admission (gang of {len(plan)}): {message}"
        plan = [Placement(p.group, p.index, p.template, None) for p in plan]
    return plan, message


def record_pods(
    conn: sqlite3.Connection,
    cluster: str,
    body: dict[str, Any],
    plan: list[Placement],
    runs: list[PodRun | None],
    message: str | None,
    start_at: float,
    now: float,
) -> None:
    """Insert one pod row per placement, labelled as the Job/JobSet controllers label pods."""
    kind, meta = body["kind"], body["metadata"]
    name, namespace = meta["name"], meta.get("namespace") or ""
    for p, run in zip(plan, runs, strict=True):
        labels = dict((p.template.get("metadata") or {}).get("labels") or {})
        job_name = name
        if kind == "JobSet":
            job_name = f"{name}-{p.group}-0"
            labels.update(
                {
                    JOBSET_NAME_LABEL: name,
                    REPLICATED_JOB_LABEL: p.group,
                    "jobset.sigs.k8s.io/job-index": "0",
                }
            )
        labels.update(
            {
                JOB_NAME_LABEL: job_name,
                LEGACY_JOB_NAME_LABEL: job_name,
                COMPLETION_INDEX_LABEL: str(p.index),
            }
        )
        pod_name = f"{job_name}-{p.index}-{seed(name, p.group, p.index, now) % 10**5:05d}"
        placed = run if p.node is not None else None  # its run once it has a node
        conn.execute(
            "INSERT INTO pods VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                cluster,
                namespace,
                pod_name,
                kind,
                name,
                p.node,
                json.dumps(labels),
                start_at,
                placed.end_at if placed else None,
                placed.outcome if placed else "Pending",
                placed.message if placed else message,
                json.dumps(placed.logs if placed else {}),
                int(requests_gpu(p.template)),
            ),
        )


def pod_phase(row: sqlite3.Row, now: float) -> str:
    """A pod row's phase at ``now``: Pending until placed and started, then Running until its
    fixed end, then its outcome (a pod that fails fails at its end, not at its start)."""
    if row["node"] is None or now < row["start_at"]:
        return "Pending"
    if row["end_at"] is not None and now >= row["end_at"]:
        return row["outcome"]
    return "Running"
