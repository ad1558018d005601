"""``gpufleet status``: the fleet readiness table (what ``make run`` ends with).

Its first line names the fleet state and the ledger it read (``gpufleet.cli.fleet_state``).
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from gpufleet.cli.args import bounded_int

MAX_LAUNCHES = 1000


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="print the fleet readiness table")
    p.add_argument("--region", action="append", dest="regions", help="only these regions")
    p.add_argument(
        "--launches",
        type=bounded_int(0, MAX_LAUNCHES),
        default=5,
        help=f"recent launches to list, 0 to {MAX_LAUNCHES} (5)",
    )
    p.set_defaults(func=run)


def _age(now: datetime, then: datetime | None) -> str:
    if then is None:
        return "never"
    minutes = (now - then).total_seconds() / 60
    return f"{minutes:.0f}m ago" if minutes < 120 else f"{minutes / 60:.0f}h ago"


def _verdict(row: dict) -> str:
    """pass, FAIL, or ERROR for a validation that could not finish (the WHY column says why)."""
    if row.get("verdict") == "error":
        return "ERROR"
    return "pass" if row.get("passed") is True else "FAIL"


def readiness_rows(catalog, ledger, now: datetime, regions=None) -> list[dict[str, str]]:
    from gpufleet.backends import cluster_backend
    from gpufleet.domain.gate import DEFAULT_MAX_AGE, pool_problems
    from gpufleet.errors import GpufleetError
    from gpufleet.services.gate import gather_facts

    rows = []
    region_states = ledger.region_states()
    transitioned = ledger.transitioned_pools()
    lifecycle: dict[tuple[str, str], dict[str, int]] = {}
    for row in ledger.node_states():
        if row["state"] != "released":
            counts = lifecycle.setdefault((row["cluster"], row["pool"]), {})
            counts[row["state"]] = counts.get(row["state"], 0) + 1
    for ref in catalog.pools(regions=regions):
        facts = gather_facts(catalog, ledger, ref.cluster.name, [ref.pool.name])[0]
        unreachable = None
        try:
            nodes = cluster_backend(ref.cluster).list_nodes(ref.pool.name)
            ready = f"{sum(n.ready for n in nodes)}/{len(nodes)}"
            quarantined = str(sum(n.quarantined for n in nodes))
        except GpufleetError as exc:
            ready, quarantined, unreachable = "?", "?", str(exc)
        fabric = ledger.latest_validation(ref.cluster.name, ref.pool.name, "fabric")
        storage = ledger.latest_validation(ref.cluster.name, ref.pool.name, "storage")
        problems = pool_problems(facts, now, DEFAULT_MAX_AGE)
        region_state = (region_states.get(ref.region.name) or {}).get("state")
        if facts.state == "retired":
            problems.insert(0, "retired: remove from the catalog")
        elif ref.pool.planned and (ref.cluster.name, ref.pool.name) not in transitioned:
            problems.insert(0, "planned: a reservation transition creates it")
        elif region_state in ("onboarding", "failed"):
            problems.insert(0, f"region: onboarding {region_state}")
        elif unreachable and "does not exist yet" in unreachable:
            problems.insert(0, "region: not onboarded (run region_onboarding)")
        fab_text = "-"
        if fabric:
            bw = f" {fabric['busbw_gbps']:.0f}GB/s" if fabric["busbw_gbps"] else ""
            fab_text = (
                f"{_verdict(fabric)} {fabric['transport'] or '?'}"
                f"{bw} {_age(now, fabric['finished_at'])}"
            )
        sto_text = "n/a" if ref.filesystem is None else "-"
        if storage:
            sto_text = (
                f"{_verdict(storage)} "
                f"{(storage['read_mb_s'] or 0) / 1000:.1f}GB/s "
                f"{_age(now, storage['finished_at'])}"
            )
        rows.append(
            {
                "REGION": ref.region.name,
                "POOL": ref.key,
                "GPU": f"{ref.pool.gpu.count}x{ref.pool.gpu.model}",
                "EXPECT": ref.pool.transport,
                "NODES": ready,
                "FREE": str(facts.schedulable_nodes)
                if facts.schedulable_nodes is not None
                else "?",
                "QUAR": quarantined,
                "OUT": ",".join(
                    f"{n} {state}"
                    for state, n in sorted(
                        lifecycle.get((ref.cluster.name, ref.pool.name), {}).items()
                    )
                )
                or "-",
                "STATE": facts.state or "-",
                "FABRIC": fab_text,
                "LUSTRE": sto_text,
                "READY": "yes" if not problems else "NO",
                "WHY": problems[0].split(": ", 1)[-1] if problems else "",
            }
        )
    return rows


def format_table(rows: list[dict[str, str]]) -> str:
    if not rows:
        return "no pools in the catalog"
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols}
    lines = ["  ".join(c.ljust(widths[c]) for c in cols).rstrip()]
    lines.append("  ".join("-" * widths[c] for c in cols))
    lines += ["  ".join(r[c].ljust(widths[c]) for c in cols).rstrip() for r in rows]
    return "\n".join(lines)


def run(args) -> int:
    from gpufleet.cli.fleet_state import describe, open_ledger
    from gpufleet.config.catalog import load_catalog

    catalog = load_catalog()
    ledger = open_ledger()
    now = datetime.now(UTC)
    rows = readiness_rows(catalog, ledger, now, args.regions)
    print(describe(ledger))
    print(f"gpufleet readiness, {now:%Y-%m-%d %H:%M} UTC")
    print(format_table(rows))
    ready = sum(r["READY"] == "yes" for r in rows)
    retired = sum(r["STATE"] == "retired" for r in rows)
    in_service = len(rows) - retired
    print(
        f"{ready} of {in_service} pools ready for training"
        + (f" ({retired} retired: remove from the catalog)" if retired else "")
    )
    launches = ledger.launches(limit=args.launches) if args.launches else []
    if launches:
        print("\nrecent training launches:")
        print(format_table([launch_row(row, now) for row in launches]))
    return 0


def launch_row(row: dict, now: datetime) -> dict[str, str]:
    reasons = row.get("reasons") or []
    return {
        "JOB": f"{row['namespace']}/{row['job']}",
        "POOL": f"{row['cluster']}/{row['pool']}",
        "STATE": row["state"],
        "TRANSPORT": f"{row['confirmed_transport'] or '-'} (expected {row['expected_transport']})",
        "RANKS": str(len(row.get("ranks") or {})),
        "WHEN": _age(now, row["created_at"]),
        "WHY": reasons[0][:80] if reasons else "",
    }
