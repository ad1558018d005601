"""The NCCL INFO lines the transport is read from, and how to cut them out of a byte buffer.

Needles (searched with ``bytes.find``, far faster than a regex over every line) and the regexes
that read the few lines they find. Lines are bytes; they are decoded only to be kept as evidence,
clipped to 240 characters.

Lines as people paste them carry more than NCCL printed: a launcher's prefix
(``[1,0]<stdout>:``, ``[155] ``, ``0: ``, ``[default0]:``), a log viewer's timestamp (sometimes
glued to NCCL's ``host:pid:tid`` prefix), a second copy of the line after `` | `` (a two-column
console copy), or what a collector appends (Docker's ``\n","stream":...``, a colour reset).
The needles are found anywhere in a line; a name read after one stops at the first of those
separators (:func:`value_after`), and :data:`PREFIX_RE` skips a glued timestamp.
"""

from __future__ import annotations

import re

__all__ = [
    "ANCHOR",
    "GDRDMA",
    "GDR_LINE",
    "GDR_RE",
    "IB_NODEV",
    "IBV_CALL_FAIL",
    "IBV_CALL_RE",
    "IBV_OPEN_FAIL",
    "IB_USING",
    "INFO_MARK",
    "INTRA_NODE",
    "INIT_RE",
    "LINK_RE",
    "NODES_RE",
    "NRANKS",
    "NRANKS_NODES",
    "OFI_SELECTED",
    "OLD_ANCHOR",
    "PREFIX_RE",
    "PROVIDER_RE",
    "RING_PXN",
    "RING_RE",
    "SOCKET_USING",
    "VERSION",
    "VERSION_RE",
    "VIA_NET",
    "VIA_NET_RE",
    "clip",
    "line_at",
    "line_end",
    "text",
    "value_after",
]

MAX_EVIDENCE_LINE = 240

# needles
ANCHOR = b"NCCL INFO Using network "  # INFO(NCCL_INIT, "Using network %s", ...): the deciding line
OLD_ANCHOR = b"Using internal Network "  # very old releases
VERSION = b"NCCL version "
GDRDMA = b"/GDRDMA"
VIA_NET = b"via NET/"
IB_USING = b"NET/IB : Using"
SOCKET_USING = b"NET/Socket : Using"  # NCCL < 2.7: also how 2.4 words its bootstrap
IB_NODEV = b"NET/IB : No device found"
# NCCL's ibvwrap could not dlopen libibverbs: its IB transport cannot start in that process (WARN
# up to 2.9, INFO later; wording unchanged since 2.3)
IBV_OPEN_FAIL = b"Failed to open libibverbs.so"
# a verbs call failed (``WARN("Call to ibv_modify_qp failed with error %s", ...)``, later
# ``... failed with %d %s, on dev ...``): the IB transport was connecting and could not
IBV_CALL_FAIL = b"NCCL WARN Call to ibv_"
INFO_MARK = b"NCCL INFO "
OFI_SELECTED = b"NET/OFI Selected"
NRANKS = b" nranks "
NRANKS_NODES = b" nRanks "
GDR_LINE = b"GPU Direct RDMA "
RING_PXN = b"use ring PXN"
# connections made within a node (``src/transport/p2p.cc``, ``shm.cc``; ``generic.cc`` after the
# rings: ``INFO(NCCL_INIT, "Connected all rings ...")``). Every channel line is logged at INIT, the
# network's ``via NET/`` ones too (``src/transport/net.cc``: ``NCCL_INIT|NCCL_NET``)
INTRA_NODE = (b"Connected all rings", b" via P2P/", b" via SHM/")

# readers of the lines found
PREFIX_RE = re.compile(  # host:pid:tid [dev], after a log viewer's timestamp glued to it
    rb"(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)?"
    rb"([^\s:\[\]|]+):(\d+):(\d+)\s*\[\s*(\d+)\s*\]"
)
VERSION_RE = re.compile(rb'NCCL version ([^\s"\\|]+)')
LINK_RE = re.compile(rb"\[\d+\][^\s\[]*?:\d+/(IB|RoCE)\b")
PROVIDER_RE = re.compile(rb'Selected [Pp]rovider is ([^\s,()"\\|]+)')
INIT_RE = re.compile(rb"rank (\d+) nranks (\d+)\b")
NODES_RE = re.compile(
    rb"rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+)(?: localRank (\d+))?"
)
GDR_RE = re.compile(rb"GPU Direct RDMA (Enabled|Disabled) for (GPU|HCA)")
RING_RE = re.compile(rb"use ring PXN \d+ GDR (\d)")
VIA_NET_RE = re.compile(rb"via NET/(.+?)/\d+")
IBV_CALL_RE = re.compile(rb'Call to (ibv_\w+) failed(?: with)?(?: error)?(?: \d+)? *([^,|\t\\"]*)')


# what ends a value read after a needle: a console copy's column, a tab, a colour code, a JSON
# log record's escaped newline or closing quote
_VALUE_ENDS = (b" |", b"\t", b"\x1b", b"\\n", b'"', b"\r")


def value_after(line: bytes, start: int) -> bytes:
    """The value printed from ``line[start]`` to its end, without what a viewer appended."""
    end = len(line)
    for stop in _VALUE_ENDS:
        cut = line.find(stop, start, end)
        if cut >= 0:
            end = cut
    return line[start:end].strip()


def text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace").strip()


def clip(line: bytes | str) -> str:
    """A line as evidence: decoded, stripped, at most 240 characters."""
    decoded = text(line) if isinstance(line, bytes) else line.strip()
    if len(decoded) <= MAX_EVIDENCE_LINE:
        return decoded
    return decoded[: MAX_EVIDENCE_LINE - 3] + "..."


def line_at(buf: bytes | bytearray, pos: int, lo: int, hi: int) -> bytes:
    """The whole line around ``pos`` (without its newline), within ``buf[lo:hi]``."""
    start = buf.rfind(b"\n", lo, pos) + 1
    if start <= 0:
        start = lo
    end = buf.find(b"\n", pos, hi)
    if end < 0:
        end = hi
    return bytes(buf[start:end]).rstrip(b"\r")


def line_end(buf: bytes | bytearray, pos: int, hi: int) -> int:
    """The offset just past the newline that ends the line holding ``pos`` (or ``hi``)."""
    end = buf.find(b"\n", pos, hi)
    return hi if end < 0 else end + 1
