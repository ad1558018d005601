"""The simulated fleet (``provider: sim``): a fabric model behind the two backend protocols.

It reads the real manifests we render and judges them as a real cluster would:

- Placement follows nodeSelector, hostname affinity, taints and GPU occupancy; a workload
  labelled for Kueue is admitted all-or-nothing (gang) or waits.
- A pod without the pool's RDMA attachment or NCCL net plugin, on a pool whose fabric is down,
  or on a node whose NIC is faulted, gets TCP sockets; with ``NCCL_NET`` pinned it fails to
  start instead, as NCCL does.
- Pairs with a degraded node get low bandwidth; Lustre throughput follows tier x capacity
  unless the filesystem is slowed.
- Output is written in the real formats (nccl-tests text, NCCL_DEBUG=INFO, fio JSON) so the
  same parsers run on sim and real output.

Time is simulated lazily: a pod's start and end times are fixed at submission and its phase
is derived from the clock when read. ``GPUFLEET_SIM_SPEED`` scales every delay (default 1.0).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import shlex
import time
from dataclasses import dataclass
from typing import Any

from gpufleet.backends.base import (
    FilesystemInfo,
    NodeInfo,
    NodePoolInfo,
    PodInfo,
    ReservationInfo,
    Taint,
    WorkloadStatus,
)
from gpufleet.backends.sim.output import LinkModel, fio_json, nccl_info_log, nccl_tests_text
from gpufleet.backends.sim.state import Fault, SimState
from gpufleet.config.baselines import find_baseline
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.fleet import Cluster
from gpufleet.domain.plumbing import NCCL_LOG_CONTAINER, NCCL_NET_NAMES, inspect_pod
from gpufleet.domain.workloads import (
    COMPLETION_INDEX_LABEL,
    JOB_NAME_LABEL,
    JOBSET_NAME_LABEL,
    LEGACY_JOB_NAME_LABEL,
    REPLICATED_JOB_LABEL,
    WORKLOAD_LABEL,
    pinned_nodes,
    workload_pod_templates,
    workload_selector,
)
from gpufleet.errors import BackendError, TransientBackendError

# Delays in seconds before GPUFLEET_SIM_SPEED scaling: scheduling + image pull, one nccl-tests
# pair, one fio pass, a training job's life.
START_DELAY_S = 0.5
NCCL_RUN_S = 1.5
FIO_RUN_S = 1.5
TRAINING_RUN_S = 45.0
SOCKET_BUSBW_GBPS = 22.0  # NCCL over TCP on the front-end NIC
SOCKET_LATENCY_US = 210.0
RDMA_LATENCY_US = 31.0
DEGRADED_FACTOR = 0.42  # a node with a flapping NIC drags its pairs down to this share
SLOW_LUSTRE_FACTOR = 0.3
_SIZE = re.compile(r"^(\d+)([KMGT]?)B?$", re.I)


def _speed() -> float:
    try:
        return max(float(os.environ.get("GPUFLEET_SIM_SPEED", "1")), 0.0)
    except ValueError:
        return 1.0


def _size(text: str) -> int:
    m = _SIZE.match(text)
    if not m:
        raise ValueError(text)
    return int(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " ")


def _seed(*parts: Any) -> int:
    return int(hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:12], 16)


@dataclass
class _Faults:
    fabric_down: bool = False
    fabric_down_busbw: float | None = None
    degraded_nodes: frozenset[str] = frozenset()
    nic_down_nodes: frozenset[str] = frozenset()
    lustre_factor: float = 1.0
    capacity_short: int | None = None
    api_error_rate: float = 0.0

    @classmethod
    def of(cls, faults: list[Fault], pool: str | None) -> _Faults:
        out = cls()
        degraded, nic = set(), set()
        for f in faults:
            if pool is not None and f.pool != pool:
                continue
            if f.kind == "fabric-down":
                out.fabric_down = True
                if f.arg:
                    out.fabric_down_busbw = float(f.arg.split("=", 1)[1])
            elif f.kind == "bad-node":
                node, _, how = (f.arg or "").partition(":")
                (nic if how == "nic" else degraded).add(node)
            elif f.kind == "lustre-slow":
                out.lustre_factor = float(f.arg) if f.arg else SLOW_LUSTRE_FACTOR
            elif f.kind == "capacity-short":
                out.capacity_short = int(f.arg) if f.arg else -1
            elif f.kind == "api-errors":
                out.api_error_rate = max(out.api_error_rate, float(f.arg or 0))
        out.degraded_nodes, out.nic_down_nodes = frozenset(degraded), frozenset(nic)
        return out


class _SimBase:
    def __init__(self, cluster: Cluster, state: SimState | None = None):
        if cluster.provider != "sim":
            raise BackendError(f"cluster {cluster.name!r} is {cluster.provider}, not sim")
        self.cluster = cluster
        self.state = state or SimState()
        self.state.ensure_seeded(cluster)
        self._catalog = None

    def faults(self, pool: str | None = None) -> _Faults:
        catalog = self._catalog or load_catalog()
        self._catalog = catalog
        return _Faults.of(self.state.faults(catalog, cluster=self.cluster.name), pool)

    def _api_call(self, what: str) -> None:
        """Injected cloud/cluster API errors: fail this call with the configured probability."""
        rate = self.faults().api_error_rate
        if rate and random.random() < rate:
            raise TransientBackendError(
                f"sim {self.cluster.name}: {what}: 503 Service Unavailable (injected api-errors)"
            )


class SimClusterBackend(_SimBase):
    """The ``ClusterBackend`` of a simulated cluster."""

    # --- nodes ---------------------------------------------------------------------------------

    def list_nodes(self, pool: str | None = None) -> list[NodeInfo]:
        self._api_call("list nodes")
        return self.nodes(pool)

    def nodes(self, pool: str | None = None) -> list[NodeInfo]:
        """The nodes as they are, without injected API errors (for ``gpufleet sim show``)."""
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
                self._schedule(conn, body)
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
                "SELECT * FROM pods WHERE cluster=? AND (? IS NULL OR namespace=?) ORDER BY name",
                (self.cluster.name, namespace, namespace),
            ).fetchall()
        out = []
        for r in rows:
            labels = json.loads(r["labels"])
            if all(labels.get(k) == v for k, v in wanted.items()):
                out.append(self._pod_info(r, labels, now))
        return out

    @staticmethod
    def _pod_info(row, labels: dict[str, str], now: float) -> PodInfo:
        if row["node"] is None or now < row["start_at"]:
            phase = "Pending"
        elif row["outcome"] == "Failed" and now >= row["start_at"]:
            phase = "Failed" if row["end_at"] is not None and now >= row["end_at"] else "Running"
        elif row["end_at"] is not None and now >= row["end_at"]:
            phase = row["outcome"]
        else:
            phase = "Running"
        return PodInfo(row["name"], row["node"], phase, labels, row["message"])

    def workload_status(self, kind: str, name: str, namespace: str) -> WorkloadStatus:
        self._api_call("get workload")
        body = self.get(kind, name, namespace)
        if body is None:
            return WorkloadStatus(kind, name, namespace, "NotFound")
        pods = tuple(self.list_pods(namespace, workload_selector(kind, name)))
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
        self._api_call("read pod log")
        with self.state.read() as conn:
            row = conn.execute(
                "SELECT logs, start_at FROM pods WHERE cluster=? AND namespace=? AND name=?",
                (self.cluster.name, namespace, pod),
            ).fetchone()
        if row is None:
            raise BackendError(f"sim {self.cluster.name}: pod {namespace}/{pod} not found")
        if time.time() < row["start_at"]:
            raise TransientBackendError(f"pod {namespace}/{pod} has not started yet")
        logs = json.loads(row["logs"])
        return logs.get(container or "main", "")

    def evict(self, pod: str, namespace: str) -> bool:
        self._api_call("evict pod")
        with self.state.tx() as conn:
            conn.execute(
                "DELETE FROM pods WHERE cluster=? AND namespace=? AND name=?",
                (self.cluster.name, namespace, pod),
            )
        return True

    # --- the fabric model ----------------------------------------------------------------------

    def _schedule(self, conn, body: dict[str, Any]) -> None:
        kind, meta = body["kind"], body["metadata"]
        name, namespace = meta["name"], meta.get("namespace") or ""
        groups = workload_pod_templates(body)
        gang = "kueue.x-k8s.io/queue-name" in (meta.get("labels") or {})
        now = time.time()
        speed = _speed()
        occupied = {
            r["node"]
            for r in conn.execute(
                "SELECT node, end_at FROM pods WHERE cluster=? AND node IS NOT NULL AND gpu=1 "
                "AND (end_at IS NULL OR end_at > ?)",
                (self.cluster.name, now),
            )
        }
        nodes = {
            r["name"]: r
            for r in conn.execute("SELECT * FROM nodes WHERE cluster=?", (self.cluster.name,))
        }
        plan: list[tuple[str, int, dict[str, Any], str | None]] = []  # group, index, tmpl, node
        taken: set[str] = set()
        unplaced = 0
        for group, count, template in groups:
            candidates = self._candidates(template, nodes, occupied | taken)
            for index in range(count):
                node = candidates.pop(0) if candidates else None
                if node:
                    taken.add(node)
                else:
                    unplaced += 1
                plan.append((group, index, template, node))
        message = None
        if unplaced:
            message = (
                f"{unplaced} of {len(plan)} pods cannot be placed: not enough "
                "schedulable, free nodes in the pool"
            )
            if gang:  # Kueue admits all or nothing: the workload waits, nothing runs
                message = f"waiting for admission (gang of {len(plan)}): {message}"
                plan = [(g, i, t, None) for g, i, t, _ in plan]
        outcomes = self._run(body, plan, now, speed)
        for (group, index, template, node), (outcome, end_at, logs, msg) in zip(
            plan, outcomes, strict=True
        ):
            pod_labels = dict((template.get("metadata") or {}).get("labels") or {})
            if kind == "JobSet":
                job_name = f"{name}-{group}-0"
                pod_labels.update(
                    {
                        JOBSET_NAME_LABEL: name,
                        REPLICATED_JOB_LABEL: group,
                        "jobset.sigs.k8s.io/job-index": "0",
                    }
                )
            else:
                job_name = name
            pod_labels.update(
                {
                    JOB_NAME_LABEL: job_name,
                    LEGACY_JOB_NAME_LABEL: job_name,
                    COMPLETION_INDEX_LABEL: str(index),
                }
            )
            pod_name = f"{job_name}-{index}-{_seed(name, group, index, now) % 10**5:05d}"
            gpu = int(
                any(
                    "nvidia.com/gpu" in ((c.get("resources") or {}).get("limits") or {})
                    for c in (template.get("spec") or {}).get("containers") or ()
                )
            )
            conn.execute(
                "INSERT INTO pods VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    self.cluster.name,
                    namespace,
                    pod_name,
                    kind,
                    name,
                    node,
                    json.dumps(pod_labels),
                    now + START_DELAY_S * speed,
                    end_at if node else None,
                    outcome if node else "Pending",
                    msg if node else message,
                    json.dumps(logs),
                    gpu,
                ),
            )

    def _candidates(
        self, template: dict[str, Any], nodes: dict[str, Any], busy: set[str]
    ) -> list[str]:
        spec = template.get("spec") or {}
        selector = spec.get("nodeSelector") or {}
        tolerated = {(t.get("key"), t.get("effect")) for t in spec.get("tolerations") or ()}
        hostnames = pinned_nodes(template)
        out = []
        for name, row in nodes.items():
            labels = json.loads(row["labels"])
            if any(labels.get(k) != v for k, v in selector.items()):
                continue
            if hostnames is not None and name not in hostnames:
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

    def _run(self, body, plan, now, speed) -> list[tuple[str, float | None, dict, str | None]]:
        """Decide each pod's outcome and logs, as the real programs would produce them."""
        meta = body["metadata"]
        results = []
        by_group: dict[str, list[tuple[int, dict, str | None]]] = {}
        for group, index, template, node in plan:
            by_group.setdefault(group, []).append((index, template, node))
        for group, members in by_group.items():
            template = members[0][1]
            program = _program(template)
            placed = [node for _, _, node in members]
            if any(n is None for n in placed):
                results += [("Pending", None, {}, None)] * len(members)
                continue
            if program["kind"] == "nccl-tests":
                results += self._run_nccl(meta, group, template, placed, program, now, speed)
            elif program["kind"] == "fio":
                results += self._run_fio(meta, group, template, placed, now, speed)
            else:
                results += self._run_training(meta, template, placed, now, speed)
        return results

    def _pool_of(self, template: dict[str, Any]):
        labels = (template.get("metadata") or {}).get("labels") or {}
        pool_name = labels.get("gpufleet.io/pool")
        if not pool_name:
            raise BackendError("sim: pod template has no gpufleet.io/pool label")
        return self.cluster.pool(pool_name)

    def _transport(self, template, nodes: list[str]) -> dict[str, Any]:
        """What NCCL would pick for ranks on these nodes, given the pod spec and the faults."""
        pool = self._pool_of(template)
        faults = self.faults(pool.name)
        fabric = inspect_pod(self.cluster, pool, template)
        reasons = list(fabric.missing)
        if faults.fabric_down:
            reasons.append("the pool's RDMA fabric is down")
        reasons += [f"NIC faulted on {n}" for n in nodes if n in faults.nic_down_nodes]
        rdma = pool.transport != "socket" and not reasons
        expected_net = NCCL_NET_NAMES[pool.transport]
        if rdma:
            net = expected_net
        elif fabric.pinned_net and fabric.pinned_net != "Socket":
            return {
                "failure": (
                    f"NET/Plugin : failed to initialize network {fabric.pinned_net}"
                    f" ({'; '.join(reasons)}); NCCL_NET={fabric.pinned_net} "
                    "forbids falling back"
                ),
                "pool": pool,
                "faults": faults,
            }
        else:
            net = "Socket"
        return {
            "network": net,
            "link_layer": "IB" if pool.transport == "ib" else "RoCE",
            "ofi_provider": "efa" if pool.transport == "ofi-efa" else None,
            "gdrdma": net != "Socket" and pool.gdrdma,
            "pool": pool,
            "faults": faults,
            "failure": None,
        }

    def _nccl_logs(self, meta, template, nodes, transport, now) -> list[str]:
        pool = transport["pool"]
        gpn = pool.gpu.count
        return [
            nccl_info_log(
                host=node,
                first_rank=i * gpn,
                gpus_per_node=gpn,
                nranks=len(nodes) * gpn,
                network=transport.get("network"),
                link_layer=transport.get("link_layer"),
                ofi_provider=transport.get("ofi_provider"),
                gdrdma=bool(transport.get("gdrdma")),
                failure=transport.get("failure"),
                seed=_seed(meta["name"], node, now),
            )
            for i, node in enumerate(nodes)
        ]

    def _run_nccl(self, meta, group, template, nodes, program, now, speed):
        transport = self._transport(template, nodes)
        pool, faults = transport["pool"], transport["faults"]
        logs = self._nccl_logs(meta, template, nodes, transport, now)
        start = now + START_DELAY_S * speed
        end = start + NCCL_RUN_S * speed
        if transport["failure"]:
            return [
                (
                    "Failed",
                    end,
                    {"main": "", NCCL_LOG_CONTAINER: log},
                    "nccl-tests exited 1: NCCL failed to initialise the network",
                )
                for log in logs
            ]
        if transport["network"] == "Socket":
            link = LinkModel(faults.fabric_down_busbw or SOCKET_BUSBW_GBPS, SOCKET_LATENCY_US)
        else:
            base = find_baseline(
                pool.gpu.model, pool.gpu.count, len(nodes), program["collective"], pool.transport
            )
            peak = base.busbw_gbps if base else 100.0
            rng = random.Random(_seed(meta["name"], group, *nodes))
            link = LinkModel(peak * rng.uniform(0.985, 1.025), RDMA_LATENCY_US)
            if any(n in faults.degraded_nodes for n in nodes):
                link = LinkModel(link.busbw_gbps * DEGRADED_FACTOR, RDMA_LATENCY_US * 1.6)
        text = nccl_tests_text(
            collective=program["collective"],
            hosts=nodes,
            gpus_per_node=pool.gpu.count,
            gpu_model=pool.gpu.model,
            link=link,
            min_bytes=program["min_bytes"],
            max_bytes=program["max_bytes"],
            seed=_seed(meta["name"], group),
        )
        out = []
        for i, log in enumerate(logs):
            main = text if i == 0 else "waiting for the launcher\n"
            out.append(("Succeeded", end, {"main": main, NCCL_LOG_CONTAINER: log}, None))
        return out

    def _run_fio(self, meta, group, template, nodes, now, speed):
        pool = self._pool_of(template)
        fs = self.cluster.filesystem(pool.filesystem) if pool.filesystem else None
        start = now + START_DELAY_S * speed
        end = start + FIO_RUN_S * speed
        mounted = _mounts_pvc(template, fs.mount_path if fs else None)
        if fs is None or not mounted:
            msg = (
                f"fio: {fs.mount_path if fs else 'the Lustre mount'}: No such file or "
                "directory (the Lustre PVC is not mounted)"
            )
            return [("Failed", end, {"main": msg + "\n"}, msg) for _ in nodes]
        factor = self.faults(pool.name).lustre_factor
        rng = random.Random(_seed(meta["name"], group))
        aggregate_mib = fs.expected_mb_s * 1e6 / 2**20 * factor * rng.uniform(1.02, 1.08)
        per_pod = aggregate_mib / len(nodes)
        return [
            (
                "Succeeded",
                end,
                {
                    "main": fio_json(
                        host=node,
                        write_mib_s=per_pod * 0.97,
                        read_mib_s=per_pod * 1.03,
                        seed=_seed(meta["name"], node),
                    )
                },
                None,
            )
            for node in nodes
        ]

    def _run_training(self, meta, template, nodes, now, speed):
        transport = self._transport(template, nodes)
        logs = self._nccl_logs(meta, template, nodes, transport, now)
        start = now + START_DELAY_S * speed
        if transport["failure"]:
            end = start + 2 * START_DELAY_S * speed
            return [
                (
                    "Failed",
                    end,
                    {
                        "main": "torch.distributed.DistBackendError: NCCL error\n",
                        NCCL_LOG_CONTAINER: log,
                    },
                    "exit code 1: NCCL error during init",
                )
                for log in logs
            ]
        step_s = 6.07 if transport["network"] != "Socket" else 12.36  # Qwen2.5-14B FSDP, 16 H200
        end = start + TRAINING_RUN_S * speed
        steps = "".join(
            f"step {i} loss {2.5 - i * 0.01:.3f} step_time {step_s:.2f}s\n" for i in range(1, 6)
        )
        return [("Succeeded", end, {"main": steps, NCCL_LOG_CONTAINER: log}, None) for log in logs]


