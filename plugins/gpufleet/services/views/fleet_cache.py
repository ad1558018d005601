"""What the fleet-wide reads judge on (``FleetInputs``), read from the ledger, and kept between
requests by a long-lived reader (``FleetCache``: the api-server's fleet page, ``/api/fleet``
and ``/metrics``) so that a request re-reads only the clusters whose ledger changed.

Design: docs/design/fleet-cache.md.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpufleet.domain.fleet import Catalog, PoolRef
    from gpufleet.domain.gate import PoolFacts
    from gpufleet.services.launch.gate import LedgerReads
    from gpufleet.store import Ledger

# Up to this many changed clusters, each table is read naming them; past it, fleet-wide.
NAMED_READS = 8


@dataclass
class FleetInputs:
    """The ledger's side of every catalog pool (``refs``, in catalog order): the gate's facts by
    pool key, the rows they were judged on (``reads``), the regions' states, the pools a
    transition brought into service, and per (cluster, pool) its node snapshot, its nodes out
    of service by lifecycle state and its quarantined nodes."""

    refs: list[PoolRef]
    facts: dict[str, PoolFacts]
    reads: LedgerReads
    region_states: dict[str, dict]
    transitioned: set[tuple[str, str]]
    snapshots: dict[tuple[str, str], dict] = field(default_factory=dict)
    lifecycle: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    quarantined: dict[tuple[str, str], int] = field(default_factory=dict)
    # cluster -> the ledger version its inputs were read at (a ``FleetCache``'s; None: unknown)
    versions: dict[str, int] | None = field(default=None, compare=False)
    # a ``FleetCache``'s: each cluster's verdicts, kept by ``services.views.fleet.judge`` with
    # the versions and the time span they hold for (None: judged anew on each call)
    judged: dict[str, Any] | None = field(default=None, compare=False)


def pools_by_cluster(refs: Iterable[Any]) -> dict[str, list[str]]:
    """Cluster name -> its pools' names, in catalog order (``refs``: ``PoolRef``s)."""
    out: dict[str, list[str]] = {}
    for ref in refs:
        out.setdefault(ref.cluster.name, []).append(ref.pool.name)
    return out


def _read_clusters(
    catalog: Catalog, ledger: Ledger, by_cluster: Mapping[str, list[str]], everything: bool
) -> FleetInputs:
    """The inputs of ``by_cluster``'s pools (refs and regions left empty), one statement per
    table: of every cluster (``everything``), else naming ``by_cluster``'s."""
    from gpufleet.services.launch.gate import LedgerReads, gather_facts

    wanted = set(by_cluster)
    scope = None if everything else list(by_cluster)
    reads = LedgerReads.read(ledger, by_cluster, named=not everything)
    snapshots = ledger.node_snapshots(scope, detail=False)
    lifecycle: dict[tuple[str, str], dict[str, int]] = {}
    for row in ledger.node_states(scope):
        if row["state"] != "released":
            pool = lifecycle.setdefault((row["cluster"], row["pool"]), {})
            pool[row["state"]] = pool.get(row["state"], 0) + 1
    quarantined: dict[tuple[str, str], int] = {}
    for q in ledger.quarantined(scope):
        key = (q["cluster"], q["pool"])
        quarantined[key] = quarantined.get(key, 0) + 1
    facts = {
        f.key: f
        for cluster, names in by_cluster.items()
        for f in gather_facts(
            catalog,
            ledger,
            cluster,
            names,
            free={n: (snapshots.get((cluster, n)) or {}).get("free") for n in names},
            reads=reads,
        )
    }
    return FleetInputs(
        refs=[],
        facts=facts,
        reads=reads,
        region_states={},
        transitioned={k for k in ledger.transitioned_pools() if k[0] in wanted},
        snapshots={k: v for k, v in snapshots.items() if k[0] in wanted},
        lifecycle={k: v for k, v in lifecycle.items() if k[0] in wanted},
        quarantined={k: v for k, v in quarantined.items() if k[0] in wanted},
    )


