"""What a scan of an NCCL INFO log has found so far: one recorder per kind of line.

Design: docs/design/parsers.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpufleet.parsing.nccl_log.lines import (
    GDR_RE,
    IBV_CALL_RE,
    LINK_RE,
    OLD_ANCHOR,
    PREFIX_RE,
    PROVIDER_RE,
    RING_RE,
    VERSION_RE,
    VIA_NET_RE,
    clip,
    line_at,
    text,
    value_after,
)

__all__ = [
    "LEGACY_IB",
    "LEGACY_NO_VERBS",
    "LEGACY_OFI",
    "LEGACY_SOCKET",
    "MAX_DISTINCT",
    "LogFacts",
]

MAX_DISTINCT = 4096  # cap on distinct names/keys kept (memory stays bounded)
MAX_REFUSED = 64

# what a process initialised, NCCL < 2.7 (bits of LogFacts.legacy)
LEGACY_IB = 1
LEGACY_SOCKET = 2
LEGACY_OFI = 4
LEGACY_NO_VERBS = 8  # libibverbs could not be loaded: no IB transport, so sockets


def _process_key(line: bytes, end: int | None = None) -> bytes:
    """``host:pid/device`` from NCCL's own prefix (empty when the line has none)."""
    match = PREFIX_RE.search(line, 0, len(line) if end is None else end)
    if not match:
        return b""
    return match.group(1) + b":" + match.group(2) + b"/" + match.group(4)