def _program(template: dict[str, Any]) -> dict[str, Any]:
    """Which program the main container runs: nccl-tests, fio, or a training job."""
    containers = (template.get("spec") or {}).get("containers") or [{}]
    main = containers[0]
    words = " ".join([*(main.get("command") or ()), *(main.get("args") or ())])
    m = re.search(r"\b(\w+)_perf\b", words)
    if m:
        tokens = shlex.split(words.replace("\n", " "), posix=True) if words else []
        sizes = {"-b": 8, "-e": 8 * 2**30}
        for flag in sizes:
            if flag in tokens and tokens.index(flag) + 1 < len(tokens):
                with contextlib.suppress(ValueError):
                    sizes[flag] = _size(tokens[tokens.index(flag) + 1])
        return {
            "kind": "nccl-tests",
            "collective": m.group(1),
            "min_bytes": sizes["-b"],
            "max_bytes": sizes["-e"],
        }
    if re.search(r"\bfio\b", words):
        return {"kind": "fio"}
    return {"kind": "training"}


def _mounts_pvc(template: dict[str, Any], mount_path: str | None) -> bool:
    spec = template.get("spec") or {}
    pvc_volumes = {v["name"] for v in spec.get("volumes") or () if "persistentVolumeClaim" in v}
    main = (spec.get("containers") or [{}])[0]
    return any(
        m.get("name") in pvc_volumes and m.get("mountPath") == mount_path
        for m in main.get("volumeMounts") or ()
    )


