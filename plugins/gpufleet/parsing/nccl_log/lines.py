"""The NCCL INFO lines the transport is read from, and how to cut them out of a byte buffer.

Needles (searched with ``bytes.find``, far faster than a regex over every line) and the regexes
that read the few lines they find. Lines are bytes; they are decoded only to be kept as evidence,
clipped to 240 characters.
"""

from __future__ import annotations

import re

__all__ = [
    "ANCHOR",
    "GDRDMA",
    "GDR_LINE",
    "GDR_RE",
    "IB_NODEV",
    "IB_USING",
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
    "VERSION",
    "VERSION_RE",
    "VIA_NET",
    "VIA_NET_RE",
    "clip",
    "line_at",
    "line_end",
    "text",
]

MAX_EVIDENCE_LINE = 240

# needles
ANCHOR = b"NCCL INFO Using network "  # INFO(NCCL_INIT, "Using network %s", ...): the deciding line
OLD_ANCHOR = b"Using internal Network "  # very old releases
VERSION = b"NCCL version "
GDRDMA = b"/GDRDMA"
VIA_NET = b"via NET/"
IB_USING = b"NET/IB : Using"
IB_NODEV = b"NET/IB : No device found"
OFI_SELECTED = b"NET/OFI Selected"
NRANKS = b" nranks "
NRANKS_NODES = b" nRanks "
GDR_LINE = b"GPU Direct RDMA "
RING_PXN = b"use ring PXN"

# readers of the lines found
PREFIX_RE = re.compile(rb"([^\s:\[\]]+):(\d+):(\d+)\s*\[\s*(\d+)\s*\]")  # host:pid:tid [dev]
VERSION_RE = re.compile(rb"NCCL version (\S+)")
LINK_RE = re.compile(rb"\[\d+\][^\s\[]*?:\d+/(IB|RoCE)\b")
PROVIDER_RE = re.compile(rb"Selected [Pp]rovider is ([^\s,()]+)")
INIT_RE = re.compile(rb"rank (\d+) nranks (\d+)\b")
NODES_RE = re.compile(rb"rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+)")
GDR_RE = re.compile(rb"GPU Direct RDMA (Enabled|Disabled) for (GPU|HCA)")
RING_RE = re.compile(rb"use ring PXN \d+ GDR (\d)")
VIA_NET_RE = re.compile(rb"via NET/(.+?)/\d+")


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
