"""The NCCL log fixtures (tests/data/parsing) and how the parser tests read them."""

from __future__ import annotations

from pathlib import Path

from gpufleet.parsing import NcclLogInfo, classify_nccl_log, classify_nccl_log_file

DATA = Path(__file__).resolve().parents[1] / "data" / "parsing"


def both(name: str) -> NcclLogInfo:
    """The file reader and the line iterator must agree."""
    path = DATA / name
    from_file = classify_nccl_log_file(path)
    with open(path, encoding="utf-8") as handle:
        assert classify_nccl_log(handle) == from_file
    return from_file


def lines_of(name: str) -> list[str]:
    return (DATA / name).read_text(encoding="utf-8").splitlines()
