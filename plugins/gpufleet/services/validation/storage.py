"""Validate one pool's Lustre filesystem: fio from idle nodes, judged on tier x capacity.

Pools share a filesystem, so its **full test** (``SATURATING_CLIENTS`` clients writing then
reading 16 GiB each, judged on the whole tier) runs once per filesystem per night: the first
pool's validation that finds no full test of it in the last ``full_test_hours`` (20 h: a night;
a day more per further night of its ``full_test_every_nights``) and takes its
lock (``full_test.claim_full_test``: the validation lock table, pool = the filesystem, kind
``filesystem``) runs it. Every other pool on it runs a **pool check**: ``POOL_CHECK_CLIENTS`` of
its own nodes write and read ``POOL_CHECK_GIB`` each, held to their clients' share of the tier,
so a pool whose clients or route to the filesystem are broken still fails.

Its state is a ``StorageState`` (``to_dict()`` for the trigger's carry), its result a
``StorageSummary``. A validation that cannot finish raises: the operator records that as an
``error`` verdict."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from gpufleet.backends import cluster_backend
from gpufleet.backends.base import ClusterBackend
from gpufleet.domain.fleet import SATURATING_CLIENTS, PoolRef
from gpufleet.domain.stages import Stage
from gpufleet.domain.validation_kinds import ValidationKind
from gpufleet.domain.verdicts import judge_storage
from gpufleet.domain.workloads import workload_selector
from gpufleet.errors import ParseError
from gpufleet.manifests.labels import VALIDATION_NAMESPACE
from gpufleet.parsing import parse_fio_json
from gpufleet.services.common.collect import (
    Workload,
    cost_details,
    gpu_seconds,
    image_pulls,
    pod_index,
    stage_details,
    stage_seconds,
)
from gpufleet.services.common.snapshots import snapshot_pool
from gpufleet.services.validation.full_test import FULL, POOL, release_full_test
from gpufleet.services.validation.new_nodes import release_new_nodes
from gpufleet.store import Ledger

log = logging.getLogger(__name__)

MAX_CLIENTS = SATURATING_CLIENTS  # the full test: enough clients to drive the tier
FULL_GIB = 16  # per client, the full test
POOL_CHECK_CLIENTS = 2  # a pool's own check: its nodes mount the filesystem and reach it
POOL_CHECK_GIB = 1
POOL_CHECK_RUNTIME_S = 60


@dataclass
class StorageState:
    """A storage validation in flight. ``skipped``: why nothing was submitted."""

    cluster: str
    pool: str
    run_id: str
    started_at: str  # ISO 8601, UTC
    workload: Workload | None = None
    skipped: str | None = None
    pool_nodes: int = 0  # the pool's nodes tonight's validations cover (what cost is per)
    scope: str = FULL  # FULL: the filesystem's full test; POOL: this pool's own check
    full_test: str | None = None  # POOL: why not the full test (who ran or runs it)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (a trigger's ``carry``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StorageState:
        return cls(**{**data, "workload": Workload.from_dict(data.get("workload"))})


@dataclass
class StorageSummary:
    """One pool's storage result (``skipped``: nothing was measured, see ``reasons``)."""

    cluster: str
    pool: str
    passed: bool
    reasons: list[str]
    skipped: bool = False
    filesystem: str | None = None
    read_mb_s: float | None = None
    write_mb_s: float | None = None
    expected_mb_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (an XCom)."""
        return asdict(self)


class StorageValidation:
    """``claim``: called with the run id when a validation begins; None when this run is to
    run the filesystem's full test, else why not (``claim_full_test``). Without one, every
    validation runs the full test."""

    def __init__(
        self,
        ref: PoolRef,
        ledger: Ledger,
        backend: ClusterBackend | None = None,
        *,
        namespace: str = VALIDATION_NAMESPACE,
        clients: int = MAX_CLIENTS,
        claim: Callable[[str], str | None] | None = None,
        pool_check_in_fabric: bool = False,
    ):
        """``pool_check_in_fabric``: this run's fabric validation of the pool runs its pool check
        in its pairs' pods (``steps``), so when the full test is not this pool's tonight, nothing
        is submitted here (no second wait for the pool)."""
        self.ref = ref
        self.ledger = ledger
        self.backend = backend or cluster_backend(ref.cluster)
        self.namespace = namespace
        self.clients = clients
        self.claim = claim
        self.pool_check_in_fabric = pool_check_in_fabric

    def begin(self, run_id: str) -> StorageState:
        from gpufleet.manifests.storage_validation import render_storage_validation

        fs = self.ref.filesystem
        state = StorageState(
            cluster=self.ref.cluster.name,
            pool=self.ref.pool.name,
            run_id=run_id,
            started_at=self.ledger.clock.now().isoformat(),
        )
        if fs is None:
            state.skipped = f"{self.ref.key} has no filesystem in the catalog"
            return state
        idle = [n.name for n in self.backend.list_nodes(self.ref.pool.name) if n.testable]
        if not idle:
            state.skipped = f"{self.ref.key}: no idle node to run fio from"
            return state
        state.full_test = self.claim(run_id) if self.claim else None
        state.scope = FULL if state.full_test is None else POOL
        if state.scope == POOL and self.pool_check_in_fabric:
            state.skipped = (
                f"{self.ref.key}: its own clients are checked in its fabric validation's pods "
                f"({state.full_test})"
            )
            return state
        clients, gib, runtime = (
            (self.clients, FULL_GIB, None)
            if state.scope == FULL
            else (min(self.clients, POOL_CHECK_CLIENTS), POOL_CHECK_GIB, POOL_CHECK_RUNTIME_S)
        )
        nodes = idle[:clients]
        state.pool_nodes = len(idle)
        manifest = render_storage_validation(
            self.ref,
            nodes,
            run_id,
            namespace=self.namespace,
            size_gib_per_node=gib,
            runtime_seconds=runtime,
        )
        self.backend.apply(manifest)
        meta = manifest["metadata"]
        state.workload = Workload(
            kind=manifest["kind"],
            name=meta["name"],
            namespace=meta.get("namespace") or self.namespace,
            nodes=nodes,
        )
        log.info(
            "%s: %s: fio on %d nodes against %s (%s)%s",
            self.ref.key,
            "the filesystem's full test" if state.scope == FULL else "the pool's own check",
            len(nodes),
            fs.name,
            fs.mount_path,
            f" ({state.full_test})" if state.full_test else "",
        )
        return state

    def finish(self, state: StorageState) -> StorageSummary:
        fs = self.ref.filesystem
        wl = state.workload
        if state.skipped or wl is None or fs is None:
            return StorageSummary(
                state.cluster,
                state.pool,
                passed=True,
                skipped=True,
                reasons=[state.skipped or f"{self.ref.key}: nothing was submitted"],
            )
        pods = sorted(
            self.backend.list_pods(wl.namespace, workload_selector(wl.kind, wl.name)),
            key=pod_index,
        )
        results, failure = [], None
        for pod in pods:
            if pod.phase != "Succeeded":
                failure = failure or f"fio pod {pod.name} {pod.phase}: {pod.message or ''}".strip()
                continue
            try:
                results.append(parse_fio_json(self.backend.pod_logs(pod.name, wl.namespace)))
            except ParseError as exc:
                failure = failure or f"fio pod {pod.name}: {exc}"
        self.backend.delete(wl.kind, wl.name, wl.namespace)
        gpus = self.ref.pool.gpu.count
        summary = record_storage(
            self.ledger,
            self.ref,
            run_id=state.run_id,
            started_at=datetime.fromisoformat(state.started_at),
            scope=state.scope,
            results=results,
            failure=failure,
            clients=len(pods),
            gpu_s=gpu_seconds(pods, gpus),
            cost_nodes=state.pool_nodes or len({p.node for p in pods if p.node}),
            stages=_client_stages(self.backend, pods, gpus, wl.namespace),
            full_test=state.full_test,
        )
        if state.scope == FULL:
            release_full_test(self.ledger, self.ref, state.run_id)
        release_new_nodes(self.ref, self.ledger, state.run_id, self.backend)  # when the last check
        snapshot_pool(self.ref, self.ledger, self.backend, source="storage", run_id=state.run_id)
        return summary


def record_storage(  # noqa: PLR0913  one storage verdict's facts, by keyword
    ledger: Ledger,
    ref: PoolRef,
    *,
    run_id: str,
    started_at: datetime,
    scope: str,
    results: list[Any],
    failure: str | None,
    clients: int,
    gpu_s: float,
    cost_nodes: int,
    stages: dict[str, Any],
    full_test: str | None = None,
) -> StorageSummary:
    """Judge fio's ``results`` from ``clients`` clients (``failure``: what stopped one, in
    words) against ``ref``'s filesystem and record the pool's ledger row of kind ``storage``
    (``scope``: the full test or the pool's check; ``full_test``: why not the full test, said
    in its reasons), with its cost (``gpu_s`` over ``cost_nodes``) and ``stages``. The storage
    validation's own pods and the fabric pairs' fio step (``steps``) both end here."""
    fs = ref.filesystem
    assert fs is not None, f"{ref.key} mounts no filesystem"  # only a pool that mounts one
    verdict = judge_storage(
        results,
        expected_mb_s=fs.expected_mb_s,
        tolerance=fs.tolerance,
        failure=failure,
        clients=(max(1, min(clients, SATURATING_CLIENTS)), SATURATING_CLIENTS),
    )
    reasons = list(verdict.reasons)
    if full_test:
        reasons.append(full_test)
    ledger.record_validation(
        run_id=run_id,
        cluster=ref.cluster.name,
        pool=ref.pool.name,
        kind=ValidationKind.STORAGE,
        passed=verdict.passed,
        read_mb_s=verdict.read_mb_s,
        write_mb_s=verdict.write_mb_s,
        expected_mb_s=verdict.expected_mb_s,
        nodes_tested=len(results),
        reasons=reasons,
        details={
            "filesystem": fs.name,
            "scope": scope,
            "clients": clients,
            "tier_expected_mb_s": fs.expected_mb_s,
            "floor_mb_s": verdict.floor_mb_s,
            "tier_mbps_per_tib": fs.throughput_mbps_per_tib,
            "capacity_tib": fs.capacity_tib,
            # fio pods request no GPU; their nodes' GPUs are counted all the same (an upper
            # bound: a job could share a node while fio runs), like the fabric's pairs
            **cost_details(gpu_s, cost_nodes),
            "stages": stages,
        },
        started_at=started_at,
    )
    log.info(
        "%s storage: %s - %s",
        ref.key,
        "PASS" if verdict.passed else "FAIL",
        "; ".join(verdict.reasons),
    )
    return StorageSummary(
        ref.cluster.name,
        ref.pool.name,
        passed=verdict.passed,
        reasons=reasons,
        filesystem=fs.name,
        read_mb_s=verdict.read_mb_s,
        write_mb_s=verdict.write_mb_s,
        expected_mb_s=verdict.expected_mb_s,
    )


def _client_stages(backend: ClusterBackend, pods: list, gpus: int, namespace: str) -> dict:
    """The fio clients' ``details.stages`` (``domain.stages``; their work is ``io``)."""
    pulls = image_pulls(backend, namespace)
    per_node = {
        p.node: stage_seconds(p, Stage.IO, None, pulls) for p in pods if p.node and p.finished
    }
    return stage_details(per_node.values(), gpus, nodes=per_node)
