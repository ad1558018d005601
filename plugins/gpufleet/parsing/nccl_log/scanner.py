"""Where the NCCL INFO lines are searched for: fast, streaming, constant memory.

Design: docs/design/parsers.md.
"""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.parsing.nccl_log.facts import LogFacts
from gpufleet.parsing.nccl_log.lines import (
    ANCHOR,
    GDR_LINE,
    GDRDMA,
    IB_NODEV,
    IB_USING,
    IBV_CALL_FAIL,
    IBV_OPEN_FAIL,
    INFO_MARK,
    INIT_RE,
    INTRA_NODE,
    NODES_RE,
    NRANKS,
    NRANKS_NODES,
    OFI_SELECTED,
    OLD_ANCHOR,
    RING_PXN,
    SOCKET_USING,
    VERSION,
    VIA_NET,
    clip,
    line_at,
    line_end,
)
from gpufleet.parsing.nccl_log.transports import classify_network_name, is_ofi

__all__ = ["CHUNK_BYTES", "HEAD_BYTES", "WINDOW_AFTER", "WINDOW_BEFORE", "Scanner"]

CHUNK_BYTES = 8 << 20
HEAD_BYTES = 2 << 20
WINDOW_BEFORE = 512 << 10
WINDOW_AFTER = 1 << 20


def _each(
    buf: bytes | bytearray,
    needle: bytes,
    lo: int,
    hi: int,
    handler: Callable[[bytes], None],
) -> None:
    """Hand every line of ``buf[lo:hi]`` that holds ``needle`` to ``handler``."""
    pos = buf.find(needle, lo, hi)
    while pos >= 0:
        handler(line_at(buf, pos, lo, hi))
        pos = buf.find(needle, line_end(buf, pos, hi), hi)


