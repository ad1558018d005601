"""What a night's validations cost, read from the ledger's rows: GPU-minutes per node by stage
over a run (``fleet_stages``), the nightly tier and what a night spent beyond it
(``nightly_tier``, ``tier_lines``), and the lines ``make run`` and ``bench.nightly_scale``
print (``cost_breakdown``). The nightly report's section and the pool page read them here.
No Airflow imports; a row's JSON is read defensively (``details_of``, ``_amount``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gpufleet.domain.inputs import whole
from gpufleet.domain.stages import LAUNCH, ordered, per_node_minutes
from gpufleet.domain.validation_kinds import ValidationKind
from gpufleet.errors import GpufleetError
from gpufleet.services.views.cells import details_of

if TYPE_CHECKING:
    from gpufleet.domain.fleet import Catalog, Cluster, Filesystem
    from gpufleet.store import Ledger


def fleet_stages(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Where a run's GPU time went over every pool it validated: GPU-minutes per node per stage
    (each stage's GPU-minutes over every pool's rows, over the nodes the pools' validations
    cover: ``report.validation_cost``'s per node, split by stage), their total, and the nodes."""
    totals: dict[str, float] = {}
    nodes: dict[tuple[str, str], int] = {}
    for row in rows:
        details = details_of(row)
        minutes = _mapping(details.get("stages")).get("gpu_minutes")
        count = details.get("cost_nodes")
        if not isinstance(minutes, dict) or not isinstance(count, int) or isinstance(count, bool):
            continue
        key = (row["cluster"], row["pool"])
        nodes[key] = max(nodes.get(key, 0), count)
        for stage, value in _stage_minutes(row).items():
            totals[stage] = totals.get(stage, 0.0) + value
    covered = sum(nodes.values())
    per_node = {k: totals[k] / covered for k in ordered(totals)} if covered else {}
    return {"per_node": per_node, "total": sum(per_node.values()), "nodes": covered}


def _mapping(value: Any) -> dict[str, Any]:
    """``value`` when it is a mapping, else empty (a ledger row's JSON may be anything)."""
    return value if isinstance(value, dict) else {}


def _amount(value: Any) -> float | None:
    """``value`` as a finite, non-negative number (None: anything else, a bool included)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _stage_minutes(row: dict[str, Any] | None) -> dict[str, float]:
    """A row's GPU-minutes per stage (``details.stages.gpu_minutes``): finite, non-negative
    numbers only."""
    minutes = _mapping(details_of(row).get("stages")).get("gpu_minutes")
    out = {str(k): _amount(v) for k, v in _mapping(minutes).items()}
    return {k: v for k, v in out.items() if v is not None}


def night_stages(rows: Iterable[dict[str, Any] | None]) -> dict[str, float]:
    """Where a night's GPU time went: GPU-minutes per node per stage (``domain.stages``) over
    the night's validation rows of a pool (fabric, storage, health), each row's stage figures
    over the nodes its cost is counted on, as its ``gpu_minutes_per_node`` is; empty for rows
    recorded before stages were."""
    figures = []
    for row in rows:
        details = details_of(row)
        nodes = details.get("cost_nodes")
        minutes = _mapping(details.get("stages")).get("gpu_minutes")
        if isinstance(minutes, dict) and isinstance(nodes, int) and not isinstance(nodes, bool):
            figures.append((_stage_minutes(row), nodes))
    return {k: round(v, 3) for k, v in per_node_minutes(figures).items()}


def _cost_nodes(rows: Iterable[dict[str, Any]]) -> int:
    counts = [details_of(r).get("cost_nodes") for r in rows]
    return max((c for c in counts if whole(c, 0)), default=0)


def _level1_seconds(row: dict[str, Any]) -> list[float]:
    """The seconds of each level-1 check a health row's nodes record."""
    out = []
    for node in _mapping(details_of(row).get("nodes")).values():
        node = _mapping(node)
        seconds = _amount(_mapping(node.get("stages")).get("diag_r1"))
        if node.get("level") == 1 and seconds is not None:
            out.append(seconds)
    return out


def _full_test_share(cluster: Cluster, fs: Filesystem, row: dict[str, Any] | None) -> float:
    """GPU-minutes per node per night of ``fs``'s full test (``row``: its last, None: none
    known): its cost once in the filesystem's ``full_test_every_nights``, over every node of
    ``cluster``'s pools that mount it (the catalog's counts, planned pools aside: the test
    serves them all)."""
    if row is None:
        return 0.0
    nodes: int = sum(
        p.nodes for p in cluster.node_pools if p.filesystem == fs.name and p.state != "planned"
    )
    minutes = sum(_stage_minutes(row).values())
    return minutes / fs.full_test_every_nights / nodes if nodes else 0.0


