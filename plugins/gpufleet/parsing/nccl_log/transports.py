"""Transport classes: which class a NCCL network name belongs to, and which class is worse.

Wording checked against NVIDIA/nccl ``src/plugin/net.cc`` and ``src/transport/net_ib``,
aws-ofi-nccl and the GKE gIB / TCPX / TCPXO plugins:

* ``IB`` (and ``IBext*`` from the SHARP/HPC-X plugin) is ``ib`` or ``roce`` by the link layer in
  ``NET/IB : Using [0]mlx5_0:1/IB`` vs ``/RoCE``.
* ``Socket`` -> ``socket``. ``Libfabric`` / ``AWS Libfabric`` / ``OFI`` (aws-ofi-nccl) ->
  ``ofi-efa`` for the ``efa`` provider, ``ofi-tcp`` for the ``tcp``/``sockets`` providers; with no
  provider, or another one, the network's own name lower-cased. ``gIB`` -> ``gib``;
  ``GPUDirectTCPX*`` -> ``tcpx``; ``FasTrak`` / ``GPUDirectTCPXO*`` -> ``tcpxo``. Any other name is
  reported lower-cased, never forced into the nearest class.
* Worse first: ``socket``, ``ofi-tcp``, any unclassed name, ``tcpx``, ``tcpxo``, then the RDMA
  classes (``ib``, ``roce``, ``gib``, ``ofi-efa``) alike.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["TRANSPORT_CLASSES", "classify_network_name", "is_ofi", "quality"]

TRANSPORT_CLASSES = (
    "ib",
    "roce",
    "socket",
    "ofi-efa",
    "ofi-tcp",
    "gib",
    "tcpx",
    "tcpxo",
    "none",
    "unknown",
)

# lower is worse; names we have no class for sit between TCP and the GPUDirect transports
_QUALITY = {
    "socket": 0,
    "ofi-tcp": 1,
    "tcpx": 3,
    "tcpxo": 4,
    "roce": 5,
    "ib": 5,
    "gib": 5,
    "ofi-efa": 5,
}
_UNCLASSED_QUALITY = 2
_OFI_NAMES = ("libfabric", "aws libfabric", "ofi")


def quality(transport: str) -> int:
    """How good a transport class is: lower is worse."""
    return _QUALITY.get(transport, _UNCLASSED_QUALITY)


def is_ofi(low: str) -> bool:
    """Whether a lower-cased network name is aws-ofi-nccl's (Libfabric)."""
    return low in _OFI_NAMES or "libfabric" in low


def classify_network_name(
    name: str, link_layers: Iterable[str] = (), ofi_providers: Iterable[str] = ()
) -> str:
    """Map a NCCL network name (plus link layers / OFI providers seen) to a transport class."""
    low = name.strip().lower()
    layers = {layer.lower() for layer in link_layers}
    if low == "socket":
        return "socket"
    if low == "ib" or low.startswith(("ibext", "ib_", "ibv")):
        return "roce" if "roce" in layers else "ib"
    if is_ofi(low):
        classes = []
        for provider in ofi_providers:
            p = provider.lower()
            if p.startswith("efa"):
                classes.append("ofi-efa")
            elif p.startswith(("tcp", "sockets")):
                classes.append("ofi-tcp")
            else:
                classes.append(low)
        if not classes:
            return low
        return min(classes, key=lambda c: (quality(c), c))
    if low.startswith("gib"):
        return "gib"
    if "fastrak" in low or low.startswith(("gpudirecttcpxo", "tcpxo")):
        return "tcpxo"
    if low.startswith(("gpudirecttcpx", "tcpx")):
        return "tcpx"
    return low
