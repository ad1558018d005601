"""``gpufleet sim show|inject|clear|reset``: inspect the simulated fleet and manage faults
(``reset --onboarded``: as a fleet gpufleet onboarded, its images pre-pulled);
``gpufleet sim gpu-fault|reboot|replace|add-node|maintenance|predict|schedule|changes``: what
happens to its nodes between nights, now or at a time of the simulated day (``--at HH:MM``, UTC
on the sim's clock, or ``--in SECONDS``), and the change log a watch reads
(``gpufleet.backends.sim.node_actions``, ``watch_log``).

``show`` first names the state folder it read (``gpufleet.cli.fleet_state``). Faults are read
with the fault grammar's one parser (``gpufleet.domain.faults``) and reach the
fleet through ``gpufleet.backends.faults``; nothing here knows the sim backend's internals.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from gpufleet.config.catalog import load_catalog
from gpufleet.domain.faults import FAULT_KINDS, SYNTAX, parse_fault
from gpufleet.domain.fleet import Catalog, PoolRef
from gpufleet.errors import GpufleetError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sim",
        help="inspect the simulated fleet and inject faults",
        description="The simulated fleet (provider: sim clusters).",
    )
    s = p.add_subparsers(dest="sim_command", required=True, metavar="ACTION")
    show = s.add_parser("show", help="print nodes, their state and the active faults")
    show.add_argument("--cluster", help="only this cluster")
    show.set_defaults(func=show_cmd)
    inj = s.add_parser(
        "inject",
        help="inject a fault into a pool",
        description=f"Faults: {SYNTAX}",
    )
    inj.add_argument("--pool", required=True, help="pool as cluster/pool (or a unique pool name)")
    inj.add_argument(
        "--fault", required=True, help=f"one of {', '.join(FAULT_KINDS)}, with its argument"
    )
    inj.set_defaults(func=inject_cmd)
    clr = s.add_parser("clear", help="remove injected faults (all, or one pool's)")
    clr.add_argument("--pool", help="only this pool (cluster/pool or a unique pool name)")
    clr.set_defaults(func=clear_cmd)
    rst = s.add_parser(
        "reset",
        help="forget all simulated state (nodes re-created from the "
        "catalog, taints and faults gone)",
    )
    rst.add_argument(
        "--onboarded",
        action="store_true",
        help="then install region_onboarding's image pre-pull DaemonSet on every preexisting "
        "sim cluster (a fleet gpufleet onboarded earlier: its nodes hold the validation images)",
    )
    rst.set_defaults(func=reset_cmd)
    register_node_events(s)


def _when(parser: argparse.ArgumentParser) -> None:
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--at", metavar="HH:MM", help="at this time of the simulated day (UTC)")
    when.add_argument("--in", dest="in_s", type=float, metavar="SECONDS", help="this much later")


def register_node_events(s: argparse._SubParsersAction) -> None:
    """The node-event verbs (see the module)."""
    gf = s.add_parser(
        "gpu-fault",
        help="a GPU of a node logs an Xid (the cluster's health agent reports it)",
        description="The driver logs Xid CODE on GPU N of the node; it is reported as the "
        "cluster's shape does (EKS node monitoring agent, or NVSentinel on GKE), and the fault "
        "xid:<node>:<code> is put in force for the node's health tools.",
    )
    gf.add_argument("--node", required=True)
    gf.add_argument("--xid", type=int, default=79, help="the Xid code (default 79)")
    gf.add_argument("--gpu", type=int, default=0, help="the GPU index (default 0)")
    _when(gf)
    gf.set_defaults(func=node_event_cmd, action="gpu-fault")
    for verb, text in (
        ("reboot", "the node's machine reboots (NotReady, then Ready with a new boot id)"),
        ("replace", "the cloud's auto-repair replaces the node (a new node, a new name)"),
    ):
        p = s.add_parser(verb, help=text)
        p.add_argument("--node", required=True)
        _when(p)
        p.set_defaults(func=node_event_cmd, action=verb)
    add = s.add_parser("add-node", help="the autoscaler adds a node to a pool")
    add.add_argument("--pool", required=True, help="pool as cluster/pool (or a unique pool name)")
    _when(add)
    add.set_defaults(func=node_event_cmd, action="add-node")
    mnt = s.add_parser(
        "maintenance",
        help="host maintenance of a node is announced (GKE label, or EC2 scheduled event)",
    )
    mnt.add_argument("--node", required=True)
    mnt.add_argument(
        "--start", required=True, metavar="HH:MM", help="when the maintenance starts (UTC)"
    )
    mnt.add_argument("--code", default="system-maintenance", help="EC2 event code (EKS shape)")
    _when(mnt)
    mnt.set_defaults(func=node_event_cmd, action="maintenance")
    pr = s.add_parser(
        "predict",
        help="GKE's node-health prediction label (recommended-to-run-large-training-workload)",
    )
    pr.add_argument("--node", required=True)
    pr.add_argument("--recommended", required=True, choices=("true", "false"))
    _when(pr)
    pr.set_defaults(func=node_event_cmd, action="prediction")
    sch = s.add_parser("schedule", help="print the node events scheduled on the simulated day")
    sch.add_argument("--cluster", help="only this cluster")
    sch.set_defaults(func=schedule_cmd)
    ch = s.add_parser("changes", help="print the node changes and node Events a watch would see")
    ch.add_argument("--cluster", required=True)
    ch.add_argument("--since", default="0", help="resource version (default: all the log keeps)")
    ch.set_defaults(func=changes_cmd)


def _sim_backend(cluster):
    from gpufleet.backends.sim.cluster import SimClusterBackend

    return SimClusterBackend(cluster)


def _node_cluster(catalog: Catalog, node: str):
    """The sim cluster that has ``node``."""
    clusters = _sim_clusters(catalog, None)
    for cluster in clusters:
        if any(n.name == node for n in _sim_backend(cluster).nodes()):
            return cluster
    raise GpufleetError(
        f"no sim node named {node!r} (clusters: {', '.join(c.name for c in clusters)}); "
        "gpufleet sim show lists them"
    )


def node_event_cmd(args) -> int:
    from gpufleet.backends.sim.events_schedule import time_of_day

    catalog = load_catalog()
    if args.action == "add-node":
        ref = resolve_pool(catalog, args.pool)
        cluster, node = ref.cluster, None
    else:
        cluster, node = _node_cluster(catalog, args.node), args.node
    backend = _sim_backend(cluster)
    now = backend.state.clock.time()
    at = None
    if args.at is not None:
        at = time_of_day(now, args.at)
    elif args.in_s is not None:
        if not args.in_s >= 0:
            raise GpufleetError(f"--in must be a number of seconds >= 0, not {args.in_s}")
        at = now + args.in_s
    if args.action == "gpu-fault":
        done = backend.gpu_fault(node, xid=args.xid, gpu=args.gpu, at=at)
    elif args.action == "reboot":
        done = backend.reboot(node, at=at)
    elif args.action == "replace":
        done = backend.replace(node, at=at)
    elif args.action == "add-node":
        done = backend.add_node(ref.pool.name, at=at)
    elif args.action == "maintenance":
        done = backend.maintenance(node, time_of_day(at or now, args.start), args.code, at=at)
    else:
        done = backend.prediction(node, args.recommended == "true", at=at)
    if "scheduled" in done:
        when = datetime.fromtimestamp(done["scheduled"], UTC).strftime("%Y-%m-%d %H:%M:%S")
        print(f"scheduled: {args.action} {node or ''} on {cluster.name} at {when} UTC (sim)")
    else:
        extra = {k: v for k, v in done.items() if k not in ("action", "node")}
        print(f"{args.action}: {node or ''} on {cluster.name} {extra}")
    return 0


def schedule_cmd(args) -> int:
    catalog = load_catalog()
    rows = []
    for cluster in _sim_clusters(catalog, args.cluster):
        rows += _sim_backend(cluster).schedule()
    if not rows:
        print("no node events scheduled")
    for row in sorted(rows, key=lambda r: r.at):
        when = datetime.fromtimestamp(row.at, UTC).strftime("%Y-%m-%d %H:%M:%S")
        state = "fired" if row.fired_at is not None else "pending"
        print(f"  {when} {row.cluster} {row.action} {row.node or ''} {row.args or ''} ({state})")
    return 0


def changes_cmd(args) -> int:
    catalog = load_catalog()
    (cluster,) = _sim_clusters(catalog, args.cluster)
    backend = _sim_backend(cluster)
    for change in backend.watch_nodes(args.since, 0) + backend.watch_node_events(args.since, 0):
        if change.node is not None:
            n = change.node
            bad = [f"{c.type}={c.status}" for c in n.conditions if c.type != "Ready"]
            what = f"node {n.name} ready={n.ready} boot={(n.boot_id or '')[:8]} {' '.join(bad)}"
        elif change.event is not None:
            e = change.event
            what = f"event {e.node} {e.reason} x{e.count}: {e.message.strip()}"
        else:
            what = "(newest version)"
        print(f"  {change.version:>6} {change.change:<8} {what}")
    return 0


def resolve_pool(catalog: Catalog, text: str) -> PoolRef:
    if "/" in text:
        cluster, _, pool = text.partition("/")
        ref = catalog.pool(cluster, pool)
    else:
        matches = [r for r in catalog.pools() if r.pool.name == text]
        if not matches:
            keys = ", ".join(r.key for r in catalog.pools())
            raise GpufleetError(f"no node pool named {text!r} (pools: {keys})")
        if len(matches) > 1:
            raise GpufleetError(
                f"pool name {text!r} is ambiguous: use one of {', '.join(r.key for r in matches)}"
            )
        ref = matches[0]
    if ref.cluster.provider != "sim":
        raise GpufleetError(
            f"{ref.key} is a {ref.cluster.provider} cluster: faults can only be "
            "injected into sim clusters"
        )
    return ref


def _sim_clusters(catalog: Catalog, only: str | None):
    clusters = [c for _, c in catalog.clusters.values() if c.provider == "sim"]
    if only is not None:  # an empty name is a wrong name, not "every cluster"
        cluster = catalog.cluster(only)
        if cluster.provider != "sim":
            raise GpufleetError(f"cluster {only!r} is {cluster.provider}, not sim")
        clusters = [cluster]
    return clusters


def show_cmd(args) -> int:
    from gpufleet.backends.faults import fault_injection
    from gpufleet.cli.fleet_state import describe

    catalog = load_catalog()
    clusters = _sim_clusters(catalog, args.cluster)
    print(describe())
    faults = []
    for cluster in clusters:
        injection = fault_injection(cluster)
        print(f"cluster {cluster.name} (sim, mimics {cluster.shape}, {cluster.location})")
        print(f"  {'node':<24} {'pool':<10} {'ready':<6} {'sched':<6} {'taints / jobs'}")
        for node in injection.nodes():
            extra = [
                f"{t.key}={t.value}:{t.effect}" for t in node.taints if t.key != "nvidia.com/gpu"
            ]
            extra += [f"job:{w}" for w in node.workloads]
            print(
                f"  {node.name:<24} {node.pool or '-':<10} {'yes' if node.ready else 'no':<6} "
                f"{'yes' if node.schedulable else 'no':<6} {', '.join(extra) or '-'}"
            )
        faults += injection.active()
    print("faults:" if faults else "faults: none")
    for f in faults:
        print(f"  {f.cluster}/{f.pool}: {f.text} ({f.scope})")
    return 0


def inject_cmd(args) -> int:
    from gpufleet.backends.faults import fault_injection

    catalog = load_catalog()
    ref = resolve_pool(catalog, args.pool)
    fault = parse_fault(args.fault)
    added = fault_injection(ref.cluster).inject(ref.pool.name, fault)
    print(f"{'injected' if added else 'already active'}: {fault.text} on {ref.key}")
    return 0


def clear_cmd(args) -> int:
    from gpufleet.backends.faults import fault_injection

    catalog = load_catalog()
    if args.pool is not None:
        ref = resolve_pool(catalog, args.pool)
        n = fault_injection(ref.cluster).clear(ref.pool.name)
    else:
        n = sum(fault_injection(c).clear() for c in _sim_clusters(catalog, None))
    print(f"cleared {n} fault(s)")
    return 0


def reset_cmd(args) -> int:
    from gpufleet.backends.faults import reset_simulated_fleet

    reset_simulated_fleet()
    print("simulated fleet reset: nodes are re-created from the catalog on next use")
    if getattr(args, "onboarded", False):
        names = prepull_onboarded(load_catalog())
        print(f"image pre-pull DaemonSet installed on {', '.join(names) or 'no cluster'}")
    return 0


def prepull_onboarded(catalog: Catalog) -> list[str]:
    """Install the validation images' pre-pull DaemonSet (``manifests.addons.prepull``, what
    ``region_onboarding`` installs) on every preexisting sim cluster of ``catalog``, as on a
    fleet gpufleet onboarded earlier; a cluster onboarding has yet to create is left alone.
    Idempotent (``ensure_object``). Returns the clusters' names."""
    from gpufleet.backends import cluster_backend
    from gpufleet.manifests.addons import render_image_prepull

    names = []
    for cluster in _sim_clusters(catalog, None):
        if cluster.sim is not None and not cluster.sim.preexisting:
            continue
        backend = cluster_backend(cluster)
        for manifest in render_image_prepull(cluster):
            backend.ensure_object(manifest)
        names.append(cluster.name)
    return names
