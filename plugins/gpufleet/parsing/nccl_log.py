"""Which transport did NCCL actually use? Read it from ``NCCL_DEBUG=INFO`` output.

Pure domain code: no Airflow. Streaming and constant-memory: the file is read in 8 MiB binary
chunks and only the few lines that matter are decoded, so a 1 GiB log is fine.

What decides (wording checked against NVIDIA/nccl ``src/init.cc``, ``src/plugin/net.cc``,
``src/transport/net_ib``, ``src/transport/net.cc``, aws-ofi-nccl and the GKE gIB / TCPX / TCPXO
plugins):

* ``NCCL INFO Using network <Name>`` (``INFO(NCCL_INIT, "Using network %s", ...)``; very old
  releases: ``Using internal Network <Name>``) names the network of a communicator. A
  ``Bootstrap : Using eth0`` or ``NET/Socket : Using [0]eth0`` line is *not* the data path and never
  decides; nor does ``NET/Plugin: Using internal network plugin.``
* ``IB`` (and ``IBext*`` from the SHARP/HPC-X plugin) is ``ib`` or ``roce`` by the link layer in
  ``NET/IB : Using [0]mlx5_0:1/IB`` vs ``/RoCE``; with no such line it stays ``ib`` and
  ``link_layer`` is ``None``.
* ``Socket`` -> ``socket``. ``Libfabric`` / ``AWS Libfabric`` / ``OFI`` (aws-ofi-nccl) ->
  ``ofi-efa`` only when ``NET/OFI Selected Provider is efa`` (or the newer ``Selected provider is
  efa, fabric is ...``), ``ofi-tcp`` for the ``tcp``/``sockets`` providers; with no provider line,
  or another provider, the network's own name lower-cased. ``gIB`` -> ``gib``;
  ``GPUDirectTCPX*`` -> ``tcpx``; ``FasTrak`` / ``GPUDirectTCPXO*`` -> ``tcpxo``. Any other name is
  reported lower-cased, never forced into the nearest class.
* Several networks in one file (ranks disagree) -> the WORST one is reported (a fallback anywhere
  is a fallback) and the disagreement is named in ``evidence``.
* Single node (``nNodes 1``, or every rank on one host) with no ``via NET/`` channel -> ``none``.
  No network line and nothing else conclusive -> ``unknown``.
* GDRDMA, strongest evidence first: ``True`` when a channel line shows ``/GDRDMA`` or
  ``Connected all rings ... GDR 1``; ``False`` when ``via NET/`` channel lines exist without it
  or ``... GDR 0``; then the per-GPU topology lines ``GPU Direct RDMA Enabled/Disabled for GPU``;
  ``False`` for plain sockets; then the HCA-level capability lines (``... for HCA``); ``None``
  when the log does not show it, and always for ``none``. Channel lines examined: all of those near
  communicator init, and elsewhere those of the first 8 MiB chunk that has any (so a ``/GDRDMA``
  line that only appears after non-GDR channel lines, far from any init, is not seen: the answer
  then errs on the safe side, ``False``). Near init, a partial use of GDRDMA is named in
  ``evidence``.
* ``ranks``: the largest ``nranks`` of any communicator, or the number of distinct ranks seen in
  init lines when that is larger; ``ranks_seen`` is the number of distinct ranks of that
  communicator actually seen in this file (with no init lines: the number of distinct
  ``host:pid [device]`` that logged a network choice).

How it stays fast (``bench/log_scan.py``: a 1 GiB log at ~0.7x the speed of ``grep -c``): only
the ``NCCL INFO Using network`` line is searched exhaustively over every byte -- it is the
deciding line, so no rank's choice is missed (the old ``Using internal Network`` wording too,
until the current one shows up). The secondary lines (``NET/IB : Using``, ``Selected Provider``,
``nranks``/``nNodes``, GDR lines, ``via NET/`` counts) are searched over the first 2 MiB and within
a window of 512 KiB before and 1 MiB after every network-selection line, where NCCL prints them
during communicator init. ``via NET/`` channel lines (with and without ``/GDRDMA``) and
``NCCL version`` are also searched everywhere until first found (channel lines can come long
after init with runtime connect). Files smaller than the head region are searched exhaustively
for everything. Memory is bounded: one 8 MiB buffer, a 512 KiB look-back tail and small capped
sets.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.errors import ParseError

__all__ = [
    "TRANSPORT_CLASSES",
    "NcclLogInfo",
    "classify_nccl_log",
    "classify_nccl_log_file",
    "classify_network_name",
]

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


@dataclass(frozen=True, slots=True)
class NcclLogInfo:
    transport: str
    network_name: str | None
    gdrdma: bool | None
    nccl_version: str | None
    ranks: int | None
    link_layer: str | None
    ofi_provider: str | None
    evidence: tuple[str, ...]
    ranks_seen: int | None = None


# --------------------------------------------------------------------------------------------
# classification of a network name
# --------------------------------------------------------------------------------------------

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


def _is_ofi(low: str) -> bool:
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
    if _is_ofi(low):
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
        return min(classes, key=lambda c: (_QUALITY.get(c, _UNCLASSED_QUALITY), c))
    if low.startswith("gib"):
        return "gib"
    if "fastrak" in low or low.startswith(("gpudirecttcpxo", "tcpxo")):
        return "tcpxo"
    if low.startswith(("gpudirecttcpx", "tcpx")):
        return "tcpx"
    return low


# --------------------------------------------------------------------------------------------
# the scanner
# --------------------------------------------------------------------------------------------

CHUNK_BYTES = 8 << 20
HEAD_BYTES = 2 << 20
WINDOW_BEFORE = 512 << 10
WINDOW_AFTER = 1 << 20
_MAX_EVIDENCE_LINE = 240
_MAX_DISTINCT = 4096  # cap on distinct names/keys kept (memory stays bounded)

_ANCHOR = b"NCCL INFO Using network "
_OLD_ANCHOR = b"Using internal Network "
_VERSION = b"NCCL version "
_GDRDMA = b"/GDRDMA"
_VIA_NET = b"via NET/"
_IB_USING = b"NET/IB : Using"
_IB_NODEV = b"NET/IB : No device found"
_OFI_SELECTED = b"NET/OFI Selected"
_NRANKS = b" nranks "
_NRANKS_NODES = b" nRanks "
_GDR_LINE = b"GPU Direct RDMA "
_RING_PXN = b"use ring PXN"

_PREFIX_RE = re.compile(rb"([^\s:\[\]]+):(\d+):(\d+)\s*\[\s*(\d+)\s*\]")
_VERSION_RE = re.compile(rb"NCCL version (\S+)")
_LINK_RE = re.compile(rb"\[\d+\][^\s\[]*?:\d+/(IB|RoCE)\b")
_PROVIDER_RE = re.compile(rb"Selected [Pp]rovider is ([^\s,()]+)")
_INIT_RE = re.compile(rb"rank (\d+) nranks (\d+)\b")
_NODES_RE = re.compile(rb"rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+)")
_GDR_RE = re.compile(rb"GPU Direct RDMA (Enabled|Disabled) for (GPU|HCA)")
_RING_RE = re.compile(rb"use ring PXN \d+ GDR (\d)")
_VIA_NET_RE = re.compile(rb"via NET/(.+?)/\d+")


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace").strip()


def _clip(line: bytes | str) -> str:
    text = _text(line) if isinstance(line, bytes) else line.strip()
    if len(text) <= _MAX_EVIDENCE_LINE:
        return text
    return text[: _MAX_EVIDENCE_LINE - 3] + "..."


@dataclass(slots=True)
class _State:
    networks: dict[str, int] = field(default_factory=dict)  # name -> lines
    network_lines: dict[str, str] = field(default_factory=dict)
    modern_anchor_seen: bool = False
    anchor_keys: set[bytes] = field(default_factory=set)
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


def _line_at(buf: bytes | bytearray, pos: int, lo: int, hi: int) -> bytes:
    """The whole line around ``pos`` (without its newline), within ``buf[lo:hi]``."""
    start = buf.rfind(b"\n", lo, pos) + 1
    if start <= 0:
        start = lo
    end = buf.find(b"\n", pos, hi)
    if end < 0:
        end = hi
    return bytes(buf[start:end]).rstrip(b"\r")


def _line_end(buf: bytes | bytearray, pos: int, hi: int) -> int:
    end = buf.find(b"\n", pos, hi)
    return hi if end < 0 else end + 1


class _Scanner:
    """Feed it whole lines in large chunks; ask it for the answer at the end."""

    def __init__(self) -> None:
        self.s = _State()
        self._sec_done = 0  # absolute offset up to which secondary needles were searched
        self._win_end = HEAD_BYTES  # absolute end of the current secondary window
        self._tail: bytes | None = None
        self._tail_base = 0
        self._last_anchor: bytes = b""
        self._last_name: str = ""

    # ---- per-line handlers (lines are bytes; decoded only to keep as evidence) -------------
    def _on_anchor(self, line: bytes, needle: bytes) -> None:
        cut = line.find(needle)
        self._on_network(line[cut + len(needle) :].strip(), line, cut)

    def _on_network(self, raw_name: bytes, line: bytes | None, cut: int) -> None:
        """Count one network-selection line; ``line`` is only needed the first time or for keys."""
        s = self.s
        if not raw_name:
            return
        if raw_name == self._last_anchor:
            name = self._last_name
        else:
            name = _text(raw_name)
            self._last_anchor, self._last_name = bytes(raw_name), name
        if name not in s.networks:
            if len(s.networks) >= _MAX_DISTINCT or line is None:
                return
            s.network_lines[name] = _clip(line)
            s.networks[name] = 0
        s.networks[name] += 1
        if line is not None and len(s.anchor_keys) < _MAX_DISTINCT * 16:
            match = _PREFIX_RE.search(line, 0, max(cut, 0))
            if match:
                s.anchor_keys.add(match.group(1) + b":" + match.group(2) + b"/" + match.group(4))

    def _on_version(self, line: bytes) -> None:
        match = _VERSION_RE.search(line)
        if match and len(self.s.versions) < 64:
            self.s.versions.setdefault(_text(match.group(1)), _clip(line))

    def _on_ib_using(self, line: bytes) -> None:
        for layer in _LINK_RE.findall(line):
            self.s.link_layers.setdefault(_text(layer), _clip(line))

    def _on_provider(self, line: bytes) -> None:
        match = _PROVIDER_RE.search(line)
        if match and len(self.s.providers) < 64:
            self.s.providers.setdefault(_text(match.group(1)), _clip(line))

    def _note_rank(self, rank: int, nranks: int, buf: bytes | bytearray, pos: int) -> None:
        s = self.s
        s.init_seen = True
        if nranks > s.max_nranks:
            s.max_nranks = nranks
            s.comm_ranks = set()
            s.init_hosts = set()
        if nranks == s.max_nranks and len(s.comm_ranks) < 1 << 20:
            s.comm_ranks.add(rank)
            if s.max_nodes is None and len(s.init_hosts) < _MAX_DISTINCT:
                # hosts only matter for telling single-node logs without an nNodes line
                prefix = _PREFIX_RE.search(_line_at(buf, pos, 0, len(buf)))
                if prefix:
                    s.init_hosts.add(prefix.group(1))

    def _on_nodes(self, match: re.Match[bytes], buf: bytes | bytearray) -> None:
        rank, nranks, nodes = int(match.group(1)), int(match.group(2)), int(match.group(3))
        s = self.s
        s.max_nodes = nodes if s.max_nodes is None else max(s.max_nodes, nodes)
        self._note_rank(rank, nranks, buf, match.start())
        if nodes == 1 and s.single_node_line is None:
            s.single_node_line = _clip(_line_at(buf, match.start(), 0, len(buf)))
        if nodes > 1 and s.multi_node_line is None:
            s.multi_node_line = _clip(_line_at(buf, match.start(), 0, len(buf)))

    def _on_gdr_line(self, line: bytes) -> None:
        match = _GDR_RE.search(line)
        if not match:
            return
        s = self.s
        state, target = match.groups()
        clipped = _clip(line)
        if target == b"GPU":
            if state == b"Enabled":
                s.gdr_enabled_gpu = s.gdr_enabled_gpu or clipped
            else:
                s.gdr_disabled_gpu = s.gdr_disabled_gpu or clipped
        elif state == b"Enabled":
            s.gdr_enabled_hca = s.gdr_enabled_hca or clipped
        else:
            s.gdr_disabled_hca = s.gdr_disabled_hca or clipped

    def _on_ring(self, line: bytes) -> None:
        match = _RING_RE.search(line)
        if match:
            self.s.ring_gdr.setdefault(_text(match.group(1)), _clip(line))

    def _on_net_channel(self, line: bytes) -> None:
        s = self.s
        clipped = _clip(line)
        if s.net_channel is None:
            s.net_channel = clipped
        match = _VIA_NET_RE.search(line)
        if match and len(s.net_channel_names) < 64:
            s.net_channel_names.setdefault(_text(match.group(1)), clipped)
        if b"/GDRDMA" in line and s.gdr_channel is None:
            s.gdr_channel = clipped

    def _on_old_anchor(self, line: bytes) -> None:
        cut = line.find(_OLD_ANCHOR)
        name = line[cut + len(_OLD_ANCHOR) :].strip()
        if name and not name.lower().startswith(b"plugin"):
            self._on_anchor(line, _OLD_ANCHOR)

    # ---- search primitives ----------------------------------------------------------------
    @staticmethod
    def _each(
        buf: bytes | bytearray,
        needle: bytes,
        lo: int,
        hi: int,
        handler: Callable[[bytes], None],
    ) -> None:
        pos = buf.find(needle, lo, hi)
        while pos >= 0:
            handler(_line_at(buf, pos, lo, hi))
            pos = buf.find(needle, _line_end(buf, pos, hi), hi)

    def _secondary(self, buf: bytes | bytearray, lo: int, hi: int, base: int) -> None:
        """Search the secondary needles in ``buf[lo:hi]`` (whole lines; ``buf`` at ``base``)."""
        if hi <= lo:
            return
        each = self._each
        s = self.s
        kinds = {classify_network_name(name) for name in s.networks}
        unsure = not kinds or base + lo < HEAD_BYTES  # head, or no network line yet: search all
        each(buf, _VERSION, lo, hi, self._on_version)
        if unsure or kinds & {"ib", "roce"}:
            each(buf, _IB_USING, lo, hi, self._on_ib_using)
        if s.ib_no_device is None and (unsure or "socket" in kinds):
            pos = buf.find(_IB_NODEV, lo, hi)
            if pos >= 0:
                s.ib_no_device = _clip(_line_at(buf, pos, lo, hi))
        if unsure or any(_is_ofi(k) for k in kinds):
            each(buf, _OFI_SELECTED, lo, hi, self._on_provider)
        if buf.find(_NRANKS, lo, hi) >= 0:
            for match in _INIT_RE.finditer(buf, lo, hi):
                self._note_rank(int(match.group(1)), int(match.group(2)), buf, match.start())
        if buf.find(_NRANKS_NODES, lo, hi) >= 0:
            for match in _NODES_RE.finditer(buf, lo, hi):
                self._on_nodes(match, buf)
        if s.gdr_channel is None:
            each(buf, _GDR_LINE, lo, hi, self._on_gdr_line)
            each(buf, _RING_PXN, lo, hi, self._on_ring)
        nets = buf.count(_VIA_NET, lo, hi)
        if nets:
            s.window_net_lines += nets
            gdr = buf.count(_GDRDMA, lo, hi)
            s.window_gdr_lines += gdr
            if len(s.net_channel_names) < 8 or s.net_channel is None:
                pos = buf.find(_VIA_NET, lo, hi)
                self._on_net_channel(_line_at(buf, pos, lo, hi))
            if gdr and s.gdr_channel is None:
                pos = buf.find(_GDRDMA, lo, hi)
                self._on_net_channel(_line_at(buf, pos, lo, hi))

    def _secondary_abs(
        self, buf: bytes | bytearray, length: int, base: int, start: int, end: int
    ) -> None:
        """Secondary search of the absolute range [start, end) clipped to ``buf[:length]``."""
        start = max(start, self._sec_done, base)
        end = min(end, base + length)
        if end <= start:
            return
        lo = start - base
        if lo > 0:
            lo = buf.rfind(b"\n", 0, lo) + 1  # begin on a line start
        hi = end - base
        if hi < length:
            hi = _line_end(buf, hi, length)
        self._secondary(buf, lo, hi, base)
        self._sec_done = base + hi

    # ---- chunk entry point ----------------------------------------------------------------
    def feed(self, buf: bytes | bytearray, length: int, base: int) -> None:
        """Process ``buf[:length]`` (whole lines) that starts at absolute offset ``base``."""
        s = self.s
        if not s.nccl_seen:
            s.nccl_seen = buf.find(b"NCCL", 0, length) >= 0
        # 1. every network-selection line, everywhere (the deciding evidence)
        anchors: list[int] = []
        skip = len(_ANCHOR)
        pos = buf.find(_ANCHOR, 0, length)
        while pos >= 0:
            anchors.append(pos)
            end = _line_end(buf, pos, length)
            raw_name = bytes(buf[pos + skip : end]).strip()
            if s.init_seen and raw_name == self._last_anchor:
                self._on_network(raw_name, None, 0)  # hot path: same network as last time
            else:
                self._on_anchor(_line_at(buf, pos, 0, length), _ANCHOR)
            pos = buf.find(_ANCHOR, end, length)
        if anchors:
            s.modern_anchor_seen = True
        elif not s.modern_anchor_seen:
            # very old releases worded it "Using internal Network X": searched until the
            # current wording shows up (in practice: the first chunk of a modern log)
            pos = buf.find(_OLD_ANCHOR, 0, length)
            while pos >= 0:
                anchors.append(pos)
                self._on_old_anchor(_line_at(buf, pos, 0, length))
                pos = buf.find(_OLD_ANCHOR, _line_end(buf, pos, length), length)
        # 2. cheap "until found" probes outside the windows: channel lines may come long after
        #    init (runtime connect), so look for them everywhere up to and including the first
        #    chunk that has a "via NET/" channel line
        if s.net_channel is None:
            pos = buf.find(_VIA_NET, 0, length)
            if pos >= 0:
                self._on_net_channel(_line_at(buf, pos, 0, length))
                if s.gdr_channel is None:
                    pos = buf.find(_GDRDMA, 0, length)
                    if pos >= 0:
                        self._on_net_channel(_line_at(buf, pos, 0, length))
        if not s.versions:
            pos = buf.find(_VERSION, 0, length)
            if pos >= 0:
                self._on_version(_line_at(buf, pos, 0, length))
        # 3. secondary needles: head of the input, then windows around each network line,
        #    merged so that dense init bursts are searched in a few large ranges
        regions: list[tuple[int, int]] = []
        if self._win_end > base:
            regions.append((base, self._win_end))
        for a in anchors:
            regions.append((base + a - WINDOW_BEFORE, base + a + WINDOW_AFTER))
            self._win_end = max(self._win_end, base + a + WINDOW_AFTER)
        merged: list[list[int]] = []
        for start, end in sorted(regions):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        for start, end in merged:
            if start < base and self._tail is not None:
                self._secondary_abs(self._tail, len(self._tail), self._tail_base, start, base)
            self._secondary_abs(buf, length, base, start, end)
        # keep the last WINDOW_BEFORE bytes (from a line start) for the next chunk's look-back
        cut = max(0, length - WINDOW_BEFORE)
        if cut:
            cut = buf.rfind(b"\n", 0, cut) + 1
        self._tail = bytes(buf[cut:length])
        self._tail_base = base + cut

    # ---- the answer -----------------------------------------------------------------------
    def result(self) -> NcclLogInfo:
        s = self.s
        evidence: list[str] = []
        layers = list(s.link_layers)
        providers = list(s.providers)
        link_layer: str | None = None
        if len(layers) == 1:
            link_layer = layers[0]
        elif len(layers) > 1:
            link_layer = "mixed"
            evidence.append("link layers differ between ranks: " + ", ".join(sorted(layers)))

        classes = {name: classify_network_name(name, layers, providers) for name in s.networks}
        source = "network"
        if not classes and s.net_channel_names:
            classes = {
                name: classify_network_name(name, layers, providers) for name in s.net_channel_names
            }
            source = "channel"

        single_node = False
        single_reason = ""
        if s.net_channel is None and s.window_net_lines == 0:
            if s.max_nodes == 1:
                single_node = True
                single_reason = s.single_node_line or "nNodes 1"
            elif (
                s.max_nodes is None
                and s.init_seen
                and len(s.init_hosts) == 1
                and len(s.comm_ranks) == s.max_nranks
            ):
                single_node = True
                single_reason = (
                    f"all {s.max_nranks} ranks of the largest communicator on host "
                    f"{_text(next(iter(s.init_hosts)))}"
                )

        network_name: str | None = None
        if single_node:
            transport = "none"
            evidence.append(
                "single node, no 'via NET/' channel: only P2P/SHM used (" + single_reason + ")"
            )
            for name in s.networks:
                evidence.append(f"network initialised but unused: {s.network_lines[name]}")
                network_name = network_name or name
        elif classes:
            worst = min(
                classes,
                key=lambda n: (_QUALITY.get(classes[n], _UNCLASSED_QUALITY), classes[n], n),
            )
            transport = classes[worst]
            network_name = worst
            if source == "network":
                for name in classes:
                    evidence.append(s.network_lines[name])
            else:
                evidence.append(
                    "no 'Using network' line; network taken from channel lines: "
                    + s.net_channel_names[worst]
                )
            if len(set(classes.values())) > 1 or len(classes) > 1:
                parts = ", ".join(
                    f"{name} ({classes[name]}, {s.networks.get(name, 0)} line(s))"
                    for name in sorted(classes)
                )
                evidence.append(
                    f"ranks disagree on the network: {parts}; reporting the worst: {transport}"
                )
        else:
            transport = "unknown"
            evidence.append("no 'Using network' line and no 'via NET/' channel line")

        if transport in ("ib", "roce") and link_layer is None:
            evidence.append("IB network but no 'NET/IB : Using' device line: link layer unknown")
        elif transport in ("ib", "roce"):
            evidence.extend(s.link_layers[layer] for layer in sorted(s.link_layers))
        if network_name and _is_ofi(network_name.lower()) and not single_node:
            if providers:
                evidence.extend(s.providers[p] for p in sorted(s.providers))
            else:
                evidence.append("OFI network but no 'Selected Provider' line: provider unknown")
        if transport == "socket" and s.ib_no_device:
            evidence.append(s.ib_no_device)

        gdrdma = self._gdr(transport, evidence)

        nccl_version: str | None = None
        if s.versions:
            nccl_version = next(iter(s.versions))
            evidence.append(s.versions[nccl_version])
            if len(s.versions) > 1:
                evidence.append("several NCCL versions in one log: " + ", ".join(s.versions))

        ranks: int | None = None
        ranks_seen: int | None = None
        if s.init_seen:
            ranks_seen = len(s.comm_ranks)
            ranks = max(s.max_nranks, ranks_seen)
        elif s.anchor_keys:
            # no init lines: count the (host, pid, device) that logged a network choice
            ranks_seen = len(s.anchor_keys)
        if s.multi_node_line and transport != "none":
            evidence.append(s.multi_node_line)

        if not s.nccl_seen:
            raise ParseError(
                "no NCCL INFO lines found (run with NCCL_DEBUG=INFO to see the transport)"
            )
        return NcclLogInfo(
            transport=transport,
            network_name=network_name,
            gdrdma=gdrdma,
            nccl_version=nccl_version,
            ranks=ranks,
            link_layer=link_layer,
            ofi_provider=(
                providers[0]
                if len(providers) == 1
                else (", ".join(sorted(providers)) if providers else None)
            ),
            evidence=tuple(dict.fromkeys(e for e in evidence if e)),
            ranks_seen=ranks_seen,
        )

    def _gdr(self, transport: str, evidence: list[str]) -> bool | None:
        s = self.s
        if transport == "none":
            return None
        # what the connections did (channel lines, ring summary) outranks per-GPU topology lines
        if s.gdr_channel or "1" in s.ring_gdr:
            evidence.append(s.gdr_channel or s.ring_gdr["1"])
            if s.window_gdr_lines and s.window_net_lines > s.window_gdr_lines:
                evidence.append(
                    f"GDRDMA on {s.window_gdr_lines} of {s.window_net_lines} 'via NET/' channel "
                    "lines near communicator init: some connections do not use GPUDirect RDMA"
                )
            return True
        if s.net_channel or "0" in s.ring_gdr:
            evidence.append(s.net_channel or s.ring_gdr["0"])
            if s.net_channel:
                evidence.append("'via NET/' channel lines without /GDRDMA")
            return False
        if s.gdr_enabled_gpu:
            evidence.append(s.gdr_enabled_gpu)
            return True
        if s.gdr_disabled_gpu:
            evidence.append(s.gdr_disabled_gpu)
            return False
        if transport == "socket":
            evidence.append("socket transport: no GPUDirect RDMA")
            return False
        if s.gdr_enabled_hca:
            evidence.append(s.gdr_enabled_hca)
            return True
        if s.gdr_disabled_hca:
            evidence.append(s.gdr_disabled_hca)
            return False
        return None


def _chunks_from_lines(lines: Iterable[str | bytes]) -> Iterable[bytes]:
    batch: list[bytes] = []
    size = 0
    for line in lines:
        data = line if isinstance(line, bytes) else line.encode("utf-8", errors="replace")
        if not data.endswith(b"\n"):
            data += b"\n"
        batch.append(data)
        size += len(data)
        if size >= CHUNK_BYTES:
            yield b"".join(batch)
            batch, size = [], 0
    if batch:
        yield b"".join(batch)


def classify_nccl_log(lines: Iterable[str | bytes]) -> NcclLogInfo:
    """Classify the transport from NCCL INFO lines (any iterable of lines; streamed)."""
    scanner = _Scanner()
    base = 0
    for chunk in _chunks_from_lines(lines):
        scanner.feed(chunk, len(chunk), base)
        base += len(chunk)
    return scanner.result()


def classify_nccl_log_file(path: str | os.PathLike[str]) -> NcclLogInfo:
    """Classify the transport from a log file (read in binary, 8 MiB at a time)."""
    scanner = _Scanner()
    buf = bytearray(CHUNK_BYTES)
    view = memoryview(buf)
    carry = 0
    base = 0
    with open(Path(path), "rb", buffering=0) as handle:
        while True:
            n = handle.readinto(view[carry:])
            if not n:
                if carry:
                    scanner.feed(buf, carry, base)
                break
            filled = carry + n
            cut = buf.rfind(b"\n", 0, filled) + 1
            if cut == 0:
                if filled < len(buf):
                    carry = filled
                    continue
                cut = filled  # one line longer than the buffer: taken in pieces
            scanner.feed(buf, cut, base)
            base += cut
            carry = filled - cut
            if carry:
                buf[:carry] = buf[cut:filled]
    view.release()
    return scanner.result()
