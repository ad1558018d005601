"""Nightly validation around the per-pool work: scope planning, run-scoped sim faults, report."""

from __future__ import annotations

import logging
import re
from typing import Any

from gpufleet.config.paths import state_dir
from gpufleet.domain.fleet import Catalog
from gpufleet.errors import GpufleetError
from gpufleet.services.report import html_report, markdown, prometheus, write_reports
from gpufleet.store import Ledger

log = logging.getLogger(__name__)

MODES = ("both", "fabric", "storage")
_FAULT_SPEC = re.compile(r"^(?P<cluster>[a-z0-9-]+)/(?P<pool>[a-z0-9-]+)=(?P<fault>\S+)$")


def plan_scope(
    catalog: Catalog,
    *,
    regions: list[str] | None = None,
    clusters: list[str] | None = None,
    pools: list[str] | None = None,
    mode: str = "both",
) -> dict[str, list[dict[str, str]]]:
    """The pools to validate, as mapping kwargs for the fabric and storage tasks."""
    if mode not in MODES:
        raise GpufleetError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    refs = list(
        catalog.pools(regions=regions or None, clusters=clusters or None, pools=pools or None)
    )
    fabric = [{"cluster": r.cluster.name, "node_pool": r.pool.name} for r in refs]
    storage = [{"cluster": r.cluster.name, "node_pool": r.pool.name} for r in refs if r.filesystem]
    return {
        "fabric": fabric if mode in ("both", "fabric") else [],
        "storage": storage if mode in ("both", "storage") else [],
    }


def parse_fault_specs(catalog: Catalog, specs: list[str]) -> list[tuple[str, str, str]]:
    """``cluster/pool=fault`` strings -> (cluster, pool, fault); refuses non-sim targets."""
    from gpufleet.backends.sim.state import parse_fault

    out = []
    for spec in specs or ():
        m = _FAULT_SPEC.match(spec.strip())
        if not m:
            raise GpufleetError(f"fault {spec!r} is not of the form cluster/pool=fault")
        ref = catalog.pool(m["cluster"], m["pool"])
        if ref.cluster.provider != "sim":
            raise GpufleetError(
                f"faults can only be injected into sim clusters, not "
                f"{ref.cluster.provider} cluster {ref.cluster.name!r}"
            )
        parse_fault(m["fault"])
        out.append((m["cluster"], m["pool"], m["fault"]))
    return out


def inject_run_faults(catalog: Catalog, specs: list[str], run_id: str) -> int:
    """Inject faults for this run only (cleared by ``clear_run_faults``)."""
    parsed = parse_fault_specs(catalog, specs)
    if not parsed:
        return 0
    from gpufleet.backends.sim.state import SimState

    state = SimState()
    for cluster, pool, fault in parsed:
        state.inject(cluster, pool, fault, scope=f"run:{run_id}")
        log.warning("injected sim fault %s into %s/%s for run %s", fault, cluster, pool, run_id)
    return len(parsed)


def clear_run_faults(run_id: str) -> int:
    from gpufleet.backends.sim.state import SimState, db_path

    if not db_path().exists():
        return 0
    return SimState().clear(scope=f"run:{run_id}")


def _safe(run_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", run_id)


def nightly_report(
    ledger: Ledger, catalog: Catalog, run_id: str, history_nights: int = 14
) -> dict[str, Any]:
    """Write the run's Markdown/HTML report and Prometheus metrics; return paths and failures."""
    from gpufleet.config.baselines import find_baseline

    rows = ledger.validations_for_run(run_id)
    quarantined = ledger.quarantined()
    md_text = markdown(run_id, rows, quarantined)
    histories, baselines = {}, {}
    for r in rows:
        if r["kind"] != "fabric":
            continue
        key = f"{r['cluster']}/{r['pool']}"
        histories[key] = ledger.validation_history(
            r["cluster"], r["pool"], "fabric", history_nights
        )
        ref = catalog.pool(r["cluster"], r["pool"])
        base = find_baseline(
            ref.pool.gpu.model, ref.pool.gpu.count, 2, "all_reduce", ref.pool.transport
        )
        baselines[key] = base.busbw_gbps if base else None
    files = {
        "report.md": md_text,
        "report.html": html_report(run_id, md_text, histories, baselines),
        "metrics.prom": prometheus(rows, quarantined),
    }
    paths = write_reports(state_dir() / "reports" / _safe(run_id), files)
    failed = [
        f"{r['cluster']}/{r['pool']} {r['kind']}: {'; '.join(r['reasons'][:2])}"
        for r in rows
        if not r["passed"]
    ]
    return {"paths": paths, "markdown": md_text, "failed": failed, "checks": len(rows)}