def _failed_cost(group: list[dict[str, Any]]) -> dict[str, Any]:
    """A failed pool's rows' whole cost per node, and the nodes it is counted over."""
    nodes = _cost_nodes(group)
    minutes = sum(sum(_stage_minutes(r).values()) for r in group)
    return {"per_node": minutes / max(nodes, 1), "nodes": nodes}


def nightly_tier(
    rows: Iterable[dict[str, Any]],
    catalog: Catalog,
    full_tests: Mapping[tuple[str, str], dict[str, Any] | None] | None = None,
) -> dict[str, Any] | None:
    """The nightly tier's cost (issue 35: level 1 + fabric + Lustre) in GPU-minutes per node per
    night, from a run's rows (the last of each check: ``verdicts.latest_per_check``), over the
    pools whose every check passed:

    - ``fabric``: what their fabric rows measured tonight (every held stage, over the nodes the
      pool's validations covered);
    - ``lustre``: their own checks as measured tonight, plus each filesystem's full test at its
      share: its last run's cost (tonight's row, else ``full_tests``: (cluster, filesystem) ->
      its last full test's row, ``full_test.newest_full_test``) once in the filesystem's
      ``full_test_every_nights``, over every node of the pools mounting it. A night's own
      figure is a draw (which pool ran it; none on the nights between);
    - ``level1``: ``dcgmi diag -r 1`` at its **measured** seconds a check tonight (the mean of
      every level-1 check of those pools), on the pool's GPUs, at its rotation's share (once in
      the catalog's ``level1_every_nights``). A night's own level-1 minutes are a draw of the
      rotation (which nodes are due); partners checked beside a due node are not in the share.

    Beside it, what the night spent beyond the tier: ``failed`` (each pool with a check that did
    not pass: its whole cost per node, localization and a slow fallback sweep included) and
    ``levels`` (GPU-minutes per node of ``diag_r2`` and up: retests, the weekly level 3,
    burn-ins; and a health round's own pods' launch, which only a retest or a burn-in runs).
    None when no pool passed, no level-1 check ran tonight, or no stage was recorded. A pool
    the catalog no longer names is left out (``unknown``)."""
    from gpufleet.services.validation.full_test import FULL as FULL_SCOPE  # a full test's scope

    rows = list(rows)
    pools: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        pools.setdefault((row["cluster"], row["pool"]), []).append(row)
    steady: dict[tuple[str, str], list[dict[str, Any]]] = {}
    failed: dict[tuple[str, str], list[dict[str, Any]]] = {}
    unknown: list[str] = []
    for key, group in pools.items():
        (steady if all(r.get("passed") is True for r in group) else failed)[key] = group
    seconds = [
        s
        for group in steady.values()
        for r in group
        if r["kind"] == ValidationKind.HEALTH
        for s in _level1_seconds(r)
    ]
    if not steady or not seconds:
        return None
    tests = dict(full_tests or {})
    for r in rows:  # tonight's full tests, whoever ran them
        details = details_of(r)
        if r["kind"] == ValidationKind.STORAGE and details.get("scope", FULL_SCOPE) == FULL_SCOPE:
            tests[(r["cluster"], str(details.get("filesystem")))] = r
    check_s = sum(seconds) / len(seconds)
    totals = {"level1": 0.0, "fabric": 0.0, "lustre": 0.0}
    levels: dict[str, float] = {}
    every: set[int] = set()
    covered = counted = 0
    for (cluster, pool), group in steady.items():
        nodes = _cost_nodes(group)
        try:
            ref = catalog.pool(cluster, pool)
        except GpufleetError:
            unknown.append(f"{cluster}/{pool}")
            continue
        if nodes <= 0:
            continue
        covered += nodes
        counted += 1
        every.add(ref.pool.level1_every_nights)
        by_kind = {r["kind"]: r for r in group}
        totals["fabric"] += sum(_stage_minutes(by_kind.get(ValidationKind.FABRIC)).values())
        own = by_kind.get(ValidationKind.STORAGE)
        if own is not None and details_of(own).get("scope", FULL_SCOPE) != FULL_SCOPE:
            totals["lustre"] += sum(_stage_minutes(own).values())
        fs = ref.filesystem
        if fs is not None:
            totals["lustre"] += nodes * _full_test_share(
                ref.cluster, fs, tests.get((cluster, fs.name))
            )
        totals["level1"] += nodes * check_s * ref.pool.gpu.count / 60 / ref.pool.level1_every_nights
        for stage, value in _stage_minutes(by_kind.get(ValidationKind.HEALTH)).items():
            if stage != "diag_r1":  # a higher level, or a health round's own pods' launch
                name = stage if stage.startswith("diag_r") else "health round launch"
                levels[name] = levels.get(name, 0.0) + value
    if not covered:
        return None
    per_node = {k: v / covered for k, v in totals.items()}
    return {
        "per_node": sum(per_node.values()),
        "parts": per_node,
        "check_s": check_s,
        "checks": len(seconds),
        "every": sorted(every),
        "nodes": covered,
        "pools": counted,
        "levels": {k: v / covered for k, v in levels.items()},
        "failed": {f"{c}/{p}": _failed_cost(group) for (c, p), group in failed.items()},
        "unknown": unknown,
    }


