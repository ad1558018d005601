"""Validate one pool's Lustre filesystem: fio from idle nodes, judged on tier x capacity."""

from __future__ import annotations

import logging
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
from gpufleet.services.collect import pod_index
from gpufleet.store import Ledger

log = logging.getLogger(__name__)

MAX_CLIENTS = 4  # enough clients to drive a filesystem's tier, few enough to stay polite


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

    def begin(self, run_id: str) -> dict[str, Any]:
        from gpufleet.manifests.storage_validation import render_storage_validation

        fs = self.ref.filesystem
        state: dict[str, Any] = {
            "cluster": self.ref.cluster.name,
            "pool": self.ref.pool.name,
            "run_id": run_id,
            "workload": None,
            "started_at": datetime.now(UTC).isoformat(),
        }
        if fs is None:
            state["skipped"] = f"{self.ref.key} has no filesystem in the catalog"
            return state
        idle = [n.name for n in self.backend.list_nodes(self.ref.pool.name) if n.free]
        if not idle:
            state["skipped"] = f"{self.ref.key}: no idle node to run fio from"
            return state
        nodes = idle[: self.clients]
        manifest = render_storage_validation(self.ref, nodes, run_id, namespace=self.namespace)
        self.backend.apply(manifest)
        meta = manifest["metadata"]
        state["workload"] = {
            "kind": manifest["kind"],
            "name": meta["name"],
            "namespace": meta.get("namespace") or self.namespace,
            "nodes": nodes,
        }
        log.info(
            "%s: fio on %d nodes against %s (%s)", self.ref.key, len(nodes), fs.name, fs.mount_path
        )
        return state

    def finish(self, state: dict[str, Any]) -> dict[str, Any]:
        fs = self.ref.filesystem
        if state.get("skipped"):
            return {
                "cluster": state["cluster"],
                "pool": state["pool"],
                "passed": True,
                "skipped": True,
                "reasons": [state["skipped"]],
            }
        wl = state["workload"]
        pods = sorted(
            self.backend.list_pods(wl["namespace"], workload_selector(wl["kind"], wl["name"])),
            key=pod_index,
        )
        results, failure = [], None
        for pod in pods:
            if pod.phase != "Succeeded":
                failure = failure or f"fio pod {pod.name} {pod.phase}: {pod.message or ''}".strip()
                continue
            try:
                results.append(parse_fio_json(self.backend.pod_logs(pod.name, wl["namespace"])))
            except ParseError as exc:
                failure = failure or f"fio pod {pod.name}: {exc}"
        self.backend.delete(wl["kind"], wl["name"], wl["namespace"])
        tolerance = fs.tolerance
        verdict = judge_storage(
            results, expected_mb_s=fs.expected_mb_s, tolerance=tolerance, failure=failure
        )
        self.ledger.record_validation(
            run_id=state["run_id"],
            cluster=state["cluster"],
            pool=state["pool"],
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
            },
            started_at=datetime.fromisoformat(state["started_at"]),
        )
        log.info(
            "%s storage: %s - %s",
            self.ref.key,
            "PASS" if verdict.passed else "FAIL",
            "; ".join(verdict.reasons),
        )
        return {
            "cluster": state["cluster"],
            "pool": state["pool"],
            "passed": verdict.passed,
            "filesystem": fs.name,
            "read_mb_s": verdict.read_mb_s,
            "write_mb_s": verdict.write_mb_s,
            "expected_mb_s": verdict.expected_mb_s,
            "reasons": list(verdict.reasons),
        }
