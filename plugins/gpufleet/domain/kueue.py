"""Kueue's rules gpufleet follows: the ``Topology`` a pool's ResourceFlavor names,
the topology a training job asks for by its size, what Kueue refuses to change, and its limits.
Pure: values in, values out.

Design: docs/design/topology.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.domain.fleet import Cluster, NodePool
from gpufleet.domain.topology import EKS_LAYERS, GKE_BLOCK, GKE_HOST, GKE_SUBBLOCK, Place
from gpufleet.domain.workloads import HOSTNAME_LABEL
from gpufleet.errors import CatalogError

KUEUE_GROUP = "kueue.x-k8s.io"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
# ClusterQueue spec.resourceGroups[].flavors: +kubebuilder:validation:MaxItems=64 (v1beta1)
MAX_FLAVORS_PER_RESOURCE_GROUP = 64


@dataclass(frozen=True)
class KueueTopology:
    """A Kueue ``Topology``: its name, its levels (node labels, broadest first) and which of
    them is a block and a sub-block."""

    name: str
    levels: tuple[str, ...]
    block: str
    subblock: str

    def domain_of(self, level: str, labels: Mapping[str, str]) -> tuple[str, ...] | None:
        """A node's domain at ``level``: its values of every level from the top down to
        ``level`` (a rack's name need only be unique in its block); None when it lacks one."""
        path = self.levels[: self.levels.index(level) + 1]
        values = tuple(labels.get(key) or "" for key in path)
        return values if all(values) else None


GKE_TOPOLOGY = KueueTopology(
    "gpufleet-gke-topology",
    (GKE_BLOCK, GKE_SUBBLOCK, GKE_HOST, HOSTNAME_LABEL),
    block=GKE_BLOCK,
    subblock=GKE_SUBBLOCK,
)
EKS_TOPOLOGY = KueueTopology(
    "gpufleet-eks-topology",
    (*EKS_LAYERS[:3], HOSTNAME_LABEL),
    block=EKS_LAYERS[1],
    subblock=EKS_LAYERS[2],
)
TOPOLOGIES = (GKE_TOPOLOGY, EKS_TOPOLOGY)

# Per provider (a cluster's shape), the transports of the machines that carry its labels.
_LABELLED = {
    "gke": (GKE_TOPOLOGY, frozenset({"gib", "ib", "roce"})),
    "eks": (EKS_TOPOLOGY, frozenset({"ofi-efa"})),
}


def pool_topology(cluster: Cluster, pool: NodePool) -> KueueTopology | None:
    """The Topology the pool's nodes are labelled for, or None (no topology labels)."""
    topology, transports = _LABELLED[cluster.shape]
    return topology if pool.transport in transports else None


def topology_of_level(level: str) -> KueueTopology | None:
    """The Topology one of whose levels is ``level`` (as an annotation names it)."""
    return next((t for t in TOPOLOGIES if level in t.levels), None)


@dataclass(frozen=True)
class TopologyRequest:
    """What a job's pod template asks of Kueue: ``annotation`` (required or preferred) set to
    ``level`` (a Topology level's node label); ``reason`` says why, for the log."""

    annotation: str
    level: str
    reason: str

    @property
    def annotations(self) -> dict[str, str]:
        return {self.annotation: self.level}


def topology_request(
    topology: KueueTopology, nodes: int, free: Iterable[Place | None]
) -> TopologyRequest:
    """The topology a job of ``nodes`` nodes asks for, given the places of its pool's free
    nodes (``place_of`` of each; None for a node without topology labels): one sub-block when
    one holds ``nodes`` free nodes, else one block when one does (required), else a preference
    for one block."""
    places = [p for p in free if p is not None]
    racks = Counter(places)
    blocks = Counter(p.block for p in places)
    if racks:
        rack, most = max(racks.items(), key=lambda kv: (kv[1], kv[0]))
        if most >= nodes:
            return TopologyRequest(
                REQUIRED_TOPOLOGY,
                topology.subblock,
                f"{nodes} node(s) fit in one sub-block ({rack.key} has {most} free)",
            )
    if blocks:
        block, most = max(blocks.items(), key=lambda kv: (kv[1], kv[0]))
        if most >= nodes:
            return TopologyRequest(
                REQUIRED_TOPOLOGY,
                topology.block,
                f"{nodes} node(s) fit in no sub-block's free nodes but in one block "
                f"({block} has {most} free)",
            )
    largest = max(blocks.values(), default=0)
    return TopologyRequest(
        PREFERRED_TOPOLOGY,
        topology.block,
        f"{nodes} node(s) fit in no block's free nodes (the largest has {largest}): one block "
        "preferred, spread over as few as Kueue can",
    )


def immutable_spec(stored: Mapping[str, Any]) -> str | None:
    """Why Kueue refuses any change to the spec of ``stored`` (an object as the cluster holds
    it), or None when its spec may change: a Topology's levels never change, and a
    ResourceFlavor's spec does not once it names a Topology (the v1beta1 CRDs' rules
    ``self == oldSelf`` and ``!has(oldSelf.topologyName) || self == oldSelf``)."""
    if str(stored.get("apiVersion") or "").split("/")[0] != KUEUE_GROUP:
        return None
    spec = stored.get("spec") or {}
    if stored.get("kind") == "Topology":
        return "Kueue does not allow a Topology's levels to change"
    if stored.get("kind") == "ResourceFlavor" and spec.get("topologyName"):
        return (
            "Kueue does not allow a ResourceFlavor's spec to change once it names a Topology "
            f"(this one names {spec['topologyName']!r})"
        )
    return None


def refused_change(stored: Mapping[str, Any], manifest: Mapping[str, Any]) -> str | None:
    """The sentence refusing to make ``stored`` carry ``manifest``'s spec, or None when Kueue
    allows it (the spec may change, or is the same). Every field of either spec counts, so a
    field the manifest drops is a change too."""
    stored = {"apiVersion": manifest.get("apiVersion"), "kind": manifest.get("kind"), **stored}
    why = immutable_spec(stored)
    if why is None:
        return None
    have, want = stored.get("spec") or {}, manifest.get("spec") or {}
    fields = sorted(k for k in {*have, *want} if have.get(k) != want.get(k))
    if not fields:
        return None
    name = (stored.get("metadata") or {}).get("name")
    return (
        f"{stored.get('kind')} {name} exists with another spec "
        f"({', '.join('spec.' + f for f in fields)}): {why}, so gpufleet does not edit it. "
        "Delete it once nothing uses it (the ClusterQueue of its flavor, the flavors naming "
        "it) and run again to have it created as the catalog says; a pool that needs another "
        "flavor is a new pool (a reservation transition)"
    )


def check_resource_group(cluster_queue: str, group: int, flavors: Sequence[str]) -> None:
    """Refuse (CatalogError, with the figures) a resource group of more than 64 flavors."""
    if len(flavors) > MAX_FLAVORS_PER_RESOURCE_GROUP:
        raise CatalogError(
            f"ClusterQueue {cluster_queue}: resource group {group} would hold {len(flavors)} "
            f"flavors (pools); Kueue allows at most {MAX_FLAVORS_PER_RESOURCE_GROUP} in one "
            "resource group: split the pools over more ClusterQueues"
        )