class Scanner:
    """Feed it whole lines in large chunks; read :attr:`facts` at the end."""

    def __init__(self) -> None:
        self.facts = LogFacts()
        self._sec_done = 0  # absolute offset up to which secondary needles were searched
        self._win_end = HEAD_BYTES  # absolute end of the current secondary window
        self._tail: bytes | None = None
        self._tail_base = 0

    def feed(self, buf: bytes | bytearray, length: int, base: int) -> None:
        """Process ``buf[:length]`` (whole lines) that starts at absolute offset ``base``."""
        facts = self.facts
        if not facts.nccl_seen:
            facts.nccl_seen = buf.find(b"NCCL", 0, length) >= 0
        if not facts.info_seen:
            facts.info_seen = buf.find(INFO_MARK, 0, length) >= 0
        anchors = self._network_lines(buf, length)
        self._until_found(buf, length)
        self._windows(buf, length, base, anchors)
        self._keep_tail(buf, length, base)

    # ---- 1. every network-selection line, everywhere (the deciding evidence) ---------------
    def _network_lines(self, buf: bytes | bytearray, length: int) -> list[int]:
        """Record every ``Using network`` line of the chunk; return their offsets."""
        facts = self.facts
        anchors: list[int] = []
        skip = len(ANCHOR)
        pos = buf.find(ANCHOR, 0, length)
        while pos >= 0:
            anchors.append(pos)
            end = line_end(buf, pos, length)
            raw_name = bytes(buf[pos + skip : end]).strip()
            if facts.init_seen and raw_name == facts.last_anchor:
                facts.network(raw_name, None, 0)  # hot path: same network as last time
            else:
                facts.anchor_line(line_at(buf, pos, 0, length), ANCHOR)
            pos = buf.find(ANCHOR, end, length)
        if anchors:
            facts.modern_anchor_seen = True
        elif not facts.modern_anchor_seen:
            # older releases: searched until the current wording shows up (in practice: the
            # first chunk of a current log)
            for needle, handler in (
                (OLD_ANCHOR, facts.old_anchor_line),
                (IB_USING, facts.ib_using),
                (SOCKET_USING, facts.socket_using),
                (OFI_SELECTED, facts.provider),
                (IBV_OPEN_FAIL, facts.libibverbs_missing),
            ):
                pos = buf.find(needle, 0, length)
                while pos >= 0:
                    anchors.append(pos)
                    handler(line_at(buf, pos, 0, length))
                    pos = buf.find(needle, line_end(buf, pos, length), length)
            anchors.sort()
        return anchors

    # ---- 2. cheap "until found" probes outside the windows ---------------------------------
    def _until_found(self, buf: bytes | bytearray, length: int) -> None:
        """Channel lines may come long after init (runtime connect): look for them everywhere
        up to and including the first chunk that has a ``via NET/`` line; same for the version."""
        facts = self.facts
        if facts.net_channel is None:
            pos = buf.find(VIA_NET, 0, length)
            if pos >= 0:
                facts.net_channel_line(line_at(buf, pos, 0, length))
                if facts.gdr_channel is None:
                    pos = buf.find(GDRDMA, 0, length)
                    if pos >= 0:
                        facts.net_channel_line(line_at(buf, pos, 0, length))
        if not facts.versions:
            pos = buf.find(VERSION, 0, length)
            if pos >= 0:
                facts.version(line_at(buf, pos, 0, length))

    # ---- 3. secondary needles: the head, then windows around each network line -------------
    def _windows(self, buf: bytes | bytearray, length: int, base: int, anchors: list[int]) -> None:
        """Search the head of the input and the windows around ``anchors``, merged so that
        dense init bursts are searched in a few large ranges."""
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
            hi = line_end(buf, hi, length)
        self._secondary(buf, lo, hi, base)
        self._sec_done = base + hi

    def _secondary(self, buf: bytes | bytearray, lo: int, hi: int, base: int) -> None:  # noqa: C901  one branch per secondary needle, inlined in the scan loop
        """Search the secondary needles in ``buf[lo:hi]`` (whole lines; ``buf`` at ``base``).

        Device and provider lines are only looked for when the networks seen so far can use
        them (or none is known yet, or in the head)."""
        if hi <= lo:
            return
        facts = self.facts
        kinds = {classify_network_name(name) for name in facts.networks}
        unsure = not kinds or base + lo < HEAD_BYTES  # head, or no network line yet: search all
        _each(buf, VERSION, lo, hi, facts.version)
        if unsure or kinds & {"ib", "roce"}:
            _each(buf, IB_USING, lo, hi, facts.ib_using)
        if not facts.networks:  # NCCL < 2.7: what each process initialised decides
            _each(buf, SOCKET_USING, lo, hi, facts.socket_using)
        if facts.ib_no_device is None and (unsure or "socket" in kinds):
            pos = buf.find(IB_NODEV, lo, hi)
            if pos >= 0:
                facts.ib_no_device = clip(line_at(buf, pos, lo, hi))
        if unsure or any(is_ofi(k) for k in kinds):
            _each(buf, OFI_SELECTED, lo, hi, facts.provider)
        if buf.find(NRANKS, lo, hi) >= 0:
            for match in INIT_RE.finditer(buf, lo, hi):
                facts.rank(int(match.group(1)), int(match.group(2)), buf, match.start())
        if buf.find(NRANKS_NODES, lo, hi) >= 0:
            for match in NODES_RE.finditer(buf, lo, hi):
                facts.nodes(match, buf)
        _each(buf, IBV_CALL_FAIL, lo, hi, facts.verbs_failure)
        if facts.intra_node_line is None:
            for needle in INTRA_NODE:
                pos = buf.find(needle, lo, hi)
                if pos >= 0:
                    facts.intra_node(line_at(buf, pos, lo, hi))
                    break
        if facts.gdr_channel is None:
            _each(buf, GDR_LINE, lo, hi, facts.gdr_line)
            _each(buf, RING_PXN, lo, hi, facts.ring)
        nets = buf.count(VIA_NET, lo, hi)
        if nets:
            facts.window_net_lines += nets
            gdr = buf.count(GDRDMA, lo, hi)
            facts.window_gdr_lines += gdr
            if len(facts.net_channel_names) < 8 or facts.net_channel is None:
                pos = buf.find(VIA_NET, lo, hi)
                facts.net_channel_line(line_at(buf, pos, lo, hi))
            if gdr and facts.gdr_channel is None:
                pos = buf.find(GDRDMA, lo, hi)
                facts.net_channel_line(line_at(buf, pos, lo, hi))

    def finish(self) -> LogFacts:
        """The facts, once the last chunk was fed: a failed verbs call ends a run that could not
        connect, so the log's last bytes (the look-back kept below) are searched for one too."""
        if self._tail:
            _each(self._tail, IBV_CALL_FAIL, 0, len(self._tail), self.facts.verbs_failure)
        return self.facts

    # ---- 4. look-back for the next chunk ---------------------------------------------------
    def _keep_tail(self, buf: bytes | bytearray, length: int, base: int) -> None:
        """Keep the last WINDOW_BEFORE bytes (from a line start) for the next chunk's look-back."""
        cut = max(0, length - WINDOW_BEFORE)
        if cut:
            cut = buf.rfind(b"\n", 0, cut) + 1
        self._tail = bytes(buf[cut:length])
        self._tail_base = base + cut
