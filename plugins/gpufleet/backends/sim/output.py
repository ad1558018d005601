"""What the simulated fleet prints, in the real formats, so the real parsers run on it.

- nccl-tests text output as current nccl-tests prints it (``size count type redop root time
  algbw busbw #wrong`` for out-of-place and in-place, the footer).
- NCCL_DEBUG=INFO lines per rank: version, the bootstrap socket line (which is not the data
  path), ``Using network <name>``, NET/IB or NET/OFI device lines, channel lines with /GDRDMA,
  ``Init COMPLETE`` and the ``Init timings`` of each rank (NCCL 2.23+).
- fio ``--output-format=json``.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

NCCL_VERSION = "2.23.4+cuda12.6"
GPU_NAMES = {"H200": "NVIDIA H200", "H100": "NVIDIA H100 80GB HBM3", "B200": "NVIDIA B200"}
BUS_IDS = ("0x18", "0x2a", "0x3a", "0x5d", "0x9a", "0xab", "0xba", "0xdb")


@dataclass(frozen=True)
class LinkModel:
    """How a pair of nodes performs: peak bus bandwidth and small-message latency."""

    busbw_gbps: float
    latency_us: float


def busbw_factor(collective: str, ranks: int) -> float:
    if collective == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if collective in ("all_gather", "reduce_scatter", "alltoall"):
        return (ranks - 1) / ranks
    return 1.0


def nccl_rows(
    *,
    collective: str,
    ranks: int,
    link: LinkModel,
    min_bytes: int = 8,
    max_bytes: int = 8 * 2**30,
    row_jitter: float = 0.0,
    rng: random.Random,
) -> list[tuple[int, list[tuple[float, float, float]]]]:
    """The figures of each message size, doubling from ``min_bytes`` to ``max_bytes``: ``(size,
    [(time us, algbw, busbw) out-of-place, (...) in-place])``. Each cell's time is the link's
    (latency + size / bandwidth) times a uniform draw within +/- ``row_jitter`` (the sim passes
    its model's documented ``noise.row_jitter``)."""
    factor = busbw_factor(collective, ranks)
    peak_algbw = link.busbw_gbps / factor  # GB/s
    rows = []
    size = min_bytes
    while size <= max_bytes:
        cells = []
        for _ in range(2):  # out-of-place, in-place
            jitter = rng.uniform(1 - row_jitter, 1 + row_jitter)
            time_us = (link.latency_us + size / (peak_algbw * 1e3)) * jitter
            algbw = size / time_us / 1e3
            cells.append((time_us, algbw, algbw * factor))
        rows.append((size, cells))
        size *= 2
    return rows


def nccl_tests_text(
    *,
    collective: str,
    hosts: list[str],
    gpus_per_node: int,
    gpu_model: str,
    link: LinkModel,
    min_bytes: int = 8,
    max_bytes: int = 8 * 2**30,
    row_jitter: float = 0.0,
    seed: int = 0,
) -> str:
    """The stdout of ``<collective>_perf -b min -e max -f 2 -g 1`` across ``hosts``, with the
    figures of ``nccl_rows``."""
    rng = random.Random(seed)
    ranks = len(hosts) * gpus_per_node
    gpu = GPU_NAMES.get(gpu_model, f"NVIDIA {gpu_model}")
    out = [
        f"# nThread 1 nGpus 1 minBytes {min_bytes} maxBytes {max_bytes} step: 2(factor) "
        "warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    pid = 1000 + rng.randrange(9000)
    for r in range(ranks):
        host = hosts[r // gpus_per_node]
        dev = r % gpus_per_node
        out.append(
            f"#  Rank {r:2d} Group  0 Pid {pid + r:6d} on {host[:30]:>30} device {dev:2d} "
            f"[{BUS_IDS[dev % len(BUS_IDS)]}] {gpu}"
        )
    out += [
        "#",
        "#                                                              out-of-place"
        "                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw"
        " #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
        "            (us)  (GB/s)  (GB/s)       ",
    ]
    total_busbw = 0.0
    rows = nccl_rows(
        collective=collective,
        ranks=ranks,
        link=link,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        row_jitter=row_jitter,
        rng=rng,
    )
    for size, cells in rows:
        count = size // 4
        line = f"{size:12d}  {count:12d}     float     sum      -1"
        for time_us, algbw, busbw in cells:
            line += (
                f"  {time_us:7.2f}  {algbw:6.2f}  {busbw:6.2f}  {0:5d}"
                if time_us < 1e6
                else (f"  {time_us:7.0f}  {algbw:6.2f}  {busbw:6.2f}  {0:5d}")
            )
        out.append(line)
        total_busbw += cells[0][2]
    out += [
        "# Out of bounds values : 0 OK",
        f"# Avg bus bandwidth    : {total_busbw / max(len(rows), 1):.4f} ",
        "#",
    ]
    return "\n".join(out) + "\n"


def nccl_info_log(  # noqa: PLR0913  keyword-only facts of one NCCL log, as the sim's model gives them
    *,
    host: str,
    first_rank: int,
    gpus_per_node: int,
    nranks: int,
    network: str | None,
    link_layer: str | None = None,
    ofi_provider: str | None = None,
    gdrdma: bool = True,
    failure: str | None = None,
    seed: int = 0,
    slow_init: str | None = None,
) -> str:
    """NCCL_DEBUG=INFO (INIT,NET) lines for the ranks on one host.

    ``network`` is the network NCCL picked (``gIB``, ``IB``, ``Libfabric``, ``Socket``).
    ``failure`` writes the warning NCCL prints when a pinned NCCL_NET is unavailable.
    ``slow_init`` (``kernels`` or ``bootstrap``) makes that phase of each rank's
    ``Init timings`` line as slow as the faults it stands for (:func:`init_timings_line`).
    """
    rng = random.Random(seed)
    ip = f"10.{rng.randrange(1, 250)}.{rng.randrange(250)}.{rng.randrange(1, 250)}"
    pid0 = 100 + rng.randrange(5000)
    lines: list[str] = []
    comm = f"0x{rng.getrandbits(48):x}"
    for local in range(gpus_per_node):
        rank = first_rank + local
        tag = f"{host}:{pid0 + local}:{pid0 + local + 40} [{local}]"
        lines.append(f"{tag} NCCL INFO Bootstrap: Using eth0:{ip}<0>")
        if local == 0:
            lines.append(f"{tag} NCCL INFO cudaDriverVersion 12060")
            lines.append(f"NCCL version {NCCL_VERSION}")
        lines.append(f"{tag} NCCL INFO NET/Plugin: Plugin load returned 0 : .")
        if failure:
            lines.append(f"{tag} NCCL WARN {failure}")
            lines.append(f"{tag} NCCL INFO init.cc:1680 -> 2")
            continue
        if network == "Libfabric":
            provider = ofi_provider or "efa"
            lines.append(f"{tag} NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.13.2")
            lines.append(f"{tag} NCCL INFO NET/OFI Selected Provider is {provider} (found 32 nics)")
        elif network in ("IB", "gIB"):
            layer = link_layer or "RoCE"
            devices = " ".join(f"[{i}]mlx5_{i}:1/{layer}" for i in range(8))
            lines.append(f"{tag} NCCL INFO NET/IB : Using {devices} ; OOB eth0:{ip}<0>")
        elif network == "Socket":
            lines.append(f"{tag} NCCL INFO NET/IB : No device found.")
            lines.append(f"{tag} NCCL INFO NET/Socket : Using [0]eth0:{ip}<0>")
        lines.append(f"{tag} NCCL INFO Using network {network}")
        lines.append(
            f"{tag} NCCL INFO ncclCommInitRank comm {comm} rank {rank} nranks {nranks} "
            f"cudaDev {local} nvmlDev {local} busId {BUS_IDS[local % 8][2:]}000 - Init START"
        )
        if network != "Socket" and gdrdma:
            lines.append(f"{tag} NCCL INFO GPU Direct RDMA Enabled for HCA 0 '{'mlx5_0'}'")
        peer = (rank + gpus_per_node) % nranks
        suffix = "/GDRDMA" if (gdrdma and network != "Socket") else ""
        for ch in range(2):
            lines.append(
                f"{tag} NCCL INFO Channel {ch:02d}/0 : {rank}[{local}] -> {peer}[{local}] "
                f"[send] via NET/{network}/{local}{suffix}"
            )
        lines.append(
            f"{tag} NCCL INFO ncclCommInitRank comm {comm} rank {rank} nranks {nranks} "
            f"cudaDev {local} nvmlDev {local} busId {BUS_IDS[local % 8][2:]}000 "
            "commId 0x5e1f - Init COMPLETE"
        )
        lines.append(f"{tag} NCCL INFO {init_timings_line(rank, nranks, rng, slow_init)}")
    return "\n".join(lines) + "\n"


# One rank's NCCL 2.23+ communicator init, in seconds per phase: the medians of a public
# 2-node x 8 x H100 all_reduce_perf log (NVIDIA/nccl-tests#319: total 1.99-2.01 s, mostly alloc;
# healthy public runs total 1.0-2.2 s at 2 x 8 GPUs).
INIT_PHASES_S = {
    "kernels": 0.33,
    "alloc": 1.23,
    "bootstrap": 0.11,
    "allgathers": 0.03,
    "topo": 0.07,
    "graphs": 0.01,
    "connections": 0.20,
}
# What the ``nccl-slow-init`` faults make of one phase: a build that JIT-compiles its kernels
# (52.33-52.94 s on DGX B200, NVIDIA/nccl#1646), or ranks started far apart by the launcher
# (beyond the 30 s the bootstrap alarm allows; an EFA run's 8.1 s is the largest public one).
SLOW_INIT_S = {"kernels": 52.45, "bootstrap": 41.0}


def init_timings_line(rank: int, nranks: int, rng: random.Random, slow: str | None) -> str:
    """``Init timings - ncclCommInitRank: ...`` as NCCL 2.23+ prints it (``src/init.cc``)."""
    phases = {p: max(0.0, s + rng.uniform(-0.02, 0.02)) for p, s in INIT_PHASES_S.items()}
    if slow is not None:
        phases[slow] = SLOW_INIT_S[slow] + rng.uniform(-0.5, 0.5)
    phases = {p: round(s, 2) for p, s in phases.items()}
    total = sum(phases.values())
    figures = ", ".join(f"{p} {s:.2f}" for p, s in phases.items())
    return (
        f"Init timings - ncclCommInitRank: rank {rank} nranks {nranks} total {total:.2f} "
        f"({figures}, rest 0.00)"
    )


def fio_json(*, host: str, write_mib_s: float, read_mib_s: float) -> str:
    """``fio --output-format=json`` for a write job then a stonewalled read job, reporting
    exactly the figures given (the sim draws its noise before: ``nights.lustre_clients``)."""

    def side(mib_s: float) -> dict:
        bw_bytes = int(mib_s * 2**20)
        return {
            "io_bytes": bw_bytes * 30,
            "io_kbytes": bw_bytes * 30 // 1024,
            "bw_bytes": bw_bytes,
            "bw": bw_bytes // 1024,
            "iops": bw_bytes / 2**20,
            "runtime": 30000,
            "total_ios": int(bw_bytes * 30 / 2**20),
        }

    empty = side(0.0)
    jobs = [
        {
            "jobname": "seq-write",
            "groupid": 0,
            "error": 0,
            "read": empty,
            "write": side(write_mib_s),
        },
        {
            "jobname": "seq-read",
            "groupid": 1,
            "error": 0,
            "read": side(read_mib_s),
            "write": empty,
        },
    ]
    doc = {
        "fio version": "fio-3.36",
        "timestamp": 1764460800,
        "time": "Sat Nov 29 02:00:00 2026",
        "global options": {"directory": "/mnt/lustre", "bs": "1M", "direct": "1"},
        "jobs": jobs,
        "disk_util": [],
    }
    return f"{host}: Laying out IO files (1 file / 16384MiB)\n" + json.dumps(doc, indent=2) + "\n"
