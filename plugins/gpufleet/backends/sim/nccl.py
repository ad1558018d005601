"""What NCCL would do in a pod: the network it picks (or why it cannot start), and the debug
lines it writes, from what ``gpufleet.domain.plumbing.inspect_pod`` reads from the pod.

Design: docs/design/simulated-fleet.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.backends.sim.output import nccl_info_log
from gpufleet.domain.fleet import Cluster, NodePool
from gpufleet.domain.plumbing import PodFabric

TCP_PROVIDERS = ("tcp", "sockets", "tcp;ofi_rxm")


@dataclass(frozen=True)
class _Net:
    name: str  # as NCCL reports it: "Using network <name>"
    has_devices: bool
    transport: str  # the verdicts' class: gib, roce, ib, ofi-efa, ofi-tcp, socket
    provider: str | None = None


@dataclass(frozen=True)
class NcclOutcome:
    """The network NCCL runs on, or the warning it fails with."""

    network: str | None
    transport: str | None
    link_layer: str | None
    ofi_provider: str | None
    gdrdma: bool
    failure: str | None  # NCCL's warning when it cannot initialise a network
    why: tuple[str, ...]  # why the pool's expected network was not used (empty: it was)

    @property
    def rdma(self) -> bool:
        return self.transport not in (None, "socket", "ofi-tcp")


def _networks(cluster: Cluster, pool: NodePool, fabric: PodFabric, rdma_ok: bool) -> list[_Net]:
    """The networks NCCL would list for this pod, in the order it tries them."""
    nets: list[_Net] = []
    if fabric.plugin == "gIB":
        nets.append(_Net("gIB", rdma_ok, "gib"))
    elif fabric.plugin == "Libfabric":
        provider = fabric.ofi_provider or "efa"
        if provider == "efa":
            nets.append(_Net("Libfabric", rdma_ok, "ofi-efa", "efa"))
        else:
            nets.append(_Net("Libfabric", provider in TCP_PROVIDERS, "ofi-tcp", provider))
    ib_class = "ib" if pool.transport == "ib" else "roce"
    nets.append(_Net("IB", rdma_ok and cluster.shape == "gke", ib_class))
    nets.append(_Net("Socket", True, "socket"))
    return nets


def nccl_outcome(
    cluster: Cluster, pool: NodePool, fabric: PodFabric, rdma_lost: list[str]
) -> NcclOutcome:
    """What NCCL picks for ranks of a pod like ``fabric`` when ``rdma_lost`` (the faults that
    take RDMA away from these nodes) holds."""
    rdma_ok = fabric.rdma_attached and not rdma_lost
    nets = _networks(cluster, pool, fabric, rdma_ok)
    lost = [*fabric.missing, *rdma_lost]
    if fabric.pinned_net:
        wanted = fabric.pinned_net.strip()
        chosen = next((n for n in nets if n.name.lower() == wanted.lower()), None)
        if chosen is None or not chosen.has_devices:
            why = lost or [f"no network named {wanted!r} is loaded"]
            return NcclOutcome(
                network=None,
                transport=None,
                link_layer=None,
                ofi_provider=None,
                gdrdma=False,
                failure=f"Error: network {wanted} not found.",
                why=(f"NCCL_NET={wanted} forbids falling back", *why),
            )
        if chosen.transport != pool.transport:
            lost = [f"NCCL_NET={wanted} forces the {chosen.name} network", *lost]
    else:
        chosen = next(n for n in nets if n.has_devices)
    rdma = chosen.transport not in ("socket", "ofi-tcp")
    return NcclOutcome(
        network=chosen.name,
        transport=chosen.transport,
        link_layer="IB" if pool.transport == "ib" else "RoCE",
        ofi_provider=chosen.provider,
        gdrdma=rdma and pool.gdrdma,
        failure=None,
        why=() if chosen.transport == pool.transport else tuple(lost),
    )


def debug_lines(
    outcome: NcclOutcome,
    level: str | None,
    *,
    host: str,
    first_rank: int,
    gpus_per_node: int,
    nranks: int,
    seed: int,
    slow_init: str | None = None,
) -> str:
    """The NCCL debug output of the ranks on ``host`` at ``NCCL_DEBUG=level`` (``slow_init``:
    the init phase an ``nccl-slow-init`` fault makes slow)."""
    if level not in ("VERSION", "WARN", "INFO", "TRACE"):
        return ""
    text = nccl_info_log(
        host=host,
        first_rank=first_rank,
        gpus_per_node=gpus_per_node,
        nranks=nranks,
        network=outcome.network,
        link_layer=outcome.link_layer,
        ofi_provider=outcome.ofi_provider,
        gdrdma=outcome.gdrdma,
        failure=outcome.failure,
        seed=seed,
        slow_init=slow_init,
    )
    if level in ("INFO", "TRACE"):
        return text
    keep = " NCCL WARN " if level == "WARN" else "NCCL version"
    lines = [ln for ln in text.splitlines() if keep in ln or ln.startswith("NCCL version")]
    return "\n".join(lines) + "\n" if lines else ""
