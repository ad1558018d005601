"""``gpufleet status``: the fleet readiness table (what ``make run`` ends with).

The rows come from ``gpufleet.services.views.fleet``, which the UI's fleet page reads too.

Its first line names the fleet state and the ledger it read (``gpufleet.cli.fleet_state``).
Tripped blast-radius breakers (docs/remediation.md), read from the ledger, follow the table:
each holds every automated action in its scope until a person resets it; then the approvals
waiting for a person and those answered in the last day (docs/remediation.md#approvals).
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from gpufleet.cli.args import bounded_int
from gpufleet.services.views.approvals import approval_lines
from gpufleet.services.views.fleet import age_text, readiness_rows

__all__ = ["breaker_row", "format_table", "launch_row", "readiness_rows", "register", "run"]

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
    tripped = ledger.tripped_breakers()
    if tripped:
        print("\ntripped breakers (no automated action in their scope until a person resets):")
        print(format_table([breaker_row(row, now) for row in tripped]))
    approvals = approval_lines(ledger, now)
    if approvals:
        print("\napprovals (waiting for a person, or answered in the last day):")
        print("\n".join(f"  {line}" for line in approvals))
    launches = ledger.launches(limit=args.launches) if args.launches else []
    if launches:
        print("\nrecent training launches:")
        print(format_table([launch_row(row, now) for row in launches]))
    return 0


def breaker_row(row: dict, now: datetime) -> dict[str, str]:
    return {
        "BREAKER": f"{row['scope']} {row['key']}",
        "TRIPPED": age_text(now, row["tripped_at"]),
        "WHY": row["reason"],
        "RESET": f"gpufleet node breaker-reset {row['scope']} {row['key']} --reason ...",
    }


def launch_row(row: dict, now: datetime) -> dict[str, str]:
    reasons = row.get("reasons") or []
    return {
        "JOB": f"{row['namespace']}/{row['job']}",
        "POOL": f"{row['cluster']}/{row['pool']}",
        "STATE": row["state"],
        "TRANSPORT": f"{row['confirmed_transport'] or '-'} (expected {row['expected_transport']})",
        "RANKS": str(len(row.get("ranks") or {})),
        "WHEN": age_text(now, row["created_at"]),
        "WHY": reasons[0][:80] if reasons else "",
    }
