"""The simulated fleet's ``ClusterBackend``: one Kubernetes cluster, as a fabric model.

Nodes (labels, taints, cordons), objects (create-if-absent ``apply``, ``get``, ``delete``),
pods (by selector or by node) and their logs, workload status and eviction (PodDisruptionBudgets
and the workload failing: ``disruption``), all kept in the state file. Applying a Job
or JobSet places its pods (``placement``: selectors, hostname affinity, taints, one GPU pod per
node, Kueue gang admission) and decides how each ends (``programs``: what NCCL would do with
the pod as rendered, the healthy figures of ``performance``, the faults in force).

Time is simulated lazily: a pod's start and end are fixed when the workload is applied and its
phase follows the clock when read; ``GPUFLEET_SIM_SPEED`` scales every delay. Reading a
container the pod does not have fails as the API server's does (a ``BackendError``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from gpufleet.backends.base import (
    CREATED,
    UNCHANGED,
    UPDATED,
    NodeInfo,
    PodInfo,
    Taint,
    WorkloadStatus,
)
from gpufleet.backends.sim.base import SimBackendBase
from gpufleet.backends.sim.disruption import (
    UNFINISHED,
    eviction_refusal,
    fail_workload,
    keep_outcome,
    terminal_condition,
)
from gpufleet.backends.sim.faults import night_of
from gpufleet.backends.sim.placement import Placement, place, pod_phase, record_pods
from gpufleet.backends.sim.programs import START_DELAY_S, GroupRun, PodRun, run_times, speed
from gpufleet.domain.workloads import (
    COMPLETION_INDEX_LABEL,
    POOL_LABEL,
    REPLICATED_JOB_LABEL,
    WORKLOAD_LABEL,
    workload_selector,
)
from gpufleet.errors import BackendError, TransientBackendError

log = logging.getLogger(__name__)

# pods with their run time on the modelled clock (NULL where the sim has no model of the program)
_PODS = (
    "SELECT pods.*, pod_runs.run_s FROM pods LEFT JOIN pod_runs USING (cluster, namespace, name)"
)


def _contains(have: Any, want: Any) -> bool:
    """Every field of ``want`` is in ``have`` with the same value (lists compared whole)."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(_contains(have.get(k), v) for k, v in want.items())
    return have == want