class SimCloudBackend(_SimBase):
    """The ``CloudBackend`` of a simulated cluster: reservations, pools and filesystems."""

    def _reservation(self, name: str):
        for region in (self._catalog or load_catalog()).regions.values():
            for res in region.reservations:
                if res.name == name and any(c.name == self.cluster.name for c in region.clusters):
                    return res
        raise BackendError(f"sim {self.cluster.name}: reservation {name!r} not found")

    def get_reservation(self, name: str) -> ReservationInfo:
        self._api_call("get reservation")
        res = self._reservation(name)
        pools = [p for p in self.cluster.node_pools if p.reservation.name == name]
        short = max((self.faults(p.name).capacity_short or 0 for p in pools), default=0)
        count = res.count
        if short == -1:
            count = res.count // 2
        elif short:
            count = max(res.count - short, 0)
        with self.state.read() as conn:
            in_use = sum(
                conn.execute(
                    "SELECT COUNT(*) FROM nodes WHERE cluster=? AND pool=?",
                    (self.cluster.name, p.name),
                ).fetchone()[0]
                for p in pools
            )
        return ReservationInfo(name, res.machine_type, count, in_use)

    def ensure_network(self) -> dict[str, Any]:
        self._api_call("ensure network")
        net = self.cluster.network
        body = {
            "name": net.name,
            "rdma_nics": net.rdma_nics,
            "subnets": [s.model_dump() for s in net.subnets],
        }
        with self.state.tx() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO cloud VALUES (?, 'network', ?, ?)",
                (self.cluster.name, net.name, json.dumps(body)),
            )
        return body

    def ensure_cluster(self) -> dict[str, Any]:
        self._api_call("ensure cluster")
        body = {"name": self.cluster.name, "location": self.cluster.location, "status": "RUNNING"}
        with self.state.tx() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO cloud VALUES (?, 'cluster', ?, ?)",
                (self.cluster.name, self.cluster.name, json.dumps(body)),
            )
        return body

    def get_node_pool(self, pool: str) -> NodePoolInfo:
        self._api_call("get node pool")
        spec = self.cluster.pool(pool)
        with self.state.read() as conn:
            count = conn.execute(
                "SELECT COUNT(*) FROM nodes WHERE cluster=? AND pool=?", (self.cluster.name, pool)
            ).fetchone()[0]
        return NodePoolInfo(
            pool,
            self.cluster.name,
            spec.machine_type,
            count,
            spec.reservation.name,
            "RUNNING" if count else "ABSENT",
        )

    def ensure_node_pool(self, pool: str) -> NodePoolInfo:
        current = self.get_node_pool(pool)
        if current.status == "RUNNING":
            return current
        spec = self.cluster.pool(pool)
        res = self.get_reservation(spec.reservation.name)
        if res.free < spec.nodes:
            raise BackendError(
                f"reservation {res.name!r} has {res.free} of {res.count} machines free; node "
                f"pool {pool!r} needs {spec.nodes}. Free capacity or lower the pool's size."
            )
        with self.state.tx() as conn:
            self.state.create_nodes(conn, self.cluster, pool, spec.nodes)
            conn.execute(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                (f"seeded:{self.cluster.name}/{pool}", str(time.time())),
            )
        return self.get_node_pool(pool)

    def delete_node_pool(self, pool: str) -> bool:
        self._api_call("delete node pool")
        with self.state.tx() as conn:
            return bool(
                conn.execute(
                    "DELETE FROM nodes WHERE cluster=? AND pool=?", (self.cluster.name, pool)
                ).rowcount
            )

    def get_filesystem(self, name: str) -> FilesystemInfo:
        self._api_call("get filesystem")
        fs = self.cluster.filesystem(name)
        with self.state.read() as conn:
            row = conn.execute(
                "SELECT body FROM cloud WHERE cluster=? AND kind='filesystem' AND name=?",
                (self.cluster.name, name),
            ).fetchone()
        status = "ACTIVE" if row else "ABSENT"
        return FilesystemInfo(
            name,
            fs.capacity_tib,
            fs.throughput_mbps_per_tib,
            status,
            mount_name=name.replace("-", "")[:8] if row else None,
        )

    def ensure_filesystem(self, name: str) -> FilesystemInfo:
        self._api_call("ensure filesystem")
        fs = self.cluster.filesystem(name)
        with self.state.tx() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO cloud VALUES (?, 'filesystem', ?, ?)",
                (self.cluster.name, name, json.dumps(fs.model_dump())),
            )
        return self.get_filesystem(name)
