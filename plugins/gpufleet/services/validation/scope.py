"""The nightly's scope: which pools tonight validates, as the fabric and storage tasks' mapping
kwargs. Faults for one run (the ``sim_fault_drill`` DAG's ``sim_faults`` Param) are
``gpufleet.services.validation.run_faults``'s: checked against this scope, injected by the run's
setup task and cleared by its teardown. The report the nightly writes after the per-pool work is
a view (``gpufleet.services.views.nightly_report``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from gpufleet.domain.fleet import Catalog, PoolRef
from gpufleet.errors import GpufleetError

MODES = ("both", "fabric", "storage")


def plan_scope(  # noqa: PLR0913  the scope's names, by keyword
    catalog: Catalog,
    *,
    regions: list[str] | None = None,
    clusters: list[str] | None = None,
    pools: list[str] | None = None,
    mode: str = "both",
    in_service: Collection[tuple[str, str]] = (),
    leave_out: Collection[tuple[str, str]] = (),
    night: int = 0,
) -> dict[str, list[dict[str, Any]]]:
    """The pools to validate, as mapping kwargs for the fabric and storage tasks. A ``planned``
    pool is left out unless ``in_service`` names it (a finished transition created it);
    ``leave_out`` names (cluster, pool) pairs not validated tonight (a cluster not created yet,
    a retired pool).

    With ``mode`` ``both``, a pool with a filesystem has its storage pool check run in its
    fabric validation's pass-1 pods (one wait for both: ``pool_check`` to the fabric task), and
    the storage task is mapped once per filesystem, not per pool: its host pool's
    (``full_test_hosts``), with ``pool_check_in_fabric``, to run the filesystem's full test when
    it is due. Every pool's fabric task is told the host (``full_test_host``): only the host's
    may take the full test; the others check their own clients. With ``mode`` ``storage``, each
    pool's storage task claims the full test or checks its own clients, as its own wait."""
    if mode not in MODES:
        raise GpufleetError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    refs = [  # a planned pool is created and validated by its transition, not here
        r
        for r in catalog.pools(
            regions=regions or None, clusters=clusters or None, pools=pools or None
        )
        if (not r.pool.planned or (r.cluster.name, r.pool.name) in in_service)
        and (r.cluster.name, r.pool.name) not in leave_out
    ]
    both = mode == "both"  # a pool's storage check then runs in its fabric pairs' pods
    hosts = full_test_hosts(refs, night) if both else {}
    fabric: list[dict[str, Any]] = [
        {"cluster": r.cluster.name, "node_pool": r.pool.name}
        | (
            {"pool_check": True, "full_test_host": hosts[_mount(r)].pool.name}
            if both and r.filesystem
            else {}
        )
        for r in refs
    ]
    storage: list[dict[str, Any]] = (
        [
            {"cluster": h.cluster.name, "node_pool": h.pool.name, "pool_check_in_fabric": True}
            for h in hosts.values()
        ]
        if both
        else [{"cluster": r.cluster.name, "node_pool": r.pool.name} for r in refs if r.filesystem]
    )
    return {
        "fabric": fabric if mode in ("both", "fabric") else [],
        "storage": storage if mode in ("both", "storage") else [],
    }


def full_test_hosts(refs: list[PoolRef], night: int) -> dict[tuple[str, str], PoolRef]:
    """Per (cluster, filesystem) that ``refs`` mount, the pool whose storage task runs its full
    test when it is due: its pools in catalog order taken in turn, one a night (``night``: a
    day number, the same for every task of a run). A host with no idle node tonight leaves the
    test to the next night's host, so no pool's training can hold it off for good."""
    mounting: dict[tuple[str, str], list[PoolRef]] = {}
    for r in refs:
        if r.filesystem is not None:
            mounting.setdefault(_mount(r), []).append(r)
    return {fs: pools[night % len(pools)] for fs, pools in mounting.items()}


def _mount(ref: PoolRef) -> tuple[str, str]:
    """(cluster, filesystem) of a pool that mounts one."""
    assert ref.filesystem is not None
    return ref.cluster.name, ref.filesystem.name