@dataclass(slots=True)
class LogFacts:
    networks: dict[str, int] = field(default_factory=dict)  # name -> lines
    network_lines: dict[str, str] = field(default_factory=dict)
    modern_anchor_seen: bool = False
    anchor_keys: set[bytes] = field(default_factory=set)  # host:pid/device that chose a network
    versions: dict[str, str] = field(default_factory=dict)
    link_layers: dict[str, str] = field(default_factory=dict)
    ib_no_device: str | None = None
    providers: dict[str, str] = field(default_factory=dict)
    max_nranks: int = 0
    comm_ranks: set[int] = field(default_factory=set)
    init_hosts: set[bytes] = field(default_factory=set)
    # every communicator size seen -> the ranks of that size seen (capped): a communicator with
    # ranks missing from the log may span hosts the log does not show
    ranks_by_size: dict[int, set[int]] = field(default_factory=dict)
    # the first line showing the communicator's connections made within the node
    # (``Connected all rings``, ``via P2P/``, ``via SHM/``): with no ``via NET/`` line, and INIT
    # lines logged, no connection crossed a node
    intra_node_line: str | None = None
    init_seen: bool = False
    max_nodes: int | None = None
    single_node_line: str | None = None
    multi_node_line: str | None = None
    gdr_channel: str | None = None
    gdr_enabled_gpu: str | None = None
    gdr_disabled_gpu: str | None = None
    gdr_enabled_hca: str | None = None
    gdr_disabled_hca: str | None = None
    ring_gdr: dict[str, str] = field(default_factory=dict)
    net_channel: str | None = None
    net_channel_names: dict[str, str] = field(default_factory=dict)
    window_net_lines: int = 0
    window_gdr_lines: int = 0
    nccl_seen: bool = False
    legacy: dict[bytes, int] = field(default_factory=dict)  # process -> LEGACY_* bits
    legacy_lines: dict[int, str] = field(default_factory=dict)  # LEGACY_* bit -> first line
    refused: dict[str, str] = field(default_factory=dict)  # contradiction -> its line
    info_seen: bool = False  # any ``NCCL INFO`` line (a log at NCCL_DEBUG=WARN has none)
    verbs_failures: dict[str, str] = field(default_factory=dict)  # "call: error" -> its line
    # the last network name decoded, so that the hot path does not decode it again
    last_anchor: bytes = b""
    last_name: str = ""

    # ---- network selection ("Using network X") ----------------------------------------------
    def anchor_line(self, line: bytes, needle: bytes) -> None:
        cut = line.find(needle)
        self.network(value_after(line, cut + len(needle)), line, cut)

    def old_anchor_line(self, line: bytes) -> None:
        """``Using internal Network X`` (very old releases); ``... Network plugin`` is not one."""
        cut = line.find(OLD_ANCHOR)
        name = line[cut + len(OLD_ANCHOR) :].strip()
        if name and not name.lower().startswith(b"plugin"):
            self.anchor_line(line, OLD_ANCHOR)

    def network(self, raw_name: bytes, line: bytes | None, cut: int) -> None:
        """Count one network-selection line; ``line`` is only needed the first time or for keys."""
        if not raw_name:
            return
        if raw_name == self.last_anchor:
            name = self.last_name
        else:
            name = text(raw_name)
            self.last_anchor, self.last_name = bytes(raw_name), name
        if name not in self.networks:
            if len(self.networks) >= MAX_DISTINCT or line is None:
                return
            self.network_lines[name] = clip(line)
            self.networks[name] = 0
        self.networks[name] += 1
        if line is not None and len(self.anchor_keys) < MAX_DISTINCT * 16:
            key = _process_key(line, max(cut, 0))
            if key:
                self.anchor_keys.add(key)

    # ---- what the network runs on -----------------------------------------------------------
    def version(self, line: bytes) -> None:
        match = VERSION_RE.search(line)
        if match and len(self.versions) < 64:
            self.versions.setdefault(text(match.group(1)), clip(line))

    def ib_using(self, line: bytes) -> None:
        for layer in LINK_RE.findall(line):
            self.link_layers.setdefault(text(layer), clip(line))
        self.initialised(line, LEGACY_IB)

    def socket_using(self, line: bytes) -> None:
        """``NET/Socket : Using [0]eth0:...``: the socket transport initialised (a choice only
        in NCCL < 2.7, and only when the same process initialised nothing better)."""
        self.initialised(line, LEGACY_SOCKET)

    def provider(self, line: bytes) -> None:
        match = PROVIDER_RE.search(line)
        if match and len(self.providers) < 64:
            self.providers.setdefault(text(match.group(1)), clip(line))
        if match:
            self.initialised(line, LEGACY_OFI)

    def libibverbs_missing(self, line: bytes) -> None:
        """``Failed to open libibverbs.so[.1]``: this process's IB transport could not start."""
        self.initialised(line, LEGACY_NO_VERBS)

    def verbs_failure(self, line: bytes) -> None:
        """``Call to ibv_modify_qp failed with error Connection timed out``: a connection over
        the IB transport (InfiniBand or RoCE) failed."""
        match = IBV_CALL_RE.search(line)
        if not match or len(self.verbs_failures) >= MAX_REFUSED:
            return
        call, error = text(match.group(1)), text(match.group(2))
        self.verbs_failures.setdefault(
            f"{call} failed: {error}" if error else f"{call} failed", clip(line)
        )

    def initialised(self, line: bytes, bit: int) -> None:
        """Record that the process logging ``line`` initialised a network (NCCL < 2.7)."""
        key = _process_key(line)
        if key in self.legacy or len(self.legacy) < MAX_DISTINCT * 16:
            self.legacy[key] = self.legacy.get(key, 0) | bit
        if bit not in self.legacy_lines:
            self.legacy_lines[bit] = clip(line)

    # ---- contradictions ---------------------------------------------------------------------
    def refuse(self, reason: str, buf: bytes | bytearray, pos: int) -> None:
        """Keep a contradictory line (not believed) with why."""
        if reason not in self.refused and len(self.refused) < MAX_REFUSED:
            self.refused[reason] = clip(line_at(buf, pos, 0, len(buf)))

    # ---- ranks and nodes ------------------------------------------------------------------
    def rank(self, rank: int, nranks: int, buf: bytes | bytearray, pos: int) -> None:
        """One init line of ``rank`` in a communicator of ``nranks`` (at ``buf[pos]``)."""
        if nranks == 0 or rank >= nranks:
            why = "nranks 0" if nranks == 0 else f"rank {rank} in a communicator of {nranks}"
            self.refuse(why, buf, pos)
            return
        self.init_seen = True
        sized = self.ranks_by_size.get(nranks)
        if sized is None and len(self.ranks_by_size) < 64:
            sized = self.ranks_by_size[nranks] = set()
        if sized is not None and len(sized) < 1 << 16:
            sized.add(rank)
        if nranks > self.max_nranks:
            self.max_nranks = nranks
            self.comm_ranks = set()
            self.init_hosts = set()
        if nranks == self.max_nranks and len(self.comm_ranks) < 1 << 20:
            self.comm_ranks.add(rank)
            if self.max_nodes is None and len(self.init_hosts) < MAX_DISTINCT:
                # hosts only matter for telling single-node logs without an nNodes line
                prefix = PREFIX_RE.search(line_at(buf, pos, 0, len(buf)))
                if prefix:
                    self.init_hosts.add(prefix.group(1))

    def nodes(self, match: re.Match[bytes], buf: bytes | bytearray) -> None:
        """A ``rank R nRanks N nNodes M localRanks L [localRank l]`` line (matched in ``buf``)."""
        rank, nranks, nodes = int(match.group(1)), int(match.group(2)), int(match.group(3))
        local_ranks = int(match.group(4))
        local_rank = int(match.group(5)) if match.group(5) is not None else None
        why = None
        if nodes == 0 or nodes > nranks:
            why = f"nNodes {nodes} with nRanks {nranks}"
        elif local_ranks == 0 or local_ranks > nranks:
            why = f"localRanks {local_ranks} with nRanks {nranks}"
        elif local_rank is not None and local_rank >= local_ranks:
            why = f"localRank {local_rank} with localRanks {local_ranks}"
        if why is not None:
            self.refuse(why, buf, match.start())
            return
        if nranks == 0 or rank >= nranks:
            self.rank(rank, nranks, buf, match.start())  # refused there, with its reason
            return
        self.max_nodes = nodes if self.max_nodes is None else max(self.max_nodes, nodes)
        self.rank(rank, nranks, buf, match.start())
        if nodes == 1 and self.single_node_line is None:
            self.single_node_line = clip(line_at(buf, match.start(), 0, len(buf)))
        if nodes > 1 and self.multi_node_line is None:
            self.multi_node_line = clip(line_at(buf, match.start(), 0, len(buf)))

    # ---- GPUDirect RDMA ---------------------------------------------------------------------
    def gdr_line(self, line: bytes) -> None:
        """``GPU Direct RDMA Enabled|Disabled for GPU|HCA ...`` (topology, not what was used)."""
        match = GDR_RE.search(line)
        if not match:
            return
        state, target = match.groups()
        clipped = clip(line)
        if target == b"GPU":
            if state == b"Enabled":
                self.gdr_enabled_gpu = self.gdr_enabled_gpu or clipped
            else:
                self.gdr_disabled_gpu = self.gdr_disabled_gpu or clipped
        elif state == b"Enabled":
            self.gdr_enabled_hca = self.gdr_enabled_hca or clipped
        else:
            self.gdr_disabled_hca = self.gdr_disabled_hca or clipped

    def ring(self, line: bytes) -> None:
        """``Connected all rings, use ring PXN 0 GDR 1``."""
        match = RING_RE.search(line)
        if match:
            self.ring_gdr.setdefault(text(match.group(1)), clip(line))

    def intra_node(self, line: bytes) -> None:
        """``Connected all rings``, or a channel line ``via P2P/...`` or ``via SHM/...``."""
        if self.intra_node_line is None:
            self.intra_node_line = clip(line)

    def net_channel_line(self, line: bytes) -> None:
        """A ``Channel ... via NET/<name>/<dev>[/GDRDMA]`` line: a connection over the network."""
        clipped = clip(line)
        if self.net_channel is None:
            self.net_channel = clipped
        match = VIA_NET_RE.search(line)
        if match and len(self.net_channel_names) < 64:
            self.net_channel_names.setdefault(text(match.group(1)), clipped)
        if b"/GDRDMA" in line and self.gdr_channel is None:
            self.gdr_channel = clipped
