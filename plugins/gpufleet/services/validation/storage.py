"""Validate one pool's Lustre filesystem: fio from idle nodes, judged on tier x capacity.

Its state is a ``StorageState`` (``to_dict()`` for the trigger's carry), its result a
``StorageSummary``. A validation that cannot finish raises: the operator records that as an
``error`` verdict."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from gpufleet.backends import cluster_backend
from gpufleet.backends.base import ClusterBackend
from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.verdicts import judge_storage
from gpufleet.domain.workloads import workload_selector
from gpufleet.errors import ParseError
from gpufleet.manifests.labels import VALIDATION_NAMESPACE
from gpufleet.parsing import parse_fio_json
from gpufleet.services.common.collect import Workload, cost_details, gpu_seconds, pod_index
from gpufleet.services.common.snapshots import snapshot_pool
from gpufleet.services.validation.new_nodes import release_new_nodes
from gpufleet.store import Ledger

log = logging.getLogger(__name__)

MAX_CLIENTS = 4  # enough clients to drive a filesystem's tier, few enough to stay polite


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
    def __init__(
        self,
        ref: PoolRef,
        ledger: Ledger,
        backend: ClusterBackend | None = None,
        *,
        namespace: str = VALIDATION_NAMESPACE,
        clients: int = MAX_CLIENTS,
    ):
        self.ref = ref
        self.ledger = ledger
        self.backend = backend or cluster_backend(ref.cluster)
        self.namespace = namespace
        self.clients = clients

    def begin(self, run_id: str) -> StorageState:
        from gpufleet.manifests.storage_validation import render_storage_validation

        fs = self.ref.filesystem
        state = StorageState(
            cluster=self.ref.cluster.name,
            pool=self.ref.pool.name,
            run_id=run_id,
            started_at=datetime.now(UTC).isoformat(),
        )
        if fs is None:
            state.skipped = f"{self.ref.key} has no filesystem in the catalog"
            return state
        idle = [n.name for n in self.backend.list_nodes(self.ref.pool.name) if n.testable]
        if not idle:
            state.skipped = f"{self.ref.key}: no idle node to run fio from"
            return state
        nodes = idle[: self.clients]
        state.pool_nodes = len(idle)
        manifest = render_storage_validation(self.ref, nodes, run_id, namespace=self.namespace)
        self.backend.apply(manifest)
        meta = manifest["metadata"]
        state.workload = Workload(
            kind=manifest["kind"],
            name=meta["name"],
            namespace=meta.get("namespace") or self.namespace,
            nodes=nodes,
        )
        log.info(
            "%s: fio on %d nodes against %s (%s)", self.ref.key, len(nodes), fs.name, fs.mount_path
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
        tolerance = fs.tolerance
        verdict = judge_storage(
            results, expected_mb_s=fs.expected_mb_s, tolerance=tolerance, failure=failure
        )
        self.ledger.record_validation(
            run_id=state.run_id,
            cluster=state.cluster,
            pool=state.pool,
            kind="storage",
            passed=verdict.passed,
            read_mb_s=verdict.read_mb_s,
            write_mb_s=verdict.write_mb_s,
            expected_mb_s=verdict.expected_mb_s,
            nodes_tested=len(results),
            reasons=list(verdict.reasons),
            details={
                "filesystem": fs.name,
                "floor_mb_s": verdict.floor_mb_s,
                "tier_mbps_per_tib": fs.throughput_mbps_per_tib,
                "capacity_tib": fs.capacity_tib,
                # fio pods request no GPU; their nodes' GPUs are counted all the same (an upper
                # bound: a job could share a node while fio runs), like the fabric's pairs
                **cost_details(
                    gpu_seconds(pods, self.ref.pool.gpu.count),
                    state.pool_nodes or len({p.node for p in pods if p.node}),
                ),
            },
            started_at=datetime.fromisoformat(state.started_at),
        )
        release_new_nodes(self.ref, self.ledger, state.run_id, self.backend)  # when the last check
        snapshot_pool(self.ref, self.ledger, self.backend, source="storage", run_id=state.run_id)
        log.info(
            "%s storage: %s - %s",
            self.ref.key,
            "PASS" if verdict.passed else "FAIL",
            "; ".join(verdict.reasons),
        )
        return StorageSummary(
            state.cluster,
            state.pool,
            passed=verdict.passed,
            reasons=list(verdict.reasons),
            filesystem=fs.name,
            read_mb_s=verdict.read_mb_s,
            write_mb_s=verdict.write_mb_s,
            expected_mb_s=verdict.expected_mb_s,
        )
