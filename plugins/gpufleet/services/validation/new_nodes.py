"""New nodes come up tainted ``gpufleet.io/unvalidated`` (onboarding, transition, a repaired
node): the taint comes off only when the pool's whole verdict in one run passed — its fabric
check and, when the pool has a filesystem, its storage check — and only from the nodes that
passed the fabric check. While any check of that run fails or has not finished, every new node
stays tainted: the region is not ready and the gate refuses the pool."""

from __future__ import annotations

import logging

from gpufleet.backends.base import ClusterBackend
from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.workloads import UNVALIDATED_KEY
from gpufleet.store import Ledger

log = logging.getLogger(__name__)


def release_new_nodes(
    ref: PoolRef, ledger: Ledger, run_id: str, backend: ClusterBackend
) -> list[str]:
    """Remove the ``unvalidated`` taint from the new nodes that passed run ``run_id``'s fabric
    check, once every check of the pool in that run passed (fabric, and storage when the pool
    has a filesystem). While any of them fails or has not finished, every new node stays
    tainted. Each check calls this as it finishes, so the last one releases. Returns the nodes
    released."""
    from gpufleet.domain.verdicts import latest_per_check

    where = (ref.cluster.name, ref.pool.name)
    latest = {
        v["kind"]: v
        for v in latest_per_check(ledger.validations_for_run(run_id))
        if (v["cluster"], v["pool"]) == where
    }
    needed = ("fabric", "storage") if ref.filesystem else ("fabric",)
    if any((latest.get(kind) or {}).get("verdict") != "pass" for kind in needed):
        return []
    passed = set((latest["fabric"].get("details") or {}).get("passed_nodes") or [])
    released = [
        n.name for n in backend.list_nodes(ref.pool.name) if n.unvalidated and n.name in passed
    ]
    for node in released:
        backend.remove_taint(node, UNVALIDATED_KEY)
    if released:
        log.info(
            "%s: %d new node(s) passed validation: %s", ref.key, len(released), ", ".join(released)
        )
    return released
