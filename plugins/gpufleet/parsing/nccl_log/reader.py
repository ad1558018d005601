"""The entry points: classify the transport from an iterable of lines, or from a log file.

:func:`classify_nccl_log_file` is the one function of ``gpufleet.parsing`` that does I/O: it
opens the file at the path it is given and reads it in binary, 8 MiB at a time, into one reused
buffer (so a 1 GiB log is fine). :func:`classify_nccl_log` reads only the iterable handed in.
Both feed whole lines to one :class:`~.scanner.Scanner` and give the same answer for the same
text.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from gpufleet.parsing.nccl_log.answer import NcclLogInfo, decide
from gpufleet.parsing.nccl_log.scanner import CHUNK_BYTES, Scanner

__all__ = ["classify_nccl_log", "classify_nccl_log_file"]


def _chunks_from_lines(lines: Iterable[str | bytes]) -> Iterable[bytes]:
    """Whole lines, newline-terminated, joined into chunks of about CHUNK_BYTES."""
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
    scanner = Scanner()
    base = 0
    for chunk in _chunks_from_lines(lines):
        scanner.feed(chunk, len(chunk), base)
        base += len(chunk)
    return decide(scanner.finish())


def classify_nccl_log_file(path: str | os.PathLike[str]) -> NcclLogInfo:
    """Classify the transport from a log file: opens and reads ``path`` (binary, 8 MiB at a time).

    This is I/O, unlike the rest of ``gpufleet.parsing``; a line longer than the buffer is taken
    in pieces.
    """
    scanner = Scanner()
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
    return decide(scanner.finish())
