"""New nodes come up tainted ``gpufleet.io/validation-pending`` (onboarding, transition, a repaired
node): the taint comes off only when the pool's whole verdict in one run passed — its fabric
check and, when the pool has a filesystem, its storage check — and only from the nodes that
passed the fabric check. While any check of that run fails or has not finished, every new node
stays tainted: the region is not ready and the gate refuses the pool."""

from __future__ import annotations

import logging

from gpufleet.backends.base import ClusterBackend
from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.signals import newer_bad_signals
from gpufleet.domain.validation_kinds import ValidationKind
from gpufleet.domain.workloads import PENDING_KEYS
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
    fabric, storage = ValidationKind.FABRIC, ValidationKind.STORAGE
    needed = (fabric, storage) if ref.filesystem else (fabric,)
    if any((latest.get(kind) or {}).get("verdict") != "pass" for kind in needed):
        return []
    passed = set((latest[fabric].get("details") or {}).get("passed_nodes") or [])
    new = [n.name for n in backend.list_nodes(ref.pool.name) if n.unvalidated and n.name in passed]
    # a new node with a bad signal newer than the check (the event path's) stays pending
    bad = ledger.newest_bad_signals(ref.cluster.name, new, pool=ref.pool.name) if new else {}
    held = newer_bad_signals(latest[fabric].get("started_at"), bad)
    released = [n for n in new if n not in held]
    for node, why in held.items():
        log.warning("%s: %s passed but stays pending: %s", ref.key, node, why)
    for node in released:
        for key in PENDING_KEYS:  # the old name too, on a node tainted before the rename
            backend.remove_taint(node, key)
    if released:
        log.info(
            "%s: %d new node(s) passed validation: %s", ref.key, len(released), ", ".join(released)
        )
    return released
