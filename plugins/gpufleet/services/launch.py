"""Launch a training job onto proven capacity, then confirm every rank's transport.

1. ``gate``: the fail-closed launch gate (``gpufleet.domain.gate``), decision recorded in the
   ledger.
2. ``submit``: render the JobSet (Kueue gang label, pinned to the pool, RDMA + Lustre + NCCL
   plumbing injected, ``NCCL_NET`` pinned) and apply it; record the launch.
3. ``confirm``: once the job runs, read every rank's NCCL INFO log and check the transport
   and GPUDirect RDMA. On a mismatch, policy ``fail`` stops the job and marks the pool
   ``suspect`` (the next nightly run re-validates it); ``warn`` alerts and lets it run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from gpufleet.backends import ClusterBackend, cluster_backend
from gpufleet.domain.fleet import Catalog, PoolRef
from gpufleet.domain.gate import DEFAULT_MAX_AGE, GateDecision
from gpufleet.domain.plumbing import NCCL_LOG_CONTAINER
from gpufleet.domain.workloads import workload_selector
from gpufleet.errors import GpufleetError, ParseError
from gpufleet.services.collect import pod_index
from gpufleet.services.gate import check_gate

log = logging.getLogger(__name__)

POLICIES = ("fail", "warn")


class LaunchRefused(GpufleetError):
    """The gate refused: nothing was submitted."""


@dataclass(frozen=True)
class LaunchRequest:
    cluster: str
    pools: list[str]
    nodes: int
    gpus_per_node: int
    image: str
    command: list[str]
    namespace: str
    job_name: str
    priority_class: str | None = None
    transport_policy: str = "fail"
    env: dict[str, str] = field(default_factory=dict)
    max_validation_age_hours: float = DEFAULT_MAX_AGE.total_seconds() / 3600

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> LaunchRequest:
        try:
            return cls(
                cluster=params["cluster"],
                pools=list(params["pools"]),
                nodes=int(params["nodes"]),
                gpus_per_node=int(params["gpus_per_node"]),
                image=params["image"],
                command=list(params["command"]),
                namespace=params["namespace"],
                job_name=params["job_name"],
                priority_class=params.get("priority_class") or None,
                transport_policy=params.get("transport_policy") or "fail",
                env=dict(params.get("env") or {}),
                max_validation_age_hours=float(params.get("max_validation_age_hours") or 26),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise GpufleetError(f"launch request is incomplete or malformed: {exc}") from None


def _problems(catalog: Catalog, req: LaunchRequest) -> list[str]:
    """What the Params schema cannot express, checked before any cloud call."""
    problems = []
    if req.transport_policy not in POLICIES:
        problems.append(f"transport_policy {req.transport_policy!r} is not one of fail, warn")
    if not req.pools:
        problems.append("no target pool given")
    try:
        cluster = catalog.cluster(req.cluster)
    except GpufleetError as exc:
        return [*problems, str(exc)]
    for name in req.pools:
        try:
            pool = cluster.pool(name)
        except GpufleetError as exc:
            problems.append(str(exc))
            continue
        if req.nodes > pool.nodes:
            problems.append(
                f"{req.cluster}/{name} has {pool.nodes} nodes; the job asks {req.nodes}"
            )
        if req.gpus_per_node > pool.gpu.count:
            problems.append(
                f"{req.cluster}/{name} nodes have {pool.gpu.count} GPUs; the job asks "
                f"{req.gpus_per_node} per node"
            )
    return problems


class TrainingLaunch:
    def __init__(self, catalog: Catalog, ledger_factory, backend: ClusterBackend | None = None):
        self.catalog = catalog
        self.ledger_factory = ledger_factory
        self._backend = backend

    def backend(self, cluster: str) -> ClusterBackend:
        if self._backend is None:
            self._backend = cluster_backend(self.catalog.cluster(cluster))
        return self._backend

    # --- 1. the gate ---------------------------------------------------------------------------

    def gate(self, req: LaunchRequest, run_id: str | None = None) -> GateDecision:
        """Decide; raise LaunchRefused (with the reasons) when the job may not launch."""
        decision = check_gate(
            self.catalog,
            self.ledger_factory,
            req.cluster,
            req.pools,
            req.nodes,
            max_age=timedelta(hours=req.max_validation_age_hours),
            job=req.job_name,
            run_id=run_id,
            refusals=_problems(self.catalog, req),
        )
        for reason in decision.reasons:
            log.info("gate: %s", reason)
        if not decision.launch:
            raise LaunchRefused(
                f"launch of {req.job_name!r} refused; nothing was submitted: "
                + "; ".join(decision.reasons)
            )
        return decision

    # --- 2. submit -----------------------------------------------------------------------------

    def choose_pool(self, req: LaunchRequest) -> PoolRef:
        """The first target pool with enough free nodes: a gang is admitted onto one pool's
        Kueue queue, so the job runs within one pool."""
        backend = self.backend(req.cluster)
        for name in req.pools:
            free = sum(1 for n in backend.list_nodes(name) if n.idle and not n.quarantined)
            if free >= req.nodes:
                return self.catalog.pool(req.cluster, name)
        raise LaunchRefused(
            f"no single target pool has {req.nodes} free nodes (a job is gang-admitted onto "
            "one pool's queue); nothing was submitted"
        )

    def submit(
        self, req: LaunchRequest, run_id: str | None = None, gate_decision_id: int | None = None
    ) -> dict[str, Any]:
        from gpufleet.manifests.render import TrainingJobSpec, render_training_job

        ref = self.choose_pool(req)
        spec = TrainingJobSpec(
            name=req.job_name,
            namespace=req.namespace,
            image=req.image,
            command=req.command,
            nodes=req.nodes,
            gpus_per_node=req.gpus_per_node,
            priority_class=req.priority_class,
            env=req.env,
            run_id=run_id,
        )
        try:
            manifest = render_training_job(ref, spec)
        except ValueError as exc:
            raise GpufleetError(str(exc)) from None
        backend = self.backend(req.cluster)
        backend.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": req.namespace}}
        )
        backend.apply(manifest)
        launch_id = self.ledger_factory().record_launch(
            cluster=req.cluster,
            pool=ref.pool.name,
            namespace=req.namespace,
            job=req.job_name,
            gate_decision_id=gate_decision_id,
            state="submitted",
            expected_transport=ref.pool.transport,
            run_id=run_id,
        )
        log.info(
            "submitted JobSet %s/%s to %s (queue %s, NCCL_NET pinned to the %s network)",
            req.namespace,
            req.job_name,
            ref.key,
            ref.pool.queue_name,
            ref.pool.transport,
        )
        return {
            "launch_id": launch_id,
            "cluster": req.cluster,
            "pool": ref.pool.name,
            "kind": manifest["kind"],
            "name": req.job_name,
            "namespace": req.namespace,
            "expected_transport": ref.pool.transport,
            "gdrdma": ref.pool.gdrdma,
            "policy": req.transport_policy,
            "nodes": req.nodes,
        }

    # --- 3. confirm ----------------------------------------------------------------------------

    def confirm(self, job: dict[str, Any]) -> dict[str, Any]:
        """Read every rank's NCCL log; compare transport and GDRDMA with the pool's."""
        from gpufleet.parsing import classify_nccl_log

        backend = self.backend(job["cluster"])
        pods = sorted(
            backend.list_pods(job["namespace"], workload_selector(job["kind"], job["name"])),
            key=pod_index,
        )
        ranks: dict[str, dict[str, Any]] = {}
        problems: list[str] = []
        if len(pods) < job["nodes"]:
            problems.append(f"{len(pods)} of {job['nodes']} pods exist")
        for pod in pods:
            where = f"node rank {pod_index(pod)} ({pod.node or 'unscheduled'})"
            if pod.phase == "Failed":
                problems.append(f"{where}: pod failed: {pod.message or 'no message'}")
            try:
                text = backend.pod_logs(pod.name, job["namespace"], NCCL_LOG_CONTAINER)
            except GpufleetError as exc:
                problems.append(f"{where}: NCCL log unreadable: {exc}")
                continue
            try:
                info = classify_nccl_log(text.splitlines())
            except ParseError:
                problems.append(f"{where}: the NCCL log is empty (NCCL_DEBUG output missing)")
                continue
            warn = next(
                (
                    ln.split("NCCL WARN", 1)[1].strip()
                    for ln in text.splitlines()
                    if "NCCL WARN" in ln
                ),
                None,
            )
            ranks[str(pod_index(pod))] = {
                "pod": pod.name,
                "node": pod.node,
                "transport": info.transport,
                "gdrdma": info.gdrdma,
                "ranks": info.ranks,
            }
            if info.transport != job["expected_transport"]:
                problems.append(
                    f"{where}: transport {info.transport}"
                    + (f" ({warn})" if warn else "")
                    + f", expected {job['expected_transport']}"
                )
            elif job["gdrdma"] and info.gdrdma is not True:
                problems.append(
                    f"{where}: GPUDirect RDMA "
                    + ("not used" if info.gdrdma is False else "not shown in the log")
                )
        transports = sorted({r["transport"] for r in ranks.values()})
        return {
            "confirmed": not problems,
            "problems": problems,
            "ranks": ranks,
            "transport": transports[0] if len(transports) == 1 else ",".join(transports),
        }

    def settle(self, job: dict[str, Any], result: dict[str, Any]) -> str:
        """Record the outcome; on a mismatch apply the policy. Returns the launch state."""
        ledger = self.ledger_factory()
        if result["confirmed"]:
            ledger.update_launch(
                job["launch_id"],
                state="confirmed",
                confirmed_transport=result["transport"],
                ranks=result["ranks"],
            )
            return "confirmed"
        if job["policy"] == "warn":
            ledger.update_launch(
                job["launch_id"],
                state="running-unconfirmed",
                confirmed_transport=result["transport"],
                ranks=result["ranks"],
                reasons=result["problems"],
            )
            return "running-unconfirmed"
        self.backend(job["cluster"]).delete(job["kind"], job["name"], job["namespace"])
        ledger.update_launch(
            job["launch_id"],
            state="stopped",
            confirmed_transport=result["transport"],
            ranks=result["ranks"],
            reasons=result["problems"],
        )
        ledger.set_pool_state(
            job["cluster"],
            job["pool"],
            "suspect",
            f"job {job['namespace']}/{job['name']}: " + "; ".join(result["problems"][:2]),
        )
        return "stopped"
