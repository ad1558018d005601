"""``gpufleet node show|release|quarantine``: a node's lifecycle history, and a person's moves;
``gpufleet node breaker-reset SCOPE KEY``: a person resets a tripped blast-radius breaker.

``show`` prints where the node stands and every move it made (when, from what to what, why,
by whom, with the evidence's gist). ``release`` and ``quarantine`` are a person's decision: the
reason is required, who acted is ``--by`` or the OS user, and both are recorded in the ledger;
the cluster is reached through the catalog (its connection, or the cloud's credentials). Only
a person takes a node out of ``needs_human``. ``breaker-reset`` records who reset which
breaker (``pool CLUSTER/POOL``, ``cluster CLUSTER`` or ``fleet fleet``), when and why; the
breaker's scope then counts only what happens after the reset (docs/remediation.md).
"""

from __future__ import annotations

import argparse
import getpass
from datetime import UTC, datetime

from gpufleet.cli.args import name, shown
from gpufleet.domain.names import DNS1123_LABEL, DNS1123_SUBDOMAIN
from gpufleet.errors import GpufleetError

_LABEL = "a DNS-1123 label (lowercase letters, digits and '-')"
_NODE = "a Kubernetes node name (lowercase letters, digits, '-' and '.')"
MAX_REASON = 500


def _reason(text: str) -> str:
    text = text.strip()
    if not text or len(text) > MAX_REASON or any(ord(c) < 32 for c in text):
        raise argparse.ArgumentTypeError(
            f"{shown(text)} is not a reason: one line of 1 to {MAX_REASON} characters"
        )
    return text


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "node",
        help="a node's lifecycle: show its history, release or quarantine it by hand",
        description="Nodes out of service: quarantined, retested, drained, repaired, released.",
    )
    s = p.add_subparsers(dest="node_command", required=True, metavar="ACTION")
    for action, text in (
        ("show", "print the node's state and history"),
        ("release", "put the node back in service (a person's decision)"),
        ("quarantine", "take the node out of service (a person's decision)"),
    ):
        a = s.add_parser(action, help=text)
        a.add_argument("node", type=name(DNS1123_SUBDOMAIN, 253, _NODE))
        a.add_argument(
            "--cluster", required=True, type=name(DNS1123_LABEL, 63, _LABEL), help="catalog cluster"
        )
        if action != "show":
            a.add_argument("--reason", required=True, type=_reason, help="why (recorded)")
            a.add_argument("--by", type=_reason, help="who acts (default: the OS user)")
        a.set_defaults(func=run, action=action)
    b = s.add_parser(
        "breaker-reset",
        help="reset a tripped blast-radius breaker (a person's decision, recorded)",
        description="A tripped breaker holds every automated action in its scope until a "
        "person resets it; `gpufleet status` lists the tripped ones.",
    )
    b.add_argument("scope", choices=("pool", "cluster", "fleet"), help="the breaker's scope")
    b.add_argument(
        "key", type=_breaker_key, help="CLUSTER/POOL, CLUSTER, or fleet (as gpufleet status shows)"
    )
    b.add_argument("--reason", required=True, type=_reason, help="why (recorded)")
    b.add_argument("--by", type=_reason, help="who resets it (default: the OS user)")
    b.set_defaults(func=run_breaker_reset, action="breaker-reset")


_BREAKER_KEY = "CLUSTER/POOL, CLUSTER or fleet (DNS-1123 labels)"


def _breaker_key(text: str) -> str:
    parts = text.split("/")
    check = name(DNS1123_LABEL, 63, _BREAKER_KEY)
    if len(parts) > 2:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not {_BREAKER_KEY}")
    return "/".join(check(p) for p in parts)


def run_breaker_reset(args) -> int:
    from gpufleet.cli.fleet_state import open_ledger

    if (args.scope == "pool") != ("/" in args.key) or (
        args.scope == "fleet" and args.key != "fleet"
    ):
        raise GpufleetError(
            f"a {args.scope} breaker's key is "
            + {"pool": "CLUSTER/POOL", "cluster": "CLUSTER", "fleet": "fleet"}[args.scope]
            + f", not {args.key!r}"
        )
    by = args.by or getpass.getuser()
    row = open_ledger().reset_breaker(args.scope, args.key, by, args.reason)
    print(
        f"{args.scope} breaker {args.key}: reset by {row['reset_by']} at "
        f"{row['reset_at']:%Y-%m-%d %H:%M:%S} UTC: {args.reason} (tripped "
        f"{row['tripped_at']:%Y-%m-%d %H:%M:%S} UTC: {row['reason']})"
    )
    return 0


def _age(then: datetime | None) -> str:
    if then is None:
        return "?"
    minutes = (datetime.now(UTC) - then).total_seconds() / 60
    return f"{minutes:.0f}m ago" if minutes < 120 else f"{minutes / 60:.1f}h ago"


def run(args) -> int:
    from gpufleet.backends import cluster_backend
    from gpufleet.cli.fleet_state import open_ledger
    from gpufleet.config.catalog import load_catalog
    from gpufleet.services.nodes.lifecycle import NodeLifecycle

    catalog = load_catalog()
    cluster = catalog.cluster(args.cluster)
    ledger = open_ledger()
    if args.action == "show":
        return _show(ledger, cluster.name, args.node)
    backend = cluster_backend(cluster)
    info = next((n for n in backend.list_nodes() if n.name == args.node), None)
    if info is None or info.pool is None:
        raise GpufleetError(f"cluster {cluster.name} has no node {args.node!r} in a gpufleet pool")
    lifecycle = NodeLifecycle(catalog.pool(cluster.name, info.pool), ledger, backend)
    by = args.by or getpass.getuser()
    if args.action == "release":
        lifecycle.release(args.node, args.reason, {"by_hand": True}, by=by)
    else:
        lifecycle.quarantine(args.node, args.reason, {"by_hand": True}, by=by)
    print(f"{args.node}: {args.action}d by {by}: {args.reason}")
    return 0


def _show(ledger, cluster: str, node: str) -> int:
    row = ledger.node_state(cluster, node)
    if row is None:
        print(f"{cluster}/{node}: in service, never taken out (no lifecycle record)")
        return 0
    print(
        f"{cluster}/{node} (pool {row['pool']}): {row['state']} since {_age(row['since'])}; "
        f"failed repairs: {row['failed_repairs']}; {row['reason'] or ''}"
    )
    for e in ledger.node_history(cluster, node):
        who = f" by {e['by']}" if e["by"] else ""
        pairs = (e["evidence"] or {}).get("pairs") or []
        gist = ""
        if pairs:
            gist = "; pairs: " + ", ".join(
                f"{p['node_a']}/{p['node_b']} {'pass' if p['passed'] else 'FAIL'} "
                f"{p.get('transport') or '?'}"
                for p in pairs
            )
        print(
            f"  {e['at']:%Y-%m-%d %H:%M:%S} {e['from_state'] or '-'} -> {e['to_state']}{who}: "
            f"{e['reason'] or ''}{gist}"
        )
    return 0
