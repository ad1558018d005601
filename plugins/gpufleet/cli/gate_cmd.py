"""``gpufleet gate``: would a job of N nodes be launched onto these pools now?

The request is checked before anything is decided: numbers finite and in bounds, names with
Kubernetes name syntax (``gpufleet.cli.args``), the cluster and every pool in the fleet catalog.
A refused argument is exit 2 with one line and leaves no ledger row. A well-formed request is
decided and recorded by ``gpufleet.services.launch.gate``: stdout is the decision (exit 0 launch,
1 refuse), stderr names the fleet state and ledger it read. A decision the ledger could not
record is exit 2: without its recorded decision nothing may launch.
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta

from gpufleet.cli.args import bounded_float, bounded_int, name
from gpufleet.domain.fleet import MAX_POOL_NODES
from gpufleet.domain.gate import DEFAULT_MAX_AGE
from gpufleet.domain.names import DNS1035_LABEL, DNS1123_LABEL, MAX_JOBSET_NAME
from gpufleet.errors import LedgerError

# the launch DAG's own bound for max_validation_age_hours (services.launch.request)
MAX_AGE_HOURS = 168.0
_LABEL = "a catalog name (a DNS-1123 label: lowercase letters, digits and '-', at most 63)"
_JOB = (
    f"a job name (a DNS-1035 label of at most {MAX_JOBSET_NAME} characters: lowercase "
    "letters, digits and '-', starting with a letter)"
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gate", help="decide whether a job may launch (exit 0 only on launch)")
    p.add_argument("--cluster", required=True, type=name(DNS1123_LABEL, 63, _LABEL))
    p.add_argument(
        "--pool",
        action="append",
        required=True,
        dest="pools",
        type=name(DNS1123_LABEL, 63, _LABEL),
        help="target node pool (repeat for several)",
    )
    p.add_argument(
        "--nodes",
        type=bounded_int(1, MAX_POOL_NODES),
        required=True,
        help=f"nodes the job needs (1 to {MAX_POOL_NODES})",
    )
    p.add_argument(
        "--max-age-hours",
        type=bounded_float(0, MAX_AGE_HOURS, "a number of hours"),
        default=DEFAULT_MAX_AGE.total_seconds() / 3600,
        help=f"oldest acceptable validation, in hours, at most {MAX_AGE_HOURS:g} "
        "(default %(default)g)",
    )
    p.add_argument(
        "--job",
        type=name(DNS1035_LABEL, MAX_JOBSET_NAME, _JOB),
        help="job name to record with the decision",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from gpufleet.cli.fleet_state import describe, open_ledger
    from gpufleet.config.catalog import load_catalog
    from gpufleet.services.launch.gate import check_gate

    catalog = load_catalog()
    catalog.cluster(args.cluster)  # CatalogError naming the cluster and the known ones
    for pool in dict.fromkeys(args.pools):
        catalog.pool(args.cluster, pool)  # CatalogError naming the pool and the cluster's
    ledger = open_ledger()
    decision = check_gate(
        catalog,
        lambda: ledger,
        args.cluster,
        args.pools,
        args.nodes,
        max_age=timedelta(hours=args.max_age_hours),
        job=args.job,
    )
    if getattr(decision, "decision_id", None) is None:
        raise LedgerError(
            f"REFUSE, and the decision was not recorded in the ledger at {ledger.safe_url}: "
            + "; ".join(decision.reasons[-1:])
        )
    print(describe(ledger), file=sys.stderr)
    print(decision.text())
    return 0 if decision.launch else 1
