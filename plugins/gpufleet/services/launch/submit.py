"""Launch a training job onto proven capacity, then confirm every rank's transport.

1. ``gate``: check the request (``gpufleet.services.launch.request``) and run the fail-closed
   launch gate (``gpufleet.domain.gate``); the decision is recorded in the ledger.
2. ``submit``: render the JobSet (Kueue gang label, pinned to the pool, RDMA + Lustre + NCCL
   plumbing injected, ``NCCL_NET`` pinned, on a pool with a topology one sub-block or one
   block asked for by the job's size) and apply it; record the launch, linked to its gate
   decision. A retried submit converges: one JobSet, one launch row (see ``submit``).
3. ``confirm``: once the job runs, read every rank's NCCL INFO log and check the transport
   and GPUDirect RDMA. On a mismatch, policy ``fail`` stops the job and marks the pool
   ``suspect`` (the next nightly run re-validates it); ``warn`` alerts and lets it run.

What travels between the steps is typed: ``RecordedDecision`` (gate), ``SubmittedJob``
(submit), ``TransportCheck`` (confirm); each has a ``to_dict`` for XCom.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from gpufleet.backends import ClusterBackend, cluster_backend
from gpufleet.domain.fleet import Catalog, PoolRef
from gpufleet.domain.validation_kinds import ValidationKind
from gpufleet.errors import GpufleetError
from gpufleet.services.launch.confirm import LaunchConfirmation
from gpufleet.services.launch.gate import RecordedDecision, check_gate
from gpufleet.services.launch.request import InvalidLaunchRequest, LaunchRequest
from gpufleet.services.launch.submitted import SubmittedJob

log = logging.getLogger(__name__)

# launch states in the ledger: submitting -> submitted -> confirmed | running-unconfirmed |
# stopped; refused when the job name belongs to another run's JobSet
RESUMABLE = ("submitting", "submitted")


class LaunchRefused(GpufleetError):
    """The launch may not go ahead (the gate refused, or it may not be resubmitted); nothing
    was submitted. Retrying will not change that."""


def unhealthy_free_nodes(ledger, ref: PoolRef, free: set[str]) -> dict[str, str]:
    """The ``free`` nodes of ``ref``'s pool its latest GPU health check failed, each with
    NVIDIA's action (``domain.gate.unhealthy_in_service`` over the listed nodes); none when the
    pool was never checked. An unreadable health row refuses (the gate refused it too)."""
    from gpufleet.domain.gate import FactError, PoolFacts, read_health, unhealthy_in_service

    row = ledger.latest_validation(ref.cluster.name, ref.pool.name, ValidationKind.HEALTH)
    try:
        health = read_health(row, f"{ref.key} health")
    except FactError as exc:
        raise LaunchRefused(f"{ref.key}: the latest GPU health row is unreadable: {exc}") from None
    facts = PoolFacts(key=ref.key, known=True, free_nodes=frozenset(free), health=health)
    return unhealthy_in_service(facts)


class TrainingLaunch(LaunchConfirmation):
    def __init__(self, catalog: Catalog, ledger_factory, backend: ClusterBackend | None = None):
        self.catalog = catalog
        self.ledger_factory = ledger_factory
        self._backend = backend

    def backend(self, cluster: str) -> ClusterBackend:
        if self._backend is None:
            self._backend = cluster_backend(self.catalog.cluster(cluster))
        return self._backend

    def request(self, params: Any) -> LaunchRequest:
        """The parsed request, or InvalidLaunchRequest naming every problem."""
        return LaunchRequest.from_params(params, self.catalog)

    # --- 1. the gate ---------------------------------------------------------------------------

    def gate(self, params: Any, run_id: str | None = None) -> RecordedDecision:
        """Check the request, then decide; raise LaunchRefused (with the reasons) when the job
        may not launch. A bad request (``request_problems``: its fields, the catalog's
        namespaces, pools and priority classes, the platform's env names) raises
        InvalidLaunchRequest naming every problem before the gate decides: the ledger is not
        opened, nothing is recorded or submitted, and the request can be fixed and sent again."""
        req = self.request(params)
        decision = check_gate(
            self.catalog,
            self.ledger_factory,
            req.cluster,
            req.pools,
            req.nodes,
            max_age=timedelta(hours=req.max_validation_age_hours),
            job=req.job_name,
            run_id=run_id,
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

    def choose_pool(self, req: LaunchRequest, decision: Mapping[str, Any]) -> PoolRef:
        """The pool the gate decided onto (its recorded decision), never one chosen again: a
        gang is admitted onto one pool's Kueue queue, so the job runs within that pool. Refuses
        when the decision names no target pool, or that pool no longer has the free nodes."""
        name = decision.get("pool")
        if not isinstance(name, str) or name not in req.pools:
            raise LaunchRefused(
                f"gate decision {decision.get('id')} chose no target pool of this request "
                f"({name!r}); nothing was submitted"
            )
        free = sum(1 for n in self.backend(req.cluster).list_nodes(name) if n.free)
        if free < req.nodes:
            raise LaunchRefused(
                f"{req.cluster}/{name}, the pool the gate chose, now has {free} free nodes of "
                f"the {req.nodes} the job needs; nothing was submitted"
            )
        return self.catalog.pool(req.cluster, name)

    def _check_decision(
        self, ledger, decision_id: int | None, req: LaunchRequest, run_id: str
    ) -> dict[str, Any]:
        """Fail closed: submit only under this run's recorded decision to launch this job
        (returned: it names the pool)."""
        row = ledger.gate_decision(decision_id) if decision_id is not None else None
        if (
            row is None
            or row["launch"] is not True
            or (row["cluster"], row["job"], row["run_id"]) != (req.cluster, req.job_name, run_id)
        ):
            raise LaunchRefused(
                f"no gate decision to launch {req.job_name!r} in run {run_id} (decision "
                f"{decision_id}): a job is submitted only after the gate let it through"
            )
        return row

    def _render(self, ref: PoolRef, req: LaunchRequest, run_id: str, ledger) -> dict[str, Any]:
        """The JobSet; on a pool with a topology it asks Kueue for one sub-block or one block
        by the job's size, against the places of the pool's free nodes (their labels). It keeps
        off the free nodes the pool's latest GPU health check failed and left in service (the
        gate did not count them; Kueue and the scheduler would place on them)."""
        from gpufleet.domain.topology import place_of
        from gpufleet.manifests.training import (
            TrainingJobSpec,
            render_training_job,
            training_topology,
        )

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
        listed = [n for n in self.backend(req.cluster).list_nodes(ref.pool.name) if n.free]
        avoid = unhealthy_free_nodes(ledger, ref, {n.name for n in listed})
        if avoid:
            log.warning(
                "%s keeps off %s: their latest GPU health check failed and they are still in "
                "service (%s)",
                req.job_name,
                ", ".join(avoid),
                ", ".join(f"{n}: {a}" for n, a in avoid.items()),
            )
        free = [place_of(n.labels) for n in listed if n.name not in avoid]
        try:
            manifest = render_training_job(ref, spec, free, avoid=avoid)
        except ValueError as exc:  # the renderer lists every problem with the job
            raise InvalidLaunchRequest([str(exc)], req.job_name, message=str(exc)) from None
        ask = training_topology(ref, req.nodes, free)
        if ask is not None:
            log.info(
                "%s asks Kueue for %s=%s: %s", req.job_name, ask.annotation, ask.level, ask.reason
            )
        return manifest

    def submit(self, req: LaunchRequest, run_id: str, gate_decision_id: int | None) -> SubmittedJob:
        """Render and apply the JobSet and record the launch, linked to its gate decision.

        Converges when retried, as the providers' operators reattach to what a previous try
        created: the launch is keyed by (cluster, namespace, job, run). A retry finds the row
        its first attempt recorded and resubmits onto the pool recorded there, never a pool
        chosen again; the JobSet is applied create-if-absent, so the first attempt's JobSet is
        found, not duplicated. The row is recorded (``submitting``) before the JobSet is
        applied; the JobSet the cluster holds under that name is ours only if it carries this
        run's id (the ``gpufleet.io/run-id`` annotation): another launch's JobSet is refused
        (the launch row says ``refused``, and why), never adopted."""
        ledger = self.ledger_factory()
        decision = self._check_decision(ledger, gate_decision_id, req, run_id)
        key = {
            "cluster": req.cluster,
            "namespace": req.namespace,
            "job": req.job_name,
            "run_id": run_id,
        }
        backend = self.backend(req.cluster)
        prior = ledger.find_launch(**key)
        if prior is None:
            ref = self.choose_pool(req, decision)
        elif prior["state"] in RESUMABLE:
            ref = self.catalog.pool(req.cluster, prior["pool"])
            log.info("retry: launch %s was recorded on %s; reattaching", prior["id"], ref.key)
        else:
            raise LaunchRefused(
                f"{req.namespace}/{req.job_name} of run {run_id} is already {prior['state']}: "
                "a launch is submitted once per run; trigger a new run to launch again"
            )
        manifest = self._render(ref, req, run_id, ledger)
        kind = manifest["kind"]
        row, _ = ledger.ensure_launch(
            **key,
            pool=ref.pool.name,
            state="submitting",
            gate_decision_id=gate_decision_id,
            expected_transport=ref.pool.transport,
        )
        backend.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": req.namespace}}
        )
        stored = backend.apply(manifest)  # create-if-absent: returns what the cluster holds
        if self._run_of(stored) != run_id:  # not ours: another launch created it
            ledger.update_launch(row["id"], state="refused", reasons=[self._taken(kind, req)])
            raise LaunchRefused(self._taken(kind, req))
        if row["state"] == "submitting":
            ledger.update_launch(row["id"], state="submitted")
        log.info(
            "submitted %s %s/%s to %s (queue %s, NCCL_NET pinned to the %s network)",
            kind,
            req.namespace,
            req.job_name,
            ref.key,
            ref.pool.queue_name,
            ref.pool.transport,
        )
        return SubmittedJob(
            launch_id=row["id"],
            cluster=req.cluster,
            pool=ref.pool.name,
            kind=kind,
            name=req.job_name,
            namespace=req.namespace,
            expected_transport=ref.pool.transport,
            gdrdma=ref.pool.gdrdma,
            policy=req.transport_policy,
            nodes=req.nodes,
        )

    @staticmethod
    def _run_of(obj: Mapping[str, Any]) -> str | None:
        from gpufleet.manifests.labels import RUN_ID_ANNOTATION

        return ((obj.get("metadata") or {}).get("annotations") or {}).get(RUN_ID_ANNOTATION)

    @staticmethod
    def _taken(kind: str, req: LaunchRequest) -> str:
        return (
            f"a {kind} named {req.namespace}/{req.job_name} already exists and another launch "
            "created it; nothing was submitted: choose another job_name"
        )