def _merge(have: dict[str, Any], want: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch of ``want`` onto ``have`` (RFC 7386, without deletions)."""
    out = dict(have)
    for key, value in want.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


class SimClusterBackend(SimBackendBase):
    """The ``ClusterBackend`` of a simulated cluster (refusing every call, as an unreachable
    API server would, until a ``preexisting: false`` cluster was created by onboarding)."""

    def _api_call(self, what: str) -> None:
        self._require_cluster()
        super()._api_call(what)

    def server_version(self) -> str:
        self._api_call("get version")
        return self.cluster.kubernetes_version or "1.34"

    def ensure_object(self, manifest: dict[str, Any]) -> str:
        """Create, leave (every field already as asked) or merge-patch one object."""
        kind = manifest.get("kind")
        meta = manifest.get("metadata") or {}
        name, namespace = meta.get("name"), meta.get("namespace") or ""
        existing = self.get(kind, name, namespace) if kind and name else None
        if existing is None:
            self.apply(manifest)
            return CREATED
        self._api_call("read object")
        if _contains(existing, manifest):
            return UNCHANGED
        self._api_call("patch object")
        with self.state.tx() as conn:
            conn.execute(
                "UPDATE objects SET body=? WHERE cluster=? AND kind=? AND namespace=? AND name=?",
                (json.dumps(_merge(existing, manifest)), self.cluster.name, kind, namespace, name),
            )
        return UPDATED

    # --- nodes ---------------------------------------------------------------------------------

    def list_nodes(self, pool: str | None = None) -> list[NodeInfo]:
        self._api_call("list nodes")
        return self.nodes(pool)

    def nodes(self, pool: str | None = None) -> list[NodeInfo]:
        """The nodes as they are, without injected API errors (for ``gpufleet sim show``)."""
        from gpufleet.backends.sim.cloud import SimCloudBackend

        SimCloudBackend(self.cluster, self.state).settle_nodes()
        now = time.time()
        with self.state.read() as conn:
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

    # --- objects and workloads -----------------------------------------------------------------

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self._api_call("create object")
        kind = manifest.get("kind")
        meta = manifest.get("metadata") or {}
        name, namespace = meta.get("name"), meta.get("namespace") or ""
        if not kind or not name:
            raise BackendError("sim apply: manifest needs kind and metadata.name")
        with self.state.tx() as conn:
            existing = conn.execute(
                "SELECT body FROM objects WHERE cluster=? AND kind=? AND namespace=? AND name=?",
                (self.cluster.name, kind, namespace, name),
            ).fetchone()
            if existing:
                return json.loads(existing["body"])
            body = json.loads(json.dumps(manifest))
            body["metadata"].setdefault(
                "uid",
                hashlib.sha1(
                    f"{self.cluster.name}/{kind}/{namespace}/{name}/{time.time()}".encode()
                ).hexdigest()[:16],
            )
            body["metadata"]["creationTimestamp"] = time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime()
            )
            conn.execute(
                "INSERT INTO objects VALUES (?, ?, ?, ?, ?, ?)",
                (self.cluster.name, kind, namespace, name, json.dumps(body), time.time()),
            )
            if kind in ("Job", "JobSet"):
                self._start(conn, body)
            return body

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        with self.state.read() as conn:
            row = conn.execute(
                "SELECT body FROM objects WHERE cluster=? AND kind=? AND namespace=? AND name=?",
                (self.cluster.name, kind, namespace or "", name),
            ).fetchone()
        return json.loads(row["body"]) if row else None

    def delete(self, kind: str, name: str, namespace: str | None = None) -> bool:
        self._api_call("delete object")
        ns = namespace or ""
        with self.state.tx() as conn:
            n = conn.execute(
                "DELETE FROM objects WHERE cluster=? AND kind=? AND namespace=? AND name=?",
                (self.cluster.name, kind, ns, name),
            ).rowcount
            conn.execute(
                "DELETE FROM pod_runs WHERE cluster=? AND namespace=? AND name IN (SELECT name "
                "FROM pods WHERE cluster=? AND namespace=? AND workload_kind=? AND workload=?)",
                (self.cluster.name, ns, self.cluster.name, ns, kind, name),
            )
            conn.execute(
                "DELETE FROM pods WHERE cluster=? AND namespace=? AND workload_kind=? "
                "AND workload=?",
                (self.cluster.name, ns, kind, name),
            )
        return bool(n)

    def list_pods(self, namespace: str | None, selector: str) -> list[PodInfo]:
        self._api_call("list pods")
        wanted = dict(part.split("=", 1) for part in selector.split(",") if "=" in part)
        now = time.time()
        with self.state.read() as conn:
            rows = conn.execute(
                f"{_PODS} WHERE pods.cluster=? AND (? IS NULL OR pods.namespace=?) "
                "ORDER BY pods.name",
                (self.cluster.name, namespace, namespace),
            ).fetchall()
        out = []
        for r in rows:
            labels = json.loads(r["labels"])
            if all(labels.get(k) == v for k, v in wanted.items()):
                out.append(self._pod_info(r, labels, now))
        return out

    def pods_on_node(self, node: str) -> list[PodInfo]:
        """Unfinished pods bound to ``node`` (a pod whose simulated end passed has finished),
        every namespace, sorted by namespace and name. The sim runs no DaemonSets: every
        ``owner_kind`` is None."""
        self._api_call("list pods")
        now = time.time()
        with self.state.read() as conn:
            rows = conn.execute(
                f"{_PODS} WHERE pods.cluster=? AND pods.node=? ORDER BY pods.namespace, pods.name",
                (self.cluster.name, node),
            ).fetchall()
        pods = (self._pod_info(r, json.loads(r["labels"]), now) for r in rows)
        return [p for p in pods if not p.finished]

    @staticmethod
    def _pod_info(row, labels: dict[str, str], now: float) -> PodInfo:
        """A pod row as the API shows it. Container times: started when the pod started (wall
        clock); finished, once it has, its modelled run time later (``programs.run_times``),
        or at its wall-clock end where the sim has no model of the program."""
        phase = pod_phase(row, now)
        started = finished = None
        if phase != "Pending":
            started = datetime.fromtimestamp(row["start_at"], UTC)
        if started is not None and phase in ("Succeeded", "Failed"):
            if row["run_s"] is not None:
                finished = started + timedelta(seconds=row["run_s"])
            else:
                finished = datetime.fromtimestamp(max(row["end_at"], row["start_at"]), UTC)
        return PodInfo(
            row["name"],
            row["node"],
            phase,
            labels,
            row["message"],
            namespace=row["namespace"],
            started_at=started,
            finished_at=finished,
        )

    def workload_status(self, kind: str, name: str, namespace: str) -> WorkloadStatus:
        self._api_call("get workload")
        body = self.get(kind, name, namespace)
        if body is None:
            return WorkloadStatus(kind, name, namespace, "NotFound")
        pods = tuple(self.list_pods(namespace, workload_selector(kind, name)))
        ended = terminal_condition(body)  # set when its pods were evicted (``disruption``)
        if ended is not None:
            return WorkloadStatus(kind, name, namespace, ended[0], pods, ended[1])
        if not pods or any(p.node is None for p in pods):
            msg = pods[0].message if pods else "no pods"
            return WorkloadStatus(kind, name, namespace, "Pending", pods, msg)
        phases = {p.phase for p in pods}
        if "Failed" in phases:
            failed = next(p for p in pods if p.phase == "Failed")
            return WorkloadStatus(
                kind,
                name,
                namespace,
                "Failed",
                pods,
                f"pod {failed.name}: {failed.message or 'failed'}",
            )
        if phases == {"Succeeded"}:
            return WorkloadStatus(kind, name, namespace, "Succeeded", pods)
        if phases <= {"Running", "Succeeded"}:
            return WorkloadStatus(kind, name, namespace, "Running", pods)
        return WorkloadStatus(kind, name, namespace, "Admitted", pods, "pods starting")

    def pod_logs(self, pod: str, namespace: str, container: str | None = None) -> str:
        """A container's log (the pod's main container when ``container`` is None)."""
        self._api_call("read pod log")
        with self.state.read() as conn:
            row = conn.execute(
                "SELECT logs, start_at, node FROM pods WHERE cluster=? AND namespace=? AND name=?",
                (self.cluster.name, namespace, pod),
            ).fetchone()
        if row is None:
            raise BackendError(f"sim {self.cluster.name}: pod {namespace}/{pod} not found")
        if row["node"] is None:
            raise BackendError(f"pod {namespace}/{pod} is not scheduled: it has no logs yet")
        if time.time() < row["start_at"]:
            raise TransientBackendError(f"pod {namespace}/{pod} has not started yet")
        logs: dict[str, str] = json.loads(row["logs"])
        if container is None:
            return next(iter(logs.values()), "")
        if container not in logs:
            raise BackendError(
                f"container {container!r} is not valid for pod {namespace}/{pod} "
                f"(containers: {', '.join(logs) or 'none'})"
            )
        return logs[container]

    def evict(self, pod: str, namespace: str) -> bool:
        """The Eviction API (``disruption``): False when a PodDisruptionBudget refuses for now
        (the pod stays); otherwise the pod is removed and True (also when it was gone). A pod
        of a Job or JobSet that had not finished fails its workload, as backoffLimit 0 does."""
        self._api_call("evict pod")
        now = time.time()
        with self.state.tx() as conn:
            row = conn.execute(
                "SELECT * FROM pods WHERE cluster=? AND namespace=? AND name=?",
                (self.cluster.name, namespace, pod),
            ).fetchone()
            if row is None:
                return True
            refusal = eviction_refusal(conn, self.cluster.name, row, now)
            if refusal is not None:
                log.info("eviction of pod %s/%s refused for now: %s", namespace, pod, refusal)
                return False
            unfinished = pod_phase(row, now) in UNFINISHED
            if not unfinished:
                keep_outcome(conn, self.cluster.name, row, now)
            conn.execute(
                "DELETE FROM pods WHERE cluster=? AND namespace=? AND name=?",
                (self.cluster.name, namespace, pod),
            )
            if unfinished:
                fail_workload(conn, self.cluster.name, row, now)
        log.info("evicted pod %s/%s", namespace, pod)
        return True

    # --- starting a workload --------------------------------------------------------------

    def _start(self, conn, body: dict[str, Any]) -> None:
        """Place the workload's pods and fix how each one ends."""
        now = time.time()
        plan, message = place(conn, self.cluster.name, body, now)
        runs = self._run(conn, body, plan, now)
        start_at = now + START_DELAY_S * speed()
        record_pods(conn, self.cluster.name, body, plan, runs, message, start_at, now)
        self._record_run_times(conn, body, plan, runs)

    def _record_run_times(
        self, conn, body: dict[str, Any], plan: list[Placement], runs: list[PodRun | None]
    ) -> None:
        """Each placed pod's run time on the modelled clock (``programs.run_times``, group by
        group), keyed by the pod names ``record_pods`` gave them."""
        kind, meta = body["kind"], body["metadata"]
        name, namespace = meta["name"], meta.get("namespace") or ""
        groups: dict[str, list[tuple[Placement, PodRun]]] = {}
        for p, run in zip(plan, runs, strict=True):
            if run is not None and p.node is not None:
                groups.setdefault(p.group, []).append((p, run))
        seconds: dict[tuple[str, int], float | None] = {}
        for group, members in groups.items():
            times = run_times(members[0][0].template, [run for _, run in members])
            seconds.update({(group, p.index): t for (p, _), t in zip(members, times, strict=True)})
        for row in conn.execute(
            "SELECT name, labels FROM pods WHERE cluster=? AND namespace=? AND workload_kind=? "
            "AND workload=?",
            (self.cluster.name, namespace, kind, name),
        ).fetchall():
            labels = json.loads(row["labels"])
            group = labels.get(REPLICATED_JOB_LABEL, name) if kind == "JobSet" else name
            run_s = seconds.get((group, int(labels.get(COMPLETION_INDEX_LABEL, "0"))))
            if run_s is not None:
                conn.execute(
                    "INSERT OR REPLACE INTO pod_runs VALUES (?, ?, ?, ?)",
                    (self.cluster.name, namespace, row["name"], run_s),
                )

    def _run(
        self, conn, body: dict[str, Any], plan: list[Placement], now: float
    ) -> list[PodRun | None]:
        """How each placed pod ends, group by group (None: the pod was not placed). A
        validation workload counts as a night of its pool (what ``drift`` faults count)."""
        night = night_of(body)
        groups: dict[str, list[Placement]] = {}
        for p in plan:
            groups.setdefault(p.group, []).append(p)
        ends: dict[tuple[str, int], PodRun | None] = {}
        for group, members in groups.items():
            nodes = [p.node for p in members]
            if any(n is None for n in nodes):
                ends.update({(group, p.index): None for p in members})
                continue
            template = members[0].template
            pool = self._pool_of(template)
            if night is not None:
                self.state.record_night(conn, self.cluster.name, pool.name, night)
            faults = self.faults(pool.name)
            name = pool.name
            decay = faults.busbw_decay(
                lambda since, p=name: self.state.nights_since(conn, self.cluster.name, p, since)
            )
            runs = GroupRun(
                self.cluster,
                pool,
                faults,
                body["metadata"]["name"],
                group,
                template,
                [n for n in nodes if n is not None],
                now,
                busbw_decay=decay,
            ).run()
            ends.update({(group, p.index): run for p, run in zip(members, runs, strict=True)})
        return [ends[(p.group, p.index)] for p in plan]

    def _pool_of(self, template: dict[str, Any]):
        labels = (template.get("metadata") or {}).get("labels") or {}
        pool_name = labels.get(POOL_LABEL)
        if not pool_name:
            raise BackendError(f"sim: pod template has no {POOL_LABEL} label")
        return self.cluster.pool(pool_name)