def last_full_tests(
    ledger: Ledger, catalog: Catalog, rows: Iterable[dict[str, Any]]
) -> dict[tuple[str, str], dict[str, Any] | None]:
    """Each filesystem of the rows' pools -> its last full test standing when the rows' run
    finished (``full_test.newest_full_test``, standing or not; None: none): what
    ``nightly_tier`` shares out."""
    from gpufleet.services.validation.full_test import newest_full_test

    rows = list(rows)
    ends = [r["finished_at"] for r in rows if isinstance(r.get("finished_at"), datetime)]
    now = max(ends) if ends else ledger.clock.now()
    out: dict[tuple[str, str], dict[str, Any] | None] = {}
    for cluster, pool in {(r["cluster"], r["pool"]) for r in rows}:
        try:
            ref = catalog.pool(cluster, pool)
        except GpufleetError:
            continue
        if ref.filesystem is not None and (cluster, ref.filesystem.name) not in out:
            out[(cluster, ref.filesystem.name)] = newest_full_test(ledger, ref, now)
    return out


def tier_lines(
    rows: Iterable[dict[str, Any]], catalog: Catalog, ledger: Ledger | None = None
) -> list[str]:
    """The nightly tier of a run's ``rows`` (``nightly_tier``; the ``ledger``, when given, for
    the filesystems' full tests of earlier nights) as lines of text: the tier, then what the
    night spent beyond it (when anything), or that it was not measured. ``cost_breakdown``
    prints them; the nightly report has them as a section."""
    rows = list(rows)
    tests = last_full_tests(ledger, catalog, rows) if ledger is not None else None
    tier = nightly_tier(rows, catalog, tests)
    if tier is None:
        return ["nightly tier: not measured tonight (no pool passed with a level-1 check)"]
    parts = tier["parts"]
    every = "/".join(str(e) for e in tier["every"])
    lines = [
        f"nightly tier: {tier['per_node']:.2f} GPU-minutes per node per night over "
        f"{tier['nodes']} nodes of the {tier['pools']} pools that passed: level 1 "
        f"{parts['level1']:.2f} (dcgmi diag -r 1 at {tier['check_s']:.1f} s, the mean of "
        f"{tier['checks']} checks tonight, once in {every} nights), fabric "
        f"{parts['fabric']:.2f}, Lustre {parts['lustre']:.2f}"
    ]
    beyond = [f"{k} {v:.2f}" for k, v in tier["levels"].items()]
    beyond += [
        f"{pool} failed ({f['per_node']:.2f} per node over {f['nodes']} nodes)"
        for pool, f in tier["failed"].items()
    ]
    beyond += [f"{pool} (not in the catalog)" for pool in tier["unknown"]]
    if beyond:
        lines.append(f"beyond the tier tonight: {'; '.join(beyond)}")
    return lines


def cost_breakdown(
    rows: Iterable[dict[str, Any]], catalog: Catalog | None = None, ledger: Ledger | None = None
) -> list[str]:
    """A run's validation cost as lines of text (``make run`` and ``bench.nightly_scale`` print
    them): the cost line (``report.cost_line``), GPU-minutes per node by stage, the launch's
    share (what pre-pulling, the rendezvous and fewer pods per node can cut) and, given the
    ``catalog``, the nightly tier and what the night spent beyond it (``nightly_tier``; the
    ``ledger``, when given, for the filesystems' full tests of earlier nights). Empty when the
    rows record no stages."""
    from gpufleet.services.views.report import cost_line, validation_cost

    rows = list(rows)
    stages = fleet_stages(rows)
    if not stages["per_node"]:
        return []
    parts = ", ".join(f"{k} {v:.2f}" for k, v in stages["per_node"].items())
    launch = sum(v for k, v in stages["per_node"].items() if k in LAUNCH)
    lines = [
        cost_line(validation_cost(rows)),
        f"| GPU-minutes per node by stage ({stages['nodes']} nodes): {parts}",
        f"| launch (image_pull, container_start, gang, teardown): {launch:.2f} of "
        f"{stages['total']:.2f} GPU-minutes per node",
    ]
    if catalog is not None:
        lines += [f"| {line}" for line in tier_lines(rows, catalog, ledger)]
    return lines
