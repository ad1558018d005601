"""The nightly's scope: which pools tonight validates, as the fabric and storage tasks' mapping
kwargs. Faults for one run (the ``sim_fault_drill`` DAG's ``sim_faults`` Param) are
``gpufleet.services.validation.run_faults``'s: checked against this scope, injected by the run's
setup task and cleared by its teardown. The report the nightly writes after the per-pool work is
a view (``gpufleet.services.views.nightly_report``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from gpufleet.domain.fleet import Catalog
from gpufleet.errors import GpufleetError

MODES = ("both", "fabric", "storage")


def plan_scope(
    catalog: Catalog,
    *,
    regions: list[str] | None = None,
    clusters: list[str] | None = None,
    pools: list[str] | None = None,
    mode: str = "both",
    in_service: Collection[tuple[str, str]] = (),
) -> dict[str, list[dict[str, Any]]]:
    """The pools to validate, as mapping kwargs for the fabric and storage tasks. A ``planned``
    pool is left out unless ``in_service`` names it (a finished transition created it). With
    ``mode`` ``both``, a pool with a filesystem has its storage pool check run in its fabric
    validation's pass-1 pods (one wait for both: ``pool_check`` to the fabric task,
    ``pool_check_in_fabric`` to the storage task, which then runs only the filesystem's full
    test when that is the pool's tonight)."""
    if mode not in MODES:
        raise GpufleetError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    refs = [  # a planned pool is created and validated by its transition, not here
        r
        for r in catalog.pools(
            regions=regions or None, clusters=clusters or None, pools=pools or None
        )
        if not r.pool.planned or (r.cluster.name, r.pool.name) in in_service
    ]
    both = mode == "both"  # a pool's storage check then runs in its fabric pairs' pods
    fabric: list[dict[str, Any]] = [
        {"cluster": r.cluster.name, "node_pool": r.pool.name}
        | ({"pool_check": True} if both and r.filesystem else {})
        for r in refs
    ]
    storage: list[dict[str, Any]] = [
        {"cluster": r.cluster.name, "node_pool": r.pool.name}
        | ({"pool_check_in_fabric": True} if both else {})
        for r in refs
        if r.filesystem
    ]
    return {
        "fabric": fabric if mode in ("both", "fabric") else [],
        "storage": storage if mode in ("both", "storage") else [],
    }
