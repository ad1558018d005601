"""``gpufleet gate``: would a job of N nodes be launched onto these pools now?"""

from __future__ import annotations

import argparse
from datetime import timedelta

from gpufleet.domain.gate import DEFAULT_MAX_AGE


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gate", help="decide whether a job may launch (exit 0 only on launch)")
    p.add_argument("--cluster", required=True)
    p.add_argument(
        "--pool",
        action="append",
        required=True,
        dest="pools",
        help="target node pool (repeat for several)",
    )
    p.add_argument("--nodes", type=int, required=True, help="nodes the job needs")
    p.add_argument(
        "--max-age-hours",
        type=float,
        default=DEFAULT_MAX_AGE.total_seconds() / 3600,
        help="oldest acceptable validation, in hours (default %(default)g)",
    )
    p.add_argument("--job", help="job name to record with the decision")
    p.set_defaults(func=run)


def run(args) -> int:
    from gpufleet.config.catalog import load_catalog
    from gpufleet.services.gate import check_gate
    from gpufleet.store import Ledger

    if args.nodes < 1:
        raise SystemExit("gpufleet: --nodes must be at least 1")
    decision = check_gate(
        load_catalog(),
        Ledger,
        args.cluster,
        args.pools,
        args.nodes,
        max_age=timedelta(hours=args.max_age_hours),
        job=args.job,
    )
    print(decision.text())
    return 0 if decision.launch else 1
