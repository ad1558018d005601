"""What a scan of an NCCL INFO log has found so far: one recorder per kind of line.

:class:`LogFacts` keeps the first line of each kind as evidence (clipped), counts network-selection
lines per network name, and tracks the largest communicator's ranks. Memory is bounded: every
set and dict is capped, so a log of any size keeps the same few facts. Which bytes are searched
for these lines is :mod:`.scanner`'s business; what they mean is :mod:`.answer`'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpufleet.parsing.nccl_log.lines import (
    GDR_RE,
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
)

__all__ = ["MAX_DISTINCT", "LogFacts"]

MAX_DISTINCT = 4096  # cap on distinct names/keys kept (memory stays bounded)


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
    # the last network name decoded, so that the hot path does not decode it again
    last_anchor: bytes = b""
    last_name: str = ""

    # ---- network selection ("Using network X") ----------------------------------------------
    def anchor_line(self, line: bytes, needle: bytes) -> None:
        cut = line.find(needle)
        self.network(line[cut + len(needle) :].strip(), line, cut)

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
            match = PREFIX_RE.search(line, 0, max(cut, 0))
            if match:
                self.anchor_keys.add(match.group(1) + b":" + match.group(2) + b"/" + match.group(4))

    # ---- what the network runs on -----------------------------------------------------------
    def version(self, line: bytes) -> None:
        match = VERSION_RE.search(line)
        if match and len(self.versions) < 64:
            self.versions.setdefault(text(match.group(1)), clip(line))

    def ib_using(self, line: bytes) -> None:
        for layer in LINK_RE.findall(line):
            self.link_layers.setdefault(text(layer), clip(line))

    def provider(self, line: bytes) -> None:
        match = PROVIDER_RE.search(line)
        if match and len(self.providers) < 64:
            self.providers.setdefault(text(match.group(1)), clip(line))

    # ---- ranks and nodes ------------------------------------------------------------------
    def rank(self, rank: int, nranks: int, buf: bytes | bytearray, pos: int) -> None:
        """One init line of ``rank`` in a communicator of ``nranks`` (at ``buf[pos]``)."""
        self.init_seen = True
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
        """A ``rank R nRanks N nNodes M localRanks L`` line (matched in ``buf``)."""
        rank, nranks, nodes = int(match.group(1)), int(match.group(2)), int(match.group(3))
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