def read_inputs(catalog: Catalog, ledger: Ledger, regions: list[str] | None = None) -> FleetInputs:
    """Every catalog pool's inputs (of ``regions`` when given), read fleet-wide once: one
    statement per table whatever the fleet's size or history."""
    refs = list(catalog.pools(regions=regions))
    inputs = _read_clusters(catalog, ledger, pools_by_cluster(refs), everything=True)
    inputs.refs = refs
    inputs.region_states = ledger.region_states()
    return inputs


@dataclass
class _Kept:
    catalog: Catalog
    versions: dict[str, int]  # cluster (and FLEET) -> the version its inputs were read at
    pools: dict[str, list[str]]  # cluster -> its catalog pools
    inputs: FleetInputs


class FleetCache:
    """Per-process inputs of every catalog pool, per ledger URL; ``inputs`` re-reads the
    clusters whose ledger version moved since they were read (everything when the catalog
    changed), and the regions when ``FLEET`` moved. A refresh builds new tables and swaps
    them in, so a request still judging the previous ones is not disturbed; one refresh runs
    at a time (the api-server's threads). ``served``/``reread`` count clusters (tests, the
    benchmark)."""

    def __init__(self) -> None:
        self._kept: dict[str, _Kept] = {}
        self._lock = threading.Lock()
        self.served = 0
        self.reread = 0

    def inputs(
        self, catalog: Catalog, ledger: Ledger, regions: list[str] | None = None
    ) -> FleetInputs:
        from gpufleet.store.schema_versions import FLEET

        with self._lock:
            versions = ledger.cluster_versions()  # first: the rows read after are as new
            kept = self._kept.get(ledger.url)
            if kept is None or kept.catalog is not catalog:
                inputs = read_inputs(catalog, ledger)
                pools = pools_by_cluster(inputs.refs)
                seen = {c: versions.get(c, 0) for c in [*pools, FLEET]}
                kept = self._kept[ledger.url] = _Kept(catalog, seen, pools, inputs)
                inputs.versions = dict(seen)
                inputs.judged = {}
                self.reread += len(pools)
            else:
                self._refresh(kept, catalog, ledger, versions)
            self.served += len(kept.pools)
            inputs = kept.inputs
        if regions:
            return FleetInputs(**{**inputs.__dict__, "refs": list(catalog.pools(regions=regions))})
        return inputs

    def _refresh(
        self, kept: _Kept, catalog: Catalog, ledger: Ledger, versions: Mapping[str, int]
    ) -> None:
        from gpufleet.store.schema_versions import FLEET

        old = kept.inputs
        changed = {c: p for c, p in kept.pools.items() if versions.get(c, 0) != kept.versions[c]}
        regions_moved = versions.get(FLEET, 0) != kept.versions[FLEET]
        if not changed and not regions_moved:
            return
        new = FleetInputs(**old.__dict__)
        if changed:
            self.reread += len(changed)
            fresh = _read_clusters(catalog, ledger, changed, len(changed) > NAMED_READS)

            def merge(table: Mapping, part: Mapping, cluster_of) -> dict:
                return {**{k: v for k, v in table.items() if cluster_of(k) not in changed}, **part}

            def by_key(k: str) -> str:
                return k.split("/", 1)[0]

            def first(k: tuple) -> str:
                return k[0]

            from gpufleet.services.launch.gate import LedgerReads

            new.facts = merge(old.facts, fresh.facts, by_key)
            new.reads = LedgerReads(
                transitions=merge(old.reads.transitions, fresh.reads.transitions, str),
                states=merge(old.reads.states, fresh.reads.states, first),
                latest=merge(old.reads.latest, fresh.reads.latest, str),
            )
            new.snapshots = merge(old.snapshots, fresh.snapshots, first)
            new.lifecycle = merge(old.lifecycle, fresh.lifecycle, first)
            new.quarantined = merge(old.quarantined, fresh.quarantined, first)
            new.transitioned = {k for k in old.transitioned if k[0] not in changed}
            new.transitioned |= fresh.transitioned
            kept.versions.update({c: versions.get(c, 0) for c in changed})
        if regions_moved:
            new.region_states = ledger.region_states()
            kept.versions[FLEET] = versions.get(FLEET, 0)
        new.versions = dict(kept.versions)
        kept.inputs = new
