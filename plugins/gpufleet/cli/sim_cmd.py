"""``gpufleet sim show|inject|clear|reset``: inspect the simulated fleet and manage faults.

``show`` first names the state folder it read (``gpufleet.cli.fleet_state``). Faults are read
with the fault grammar's one parser (``gpufleet.domain.faults``) and reach the
fleet through ``gpufleet.backends.faults``; nothing here knows the sim backend's internals.
"""

from __future__ import annotations

import argparse

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
    rst.set_defaults(func=reset_cmd)


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
    return 0
