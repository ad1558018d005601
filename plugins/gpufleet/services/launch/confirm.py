"""Step 3 of a launch: once the job runs, read every rank's NCCL INFO log and check the
transport and GPUDirect RDMA against the pool's (``confirm``), then record the outcome and apply
the policy (``settle``): ``fail`` stops the job and marks the pool ``suspect``, ``warn`` alerts
and lets it run; the nodes of ranks on the wrong transport become suspects either way.
Each rank's record says where it ran: its node and the node's block and sub-block (from its
topology labels, ``domain.topology.place_of``; None on a node without them), so that a slow job
can be traced to its racks. ``TrainingLaunch`` (``gpufleet.services.launch.submit``) carries
these steps."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from gpufleet.domain.plumbing import NCCL_LOG_CONTAINER
from gpufleet.domain.topology import Place, place_of
from gpufleet.domain.workloads import workload_selector
from gpufleet.errors import GpufleetError, ParseError
from gpufleet.services.common.collect import pod_index

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpufleet.backends import ClusterBackend
    from gpufleet.domain.fleet import Catalog
    from gpufleet.services.launch.submitted import SubmittedJob
    from gpufleet.store import Ledger


@dataclass(frozen=True)
class RankTransport:
    """What one node rank's NCCL log says about the transport it runs on, and where it ran
    (its node's block and sub-block; None when the node carries no topology labels)."""

    pod: str
    node: str | None
    transport: str
    gdrdma: bool | None
    ranks: int | None
    block: str | None = None
    subblock: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TransportCheck:
    """Every rank's transport against the pool's; confirmed when nothing is wrong."""

    problems: list[str]
    ranks: dict[str, RankTransport]  # node rank (as text: JSON keys) -> what its log says

    @property
    def confirmed(self) -> bool:
        return not self.problems

    @property
    def transport(self) -> str:
        """The transport every rank uses, or the distinct ones joined with ','."""
        return ",".join(sorted({r.transport for r in self.ranks.values()}))

    def ranks_dict(self) -> dict[str, dict[str, Any]]:
        return {rank: info.to_dict() for rank, info in self.ranks.items()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "confirmed": self.confirmed,
            "problems": list(self.problems),
            "transport": self.transport,
            "ranks": self.ranks_dict(),
        }


class LaunchConfirmation:
    """The confirm and settle steps, over a launch's ``catalog``, ``ledger_factory`` and
    ``backend(cluster)`` (given by ``TrainingLaunch``)."""

    catalog: Catalog
    ledger_factory: Callable[[], Ledger]

    def backend(self, cluster: str) -> ClusterBackend:
        raise NotImplementedError

    def confirm(self, job: SubmittedJob) -> TransportCheck:
        """Read every rank's NCCL log; compare transport and GDRDMA with the pool's."""
        from gpufleet.parsing import classify_nccl_log

        backend = self.backend(job.cluster)
        pods = sorted(
            backend.list_pods(job.namespace, workload_selector(job.kind, job.name)), key=pod_index
        )
        places: dict[str, Place | None] = {
            n.name: place_of(n.labels) for n in backend.list_nodes(job.pool)
        }
        ranks: dict[str, RankTransport] = {}
        problems: list[str] = []
        if len(pods) < job.nodes:
            problems.append(f"{len(pods)} of {job.nodes} pods exist")
        for pod in pods:
            where = f"node rank {pod_index(pod)} ({pod.node or 'unscheduled'})"
            if pod.phase == "Failed":
                problems.append(f"{where}: pod failed: {pod.message or 'no message'}")
            try:
                text = backend.pod_logs(pod.name, job.namespace, NCCL_LOG_CONTAINER)
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
            problems += [f"{where}: the NCCL log cannot be trusted: {p}" for p in info.problems]
            place = places.get(pod.node) if pod.node else None
            ranks[str(pod_index(pod))] = RankTransport(
                pod=pod.name,
                node=pod.node,
                transport=info.transport,
                gdrdma=info.gdrdma,
                ranks=info.ranks,
                block=place.block if place else None,
                subblock=place.subblock if place else None,
            )
            if info.transport != job.expected_transport:
                problems.append(
                    f"{where}: transport {info.transport}"
                    + (f" ({warn})" if warn else "")
                    + f", expected {job.expected_transport}"
                )
            elif job.gdrdma and info.gdrdma is not True:
                problems.append(
                    f"{where}: GPUDirect RDMA "
                    + ("not used" if info.gdrdma is False else "not shown in the log")
                )
        return TransportCheck(problems=problems, ranks=ranks)

    def settle(self, job: SubmittedJob, check: TransportCheck) -> str:
        """Record the outcome; on a mismatch apply the policy. Returns the launch state.
        The nodes of ranks on the wrong transport become suspects either way: the next
        nightly retests them first, against known-good partners."""
        ledger = self.ledger_factory()
        seen = {"confirmed_transport": check.transport, "ranks": check.ranks_dict()}
        if check.confirmed:
            ledger.update_launch(job.launch_id, state="confirmed", **seen)
            return "confirmed"
        self._suspect_nodes(job, check, ledger)
        if job.policy == "warn":
            state = "running-unconfirmed"
            ledger.update_launch(job.launch_id, state=state, reasons=check.problems, **seen)
            return state
        self.backend(job.cluster).delete(job.kind, job.name, job.namespace)
        ledger.update_launch(job.launch_id, state="stopped", reasons=check.problems, **seen)
        ledger.set_pool_state(
            job.cluster,
            job.pool,
            "suspect",
            f"job {job.namespace}/{job.name}: " + "; ".join(check.problems[:2]),
        )
        return "stopped"

    def _suspect_nodes(self, job: SubmittedJob, check: TransportCheck, ledger) -> None:
        from gpufleet.services.nodes.lifecycle import NodeLifecycle

        wrong = sorted(
            {
                r.node
                for r in check.ranks.values()
                if r.node and r.transport != job.expected_transport
            }
        )
        if not wrong:
            return
        lifecycle = NodeLifecycle(
            self.catalog.pool(job.cluster, job.pool), ledger, self.backend(job.cluster)
        )
        for node in wrong:
            lifecycle.suspect(
                node,
                f"job {job.namespace}/{job.name} ran on it over the wrong transport",
                {"launch_id": job.launch_id, "transport": check.transport},
                run_id=None,
            )
